// The table behind TfSdca>ExampleStateTable: float32 state rows of a fixed
// width by int64 key, TensorFlow-free (kernels/tests/example_state_table_main.cc
// times it alone).
#ifndef TF_SDCA_KERNELS_KERNELS_EXAMPLE_STATE_TABLE_H_
#define TF_SDCA_KERNELS_KERNELS_EXAMPLE_STATE_TABLE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <vector>

namespace tf_sdca {

// Marks an empty bucket. ExampleKeys never makes it (nor the key after it,
// which the DenseHashTable this replaced reserved for deleted buckets, and
// which checkpoints therefore never hold).
constexpr int64_t kEmptyKey = std::numeric_limits<int64_t>::min();

// Open addressing, linear probing, at most half full; each bucket is the key
// (8 bytes) then `width` floats, `stride` bytes in all. Not thread-safe: the
// op's resource locks around it.
class ExampleStateTable {
 public:
  explicit ExampleStateTable(int64_t width)
      : width_(width), stride_(8 + 4 * width) {}

  int64_t width() const { return width_; }
  int64_t size() const { return size_; }
  int64_t bytes() const { return static_cast<int64_t>(capacity_ * stride_); }

  // Home bucket of `key`. Keys are fingerprints, but SdcaModel's table
  // shards take them by key mod shards: multiply before taking high bits.
  uint64_t Home(int64_t key) const {
    return (static_cast<uint64_t>(key) * 0x9E3779B97F4A7C15ULL) >> shift_;
  }
  char* Bucket(uint64_t b) { return buckets_.get() + b * stride_; }
  const char* Bucket(uint64_t b) const {
    return buckets_.get() + b * stride_;
  }
  static int64_t KeyAt(const char* bucket) {
    int64_t key;
    std::memcpy(&key, bucket, 8);
    return key;
  }
  void Prefetch(uint64_t b) const {
    if (capacity_ > 0) __builtin_prefetch(Bucket(b));
  }

  // The bucket holding `key`, or -1.
  int64_t Find(int64_t key, uint64_t home) const {
    if (capacity_ == 0) return -1;
    for (uint64_t b = home;; b = (b + 1) & (capacity_ - 1)) {
      const int64_t at = KeyAt(Bucket(b));
      if (at == key) return static_cast<int64_t>(b);
      if (at == kEmptyKey) return -1;
    }
  }

  // Copies row `b` (or zeros for -1) into `out` (float by float: a memcpy
  // of the run-time width was a library call, 8.6 against 7.0 ns a key).
  void Read(int64_t b, float* out) const {
    if (b < 0) {
      std::fill(out, out + width_, 0.0f);
    } else {
      const char* row = Bucket(b) + 8;
      for (int64_t k = 0; k < width_; ++k) std::memcpy(out + k, row + 4 * k, 4);
    }
  }

  // Makes room for `more` new keys without passing half full; true when
  // the table grew (every bucket number given out before is stale).
  bool Reserve(int64_t more) {
    uint64_t wanted = std::max<uint64_t>(capacity_, 1024);
    while (wanted < 2 * static_cast<uint64_t>(size_ + more)) wanted <<= 1;
    if (wanted == capacity_) return false;
    Rehash(wanted);
    return true;
  }

  // Stores `row` under `key` (in bucket `hint` when it holds the key: the
  // slot ExampleStateFind gave, still valid unless the table grew).
  void Write(int64_t key, int64_t hint, const float* row) {
    if (hint >= 0 && static_cast<uint64_t>(hint) < capacity_ &&
        KeyAt(Bucket(hint)) == key) {
      std::memcpy(Bucket(hint) + 8, row, 4 * width_);
      return;
    }
    Reserve(1);
    uint64_t b = Home(key);
    while (true) {
      const int64_t at = KeyAt(Bucket(b));
      if (at == key) break;
      if (at == kEmptyKey) {
        std::memcpy(Bucket(b), &key, 8);
        ++size_;
        break;
      }
      b = (b + 1) & (capacity_ - 1);
    }
    std::memcpy(Bucket(b) + 8, row, 4 * width_);
  }

  // The rows of keys[0..n) into values (n x width; zeros for keys not
  // stored) and their buckets into slots (-1 for those).
  void FindAll(const int64_t* keys, int64_t n, float* values,
               int64_t* slots) const {
    // Probes with the buckets kAhead keys on already on their way from
    // memory (on 500k examples, 25 MB: 21-32 ns a key with 16 or 32 ahead,
    // 8-ahead and 64-ahead no better; noisy, shared machine).
    constexpr int64_t kAhead = 32;
    for (int64_t i = 0; i < n && i < kAhead; ++i) Prefetch(Home(keys[i]));
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) Prefetch(Home(keys[i + kAhead]));
      slots[i] = Find(keys[i], Home(keys[i]));
      Read(slots[i], values + i * width_);
    }
  }

  // Stores rows values (n x width) under keys[0..n); `slots` (or null) are
  // what FindAll gave for these keys.
  void WriteAll(const int64_t* keys, const int64_t* slots, int64_t n,
                const float* values) {
    // Room for every key FindAll did not find (all of them without slots),
    // made before writing: the table grows at most here, never between two
    // writes (a growth here leaves the slots stale; Write then finds their
    // keys again).
    int64_t missing = 0;
    for (int64_t i = 0; i < n; ++i) missing += slots == nullptr || slots[i] < 0;
    const bool stale = Reserve(missing);
    // The bucket each write will touch first, kAhead keys ahead: its slot,
    // or for a new key (every key of a first epoch) or after a growth its
    // home, which was not prefetched before. A first epoch's writes still
    // cost ~5x later epochs' (kernels/tests/example_state_table_main.cc
    // time): most of it is the growth, Rehash below.
    auto first_bucket = [&](int64_t i) {
      return slots != nullptr && !stale && slots[i] >= 0
                 ? static_cast<uint64_t>(slots[i])
                 : Home(keys[i]);
    };
    constexpr int64_t kAhead = 32;
    for (int64_t i = 0; i < n && i < kAhead; ++i) Prefetch(first_bucket(i));
    for (int64_t i = 0; i < n; ++i) {
      if (i + kAhead < n) Prefetch(first_bucket(i + kAhead));
      Write(keys[i], slots == nullptr || stale ? -1 : slots[i],
            values + i * width_);
    }
  }

  void Clear() {
    buckets_.reset();
    capacity_ = 0;
    size_ = 0;
  }

  // Calls fn(key, row) for each stored key, in bucket order.
  template <typename Fn>
  void ForEach(Fn fn) const {
    for (uint64_t b = 0; b < capacity_; ++b) {
      const int64_t key = KeyAt(Bucket(b));
      if (key != kEmptyKey) fn(key, Bucket(b) + 8);
    }
  }

 private:
  void Rehash(uint64_t capacity) {
    // Not zero-filled: the loop below writes every bucket's key first (a
    // value-initialised vector cost one more pass over the new table).
    std::unique_ptr<char[]> old(new char[capacity * stride_]);
    old.swap(buckets_);
    const uint64_t old_capacity = capacity_;
    capacity_ = capacity;
    shift_ = 64 - __builtin_ctzll(capacity);
    for (uint64_t b = 0; b < capacity_; ++b) {
      std::memcpy(Bucket(b), &kEmptyKey, 8);
    }
    // The new homes of the keys kAhead buckets on are prefetched: the old
    // buckets are read in order, the new ones are scattered.
    constexpr uint64_t kAhead = 16;
    for (uint64_t b = 0; b < old_capacity; ++b) {
      if (b + kAhead < old_capacity) {
        const int64_t ahead = KeyAt(old.get() + (b + kAhead) * stride_);
        if (ahead != kEmptyKey) Prefetch(Home(ahead));
      }
      const char* from = old.get() + b * stride_;
      const int64_t key = KeyAt(from);
      if (key == kEmptyKey) continue;
      uint64_t to = Home(key);
      while (KeyAt(Bucket(to)) != kEmptyKey) to = (to + 1) & (capacity_ - 1);
      std::memcpy(Bucket(to), from, stride_);
    }
  }

  const int64_t width_;
  const uint64_t stride_;
  uint64_t capacity_ = 0;  // 0 or a power of two
  int shift_ = 63;  // any valid shift while empty: nothing is probed
  int64_t size_ = 0;
  std::unique_ptr<char[]> buckets_;  // capacity_ buckets
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_EXAMPLE_STATE_TABLE_H_

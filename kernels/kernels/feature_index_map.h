// Maps the int64 feature ids of a sparse group to their position in the
// group's `sparse_indices` input.
//
// When the ids are small compared with their count (hashed features: ids in
// [0, 2^k)) a direct table is used, one array read per lookup; otherwise an
// open-addressing hash table. Both are built once per op call.
#ifndef TF_SDCA_KERNELS_KERNELS_FEATURE_INDEX_MAP_H_
#define TF_SDCA_KERNELS_KERNELS_FEATURE_INDEX_MAP_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tf_sdca {

class FeatureIndexMap {
 public:
  // Builds the map; returns false with *error naming the first negative or
  // repeated id (as "[k] = id ..."). Positions must fit in int32 (the
  // caller limits a batch to 2^32 slots in all; one group to 2^31).
  bool Build(const int64_t* ids, int64_t n, std::string* error);

  // Hints the cache about a coming Find(id) (direct tables only: hashed
  // lookups probe a data-dependent chain).
  void Prefetch(int64_t id) const {
    if (direct_ && id >= 0 && id < static_cast<int64_t>(table_.size())) {
      __builtin_prefetch(table_.data() + id);
    }
  }

  // Position of `id`, or -1.
  int64_t Find(int64_t id) const {
    if (direct_) {
      if (id < 0 || id >= static_cast<int64_t>(table_.size())) return -1;
      return table_[id];
    }
    if (mask_ == 0) return -1;
    uint64_t h = Hash(id) & mask_;
    while (true) {
      const int64_t pos = table_[h];
      if (pos < 0) return -1;
      if (keys_[h] == id) return pos;
      h = (h + 1) & mask_;
    }
  }

 private:
  static uint64_t Hash(int64_t id) {
    uint64_t x = static_cast<uint64_t>(id);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
  }

  bool direct_ = false;
  uint64_t mask_ = 0;
  std::vector<int32_t> table_;  // position, -1 = empty
  std::vector<int64_t> keys_;
};

inline bool FeatureIndexMap::Build(const int64_t* ids, int64_t n,
                                   std::string* error) {
  if (n >= (int64_t{1} << 31)) {
    *error = " has " + std::to_string(n) + " ids; at most 2^31 - 1 supported";
    return false;
  }
  int64_t max_id = -1;
  for (int64_t k = 0; k < n; ++k) {
    if (ids[k] < 0) {
      *error = "[" + std::to_string(k) + "] = " + std::to_string(ids[k]) +
               " must be >= 0";
      return false;
    }
    if (ids[k] > max_id) max_id = ids[k];
  }
  auto duplicate = [&](int64_t k, int64_t first) {
    *error = "[" + std::to_string(k) + "] = " + std::to_string(ids[k]) +
             " repeats [" + std::to_string(first) + "]";
    return false;
  };
  // A direct table costs max_id + 1 slots; take it while that stays within a
  // small multiple of the count (or a few MB).
  direct_ = max_id < std::max<int64_t>(8 * n, int64_t{1} << 22);
  if (direct_) {
    table_.assign(max_id + 1, -1);
    for (int64_t k = 0; k < n; ++k) {
      if (table_[ids[k]] >= 0) return duplicate(k, table_[ids[k]]);
      table_[ids[k]] = static_cast<int32_t>(k);
    }
    return true;
  }
  uint64_t capacity = 16;
  while (capacity < 2 * static_cast<uint64_t>(n)) capacity <<= 1;
  mask_ = capacity - 1;
  table_.assign(capacity, -1);
  keys_.assign(capacity, 0);
  for (int64_t k = 0; k < n; ++k) {
    uint64_t h = Hash(ids[k]) & mask_;
    while (table_[h] >= 0) {
      if (keys_[h] == ids[k]) return duplicate(k, table_[h]);
      h = (h + 1) & mask_;
    }
    table_[h] = static_cast<int32_t>(k);
    keys_[h] = ids[k];
  }
  return true;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_FEATURE_INDEX_MAP_H_

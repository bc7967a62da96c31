// Maps the int64 feature ids of a sparse group to their position in the
// group's `sparse_indices` input.
//
// Ascending ids (as SdcaModel's TfSdca>DistinctIds gives them) take a rank
// bitmap: a bit per id in [0, max id], each 64-bit word beside the count of
// ids below it, so that a position is that count plus the set bits below
// the id in its word (16 bytes per 64 ids: 256 KiB for a 2^20-row table,
// which stays in the core's L2 cache, where a direct table of int32
// positions takes 4 MiB). Otherwise, when the ids are small compared with
// their count (hashed features: ids in [0, 2^k)) a direct table is used,
// one array read per lookup, else an open-addressing hash table. All are
// built once per op call and give the same positions. (setup.py builds with
// -mpopcnt on x86: one instruction per lookup rather than a libgcc call.)
#ifndef TF_SDCA_KERNELS_KERNELS_FEATURE_INDEX_MAP_H_
#define TF_SDCA_KERNELS_KERNELS_FEATURE_INDEX_MAP_H_

#include <algorithm>
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
    if (ranked_) {
      ranked().Prefetch(id);
      return;
    }
    if (direct_ && id >= 0 && id < static_cast<int64_t>(table_.size())) {
      __builtin_prefetch(table_.data() + id);
    }
  }

  // Position of `id`, or -1.
  int64_t Find(int64_t id) const {
    if (ranked_) return ranked().Find(id);
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

  // One word of the rank bitmap: ids 64 * i .. 64 * i + 63, and how many
  // ids lie below them.
  struct Word {
    uint64_t bits;
    int64_t rank;
  };

  // The rank bitmap as two plain values (words null when the map is not
  // ranked), for loops that keep them in registers: Find through the map
  // reloads its vector after every store the loop makes.
  struct Ranked {
    const Word* words = nullptr;
    uint64_t num_words = 0;
    void Prefetch(int64_t id) const {
      const uint64_t word = static_cast<uint64_t>(id) >> 6;
      if (word < num_words) __builtin_prefetch(words + word);
    }
    // Position of `id`, or -1 (Find, on a ranked map).
    int64_t Find(int64_t id) const {
      const uint64_t word = static_cast<uint64_t>(id) >> 6;
      if (word >= num_words) return -1;  // (a negative id too)
      const Word& w = words[word];
      const uint64_t bit = uint64_t{1} << (id & 63);
      if ((w.bits & bit) == 0) return -1;
      return w.rank + __builtin_popcountll(w.bits & (bit - 1));
    }
  };
  Ranked ranked() const {
    Ranked view;
    if (ranked_) {
      view.words = words_.data();
      view.num_words = words_.size();
    }
    return view;
  }

 private:
  static uint64_t Hash(int64_t id) {
    uint64_t x = static_cast<uint64_t>(id);
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return x;
  }

  bool ranked_ = false;
  std::vector<Word> words_;
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
  // Strictly ascending and >= 0 (a negative id is then the first): the
  // rank bitmap, while it takes at most 32 bytes per id or 4 MiB.
  bool ascending = n == 0 || ids[0] >= 0;
  for (int64_t k = 1; ascending && k < n; ++k) {
    ascending = ids[k] > ids[k - 1];
  }
  if (ascending) {
    const int64_t words = n == 0 ? 0 : ids[n - 1] / 64 + 1;
    if (words <= std::max<int64_t>(2 * n, int64_t{1} << 18)) {
      ranked_ = true;
      words_.assign(words, Word{0, 0});
      for (int64_t k = 0; k < n; ++k) {
        words_[ids[k] >> 6].bits |= uint64_t{1} << (ids[k] & 63);
      }
      int64_t below = 0;
      for (Word& w : words_) {
        w.rank = below;
        below += __builtin_popcountll(w.bits);
      }
      return true;
    }
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

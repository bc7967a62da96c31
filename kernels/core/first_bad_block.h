// FirstBadBlock: where to look for the first bad entry of a range whose
// entries are tested branch-free, a block at a time (packing's checks of
// ids and values; HoldRows' of a batch's feature ids).
#ifndef TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_
#define TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_

#include <cstdint>

namespace tf_sdca {

// The start of the first block of kBlock entries in [lo, hi) where
// bad(k) holds for some k (or of the last, partial block): the blocks are
// tested branch-free (the loops vectorise; a test and branch per entry
// took ~0.1 ms of packing 88k text entries), so the caller looks for the
// first bad entry, with its message, from there only.
template <class Bad>
int64_t FirstBadBlock(int64_t lo, int64_t hi, Bad bad) {
  constexpr int64_t kBlock = 1024;
  for (; lo + kBlock <= hi; lo += kBlock) {
    uint32_t any = 0;
    for (int64_t k = lo; k < lo + kBlock; ++k) {
      any |= static_cast<uint32_t>(bad(k));
    }
    if (any != 0) break;
  }
  return lo;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_

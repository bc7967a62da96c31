// FirstBadBlock: where to look for the first bad entry of a range whose
// entries are tested branch-free, a block at a time (packing's checks of
// ids and values; HoldRows' of a batch's feature ids); FirstNonFinite, the
// same for doubles (the epoch ops' check of the weights).
#ifndef TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_
#define TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

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

// The first k in [0, n) where v[k] is not finite (NaN or +-inf), or n, for
// a float or double array. A value is not finite when its exponent bits are
// all set, and its exponent field plus one reaches the sign bit only then:
// the blocks are tested with integer and, add and or, which SSE2 vectorises
// (a 64-bit compare it would not, nor FirstBadBlock's bool per entry). The
// epoch ops run it over every weight after every epoch: a test and branch
// per weight took ~1 ns, 0.5 ms of a 16-epoch fit over 2^15 weights.
template <class Real>
int64_t FirstNonFinite(const Real* v, int64_t n) {
  static_assert(sizeof(Real) == 4 || sizeof(Real) == 8, "float or double");
  using Bits = std::conditional_t<sizeof(Real) == 8, uint64_t, uint32_t>;
  constexpr int kMantissa = sizeof(Real) == 8 ? 52 : 23;
  constexpr int kSign = 8 * sizeof(Real) - 1;
  constexpr Bits kExponent = ((Bits{1} << (kSign - kMantissa)) - 1)
                             << kMantissa;
  constexpr int64_t kBlock = 1024;
  int64_t lo = 0;
  for (; lo + kBlock <= n; lo += kBlock) {
    Bits any = 0;
    for (int64_t k = lo; k < lo + kBlock; ++k) {
      Bits bits;
      std::memcpy(&bits, v + k, sizeof(bits));
      any |= (bits & kExponent) + (Bits{1} << kMantissa);
    }
    if ((any >> kSign) != 0) break;
  }
  for (; lo < n; ++lo) {
    if (!std::isfinite(v[lo])) return lo;
  }
  return n;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_FIRST_BAD_BLOCK_H_

// Standalone check of FirstNonFinite (first_bad_block.h), the check of the
// weights after every epoch and of float inputs: for doubles and floats,
// over lengths around its blocks of 1024, a NaN, +inf or -inf at every kind
// of position (first, last, a block's edges, in the partial last block) is
// found at its first index; the largest finite values, denormals, zeros of
// both signs and negatives are not flagged. tests/test_first_bad_block.py
// runs it at -O2 (the vectorised loop) and -O0. Prints "OK", or the first
// wrong answer.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "kernels/core/first_bad_block.h"
#include "kernels/core/random.h"

namespace {

template <class Real>
bool Check(const char* type) {
  using Limits = std::numeric_limits<Real>;
  const Real finite[] = {Real{0},        -Real{0},       Real{1},
                         -Real{1},       Limits::max(),  -Limits::max(),
                         Limits::min(),  Limits::denorm_min(),
                         -Limits::denorm_min(), Limits::max() / 3,
                         Limits::lowest()};
  const Real bad[] = {Limits::quiet_NaN(), -Limits::quiet_NaN(),
                      Limits::infinity(), -Limits::infinity()};
  tf_sdca::Rng rng(11);
  for (int64_t n : {0, 1, 2, 1023, 1024, 1025, 2047, 2048, 2049, 5000}) {
    std::vector<Real> v(n);
    for (int64_t k = 0; k < n; ++k) {
      v[k] = finite[rng.Below(sizeof(finite) / sizeof(finite[0]))];
    }
    if (tf_sdca::FirstNonFinite(v.data(), n) != n) {
      std::printf("%s, n = %lld: a finite vector flagged\n", type,
                  static_cast<long long>(n));
      return false;
    }
    std::vector<int64_t> places = {0, n - 1, 1023, 1024, 2047, 2048, n / 2};
    for (int draw = 0; draw < 20; ++draw) {
      places.push_back(n > 0 ? static_cast<int64_t>(rng.Below(n)) : 0);
    }
    for (int64_t at : places) {
      if (at < 0 || at >= n) continue;
      for (Real b : bad) {
        std::vector<Real> w = v;
        w[at] = b;
        // A second bad entry later must not move the answer.
        if (at + 1500 < n) w[at + 1500] = Limits::infinity();
        const int64_t found = tf_sdca::FirstNonFinite(w.data(), n);
        if (found != at) {
          std::printf("%s, n = %lld, %g at %lld: found at %lld\n", type,
                      static_cast<long long>(n), static_cast<double>(b),
                      static_cast<long long>(at),
                      static_cast<long long>(found));
          return false;
        }
      }
    }
  }
  return true;
}

}  // namespace

int main() {
  if (!Check<double>("double") || !Check<float>("float")) return 1;
  std::printf("OK\n");
  return 0;
}

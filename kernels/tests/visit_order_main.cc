// Standalone check of the adaptive order's draws (visit_order.h): the guide
// table picks, draw for draw, the rows a binary search over the cumulative
// scores picks, for score vectors of every shape (zeros, one spike, scores
// spanning 600 orders of magnitude, ties, single rows, sums that overflow),
// under any compiler flags (tests/test_visit_order.py runs it unsanitised
// and under ASan + UBSan). Prints "OK", or the first difference.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "kernels/core/random.h"
#include "kernels/core/visit_order.h"

namespace {

// The draws as visit_order.h made them before the guide table.
std::vector<int64_t> BinarySearchDraws(const std::vector<double>& scores,
                                       tf_sdca::Rng rng) {
  const int64_t n = static_cast<int64_t>(scores.size());
  double total = 0.0;
  for (double s : scores) total += s;
  const double uniform = total > 0.0 ? total / n : 1.0;
  std::vector<double> cumulative(n);
  double running = 0.0;
  for (int64_t k = 0; k < n; ++k) {
    running += 0.5 * scores[k] + 0.5 * uniform;
    cumulative[k] = running;
  }
  std::vector<int64_t> out(n);
  for (int64_t k = 0; k < n; ++k) {
    const double u = rng.Uniform() * running;
    const int64_t pick =
        std::upper_bound(cumulative.begin(), cumulative.end(), u) -
        cumulative.begin();
    out[k] = std::min(pick, n - 1);
  }
  return out;
}

bool Same(const char* name, const std::vector<double>& scores,
          uint64_t seed) {
  const int64_t n = static_cast<int64_t>(scores.size());
  std::vector<int64_t> got(n);
  tf_sdca::Rng rng(seed);
  const std::vector<int64_t> expected = BinarySearchDraws(scores, rng);
  tf_sdca::FillVisitOrder(tf_sdca::VisitOrder::kAdaptive, 0, n,
                          scores.data(), &rng,
                          [](int64_t row) { return row; }, got.data());
  for (int64_t k = 0; k < n; ++k) {
    if (got[k] != expected[k]) {
      std::printf("%s (n %lld, seed %llu): draw %lld picked %lld, the "
                  "binary search %lld\n", name, static_cast<long long>(n),
                  static_cast<unsigned long long>(seed),
                  static_cast<long long>(k), static_cast<long long>(got[k]),
                  static_cast<long long>(expected[k]));
      return false;
    }
  }
  return true;
}

}  // namespace

int main() {
  tf_sdca::Rng make(7);
  bool ok = true;
  for (int64_t n : {1, 2, 3, 5, 17, 100, 1000, 6366, 100000}) {
    for (uint64_t seed = 0; seed < 4 && ok; ++seed) {
      std::vector<double> zeros(n, 0.0), spike(n, 0.0), wide(n), ties(n),
          sparse(n, 0.0), huge(n), tiny(n);
      spike[make.Below(n)] = 1e6;
      for (int64_t i = 0; i < n; ++i) {
        wide[i] = std::ldexp(make.Uniform(), static_cast<int>(
                                                 make.Below(2000)) - 1000);
        ties[i] = static_cast<double>(make.Below(3));
        if (make.Below(10) == 0) sparse[i] = make.Uniform();
        huge[i] = std::numeric_limits<double>::max() * make.Uniform();
        tiny[i] = std::numeric_limits<double>::denorm_min() *
                  static_cast<double>(make.Below(4));
      }
      ok = Same("zeros", zeros, seed) && Same("one spike", spike, seed) &&
           Same("600 orders of magnitude", wide, seed) &&
           Same("ties", ties, seed) && Same("mostly zeros", sparse, seed) &&
           Same("a sum that overflows", huge, seed) &&
           Same("subnormal scores", tiny, seed);
    }
  }
  if (!ok) return 1;
  std::printf("OK\n");
  return 0;
}

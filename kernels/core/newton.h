// A safeguarded Newton method for a 1-D increasing function.
//
// Losses without a closed-form dual step reduce the coordinate maximisation
// to a root of an increasing function h on a known bracket [lo, hi]. Plain
// Newton with a fixed number of steps (TensorFlow's choice) can stop short or
// leave the bracket when the starting point is far from the root: on a
// convex h such as s + q e^s - c started right of the root, each step moves
// by only ~1 while the exponential dominates h, however far the root. Here,
// as in Numerical Recipes' rtsafe, a Newton step is replaced by bisection
// when it would leave the current bracket or when it is not at least half
// the step before the last one (slow progress), so the bracket at least
// halves every two iterations and the loop ends on a tolerance for any
// bracket of moderate width, the root on the bracket's edge included.
#ifndef TF_SDCA_KERNELS_CORE_NEWTON_H_
#define TF_SDCA_KERNELS_CORE_NEWTON_H_

#include <algorithm>
#include <cmath>
#include <limits>

namespace tf_sdca {

// `fn(x, &h, &dh)` evaluates h and h' (> 0) at x. Requires lo <= hi and
// h(lo) <= 0 <= h(hi); `x` is the first guess (the midpoint when outside
// [lo, hi]). Returns a point of [lo, hi] within about 1e-15 (1 + |root|) of
// the root. Converges within 2 * log2((hi - lo) / 1e-15) iterations; the
// callers' brackets are a few units wide (about 100 iterations at worst,
// 3-6 in practice).
template <typename Fn>
double SafeguardedNewton(const Fn& fn, double lo, double hi, double x) {
  constexpr int kMaxIterations = 200;
  constexpr double kRelTol = 1e-15;
  if (!(x >= lo && x <= hi)) x = 0.5 * (lo + hi);
  double step_before_last = std::numeric_limits<double>::infinity();
  double last_step = step_before_last;
  for (int it = 0; it < kMaxIterations; ++it) {
    double h, dh;
    fn(x, &h, &dh);
    if (h == 0.0) return x;
    if (h > 0.0) {
      hi = x;
    } else {
      lo = x;
    }
    const double tol = kRelTol * (1.0 + std::fabs(x));
    const double step = h / dh;
    const double newton = x - step;
    // Converged: accept the Newton point (its error is of order step^2),
    // kept inside the bracket, where it may have rounded past an edge.
    if (std::fabs(step) <= tol) return std::clamp(newton, lo, hi);
    const bool inside = newton > lo && newton < hi;
    const bool slow = std::fabs(step) > 0.5 * std::fabs(step_before_last);
    step_before_last = last_step;
    if (inside && !slow) {
      last_step = step;
      x = newton;
    } else {
      last_step = 0.5 * (hi - lo);
      x = lo + last_step;
    }
    if (hi - lo <= tol) break;
  }
  return x;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_NEWTON_H_

// A safeguarded Newton method for a 1-D increasing function.
//
// Losses without a closed-form dual step (logistic, Poisson) reduce the
// coordinate maximisation to a root of an increasing function h on a known
// bracket [lo, hi]. Plain Newton with a fixed number of steps (TensorFlow's
// choice) can stop short or leave the bracket when the starting point is far
// from the root; here every Newton step that would leave the current bracket
// is replaced by bisection, the bracket shrinks on every step, and the loop
// stops on a tolerance, so each coordinate step really maximises its 1-D
// dual.
#ifndef TF_SDCA_KERNELS_CORE_NEWTON_H_
#define TF_SDCA_KERNELS_CORE_NEWTON_H_

#include <cmath>

namespace tf_sdca {

// `fn(x, &h, &dh)` evaluates h and h' (> 0). Requires h(lo) <= 0 <= h(hi).
template <typename Fn>
double SafeguardedNewton(const Fn& fn, double lo, double hi, double x) {
  constexpr int kMaxIterations = 100;
  constexpr double kRelTol = 1e-14;
  if (!(x > lo && x < hi)) x = 0.5 * (lo + hi);
  for (int it = 0; it < kMaxIterations; ++it) {
    double h, dh;
    fn(x, &h, &dh);
    if (h == 0.0) return x;
    const double newton = x - h / dh;
    // Converged: accept before safeguarding (at convergence the Newton point
    // may round onto the bracket's edge, which must not trigger bisection).
    const double tol = kRelTol * (1.0 + std::fabs(x));
    if (std::fabs(newton - x) <= tol) return newton;
    if (h > 0.0) {
      hi = x;
    } else {
      lo = x;
    }
    x = (newton > lo && newton < hi) ? newton : 0.5 * (lo + hi);
    if (hi - lo <= tol) break;
  }
  return x;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_NEWTON_H_

// Logistic loss phi(z) = log(1 + exp(-y z)), y in {-1, +1}.
//
// With b = y * a in (0, 1) the conjugate is phi*(-a) = b log b +
// (1 - b) log(1 - b), and the coordinate step solves
//   g(b) = log(b / (1 - b)) + y wx + q (b - b0) = 0,   b0 = y * alpha.
// g is increasing but log(b / (1 - b)) makes plain Newton in b leave (0, 1).
// The change of variable b = (1 + tanh x) / 2 = sigmoid(2x) turns it into
//   h(x) = 2x + y wx + q (sigmoid(2x) - b0),
//   h'(x) = 2 + 2q sigmoid(2x) (1 - sigmoid(2x)) >= 2,
// which is solved by safeguarded Newton (SolveInX below) on the bracket that b in (0, 1)
// implies: 2x in (-y wx - q (1 - b0), -y wx + q b0).
#ifndef TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_
#define TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"

namespace tf_sdca {

class LogisticLossUpdater final : public BinaryDualLossUpdater {
 public:
  const char* Name() const final { return "logistic_loss"; }


  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    const double b0 = std::clamp(dual * label, 0.0, 1.0);
    const double ywx = label * wx;
    double lo = 0.5 * (-ywx - q * (1.0 - b0));
    double hi = 0.5 * (-ywx + q * b0);
    double b;
    if (hi - lo <= 0.0) {
      b = Sigmoid(2.0 * lo);  // q == 0: the root is -y wx / 2 exactly.
    } else {
      b = SolveInX(ywx, q, b0, lo, hi);
    }
    // Keep b strictly inside (0, 1), as the dual domain requires, also
    // after the caller rounds the dual to float32 for the state tensor: the
    // bounds are the float32 values next to 0 and 1.
    b = std::clamp(b, static_cast<double>(std::numeric_limits<float>::min()),
                   1.0 - static_cast<double>(
                             std::numeric_limits<float>::epsilon()) / 2);
    return b * label;
  }

  double PrimalLoss(double wx, double label) const final {
    const double m = -label * wx;  // log(1 + exp(m)), computed stably
    return m > 0 ? m + std::log1p(std::exp(-m)) : std::log1p(std::exp(m));
  }

  double DualLoss(double dual, double label) const final {
    const double b = std::clamp(dual * label, 0.0, 1.0);
    const double one_minus_b = 1.0 - b;
    return (b > 0 ? b * std::log(b) : 0.0) +
           (one_minus_b > 0 ? one_minus_b * std::log(one_minus_b) : 0.0);
  }

  double PrimalLossDerivative(double wx, double label) const final {
    // -y * sigmoid(-y wx)
    return -label / (1.0 + std::exp(label * wx));
  }

  double DualStrongConvexity() const final { return 4.0; }

 private:
  static double Sigmoid(double z) { return 1.0 / (1.0 + std::exp(-z)); }

  // Safeguarded Newton on h(x) = 2x + y wx + q (sigmoid(2x) - b0), h' >= 2,
  // over the bracket [lo, hi]; returns b = sigmoid(2x) at the root. This is
  // the hot path of logistic SDCA, so it is frugal with exp and log:
  //  - it starts at x0 = logit(b0) / 2, where sigmoid(2 x0) = b0 is known,
  //    so the first step needs no exp (after a few epochs b0 is close to
  //    the answer and one or two more steps finish);
  //  - it stops when the Newton step is below 1e-9 (1 + |x|): the error of
  //    the point after that step is of order q * step^2 (quadratic
  //    convergence), far below float64 resolution of b for the q of real
  //    problems, and sigmoid at that point is extrapolated to first order
  //    instead of paying one more exp.
  static double SolveInX(double ywx, double q, double b0, double lo,
                         double hi) {
    double x, sig;
    if (b0 > 0.0 && b0 < 1.0) {
      x = 0.5 * std::log(b0 / (1.0 - b0));
      sig = b0;
      if (!(x > lo && x < hi)) {
        x = std::clamp(x, lo, hi);
        sig = Sigmoid(2.0 * x);
      }
    } else {
      // From a bound of the dual domain (e.g. the zero initial dual): the
      // root of the condition with sigmoid frozen at b0.
      x = std::clamp(-0.5 * ywx, lo, hi);
      sig = Sigmoid(2.0 * x);
    }
    // Bisection replaces a Newton step that leaves the bracket or is not
    // at least half the step before the last (as newton.h): the bracket,
    // q / 2 wide at first, then at least halves every two iterations, so
    // 300 iterations cover any q below ~1e60.
    constexpr int kMaxIterations = 300;
    double step_before_last = std::numeric_limits<double>::infinity();
    double last_step = step_before_last;
    for (int it = 0; it < kMaxIterations; ++it) {
      const double h = 2.0 * x + ywx + q * (sig - b0);
      const double slope = sig * (1.0 - sig);
      const double dh = 2.0 + 2.0 * q * slope;
      if (h == 0.0) return sig;
      if (h > 0.0) {
        hi = x;
      } else {
        lo = x;
      }
      const double step = h / dh;
      if (std::fabs(step) <= 1e-9 * (1.0 + std::fabs(x))) {
        return sig - 2.0 * slope * step;
      }
      const double next = x - step;
      const bool slow = std::fabs(step) > 0.5 * std::fabs(step_before_last);
      step_before_last = last_step;
      if (next > lo && next < hi && !slow) {
        last_step = step;
        x = next;
      } else {
        last_step = 0.5 * (hi - lo);
        x = lo + last_step;
      }
      sig = Sigmoid(2.0 * x);
      if (hi - lo <= 1e-15 * (1.0 + std::fabs(x))) break;
    }
    return sig;
  }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_

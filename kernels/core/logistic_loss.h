// Logistic loss phi(z) = log(1 + exp(-y z)), y in {-1, +1}.
//
// With b = y * a in (0, 1) the conjugate is phi*(-a) = b log b +
// (1 - b) log(1 - b), and the coordinate step solves
//   g(b) = log(b / (1 - b)) + y wx + q (b - b0) = 0,   b0 = y * alpha.
// g is increasing but log(b / (1 - b)) makes plain Newton in b leave (0, 1).
// The change of variable b = (1 + tanh x) / 2 = sigmoid(2x) turns it into
//   h(x) = 2x + y wx + q (sigmoid(2x) - b0),
//   h'(x) = 2 + 2q sigmoid(2x) (1 - sigmoid(2x)) >= 2,
// which is solved by safeguarded Newton on the bracket that b in (0, 1)
// implies: 2x in (-y wx - q (1 - b0), -y wx + q b0).
#ifndef TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_
#define TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_

#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"
#include "kernels/core/newton.h"

namespace tf_sdca {

class LogisticLossUpdater final : public BinaryDualLossUpdater {
 public:
  const char* Name() const final { return "logistic_loss"; }


  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    const double b0 = std::clamp(dual * label, 0.0, 1.0);
    const double ywx = label * wx;
    const double lo = 0.5 * (-ywx - q * (1.0 - b0));
    const double hi = 0.5 * (-ywx + q * b0);
    double b;
    if (hi - lo <= 0.0) {
      b = Sigmoid(2.0 * lo);  // q == 0: the root is -y wx / 2 exactly.
    } else {
      // Start from the root of the linearised condition: logit(b) has slope
      // >= 4, so b0 - (y wx + logit(b0)) / (q + 4) is a step towards the
      // root in b that stays well inside (0, 1) after clamping.
      const double logit0 =
          (b0 > 0.0 && b0 < 1.0) ? std::log(b0 / (1.0 - b0)) : 0.0;
      const double guess =
          std::clamp(b0 - (ywx + logit0) / (q + 4.0), 0.01, 0.99);
      // h(x) = 2x + y wx + q (sigmoid(2x) - b0): sigmoid(2x) equals
      // (1 + tanh x) / 2 and costs one exp instead of a tanh.
      double sig = guess;
      const double x = SafeguardedNewton(
          [&](double t, double* h, double* dh) {
            sig = Sigmoid(2.0 * t);
            *h = 2.0 * t + ywx + q * (sig - b0);
            *dh = 2.0 + 2.0 * q * sig * (1.0 - sig);
          },
          lo, hi, 0.5 * std::log(guess / (1.0 - guess)));
      b = Sigmoid(2.0 * x);
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
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_LOGISTIC_LOSS_H_

// Smoothed hinge loss with smoothing gamma > 0, y in {-1, +1}, z' = y z:
//   phi = 0                      if z' >= 1
//         1 - z' - gamma / 2     if z' <= 1 - gamma
//         (1 - z')^2 / (2 gamma) otherwise.
// With b = y a in [0, 1], phi*(-a) = -b + gamma b^2 / 2, and f is a concave
// quadratic in b on an interval:
//   b = clip((1 - y wx + q b0) / (gamma + q), 0, 1).
#ifndef TF_SDCA_KERNELS_CORE_SMOOTH_HINGE_LOSS_H_
#define TF_SDCA_KERNELS_CORE_SMOOTH_HINGE_LOSS_H_

#include <algorithm>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"

namespace tf_sdca {

class SmoothHingeLossUpdater final : public BinaryDualLossUpdater {
 public:
  explicit SmoothHingeLossUpdater(double gamma) : gamma_(gamma) {}

  const char* Name() const final { return "smooth_hinge_loss"; }


  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    const double b0 = std::clamp(dual * label, 0.0, 1.0);
    const double b =
        std::clamp((1.0 - label * wx + q * b0) / (gamma_ + q), 0.0, 1.0);
    return b * label;
  }

  double PrimalLoss(double wx, double label) const final {
    const double z = label * wx;
    if (z >= 1.0) return 0.0;
    if (z <= 1.0 - gamma_) return 1.0 - z - 0.5 * gamma_;
    return (1.0 - z) * (1.0 - z) / (2.0 * gamma_);
  }

  double DualLoss(double dual, double label) const final {
    const double b = std::clamp(dual * label, 0.0, 1.0);
    return -b + 0.5 * gamma_ * b * b;
  }

  double PrimalLossDerivative(double wx, double label) const final {
    const double z = label * wx;
    if (z >= 1.0) return 0.0;
    if (z <= 1.0 - gamma_) return -label;
    return -label * (1.0 - z) / gamma_;
  }

  double DualStrongConvexity() const final { return gamma_; }

  bool DualBoxGradient(double label, double dual, double wx, double* gradient,
                       int* bound) const final {
    const double b = dual * label;
    *gradient = label * wx - 1.0 + gamma_ * std::clamp(b, 0.0, 1.0);
    *bound = b <= 0.0 ? -1 : (b >= 1.0 ? 1 : 0);
    return true;
  }

 private:
  const double gamma_;
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_SMOOTH_HINGE_LOSS_H_

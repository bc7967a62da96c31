// Hinge loss phi(z) = max(0, 1 - y z), y in {-1, +1}.
//
// With b = y a in [0, 1], phi*(-a) = -b and f is a concave quadratic in b
// on an interval: b = clip(b0 + (1 - y wx) / q, 0, 1). With q == 0 (an
// example without features) f is linear in b and an endpoint wins.
#ifndef TF_SDCA_KERNELS_CORE_HINGE_LOSS_H_
#define TF_SDCA_KERNELS_CORE_HINGE_LOSS_H_

#include <algorithm>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"

namespace tf_sdca {

class HingeLossUpdater final : public BinaryDualLossUpdater {
 public:
  const char* Name() const final { return "hinge_loss"; }


  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    const double b0 = std::clamp(dual * label, 0.0, 1.0);
    const double slope = 1.0 - label * wx;
    double b;
    if (q > 0.0) {
      b = std::clamp(b0 + slope / q, 0.0, 1.0);
    } else {
      b = slope > 0 ? 1.0 : (slope < 0 ? 0.0 : b0);
    }
    return b * label;
  }

  double PrimalLoss(double wx, double label) const final {
    return std::max(0.0, 1.0 - label * wx);
  }

  double DualLoss(double dual, double label) const final {
    return -std::clamp(dual * label, 0.0, 1.0);
  }

  double PrimalLossDerivative(double wx, double label) const final {
    return label * wx < 1.0 ? -label : 0.0;
  }

  double DualStrongConvexity() const final { return 0.0; }

  bool DualBoxGradient(double label, double dual, double wx, double* gradient,
                       int* bound) const final {
    const double b = dual * label;
    *gradient = label * wx - 1.0;
    *bound = b <= 0.0 ? -1 : (b >= 1.0 ? 1 : 0);
    return true;
  }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_HINGE_LOSS_H_

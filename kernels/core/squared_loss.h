// Squared loss phi(z) = (z - y)^2 / 2.
//
// phi*(-a) = a^2 / 2 - a y, so f(a) is a concave quadratic and
//   a = alpha + (y - wx - alpha) / (1 + q).
#ifndef TF_SDCA_KERNELS_CORE_SQUARED_LOSS_H_
#define TF_SDCA_KERNELS_CORE_SQUARED_LOSS_H_

#include <cmath>

#include "kernels/core/loss.h"

namespace tf_sdca {

class SquaredLossUpdater final : public DualLossUpdater {
 public:
  const char* Name() const final { return "squared_loss"; }

  bool ConvertLabel(double raw, double* label, std::string* error) const final {
    if (!std::isfinite(raw)) {
      *error = "must be finite";
      return false;
    }
    *label = raw;
    return true;
  }

  bool DualInDomain(double dual, double label) const final { return true; }

  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    return dual + (label - wx - dual) / (1.0 + q);
  }

  double PrimalLoss(double wx, double label) const final {
    const double r = wx - label;
    return 0.5 * r * r;
  }

  double DualLoss(double dual, double label) const final {
    return 0.5 * dual * dual - dual * label;
  }

  double PrimalLossDerivative(double wx, double label) const final {
    return wx - label;
  }

  double DualStrongConvexity() const final { return 1.0; }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_SQUARED_LOSS_H_

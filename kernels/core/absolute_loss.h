// Absolute deviation phi(z) = |z - y|.
//
// phi*(-a) = -a y for a in [-1, 1], so f is a concave quadratic in a on an
// interval: a = clip(alpha + (y - wx) / q, -1, 1); with q == 0 it is linear
// and an endpoint wins.
#ifndef TF_SDCA_KERNELS_CORE_ABSOLUTE_LOSS_H_
#define TF_SDCA_KERNELS_CORE_ABSOLUTE_LOSS_H_

#include <algorithm>
#include <cmath>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"

namespace tf_sdca {

class AbsoluteLossUpdater final : public DualLossUpdater {
 public:
  const char* Name() const final { return "absolute_loss"; }

  bool ConvertLabel(double raw, double* label, std::string* error) const final {
    if (!std::isfinite(raw)) {
      *error = "must be finite";
      return false;
    }
    *label = raw;
    return true;
  }

  bool DualInDomain(double dual, double label) const final {
    return std::fabs(dual) <= 1.0 + kDualDomainSlack;
  }

  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    const double slope = label - wx;
    if (q > 0.0) return std::clamp(dual + slope / q, -1.0, 1.0);
    return slope > 0 ? 1.0 : (slope < 0 ? -1.0 : dual);
  }

  double PrimalLoss(double wx, double label) const final {
    return std::fabs(wx - label);
  }

  double DualLoss(double dual, double label) const final {
    return -std::clamp(dual, -1.0, 1.0) * label;
  }

  double PrimalLossDerivative(double wx, double label) const final {
    return wx > label ? 1.0 : (wx < label ? -1.0 : 0.0);
  }

  double DualStrongConvexity() const final { return 0.0; }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_ABSOLUTE_LOSS_H_

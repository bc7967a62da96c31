// Label handling shared by the losses of binary classification.
#ifndef TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_
#define TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_

#include <string>

#include "kernels/core/loss.h"

namespace tf_sdca {

// {0, 1} -> {-1, +1}; anything else is an error (like TensorFlow's SDCA).
inline bool ConvertBinaryLabel(double raw, double* label, std::string* error) {
  if (raw == 0.0 || raw == 1.0) {
    *label = 2.0 * raw - 1.0;
    return true;
  }
  *error = "must be 0 or 1";
  return false;
}

// Slack for duals read back from float32 state.
constexpr double kDualDomainSlack = 1e-6;

// Losses of binary classification: labels {0, 1} -> y in {-1, +1}, duals
// with b = y * dual in [0, 1].
class BinaryDualLossUpdater : public DualLossUpdater {
 public:
  bool ConvertLabel(double raw, double* label,
                    std::string* error) const final {
    return ConvertBinaryLabel(raw, label, error);
  }

  bool DualInDomain(double dual, double label) const final {
    const double b = dual * label;
    return b >= -kDualDomainSlack && b <= 1.0 + kDualDomainSlack;
  }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_

// Label handling shared by the losses of binary classification.
#ifndef TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_
#define TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_

#include <string>

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

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_BINARY_LABEL_H_

#include "kernels/core/multiclass_loss.h"

#include <cmath>
#include <sstream>

#include "kernels/core/multiclass_hinge_loss.h"
#include "kernels/core/softmax_loss.h"

namespace tf_sdca {

bool MulticlassLoss::ConvertLabel(double raw, double* label,
                                  std::string* error) const {
  if (!(std::isfinite(raw) && raw >= 0 && raw < num_classes_ &&
        raw == std::floor(raw))) {
    std::ostringstream out;
    out << "must be an integer class id in [0, " << num_classes_
        << ") (num_classes = " << num_classes_ << ")";
    *error = out.str();
    return false;
  }
  *label = raw;
  return true;
}

bool MulticlassLoss::DualInDomain(const double* dual, int label) const {
  // The block steps renormalise p' onto the simplex, leaving only rounding.
  constexpr double kSlack = 1e-9;
  double sum = 0.0;
  for (int j = 0; j < num_classes_; ++j) {
    const double p = (j == label ? 1.0 : 0.0) - dual[j];
    if (!(std::isfinite(p) && p >= -kSlack && p <= 1.0 + kSlack)) {
      return false;
    }
    sum += p;
  }
  return std::fabs(sum - 1.0) <= kSlack * num_classes_;
}

bool ParseMulticlassLossType(const std::string& name,
                             MulticlassLossType* type) {
  if (name == "softmax_loss") {
    *type = MulticlassLossType::kSoftmax;
  } else if (name == "multiclass_hinge_loss") {
    *type = MulticlassLossType::kMulticlassHinge;
  } else {
    return false;
  }
  return true;
}

std::unique_ptr<MulticlassLoss> MakeMulticlassLoss(MulticlassLossType type,
                                                   int num_classes) {
  switch (type) {
    case MulticlassLossType::kSoftmax:
      return std::make_unique<SoftmaxLoss>(num_classes);
    case MulticlassLossType::kMulticlassHinge:
      return std::make_unique<MulticlassHingeLoss>(num_classes);
  }
  return nullptr;
}

}  // namespace tf_sdca

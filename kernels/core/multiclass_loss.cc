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
  // With p = e_y - dual: dual_j = -p_j in [-1, 0] off the label, dual_y =
  // 1 - p_y in [0, 1], summing to 0. Branch-free sweeps on either side of
  // the label (they vectorise: the op checks every block before and after
  // each call); a NaN fails both comparisons, an infinity one of them.
  constexpr double kSlack = 1e-9;
  bool ok = true;
  double sum = 0.0;
  auto off_label = [&](int from, int to) {
    for (int j = from; j < to; ++j) {
      ok &= (dual[j] >= -1.0 - kSlack) & (dual[j] <= kSlack);
      sum += dual[j];
    }
  };
  off_label(0, label);
  off_label(label + 1, num_classes_);
  ok &= (dual[label] >= -kSlack) & (dual[label] <= 1.0 + kSlack);
  return ok && std::fabs(sum + dual[label]) <= kSlack * num_classes_;
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

bool ParseHingeStep(const std::string& name, HingeStep* step) {
  if (name == "projection") {
    *step = HingeStep::kProjection;
  } else if (name == "steepest_ascent") {
    *step = HingeStep::kSteepestAscent;
  } else if (name == "near_max_gain") {
    *step = HingeStep::kNearMaxGain;
  } else {
    return false;
  }
  return true;
}

std::unique_ptr<MulticlassLoss> MakeMulticlassLoss(MulticlassLossType type,
                                                   int num_classes,
                                                   HingeStep hinge_step) {
  switch (type) {
    case MulticlassLossType::kSoftmax:
      return std::make_unique<SoftmaxLoss>(num_classes);
    case MulticlassLossType::kMulticlassHinge:
      return std::make_unique<MulticlassHingeLoss>(num_classes, hinge_step);
  }
  return nullptr;
}

}  // namespace tf_sdca

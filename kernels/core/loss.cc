#include "kernels/core/loss.h"

#include "kernels/core/absolute_loss.h"
#include "kernels/core/hinge_loss.h"
#include "kernels/core/logistic_loss.h"
#include "kernels/core/poisson_loss.h"
#include "kernels/core/smooth_hinge_loss.h"
#include "kernels/core/squared_loss.h"

namespace tf_sdca {

std::unique_ptr<DualLossUpdater> MakeLossUpdater(LossType type, double gamma) {
  switch (type) {
    case LossType::kLogistic:
      return std::make_unique<LogisticLossUpdater>();
    case LossType::kSquared:
      return std::make_unique<SquaredLossUpdater>();
    case LossType::kHinge:
      return std::make_unique<HingeLossUpdater>();
    case LossType::kSmoothHinge:
      return std::make_unique<SmoothHingeLossUpdater>(gamma);
    case LossType::kAbsolute:
      return std::make_unique<AbsoluteLossUpdater>();
    case LossType::kPoisson:
      return std::make_unique<PoissonLossUpdater>();
  }
  return nullptr;
}

bool ParseLossType(const std::string& name, LossType* type) {
  if (name == "logistic_loss") {
    *type = LossType::kLogistic;
  } else if (name == "squared_loss") {
    *type = LossType::kSquared;
  } else if (name == "hinge_loss") {
    *type = LossType::kHinge;
  } else if (name == "smooth_hinge_loss") {
    *type = LossType::kSmoothHinge;
  } else if (name == "absolute_loss") {
    *type = LossType::kAbsolute;
  } else if (name == "poisson_loss") {
    *type = LossType::kPoisson;
  } else {
    return false;
  }
  return true;
}

}  // namespace tf_sdca

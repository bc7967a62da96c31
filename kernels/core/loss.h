// The interface every SDCA loss implements, and the per-example 1-D dual
// subproblem it solves.
//
// Conventions (the same as TensorFlow's SDCA so that results are comparable):
//   primal  P(w) = sum_i s_i phi_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1
//   dual    alpha_i per example, w = shrink((1/l2) sum_i s_i alpha_i x_i)
//   optimality alpha_i = -phi_i'(w.x_i)
// One coordinate step on example i maximises over the new dual a
//   f(a) = -phi_i*(-a) - (a - alpha) * wx - q/2 * (a - alpha)^2,
//   q = sigma * s_i * |x_i|^2 / l2,
// where sigma is the CoCoA+ aggregation parameter (number of solvers whose
// updates are added together) and wx = x_i . shrink(w + sigma * delta_w).
// The derivation per loss is in g3doc/losses.md.
#ifndef TF_SDCA_KERNELS_CORE_LOSS_H_
#define TF_SDCA_KERNELS_CORE_LOSS_H_

#include <memory>
#include <string>

namespace tf_sdca {

enum class LossType {
  kLogistic,
  kSquared,
  kHinge,
  kSmoothHinge,
  kAbsolute,
  kPoisson,
};

class DualLossUpdater {
 public:
  virtual ~DualLossUpdater() = default;

  // Name used in error messages ("logistic_loss", ...).
  virtual const char* Name() const = 0;

  // Maps a raw label to the internal one (e.g. {0,1} -> {-1,+1}). Returns
  // false and fills *error (without the argument name) for a label outside
  // the loss's domain.
  virtual bool ConvertLabel(double raw, double* label,
                            std::string* error) const = 0;

  // True when `dual` lies in the (closed) domain of phi*(-.) for `label`.
  virtual bool DualInDomain(double dual, double label) const = 0;

  // The maximiser of f(a) above.
  virtual double ComputeUpdatedDual(double label, double dual, double wx,
                                    double q) const = 0;

  // phi(wx) for one example, unweighted.
  virtual double PrimalLoss(double wx, double label) const = 0;

  // phi*(-dual) for one example, unweighted. Its sum with PrimalLoss and
  // dual * wx is the example's Fenchel-Young gap (>= 0).
  virtual double DualLoss(double dual, double label) const = 0;

  // phi'(wx).
  virtual double PrimalLossDerivative(double wx, double label) const = 0;

  // Strong-convexity constant of phi* (1 / smoothness of phi); 0 for
  // non-smooth losses. Used by adaptive sampling.
  virtual double DualStrongConvexity() const = 0;

  // For a loss whose dual is boxed (b = label * dual in [0, 1]): writes the
  // gradient of the row's dual objective in b, minimisation form (what
  // LIBLINEAR's dual coordinate descent calls G), and whether b is at its
  // lower (-1) or upper (+1) bound or inside (0); returns true. False for a
  // loss without a box (the 'shrinking' order then shrinks nothing).
  virtual bool DualBoxGradient(double label, double dual, double wx,
                               double* gradient, int* bound) const {
    return false;
  }
};

// Creates the updater for `type`; `gamma` is the smoothing of smooth hinge.
std::unique_ptr<DualLossUpdater> MakeLossUpdater(LossType type, double gamma);

// Parses "logistic_loss", "squared_loss", ...; false for an unknown name.
bool ParseLossType(const std::string& name, LossType* type);

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_LOSS_H_

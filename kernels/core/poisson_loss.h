// Poisson regression loss phi(z) = exp(z) - y z, y >= 0 (z is the log rate).
//
// phi*(u) = (u + y) log(u + y) - (u + y), so with t = y - a >= 0,
// phi*(-a) = t log t - t. Setting f'(a) = 0 gives log t + q t = c with
// c = wx + q (y - alpha); in s = log t the function
//   h(s) = s + q e^s - c,   h'(s) = 1 + q e^s
// is increasing and convex. Its root lies in [lo, c]: h(c) = q e^c >= 0, and
// lo = c - q e^c when c <= 0, min(0, log(c / q)) when c > 0 (if the root s
// were below log(c / q) then q e^s < c <= c - s would contradict h(s) = 0).
#ifndef TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_
#define TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_

#include <algorithm>
#include <cmath>

#include "kernels/core/binary_label.h"
#include "kernels/core/loss.h"
#include "kernels/core/newton.h"

namespace tf_sdca {

class PoissonLossUpdater final : public DualLossUpdater {
 public:
  const char* Name() const final { return "poisson_loss"; }

  bool ConvertLabel(double raw, double* label, std::string* error) const final {
    if (!(std::isfinite(raw) && raw >= 0.0)) {
      *error = "must be finite and >= 0";
      return false;
    }
    *label = raw;
    return true;
  }

  bool DualInDomain(double dual, double label) const final {
    return dual <= label + kDualDomainSlack * (1.0 + std::fabs(label));
  }

  double ComputeUpdatedDual(double label, double dual, double wx,
                            double q) const final {
    if (q <= 0.0) return label - std::exp(wx);
    const double t0 = label - dual;
    const double c = wx + q * t0;
    const double lo = c <= 0.0 ? c - q * std::exp(c)
                               : std::min(0.0, std::log(c / q));
    const double hi = c;
    const double start = t0 > 0.0 ? std::log(t0) : 0.5 * (lo + hi);
    const double s = SafeguardedNewton(
        [&](double x, double* h, double* dh) {
          const double qe = q * std::exp(x);
          *h = x + qe - c;
          *dh = 1.0 + qe;
        },
        lo, hi, start);
    return label - std::exp(s);
  }

  double PrimalLoss(double wx, double label) const final {
    return std::exp(wx) - label * wx;
  }

  double DualLoss(double dual, double label) const final {
    const double t = std::max(label - dual, 0.0);
    return t > 0.0 ? t * std::log(t) - t : 0.0;
  }

  double PrimalLossDerivative(double wx, double label) const final {
    return std::exp(wx) - label;
  }

  double DualStrongConvexity() const final { return 0.0; }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_

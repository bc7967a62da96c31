// Poisson regression loss phi(z) = exp(z) - y z, y >= 0 (z is the log rate).
//
// phi*(u) = (u + y) log(u + y) - (u + y), so with t = y - a >= 0,
// phi*(-a) = t log t - t. Setting f'(a) = 0 gives log t + q t = c with
// c = wx + q t0, t0 = y - alpha. Multiplying by q: u = q t solves
//   u + log u = L,   L = log q + wx + q t0,
// so u = omega(L), the Wright omega function. Solving in s = log t instead
// needs a bracket about c wide, on whose edge the root can sit (q = c = 400:
// s in [0, 400], root ~ -0.0025), where Newton from inside crawls by ~1 per
// step. In r = log u the equation is
//   g(r) = r + e^r - L,   g'(r) = 1 + e^r >= 1,
// increasing and convex, with a bracket computed without overflow:
//   L <  1: r in [L - e^L, L]  (e^r > 0 gives r < L, so e^r < e^L),
//   L >= 1: r in [log(L - log L), log L]  (g(0) <= 0 gives r >= 0, so
//           u = L - r <= L, and then u >= L - log L),
// at most e wide, so the safeguarded Newton ends in a few steps. Then
// t = e^r / q and a = y - t. Every finite input gives a finite t except when
// the exact t itself exceeds the double range (tiny q with huge wx); the
// caller reports that.
#ifndef TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_
#define TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_

#include <algorithm>
#include <cmath>
#include <limits>

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
    return label - UpdatedT(label - dual, wx, q);
  }

  double PrimalLoss(double wx, double label) const final {
    return std::exp(wx) - label * wx;
  }

  double DualLoss(double dual, double label) const final {
    // The dual domain is a <= y; a dual read back within kDualDomainSlack
    // above y is treated as y (t = 0).
    const double t = std::max(label - dual, 0.0);
    return t > 0.0 ? t * std::log(t) - t : 0.0;
  }

  double PrimalLossDerivative(double wx, double label) const final {
    return std::exp(wx) - label;
  }

  double DualStrongConvexity() const final { return 0.0; }

  // r = log(omega(L)): the root of r + e^r = L (see the top of the file).
  // Accurate to about 1e-15 (1 + |r|); finite for every finite L. `guess`
  // is used as the first iterate when it lies inside the bracket.
  static double LogWrightOmega(double L, double guess) {
    double lo, hi, start;
    if (L < 1.0) {
      const double eL = std::exp(L);
      lo = L - eL;
      hi = L;
      // One more fixed-point step r <- L - e^r from lo: between the root
      // and hi, and exact to O(e^{3L}) for L << 0.
      start = L - std::exp(lo);
    } else {
      const double log_l = std::log(L);
      lo = std::log(L - log_l);
      hi = log_l;
      // omega(L) ~ L - log L + log L / L for large L.
      start = std::log(L - log_l + log_l / L);
    }
    if (guess > lo && guess < hi) start = guess;
    return SafeguardedNewton(
        [L](double r, double* g, double* dg) {
          const double u = std::exp(r);
          *g = (r - L) + u;
          *dg = 1.0 + u;
        },
        lo, hi, start);
  }

 private:
  // The new t = y - a from t0 = y - alpha: the root of log t + q t = wx +
  // q t0.
  static double UpdatedT(double t0, double wx, double q) {
    if (!(q > 0.0)) return std::exp(wx);  // no features: a = y - exp(wx)
    const double log_q = std::log(q);
    const double L = log_q + wx + q * t0;
    if (!std::isfinite(L)) {
      // Only when q t0 overflows: then log t + q (t - t0) = wx moves t by
      // (wx - log t0) / q, far below the resolution of t0.
      return t0 + (wx - std::log(t0)) / q;
    }
    // After a few passes t0 is close to the new t: r = log(q t0) is then a
    // better first iterate than the asymptotic one (1-2 Newton steps).
    const double r = LogWrightOmega(
        L, t0 > 0.0 ? log_q + std::log(t0)
                    : std::numeric_limits<double>::quiet_NaN());
    const double u = std::exp(r);
    // u / q keeps u's relative precision; when u underflows, t = e^(r -
    // log q) may still be a normal number (tiny q).
    return u >= std::numeric_limits<double>::min() ? u / q
                                                   : std::exp(r - log_q);
  }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_POISSON_LOSS_H_

// Softmax (multinomial logistic) loss: phi(z) = log sum_k exp(z_k) - z_y.
//
// Its conjugate at p - e_y (p on the simplex) is the negative entropy
// sum_k p_k log p_k, so the block step (multiclass_loss.h) maximises
//   -sum_k p'_k log p'_k + p' . z - q/2 |p' - p|^2   over the simplex.
// Stationarity with a multiplier nu for sum p' = 1 gives, per class,
//   log p'_k + q p'_k = c_k - nu,   c_k = z_k + q p_k   (+ a constant),
// so p'_k = h(c_k - nu) with h(t) the root x of log x + q x = t (a Lambert
// W function), and nu is the one root of S(nu) = sum_k h(c_k - nu) = 1,
// S decreasing. The K + 1 equations are solved together by Newton's method
// (their Jacobian is an arrow: one solve costs O(K)), started from the
// block's current p (a good start once training settles: one or two
// iterations, K exponentials each); should that not converge, nested 1-D
// Newton solves (nu bracketed, each h by monotone Newton) always do. The
// block step is exact to rounding, and p' > 0 in exact arithmetic (the
// entropy's slope is infinite at 0), so the duals stay inside the domain.
// Derivation in g3doc/multiclass.md.
#ifndef TF_SDCA_KERNELS_CORE_SOFTMAX_LOSS_H_
#define TF_SDCA_KERNELS_CORE_SOFTMAX_LOSS_H_

#include <algorithm>
#include <cmath>

#include "kernels/core/multiclass_loss.h"

namespace tf_sdca {

class SoftmaxLoss final : public MulticlassLoss {
 public:
  using MulticlassLoss::MulticlassLoss;

  const char* Name() const override { return "softmax_loss"; }

  // log sum_k exp(v_k), without overflow.
  static double LogSumExp(const double* v, int k) {
    const double top = *std::max_element(v, v + k);
    if (!std::isfinite(top)) return top;
    double sum = 0.0;
    for (int j = 0; j < k; ++j) sum += std::exp(v[j] - top);
    return top + std::log(sum);
  }

  // log x of the root x of log x + q x = t (q > 0). g(u) = u + q e^u - t is
  // convex and increasing, and the start is at or above the root (u <= t
  // always; u <= log(t / q) when u >= 0), so Newton's iterates fall
  // monotonically onto it without overshoot.
  static double LogRoot(double t, double q) {
    double u = t <= 0.0 ? t : std::min(t, std::max(0.0, std::log(t / q)));
    for (int it = 0; it < 100; ++it) {
      const double e = q * std::exp(u);
      const double step = (u + e - t) / (1.0 + e);
      u -= step;
      if (!(std::fabs(step) > 1e-15 * (1.0 + std::fabs(u)))) break;
    }
    return u;
  }

  void UpdateBlock(int label, const double* dual, const double* scores,
                   double q, double* new_dual, double* work) const override {
    const int k = num_classes();
    double* c = work;      // c_k = z_k + q p_k
    double* x = work + k;  // p'_k
    if (!(q > 0.0)) {
      // A row without features: p' = softmax(z), the loss's own optimum.
      const double lse = LogSumExp(scores, k);
      for (int j = 0; j < k; ++j) x[j] = std::exp(scores[j] - lse);
    } else {
      double p_min = 1.0;
      for (int j = 0; j < k; ++j) {
        const double p = std::clamp((j == label ? 1.0 : 0.0) - dual[j],
                                    0.0, 1.0);
        c[j] = scores[j] + q * p;
        x[j] = p;
        p_min = std::min(p_min, p);
      }
      if (!JointNewton(c, q, p_min > 1e-300, x, work + 2 * k,
                       work + 3 * k)) {
        Nested(c, q, x);
      }
    }
    double total = 0.0;
    for (int j = 0; j < k; ++j) total += x[j];
    for (int j = 0; j < k; ++j) {
      new_dual[j] = (j == label ? 1.0 : 0.0) - x[j] / total;
    }
  }

  double PrimalLoss(const double* scores, int label) const override {
    return LogSumExp(scores, num_classes()) - scores[label];
  }

  double DualLoss(const double* dual, int label) const override {
    double sum = 0.0;
    for (int j = 0; j < num_classes(); ++j) {
      const double p =
          std::clamp((j == label ? 1.0 : 0.0) - dual[j], 0.0, 1.0);
      if (p > 0.0) sum += p * std::log(p);  // 0 log 0 = 0
    }
    return sum;
  }

 private:
  // Newton on R_j = u_j + q e^{u_j} - c_j + nu = 0 (j < K), R_K = sum_j
  // e^{u_j} - 1 = 0, from u = log x (x: the current p when `warm`, else
  // softmax(c)). With g_j = 1 / (1 + q x_j) a step is
  //   dnu = (R_K - sum_j x_j g_j R_j) / sum_j x_j g_j,
  //   du_j = -(R_j + dnu) g_j,
  // rises of u capped at 2 per step (e^u must not overflow). Writes x =
  // e^u and returns true once the residuals vanish to rounding; false
  // (x undefined) if they do not within 30 steps. r, gs: K doubles of
  // scratch each.
  bool JointNewton(const double* c, double q, bool warm, double* x,
                   double* r, double* gs) const {
    const int k = num_classes();
    // Scratch: the caller's x doubles as u (log p) until the end.
    double* u = x;
    if (warm) {
      for (int j = 0; j < k; ++j) u[j] = std::log(x[j]);
    } else {
      const double lse = LogSumExp(c, k);
      for (int j = 0; j < k; ++j) u[j] = c[j] - lse;
    }
    // nu: the p-weighted mean of what each equation asks of it.
    double nu = 0.0;
    for (int j = 0; j < k; ++j) {
      const double e = std::exp(u[j]);
      nu += e * (c[j] - u[j] - q * e);
    }
    for (int it = 0; it < 30; ++it) {
      // e_j = e^{u_j}; r_j = R_j; g_j = 1 / (1 + q e_j).
      double sum_x = 0.0, sum_xg = 0.0, sum_xgr = 0.0, worst = 0.0;
      for (int j = 0; j < k; ++j) {
        const double e = std::exp(u[j]);
        const double g = 1.0 / (1.0 + q * e);
        r[j] = u[j] + q * e - c[j] + nu;
        gs[j] = g;
        sum_x += e;
        sum_xg += e * g;
        sum_xgr += e * g * r[j];
        worst = std::max(worst, std::fabs(r[j]) / (1.0 + std::fabs(c[j])));
      }
      const double r_sum = sum_x - 1.0;
      if (!std::isfinite(sum_x)) return false;
      if (worst <= 1e-13 && std::fabs(r_sum) <= 1e-14) {
        for (int j = 0; j < k; ++j) x[j] = std::exp(u[j]);
        return true;
      }
      const double dnu = (r_sum - sum_xgr) / sum_xg;
      double rise = 0.0;
      for (int j = 0; j < k; ++j) {
        r[j] = -(r[j] + dnu) * gs[j];  // du_j
        rise = std::max(rise, r[j]);
      }
      const double t = rise > 2.0 ? 2.0 / rise : 1.0;
      for (int j = 0; j < k; ++j) u[j] += t * r[j];
      nu += t * dnu;
    }
    return false;
  }

  // The nested solve: nu by Newton on log S(nu), bracketed, each p'_j = h
  // by LogRoot. Writes x = p' (up to normalisation).
  void Nested(const double* c, double q, double* x) const {
    const int k = num_classes();
    {
      // S(nu) >= 1 at lo: the largest c_k alone gives h(q) = 1. S(nu) <= 1
      // at hi = log sum exp(c): h(t) <= e^t. Newton on log S(nu) (linear
      // in nu where q p'_k is small) inside the bracket, bisection when a
      // step leaves it.
      const double c_max = *std::max_element(c, c + k);
      double lo = c_max - q, hi = LogSumExp(c, k);
      double nu = hi;
      for (int it = 0; it < 200; ++it) {
        double s = 0.0, d = 0.0;
        for (int j = 0; j < k; ++j) {
          x[j] = std::exp(LogRoot(c[j] - nu, q));
          s += x[j];
          d += x[j] / (1.0 + q * x[j]);
        }
        const double log_s = std::log(s);
        if (!(std::fabs(log_s) > 4e-16)) break;
        if (log_s > 0.0) {
          lo = nu;
        } else {
          hi = nu;
        }
        if (!(hi - lo > 1e-15 * (1.0 + std::fabs(nu)))) break;
        double next = nu + log_s * s / d;  // d log S / d nu = -d / s
        if (!(next > lo && next < hi)) next = 0.5 * (lo + hi);
        nu = next;
      }
    }
  }
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_SOFTMAX_LOSS_H_

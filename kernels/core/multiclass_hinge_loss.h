// Multiclass hinge loss (Crammer and Singer; the structured-output SVM with
// the 0/1 label loss): phi(z) = max_k (D_k + z_k) - z_y, D_k = [k != y].
//
// phi is the maximum of the affine functions p . (D + z) - z_y over the
// simplex, so its conjugate at p - e_y is -p . D = -(1 - p_y) = -alpha_y,
// and the block step (multiclass_loss.h) maximises
//   p' . (D + z) - q/2 |p' - p|^2   over the simplex:
// the Euclidean projection of p + (D + z) / q onto the simplex. That is the
// exact maximiser of the block; sequential dual ascent's steepest feasible
// ascent step (Frank-Wolfe towards the vertex of the most violated class,
// with exact line search) and its near-maximal-gain variant (mass moved
// between two classes) maximise the same concave f along one feasible
// direction only, so the projection gains at least as much per visit; both
// are options (HingeStep). Derivation in g3doc/multiclass.md.
#ifndef TF_SDCA_KERNELS_CORE_MULTICLASS_HINGE_LOSS_H_
#define TF_SDCA_KERNELS_CORE_MULTICLASS_HINGE_LOSS_H_

#include <algorithm>
#include <cmath>

#include "kernels/core/multiclass_loss.h"

namespace tf_sdca {

class MulticlassHingeLoss final : public MulticlassLoss {
 public:
  explicit MulticlassHingeLoss(int num_classes,
                               HingeStep step = HingeStep::kProjection)
      : MulticlassLoss(num_classes), step_(step) {}

  const char* Name() const override { return "multiclass_hinge_loss"; }

  void UpdateBlock(int label, const double* dual, const double* scores,
                   double q, double* new_dual, double* work) const override {
    const int k = num_classes();
    double* v = work;
    double* kept_v = work + k;
    if (!(q > 0.0)) {
      // A row without features: the vertex of the largest D_k + z_k.
      int best = 0;
      for (int j = 1; j < k; ++j) {
        if (Violation(scores, label, j) > Violation(scores, label, best)) {
          best = j;
        }
      }
      for (int j = 0; j < k; ++j) {
        new_dual[j] = (j == label ? 1.0 : 0.0) - (j == best ? 1.0 : 0.0);
      }
      return;
    }
    if (step_ != HingeStep::kProjection) {
      return SequentialStep(label, dual, scores, q, new_dual, work);
    }
    // Scaled by q (w = q v projected onto the simplex of mass q), so that
    // the step is exact also when q is large.
    double top = -INFINITY;
    for (int j = 0; j < k; ++j) {
      const double p =
          std::clamp((j == label ? 1.0 : 0.0) - dual[j], 0.0, 1.0);
      v[j] = q * p + Violation(scores, label, j);
      top = std::max(top, v[j]);
    }
    // tau solves sum_j max(v_j - tau, 0) = q. tau >= max_j v_j - q (the
    // largest v_j is in the support and the excesses sum to q), so only the
    // v_j above that can be in the support: usually the label's and a few
    // others. Among those, Michelot's fixed point instead of a sort: tau =
    // (sum of the kept - q) / their count, dropping the v_j <= tau, until
    // none drops (tau only rises; the largest v_j is never dropped).
    const double tau = SimplexThreshold(v, k, top, q, kept_v);
    double total = 0.0;
    for (int j = 0; j < k; ++j) {
      v[j] = std::max(v[j] - tau, 0.0);
      total += v[j];
    }
    if (!(total > 0.0 && std::isfinite(total))) {
      // Scores so far beyond q that q is lost in their sums (q 1e12 against
      // scores 1e30): the projection is the vertex of the largest
      // q p + D + z to within rounding; take it rather than 0 / 0.
      int best = 0;
      for (int j = 1; j < k; ++j) {
        if (q * std::clamp((j == label ? 1.0 : 0.0) - dual[j], 0.0, 1.0) +
                Violation(scores, label, j) >
            q * std::clamp((best == label ? 1.0 : 0.0) - dual[best], 0.0,
                           1.0) +
                Violation(scores, label, best)) {
          best = j;
        }
      }
      for (int j = 0; j < k; ++j) {
        new_dual[j] = (j == label ? 1.0 : 0.0) - (j == best ? 1.0 : 0.0);
      }
      return;
    }
    // Rounding can leave the mass a few ulps from q: renormalised onto the
    // simplex exactly as the dual domain wants.
    for (int j = 0; j < k; ++j) {
      new_dual[j] = (j == label ? 1.0 : 0.0) - v[j] / total;
    }
  }

  double PrimalLoss(const double* scores, int label) const override {
    double top = -INFINITY;
    for (int j = 0; j < num_classes(); ++j) {
      top = std::max(top, Violation(scores, label, j));
    }
    return top - scores[label];
  }

  double DualLoss(const double* dual, int label) const override {
    return -std::clamp(dual[label], 0.0, 1.0);
  }

  bool Shrinkable() const override { return true; }
  bool ClassShrinkable() const override {
    return step_ == HingeStep::kProjection;
  }

  int ActiveStep(int label, const double* dual, const double* scores,
                 double q, int* active, int count, double* gap,
                 bool* at_bound, double* margin, double* new_dual,
                 double* work) const override {
    const int k = num_classes();
    double* p = work;            // [k]: p_j of the active classes
    double* v = work + k;        // [count]
    double* kept_v = work + 2 * k;
    double least = INFINITY;     // the smallest s_k of the support
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      p[j] = std::clamp((j == label ? 1.0 : 0.0) - dual[j], 0.0, 1.0);
      if (p[j] > 0.0) least = std::min(least, Violation(scores, label, j));
    }
    int left = 0;
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      if (p[j] == 0.0 && Violation(scores, label, j) < least) continue;
      active[left++] = j;
    }
    count = left;
    int vertex = -1;
    double top = -INFINITY, mean = 0.0;
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      const double s = Violation(scores, label, j);
      top = std::max(top, s);
      mean += p[j] * s;
      if (p[j] == 1.0) vertex = j;
    }
    const int m = vertex >= 0 ? vertex : label;
    double other = -INFINITY, own = -INFINITY;
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      if (j != m) other = std::max(other, Violation(scores, label, j));
      else own = Violation(scores, label, j);
    }
    *gap = std::max(top - mean, 0.0);
    *at_bound = vertex >= 0;
    *margin = other - own;
    // UpdateBlock's projection over the active classes.
    for (int j = 0; j < k; ++j) new_dual[j] = dual[j];
    top = -INFINITY;
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      v[a] = q * p[j] + Violation(scores, label, j);
      top = std::max(top, v[a]);
    }
    const double tau = SimplexThreshold(v, count, top, q, kept_v);
    double total = 0.0;
    for (int a = 0; a < count; ++a) {
      v[a] = std::max(v[a] - tau, 0.0);
      total += v[a];
    }
    if (!(total > 0.0 && std::isfinite(total))) {
      // (UpdateBlock's fallback: the vertex of the largest q p + D + z.)
      int best = 0;
      for (int a = 1; a < count; ++a) {
        if (q * p[active[a]] + Violation(scores, label, active[a]) >
            q * p[active[best]] + Violation(scores, label, active[best])) {
          best = a;
        }
      }
      for (int a = 0; a < count; ++a) v[a] = a == best ? 1.0 : 0.0;
      total = 1.0;
    }
    for (int a = 0; a < count; ++a) {
      const int j = active[a];
      new_dual[j] = (j == label ? 1.0 : 0.0) - v[a] / total;
    }
    return count;
  }
  bool BlockViolation(int label, const double* dual, const double* scores,
                      double* gap, bool* at_bound,
                      double* margin) const override {
    // p at a vertex e_m (the steps land on one exactly: p_m = v_m / total
    // with every other v_j = 0), m = y or another class: LIBLINEAR's
    // Crammer-Singer solver shrinks such a row's classes j whose s_j is
    // below s_m, and the row once one class is left.
    int vertex = -1;
    double top = -INFINITY, mean = 0.0;
    for (int j = 0; j < num_classes(); ++j) {
      const double s = Violation(scores, label, j);
      const double p = (j == label ? 1.0 : 0.0) - dual[j];
      top = std::max(top, s);
      mean += p * s;
      if (p == 1.0) vertex = j;
    }
    double other = -INFINITY;
    const int m = vertex >= 0 ? vertex : label;
    for (int j = 0; j < num_classes(); ++j) {
      if (j != m) other = std::max(other, Violation(scores, label, j));
    }
    *gap = std::max(top - mean, 0.0);
    *at_bound = vertex >= 0;
    *margin = other - Violation(scores, label, m);
    return true;
  }

 private:
  // tau with sum_j max(v_j - tau, 0) = q over v[0, n), whose largest is
  // `top`: Michelot's fixed point on the v_j >= top - q (copied to
  // `kept_v`, n doubles of scratch), tau = (their sum - q) / their count,
  // dropping the v_j <= tau until none drops. None above tau: q is lost in
  // the v_j's rounding (the callers' fallback takes the vertex).
  static double SimplexThreshold(const double* v, int n, double top,
                                 double q, double* kept_v) {
    int kept = 0;
    double sum = 0.0;
    for (int j = 0; j < n; ++j) {
      if (v[j] >= top - q) {
        kept_v[kept++] = v[j];
        sum += v[j];
      }
    }
    double tau = (sum - q) / kept;
    for (;;) {
      int still = 0;
      double rest = 0.0;
      for (int j = 0; j < kept; ++j) {
        if (kept_v[j] > tau) {
          kept_v[still++] = kept_v[j];
          rest += kept_v[j];
        }
      }
      if (still == kept || still == 0) break;
      kept = still;
      tau = (rest - q) / kept;
    }
    return tau;
  }

  // The reference's sequential dual ascent steps, for q > 0: with p = e_y -
  // dual and s_k = D_k + z_k, f(p + t d) = f(p) + t d.s - q t^2 |d|^2 / 2
  // along one feasible direction d, maximised exactly over t.
  //   kSteepestAscent: d = e_u - p, u = argmax_k s_k (the loss-augmented
  //     prediction), t = min(1, (s_u - p.s) / (q |e_u - p|^2)).
  //   kNearMaxGain: d = e_u - e_v, u the larger-scoring of argmax_k s_k and
  //     of the best class already in the support; v, among the support's
  //     other classes with s_v < s_u, the one whose exact step gains most:
  //     t = min(p_v, (s_u - s_v) / 2q), gain t (s_u - s_v) - q t^2.
  void SequentialStep(int label, const double* dual, const double* scores,
                      double q, double* new_dual, double* p) const {
    const int k = num_classes();
    int u = 0, in_support = -1;
    for (int j = 0; j < k; ++j) {
      p[j] = std::clamp((j == label ? 1.0 : 0.0) - dual[j], 0.0, 1.0);
      if (Violation(scores, label, j) > Violation(scores, label, u)) u = j;
      if (p[j] > 0.0 && (in_support < 0 || Violation(scores, label, j) >
                                               Violation(scores, label,
                                                         in_support))) {
        in_support = j;
      }
    }
    if (step_ == HingeStep::kSteepestAscent) {
      double slope = Violation(scores, label, u), norm2 = 1.0;
      for (int j = 0; j < k; ++j) {
        slope -= p[j] * Violation(scores, label, j);
        norm2 += p[j] * p[j] - (j == u ? 2.0 * p[j] : 0.0);
      }
      const double t =
          norm2 > 0.0 && slope > 0.0 ? std::min(1.0, slope / (q * norm2))
                                     : 0.0;
      for (int j = 0; j < k; ++j) {
        p[j] = (1.0 - t) * p[j] + (j == u ? t : 0.0);
      }
    } else {
      if (in_support >= 0 && Violation(scores, label, in_support) >=
                                 Violation(scores, label, u)) {
        u = in_support;
      }
      const double s_u = Violation(scores, label, u);
      int v = -1;
      double best_gain = 0.0, best_t = 0.0;
      for (int j = 0; j < k; ++j) {
        const double gap = s_u - Violation(scores, label, j);
        if (j == u || !(p[j] > 0.0) || !(gap > 0.0)) continue;
        const double t = std::min(p[j], gap / (2.0 * q));
        const double gain = t * gap - q * t * t;
        if (gain > best_gain) {
          best_gain = gain;
          best_t = t;
          v = j;
        }
      }
      if (v >= 0) {
        p[u] += best_t;
        p[v] = best_t == p[v] ? 0.0 : p[v] - best_t;
      }
    }
    double total = 0.0;
    for (int j = 0; j < k; ++j) total += p[j];
    // Renormalised onto the simplex exactly as the dual domain wants.
    for (int j = 0; j < k; ++j) {
      new_dual[j] = (j == label ? 1.0 : 0.0) - p[j] / total;
    }
  }

  // D_j + z_j.
  static double Violation(const double* scores, int label, int j) {
    return (j == label ? 0.0 : 1.0) + scores[j];
  }

  HingeStep step_;
};

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_MULTICLASS_HINGE_LOSS_H_

// The interface of the multiclass losses (softmax, multiclass hinge) and the
// per-example block subproblem they solve.
//
// Conventions (those of loss.h with a block of K duals per example):
//   primal  P(W) = sum_i s_i phi_i(W^T x_i) + l2/2 |W|^2 + l1 |W|_1,
//           W of shape [num_slots, K] (a slot's K class weights contiguous)
//   dual    alpha_i in R^K per example, W = shrink((1/l2) sum_i s_i x_i
//           alpha_i^T)
//   optimality alpha_i = -grad phi_i(W^T x_i)
// Both losses have phi_i*(-alpha) finite only for alpha = e_y - p with p on
// the probability simplex (y the example's class), so each loss writes its
// block through p. One block step on example i maximises over the new p'
//   f(p') = -phi_i*(p' - e_y) + (p' - p) . z - q/2 |p' - p|^2,
//   q = sigma * s_i * |x_i|^2 / l2, z = W^T x_i (shrunk),
// the binary step's f with a = e_y - p' (loss.h). The derivations are in
// g3doc/multiclass.md.
#ifndef TF_SDCA_KERNELS_CORE_MULTICLASS_LOSS_H_
#define TF_SDCA_KERNELS_CORE_MULTICLASS_LOSS_H_

#include <cstdint>
#include <memory>
#include <string>

namespace tf_sdca {

enum class MulticlassLossType { kSoftmax, kMulticlassHinge };

// The multiclass hinge's block step (multiclass_hinge_loss.h): the exact
// maximiser of the block (kProjection), or the reference's sequential dual
// ascent along one feasible direction, steepest feasible ascent
// (block-coordinate Frank-Wolfe) or near-maximal gain (two classes).
enum class HingeStep { kProjection, kSteepestAscent, kNearMaxGain };

// "projection", "steepest_ascent", "near_max_gain"; false for others.
bool ParseHingeStep(const std::string& name, HingeStep* step);

class MulticlassLoss {
 public:
  explicit MulticlassLoss(int num_classes) : num_classes_(num_classes) {}
  virtual ~MulticlassLoss() = default;

  // Name used in error messages ("softmax_loss", ...).
  virtual const char* Name() const = 0;
  int num_classes() const { return num_classes_; }

  // Labels are class ids given as floats: integers in [0, K). Returns false
  // and fills *error (without the argument name) otherwise.
  bool ConvertLabel(double raw, double* label, std::string* error) const;

  // True when dual = e_y - p with p on the simplex (to rounding: 1e-9).
  bool DualInDomain(const double* dual, int label) const;

  // The maximiser p' of f above, written as the new dual block
  // new_dual = e_y - p'. `work` holds 4 K doubles of scratch.
  virtual void UpdateBlock(int label, const double* dual,
                           const double* scores, double q, double* new_dual,
                           double* work) const = 0;

  // phi(z) for one example, unweighted.
  virtual double PrimalLoss(const double* scores, int label) const = 0;

  // phi*(-dual) for one example, unweighted; its sum with PrimalLoss and
  // dual . z is the example's Fenchel-Young gap (>= 0).
  virtual double DualLoss(const double* dual, int label) const = 0;

  // For a loss whose block can sit still at a vertex p = e_m of the
  // simplex (the multiclass hinge, where a row classified with margin keeps
  // alpha = 0, and a row whose class m != y violates most keeps p = e_m):
  // writes the row's gap G = max_k s_k - p . s with s_k = D_k + z_k (0 iff
  // the block is optimal at these scores: the reference's per-example
  // gap), whether p is a vertex e_m, and the margin max_{k != m} s_k - s_m
  // (m = y when p is no vertex; < 0 at a vertex: p = e_m is the block's
  // optimum); returns true. False for a loss without such a bound (the
  // 'shrinking' order then has nothing to shrink).
  virtual bool Shrinkable() const { return false; }
  virtual bool BlockViolation(int label, const double* dual,
                              const double* scores, double* gap,
                              bool* at_bound, double* margin) const {
    return false;
  }

  // LIBLINEAR's per-class shrinking of a Shrinkable loss whose step can be
  // taken on some classes only (the multiclass hinge's projection): true
  // when ActiveStep applies.
  virtual bool ClassShrinkable() const { return false; }
  // Over the `count` classes `active` only (the others at p_j = 0, their
  // scores not read): first drops from `active` (returning their new count)
  // the classes at p_j = 0 whose s_j is below every s_k of the support
  // (p_k > 0), which the step leaves at 0 (LIBLINEAR's Crammer-Singer
  // shrinking); then BlockViolation's gap, vertex and margin over the
  // classes left, and the block step over them (new_dual of the others is
  // their dual). For q > 0.
  virtual int ActiveStep(int label, const double* dual, const double* scores,
                         double q, int* active, int count, double* gap,
                         bool* at_bound, double* margin, double* new_dual,
                         double* work) const {
    return count;
  }

 private:
  const int num_classes_;
};

// "softmax_loss", "multiclass_hinge_loss"; false for another name.
bool ParseMulticlassLossType(const std::string& name,
                             MulticlassLossType* type);

// `hinge_step` is the multiclass hinge's (the softmax has one step).
std::unique_ptr<MulticlassLoss> MakeMulticlassLoss(
    MulticlassLossType type, int num_classes,
    HingeStep hinge_step = HingeStep::kProjection);

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_CORE_MULTICLASS_LOSS_H_

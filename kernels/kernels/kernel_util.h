// Helpers shared by the kernels of TfSdca>Optimizer, TfSdca>PackRows and
// TfSdca>PackedSolve: attribute checks, rank checks, the CPU device's pool.
#ifndef TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_
#define TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>

#include "kernels/core/first_bad_block.h"
#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"
#include "tensorflow/core/framework/cancellation.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_sdca {

// Reads and checks l1 (>= 0), l2 (> 0) and gamma (> 0) into options->l1,
// options->l2 and *gamma, and num_loss_partitions.
inline ::tensorflow::Status ReadRegularization(
    ::tensorflow::OpKernelConstruction* context, SolverOptions* options,
    float* gamma) {
  using ::tensorflow::errors::InvalidArgument;
  float l1, l2;
  TF_RETURN_IF_ERROR(context->GetAttr("l1", &l1));
  TF_RETURN_IF_ERROR(context->GetAttr("l2", &l2));
  TF_RETURN_IF_ERROR(context->GetAttr("gamma", gamma));
  if (!(std::isfinite(l1) && l1 >= 0)) {
    return InvalidArgument("l1 = ", l1, " must be >= 0");
  }
  if (!(std::isfinite(l2) && l2 > 0)) {
    return InvalidArgument("l2 = ", l2, " must be > 0");
  }
  if (!(std::isfinite(*gamma) && *gamma > 0)) {
    return InvalidArgument("gamma = ", *gamma, " must be > 0");
  }
  options->l1 = l1;
  options->l2 = l2;
  return context->GetAttr("num_loss_partitions",
                          &options->num_loss_partitions);
}

// The num_classes attribute: >= 2 for a multiclass loss, 1 for the others.
inline ::tensorflow::Status ReadNumClasses(
    ::tensorflow::OpKernelConstruction* context, const std::string& loss_type,
    bool multiclass, int* num_classes) {
  TF_RETURN_IF_ERROR(context->GetAttr("num_classes", num_classes));
  if (multiclass && *num_classes < 2) {
    return ::tensorflow::errors::InvalidArgument(
        "num_classes = ", *num_classes, " must be >= 2 for ", loss_type);
  }
  if (!multiclass && *num_classes != 1) {
    return ::tensorflow::errors::InvalidArgument(
        "num_classes = ", *num_classes, " must be 1 for ", loss_type,
        " (a binary or regression loss; softmax_loss and "
        "multiclass_hinge_loss take K classes)");
  }
  return absl::OkStatus();
}

// `name must have rank R, got shape S` unless t has rank `rank`.
inline ::tensorflow::Status CheckRank(const ::tensorflow::Tensor& t, int rank,
                                      const std::string& name) {
  if (t.dims() != rank) {
    return ::tensorflow::errors::InvalidArgument(
        name, " must have rank ", rank, ", got shape ",
        t.shape().DebugString());
  }
  return absl::OkStatus();
}

// The hinge_step attribute: the multiclass hinge's block step; any but
// 'projection' is refused for another loss (`multiclass_hinge` false).
inline ::tensorflow::Status ReadHingeStep(
    ::tensorflow::OpKernelConstruction* context, const std::string& loss_type,
    bool multiclass_hinge, HingeStep* step) {
  using ::tensorflow::errors::InvalidArgument;
  std::string name;
  TF_RETURN_IF_ERROR(context->GetAttr("hinge_step", &name));
  if (!ParseHingeStep(name, step)) {
    return InvalidArgument("unknown hinge_step ", name);
  }
  if (*step != HingeStep::kProjection && !multiclass_hinge) {
    return InvalidArgument("hinge_step '", name,
                           "' is a block step of multiclass_hinge_loss, not "
                           "of ", loss_type, " (use 'projection')");
  }
  return absl::OkStatus();
}

// The attributes of TfSdca>PackedSolve: loss_type (with gamma),
// visit_order, l1, l2, num_loss_partitions, num_passes, compute_objective,
// hinge_step (the multiclass hinge's block step).
// A multiclass loss_type (softmax_loss, multiclass_hinge_loss) is made into
// *multiclass with the num_classes attribute (>= 2), leaving *loss null;
// `multiclass` null refuses them.
inline ::tensorflow::Status ReadEpochAttrs(
    ::tensorflow::OpKernelConstruction* context, SolverOptions* options,
    std::unique_ptr<DualLossUpdater>* loss, bool* compute_objective,
    std::unique_ptr<MulticlassLoss>* multiclass = nullptr) {
  using ::tensorflow::errors::InvalidArgument;
  std::string loss_type, order;
  LossType type;
  MulticlassLossType multiclass_type;
  TF_RETURN_IF_ERROR(context->GetAttr("loss_type", &loss_type));
  const bool is_multiclass =
      multiclass != nullptr &&
      ParseMulticlassLossType(loss_type, &multiclass_type);
  if (!is_multiclass && !ParseLossType(loss_type, &type)) {
    return InvalidArgument("unknown loss_type ", loss_type);
  }
  HingeStep step;
  TF_RETURN_IF_ERROR(ReadHingeStep(
      context, loss_type,
      is_multiclass && multiclass_type == MulticlassLossType::kMulticlassHinge,
      &step));
  TF_RETURN_IF_ERROR(context->GetAttr("visit_order", &order));
  if (!ParseVisitOrder(order.c_str(), &options->order)) {
    return InvalidArgument("unknown visit_order ", order);
  }
  float gamma;
  TF_RETURN_IF_ERROR(ReadRegularization(context, options, &gamma));
  TF_RETURN_IF_ERROR(
      context->GetAttr("num_passes", &options->num_inner_iterations));
  if (options->num_inner_iterations > kMaxPasses) {
    return InvalidArgument("num_passes = ", options->num_inner_iterations,
                           " is more than the limit of ", kMaxPasses,
                           " passes per call");
  }
  TF_RETURN_IF_ERROR(context->GetAttr("compute_objective", compute_objective));
  if (is_multiclass) {
    int num_classes;
    TF_RETURN_IF_ERROR(ReadNumClasses(context, loss_type, true, &num_classes));
    if (options->order == VisitOrder::kAdaptive ||
        (options->order == VisitOrder::kShrinking &&
         multiclass_type != MulticlassLossType::kMulticlassHinge)) {
      return ::tensorflow::errors::Unimplemented(
          "visit_order '", order, "' is not available for ", loss_type,
          " (use 'permutation', 'uniform' or 'cyclic')");
    }
    *multiclass = MakeMulticlassLoss(multiclass_type, num_classes, step);
    options->loss = nullptr;
    return absl::OkStatus();
  }
  if (multiclass != nullptr) {
    int num_classes;
    TF_RETURN_IF_ERROR(ReadNumClasses(context, loss_type, false, &num_classes));
  }
  *loss = MakeLossUpdater(type, gamma);
  options->loss = loss->get();
  return absl::OkStatus();
}

// Writes the [4] objective output (NaN when not computed).
inline void WriteObjective(const ObjectiveParts* parts,
                           ::tensorflow::Tensor* objective) {
  auto out = objective->flat<double>();
  if (parts == nullptr) {
    for (int k = 0; k < 4; ++k) out(k) = std::nan("");
    return;
  }
  out(0) = parts->primal_loss;
  out(1) = parts->dual_loss;
  out(2) = parts->l2_norm_sq;
  out(3) = parts->l1_norm;
}

// The state inputs of an epoch call: weights and duals vectors, a scalar
// seed.
inline ::tensorflow::Status CheckEpochState(const ::tensorflow::Tensor& weights,
                                            const ::tensorflow::Tensor& duals,
                                            const ::tensorflow::Tensor& seed) {
  TF_RETURN_IF_ERROR(CheckRank(weights, 1, "weights"));
  TF_RETURN_IF_ERROR(CheckRank(duals, 1, "duals"));
  if (seed.dims() != 0) {
    return ::tensorflow::errors::InvalidArgument(
        "seed must be a scalar, got shape ", seed.shape().DebugString());
  }
  return absl::OkStatus();
}

// Allocates an epoch call's outputs (weights and duals shaped like the
// inputs, the [4] objective) and copies the input weights and duals into
// the first two (the duals only with `copy_duals`), where the solve
// updates them.
inline ::tensorflow::Status AllocateEpochOutputs(
    ::tensorflow::OpKernelContext* context, const ::tensorflow::Tensor& weights,
    const ::tensorflow::Tensor& duals, double** w, double** alpha,
    ::tensorflow::Tensor** objective, bool copy_duals = true) {
  ::tensorflow::Tensor* w_out;
  ::tensorflow::Tensor* duals_out;
  TF_RETURN_IF_ERROR(context->allocate_output(0, weights.shape(), &w_out));
  TF_RETURN_IF_ERROR(context->allocate_output(1, duals.shape(), &duals_out));
  TF_RETURN_IF_ERROR(context->allocate_output(
      2, ::tensorflow::TensorShape({4}), objective));
  // Raw buffers: the inputs may alias unaligned numpy memory (DLPack).
  const auto* w_in = reinterpret_cast<const double*>(weights.tensor_data().data());
  const auto* a_in = reinterpret_cast<const double*>(duals.tensor_data().data());
  *w = w_out->flat<double>().data();
  *alpha = duals_out->flat<double>().data();
  std::copy(w_in, w_in + weights.NumElements(), *w);
  if (copy_duals) std::copy(a_in, a_in + duals.NumElements(), *alpha);
  return absl::OkStatus();
}

// `weights[j] = v must be finite` for the first non-finite weight.
inline ::tensorflow::Status CheckFiniteWeights(const double* w, int64_t m) {
  const int64_t j = FirstNonFinite(w, m);
  if (j < m) {
    return ::tensorflow::errors::InvalidArgument("weights[", j, "] = ", w[j],
                                                 " must be finite");
  }
  return absl::OkStatus();
}

// After an epoch: the weights it wrote must be finite, and `dual_error`
// (what is wrong with the duals it wrote: not finite or outside the loss's
// domain) empty. The losses' steps are finite for finite inputs, so this
// only fails when an exact step leaves the double range; the outputs are
// then not returned (the caller keeps its inputs).
inline ::tensorflow::Status CheckEpochResult(const char* loss_name,
                                             const double* w, int64_t m,
                                             const std::string& dual_error) {
  const int64_t j = FirstNonFinite(w, m);
  if (j < m) {
    return ::tensorflow::errors::InvalidArgument(
        loss_name, ": the epoch made weights[", j, "] = ", w[j],
        "; rescale the features or raise l2");
  }
  if (!dual_error.empty()) {
    return ::tensorflow::errors::InvalidArgument(
        loss_name, ": after the epoch, ", dual_error,
        "; rescale the features or raise l2");
  }
  return absl::OkStatus();
}

// InvalidArgument naming `name`[k] and its value for the first non-finite
// v[k].
inline ::tensorflow::Status CheckFinite(const float* v, int64_t n,
                                        const std::string& name) {
  // (FirstNonFinite: 650k floats in ~0.1 ms, against ~0.35 tested one by
  // one.)
  const int64_t k = FirstNonFinite(v, n);
  if (k < n) {
    return ::tensorflow::errors::InvalidArgument(name, "[", k, "] = ", v[k],
                                                 " must be finite");
  }
  return absl::OkStatus();
}

// CheckFinite of a row-major `rows` x `cols` matrix, naming the entry as
// `name`[row, col] (as TfSdca>PackRows names a dense row's): the flat index
// of a [B, d] block read as a row of the batch that was not the bad one.
inline ::tensorflow::Status CheckFiniteMatrix(const float* v, int64_t rows,
                                              int64_t cols,
                                              const std::string& name) {
  const int64_t n = rows * cols;
  const int64_t k = FirstNonFinite(v, n);
  if (k < n) {
    return ::tensorflow::errors::InvalidArgument(
        name, "[", k / cols, ", ", k % cols, "] = ", v[k], " must be finite");
  }
  return absl::OkStatus();
}

// A ParallelFor over the CPU device's worker threads (tasks may queue, so
// not for work that must run concurrently); one task runs inline.
inline ParallelFor DevicePool(::tensorflow::OpKernelContext* context) {
  auto* workers = context->device()->tensorflow_cpu_worker_threads();
  return [workers](int64_t count, const std::function<void(int64_t)>& fn) {
    if (count == 1) return fn(0);
    workers->workers->ParallelFor(
        count, /*cost_per_unit=*/1 << 30, [&fn](int64_t begin, int64_t end) {
          for (int64_t k = begin; k < end; ++k) fn(k);
        });
  };
}

// The step's cancellation as SolverOptions::cancelled, asked before every
// pass: a cancelled step (a Session's RunOptions timeout, an eager
// CancellationManager's start_cancel, a failing peer in a collective) stops
// the solve at the next pass instead of running all of num_passes.
inline void WatchCancellation(::tensorflow::OpKernelContext* context,
                              SolverOptions* options) {
  ::tensorflow::CancellationManager* manager = context->cancellation_manager();
  if (manager == nullptr) return;
  options->cancelled = [manager] { return manager->IsCancelled(); };
}

// After a solve: Cancelled when the step was (the outputs are then
// partial; the input weights and duals were never written).
inline ::tensorflow::Status CancelledStatus(const SolverOptions& options,
                                           const char* op) {
  if (!options.Cancelled()) return absl::OkStatus();
  return ::tensorflow::errors::Cancelled(
      op, " was cancelled between two passes; its inputs are unchanged");
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_

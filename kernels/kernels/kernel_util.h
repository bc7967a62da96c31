// Helpers shared by the kernels of TfSdca>Optimizer and
// TfSdca>ResidentSolve: attribute checks, rank checks, the CPU device's pool.
#ifndef TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_
#define TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_

#include <cmath>
#include <functional>
#include <string>

#include "kernels/core/solver.h"
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

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_KERNEL_UTIL_H_

// Attribute reading shared by the kernels of TfSdca>Optimizer and
// TfSdca>ResidentSolve.
#ifndef TF_SDCA_KERNELS_KERNELS_ATTRS_H_
#define TF_SDCA_KERNELS_KERNELS_ATTRS_H_

#include <cmath>

#include "kernels/core/solver.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/lib/core/errors.h"

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

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_ATTRS_H_

// Reading and validating the data inputs shared by TfSdca>ResidentSolve and
// TfSdca>PackRows: row_ptr, feature_ids, feature_values, dense_features,
// example_weights, example_labels (inputs 0-5 of both ops).
#ifndef TF_SDCA_KERNELS_KERNELS_RESIDENT_INPUTS_H_
#define TF_SDCA_KERNELS_KERNELS_RESIDENT_INPUTS_H_

#include <cstdint>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/resident.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"

namespace tf_sdca {

// The input's buffer. Not Tensor::flat: inputs that alias numpy arrays (by
// DLPack, which InMemorySdca uses to avoid copying the data set every epoch)
// need not have Eigen's alignment; the loops reading them are scalar.
template <typename T>
const T* TensorBuffer(const ::tensorflow::Tensor& t) {
  return reinterpret_cast<const T*>(t.tensor_data().data());
}

// The data set of inputs 0-5, validated: every shape, row_ptr, ids in
// [0, num_sparse_features), finite values and dense features, example
// weights finite and >= 0, labels in the loss's domain (the error names the
// argument, the position and the value). `data` points into the input
// tensors and into `norms` / `labels` (|x_i|^2 and converted labels), which
// must outlive it.
struct ResidentInputs {
  ResidentData data;
  std::vector<double> norms;
  std::vector<double> labels;
};

// Uses the CPU device's threads.
::tensorflow::Status ReadResidentInputs(::tensorflow::OpKernelContext* context,
                                        int64_t num_sparse_features,
                                        const DualLossUpdater& loss,
                                        ResidentInputs* inputs);

// The dense width (columns of input 3), for callers that need it before
// ReadResidentInputs.
inline int64_t DenseWidth(::tensorflow::OpKernelContext* context) {
  const ::tensorflow::Tensor& dense = context->input(3);
  return dense.dims() == 2 ? dense.dim_size(1) : 0;
}

}  // namespace tf_sdca

#endif  // TF_SDCA_KERNELS_KERNELS_RESIDENT_INPUTS_H_

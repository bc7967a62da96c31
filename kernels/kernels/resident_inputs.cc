#include "kernels/kernels/resident_inputs.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/lib/core/errors.h"

namespace tf_sdca {

using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;

Status ReadResidentInputs(::tensorflow::OpKernelContext* context,
                          int64_t num_sparse_features,
                          const DualLossUpdater& loss,
                          ResidentInputs* inputs) {
  const Tensor& row_ptr = context->input(0);
  const Tensor& ids = context->input(1);
  const Tensor& values = context->input(2);
  const Tensor& dense = context->input(3);
  const Tensor& example_weights = context->input(4);
  const Tensor& labels = context->input(5);
  TF_RETURN_IF_ERROR(CheckRank(row_ptr, 1, "row_ptr"));
  TF_RETURN_IF_ERROR(CheckRank(ids, 1, "feature_ids"));
  TF_RETURN_IF_ERROR(CheckRank(values, 1, "feature_values"));
  TF_RETURN_IF_ERROR(CheckRank(dense, 2, "dense_features"));
  TF_RETURN_IF_ERROR(CheckRank(example_weights, 1, "example_weights"));
  TF_RETURN_IF_ERROR(CheckRank(labels, 1, "example_labels"));
  const int64_t n = example_weights.dim_size(0);
  const int64_t d = dense.dim_size(1);
  const int64_t nnz = ids.dim_size(0);
  if (labels.dim_size(0) != n) {
    return InvalidArgument("example_labels has ", labels.dim_size(0),
                           " entries but example_weights has ", n);
  }
  if (dense.dim_size(0) != n && d != 0) {
    return InvalidArgument("dense_features has ", dense.dim_size(0),
                           " rows but example_weights has ", n);
  }
  const bool has_sparse = row_ptr.dim_size(0) > 0;
  if (has_sparse && row_ptr.dim_size(0) != n + 1) {
    return InvalidArgument("row_ptr has ", row_ptr.dim_size(0),
                           " entries; it must have ", n + 1,
                           " (example_weights has ", n,
                           " rows) or 0 (no sparse features)");
  }
  if (!has_sparse && nnz != 0) {
    return InvalidArgument("feature_ids has ", nnz,
                           " entries but row_ptr is empty");
  }
  if (values.dim_size(0) != 0 && values.dim_size(0) != nnz) {
    return InvalidArgument("feature_values has ", values.dim_size(0),
                           " entries; it must have ", nnz,
                           " (one per feature_ids entry) or 0");
  }
  ResidentData& data = inputs->data;
  data.num_examples = n;
  data.num_sparse_features = num_sparse_features;
  data.row_ptr = has_sparse ? TensorBuffer<int64_t>(row_ptr) : nullptr;
  data.ids = TensorBuffer<int32_t>(ids);
  data.values =
      values.dim_size(0) > 0 ? TensorBuffer<float>(values) : nullptr;
  data.dense = TensorBuffer<float>(dense);
  data.dense_dim = d;
  data.example_weights = TensorBuffer<float>(example_weights);
  std::string why;
  if (!ValidateRowPtr(data, nnz, &why)) return InvalidArgument(why);
  // Validation and |x_i|^2 by chunks of rows on the CPU device's threads;
  // the first error in row order is reported.
  auto* workers = context->device()->tensorflow_cpu_worker_threads();
  inputs->norms.resize(n);
  const int64_t chunks = std::max<int64_t>(
      1, std::min<int64_t>(workers->num_threads, n / 16384));
  std::vector<std::string> errors(chunks);
  DevicePool(context)(chunks, [&](int64_t c) {
    PrepareResidentRows(data, n * c / chunks, n * (c + 1) / chunks,
                        inputs->norms.data(), &errors[c]);
  });
  for (const std::string& error : errors) {
    if (!error.empty()) return InvalidArgument(error);
  }
  data.squared_norms = inputs->norms.data();
  const float* s = data.example_weights;
  for (int64_t i = 0; i < n; ++i) {
    if (!(std::isfinite(s[i]) && s[i] >= 0)) {
      return InvalidArgument("example_weights[", i, "] = ", s[i],
                             " must be finite and >= 0");
    }
  }
  inputs->labels.resize(n);
  const float* y = TensorBuffer<float>(labels);
  for (int64_t i = 0; i < n; ++i) {
    if (!loss.ConvertLabel(y[i], &inputs->labels[i], &why)) {
      return InvalidArgument("example_labels[", i, "] = ", y[i], " ", why,
                             " for ", loss.Name());
    }
  }
  data.labels = inputs->labels.data();
  return absl::OkStatus();
}

}  // namespace tf_sdca

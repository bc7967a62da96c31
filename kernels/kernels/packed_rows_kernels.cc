// CPU kernels of TfSdca>PackRows and TfSdca>PackedSolve: the data set is
// validated and packed once (kernels/core/packed_rows.h, PackedRows) into a
// resource that the handle owns; each epoch is then one PackedSolve call
// that validates only the weights and duals.
#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::ResourceBase;
using ::tensorflow::ResourceHandle;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

// The input's buffer. Not Tensor::flat: inputs that alias numpy arrays (by
// DLPack, which InMemorySdca uses so that the data set is copied only into
// the packed records) need not have Eigen's alignment; the loops reading
// them are scalar.
template <typename T>
const T* TensorBuffer(const ::tensorflow::Tensor& t) {
  return reinterpret_cast<const T*>(t.tensor_data().data());
}

// The data set of PackRows' inputs 0-5 (row_ptr, feature_ids,
// feature_values, dense_features, example_weights, example_labels),
// validated: every shape, row_ptr, ids in
// [0, num_sparse_features), finite values and dense features, example
// weights finite and >= 0, labels in the loss's domain (the error names the
// argument, the position and the value). `data` points into the input
// tensors and into `norms` / `labels` (|x_i|^2 and converted labels), which
// must outlive it.
struct DataInputs {
  ResidentData data;
  std::vector<double> norms;
  std::vector<double> labels;
};

// Uses the CPU device's threads.
Status ReadDataInputs(OpKernelContext* context, int64_t num_sparse_features,
                      const DualLossUpdater& loss, DataInputs* inputs) {
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
  // No dense features: [n, 0] or [0, 0].
  if (dense.dim_size(0) != n && !(d == 0 && dense.dim_size(0) == 0)) {
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


// The packed rows and the loss they were validated for. The rows are read
// only after packing, so solves on one handle may run concurrently.
class PackedRowsResource : public ResourceBase {
 public:
  PackedRowsResource(std::string loss_type, float gamma)
      : loss_type_(std::move(loss_type)), gamma_(gamma) {}

  std::string DebugString() const override {
    return "PackedRows(" + std::to_string(rows_.num_examples()) + " rows, " +
           loss_type_ + ", " + std::to_string(rows_.num_threads()) +
           " threads)";
  }
  int64_t MemoryUsed() const override { return rows_.bytes(); }

  PackedRows* rows() { return &rows_; }
  const std::string& loss_type() const { return loss_type_; }
  float gamma() const { return gamma_; }

 private:
  const std::string loss_type_;
  const float gamma_;
  PackedRows rows_;
};

class PackRowsOp : public OpKernel {
 public:
  explicit PackRowsOp(OpKernelConstruction* context) : OpKernel(context) {
    LossType type;
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type_));
    OP_REQUIRES(context, ParseLossType(loss_type_, &type),
                InvalidArgument("unknown loss_type ", loss_type_));
    OP_REQUIRES_OK(context, context->GetAttr("gamma", &gamma_));
    OP_REQUIRES(context, std::isfinite(gamma_) && gamma_ > 0,
                InvalidArgument("gamma = ", gamma_, " must be > 0"));
    OP_REQUIRES_OK(context, context->GetAttr("num_sparse_features",
                                             &num_sparse_features_));
    OP_REQUIRES(context,
                num_sparse_features_ <= std::numeric_limits<int32_t>::max(),
                InvalidArgument("num_sparse_features = ", num_sparse_features_,
                                " is more than 2^31 - 1 (feature ids are "
                                "int32)"));
    OP_REQUIRES_OK(context, context->GetAttr("num_threads", &num_threads_));
    loss_ = MakeLossUpdater(type, gamma_);
  }

  void Compute(OpKernelContext* context) override {
    DataInputs inputs;
    OP_REQUIRES_OK(context, ReadDataInputs(context, num_sparse_features_,
                                           *loss_, &inputs));
    auto* resource = new PackedRowsResource(loss_type_, gamma_);
    // The handle owns the resource: it is freed with the last handle tensor.
    ResourceHandle handle = ResourceHandle::MakeRefCountingHandle(
        resource, context->device()->name());
    std::string error;
    const int threads =
        context->device()->tensorflow_cpu_worker_threads()->num_threads;
    OP_REQUIRES(context,
                resource->rows()->Pack(inputs.data, num_threads_, threads,
                                       DevicePool(context), &error),
                InvalidArgument(error));
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &out));
    out->scalar<ResourceHandle>()() = std::move(handle);
  }

 private:
  std::unique_ptr<DualLossUpdater> loss_;
  std::string loss_type_;
  float gamma_ = 1.0f;
  int64_t num_sparse_features_ = 0;
  int num_threads_ = 1;
};

class PackedSolveOp : public OpKernel {
 public:
  explicit PackedSolveOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, ReadEpochAttrs(context, &options_, &loss_,
                                           &compute_objective_));
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type_));
    OP_REQUIRES_OK(context, context->GetAttr("gamma", &gamma_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& handle = context->input(0);
    const Tensor& weights = context->input(1);
    const Tensor& duals = context->input(2);
    const Tensor& seed = context->input(3);
    OP_REQUIRES(context, handle.dims() == 0,
                InvalidArgument("rows must be a scalar resource handle"));
    auto found =
        handle.scalar<ResourceHandle>()().GetResource<PackedRowsResource>();
    OP_REQUIRES(context, found.ok(),
                InvalidArgument("rows is not a handle made by "
                                "TfSdca>PackRows: ",
                                found.status().message()));
    PackedRowsResource* resource = *found;
    OP_REQUIRES(context,
                resource->loss_type() == loss_type_ &&
                    resource->gamma() == gamma_,
                InvalidArgument("the rows were packed for ",
                                resource->loss_type(), " (gamma ",
                                resource->gamma(), "), not for ", loss_type_,
                                " (gamma ", gamma_, ")"));
    OP_REQUIRES_OK(context, CheckEpochState(weights, duals, seed));
    const PackedRows* rows = resource->rows();
    OP_REQUIRES(context, weights.dim_size(0) == rows->num_slots(),
                InvalidArgument("weights has ", weights.dim_size(0),
                                " entries; the packed rows need ",
                                rows->num_slots(), " (",
                                rows->num_sparse_features(), " sparse + ",
                                rows->dense_dim(), " dense)"));
    OP_REQUIRES(context, duals.dim_size(0) == rows->num_examples(),
                InvalidArgument("duals has ", duals.dim_size(0),
                                " entries but the packed rows are ",
                                rows->num_examples()));
    OP_REQUIRES_OK(context, CheckFiniteWeights(TensorBuffer<double>(weights),
                                               rows->num_slots()));
    std::string error;
    OP_REQUIRES(context,
                rows->CheckDuals(TensorBuffer<double>(duals), *loss_, &error),
                InvalidArgument(error));
    double* w;
    double* alpha;
    Tensor* objective;
    OP_REQUIRES_OK(context, AllocateEpochOutputs(context, weights, duals, &w,
                                                 &alpha, &objective));
    SolverOptions options = options_;
    options.seed = static_cast<uint64_t>(seed.scalar<int64_t>()());
    if (options.num_inner_iterations > 0) {
      rows->Solve(options, w, alpha);
      std::string dual_error;
      rows->CheckDuals(alpha, *loss_, &dual_error);
      OP_REQUIRES_OK(context, CheckEpochResult(loss_->Name(), w,
                                               rows->num_slots(), dual_error));
    }
    if (!compute_objective_) return WriteObjective(nullptr, objective);
    const ObjectiveParts parts = rows->Evaluate(
        options, w, alpha,
        context->device()->tensorflow_cpu_worker_threads()->num_threads,
        DevicePool(context));
    WriteObjective(&parts, objective);
  }

 private:
  std::unique_ptr<DualLossUpdater> loss_;
  SolverOptions options_;
  std::string loss_type_;
  float gamma_ = 1.0f;
  bool compute_objective_ = true;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>PackRows").Device(DEVICE_CPU),
                        PackRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>PackedSolve").Device(DEVICE_CPU),
                        PackedSolveOp);

}  // namespace tf_sdca

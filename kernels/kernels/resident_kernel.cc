// CPU kernel of TfSdca>ResidentSolve: SDCA epochs over data held in memory.
//
// Validates every input (naming the argument, the position and the value),
// converts the labels, computes |x_i|^2, and runs kernels/core/resident.h.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/random.h"
#include "kernels/core/resident.h"
#include "kernels/core/solver.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

// The input's buffer. Not Tensor::flat: inputs that alias numpy arrays (by
// DLPack, which InMemorySdca uses to avoid copying the data set every epoch)
// need not have Eigen's alignment; these loops are scalar and do not care.
template <typename T>
const T* Data(const Tensor& t) {
  return reinterpret_cast<const T*>(t.tensor_data().data());
}

class ResidentSolveOp : public OpKernel {
 public:
  explicit ResidentSolveOp(OpKernelConstruction* context) : OpKernel(context) {
    std::string loss_type, order;
    LossType type;
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type));
    OP_REQUIRES(context, ParseLossType(loss_type, &type),
                InvalidArgument("unknown loss_type ", loss_type));
    OP_REQUIRES_OK(context, context->GetAttr("visit_order", &order));
    OP_REQUIRES(context, ParseVisitOrder(order.c_str(), &options_.order),
                InvalidArgument("unknown visit_order ", order));
    float gamma;
    OP_REQUIRES_OK(context, ReadRegularization(context, &options_, &gamma));
    OP_REQUIRES_OK(context, context->GetAttr("num_passes",
                                             &options_.num_inner_iterations));
    OP_REQUIRES_OK(context, context->GetAttr("num_threads", &num_threads_));
    OP_REQUIRES_OK(context,
                   context->GetAttr("compute_objective", &compute_objective_));
    loss_ = MakeLossUpdater(type, gamma);
    options_.loss = loss_.get();
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& row_ptr = context->input(0);
    const Tensor& ids = context->input(1);
    const Tensor& values = context->input(2);
    const Tensor& dense = context->input(3);
    const Tensor& example_weights = context->input(4);
    const Tensor& labels = context->input(5);
    const Tensor& weights = context->input(6);
    const Tensor& duals = context->input(7);
    const Tensor& seed = context->input(8);
    OP_REQUIRES_OK(context, CheckRank(row_ptr, 1, "row_ptr"));
    OP_REQUIRES_OK(context, CheckRank(ids, 1, "feature_ids"));
    OP_REQUIRES_OK(context, CheckRank(values, 1, "feature_values"));
    OP_REQUIRES_OK(context, CheckRank(dense, 2, "dense_features"));
    OP_REQUIRES_OK(context, CheckRank(example_weights, 1, "example_weights"));
    OP_REQUIRES_OK(context, CheckRank(labels, 1, "example_labels"));
    OP_REQUIRES_OK(context, CheckRank(weights, 1, "weights"));
    OP_REQUIRES_OK(context, CheckRank(duals, 1, "duals"));
    OP_REQUIRES(context, seed.dims() == 0,
                InvalidArgument("seed must be a scalar, got shape ",
                                seed.shape().DebugString()));
    const int64_t n = example_weights.dim_size(0);
    const int64_t d = dense.dim_size(1);
    const int64_t nnz = ids.dim_size(0);
    OP_REQUIRES(context, labels.dim_size(0) == n,
                InvalidArgument("example_labels has ", labels.dim_size(0),
                                " entries but example_weights has ", n));
    OP_REQUIRES(context, duals.dim_size(0) == n,
                InvalidArgument("duals has ", duals.dim_size(0),
                                " entries but example_weights has ", n));
    OP_REQUIRES(context, dense.dim_size(0) == n || (d == 0),
                InvalidArgument("dense_features has ", dense.dim_size(0),
                                " rows but example_weights has ", n));
    const bool has_sparse = row_ptr.dim_size(0) > 0;
    OP_REQUIRES(context, !has_sparse || row_ptr.dim_size(0) == n + 1,
                InvalidArgument("row_ptr has ", row_ptr.dim_size(0),
                                " entries; it must have ", n + 1,
                                " (example_weights has ", n,
                                " rows) or 0 (no sparse features)"));
    OP_REQUIRES(context, has_sparse || nnz == 0,
                InvalidArgument("feature_ids has ", nnz,
                                " entries but row_ptr is empty"));
    OP_REQUIRES(context,
                values.dim_size(0) == 0 || values.dim_size(0) == nnz,
                InvalidArgument("feature_values has ", values.dim_size(0),
                                " entries; it must have ", nnz,
                                " (one per feature_ids entry) or 0"));
    const int64_t m = weights.dim_size(0);
    OP_REQUIRES(context, m >= d,
                InvalidArgument("weights has ", m, " entries, fewer than the ",
                                d, " columns of dense_features"));

    ResidentData data;
    data.num_examples = n;
    data.num_sparse_features = m - d;
    data.row_ptr = has_sparse ? Data<int64_t>(row_ptr) : nullptr;
    data.ids = Data<int32_t>(ids);
    data.values = values.dim_size(0) > 0 ? Data<float>(values)
                                         : nullptr;
    data.dense = Data<float>(dense);
    data.dense_dim = d;
    data.example_weights = Data<float>(example_weights);
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    const ParallelFor pool = DevicePool(context);
    std::string why;
    OP_REQUIRES(context, ValidateRowPtr(data, nnz, &why), InvalidArgument(why));
    // Validation and |x_i|^2 by chunks of rows on the CPU device's threads;
    // the first error in row order is reported.
    std::vector<double> norms(n);
    const int64_t chunks = std::max<int64_t>(
        1, std::min<int64_t>(workers->num_threads, n / 16384));
    std::vector<std::string> errors(chunks);
    pool(chunks, [&](int64_t c) {
      PrepareResidentRows(data, n * c / chunks, n * (c + 1) / chunks,
                          norms.data(), &errors[c]);
    });
    for (const std::string& error : errors) {
      OP_REQUIRES(context, error.empty(), InvalidArgument(error));
    }
    data.squared_norms = norms.data();
    const double* w_in = Data<double>(weights);
    for (int64_t j = 0; j < m; ++j) {
      OP_REQUIRES(context, std::isfinite(w_in[j]),
                  InvalidArgument("weights[", j, "] = ", w_in[j],
                                  " must be finite"));
    }
    const float* s = data.example_weights;
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(context, std::isfinite(s[i]) && s[i] >= 0,
                  InvalidArgument("example_weights[", i, "] = ", s[i],
                                  " must be finite and >= 0"));
    }
    std::vector<double> converted(n);
    const float* y = Data<float>(labels);
    const double* a = Data<double>(duals);
    for (int64_t i = 0; i < n; ++i) {
      OP_REQUIRES(context, loss_->ConvertLabel(y[i], &converted[i], &why),
                  InvalidArgument("example_labels[", i, "] = ", y[i], " ", why,
                                  " for ", loss_->Name()));
      OP_REQUIRES(context,
                  std::isfinite(a[i]) && loss_->DualInDomain(a[i], converted[i]),
                  InvalidArgument("duals[", i, "] = ", a[i],
                                  " is not a valid dual of ", loss_->Name(),
                                  " for example_labels[", i, "] = ", y[i]));
    }
    data.labels = converted.data();

    Tensor* w_out;
    Tensor* duals_out;
    Tensor* objective;
    OP_REQUIRES_OK(context, context->allocate_output(0, weights.shape(), &w_out));
    OP_REQUIRES_OK(context, context->allocate_output(1, duals.shape(), &duals_out));
    OP_REQUIRES_OK(context, context->allocate_output(2, TensorShape({4}),
                                                     &objective));
    double* w = w_out->flat<double>().data();
    double* alpha = duals_out->flat<double>().data();
    std::copy(w_in, w_in + m, w);
    std::copy(a, a + n, alpha);

    SolverOptions options = options_;
    options.seed = static_cast<uint64_t>(seed.scalar<int64_t>()());
    options.num_shards = static_cast<int>(std::max<int64_t>(
        1, std::min<int64_t>(num_threads_, n / 1024)));
    if (options.num_inner_iterations > 0) {
      SolveResident(options, data, w, alpha,
                    StdThreadParallelFor(options.num_shards));
    }
    auto out = objective->flat<double>();
    if (!compute_objective_) {
      for (int k = 0; k < 4; ++k) out(k) = std::nan("");
      return;
    }
    const ObjectiveParts parts = EvaluateResident(
        options, data, w, alpha, workers->num_threads, pool);
    out(0) = parts.primal_loss;
    out(1) = parts.dual_loss;
    out(2) = parts.l2_norm_sq;
    out(3) = parts.l1_norm;
  }

 private:
  std::unique_ptr<DualLossUpdater> loss_;
  SolverOptions options_;
  int num_threads_ = 0;
  bool compute_objective_ = true;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>ResidentSolve").Device(DEVICE_CPU),
                        ResidentSolveOp);

}  // namespace tf_sdca

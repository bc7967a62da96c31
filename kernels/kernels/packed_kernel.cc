// CPU kernels of TfSdca>PackRows and TfSdca>PackedSolve: the data set is
// validated and packed once (kernels/core/resident.h, PackedRows) into a
// resource that the handle owns; each epoch is then one PackedSolve call
// that validates only the weights and duals.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <utility>

#include "kernels/core/loss.h"
#include "kernels/core/resident.h"
#include "kernels/core/solver.h"
#include "kernels/kernels/kernel_util.h"
#include "kernels/kernels/resident_inputs.h"
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
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::errors::InvalidArgument;

namespace {

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
    OP_REQUIRES_OK(context, context->GetAttr("num_threads", &num_threads_));
    loss_ = MakeLossUpdater(type, gamma_);
  }

  void Compute(OpKernelContext* context) override {
    ResidentInputs inputs;
    OP_REQUIRES_OK(context, ReadResidentInputs(context, num_sparse_features_,
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
    OP_REQUIRES(context, options_.order != VisitOrder::kAdaptive,
                InvalidArgument("visit_order 'adaptive' is not supported by "
                                "TfSdca>PackedSolve (use ResidentSolve)"));
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

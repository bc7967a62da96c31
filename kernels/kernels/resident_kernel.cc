// CPU kernel of TfSdca>ResidentSolve: SDCA epochs over data held in memory.
//
// Validates every input (naming the argument, the position and the value;
// resident_inputs.h), and runs kernels/core/resident.h.
#include <algorithm>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/core/loss.h"
#include "kernels/core/random.h"
#include "kernels/core/resident.h"
#include "kernels/core/solver.h"
#include "kernels/kernels/kernel_util.h"
#include "kernels/kernels/resident_inputs.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::Tensor;
using ::tensorflow::errors::InvalidArgument;

namespace {

class ResidentSolveOp : public OpKernel {
 public:
  explicit ResidentSolveOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, ReadEpochAttrs(context, &options_, &loss_,
                                           &compute_objective_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& weights = context->input(6);
    const Tensor& duals = context->input(7);
    const Tensor& seed = context->input(8);
    OP_REQUIRES_OK(context, CheckEpochState(weights, duals, seed));
    const int64_t m = weights.dim_size(0);
    const int64_t d = DenseWidth(context);
    OP_REQUIRES(context, m >= d,
                InvalidArgument("weights has ", m, " entries, fewer than the ",
                                d, " columns of dense_features"));
    ResidentInputs inputs;
    OP_REQUIRES_OK(context, ReadResidentInputs(context, m - d, *loss_, &inputs));
    const ResidentData& data = inputs.data;
    const int64_t n = data.num_examples;
    OP_REQUIRES(context, duals.dim_size(0) == n,
                InvalidArgument("duals has ", duals.dim_size(0),
                                " entries but example_weights has ", n));
    const double* w_in = TensorBuffer<double>(weights);
    OP_REQUIRES_OK(context, CheckFiniteWeights(w_in, m));
    const float* raw_labels = TensorBuffer<float>(context->input(5));
    // The first dual of `a` that is not finite or outside the loss's domain,
    // described; "" when there is none. For the input and after the epoch.
    auto invalid_dual = [&](const double* a) {
      const int64_t i = FirstInvalidDual(a, inputs.labels.data(), n, *loss_);
      if (i < 0) return std::string();
      std::ostringstream out;
      out << "duals[" << i << "] = " << a[i] << " is not a valid dual of "
          << loss_->Name() << " for example_labels[" << i
          << "] = " << raw_labels[i];
      return out.str();
    };
    const std::string input_error = invalid_dual(TensorBuffer<double>(duals));
    OP_REQUIRES(context, input_error.empty(), InvalidArgument(input_error));
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    const ParallelFor pool = DevicePool(context);

    double* w;
    double* alpha;
    Tensor* objective;
    OP_REQUIRES_OK(context, AllocateEpochOutputs(context, weights, duals, &w,
                                                 &alpha, &objective));

    SolverOptions options = options_;
    options.seed = static_cast<uint64_t>(seed.scalar<int64_t>()());
    if (options.num_inner_iterations > 0) {
      SolveResident(options, data, w, alpha);
      OP_REQUIRES_OK(context, CheckEpochResult(loss_->Name(), w, m,
                                               invalid_dual(alpha)));
    }
    if (!compute_objective_) return WriteObjective(nullptr, objective);
    const ObjectiveParts parts = EvaluateResident(
        options, data, w, alpha, workers->num_threads, pool);
    WriteObjective(&parts, objective);
  }

 private:
  std::unique_ptr<DualLossUpdater> loss_;
  SolverOptions options_;
  bool compute_objective_ = true;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>ResidentSolve").Device(DEVICE_CPU),
                        ResidentSolveOp);

}  // namespace tf_sdca

// CPU kernels of TfSdca>PackRows, TfSdca>NewPackedRows, TfSdca>AppendRows
// and TfSdca>PackedSolve: the data set is validated and packed once
// (kernels/core/packed_rows.h, PackedRows) into a resource that the handle
// owns, in one call (PackRows) or chunk by chunk (NewPackedRows, then
// AppendRows); each epoch is then one PackedSolve call that validates only
// the weights and duals. TfSdca>AsdcaSolve (accelerated mini-batch SDCA,
// kernels/core/asdca.h) solves the same packed rows.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "kernels/core/asdca.h"
#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/solver_options.h"
#include "kernels/kernels/kernel_util.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/resource_base.h"
#include "tensorflow/core/framework/resource_handle.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/mutex.h"

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

// The data set of the six inputs from `first` on (row_ptr, feature_ids,
// feature_values, dense_features, example_weights, example_labels: PackRows'
// and AppendRows'), validated: every shape, row_ptr, ids in
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

// Uses the CPU device's threads. `Loss`: DualLossUpdater or MulticlassLoss
// (their ConvertLabel and Name).
template <class Loss>
Status ReadDataInputs(OpKernelContext* context, int first,
                      int64_t num_sparse_features, const Loss& loss,
                      DataInputs* inputs) {
  const Tensor& row_ptr = context->input(first);
  const Tensor& ids = context->input(first + 1);
  const Tensor& values = context->input(first + 2);
  const Tensor& dense = context->input(first + 3);
  const Tensor& example_weights = context->input(first + 4);
  const Tensor& labels = context->input(first + 5);
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


// The packed rows and the loss they were validated for. Rows are appended
// under the mutex until complete; after that they are only read, so solves
// on one handle may run concurrently.
class PackedRowsResource : public ResourceBase {
 public:
  // A binary or regression loss (`multiclass` null), or a multiclass one
  // (its labels are class ids).
  PackedRowsResource(std::string loss_type, float gamma, LossType type,
                     std::unique_ptr<MulticlassLoss> multiclass)
      : loss_type_(std::move(loss_type)),
        gamma_(gamma),
        loss_(multiclass ? nullptr : MakeLossUpdater(type, gamma)),
        multiclass_(std::move(multiclass)) {}

  std::string DebugString() const override {
    return "PackedRows(" + std::to_string(rows_.num_examples()) + " rows, " +
           loss_type_ + ", " + std::to_string(rows_.num_threads()) +
           " threads)";
  }
  int64_t MemoryUsed() const override { return rows_.bytes(); }

  // Reserves `shape` (before the handle is shared: no lock needed).
  Status Reserve(const PackedRows::Shape& shape, int num_threads) {
    std::string error;
    if (!rows_.Reserve(shape, num_threads, &error)) {
      return InvalidArgument(error);
    }
    return absl::OkStatus();
  }
  // Validates the six data inputs from `first` on and appends their rows;
  // `first_row_in_errors` says where errors name positions from (only
  // AppendRows: PackRows' inputs are all the rows). *appended: the rows
  // appended so far.
  Status Append(OpKernelContext* context, int first, bool first_row_in_errors,
                int64_t* appended) {
    ::tensorflow::mutex_lock lock(mu_);
    const int64_t first_row = rows_.num_appended();
    Status status = AppendLocked(context, first);
    if (!status.ok() && first_row_in_errors) {
      return InvalidArgument("in the rows appended at row ", first_row,
                             " (positions count from there): ",
                             status.message());
    }
    *appended = rows_.num_appended();
    return status;
  }
  // The rows for solving, or an error if not all were appended.
  Status Complete(const PackedRows** rows) {
    ::tensorflow::mutex_lock lock(mu_);
    if (!rows_.complete()) {
      return InvalidArgument("rows holds ", rows_.num_appended(), " of the ",
                             rows_.num_examples(),
                             " rows reserved: append the rest "
                             "(TfSdca>AppendRows) before solving");
    }
    *rows = &rows_;
    return absl::OkStatus();
  }

  const std::string& loss_type() const { return loss_type_; }
  float gamma() const { return gamma_; }
  int num_threads() const { return rows_.num_threads(); }  // set at Reserve
  int num_classes() const {
    return multiclass_ ? multiclass_->num_classes() : 1;
  }

 private:
  Status AppendLocked(OpKernelContext* context, int first)
      TF_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    DataInputs inputs;
    if (multiclass_) {
      TF_RETURN_IF_ERROR(ReadDataInputs(
          context, first, rows_.num_sparse_features(), *multiclass_, &inputs));
    } else {
      TF_RETURN_IF_ERROR(ReadDataInputs(
          context, first, rows_.num_sparse_features(), *loss_, &inputs));
    }
    std::string error;
    if (!rows_.Append(
            inputs.data,
            context->device()->tensorflow_cpu_worker_threads()->num_threads,
            DevicePool(context), &error)) {
      return InvalidArgument(error);
    }
    return absl::OkStatus();
  }

  const std::string loss_type_;
  const float gamma_;
  const std::unique_ptr<DualLossUpdater> loss_;
  const std::unique_ptr<MulticlassLoss> multiclass_;
  ::tensorflow::mutex mu_;
  PackedRows rows_;
};

// The loss_type, gamma and num_threads attributes of the ops that make
// packed rows, checked.
struct PackAttrs {
  std::string loss_type;
  LossType type = LossType::kLogistic;
  bool multiclass = false;
  MulticlassLossType multiclass_type = MulticlassLossType::kSoftmax;
  int num_classes = 1;
  float gamma = 1.0f;
  int64_t num_sparse_features = 0;
  int num_threads = 1;

  Status Read(OpKernelConstruction* context) {
    TF_RETURN_IF_ERROR(context->GetAttr("loss_type", &loss_type));
    multiclass = ParseMulticlassLossType(loss_type, &multiclass_type);
    if (!multiclass && !ParseLossType(loss_type, &type)) {
      return InvalidArgument("unknown loss_type ", loss_type);
    }
    TF_RETURN_IF_ERROR(
        ReadNumClasses(context, loss_type, multiclass, &num_classes));
    TF_RETURN_IF_ERROR(context->GetAttr("gamma", &gamma));
    if (!(std::isfinite(gamma) && gamma > 0)) {
      return InvalidArgument("gamma = ", gamma, " must be > 0");
    }
    TF_RETURN_IF_ERROR(
        context->GetAttr("num_sparse_features", &num_sparse_features));
    if (num_sparse_features > std::numeric_limits<int32_t>::max()) {
      return InvalidArgument("num_sparse_features = ", num_sparse_features,
                             " is more than 2^31 - 1 (feature ids are "
                             "int32)");
    }
    TF_RETURN_IF_ERROR(context->GetAttr("num_threads", &num_threads));
    return absl::OkStatus();
  }

  // A new resource and the handle that owns it (freed with the last handle
  // tensor), written to output 0.
  Status NewResource(OpKernelContext* context,
                     PackedRowsResource** resource) const {
    *resource = new PackedRowsResource(
        loss_type, gamma, type,
        multiclass ? MakeMulticlassLoss(multiclass_type, num_classes)
                   : nullptr);
    ResourceHandle handle = ResourceHandle::MakeRefCountingHandle(
        *resource, context->device()->name());
    Tensor* out;
    TF_RETURN_IF_ERROR(context->allocate_output(0, TensorShape({}), &out));
    out->scalar<ResourceHandle>()() = std::move(handle);
    return absl::OkStatus();
  }
};

// Output 1 of PackRows: for each row norm_rows[j] (input 6) the sum of
// its sparse entries' squared values (1 for an entry without a value),
// added in the entries' order from 0 in double, each entry on its own (a
// repeated id counts once per entry, where the records' |x_i|^2 sums its
// values first). These are the bits of tf_sdca.engine.row_norms' sparse
// part (scipy's CSR product adds each row so), which the default visiting
// order reads: read here from the inputs just validated, instead of from
// a second pass in numpy (on 2,000 text rows ~0.3 ms of a ~8 ms fit).
Status SparseRowNorms(OpKernelContext* context) {
  const Tensor& norm_rows = context->input(6);  // (rank 1: checked first)
  const int64_t n = context->input(4).dim_size(0);
  const int64_t m = norm_rows.dim_size(0);
  const int64_t* rows = TensorBuffer<int64_t>(norm_rows);
  for (int64_t j = 0; j < m; ++j) {
    if (rows[j] < 0 || rows[j] >= n) {
      return InvalidArgument("norm_rows[", j, "] = ", rows[j],
                             " is outside [0, ", n, ") (the rows)");
    }
  }
  Tensor* out;
  TF_RETURN_IF_ERROR(context->allocate_output(1, TensorShape({m}), &out));
  double* norms = out->flat<double>().data();
  const Tensor& row_ptr = context->input(0);
  const Tensor& values = context->input(2);
  const int64_t* ptr =
      row_ptr.dim_size(0) > 0 ? TensorBuffer<int64_t>(row_ptr) : nullptr;
  const float* v =
      values.dim_size(0) > 0 ? TensorBuffer<float>(values) : nullptr;
  for (int64_t j = 0; j < m; ++j) {
    double sum = 0.0;
    if (ptr != nullptr) {
      const int64_t begin = ptr[rows[j]], end = ptr[rows[j] + 1];
      if (v == nullptr) {
        sum = static_cast<double>(end - begin);
      } else {
        for (int64_t k = begin; k < end; ++k) {
          sum += static_cast<double>(v[k]) * v[k];  // (exact: 48 bits)
        }
      }
    }
    norms[j] = sum;
  }
  return absl::OkStatus();
}

class PackRowsOp : public OpKernel {
 public:
  explicit PackRowsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, attrs_.Read(context));
  }

  void Compute(OpKernelContext* context) override {
    // The shape read from the inputs; Append checks them whole.
    const Tensor& row_ptr = context->input(0);
    const Tensor& ids = context->input(1);
    const Tensor& values = context->input(2);
    const Tensor& dense = context->input(3);
    const Tensor& example_weights = context->input(4);
    OP_REQUIRES_OK(context, CheckRank(dense, 2, "dense_features"));
    OP_REQUIRES_OK(context, CheckRank(example_weights, 1, "example_weights"));
    OP_REQUIRES_OK(context, CheckRank(context->input(6), 1, "norm_rows"));
    PackedRows::Shape shape;
    shape.num_examples = example_weights.dim_size(0);
    shape.num_sparse_features = attrs_.num_sparse_features;
    shape.num_ids = row_ptr.NumElements() > 0 ? ids.NumElements() : 0;
    shape.dense_dim = dense.dim_size(1);
    shape.has_values = values.NumElements() > 0;
    PackedRowsResource* resource;
    OP_REQUIRES_OK(context, attrs_.NewResource(context, &resource));
    OP_REQUIRES_OK(context, resource->Reserve(shape, attrs_.num_threads));
    int64_t appended;
    OP_REQUIRES_OK(context, resource->Append(context, 0, false, &appended));
    // (After Append: the rows' inputs are valid.)
    OP_REQUIRES_OK(context, SparseRowNorms(context));
  }

 private:
  PackAttrs attrs_;
};

class NewPackedRowsOp : public OpKernel {
 public:
  explicit NewPackedRowsOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, attrs_.Read(context));
    OP_REQUIRES_OK(context, context->GetAttr("has_values", &has_values_));
  }

  void Compute(OpKernelContext* context) override {
    static const char* const kNames[] = {"num_examples", "num_ids",
                                         "dense_dim"};
    int64_t sizes[3];
    for (int k = 0; k < 3; ++k) {
      const Tensor& t = context->input(k);
      OP_REQUIRES_OK(context, CheckRank(t, 0, kNames[k]));
      sizes[k] = t.scalar<int64_t>()();
      OP_REQUIRES(context, sizes[k] >= 0,
                  InvalidArgument(kNames[k], " = ", sizes[k],
                                  " must be >= 0"));
    }
    PackedRows::Shape shape;
    shape.num_examples = sizes[0];
    shape.num_ids = sizes[1];
    OP_REQUIRES(context, shape.num_examples != 0 || shape.num_ids <= 0,
                InvalidArgument("num_examples = 0 rows cannot hold num_ids = ",
                                shape.num_ids, " sparse entries"));
    shape.dense_dim = sizes[2];
    shape.num_sparse_features = attrs_.num_sparse_features;
    shape.has_values = has_values_;
    PackedRowsResource* resource;
    OP_REQUIRES_OK(context, attrs_.NewResource(context, &resource));
    OP_REQUIRES_OK(context, resource->Reserve(shape, attrs_.num_threads));
  }

 private:
  PackAttrs attrs_;
  bool has_values_ = false;
};

// The resource of a handle made by PackRows or NewPackedRows (input 0;
// the handle tensor keeps it alive while the op runs).
Status LookupRows(OpKernelContext* context, PackedRowsResource** out) {
  const Tensor& handle = context->input(0);
  if (handle.dims() != 0) {
    return InvalidArgument("rows must be a scalar resource handle");
  }
  auto found =
      handle.scalar<ResourceHandle>()().GetResource<PackedRowsResource>();
  if (!found.ok()) {
    return InvalidArgument(
        "rows is not a handle made by TfSdca>PackRows or "
        "TfSdca>NewPackedRows: ",
        found.status().message());
  }
  *out = *found;
  return absl::OkStatus();
}

class AppendRowsOp : public OpKernel {
 public:
  explicit AppendRowsOp(OpKernelConstruction* context) : OpKernel(context) {}

  void Compute(OpKernelContext* context) override {
    PackedRowsResource* resource;
    OP_REQUIRES_OK(context, LookupRows(context, &resource));
    int64_t appended;
    OP_REQUIRES_OK(context, resource->Append(context, 1, true, &appended));
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, TensorShape({}), &out));
    out->scalar<int64_t>()() = appended;
  }
};

// Whether TfSdca>PackedEpochs evaluates an epoch's objective beside the
// next epoch's training (ahead) or in turn, by what this call's epochs
// cost: the results are the same either way, the time is not. Ahead saves
// up to the evaluation's time per epoch where a core is free, but costs a
// copy of the point, a hand-off between threads (~20-40 us on the
// project's VM) and an undone epoch at each extrapolation restart; on a
// machine whose cores are all busy the two threads share one core's time
// and an epoch ahead took longer than one in turn (2,000 text-like rows:
// Crammer-Singer 1.7-2.0 ms against 1.55, the binary hinge's passes twice
// as long beside an evaluation). So the first evaluated epoch of a call
// runs in turn; ahead follows where its evaluation took at least
// kMinEvaluation; an epoch ahead that cost more than the last one in turn
// (passes and evaluation) sends the next kBackOff in turn, and every
// kRefresh epochs ahead one runs in turn to measure again. The counts
// carry from one call to the next (Carry: a fit's calls on one kernel),
// the costs are measured again in each.
class AheadChoice {
 public:
  static constexpr double kMinEvaluation = 50e-6;
  static constexpr int kBackOff = 8;
  static constexpr int kRefresh = 16;

  // A choice for a new call, with the counts of `last` (at least its
  // first evaluated epoch in turn, to measure).
  static AheadChoice Carry(const AheadChoice& last) {
    AheadChoice next;
    next.in_turn_left_ = std::max(1, last.in_turn_left_);
    next.ahead_ = last.ahead_;
    return next;
  }

  // Whether the next evaluated epoch goes ahead.
  bool Next() const {
    return in_turn_left_ == 0 && evaluation_ >= kMinEvaluation;
  }
  // An epoch evaluated in turn: its passes' and its evaluation's seconds.
  void InTurn(double passes, double evaluation) {
    in_turn_ = passes + evaluation;
    evaluation_ = evaluation;
    if (in_turn_left_ > 0) --in_turn_left_;
    ahead_ = 0;
  }
  // An epoch's evaluation beside the next one's passes (and an undone
  // epoch run again): their seconds from the copy of the point on.
  void Ahead(double seconds) {
    if (seconds > in_turn_) {
      in_turn_left_ = kBackOff;
    } else if (++ahead_ >= kRefresh) {
      in_turn_left_ = 1;
    }
  }

 private:
  double in_turn_ = 0.0;
  double evaluation_ = 0.0;
  int in_turn_left_ = 1;
  int ahead_ = 0;
};

// Runs `evaluate` on one of the CPU device's threads while `train` runs
// here, or here after `train` where no thread had taken it up by then: on
// a machine whose cores are busy the task can wait a scheduler slice for a
// core (~5 ms seen on the project's VM, against a 0.5 ms evaluation), and
// the caller would wait with it. Whichever thread claims the task first
// runs it; the task left in the pool, run later, finds it claimed and
// returns without touching `evaluate` (gone by then).
template <class Evaluate, class Train>
void EvaluateBeside(OpKernelContext* context, const Evaluate& evaluate,
                    const Train& train) {
  struct Claim {
    std::atomic<bool> taken{false};
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
  };
  auto claim = std::make_shared<Claim>();
  // (The task holds `claim` alive; `evaluate` it calls only after winning
  // the claim, which the caller then waits on.)
  context->device()->tensorflow_cpu_worker_threads()->workers->Schedule(
      [claim, &evaluate] {
        if (claim->taken.exchange(true)) return;
        evaluate();
        std::lock_guard<std::mutex> lock(claim->mutex);
        claim->done = true;
        claim->done_cv.notify_one();
      });
  train();
  if (!claim->taken.exchange(true)) {
    evaluate();
    return;
  }
  std::unique_lock<std::mutex> lock(claim->mutex);
  claim->done_cv.wait(lock, [&] { return claim->done; });
}

class PackedSolveOp : public OpKernel {
 public:
  explicit PackedSolveOp(OpKernelConstruction* context)
      : OpKernel(context),
        epochs_(context->def().op() == "TfSdca>PackedEpochs") {
    OP_REQUIRES_OK(context, ReadEpochAttrs(context, &options_, &loss_,
                                           &compute_objective_, &multiclass_));
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type_));
    OP_REQUIRES_OK(context, context->GetAttr("gamma", &gamma_));
    OP_REQUIRES_OK(context, context->GetAttr("num_parts", &options_.num_parts));
    OP_REQUIRES_OK(context, context->GetAttr("part", &options_.part));
    OP_REQUIRES_OK(context,
                   context->GetAttr("objective_threads", &objective_threads_));
    if (epochs_) {
      OP_REQUIRES_OK(context, context->GetAttr("train_ahead", &train_ahead_));
    }
    OP_REQUIRES(context, options_.part < options_.num_parts,
                InvalidArgument("part = ", options_.part,
                                " is not below num_parts = ",
                                options_.num_parts));
    OP_REQUIRES(context,
                options_.num_parts == 1 ||
                    (options_.order != VisitOrder::kAdaptive &&
                     options_.order != VisitOrder::kShrinking),
                InvalidArgument("num_parts = ", options_.num_parts,
                                " cuts a pass's visiting order into parts; "
                                "the 'adaptive' and 'shrinking' orders have "
                                "none (use 'permutation' or 'cyclic')"));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& weights = context->input(1);
    const Tensor& duals = context->input(2);
    const Tensor& seed = context->input(3);
    PackedRowsResource* resource;
    OP_REQUIRES_OK(context, LookupRows(context, &resource));
    OP_REQUIRES(context,
                options_.num_parts == 1 || resource->num_threads() == 1,
                InvalidArgument("num_parts = ", options_.num_parts,
                                " needs rows packed for one thread, not ",
                                resource->num_threads()));
    const int num_classes = multiclass_ ? multiclass_->num_classes() : 1;
    OP_REQUIRES(context,
                resource->loss_type() == loss_type_ &&
                    resource->gamma() == gamma_ &&
                    resource->num_classes() == num_classes,
                resource->num_classes() == 1 && num_classes == 1
                    ? InvalidArgument("the rows were packed for ",
                                      resource->loss_type(), " (gamma ",
                                      resource->gamma(), "), not for ",
                                      loss_type_, " (gamma ", gamma_, ")")
                    : InvalidArgument("the rows were packed for ",
                                      resource->loss_type(), " (gamma ",
                                      resource->gamma(), ", num_classes ",
                                      resource->num_classes(), "), not for ",
                                      loss_type_, " (gamma ", gamma_,
                                      ", num_classes ", num_classes, ")"));
    OP_REQUIRES_OK(context, CheckEpochState(weights, duals, seed));
    const PackedRows* rows;
    OP_REQUIRES_OK(context, resource->Complete(&rows));
    // Messages in the binary form when there is no class axis.
    const std::string times_classes =
        multiclass_ ? ", times " + std::to_string(num_classes) + " classes"
                    : "";
    OP_REQUIRES(context,
                weights.dim_size(0) == rows->num_slots() * num_classes,
                InvalidArgument("weights has ", weights.dim_size(0),
                                " entries; the packed rows need ",
                                rows->num_slots() * num_classes, " (",
                                rows->num_sparse_features(), " sparse + ",
                                rows->dense_dim(), " dense", times_classes,
                                ")"));
    OP_REQUIRES(context,
                duals.dim_size(0) == rows->num_examples() * num_classes,
                multiclass_
                    ? InvalidArgument("duals has ", duals.dim_size(0),
                                      " entries but the packed rows need ",
                                      rows->num_examples() * num_classes,
                                      " (", rows->num_examples(),
                                      " rows", times_classes, ")")
                    : InvalidArgument("duals has ", duals.dim_size(0),
                                      " entries but the packed rows are ",
                                      rows->num_examples()));
    OP_REQUIRES_OK(context, CheckFiniteWeights(TensorBuffer<double>(weights),
                                               weights.dim_size(0)));
    std::string error;
    OP_REQUIRES(context,
                multiclass_ || rows->CheckDuals(TensorBuffer<double>(duals),
                                                *loss_, &error),
                InvalidArgument(error));
    if (epochs_) return ComputeEpochs(context, *rows, weights, duals, seed);
    if (options_.num_inner_iterations == 0 && !multiclass_) {
      // The objective at the inputs, which are also the outputs: the
      // engine evaluates every epoch's gap so, and a copy of the weights
      // and duals (40 MB on 4M rows) into new memory per call, touched
      // page by page, was work only to hand back what came in. Multiclass
      // duals are checked as they are copied, below.
      context->set_output(0, weights);
      context->set_output(1, duals);
      Tensor* objective;
      OP_REQUIRES_OK(context, context->allocate_output(2, TensorShape({4}),
                                                       &objective));
      if (!compute_objective_) return WriteObjective(nullptr, objective);
      const ObjectiveParts parts =
          Evaluate(options_, *rows, TensorBuffer<double>(weights),
                   TensorBuffer<double>(duals), ObjectiveThreads(context),
                   DevicePool(context));
      return WriteObjective(&parts, objective);
    }
    double* w;
    double* alpha;
    Tensor* objective;
    OP_REQUIRES_OK(context,
                   AllocateEpochOutputs(context, weights, duals, &w, &alpha,
                                        &objective,
                                        /*copy_duals=*/!multiclass_));
    // The [n, K] blocks are checked as they are copied: one sweep.
    OP_REQUIRES(context,
                !multiclass_ ||
                    rows->CopyBlockDuals(TensorBuffer<double>(duals),
                                         *multiclass_, alpha, &error),
                InvalidArgument(error));
    SolverOptions options = options_;
    options.seed = static_cast<uint64_t>(seed.scalar<int64_t>()());
    WatchCancellation(context, &options);
    OP_REQUIRES_OK(context, Passes(options, *rows, w, alpha,
                                   weights.dim_size(0)));
    if (!compute_objective_) return WriteObjective(nullptr, objective);
    const ObjectiveParts parts =
        Evaluate(options, *rows, w, alpha, ObjectiveThreads(context),
                 DevicePool(context));
    WriteObjective(&parts, objective);
  }

 private:
  // TfSdca>PackedEpochs: the epochs `evaluate` lists, epoch e a
  // PackedSolve call with the seed `seed + e` (the engine's epoch_seed of
  // consecutive epochs) and, where `evaluate[e]`, the objective after it;
  // stops after the first evaluated epoch whose relative gap is below
  // `tol` or whose gap is invalid (the engine's objective_and_gap, the same
  // float64 arithmetic, so the same epoch as calls one by one).
  void ComputeEpochs(OpKernelContext* context, const PackedRows& rows,
                     const Tensor& weights, const Tensor& duals,
                     const Tensor& seed) {
    const Tensor& evaluate = context->input(4);
    const Tensor& tol_tensor = context->input(5);
    OP_REQUIRES(context, evaluate.dims() == 1,
                InvalidArgument("evaluate must be a vector, got shape ",
                                evaluate.shape().DebugString()));
    OP_REQUIRES(context, tol_tensor.dims() == 0,
                InvalidArgument("tol must be a scalar, got shape ",
                                tol_tensor.shape().DebugString()));
    const int64_t num_epochs = evaluate.NumElements();
    OP_REQUIRES(context, num_epochs <= kMaxPasses,
                InvalidArgument("evaluate lists ", num_epochs,
                                " epochs, more than the limit of ",
                                kMaxPasses, " per call"));
    const auto flags = evaluate.flat<bool>();
    const double tol = tol_tensor.scalar<double>()();
    // The engine's Extrapolation (heavy ball with restarts), when beta >= 0.
    double beta = context->input(6).scalar<double>()();
    const Tensor& previous_weights = context->input(7);
    const Tensor& previous_duals = context->input(8);
    double last_dual = context->input(9).scalar<double>()();
    bool restart = context->input(10).scalar<bool>()();
    const bool extrapolate = beta >= 0.0;
    bool has_previous = previous_duals.NumElements() > 0;
    // momentum='auto' choosing its beta here (tf_sdca.engine.
    // choose_auto_momentum): [N, floor, full, most, the gaps so far].
    const Tensor& auto_tensor = context->input(11);
    OP_REQUIRES(context, auto_tensor.dims() == 1,
                InvalidArgument("auto_momentum must be a vector, got shape ",
                                auto_tensor.shape().DebugString()));
    const int64_t auto_size = auto_tensor.NumElements();
    const double* auto_rule = TensorBuffer<double>(auto_tensor);
    OP_REQUIRES(
        context,
        auto_size == 0 ||
            (extrapolate && auto_size >= 4 && auto_rule[0] >= 3.0 &&
             auto_rule[0] <= 64.0 && auto_size - 4 < auto_rule[0]),
        InvalidArgument("auto_momentum must be empty or [N, floor, full, "
                        "most, fewer than N gaps] with 3 <= N <= 64 and "
                        "beta >= 0, got ", auto_size, " values"));
    const int64_t auto_epochs =
        auto_size > 0 ? static_cast<int64_t>(auto_rule[0]) : 0;
    std::vector<double> auto_gaps(auto_rule + std::min<int64_t>(auto_size, 4),
                                  auto_rule + auto_size);
    // Whether the beta is still to choose (the epochs meanwhile plain).
    auto choosing = [&]() {
      return static_cast<int64_t>(auto_gaps.size()) < auto_epochs;
    };
    OP_REQUIRES(context,
                !extrapolate || loss_type_ != "poisson_loss",
                InvalidArgument("beta >= 0: extrapolation is not available "
                                "for poisson_loss in TfSdca>PackedEpochs"));
    OP_REQUIRES(context,
                !has_previous ||
                    (previous_weights.NumElements() == weights.NumElements() &&
                     previous_duals.NumElements() == duals.NumElements()),
                InvalidArgument("previous_weights and previous_duals have ",
                                previous_weights.NumElements(), " and ",
                                previous_duals.NumElements(),
                                " entries; weights and duals have ",
                                weights.NumElements(), " and ",
                                duals.NumElements()));
    const int64_t num_weights = weights.NumElements();
    const int64_t num_duals = duals.NumElements();
    std::vector<double> prev_w, prev_a;
    if (extrapolate && has_previous) {
      const double* pw = TensorBuffer<double>(previous_weights);
      const double* pa = TensorBuffer<double>(previous_duals);
      prev_w.assign(pw, pw + num_weights);
      prev_a.assign(pa, pa + num_duals);
    }
    Tensor* w_out;
    Tensor* duals_out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, weights.shape(), &w_out));
    OP_REQUIRES_OK(context,
                   context->allocate_output(1, duals.shape(), &duals_out));
    double* w = w_out->flat<double>().data();
    double* alpha = duals_out->flat<double>().data();
    const double* w_in = TensorBuffer<double>(weights);
    std::copy(w_in, w_in + weights.NumElements(), w);
    std::string error;
    if (multiclass_) {
      OP_REQUIRES(context,
                  rows.CopyBlockDuals(TensorBuffer<double>(duals),
                                      *multiclass_, alpha, &error),
                  InvalidArgument(error));
    } else {
      const double* a_in = TensorBuffer<double>(duals);
      std::copy(a_in, a_in + duals.NumElements(), alpha);
    }
    SolverOptions options = options_;
    WatchCancellation(context, &options);
    const uint64_t first_seed =
        static_cast<uint64_t>(seed.scalar<int64_t>()());
    const double nan = std::numeric_limits<double>::quiet_NaN();
    const double l1 = options.l1, l2 = options.l2;
    std::vector<double> objective, seconds;
    // Where the machine has a core beside the one training, epoch e's
    // objective is evaluated there while epoch e + 1 trains (the pass reads
    // and writes w and alpha in place; the evaluation reads a copy of epoch
    // e's point): about the evaluation's time is saved per epoch (on 2,000
    // text-like rows an evaluation takes nearly as long as the hinge's
    // pass). Epoch e's verdict comes after epoch e + 1 started: where it
    // stops the call (tol reached, an invalid gap), or restarts the
    // extrapolation that epoch e + 1 started without (beta > 0), epoch
    // e + 1 is undone (its point, extrapolation and 'shrinking' marks put
    // back) and, for a restart, run again, so the results are those of the
    // epochs one after another, bit for bit (tests/test_fused_epochs.py).
    // ('always' also where the second thread has no core of its own: the
    // same results, later.)
    const bool always = train_ahead_ == "always";
    const bool ahead =
        num_epochs > 1 && rows.num_threads() == 1 && compute_objective_ &&
        (always ||
         (train_ahead_ == "timed" &&
          context->device()->tensorflow_cpu_worker_threads()->num_threads >=
              2 &&
          std::thread::hardware_concurrency() >= 2));
    // Only a restart changes how an epoch starts (beta = 0 starts where
    // the last epoch ended either way). (Both change where 'auto' chooses
    // its beta in the call.)
    bool restart_matters = extrapolate && beta > 0.0;
    const bool shrinking = options.order == VisitOrder::kShrinking;
    bool clipped =
        beta > 0.0 && loss_type_ == "logistic_loss" && !multiclass_;
    // The point of the epoch evaluated beside the next one (with
    // extrapolation, once the next one started, in prev_w / prev_a, whose
    // old values these then hold for an undo).
    std::vector<double> saved_w, saved_a;
    PackedRows::ShrinkingMarks marks;  // before the epoch trained ahead
    // The start of an epoch (Extrapolation.start_epoch): in place, or with
    // `beside` (w and alpha also in saved_w / saved_a), the copy taken as
    // the next previous point (swapped with the old one, kept for an undo).
    auto start_epoch = [&](bool restart_now, bool beside) {
      if (!extrapolate) return;
      if (!has_previous || restart_now) {
        if (!beside) {
          prev_w.assign(w, w + num_weights);
          prev_a.assign(alpha, alpha + num_duals);
        }
      } else if (clipped) {
        ClippedExtrapolate(rows, beta, l2, alpha, prev_a.data(), num_duals, w,
                           prev_w.data(), num_weights, beside);
      } else {
        const double step = std::min(
            beta,
            0.9 * ExtrapolationLimit(rows, alpha, prev_a.data(), num_duals));
        Extrapolate(step, alpha, prev_a.data(), num_duals, beside);
        Extrapolate(step, w, prev_w.data(), num_weights, beside);
      }
      if (beside) {
        prev_w.swap(saved_w);
        prev_a.swap(saved_a);
      }
      has_previous = true;
    };
    // The restart test on epoch e's dual objective, D = -dual_loss - l2/2
    // |w|^2 (tf_sdca.engine.dual_objective, the same arithmetic), which an
    // epoch with no evaluation of its own gets from EvaluateDual.
    auto dual_objective = [&](const ObjectiveParts& p) {
      return -p.dual_loss - 0.5 * l2 * p.l2_norm_sq;
    };
    auto restart_test = [&](const ObjectiveParts& p) {
      const double dual = dual_objective(p);
      restart = dual < last_dual;
      last_dual = dual;
    };
    // Epoch e's objective parts, recorded; whether the call stops after it
    // (tf_sdca.engine.objective_and_gap and the relative gap, in its order
    // of operations) and, if not (and `test_restart`), the restart due.
    auto record = [&](const ObjectiveParts& p, bool test_restart = true) {
      objective.insert(objective.end(), {p.primal_loss, p.dual_loss,
                                         p.l2_norm_sq, p.l1_norm});
      const double primal =
          p.primal_loss + 0.5 * l2 * p.l2_norm_sq + l1 * p.l1_norm;
      double gap =
          p.primal_loss + p.dual_loss + l2 * p.l2_norm_sq + l1 * p.l1_norm;
      const double scale = std::fabs(p.primal_loss) + std::fabs(p.dual_loss) +
                           l2 * p.l2_norm_sq + l1 * p.l1_norm;
      if (!(std::isfinite(primal) && std::isfinite(gap) &&
            gap >= -1e-9 * scale)) {
        return true;  // the engine raises at this epoch
      }
      gap = std::max(gap, 0.0);
      if (test_restart) restart_test(p);
      const double relative = gap / std::max(std::fabs(primal), 1e-300);
      if (choosing()) {
        // (auto_contraction and choose_auto_momentum's arithmetic.)
        auto_gaps.push_back(relative);
        if (!choosing()) {
          const double first = auto_gaps[auto_epochs - 3];
          const double rho =
              first > 0.0
                  ? std::sqrt(std::max(auto_gaps[auto_epochs - 1], 0.0) /
                              first)
                  : 0.0;
          const double share =
              (rho - auto_rule[1]) / (auto_rule[2] - auto_rule[1]);
          beta = auto_rule[3] * std::min(std::max(share, 0.0), 1.0);
          restart_matters = beta > 0.0;
          clipped =
              beta > 0.0 && loss_type_ == "logistic_loss" && !multiclass_;
        }
      }
      return relative < tol;
    };
    // With tol > 0 an epoch `evaluate` does not list is tested against tol
    // too, lazily: its dual objective D_e (O(n + d), a multiclass loss's
    // O(n K + d K): dual_parts) is read, the next epoch trains from a copy
    // of its point, and D_{e+1} is read after it. Weak duality, P(w_e) >=
    // D_{e+1},
    // bounds epoch e's relative gap (P(w_e) - D_e) / P(w_e) from below by
    // 1 - D_e / D_{e+1} where both are > 0: where that bound is above tol
    // (with room for rounding) epoch e cannot have stopped the call and is
    // not evaluated; else it is, at its saved point, and where it stops
    // the call the next epoch is undone (as for an epoch trained ahead).
    // So the call stops at the epoch evaluating every epoch would, with
    // the same weights and duals, and far from tol evaluates none but the
    // call's last (every one of its epochs does whatever it is). Only where
    // copying the point costs less than an evaluation's gathers (weights
    // and duals at most twice the rows' stored entries times the classes);
    // and tol < 0.25, where the bound's room is sure. (Without a restart
    // test to read them in order, the dual parts are summed faster, for
    // the bound alone: 2,000 text-like rows over 2^15 slots, ~45 -> ~10 us
    // an epoch.)
    const int64_t classes = multiclass_ ? multiclass_->num_classes() : 1;
    const bool lazy =
        compute_objective_ && tol > 0.0 && tol < 0.25 &&
        num_weights + num_duals <=
            2 * (rows.num_entries() * classes + num_duals);
    // The dual parts alone (in order: the bits of a whole evaluation's).
    auto dual_parts = [&](bool in_order) {
      return multiclass_ ? rows.EvaluateBlocksDual(options, *multiclass_, w,
                                                   alpha, in_order)
                         : rows.EvaluateDual(options, w, alpha, in_order);
    };
    auto above_tol = [&](const ObjectiveParts& at, const ObjectiveParts& next) {
      const double d = dual_objective(at), d_next = dual_objective(next);
      return d > 0.0 && d_next > 0.0 &&
             d_next - d > (2.0 * tol + 1e-9) * d_next;
    };
    const ParallelFor inline_for = [](int64_t count,
                                      const std::function<void(int64_t)>& fn) {
      for (int64_t k = 0; k < count; ++k) fn(k);
    };
    // The last epoch's objective not yet evaluated: beside this epoch's
    // passes (kBeside), or lazily after them (kLazy, its dual parts in
    // lazy_parts).
    enum class Pending { kNone, kBeside, kLazy };
    Pending pending = Pending::kNone;
    ObjectiveParts lazy_parts, next_parts;
    bool have_next_parts = false;  // next_parts: this epoch's dual parts
    // Once the bound failed, the dual objective rises too little per epoch
    // to bound the gaps above tol again (the hinge's dual converges well
    // ahead of its primal: 2,000 text-like rows, epoch 11 on, a rise of
    // < 1e-9 against gaps of 1e-6): the call's later epochs are evaluated
    // as listed ones are (beside the next where that is faster), without
    // the copies.
    bool lazy_failed = false;
    AheadChoice choice;
    {
      ::tensorflow::mutex_lock lock(choice_mutex_);
      choice = AheadChoice::Carry(last_choice_);
    }
    auto ahead_from = std::chrono::steady_clock::now();
    using Seconds = std::chrono::duration<double>;
    for (int64_t e = 0; e < num_epochs; ++e) {
      options.seed = first_seed + static_cast<uint64_t>(e);
      const bool had_previous = has_previous;
      const bool beside = pending != Pending::kNone;
      if (beside && shrinking) rows.SaveShrinking(&marks);
      auto start = std::chrono::steady_clock::now();
      // Trained ahead of the last epoch's verdict, as if no restart were
      // due (restarts are the rare epochs whose dual objective fell); after
      // an epoch pending lazily, its restart is known.
      start_epoch(pending == Pending::kBeside ? false : restart, beside);
      Status status;
      auto end = start;
      // The point the last epoch ended at, while it is pending.
      const double* point_w = extrapolate ? prev_w.data() : saved_w.data();
      const double* point_a = extrapolate ? prev_a.data() : saved_a.data();
      // Undone: the point epoch e - 1 ended at, the previous point and the
      // marks as they were before epoch e started.
      auto undo = [&]() {
        std::copy(point_w, point_w + num_weights, w);
        std::copy(point_a, point_a + num_duals, alpha);
        if (extrapolate) {
          prev_w.swap(saved_w);
          prev_a.swap(saved_a);
          has_previous = had_previous;
        }
        if (shrinking) rows.RestoreShrinking(marks);
      };
      if (pending == Pending::kLazy) {
        pending = Pending::kNone;
        status = Passes(options, rows, w, alpha, num_weights);
        end = std::chrono::steady_clock::now();
        if (status.ok()) {
          next_parts = dual_parts(restart_matters);
          have_next_parts = true;
          bool stop = false;
          if (above_tol(lazy_parts, next_parts)) {
            // (The dual parts in order, the restart test's, where it reads
            // them; else summed faster, for the bound alone.)
            objective.insert(objective.end(),
                             {nan, restart_matters ? lazy_parts.dual_loss : nan,
                              restart_matters ? lazy_parts.l2_norm_sq : nan,
                              nan});
          } else {
            stop = record(Evaluate(options, rows, point_w, point_a,
                                   ObjectiveThreads(context),
                                   DevicePool(context)),
                          /*test_restart=*/false);
            lazy_failed = true;
          }
          if (stop) {
            undo();
            break;
          }
        }
      } else if (pending == Pending::kBeside) {
        pending = Pending::kNone;
        ObjectiveParts parts;
        EvaluateBeside(context, [&] {
          parts = Evaluate(options, rows, point_w, point_a, 1, inline_for);
        }, [&] {
          status = Passes(options, rows, w, alpha, num_weights);
          end = std::chrono::steady_clock::now();
        });
        const bool stop = record(parts);
        if (stop || (restart_matters && restart)) {
          undo();
          if (stop) break;
          start = std::chrono::steady_clock::now();
          start_epoch(restart, false);
          status = Passes(options, rows, w, alpha, num_weights);
          end = std::chrono::steady_clock::now();
        }
        choice.Ahead(Seconds(std::chrono::steady_clock::now() - ahead_from)
                         .count());
      } else {
        status = Passes(options, rows, w, alpha, num_weights);
        end = std::chrono::steady_clock::now();
      }
      OP_REQUIRES_OK(context, status);
      seconds.push_back(std::chrono::duration<double>(end - start).count());
      const bool read_parts = have_next_parts;
      have_next_parts = false;
      // tol > 0 is tested on every epoch: evaluated where the lazy test
      // is not run (not `lazy`, after it failed, and a call's last epoch).
      const bool flagged =
          flags(e) ||
          (tol > 0.0 && (!lazy || lazy_failed || e + 1 == num_epochs));
      if (compute_objective_ && !flagged && lazy) {
        lazy_parts = read_parts ? next_parts : dual_parts(restart_matters);
        if (restart_matters) restart_test(lazy_parts);
        saved_w.assign(w, w + num_weights);
        saved_a.assign(alpha, alpha + num_duals);
        pending = Pending::kLazy;
        continue;
      }
      if (compute_objective_ && !flagged && restart_matters) {
        // Not evaluated, but the next epoch's start reads its dual
        // objective: its O(n + d) parts alone, recorded for the engine's
        // extrapolation.
        const ObjectiveParts parts = dual_parts(true);
        restart_test(parts);
        objective.insert(objective.end(), {nan, parts.dual_loss,
                                           parts.l2_norm_sq, nan});
        continue;
      }
      if (!compute_objective_ || !flagged) {
        objective.insert(objective.end(), 4, nan);
        continue;
      }
      // (The epoch whose gap chooses 'auto''s beta is evaluated in turn:
      // the next one starts with that beta.)
      if (ahead && e + 1 < num_epochs && (always || choice.Next()) &&
          !(choosing() &&
            static_cast<int64_t>(auto_gaps.size()) + 1 == auto_epochs)) {
        ahead_from = std::chrono::steady_clock::now();
        saved_w.assign(w, w + num_weights);
        saved_a.assign(alpha, alpha + num_duals);
        pending = Pending::kBeside;
        continue;
      }
      const auto evaluation = std::chrono::steady_clock::now();
      const ObjectiveParts parts =
          Evaluate(options, rows, w, alpha, ObjectiveThreads(context),
                   DevicePool(context));
      choice.InTurn(seconds.back(),
                    Seconds(std::chrono::steady_clock::now() - evaluation)
                        .count());
      if (record(parts)) break;
    }
    {
      ::tensorflow::mutex_lock lock(choice_mutex_);
      last_choice_ = choice;
    }
    // x_prev for the epoch after the last one run (outputs 4 and 5).
    auto output_vector = [context](int index,
                                   const std::vector<double>& values) {
      Tensor* out;
      TF_RETURN_IF_ERROR(context->allocate_output(
          index, TensorShape({static_cast<int64_t>(values.size())}), &out));
      std::copy(values.begin(), values.end(), out->flat<double>().data());
      return absl::OkStatus();
    };
    OP_REQUIRES_OK(context, output_vector(4, prev_w));
    OP_REQUIRES_OK(context, output_vector(5, prev_a));
    Tensor* beta_out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(6, TensorShape({}), &beta_out));
    beta_out->scalar<double>()() = beta;
    const int64_t run = static_cast<int64_t>(seconds.size());
    Tensor* objective_out;
    Tensor* seconds_out;
    OP_REQUIRES_OK(context, context->allocate_output(
                                2, TensorShape({run, 4}), &objective_out));
    OP_REQUIRES_OK(context, context->allocate_output(3, TensorShape({run}),
                                                     &seconds_out));
    std::copy(objective.begin(), objective.end(),
              objective_out->flat<double>().data());
    std::copy(seconds.begin(), seconds.end(),
              seconds_out->flat<double>().data());
  }

  // tf_sdca.losses.extrapolation_limit: the largest step <= 1e300 along
  // alpha - previous keeping every dual in its loss's domain (in its
  // arithmetic: the same bits).
  // How far along `step` a dual at `value` in [low, high] may go: (the
  // bound it heads for - value) / step, infinity for no step. In
  // arithmetic and masks, not branches (the compiler kept `?:` as
  // branches): the steps' signs are as good as random, and the
  // mispredictions made ExtrapolationLimit ~11 ns a dual, on 2,000
  // text-like rows two thirds of an epoch's heavy ball (270 -> 105 us over
  // a fit's 12 extrapolated epochs). The same value: high - low is 1 or 2,
  // so the bound is exact.
  static double RoomAlong(double value, double step, double low,
                          double high) {
    const double bound =
        low + (high - low) * static_cast<double>(step > 0.0);
    const double r = (bound - value) / step;
    const double inf = std::numeric_limits<double>::infinity();
    uint64_t bits, inf_bits;
    std::memcpy(&bits, &r, sizeof(bits));
    std::memcpy(&inf_bits, &inf, sizeof(inf_bits));
    const uint64_t keep = uint64_t{0} - static_cast<uint64_t>(step != 0.0);
    bits = (bits & keep) | (inf_bits & ~keep);
    double room;
    std::memcpy(&room, &bits, sizeof(room));
    return room;
  }

  double ExtrapolationLimit(const PackedRows& rows, const double* alpha,
                            const double* previous, int64_t num_duals) const {
    const std::vector<double>& labels = rows.labels();
    const int64_t num_classes = multiclass_ ? multiclass_->num_classes() : 1;
    const bool sign = loss_type_ == "logistic_loss" ||
                      loss_type_ == "hinge_loss" ||
                      loss_type_ == "smooth_hinge_loss";
    const bool bounded = multiclass_ || sign || loss_type_ == "absolute_loss";
    if (!bounded) return 1e300;
    double room = std::numeric_limits<double>::infinity();
    if (multiclass_) {
      // Row by row, class by class: the same k in the same order, without
      // a division per dual (a twentieth of a digits Crammer-Singer fit).
      for (int64_t i = 0, k = 0; k < num_duals; ++i) {
        const int64_t label = static_cast<int64_t>(labels[i]);
        for (int64_t c = 0; c < num_classes; ++c, ++k) {
          const double value = alpha[k], step = alpha[k] - previous[k];
          const bool is_label = c == label;
          const double low = is_label ? 0.0 : -1.0;
          const double high = is_label ? 1.0 : 0.0;
          const double r = RoomAlong(value, step, low, high);
          room = r < room ? r : room;
        }
      }
      return std::min(1e300, room);
    }
    for (int64_t k = 0; k < num_duals; ++k) {
      double value = alpha[k], step = alpha[k] - previous[k];
      double low = -1.0, high = 1.0;
      if (sign) {
        const double s = 2.0 * static_cast<double>(labels[k] > 0) - 1.0;
        value = value * s;
        step = step * s;
        low = 0.0;
      }
      const double r = RoomAlong(value, step, low, high);
      room = r < room ? r : room;
    }
    return std::min(1e300, room);
  }

  // x <- x + step (x - previous), previous <- the old x (step > 0; else
  // only previous <- x): Extrapolation.start_epoch on one array. With
  // `keep_previous`, previous is left as it was (the caller holds a copy of
  // the old x and takes it as the next previous).
  static void Extrapolate(double step, double* x, double* previous,
                          int64_t size, bool keep_previous = false) {
    for (int64_t k = 0; k < size; ++k) {
      const double old = x[k];
      if (step > 0.0) x[k] = old + step * (old - previous[k]);
      if (!keep_previous) previous[k] = old;
    }
  }

  // The logistic loss's heavy ball (tf_sdca.engine.Extrapolation): every
  // dual moves by beta (alpha - previous), capped at 0.9 of its own room
  // to its domain's bound (dual * y in (0, 1)); the weights move by beta
  // (w - previous_w) and, for each dual the cap cut, by that dual's cut
  // times its row / l2, so that w = (1/l2) sum_i s_i x_i alpha_i still
  // holds. Where no dual is cut these are Extrapolate's bits with step
  // beta. One beta capped for every dual at once (ExtrapolationLimit)
  // made the rows closest to their bounds stop the extrapolation of all
  // (on 1M Criteo-shaped rows 15 epochs to a relative suboptimality of
  // 1e-4 against 17). previous <- the old points, as Extrapolate (with
  // `keep_previous` left as they were).
  static void ClippedExtrapolate(const PackedRows& rows, double beta,
                                 double l2, double* alpha, double* previous,
                                 int64_t num_duals, double* w,
                                 double* previous_w, int64_t num_weights,
                                 bool keep_previous = false) {
    const std::vector<double>& labels = rows.labels();
    std::vector<double> cut;
    for (int64_t k = 0; k < num_duals; ++k) {
      const double old = alpha[k];
      const double change = old - previous[k];
      double next = old + beta * change;
      const double s = labels[k] > 0 ? 1.0 : -1.0;
      const double value = old * s, step = beta * change * s;
      const double room = step > 0 ? 0.9 * (1.0 - value) : 0.9 * value;
      if (std::fabs(step) > room) {
        const double capped = (value + (step > 0 ? room : -room)) * s;
        if (cut.empty()) cut.assign(num_duals, 0.0);
        cut[k] = capped - next;
        next = capped;
      }
      alpha[k] = next;
      if (!keep_previous) previous[k] = old;
    }
    Extrapolate(beta, w, previous_w, num_weights, keep_previous);
    if (!cut.empty()) rows.AddBlockChanges(cut.data(), 1, 1.0 / l2, w);
  }

  // One epoch call's passes from (w, alpha), checked (the error for the
  // caller: the epoch's outputs are then not returned).
  Status Passes(const SolverOptions& options, const PackedRows& rows,
                double* w, double* alpha, int64_t num_weights) const {
    if (options.num_inner_iterations == 0) return absl::OkStatus();
    std::string dual_error;
    if (multiclass_) {
      rows.SolveBlocks(options, *multiclass_, w, alpha, &dual_error);
      TF_RETURN_IF_ERROR(CancelledStatus(options, Name()));
      return CheckEpochResult(multiclass_->Name(), w, num_weights,
                              dual_error);
    }
    rows.Solve(options, w, alpha);
    TF_RETURN_IF_ERROR(CancelledStatus(options, Name()));
    rows.CheckDuals(alpha, *loss_, &dual_error);
    return CheckEpochResult(loss_->Name(), w, rows.num_slots(), dual_error);
  }

  // The objective parts at (w, alpha), summed in `chunks` pieces through
  // `parallel_for` (the same bits for any).
  ObjectiveParts Evaluate(const SolverOptions& options, const PackedRows& rows,
                          const double* w, const double* alpha,
                          int64_t chunks,
                          const ParallelFor& parallel_for) const {
    if (multiclass_) {
      return rows.EvaluateBlocks(options, *multiclass_, w, alpha, chunks,
                                 parallel_for);
    }
    return rows.Evaluate(options, w, alpha, chunks, parallel_for);
  }

  const char* Name() const {
    return epochs_ ? "TfSdca>PackedEpochs" : "TfSdca>PackedSolve";
  }

  // The threads (chunks) that evaluate the objective: `objective_threads`,
  // or the device's (0).
  int64_t ObjectiveThreads(OpKernelContext* context) const {
    return objective_threads_ > 0
               ? objective_threads_
               : context->device()->tensorflow_cpu_worker_threads()
                     ->num_threads;
  }

  std::unique_ptr<DualLossUpdater> loss_;
  std::unique_ptr<MulticlassLoss> multiclass_;  // or a multiclass loss
  SolverOptions options_;
  std::string loss_type_;
  float gamma_ = 1.0f;
  bool compute_objective_ = true;
  int objective_threads_ = 0;
  std::string train_ahead_;  // TfSdca>PackedEpochs' train_ahead
  ::tensorflow::mutex choice_mutex_;
  AheadChoice last_choice_ TF_GUARDED_BY(choice_mutex_);
  bool epochs_ = false;  // TfSdca>PackedEpochs
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>PackRows").Device(DEVICE_CPU),
                        PackRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>NewPackedRows").Device(DEVICE_CPU),
                        NewPackedRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>AppendRows").Device(DEVICE_CPU),
                        AppendRowsOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>PackedSolve").Device(DEVICE_CPU),
                        PackedSolveOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>PackedEpochs").Device(DEVICE_CPU),
                        PackedSolveOp);

namespace {

// TfSdca>AsdcaSolve: ASDCA passes over one-thread packed rows, the
// accelerated iterate an input and an output (kept by the caller between
// epochs).
class AsdcaSolveOp : public OpKernel {
 public:
  explicit AsdcaSolveOp(OpKernelConstruction* context) : OpKernel(context) {
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type_));
    LossType type;
    OP_REQUIRES(context, ParseLossType(loss_type_, &type),
                InvalidArgument("unknown loss_type ", loss_type_));
    float l1, l2;
    OP_REQUIRES_OK(context, context->GetAttr("l1", &l1));
    OP_REQUIRES_OK(context, context->GetAttr("l2", &l2));
    OP_REQUIRES_OK(context, context->GetAttr("gamma", &gamma_));
    OP_REQUIRES(context, std::isfinite(l1) && l1 >= 0,
                InvalidArgument("l1 = ", l1, " must be >= 0"));
    OP_REQUIRES(context, std::isfinite(l2) && l2 > 0,
                InvalidArgument("l2 = ", l2, " must be > 0"));
    OP_REQUIRES(context, std::isfinite(gamma_) && gamma_ > 0,
                InvalidArgument("gamma = ", gamma_, " must be > 0"));
    loss_ = MakeLossUpdater(type, gamma_);
    std::string error;
    OP_REQUIRES(context, AsdcaSupportsLoss(*loss_, &error),
                InvalidArgument(error));
    options_.loss = loss_.get();
    options_.l1 = l1;
    options_.l2 = l2;
    OP_REQUIRES_OK(context, context->GetAttr("num_passes",
                                             &options_.num_inner_iterations));
    OP_REQUIRES(context, options_.num_inner_iterations <= kMaxPasses,
                InvalidArgument("num_passes = ",
                                options_.num_inner_iterations,
                                " is more than the limit of ", kMaxPasses,
                                " passes per call"));
    OP_REQUIRES_OK(context, context->GetAttr("batch_size", &batch_size_));
    float theta;
    OP_REQUIRES_OK(context, context->GetAttr("theta", &theta));
    OP_REQUIRES(context, theta == 0.0f || (theta > 0.0f && theta <= 1.0f),
                InvalidArgument("theta = ", theta,
                                " must be in (0, 1], or 0 for the paper's"));
    theta_ = theta;
    OP_REQUIRES_OK(context,
                   context->GetAttr("compute_objective", &compute_objective_));
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& weights = context->input(1);
    const Tensor& duals = context->input(2);
    const Tensor& iterate = context->input(3);
    const Tensor& seed = context->input(4);
    PackedRowsResource* resource;
    OP_REQUIRES_OK(context, LookupRows(context, &resource));
    OP_REQUIRES(context,
                resource->loss_type() == loss_type_ &&
                    resource->gamma() == gamma_,
                InvalidArgument("the rows were packed for ",
                                resource->loss_type(), " (gamma ",
                                resource->gamma(), "), not for ", loss_type_,
                                " (gamma ", gamma_, ")"));
    OP_REQUIRES_OK(context, CheckEpochState(weights, duals, seed));
    OP_REQUIRES_OK(context, CheckRank(iterate, 1, "iterate"));
    const PackedRows* rows;
    OP_REQUIRES_OK(context, resource->Complete(&rows));
    OP_REQUIRES(context, rows->num_threads() == 1,
                ::tensorflow::errors::Unimplemented(
                    "rows packed for ", rows->num_threads(),
                    " threads: ASDCA solves rows packed with num_threads = "
                    "1"));
    const int64_t slots = rows->num_slots();
    OP_REQUIRES(context, weights.dim_size(0) == slots,
                InvalidArgument("weights has ", weights.dim_size(0),
                                " entries; the packed rows need ", slots, " (",
                                rows->num_sparse_features(), " sparse + ",
                                rows->dense_dim(), " dense)"));
    OP_REQUIRES(context, iterate.dim_size(0) == slots,
                InvalidArgument("iterate has ", iterate.dim_size(0),
                                " entries; the packed rows need ", slots));
    OP_REQUIRES(context, duals.dim_size(0) == rows->num_examples(),
                InvalidArgument("duals has ", duals.dim_size(0),
                                " entries but the packed rows are ",
                                rows->num_examples()));
    OP_REQUIRES_OK(context, CheckFiniteWeights(TensorBuffer<double>(weights),
                                               slots));
    const double* iterate_in = TensorBuffer<double>(iterate);
    const int64_t bad_iterate = FirstNonFinite(iterate_in, slots);
    OP_REQUIRES(context, bad_iterate == slots,
                InvalidArgument("iterate[", bad_iterate, "] = ",
                                iterate_in[bad_iterate], " must be finite"));
    std::string error;
    OP_REQUIRES(context,
                rows->CheckDuals(TensorBuffer<double>(duals), *loss_, &error),
                InvalidArgument(error));
    // Outputs start as copies of the inputs (which may alias unaligned
    // numpy memory: raw buffers), and the passes update them in place.
    Tensor* weights_out;
    Tensor* duals_out;
    Tensor* iterate_out;
    Tensor* objective_out;
    Tensor* theta_out;
    OP_REQUIRES_OK(context, context->allocate_output(0, weights.shape(),
                                                     &weights_out));
    OP_REQUIRES_OK(context,
                   context->allocate_output(1, duals.shape(), &duals_out));
    OP_REQUIRES_OK(context, context->allocate_output(2, iterate.shape(),
                                                     &iterate_out));
    OP_REQUIRES_OK(context, context->allocate_output(
                                3, TensorShape({4}), &objective_out));
    OP_REQUIRES_OK(context,
                   context->allocate_output(4, TensorShape({}), &theta_out));
    double* w = weights_out->flat<double>().data();
    double* alpha = duals_out->flat<double>().data();
    const double* weights_in = TensorBuffer<double>(weights);
    const double* duals_in = TensorBuffer<double>(duals);
    std::copy(weights_in, weights_in + slots, w);
    std::copy(duals_in, duals_in + rows->num_examples(), alpha);
    double* w_iterate = iterate_out->flat<double>().data();
    std::copy(iterate_in, iterate_in + slots, w_iterate);
    const double theta =
        theta_ > 0.0
            ? theta_
            : AsdcaTheoryTheta(*rows, *loss_, options_.l2, batch_size_);
    theta_out->scalar<double>()() = theta;
    SolverOptions options = options_;
    options.seed = static_cast<uint64_t>(seed.scalar<int64_t>()());
    WatchCancellation(context, &options);
    if (options.num_inner_iterations > 0) {
      SolveAsdca(*rows, options, batch_size_, theta, w, alpha, w_iterate);
      OP_REQUIRES_OK(context, CancelledStatus(options, "TfSdca>AsdcaSolve"));
      std::string dual_error;
      rows->CheckDuals(alpha, *loss_, &dual_error);
      if (dual_error.empty()) {
        const int64_t j = std::min(FirstNonFinite(w, slots),
                                   FirstNonFinite(w_iterate, slots));
        if (j < slots) {
          dual_error = "the weights or the iterate are not finite at slot " +
                       std::to_string(j);
        }
      }
      OP_REQUIRES(context, dual_error.empty(),
                  InvalidArgument(loss_->Name(), ": ASDCA with theta = ",
                                  theta, " diverged (", dual_error,
                                  "); lower theta (0: the paper's), raise l2 "
                                  "or rescale the features"));
    }
    if (!compute_objective_) return WriteObjective(nullptr, objective_out);
    const ObjectiveParts parts = rows->Evaluate(
        options, w, alpha,
        context->device()->tensorflow_cpu_worker_threads()->num_threads,
        DevicePool(context));
    WriteObjective(&parts, objective_out);
  }

 private:
  std::unique_ptr<DualLossUpdater> loss_;
  SolverOptions options_;
  std::string loss_type_;
  float gamma_ = 1.0f;
  int64_t batch_size_ = 1;
  double theta_ = 0.0;
  bool compute_objective_ = true;
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>AsdcaSolve").Device(DEVICE_CPU),
                        AsdcaSolveOp);

}  // namespace tf_sdca

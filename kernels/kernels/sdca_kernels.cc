// CPU kernels of TfSdca>Optimizer, TfSdca>ShrinkL1 and TfSdca>Fprint.
//
// The optimizer kernel validates every input (reporting the argument, the
// position and the bad value), turns the batch into one compact CSR layout
// over "slots" (positions in the batch's concatenated weights: sparse
// groups, then dense ones), and solves it as every door does: packed into
// one record per row and solved by the passes of kernels/core/packed_rows.h
// on one thread, with the batch's weights as the table. Its float32 state
// is only the wire format: the solve runs on float64 duals and weights, the
// new duals rounded to float32 (so that the weights stay w(alpha) of the
// duals stored).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/core/fingerprint.h"
#include "kernels/core/loss.h"
#include "kernels/core/multiclass_loss.h"
#include "kernels/core/packed_rows.h"
#include "kernels/core/random.h"
#include "kernels/core/solver_options.h"
#include "kernels/kernels/kernel_util.h"
#include "kernels/kernels/feature_index_map.h"
#include "tensorflow/core/framework/op_kernel.h"
#include "tensorflow/core/framework/tensor.h"
#include "tensorflow/core/lib/core/errors.h"
#include "tensorflow/core/platform/logging.h"
#include "tensorflow/core/platform/threadpool.h"

namespace tf_sdca {

using ::tensorflow::DEVICE_CPU;
using ::tensorflow::OpInputList;
using ::tensorflow::OpKernel;
using ::tensorflow::OpKernelConstruction;
using ::tensorflow::OpKernelContext;
using ::tensorflow::OpOutputList;
using ::tensorflow::Status;
using ::tensorflow::Tensor;
using ::tensorflow::TensorShape;
using ::tensorflow::TensorShapeUtils;
using ::tensorflow::errors::InvalidArgument;

namespace {

// The batch as the rows to pack (ResidentData), owning its arrays: slots
// are the ids of a weight table made of the batch's sparse weights (group
// after group) and then its dense ones.
struct Batch {
  int64_t num_examples = 0;
  int64_t num_sparse_slots = 0;
  int64_t num_slots = 0;
  std::vector<int64_t> row_ptr;
  std::vector<int32_t> slots;
  std::vector<float> values;  // empty when every value is 1.0
  // [num_examples, dense_dim]: the dense groups side by side (the input
  // tensor itself when there is one group, else dense_copy).
  const float* dense = nullptr;
  int64_t dense_dim = 0;
  std::vector<float> dense_copy;
  std::vector<int64_t> dense_offsets;  // first slot of each dense group
  std::vector<double> labels;
  std::vector<double> squared_norms;
  std::vector<double> w0;
  std::vector<int64_t> sparse_offsets;  // first slot of each sparse group
};

class OptimizerOp : public OpKernel {
 public:
  explicit OptimizerOp(OpKernelConstruction* context) : OpKernel(context) {
    std::string loss_type, order;
    OP_REQUIRES_OK(context, context->GetAttr("loss_type", &loss_type));
    MulticlassLossType multiclass_type;
    const bool multiclass =
        ParseMulticlassLossType(loss_type, &multiclass_type);
    OP_REQUIRES(context, multiclass || ParseLossType(loss_type, &loss_type_),
                InvalidArgument("unknown loss_type ", loss_type));
    OP_REQUIRES_OK(context, ReadNumClasses(context, loss_type, multiclass,
                                           &num_classes_));
    bool adaptive;
    OP_REQUIRES_OK(context, context->GetAttr("adaptive", &adaptive));
    OP_REQUIRES_OK(context, context->GetAttr("visit_order", &order));
    OP_REQUIRES(context, ParseVisitOrder(order.c_str(), &options_.order),
                InvalidArgument("unknown visit_order ", order));
    if (adaptive) options_.order = VisitOrder::kAdaptive;
    OP_REQUIRES_OK(context,
                   context->GetAttr("num_sparse_features", &num_sparse_));
    OP_REQUIRES_OK(context, context->GetAttr("num_sparse_features_with_values",
                                             &num_with_values_));
    OP_REQUIRES_OK(context, context->GetAttr("num_dense_features", &num_dense_));
    OP_REQUIRES_OK(context,
                   context->GetAttr("dense_arguments", &dense_arguments_));
    OP_REQUIRES(context,
                dense_arguments_.empty() ||
                    static_cast<int>(dense_arguments_.size()) == num_dense_,
                InvalidArgument("dense_arguments has ",
                                dense_arguments_.size(),
                                " entries: give none, or num_dense_features "
                                "= ",
                                num_dense_));
    OP_REQUIRES(context, num_with_values_ <= num_sparse_,
                InvalidArgument("num_sparse_features_with_values (",
                                num_with_values_,
                                ") must be <= num_sparse_features (",
                                num_sparse_, ")"));
    float gamma;
    OP_REQUIRES_OK(context, ReadRegularization(context, &options_, &gamma));
    OP_REQUIRES_OK(context, context->GetAttr("num_inner_iterations",
                                             &options_.num_inner_iterations));
    OP_REQUIRES(context, options_.num_inner_iterations <= kMaxPasses,
                InvalidArgument("num_inner_iterations = ",
                                options_.num_inner_iterations,
                                " is more than the limit of ", kMaxPasses,
                                " passes per call"));
    int64_t seed;
    OP_REQUIRES_OK(context, context->GetAttr("seed", &seed));
    seed_ = static_cast<uint64_t>(seed);
    OP_REQUIRES_OK(context, context->GetAttr("num_threads", &num_threads_));
    HingeStep step;
    OP_REQUIRES_OK(context,
                   ReadHingeStep(context, loss_type,
                                 multiclass && multiclass_type ==
                                     MulticlassLossType::kMulticlassHinge,
                                 &step));
    if (multiclass) {
      OP_REQUIRES(context,
                  options_.order != VisitOrder::kAdaptive &&
                      (options_.order != VisitOrder::kShrinking ||
                       multiclass_type == MulticlassLossType::kMulticlassHinge),
                  ::tensorflow::errors::Unimplemented(
                      "visit_order '", order, "'", adaptive ? " (adaptive)" : "",
                      " is not available for ", loss_type));
      multiclass_ = MakeMulticlassLoss(multiclass_type, num_classes_, step);
      return;
    }
    loss_ = MakeLossUpdater(loss_type_, gamma);
    options_.loss = loss_.get();
  }

  // The loss's name, for messages.
  const char* LossName() const {
    return multiclass_ ? multiclass_->Name() : loss_->Name();
  }

  void Compute(OpKernelContext* context) override {
    // Phase timings for `TF_CPP_MAX_VLOG_LEVEL=1` (where the time goes).
    using Clock = std::chrono::steady_clock;
    const auto t0 = Clock::now();
    auto ms = [](Clock::time_point a, Clock::time_point b) {
      return std::chrono::duration<double, std::milli>(b - a).count();
    };
    auto* workers = context->device()->tensorflow_cpu_worker_threads();
    const ParallelFor parallel_for = DevicePool(context);
    const int64_t threads =
        num_threads_ > 0 ? num_threads_ : workers->num_threads;
    Batch batch;
    std::vector<double> duals;
    OP_REQUIRES_OK(context, ReadExamples(context, &batch, &duals));
    const Tensor& call_index_tensor = context->input(StateIndex() + 1);
    OP_REQUIRES(context, TensorShapeUtils::IsScalar(call_index_tensor.shape()),
                InvalidArgument("call_index must be a scalar, got shape ",
                                call_index_tensor.shape().DebugString()));
    const int64_t call_index = call_index_tensor.scalar<int64_t>()();
    const auto t1 = Clock::now();
    OP_REQUIRES_OK(context, ReadSparse(context, threads, parallel_for, &batch));
    const auto t2 = Clock::now();
    OP_REQUIRES_OK(context, ReadDense(context, &batch));
    ComputeSquaredNorms(&batch);

    const int64_t n = batch.num_examples;
    const float* example_weights =
        context->input(WeightsIndex()).flat<float>().data();
    ResidentData data;
    data.num_examples = n;
    data.num_sparse_features = batch.num_sparse_slots;
    data.row_ptr = batch.row_ptr.data();
    data.ids = batch.slots.data();
    data.values = batch.values.empty() ? nullptr : batch.values.data();
    data.dense = batch.dense;
    data.dense_dim = batch.dense_dim;
    data.labels = batch.labels.data();
    data.example_weights = example_weights;
    data.squared_norms = batch.squared_norms.data();

    SolverOptions options = options_;
    // The order is a function of the attr seed, the caller's call index and
    // the incoming duals, so that successive calls on the same batch visit
    // it differently while the op stays a deterministic function of its
    // inputs. The digest alone repeats whenever the duals do: every batch
    // of a first epoch (all zero), or duals that stopped changing.
    uint64_t digest = static_cast<uint64_t>(n);
    for (const double d : duals) {
      uint64_t bits;
      std::memcpy(&bits, &d, sizeof(bits));
      digest = MixSeed(digest, bits);
    }
    options.seed = MixSeed(seed_, digest, static_cast<uint64_t>(call_index));

    const auto t3 = Clock::now();
    // The records go into this kernel's arena, reused from call to call
    // (a concurrent call of the same kernel packs into memory of its own).
    std::unique_lock<std::mutex> arena_lock(arena_mutex_, std::try_to_lock);
    PackedRows rows;
    if (arena_lock.owns_lock()) rows.set_arena(&arena_);
    std::string error;
    OP_REQUIRES(context, rows.Pack(data, 1, threads, parallel_for, &error),
                InvalidArgument(error));
    const auto t4 = Clock::now();
    std::vector<double> w = batch.w0;
    std::vector<double> primal(n), dual_loss(n);
    WatchCancellation(context, &options);
    std::vector<double> delta(batch.w0.size());
    if (multiclass_) {
      SolveBlocksToFloat32(rows, options, batch.labels, &w, &duals, &delta);
      OP_REQUIRES_OK(context, CancelledStatus(options, "TfSdca>Optimizer"));
      rows.BlockRowLosses(options, *multiclass_, w.data(), duals.data(),
                          primal.data(), dual_loss.data());
    } else {
      StateRecord record;
      record.primal_losses = primal.data();
      record.dual_losses = dual_loss.data();
      record.parallel_for = parallel_for;
      record.chunks = std::min<int64_t>(threads, n / 4096);
      rows.Solve(options, w.data(), duals.data(), &record);
      OP_REQUIRES_OK(context, CancelledStatus(options, "TfSdca>Optimizer"));
      OP_REQUIRES(context, record.error.empty(),
                  InvalidArgument(record.error));
      for (size_t j = 0; j < delta.size(); ++j) delta[j] = w[j] - batch.w0[j];
    }
    const auto t5 = Clock::now();
    // Every step was finite, but the float32 outputs may still overflow
    // (weights near the float32 limit): never return a non-finite weight.
    auto check_weight = [&](const char* name, int g, int64_t k,
                            int64_t slot) -> Status {
      const double w = batch.w0[slot], d = delta[slot];
      if (std::isfinite(static_cast<float>(d)) &&
          std::isfinite(static_cast<float>(w + d))) {
        return absl::OkStatus();
      }
      return InvalidArgument(LossName(), ": ", name, "[", g, "][", k,
                             "] = ", w, " would change by ", d,
                             ", beyond float32; rescale the features or "
                             "raise l2");
    };
    // Outputs.
    const int64_t K = num_classes_;
    Tensor* state_out;
    OP_REQUIRES_OK(context, context->allocate_output(
                                0, TensorShape({n, K + 3}), &state_out));
    auto out = state_out->matrix<float>();
    for (int64_t i = 0; i < n; ++i) {
      // Exact: rounded by the step (binary) or by SolveBlocksToFloat32.
      for (int64_t k = 0; k < K; ++k) {
        out(i, k) = static_cast<float>(duals[i * K + k]);
      }
      out(i, K) = static_cast<float>(primal[i]);
      out(i, K + 1) = static_cast<float>(dual_loss[i]);
      out(i, K + 2) = example_weights[i];
      // A loss beyond float32 (extreme features or weights): an error
      // naming the example, never an inf in the state.
      OP_REQUIRES(context,
                  std::isfinite(out(i, K)) && std::isfinite(out(i, K + 1)),
                  InvalidArgument(LossName(), ": example ", i,
                                  "'s primal loss ", primal[i],
                                  " and dual loss ", dual_loss[i],
                                  " (weighted) do not fit the float32 "
                                  "example_state_data; rescale the features "
                                  "or example_weights, or raise l2"));
    }
    OpOutputList sparse_out;
    OP_REQUIRES_OK(context,
                   context->output_list("out_delta_sparse_weights", &sparse_out));
    for (int g = 0; g < num_sparse_; ++g) {
      const Tensor& w = context->input(SparseWeightsIndex() + g);
      Tensor* d;
      OP_REQUIRES_OK(context, sparse_out.allocate(g, w.shape(), &d));
      float* dst = d->flat<float>().data();
      // Entries of the weight table (K per slot for a multiclass loss).
      const int64_t first = batch.sparse_offsets[g] * num_classes_;
      for (int64_t k = 0; k < w.NumElements(); ++k) {
        OP_REQUIRES_OK(context,
                       check_weight("sparse_weights", g, k, first + k));
        dst[k] = delta[first + k];
      }
    }
    OpOutputList dense_out;
    OP_REQUIRES_OK(context,
                   context->output_list("out_delta_dense_weights", &dense_out));
    for (int g = 0; g < num_dense_; ++g) {
      const Tensor& w = context->input(DenseWeightsIndex() + g);
      Tensor* d;
      OP_REQUIRES_OK(context, dense_out.allocate(g, w.shape(), &d));
      float* dst = d->flat<float>().data();
      const int64_t first = batch.dense_offsets[g] * num_classes_;
      for (int64_t k = 0; k < w.NumElements(); ++k) {
        OP_REQUIRES_OK(context, check_weight("dense_weights", g, k, first + k));
        dst[k] = delta[first + k];
      }
    }
    VLOG(1) << "TfSdca>Optimizer " << n << " examples, "
            << batch.slots.size() << " sparse entries, " << batch.num_slots
            << " slots; ms: examples " << ms(t0, t1) << ", sparse "
            << ms(t1, t2) << ", dense+norms " << ms(t2, t3) << ", pack "
            << ms(t3, t4) << ", solve " << ms(t4, t5) << ", outputs "
            << ms(t5, Clock::now());
  }

 private:
  // Input positions, in registration order.
  int ExampleIndicesIndex() const { return 0; }
  int FeatureIndicesIndex() const { return num_sparse_; }
  int FeatureValuesIndex() const { return 2 * num_sparse_; }
  int DenseFeaturesIndex() const { return 2 * num_sparse_ + num_with_values_; }
  int WeightsIndex() const { return DenseFeaturesIndex() + num_dense_; }
  int LabelsIndex() const { return WeightsIndex() + 1; }
  int SparseIndicesIndex() const { return LabelsIndex() + 1; }
  int SparseWeightsIndex() const { return SparseIndicesIndex() + num_sparse_; }
  int DenseWeightsIndex() const { return SparseWeightsIndex() + num_sparse_; }
  int StateIndex() const { return DenseWeightsIndex() + num_dense_; }

  // Example weights, labels and the incoming duals.
  Status ReadExamples(OpKernelContext* context, Batch* batch,
                      std::vector<double>* duals) const {
    const Tensor& weights = context->input(WeightsIndex());
    const Tensor& labels = context->input(LabelsIndex());
    const Tensor& state = context->input(StateIndex());
    TF_RETURN_IF_ERROR(CheckRank(weights, 1, "example_weights"));
    TF_RETURN_IF_ERROR(CheckRank(labels, 1, "example_labels"));
    const int64_t n = weights.dim_size(0);
    if (labels.dim_size(0) != n) {
      return InvalidArgument("example_labels has ", labels.dim_size(0),
                             " entries but example_weights has ", n);
    }
    const int64_t K = num_classes_;
    if (state.dims() != 2 || state.dim_size(0) != n ||
        state.dim_size(1) != K + 3) {
      return InvalidArgument("example_state_data must have shape [", n, ", ",
                             K + 3, "]",
                             multiclass_ ? " (num_classes duals, primal "
                                           "loss, dual loss, weight)"
                                         : "",
                             ", got ", state.shape().DebugString());
    }
    batch->num_examples = n;
    const float* w = weights.flat<float>().data();
    for (int64_t i = 0; i < n; ++i) {
      if (!(std::isfinite(w[i]) && w[i] >= 0)) {
        return InvalidArgument("example_weights[", i, "] = ", w[i],
                               " must be finite and >= 0");
      }
    }
    const float* y = labels.flat<float>().data();
    batch->labels.resize(n);
    std::string why;
    for (int64_t i = 0; i < n; ++i) {
      if (!(multiclass_ ? multiclass_->ConvertLabel(y[i], &batch->labels[i],
                                                    &why)
                        : loss_->ConvertLabel(y[i], &batch->labels[i],
                                              &why))) {
        return InvalidArgument("example_labels[", i, "] = ", y[i], " ", why,
                               " for ", LossName());
      }
    }
    auto s = state.matrix<float>();
    if (multiclass_) return ReadDualBlocks(s, y, *batch, duals);
    duals->resize(n);
    for (int64_t i = 0; i < n; ++i) {
      const float d = s(i, 0);
      if (!std::isfinite(d) || !loss_->DualInDomain(d, batch->labels[i])) {
        return InvalidArgument("example_state_data[", i, ", 0] = ", d,
                               " is not a valid dual of ", loss_->Name(),
                               " for example_labels[", i, "] = ", y[i]);
      }
      (*duals)[i] = d;
      // The other columns (losses, weight) are outputs; their inputs are
      // not read, but a non-finite one means corrupted state.
      for (int c = 1; c < 4; ++c) {
        if (!std::isfinite(s(i, c))) {
          return InvalidArgument("example_state_data[", i, ", ", c, "] = ",
                                 s(i, c), " is not finite");
        }
      }
    }
    return absl::OkStatus();
  }

  // Sparse groups -> CSR over slots, duplicates inside an example merged.
  // Mapping ids to slots (one table read per entry) is split into chunks run
  // in parallel; each chunk keeps its first error so that the reported one
  // is the first in input order.
  Status ReadSparse(OpKernelContext* context, int64_t threads,
                    const ParallelFor& parallel_for, Batch* batch) const {
    const int64_t n = batch->num_examples;
    std::vector<std::vector<int32_t>> slots_of(num_sparse_);
    batch->sparse_offsets.assign(num_sparse_ + 1, 0);
    bool any_values = false;
    bool all_sorted = true;
    int64_t total = 0;
    // One group (the common case): its rows' starts are found in the same
    // pass that maps the ids, while its example indices come sorted (the
    // boundaries between rows, as RowStarts in batch_index_kernels.cc),
    // instead of a second pass counting entries per row (1.1 of a 3.7 ms
    // phase on 50k Criteo-shaped rows).
    const bool one_group = num_sparse_ == 1;
    if (one_group) batch->row_ptr.assign(n + 1, 0);
    for (int g = 0; g < num_sparse_; ++g) {
      const std::string tag = "[" + std::to_string(g) + "]";
      const Tensor& ex = context->input(ExampleIndicesIndex() + g);
      const Tensor& ids = context->input(FeatureIndicesIndex() + g);
      const Tensor& sp_idx = context->input(SparseIndicesIndex() + g);
      const Tensor& sp_w = context->input(SparseWeightsIndex() + g);
      TF_RETURN_IF_ERROR(CheckRank(ex, 1, "sparse_example_indices" + tag));
      TF_RETURN_IF_ERROR(CheckRank(ids, 1, "sparse_feature_indices" + tag));
      TF_RETURN_IF_ERROR(CheckRank(sp_idx, 1, "sparse_indices" + tag));
      // [u] weights, or [u, K] for a multiclass loss.
      TF_RETURN_IF_ERROR(
          CheckRank(sp_w, multiclass_ ? 2 : 1, "sparse_weights" + tag));
      if (multiclass_ && sp_w.dim_size(1) != num_classes_) {
        return InvalidArgument("sparse_weights", tag, " has ",
                               sp_w.dim_size(1), " columns, not num_classes = ",
                               num_classes_);
      }
      const int64_t nnz = ex.dim_size(0);
      if (ids.dim_size(0) != nnz) {
        return InvalidArgument("sparse_feature_indices", tag, " has ",
                               ids.dim_size(0),
                               " entries but sparse_example_indices", tag,
                               " has ", nnz);
      }
      if (g < num_with_values_) {
        const Tensor& v = context->input(FeatureValuesIndex() + g);
        TF_RETURN_IF_ERROR(CheckRank(v, 1, "sparse_feature_values" + tag));
        if (v.dim_size(0) != nnz) {
          return InvalidArgument("sparse_feature_values", tag, " has ",
                                 v.dim_size(0),
                                 " entries but sparse_example_indices", tag,
                                 " has ", nnz);
        }
        TF_RETURN_IF_ERROR(CheckFinite(v.flat<float>().data(), nnz,
                                       "sparse_feature_values" + tag));
        any_values = true;
      }
      const int64_t u = sp_idx.dim_size(0);
      if (sp_w.dim_size(0) != u) {
        return InvalidArgument("sparse_weights", tag, " has ",
                               sp_w.dim_size(0), " entries but sparse_indices",
                               tag, " has ", u);
      }
      TF_RETURN_IF_ERROR(CheckFinite(sp_w.flat<float>().data(),
                                     u * num_classes_, "sparse_weights" + tag));
      batch->sparse_offsets[g + 1] = batch->sparse_offsets[g] + u;
      // Slots are the packed records' int32 ids.
      if (batch->sparse_offsets[g + 1] >
          std::numeric_limits<int32_t>::max()) {
        return tensorflow::errors::Unimplemented(
            "more than 2^31 - 1 distinct sparse features in one batch");
      }
      FeatureIndexMap map;
      std::string why;
      if (!map.Build(sp_idx.flat<int64_t>().data(), u, &why)) {
        return InvalidArgument("sparse_indices", tag, why);
      }
      const int64_t* e = ex.flat<int64_t>().data();
      const int64_t* f = ids.flat<int64_t>().data();
      const int32_t offset = static_cast<int32_t>(batch->sparse_offsets[g]);
      std::vector<int32_t>& out = slots_of[g];
      out.resize(nnz);
      const int64_t chunks =
          std::max<int64_t>(1, std::min<int64_t>(threads, nnz / 65536));
      std::vector<Status> errors(chunks);
      std::vector<char> sorted(chunks, 1);
      int64_t* starts = one_group ? batch->row_ptr.data() : nullptr;
      int32_t* const slots = out.data();
      parallel_for(chunks, [&](int64_t c) {
        // The loop reads only locals: with the captures read through the
        // closure (reloaded after every store) this loop took 12.3% of a
        // streaming minimize call's perf samples, 8.5% so (2026-11-29, 50k
        // Criteo-shaped rows, 'auto', eager).
        const int64_t lo = nnz * c / chunks, hi = nnz * (c + 1) / chunks;
        const FeatureIndexMap::Ranked ranked = map.ranked();
        int64_t* const row_starts = starts;
        int32_t* const dst = slots;
        const int32_t first = offset;
        const int64_t rows = n;
        bool in_order = true;
        int64_t prev = lo > 0 ? e[lo - 1] : 0;
        constexpr int64_t kAhead = 16;  // table reads in flight
        for (int64_t k = lo; k < hi; ++k) {
          const int64_t row = e[k], id = f[k];
          if (k + kAhead < hi) {
            if (ranked.words != nullptr) {
              ranked.Prefetch(f[k + kAhead]);
            } else {
              map.Prefetch(f[k + kAhead]);
            }
          }
          if (row < 0 || row >= rows) {
            errors[c] = InvalidArgument("sparse_example_indices", tag, "[", k,
                                        "] = ", row, " is outside [0, ", rows,
                                        ")");
            sorted[c] = in_order;
            return;
          }
          if (row < prev) {
            in_order = false;
          } else if (row_starts != nullptr && row != prev && in_order) {
            // Rows (prev, e[k]] start here. (A chunk writes only while its
            // indices, and the one before it, are in order: no two chunks
            // write one row's start.)
            for (int64_t q = std::max<int64_t>(prev, 0) + 1; q <= row; ++q) {
              row_starts[q] = k;
            }
          }
          prev = row;
          const int64_t pos =
              ranked.words != nullptr ? ranked.Find(id) : map.Find(id);
          if (pos < 0) {
            errors[c] = InvalidArgument(
                "sparse_feature_indices", tag, "[", k, "] = ", id,
                id < 0 ? " must be >= 0" : " is not in sparse_indices" + tag);
            sorted[c] = in_order;
            return;
          }
          dst[k] = first + static_cast<int32_t>(pos);
        }
        sorted[c] = in_order;
      });
      for (const Status& status : errors) TF_RETURN_IF_ERROR(status);
      for (const char ok : sorted) all_sorted = all_sorted && ok;
      total += nnz;
    }
    batch->num_sparse_slots = batch->sparse_offsets[num_sparse_];

    // Rows: entries of one example must be contiguous. One sorted group is
    // already a CSR (its row starts found above); otherwise a counting sort
    // by example.
    if (one_group && all_sorted) {
      const int64_t* e =
          context->input(ExampleIndicesIndex()).flat<int64_t>().data();
      const int64_t last = total > 0 ? e[total - 1] : 0;
      for (int64_t q = last + 1; q <= n; ++q) batch->row_ptr[q] = total;
    } else {
      batch->row_ptr.assign(n + 1, 0);
      for (int g = 0; g < num_sparse_; ++g) {
        const int64_t* e =
            context->input(ExampleIndicesIndex() + g).flat<int64_t>().data();
        for (size_t k = 0; k < slots_of[g].size(); ++k) {
          ++batch->row_ptr[e[k] + 1];
        }
      }
      for (int64_t i = 0; i < n; ++i) {
        batch->row_ptr[i + 1] += batch->row_ptr[i];
      }
    }
    if (num_sparse_ == 1 && all_sorted && !any_values) {
      batch->slots = std::move(slots_of[0]);
    } else {
      batch->slots.resize(total);
      if (any_values) batch->values.resize(total);
      std::vector<int64_t> fill(batch->row_ptr.begin(),
                                batch->row_ptr.end() - 1);
      for (int g = 0; g < num_sparse_; ++g) {
        const int64_t* e =
            context->input(ExampleIndicesIndex() + g).flat<int64_t>().data();
        const float* v =
            g < num_with_values_
                ? context->input(FeatureValuesIndex() + g).flat<float>().data()
                : nullptr;
        for (size_t k = 0; k < slots_of[g].size(); ++k) {
          const int64_t at = fill[e[k]]++;
          batch->slots[at] = slots_of[g][k];
          if (any_values) batch->values[at] = v ? v[k] : 1.0f;
        }
        std::vector<int32_t>().swap(slots_of[g]);
      }
    }
    MergeDuplicates(threads, parallel_for, batch);

    const int64_t K = num_classes_;
    batch->w0.resize(batch->num_sparse_slots * K);
    for (int g = 0; g < num_sparse_; ++g) {
      const float* w =
          context->input(SparseWeightsIndex() + g).flat<float>().data();
      std::copy(w,
                w + (batch->sparse_offsets[g + 1] - batch->sparse_offsets[g]) *
                        K,
                batch->w0.begin() + batch->sparse_offsets[g] * K);
    }
    return absl::OkStatus();
  }

  // A feature id repeated inside one example means the sum of its values:
  // |x|^2 and the updates must see one entry. Detection is one stamp per
  // entry; only rows with a repeat are sorted and merged.
  static void MergeDuplicates(int64_t threads, const ParallelFor& parallel_for,
                              Batch* batch) {
    const int64_t n = batch->num_examples;
    const int64_t chunks =
        std::max<int64_t>(1, std::min<int64_t>(threads, n / 16384));
    std::vector<std::vector<int64_t>> repeated_in(chunks);
    parallel_for(chunks, [&](int64_t c) {
      // stamp[slot] = 1 + the last example (of this chunk) that used it.
      std::vector<uint32_t> stamp(batch->num_sparse_slots, 0);
      for (int64_t i = n * c / chunks; i < n * (c + 1) / chunks; ++i) {
        const uint32_t mark = static_cast<uint32_t>(i + 1);
        for (int64_t k = batch->row_ptr[i]; k < batch->row_ptr[i + 1]; ++k) {
          const int32_t s = batch->slots[k];
          if (stamp[s] == mark) {
            repeated_in[c].push_back(i);
            break;
          }
          stamp[s] = mark;
        }
      }
    });
    std::vector<int64_t> repeated;
    for (const auto& r : repeated_in) repeated.insert(repeated.end(), r.begin(), r.end());
    if (repeated.empty()) return;
    if (batch->values.empty()) batch->values.assign(batch->slots.size(), 1.0f);
    std::vector<std::pair<int32_t, float>> row;
    int64_t write = 0;
    size_t next = 0;
    int64_t start = 0;
    for (int64_t i = 0; i < n; ++i) {
      const int64_t begin = start, end = batch->row_ptr[i + 1];
      start = end;
      batch->row_ptr[i] = write;
      if (next < repeated.size() && repeated[next] == i) {
        ++next;
        row.clear();
        for (int64_t k = begin; k < end; ++k) {
          row.emplace_back(batch->slots[k], batch->values[k]);
        }
        std::sort(row.begin(), row.end(),
                  [](const auto& a, const auto& b) { return a.first < b.first; });
        for (size_t k = 0; k < row.size(); ++k) {
          if (k > 0 && row[k].first == row[k - 1].first) {
            batch->values[write - 1] += row[k].second;
          } else {
            batch->slots[write] = row[k].first;
            batch->values[write] = row[k].second;
            ++write;
          }
        }
      } else {
        for (int64_t k = begin; k < end; ++k, ++write) {
          batch->slots[write] = batch->slots[k];
          batch->values[write] = batch->values[k];
        }
      }
    }
    batch->row_ptr[n] = write;
    batch->slots.resize(write);
    batch->values.resize(write);
  }

  Status ReadDense(OpKernelContext* context, Batch* batch) const {
    const int64_t n = batch->num_examples;
    int64_t offset = batch->num_sparse_slots;
    std::vector<const float*> groups;
    for (int g = 0; g < num_dense_; ++g) {
      const std::string tag = "[" + std::to_string(g) + "]";
      const std::string name = dense_arguments_.empty()
                                   ? "dense_features" + tag
                                   : dense_arguments_[g];
      const Tensor& x = context->input(DenseFeaturesIndex() + g);
      const Tensor& w = context->input(DenseWeightsIndex() + g);
      TF_RETURN_IF_ERROR(CheckRank(x, 2, name));
      if (x.dim_size(0) != n) {
        return InvalidArgument(name, " has ", x.dim_size(0),
                               " rows but example_weights has ", n);
      }
      const int64_t d = x.dim_size(1);
      if (multiclass_ && (w.dims() != 2 || w.dim_size(0) != d ||
                          w.dim_size(1) != num_classes_)) {
        return InvalidArgument("dense_weights", tag, " must have shape [", d,
                               ", ", num_classes_, "] (dense_features", tag,
                               "'s columns, num_classes), got ",
                               w.shape().DebugString());
      }
      if (w.NumElements() != d * num_classes_) {
        return InvalidArgument("dense_weights", tag, " has ", w.NumElements(),
                               " elements but dense_features", tag, " has ", d,
                               " columns",
                               multiclass_ ? " (times num_classes = " +
                                                 std::to_string(num_classes_) +
                                                 ")"
                                           : std::string());
      }
      TF_RETURN_IF_ERROR(CheckFiniteMatrix(x.flat<float>().data(), n, d,
                                           name));
      TF_RETURN_IF_ERROR(CheckFinite(w.flat<float>().data(),
                                     d * num_classes_, "dense_weights" + tag));
      groups.push_back(x.flat<float>().data());
      batch->dense_offsets.push_back(offset);
      const float* wd = w.flat<float>().data();
      batch->w0.insert(batch->w0.end(), wd, wd + d * num_classes_);
      offset += d;
    }
    batch->num_slots = offset;
    const int64_t dim = offset - batch->num_sparse_slots;
    batch->dense_dim = dim;
    if (groups.size() == 1) {
      batch->dense = groups[0];
      return absl::OkStatus();
    }
    // Several groups (or none): side by side in one row-major copy.
    batch->dense_copy.resize(std::max<int64_t>(1, n * dim));
    float* dst = batch->dense_copy.data();
    for (int64_t i = 0; i < n; ++i) {
      for (int g = 0; g < num_dense_; ++g) {
        const int64_t d = (g + 1 < num_dense_ ? batch->dense_offsets[g + 1]
                                              : offset) -
                          batch->dense_offsets[g];
        std::memcpy(dst, groups[g] + i * d, d * sizeof(float));
        dst += d;
      }
    }
    batch->dense = batch->dense_copy.data();
    return absl::OkStatus();
  }

  static void ComputeSquaredNorms(Batch* batch) {
    const int64_t n = batch->num_examples;
    const int64_t dim = batch->dense_dim;
    batch->squared_norms.assign(n, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      double sq = 0.0;
      if (batch->values.empty()) {
        sq = static_cast<double>(batch->row_ptr[i + 1] - batch->row_ptr[i]);
      } else {
        for (int64_t k = batch->row_ptr[i]; k < batch->row_ptr[i + 1]; ++k) {
          sq += static_cast<double>(batch->values[k]) * batch->values[k];
        }
      }
      const float* row = batch->dense + i * dim;
      for (int64_t d = 0; d < dim; ++d) {
        sq += static_cast<double>(row[d]) * row[d];
      }
      batch->squared_norms[i] = sq;
    }
  }

  // A multiclass loss's blocks from the float32 state: every dual but the
  // label's is read as stored, and the label's is their negated sum (the
  // block is e_y - p with p on the simplex, exactly, in float64), which the
  // stored one must match to float32 rounding.
  Status ReadDualBlocks(::tensorflow::TTypes<float>::ConstMatrix s,
                        const float* y, const Batch& batch,
                        std::vector<double>* duals) const {
    const int64_t n = batch.num_examples, K = num_classes_;
    duals->assign(n * K, 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(batch.labels[i]);
      double* block = duals->data() + i * K;
      double others = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        if (!std::isfinite(s(i, k))) {
          return InvalidArgument("example_state_data[", i, ", ", k, "] = ",
                                 s(i, k), " is not finite");
        }
        if (k == label) continue;
        block[k] = s(i, k);
        others += block[k];
      }
      block[label] = -others;
      const bool rounded_sum =
          std::fabs(s(i, label) - block[label]) <=
          1e-6 * std::max(1.0, std::fabs(block[label]));
      if (!rounded_sum || !multiclass_->DualInDomain(block, label)) {
        return InvalidArgument(
            "example_state_data[", i, ", 0:", K, "] is not a valid dual block "
            "of ", LossName(), " for example_labels[", i, "] = ", y[i],
            " (it must be e_y - p, p on the simplex: its entry for the label ",
            "is ", s(i, label), ", the others sum to ", others, ")");
      }
      for (int c = K; c < K + 3; ++c) {
        if (!std::isfinite(s(i, c))) {
          return InvalidArgument("example_state_data[", i, ", ", c, "] = ",
                                 s(i, c), " is not finite");
        }
      }
    }
    return absl::OkStatus();
  }

  // SolveBlocks, then every block rounded to what the float32 state keeps
  // (each non-label dual toward zero, the label's their negated sum: still
  // e_y - p with p on the simplex) and the weights moved by the rounded
  // change only, so that they stay W(alpha) of the duals returned. `w`
  // enters as the batch's weights and leaves as the new ones; *delta is the
  // change.
  void SolveBlocksToFloat32(const PackedRows& rows,
                            const SolverOptions& options,
                            const std::vector<double>& labels,
                            std::vector<double>* w, std::vector<double>* duals,
                            std::vector<double>* delta) const {
    const int64_t n = rows.num_examples(), K = num_classes_;
    std::vector<double> before = *duals;
    std::vector<double> solved_w = *w;
    rows.SolveBlocks(options, *multiclass_, solved_w.data(), duals->data());
    for (int64_t i = 0; i < n; ++i) {
      const int label = static_cast<int>(labels[i]);
      double* block = duals->data() + i * K;
      double others = 0.0;
      for (int64_t k = 0; k < K; ++k) {
        if (k == label) continue;
        float f = static_cast<float>(block[k]);
        if (std::fabs(f) > std::fabs(block[k])) f = std::nextafter(f, 0.0f);
        block[k] = f;
        others += f;
      }
      block[label] = -others;
      for (int64_t k = 0; k < K; ++k) before[i * K + k] = block[k] -
                                                          before[i * K + k];
    }
    std::fill(delta->begin(), delta->end(), 0.0);
    rows.AddBlockChanges(before.data(), K, 1.0 / options.l2, delta->data());
    for (size_t j = 0; j < delta->size(); ++j) (*w)[j] += (*delta)[j];
  }

  LossType loss_type_;
  std::unique_ptr<DualLossUpdater> loss_;
  std::unique_ptr<MulticlassLoss> multiclass_;  // or a multiclass loss
  int num_classes_ = 1;
  SolverOptions options_;
  uint64_t seed_ = 0;
  int num_sparse_ = 0;
  int num_with_values_ = 0;
  int num_dense_ = 0;
  std::vector<std::string> dense_arguments_;
  int num_threads_ = 0;
  // Memory for the packed records of one call, kept for the next.
  std::mutex arena_mutex_;
  RecordArena arena_;
};

class ShrinkL1Op : public OpKernel {
 public:
  explicit ShrinkL1Op(OpKernelConstruction* context) : OpKernel(context) {
    float l1, l2;
    OP_REQUIRES_OK(context, context->GetAttr("l1", &l1));
    OP_REQUIRES_OK(context, context->GetAttr("l2", &l2));
    OP_REQUIRES(context, std::isfinite(l1) && l1 >= 0,
                InvalidArgument("l1 = ", l1, " must be >= 0"));
    OP_REQUIRES(context, std::isfinite(l2) && l2 > 0,
                InvalidArgument("l2 = ", l2, " must be > 0"));
    shrinkage_ = static_cast<double>(l1) / l2;
  }

  void Compute(OpKernelContext* context) override {
    const Tensor& in = context->input(0);
    Tensor* out;
    OP_REQUIRES_OK(context, context->allocate_output(0, in.shape(), &out));
    const float* src = in.flat<float>().data();
    float* dst = out->flat<float>().data();
    for (int64_t k = 0; k < in.NumElements(); ++k) {
      OP_REQUIRES(context, std::isfinite(src[k]),
                  InvalidArgument("weights[", k, "] (flat index) = ", src[k],
                                  " is not finite"));
      dst[k] = static_cast<float>(ShrinkL1(src[k], shrinkage_));
    }
  }

 private:
  double shrinkage_;
};

class FprintOp : public OpKernel {
 public:
  using OpKernel::OpKernel;

  void Compute(OpKernelContext* context) override {
    const Tensor& in = context->input(0);
    OP_REQUIRES_OK(context, CheckRank(in, 1, "example_ids (input)"));
    const int64_t n = in.dim_size(0);
    Tensor* out;
    OP_REQUIRES_OK(context,
                   context->allocate_output(0, TensorShape({n, 2}), &out));
    auto src = in.flat<tensorflow::tstring>();
    auto dst = out->matrix<int64_t>();
    for (int64_t i = 0; i < n; ++i) {
      const Fingerprint128 fp = Fingerprint(src(i).data(), src(i).size());
      dst(i, 0) = static_cast<int64_t>(fp.low);
      dst(i, 1) = static_cast<int64_t>(fp.high);
    }
  }
};

}  // namespace

REGISTER_KERNEL_BUILDER(Name("TfSdca>Optimizer").Device(DEVICE_CPU),
                        OptimizerOp);
REGISTER_KERNEL_BUILDER(Name("TfSdca>ShrinkL1").Device(DEVICE_CPU), ShrinkL1Op);
REGISTER_KERNEL_BUILDER(Name("TfSdca>Fprint").Device(DEVICE_CPU), FprintOp);

}  // namespace tf_sdca

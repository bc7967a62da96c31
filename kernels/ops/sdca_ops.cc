// Registration and shape functions of tf_sdca's ops. Kernels live in
// kernels/kernels/; the solver they call is in kernels/core/.
//
// Names carry the "TfSdca>" prefix: TensorFlow itself registers
// SdcaOptimizer, SdcaOptimizerV2, SdcaShrinkL1 and SdcaFprint.
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

#include <string>

namespace tf_sdca {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

std::string Tag(const char* name, int g) {
  return std::string(name) + "[" + std::to_string(g) + "]";
}

// Merge and WithRank whose errors name the arguments involved.
Status MergeNamed(InferenceContext* c, DimensionHandle a, DimensionHandle b,
                  const std::string& name_a, const std::string& name_b,
                  DimensionHandle* out) {
  Status s = c->Merge(a, b, out);
  if (!s.ok()) {
    return tensorflow::errors::InvalidArgument(
        name_a, " has ", c->DebugString(a), " entries but ", name_b, " has ",
        c->DebugString(b));
  }
  return s;
}

Status RankNamed(InferenceContext* c, int input, int rank,
                 const std::string& name, ShapeHandle* out) {
  Status s = c->WithRank(c->input(input), rank, out);
  if (!s.ok()) {
    return tensorflow::errors::InvalidArgument(
        name, " must have rank ", rank, ", got shape ",
        c->DebugString(c->input(input)));
  }
  return s;
}

// Checks ranks, merges the batch dimension of every per-example input and the
// lengths that must agree, and sets the outputs' shapes.
Status OptimizerShapeFn(InferenceContext* c) {
  int64_t num_sparse, num_with_values, num_dense;
  TF_RETURN_IF_ERROR(c->GetAttr("num_sparse_features", &num_sparse));
  TF_RETURN_IF_ERROR(
      c->GetAttr("num_sparse_features_with_values", &num_with_values));
  TF_RETURN_IF_ERROR(c->GetAttr("num_dense_features", &num_dense));
  int64_t num_classes;
  TF_RETURN_IF_ERROR(c->GetAttr("num_classes", &num_classes));
  const int64_t state_columns = num_classes > 1 ? num_classes + 3 : 4;
  if (num_with_values > num_sparse) {
    return tensorflow::errors::InvalidArgument(
        "num_sparse_features_with_values (", num_with_values,
        ") must be <= num_sparse_features (", num_sparse, ")");
  }
  // Input positions, in registration order.
  const int ex_idx = 0;
  const int feat_idx = ex_idx + num_sparse;
  const int feat_val = feat_idx + num_sparse;
  const int dense_feat = feat_val + num_with_values;
  const int weights = dense_feat + num_dense;
  const int labels = weights + 1;
  const int sp_idx = labels + 1;
  const int sp_w = sp_idx + num_sparse;
  const int dense_w = sp_w + num_sparse;
  const int state = dense_w + num_dense;
  const int call_index = state + 1;

  ShapeHandle vec;
  TF_RETURN_IF_ERROR(RankNamed(c, weights, 1, "example_weights", &vec));
  DimensionHandle batch = c->Dim(vec, 0);
  TF_RETURN_IF_ERROR(RankNamed(c, labels, 1, "example_labels", &vec));
  TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(vec, 0), batch, "example_labels",
                                "example_weights", &batch));
  ShapeHandle state_shape;
  TF_RETURN_IF_ERROR(
      RankNamed(c, state, 2, "example_state_data", &state_shape));
  TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(state_shape, 0), batch,
                                "example_state_data (rows)",
                                "example_weights", &batch));
  DimensionHandle columns;
  if (!c->WithValue(c->Dim(state_shape, 1), state_columns, &columns).ok()) {
    return tensorflow::errors::InvalidArgument(
        "example_state_data must have ", state_columns, " columns, got shape ",
        c->DebugString(state_shape));
  }
  ShapeHandle scalar;
  TF_RETURN_IF_ERROR(RankNamed(c, call_index, 0, "call_index", &scalar));

  for (int g = 0; g < num_sparse; ++g) {
    ShapeHandle a, b;
    DimensionHandle nnz, u;
    TF_RETURN_IF_ERROR(
        RankNamed(c, ex_idx + g, 1, Tag("sparse_example_indices", g), &a));
    TF_RETURN_IF_ERROR(
        RankNamed(c, feat_idx + g, 1, Tag("sparse_feature_indices", g), &b));
    TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(b, 0), c->Dim(a, 0),
                                  Tag("sparse_feature_indices", g),
                                  Tag("sparse_example_indices", g), &nnz));
    if (g < num_with_values) {
      TF_RETURN_IF_ERROR(
          RankNamed(c, feat_val + g, 1, Tag("sparse_feature_values", g), &b));
      TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(b, 0), nnz,
                                    Tag("sparse_feature_values", g),
                                    Tag("sparse_example_indices", g), &nnz));
    }
    TF_RETURN_IF_ERROR(
        RankNamed(c, sp_idx + g, 1, Tag("sparse_indices", g), &a));
    TF_RETURN_IF_ERROR(RankNamed(c, sp_w + g, num_classes > 1 ? 2 : 1,
                                 Tag("sparse_weights", g), &b));
    TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(b, 0), c->Dim(a, 0),
                                  Tag("sparse_weights", g),
                                  Tag("sparse_indices", g), &u));
    c->set_output(1 + g, c->input(sp_w + g));
  }
  for (int g = 0; g < num_dense; ++g) {
    ShapeHandle features;
    TF_RETURN_IF_ERROR(
        RankNamed(c, dense_feat + g, 2, Tag("dense_features", g), &features));
    TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(features, 0), batch,
                                  Tag("dense_features", g) + " (rows)",
                                  "example_weights", &batch));
    ShapeHandle w = c->input(dense_w + g);
    if (c->RankKnown(w) && c->Rank(w) == 1) {
      DimensionHandle d;
      TF_RETURN_IF_ERROR(MergeNamed(c, c->Dim(w, 0), c->Dim(features, 1),
                                    Tag("dense_weights", g),
                                    Tag("dense_features", g) + " (columns)",
                                    &d));
    }
    c->set_output(1 + num_sparse + g, w);
  }
  c->set_output(0, c->Matrix(batch, state_columns));
  return absl::OkStatus();
}

// Ranks of the six data inputs of PackRows (AppendRows: from input 1 on).
Status DataRanks(InferenceContext* c, int first) {
  static const char* const kNames[] = {"row_ptr",        "feature_ids",
                                       "feature_values", "dense_features",
                                       "example_weights", "example_labels"};
  static const int kRanks[] = {1, 1, 1, 2, 1, 1};
  ShapeHandle unused;
  for (int k = 0; k < 6; ++k) {
    TF_RETURN_IF_ERROR(
        RankNamed(c, first + k, kRanks[k], kNames[k], &unused));
  }
  return absl::OkStatus();
}

// An epoch call's weights, duals and seed start at input `first`; weights
// and duals keep their shapes, the objective is [4].
Status EpochShapes(InferenceContext* c, int first) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(RankNamed(c, first, 1, "weights", &unused));
  TF_RETURN_IF_ERROR(RankNamed(c, first + 1, 1, "duals", &unused));
  TF_RETURN_IF_ERROR(RankNamed(c, first + 2, 0, "seed", &unused));
  c->set_output(0, c->input(first));
  c->set_output(1, c->input(first + 1));
  c->set_output(2, c->Vector(4));
  return absl::OkStatus();
}

Status PackRowsShapeFn(InferenceContext* c) {
  TF_RETURN_IF_ERROR(DataRanks(c, 0));
  ShapeHandle norm_rows;
  TF_RETURN_IF_ERROR(RankNamed(c, 6, 1, "norm_rows", &norm_rows));
  c->set_output(0, c->Scalar());
  c->set_output(1, norm_rows);
  return absl::OkStatus();
}

Status NewPackedRowsShapeFn(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "num_examples", &unused));
  TF_RETURN_IF_ERROR(RankNamed(c, 1, 0, "num_ids", &unused));
  TF_RETURN_IF_ERROR(RankNamed(c, 2, 0, "dense_dim", &unused));
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

Status AppendRowsShapeFn(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "rows", &unused));
  TF_RETURN_IF_ERROR(DataRanks(c, 1));
  c->set_output(0, c->Scalar());
  return absl::OkStatus();
}

Status PackedSolveShapeFn(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "rows", &unused));
  return EpochShapes(c, 1);
}

using ::tensorflow::register_op::OpDefBuilderWrapper;

// The six data inputs of PackRows (`op` is the builder REGISTER_OP would
// make, a temporary living to the end of the statement).
OpDefBuilderWrapper& DataInputs(OpDefBuilderWrapper&& op) {
  return op.Input("row_ptr: int64")
      .Input("feature_ids: int32")
      .Input("feature_values: float")
      .Input("dense_features: float")
      .Input("example_weights: float")
      .Input("example_labels: float");
}

// The state inputs, the outputs and the attributes of one epoch call
// (PackedSolve).
OpDefBuilderWrapper& EpochCall(OpDefBuilderWrapper& op) {
  return op.Input("weights: double")
      .Input("duals: double")
      .Input("seed: int64")
      .Output("out_weights: double")
      .Output("out_duals: double")
      .Output("objective: double")
      .Attr(
          "loss_type: {'logistic_loss', 'squared_loss', 'hinge_loss', "
          "'smooth_hinge_loss', 'poisson_loss', 'absolute_loss', "
          "'softmax_loss', 'multiclass_hinge_loss'}")
      .Attr("num_classes: int >= 1 = 1")
      .Attr("l1: float")
      .Attr("l2: float")
      .Attr("num_loss_partitions: int >= 1 = 1")
      .Attr("num_passes: int >= 0 = 1")
      .Attr("visit_order: {'permutation', 'uniform', 'cyclic', 'adaptive', "
            "'shrinking'} = "
            "'permutation'")
      .Attr("gamma: float = 1.0")
      .Attr("compute_objective: bool = true")
      .Attr("hinge_step: {'projection', 'steepest_ascent', 'near_max_gain'} "
            "= 'projection'");
}

// TfSdca>AsdcaSolve (kernels/core/asdca.h; its kernel is beside
// PackedSolve's in kernels/kernels/packed_rows_kernels.cc).
Status AsdcaSolveShapeFn(InferenceContext* c) {
  ShapeHandle rows, weights, duals, iterate, seed;
  TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "rows", &rows));
  TF_RETURN_IF_ERROR(RankNamed(c, 1, 1, "weights", &weights));
  TF_RETURN_IF_ERROR(RankNamed(c, 2, 1, "duals", &duals));
  TF_RETURN_IF_ERROR(RankNamed(c, 3, 1, "iterate", &iterate));
  TF_RETURN_IF_ERROR(RankNamed(c, 4, 0, "seed", &seed));
  DimensionHandle slots;
  if (!c->Merge(c->Dim(weights, 0), c->Dim(iterate, 0), &slots).ok()) {
    return tensorflow::errors::InvalidArgument(
        "iterate has ", c->DebugString(c->Dim(iterate, 0)),
        " entries but weights has ", c->DebugString(c->Dim(weights, 0)));
  }
  c->set_output(0, c->Vector(slots));
  c->set_output(1, duals);
  c->set_output(2, c->Vector(slots));
  c->set_output(3, c->Vector(4));
  c->set_output(4, c->Scalar());
  return absl::OkStatus();
}

}  // namespace

REGISTER_OP("TfSdca>Optimizer")
    .Input("sparse_example_indices: num_sparse_features * int64")
    .Input("sparse_feature_indices: num_sparse_features * int64")
    .Input("sparse_feature_values: num_sparse_features_with_values * float")
    .Input("dense_features: num_dense_features * float")
    .Input("example_weights: float")
    .Input("example_labels: float")
    .Input("sparse_indices: num_sparse_features * int64")
    .Input("sparse_weights: num_sparse_features * float")
    .Input("dense_weights: num_dense_features * float")
    .Input("example_state_data: float")
    .Input("call_index: int64")
    .Output("out_example_state_data: float")
    .Output("out_delta_sparse_weights: num_sparse_features * float")
    .Output("out_delta_dense_weights: num_dense_features * float")
    .Attr(
        "loss_type: {'logistic_loss', 'squared_loss', 'hinge_loss', "
        "'smooth_hinge_loss', 'poisson_loss', 'absolute_loss', "
        "'softmax_loss', 'multiclass_hinge_loss'}")
    .Attr("adaptive: bool = false")
    .Attr("num_sparse_features: int >= 0")
    .Attr("num_sparse_features_with_values: int >= 0")
    .Attr("num_dense_features: int >= 0")
    .Attr("l1: float")
    .Attr("l2: float")
    .Attr("num_loss_partitions: int >= 1 = 1")
    .Attr("num_inner_iterations: int >= 1 = 1")
    .Attr("visit_order: {'permutation', 'uniform', 'cyclic', 'adaptive', "
            "'shrinking'} = "
          "'permutation'")
    .Attr("seed: int = 0")
    .Attr("gamma: float = 1.0")
    .Attr("num_threads: int >= 0 = 0")
    .Attr("num_classes: int >= 1 = 1")
    .Attr("hinge_step: {'projection', 'steepest_ascent', 'near_max_gain'} = "
          "'projection'")
    .Attr("dense_arguments: list(string) = []")
    .SetShapeFn(OptimizerShapeFn)
    .Doc(R"doc(
Runs SDCA (stochastic dual coordinate ascent) on one mini-batch.

Minimises sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1 over the batch's
features, starting from the given weights and per-example duals, and returns
the new duals and the change of the (unshrunk) weights: exact sequential SDCA
over the batch on one thread (CoCoA+ with sigma = num_loss_partitions; the
caller adds the changes of the partitions). The batch is solved as
TfSdca>PackedSolve solves packed rows (the same step and visiting orders),
in float64; each new dual is rounded to float32, the state's format, before
the weights move by it, so that they stay w(alpha) of the duals returned.

sparse_example_indices: per sparse group, the example (row) of each entry.
sparse_feature_indices: per sparse group, the int64 feature id of each entry.
  Ids repeated inside one example are summed.
sparse_feature_values: values of the first num_sparse_features_with_values
  groups; the other groups' values are 1.0.
dense_features: per dense group, a [batch, d] matrix.
example_weights: [batch] weights s_i >= 0; weight 0 ignores the example.
example_labels: [batch] labels; {0, 1} for logistic, hinge and smooth hinge,
  >= 0 for Poisson, any finite value for squared and absolute loss.
sparse_indices: per sparse group, the distinct ids whose weights are given.
sparse_weights: per sparse group, the unshrunk weights of sparse_indices.
dense_weights: per dense group, the d unshrunk weights.
example_state_data: [batch, 4]: dual, primal loss, dual loss, example weight
  ([batch, K + 3] for a multiclass loss: the K duals, then the same three).
call_index: scalar; mixed into the seed of the visiting order, so that a
  caller counting its calls gets a fresh order every call even when the
  input duals repeat (e.g. every batch of the first epoch: all zero).
out_example_state_data: [batch, 4]: the new dual; the weighted primal loss at
  the weights the example's last visit saw (the input weights for a single
  pass over a one-example batch, as in TensorFlow); the weighted dual loss
  phi*(-dual) at the new dual; the example weight.
out_delta_sparse_weights: change of each sparse group's weights.
out_delta_dense_weights: change of each dense group's weights.
loss_type: the loss.
adaptive: TensorFlow's flag; true means visit_order = 'adaptive'.
l1: L1 regularisation (>= 0).
l2: L2 regularisation (> 0).
num_loss_partitions: number of solvers whose deltas are added (CoCoA+ sigma).
num_inner_iterations: passes over the batch in this call.
visit_order: 'permutation' (a fresh permutation per pass), 'uniform' (draws
  with replacement), 'cyclic' (row order), 'adaptive' (importance sampling
  by the dual residual) or 'shrinking' (a fresh permutation of the rows
  LIBLINEAR's shrinking keeps, for the hinge losses' boxed duals; the
  shrunk rows of one call's passes).
seed: seed of the visiting order; it is mixed with call_index and a digest of
  the input duals, and the result is a function of the inputs.
gamma: smoothing of smooth_hinge_loss (> 0).
num_threads: threads reading the batch (mapping ids to slots) and computing
  the rows' losses after the solve; 0 = the CPU device's threads. The solve
  itself runs on one thread.
num_classes: K for softmax_loss and multiclass_hinge_loss (>= 2; labels are
  class ids in [0, K), sparse_weights [u, K], dense_weights [d, K], each
  example's K duals a block e_y - p with p on the simplex, solved exactly per
  visit; the state keeps the non-label duals rounded toward zero and the
  label's as their negated sum); 1 for the other losses.
hinge_step: multiclass_hinge_loss's block step: 'projection' (the exact
  maximiser of the block), or the sequential dual ascent steps
  'steepest_ascent' (block-coordinate Frank-Wolfe) and 'near_max_gain' (two
  classes at a time); only 'projection' for the other losses.
dense_arguments: per dense group (or none), its name in messages (default
  dense_features[g]): a front end's feature, e.g. "dense_features[0]
  (features['age'])".
)doc");

static ::tensorflow::InitOnStartupMarker const register_pack_rows =
    ::tensorflow::InitOnStartupMarker{} <<
    DataInputs(OpDefBuilderWrapper("TfSdca>PackRows"))
    .Input("norm_rows: int64")
    .Output("rows: resource")
    .Output("sparse_norms: double")
    .Attr(
        "loss_type: {'logistic_loss', 'squared_loss', 'hinge_loss', "
        "'smooth_hinge_loss', 'poisson_loss', 'absolute_loss', "
        "'softmax_loss', 'multiclass_hinge_loss'}")
    .Attr("gamma: float = 1.0")
    .Attr("num_classes: int >= 1 = 1")
    .Attr("num_sparse_features: int >= 0")
    .Attr("num_threads: int >= 1 = 1")
    .SetIsStateful()
    .SetShapeFn(PackRowsShapeFn)
    .Doc(R"doc(
Validates a data set held in memory once and packs it for TfSdca>PackedSolve.

Every input is checked (argument, position and value named on error). Every
row becomes one contiguous record (row index, |x_i|^2, label, weight, ids,
values, dense part), so that an epoch in a random order reads one place per
row (and the row's dual) instead of eight arrays, and no input is validated
again per epoch. The records are a copy: the inputs may change or be freed
afterwards.

row_ptr: [n + 1] CSR row offsets into feature_ids ([0] with no sparse part).
feature_ids: int32 sparse feature ids, row by row, in
  [0, num_sparse_features). Ids repeated inside a row are summed.
feature_values: their values, or [0] for all 1.0.
dense_features: [n, d] dense features (d may be 0).
example_weights: [n] weights s_i >= 0.
example_labels: [n] labels in the loss's domain.
norm_rows: [m] rows (in [0, n)) whose sparse_norms to return ([0]: none).
rows: a handle that owns the packed rows (freed with the last reference).
sparse_norms: [m] for row norm_rows[j], the sum of its sparse entries'
  squared values (1 for each entry without a value) added in the entries'
  order from 0 in double, a repeated id once per entry (the records'
  |x_i|^2 sums its values first); what the default visiting order of
  tf_sdca's in-memory fits reads (tf_sdca.engine.row_norms).
loss_type: the loss whose label domain the labels are checked against;
  PackedSolve must use the same loss (and gamma, and num_classes).
  'softmax_loss' and 'multiclass_hinge_loss' are multiclass: labels are
  class ids (integers in [0, num_classes) given as floats).
num_classes: K for the multiclass losses (>= 2); 1 for the others.
num_sparse_features: size of the sparse part of the weight table (ids must
  be in [0, num_sparse_features)); the table has num_sparse_features + d
  entries.
num_threads: threads that each TfSdca>PackedSolve on these rows runs. With
  more than 1 the threads share one weight table lock-free: ids in at least
  1/1024 of the rows ("hot", at most 16384) and the dense columns are kept
  per thread and merged by atomic adds every <= 1024 rows (the dense ones
  and the 16 most frequent ids more often), the other ids are
  updated by atomic adds; each row is visited by one thread. No update is
  lost, but the order of floating-point adds (and so the last bits of the
  results) depends on thread timing.
)doc");

REGISTER_OP("TfSdca>NewPackedRows")
    .Input("num_examples: int64")
    .Input("num_ids: int64")
    .Input("dense_dim: int64")
    .Output("rows: resource")
    .Attr(
        "loss_type: {'logistic_loss', 'squared_loss', 'hinge_loss', "
        "'smooth_hinge_loss', 'poisson_loss', 'absolute_loss', "
        "'softmax_loss', 'multiclass_hinge_loss'}")
    .Attr("gamma: float = 1.0")
    .Attr("num_classes: int >= 1 = 1")
    .Attr("num_sparse_features: int >= 0")
    .Attr("num_threads: int >= 1 = 1")
    .Attr("has_values: bool = false")
    .SetIsStateful()
    .SetShapeFn(NewPackedRowsShapeFn)
    .Doc(R"doc(
Packed rows to be filled chunk by chunk by TfSdca>AppendRows.

The records of TfSdca>PackRows for a data set read in pieces (e.g. from a
memory-mapped cache), so that its whole arrays need not be held beside the
records. The records' memory is reserved here and touched only as rows are
appended; TfSdca>PackedSolve takes the rows once all num_examples are in.
Appending in any pieces gives the records of TfSdca>PackRows on all the
rows at once.

num_examples: scalar, the rows to come (>= 0).
num_ids: scalar, their sparse entries together (>= 0).
dense_dim: scalar, their dense columns (>= 0).
rows: a handle that owns the packed rows (freed with the last reference).
loss_type: as for TfSdca>PackRows.
gamma: as for TfSdca>PackRows.
num_classes: as for TfSdca>PackRows.
num_sparse_features: as for TfSdca>PackRows.
num_threads: as for TfSdca>PackRows (the hot ids are chosen from all the
  rows, once the last one is appended).
has_values: whether the sparse entries come with values (else all 1.0).
)doc");

REGISTER_OP("TfSdca>AppendRows")
    .Input("rows: resource")
    .Input("row_ptr: int64")
    .Input("feature_ids: int32")
    .Input("feature_values: float")
    .Input("dense_features: float")
    .Input("example_weights: float")
    .Input("example_labels: float")
    .Output("num_appended: int64")
    .SetIsStateful()
    .SetShapeFn(AppendRowsShapeFn)
    .Doc(R"doc(
Validates the next rows of a data set and appends them to packed rows.

The inputs are those of TfSdca>PackRows for these rows only (row_ptr starts
at 0) and are checked the same way; an error also says at which row the
rows would have started. Nothing is appended on error. The rows must fit
what TfSdca>NewPackedRows reserved: no more rows or sparse entries, the
same dense columns, values exactly when has_values, and the last rows must
bring the sparse entries to num_ids.

rows: the handle from TfSdca>NewPackedRows.
row_ptr: [b + 1] CSR row offsets of these rows ([0]: no sparse part).
feature_ids: their int32 sparse ids in [0, num_sparse_features).
feature_values: their values, or [0] for all 1.0.
dense_features: [b, dense_dim].
example_weights: [b] weights s_i >= 0.
example_labels: [b] labels in the loss's domain.
num_appended: scalar, the rows appended so far.
)doc");

static ::tensorflow::InitOnStartupMarker const register_packed_solve =
    ::tensorflow::InitOnStartupMarker{} <<
    EpochCall(OpDefBuilderWrapper("TfSdca>PackedSolve").Input("rows: resource"))
    .Attr("num_parts: int >= 1 = 1")
    .Attr("part: int >= 0 = 0")
    .Attr("objective_threads: int >= 0 = 0")
    .SetIsStateful()
    .SetShapeFn(PackedSolveShapeFn)
    .Doc(R"doc(
Runs SDCA passes over packed rows (one call per epoch).

Minimises sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1 where the weights
are one table: the sparse ids index its first rows directly, the dense
columns follow. The duals are a float64 vector indexed by row. Rows packed
with num_threads > 1 are solved by that many threads (see TfSdca>PackRows):
each takes a share of the pass's permutation ('permutation'), of the rows in
order ('cyclic'), or draws from its own share of a random permutation of
the rows, new each pass ('uniform', 'adaptive').

rows: the handle from TfSdca>PackRows, or from TfSdca>NewPackedRows once
  every row is appended.
weights: [m] unshrunk float64 weights, m = num_sparse_features + d; for a
  multiclass loss [m * K]: the [m, K] table row-major (each slot's K class
  weights contiguous).
duals: [n] float64 duals, one per packed row; for a multiclass loss [n * K],
  row i's block e_y - p (p on the simplex) at [i * K, (i + 1) * K).
seed: scalar; the visiting order of pass p is a function of (seed, p).
out_weights: the new unshrunk weights (with num_loss_partitions = K, the
  input plus 1/K of the local change).
out_duals: the new duals.
objective: [4] at (out_weights, out_duals): sum_i s_i phi_i(w.x_i), sum_i
  s_i phi_i*(-alpha_i), |w|^2 and |w|_1 of the shrunk weights; the primal is
  [0] + l2/2 [2] + l1 [3], the duality gap [0] + [1] + l2 [2] + l1 [3].
  NaN when compute_objective is false.
loss_type: the loss the rows were packed for (with the same gamma).
num_classes: the rows' num_classes (K of softmax_loss and
  multiclass_hinge_loss, whose visits solve a row's block of K duals
  exactly; visit_order 'permutation', 'uniform' or 'cyclic', and
  'shrinking' for multiclass_hinge_loss: rows at alpha = 0 classified with
  more margin than the last pass's largest per-row gap are skipped).
hinge_step: as for TfSdca>Optimizer.
num_loss_partitions: number of solvers whose changes are added (CoCoA+
  sigma).
num_passes: passes over the rows in this call (0: only the objective).
visit_order: 'permutation' (a fresh permutation per pass), 'uniform' (draws
  with replacement), 'cyclic' (row order), 'adaptive' (draws by the dual
  residual, half uniform) or 'shrinking' (a fresh permutation of the rows
  LIBLINEAR's shrinking keeps: hinge and smooth hinge duals at a bound the
  gradient holds them at are skipped; which rows are shrunk carries over
  between calls on the same rows; one thread only, with threads it is
  'permutation').
num_parts, part: every pass visits only part `part` of num_parts equal
  consecutive pieces of its visiting order, so that num_parts calls with the
  same seed, parts 0 .. num_parts - 1, each from the last one's outputs,
  make one pass between them (CoCoA+ exchanging the weights within a pass).
  Not with 'adaptive' or 'shrinking', nor rows packed for several threads.
The objective uses the CPU device's threads.
)doc");

// TfSdca>PackedEpochs: PackedSolve's epochs in one call.
Status PackedEpochsShapeFn(InferenceContext* c) {
  ShapeHandle unused;
  TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "rows", &unused));
  TF_RETURN_IF_ERROR(EpochShapes(c, 1));
  TF_RETURN_IF_ERROR(RankNamed(c, 4, 1, "evaluate", &unused));
  TF_RETURN_IF_ERROR(RankNamed(c, 5, 0, "tol", &unused));
  c->set_output(2, c->Matrix(c->UnknownDim(), 4));
  c->set_output(3, c->Vector(c->UnknownDim()));
  for (int k = 6; k <= 10; ++k) {
    TF_RETURN_IF_ERROR(RankNamed(
        c, k, k == 7 || k == 8 ? 1 : 0,
        k == 6   ? "beta"
        : k == 7 ? "previous_weights"
        : k == 8 ? "previous_duals"
        : k == 9 ? "last_dual"
                 : "restart",
        &unused));
  }
  TF_RETURN_IF_ERROR(RankNamed(c, 11, 1, "auto_momentum", &unused));
  c->set_output(4, c->Vector(c->UnknownDim()));
  c->set_output(5, c->Vector(c->UnknownDim()));
  c->set_output(6, c->Scalar());
  return absl::OkStatus();
}

static ::tensorflow::InitOnStartupMarker const register_packed_epochs =
    ::tensorflow::InitOnStartupMarker{} <<
    EpochCall(OpDefBuilderWrapper("TfSdca>PackedEpochs").Input("rows: resource"))
    .Input("evaluate: bool")
    .Input("tol: double")
    .Input("beta: double")
    .Input("previous_weights: double")
    .Input("previous_duals: double")
    .Input("last_dual: double")
    .Input("restart: bool")
    .Input("auto_momentum: double")
    .Output("seconds: double")
    .Output("out_previous_weights: double")
    .Output("out_previous_duals: double")
    .Output("out_beta: double")
    .Attr("num_parts: int >= 1 = 1")
    .Attr("part: int >= 0 = 0")
    .Attr("objective_threads: int >= 0 = 0")
    .Attr("train_ahead: {'timed', 'always', 'never'} = 'timed'")
    .SetIsStateful()
    .SetShapeFn(PackedEpochsShapeFn)
    .Doc(R"doc(
Runs consecutive epochs of TfSdca>PackedSolve in one call.

Epoch e (from 0) is what a PackedSolve call with the seed `seed + e` from
the previous epoch's outputs does (bit for bit), and where `evaluate[e]`
(and compute_objective) the objective after it; the call stops after the
first epoch whose relative duality gap gap / max(|primal|, 1e-300) is below
`tol` or, evaluated, whose gap is not finite or below zero beyond float64
rounding (the arithmetic of tf_sdca.engine.objective_and_gap, l1 and l2 as
the float attributes hold them). With tol > 0 every epoch is tested: one
`evaluate` does not list is evaluated only where the next epoch's dual
objective does not already show its gap above tol (weak duality: P(w_e) >=
D(alpha_{e+1}); tol < 0.25, weights and duals at most twice the rows'
entries times the classes; else, and for the last epoch, it is
evaluated), the next epoch undone where it stops the call. For small data
sets, where an op call per epoch costs more than the epoch.

evaluate: [E] bool, E the most epochs to run.
tol: scalar; stop below this relative gap (< 0: never).
out_weights, out_duals: after the last epoch run.
objective: [R, 4], R the epochs run: PackedSolve's parts after each (NaN
  rows for the epochs not evaluated; with beta > 0 such an epoch's row
  holds its dual loss and |w|^2, NaN beside them).
seconds: [R], each epoch's passes in seconds (not its objective).
beta: >= 0: each epoch starts as tf_sdca.engine.Extrapolation's heavy ball
  with this beta does (x + beta_r (x - x_prev), beta_r = min(beta, 0.9 times
  the largest step keeping the duals in their domain), no step after an
  epoch whose dual objective -dual_loss - l2/2 |w|^2 fell below the one
  before (with beta > 0 read after every epoch, O(n + d) where not
  evaluated) or without a previous point), the same bits; < 0: none. Not
  for poisson_loss.
previous_weights, previous_duals: x_prev, where the epoch before the first
  one here ended ([0]: none).
last_dual, restart: the dual objective of the last epoch before this call
  whose dual objective was read (-inf: none), and whether it fell.
out_previous_weights, out_previous_duals: x_prev for the epoch after the
  last one run: where the last epoch run started before its step ([0]
  without extrapolation).
auto_momentum: [] or momentum='auto' still choosing its beta
  (tf_sdca.engine.choose_auto_momentum, one thread): [N, floor, full,
  most, g_0, ..., g_{k-1}], the relative gaps of the k < N plain epochs
  before this call. The call's first N - k epochs (which `evaluate` must
  list) are plain (beta 0); after the N-th gap beta = most * min(max((rho -
  floor) / (full - floor), 0), 1), rho = sqrt(max(g_{N-1}, 0) / g_{N-3})
  (0 where g_{N-3} <= 0), the same bits as the engine's, and the epochs
  after it start with that beta. The epoch that chooses is evaluated in
  turn.
out_beta: the beta the call ended with (chosen in it, or `beta`).
train_ahead: where an epoch's objective is evaluated: on another thread
  while the next epoch trains (ahead: that epoch undone where the objective
  stops the call, and run again where it restarts the extrapolation), or
  in turn. 'timed': ahead where the CPU device has 2 or more threads and
  the machine 2 or more cores, for the epochs where this call measures it
  faster; 'always': ahead (but the last epoch's); 'never': in turn. The
  results are the same bits.
The other inputs and attributes are PackedSolve's.
)doc");

REGISTER_OP("TfSdca>ShrinkL1")
    .Input("weights: float")
    .Output("shrunk_weights: float")
    .Attr("l1: float")
    .Attr("l2: float")
    .SetShapeFn(::tensorflow::shape_inference::UnchangedShape)
    .Doc(R"doc(
Soft-thresholds unshrunk SDCA weights: sign(w) * max(|w| - l1 / l2, 0).

weights: unshrunk weights, any shape.
shrunk_weights: the weights used for prediction.
l1: L1 regularisation (>= 0).
l2: L2 regularisation (> 0).
)doc");

REGISTER_OP("TfSdca>Fprint")
    .Input("input: string")
    .Output("output: int64")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 1, "example_ids (input)", &handle));
      c->set_output(0, c->Matrix(c->Dim(handle, 0), 2));
      return absl::OkStatus();
    })
    .Doc(R"doc(
128-bit fingerprints of example ids, the keys of the per-example dual state.

input: [n] strings.
output: [n, 2] int64, the two halves of each fingerprint.
)doc");

REGISTER_OP("TfSdca>ExampleKeys")
    .Input("example_ids: T")
    .Output("keys: int64")
    .Attr("T: {string, int64} = DT_STRING")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 1, "example_ids", &handle));
      c->set_output(0, handle);
      return absl::OkStatus();
    })
    .Doc(R"doc(
Keys of a batch's examples in SdcaModel's dual-state table; fails unless the
ids are unique within the batch.

example_ids: [n] strings, or int64 ids (keyed as their decimal text, the
  keys of the same ids as strings).
keys: [n] int64, the low half of each id's TfSdca>Fprint fingerprint, moved
  by +2 when it is one of the two lowest int64 values (reserved by the table).
)doc");

REGISTER_OP("TfSdca>HoldRows")
    .Input("keys: int64")
    .Input("example_weights: float")
    .Input("example_labels: float")
    .Input("sparse_example_indices: num_sparse * int64")
    .Input("sparse_feature_indices: num_sparse * int64")
    .Input("sparse_feature_values: num_sparse * float")
    .Input("dense_features: num_dense * float")
    .Input("held_keys: int64")
    .Input("held_example_weights: float")
    .Input("held_example_labels: float")
    .Input("held_sparse_row_splits: num_sparse * int64")
    .Input("held_sparse_feature_indices: num_sparse * int64")
    .Input("held_sparse_feature_values: num_sparse * float")
    .Input("held_dense_features: num_dense * float")
    .Input("call_index: int64")
    .Input("fraction: float")
    .Output("visit_keys: int64")
    .Output("visit_example_weights: float")
    .Output("visit_example_labels: float")
    .Output("visit_sparse_example_indices: num_sparse * int64")
    .Output("visit_sparse_feature_indices: num_sparse * int64")
    .Output("visit_sparse_feature_values: num_sparse * float")
    .Output("visit_dense_features: num_dense * float")
    .Output("out_held_keys: int64")
    .Output("out_held_example_weights: float")
    .Output("out_held_example_labels: float")
    .Output("out_held_sparse_row_splits: num_sparse * int64")
    .Output("out_held_sparse_feature_indices: num_sparse * int64")
    .Output("out_held_sparse_feature_values: num_sparse * float")
    .Output("out_held_dense_features: num_dense * float")
    .Attr("num_sparse: int >= 0")
    .Attr("num_dense: int >= 0")
    .Attr("seed: int = 0")
    .Attr("values: list(bool)")
    .Attr("loss_type: string = ''")
    .Attr("num_classes: int = 1")
    .Attr("id_limits: list(int) = []")
    .Attr("id_arguments: list(string) = []")
    .Attr("dense_arguments: list(string) = []")
    .SetShapeFn([](InferenceContext* c) {
      int64_t num_sparse, num_dense;
      TF_RETURN_IF_ERROR(c->GetAttr("num_sparse", &num_sparse));
      TF_RETURN_IF_ERROR(c->GetAttr("num_dense", &num_dense));
      ShapeHandle handle;
      const int side_inputs = 3 + 3 * num_sparse + num_dense;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 1, "keys", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, side_inputs, 1, "held_keys", &handle));
      TF_RETURN_IF_ERROR(
          RankNamed(c, 2 * side_inputs, 0, "call_index", &handle));
      TF_RETURN_IF_ERROR(
          RankNamed(c, 2 * side_inputs + 1, 0, "fraction", &handle));
      // Both sides' sizes depend on the random draw: only ranks and the
      // dense widths are known.
      for (int side = 0; side < 2; ++side) {
        const int first = side * side_inputs;
        for (int f = 0; f < 3 + 3 * num_sparse; ++f) {
          c->set_output(first + f, c->Vector(c->UnknownDim()));
        }
        for (int g = 0; g < num_dense; ++g) {
          ShapeHandle dense;
          TF_RETURN_IF_ERROR(RankNamed(c, 3 + 3 * num_sparse + g, 2,
                                       "dense_features", &dense));
          c->set_output(first + 3 + 3 * num_sparse + g,
                        c->Matrix(c->UnknownDim(), c->Dim(dense, 1)));
        }
      }
      return absl::OkStatus();
    })
    .Doc(R"doc(
SdcaModel's carry_over: merges the rows held back by the last call into a
batch and deals the merged rows into those visited now and those held for the
next call.

A held row whose key is also in the batch is dropped (the batch's copy stands
for it). Of the m merged rows (the batch's first, in order, then the kept held
rows), floor(fraction * m) are held, drawn from seed and call_index; every
other is visited. Both sides keep the merged order; the visited side's
sparse entries are renumbered to its rows (in input order: the batch's, then
the held rows'), the held side's grouped into rows.

keys: [b] int64 keys of the batch's examples (TfSdca>ExampleKeys).
example_weights: [b].
example_labels: [b].
sparse_example_indices: per sparse group, [nnz] rows in [0, b).
sparse_feature_indices: per sparse group, [nnz] feature ids.
sparse_feature_values: per sparse group, [nnz] values, or [0] for a group
  without values (`values`); the same on both sides and in the outputs.
dense_features: per dense group, [b, d].
held_keys: [h], and the other held_ inputs: the held rows, as the last call's
  out_held_ outputs.
held_sparse_row_splits: per sparse group, [h + 1] offsets: held row i's
  entries are held_sparse_feature_indices[splits[i]:splits[i + 1]] (and
  its values), nondecreasing from 0 to the group's held entries. The held
  side is kept as rows (a CSR), not an example index per entry: a call
  neither reads nor writes an index for each of its held rows' entries.
call_index: scalar mixed into the draw (SdcaModel's count of minimize calls).
fraction: scalar, the share of the merged rows held, in [0, 1).
visit_keys: the rows to visit now, and the other visit_ outputs.
out_held_keys: the rows held for the next call, and the other out_held_
  outputs (out_held_sparse_row_splits: [held + 1] each; each held row's
  entries in their input order).
seed: the draw's seed.
values: per sparse group, whether its entries have values.
loss_type: the solve's loss; when given, the batch's labels are checked
  against its domain (num_classes: K for a multiclass loss, whose labels
  are class ids), as the optimizer checks them, so that a bad label is
  reported in its own call at its row, whether that row is visited or held.
id_limits: per sparse group (or none), the rows of its weight variable: the
  batch's feature ids must be in [0, limit), named by id_arguments in the
  message (as TfSdca>DistinctIds, which sees only the visited rows).
dense_arguments: per dense group (or none), its name in the batch's
  messages, as TfSdca>Optimizer's.
)doc");

REGISTER_OP("TfSdca>ExampleStateTable")
    .Output("table: resource")
    .Attr("width: int >= 1")
    .Attr("container: string = ''")
    .Attr("shared_name: string = ''")
    .SetIsStateful()
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
SdcaModel's per-example state: float32 rows of `width` (the K duals, primal
loss, dual loss, example weight) by int64 key (TfSdca>ExampleKeys). Named by
shared_name, or by the node when it is empty; created empty the first time.

table: handle of the table.
width: floats per example; a table found under the name must have it.
)doc");

REGISTER_OP("TfSdca>ExampleStateFind")
    .Input("table: resource")
    .Input("keys: int64")
    .Output("values: float")
    .Output("slots: int64")
    .Attr("width: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "table", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 1, 1, "keys", &handle));
      int64_t width;
      TF_RETURN_IF_ERROR(c->GetAttr("width", &width));
      c->set_output(0, c->Matrix(c->Dim(handle, 0), width));
      c->set_output(1, handle);
      return absl::OkStatus();
    })
    .Doc(R"doc(
The stored rows of `keys` (zeros for keys not stored) and where they sit.

keys: [n] int64.
values: [n, width] float32.
slots: [n] int64, each key's place in the table (-1 when not stored): pass it
  to TfSdca>ExampleStateWrite with the same keys to skip the second search.
width: the table's width (checked).
)doc");

REGISTER_OP("TfSdca>ExampleStateWrite")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("slots: int64")
    .Input("values: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "table", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 1, 1, "keys", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 2, 1, "slots", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 3, 2, "values", &handle));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Stores `values` under `keys` (replacing rows already stored).

keys: [n] int64.
slots: [n] what TfSdca>ExampleStateFind returned for these keys (a slot no
  longer holding its key is searched again), or [0] to search every key.
values: [n, width] float32.
)doc");

REGISTER_OP("TfSdca>ExampleStateExport")
    .Input("table: resource")
    .Output("keys: int64")
    .Output("values: float")
    .Attr("width: int >= 1")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "table", &handle));
      int64_t width;
      TF_RETURN_IF_ERROR(c->GetAttr("width", &width));
      c->set_output(0, c->Vector(c->UnknownDim()));
      c->set_output(1, c->Matrix(c->UnknownDim(), width));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Every stored key and its row, in the table's order.

keys: [m] int64.
values: [m, width] float32.
width: the table's width (checked).
)doc");

REGISTER_OP("TfSdca>ExampleStateImport")
    .Input("table: resource")
    .Input("keys: int64")
    .Input("values: float")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 0, "table", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 1, 1, "keys", &handle));
      TF_RETURN_IF_ERROR(RankNamed(c, 2, 2, "values", &handle));
      return absl::OkStatus();
    })
    .Doc(R"doc(
Empties the table, then stores `values` under `keys` (a restore).

keys: [m] int64.
values: [m, width] float32.
)doc");

REGISTER_OP("TfSdca>ExampleStateSize")
    .Input("table: resource")
    .Output("size: int64")
    .SetShapeFn(::tensorflow::shape_inference::ScalarShape)
    .Doc(R"doc(
The number of examples stored.
)doc");

REGISTER_OP("TfSdca>DistinctIds")
    .Input("ids: int64")
    .Output("distinct_ids: int64")
    .Attr("num_rows: int >= 1")
    .Attr("argument: string = 'ids'")
    .SetShapeFn([](InferenceContext* c) {
      ShapeHandle handle;
      TF_RETURN_IF_ERROR(RankNamed(c, 0, 1, "ids", &handle));
      c->set_output(0, c->Vector(InferenceContext::kUnknownDim));
      return absl::OkStatus();
    })
    .Doc(R"doc(
The distinct values of a batch's feature ids, ascending; fails unless every
id is a row of the weight variable.

ids: [nnz] int64 feature ids.
distinct_ids: [u] int64, ascending.
num_rows: rows of the weight variable; ids must lie in [0, num_rows).
argument: the name the error message gives the ids.
)doc");

REGISTER_OP("TfSdca>AsdcaSolve")
    .Input("rows: resource")
    .Input("weights: double")
    .Input("duals: double")
    .Input("iterate: double")
    .Input("seed: int64")
    .Output("out_weights: double")
    .Output("out_duals: double")
    .Output("out_iterate: double")
    .Output("objective: double")
    .Output("theta_used: double")
    .Attr("loss_type: {'logistic_loss', 'squared_loss', 'smooth_hinge_loss'}")
    .Attr("l1: float")
    .Attr("l2: float")
    .Attr("gamma: float = 1.0")
    .Attr("num_passes: int >= 0 = 1")
    .Attr("batch_size: int >= 1")
    .Attr("theta: float = 0.0")
    .Attr("compute_objective: bool = true")
    .SetIsStateful()
    .SetShapeFn(AsdcaSolveShapeFn)
    .Doc(R"doc(
Runs passes of accelerated mini-batch SDCA (ASDCA, Shalev-Shwartz and Zhang
2013) over packed rows: one call per epoch.

Minimises sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1, the objective of
TfSdca>PackedSolve, for a smooth loss. Each pass deals a fresh permutation of
the rows (a function of (seed, pass)) into consecutive batches of
batch_size rows; a batch's margins are all taken at u = (1 - theta) w +
theta v, v = shrink(weights), then each of its duals moves theta of the way
to -loss'(x_i.u), the weights by the duals' changes, and the accelerated
iterate w to (1 - theta) w + theta v. The weights stay W(alpha) of the duals
(so the objective's duality gap certifies them); the iterate is the
momentum sequence the next call continues from.

rows: the handle from TfSdca>PackRows or TfSdca>NewPackedRows, packed with
  num_threads = 1 for the same loss and gamma.
weights: [m] unshrunk float64 weights W = (1/l2) sum_i s_i alpha_i x_i.
duals: [n] float64 duals, one per packed row.
iterate: [m] the accelerated iterate w (shrunk weights: what a prediction
  would use); shrink(weights) to start a run.
seed: scalar; the batches of pass p are a function of (seed, p).
out_weights: the new unshrunk weights W(alpha).
out_duals: the new duals.
out_iterate: the new accelerated iterate.
objective: [4] at (out_weights, out_duals), as TfSdca>PackedSolve's (NaN
  when compute_objective is false).
theta_used: the theta the passes used.
loss_type: a smooth loss: 'logistic_loss', 'squared_loss' or
  'smooth_hinge_loss' (ASDCA needs phi_i smooth).
l1: L1 regularisation (>= 0).
l2: L2 regularisation (> 0).
gamma: smooth-hinge smoothing (the packing's).
num_passes: passes in this call (0: only the objective).
batch_size: rows per mini-batch m (>= 1).
theta: in (0, 1]; 0 chooses the paper's 1/4 min{1, sqrt(k/m), k,
  k^(2/3)/m^(1/3)}, k = l2 gamma_loss / max_i s_i |x_i|^2 (gamma_loss = 1 /
  sup loss'': 4 logistic, 1 squared, gamma smooth hinge).
compute_objective: evaluate the objective after the passes.
)doc");

}  // namespace tf_sdca

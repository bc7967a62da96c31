// Registration and shape function of TfSdca>AsdcaSolve, accelerated
// mini-batch SDCA over packed rows (kernels/core/asdca.h). Its kernel is in
// kernels/kernels/packed_rows_kernels.cc, beside PackedSolve's (they share
// the packed-rows resource).
#include "tensorflow/core/framework/common_shape_fns.h"
#include "tensorflow/core/framework/op.h"
#include "tensorflow/core/framework/shape_inference.h"

namespace tf_sdca {

using ::tensorflow::Status;
using ::tensorflow::shape_inference::DimensionHandle;
using ::tensorflow::shape_inference::InferenceContext;
using ::tensorflow::shape_inference::ShapeHandle;

namespace {

Status RankOf(InferenceContext* c, int input, int rank, const char* name,
              ShapeHandle* out) {
  Status s = c->WithRank(c->input(input), rank, out);
  if (!s.ok()) {
    return tensorflow::errors::InvalidArgument(
        name, " must have rank ", rank, ", got shape ",
        c->DebugString(c->input(input)));
  }
  return s;
}

Status AsdcaSolveShapeFn(InferenceContext* c) {
  ShapeHandle rows, weights, duals, iterate, seed;
  TF_RETURN_IF_ERROR(RankOf(c, 0, 0, "rows", &rows));
  TF_RETURN_IF_ERROR(RankOf(c, 1, 1, "weights", &weights));
  TF_RETURN_IF_ERROR(RankOf(c, 2, 1, "duals", &duals));
  TF_RETURN_IF_ERROR(RankOf(c, 3, 1, "iterate", &iterate));
  TF_RETURN_IF_ERROR(RankOf(c, 4, 0, "seed", &seed));
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

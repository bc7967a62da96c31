"""SdcaModel: optimum against scipy, persistence of the dual state across
batches and checkpoints, tf.function, L1, CoCoA+ partitions, options."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize

from op_util import dual_loss, primal_loss
from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

N, DENSE, VOCAB, PER_ROW = 80, 3, 16, 2


def _data(loss, seed=0, weighted=False):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(N, DENSE)).astype(np.float32)
  ids = np.stack([rng.choice(VOCAB, PER_ROW, replace=False)
                  for _ in range(N)]).astype(np.int64)
  if loss in ("logistic_loss", "hinge_loss", "smooth_hinge_loss"):
    y = (rng.random(N) < 0.4).astype(np.float32)
  elif loss == "poisson_loss":
    y = rng.poisson(1.0, N).astype(np.float32)
  else:
    y = rng.normal(size=N).astype(np.float32)
  s = (rng.uniform(0.5, 2.0, N) if weighted else np.ones(N)).astype(
      np.float32)
  return x, ids, y, s


def _examples(x, ids, y, s, rows=None, dense=True, sparse=True):
  rows = np.arange(len(y)) if rows is None else np.asarray(rows)
  k = ids.shape[1]
  return dict(
      sparse_features=[SparseFeatureColumn(
          np.repeat(np.arange(len(rows)), k), ids[rows].ravel())]
      if sparse else [],
      dense_features=[x[rows]] if dense else [],
      example_weights=s[rows], example_labels=y[rows],
      example_ids=[f"row{r}" for r in rows])


def _model(examples, loss, l1=0.0, l2=1.0, partitioned=False, dense=True,
           sparse=True, **options):
  if partitioned:
    sparse_vars = [[tf.Variable(tf.zeros([10])),
                    tf.Variable(tf.zeros([VOCAB - 10]))]]
  else:
    sparse_vars = [tf.Variable(tf.zeros([VOCAB]))]
  dense_vars = [tf.Variable(tf.zeros([DENSE]))]
  variables = dict(sparse_features_weights=sparse_vars if sparse else [],
                   dense_features_weights=dense_vars if dense else [])
  opts = dict(loss_type=loss, symmetric_l2_regularization=l2,
              symmetric_l1_regularization=l1, **options)
  return SdcaModel(examples, variables, opts), variables


def _flat(variables):
  out = []
  for group in variables["sparse_features_weights"]:
    out += [v.numpy().ravel() for v in (group if isinstance(group, list)
                                        else [group])]
  out += [v.numpy().ravel() for v in variables["dense_features_weights"]]
  return np.concatenate(out)


def _objective(w, x, ids, y, s, loss, l1, l2, dense, sparse, gamma=1.0):
  """The normalised objective of SdcaModel.regularized_loss, in numpy."""
  z = np.zeros(len(y))
  if sparse:
    z += w[:VOCAB][ids].sum(1)
  if dense:
    z += x.astype(np.float64) @ w[-DENSE:]
  return ((s * primal_loss(loss, z, y, gamma)).sum() + l1 * np.abs(w).sum() +
          0.5 * l2 * w @ w) / s.sum()


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss",
                                  "smooth_hinge_loss", "poisson_loss"])
@pytest.mark.parametrize("layout,weighted,partitioned", [
    ("mixed", False, False), ("mixed", True, True), ("dense", True, False),
    ("sparse", False, True)])
def test_smooth_losses_reach_the_scipy_optimum(loss, layout, weighted,
                                               partitioned):
  x, ids, y, s = _data(loss, weighted=weighted)
  dense, sparse = layout != "sparse", layout != "dense"
  ex = _examples(x, ids, y, s, dense=dense, sparse=sparse)
  model, variables = _model(ex, loss, partitioned=partitioned, dense=dense,
                            sparse=sparse, num_inner_iterations=5)
  for _ in range(60):
    model.update_weights(model.minimize())
  size = (VOCAB if sparse else 0) + (DENSE if dense else 0)
  ref = minimize(lambda w: _objective(
      np.concatenate([w[:VOCAB] if sparse else np.zeros(VOCAB),
                      w[-DENSE:] if dense else np.zeros(DENSE)]),
      x, ids, y, s, loss, 0.0, 1.0, True, True), np.zeros(size),
                 method="L-BFGS-B", options=dict(ftol=1e-15, gtol=1e-10))
  ours = float(model.regularized_loss(ex))
  assert ours == pytest.approx(ref.fun, rel=1e-4)
  assert ours <= ref.fun * (1 + 1e-6)
  assert float(model.approximate_duality_gap()) < 1e-4


@pytest.mark.parametrize("loss", ["hinge_loss", "absolute_loss"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nonsmooth_losses_are_certified_optimal_by_the_exact_gap(loss,
                                                                 weighted):
  # scipy's smooth solvers are unreliable on kinks; the duality gap computed
  # here in numpy from the duals (independently of the op) certifies the
  # optimum: P(w) - P(w*) <= P(w) - D(alpha).
  x, ids, y, s = _data(loss, seed=2, weighted=weighted)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, loss, num_inner_iterations=10)
  for _ in range(150):
    model.update_weights(model.minimize())
  w = _flat(variables).astype(np.float64)
  primal = _objective(w, x, ids, y, s, loss, 0.0, 1.0, True, True) * s.sum()
  state = model._lookup_state(model._keys(ex)).numpy()
  alpha = state[:, 0].astype(np.float64)
  v = np.zeros(VOCAB + DENSE)
  np.add.at(v, ids, (s * alpha)[:, None])
  v[VOCAB:] = (s * alpha) @ x.astype(np.float64)
  dual = -(s * dual_loss(loss, alpha, y)).sum() - 0.5 * v @ v
  assert (primal - dual) / abs(primal) < 1e-4
  assert float(model.regularized_loss(ex)) * s.sum() == pytest.approx(
      primal, rel=1e-6)


def _train(model, batches, epochs):
  for _ in range(epochs):
    for ex in batches:
      model.update_weights(model.minimize(examples=ex))


def test_class_sorted_single_class_batches_reach_the_shuffled_optimum():
  x, ids, y, s = _data("logistic_loss", seed=4)
  order = np.argsort(y, kind="stable")
  sorted_batches = [_examples(x, ids, y, s, rows=order[i:i + 10])
                    for i in range(0, N, 10)]
  assert all(len(set(y[order[i:i + 10]])) == 1 for i in (0, N - 10))
  shuffled = np.random.default_rng(0).permutation(N)
  shuffled_batches = [_examples(x, ids, y, s, rows=shuffled[i:i + 10])
                      for i in range(0, N, 10)]
  full = _examples(x, ids, y, s)
  a, va = _model(full, "logistic_loss", num_inner_iterations=3)
  b, vb = _model(full, "logistic_loss", num_inner_iterations=3)
  _train(a, sorted_batches, 60)
  _train(b, shuffled_batches, 60)
  assert float(a.regularized_loss(full)) == pytest.approx(
      float(b.regularized_loss(full)), rel=1e-6)
  np.testing.assert_allclose(_flat(va), _flat(vb), atol=1e-4)


def test_dual_state_persists_across_batches_and_matters():
  x, ids, y, s = _data("squared_loss", seed=5)
  full = _examples(x, ids, y, s)
  batches = [_examples(x, ids, y, s, rows=np.arange(i, i + 10))
             for i in range(0, N, 10)]
  # Streaming is block coordinate ascent over the batches: it reaches the
  # full-batch optimum only if every batch's duals are remembered between
  # calls. l2 = 20 keeps the dual well conditioned so that 20 epochs suffice
  # (with l2 = 1, the block method needs hundreds: gap 0.016 after 30).
  streamed, vs = _model(full, "squared_loss", l2=20.0, num_inner_iterations=3)
  whole, vw = _model(full, "squared_loss", l2=20.0, num_inner_iterations=3)
  _train(streamed, batches, 20)
  _train(whole, [full], 20)
  np.testing.assert_allclose(_flat(vs), _flat(vw), atol=1e-6)
  # A fresh model with the same weights but an empty table starts every
  # dual at 0: its next step differs from the trained model's.
  fresh, vf = _model(full, "squared_loss", l2=20.0, num_inner_iterations=3)
  for var, src in zip(vf["dense_features_weights"],
                      vs["dense_features_weights"]):
    var.assign(src)
  for fs, ss in zip(fresh._sparse + fresh._dense,
                    streamed._sparse + streamed._dense):
    for a, b in zip(fs.slots, ss.slots):
      a.assign(b)
  streamed.update_weights(streamed.minimize(examples=batches[0]))
  fresh.update_weights(fresh.minimize(examples=batches[0]))
  assert np.abs(_flat(vs) - _flat(vf)).max() > 1e-2


_CKPT_SCRIPT = r"""
import os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
sys.path.insert(0, {tests!r})
import numpy as np, tensorflow as tf
import test_sdca_model as t
x, ids, y, s = t._data("logistic_loss", seed=6)
batches = [t._examples(x, ids, y, s, rows=np.arange(i, i + 20))
           for i in range(0, t.N, 20)]
model, variables = t._model(batches[0], "logistic_loss", num_table_shards=2)
ckpt = tf.train.Checkpoint(model=model)
mode = sys.argv[1]
if mode == "restore":
  status = ckpt.read({path!r})
  status.assert_existing_objects_matched()
else:
  t._train(model, batches, 3)
if mode == "save":
  ckpt.write({path!r})
else:
  t._train(model, batches, 3)
  np.save({out!r} + "_" + mode + ".npy", t._flat(variables))
"""


def test_checkpoint_restore_in_a_new_process_continues_identically(tmp_path):
  script = tmp_path / "ckpt.py"
  script.write_text(_CKPT_SCRIPT.format(
      tests=os.path.dirname(os.path.abspath(__file__)),
      path=str(tmp_path / "ckpt"), out=str(tmp_path / "w")))
  for mode in ("save", "restore", "full"):
    result = subprocess.run([sys.executable, str(script), mode],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
  resumed = np.load(tmp_path / "w_restore.npy")
  uninterrupted = np.load(tmp_path / "w_full.npy")
  np.testing.assert_array_equal(resumed, uninterrupted)


def test_training_inside_a_tf_function_loop():
  x, ids, y, s = _data("logistic_loss", seed=7)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, "logistic_loss")
  step = tf.Variable(0, dtype=tf.int64)

  @tf.function
  def train(n):
    for _ in tf.range(n):
      model.update_weights(model.minimize(global_step=step))
    return model.approximate_duality_gap()

  gap = float(train(tf.constant(40)))
  assert int(step.numpy()) == 40
  eager, ve = _model(ex, "logistic_loss")
  for _ in range(40):
    eager.update_weights(eager.minimize())
  np.testing.assert_allclose(_flat(variables), _flat(ve), atol=1e-6)
  assert gap < 1e-5


def test_l1_sets_weights_exactly_to_zero():
  x, ids, y, s = _data("squared_loss", seed=8)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, "squared_loss", l1=3.0, l2=1.0,
                            num_inner_iterations=5)
  for _ in range(60):
    model.update_weights(model.minimize())
  w = _flat(variables)
  ref = minimize(lambda v: _objective(v, x, ids, y, s, "squared_loss", 3.0,
                                      1.0, True, True),
                 np.zeros(VOCAB + DENSE), method="Powell",
                 options=dict(xtol=1e-10, ftol=1e-14, maxiter=200000))
  zero = np.abs(ref.x) < 1e-4
  assert zero.sum() >= 3  # the test means something
  assert np.all(w[zero] == 0.0)
  assert np.all(w[~zero] != 0.0)


def test_cocoa_partitions_with_summed_deltas_reach_the_optimum():
  x, ids, y, s = _data("logistic_loss", seed=9)
  full = _examples(x, ids, y, s)
  k = 3
  shards = [_examples(x, ids, y, s, rows=np.arange(i, N, k))
            for i in range(k)]
  # Each copy solves its shard's local CoCoA+ subproblem (sigma = k) closely;
  # the rounds then converge geometrically, more slowly than one machine.
  copies = [_model(full, "logistic_loss", l2=5.0, num_loss_partitions=k,
                   num_inner_iterations=5)[0] for _ in range(k)]
  reference, _ = _model(full, "logistic_loss", l2=5.0, num_inner_iterations=5)
  for _ in range(80):
    reference.minimize()
    start = [[sl.numpy() for sl in w.slots]
             for w in copies[0]._sparse + copies[0]._dense]
    deltas = []
    for copy, shard in zip(copies, shards):
      copy.minimize(examples=shard)
      deltas.append([[sl.numpy() - s0 for sl, s0 in zip(w.slots, st)]
                     for w, st in zip(copy._sparse + copy._dense, start)])
    # CoCoA+ adding: every copy continues from start + sum of the deltas.
    for copy in copies:
      for gi, w in enumerate(copy._sparse + copy._dense):
        for si, sl in enumerate(w.slots):
          sl.assign(start[gi][si] + sum(d[gi][si] for d in deltas))
  assert float(copies[0].regularized_loss(full)) == pytest.approx(
      float(reference.regularized_loss(full)), rel=1e-6)


@pytest.mark.parametrize("options,pattern", [
    (dict(loss_type="logistic_loss"), r"symmetric_l2_regularization"),
    (dict(loss_type="cubic", symmetric_l2_regularization=1.0),
     r"loss_type.*'cubic'"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=0.0),
     r"symmetric_l2_regularization'\] must be > 0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          learning_rate=0.1), r"unknown options: \['learning_rate'\]"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          num_table_shards=0), r"num_table_shards'\] must be >= 1"),
])
def test_bad_options_raise_value_error_naming_the_key(options, pattern):
  with pytest.raises(ValueError, match=pattern):
    SdcaModel(None, dict(sparse_features_weights=[],
                         dense_features_weights=[]), options)


def test_update_weights_writes_only_the_rows_a_batch_touched():
  x, ids, y, s = _data("logistic_loss", seed=12)
  ex = _examples(x, ids, y, s, rows=np.arange(5))
  model, variables = _model(ex, "logistic_loss", partitioned=True)
  sentinel = -7.0  # rows no batch touches must keep what the user had
  for var in variables["sparse_features_weights"][0]:
    var.assign(tf.fill(var.shape, sentinel))
  # The slots start from the user's values: reset them to a clean start.
  for slot in model._sparse[0].slots:
    slot.assign(tf.zeros_like(slot))
  model.update_weights(model.minimize())
  w = _flat(variables)[:VOCAB]
  touched = np.unique(ids[:5])
  untouched = np.setdiff1d(np.arange(VOCAB), touched)
  assert np.all(w[untouched] == sentinel)
  assert np.all(w[touched] != sentinel)
  # The next update starts from an empty set of touched rows.
  assert model._sparse[0].touched.numpy().size == 0


def test_column_shaped_partitioned_variables_work():
  # TensorFlow's linear models used [rows, 1] variables.
  x, ids, y, s = _data("squared_loss", seed=13)
  ex = _examples(x, ids, y, s)
  parts = [tf.Variable(tf.zeros([10, 1])), tf.Variable(tf.zeros([6, 1]))]
  dense = tf.Variable(tf.zeros([DENSE, 1]))
  model = SdcaModel(ex, dict(sparse_features_weights=[parts],
                             dense_features_weights=[dense]),
                    dict(loss_type="squared_loss",
                         symmetric_l2_regularization=1.0,
                         num_inner_iterations=5))
  flat, _ = _model(ex, "squared_loss", num_inner_iterations=5)
  for _ in range(10):
    model.update_weights(model.minimize())
    flat.update_weights(flat.minimize())
  got = np.concatenate([parts[0].numpy().ravel(), parts[1].numpy().ravel(),
                        dense.numpy().ravel()])
  want = np.concatenate([flat._sparse[0].slots[0].numpy(),
                         flat._dense[0].slots[0].numpy()])
  np.testing.assert_allclose(got, want, atol=1e-6)

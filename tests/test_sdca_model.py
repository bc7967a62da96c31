"""SdcaModel: optimum against scipy, persistence of the dual state across
batches and checkpoints, tf.function, L1, CoCoA+ partitions, options."""
import json
import logging
import os
import re
import subprocess
import sys
import tempfile

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize

from sdca_testutil import BINARY, LOSSES, dual_loss, primal_loss
import tf_sdca
from tf_sdca.ops import sdca_ops
from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

N, DENSE, VOCAB, PER_ROW = 80, 3, 16, 2
SMOOTH = ("logistic_loss", "squared_loss", "smooth_hinge_loss", "poisson_loss")


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


def _design(x, ids, dense=True, sparse=True):
  """The examples as rows of one float64 matrix over [sparse ids, dense]."""
  out = np.zeros((len(ids), VOCAB + DENSE))
  if sparse:
    np.add.at(out, (np.arange(len(ids))[:, None], ids), 1.0)
  if dense:
    out[:, VOCAB:] = x
  return out


def _primal_optimum(loss, a, y, s, l2):
  """min_w sum s_i phi(w.a_i) + l2/2 |w|^2, by L-BFGS-B with the gradient
  (smooth losses only), normalised by sum s like regularized_loss."""
  yy = 2.0 * y - 1.0 if loss in BINARY else y.astype(np.float64)

  def derivative(z):
    if loss == "logistic_loss":
      return -yy / (1.0 + np.exp(yy * z))
    if loss == "squared_loss":
      return z - yy
    if loss == "poisson_loss":
      return np.exp(z) - yy
    m = yy * z  # smooth hinge, gamma = 1
    return yy * np.where(m >= 1.0, 0.0, np.where(m <= 0.0, -1.0, m - 1.0))

  def f(w):
    z = a @ w
    return ((s * primal_loss(loss, z, y)).sum() + 0.5 * l2 * w @ w,
            a.T @ (s * derivative(z)) + l2 * w)

  res = minimize(f, np.zeros(a.shape[1]), jac=True, method="L-BFGS-B",
                 options=dict(ftol=1e-15, gtol=1e-11, maxiter=10000))
  return res.fun / s.sum(), res.x


def _dual_optimum(loss, a, y, s, l2):
  """The optimum of the hinge / absolute problem from its dual, a smooth
  box-constrained QP solved by L-BFGS-B. Strong duality makes its value the
  primal optimum:
    hinge:    max_{b in [0,1]^n}  sum s_i b_i - |sum s_i b_i y_i a_i|^2 / 2l2
    absolute: max_{c in [-1,1]^n} sum s_i c_i y_i - |sum s_i c_i a_i|^2 / 2l2
  (y_i in {-1, +1} for hinge)."""
  yy = 2.0 * y - 1.0 if loss == "hinge_loss" else y.astype(np.float64)
  if loss == "hinge_loss":
    lin, cols, bounds = s, a * (s * yy)[:, None], (0.0, 1.0)
  else:
    lin, cols, bounds = s * yy, a * s[:, None], (-1.0, 1.0)

  def negative_dual(c):
    v = cols.T @ c
    return -(lin @ c - v @ v / (2 * l2)), -(lin - cols @ v / l2)

  res = minimize(negative_dual, np.zeros(len(y)), jac=True,
                 method="L-BFGS-B", bounds=[bounds] * len(y),
                 options=dict(ftol=1e-16, gtol=1e-12, maxiter=10000))
  return -res.fun / s.sum()


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("layout,weighted,partitioned", [
    ("mixed", False, False), ("mixed", True, True), ("dense", True, False),
    ("sparse", False, True)])
def test_regularized_loss_reaches_an_independent_solvers_optimum(
    loss, layout, weighted, partitioned):
  # Smooth losses: L-BFGS-B on the primal. Hinge and absolute have kinks on
  # which L-BFGS-B stalls, so their reference solves the dual QP (smooth,
  # with box constraints) instead; the value is the same by strong duality.
  x, ids, y, s = _data(loss, weighted=weighted)
  dense, sparse = layout != "sparse", layout != "dense"
  ex = _examples(x, ids, y, s, dense=dense, sparse=sparse)
  # Passes over the data: 200 for smooth losses (linear convergence), 1600
  # for the non-smooth ones, whose primal lags the dual (e.g. hinge, mixed,
  # weighted: 1e-4 above the optimum after 1000 passes, 2e-6 after 1750).
  model, variables = _model(ex, loss, partitioned=partitioned, dense=dense,
                            sparse=sparse,
                            num_inner_iterations=5 if loss in SMOOTH else 20)
  for _ in range(40 if loss in SMOOTH else 80):
    model.minimize()
  model.update_weights(model.minimize())
  a = _design(x, ids, dense, sparse)
  if loss in SMOOTH:
    ref, _ = _primal_optimum(loss, a, y, s.astype(np.float64), 1.0)
  else:
    ref = _dual_optimum(loss, a, y, s.astype(np.float64), 1.0)
  ours = float(model.regularized_loss(ex))
  assert ours == pytest.approx(ref, rel=1e-4)
  assert float(model.approximate_duality_gap()) < 1e-4
  # The user's variables hold the same solution as the model's slots.
  w = np.zeros(VOCAB + DENSE)
  flat = _flat(variables).astype(np.float64)
  if sparse:
    w[:VOCAB] = flat[:VOCAB]
  if dense:
    w[VOCAB:] = flat[-DENSE:]
  primal = _objective(w, x, ids, y, s, loss, 0.0, 1.0, dense, sparse)
  assert primal == pytest.approx(ours, rel=1e-6)
  # A solver-free certificate as well: the exact duality gap, computed here
  # from the duals in the table, bounds P(w) - P(w*).
  alpha = model._lookup_state(model._keys(ex)).numpy()[:, 0].astype(
      np.float64)
  v = a.T @ (s * alpha)
  dual = (-(s * dual_loss(loss, alpha, y)).sum() - 0.5 * v @ v) / s.sum()
  assert -1e-9 < (primal - dual) / primal < 1e-4


def test_weights_stay_equal_to_w_of_the_stored_duals():
  # The float64 slots accumulate the op's deltas; after 120 streamed steps
  # they must still be v(alpha) / l2 of the duals in the table. (Measured:
  # 2e-7, flat from epoch 5 to 40, i.e. float32 rounding of the last deltas,
  # no drift.)
  x, ids, y, s = _data("logistic_loss", seed=3, weighted=True)
  batches = [_examples(x, ids, y, s, rows=np.arange(i, i + 10))
             for i in range(0, N, 10)]
  model, _ = _model(batches[0], "logistic_loss", l2=0.5,
                    partitioned=True, num_table_shards=3)
  for _ in range(15):
    for ex in batches:
      model.minimize(examples=ex)
  alpha = model._lookup_state(model._keys(_examples(x, ids, y, s)))
  v = _design(x, ids).T @ (s * alpha.numpy()[:, 0].astype(np.float64))
  slots = np.concatenate([model._sparse[0].all_rows().numpy(),
                          model._dense[0].all_rows().numpy()])
  np.testing.assert_allclose(slots, v / 0.5, rtol=0, atol=1e-6)


def _train(model, batches, epochs):
  for _ in range(epochs):
    for ex in batches:
      model.update_weights(model.minimize(examples=ex))


def test_class_sorted_single_class_batches_reach_the_shuffled_optimum():
  # Every batch holds one class only: a solver whose 1-D steps are not exact
  # maxima, or whose weights drift from w(alpha), ends above the optimum.
  x, ids, y, s = _data("logistic_loss", seed=4)
  # All negatives then all positives, 20 per batch, a class never mixed.
  sorted_rows = [rows[i:i + 20] for label in (0.0, 1.0)
                 for rows in [np.flatnonzero(y == label)]
                 for i in range(0, len(rows), 20)]
  sorted_batches = [_examples(x, ids, y, s, rows=r) for r in sorted_rows]
  shuffled = np.random.default_rng(0).permutation(N)
  shuffled_batches = [_examples(x, ids, y, s, rows=shuffled[i:i + 20])
                      for i in range(0, N, 20)]
  full = _examples(x, ids, y, s)
  ref, ref_w = _primal_optimum("logistic_loss", _design(x, ids), y,
                               s.astype(np.float64), 1.0)
  for batches in (sorted_batches, shuffled_batches):
    model, variables = _model(full, "logistic_loss", num_inner_iterations=3)
    # Streaming is block coordinate ascent: 50 epochs put both orders
    # 1e-10 (sorted: 5e-12) above the optimum, weights within 2e-5.
    for _ in range(50):
      for ex in batches:
        train_op = model.minimize(examples=ex)
    model.update_weights(train_op)
    # (No check of approximate_duality_gap here: its primal terms are taken
    # at the weights each batch saw, which the other class's batches then
    # moved; it lags the true gap most for exactly this order.)
    assert float(model.regularized_loss(full)) == pytest.approx(ref,
                                                                rel=1e-8)
    np.testing.assert_allclose(_flat(variables), ref_w, atol=1e-4)


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


def _checkpoint_setup():
  x, ids, y, s = _data("logistic_loss", seed=6)
  batches = [_examples(x, ids, y, s, rows=np.arange(i, i + 20))
             for i in range(0, N, 20)]
  model, variables = _model(batches[0], "logistic_loss", partitioned=True,
                            num_table_shards=2)
  return batches, model, variables


_RESTORE_SCRIPT = r"""
import json, sys
sys.path.insert(0, {tests!r})
import numpy as np, tensorflow as tf
import test_sdca_model as t
batches, model, variables = t._checkpoint_setup()
tf.train.Checkpoint(model=model).read({path!r}).assert_existing_objects_matched()
print(json.dumps([int(table.size()) for table in model._tables]))
t._train(model, batches, 3)
np.save({out!r}, t._flat(variables))
"""


def test_checkpoint_restore_in_a_new_process_continues_identically(tmp_path):
  batches, model, variables = _checkpoint_setup()
  _train(model, batches, 3)
  # One more step without update_weights: the rows it changed are part of
  # the saved state and must reach the variables after the restore.
  model.minimize(examples=batches[0])
  tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  _train(model, batches, 3)
  uninterrupted = _flat(variables)

  script = tmp_path / "restore.py"
  script.write_text(_RESTORE_SCRIPT.format(
      tests=os.path.dirname(os.path.abspath(__file__)),
      path=str(tmp_path / "ckpt"), out=str(tmp_path / "resumed.npy")))
  result = subprocess.run([sys.executable, str(script)], capture_output=True,
                          text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-2000:]
  rows = json.loads(result.stdout.strip().splitlines()[-1])
  assert sum(rows) == N and min(rows) > 0  # both table shards restored
  # The op is a deterministic function of its inputs, so resuming is exact.
  np.testing.assert_array_equal(np.load(tmp_path / "resumed.npy"),
                                uninterrupted)


def _hash_table_model(monkeypatch):
  """A model whose example state lives in MutableHashTables, as it did
  before DenseHashTable: what older checkpoints hold."""
  from tf_sdca import sdca_model  # pylint: disable=import-outside-toplevel
  with monkeypatch.context() as patch:
    patch.setattr(sdca_model, "_ExampleStateTable", lambda name, width=4: (
        tf.lookup.experimental.MutableHashTable(
            tf.int64, tf.float32, tf.zeros([width], tf.float32), name=name)))
    return _checkpoint_setup()


@pytest.mark.parametrize("written_by", ["MutableHashTable", "DenseHashTable"])
def test_checkpoints_restore_across_the_example_state_tables(
    tmp_path, monkeypatch, written_by):
  """A checkpoint of a model whose example state was in MutableHashTables
  restores into today's model and continues exactly as the writer does;
  today's checkpoints restore into such a model too (the same `-keys` and
  `-values` tensors)."""
  old = _hash_table_model(monkeypatch)
  new = _checkpoint_setup()
  writer, reader = (old, new) if written_by == "MutableHashTable" else (
      new, old)
  batches, model, variables = writer
  _train(model, batches, 2)
  model.minimize(examples=batches[1])  # rows not yet written: saved too
  tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  _train(model, batches, 2)
  _, restored, restored_variables = reader
  tf.train.Checkpoint(model=restored).read(
      str(tmp_path / "ckpt")).assert_existing_objects_matched()
  assert sum(int(t.size()) for t in restored._tables) == N
  _train(restored, batches, 2)
  np.testing.assert_array_equal(_flat(restored_variables), _flat(variables))



def test_a_checkpoint_of_other_options_is_refused_on_restore(tmp_path):
  """A checkpoint written under another loss, l2, class count or shard
  count restored without a word (every tf.train.Checkpoint assertion
  passed) and left the model wrong for good: duals of another loss, slots
  v / l2 of another l2, examples in shards that never look them up. It is
  now a ValueError naming the options; l1 (the slots are v, whatever the
  shrinkage) and the training knobs may change, and a checkpoint without
  the record (written before it) restores as before."""
  x, ids, y, s = _data("logistic_loss", seed=2)
  ex = _examples(x, ids, y, s)
  model, _ = _model(ex, "logistic_loss")
  for _ in range(3):
    model.update_weights(model.minimize())
  path = tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  for options, message in (
      (dict(loss="squared_loss"), r"loss_type 'logistic_loss' \(this model "
       r"'squared_loss'\)"),
      (dict(loss="logistic_loss", l2=10.0), r"symmetric_l2_regularization "
       r"1.0 \(this model 10.0\)"),
      (dict(loss="logistic_loss", num_table_shards=3),
       r"num_table_shards 1 \(this model 3\)")):
    other, _ = _model(ex, options.pop("loss"), **options)
    with pytest.raises(ValueError, match="trained with " + message):
      tf.train.Checkpoint(model=other).read(path)
  same, variables = _model(ex, "logistic_loss", l1=0.5, carry_over=0,
                           num_inner_iterations=2)
  tf.train.Checkpoint(model=same).read(
      path).assert_existing_objects_matched()
  assert int(same._tables[0].size()) == N
  # A checkpoint without the record restores unchecked (the record alone
  # unmatched).
  del model._state_meaning
  old = tf.train.Checkpoint(model=model).write(str(tmp_path / "old"))
  other, _ = _model(ex, "logistic_loss", l2=10.0)
  status = tf.train.Checkpoint(model=other).read(old)
  assert int(other._tables[0].size()) == N
  with pytest.raises(AssertionError, match=r"_StateMeaning"):
    status.assert_existing_objects_matched()

def test_a_checkpoint_of_other_feature_sizes_is_refused_before_any_value(
    tmp_path):
  """A checkpoint whose sparse weights have another size: TensorFlow's
  "incompatible tensor with shape (20,)" came as the restore reached that
  variable, after the call counter, the dense weights and their slots had
  been restored (the gap moved). Now refused by name, the model as it
  was."""
  def model(size):
    variables = dict(sparse_features_weights=[tf.Variable(tf.zeros([size]))],
                     dense_features_weights=[tf.Variable(tf.zeros([3]))])
    return tf_sdca.SdcaModel(None, variables, dict(
        loss_type="logistic_loss", symmetric_l2_regularization=1.0))

  def examples(size, seed):
    rng = np.random.default_rng(seed)
    return dict(
        sparse_features=[SparseFeatureColumn(
            np.arange(8), rng.integers(0, size, 8), None)],
        dense_features=[rng.normal(size=(8, 3)).astype(np.float32)],
        example_weights=np.ones(8, np.float32),
        example_labels=(rng.random(8) > 0.5).astype(np.float32),
        example_ids=[str(i) for i in range(8)])

  saved = model(20)
  for _ in range(3):
    saved.update_weights(saved.minimize(examples=examples(20, 0)))
  path = tf.train.Checkpoint(model=saved).write(str(tmp_path / "ckpt"))
  other = model(30)
  for _ in range(2):
    other.update_weights(other.minimize(examples=examples(30, 1)))
  before = [v.numpy().copy() for v in other.variables]
  with pytest.raises(ValueError, match=r"holds sparse_features_weights\[0\] "
                     r"of shape \[20\], this model's is \[30\] \(a feature "
                     r"of another size\): nothing was restored"):
    tf.train.Checkpoint(model=other).read(path)
  for value, variable in zip(before, other.variables):
    np.testing.assert_array_equal(variable.numpy(), value)
  same = model(20)
  tf.train.Checkpoint(model=same).read(path).assert_existing_objects_matched()
  np.testing.assert_array_equal(same.variables[0].numpy(),
                                saved.variables[0].numpy())


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


def test_a_process_training_several_models_is_not_warned_of_retracing():
  # Each eager model traces its steps once, for its own variables; TensorFlow
  # counted a method's traces across all its objects and, from the fifth
  # model, logged "triggered tf.function retracing" (an l2 sweep's loop).
  x, ids, y, s = _data("logistic_loss", seed=3)
  ex = _examples(x, ids, y, s)
  records = []
  handler = logging.Handler()
  handler.emit = records.append
  tf.get_logger().addHandler(handler)
  try:
    for l2 in (0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0):
      model, _ = _model(ex, "logistic_loss", l2=l2)
      for _ in range(3):
        model.update_weights(model.minimize())
  finally:
    tf.get_logger().removeHandler(handler)
  assert not [r for r in records if "retracing" in r.getMessage()]


def _l1_optimum(x, ids, y, s, l1, l2):
  """argmin of the squared-loss objective with L1, independently: w = p - q
  with p, q >= 0 makes it smooth with bounds, so L-BFGS-B lands on exact
  zeros (the bounds) where the optimum has them."""
  a, n = _design(x, ids), VOCAB + DENSE

  def f(pq):
    w = pq[:n] - pq[n:]
    r = a @ w - y
    g = a.T @ (s * r) + l2 * w
    return (0.5 * (s * r * r).sum() + 0.5 * l2 * w @ w + l1 * pq.sum(),
            np.concatenate([g + l1, -g + l1]))

  res = minimize(f, np.zeros(2 * n), jac=True, method="L-BFGS-B",
                 bounds=[(0.0, None)] * (2 * n),
                 options=dict(ftol=1e-16, gtol=1e-12, maxiter=10000))
  return res.x[:n] - res.x[n:], res.fun / s.sum()


def test_l1_sets_exactly_the_optimums_zero_weights_to_zero():
  x, ids, y, s = _data("squared_loss", seed=8, weighted=True)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, "squared_loss", l1=3.0, l2=1.0,
                            partitioned=True, num_inner_iterations=5)
  for _ in range(40):
    model.update_weights(model.minimize())
  w = _flat(variables)
  ref_w, ref_value = _l1_optimum(x, ids, y.astype(np.float64),
                                 s.astype(np.float64), 3.0, 1.0)
  assert float(model.regularized_loss(ex)) == pytest.approx(ref_value,
                                                            rel=1e-6)
  zero = ref_w == 0.0
  assert 3 <= zero.sum() < len(w)  # the test means something
  assert np.all(w[zero] == 0.0)
  assert np.all(w[~zero] != 0.0)
  np.testing.assert_allclose(w, ref_w, atol=1e-5)


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
     r"symmetric_l2_regularization'\] must be a finite number > 0 "
     r"\(float32: <= 3.4e38\), got 0.0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          learning_rate=0.1), r"unknown options: \['learning_rate'\]"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          num_table_shards=0), r"num_table_shards'\] must be an integer >= 1"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          num_loss_partitions=2.5),
     r"num_loss_partitions'\] must be an integer >= 1, got 2.5"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization="1"),
     r"symmetric_l2_regularization'\] must be a finite number > 0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          symmetric_l1_regularization=-0.1),
     r"symmetric_l1_regularization'\] must be a finite number >= 0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=float("nan")),
     r"symmetric_l2_regularization'\] must be a finite number > 0 "
     r"\(float32: <= 3.4e38\), got nan"),
    (dict(loss_type="smooth_hinge_loss", symmetric_l2_regularization=1.0,
          gamma=0.0), r"gamma'\] must be a finite number > 0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          adaptive="yes"), r"adaptive'\] must be a bool"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          visit_order="random"),
     r"visit_order'\] must be None \(the loss's default\) or one of"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          num_threads=-1), r"num_threads'\] must be an integer >= 0"),
    (dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
          num_inner_iterations=True),
     r"num_inner_iterations'\] must be an integer >= 1"),
])
def test_bad_options_raise_value_error_naming_the_key(options, pattern):
  with pytest.raises(ValueError, match=pattern):
    SdcaModel(None, dict(sparse_features_weights=[],
                         dense_features_weights=[]), options)


def test_mismatched_examples_and_variables_raise_value_error():
  x, ids, y, s = _data("squared_loss")
  ex = _examples(x, ids, y, s)
  with pytest.raises(ValueError, match="1 sparse feature groups but "
                     "variables has 0"):
    SdcaModel(ex, dict(sparse_features_weights=[],
                       dense_features_weights=[tf.Variable(tf.zeros([3]))]),
              dict(loss_type="squared_loss", symmetric_l2_regularization=1.0))
  with pytest.raises(ValueError, match="examples must have key 'example_ids'"):
    model, _ = _model(None, "squared_loss")
    model.minimize(examples={k: v for k, v in ex.items()
                             if k != "example_ids"})


def test_examples_whose_known_shapes_disagree_are_refused_by_name():
  # The ops check every call but name their own inputs: a dense group of
  # the wrong width was cut into rows of its weights' width ("6 rows, not
  # 4"), and short example ids reached them as "keys".
  x, ids, y, s = _data("squared_loss")
  ex = _examples(x, ids, y, s)
  model, _ = _model(None, "squared_loss")
  wide = dict(ex, dense_features=[np.hstack([x, x[:, :1]])])
  with pytest.raises(ValueError, match=rf"examples\['dense_features'\]\[0\] "
                     rf"has {DENSE + 1} column\(s\) but its weight variable "
                     rf"has {DENSE} row\(s\)"):
    model.minimize(examples=wide)
  short = dict(ex, example_ids=ex["example_ids"][:-1])
  with pytest.raises(ValueError, match=rf"example_ids has {N - 1}, "
                     rf"example_weights has {N}, example_labels has {N}"):
    model.minimize(examples=short)
  # Shapes unknown when traced: the ops' own errors remain.
  model_dense, _ = _model(None, "squared_loss", sparse=False)

  @tf.function(input_signature=[tf.TensorSpec([None, None])])
  def step(dense):
    return model_dense.minimize(examples=dict(ex, sparse_features=[],
                                              dense_features=[dense]))
  with pytest.raises(tf.errors.InvalidArgumentError):
    step(np.hstack([x, x[:, :1]]))


def test_an_example_id_twice_in_one_batch_is_an_error():
  # Two duals for one table row would break w = w(alpha) for good.
  x, ids, y, s = _data("squared_loss")
  ex = _examples(x, ids, y, s, rows=np.arange(4))
  ex["example_ids"] = ["a", "b", "c", "a"]
  model, _ = _model(ex, "squared_loss")
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="example_ids must be unique within a batch"):
    model.minimize()


def test_a_feature_id_outside_its_variable_is_an_error():
  x, ids, y, s = _data("squared_loss")
  ex = _examples(x, ids, y, s, rows=np.arange(4))
  model, _ = _model(ex, "squared_loss", partitioned=True)
  bad = dict(ex, sparse_features=[SparseFeatureColumn([0, 1], [3, VOCAB])])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"sparse_features\[0\] has an id >= {VOCAB}"):
    model.minimize(examples=bad)
  negative = dict(ex, sparse_features=[SparseFeatureColumn([0, 1], [3, -1])])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"sparse_features\[0\] has an id .* < 0"):
    model.minimize(examples=negative)


@pytest.mark.parametrize("loss", LOSSES)
def test_predictions_and_unregularized_loss_match_numpy(loss):
  x, ids, y, s = _data(loss, seed=14, weighted=True)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, loss, l1=0.05, partitioned=True, gamma=0.5)
  for _ in range(3):
    model.update_weights(model.minimize())
  w = _flat(variables).astype(np.float64)
  assert np.count_nonzero(w) > 3
  z = _design(x, ids) @ w
  link = {"logistic_loss": lambda z: 1 / (1 + np.exp(-z)),
          "poisson_loss": np.exp}.get(loss, lambda z: z)
  np.testing.assert_allclose(model.predictions(ex).numpy(), link(z),
                             rtol=1e-5, atol=1e-6)
  want = (s * primal_loss(loss, z, y, gamma=0.5)).sum() / s.sum()
  assert float(model.unregularized_loss(ex)) == pytest.approx(want, rel=1e-6)
  reg = (0.05 * np.abs(w).sum() + 0.5 * w @ w) / s.sum()
  assert float(model.regularized_loss(ex)) == pytest.approx(want + reg,
                                                            rel=1e-6)


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


def test_vector_dense_features_are_one_column_groups():
  # A [B] dense feature is a [B, 1] one; here each of the 3 columns of x
  # becomes its own group with a [1] variable and must train the same.
  x, ids, y, s = _data("logistic_loss", seed=15)
  ex = _examples(x, ids, y, s, sparse=False)
  matrix, vm = _model(ex, "logistic_loss", sparse=False)
  columns = dict(ex, dense_features=[x[:, j] for j in range(DENSE)])
  variables = [tf.Variable(tf.zeros([1])) for _ in range(DENSE)]
  split = SdcaModel(columns, dict(sparse_features_weights=[],
                                  dense_features_weights=variables),
                    dict(loss_type="logistic_loss",
                         symmetric_l2_regularization=1.0))
  for _ in range(5):
    matrix.update_weights(matrix.minimize())
    split.update_weights(split.minimize())
  np.testing.assert_allclose(np.concatenate([v.numpy() for v in variables]),
                             vm["dense_features_weights"][0].numpy(),
                             atol=1e-6)
  assert float(split.regularized_loss(columns)) == pytest.approx(
      float(matrix.regularized_loss(ex)), rel=1e-6)


def test_a_batch_can_be_a_tf_function_argument():
  """tf.nest rebuilds SparseFeatureColumn from TensorSpecs when a batch is
  passed to a tf.function; the step must then match the eager one."""
  rng = np.random.default_rng(21)
  n, vocab = 30, 12
  ids = rng.integers(0, vocab, n)
  x = rng.normal(size=(n, 2)).astype(np.float32)
  y = (rng.uniform(size=n) > 0.5).astype(np.float32)
  batch = dict(
      sparse_features=[SparseFeatureColumn(np.arange(n), ids)],
      dense_features=[tf.constant(x)], example_weights=tf.ones([n]),
      example_labels=tf.constant(y),
      example_ids=tf.constant([f"r{i}" for i in range(n)]))
  weights = []
  for compiled in (False, True):
    variables = dict(sparse_features_weights=[tf.Variable(tf.zeros([vocab]))],
                     dense_features_weights=[tf.Variable(tf.zeros([2]))])
    model = SdcaModel(None, variables, dict(loss_type="logistic_loss",
                                            symmetric_l2_regularization=1.0))

    def step(examples, model=model):
      model.update_weights(model.minimize(examples=examples))
    if compiled:
      step = tf.function(step)
    for _ in range(3):
      step(batch)
    weights.append([v.numpy() for v in variables["sparse_features_weights"] +
                    variables["dense_features_weights"]])
  for eager, graph in zip(*weights):
    np.testing.assert_allclose(eager, graph, rtol=1e-6)
  assert np.abs(weights[1][0]).max() > 0


def _stream(model, batches, steps, compiled):
  def step(examples):
    model.update_weights(model.minimize(examples=examples))
  if compiled:
    # Unknown batch sizes: the step is built once for every batch, and the
    # model chooses between its paths inside the graph (tf.cond).
    step = tf.function(step, reduce_retracing=True)
    step.get_concrete_function(tf.nest.map_structure(
        lambda t: None if t is None else tf.TensorSpec(
            [None] + t.shape[1:].as_list(), t.dtype), batches[0]))
  for k in range(steps):
    step(batches[k % len(batches)])


def _tensor_batches(x, ids, y, s, sizes):
  out, start = [], 0
  for size in sizes:
    ex = _examples(x, ids, y, s, rows=np.arange(start, start + size))
    col = ex["sparse_features"][0]
    out.append(dict(
        sparse_features=[SparseFeatureColumn(col.example_indices,
                                             col.feature_indices)],
        dense_features=[tf.constant(v) for v in ex["dense_features"]],
        example_weights=tf.constant(ex["example_weights"]),
        example_labels=tf.constant(ex["example_labels"]),
        example_ids=tf.constant(ex["example_ids"])))
    start += size
  return out


@pytest.mark.parametrize("num_rows", [1000, 10**9, 2**62])
def test_distinct_ids_are_numpys_unique_with_a_bitmap_or_a_sort(num_rows):
  """TfSdca>DistinctIds marks a bitmap of the table when it is at most ~64x
  the batch's ids (1000 rows) and sorts otherwise (10^9, 2^62 rows): both
  give np.unique's ids, and the range check holds at the table's edge."""
  rng = np.random.default_rng(5)
  ids = rng.integers(0, min(num_rows, 1000), 3000)
  ids[:2] = [0, min(num_rows, 1000) - 1]
  ids = np.concatenate([ids, [num_rows - 1]])
  got = tf_sdca.ops.sdca_ops.distinct_ids(ids, num_rows).numpy()
  np.testing.assert_array_equal(got, np.unique(ids))
  assert tf_sdca.ops.sdca_ops.distinct_ids(
      np.zeros([0], np.int64), num_rows).numpy().size == 0
  for bad in (num_rows, -1):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"sparse_features\[3\] has an id >= {num_rows} "
                       rf"or < 0, .* feature id \[2\] = {bad} "):
      tf_sdca.ops.sdca_ops.distinct_ids([0, 1, bad, 2], num_rows,
                                        argument="sparse_features[3]")
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match="rank 1"):
    tf_sdca.ops.sdca_ops.distinct_ids([[0]], num_rows)
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match="num_rows"):
    tf_sdca.ops.sdca_ops.distinct_ids([0], 0)


def test_example_keys_are_fingerprints_and_must_be_unique():
  """TfSdca>ExampleKeys: the low half of sdca_fprint (the table's keys, as
  in checkpoints written before the op existed); a repeated id names both
  positions."""
  ids = [f"row-{i}" for i in range(5000)]
  np.testing.assert_array_equal(
      tf_sdca.ops.sdca_ops.example_keys(ids).numpy(),
      tf_sdca.sdca_fprint(ids).numpy()[:, 0])
  assert tf_sdca.ops.sdca_ops.example_keys(
      tf.zeros([0], tf.string)).numpy().size == 0
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"unique within a batch: example_ids\[4000\] = "
                     r"'row-17' has the key of example_ids\[17\] = 'row-17'"):
    tf_sdca.ops.sdca_ops.example_keys(ids[:4000] + ["row-17"])
  with pytest.raises(tf.errors.InvalidArgumentError, match="rank 1"):
    tf_sdca.ops.sdca_ops.example_keys([["a"]])


@pytest.mark.parametrize("carry_over", [0, "auto"])
def test_float64_tensors_are_cast_as_float64_arrays_are(carry_over):
  """Eagerly a float64 numpy batch was converted to the ops' float32, but
  float64 tensors (dense features, example weights, labels) failed with
  TensorFlow's conversion error naming no argument, and inside a
  tf.function (where the arrays become float64 tensors) both did. Both are
  cast now, eagerly and compiled alike, to the float32 arrays' numbers; a
  dtype that holds no numbers is a ValueError naming the argument and it."""
  x, ids, y, s = _data("logistic_loss", seed=11, weighted=True)
  batches = [_examples(x.astype(np.float64), ids, y.astype(np.float64),
                       s.astype(np.float64), rows=np.arange(i, i + 20))
             for i in range(0, N, 20)]

  def as_tensors(ex):
    return dict(ex, dense_features=[tf.constant(ex["dense_features"][0])],
                example_weights=tf.constant(ex["example_weights"]),
                example_labels=tf.constant(ex["example_labels"]))

  def as_float32(ex):
    return dict(ex, dense_features=[ex["dense_features"][0].astype(
        np.float32)], example_weights=ex["example_weights"].astype(
            np.float32), example_labels=ex["example_labels"].astype(
                np.float32))

  results = []
  for convert, compiled in ((as_float32, False), (lambda ex: ex, False),
                            (as_tensors, False), (as_tensors, True)):
    model, variables = _model(convert(batches[0]), "logistic_loss",
                              carry_over=carry_over)

    def step(ex, model=model):
      model.update_weights(model.minimize(examples=ex))

    def evaluate(ex, model=model):
      return model.regularized_loss(ex), model.predictions(ex)

    if compiled:
      step, evaluate = tf.function(step), tf.function(evaluate)
    for k in range(12):
      step(convert(batches[k % len(batches)]))
    loss, predictions = evaluate(convert(batches[0]))
    results.append([_flat(variables), loss.numpy(), predictions.numpy()])
  for result in results[1:]:
    for got, want in zip(result, results[0]):
      np.testing.assert_array_equal(got, want)
  assert results[0][1] > 0
  model, _ = _model(batches[0], "logistic_loss", carry_over=carry_over)
  for key in ("dense_features", "example_weights", "example_labels"):
    ex = as_tensors(batches[0])
    text = tf.strings.as_string(ex[key][0] if key == "dense_features"
                                else ex[key])
    ex[key] = [text] if key == "dense_features" else text
    argument = re.escape(f"examples['{key}']" +
                         ("[0]" if key == "dense_features" else ""))
    for compiled in (False, True):
      call = (tf.function(lambda ex: model.minimize(examples=ex))
              if compiled else lambda ex: model.minimize(examples=ex))
      with pytest.raises(ValueError, match=argument + r" must hold real "
                         r"numbers .*got a string tensor"):
        call(ex)


@pytest.mark.parametrize("carry_over", [0, "auto"])
@pytest.mark.parametrize("kind", ["str", "bytes", "complex"])
def test_numpy_strings_and_complex_numbers_are_refused_as_tensors_are(
    carry_over, kind):
  """Numpy arrays of strings or complex numbers (dense features, example
  weights, labels, sparse feature values) were taken eagerly: the
  conversion to float32 parsed the strings ('0.5' became 0.5) and cut the
  complex numbers to their real part, while tensors of those dtypes were a
  ValueError naming the argument. The arrays are refused the same way now,
  eagerly and in a tf.function, by minimize and by the losses (whose casts
  of a string tensor failed with an UnimplementedError naming nothing)."""
  x, ids, y, s = _data("logistic_loss", seed=12, weighted=True)
  ex = _examples(x, ids, y, s, rows=np.arange(20))
  convert = dict(str=lambda a: np.asarray(a).astype(str),
                 bytes=lambda a: np.asarray(a).astype(bytes),
                 complex=lambda a: np.asarray(a).astype(np.complex64))[kind]
  model, variables = _model(ex, "logistic_loss", carry_over=carry_over)
  for key in ("dense_features", "example_weights", "example_labels"):
    bad = dict(ex)
    array = convert(ex[key][0] if key == "dense_features" else ex[key])
    bad[key] = [array] if key == "dense_features" else array
    argument = re.escape(f"examples['{key}']" +
                         ("[0]" if key == "dense_features" else ""))
    what = {False: re.escape(f"got a {array.dtype} numpy array"),
            True: f"got a {'complex64' if kind == 'complex' else 'string'} "
                  f"tensor"}
    for compiled in (False, True):
      call = (tf.function(lambda ex: model.minimize(examples=ex))
              if compiled else lambda ex: model.minimize(examples=ex))
      with pytest.raises(ValueError, match=argument + r" must hold real "
                         r"numbers \(a float, integer or bool dtype\), " +
                         what[compiled]):
        call(bad)
    for evaluate in (model.regularized_loss, model.unregularized_loss,
                     model.gap_parts):
      with pytest.raises(ValueError, match=argument + r" must hold real "
                         r"numbers .*" + what[False]):
        evaluate(bad)
  col = ex["sparse_features"][0]
  values = np.full(len(col.feature_indices), 0.5)
  with pytest.raises(ValueError, match=re.escape(
      "SparseFeatureColumn's feature_values must hold real numbers (a "
      f"float, integer or bool dtype), got a {convert(values).dtype} numpy "
      "array")):
    SparseFeatureColumn(col.example_indices, col.feature_indices,
                        convert(values))
  # (Nothing was trained; real arrays still are.)
  assert model.calls.numpy() == 0 and model.state_size() == 0
  model.update_weights(model.minimize(examples=ex))
  assert np.abs(_flat(variables)).max() > 0



@pytest.mark.parametrize("carry_over", [0, "auto"])
def test_object_arrays_must_hold_real_numbers(carry_over):
  """A numpy array of object dtype holding strings ('0.5', b'1'), complex
  numbers or None was converted by TensorFlow, which parsed the strings
  and made None NaN, where an array of str dtype is refused. Such an
  array is a ValueError naming the argument, the element and its index
  now (a tf.function makes the array a string tensor, refused as such);
  object arrays of Python and numpy floats, integers and bools (as pandas
  gives) train eagerly, and captured by a tf.function, as float32 arrays
  do, bit for bit. Given as a tf.function's argument (a string tensor
  there, which TensorFlow cannot feed with floats) they were refused as
  'a string tensor' without a word of why: the message says so now, and
  how to pass them."""
  x, ids, y, s = _data("logistic_loss", seed=12, weighted=True)
  ex = _examples(x, ids, y, s, rows=np.arange(20))
  model, variables = _model(ex, "logistic_loss", carry_over=carry_over)

  def with_element(array, index, element):
    out = np.asarray(array, np.float64).astype(object)
    out[index] = element
    return out

  for element, shown in (("0.5", "'0.5' (str)"), (b"1", "b'1' (bytes)"),
                         (0.5 + 1j, "(0.5+1j) (complex)"),
                         (None, "None (NoneType)")):
    bad_labels = with_element(ex["example_labels"], 3, element)
    bad_dense = with_element(ex["dense_features"][0], (2, 1), element)
    for key, bad, where in (
        ("example_labels", bad_labels, "3"),
        ("example_weights", with_element(ex["example_weights"], 3, element),
         "3"),
        ("dense_features", [bad_dense], "(2, 1)")):
      argument = f"examples['{key}']" + ("[0]" if key == "dense_features"
                                         else "")
      message = re.escape(
          f"{argument} must hold real numbers (a float, integer or bool "
          f"dtype), got a numpy array of object dtype holding {shown} at "
          f"index {where}")
      with pytest.raises(ValueError, match="^" + message + "$"):
        model.minimize(examples=dict(ex, **{key: bad}))
      # (A tf.function makes an object array argument a string tensor.)
      with pytest.raises(ValueError, match=re.escape(
          f"{argument} must hold real numbers (a float, integer or bool "
          f"dtype), got a string tensor")):
        tf.function(lambda ex: model.minimize(examples=ex))(
            dict(ex, **{key: bad}))
      with pytest.raises(ValueError, match="^" + message + "$"):
        model.regularized_loss(dict(ex, **{key: bad}))
    col = ex["sparse_features"][0]
    with pytest.raises(ValueError, match="^" + re.escape(
        "SparseFeatureColumn's feature_values must hold real numbers (a "
        "float, integer or bool dtype), got a numpy array of object dtype "
        f"holding {shown} at index 0")):
      SparseFeatureColumn(col.example_indices, col.feature_indices,
                          with_element(np.ones(len(col.feature_indices)), 0,
                                       element))
  assert model.calls.numpy() == 0 and model.state_size() == 0
  # Object arrays of real numbers (Python floats and ints, numpy floats and
  # bools) train as the float32 arrays.
  mixed = dict(
      ex, example_labels=np.array([bool(v) if i % 3 == 0 else
                                   (int(v) if i % 3 == 1 else np.float32(v))
                                   for i, v in enumerate(ex["example_labels"])],
                                  dtype=object),
      example_weights=np.array([float(v) for v in ex["example_weights"]],
                               dtype=object),
      dense_features=[ex["dense_features"][0].astype(np.float64).astype(
          object)])
  twin, twin_variables = _model(ex, "logistic_loss", carry_over=carry_over)
  captured, captured_variables = _model(ex, "logistic_loss",
                                        carry_over=carry_over)
  for key in ("example_labels", "example_weights", "dense_features"):
    with pytest.raises(ValueError, match=re.escape(
        "must hold real numbers (a float, integer or bool dtype), got a "
        "string tensor (a tf.function makes a numpy array of object dtype, "
        "as pandas gives, that is its argument a string tensor, and cannot "
        "be called with one of floats: give it array.astype(np.float32), or "
        "use the object array outside the function's arguments, eagerly or "
        "captured)")):
      tf.function(lambda ex: captured.minimize(examples=ex))(
          dict(ex, **{key: mixed[key]}))
  @tf.function
  def step():
    captured.update_weights(captured.minimize(examples=mixed))

  for m, batch in ((model, mixed), (twin, ex), (captured, None)):
    for _ in range(3):
      if batch is None:
        step()
      else:
        m.update_weights(m.minimize(examples=batch))
  assert np.abs(_flat(variables)).max() > 0
  np.testing.assert_array_equal(_flat(variables), _flat(twin_variables))
  np.testing.assert_array_equal(_flat(captured_variables),
                                _flat(twin_variables))
  np.testing.assert_array_equal(
      model.regularized_loss(mixed).numpy(), twin.regularized_loss(ex).numpy())


def test_float_indices_of_a_sparse_feature_column_must_be_whole_numbers():
  """SparseFeatureColumn cast float feature ids and example indices to
  int64 without a word (1.5 became row 1). Whole-number floats still are
  the ids they hold; others (1.5, NaN, inf) are an InvalidArgumentError
  naming the argument, the value and its index, eagerly and in a
  tf.function."""
  x, ids, y, s = _data("squared_loss", seed=15)
  ex = _examples(x, ids, y, s, rows=np.arange(20))
  col = ex["sparse_features"][0]
  trained = []
  for as_float in (False, True):
    model, variables = _model(ex, "squared_loss")
    batch = dict(ex, sparse_features=[SparseFeatureColumn(
        *(np.asarray(a, np.float64) if as_float else a
          for a in (col.example_indices, col.feature_indices)))])
    model.update_weights(model.minimize(examples=batch))
    trained.append(_flat(variables))
  np.testing.assert_array_equal(trained[1], trained[0])
  assert np.abs(trained[0]).max() > 0
  for name, what in (("example_indices", "example index"),
                     ("feature_indices", "feature id")):
    for bad in (1.5, np.nan, -np.inf):
      fields = dict(example_indices=np.asarray(col.example_indices, float),
                    feature_indices=np.asarray(col.feature_indices, float))
      fields[name][5] = bad
      value = re.escape(repr(bad) if np.isfinite(bad) else str(bad))
      with pytest.raises(tf.errors.InvalidArgumentError, match=(
          rf"^SparseFeatureColumn's {name} has {what} {value} at index 5, "
          r"not a whole number \(a cast would cut it to another row\)$")):
        SparseFeatureColumn(**fields)
      with pytest.raises(tf.errors.InvalidArgumentError, match=(
          rf"\[SparseFeatureColumn\\'s {name} has {what}\] \[{value}\] "
          r"\[at index\] \[5\] \[not a whole number")):
        tf.function(lambda f: SparseFeatureColumn(**f).feature_indices)(
            {k: tf.constant(v) for k, v in fields.items()})


def test_rows_to_write_stay_bounded_without_update_weights():
  """Steps without update_weights append the rows they change; the list is
  deduplicated once it outgrows the table, and the next update_weights
  writes them all."""
  x, ids, y, s = _data("squared_loss", seed=32)
  ex = _examples(x, ids, y, s)
  model, variables = _model(ex, "squared_loss")
  for _ in range(12):
    model.minimize()
    assert model._sparse[0].touched.numpy().size <= 2 * VOCAB
  model.update_weights(model.minimize())
  np.testing.assert_allclose(_flat(variables)[:VOCAB],
                             model._sparse[0].slots[0].numpy(), rtol=1e-6)
  assert model._sparse[0].touched.numpy().size == 0


def test_losses_and_gap_of_no_weight_are_errors_not_nan():
  def model(n, weight):
    ex = dict(sparse_features=[],
              dense_features=[np.ones((n, 2), np.float32)],
              example_weights=np.full(n, weight, np.float32),
              example_labels=np.ones(n, np.float32),
              example_ids=[f"r{i}" for i in range(n)])
    variables = dict(sparse_features_weights=[],
                     dense_features_weights=[tf.Variable(tf.zeros([2]))])
    return ex, SdcaModel(ex, variables, dict(
        loss_type="logistic_loss", symmetric_l2_regularization=1.0,
        symmetric_l1_regularization=0.0))
  ex, empty = model(0, 1.0)
  empty.minimize()
  assert np.isnan(float(empty.approximate_duality_gap()))  # as TF: untrained
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_weights sum to 0"):
    empty.regularized_loss(ex)
  ex, unweighted = model(3, 0.0)
  unweighted.minimize()
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"every trained example's weight is 0"):
    unweighted.approximate_duality_gap()
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_weights sum to 0"):
    unweighted.unregularized_loss(ex)


@pytest.mark.parametrize("loss", LOSSES)
def test_duality_gap_is_the_exact_gap_of_the_stored_state(loss):
  # Three weighted batches streamed every epoch, l1 > 0: after each epoch
  # duality_gap() is P(w) at the current weights minus D(alpha) at the
  # stored duals, recomputed here from the formulas (sdca_testutil), and a
  # valid gap (>= 0), which TensorFlow's lagging estimate need not be.
  x, ids, y, s = _data(loss, weighted=True)
  batches = [_examples(x, ids, y, s, rows)
             for rows in np.array_split(np.arange(N), 3)]
  l1, l2 = 0.05, 1.0
  model, variables = _model(None, loss, l1=l1, l2=l2)
  for _ in range(4):
    for batch in batches:
      train_op = model.minimize(examples=batch)
    model.update_weights(train_op)
    objective, relative = model.duality_gap(batches)
    w = _flat(variables).astype(np.float64)  # the shrunk weights
    primal = _objective(w, x, ids, y, s, loss, l1, l2, True, True)
    assert objective == pytest.approx(primal, rel=1e-6)
    alpha = np.concatenate([model.example_state(b).numpy()[:, 0]
                            for b in batches]).astype(np.float64)
    gap = (s @ primal_loss(loss, _design(x, ids) @ w, y) +
           s @ dual_loss(loss, alpha, y) + l1 * np.abs(w).sum() +
           l2 * w @ w)
    assert relative * abs(primal * s.sum()) == pytest.approx(
        gap, rel=1e-5, abs=1e-6)
    assert relative >= 0.0
  # One batch alone is not the training data: its gap would be no gap.
  with pytest.raises(ValueError, match=r"every trained example: the state "
                     r"holds 80, the examples given are 27"):
    model.duality_gap(batches[0])


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss"])
def test_duality_gap_over_examples_given_twice_is_refused_not_negative(loss):
  # Every example twice near the optimum: the losses count twice, |w|^2
  # once, and P - D comes out negative: no certificate (a Keras stream of
  # ds.concatenate(ds) stopped its fit(tol=1e-6) on a gap of -0.14).
  x, ids, y, s = _data(loss, weighted=True)
  batches = [_examples(x, ids, y, s, rows)
             for rows in np.array_split(np.arange(N), 3)]
  model, _ = _model(None, loss, l1=0.05, l2=1.0)
  for _ in range(40):
    for batch in batches:
      train_op = model.minimize(examples=batch)
  model.update_weights(train_op)
  assert abs(model.duality_gap(batches)[1]) < 1e-3
  with pytest.raises(ValueError, match=r"P\(w\) - D\(alpha\) = -.* < 0 "
                     r"over the batches given, which are not each trained "
                     r"example once"):
    model.duality_gap(batches + batches)


@pytest.mark.parametrize("in_function", [False, True])
def test_integer_example_ids_are_keyed_as_their_decimal_text(in_function):
  # An integer id and its tf.strings.as_string share one key, so a stream
  # of int64 ids (no strings built per call) trains bit for bit as the
  # same ids as strings, and their checkpoints are interchangeable.
  x, ids, y, s = _data("logistic_loss")
  ids_int = np.arange(-3, N - 3, dtype=np.int64)  # negative ones too
  models = []
  for kind in ("string", "int64", "int32 tensor"):
    w = tf.Variable(tf.zeros([DENSE]))
    model = SdcaModel(None, dict(sparse_features_weights=[],
                                 dense_features_weights=[w]),
                      dict(loss_type="logistic_loss",
                           symmetric_l2_regularization=1.0))
    example_ids = {"string": np.array([b"%d" % i for i in ids_int]),
                   "int64": ids_int,
                   "int32 tensor": tf.constant(ids_int, tf.int32)}[kind]
    batches = [dict(sparse_features=[], dense_features=[x[r]],
                    example_weights=s[r], example_labels=y[r],
                    example_ids=example_ids[r[0]:r[-1] + 1])
               for r in np.array_split(np.arange(N), 4)]
    step = (tf.function(model.minimize) if in_function else
            model.minimize)
    for _ in range(5):
      for batch in batches:
        model.update_weights(step(examples=batch))
    models.append((model, w, batches))
  (first, w0, _), *others = models
  state = first.get_state()
  for model, w, batches in others:
    np.testing.assert_array_equal(w.numpy(), w0.numpy())
    other = model.get_state()
    np.testing.assert_array_equal(np.sort(other["keys"]),
                                  np.sort(state["keys"]))
    np.testing.assert_array_equal(
        model.example_state(batches[1]).numpy(),
        first.example_state(models[0][2][1]).numpy())
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_ids\[2\] = 7 has the key of "
                           r"example_ids\[0\] = 7"):
    sdca_ops.example_keys(np.array([7, 8, 7], np.int64))


@pytest.mark.parametrize("carry_over", ["auto", 0])
def test_tf1_graph_pattern_initializer_before_minimize(carry_over):
  """TensorFlow's own SdcaModel tests run global_variables_initializer()
  before minimize(): at the default carry_over the held rows' variables,
  created by minimize, were uninitialized (FailedPreconditionError). They
  are created with the model in a graph now; both settings train the
  same separable rows to the same weights."""
  n = 4
  with tf.Graph().as_default(), tf.compat.v1.Session() as session:
    examples = dict(
        sparse_features=[SparseFeatureColumn(
            tf.constant(np.arange(n), tf.int64),
            tf.constant([0, 1, 0, 1], tf.int64), None)],
        dense_features=[], example_weights=tf.ones([n]),
        example_labels=tf.constant([0.0, 1.0, 0.0, 1.0]),
        example_ids=tf.constant(["a", "b", "c", "d"]))
    weights = tf.compat.v1.Variable(tf.zeros([2]))
    model = SdcaModel(examples, dict(sparse_features_weights=[weights],
                                     dense_features_weights=[]),
                      dict(symmetric_l2_regularization=1.0,
                           symmetric_l1_regularization=0.0,
                           loss_type="logistic_loss", carry_over=carry_over))
    session.run(tf.compat.v1.global_variables_initializer())
    train_op = model.minimize()
    for _ in range(30):
      session.run(model.update_weights(train_op))
    w = session.run(weights)
  # Weights -a and a: the optimum of 4 log(1 + e^-a) + l2/2 (2 a^2), where
  # -4 / (1 + e^a) + 2 a = 0.
  assert w[0] == pytest.approx(-w[1], abs=1e-6)
  assert abs(-4.0 / (1.0 + np.exp(w[1])) + 2.0 * w[1]) < 1e-5


def test_tf1_saver_checkpoint_keeps_the_duals():
  """A TF1 graph's `tf.compat.v1.train.Saver()` saves the global variables
  and the SAVEABLE_OBJECTS collection, where TensorFlow's own tables put
  themselves. The example-state tables were not there: the checkpoint held
  the weights without their duals, and training after a restore went on
  from zero duals under trained weights (breast_cancer: 7% above the
  optimum for good). Saved with two table shards (each its own entries), a
  restored run goes on bit for bit as the uninterrupted one."""
  from sklearn.datasets import load_breast_cancer  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  y = y.astype(np.float32)
  n, d = x.shape

  def build():
    graph = tf.Graph()
    with graph.as_default():
      w = tf.compat.v1.Variable(tf.zeros([d]), name="w")
      examples = dict(sparse_features=[], dense_features=[tf.constant(x)],
                      example_weights=tf.ones([n]),
                      example_labels=tf.constant(y),
                      example_ids=tf.constant(np.arange(n)))
      model = SdcaModel(examples, dict(sparse_features_weights=[],
                                       dense_features_weights=[w]),
                        dict(loss_type="logistic_loss", num_table_shards=2,
                             symmetric_l2_regularization=1.0))
      step = model.update_weights(model.minimize())
      return (graph, w, step, tf.compat.v1.train.Saver(),
              tf.compat.v1.global_variables_initializer())

  path = os.path.join(tempfile.mkdtemp(), "ckpt")
  graph, w, step, saver, init = build()
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    for _ in range(3):
      session.run(step)
    saver.save(session, path)
    for _ in range(10):
      session.run(step)
    uninterrupted = session.run(w)
  graph, w, step, saver, init = build()
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(init)
    saver.restore(session, path)
    for _ in range(10):
      session.run(step)
    resumed = session.run(w)
  np.testing.assert_array_equal(resumed, uninterrupted)


def test_tf1_behaviour_switch_builds_and_trains():
  """Under `tf.compat.v1.disable_v2_behavior()` (TF1 code's usual first
  line) a shape's entries are `Dimension`s, never None and unhashable: the
  constructor's row check raised "unhashable type: 'Dimension'" for
  `SdcaModel` and `SDCAOptimizer` alike. Run in a fresh process (the switch
  is global): both build and train to the optimum of the rows below."""
  code = r"""
import numpy as np, tensorflow as tf, tf_sdca
tf.compat.v1.disable_v2_behavior()
n = 4
x = tf.constant([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]])
y = tf.constant([0.0, 1.0, 0.0, 1.0])
ids = tf.constant(["a", "b", "c", "d"])
w = tf.compat.v1.Variable(tf.zeros([2]))
model = tf_sdca.SdcaModel(
    dict(sparse_features=[], dense_features=[x], example_weights=tf.ones([n]),
         example_labels=y, example_ids=ids),
    dict(sparse_features_weights=[], dense_features_weights=[w]),
    dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0))
train = model.update_weights(model.minimize())
v = tf.compat.v1.Variable(tf.zeros([2]))
step = tf_sdca.SDCAOptimizer("id", symmetric_l2_regularization=1.0
                             ).get_train_step({"id": ids, "x": x}, y, {"x": v})
with tf.compat.v1.Session() as session:
  session.run(tf.compat.v1.global_variables_initializer())
  for _ in range(30):
    session.run(train)
  for _ in range(30):
    session.run(step)
  print(*session.run(w), *session.run(v))
"""
  result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  w0, w1, v0, v1 = map(float, result.stdout.split())
  # Weights -a and a: the optimum of 4 log(1 + e^-a) + l2/2 (2 a^2), where
  # -4 / (1 + e^a) + 2 a = 0 (2 log(1 + e^-a) per column and its l2).
  for low, high in ((w0, w1), (v0, v1)):
    assert low == pytest.approx(-high, abs=1e-6)
    assert abs(-4.0 / (1.0 + np.exp(high)) + 2.0 * high) < 1e-5


@pytest.mark.parametrize("in_function", [False, True])
def test_evaluation_methods_check_the_batch_as_minimize_does(in_function):
  """unregularized_loss, regularized_loss, gap_parts, predictions and
  linear_predictions read a batch checked as `minimize` checks one: labels
  `[n, 1]` broadcast against the `[n]` scores into an `[n, n]` loss
  (breast_cancer: 2368 for 0.053), a class outside [0, K) or 0.5 was
  scored, and a bad feature id failed in a gather naming no argument. The
  predictions take any labels (only their rows are read)."""
  from sklearn.datasets import load_breast_cancer  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  y = y.astype(np.float32)
  n, d = x.shape
  w = tf.Variable(tf.zeros([d]))
  model = SdcaModel(None, dict(sparse_features_weights=[],
                               dense_features_weights=[w]),
                    dict(loss_type="logistic_loss",
                         symmetric_l2_regularization=1.0))
  good = dict(sparse_features=[], dense_features=[x],
              example_weights=np.ones(n, np.float32), example_labels=y,
              example_ids=np.arange(n))
  for _ in range(20):
    model.update_weights(model.minimize(examples=good))
  methods = {name: getattr(model, name) for name in (
      "unregularized_loss", "regularized_loss", "gap_parts", "predictions",
      "linear_predictions")}
  if in_function:
    methods = {name: tf.function(f) for name, f in methods.items()}
  # A valid batch's numbers: the closed forms.
  z = x.astype(np.float64) @ w.numpy().astype(np.float64)
  loss = np.mean(np.logaddexp(0.0, -(2 * y - 1) * z))
  assert float(methods["unregularized_loss"](good)) == pytest.approx(
      loss, rel=1e-6)
  assert 0.0 < loss < 0.1
  np.testing.assert_allclose(methods["predictions"](good),
                             1 / (1 + np.exp(-z)), rtol=1e-5)
  bad = {
      "labels [n, 1]": (dict(good, example_labels=y[:, None]),
                        r"example_labels must have rank 1, got shape "
                        r"\[569,1\]"),
      "label 2": (dict(good, example_labels=np.where(np.arange(n) == 5, 2.0,
                                                     y)),
                  r"example_labels\[5\] = 2 must be 0 or 1"),
      "NaN weight": (dict(good, example_weights=np.where(
          np.arange(n) == 7, np.nan, 1.0).astype(np.float32)),
                     r"example_weights\[7\] = nan must be finite and >= 0"),
      "dense rows": (dict(good, dense_features=[x[:-1]]),
                     r"dense_features\[0\] has 568 rows, not 569"),
  }
  for what, (batch, message) in bad.items():
    for name, method in methods.items():
      if name in ("predictions", "linear_predictions") and what == "label 2":
        np.testing.assert_allclose(method(batch), method(good))
        continue
      # (Where the shapes tell, a ValueError when traced.)
      with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                         match=message):
        method(batch)

"""Multiclass on the streaming doors: `TfSdca>Optimizer` with `num_classes`
and `SdcaModel(options={"num_classes": K})` reach the in-memory engine's
optimum on real data, keep W = W(alpha) of the float32 state, checkpoint,
and name bad input."""
import numpy as np
import pytest
import scipy.sparse
import sklearn.datasets
import tensorflow as tf

import tf_sdca
from tf_sdca import losses
from tf_sdca.trainer import InMemorySdca


def _standardized(loader):
  x, y = loader(return_X_y=True)
  x = (x - x.mean(0)) / x.std(0)
  perm = np.random.default_rng(0).permutation(len(y))
  return x[perm].astype(np.float32), y[perm].astype(np.int64)


def _objective(loss, w, x, y, l2):
  return float(np.sum(losses.primal(loss, x @ w, y)) +
               0.5 * l2 * np.sum(w * w))


def _batches(x, y, size, dense=True):
  """Consecutive batches, the features dense or as one sparse group (the
  nonzero entries, ids = columns)."""
  out = []
  for lo in range(0, len(y), size):
    hi = min(len(y), lo + size)
    part = x[lo:hi]
    if dense:
      sparse, dense_features = [], [part, np.ones((hi - lo, 1), np.float32)]
    else:
      csr = scipy.sparse.csr_matrix(part)
      rows = np.repeat(np.arange(hi - lo), np.diff(csr.indptr))
      sparse = [tf_sdca.SparseFeatureColumn(
          tf.constant(rows, tf.int64), tf.constant(csr.indices, tf.int64),
          tf.constant(csr.data, tf.float32))]
      dense_features = [np.ones((hi - lo, 1), np.float32)]
    out.append(dict(sparse_features=sparse, dense_features=dense_features,
                    example_weights=np.ones(hi - lo, np.float32),
                    example_labels=y[lo:hi].astype(np.float32),
                    example_ids=[str(i) for i in range(lo, hi)]))
  return out


def _model(loss, k, d, l2, dense=True):
  w = tf.Variable(tf.zeros([d, k]))
  b = tf.Variable(tf.zeros([k]))  # the bias: one row of K
  variables = (dict(sparse_features_weights=[], dense_features_weights=[w, b])
               if dense else
               dict(sparse_features_weights=[w], dense_features_weights=[b]))
  model = tf_sdca.SdcaModel(None, variables, dict(
      loss_type=loss, symmetric_l2_regularization=l2, num_classes=k))
  return model, w, b


@pytest.mark.parametrize("loss,loader,l2,epochs,dense", [
    ("softmax", sklearn.datasets.load_iris, 1.0, 300, True),
    ("softmax", sklearn.datasets.load_wine, 1.0, 300, False),
    ("multiclass_hinge", sklearn.datasets.load_wine, 10.0, 600, True),
])
def test_streamed_batches_reach_the_in_memory_optimum(loss, loader, l2,
                                                      epochs, dense):
  x, y = _standardized(loader)
  k, (n, d) = int(y.max()) + 1, x.shape
  model, w, b = _model(loss, k, d, l2, dense)
  batches = _batches(x, y, 50, dense)
  for _ in range(epochs):
    for batch in batches:
      model.update_weights(model.minimize(examples=batch))
  x1 = np.column_stack([x, np.ones(n)]).astype(np.float64)
  engine = InMemorySdca(loss=loss, num_classes=k, l2=l2)
  engine.fit(labels=y.astype(np.float32), dense=x1.astype(np.float32),
             epochs=3000, tol=1e-10, verbose=0)
  best = _objective(loss, engine.dense_weights, x1, y, l2)
  weights = np.concatenate([w.numpy(), b.numpy()[None]]).astype(np.float64)
  assert _objective(loss, weights, x1, y, l2) == pytest.approx(best,
                                                               rel=1e-6)
  # The float32 state's duals give the weights (W = W(alpha)) up to the
  # float32 rounding of the op's weight changes (the wire format): the
  # label's dual is the negated sum of the others, as the op reads it.
  keys = model.example_keys([str(i) for i in range(n)])
  state = model.state_lookup(keys).numpy().astype(np.float64)
  alpha = state[:, :k].copy()
  alpha[np.arange(n), y] = 0.0
  alpha[np.arange(n), y] = -alpha.sum(1)
  slots = np.concatenate([s.numpy() for g in model.weight_groups()
                          for s in g.slots])
  w_alpha = x1.T @ alpha / l2
  np.testing.assert_allclose(slots, w_alpha, rtol=0, atol=1e-6)
  # A true duality gap of the weights and those duals (not the state's
  # float32 losses): small, and >= 0 by weak duality.
  primal = _objective(loss, slots, x1, y, l2)
  dual = -np.sum(losses.dual(loss, alpha, y)) - 0.5 * l2 * np.sum(
      w_alpha ** 2)
  assert 0 <= primal - dual < 1e-5 * primal
  assert abs(float(model.approximate_duality_gap())) < 1e-5


def test_multiclass_state_survives_a_checkpoint(tmp_path):
  x, y = _standardized(sklearn.datasets.load_iris)
  model, w, b = _model("softmax", 3, 4, 1.0)
  batches = _batches(x, y, 50)
  for batch in batches:
    model.update_weights(model.minimize(examples=batch))
  path = tf.train.Checkpoint(model=model).save(str(tmp_path / "ckpt"))
  again, w2, b2 = _model("softmax", 3, 4, 1.0)
  tf.train.Checkpoint(model=again).restore(path).assert_consumed()
  for a, c in ((w, w2), (b, b2)):
    np.testing.assert_array_equal(a.numpy(), c.numpy())
  # Both continue identically.
  for m in (model, again):
    for batch in batches:
      m.update_weights(m.minimize(examples=batch))
  np.testing.assert_array_equal(w.numpy(), w2.numpy())
  state = again.get_state()
  # Every example is stored or held (carry_over='auto', the default).
  held = set(state["held"]["keys"].tolist())
  assert len(set(state["keys"].tolist()) | held) == 150
  assert state["values"].shape[1] == 6


def test_multiclass_errors_name_the_argument():
  x, y = _standardized(sklearn.datasets.load_iris)
  model, _, _ = _model("softmax", 3, 4, 1.0)
  batch = _batches(x[:10], y[:10], 10)[0]
  batch["example_labels"] = np.array([0, 1, 2, 3, 0, 1, 2, 0, 1, 2],
                                     np.float32)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_labels\[3\] = 3"):
    model.minimize(examples=batch)
  with pytest.raises(ValueError, match="num_classes"):
    _model("softmax", 1, 4, 1.0)
  with pytest.raises(ValueError, match="num_classes"):
    tf_sdca.SdcaModel(None, dict(
        sparse_features_weights=[], dense_features_weights=[
            tf.Variable(tf.zeros([4]))]), dict(
                loss_type="logistic", symmetric_l2_regularization=1.0,
                num_classes=3))
  with pytest.raises(ValueError, match="last axis"):
    tf_sdca.SdcaModel(None, dict(
        sparse_features_weights=[], dense_features_weights=[
            tf.Variable(tf.zeros([4, 2]))]), dict(
                loss_type="softmax", symmetric_l2_regularization=1.0,
                num_classes=3))
  # The op itself: a state of the binary width, a dual block off the
  # simplex.
  args = dict(sparse_example_indices=[], sparse_feature_indices=[],
              sparse_feature_values=[], dense_features=[x[:2]],
              example_weights=np.ones(2, np.float32),
              example_labels=np.array([0, 2], np.float32),
              sparse_indices=[], sparse_weights=[],
              dense_weights=[np.zeros((4, 3), np.float32)],
              loss_type="softmax_loss", l1=0.0, l2=1.0, num_classes=3)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="example_state_data"):
    tf_sdca.sdca_optimizer(example_state_data=np.zeros((2, 4), np.float32),
                           **args)
  state = np.zeros((2, 6), np.float32)
  state[1, :3] = [-0.7, -0.6, 1.3]  # p = (0.7, 0.6, -0.3): off the simplex
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_state_data\[1, 0:3\] is not a valid"):
    tf_sdca.sdca_optimizer(example_state_data=state, **args)

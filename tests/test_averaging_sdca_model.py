"""`SdcaModel(options=dict(average_from=T0))` (and `SDCAOptimizer`):
output averaging counted in `minimize` calls, checked against the iterates
of a model without averaging recorded call by call, on breast_cancer in
natural units (standardised)."""
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from tf_sdca import SDCAOptimizer
from tf_sdca import losses
from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

BATCH = 100


@pytest.fixture(scope="module")
def cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return (StandardScaler().fit_transform(x).astype(np.float32),
          y.astype(np.float32))


def _batches(x, y, sparse):
  """Consecutive batches of BATCH rows; the features as one sparse group
  (every entry) or one dense group, with the bias as a dense column."""
  out = []
  for start in range(0, len(y), BATCH):
    xb, yb = x[start:start + BATCH], y[start:start + BATCH]
    n, d = xb.shape
    groups = ([SparseFeatureColumn(np.repeat(np.arange(n), d),
                                   np.tile(np.arange(d), n), xb.ravel())]
              if sparse else [])
    dense = ([] if sparse else [xb]) + [np.ones((n, 1), np.float32)]
    out.append(dict(sparse_features=groups, dense_features=dense,
                    example_weights=np.ones(n, np.float32),
                    example_labels=yb,
                    example_ids=[str(i) for i in range(start, start + n)]))
  return out


def _model(sparse, average_from=None, l1=0.0):
  w = tf.Variable(tf.zeros([30, 1]))
  b = tf.Variable(tf.zeros([1]))
  options = dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
                 symmetric_l1_regularization=l1)
  if average_from is not None:
    options["average_from"] = average_from
  model = SdcaModel(None, dict(
      sparse_features_weights=[w] if sparse else [],
      dense_features_weights=([] if sparse else [w]) + [b]), options)
  return model, w, b


def _train(model, batches, calls, record=None, start=0):
  for call in range(start, calls):
    model.update_weights(model.minimize(
        examples=batches[call % len(batches)]))
    if record is not None:
      record.append(_table(model.get_state()["slots"]))


def _table(slots):
  return np.concatenate([np.reshape(s, -1) for s in slots])


@pytest.mark.parametrize("sparse", [False, True])
def test_the_variables_hold_the_mean_of_the_recorded_iterates(cancer,
                                                              sparse):
  x, y = cancer
  batches = _batches(x, y, sparse)
  l1 = 0.05 if sparse else 0.0
  plain, _, _ = _model(sparse, l1=l1)
  iterates = [_table(plain.get_state()["slots"])]  # the start: zeros
  _train(plain, batches, 30, iterates)
  for t0 in (0, 10):
    model, w, b = _model(sparse, average_from=t0, l1=l1)
    _train(model, batches, 30)
    mean = np.mean(iterates[t0:], axis=0)
    state = model.get_state()
    assert state["average_count"] == 31 - t0
    np.testing.assert_allclose(_table(state["average_slots"]), mean,
                               rtol=1e-10, atol=1e-13)
    # Training went on from the last iterate.
    np.testing.assert_array_equal(_table(state["slots"]), iterates[-1])
    shrunk = losses.shrink_l1(mean, l1, 1.0)
    np.testing.assert_allclose(np.concatenate([w.numpy().ravel(),
                                               b.numpy()]), shrunk,
                               rtol=1e-6, atol=1e-7)
    # predictions use the mean.
    z = x @ shrunk[:30] + shrunk[30]
    np.testing.assert_allclose(
        model.predictions(dict(batches[0], example_ids=None)).numpy(),
        1 / (1 + np.exp(-z[:BATCH])), rtol=1e-6)


def test_average_from_the_last_call_is_the_last_iterate(cancer):
  x, y = cancer
  batches = _batches(x, y, False)
  plain, w0, _ = _model(False)
  _train(plain, batches, 18)
  model, w, _ = _model(False, average_from=18)
  _train(model, batches, 18)
  np.testing.assert_array_equal(w.numpy(), w0.numpy())


def test_averaging_reaches_the_plain_optimum(cancer):
  x, y = cancer
  batches = _batches(x, y, False)
  whole = dict(sparse_features=[], dense_features=[
      x, np.ones((len(y), 1), np.float32)],
               example_weights=np.ones(len(y), np.float32),
               example_labels=y, example_ids=[str(i) for i in range(len(y))])
  # 200 passes in batches of 100; the mean of the last 200 calls. (The
  # mean of the last 600 lags: 3e-4 from the optimum, 5e-6 over 1200 --
  # a uniform mean carries the early iterates' error.)
  plain, w0, _ = _model(False)
  _train(plain, batches, 1200)
  model, w, _ = _model(False, average_from=1000)
  _train(model, batches, 1200)
  assert float(model.regularized_loss(whole)) == pytest.approx(
      float(plain.regularized_loss(whole)), rel=1e-6)
  np.testing.assert_allclose(w.numpy(), w0.numpy(), atol=1e-6)


def test_sdca_optimizer_trains_the_average_in_a_tf_function(cancer):
  x, y = cancer
  features = dict(x=x, example_id=np.arange(len(y)).astype(str))
  variables = dict(x=tf.Variable(tf.zeros([30])))
  plain_vars = dict(x=tf.Variable(tf.zeros([30])))
  plain = SDCAOptimizer("example_id", symmetric_l2_regularization=1.0)
  opt = SDCAOptimizer("example_id", symmetric_l2_regularization=1.0,
                      average_from=3)
  recorded = []

  def step_of(optimizer, v):
    @tf.function
    def step():
      optimizer.get_train_step(features, y, v)
    return step

  plain_step, step = step_of(plain, plain_vars), step_of(opt, variables)
  for _ in range(8):
    plain_step()
    recorded.append(plain_vars["x"].numpy().copy())
    step()
  np.testing.assert_allclose(variables["x"].numpy(),
                             np.mean(recorded[2:], axis=0), rtol=1e-5,
                             atol=1e-7)

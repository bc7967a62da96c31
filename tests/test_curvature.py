"""Losses of unbounded curvature at weak regularisation on real data in
natural units: the exact block step (`second_order`, tf_sdca/second_order.py)
reaches the optimum where SDCA's coordinate steps cannot.

SDCA contracts the dual by about l2 / (s_i |x_i|^2 L) a pass (L: the
loss's largest curvature). The RAND doctor visits have |x|^2 up to 3,475
and counts up to 77: at l2 = 1 that is ~2.5e5 passes per factor e, and the
default fit ended 300 passes 77% above the optimum on 5,000 of the people.
The reference: scipy's L-BFGS on P(w) = sum_i phi(w.x_i) + l2/2 |w|^2 in
float64, on the float32 features the ops see, certified by its gradient
(P is l2-strongly convex: P(w) - P* <= |grad P(w)|^2 / (2 l2)).
"""
import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize
from scipy.special import expit
from sklearn.datasets import load_breast_cancer, load_digits, load_wine

from sdca_testutil import rand_health_insurance
from tf_sdca import second_order
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.trainer import InMemorySdca

L2 = 1.0
TARGET = 1e-3  # relative, the issue's


def _objective(loss, x, y, l2, k=1):
  """P and its gradient (flat w; [d, K] row-major for softmax)."""
  def f(w):
    if loss == "softmax":
      z = x @ w.reshape(-1, k)
      top = z.max(1, keepdims=True)
      e = np.exp(z - top)
      total = e.sum(1, keepdims=True)
      onehot = np.eye(k)[y.astype(np.int64)]
      value = np.sum(top[:, 0] + np.log(total[:, 0]) - np.sum(onehot * z, 1))
      dz = e / total - onehot
    elif loss == "poisson":
      z = x @ w
      value, dz = np.sum(np.exp(z) - y * z), np.exp(z) - y
    else:
      s, z = 2.0 * y - 1.0, x @ w
      value, dz = np.sum(np.logaddexp(0.0, -s * z)), -s * expit(-s * z)
    return value + 0.5 * l2 * (w @ w), (x.T @ dz).ravel() + l2 * w
  return f


def _optimum(loss, x, y, l2, k=1):
  f = _objective(loss, x, y, l2, k)
  res = minimize(f, np.zeros(x.shape[1] * k), jac=True, method="L-BFGS-B",
                 options=dict(maxiter=50000, maxfun=100000, ftol=1e-16,
                              gtol=1e-11, maxcor=30))
  bound = np.sum(res.jac ** 2) / (2.0 * l2)
  assert bound <= 1e-6 * abs(res.fun), "the reference is not converged"
  return res.fun, f


def _doctor_visits(n=5000):
  """n of the RAND doctor visits (a seeded draw), nine covariates in
  natural units and an intercept, as float32 (what the ops read)."""
  x, y = rand_health_insurance()
  rows = np.random.default_rng(0).permutation(len(y))[:n]
  x = np.hstack([x[rows], np.ones((n, 1))]).astype(np.float32)
  return x, y[rows]


def _raw(loader, binary=False):
  """A scikit-learn set unscaled, with an intercept column."""
  d = loader()
  x = np.hstack([d.data, np.ones((len(d.data), 1))]).astype(np.float32)
  y = (d.target == 0) if binary else d.target
  return x, y.astype(np.float64)


# (loss, data, K). Raw breast_cancer has features up to 4,254 (|x|^2 to
# 1.9e7), wine's proline up to 1,680.
IN_MEMORY = {
    "poisson-doctor_visits": ("poisson", _doctor_visits, 1),
    "logistic-breast_cancer": (
        "logistic", lambda: _raw(load_breast_cancer), 1),
    "softmax-wine": ("softmax", lambda: _raw(load_wine), 3),
    # Pixel counts 0-16, 65 x 10 weights: 300 plain epochs end 3.9e-3 |P*|
    # above; the block step reaches gap 0 in one epoch. Its L-BFGS
    # reference takes a minute or more: the wine case is the small one.
    "softmax-digits": pytest.param(
        ("softmax", lambda: _raw(load_digits), 10), marks=pytest.mark.slow),
}


@pytest.mark.parametrize("problem", list(IN_MEMORY.values()),
                         ids=list(IN_MEMORY))
def test_in_memory_default_reaches_the_optimum_at_weak_l2(problem):
  # Measured (l2 = 1, 300 epochs): plain SDCA ends 0.77 (Poisson), 1.8
  # (logistic) and 7.6 (softmax) times |P*| above the optimum; with the
  # block step the gap is ~1e-15 after the first epoch.
  loss, load, k = problem
  x, y = load()
  best, f = _optimum(loss, x.astype(np.float64), y, L2, k)
  model = InMemorySdca(loss=loss, l2=L2, num_classes=k if k > 1 else None)
  history = model.fit(y, dense=x, epochs=300, tol=1e-12, verbose=0)
  assert model.second_order_used
  assert len(history["loss"]) <= 300 and history["duality_gap"][-1] < 1e-12
  primal = f(np.asarray(model.dense_weights, np.float64).ravel())[0]
  assert abs(primal - best) <= 1e-8 * abs(best)
  assert history["loss"][-1] * len(y) == pytest.approx(primal, rel=1e-9)


@pytest.mark.parametrize("problem", list(IN_MEMORY.values())[:3],
                         ids=list(IN_MEMORY)[:3])
def test_keras_in_memory_default_takes_the_same_step(problem):
  # keras.LinearModel's in-memory fit runs the engine's epochs: at its
  # defaults it takes the block step as InMemorySdca does, the same gaps
  # bit for bit, and ends at the L-BFGS optimum (the intercept is the
  # ones column, regularised as the reference's).
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  loss, load, k = problem
  x, y = load()
  best, f = _optimum(loss, x.astype(np.float64), y, L2, k)
  model = InMemorySdca(loss=loss, l2=L2, num_classes=k if k > 1 else None)
  history = model.fit(y, dense=x, epochs=300, tol=1e-12, verbose=0)
  keras_model = LinearModel(loss=loss, l2=L2, use_bias=False,
                            num_classes=k if k > 1 else None)
  keras_history = keras_model.fit(x, y, epochs=300, tol=1e-12,
                                  verbose=0).history
  assert keras_history["duality_gap"] == history["duality_gap"]
  assert keras_history["loss"] == history["loss"]
  assert len(keras_history["loss"]) < 300
  primal = f(np.asarray(keras_model.get_weights()[0], np.float64).ravel())[0]
  # The Keras kernel is float32: within its rounding of the optimum.
  assert abs(primal - best) <= 1e-5 * abs(best)
  off = LinearModel(loss=loss, l2=L2, use_bias=False, second_order="off",
                    num_classes=k if k > 1 else None)
  with pytest.warns(UserWarning):
    gaps = off.fit(x, y, epochs=20, verbose=0).history["duality_gap"]
  assert gaps[-1] > 1e3 * keras_history["duality_gap"][-1]
  assert LinearModel.from_config(off.get_config()).second_order == "off"


def test_plain_coordinate_steps_stall_on_doctor_visits():
  # Why the step exists: without it the default fit is far from the
  # optimum after 300 epochs (measured 0.77 |P*| above), however long the
  # gap has been falling.
  x, y = _doctor_visits()
  best, f = _optimum("poisson", x.astype(np.float64), y, L2)
  model = InMemorySdca(loss="poisson", l2=L2, second_order="off")
  with pytest.warns(UserWarning, match="badly conditioned for SDCA"):
    model.fit(y, dense=x, epochs=300, verbose=0)
  primal = f(np.asarray(model.dense_weights, np.float64))[0]
  assert primal - best > 0.1 * abs(best)


def _stream(loss, x, y, l2, batch_size, carry_over, max_passes, f, best,
            k=1):
  """SdcaModel over fixed consecutive batches; the passes until P is
  within TARGET of `best` (None: not within max_passes)."""
  n, d = x.shape
  w = tf.Variable(tf.zeros([d, k] if k > 1 else [d]))
  model = SdcaModel(None, dict(sparse_features_weights=[],
                               dense_features_weights=[w]),
                    dict(loss_type=loss + "_loss",
                         symmetric_l2_regularization=l2, num_classes=k,
                         carry_over=carry_over))
  batches = [dict(sparse_features=[], dense_features=[x[i:i + batch_size]],
                  example_weights=np.ones(len(x[i:i + batch_size]),
                                          np.float32),
                  example_labels=y[i:i + batch_size].astype(np.float32),
                  example_ids=tf.constant([b"%d" % r for r in range(
                      i, min(i + batch_size, n))]))
             for i in range(0, n, batch_size)]
  for passes in range(1, max_passes + 1):
    for b in batches:
      model.minimize(examples=b)
    if passes % 5 == 0:
      primal = f(model._dense[0].slots[0].numpy().astype(np.float64)
                 .ravel())[0]
      if abs(primal - best) <= TARGET * abs(best):
        return passes
  return None


@pytest.mark.parametrize("problem", [
    ("poisson", _doctor_visits, 1000, 1),
    ("logistic", lambda: _raw(load_breast_cancer), 100, 1),
    ("softmax", lambda: _raw(load_wine), 30, 3)])
def test_a_stream_of_batches_reaches_the_optimum_at_weak_l2(problem):
  # Measured (carry_over='auto', l2 = 1): Poisson on 5,000 doctor visits in
  # batches of 1,000 3e-6 above P* after 10 passes (1.9 |P*| after 300
  # without the step); raw breast_cancer in batches of 100 1e-4 after 300
  # (1.8 |P*| without); raw wine, softmax, batches of 30: 3e-5 after 20
  # (11 |P*| after 300 without).
  loss, load, batch_size, k = problem
  x, y = load()
  best, f = _optimum(loss, x.astype(np.float64), y, L2, k)
  passes = _stream(loss, x, y, L2, batch_size, "auto", 300, f, best, k)
  assert passes is not None, f"not within {TARGET} of P* in 300 passes"


def test_auto_leaves_well_conditioned_problems_to_sdca():
  # Standardised breast_cancer at l2 = 1: SDCA's bound is ~100 passes per
  # factor e, below MIN_PASSES_PER_E_FOLD; the fit is plain SDCA (the door
  # records of such runs keep their bits).
  x, y = _raw(load_breast_cancer)
  x[:, :-1] = (x[:, :-1] - x[:, :-1].mean(0)) / x[:, :-1].std(0)
  model = InMemorySdca(loss="logistic", l2=L2)
  model.fit(y, dense=x, epochs=1, verbose=0)
  assert not model.second_order_used
  design = second_order.design_matrix(len(y), None, x, None)
  passes = second_order.coordinate_passes(
      "logistic_loss", L2, design, y.astype(np.float32),
      np.ones(len(y), np.float32))
  assert 10 < passes < second_order.MIN_PASSES_PER_E_FOLD


def test_streamed_step_is_traced_once_for_every_model_and_keeps_no_graph():
  """`second_order.shared_streamed_block_step`: eager models of one (loss,
  l2, choice) share one trace of the step and train the same weights as
  with the step built inside each model's own trace; in TF1 graphs the
  step is built inline, so a finished graph (an estimator's per `train`
  call) is freed."""
  import gc  # pylint: disable=import-outside-toplevel
  import weakref  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x, y = x[:120, :6].astype(np.float32), y[:120].astype(np.float32)
  batches = [dict(sparse_features=[], dense_features=[x[r]],
                  example_weights=np.ones(len(r), np.float32),
                  example_labels=y[r], example_ids=r.astype(np.int64))
             for r in np.split(np.arange(120), 3)]
  options = dict(loss_type="logistic_loss", symmetric_l2_regularization=0.37,
                 second_order="on")

  def train():
    w = tf.Variable(tf.zeros([6]))
    model = SdcaModel(None, dict(sparse_features_weights=[],
                                 dense_features_weights=[w]), options)
    for _ in range(3):
      for batch in batches:
        model.update_weights(model.minimize(examples=batch))
    return w.numpy()

  key = ("logistic_loss", float(np.float32(0.37)), "on")
  first = train()
  shared = second_order._STEP_FUNCTIONS[key]  # pylint: disable=protected-access
  traces = shared.experimental_get_tracing_count()
  np.testing.assert_array_equal(train(), first)
  assert shared.experimental_get_tracing_count() == traces
  inline = second_order.shared_streamed_block_step
  try:
    second_order.shared_streamed_block_step = (
        lambda *a, **k: second_order.streamed_block_step(*a, **k))
    np.testing.assert_array_equal(train(), first)
  finally:
    second_order.shared_streamed_block_step = inline

  graphs = []
  for _ in range(2):
    graph = tf.Graph()
    with graph.as_default():
      w = tf.compat.v1.Variable(tf.zeros([6]))
      model = SdcaModel(None, dict(sparse_features_weights=[],
                                   dense_features_weights=[w]), options)
      op = model.update_weights(model.minimize(examples={
          k: (v if k == "sparse_features" else
              [tf.constant(t) for t in v] if isinstance(v, list) else
              tf.constant(v)) for k, v in batches[0].items()}))
      with tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        session.run(op)
    graphs.append(weakref.ref(graph))
    del graph, w, model, op, session
  gc.collect()
  assert [g() for g in graphs] == [None, None]


def test_a_step_that_would_raise_the_objective_is_not_taken():
  """Where the Newton system is ill-conditioned, the duals' weights
  X^T (s alpha) / l2 do not follow Newton's point: a collinear column
  scaled by 1e6 at l2 = 1e-6 took diabetes' squared loss 2,000x above its
  optimum (scipy warning twice an epoch), and raw breast_cancer's logistic
  at l2 = 1e-6 drifted between relative gaps of 5e-9 and 1e-4 for 300
  epochs. Each step is now kept only where it lowers P."""
  import warnings  # pylint: disable=import-outside-toplevel
  from sklearn.datasets import load_diabetes  # pylint: disable=import-outside-toplevel
  x, y = load_diabetes(return_X_y=True)
  x = np.hstack([x, x[:, :1] * 1e6, np.ones((len(y), 1))]).astype(np.float32)
  y = y.astype(np.float32)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = InMemorySdca("squared", l2=1e-6)
    model.fit(y, dense=x, epochs=20, verbose=0)
  names = [type(w.message).__name__ for w in caught]
  assert "LinAlgWarning" not in names, names
  assert sum("Newton system is ill-conditioned" in str(w.message)
             for w in caught) == 1
  # The optimum of the mean squared loss + l2/2 |w|^2, in float64 on the
  # float32 rows (the objective per row, as the history's loss).
  xd = x.astype(np.float64)
  n = len(y)
  # (Least squares on the stacked rows [x / sqrt(n); sqrt(l2) I]: the
  # normal equations lose the collinear column's digits.)
  d = x.shape[1]
  w = np.linalg.lstsq(np.vstack([xd / np.sqrt(n), 1e-3 * np.eye(d)]),
                      np.r_[y / np.sqrt(n), np.zeros(d)], rcond=None)[0]
  objective = lambda w: (0.5 * np.mean((xd @ w - y) ** 2) +  # noqa: E731
                         0.5 * 1e-6 * w @ w)
  best = objective(w)
  # (In numpy's arithmetic on both sides: the collinear columns' margins
  # cancel, and the op's sums in another order differ by ~1e-3.)
  reached = objective(model.dense_weights)
  assert best * (1 - 1e-9) <= reached <= best * (1 + 1e-4), (reached, best)
  xr, yr = load_breast_cancer(return_X_y=True)
  xr = np.hstack([xr, np.ones((len(yr), 1))]).astype(np.float32)
  model = InMemorySdca("logistic", l2=1e-6)
  history = model.fit(yr.astype(np.float32), dense=xr, epochs=300,
                      tol=1e-10, verbose=0)
  assert history["duality_gap"][-1] < 1e-10
  assert len(history["duality_gap"]) <= 10

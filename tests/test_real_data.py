"""Training on real data in its natural units, checked against an independent
optimum, and the steps whose exact result is out of range.

The data sets ship inside scikit-learn (no download): digits, whose 64
features are counts (the number of set pixels, 0-16, in each 4x4 block of
a 32x32 bitmap), gives a Poisson regression of one block's count on the
other 63 counts plus an intercept, unscaled; breast_cancer (logistic) and
diabetes (squared loss, its raw target) are standardised. The RAND Health
Insurance Experiment's doctor visits (counts 0-77 on nine unscaled
covariates) ship in Debian's python3-statsmodels, which .ci/setup unpacks
(the tests that read them skip where it could not). The reference
optimum of P(w) = sum_i phi(w.x_i) + l2/2 |w|^2 is scipy's L-BFGS in float64,
certified by its gradient: P is l2-strongly convex, so P(w) - P* <=
|grad P(w)|^2 / (2 l2).
"""
import functools

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import brentq, minimize
from sklearn.datasets import load_breast_cancer, load_diabetes, load_digits
from sklearn.linear_model import PoissonRegressor

import tf_sdca
from sdca_testutil import rand_health_insurance
from tf_sdca import engine
from tf_sdca.trainer import InMemorySdca


def _primal_and_gradient(loss, x, y, l2):
  def f(w):
    z = x @ w
    if loss == "poisson_loss":
      e = np.exp(z)
      value, dz = np.sum(e - y * z), e - y
    elif loss == "logistic_loss":
      s = 2.0 * y - 1.0
      value, dz = np.sum(np.logaddexp(0.0, -s * z)), -s / (1.0 + np.exp(s * z))
    else:
      r = z - y
      value, dz = 0.5 * (r @ r), r
    return value + 0.5 * l2 * (w @ w), x.T @ dz + l2 * w
  return f


def _lbfgs_optimum(loss, x, y, l2):
  f = _primal_and_gradient(loss, x, y, l2)
  res = minimize(f, np.zeros(x.shape[1]), jac=True, method="L-BFGS-B",
                 options=dict(maxiter=20000, maxfun=40000, ftol=1e-16,
                              gtol=1e-12, maxcor=30))
  bound = np.sum(res.jac ** 2) / (2.0 * l2)
  assert bound <= 1e-8 * abs(res.fun), "the reference is not converged"
  return res.fun


def _digit_counts():
  pixels = load_digits().data  # counts 0..16
  target = 36                  # a block in the middle of the digit
  x = np.delete(pixels, target, axis=1)
  return np.hstack([x, np.ones((len(x), 1))]), pixels[:, target]  # exact


def _standardised(data):
  x = (data.data - data.data.mean(0)) / data.data.std(0)
  # The op reads float32 features: the reference uses the same numbers.
  x = x.astype(np.float32).astype(np.float64)
  return np.hstack([x, np.ones((len(x), 1))]), data.target.astype(np.float64)


# (loss, data, l2). Poisson's l2 = 1000: in natural units |x|^2 reaches
# ~5000 and exp(w.x) ~16, so SDCA's linear rate, ~exp(-l2 / (16 |x|^2)) a
# pass, needs l2 of this order to converge in a few hundred passes.
PROBLEMS = {
    "poisson-digits": ("poisson_loss", _digit_counts, 1000.0),
    "logistic-breast_cancer": (
        "logistic_loss", lambda: _standardised(load_breast_cancer()), 1.0),
    "squared-diabetes": (
        "squared_loss", lambda: _standardised(load_diabetes()), 1.0),
}
# The doors onto the one engine: packed rows (the default, with momentum
# 'auto'), packed rows in the adaptive order, packed rows with a fixed
# momentum, and mini-batches for TfSdca>Optimizer.
PATHS = {"packed": {}, "adaptive": {"visit_order": "adaptive"},
         "momentum": {"momentum": 0.5}, "minibatch": {"batch_size": 450}}


def _assert_gaps_valid(history):
  gaps = np.asarray(history["duality_gap"])
  assert np.all(np.isfinite(gaps)), gaps
  assert np.all(gaps >= 0.0), gaps[gaps < 0]


@pytest.mark.parametrize("path", sorted(PATHS))
@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_in_memory_sdca_reaches_the_lbfgs_optimum_on_real_data(problem, path):
  loss, load, l2 = PROBLEMS[problem]
  x, y = load()
  options = dict(PATHS[path])
  batch_size = options.pop("batch_size", None)
  model = InMemorySdca(loss=loss, l2=l2, **options)
  # tol 1e-8 on the relative gap bounds the primal's relative error by it.
  history = model.fit(y, dense=x, epochs=2000, tol=1e-8, verbose=0,
                      batch_size=batch_size)
  _assert_gaps_valid(history)
  assert history["duality_gap"][-1] < 1e-8, "did not converge"
  optimum = _lbfgs_optimum(loss, x, y, l2)
  primal, _ = _primal_and_gradient(loss, x, y, l2)(model.dense_weights)
  # 1e-6: the target; the gap certifies ~1e-8 (the mini-batch
  # path's float32 weights add ~1e-7 relative in w, second order in P).
  assert primal == pytest.approx(optimum, rel=1e-6)
  assert history["loss"][-1] * len(y) == pytest.approx(primal, rel=1e-9)


def _doctor_visits():
  """The RAND Health Insurance Experiment's outpatient visits to a doctor
  (Debian's python3-statsmodels; 20,190 people, counts 0-77) on its nine
  covariates in natural units (chronic diseases up to 58.6, so |x|^2 up to
  3,475) and an intercept."""
  x, y = rand_health_insurance()
  return np.hstack([x, np.ones((len(y), 1))]), y


@pytest.mark.parametrize("path", sorted(PATHS))
def test_poisson_on_doctor_visits_reaches_lbfgs_and_scikit_learn(path):
  # Count data as the issue's: unscaled covariates, counts up to 77. At
  # l2 = 1000 every path converges (measured epochs to a gap of 1e-8:
  # permutation 594, adaptive 23, momentum 'auto' 294, mini-batches of
  # 5,000 596); at l2 = 100 the permutation is still at 3.9e-6 after 3,000
  # epochs where the adaptive order needs 143 (g3doc/trainer.md).
  x, y = _doctor_visits()
  l2 = 1000.0
  options = dict(PATHS[path])
  batch_size = 5000 if options.pop("batch_size", None) else None
  model = InMemorySdca(loss="poisson_loss", l2=l2, **options)
  history = model.fit(y, dense=x, epochs=2000, tol=1e-8, verbose=0,
                      batch_size=batch_size)
  _assert_gaps_valid(history)
  assert history["duality_gap"][-1] < 1e-8, "did not converge"
  optimum = _lbfgs_optimum("poisson_loss", x, y, l2)
  primal, _ = _primal_and_gradient("poisson_loss", x, y, l2)(
      model.dense_weights)
  assert primal == pytest.approx(optimum, rel=1e-6)  # P* < 0 here
  if path == "packed":
    # scikit-learn's PoissonRegressor minimises the mean half deviance plus
    # alpha/2 |w|^2: the same objective over n, up to a constant, with
    # alpha = l2 / n (the intercept a column of ones, as ours).
    ref = PoissonRegressor(alpha=l2 / len(y), fit_intercept=False,
                           tol=1e-12, max_iter=10000).fit(x, y)
    theirs, _ = _primal_and_gradient("poisson_loss", x, y, l2)(ref.coef_)
    assert theirs == pytest.approx(optimum, rel=1e-9)
    assert np.linalg.norm(model.dense_weights - ref.coef_) <= \
        1e-3 * np.linalg.norm(ref.coef_)


@functools.lru_cache(maxsize=None)
def _small_l2_optimum(data):
  """The L-BFGS optimum of Poisson at l2 = 1 (once per data set)."""
  x, y = _digit_counts() if data == "digits" else _doctor_visits()
  return _lbfgs_optimum("poisson_loss", x, y, 1.0)


@pytest.mark.parametrize("data", ["digits", "doctor_visits"])
@pytest.mark.parametrize("path", sorted(PATHS))
def test_poisson_on_counts_with_small_l2_reaches_lbfgs(path, data):
  # l2 = 1 makes q = |x|^2 / l2 up to ~5000 (digits; doctor visits ~3,500)
  # and once put NaN into the weights in the first passes on every path;
  # every pass is finite and its gap valid. SDCA's coordinate steps alone
  # then need ~|x|^2 max(y) / l2 passes per factor e (300 default epochs
  # ended 0.77 |P*| above the optimum on 5,000 doctor visits): the exact
  # block step (second_order='auto', tests/test_curvature.py) takes every
  # path to the optimum, certified by the gap.
  x, y = _digit_counts() if data == "digits" else _doctor_visits()
  options = dict(PATHS[path])
  batch_size = options.pop("batch_size", None)
  model = InMemorySdca(loss="poisson_loss", l2=1.0, **options)
  history = model.fit(y, dense=x, epochs=300, tol=1e-10, verbose=0,
                      batch_size=batch_size)
  _assert_gaps_valid(history)
  assert np.all(np.isfinite(model.dense_weights))
  assert np.all(np.isfinite(model.duals)) and np.all(model.duals <= y)
  assert model.second_order_used
  assert history["duality_gap"][-1] < 1e-10, "did not converge"
  optimum = _small_l2_optimum(data)
  primal, _ = _primal_and_gradient("poisson_loss", x, y, 1.0)(
      model.dense_weights)
  # Float32 features (the ops') against float64: ~1e-7 relative.
  assert primal == pytest.approx(optimum, rel=1e-6)


def _one_row(x, label, l2, w=0.0, dual=0.0):
  """The mini-batch op on one example with one dense feature."""
  return tf_sdca.sdca_optimizer(
      [], [], [], [np.array([[x]], np.float32)], np.ones(1, np.float32),
      np.array([label], np.float32), [], [], [np.array([w], np.float32)],
      np.array([[dual, 0.0, 0.0, 0.0]], np.float32),
      loss_type="poisson_loss", l1=0.0, l2=l2)


@pytest.mark.parametrize("label", [0.0, 1.0, 3.0, 9.0])
def test_poisson_one_row_with_large_q_returns_the_closed_optimum(label):
  # x = 2, l2 = 0.01: q = s x^2 / l2 = 400. From w = 0, alpha = 0 one step
  # is the exact optimum of this one-row problem: w = a x / l2 and
  # a = y - exp(x w), i.e. y - a = exp(400 a) (a = 0 exactly for y = 1).
  state, _, d_dense = _one_row(2.0, label, 0.01)
  state, delta = state.numpy(), d_dense[0].numpy()
  assert np.all(np.isfinite(state)) and np.all(np.isfinite(delta))
  # The root is below log(y) / 400 < 0.1 (and above -1).
  a_star = brentq(lambda a: label - a - np.exp(400.0 * a), -1.0, 0.1,
                  xtol=1e-300, rtol=1e-15) if label != 1.0 else 0.0
  # Float32 state: 1e-7 relative, and 1e-15 absolute around a = 0.
  assert state[0, 0] == pytest.approx(a_star, rel=1e-7, abs=1e-15)
  assert delta[0] == pytest.approx(a_star * 2.0 / 0.01, rel=1e-6, abs=1e-12)
  # Columns: s phi(0) = 1 at the input weights; s phi*(-a) of the new dual.
  t = label - a_star
  assert state[0, 1] == pytest.approx(1.0)
  assert state[0, 2] == pytest.approx(t * np.log(t) - t, rel=1e-6)


def test_poisson_step_beyond_float32_is_an_invalid_argument():
  # x = 1e-20, w = 1e22 (w.x = 100), y = 0, l2 = 1: q = 1e-40 and the exact
  # step is t = omega(log q + 100) / q ~ 6e40, finite in float64 but not
  # in the float32 state: the op must refuse rather than return -inf.
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"poisson_loss: the dual step of example 0 "
                           r"\(label 0.*margin w.x = 99.99.*q = .*e-41"):
    _one_row(1e-20, 0.0, 1.0, w=1e22)


@pytest.mark.parametrize("loss,l2", [("softmax", 0.1), ("logistic", 0.1),
                                     ("squared", 3.3)])
def test_an_l2_that_float32_rounds_keeps_the_converged_gap_valid(loss, l2):
  """The ops hold l2 as a float32 attr (0.1 -> 0.10000000149), so their
  weights are X^T alpha / float32(l2): a gap evaluated with the float64 l2
  ran 1.5e-8 relative below zero once training converged and was raised as
  invalid (softmax on standardised wine, l2 = 0.1, after ~150 epochs).
  Trained to convergence every epoch's gap must stay valid, and the pair's
  objective is the float32-l2 problem's (within 1e-7 of an independent
  evaluation with that l2)."""
  from sklearn.datasets import load_wine  # pylint: disable=import-outside-toplevel
  d = load_wine()
  x = (d.data - d.data.mean(0)) / d.data.std(0)
  x = np.hstack([x, np.ones((len(x), 1))]).astype(np.float32)
  labels = {"softmax": d.target, "logistic": d.target == 0,
            "squared": x[:, 0] + d.target}[loss].astype(np.float64)
  model = InMemorySdca(loss=loss, l2=l2,
                       num_classes=3 if loss == "softmax" else None)
  history = model.fit(labels, dense=x, epochs=300, tol=1e-13, verbose=0)
  gaps = np.asarray(history["duality_gap"])
  assert np.all(gaps >= 0.0) and gaps[-1] < 1e-12, gaps[-5:]
  w = np.asarray(model.dense_weights, np.float64).reshape(x.shape[1], -1)
  alpha = np.asarray(model.duals, np.float64).reshape(len(x), -1)
  np.testing.assert_allclose(
      w, x.astype(np.float64).T @ alpha / float(np.float32(l2)),
      rtol=1e-9, atol=1e-12)


def test_negative_or_non_finite_gap_is_an_error_not_convergence():
  def parts_to_gap(parts):
    return engine.objective_and_gap(parts, "poisson_loss", 0.0, 1.0)
  # loss sum + dual loss sum + l2 |w|^2 = 3 - 5 + 1 < 0: parts that no
  # primal-dual pair gives.
  with pytest.raises(FloatingPointError, match="poisson_loss: invalid "
                                               "duality gap -1.0"):
    parts_to_gap([3.0, -5.0, 1.0, 0.0])
  with pytest.raises(FloatingPointError, match="invalid duality gap nan"):
    parts_to_gap([np.nan, -5.0, 1.0, 0.0])
  # A converged gap that float64 rounding put a few ulps below zero is 0.
  primal, gap = parts_to_gap([3.0, -4.0 - 4e-15, 1.0, 0.0])
  assert gap == 0.0 and primal == pytest.approx(3.5)
  # The op's parts come as a float64 array: the same values, the same
  # errors.
  parts = [96.5, -90.25, 12.375, 40.0]
  assert parts_to_gap(np.array(parts)) == parts_to_gap(parts) == (
      96.5 + 0.5 * 12.375, 96.5 - 90.25 + 12.375)
  with pytest.raises(FloatingPointError, match="invalid duality gap inf"):
    parts_to_gap(np.array([np.inf, -5.0, 1.0, 0.0]))

"""An extrapolated epoch in one op call (`engine.train_one_epoch`,
`sdca_ops.extrapolated_pass`): the heavy ball's start computed in C++ and
the pass after it give the weights, duals, history and momentum state of
`Extrapolation.start_epoch` (numpy) followed by a plain pass, bit for bit,
with the cap of the duals' domain binding and not, on the binary and the
multiclass losses, one epoch per call and trained ahead; and the fit it
trains reaches the optimum its duality gap certifies."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler

from tf_sdca import engine
from tf_sdca.ops import sdca_ops
from tf_sdca.trainer import InMemorySdca


def _numpy_epoch(state, problem, epoch, config, extrapolation=None,
                 restart=None):
  """The epoch as it ran before: numpy's extrapolation, then the pass."""
  if extrapolation is not None:
    extrapolation.start_epoch(restart)
  state.pass_over(problem, epoch, config, passes=1)


def _ids_data(n=3000, d=400, k=8, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, d, size=(n, k))
  w = rng.normal(size=d)
  y = (w[ids].sum(1) + rng.normal(size=n) > 0).astype(np.float32)
  return dict(labels=y, ids=ids)


def _wine():
  x, y = load_wine(return_X_y=True)
  return dict(labels=y.astype(np.float32),
              dense=StandardScaler().fit_transform(x).astype(np.float32))


CASES = {
    # name: (model options, data, fit options)
    "logistic auto": (dict(loss="logistic", l2=0.05), _ids_data,
                      dict(epochs=25)),
    "logistic fixed beta, cap binding": (
        dict(loss="logistic", l2=0.01, momentum=0.9), _ids_data,
        dict(epochs=25)),
    "smooth hinge fixed beta": (
        dict(loss="smooth_hinge", l2=0.05, momentum=0.5,
             visit_order="permutation"), _ids_data, dict(epochs=20)),
    "softmax fixed beta": (
        dict(loss="softmax", l2=0.1, num_classes=3, momentum=0.5), _wine,
        dict(epochs=20)),
}


def _fit(monkeypatch, in_op, ahead, options, data, fit_options):
  monkeypatch.setattr(engine, "FUSED_EPOCHS", False)
  monkeypatch.setattr(engine, "TRAIN_AHEAD", ahead)
  calls = []
  original = sdca_ops.extrapolated_pass

  def spy(*args, **kwargs):
    calls.append(1)
    return original(*args, **kwargs)

  monkeypatch.setattr(sdca_ops, "extrapolated_pass", spy)
  if not in_op:
    monkeypatch.setattr(engine, "train_one_epoch", _numpy_epoch)
  model = InMemorySdca(**options)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    history = model.fit(**data, verbose=0, **fit_options)
  state = model.momentum_state
  monkeypatch.undo()
  return model, history, state, len(calls)


def _bits(a):
  return np.ascontiguousarray(a, np.float64).view(np.uint64).tobytes()


@pytest.mark.parametrize("ahead", [False, True])
@pytest.mark.parametrize("name", sorted(CASES))
def test_extrapolated_pass_is_numpys_epoch_bit_for_bit(monkeypatch, name,
                                                       ahead):
  options, data, fit_options = CASES[name]
  data = data()
  numpy_fit = _fit(monkeypatch, False, ahead, options, data, fit_options)
  op_fit = _fit(monkeypatch, True, ahead, options, data, fit_options)
  (m1, h1, s1, c1), (m2, h2, s2, c2) = numpy_fit, op_fit
  assert c1 == 0 and c2 > 0  # the op extrapolated some epochs
  assert m2.momentum_used > 0.0
  for a, b in ((m1.duals, m2.duals), (m1.dense_weights, m2.dense_weights),
               (m1.sparse_weights, m2.sparse_weights)):
    assert (a is None) == (b is None)
    if a is not None:
      assert _bits(a) == _bits(b)
  for key in ("loss", "duality_gap"):
    assert _bits(h1[key]) == _bits(h2[key])
  assert sorted(s1) == sorted(s2)
  for key in s1:
    assert _bits(s1[key]) == _bits(s2[key]), key


def test_extrapolated_fit_reaches_its_certified_optimum():
  """Momentum's epochs through the op: the relative gap falls below 1e-8,
  and the primal objective matches scipy's L-BFGS on the same objective."""
  from scipy.optimize import minimize  # pylint: disable=import-outside-toplevel
  data = _ids_data(n=2000, d=200)
  y = np.where(data["labels"] > 0, 1.0, -1.0)
  l2 = 0.05
  model = InMemorySdca(loss="logistic", l2=l2, momentum=0.5)
  history = model.fit(**data, epochs=200, tol=1e-8, verbose=0)
  assert history["duality_gap"][-1] < 1e-8
  n, d = data["ids"].shape[0], 200

  def objective(w):
    z = w[data["ids"]].sum(1)
    margins = -y * z
    value = np.logaddexp(0.0, margins).sum() + 0.5 * l2 * w @ w
    p = 1.0 / (1.0 + np.exp(-margins))
    grad = np.zeros(d)
    np.add.at(grad, data["ids"], (-y * p)[:, None])
    return value / n, (grad + l2 * w) / n

  best = minimize(objective, np.zeros(d), jac=True, method="L-BFGS-B",
                  options=dict(gtol=1e-12, ftol=1e-15, maxiter=5000))
  ours = objective(np.asarray(model.sparse_weights, np.float64))[0]
  assert abs(ours - best.fun) <= 1e-7 * abs(best.fun)
  assert history["loss"][-1] == pytest.approx(ours, rel=1e-7)

"""`InMemorySdca.fit` from epoch 0 goes on from the model's state: after a
fit on other rows, labels, example weights or l2 of the same shapes it
reaches the new problem's optimum (found by the InMemorySdca audit: it
converged to another point, or the op refused the duals), and on the same
rows it goes on bit for bit."""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.preprocessing import StandardScaler

from tf_sdca.trainer import InMemorySdca


@pytest.fixture(scope="module")
def cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y.astype(
      np.float32)


def _fresh(**fit):
  model = InMemorySdca("logistic", l2=fit.pop("l2", 1.0))
  model.fit(epochs=300, tol=1e-12, verbose=0, **fit)
  return model


@pytest.mark.parametrize("change", ["weights", "labels", "l2", "rows"])
def test_a_refit_of_the_same_shapes_reaches_the_new_optimum(cancer, change):
  x, y = cancer
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, dense=x, epochs=300, tol=1e-12, verbose=0)
  fit = dict(labels=y, dense=x)
  if change == "weights":  # e.g. held-out rows weighted 0
    weights = np.ones(len(y), np.float32)
    weights[:200] = 0.0
    fit["example_weights"] = weights
  elif change == "labels":
    fit["labels"] = 1.0 - y
  elif change == "l2":
    model.l2 = 10.0
  else:  # other rows of the same count
    fit = dict(labels=y[::-1].copy(), dense=x[::-1].copy() * 0.5)
  history = model.fit(epochs=300, tol=1e-10, verbose=0, **fit)
  assert history["duality_gap"][-1] < 1e-10
  fresh = _fresh(l2=10.0 if change == "l2" else 1.0, **fit)
  np.testing.assert_allclose(model.dense_weights, fresh.dense_weights,
                             atol=1e-5)


def test_a_refit_on_the_same_rows_goes_on_bit_for_bit(cancer):
  x, y = cancer
  once = InMemorySdca("logistic", l2=0.1, seed=2)
  once.fit(y, dense=x, epochs=9, verbose=0)
  twice = InMemorySdca("logistic", l2=0.1, seed=2)
  twice.fit(y, dense=x, epochs=4, verbose=0)
  twice.fit(y, dense=x, epochs=9, initial_epoch=4, verbose=0)
  np.testing.assert_array_equal(twice.dense_weights, once.dense_weights)
  # From epoch 0 again: the state it left, kept as it is.
  before = twice.dense_weights.copy()
  history = twice.fit(y, dense=x, epochs=1, verbose=0)
  assert history["duality_gap"][-1] <= once.duality_gap if hasattr(
      once, "duality_gap") else True
  assert np.abs(twice.dense_weights - before).max() < 1e-3


def test_diabetes_other_half_is_ridge(cancer):
  del cancer
  x, y = load_diabetes(return_X_y=True)
  x = StandardScaler().fit_transform(x)
  y = (y - y.mean()) / y.std()
  a, b = slice(0, 221), slice(221, 442)
  model = InMemorySdca("squared", l2=1.0)
  model.fit(y[a], dense=x[a], epochs=300, tol=1e-12, verbose=0)
  model.fit(y[b], dense=x[b], epochs=300, tol=1e-12, verbose=0)
  exact = np.linalg.solve(x[b].T @ x[b] + np.eye(10), x[b].T @ y[b])
  np.testing.assert_allclose(model.dense_weights, exact, atol=1e-5)

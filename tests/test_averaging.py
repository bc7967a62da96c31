"""`InMemorySdca(average_from=T0)`: output averaging over the epochs'
iterates (the reference's SDCA with averaging) on real data."""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.preprocessing import StandardScaler

from tf_sdca import losses
from tf_sdca.trainer import InMemorySdca


def _cancer():
  x, y = load_breast_cancer(return_X_y=True)
  x = StandardScaler().fit_transform(x)
  return np.column_stack([x, np.ones(len(y))]).astype(np.float32), \
      y.astype(np.float32)


def _primal(loss, w, x, y, l2):
  return float(np.sum(losses.primal(loss, x.astype(np.float64) @ w, y)) +
               0.5 * l2 * np.sum(w * w))


def test_averaging_from_the_last_epoch_is_the_last_iterate():
  x, y = _cancer()
  # Averaging trains plain epochs (no extrapolation, the default's 'auto'
  # does not apply): the reference too.
  plain = InMemorySdca(loss="logistic", l2=1.0, momentum=0)
  plain.fit(labels=y, dense=x, epochs=12, verbose=0)
  averaged = InMemorySdca(loss="logistic", l2=1.0, average_from=12)
  history = averaged.fit(labels=y, dense=x, epochs=12, verbose=0)
  np.testing.assert_array_equal(averaged.dense_weights, plain.dense_weights)
  np.testing.assert_array_equal(averaged.duals, plain.duals)
  assert history["loss"] == history["last_loss"]


@pytest.mark.parametrize("loss", ["logistic", "hinge", "smooth_hinge"])
def test_the_average_reaches_the_optimum_with_a_valid_gap(loss):
  x, y = _cancer()
  l2 = 1.0
  reference = InMemorySdca(loss=loss, l2=l2)
  reference.fit(labels=y, dense=x, epochs=3000, tol=1e-12, verbose=0)
  best = _primal(loss, reference.dense_weights, x, y, l2)
  # The reference averages the second half of the run (T0 = T / 2).
  # In a random permutation: the hinge losses' default 'shrinking' stops
  # visiting rows at rest, and here every dual stopped moving before epoch
  # 1,000, so the average equalled the last iterate.
  model = InMemorySdca(loss=loss, l2=l2, average_from=1000,
                       visit_order="permutation")
  history = model.fit(labels=y, dense=x, epochs=2000, verbose=0)
  gaps = np.array(history["duality_gap"])
  assert np.all(gaps >= 0)
  # The average lags the last iterate but follows it to the optimum.
  assert gaps[-1] < 1e-6
  assert _primal(loss, model.dense_weights, x, y, l2) == pytest.approx(
      best, rel=1e-6)
  # The model is the mean of its iterates: W(mean alpha).
  w_alpha = x.T.astype(np.float64) @ model.duals / l2
  np.testing.assert_allclose(model.dense_weights, w_alpha, atol=1e-9)
  last = model.last_iterate["dense_weights"]
  assert not np.array_equal(last, model.dense_weights)


def test_multiclass_average():
  x, y = load_wine(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  model = InMemorySdca(loss="softmax", num_classes=3, l2=1.0, average_from=5)
  history = model.fit(labels=y.astype(np.float32), dense=x, epochs=60,
                      verbose=0)
  assert history["duality_gap"][-1] < 1e-4
  assert model.dense_weights.shape == (13, 3)

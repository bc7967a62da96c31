"""The 'shrinking' visiting order: LIBLINEAR's shrinking of boxed duals.

For the hinge losses a dual held at a bound of its box by its gradient
leaves the visits until the rows still visited have (nearly) converged; the
optimum is the same, only the rows visited differ. Checked here: without a
box (logistic) and in the first pass it is the permutation order bit for
bit; it reaches scikit-learn's LIBLINEAR optimum of the same objective on a
real data set in about the epochs of the permutation order; stale state
(duals reset behind its back) still converges; and every door takes it.
"""
import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.svm import LinearSVC

from sdca_testutil import make_problem
from tf_sdca import pack_rows, packed_solve
from tf_sdca.trainer import InMemorySdca


def _dense_rows(x, y, loss):
  x = np.ascontiguousarray(x, np.float32)
  n = len(y)
  return pack_rows(row_ptr=np.zeros(n + 1, np.int64),
                   feature_ids=np.zeros(0, np.int32),
                   feature_values=np.zeros(0, np.float32), dense_features=x,
                   example_weights=np.ones(n, np.float32),
                   example_labels=np.asarray(y, np.float32),
                   loss_type=loss, num_sparse_features=0)


def _solve(rows, d, n, loss, order, passes, l2=1.0, calls=1):
  w, a = np.zeros(d), np.zeros(n)
  for call in range(calls):
    w, a, parts = packed_solve(rows, w, a, seed=call, loss_type=loss, l1=0.0,
                               l2=l2, num_passes=passes, visit_order=order)
  p = parts.numpy()
  primal = p[0] + 0.5 * l2 * p[2]
  return np.asarray(w), np.asarray(a), primal, (p[0] + p[1] + l2 * p[2]) / primal


def _hinge_primal(x, y, w, l2):
  s = 2.0 * y - 1.0
  return np.maximum(0.0, 1.0 - s * (x @ w)).sum() + 0.5 * l2 * (w @ w)


@pytest.mark.parametrize("passes,calls", [(1, 5), (5, 1)])
def test_without_a_box_it_is_the_permutation_order(passes, calls):
  problem = make_problem("logistic_loss", n=200, seed=4)
  x, y = problem["dense"], problem["labels"]
  results = [_solve(_dense_rows(x, y, "logistic_loss"), x.shape[1], 200,
                    "logistic_loss", order, passes, calls=calls)
             for order in ("permutation", "shrinking")]
  np.testing.assert_array_equal(results[0][0], results[1][0])
  np.testing.assert_array_equal(results[0][1], results[1][1])


def test_its_first_pass_is_the_permutation_order():
  # The thresholds start infinite: nothing is shrunk before one pass.
  x, y = load_iris(return_X_y=True)
  y = (y == 0).astype(np.float32)
  first = [_solve(_dense_rows(x, y, "hinge_loss"), 4, len(y), "hinge_loss",
                  order, 1)[:2] for order in ("permutation", "shrinking")]
  np.testing.assert_array_equal(first[0][0], first[1][0])
  np.testing.assert_array_equal(first[0][1], first[1][1])
  # Later passes shrink (rows of the separable class leave at the bound),
  # so they visit other rows in another order.
  later = [_solve(_dense_rows(x, y, "hinge_loss"), 4, len(y), "hinge_loss",
                  order, 20)[0] for order in ("permutation", "shrinking")]
  assert not np.array_equal(later[0], later[1])


@pytest.mark.parametrize("loss", ["hinge_loss", "smooth_hinge_loss"])
def test_reaches_the_optimum_on_standardised_breast_cancer(loss):
  x, y = load_breast_cancer(return_X_y=True)
  x = (x - x.mean(0)) / x.std(0)
  model = InMemorySdca(loss=loss, l2=1.0, visit_order="shrinking")
  history = model.fit(y.astype(np.float32), dense=x, epochs=3000, tol=1e-9,
                      verbose=0)
  gaps = np.asarray(history["duality_gap"])
  assert np.all(gaps >= 0.0) and gaps[-1] < 1e-9, gaps[-5:]
  reference = InMemorySdca(loss=loss, l2=1.0)
  reference.fit(y.astype(np.float32), dense=x, epochs=3000, tol=1e-9,
                verbose=0)
  np.testing.assert_allclose(model.dense_weights, reference.dense_weights,
                             rtol=0, atol=1e-4 * np.abs(
                                 reference.dense_weights).max())
  if loss == "hinge_loss":
    # LIBLINEAR's dual solver on the same objective (no intercept): it may
    # stop short of the optimum, never below it; our gap certifies ours
    # (up to our float32 features: ~1e-8 relative here).
    svc = LinearSVC(loss="hinge", dual=True, C=1.0, fit_intercept=False,
                    tol=1e-12, max_iter=200000, random_state=0).fit(x, y)
    theirs = _hinge_primal(x, y, np.ravel(svc.coef_), 1.0)
    ours = _hinge_primal(x, y, model.dense_weights, 1.0)
    assert theirs >= ours * (1.0 - 1e-7)
    assert ours <= theirs * (1.0 + 1e-6)


@pytest.mark.parametrize("l2", [1.0, 10.0])
def test_it_needs_about_the_epochs_of_the_permutation_order(l2):
  # Shrinking saves steps within a pass, not passes: measured 1,462 vs
  # 1,432 epochs to 1e-8 at l2 = 1, 371 vs 454 at l2 = 10.
  x, y = load_breast_cancer(return_X_y=True)
  x = (x - x.mean(0)) / x.std(0)
  epochs = {}
  for order in ("permutation", "shrinking"):
    model = InMemorySdca(loss="hinge_loss", l2=l2, visit_order=order)
    history = model.fit(y.astype(np.float32), dense=x, epochs=5000, tol=1e-8,
                        verbose=0)
    assert history["duality_gap"][-1] < 1e-8
    epochs[order] = len(history["duality_gap"])
  assert epochs["shrinking"] <= 1.25 * epochs["permutation"], epochs


def test_duals_reset_behind_its_back_still_converge():
  # The shrunk rows are remembered by the packed rows; a call from other
  # duals (here: zeros again) must not be trapped by them.
  x, y = load_breast_cancer(return_X_y=True)
  x = (x - x.mean(0)) / x.std(0)
  rows = _dense_rows(x, y, "hinge_loss")
  w, a, _, _ = _solve(rows, x.shape[1], len(y), "hinge_loss", "shrinking", 50)
  w, a, primal, gap = _solve(rows, x.shape[1], len(y), "hinge_loss",
                             "shrinking", 3000)
  assert 0.0 <= gap < 1e-8, gap


def test_every_door_takes_it():
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  y = y.astype(np.float32)
  ours = InMemorySdca(loss="hinge_loss", l2=1.0, visit_order="shrinking")
  ours.fit(y, dense=x, epochs=200, tol=1e-10, verbose=0)
  keras_model = LinearModel(loss="hinge", l2=1.0, use_bias=False,
                            visit_order="shrinking")
  keras_model.fit(x, y, epochs=200, verbose=0)
  np.testing.assert_allclose(np.ravel(keras_model.get_weights()[0]),
                             ours.dense_weights, rtol=0, atol=1e-5)

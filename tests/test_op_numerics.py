"""The op's numbers: each coordinate step, parity with TensorFlow's
SdcaOptimizerV2, and convergence to a zero duality gap for every loss."""
import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

import tf_sdca
from op_util import (BINARY, LOSSES, Trainer, dual_loss, internal_label,
                     make_problem)


def _reference_step(loss, y, alpha, wx, q, gamma):
  """Maximiser of f(a) = -phi*(-a) - (a - alpha) wx - q/2 (a - alpha)^2,
  found numerically by scipy on the dual domain (independent of the op)."""
  yi = float(internal_label(loss, np.float64(y)))

  def neg_f(a):
    return (dual_loss(loss, a, y, gamma) + (a - alpha) * wx +
            0.5 * q * (a - alpha) ** 2)

  if loss in BINARY:
    bounds = (0.0, 1.0)
    to_a = lambda b: b * yi
  elif loss == "absolute_loss":
    bounds, to_a = (-1.0, 1.0), lambda a: a
  elif loss == "poisson_loss":
    bounds, to_a = (1e-14, 60.0), lambda t: yi - t  # t = y - a > 0
  else:
    bounds, to_a = (-100.0, 100.0), lambda a: a
  res = minimize_scalar(lambda u: float(neg_f(to_a(u))), bounds=bounds,
                        method="bounded", options=dict(xatol=1e-13))
  return to_a(res.x)


@pytest.mark.parametrize("sigma", [1, 3])
@pytest.mark.parametrize("loss,gamma", [(l, 1.0) for l in LOSSES] +
                         [("smooth_hinge_loss", 0.3)])
def test_one_step_maximises_the_dual_subproblem(loss, gamma, sigma):
  rng = np.random.default_rng(7)
  p = make_problem(n=1, loss=loss, seed=3)
  if loss in BINARY:
    p["labels"][:] = 1.0
  t = Trainer(p, loss, l2=0.6, weights=[1.7], num_loss_partitions=sigma,
              gamma=gamma, visit_order="cyclic")
  t.w_sparse[:] = rng.normal(size=t.w_sparse.shape) * 0.3
  t.w_dense[:] = rng.normal(size=t.w_dense.shape) * 0.3
  start_dual = {"logistic_loss": 0.3, "hinge_loss": 0.2,
                "smooth_hinge_loss": 0.6, "absolute_loss": -0.4,
                "squared_loss": 0.25, "poisson_loss": -0.5}[loss]
  t.state[0, 0] = start_dual
  wx = t.margins()[0]
  x_sparse = np.zeros(p["vocab"])
  np.add.at(x_sparse, p["ids"][0], p["values"][0])
  sq_norm = x_sparse @ x_sparse + p["dense"][0] @ p["dense"][0]
  q = sigma * 1.7 * sq_norm / 0.6
  expected = _reference_step(loss, p["labels"][0], np.float64(start_dual), wx,
                             q, gamma)
  w_sparse0, w_dense0 = t.w_sparse.copy(), t.w_dense.copy()
  state = t.step([0])
  new_dual = float(state[0, 0])
  # 1e-6: the op's dual is rounded to float32 (relative 6e-8) and scipy's
  # bounded search stops at ~1e-9.
  assert new_dual == pytest.approx(expected, abs=1e-6, rel=1e-6)
  # The weights move by s (a - alpha) x / l2 with the rounded dual.
  change = 1.7 * (new_dual - start_dual) / 0.6
  np.testing.assert_allclose(t.w_sparse - w_sparse0, change * x_sparse,
                             atol=1e-6)
  np.testing.assert_allclose(t.w_dense - w_dense0, change * p["dense"][0],
                             atol=1e-6)
  # Columns 1-3: primal loss at the input weights, phi*(-new dual), weight.
  from op_util import primal_loss
  assert state[0, 1] == pytest.approx(
      1.7 * primal_loss(loss, wx, p["labels"][0], gamma), rel=1e-5, abs=1e-6)
  assert state[0, 2] == pytest.approx(
      1.7 * dual_loss(loss, new_dual, p["labels"][0], gamma), rel=1e-5,
      abs=1e-6)
  assert state[0, 3] == pytest.approx(1.7)


def test_logistic_dual_stays_inside_the_open_interval_for_huge_margins():
  p = make_problem(n=1, loss="logistic_loss")
  for label, margin in ((1.0, 50.0), (1.0, -50.0), (0.0, 50.0), (0.0, -50.0)):
    p["labels"][:] = label
    t = Trainer(p, "logistic_loss", l2=1.0)
    t.w_dense[:] = margin / p["dense"][0].sum() if p["dense"][0].sum() else 0
    t.w_dense[:] = 0
    t.w_sparse[p["ids"][0]] = margin / p["values"][0].sum()
    b = float(t.step([0])[0, 0]) * (2 * label - 1)
    assert 0.0 < b < 1.0


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss",
                                  "hinge_loss", "smooth_hinge_loss",
                                  "poisson_loss"])
@pytest.mark.parametrize("l1,sigma,weighted", [(0.0, 1, False),
                                               (0.05, 1, False),
                                               (0.0, 2, True)])
def test_weights_match_tensorflow_sdca_optimizer_v2(loss, l1, sigma,
                                                    weighted):
  p = make_problem(n=40, loss=loss, seed=11)
  weights = (np.random.default_rng(2).uniform(0.5, 2.0, 40) if weighted
             else None)
  ours = Trainer(p, loss, l1=l1, l2=0.7, weights=weights,
                 num_loss_partitions=sigma)
  theirs = Trainer(p, loss, l1=l1, l2=0.7, weights=weights, use_tf=True,
                   num_loss_partitions=sigma)
  for _ in range(5):
    for i in range(40):  # one-example batches: TF's kernel is then exact
      ours.step([i])
      theirs.step([i])
  # TF computes in float32 in places where we use float64: 1e-5 absolute.
  np.testing.assert_allclose(ours.w_sparse, theirs.w_sparse, atol=1e-5)
  np.testing.assert_allclose(ours.w_dense, theirs.w_dense, atol=1e-5)
  np.testing.assert_allclose(ours.state[:, :2], theirs.state[:, :2],
                             atol=1e-5, rtol=1e-5)
  np.testing.assert_array_equal(ours.state[:, 3], theirs.state[:, 3])


def _train_to_convergence(loss, l1=0.0, calls=400, tol=1e-6, **kwargs):
  p = make_problem(n=60, loss=loss, seed=5)
  if loss == "poisson_loss":
    p["labels"] = np.minimum(p["labels"], 4.0)
  t = Trainer(p, loss, l1=l1, l2=2.0, num_inner_iterations=10,
              visit_order=kwargs.pop("visit_order", "permutation"), **kwargs)
  for _ in range(calls):
    t.step(np.arange(60))
    primal = t.primal()
    if (primal - t.dual()) / max(1.0, abs(primal)) < tol:
      break
  return t


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1", [0.0, 0.1])
def test_repeated_passes_drive_the_duality_gap_to_zero(loss, l1):
  t = _train_to_convergence(loss, l1=l1)
  primal, dual = t.primal(), t.dual()
  assert primal >= dual - 1e-9 * abs(primal)  # weak duality
  assert (primal - dual) / max(1.0, abs(primal)) < 1e-6
  # The weights are the function w(alpha) of the stored duals: no drift.
  ws, wd = t.weights_from_duals()
  np.testing.assert_allclose(t.w_sparse, ws, atol=1e-5)
  np.testing.assert_allclose(t.w_dense, wd, atol=1e-5)
  # The state's own columns give the (approximate) gap TF's SdcaModel uses.
  reg = t.l2 * (np.sum(t.shrunk(t.w_sparse) ** 2) +
                np.sum(t.shrunk(t.w_dense) ** 2)) + t.l1 * (
                    np.abs(t.shrunk(t.w_sparse)).sum() +
                    np.abs(t.shrunk(t.w_dense)).sum())
  approx_gap = (t.state[:, 1].sum() + t.state[:, 2].sum() + reg)
  assert abs(approx_gap) / max(1.0, abs(primal)) < 1e-4


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss",
                                  "poisson_loss"])
def test_optimum_matches_scipy_lbfgs_on_the_primal(loss):
  t = _train_to_convergence(loss, tol=1e-9)
  p = t.p
  vocab = p["vocab"]

  def objective(w):
    t.w_sparse, t.w_dense = w[:vocab], w[vocab:]
    return t.primal()

  ref = minimize(objective, np.zeros(vocab + p["dense"].shape[1]),
                 method="L-BFGS-B",
                 options=dict(ftol=1e-15, gtol=1e-10, maxiter=20000))
  t2 = _train_to_convergence(loss, tol=1e-9)
  assert t2.primal() == pytest.approx(ref.fun, rel=1e-6)
  assert t2.primal() <= ref.fun * (1 + 1e-7)


def test_op_exported_helpers_shrink_and_fingerprint():
  w = np.array([-2.0, -0.1, 0.0, 0.05, 0.3, 3.0], np.float32)
  np.testing.assert_allclose(
      tf_sdca.sdca_shrink_l1(w, l1=0.2, l2=2.0).numpy(),
      np.sign(w) * np.maximum(np.abs(w) - 0.1, 0), atol=1e-7)
  fp = tf_sdca.sdca_fprint(["a", "b", "a", "", "example-123"]).numpy()
  assert fp.shape == (5, 2)
  np.testing.assert_array_equal(fp[0], fp[2])
  assert len({tuple(r) for r in fp}) == 4

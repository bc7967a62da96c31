"""Convergence of `tf_sdca.sdca_optimizer` to the optimum, certified by the
duality gap computed independently in numpy:

  P(w)     = sum_i s_i phi(w.x_i) + l2/2 |w|^2 + l1 |w|_1,  w = shrink(w_op)
  D(alpha) = -sum_i s_i phi*(-alpha_i) - g*(v),  v = sum_i s_i alpha_i x_i,
  g*(v)    = sum_j (|v_j| - l1)_+^2 / (2 l2),

P(w) >= P* >= D(alpha) for any weights and any feasible duals, so a small
P - D proves both are near the optimum.
"""
import numpy as np
import pytest
from scipy.optimize import minimize

from sdca_testutil import LOSSES, Model, make_problem

LOSS_CASES = [(loss, 1.0) for loss in LOSSES] + [("smooth_hinge_loss", 0.3)]
LOSS_IDS = [f"{loss}-gamma{gamma}" for loss, gamma in LOSS_CASES]
N = 60
L2 = 1.0


def _train(loss, gamma=1.0, l1=0.0, tol=1e-6, max_calls=2000, extra=0):
    """Full-batch calls of 5 inner iterations until the relative gap is
    below `tol`, then `extra` more calls; returns the model."""
    problem = make_problem(loss, n=N, seed=5)
    model = Model(problem, loss, l1=l1, l2=L2, gamma=gamma,
                  num_inner_iterations=5)
    for _ in range(max_calls):
        model.full_batch()
        if model.relative_gap() < tol:
            break
    for _ in range(extra):
        model.full_batch()
    return model


@pytest.mark.parametrize("l1", [0.0, 0.1])
@pytest.mark.parametrize("loss,gamma", LOSS_CASES, ids=LOSS_IDS)
def test_repeated_full_batch_calls_close_the_duality_gap(loss, gamma, l1):
    model = _train(loss, gamma, l1, extra=3)
    primal, dual = model.primal(), model.dual()
    assert np.isfinite(dual), "every dual must stay in its domain"
    # Weak duality, up to the float32 rounding of the stored duals.
    assert primal - dual >= -1e-9 * abs(primal)
    # 1e-6 relative: the float32 duals and weights bound what is reachable
    # at ~1e-7 relative; 1e-6 is what 5-20 well-conditioned passes give.
    assert (primal - dual) / max(1.0, abs(primal)) < 1e-6
    # The weights the op accumulated are the function w(alpha) of the duals
    # it stored: no drift between the two (the op rounds each new dual to
    # float32 before using it). 1e-5: float32 deltas summed over the calls.
    w_sparse, w_dense = model.weights_from_duals()
    np.testing.assert_allclose(model.w_sparse, w_sparse, atol=1e-5)
    np.testing.assert_allclose(model.w_dense, w_dense, atol=1e-5)
    # The estimate from the op's own state columns is small too. It is
    # looser than the exact gap: col 1 is s phi at the weights each example
    # was last visited with, which lag the final ones; a relative gap of
    # 1e-6 (absolute ~3e-5) still lets the weights sit ~sqrt(2 * 3e-5 / l2)
    # ~ 8e-3 from the optimum, so per-example terms can move by ~1e-4 over
    # a pass (seen: estimates up to 8e-6).
    assert abs(model.state_gap_estimate()) < 1e-4


def _lbfgs_optimum(model):
    """min P(w) by L-BFGS-B with an analytic gradient. The l1 term is
    handled exactly by splitting w = u - v, u, v >= 0."""
    p, loss, l1, l2 = model.p, model.loss, model.l1, model.l2
    vocab, d = p["vocab"], p["dense"].shape[1]
    dense = p["dense"].astype(np.float64)
    values = p["values"].astype(np.float64)
    s = p["weights"].astype(np.float64)
    y = p["labels"].astype(np.float64)
    if loss == "logistic_loss":
        y = 2.0 * y - 1.0

    def objective(uv):
        u, v = uv[:vocab + d], uv[vocab + d:]
        w = u - v
        z = dense @ w[vocab:] + (w[:vocab][p["ids"]] * values).sum(1)
        if loss == "logistic_loss":
            value = np.logaddexp(0.0, -y * z)
            dz = -y / (1.0 + np.exp(y * z))
        else:
            value = 0.5 * (z - y) ** 2
            dz = z - y
        grad_w = np.zeros(vocab + d)
        grad_w[vocab:] = dense.T @ (s * dz)
        np.add.at(grad_w, p["ids"], (s * dz)[:, None] * values)
        grad_w += l2 * w
        f = s @ value + 0.5 * l2 * (w @ w) + l1 * (u.sum() + v.sum())
        return f, np.concatenate([grad_w + l1, -grad_w + l1])

    res = minimize(objective, np.zeros(2 * (vocab + d)), jac=True,
                   method="L-BFGS-B", bounds=[(0.0, None)] * (2 * (vocab + d)),
                   options=dict(ftol=1e-15, gtol=1e-12, maxiter=5000))
    w = res.x[:vocab + d] - res.x[vocab + d:]
    return res.fun, w[:vocab], w[vocab:]


# l1 = 1 zeroes a third to half of the 28 weights: the l1 path is active.
@pytest.mark.parametrize("l1", [0.0, 1.0])
@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss"])
def test_optimum_matches_scipy_lbfgs_on_the_primal(loss, l1):
    model = _train(loss, l1=l1, tol=1e-9)
    ref_value, ref_sparse, ref_dense = _lbfgs_optimum(model)
    # Both solvers agree on the optimal value to 1e-6 relative (the brief's
    # accuracy; both are within ~1e-9 of the optimum here).
    assert model.primal() == pytest.approx(ref_value, rel=1e-6)
    # The SDCA dual value is a certificate: it cannot exceed any primal
    # value, L-BFGS-B's included (up to float32 duals: 1e-9 relative).
    assert model.dual() <= ref_value + 1e-9 * abs(ref_value)
    # P is l2-strongly convex: |w - w*|^2 <= 2 (P(w) - P*) / l2 ~ 1e-7,
    # so the weights agree to ~3e-4.
    w_sparse, w_dense = model.shrunk()
    np.testing.assert_allclose(w_sparse, ref_sparse, atol=3e-4)
    np.testing.assert_allclose(w_dense, ref_dense, atol=3e-4)
    if l1 > 0:
        assert 0 < np.count_nonzero(w_sparse == 0) < len(w_sparse)

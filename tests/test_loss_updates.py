"""One coordinate step of `tf_sdca.sdca_optimizer`, loss by loss.

A batch of one example and one inner iteration is exactly one coordinate
step: the op must return the maximiser of the 1-D dual subproblem

  f(a) = -phi*(-a) - (a - alpha) wx - q/2 (a - alpha)^2,
  q = sigma s |x|^2 / l2,  wx = x . shrink(w),

and move the weights by s (a - alpha) x / l2. The references here are
scipy's bounded scalar search on the dual domain and, where one exists, the
closed form, both in float64.
"""
import numpy as np
import pytest
from scipy.optimize import brentq

from sdca_testutil import (BINARY, LOSSES, SMOOTH, dual_loss,
                           dual_subproblem, internal_label, one_example_args,
                           primal_loss, primal_loss_derivative,
                           reference_dual_step, run_ours, shrink)

LOSS_CASES = [(loss, 1.0) for loss in LOSSES] + [("smooth_hinge_loss", 0.3)]
LOSS_IDS = [f"{loss}-gamma{gamma}" for loss, gamma in LOSS_CASES]

# Two raw labels per loss: {0, 1} for the binary ones.
LABELS = {
    "logistic_loss": (0.0, 1.0),
    "hinge_loss": (0.0, 1.0),
    "smooth_hinge_loss": (0.0, 1.0),
    "squared_loss": (0.7, -1.3),
    "absolute_loss": (0.7, -1.3),
    "poisson_loss": (0.0, 3.0),
}

# The example: three sparse ids with values, two dense features.
IDS = np.array([4, 11, 2], np.int64)
VALUES = np.array([0.8, -1.2, 0.5], np.float32)
DENSE = np.array([0.6, -0.9], np.float32)
W_SPARSE = np.array([0.35, -0.2, 0.5], np.float32)
W_DENSE = np.array([-0.3, 0.25], np.float32)
WEIGHT = 1.7  # example weight s != 1
L2 = 0.6      # l2 != 1


def _starting_dual(loss, label):
    """A dual strictly inside the domain, not at the optimum."""
    y = float(internal_label(loss, label))
    if loss in BINARY:
        return 0.3 * y          # b0 = 0.3
    if loss == "poisson_loss":
        return y - 0.8          # y - alpha = 0.8 > 0
    if loss == "absolute_loss":
        return -0.4
    return 0.25


def _closed_form(loss, label, alpha, wx, q, gamma):
    """The maximiser where f is a concave quadratic on an interval."""
    y = float(internal_label(loss, label))
    if loss == "squared_loss":
        return (y - wx + q * alpha) / (1.0 + q)
    if loss == "absolute_loss":
        return float(np.clip(alpha + (y - wx) / q, -1.0, 1.0))
    b0 = alpha * y
    if loss == "hinge_loss":
        return float(np.clip(b0 + (1.0 - y * wx) / q, 0.0, 1.0)) * y
    if loss == "smooth_hinge_loss":
        return float(np.clip((1.0 - y * wx + q * b0) / (gamma + q), 0.0,
                             1.0)) * y
    return None  # logistic, Poisson: no closed form


def _one_step(loss, gamma, label, sigma, l1, alpha=None, w_sparse=W_SPARSE,
              w_dense=W_DENSE, l2=L2, weight=WEIGHT):
    """Runs the op once; returns (new dual, state row, deltas, wx, q, x)."""
    if alpha is None:
        alpha = _starting_dual(loss, label)
    args = one_example_args(DENSE, IDS, VALUES, label, weight, alpha,
                            w_sparse, w_dense)
    state, d_sparse, d_dense = run_ours(
        args, loss, l1=l1, l2=l2, num_loss_partitions=sigma, gamma=gamma)
    x = np.concatenate([VALUES, DENSE]).astype(np.float64)
    w = np.concatenate([w_sparse, w_dense]).astype(np.float64)
    wx = x @ shrink(w, l1, l2)
    q = sigma * weight * (x @ x) / l2
    delta = np.concatenate([d_sparse[0], d_dense[0]]).astype(np.float64)
    # The op reads the float32 dual back: use the same starting value.
    alpha = float(np.float32(alpha))
    return float(state[0, 0]), state[0], delta, wx, q, x, alpha


# l2 = 20 makes q ~ 0.3: long steps that end on the domain's edge for the
# hinge and absolute losses (the clipped branches).
@pytest.mark.parametrize("l1,l2", [(0.0, L2), (0.15, L2), (0.0, 20.0)])
@pytest.mark.parametrize("sigma", [1, 3])
@pytest.mark.parametrize("label_index", [0, 1])
@pytest.mark.parametrize("loss,gamma", LOSS_CASES, ids=LOSS_IDS)
def test_one_step_returns_the_maximiser_of_the_dual_subproblem(
        loss, gamma, label_index, sigma, l1, l2):
    label = LABELS[loss][label_index]
    new_dual, row, delta, wx, q, x, alpha = _one_step(loss, gamma, label,
                                                      sigma, l1, l2=l2)
    expected = reference_dual_step(loss, label, alpha, wx, q, gamma)
    # 1e-6: the op rounds the dual to float32 (relative 6e-8) and scipy's
    # bounded search locates a smooth maximum only to ~sqrt(machine eps)
    # times the scale of the problem (~1e-8 here).
    assert new_dual == pytest.approx(expected, rel=1e-6, abs=1e-6)
    assert new_dual != pytest.approx(alpha, abs=1e-3), "the step must move"
    closed = _closed_form(loss, label, alpha, wx, q, gamma)
    if closed is not None:
        # The closed form and scipy agree (a check of the reference)...
        assert expected == pytest.approx(closed, rel=1e-6, abs=1e-6)
        # ...and the op matches the closed form to float32 rounding.
        assert new_dual == pytest.approx(closed, rel=1e-6, abs=1e-7)
    # The step is a maximum of f, not just a stationary point: no better
    # value at the reference or nearby (f evaluated in float64).
    f = dual_subproblem(loss, label, alpha, wx, q, gamma)
    assert f(new_dual) >= f(expected) - 1e-9 * (1.0 + abs(f(expected)))
    # The returned weight change is s (a - alpha) x / l2 for the returned
    # (rounded) dual, whatever sigma: the CoCoA+ scaling only enters q.
    # 1e-6 absolute: float32 deltas of size ~1.
    np.testing.assert_allclose(delta, WEIGHT * (new_dual - alpha) * x / l2,
                               rtol=1e-6, atol=1e-6)
    # State columns: primal loss at the INPUT weights, dual loss of the NEW
    # dual (both times s), and s. Float32 storage: relative 1e-6.
    assert row[1] == pytest.approx(
        WEIGHT * primal_loss(loss, wx, label, gamma), rel=1e-6, abs=1e-6)
    assert row[2] == pytest.approx(
        WEIGHT * dual_loss(loss, new_dual, label, gamma), rel=1e-6, abs=1e-6)
    assert row[3] == np.float32(WEIGHT)


@pytest.mark.parametrize("label_index", [0, 1])
@pytest.mark.parametrize("loss,gamma", LOSS_CASES, ids=LOSS_IDS)
def test_first_step_from_a_fresh_zero_dual(loss, gamma, label_index):
    # A fresh state row is all zeros: alpha = 0 is on the edge of the domain
    # for the binary losses (b = 0) and for Poisson with y = 0 (y - a = 0).
    label = LABELS[loss][label_index]
    args = one_example_args(DENSE, IDS, VALUES, label, WEIGHT, 0.0,
                            W_SPARSE, W_DENSE, state=np.zeros((1, 4)))
    state, d_sparse, d_dense = run_ours(args, loss, l1=0.0, l2=L2,
                                        gamma=gamma)
    x = np.concatenate([VALUES, DENSE]).astype(np.float64)
    wx = x @ np.concatenate([W_SPARSE, W_DENSE]).astype(np.float64)
    q = WEIGHT * (x @ x) / L2
    expected = reference_dual_step(loss, label, 0.0, wx, q, gamma)
    # Tolerances as in the test above.
    assert state[0, 0] == pytest.approx(expected, rel=1e-6, abs=1e-6)
    np.testing.assert_allclose(
        np.concatenate([d_sparse[0], d_dense[0]]),
        WEIGHT * float(state[0, 0]) * x / L2, rtol=1e-6, atol=1e-6)
    assert state[0, 3] == np.float32(WEIGHT)


@pytest.mark.parametrize("label_index", [0, 1])
@pytest.mark.parametrize("loss,gamma", [c for c in LOSS_CASES
                                        if c[0] in SMOOTH],
                         ids=[i for c, i in zip(LOSS_CASES, LOSS_IDS)
                              if c[0] in SMOOTH])
def test_after_one_step_the_dual_is_minus_the_loss_derivative(
        loss, gamma, label_index):
    # With sigma = 1, l1 = 0 and one example, the new margin is
    # w_new . x = wx + q (a - alpha), and f'(a) = 0 reads
    # (phi*)'(-a) = w_new . x, i.e. a = -phi'(w_new . x).
    label = LABELS[loss][label_index]
    new_dual, _, delta, wx, q, x, alpha = _one_step(loss, gamma, label, 1,
                                                    0.0)
    w_new = (np.concatenate([W_SPARSE, W_DENSE]).astype(np.float64) + delta)
    margin = x @ w_new
    # 1e-6: the float32 delta and dual (relative 6e-8 of values ~1), times
    # |phi''| <= max(1, exp(margin)) ~ 1 here.
    assert new_dual == pytest.approx(
        -primal_loss_derivative(loss, margin, label, gamma), rel=1e-6,
        abs=1e-6)
    # The same condition does not hold before the step (it is pinned, not
    # automatic).
    assert alpha != pytest.approx(
        -primal_loss_derivative(loss, wx, label, gamma), abs=1e-3)


def _logistic_root(ywx, q, b0):
    """b solving log(b/(1-b)) + y wx + q (b - b0) = 0, found in u = logit(b)
    so that b ~ 1e-22 keeps its relative precision."""
    u = brentq(lambda u: u + ywx + q * (1.0 / (1.0 + np.exp(-u)) - b0),
               -300.0, 300.0, xtol=1e-14, rtol=1e-15)
    return 1.0 / (1.0 + np.exp(-u)), 1.0 / (1.0 + np.exp(u))  # b, 1 - b


@pytest.mark.parametrize("l2", [0.6, 1000.0])
@pytest.mark.parametrize("margin", [50.0, -50.0])
@pytest.mark.parametrize("label", [0.0, 1.0])
def test_logistic_dual_stays_strictly_inside_for_huge_margins(label, margin,
                                                              l2):
    # All weights c with x . w = 50 or -50; l2 = 1000 makes q ~ 0 so that
    # b = sigmoid(-y wx) ~ e^-50 or 1 - e^-50, beyond float32 near 1.
    x = np.concatenate([VALUES, DENSE]).astype(np.float64)
    c = margin / x.sum()
    w_sparse = np.full(3, c, np.float32)
    w_dense = np.full(2, c, np.float32)
    y = 2.0 * label - 1.0
    state = None
    alpha = 0.5 * y
    for _ in range(2):  # the second call reads the first one's float32 dual
        new_dual, row, delta, wx, q, _, alpha_used = _one_step(
            "logistic_loss", 1.0, label, 1, 0.0, alpha=alpha,
            w_sparse=w_sparse, w_dense=w_dense, l2=l2)
        assert abs(abs(wx) - 50.0) < 1e-4
        b = new_dual * y
        assert 0.0 < b < 1.0
        assert np.isfinite(row).all() and np.isfinite(delta).all()
        b_ref, one_minus_b_ref = _logistic_root(y * wx, q, alpha_used * y)
        if b_ref < 0.5:
            # Tiny b keeps its relative precision in float32 (normal range).
            assert b == pytest.approx(b_ref, rel=1e-6)
        else:
            # Near 1, float32 holds at best 1 - 2^-24 (the op clamps there)
            # and its spacing is 2^-24: 1 - b within one spacing.
            assert 1.0 - b >= 2.0 ** -24
            assert abs((1.0 - b) - max(one_minus_b_ref, 2.0 ** -24)) <= (
                2.0 ** -24)
        # The dual loss of the new dual is finite and <= 0.
        assert row[2] <= 0.0
        alpha = new_dual

"""Momentum's cap (`losses.capped_extrapolation`): the beta an extrapolated
epoch starts with is min(beta, 0.9 x the largest step that keeps every dual
in its domain), the same bits whether the cheap check decides it or the
exact limit (`losses.extrapolation_limit`) is computed; and momentum 'auto'
with training ahead trains no epoch it then drops."""
import numpy as np
import pytest

from tf_sdca import engine
from tf_sdca import losses
from tf_sdca.trainer import InMemorySdca

_BINARY = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")


def _binary_case(rng, n, spread):
  """Duals in the domain dual * y in [0, 1], some at or next to its ends,
  and changes from an earlier point in it (|change| <= 1)."""
  y = np.where(rng.random(n) < 0.4, 1.0, -1.0).astype(np.float32)
  b = rng.random(n)
  b[:8] = [0.0, 1.0, 1e-300, 1.0 - 1e-16, 1e-12, 1.0 - 1e-12, 0.5, 0.5]
  before = np.clip(b + spread * rng.normal(size=n), 0.0, 1.0)
  return y, b * y, (b - before) * y


@pytest.mark.parametrize("loss", _BINARY)
@pytest.mark.parametrize("spread", [0.0, 1e-9, 1e-3, 0.3])
@pytest.mark.parametrize("beta", [0.05, 0.5, 0.9])
def test_the_cap_is_the_exact_limit_s_bit_for_bit(loss, spread, beta):
  rng = np.random.default_rng(int(spread * 1e9) + int(beta * 100))
  for trial in range(20):
    y, duals, change = _binary_case(rng, 200, spread)
    if trial % 2:  # every dual well inside: the cheap check decides
      duals, change = duals * 0.5 + 0.25 * y, change * 0.1
    exact = min(beta, 0.9 * losses.extrapolation_limit(loss, y, duals,
                                                       change))
    signs = losses.binary_signs(loss, y)
    assert losses.capped_extrapolation(loss, signs, duals, change, beta,
                                       0.9) == exact


def test_the_cap_binds_where_a_dual_would_leave_its_domain():
  """A dual at 0.99 moving up by 0.1 an epoch leaves room for beta 0.1:
  0.9 x that is the cap, from the exact limit."""
  y = np.ones(3, np.float32)
  duals = np.array([0.5, 0.99, 0.2])
  change = np.array([0.0, 0.1, -0.05])
  beta = losses.capped_extrapolation("logistic_loss", y, duals, change, 0.5,
                                     0.9)
  assert beta == pytest.approx(0.9 * 0.1, rel=1e-12)


@pytest.mark.parametrize("loss", ["squared_loss", "absolute_loss",
                                  "poisson_loss"])
def test_other_losses_take_the_exact_limit(loss):
  rng = np.random.default_rng(3)
  labels = rng.integers(0, 5, 50).astype(np.float32)
  duals = np.clip(rng.normal(size=50) * 0.5, -0.99, 0.99)
  duals = np.minimum(duals, labels) if loss == "poisson_loss" else duals
  change = rng.normal(size=50) * 0.2
  exact = min(0.5, 0.9 * losses.extrapolation_limit(loss, labels, duals,
                                                    change))
  assert losses.binary_signs(loss, labels) is labels
  assert losses.capped_extrapolation(loss, labels, duals, change, 0.5,
                                     0.9) == exact


def test_auto_momentum_trains_no_epoch_it_drops(monkeypatch):
  """With one thread training ahead, the gap that decides 'auto''s beta is
  evaluated before the next epoch starts (that epoch would otherwise be
  trained plain and redone extrapolated): every pass trained is kept, and
  the fit is the one run epoch by epoch."""
  rng = np.random.default_rng(0)
  ids = rng.integers(0, 300, size=(2000, 8))
  w = rng.normal(size=300)
  y = (w[ids].sum(1) + rng.normal(size=2000) > 0).astype(np.float32)
  trained = []
  original = engine.train_one_epoch

  def count(state, problem, epoch, *args, **kwargs):
    trained.append(epoch)
    return original(state, problem, epoch, *args, **kwargs)

  # (Every epoch's pass, extrapolated in the op or not, is this call.)
  monkeypatch.setattr(engine, "train_one_epoch", count)
  # The epochs one by one (not several per op call) for the reference.
  monkeypatch.setattr(engine, "FUSED_EPOCHS", False)
  fits = []
  for ahead in (False, True):
    monkeypatch.setattr(engine, "TRAIN_AHEAD", ahead)
    trained.clear()
    model = InMemorySdca(loss="logistic", l2=0.05)
    history = model.fit(y, ids=ids, epochs=10, verbose=0)
    fits.append((model, history, list(trained)))
  (serial, h1, p1), (ahead, h2, p2) = fits
  assert ahead.momentum_used > 0.0  # 'auto' chose a beta: it was tested
  assert p1 == p2 == list(range(10))
  np.testing.assert_array_equal(serial.sparse_weights, ahead.sparse_weights)
  np.testing.assert_array_equal(serial.duals, ahead.duals)
  np.testing.assert_array_equal(h1["duality_gap"], h2["duality_gap"])

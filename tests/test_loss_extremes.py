"""Every loss's coordinate step on a grid of extreme inputs, in float64.

The C++ steps run through a TensorFlow-free driver
(kernels/tests/loss_steps_main.cc) so that the float32 rounding of the op's
state does not hide their last digits. For every (label, dual, wx, q) with
q up to 1e8 and |wx| up to 1e3 the new dual must be finite, inside the dual
domain, and maximise the 1-D dual subproblem

  f(a) = -phi*(-a) - (a - alpha) wx - q/2 (a - alpha)^2,

checked against independent float64 references: scipy's Wright omega
(Poisson: q t = omega(log q + wx + q t0), t = y - a), scipy's brentq on the
optimality condition (logistic), the closed forms (the others), and
scipy's bounded search of f itself.
"""
import itertools
import os
import shutil
import subprocess

import numpy as np
import pytest
from scipy.optimize import brentq, minimize_scalar
from scipy.special import expit, wrightomega

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLT_MIN = float(np.finfo(np.float32).tiny)
B_MAX = 1.0 - 2.0 ** -24  # the largest b the logistic step returns (float32)

WX = (-1e3, -30.0, -1.0, 0.0, 1.0, 30.0, 1e3)
Q = (1e-8, 1e-3, 1.0, 400.0, 1e4, 1e8)

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


@pytest.fixture(scope="module")
def steps(tmp_path_factory):
  """Runs the C++ steps on rows (loss, label, dual, wx, q); returns an
  array [rows, 3] of (new dual, primal loss, dual loss of the new dual)."""
  binary = str(tmp_path_factory.mktemp("loss_steps") / "loss_steps")
  subprocess.run(["g++", "-O2", "-std=c++17", "-I" + ROOT,
                  os.path.join(ROOT, "kernels", "tests", "loss_steps_main.cc"),
                  os.path.join(ROOT, "kernels", "core", "loss.cc"),
                  "-o", binary], check=True, capture_output=True)

  def run(rows):
    text = "".join(f"{loss} {y!r} {a!r} {wx!r} {q!r}\n"
                   for loss, y, a, wx, q in rows)
    out = subprocess.run([binary], input=text, capture_output=True,
                         text=True, check=True, timeout=60).stdout
    lines = out.splitlines()
    assert len(lines) == len(rows), out[-500:]
    assert not any(line.startswith("error") for line in lines), out[-500:]
    return np.array([[float(v) for v in line.split()] for line in lines])
  return run


def _bounded_max(f, lo, hi):
  """Float64 maximiser of f on [lo, hi] by scipy's bounded search."""
  res = minimize_scalar(lambda u: -f(u), bounds=(lo, hi), method="bounded",
                        options=dict(xatol=1e-12, maxiter=5000))
  return res.x


# --------------------------------------------------------------- Poisson

def _poisson_f(t, t0, wx, q):
  """f in t = y - a (a - alpha = t0 - t), stable for tiny and huge t."""
  tlogt = t * np.log(t) if t > 0 else 0.0
  d = t0 - t
  return -(tlogt - t) - d * wx - 0.5 * q * d * d


def _poisson_t_reference(t0, wx, q):
  """t = omega(L) / q, L = log q + wx + q t0, by scipy's Wright omega."""
  L = np.log(q) + wx + q * t0
  if L < -700.0:  # omega(L) = e^(L - omega) underflows: t = e^(L - log q)
    return np.exp(L - np.log(q))
  return wrightomega(L).real / q


POISSON_LABELS = (0.0, 1.0, 9.0, 250.0)
POISSON_T0 = (0.0, 1e-30, 1e-3, 1.0, 1e3)


def test_poisson_step_is_finite_in_domain_and_exact_on_extreme_grid(steps):
  cases = [(y, t0, wx, q) for y, t0, wx, q in itertools.product(
      POISSON_LABELS, POISSON_T0, WX, Q)]
  out = steps([("poisson_loss", y, y - t0, wx, q) for y, t0, wx, q in cases])
  for (y, t0, wx, q), (a, _, dual_loss) in zip(cases, out):
    case = f"y={y} t0={t0} wx={wx} q={q}: a={a}"
    assert np.isfinite(a) and np.isfinite(dual_loss), case
    t = y - a
    assert t >= 0.0, case  # the dual domain a <= y
    t_ref = _poisson_t_reference(t0, wx, q)
    # a = y - t resolves t only to ~1e-16 |y| in float64; and t, a root
    # of log t + q t = L - log q, inherits L's rounding (1e-16 |L|) as an
    # absolute error of log t below 1e-16 |L| / (1 + q t).
    L = abs(np.log(q)) + abs(wx) + q * t0
    tol = 4e-16 * (abs(y) + t_ref * (1.0 + L / (1.0 + q * t_ref))) + 1e-300
    assert abs(t - t_ref) <= 8 * tol, f"{case} t_ref={t_ref}"
    # ...and it maximises f: no better point by a bounded search in log t.
    s_ref = np.log(max(t_ref, 1e-300))
    s = _bounded_max(lambda s: _poisson_f(np.exp(s), t0, wx, q),
                     s_ref - 5.0, s_ref + 5.0)
    f_ours = _poisson_f(t, t0, wx, q)
    f_best = _poisson_f(np.exp(s), t0, wx, q)
    scale = abs(t0 - t) * abs(wx) + q * (t0 - t) ** 2 + t * (
        abs(np.log(max(t, 1e-300))) + 1.0)
    assert f_ours >= f_best - 1e-12 * (1.0 + scale), case


def test_poisson_step_without_features_is_the_closed_form(steps):
  # q = 0 (|x| = 0): f(a) = -phi*(-a) - (a - alpha) wx, a = y - exp(wx).
  cases = [(y, wx) for y in (0.0, 3.0) for wx in (-700.0, -1.0, 0.0, 30.0)]
  out = steps([("poisson_loss", y, 0.0, wx, 0.0) for y, wx in cases])
  for (y, wx), (a, _, _) in zip(cases, out):
    assert a == pytest.approx(y - np.exp(wx), rel=1e-15, abs=1e-300)


# -------------------------------------------------------------- logistic

def _logistic_f(b, b0, ywx, q):
  """f in b = y a (a - alpha = y (b - b0)), 0 log 0 = 0."""
  ent = (b * np.log(b) if b > 0 else 0.0) + (
      (1 - b) * np.log1p(-b) if b < 1 else 0.0)
  return -ent - (b - b0) * ywx - 0.5 * q * (b - b0) ** 2


def _logistic_reference(b0, ywx, q):
  """(b, 1 - b) at the root of u + y wx + q (sigmoid(u) - b0) = 0, u =
  logit(b), by brentq (u keeps b ~ 1e-300 and 1 - b ~ 1e-300 apart)."""
  g = lambda u: u + ywx + q * (expit(u) - b0)  # noqa: E731
  lo, hi = -ywx - q * (1.0 - b0) - 1.0, -ywx + q * b0 + 1.0
  u = brentq(g, lo, hi, xtol=1e-13, rtol=1e-15, maxiter=500)
  return expit(u), expit(-u)


LOGISTIC_B0 = (0.0, 1e-30, 0.3, 1.0 - 1e-7, 1.0)


def test_logistic_step_is_strictly_inside_and_exact_on_extreme_grid(steps):
  cases = list(itertools.product((0.0, 1.0), LOGISTIC_B0, WX, (0.0,) + Q))
  rows = []
  for label, b0, wx, q in cases:
    y = 2.0 * label - 1.0
    rows.append(("logistic_loss", label, b0 * y, wx, q))
  out = steps(rows)
  for (label, b0, wx, q), (a, _, dual_loss) in zip(cases, out):
    y = 2.0 * label - 1.0
    b = a * y
    case = f"y={y} b0={b0} wx={wx} q={q}: b={b}"
    assert np.isfinite(a) and np.isfinite(dual_loss), case
    # Strictly inside (0, 1), also after rounding to float32.
    assert FLT_MIN <= b <= B_MAX, case
    assert 0.0 < np.float32(b) < 1.0, case
    b_ref, one_minus_ref = _logistic_reference(b0, y * wx, q)
    if b_ref < FLT_MIN:
      assert b == FLT_MIN, case
    elif b_ref > B_MAX:
      assert b == B_MAX, case
    elif b_ref <= 0.5:
      # 1e-8: the step stops once Newton's step is below 1e-9 (1 + |x|)
      # and extrapolates to first order (error ~ q step^2).
      assert b == pytest.approx(b_ref, rel=1e-8), f"{case} ref={b_ref}"
    else:
      assert 1.0 - b == pytest.approx(one_minus_ref, rel=1e-8), (
          f"{case} ref 1-b={one_minus_ref}")
    # It maximises f, up to the clamping to [FLT_MIN, B_MAX] (the float32
    # state holds nothing closer to 0 or 1): moving b by at most 2^-24
    # costs at most |f'| 2^-24 <= (|wx| + q + 17) 2^-24 (17 ~ logit(B_MAX)).
    b_best = _bounded_max(lambda v: _logistic_f(v, b0, y * wx, q),
                          0.0, 1.0)
    f_ours = _logistic_f(b, b0, y * wx, q)
    f_best = max(_logistic_f(b_best, b0, y * wx, q),
                 _logistic_f(b_ref, b0, y * wx, q))
    clamped = not FLT_MIN <= b_ref <= B_MAX
    tol = 1e-12 * (1.0 + abs(wx) + q) + (
        (abs(wx) + q + 17.0) * 2.0 ** -24 if clamped else 0.0)
    assert f_ours >= f_best - tol, case


# ------------------------------------------------- the closed-form losses

@pytest.mark.parametrize("loss", ["squared_loss", "hinge_loss",
                                  "smooth_hinge_loss", "absolute_loss"])
def test_closed_form_steps_are_finite_and_in_domain_on_extreme_grid(steps,
                                                                    loss):
  labels = (0.0, 1.0) if loss != "squared_loss" else (-1e3, 0.0, 7.0)
  duals = {"squared_loss": (-1e6, 0.0, 3.0), "absolute_loss": (-1.0, 0.3)}
  cases = [(y, a, wx, q) for y, a, wx, q in itertools.product(
      labels, duals.get(loss, (0.0, 0.5)), WX, Q)]
  rows = []
  for y, a, wx, q in cases:
    if loss in ("hinge_loss", "smooth_hinge_loss"):
      a = a * (2.0 * y - 1.0)  # b = 0 or 0.5
    rows.append((loss, y, a, wx, q))
  out = steps(rows)
  for (_, y, alpha, wx, q), (a, _, dual_loss) in zip(rows, out):
    case = f"{loss} y={y} alpha={alpha} wx={wx} q={q}: a={a}"
    assert np.isfinite(a) and np.isfinite(dual_loss), case
    if loss == "squared_loss":
      expected = alpha + (y - wx - alpha) / (1.0 + q)
      assert a == pytest.approx(expected, rel=1e-14, abs=1e-300), case
    elif loss == "absolute_loss":
      assert -1.0 <= a <= 1.0, case
    else:
      assert 0.0 <= a * (2.0 * y - 1.0) <= 1.0, case

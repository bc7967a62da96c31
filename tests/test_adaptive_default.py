"""The in-memory default order takes 'adaptive' where it wins: Poisson,
and the smooth losses where the l2 is weak for the rows (SDCA's bound
max_i |x_i|^2 L / l2 above `options.ADAPTIVE_PASSES_BOUND`), on real data
in natural units (bench/bench_defaults.py's problems: an intercept column,
nothing scaled; l2 "moderate" = mean |x_i|^2, "weak" = 1/30 of it).

Each fit stops at a relative duality gap of 1e-6 and must be within 1e-6
of an independent optimum (the ridge normal equations, scipy's L-BFGS in
float64) in fewer passes than the order the default took before (the
loss's own, momentum 'auto' in both); where a permutation or 'shrinking'
was the faster order the default keeps it.
"""
import os
import sys

import numpy as np
import pytest

from tf_sdca import engine
from tf_sdca import options

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

import bench_defaults  # pylint: disable=g-import-not-at-top,wrong-import-position


def _problem(set_name, loss, l2_name):
  found = [p for p in bench_defaults.problems([set_name])
           if p.loss == loss and p.l2_name == l2_name]
  return found[0]


def _optimum(problem):
  """P* of an independent solver: the normal equations for the squared
  loss, else scipy's L-BFGS (certified by its gradient)."""
  x, y, l2 = problem.x, problem.y, problem.l2
  if problem.loss == "squared_loss":
    w = np.linalg.solve(x.T @ x + l2 * np.eye(x.shape[1]), x.T @ y)
    return bench_defaults.primal(problem.loss, x, y, l2, w)
  value, bound = bench_defaults.lbfgs_optimum(problem.loss, x, y, l2, 1)
  assert bound / abs(value) < 1e-9
  return value


def _bound(problem):
  """SDCA's bound max_i |x_i|^2 L / l2 as the rule reads it."""
  norms = engine.row_norms(problem.n, None, problem.x)
  curvature = {"logistic_loss": 0.25}.get(problem.loss, 1.0)
  return norms, norms.largest * curvature / problem.l2


@pytest.mark.parametrize("set_name,loss,l2_name,most,before", [
    # Passes to a gap of 1e-6 measured (default now / the loss's order):
    # breast_cancer logistic 25 / 42, smooth hinge 75 / 116; linnerud
    # squared 110 / 173; digits' counts (Poisson) 35 / 61.
    ("breast_cancer", "logistic_loss", "weak", 32, "permutation"),
    ("breast_cancer", "smooth_hinge_loss", "weak", 95, "shrinking"),
    ("linnerud", "squared_loss", "weak", 140, "permutation"),
    ("digits", "poisson_loss", "moderate", 48, "permutation"),
])
def test_the_default_takes_adaptive_and_reaches_the_optimum_sooner(
    set_name, loss, l2_name, most, before):
  problem = _problem(set_name, loss, l2_name)
  norms, bound = _bound(problem)
  # Not by the rows' spread (breast_cancer 1.4, linnerud 0.9, digits 0.15).
  assert norms.spread < options.ADAPTIVE_NORM_SPREAD
  if loss != "poisson_loss":
    assert bound > options.ADAPTIVE_PASSES_BOUND[loss]
  optimum = _optimum(problem)
  fit = bench_defaults.memory_fit(problem, {}, 1000)
  assert fit.gap_passes is not None and fit.gap_passes <= most
  value = bench_defaults.primal(loss, problem.x, problem.y, problem.l2,
                                fit.weights)
  assert (value - optimum) / abs(optimum) <= 1e-6
  assert (value - optimum) / abs(optimum) >= -1e-9
  old = bench_defaults.memory_fit(problem, {"visit_order": before}, 1000)
  assert old.gap_passes is None or old.gap_passes > most
  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca
  model = InMemorySdca(loss=loss, l2=problem.l2)
  model.fit(problem.y, **problem.data, epochs=1, verbose=0)
  assert model.visit_order_used == "adaptive"


@pytest.mark.parametrize("set_name,loss,l2_name,order", [
    # A strong l2 for the rows (bound 3.9): a permutation, 13 passes
    # against 19 in 'adaptive' (draws with replacement).
    ("linnerud", "squared_loss", "moderate", "permutation"),
    # Smooth hinge, bound 58 (under 100): 'shrinking', 100 against 130.
    ("iris", "smooth_hinge_loss", "weak", "shrinking"),
    # The hinge (no bound), spread 1.4: 'shrinking', 132 against 142.
    ("breast_cancer", "hinge_loss", "weak", "shrinking"),
])
def test_where_the_losss_order_was_faster_the_default_keeps_it(
    set_name, loss, l2_name, order):
  problem = _problem(set_name, loss, l2_name)
  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca
  model = InMemorySdca(loss=loss, l2=problem.l2)
  model.fit(problem.y, **problem.data, epochs=1, verbose=0)
  assert model.visit_order_used == order
  fit = bench_defaults.memory_fit(problem, {}, 1000)
  adaptive = bench_defaults.memory_fit(problem, {"visit_order": "adaptive"},
                                       1000)
  assert fit.gap_passes is not None and adaptive.gap_passes is not None
  assert fit.gap_passes < adaptive.gap_passes
  if loss != "hinge_loss":
    value = bench_defaults.primal(loss, problem.x, problem.y, problem.l2,
                                  fit.weights)
    optimum = _optimum(problem)
    assert (value - optimum) / abs(optimum) <= 1e-6


def test_the_rule_reads_the_bound_of_each_loss():
  """The bound's curvature: 1/4 logistic, 1 squared, 1/gamma smooth hinge;
  the absolute deviation and Poisson by the loss alone, multiclass losses
  and streamed batches never."""
  even = engine.RowNorms(spread=0.5, largest=100.0)
  # logistic: 100 / 4 / 1 = 25, not above 25; at l2 = 0.5, 50.
  assert options.visit_order_for("logistic", None, row_norms=even,
                                 l2=1.0) == "permutation"
  assert options.visit_order_for("logistic", None, row_norms=even,
                                 l2=0.5) == "adaptive"
  assert options.visit_order_for("squared", None, row_norms=even,
                                 l2=2.0) == "adaptive"
  assert options.visit_order_for("squared", None, row_norms=even,
                                 l2=5.0) == "permutation"
  # smooth hinge: 100 / gamma / l2 against 100.
  assert options.visit_order_for("smooth_hinge", None, row_norms=even,
                                 l2=0.5) == "adaptive"
  assert options.visit_order_for("smooth_hinge", None, row_norms=even,
                                 l2=0.5, gamma=4.0) == "shrinking"
  assert options.visit_order_for("hinge", None, row_norms=even,
                                 l2=1e-3) == "shrinking"
  assert options.visit_order_for("poisson", None) == "adaptive"
  assert options.visit_order_for("absolute", None) == "adaptive"
  assert options.visit_order_for("softmax", None, row_norms=even,
                                 l2=1e-3) == "permutation"
  assert options.visit_order_for("squared", None, options.STREAMED,
                                 row_norms=even, l2=1e-3) == "permutation"
  assert options.visit_order_for("poisson", None, options.STREAMED) == (
      "permutation")


@pytest.mark.parametrize("n,with_values", [
    (7, True), (2000, True), (2000, False),
    (engine.NORM_SPREAD_ROWS + 901, True)])
def test_row_norms_add_each_rows_squares_in_order(n, with_values):
  # Every row read (n <= NORM_SPREAD_ROWS) or evenly spaced rows: each
  # |x_i|^2 (its sparse part read by TfSdca>PackRows as it packs the rows)
  # is its squares added one after the other from 0, a repeated id once per
  # entry (ids here repeat in most rows), the bits the order choice was
  # measured with, on rows of 0 to 120 entries of values over six decades
  # (or of no values: 1 each).
  rng = np.random.default_rng(n)
  lengths = rng.integers(0, 121, n)
  lengths[::5] = 0
  indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  values = (rng.standard_normal(indptr[-1]) *
            10.0 ** rng.uniform(-3, 3, indptr[-1])).astype(np.float32)
  indices = rng.integers(0, 50, indptr[-1]).astype(np.int64)
  rows = (np.arange(n) if n <= engine.NORM_SPREAD_ROWS else np.unique(
      np.linspace(0, n - 1, engine.NORM_SPREAD_ROWS).astype(np.int64)))
  assert np.array_equal(engine.norm_rows(n), rows)
  expected = np.zeros(len(rows))
  for k, i in enumerate(rows):
    total = 0.0
    for v in values[indptr[i]:indptr[i + 1]]:
      total += float(v) ** 2 if with_values else 1.0
    expected[k] = total
  csr = (indptr, indices, values if with_values else None)
  chunks = engine.RowChunks(
      [(csr, None, np.zeros(n, np.float32), np.ones(n, np.float32))], n,
      indptr[-1], 0, 50, with_values)
  norms = engine.Problem(chunks, "logistic_loss", 1.0, 1,
                         norms=True).row_norms
  assert norms.largest == expected.max()
  assert norms.spread == float(expected.std() / expected.mean())


@pytest.mark.parametrize("n,order", [(270, "C"), (270, "F"),
                                     (engine.NORM_SPREAD_ROWS + 901, "C")])
def test_row_norms_of_dense_rows_sum_each_rows_squares_as_numpy_does(n,
                                                                     order):
  # The dense part: each read row's float64 squares summed by numpy over a
  # C-ordered copy of the rows (the bits the order choice was measured
  # with), whether the array is C- or Fortran-ordered, every row read or
  # evenly spaced ones.
  rng = np.random.default_rng(n)
  x = np.asarray(rng.standard_normal((n, 13)) *
                 10.0 ** rng.uniform(-3, 3, (n, 13)), np.float32, order=order)
  rows = engine.norm_rows(n)
  expected = (np.ascontiguousarray(x[rows], np.float64) ** 2).sum(axis=1)
  norms = engine.row_norms(n, None, x)
  assert norms.largest == expected.max()
  assert norms.spread == float(expected.std() / expected.mean())

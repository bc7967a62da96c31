"""bench/bench_hinge.py's time to LIBLINEAR's objective: the fewest epochs
that reach it, found on the grid and then bisected below it, on a fit whose
objective is known for every epoch count."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import bench_hinge  # pylint: disable=g-import-not-at-top,wrong-import-position
import suite  # pylint: disable=g-import-not-at-top,wrong-import-position


def _fake(needed, monkeypatch, stop_at=None):
  """A fit of e epochs whose objective is 1 until `needed` epochs, 0 from
  them on (target 0.5); it runs min(e, stop_at) epochs. Records the
  epochs asked for."""
  asked = []
  monkeypatch.setattr(bench_hinge, "objective",
                      lambda w, x, y, k: float(w[0]))

  def fit(x, y, k, epochs, order):
    del x, y, k, order
    asked.append(epochs)
    run = epochs if stop_at is None else min(epochs, stop_at)
    return np.array([0.0 if run >= needed else 1.0]), run, 0.001
  return fit, asked


@pytest.mark.parametrize("needed", [1, 2, 4, 13, 16, 18, 33, 41])
def test_charges_the_fewest_epochs_reaching_the_target(monkeypatch, needed):
  fit, asked = _fake(needed, monkeypatch)
  seconds, epochs, solve = bench_hinge.time_to(fit, None, None, 1, 0.5,
                                               repeats=2, budget=1e9)
  assert epochs == needed
  assert seconds is not None and seconds >= 0 and solve == 0.001
  # The grid up to its first hit, then only bisection points below it.
  first = next(k for k in suite.GRID if k >= needed)
  grid = [k for k in asked if k in suite.GRID and k <= first]
  assert set(grid) == {k for k in suite.GRID if k <= first}
  assert max(asked) == first


@pytest.mark.parametrize("needed", [13, 16])
def test_without_refine_the_grid_point_is_charged(monkeypatch, needed):
  fit, _ = _fake(needed, monkeypatch)
  _, epochs, _ = bench_hinge.time_to(fit, None, None, 1, 0.5, repeats=1,
                                     budget=1e9, refine=False)
  assert epochs == next(k for k in suite.GRID if k >= needed)


def test_a_fit_that_stops_short_of_the_target_is_not_reached(monkeypatch):
  fit, asked = _fake(30, monkeypatch, stop_at=10)
  assert bench_hinge.time_to(fit, None, None, 1, 0.5, repeats=1,
                             budget=1e9) == (None, 10, None)
  assert max(asked) == 12  # the first grid point its fit stopped below

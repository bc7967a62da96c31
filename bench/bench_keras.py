"""Benchmark: `tf_sdca.keras.LinearModel.fit` against `InMemorySdca` on the
same CSR matrix (what a scipy user has), same process, same run.

  python bench/bench_keras.py [--rows 1000000] [--tol 1e-4] [--repeats 2]

Each peer is one `fit(..., tol=--tol)`, timed from the call (validating and
packing the rows included) to the returned model: it stops after the first
epoch whose relative duality gap is below `--tol`. Keras runs twice: as a
user without callbacks (verbose=0: its epochs in one go) and with a Keras
callback that does nothing (Keras' loop, a step per epoch). The peers
alternate `--repeats` times and the best time of each is kept. Prints the
times and the ratios Keras / InMemorySdca (target: <= 1.25).
"""
import argparse
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # pylint: disable=wrong-import-position

import suite  # pylint: disable=wrong-import-position


def time_in_memory(csr, labels, l2, tol, epochs):
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  model = InMemorySdca(loss="logistic", l2=l2)
  start = time.perf_counter()
  history = model.fit(labels, indptr=csr.indptr, indices=csr.indices,
                      values=csr.data, num_features=csr.shape[1],
                      epochs=epochs, tol=tol, verbose=0)
  return _result(start, history["duality_gap"], tol)


def time_keras(csr, labels, l2, tol, epochs, callback=False):
  import keras  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  # The intercept is a column of the matrix, as for InMemorySdca.
  model = LinearModel(loss="logistic", l2=l2, use_bias=False)
  start = time.perf_counter()
  history = model.fit(csr, labels, epochs=epochs, tol=tol, verbose=0,
                      callbacks=[keras.callbacks.Callback()] if callback
                      else None)
  return _result(start, history.history["duality_gap"], tol)


def _result(start, gaps, tol):
  """(seconds from `start` to now, or None where the gap did not fall
  below tol; epochs; final gap)."""
  seconds = time.perf_counter() - start
  return (seconds if gaps[-1] < tol else None), len(gaps), gaps[-1]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--tol", type=float, default=1e-4)
  parser.add_argument("--epochs", type=int, default=100)
  parser.add_argument("--repeats", type=int, default=2)
  args = parser.parse_args()
  problem = suite.criteo_problem(args.rows)
  csr = problem.csr().astype(np.float32)
  csr.indices = csr.indices.astype(np.int32)
  print(f"{problem.name}: {csr.shape[0]:,} rows x {csr.shape[1]:,} columns, "
        f"{csr.nnz / csr.shape[0]:.0f} non-zeros per row, l2 = {problem.l2}, "
        f"time to a relative duality gap < {args.tol:g}")
  peers = {"InMemorySdca": time_in_memory, "keras.LinearModel": time_keras,
           "keras + callback": lambda *a: time_keras(*a, callback=True)}
  best = {}
  for _ in range(args.repeats):
    for name, run in peers.items():
      seconds, epochs, gap = run(csr, problem.labels, problem.l2, args.tol,
                                 args.epochs)
      print(f"  {name:18s} {'-' if seconds is None else f'{seconds:.2f}'} s "
            f"({epochs} epochs, gap {gap:.2e})", flush=True)
      if seconds is not None:
        best[name] = min(best.get(name, np.inf), seconds)
  if "InMemorySdca" in best:
    base = best["InMemorySdca"]
    print(f"best: InMemorySdca {base:.2f} s; " + "; ".join(
        f"{name} {best[name]:.2f} s, ratio {best[name] / base:.2f}"
        for name in peers if name != "InMemorySdca" and name in best) +
          " (target <= 1.25)")


if __name__ == "__main__":
  main()

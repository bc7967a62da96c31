"""Benchmark: SDCA against its averaged output and the primal stochastic
methods of the reference documents, same data, same run.

On the hinge loss (the reference's setting), `f(w) = lambda/2 |w|^2 +
mean hinge` with `lambda = l2 / n` (tf_sdca's objective divided by n):

  - SDCA (`InMemorySdca`, one thread) and SDCA with output averaging
    (`average_from=10`: the mean of the iterates from epoch 10 on; its
    epochs to the target count from there);
  - PEGASOS (bench/primal_sgd.py) with k = 1 and k = 8 rows a step, with
    and without the projection step (its averaged iterate reported);
  - SGD with 1 / (lambda t) steps on the hinge's subgradient = PEGASOS
    without projection, k = 1 (the same algorithm: listed once).

For each: epochs (passes over n rows) and seconds to a relative primal
suboptimality of 1e-3 against the optimum certified by SDCA's duality gap
(1e-12), and the held-out accuracy at the end. The primal methods are numpy
loops (their seconds are not comparable to the C++ SDCA's; the epochs are).

Then accelerated mini-batch SDCA (ASDCA, `visit_order="asdca"`), which needs
a smooth loss, against SDCA on the smooth hinge (gamma = 1; the reference
runs ASDCA on it too), both in C++ over the same packed rows: epochs and
seconds (training time, the better of two alternating runs) to relative
primal suboptimalities of 1e-3 and 1e-6, as ratios to SDCA's, for batch
sizes m = 8 and 64 with the paper's theta, and m = 8 with 4x and 16x it.

  python bench/bench_variants.py [--epochs 60] [--rows 10000]
"""
import argparse
import os
import sys
import time
import warnings

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # pylint: disable=wrong-import-position
import scipy.sparse  # pylint: disable=wrong-import-position
import tensorflow as tf  # pylint: disable=wrong-import-position
from sklearn.datasets import load_breast_cancer, load_iris  # pylint: disable=wrong-import-position
from sklearn.preprocessing import StandardScaler  # pylint: disable=wrong-import-position

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import primal_sgd  # pylint: disable=wrong-import-position
import tf_sdca  # pylint: disable=wrong-import-position
from tf_sdca.trainer import InMemorySdca  # pylint: disable=wrong-import-position

TARGET = 1e-3
AVERAGE_FROM = 10


def problems(rows):
  """(name, x_train, y_train, x_test, y_test, l2) with y in {-1, +1} and an
  intercept column."""
  x, y = load_breast_cancer(return_X_y=True)
  x = StandardScaler().fit_transform(x)
  x = np.column_stack([x, np.ones(len(y))])
  perm = np.random.default_rng(0).permutation(len(y))
  x, y = x[perm], 2.0 * y[perm] - 1.0
  cut = int(0.8 * len(y))
  yield ("breast_cancer (standardised)", x[:cut], y[:cut], x[cut:], y[cut:],
         10.0)
  data = tf_sdca.data.generate_criteo_arrays(rows + rows // 4,
                                             num_buckets=2**14, seed=0)
  dense = data["dense"] / np.maximum(data["dense"].max(axis=0), 1e-6)
  n, k = data["cat_ids"].shape
  ids = data["cat_ids"].astype(np.int64)
  csr = scipy.sparse.csr_matrix(
      (np.ones(n * k), ids.ravel(), np.arange(0, n * k + 1, k)),
      shape=(n, 2**14))
  csr.sum_duplicates()
  x = scipy.sparse.hstack([csr, scipy.sparse.csr_matrix(dense),
                           scipy.sparse.csr_matrix(np.ones((n, 1)))]).tocsr()
  y = 2.0 * data["labels"].astype(np.float64) - 1.0
  yield ("Criteo-shaped (generated)", x[:rows], y[:rows], x[rows:], y[rows:],
         10.0)


def iris_in_cm():
  """Iris versicolor (-1) against virginica (+1), not separable, in its
  natural units (cm) plus an intercept: an ill-conditioned ASDCA problem
  (max |x_i|^2 = 124)."""
  data = load_iris()
  keep = data.target > 0
  x = np.column_stack([data.data[keep], np.ones(keep.sum())])
  return x, np.where(data.target[keep] == 2, 1.0, -1.0)


def _sdca_inputs(x, y):
  labels = (y > 0).astype(np.float32)
  if scipy.sparse.issparse(x):
    return dict(labels=labels, indptr=x.indptr.astype(np.int64),
                indices=x.indices.astype(np.int64),
                values=x.data.astype(np.float32), num_features=x.shape[1])
  return dict(labels=labels, dense=x.astype(np.float32))


def _sdca_weights(model):
  return (model.sparse_weights if model.sparse_weights is not None else
          model.dense_weights)


def sdca_runs(x, y, l2, epochs, average):
  """(epoch, seconds so far, f after it) per epoch of one InMemorySdca fit
  (f = the history's loss: P / n), and the final weights."""
  model = InMemorySdca(loss="hinge", l2=l2, momentum=0,  # plain SDCA
                       average_from=AVERAGE_FROM if average else None)
  history = model.fit(epochs=epochs, verbose=0, **_sdca_inputs(x, y))
  seconds = np.cumsum([x.shape[0] / r for r in history["rows_per_sec"]])
  return ([(e, s, f) for e, (s, f) in
           enumerate(zip(seconds, history["loss"]), start=1)
           if not average or e >= AVERAGE_FROM], _sdca_weights(model))


def pegasos_runs(x, y, l2, epochs, batch_size, projection):
  """(epoch, seconds so far, f of the averaged iterate) per epoch, and the
  final averaged weights."""
  n = x.shape[0]
  lam = l2 / n
  steps_per_epoch = max(1, n // batch_size)
  marks = [steps_per_epoch * e for e in range(1, epochs + 1)]
  start = time.perf_counter()
  _, _, recorded = primal_sgd.pegasos(x, y, lam, marks[-1], batch_size,
                                      projection, seed=0, checkpoints=marks)
  per_step = (time.perf_counter() - start) / marks[-1]
  return ([(e, per_step * t,
            primal_sgd.objective("hinge", recorded[t][1], x, y, lam))
           for e, t in enumerate(marks, start=1)], recorded[marks[-1]][1])


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--epochs", type=int, default=100)
  parser.add_argument("--rows", type=int, default=10_000)
  parser.add_argument("--asdca-epochs", type=int, default=3000)
  parser.add_argument("--asdca-l2-scales", default="1,0.01",
                      help="the ASDCA table is run at these multiples of "
                      "each problem's l2 (small: ill-conditioned)")
  parser.add_argument("--only-asdca", action="store_true",
                      help="skip the hinge table (PEGASOS, averaging)")
  parser.add_argument("--plots", default=None, metavar="DIR",
                      help="also draw each table's curves (relative "
                      "suboptimality per epoch) as PNGs in DIR")
  args = parser.parse_args(argv)
  if args.epochs < AVERAGE_FROM:
    parser.error(f"--epochs {args.epochs}: the averaged SDCA run averages "
                 f"from epoch {AVERAGE_FROM}, so at least that many")
  # (SDCA's slow-progress warning is for users, not for this table.)
  warnings.simplefilter("ignore", UserWarning)
  asdca_table("iris (cm), versicolor vs virginica", *iris_in_cm(), 1.0,
              args.asdca_epochs, args.plots)
  for name, x, y, xt, yt, l2 in problems(args.rows):
    for scale in (float(v) for v in args.asdca_l2_scales.split(",")):
      asdca_table(name, x, y, l2 * scale, args.asdca_epochs, args.plots)
    if args.only_asdca:
      continue
    n = x.shape[0]
    lam = l2 / n
    ref = InMemorySdca(loss="hinge", l2=l2)
    ref.fit(epochs=20_000, tol=1e-12, verbose=0, **_sdca_inputs(x, y))
    w_ref = _sdca_weights(ref)
    best = primal_sgd.objective("hinge", w_ref, x, y, lam)
    print(f"\n{name}: {n:,} rows x {x.shape[1]:,} columns, hinge, l2 = {l2} "
          f"(lambda = {lam:.2e}); f* = {best:.6f}")
    print(f"{'method':34s} {'epochs to 1e-3':>15s} {'seconds':>9s} "
          f"{'rel. subopt. at end':>20s} {'test accuracy':>14s}")
    runs = {
        "SDCA": sdca_runs(x, y, l2, args.epochs, False),
        f"SDCA, averaged from epoch {AVERAGE_FROM}": sdca_runs(
            x, y, l2, args.epochs, True),
    }
    for k in (1, 8):
      for projection in (True, False):
        label = (f"PEGASOS k={k}, "
                 f"{'projection' if projection else 'no projection'}")
        if k == 1 and not projection:
          label += " (= SGD)"
        runs[label] = pegasos_runs(x, y, l2, args.epochs, k, projection)
    for label, (history, w) in runs.items():
      reached = next(((e, sec) for e, sec, f in history
                      if f - best <= TARGET * best), None)
      sub = (history[-1][2] - best) / best
      accuracy = float(np.mean(np.sign(xt @ w) == yt))
      print(f"{label:34s} "
            f"{(str(reached[0]) if reached else '> ' + str(args.epochs)):>15s}"
            f" {(f'{reached[1]:.3f}' if reached else '-'):>9s} {sub:>20.2e} "
            f"{accuracy:>14.4f}")
    if args.plots:
      curves = {label: [(e, (f - best) / best) for e, _, f in history]
                for label, (history, _) in runs.items()}
      print("plot:", plot(curves, f"{name}: hinge, l2 = {l2:g}", TARGET,
                          args.plots, f"variants_hinge_{name}"))

def _reached(history, best, target):
  """(epochs, training seconds) of the first epoch within `target` of
  `best` (relative), or None."""
  seconds = 0.0
  for epoch, (f, rate) in enumerate(zip(history["loss"],
                                        history["rows_per_sec"]), start=1):
    seconds += history["rows"] / rate
    if f - best <= target * abs(best):
      return epoch, seconds
  return None


def plot(curves, title, target, directory, stem):
  """Draws {label: [(epoch, relative suboptimality)]} on log-log axes as
  DIR/stem.png (the stem's non-alphanumerics as '_'); returns the path."""
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for label, points in curves.items():
    if points:
      ax.plot([p[0] for p in points], [max(p[1], 1e-12) for p in points],
              label=label, lw=1.2)
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("epochs (passes over the rows)")
  ax.set_ylabel("relative suboptimality (f - f*) / f*")
  ax.set_title(title, fontsize=10)
  for t in np.atleast_1d(target):
    ax.axhline(t, color="grey", lw=0.5, ls="--")
  ax.legend(fontsize=7)
  fig.tight_layout()
  os.makedirs(directory, exist_ok=True)
  slug = "".join(c if c.isalnum() else "_" for c in stem).strip("_")
  path = os.path.join(directory, "_".join(filter(None, slug.split("_"))) +
                      ".png")
  fig.savefig(path, dpi=100)
  plt.close(fig)
  return path


def asdca_table(name, x, y, l2, epochs, plots=None):
  """ASDCA's ratios to SDCA on the smooth hinge (see the module doc)."""
  inputs = _sdca_inputs(x, y)
  ref = InMemorySdca(loss="smooth_hinge", l2=l2)
  best = ref.fit(epochs=20_000, tol=1e-13, verbose=0,
                 **inputs)["loss"][-1]  # P* / n
  paper = {}
  for m in (8, 64):
    probe = InMemorySdca(loss="smooth_hinge", l2=l2, visit_order="asdca",
                         asdca_batch_size=m)
    probe.fit(epochs=1, verbose=0, **inputs)
    paper[m] = probe.asdca_theta_used
  # Plain SDCA epochs, the reference's method (no extrapolation).
  runs = {"SDCA": dict(loss="smooth_hinge", l2=l2, momentum=0)}
  for m in (8, 64):
    runs[f"ASDCA m={m}, paper theta ({paper[m]:.3g})"] = dict(
        loss="smooth_hinge", l2=l2, visit_order="asdca", asdca_batch_size=m)
  for factor in (4, 16):
    theta = min(1.0, factor * paper[8])
    runs[f"ASDCA m=8, theta {factor}x paper ({theta:.3g})"] = dict(
        loss="smooth_hinge", l2=l2, visit_order="asdca", asdca_batch_size=8,
        asdca_theta=theta)
  results = {label: [] for label in runs}
  for _ in range(2):  # alternate the sides; keep each one's faster run
    for label, options in runs.items():
      model = InMemorySdca(**options)
      try:
        history = model.fit(epochs=epochs, tol=1e-14, verbose=0, **inputs)
      except (FloatingPointError, tf.errors.InvalidArgumentError) as error:
        if "diverged" not in str(error):
          raise
        history = None
      if history is not None:
        history["rows"] = x.shape[0]
      results[label].append(history)
  print(f"\n{name}: smooth hinge (gamma 1), l2 = {l2}; P*/n = {best:.8f}")
  print(f"{'method':40s} {'epochs 1e-3':>11s} {'x SDCA':>7s} "
        f"{'s 1e-3 x SDCA':>14s} {'epochs 1e-6':>11s} {'x SDCA':>7s} "
        f"{'s 1e-6 x SDCA':>14s}")
  base = {}
  for label, histories in results.items():
    cells = []
    for target in (1e-3, 1e-6):
      if any(h is None for h in histories):
        cells += ["diverged", "-", "-"]
        continue
      hits = [_reached(h, best, target) for h in histories]
      if any(hit is None for hit in hits):
        cells += [f"> {epochs}", "-", "-"]
        continue
      epochs_to, seconds = hits[0][0], min(hit[1] for hit in hits)
      if label == "SDCA":
        base[target] = (epochs_to, seconds)
      ref_epochs, ref_seconds = base.get(target, (None, None))
      cells += [str(epochs_to),
                f"{epochs_to / ref_epochs:.2f}" if ref_epochs else "-",
                f"{seconds / ref_seconds:.2f}" if ref_seconds else "-"]
    print(f"{label:40s} {cells[0]:>11s} {cells[1]:>7s} {cells[2]:>14s} "
          f"{cells[3]:>11s} {cells[4]:>7s} {cells[5]:>14s}")
  if plots:
    curves = {label: [(e, (f - best) / abs(best)) for e, f in
                      enumerate(histories[0]["loss"], start=1)]
              for label, histories in results.items()
              if histories[0] is not None}
    print("plot:", plot(curves, f"{name}: smooth hinge, l2 = {l2:g}",
                        (1e-3, 1e-6), plots, f"variants_asdca_{name}_{l2:g}"))


if __name__ == "__main__":
  main()

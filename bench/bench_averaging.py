"""Benchmark: the cost of output averaging (`average_from`) per step of
`tf_sdca.SdcaModel` (the engine of the estimators and `SDCAOptimizer`) and
per epoch of `InMemorySdca` / `keras.LinearModel`, same data, same run.

SdcaModel: generated Criteo-shaped rows (13 dense + 26 hashed categorical
features, 2^20 buckets, logistic loss, l2 = 1) in batches, streamed
through two models that alternate batch by batch, one without averaging,
one averaging from its first call (its means are updated every call and
`update_weights` writes every row of the mean: O(table) per call, where
without averaging only the batch's rows are written). InMemorySdca: the
same rows packed, whole fits alternating between a model without and one
with averaging (a float64 copy of the table and the duals updated per
epoch, and the exact objective of the mean computed per epoch).

Prints the mean seconds per step and the median seconds per fit of each,
and their ratios.

  python bench/bench_averaging.py [--rows 200000] [--batch-size 50000]
                                  [--epochs 3]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import bench_sdca_model  # pylint: disable=g-import-not-at-top,wrong-import-position
import tf_sdca  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_sdca.trainer import InMemorySdca  # pylint: disable=g-import-not-at-top,wrong-import-position


def _sdca_model(table, average_from):
  sparse = tf.Variable(tf.zeros([table]))
  dense = tf.Variable(tf.zeros([13]))
  options = dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0)
  if average_from is not None:
    options["average_from"] = average_from
  return tf_sdca.SdcaModel(None, dict(sparse_features_weights=[sparse],
                                      dense_features_weights=[dense]),
                           options)


def _report(what, seconds, digits):
  """One line: the plain and averaged times and their ratio."""
  print(f"{what} plain {seconds['plain']:.{digits}f}, averaged "
        f"{seconds['averaged']:.{digits}f}, ratio averaged/plain "
        f"{seconds['averaged'] / seconds['plain']:.2f}")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=200_000)
  parser.add_argument("--batch-size", type=int, default=50_000)
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--bucket-bits", type=int, default=20)
  args = parser.parse_args()
  labels, dense, ids, table, batches = bench_sdca_model.prepare(
      args.rows, args.batch_size, args.bucket_bits)
  models = {"plain": _sdca_model(table, None),
            "averaged": _sdca_model(table, 0)}
  times = {name: [] for name in models}
  for epoch in range(args.epochs):
    for b in batches:
      for name, model in models.items():
        start = time.perf_counter()
        model.update_weights(model.minimize(examples=b["examples"]))
        if epoch:  # the first epoch traces the steps
          times[name].append(time.perf_counter() - start)
  _report(f"SdcaModel, {args.rows:,} rows in batches of "
          f"{args.batch_size:,}, 2^{args.bucket_bits} buckets: s/step",
          {name: float(np.mean(t)) for name, t in times.items()}, 4)

  features = dict(dense=dense, ids=ids, num_features=table)
  fit_times = {"plain": [], "averaged": []}
  for _ in range(3):  # alternating fits of `epochs` epochs from zero
    for name, average_from in (("plain", None), ("averaged", 0)):
      model = InMemorySdca(l2=1.0, average_from=average_from)
      start = time.perf_counter()
      model.fit(labels=labels, epochs=args.epochs, verbose=0, **features)
      fit_times[name].append(time.perf_counter() - start)
  _report(f"InMemorySdca, {args.rows:,} rows, fit of {args.epochs} epochs "
          "(packing included), median of 3, s:",
          {name: float(np.median(t)) for name, t in fit_times.items()}, 3)

if __name__ == "__main__":
  main()

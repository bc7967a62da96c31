"""Benchmark: tf_sdca's op against tf.raw_ops.SdcaOptimizerV2.

Both train logistic regression (l2 = 1, l1 = 0) on the same generated
Criteo-shaped rows (13 dense + 26 hashed categorical features, 2^20 buckets)
in batches, with exactly the same glue around the op call: the batch's
feature ids and their distinct ids are prepared once (outside the timing,
cached across epochs), and each timed step gathers the distinct ids' weights,
calls the op, scatter-adds the deltas back and stores the new state rows.
Prints examples/s of the op alone and of op + glue, their ratio, and each
model's final training objective.

  python bench/bench_op.py [--rows 1000000] [--batch-size 100000] [--epochs 1]
"""
import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import tf_sdca  # pylint: disable=g-import-not-at-top
from tf_sdca.data import generate_criteo_arrays  # pylint: disable=g-import-not-at-top


def prepare(rows, batch_size, bucket_bits):
  """Generated data split into op-ready batches (ids unique per row, which
  TF's op requires: a rare in-row hash collision moves to a spare bucket)."""
  buckets = 1 << bucket_bits
  data = generate_criteo_arrays(rows, num_buckets=buckets, seed=0)
  ids = data["cat_ids"].copy()
  order = np.sort(ids, axis=1)
  dup_rows = np.flatnonzero((np.diff(order, axis=1) == 0).any(axis=1))
  for r in dup_rows:
    seen = set()
    for f in range(ids.shape[1]):
      if ids[r, f] in seen:
        ids[r, f] = buckets + f
      seen.add(ids[r, f])
  dense = data["dense"] / np.maximum(data["dense"].max(axis=0), 1e-6)
  batches = []
  for start in range(0, rows, batch_size):
    stop = min(rows, start + batch_size)
    b_ids = ids[start:stop].ravel()
    batches.append(dict(
        rows=slice(start, stop),
        ex=np.repeat(np.arange(stop - start, dtype=np.int64), ids.shape[1]),
        ids=b_ids, uniq=np.unique(b_ids),
        dense=np.ascontiguousarray(dense[start:stop])))
  return data["labels"], batches, buckets + ids.shape[1], len(dup_rows)


def run(op_name, labels, batches, table_size, epochs, threads):
  """Trains with one op; returns (op seconds, total seconds, weights, state)."""
  w_sparse = np.zeros(table_size, np.float64)
  w_dense = np.zeros(13, np.float64)
  state = np.zeros((labels.shape[0], 4), np.float32)
  ones = np.ones(labels.shape[0], np.float32)
  op_time = 0.0
  start = time.perf_counter()
  for _ in range(epochs):
    for b in batches:
      rows = b["rows"]
      args = dict(
          sparse_example_indices=[b["ex"]], sparse_feature_indices=[b["ids"]],
          sparse_feature_values=[], dense_features=[b["dense"]],
          example_weights=ones[rows], example_labels=labels[rows],
          sparse_indices=[b["uniq"]],
          sparse_weights=[w_sparse[b["uniq"]].astype(np.float32)],
          dense_weights=[w_dense.astype(np.float32)],
          example_state_data=state[rows])
      t0 = time.perf_counter()
      if op_name == "tf_sdca":
        out = tf_sdca.sdca_optimizer(**args, loss_type="logistic_loss",
                                     l1=0.0, l2=1.0, num_threads=threads)
      else:
        out = tf.raw_ops.SdcaOptimizerV2(
            **{k: ([tf.constant(x) for x in v] if isinstance(v, list) else
                   tf.constant(v)) for k, v in args.items()},
            loss_type="logistic_loss", l1=0.0, l2=1.0, num_loss_partitions=1,
            num_inner_iterations=1, adaptive=False)
      new_state = out[0].numpy()
      d_sparse = out[1][0].numpy()
      d_dense = out[2][0].numpy()
      op_time += time.perf_counter() - t0
      state[rows] = new_state
      w_sparse[b["uniq"]] += d_sparse
      w_dense += d_dense
  return op_time, time.perf_counter() - start, (w_sparse, w_dense), state


def objective(labels, batches, weights):
  """Training objective sum log-loss + l2/2 |w|^2, divided by n."""
  w_sparse, w_dense = weights
  total = 0.0
  for b in batches:
    z = (b["dense"] @ w_dense +
         w_sparse[b["ids"]].reshape(b["dense"].shape[0], -1).sum(1))
    y = 2.0 * labels[b["rows"]] - 1.0
    total += np.logaddexp(0.0, -y * z).sum()
  return (total + 0.5 * (w_sparse @ w_sparse + w_dense @ w_dense)) / len(
      labels)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--batch-size", type=int, default=100_000)
  parser.add_argument("--epochs", type=int, default=1)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--threads", type=int, default=0,
                      help="intra-op threads for both ops (0 = all cores)")
  args = parser.parse_args()
  if args.threads:
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
  labels, batches, table, dups = prepare(args.rows, args.batch_size,
                                         args.bucket_bits)
  print(f"TensorFlow {tf.__version__}, {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}), threads "
        f"{args.threads or 'all'}; {args.rows:,} rows x (13 dense + 26 "
        f"categorical), 2^{args.bucket_bits} buckets, batches of "
        f"{args.batch_size:,}, {args.epochs} epoch(s); {dups} rows had an "
        "in-row hash collision (moved to spare buckets)")
  results = {}
  # Warm up both (op loading, first-call overheads) on one batch.
  for name in ("tf_sdca", "SdcaOptimizerV2"):
    run(name, labels, batches[:1], table, 1, args.threads)
  for name in ("SdcaOptimizerV2", "tf_sdca"):
    op_s, total_s, weights, _ = run(name, labels, batches, table, args.epochs,
                                    args.threads)
    rows = args.rows * args.epochs
    results[name] = (rows / op_s, rows / total_s,
                     objective(labels, batches, weights))
  print(f"{'solver':18s}{'op rows/s':>14s}{'op+glue rows/s':>16s}"
        f"{'objective':>12s}")
  for name, (op_rate, total_rate, obj) in results.items():
    print(f"{name:18s}{op_rate:14,.0f}{total_rate:16,.0f}{obj:12.6f}")
  ours, theirs = results["tf_sdca"], results["SdcaOptimizerV2"]
  print(f"ratio tf_sdca / SdcaOptimizerV2: op {ours[0] / theirs[0]:.1f}x, "
        f"op+glue {ours[1] / theirs[1]:.1f}x")


if __name__ == "__main__":
  main()

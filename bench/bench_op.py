"""Benchmark: tf_sdca's op against tf.raw_ops.SdcaOptimizerV2.

Both train logistic regression (l2 = 1, l1 = 0) on the same generated
Criteo-shaped rows (13 dense + 26 hashed categorical features, 2^20 buckets)
in batches, with exactly the same glue around the op call: the batch's
feature ids, their distinct ids and its dense block are prepared once as
tensors (outside the timing, cached across epochs), and each timed step
gathers the distinct ids' weights, calls the op, scatter-adds the deltas back
and stores the new state rows.
The two peers alternate batch by batch, so that both see the same machine
conditions (on shared machines the speed drifts by tens of percent within a
run). Prints examples/s of the op alone and of op + glue, their ratio, and
each model's final training objective.

  python bench/bench_op.py [--rows 1000000] [--batch-size 100000] [--epochs 1]
"""
import argparse
import os
import platform
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
# numpy's OpenBLAS threads spin after a BLAS call and steal a core from
# whichever op runs next; neither peer should pay for that.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import tf_sdca  # pylint: disable=g-import-not-at-top
from tf_sdca.data import generate_criteo_arrays  # pylint: disable=g-import-not-at-top


def prepare(rows, batch_size, bucket_bits):
  """Generated data split into op-ready batches (ids unique per row, which
  TF's op requires: a rare in-row hash collision moves to a spare bucket)."""
  buckets = 1 << bucket_bits
  data = generate_criteo_arrays(rows, num_buckets=buckets, seed=0)
  labels = data["labels"]
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
    ex = np.repeat(np.arange(stop - start, dtype=np.int64), ids.shape[1])
    uniq = np.unique(b_ids)
    dense_rows = np.ascontiguousarray(dense[start:stop])
    batches.append(dict(
        rows=slice(start, stop), ids=b_ids, uniq=uniq, dense=dense_rows,
        # What does not change between epochs is handed to both ops as
        # tensors built once (re-converting 2.6M ids per step cost ~20 ms).
        tensors=dict(ex=tf.constant(ex), ids=tf.constant(b_ids),
                     uniq=tf.constant(uniq), dense=tf.constant(dense_rows),
                     ones=tf.ones([stop - start]),
                     labels=tf.constant(labels[start:stop]))))
  return labels, batches, buckets + ids.shape[1], len(dup_rows)


class Peer:
  """One solver's weights, state and accumulated times."""

  def __init__(self, name, n, table_size, threads):
    self.name = name
    self.threads = threads
    self.w_sparse = np.zeros(table_size, np.float64)
    self.w_dense = np.zeros(13, np.float64)
    self.state = np.zeros((n, 4), np.float32)
    self.op_time = 0.0
    self.total_time = 0.0

  def step(self, b):
    """One timed training step on batch `b` (glue + op)."""
    start = time.perf_counter()
    rows = b["rows"]
    t = b["tensors"]
    args = dict(
        sparse_example_indices=[t["ex"]], sparse_feature_indices=[t["ids"]],
        sparse_feature_values=[], dense_features=[t["dense"]],
        example_weights=t["ones"], example_labels=t["labels"],
        sparse_indices=[t["uniq"]],
        sparse_weights=[tf.constant(
            self.w_sparse[b["uniq"]].astype(np.float32))],
        dense_weights=[tf.constant(self.w_dense.astype(np.float32))],
        example_state_data=tf.constant(self.state[rows]))
    t0 = time.perf_counter()
    if self.name == "tf_sdca":
      out = tf_sdca.sdca_optimizer(**args, loss_type="logistic_loss", l1=0.0,
                                   l2=1.0, num_threads=self.threads)
    else:
      out = tf.raw_ops.SdcaOptimizerV2(
          **args, loss_type="logistic_loss", l1=0.0, l2=1.0,
          num_loss_partitions=1, num_inner_iterations=1, adaptive=False)
    new_state = out[0].numpy()
    d_sparse = out[1][0].numpy()
    d_dense = out[2][0].numpy()
    self.op_time += time.perf_counter() - t0
    self.state[rows] = new_state
    self.w_sparse[b["uniq"]] += d_sparse
    self.w_dense += d_dense
    self.total_time += time.perf_counter() - start


def run(peers, batches, epochs):
  """Trains all peers, alternating them batch by batch so that they see the
  same machine conditions (its speed drifts by tens of percent over a run on
  shared machines)."""
  for _ in range(epochs):
    for b in batches:
      for peer in peers:
        peer.step(b)


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
  n = labels.shape[0]
  # Warm up both (op loading, first-call overheads) on one batch.
  run([Peer(name, n, table, args.threads)
       for name in ("tf_sdca", "SdcaOptimizerV2")], batches[:1], 1)
  peers = [Peer(name, n, table, args.threads)
           for name in ("SdcaOptimizerV2", "tf_sdca")]
  run(peers, batches, args.epochs)
  rows = args.rows * args.epochs
  results = {p.name: (rows / p.op_time, rows / p.total_time,
                      objective(labels, batches, (p.w_sparse, p.w_dense)))
             for p in peers}
  print(f"{'solver':18s}{'op rows/s':>14s}{'op+glue rows/s':>16s}"
        f"{'objective':>12s}")
  for name, (op_rate, total_rate, obj) in results.items():
    print(f"{name:18s}{op_rate:14,.0f}{total_rate:16,.0f}{obj:12.6f}")
  ours, theirs = results["tf_sdca"], results["SdcaOptimizerV2"]
  print(f"ratio tf_sdca / SdcaOptimizerV2: op {ours[0] / theirs[0]:.1f}x, "
        f"op+glue {ours[1] / theirs[1]:.1f}x")


if __name__ == "__main__":
  main()

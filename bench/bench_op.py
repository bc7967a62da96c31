"""Benchmark: tf_sdca's op against tf.raw_ops.SdcaOptimizerV2.

Both train logistic regression (l2 = 1, l1 = 0) on the same generated
Criteo-shaped rows (13 dense + 26 hashed categorical features, 2^20 buckets)
in batches, with exactly the same glue around the op call: one dense group
[B, 13] and one sparse group with the 26 ids of each row. The batch's
flattened ids, their distinct ids (np.unique), its dense block and labels are
prepared once as tensors (outside the timing, reused every epoch); each timed
step gathers the distinct ids' weights from a weight vector of 2^20 entries,
calls the op, scatter-adds the deltas back and stores the new state rows.
The two peers alternate batch by batch, so that both see the same machine
conditions (on shared machines the speed drifts by tens of percent within a
run). Prints examples/s of the op alone and of op + glue, their ratios, and
each model's final training log loss, objective and duality gap.

  python bench/bench_op.py [--rows 1000000] [--batch-size 100000]
                           [--epochs 2] [--threads 0] [--profile]

`--profile` adds where the time goes: the glue's parts, each op on the
batch's dense group alone and sparse group alone, and our kernel's phase
timings (its VLOG(1) output).
"""
import argparse
import os
import platform
import re
import sys
import tempfile
import time

# numpy's OpenBLAS threads spin after a BLAS call and steal a core from
# whichever op runs next; neither peer should pay for that.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # pylint: disable=g-import-not-at-top,wrong-import-position

# Imported in main(): the kernel's VLOG switch must be in the environment
# before TensorFlow loads.
tf = None
tf_sdca = None

OURS, THEIRS = "tf_sdca", "SdcaOptimizerV2"
L2 = 1.0


def prepare(rows, batch_size, bucket_bits):
  """Generated data split into op-ready batches.

  TensorFlow's op rejects an id repeated inside a row, so a rare in-row hash
  collision moves to a spare bucket (for both ops).

  Returns:
    labels `[rows]`, the list of batches, the weight table's size and the
    number of rows that had an in-row collision.
  """
  from tf_sdca import data as synthetic  # pylint: disable=g-import-not-at-top
  buckets = 1 << bucket_bits
  data = synthetic.generate_criteo_arrays(rows, num_buckets=buckets, seed=0)
  labels = data["labels"]
  ids, table_size, num_dup = suite.dedupe_row_ids(data["cat_ids"], buckets)
  # Log-counts scaled to [0, 1], as one would feed a linear model.
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
  return labels, batches, table_size, num_dup


def call_op(name, threads, t, sparse_weights, dense_weights, state,
            sparse=True, dense=True):
  """One call of solver `name` on batch tensors `t`; returns numpy outputs.

  `sparse` / `dense` False leave that feature group out (for profiling).
  """
  args = dict(
      sparse_example_indices=[t["ex"]] if sparse else [],
      sparse_feature_indices=[t["ids"]] if sparse else [],
      sparse_feature_values=[],
      dense_features=[t["dense"]] if dense else [],
      example_weights=t["ones"], example_labels=t["labels"],
      sparse_indices=[t["uniq"]] if sparse else [],
      sparse_weights=[sparse_weights] if sparse else [],
      dense_weights=[dense_weights] if dense else [],
      example_state_data=state)
  if name == OURS:
    out = tf_sdca.sdca_optimizer(**args, loss_type="logistic_loss", l1=0.0,
                                 l2=L2, num_threads=threads)
  else:
    out = tf.raw_ops.SdcaOptimizerV2(
        **args, loss_type="logistic_loss", l1=0.0, l2=L2,
        num_loss_partitions=1, num_inner_iterations=1, adaptive=False)
  return (out[0].numpy(), [d.numpy() for d in out[1]],
          [d.numpy() for d in out[2]])


class Peer:
  """One solver's weights, state and accumulated times (seconds)."""

  def __init__(self, name, n, table_size, threads):
    self.name = name
    self.threads = threads
    self.w_sparse = np.zeros(table_size, np.float64)
    self.w_dense = np.zeros(13, np.float64)
    self.state = np.zeros((n, 4), np.float32)
    self.times = dict(gather=0.0, op=0.0, scatter=0.0)

  def step(self, b):
    """One timed training step on batch `b`: glue + op."""
    t0 = time.perf_counter()
    rows = b["rows"]
    sparse_w = tf.constant(self.w_sparse[b["uniq"]].astype(np.float32))
    dense_w = tf.constant(self.w_dense.astype(np.float32))
    state = tf.constant(self.state[rows])
    t1 = time.perf_counter()
    new_state, (d_sparse,), (d_dense,) = call_op(
        self.name, self.threads, b["tensors"], sparse_w, dense_w, state)
    t2 = time.perf_counter()
    self.state[rows] = new_state
    self.w_sparse[b["uniq"]] += d_sparse
    self.w_dense += d_dense
    t3 = time.perf_counter()
    self.times["gather"] += t1 - t0
    self.times["op"] += t2 - t1
    self.times["scatter"] += t3 - t2

  @property
  def total_time(self):
    return sum(self.times.values())


def train(peers, batches, epochs):
  """Trains all peers, alternating them batch by batch so that they see the
  same machine conditions."""
  for _ in range(epochs):
    for b in batches:
      for peer in peers:
        peer.step(b)


def evaluate(peer, labels, batches, table_size):
  """Training log loss, primal objective P(w), dual objective D(alpha), /n.

  D is evaluated at w(alpha) = sum_i alpha_i x_i / l2 recomputed from the
  duals in the state, so P(w) - D(alpha) >= 0 bounds the suboptimality of
  either even if the accumulated weights drifted from w(alpha) (Hogwild).
  """
  n = len(labels)
  log_loss = 0.0
  neg_conj = 0.0
  v_sparse = np.zeros(table_size)
  v_dense = np.zeros(13)
  for b in batches:
    x_dense = b["dense"].astype(np.float64)
    z = (x_dense @ peer.w_dense +
         peer.w_sparse[b["ids"]].reshape(x_dense.shape[0], -1).sum(1))
    y = 2.0 * labels[b["rows"]] - 1.0
    log_loss += np.logaddexp(0.0, -y * z).sum()
    alpha = peer.state[b["rows"], 0].astype(np.float64)
    # TF's convention: b = alpha * y in [0, 1]; -phi*(-alpha) is the entropy.
    q = np.clip(alpha * y, 0.0, 1.0)
    with np.errstate(divide="ignore", invalid="ignore"):
      neg_conj -= np.nansum(q * np.log(q)) + np.nansum((1 - q) * np.log1p(-q))
    v_dense += x_dense.T @ alpha
    v_sparse += np.bincount(b["ids"], weights=np.repeat(alpha, 26),
                            minlength=table_size)
  w_norm = peer.w_sparse @ peer.w_sparse + peer.w_dense @ peer.w_dense
  primal = log_loss + 0.5 * L2 * w_norm
  dual = neg_conj - 0.5 * (v_sparse @ v_sparse + v_dense @ v_dense) / L2
  return dict(log_loss=log_loss / n, primal=primal / n, dual=dual / n,
              gap=(primal - dual) / n)


def profile_variants(peers, batches, threads, repeats):
  """Median op time per batch on the full batch, its dense group alone and
  its sparse group alone (zero weights and state), peers alternating.

  Returns:
    {(solver, variant): seconds per row}.
  """
  times = {}
  for b in batches:
    t = b["tensors"]
    n = b["dense"].shape[0]
    sparse_w = tf.zeros([b["uniq"].shape[0]])
    dense_w = tf.zeros([13])
    state = tf.zeros([n, 4])
    for variant, sparse, dense in (("full", True, True),
                                   ("dense only", False, True),
                                   ("sparse only", True, False)):
      for _ in range(repeats):
        for peer in peers:
          t0 = time.perf_counter()
          call_op(peer.name, threads, t, sparse_w, dense_w, state,
                  sparse=sparse, dense=dense)
          times.setdefault((peer.name, variant), []).append(
              (time.perf_counter() - t0) / n)
  return {k: float(np.median(v)) for k, v in times.items()}


class StderrCapture:
  """Captures file descriptor 2 (where the kernel's VLOG lines go)."""

  def __enter__(self):
    sys.stderr.flush()
    self._file = tempfile.TemporaryFile(mode="w+b")
    self._saved = os.dup(2)
    os.dup2(self._file.fileno(), 2)
    return self

  def __exit__(self, *exc):
    sys.stderr.flush()
    os.dup2(self._saved, 2)
    os.close(self._saved)
    self._file.seek(0)
    self.text = self._file.read().decode(errors="replace")
    self._file.close()


_PHASES = re.compile(
    r"TfSdca>Optimizer (\d+) examples, (\d+) sparse entries, (\d+) slots; "
    r"ms: examples ([\d.e+-]+), sparse ([\d.e+-]+), "
    r"dense\+norms ([\d.e+-]+), pack ([\d.e+-]+), solve ([\d.e+-]+), "
    r"outputs ([\d.e+-]+)")


def print_phases(text):
  """Mean of our kernel's VLOG phase timings over the training calls."""
  calls = [m.groups() for m in _PHASES.finditer(text)]
  if not calls:
    print("  (no VLOG phase lines captured)")
    return
  v = np.array(calls, dtype=np.float64)
  print(f"  {len(calls)} calls, {v[:, 0].mean():,.0f} examples, "
        f"{v[:, 2].mean():,.0f} slots per call; mean ms per call:")
  names = ("reading examples", "sparse ids -> slots", "dense + norms",
           "packing the rows", "solve", "outputs")
  total = v[:, 3:].sum(axis=1).mean()
  for k, name in enumerate(names):
    ms = v[:, 3 + k].mean()
    print(f"    {name:22s}{ms:8.1f} ms  {100 * ms / total:5.1f}%")
  print(f"    {'total (in kernel)':22s}{total:8.1f} ms")


def main():
  global tf, tf_sdca  # pylint: disable=global-statement
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--batch-size", type=int, default=100_000)
  parser.add_argument("--epochs", type=int, default=2)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--threads", type=int, default=0,
                      help="TensorFlow intra-op threads, and num_threads of "
                      "our op (0 = TensorFlow's default): the threads that "
                      "read each batch; our solve is one thread")
  parser.add_argument("--profile", action="store_true",
                      help="also show where the time goes")
  parser.add_argument("--profile-batches", type=int, default=2)
  parser.add_argument("--profile-repeats", type=int, default=3)
  args = parser.parse_args()

  if args.profile:
    os.environ["TF_CPP_MIN_LOG_LEVEL"] = "0"
    os.environ["TF_CPP_VMODULE"] = "sdca_kernels=1"
  else:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  import tensorflow  # pylint: disable=g-import-not-at-top
  import tf_sdca as ours  # pylint: disable=g-import-not-at-top
  tf, tf_sdca = tensorflow, ours
  if args.threads:
    # Must happen before TensorFlow runs its first op.
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)

  t0 = time.perf_counter()
  labels, batches, table, dups = prepare(args.rows, args.batch_size,
                                         args.bucket_bits)
  prep_s = time.perf_counter() - t0
  n = labels.shape[0]
  intra = tf.config.threading.get_intra_op_parallelism_threads()
  print(f"TensorFlow {tf.__version__}, numpy {np.__version__}, Python "
        f"{platform.python_version()}; {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}); TF intra-op threads "
        f"{intra or f'default ({os.cpu_count()})'}; tf_sdca num_threads "
        f"{args.threads} (reading the batch; the solve is one thread)")
  print(f"{n:,} rows x (13 dense + 26 categorical), 2^{args.bucket_bits} "
        f"buckets, click rate {labels.mean():.3f}; batches of "
        f"{args.batch_size:,} ({len(batches)} per epoch, "
        f"{np.mean([len(b['uniq']) for b in batches]):,.0f} distinct ids per "
        f"batch), {args.epochs} epoch(s); logistic loss, l2 = {L2}, l1 = 0; "
        f"{dups} rows had an in-row hash collision (moved to spare buckets); "
        f"data prepared in {prep_s:.1f} s (not timed)")

  # Warm up both (op loading, first-call overheads) on one batch.
  train([Peer(name, n, table, args.threads) for name in (OURS, THEIRS)],
        batches[:1], 1)
  peers = [Peer(name, n, table, args.threads) for name in (THEIRS, OURS)]
  capture = StderrCapture() if args.profile else None
  if capture:
    capture.__enter__()
  try:
    train(peers, batches, args.epochs)
  finally:
    if capture:
      capture.__exit__(None, None, None)

  rows = n * args.epochs
  stats = {p.name: evaluate(p, labels, batches, table) for p in peers}
  by_name = {p.name: p for p in peers}
  print()
  print(f"{'solver':17s}{'op rows/s':>12s}{'op+glue rows/s':>16s}"
        f"{'log loss':>10s}{'objective':>11s}{'gap':>10s}")
  for name in (THEIRS, OURS):
    p, s = by_name[name], stats[name]
    print(f"{name:17s}{rows / p.times['op']:12,.0f}"
          f"{rows / p.total_time:16,.0f}{s['log_loss']:10.5f}"
          f"{s['primal']:11.5f}{s['gap']:10.2e}")
  ours_p, theirs_p = by_name[OURS], by_name[THEIRS]
  print(f"{'ratio ours/TF':17s}"
        f"{theirs_p.times['op'] / ours_p.times['op']:11.1f}x"
        f"{theirs_p.total_time / ours_p.total_time:15.1f}x")
  print("(log loss: mean training log loss; objective: P(w)/n; gap: "
        "(P(w) - D(alpha))/n, the duality gap per row)")
  print(f"log loss ours - TF: "
        f"{stats[OURS]['log_loss'] - stats[THEIRS]['log_loss']:+.2e} "
        f"(objective {stats[OURS]['primal'] - stats[THEIRS]['primal']:+.2e}); "
        f"log loss of the all-zero model: {np.log(2):.5f}")

  if not args.profile:
    return
  steps = len(batches) * args.epochs
  print("\nWhere a training step's time goes (mean ms per batch):")
  print(f"{'solver':17s}{'gather+tensors':>15s}{'op':>9s}"
        f"{'scatter+state':>15s}")
  for name in (THEIRS, OURS):
    t = by_name[name].times
    print(f"{name:17s}{1e3 * t['gather'] / steps:15.1f}"
          f"{1e3 * t['op'] / steps:9.1f}{1e3 * t['scatter'] / steps:15.1f}")
  print("\nOur kernel's phases during training (VLOG):")
  print_phases(capture.text)
  print(f"\nOne op call on a feature group alone (zero weights and state; "
        f"median of {args.profile_repeats} x {args.profile_batches} batches; "
        "ms per 100k rows):")
  with StderrCapture():  # the kernel's VLOG lines
    variants = profile_variants(peers, batches[:args.profile_batches],
                                args.threads, args.profile_repeats)
  print(f"{'variant':14s}{THEIRS:>17s}{OURS:>10s}{'ratio':>8s}")
  for variant in ("full", "dense only", "sparse only"):
    a, b = variants[(THEIRS, variant)], variants[(OURS, variant)]
    print(f"{variant:14s}{1e8 * a:17.1f}{1e8 * b:10.1f}{a / b:7.1f}x")


if __name__ == "__main__":
  main()

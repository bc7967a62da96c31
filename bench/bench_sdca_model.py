"""Benchmark: streaming batches through `tf_sdca.SdcaModel` against
`tf.raw_ops.SdcaOptimizerV2`.

First the loops users write (`run_shapes`): one call per batch, eagerly or
inside a `tf.function`, the batch built from numpy arrays or tensors, with
string or int64 example ids; ours is `SdcaModel` at its defaults
(`carry_over='auto'`), theirs `SdcaOptimizerV2` with the glue the op needs
(distinct ids, weight gather and scatter, state rows by position), the
batch handed to both the same way; `--carry-over-cost` adds ours with
`carry_over=0`, TensorFlow's semantics, to show what held rows cost per
call. Each shape also prints a second figure: the seconds each side's
calls took until its weights first reached `SdcaOptimizerV2`'s final
P(w)/n (after its last epoch), both checked on one grid of calls
(`--objective-every`), and their ratio; `--profile-shapes N` runs
TensorFlow's profiler over ours' next N calls in each shape (the time of
each op type's kernels, and what is left outside them). Then the peers
below, on batches built once as tensors.

The same generated Criteo-shaped rows (13 dense + 26 hashed categorical
features, 2^20 buckets, logistic loss, l2 = 1) are cut into consecutive
batches, built once as tensors (what a `tf.data` pipeline hands over) and
streamed, epoch after epoch, through three peers that alternate batch by
batch (so that all see the same machine conditions):

  - `SdcaOptimizerV2`: TensorFlow's op with the cheapest glue a numpy loop
    gives it: the batch's distinct ids are computed once, outside the
    timing; each step gathers their weights from a float64 numpy vector,
    reads the batch's state rows by row number (no hashing), calls the op
    and scatter-adds the deltas back;
  - `SdcaModel eager`: `model.update_weights(model.minimize(examples=b))`;
  - `SdcaModel tf.function`: the same two calls inside a `tf.function`
    called once per batch;
  - with `--dense-hash-table`, the same step with the per-example state in
    TensorFlow's DenseHashTable (what `SdcaModel` used before
    `TfSdca>ExampleStateTable`).

Prints rows/s of each, the ratios to `SdcaOptimizerV2` (same run), each
model's training objective, each epoch's ms per batch and ratios (the
first epoch inserts every example into the dual table, the later ones find
them), mean times per phase (`SdcaOptimizerV2`: glue and op; `SdcaModel`
eager: `minimize` and `update_weights`), and then, for
both `SdcaModel` peers, TensorFlow's profiler over a few more batches: the
time of each op type's kernels and what is left outside them (Python,
dispatch).

  python bench/bench_sdca_model.py [--rows 1000000] [--batch-size 50000]
                                   [--epochs 3] [--profile-batches 5]
                                   [--dense-hash-table] [--carry-over-cost]
                                   [--shapes eager/numpy/string,...]
                                   [--objective-every 5] [--profile-shapes N]
                                   [--no-shapes | --no-peers]
"""
import argparse
import collections
import functools
import glob
import os
import platform
import shutil
import sys
import tempfile
import time

# numpy's OpenBLAS threads spin after a BLAS call and steal a core from
# whichever op runs next; no peer should pay for that.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import suite  # pylint: disable=g-import-not-at-top,wrong-import-position
import tf_sdca  # pylint: disable=g-import-not-at-top,wrong-import-position

L2 = 1.0
THEIRS, EAGER, GRAPH = ("SdcaOptimizerV2", "SdcaModel eager",
                        "SdcaModel tf.function")


def prepare(rows, batch_size, bucket_bits):
  """Generated rows cut into batches of tensors (built once).

  TensorFlow's op rejects an id repeated inside a row, so a rare in-row
  hash collision moves to a spare bucket (for every peer).
  """
  data = tf_sdca.data.generate_criteo_arrays(rows, num_buckets=1 << bucket_bits,
                                             seed=0)
  ids, table, _ = suite.dedupe_row_ids(data["cat_ids"], 1 << bucket_bits)
  dense = (data["dense"] / np.maximum(data["dense"].max(axis=0), 1e-6)
           ).astype(np.float32)
  labels = data["labels"].astype(np.float32)
  batches = []
  for start in range(0, rows, batch_size):
    stop = min(rows, start + batch_size)
    b_ids = ids[start:stop].ravel().astype(np.int64)
    ex = np.repeat(np.arange(stop - start, dtype=np.int64), ids.shape[1])
    examples = dict(
        sparse_features=[tf_sdca.SparseFeatureColumn(tf.constant(ex),
                                                     tf.constant(b_ids))],
        dense_features=[tf.constant(dense[start:stop])],
        example_weights=tf.ones([stop - start]),
        example_labels=tf.constant(labels[start:stop]),
        example_ids=tf.strings.as_string(tf.range(start, stop)))
    batches.append(dict(rows=slice(start, stop), ids=b_ids,
                        uniq=np.unique(b_ids),
                        uniq_tensor=tf.constant(np.unique(b_ids)),
                        examples=examples))
  return labels, dense, ids, table, batches


class TheirPeer:
  """SdcaOptimizerV2 with a numpy loop: weights and state in numpy."""
  name = THEIRS

  def __init__(self, n, table):
    self.w_sparse = np.zeros(table, np.float64)
    self.w_dense = np.zeros(13, np.float64)
    self.state = np.zeros((n, 4), np.float32)
    self.times = dict(glue=0.0, op=0.0)

  def step(self, b):
    t0 = time.perf_counter()
    ex = b["examples"]
    col = ex["sparse_features"][0]
    sparse_w = tf.constant(self.w_sparse[b["uniq"]].astype(np.float32))
    dense_w = tf.constant(self.w_dense.astype(np.float32))
    state = tf.constant(self.state[b["rows"]])
    t1 = time.perf_counter()
    out = tf.raw_ops.SdcaOptimizerV2(
        sparse_example_indices=[col.example_indices],
        sparse_feature_indices=[col.feature_indices],
        sparse_feature_values=[], dense_features=ex["dense_features"],
        example_weights=ex["example_weights"],
        example_labels=ex["example_labels"], sparse_indices=[b["uniq_tensor"]],
        sparse_weights=[sparse_w], dense_weights=[dense_w],
        example_state_data=state, loss_type="logistic_loss", l1=0.0, l2=L2,
        num_loss_partitions=1, num_inner_iterations=1, adaptive=False)
    new_state, d_sparse, d_dense = (out[0].numpy(), out[1][0].numpy(),
                                    out[2][0].numpy())
    t2 = time.perf_counter()
    self.state[b["rows"]] = new_state
    self.w_sparse[b["uniq"]] += d_sparse
    self.w_dense += d_dense
    self.times["glue"] += time.perf_counter() - t2 + t1 - t0
    self.times["op"] += t2 - t1

  def weights(self):
    return self.w_sparse, self.w_dense


class DenseHashTableState(tf.lookup.experimental.DenseHashTable):
  """The example-state table SdcaModel used up to 2026-11-25, TensorFlow's
  DenseHashTable, behind the interface of today's TfSdca>ExampleStateTable
  (a lookup and an insert per step; no slots carried between them)."""

  def __init__(self, name, width=4):
    super().__init__(tf.int64, tf.float32, tf.zeros([width], tf.float32),
                     empty_key=-2**63, deleted_key=-2**63 + 1, name=name)

  def find(self, keys):
    return self.lookup(keys), None

  def insert(self, keys, values, slots=None):  # pylint: disable=arguments-differ
    del slots
    return super().insert(keys, values)


def _model(table, state_table=None, carry_over=0.0):
  sparse = tf.Variable(tf.zeros([table]))
  dense = tf.Variable(tf.zeros([13]))
  ours = tf_sdca.sdca_model._ExampleStateTable  # pylint: disable=protected-access
  tf_sdca.sdca_model._ExampleStateTable = state_table or ours  # pylint: disable=protected-access
  try:
    model = tf_sdca.SdcaModel(
        None, dict(sparse_features_weights=[sparse],
                   dense_features_weights=[dense]),
        dict(loss_type="logistic_loss", symmetric_l2_regularization=L2,
             carry_over=carry_over))
  finally:
    tf_sdca.sdca_model._ExampleStateTable = ours  # pylint: disable=protected-access
  return model, sparse, dense


class EagerPeer:
  """SdcaModel.minimize + update_weights, eagerly."""
  name = EAGER

  def __init__(self, table):
    self.model, self.sparse, self.dense = _model(table)
    self.times = dict(minimize=0.0, update_weights=0.0)

  def step(self, b):
    t0 = time.perf_counter()
    train_op = self.model.minimize(examples=b["examples"])
    t1 = time.perf_counter()
    self.model.update_weights(train_op)
    self.times["minimize"] += t1 - t0
    self.times["update_weights"] += time.perf_counter() - t1

  def weights(self):
    return self.sparse.numpy(), self.dense.numpy()


class GraphPeer:
  """SdcaModel.minimize + update_weights in a tf.function, one call per
  batch."""
  name = GRAPH

  def __init__(self, table, state_table=None, carry_over=0.0):
    self.model, self.sparse, self.dense = _model(table, state_table,
                                                 carry_over)
    if state_table is not None:
      self.name = f"{GRAPH}, {state_table.__name__}"
    if carry_over:
      self.name = f"{GRAPH}, carry_over={carry_over}"
    model = self.model

    @tf.function(reduce_retracing=True)
    def step(examples):
      model.update_weights(model.minimize(examples=examples))

    self._step = step
    self.times = dict(call=0.0)

  def step(self, b):
    t0 = time.perf_counter()
    self._step(b["examples"])
    self.times["call"] += time.perf_counter() - t0

  def weights(self):
    return self.sparse.numpy(), self.dense.numpy()


def objective(peer, labels, dense, ids):
  """The training objective P(w)/n at the peer's weights (float64)."""
  return objective_at(peer.weights(), labels, dense, ids)


def objective_at(weights, labels, dense, ids):
  """P(w)/n at weights (sparse, dense), float64."""
  w_sparse, w_dense = (np.asarray(w, np.float64) for w in weights)
  z = dense.astype(np.float64) @ w_dense + w_sparse[ids].sum(axis=1)
  y = 2.0 * labels - 1.0
  return float((np.logaddexp(0.0, -y * z).sum() +
                0.5 * L2 * (w_sparse @ w_sparse + w_dense @ w_dense)) /
               len(labels))


def profile_ops(peer, batches, logdir):
  """Runs `peer` on `batches` under TensorFlow's profiler; returns (wall
  seconds, {op type: seconds}) summed over the steps: the kernels of eager
  ops ("EagerLocalExecute: <type>") and of the ops a tf.function runs on
  TensorFlow's threads ("<name>:<type>"; they may overlap each other)."""
  from tensorflow.tsl.profiler.protobuf import xplane_pb2  # pylint: disable=g-import-not-at-top
  shutil.rmtree(logdir, ignore_errors=True)
  tf.profiler.experimental.start(logdir)
  t0 = time.perf_counter()
  for b in batches:
    peer.step(b)
  wall = time.perf_counter() - t0
  tf.profiler.experimental.stop()
  ops = collections.Counter()
  for path in glob.glob(os.path.join(logdir, "**", "*.xplane.pb"),
                        recursive=True):
    space = xplane_pb2.XSpace()
    with open(path, "rb") as f:
      space.ParseFromString(f.read())
    for plane in space.planes:
      names = {k: v.name for k, v in plane.event_metadata.items()}
      for line in plane.lines:
        for event in line.events:
          name = names[event.metadata_id]
          if name.startswith("EagerLocalExecute: "):
            op = name[len("EagerLocalExecute: "):]
            if op.startswith("__inference"):
              continue  # a tf.function: its ops are counted one by one
          elif (line.name.startswith("tf_Compute") and ":" in name and
                "::" not in name):
            op = name.rsplit(":", 1)[1]
          else:
            continue
          ops[op] += event.duration_ps * 1e-12
  return wall, ops


def print_profile(name, wall, ops, steps, top=12):
  total = sum(ops.values())
  print(f"  {name}: {1e3 * wall / steps:.1f} ms per batch; its ops' kernels "
        f"{1e3 * total / steps:.1f} ms")
  rest = total
  for op, seconds in ops.most_common(top):
    print(f"    {op:36s}{1e3 * seconds / steps:7.2f} ms")
    rest -= seconds
  print(f"    {'other ops':36s}{1e3 * rest / steps:7.2f} ms")
  print(f"    {'outside the kernels (Python, dispatch)':36s}"
        f"{1e3 * (wall - total) / steps:7.2f} ms")


# ------------------------------------------------------------ loop shapes
# The loops users write: one call per batch built from what their pipeline
# hands over (numpy arrays or tensors), with string or int64 example ids,
# eagerly or inside a tf.function. Both sides get the batch the same way
# and do what each API needs on top: ours builds the `examples` dict and
# calls minimize + update_weights; TensorFlow's op needs the batch's
# distinct feature ids (np.unique / tf.unique, in the timing: a user must
# compute them), their weights gathered and the deltas scattered back
# (numpy arrays eagerly, variables in a tf.function), and the state rows
# of the batch's examples, which its loop reads by row position (no
# hashing: the cheapest the op allows, and it ignores the ids).
SHAPES = [(loop, inputs, ids) for loop in ("eager", "tf.function")
          for inputs in ("numpy", "tensor") for ids in ("string", "int64")]


def shape_batches(labels, dense, ids, batch_size, inputs, id_kind):
  """The batches as a user's loop gets them: dicts of numpy arrays or of
  tensors, example ids as bytes or int64 (built once, not timed)."""
  out = []
  rows = len(labels)
  for start in range(0, rows, batch_size):
    stop = min(rows, start + batch_size)
    b = dict(
        start=start, stop=stop,
        example_indices=np.repeat(np.arange(stop - start, dtype=np.int64),
                                  ids.shape[1]),
        feature_ids=ids[start:stop].ravel().astype(np.int64),
        dense=dense[start:stop], weights=np.ones(stop - start, np.float32),
        labels=labels[start:stop],
        example_ids=(np.arange(start, stop, dtype=np.int64)
                     if id_kind == "int64" else
                     np.array([b"%d" % i for i in range(start, stop)])))
    if inputs == "tensor":
      b = {k: (tf.constant(v) if isinstance(v, np.ndarray) else v)
           for k, v in b.items()}
    out.append(b)
  return out


class OursLoop:
  """`SdcaModel.minimize` + `update_weights` on each batch dict."""

  def __init__(self, table, loop, carry_over=None):
    options = ({} if carry_over is None else {"carry_over": carry_over})
    sparse, dense = tf.Variable(tf.zeros([table])), tf.Variable(
        tf.zeros([13]))
    self.model = tf_sdca.SdcaModel(
        None, dict(sparse_features_weights=[sparse],
                   dense_features_weights=[dense]),
        dict(loss_type="logistic_loss", symmetric_l2_regularization=L2,
             **options))
    self.variables = sparse, dense
    model = self.model

    def step(example_indices, feature_ids, dense_x, weights, labels,
             example_ids):
      examples = dict(
          sparse_features=[tf_sdca.SparseFeatureColumn(example_indices,
                                                       feature_ids)],
          dense_features=[dense_x], example_weights=weights,
          example_labels=labels, example_ids=example_ids)
      model.update_weights(model.minimize(examples=examples))

    # (A partial: TensorFlow counts a closure's traces by its code, across
    # the loops of every shape, and warned of retracing from the fifth.)
    self._step = (tf.function(functools.partial(step), reduce_retracing=True)
                  if loop == "tf.function" else step)

  def step(self, b):
    self._step(b["example_indices"], b["feature_ids"], b["dense"],
               b["weights"], b["labels"], b["example_ids"])

  def weights(self):
    return tuple(v.numpy() for v in self.variables)


class TheirsLoop:
  """`tf.raw_ops.SdcaOptimizerV2` on each batch dict: numpy glue eagerly,
  variables and TensorFlow ops inside a tf.function."""

  def __init__(self, n, table, loop):
    self.loop = loop
    if loop == "eager":
      self.w_sparse = np.zeros(table, np.float64)
      self.w_dense = np.zeros(13, np.float64)
      self.state = np.zeros((n, 4), np.float32)
      return
    self.w_sparse = tf.Variable(tf.zeros([table]))
    self.w_dense = tf.Variable(tf.zeros([13]))
    self.state = tf.Variable(tf.zeros([n, 4]))

    def step(start, stop, example_indices, feature_ids, dense_x, weights,
             labels):
      uniq = tf.unique(tf.cast(feature_ids, tf.int64))[0]
      rows = tf.range(tf.cast(start, tf.int64), tf.cast(stop, tf.int64))
      out = tf.raw_ops.SdcaOptimizerV2(
          sparse_example_indices=[tf.cast(example_indices, tf.int64)],
          sparse_feature_indices=[tf.cast(feature_ids, tf.int64)],
          sparse_feature_values=[], dense_features=[dense_x],
          example_weights=weights, example_labels=labels,
          sparse_indices=[uniq],
          sparse_weights=[tf.gather(self.w_sparse, uniq)],
          dense_weights=[self.w_dense.read_value()],
          example_state_data=tf.gather(self.state, rows),
          loss_type="logistic_loss", l1=0.0, l2=L2, num_loss_partitions=1,
          num_inner_iterations=1, adaptive=False)
      self.state.scatter_update(tf.IndexedSlices(out[0], rows))
      self.w_sparse.scatter_add(tf.IndexedSlices(out[1][0], uniq))
      self.w_dense.assign_add(out[2][0])

    # (A partial, as OursLoop's.)
    self._step = tf.function(functools.partial(step), reduce_retracing=True)

  def step(self, b):
    if self.loop == "tf.function":
      # (Tensors: a Python int argument would trace a function per value.)
      self._step(tf.constant(b["start"], tf.int64),
                 tf.constant(b["stop"], tf.int64), b["example_indices"],
                 b["feature_ids"], b["dense"], b["weights"], b["labels"])
      return
    feature_ids = np.asarray(b["feature_ids"])
    uniq = np.unique(feature_ids)
    out = tf.raw_ops.SdcaOptimizerV2(
        sparse_example_indices=[b["example_indices"]],
        sparse_feature_indices=[b["feature_ids"]],
        sparse_feature_values=[], dense_features=[b["dense"]],
        example_weights=b["weights"], example_labels=b["labels"],
        sparse_indices=[uniq],
        sparse_weights=[self.w_sparse[uniq].astype(np.float32)],
        dense_weights=[self.w_dense.astype(np.float32)],
        example_state_data=self.state[b["start"]:b["stop"]],
        loss_type="logistic_loss", l1=0.0, l2=L2, num_loss_partitions=1,
        num_inner_iterations=1, adaptive=False)
    self.state[b["start"]:b["stop"]] = out[0].numpy()
    self.w_sparse[uniq] += out[1][0].numpy()
    self.w_dense += out[2][0].numpy()

  def weights(self):
    if self.loop == "eager":
      return self.w_sparse, self.w_dense
    return self.w_sparse.numpy(), self.w_dense.numpy()


def time_to(snapshots, target, labels, dense, ids):
  """The time of the first (seconds, weights) snapshot whose P(w)/n is at
  most `target` (None if none is)."""
  for seconds, weights in snapshots:
    if objective_at(weights, labels, dense, ids) <= target:
      return seconds
  return None


def run_shapes(labels, dense, ids, table, args):
  """Every loop shape: ours at its defaults and theirs, alternating batch
  by batch in one process; with --carry-over-cost also ours with
  carry_over=0 (TensorFlow's semantics), to show what held rows cost."""
  n = len(labels)
  print(f"\nLoop shapes ({args.epochs} epochs of {-(-n // args.batch_size)} "
        f"batches; ms per call, all epochs; vs TF: its time / ours, same "
        f"run):")
  print(f"{'loop':12s}{'inputs':8s}{'ids':8s}{'ours':>9s}{'theirs':>9s}"
        f"{'vs TF':>8s}{'ours, carry_over=0':>20s}{'held rows cost':>16s}"
        f"{'P(w)/n ours':>13s}{'theirs':>10s}"
        f"{'to TF P: ours s':>17s}{'theirs s':>10s}{'vs TF':>8s}")
  results = []
  for loop, inputs, id_kind in SHAPES:
    if args.shapes and f"{loop}/{inputs}/{id_kind}" not in args.shapes:
      continue
    batches = shape_batches(labels, dense, ids, args.batch_size, inputs,
                            id_kind)

    def make():
      made = [OursLoop(table, loop), TheirsLoop(n, table, loop)]
      if args.carry_over_cost:
        made.append(OursLoop(table, loop, carry_over=0))
      return made

    # Warm-up on throwaway peers: the process's first calls of each op
    # (kernel and library loading, shared by every loop). The timed peers
    # are new objects: each pays its own tracing and first calls inside its
    # time, as a user's loop does (ours' first call traces the model's
    # step: ~170 ms against SdcaOptimizerV2's ~25, bench_audit 2026-11-29).
    for peer in make():
      peer.step(batches[0])
      peer.step(batches[-1])
    peers = make()
    times = [0.0] * len(peers)
    # For the time to TF's final objective: both sides' weights every
    # --objective-every calls (the same grid for both) and after the last,
    # with the time their calls took up to then (copied outside the timing;
    # the objectives are computed after the loop).
    at = ([], [])
    calls = 0
    for _ in range(args.epochs):
      for b in batches:
        for i, peer in enumerate(peers):
          t0 = time.perf_counter()
          peer.step(b)
          times[i] += time.perf_counter() - t0
        calls += 1
        if (calls % args.objective_every == 0 or
            calls == args.epochs * len(batches)):
          for i in range(2):
            at[i].append((times[i], [np.array(w, copy=True)
                                     for w in peers[i].weights()]))
    steps = args.epochs * len(batches)
    ms = [1e3 * t / steps for t in times]
    plain = (f"{ms[2]:17.1f}{ms[0] / ms[2]:15.2f}x"
             if args.carry_over_cost else f"{'-':>17s}{'-':>16s}")
    target = objective(peers[1], labels, dense, ids)
    reach = [time_to(side, target, labels, dense, ids) for side in at]
    to_tf = (f"{reach[0]:17.2f}{reach[1]:10.2f}{reach[1] / reach[0]:7.1f}x"
             if None not in reach else f"{'not reached':>17s}{'':18s}")
    print(f"{loop:12s}{inputs:8s}{id_kind:8s}{ms[0]:9.1f}{ms[1]:9.1f}"
          f"{ms[1] / ms[0]:7.2f}x   {plain}"
          f"{objective(peers[0], labels, dense, ids):13.6f}"
          f"{target:10.6f}{to_tf}", flush=True)
    del at
    results.append((loop, inputs, id_kind, ms))
    if args.profile_shapes:
      with tempfile.TemporaryDirectory() as logdir:
        wall, ops = profile_ops(peers[0], batches[:args.profile_shapes],
                                logdir)
      print_profile(f"ours, {loop}/{inputs}/{id_kind}", wall, ops,
                    min(args.profile_shapes, len(batches)))
  print("(ours: SdcaModel at its defaults, carry_over='auto' holding rows "
        "once the table holds 2 batches; held rows cost: ours / ours with "
        "carry_over=0; to TF P: the seconds each side's calls took until "
        "its weights first reached SdcaOptimizerV2's final P(w)/n, both "
        f"checked every {args.objective_every} calls and after the last)")
  return results


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--batch-size", type=int, default=50_000)
  parser.add_argument("--epochs", type=int, default=3)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--profile-batches", type=int, default=5,
                      help="batches profiled per SdcaModel peer, after the "
                      "timed epochs")
  parser.add_argument("--dense-hash-table", action="store_true",
                      help="one more peer: the tf.function step with the "
                      "example state in TensorFlow's DenseHashTable, as "
                      "before TfSdca>ExampleStateTable")
  parser.add_argument("--carry-over", type=float, default=0.0,
                      help="one more peer: the tf.function step holding "
                      "back this share of each call's rows for the next "
                      "(SdcaModel's carry_over; its cost per step)")
  parser.add_argument("--shapes", default=None,
                      help="comma-separated loop shapes loop/inputs/ids "
                      "(e.g. eager/numpy/string); default: all eight")
  parser.add_argument("--carry-over-cost", action="store_true",
                      help="loop shapes: also ours with carry_over=0, to "
                      "measure what the default's held rows cost per call")
  parser.add_argument("--profile-shapes", type=int, default=0,
                      help="loop shapes: TensorFlow's profiler over ours' "
                      "next N calls after the timed epochs, per shape")
  parser.add_argument("--objective-every", type=int, default=5,
                      help="loop shapes: the grid, in calls, on which both "
                      "sides' P(w)/n is checked for the time to "
                      "SdcaOptimizerV2's final objective")
  parser.add_argument("--no-shapes", action="store_true",
                      help="skip the loop shapes (only the peers below)")
  parser.add_argument("--no-peers", action="store_true",
                      help="only the loop shapes")
  args = parser.parse_args()
  args.shapes = set(args.shapes.split(",")) if args.shapes else None

  t0 = time.perf_counter()
  labels, dense, ids, table, batches = prepare(args.rows, args.batch_size,
                                               args.bucket_bits)
  n = labels.shape[0]
  print(f"TensorFlow {tf.__version__}, numpy {np.__version__}, Python "
        f"{platform.python_version()}; {os.cpu_count()} cores; load average "
        f"{os.getloadavg()[0]:.1f}")
  print(f"{n:,} rows x (13 dense + 26 categorical), 2^{args.bucket_bits} "
        f"buckets; batches of {args.batch_size:,} ({len(batches)} per epoch, "
        f"{np.mean([len(b['uniq']) for b in batches]):,.0f} distinct ids per "
        f"batch), {args.epochs} epoch(s); logistic, l2 = {L2}; data prepared "
        f"in {time.perf_counter() - t0:.1f} s (not timed)")

  if not args.no_shapes:
    run_shapes(labels, dense, ids, table, args)
  if args.no_peers:
    return

  # Warm-up on throwaway peers, one batch each: the process's first calls
  # of each op. Each timed peer pays its own tracing and first calls in its
  # time, as in run_shapes (the tf.function peers were traced before the
  # timing up to 2026-11-29: their figures left out ~0.2 s a run).
  def make_peers():
    made = [TheirPeer(n, table), EagerPeer(table), GraphPeer(table)]
    if args.dense_hash_table:
      made.append(GraphPeer(table, DenseHashTableState))
    if args.carry_over:
      made.append(GraphPeer(table, carry_over=args.carry_over))
    return made

  for peer in make_peers():
    peer.step(batches[0])
  peers = make_peers()
  per_epoch = []  # [epoch][peer]: mean seconds per batch
  for _ in range(args.epochs):
    before = [sum(peer.times.values()) for peer in peers]
    for b in batches:
      for peer in peers:
        peer.step(b)
    per_epoch.append([(sum(peer.times.values()) - t) / len(batches)
                      for peer, t in zip(peers, before)])

  rows = n * args.epochs
  steps = len(batches) * args.epochs
  theirs = sum(peers[0].times.values())
  print(f"\n{'peer':44s}{'rows/s':>12s}{'ms/batch':>10s}{'vs TF':>8s}"
        f"{'P(w)/n':>11s}")
  for peer in peers:
    total = sum(peer.times.values())
    print(f"{peer.name:44s}{rows / total:12,.0f}{1e3 * total / steps:10.1f}"
          f"{theirs / total:7.1f}x{objective(peer, labels, dense, ids):11.6f}")
  print("(vs TF: SdcaOptimizerV2's time / the peer's, same run; P(w)/n: the "
        "training objective at the peer's weights)")
  # The first epoch inserts every example into the dual table (growing
  # it); later ones find them: steady state is the later epochs.
  print("\nPer epoch, ms per batch (vs TF):")
  for e, row in enumerate(per_epoch):
    print(f"  epoch {e + 1}: " + ", ".join(
        f"{peer.name} {1e3 * t:.1f} ({row[0] / t:.1f}x)"
        for peer, t in zip(peers, row)))
  print("\nMean ms per batch:")
  for peer in peers:
    parts = ", ".join(f"{k} {1e3 * v / steps:.1f}"
                      for k, v in peer.times.items())
    print(f"  {peer.name:44s}{parts}")
  some = batches[:args.profile_batches]
  if not some:
    return
  print(f"\nWhere an SdcaModel step's time goes: TensorFlow's profiler over "
        f"{len(some)} more batches per peer, mean ms per batch:")
  with tempfile.TemporaryDirectory() as logdir:
    for peer in peers[1:]:
      wall, ops = profile_ops(peer, some, logdir)
      print_profile(peer.name, wall, ops, len(some))


if __name__ == "__main__":
  main()

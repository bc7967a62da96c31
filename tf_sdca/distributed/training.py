"""Synchronous CoCoA+ rounds across the workers of a `TF_CONFIG` cluster.

Run `train` in every worker process, each with its own rows (a fixed
shard). A round: every worker solves its shard's local subproblem against
the round's weights with sigma = K (`Shard.solve`, H passes of the packed
rows), the changes are summed across the workers (one all-reduce or one
all-gather), and the exact duality gap is summed from the workers' parts
(one all-reduce of two numbers); every worker sees the same bits, so all
stop at the same round. Duals never leave their worker; they are
checkpointed by it.

Weights layout: the sorted sparse ids that some worker's rows touch (found
once at start by an all-gather of every shard's ids), then the dense
columns. Exchange, chosen once at start by the bytes it sends:

  - "allreduce": ring all-reduce of that table, 2 (K-1)/K (|U| + d) 8 bytes
    a worker a round (the whole hash table when every bucket is touched);
  - "allgather": ring all-gather of each worker's own touched rows,
    (K-1) max_k (|T_k| + d) 8 bytes (the ids were sent once at start):
    smaller when shards touch few rows of a large table.

Model directory (`model_dir/cocoa/`): `state.json` (the last complete
round, the history, the options), `weights-RRRRRR.npz` (the chief) and
`worker-KKKK-RRRRRR.npz` (each worker's duals). Every file is written to a
temporary name and renamed; the chief moves `state.json` to round r only
after every worker has written round r (a barrier), and files of rounds
older than the previous checkpoint are deleted after that, so a kill at
any moment leaves `state.json` pointing at a complete round.
"""
import glob
import json
import os
import time

import numpy as np

from tf_sdca import files
from tf_sdca import losses
from tf_sdca.distributed import shard as shard_lib
from tf_sdca.engine import objective_and_gap

EXCHANGES = ("auto", "allreduce", "allgather")
EXCHANGES_PER_PASS = shard_lib.EXCHANGES_PER_PASS
_STATE = "state.json"


class Result:
  """What `train` returns on every worker.

  Attributes:
    sparse_weights: float64 `[num_features]` (`[num_features, C]` for C
      classes), unshrunk (`InMemorySdca`'s layout; zero where no row has
      the id).
    dense_weights: float64 `[d]` (`[d, C]`), unshrunk.
    duals: float64, this worker's rows' duals (`[n, C]` for C classes).
    history: list of per-round dicts: `round`, `loss` (primal / total
      weight), `duality_gap` (relative), `seconds`, `solve_seconds`,
      `exchange_seconds`, `bytes_sent` (this worker, this round).
    exchange: "allreduce" or "allgather".
    table_size: entries of the exchanged table (touched ids + dense).
    largest_shard: entries the largest shard touches.
    exchanges_per_round: H S with S = `exchanges_per_pass` > 1, else 1.
    bytes_per_round: what the exchanges send per worker per round, at
      most: with S > 1 an all-gather sends each part's changed entries as
      (position, value) pairs when that is shorter (`pack_change`; the
      history's `bytes_sent` has what was sent, including the all-reduce
      of the K lengths each time). The all-reduce of the gap's two sums
      and the K workers' extrapolation limits adds 2 (K-1)/K (2 + K) 8
      bytes a round.
    num_workers: K.
    total_rows: rows of all workers.
    index: this worker's rank.
  """

  def __init__(self, **fields):
    self.__dict__.update(fields)

  @property
  def rounds(self):
    return self.history[-1]["round"] if self.history else 0


def pack_change(delta):
  """A worker's change for the all-gather: its nonzero entries as
  (positions, values), `[m positions, m values]`, when that is shorter
  than the change itself (2 m < size: a part of a pass touches a fraction
  of the shard's ids), else the change as it is."""
  delta = np.asarray(delta, np.float64)
  changed = np.flatnonzero(delta)
  if 2 * changed.size < delta.size:
    return np.concatenate([changed.astype(np.float64), delta[changed]])
  return delta


def add_changes(weights, positions, pieces):
  """Adds the workers' gathered changes (`pack_change`'s pieces) to
  `weights` in place, in worker order: the same bits on every worker."""
  for place, piece in zip(positions, pieces):
    if piece.size == place.size:
      weights[place] += piece
    else:
      m = piece.size // 2
      weights[place[piece[:m].astype(np.int64)]] += piece[m:]
  return weights


def bytes_per_round(exchange, num_workers, table_size, largest_shard):
  """Bytes a worker sends per round for an exchange (ring algorithms; the
  all-gather pads every part to the largest)."""
  k = num_workers
  if exchange == "allreduce":
    return 2.0 * (k - 1) / k * table_size * 8
  return (k - 1) * largest_shard * 8.0


def train(labels, dense=None, ids=None, indptr=None, indices=None,
          values=None, example_weights=None, num_features=None,
          model_dir=None, loss="logistic", l1=0.0, l2=1.0, gamma=1.0,
          max_rounds=100, tol=1e-4, local_passes=1, seed=0, exchange="auto",
          checkpoint_every=1, resume=False, startup_timeout=120.0,
          verbose=1, cluster=None, momentum=True, num_classes=1,
          hinge_step="projection", exchanges_per_pass=EXCHANGES_PER_PASS,
          rows_error=None):
  """Trains one model with the other workers of the `TF_CONFIG` cluster.

  Every worker calls it with its own rows and the same options; the rows
  are this worker's fixed shard for the whole training. It must come
  before any TensorFlow op runs in the process (or pass a `cluster` made
  first): the strategy configures TensorFlow's runtime for collectives,
  which TensorFlow allows only before the runtime starts.

  Args:
    labels, dense, ids, indptr, indices, values, example_weights: this
      worker's rows, as `tf_sdca.trainer.InMemorySdca.fit` takes them.
    num_features: the sparse table's size (the same on every worker).
    model_dir: directory for checkpoints (shared by the workers, e.g. a
      network file system; None: no checkpoints).
    loss, l1, l2, gamma: the objective `sum_i s_i loss_i + l2/2 |w|^2 +
      l1 |w|_1` over all workers' rows.
    max_rounds: most rounds (each: `local_passes` passes over every shard).
    tol: stop when the relative duality gap of the whole problem is below
      (None: run `max_rounds`).
    local_passes: H, SDCA passes over the shard per round.
    seed: visiting orders depend on (seed, round, worker, pass) only.
    exchange: "auto" (the fewer bytes), "allreduce" or "allgather".
    checkpoint_every: write a checkpoint every this many rounds (and at the
      end).
    resume: continue from the checkpoint in `model_dir` (the same workers,
      rows and options); without one, start afresh.
    startup_timeout: seconds to wait for every worker to start.
    verbose: 1 prints one line per round on the chief.
    cluster: a `tf_sdca.distributed.cluster.Cluster` (default: one from
      `TF_CONFIG`); if already joined, its own start-up check stands.
    momentum: extrapolate the rounds (`shard.Momentum`: far fewer rounds
      with weak regularisation, g3doc/distributed.md); False: plain
      CoCoA+.
    num_classes: C for the multiclass losses (softmax, multiclass hinge;
      labels are class ids in [0, C)): every table row then holds C class
      weights, exchanged together; 1 for the others.
    hinge_step: the multiclass hinge's block step in the local solves
      ('projection', 'steepest_ascent', 'near_max_gain'; g3doc/multiclass.md);
      the workers must agree, and `resume` needs the same step.
    exchanges_per_pass: S; every local pass is cut into S parts of its
      visiting order (a fresh one each pass), and the workers' changes are
      added after each part: CoCoA+ with n_k / S local steps, S exchanges
      per pass (the gap, momentum and checkpoints stay once per round).
      With weak regularisation the rounds to a gap fall to about one
      process's epochs (g3doc/distributed.md); 1: one exchange per round.
    rows_error: the exception this worker's rows raised while a front end
      prepared them (the rows are then None): it joins the cluster and
      tells the others, which stop with a `ClusterError` naming it, and
      raises it (a worker that raised before calling `train` left the
      others waiting for it: until its heartbeats stopped, or for as long as
      its process lived).

  Returns:
    A `Result` (the same weights on every worker).

  Raises:
    tf_sdca.distributed.cluster.ClusterError: a worker lacks the op library,
      has other options or bad rows, or died during training (the
      checkpoint of the last complete round stays in `model_dir`).
    ValueError: on bad options.
  """
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  from tf_sdca.ops import load_ops  # pylint: disable=import-outside-toplevel
  loss = losses.op_name(loss)
  if exchange not in EXCHANGES:
    raise ValueError(f"exchange must be one of {EXCHANGES}, got {exchange!r}")
  if int(max_rounds) < 0 or int(checkpoint_every) < 1:
    raise ValueError(f"need max_rounds >= 0 and checkpoint_every >= 1, got "
                     f"{max_rounds}, {checkpoint_every}")
  # The op library first, so that a worker without it says so to everyone
  # (through `join`) instead of failing alone.
  op_error = None
  try:
    load_ops()
  except ImportError as error:
    op_error = str(error)
  if cluster is None:
    cluster = cluster_lib.Cluster(startup_timeout=startup_timeout)
  options = dict(loss=loss, l1=float(l1), l2=float(l2), gamma=float(gamma),
                 max_rounds=int(max_rounds), tol=tol,
                 local_passes=int(local_passes), seed=int(seed),
                 exchange=exchange, checkpoint_every=int(checkpoint_every),
                 num_features=None if num_features is None else int(
                     num_features), num_workers=cluster.size,
                 momentum=bool(momentum))
  classes = int(num_classes)
  if classes != 1:  # (absent for one class: older checkpoints resume)
    options["num_classes"] = classes
  if hinge_step != "projection":  # (absent by default, as num_classes)
    options["hinge_step"] = hinge_step
  parts = int(exchanges_per_pass)
  if parts < 1:
    raise ValueError(f"exchanges_per_pass must be >= 1, got "
                     f"{exchanges_per_pass}")
  if parts != 1:  # (absent for 1: checkpoints from before it resume)
    options["exchanges_per_pass"] = parts
  if not cluster.joined:
    try:
      cluster.join(op_error, options)
    except cluster_lib.ClusterError:
      if rows_error is not None:  # (its options may lack what rows give)
        raise rows_error from None
      raise

  log = (lambda text: print(text, flush=True)) if (
      verbose and cluster.is_chief) else (lambda text: None)
  shard, error = None, rows_error
  if error is None:
    try:
      shard = shard_lib.Shard(
          labels, dense=dense, ids=ids, indptr=indptr, indices=indices,
          values=values, example_weights=example_weights,
          num_features=num_features, loss=loss, l1=l1, l2=l2, gamma=gamma,
          num_shards=cluster.size, combine="add", num_passes=local_passes,
          seed=seed, index=cluster.index, num_classes=classes,
          hinge_step=hinge_step, num_parts=parts)
    except Exception as e:  # pylint: disable=broad-except
      error = e
  # Everyone learns whether every shard could be built, and the shapes.
  facts = np.zeros((4, cluster.size))
  facts[:, cluster.index] = ((1, 0, 0, 0) if shard is None else
                             (0, shard.num_dense, shard.n,
                              shard.total_weight))
  facts = cluster.all_reduce(facts.ravel()).reshape(4, cluster.size)
  if error is not None:
    raise error
  failed = np.flatnonzero(facts[0]).tolist()
  if failed:
    raise cluster_lib.ClusterError(
        f"workers {failed} could not pack their rows (see their logs)")
  if (facts[1] != facts[1, 0]).any():
    raise cluster_lib.ClusterError(
        f"the workers' rows have different numbers of dense columns: "
        f"{facts[1].astype(int).tolist()}")
  total_rows, total_weight = int(facts[2].sum()), float(facts[3].sum())

  # The table: every id some shard touches, then the dense columns.
  touched = cluster.all_gather(shard.touched.astype(np.float64))
  touched = [t.astype(np.int64) for t in touched]
  table_ids = np.unique(np.concatenate(touched)) if touched else np.zeros(
      0, np.int64)
  # Where each worker's local entries sit in the table (a row's C class
  # weights together).
  positions = [_class_entries(np.concatenate(
      [np.searchsorted(table_ids, t),
       table_ids.size + np.arange(shard.num_dense)]), classes)
               for t in touched]
  own = positions[cluster.index]
  lengths = [p.size for p in positions]  # each worker's change, gathered
  table_size = table_ids.size + shard.num_dense
  largest = max(p.size for p in positions) // classes
  if exchange == "auto":
    exchange = min(("allreduce", "allgather"), key=lambda e: bytes_per_round(
        e, cluster.size, table_size * classes, largest * classes))
  calls = shard.round_calls()  # an exchange after each
  exchanges = len(calls)
  layout = dict(exchange=exchange, table_size=int(table_size),
                largest_shard=int(largest), num_workers=cluster.size,
                total_rows=total_rows, exchanges_per_round=exchanges,
                bytes_per_round=exchanges * bytes_per_round(
                    exchange, cluster.size, table_size * classes,
                    largest * classes))
  log(f"{cluster.size} workers, {total_rows:,} rows; table {table_size:,} "
      f"rows ({table_ids.size:,} touched ids + {shard.num_dense} dense); "
      f"largest shard touches {largest:,}; exchange: {exchange} x "
      f"{exchanges} a round, {layout['bytes_per_round'] / 2**20:.2f} MB "
      f"per worker per round")

  weights = np.zeros(table_size * classes)
  history = []
  accelerate = shard_lib.Momentum() if momentum else None
  previous = None  # (duals, weights) of the last round, with momentum
  state_dir = None if model_dir is None else os.path.join(model_dir, "cocoa")
  if state_dir is not None:
    os.makedirs(state_dir, exist_ok=True)
    restored = None
    if resume:
      restored = _restore(state_dir, cluster, options, table_ids, shard,
                          accelerate)
    if restored is not None:
      weights, history, previous = restored
      if accelerate is None:
        previous = None
      log(f"resumed after round {history[-1]['round'] if history else 0}")
    else:
      if cluster.is_chief:
        _remove_checkpoints(state_dir)
      # Nobody writes before the chief is done: the first checkpoint
      # comes after collectives that wait for the chief.
  start_round = history[-1]["round"] if history else 0

  tol = -np.inf if tol is None else float(tol)  # None: all max_rounds
  stopped = bool(history) and history[-1]["duality_gap"] < tol
  # The last round's own point (a resumed run starts from its
  # extrapolation, which is no round's result).
  current = previous if previous is not None else (shard.duals, weights)
  for round_index in range(start_round, max_rounds if not stopped else 0):
    start = time.perf_counter()
    sent_before = cluster.bytes_sent
    solving = exchanging = 0.0
    for pass_index, part in calls:
      tick = time.perf_counter()
      delta = shard.solve(weights[own], round_index, pass_index, part)
      tock = time.perf_counter()
      solving += tock - tick
      files.kill_point(f"worker-{cluster.index}-round-{round_index + 1}-"
                       "solved")
      if exchange == "allreduce":
        change = np.zeros(table_size * classes)
        change[own] = delta
        weights = weights + cluster.all_reduce(change)
      elif parts == 1:  # a whole pass changes (nearly) every entry
        weights = add_changes(weights.copy(), positions,
                              cluster.all_gather(delta, lengths))
      else:  # a part changes a fraction: send (position, value) pairs
        weights = add_changes(weights.copy(), positions,
                              cluster.all_gather(pack_change(delta)))
      exchanging += time.perf_counter() - tock
    loss_part, dual_part = shard.evaluate(weights[own])
    # One all-reduce: the gap's two sums and each worker's room for the
    # extrapolation in its own slot (the minimum over all rows).
    limits = np.zeros(cluster.size)
    if previous is not None:
      limits[cluster.index] = losses.extrapolation_limit(
          loss, shard.labels, shard.duals, shard.duals - previous[0])
    sums = cluster.all_reduce(np.concatenate([[loss_part, dual_part],
                                              limits]))
    loss_sum, dual_sum = sums[:2]
    primal, gap = objective_and_gap(
        (loss_sum, dual_sum) + shard_lib.norms(weights, l1, l2), loss, l1, l2)
    history.append(dict(
        round=round_index + 1, loss=primal / total_weight,
        duality_gap=gap / max(abs(primal), 1e-300),
        seconds=time.perf_counter() - start, solve_seconds=solving,
        exchange_seconds=exchanging,
        bytes_sent=cluster.bytes_sent - sent_before))
    done = (history[-1]["duality_gap"] < tol or
            round_index + 1 == max_rounds)
    # The round's own point (what a checkpoint's weights and duals are);
    # the next round starts from its extrapolation.
    current = (shard.duals, weights)
    if accelerate is not None and not done:
      if previous is None:
        accelerate.last_dual = primal - gap
      else:
        beta = accelerate.beta(primal - gap, float(sums[2:].min()))
        if beta > 0:
          shard.duals = current[0] + beta * (current[0] - previous[0])
          weights = current[1] + beta * (current[1] - previous[1])
      previous = current
    log(f"round {round_index + 1}: loss {history[-1]['loss']:.6f}, relative "
        f"duality gap {history[-1]['duality_gap']:.3e} (solve "
        f"{solving:.3f} s, exchange {exchanging:.3f} s, "
        f"{history[-1]['bytes_sent'] / 2**20:.2f} MB sent)")
    if state_dir is not None and (done or
                                  (round_index + 1) % checkpoint_every == 0):
      _checkpoint(state_dir, cluster, options, layout, table_ids, current,
                  (shard.duals, weights), accelerate, history)
    if done:
      break

  duals, weights = current
  sparse, dense = _split_table(weights, table_ids, num_features, classes)
  return Result(sparse_weights=sparse, dense_weights=dense,
                duals=duals if classes == 1 else duals.reshape(-1, classes),
                history=history, index=cluster.index, **layout)


def _class_entries(slots, classes):
  """The flat entries of table rows `slots` when each holds `classes`
  class weights (row-major)."""
  if classes == 1:
    return slots
  return (slots[:, None] * classes + np.arange(classes)).ravel()


def _split_table(weights, table_ids, num_features, classes):
  """(sparse `[num_features]` (or `[num_features, C]`) with the table's
  ids filled, dense `[d]` (`[d, C]`)) of the flat table `weights`."""
  table = weights.reshape(-1, classes)
  sparse = np.zeros((0 if num_features is None else int(num_features),
                     classes))
  sparse[table_ids] = table[:table_ids.size]
  dense = table[table_ids.size:].copy()
  if classes == 1:
    return sparse[:, 0], dense[:, 0]
  return sparse, dense


def _checkpoint(state_dir, cluster, options, layout, table_ids, current,
                start, accelerate, history):
  """Writes round r: every worker its duals, the chief the weights (the
  round's own point `current` = (duals, weights), and the next round's
  extrapolated `start`); after a barrier the chief points `state.json` at
  r; then files older than the previous checkpoint go."""
  round_number = history[-1]["round"]
  files.save_npz_atomically(
      os.path.join(state_dir, _worker_file(cluster.index, round_number)),
      duals=current[0], start=start[0], round=round_number)
  if cluster.is_chief:
    files.save_npz_atomically(
        os.path.join(state_dir, _weights_file(round_number)),
        table_ids=table_ids, weights=current[1], start=start[1],
        round=round_number)
  cluster.barrier()  # every file of round r is in place
  if cluster.is_chief:
    previous = _read_state(state_dir)
    files.save_json_atomically(os.path.join(state_dir, _STATE), dict(
        round=round_number, options=options, layout=layout, history=history,
        previous_round=None if previous is None else previous["round"],
        momentum=None if accelerate is None else accelerate.state()))
    keep = {round_number} | ({previous["round"]} if previous else set())
  else:
    keep = None
  # Each worker deletes its own old files; the chief also old weights. A
  # worker may run ahead of the chief's state.json, so it keeps the last
  # two checkpoints: state.json names one of them whatever happens.
  mine = sorted(glob.glob(os.path.join(
      state_dir, f"worker-{cluster.index:04d}-*.npz")))
  for path in mine[:-2]:
    os.remove(path)
  if keep is not None:
    for path in glob.glob(os.path.join(state_dir, "weights-*.npz")):
      if int(os.path.basename(path)[8:14]) not in keep:
        os.remove(path)


def _remove_checkpoints(state_dir):
  """Deletes a previous training's state (a fresh start in its directory:
  its round numbers would mix with the new ones)."""
  for pattern in (_STATE, "weights-*.npz", "worker-*.npz"):
    for path in glob.glob(os.path.join(state_dir, pattern)):
      os.remove(path)


def _worker_file(index, round_number):
  return f"worker-{index:04d}-{round_number:06d}.npz"


def _weights_file(round_number):
  return f"weights-{round_number:06d}.npz"


def _read_state(state_dir):
  path = os.path.join(state_dir, _STATE)
  if not os.path.exists(path):
    return None
  with open(path) as f:
    return json.load(f)


# The options a resume may change (the rounds' stop and checkpoints), not
# what is trained.
_MAY_CHANGE = ("max_rounds", "tol", "checkpoint_every")


def _restore(state_dir, cluster, options, table_ids, shard, accelerate):
  """(the next round's start weights, history, (duals, weights) of the
  checkpoint's round) with this worker's duals set to the next round's
  start and `accelerate`'s state restored, or None without a checkpoint."""
  from tf_sdca.distributed.cluster import ClusterError  # pylint: disable=import-outside-toplevel
  state = _read_state(state_dir)
  if state is None:
    return None
  # When to stop and to checkpoint may change: training further means a
  # larger max_rounds (it was compared too, so a distributed model could
  # never be trained further).
  saved, now = ({k: v for k, v in opts.items() if k not in _MAY_CHANGE}
                for opts in (state["options"], json.loads(json.dumps(options))))
  if saved != now:
    changed = {k: (saved.get(k), now.get(k))
               for k in sorted(set(saved) | set(now))
               if saved.get(k) != now.get(k)}
    raise ClusterError(
        f"resuming: the checkpoint in {state_dir} was written with other "
        f"options (saved, now): {changed}; a saved None is an option the "
        f"checkpoint predates, i.e. its default then (num_classes 1, "
        f"hinge_step 'projection', exchanges_per_pass 1): resume with the "
        f"saved values")
  round_number = state["round"]
  with np.load(os.path.join(state_dir, _weights_file(round_number))) as f:
    saved_ids, weights = f["table_ids"], f["weights"]
    start = f["start"] if "start" in f.files else weights
  if not np.array_equal(saved_ids, table_ids):
    raise ClusterError("--resume: the workers' rows are not those of the "
                       "checkpoint (their ids differ)")
  with np.load(os.path.join(state_dir, _worker_file(cluster.index,
                                                    round_number))) as f:
    duals = f["duals"]
    start_duals = f["start"] if "start" in f.files else duals
  classes = getattr(shard, "num_classes", 1)
  if duals.shape != (shard.n * classes,):
    raise ClusterError(f"--resume: worker {cluster.index} has {shard.n} rows,"
                       f" its checkpoint {duals.shape[0] // classes}")
  shard.duals = start_duals
  if accelerate is not None and state.get("momentum"):
    accelerate.restore(state["momentum"])
  return start, state["history"], (duals, weights)


def read_model(model_dir, num_features=None):
  """The last checkpoint in `model_dir`: a dict of `sparse_weights`,
  `dense_weights`, `history` and the layout (`exchange`, `table_size`,
  `bytes_per_round`, `num_workers`, ...), as the chief's `train` returned
  them."""
  state_dir = os.path.join(model_dir, "cocoa")
  state = _read_state(state_dir)
  if state is None:
    raise FileNotFoundError(f"no distributed checkpoint in {model_dir}")
  with np.load(os.path.join(state_dir, _weights_file(state["round"]))) as f:
    table_ids, weights = f["table_ids"], f["weights"]
  size = num_features or state["options"]["num_features"] or 0
  sparse, dense = _split_table(weights, table_ids, size,
                               state["options"].get("num_classes", 1))
  return dict(state["layout"], sparse_weights=sparse, dense_weights=dense,
              history=state["history"])

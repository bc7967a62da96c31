"""The in-memory epoch engine: every door's whole-data-set training.

One engine under `InMemorySdca`, `keras.LinearModel`'s in-memory fits,
`tf-sdca train` and the shards of training across processes:

- a **problem**: the data normalised (`normalise`, `csr_arrays`,
  `RowChunks`), validated and packed once (`Problem`, `ArrayRows`) for the
  packed-rows ops, on the threads `choose_threads` picks;
- a **state** (`State`): the float64 weight table (sparse rows, then dense
  columns; `[rows, K]` for a multiclass loss), the duals by row, ASDCA's
  iterate, as numpy arrays, with `state_dict()` for checkpoints;
- the **epochs**: `run_epochs`, the loop of a fit (one op call per epoch,
  or several per `TfSdca>PackedEpochs` call where nothing runs between
  them, `_FusedEpochs`; the exact objective and duality gap after each,
  progress, the gap stop, a callback; `epochs_of` gives the same epochs
  one by one to a door that
  drives its own loop, Keras' `fit`), with output averaging (`IterateAverage`) and extrapolation
  (`Extrapolation`) as hooks; the seed schedule (`epoch_seed`); the one
  Python caller of `TfSdca>PackedSolve`, `TfSdca>PackedEpochs` and
  `TfSdca>AsdcaSolve` (`packed_pass`, `_FusedEpochs`, `asdca_pass`,
  `objective_parts`); and the one evaluator
  of the objective and duality gap from the ops' sums (`objective_and_gap`).

The options a door takes are checked by `tf_sdca.options` before they get
here; `Config` is what the engine needs of them. Streamed training (batches
as they come, duals by example id) has its own home, `tf_sdca.SdcaModel`.
See g3doc/architecture.md.
"""
import collections
import contextlib
import math
import os
import time
import warnings

import numpy as np
import scipy.sparse as sp
import tensorflow as tf

from tf_sdca import averaging
from tf_sdca import losses
from tf_sdca import options
from tf_sdca.ops import sdca_ops

# Fewest rows per lock-free thread over packed rows: with fewer, starting
# the threads every epoch costs more than they gain (scikit-learn's
# breast_cancer, 569 rows: two threads took 1.7x the time of one).
MIN_ROWS_PER_THREAD = 4096

Config = collections.namedtuple(
    "Config", ["loss", "l1", "l2", "gamma", "seed", "visit_order",
               "hinge_step", "num_classes", "asdca_batch_size",
               "asdca_theta"])
Config.__doc__ = """What the engine needs of a door's (checked) options.

  loss: the op's loss name; l1, l2, gamma: as the ops take them; seed: of
  the visiting orders (`epoch_seed`); visit_order: the order of the packed
  passes ('asdca' runs `asdca_pass`); hinge_step: the multiclass hinge's
  block step; num_classes: K (1: not multiclass); asdca_batch_size,
  asdca_theta: ASDCA's.
"""
Config.__new__.__defaults__ = ("projection", 1, None, None)


def epoch_seed(seed, epoch):
  """The seed of epoch `epoch` (from 0) of a fit seeded `seed`: each
  epoch's order depends on (seed, epoch) only, so training resumed at an
  epoch repeats what an uninterrupted run would have done. `epoch` may be
  a tensor (Keras counts its calls in a variable)."""
  return seed * 1_000_003 + epoch


def shard_seed(seed, round_index, shard_index):
  """The seed of one shard's local pass in a CoCoA+ round: the round's
  epoch seed, distinct per shard."""
  return epoch_seed(seed, int(round_index)) * 65_537 + shard_index


def packed_pass(rows, weights, duals, seed, config, passes=1,
                compute_objective=True, **split):
  """`passes` SDCA passes over packed rows (`TfSdca>PackedSolve`): returns
  (weights, duals, objective parts) as tensors. `weights`, `duals` and
  `seed` may be numpy arrays (aliased, see `aliased`) or tensors (inside
  a `tf.function`); with `passes=0` only the objective parts at them.
  `split`: a CoCoA+ shard's `num_loss_partitions`, `num_parts`, `part`."""
  return sdca_ops.packed_solve(
      rows, weights, duals, seed, loss_type=config.loss, l1=config.l1,
      l2=config.l2, num_passes=passes,
      visit_order=("permutation" if config.visit_order == "asdca" else
                   config.visit_order), gamma=config.gamma,
      compute_objective=compute_objective, num_classes=config.num_classes,
      hinge_step=config.hinge_step, **split)


def objective_parts(rows, weights, duals, config, threads=0):
  """The exact objective's sums at (weights, duals) (see
  `objective_and_gap`): a `packed_pass` without passes, on `threads`
  threads (0: the CPU device's; the sums are the same bits)."""
  return packed_pass(rows, weights, duals, 0, config, passes=0,
                     objective_threads=threads)[2]


def asdca_pass(rows, weights, duals, iterate, seed, config,
               compute_objective=True):
  """One accelerated mini-batch SDCA pass (`TfSdca>AsdcaSolve`) over rows
  packed for one thread: (weights, duals, iterate, parts, theta)."""
  return sdca_ops.asdca_solve(
      rows, weights, duals, iterate, seed, config.loss, config.l1,
      config.l2, config.asdca_batch_size, config.asdca_theta,
      gamma=config.gamma, compute_objective=compute_objective)


def project_duals(duals, loss, labels):
  """`duals` (`[n]` or `[n, K]`) with every row whose dual is outside its
  label's domain set to 0 (in every domain): the duals found for a fit's
  keys may be another fit's, of rows with other labels under the same
  positions (the op refused them: "not a valid dual")."""
  inside = losses.duals_in_domain(loss, labels, duals)
  if inside.all():
    return duals
  return np.where(inside.reshape((-1,) + (1,) * (duals.ndim - 1)), duals, 0.0)


def paired_weights(duals, csr, dense, weights, l2, num_sparse):
  """The weights these rows' `duals` make, w = sum_i s_i alpha_i x_i / l2
  (what the engine keeps, with its float32 s_i and l2): `(sparse, dense)`
  float64 arrays `[num_sparse(, K)]` and `[d(, K)]`, each None where the
  rows have no such part (`rows_table`'s arguments)."""
  s32 = np.asarray(weights, np.float32).astype(np.float64)
  scaled = duals * (s32 if duals.ndim == 1 else s32[:, None])
  l2 = float(np.float32(l2))
  sparse = dense_part = None
  if csr is not None:
    indptr, indices, values = csr
    values = (np.ones(len(indices)) if values is None else
              np.asarray(values, np.float64))
    matrix = sp.csr_matrix((values, indices, indptr),
                           shape=(len(indptr) - 1, num_sparse))
    sparse = np.asarray(matrix.T @ scaled) / l2
  elif num_sparse:
    sparse = np.zeros((num_sparse,) + duals.shape[1:])
  if dense is not None:
    dense_part = np.asarray(dense, np.float64).T @ scaled / l2
  return sparse, dense_part


def rows_table(table, duals, csr, dense, weights, l2, num_sparse):
  """The weight table that these rows' `duals` make, w = sum_i s_i alpha_i
  x_i / l2 (what the engine keeps, with its float32 s_i and l2), where
  `table` is not that within rounding (1e-9 of the largest weight); else
  `table` itself, bit for bit (a fit going on on the same rows).

  A fit from epoch 0 goes on from the state it finds (`InMemorySdca`'s
  last fit; Keras' duals found by example key, where without ids a row's
  key is its position): after a fit on other rows, labels, example
  weights or l2 its weights hold what this fit does not have (squared
  loss on another half of diabetes: the gap stuck at 0.06, the weights
  0.14 from the optimum; 100 of 569 rows: 0.9; 200 rows' weights set to
  0: 0.17, the reported gap below the true suboptimality); duals from a
  stream are float32 roundings of the table's (a gap stuck at 1.7e-9).
  The pair is made a primal-dual one over these rows.

  Args:
    table: float64 `[num_sparse * K + d * K]`, the model's weights now.
    duals: float64 `[n]` or `[n, K]`.
    csr: `(indptr, indices, values or None)` over `num_sparse` columns, or
      None.
    dense: `[n, d]` or None.
    weights: `[n]` example weights.
    l2, num_sparse: the model's.
  """
  if not np.any(duals):
    return table if not np.any(table) else np.zeros_like(table)
  made = np.concatenate([part.reshape(-1) for part in paired_weights(
      duals, csr, dense, weights, l2, num_sparse) if part is not None])
  scale = max(float(np.abs(made).max()), float(np.abs(table).max()), 1e-300)
  if made.shape == table.shape and np.abs(made - table).max() <= 1e-9 * scale:
    return table
  return made

class State:
  """The training state of an in-memory fit, as float64 numpy arrays.

  Attributes:
    sparse_weights: `[num_features]` (`[num_features, K]`) unshrunk, or
      None without a sparse part.
    dense_weights: `[d]` (`[d, K]`), or None without a dense part.
    duals: `[n]` (`[n, K]`), the dual of each row.
    table: the last op call's weight table, of which the two weights are
      views (or None once they were set otherwise).
    asdca_iterate: ASDCA's accelerated iterate (shrunk), or None.
  """

  def __init__(self, num_classes=1, multiclass=False):
    self.num_classes = num_classes
    self.multiclass = multiclass
    self.sparse_weights = None
    self.dense_weights = None
    self.duals = None
    self.table = None
    self.asdca_iterate = None

  def shape(self, n, num_features, dense_dim, resuming=False):
    """Zero duals and weights for n rows, `num_features` sparse rows (None:
    none) and `dense_dim` dense columns (0: none), unless the state already
    has that shape (a resumed or continued fit). A state of which any part
    has another shape belongs to other data: all of it starts from zero
    (weights kept beside zeroed duals would not be W(alpha)), or, where
    `resuming`, a ValueError names the part.

    Raises:
      ValueError: `resuming` a state of another shape."""
    classes = (self.num_classes,) if self.multiclass else ()
    wanted = dict(duals=(n,) + classes,
                  sparse_weights=(None if num_features is None else
                                  (num_features,) + classes),
                  dense_weights=(dense_dim,) + classes if dense_dim else None)
    for name, shape in wanted.items():
      value = getattr(self, name)
      have = None if value is None else np.shape(value)
      if have is None or shape is None or have == shape:
        continue
      if resuming:
        raise ValueError(
            f"{name} has shape {have}; resuming a fit of these rows "
            f"(initial_epoch > 0) needs {shape}")
      self.duals = self.sparse_weights = self.dense_weights = None
      self.table = self.asdca_iterate = None
      break
    for name, shape in wanted.items():
      if shape is not None and getattr(self, name) is None:
        setattr(self, name, np.zeros(shape, np.float64))

  def weight_table(self):
    """The ops' weight table: sparse weights, then dense ones. When both are
    still views of the table the last call returned, that table itself (no
    copy)."""
    parts = [w.reshape(-1) for w in (self.sparse_weights, self.dense_weights)
             if w is not None]
    if self.table is not None and _views_of(self.table, parts):
      return self.table
    return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

  def install_table(self, w):
    """Makes the weight table `w` (an op's output, or a numpy array) the
    sparse and dense weights (views of it)."""
    w = self.table = output_array(w) if isinstance(w, tf.Tensor) else w
    if self.multiclass:
      w = w.reshape(-1, self.num_classes)
    k = 0 if self.sparse_weights is None else self.sparse_weights.shape[0]
    if self.sparse_weights is not None:
      self.sparse_weights = w[:k]
    if self.dense_weights is not None:
      self.dense_weights = w[k:]

  def set_point(self, duals, table):
    """Moves the state to (duals, weight table)."""
    self.duals = duals
    self.install_table(table)

  def split(self, table):
    """A weight table as (sparse weights, dense weights) of this state's
    shapes (views)."""
    if self.multiclass:
      table = table.reshape(-1, self.num_classes)
    k = 0 if self.sparse_weights is None else self.sparse_weights.shape[0]
    return (None if self.sparse_weights is None else table[:k],
            None if self.dense_weights is None else table[k:])

  def pass_over(self, problem, epoch, config, passes=1):
    """`passes` passes of `packed_pass` over `problem` from this state,
    which then holds their result; returns the objective parts (numpy)
    of the result (with `passes=0`: of the state)."""
    if isinstance(problem, PartedProblem):
      return problem.pass_over(self, epoch, config, passes)
    # Inputs by DLPack (no copy: the op copies them into its outputs).
    if not passes:
      return objective_parts_at(problem, self.point(), config)
    w, duals, parts = packed_pass(
        problem.rows, aliased(self.weight_table()),
        aliased(np.ascontiguousarray(self.duals, np.float64).reshape(-1)),
        epoch_seed(config.seed, epoch), config, passes=passes,
        compute_objective=False)
    self.install_table(w)
    self.duals = output_array(duals).reshape(self.duals.shape)
    return parts.numpy()

  def point(self):
    """The state's (duals, weight table): arrays that later epochs and
    extrapolations replace, never change in place."""
    return self.duals, self.weight_table()

  def asdca_over(self, problem, epoch, config):
    """One `asdca_pass` over `problem`; returns the theta used. A run
    starts (or resumes from weights without an iterate) at w = shrink(W)."""
    table = self.weight_table()
    iterate = self.asdca_iterate
    if iterate is None or iterate.shape != table.shape:
      iterate = losses.shrink_l1(table, config.l1, config.l2)
    w, duals, iterate, _, theta = asdca_pass(
        problem.rows, aliased(table),
        aliased(np.ascontiguousarray(self.duals, np.float64)),
        aliased(np.asarray(iterate, np.float64)),
        epoch_seed(config.seed, epoch), config, compute_objective=False)
    self.install_table(w)
    self.duals = output_array(duals).reshape(self.duals.shape)
    self.asdca_iterate = output_array(iterate)
    return float(theta)


def packed_epochs_run(problem, config, extrapolation):
  """Whether `TfSdca>PackedEpochs` runs `problem`'s epochs under `config`
  (with `extrapolation`'s heavy ball, or None): rows packed for one
  thread, not ASDCA's order, no extrapolated Poisson."""
  return (config.visit_order != "asdca" and
          (extrapolation is None or config.loss != "poisson_loss") and
          isinstance(problem, Problem) and problem.num_threads <= 1)


def train_one_epoch(state, problem, epoch, config, extrapolation=None,
                    restart=None):
  """One epoch of `state` over `problem`: the extrapolated start
  (`extrapolation.start_epoch(restart)`) and one pass. Where it
  extrapolates (a previous point, no restart, beta > 0) over rows packed
  for one thread, both run in one op call (`sdca_ops.extrapolated_pass`),
  whose heavy ball is `Extrapolation`'s in C++, the same bits
  (tests/test_fused_epochs.py): on 4M Criteo-shaped rows numpy's cap and
  steps over the duals took 0.03-0.45 s of every epoch's ~0.6 s."""
  if (extrapolation is None or not extrapolation.plan(restart) > 0.0 or
      not packed_epochs_run(problem, config, extrapolation)):
    if extrapolation is not None:
      extrapolation.start_epoch(restart)
    state.pass_over(problem, epoch, config, passes=1)
    return
  beta, point, _, _ = extrapolation.fused_inputs()
  shape = state.duals.shape
  w, duals, prev_w, prev_duals = sdca_ops.extrapolated_pass(
      problem.rows, aliased(state.weight_table()),
      aliased(np.ascontiguousarray(state.duals, np.float64).reshape(-1)),
      epoch_seed(config.seed, epoch), config.loss, config.l1, config.l2,
      beta, (aliased(point[1]),
             aliased(np.ascontiguousarray(point[0]).reshape(-1))),
      visit_order=config.visit_order, gamma=config.gamma,
      num_classes=config.num_classes, hinge_step=config.hinge_step)
  state.install_table(w)
  state.duals = output_array(duals).reshape(shape)
  extrapolation.fused_previous((output_array(prev_duals).reshape(shape),
                                output_array(prev_w)))


def objective_parts_at(problem, point, config, threads=0):
  """The exact objective parts (numpy) of a packed `problem` at `point`,
  a state's (duals, weight table), on `threads` threads (0: the CPU
  device's); reads the arrays, never changes them (so another thread may
  train from the same point meanwhile)."""
  duals, table = point
  return objective_parts(
      problem.rows, aliased(table),
      aliased(np.ascontiguousarray(duals, np.float64).reshape(-1)),
      config, threads).numpy()


class IterateAverage:
  """The running mean of a state's iterates (its weight table and duals):
  output averaging (`average_from`), on `tf_sdca.averaging.RunningMean`."""

  def __init__(self, state):
    self.state = state
    self.mean = averaging.RunningMean()

  @property
  def count(self):
    return self.mean.count

  def resume(self, count):
    """Takes the state's weights and duals as the mean of `count`
    iterates."""
    self.add()
    self.mean.count = int(count)

  def add(self):
    """Adds the state's current iterate to the mean."""
    self.mean.add([self.state.weight_table(),
                   np.asarray(self.state.duals).reshape(-1)])

  def parts(self, problem, config):
    """The exact objective parts at the mean."""
    table, duals = self.mean.parts
    if isinstance(problem, PartedProblem):
      return problem.objective_parts(table, duals, config)
    return objective_parts(problem.rows, aliased(table), aliased(duals),
                           config).numpy()

  def split(self):
    """The mean as dict(sparse_weights, dense_weights, duals, count)
    (copies)."""
    table, duals = self.mean.parts
    sparse, dense = self.state.split(table.copy())
    return dict(sparse_weights=sparse, dense_weights=dense,
                duals=duals.reshape(self.state.duals.shape).copy(),
                count=self.count)


def run_epochs(state, problem, config, n, epochs, initial_epoch=0, tol=None,
               verbose=1, callback=None, train_epoch=None,
               extrapolation=None, average=None, average_from=None,
               start_time=None, describe_slow=None, explain_error=None,
               gap_every=1, second_order=None):
  """The epochs of a fit: trains `state` on `problem` from `initial_epoch`
  up to `epochs`, stopping once the relative duality gap is below `tol`.

  Each epoch: the extrapolated start (`extrapolation`), the epoch's
  training (`train_epoch(epoch, rng, bar, start)`, default one packed
  pass), the exact block step (`second_order`), the exact objective and gap
  of the state (with one training thread on 2 or more cores, evaluated on
  another thread while the next epoch trains: `_TrainAhead`; the same
  results), the averaged iterate's
  (`average`, from epoch `average_from`), progress, the slow-progress
  warning (`describe_slow(text)` may add to it), `callback(epoch,
  history)`, the stop.

  Args:
    state: a `State` shaped for the problem.
    problem: a `Problem` (its `rows`, `total_weight`).
    config: the engine's `Config`.
    n: the rows.
    start_time: `time.perf_counter()` when the fit began (the first
      epoch's rate counts preparing the data).
    explain_error: maps the FloatingPointError of an invalid gap to the
      error to raise (e.g. naming ASDCA's theta).
    gap_every: the history holds the exact objective and gap after every
      `gap_every`-th epoch (counting from 1) and after the last one; 0: after
      the last one only; and after every epoch something reads: a
      callback, progress (`verbose`), momentum 'auto' before it chose its
      beta, an average. `tol` is tested on every epoch whatever it is (fused
      epochs lazily, `TfSdca>PackedEpochs`; else each evaluated), and an
      extrapolation's restarts read every epoch's dual objective (fused,
      O(n + d) in the op); those evaluations leave the history NaN.
    second_order: a `tf_sdca.second_order.ExactBlockStep` taken after each
      epoch's passes where it gives a finite point (None: none).

  Returns:
    The history: per-epoch lists `loss` (objective / total weight),
    `duality_gap` (relative), `rows_per_sec`; with `average`, also
    `last_loss` and `last_duality_gap` (the last iterate's). An epoch
    `gap_every` skipped has NaN `loss` and `duality_gap`.
  """
  history = {"loss": [], "duality_gap": [], "rows_per_sec": []}
  for epoch in epochs_of(
      history, state, problem, config, n, epochs, initial_epoch, tol,
      verbose, callback is not None, train_epoch, extrapolation, average,
      average_from, start_time, describe_slow, explain_error, gap_every,
      second_order):
    callback(epoch, history)
  return history


def epochs_of(history, state, problem, config, n, epochs, initial_epoch=0,
              tol=None, verbose=0, read=False, train_epoch=None,
              extrapolation=None, average=None, average_from=None,
              start_time=None, describe_slow=None, explain_error=None,
              gap_every=1, second_order=None, warn_slow=True,
              read_state=True):
  """The epochs of `run_epochs` one by one, for a door that drives its own
  loop (`tf_sdca.keras.LinearModel.fit`): a generator that fills the
  per-epoch lists of `history` (a dict with `loss`, `duality_gap` and
  `rows_per_sec` lists) and, with `read`, yields each epoch's number after
  the epoch's bookkeeping (where `run_epochs` calls its callback). While
  the reader has it, the state is as that epoch left it (an epoch trained
  ahead is put aside); a reader that stops there (`close()`) leaves it so.
  It ends after `epochs`, or after the first evaluated epoch whose gap is
  below `tol`. `warn_slow=False`: no slow-progress warning (a door that
  watches the gaps itself). `read_state=False`: the reader reads only
  the history (every epoch evaluated) and stops only where the generator
  ends, so that epochs may run several per op call (`_FusedEpochs`): the
  state is then that of the last epoch run, up to FUSED_SECONDS of epochs
  past the one yielded, and at the end the last epoch's. The other
  arguments are `run_epochs`'.
  """
  if average is not None:
    history.update(last_loss=[], last_duality_gap=[])
    if not average.count and initial_epoch >= average_from:
      average.add()  # the start is an iterate
  watch = (losses.ProgressWatch(loss=config.loss, order=config.visit_order,
                                momentum=extrapolation is not None)
           if warn_slow else None)
  # Where nothing runs between the epochs, several per op call; on rows
  # too few for an evaluation to outweigh an op call per epoch
  # (AHEAD_MIN_ENTRIES), always.
  fusable = FUSED_EPOCHS and _FusedEpochs.applies(
      problem, config, train_epoch, extrapolation, average, second_order,
      read and read_state)
  # Else, one training thread on a machine with more cores: each epoch's
  # exact gap is evaluated on another thread while the next epoch trains,
  # ahead of the bookkeeping that decides how it starts (`_TrainAhead`).
  ahead = (_TrainAhead(state, problem, config, extrapolation)
           if TRAIN_AHEAD and _TrainAhead.applies(
               problem, config, train_epoch, average, second_order) and not (
                   fusable and problem.entries < AHEAD_MIN_ENTRIES)
           else None)
  fused = (_FusedEpochs(state, problem, config, epochs, tol, gap_every,
                        extrapolation, initial_epoch, start_time,
                        evaluate_all=bool(verbose) or read)
           if ahead is None and fusable else None)

  def progress_bar(epoch):
    if not verbose:
      return None
    print(f"Epoch {epoch + 1}/{epochs}")
    return tf.keras.utils.Progbar(n, stateful_metrics=["rows/s"],
                                  unit_name="row")

  def unrecorded(elapsed):
    """An epoch whose objective and gap the history does not hold (NaN)."""
    if watch is not None:
      watch.skip()
    history["loss"].append(math.nan)
    history["duality_gap"].append(math.nan)
    history["rows_per_sec"].append(n / elapsed)

  try:
    epoch = initial_epoch
    while epoch < epochs:
      trained = None if ahead is None else ahead.take(epoch)
      if fused is not None:
        trained, fused_parts, fused_evaluated = fused.take(epoch)
      if trained is None:
        rng = np.random.default_rng([config.seed, epoch])
        bar = progress_bar(epoch)
        start = time.perf_counter()
        if epoch == initial_epoch and start_time is not None:
          start = start_time
        if train_epoch is not None:
          train_epoch(epoch, rng, bar, start)
        else:
          train_one_epoch(state, problem, epoch, config, extrapolation)
        point = (None if second_order is None else
                 second_order.step(state.weight_table()))
        if point is not None:
          state.set_point(*point)
          state.asdca_iterate = None  # ASDCA restarts from the new point
        # Training time only: the exact objective below is bookkeeping.
        elapsed = time.perf_counter() - start
      else:
        bar, elapsed = progress_bar(epoch), trained
      # The epochs whose objective and gap the history holds: those
      # `gap_every` names, the last, and every one something reads.
      due = (epoch + 1 == epochs or
             (gap_every and (epoch + 1) % gap_every == 0) or
             verbose or read or average is not None or
             (extrapolation is not None and extrapolation.reads_gaps))
      if fused is not None:
        # (The op evaluated what it was asked to and what `tol` needed.)
        evaluated = fused_evaluated
      else:
        evaluated = due or tol is not None or (
            extrapolation is not None and extrapolation.reads_duals)
      if not evaluated:
        # Nobody reads this epoch's gap: its pass over the rows (about as
        # long as the epoch's) is skipped. The state is the same. (Fused, an
        # extrapolation's restart test read the epoch's dual objective in
        # the op, O(n + d).)
        if (fused is not None and extrapolation is not None and
            not math.isnan(fused_parts[1])):
          extrapolation.end_epoch(dual_objective(fused_parts, config.l2))
        unrecorded(elapsed)
        epoch += 1
        continue
      if (ahead is not None and epoch + 1 < epochs and
          not (extrapolation is not None and extrapolation.chooses_next)):
        parts = ahead.evaluate_and_train(epoch + 1)
      elif fused is not None:
        parts = fused_parts
      else:
        parts = state.pass_over(problem, epoch, config, passes=0)
      try:
        objective, gap = objective_and_gap(parts, config.loss, config.l1,
                                           config.l2)
      except FloatingPointError as error:
        if ahead is not None:
          ahead.undo()
        if explain_error is None:
          raise
        raise explain_error(error) from None
      relative = gap / max(abs(objective), 1e-300)
      if extrapolation is not None:
        extrapolation.end_epoch(dual_objective(parts, config.l2), relative)
      if not due and not (tol is not None and relative < tol):
        # Evaluated only for `tol` or a restart test: the history keeps NaN
        # as for an epoch not evaluated, so that it is the same whichever
        # path evaluated which epochs.
        if ahead is not None:
          ahead.settle(keep=True)
        unrecorded(elapsed)
        epoch += 1
        continue
      # (Read after the epoch: a `PartedProblem` sums it while packing.)
      total_weight = problem.total_weight
      if average is not None:
        history["last_loss"].append(objective / total_weight)
        history["last_duality_gap"].append(relative)
        if epoch + 1 >= average_from:
          average.add()
        if average.count:
          objective, gap = objective_and_gap(
              average.parts(problem, config), config.loss, config.l1,
              config.l2)
      history["loss"].append(objective / total_weight)
      history["duality_gap"].append(gap / max(abs(objective), 1e-300))
      history["rows_per_sec"].append(n / elapsed)  # training only
      if bar is not None:
        bar.update(n, values=[("rows/s", n / elapsed)], finalize=True)
      if verbose:
        print(f"  loss {history['loss'][-1]:.6f}  relative duality gap "
              f"{history['duality_gap'][-1]:.3e}  {n / elapsed:,.0f} rows/s")
      stop = tol is not None and history["duality_gap"][-1] < tol
      if ahead is not None:
        # The next epoch trained ahead counts only where this epoch's
        # bookkeeping started it as it was started (else it is redone).
        ahead.settle(keep=not stop)
      slow = watch.update(history["duality_gap"][-1]) if watch else None
      if slow and describe_slow is not None:
        slow = describe_slow(slow)
      if slow:
        warnings.warn(slow, UserWarning,
                      stacklevel=losses.caller_stacklevel())
      if read:
        if ahead is None:
          yield epoch
        else:
          with ahead.as_of_epoch():
            yield epoch
      if stop:
        if fused is not None:
          fused.check_stopped()
        break
      epoch += 1
  finally:
    if ahead is not None:
      ahead.close()


# Whether `run_epochs` trains the next epoch while an epoch's gap is
# evaluated where it can (`_TrainAhead`, and inside `TfSdca>PackedEpochs`
# calls, `_FusedEpochs`); False runs every epoch's steps one after the
# other (the same results: tests/test_train_ahead.py,
# tests/test_fused_epochs.py).
TRAIN_AHEAD = True


# Whether `epochs_of` runs several epochs per op call where nothing runs
# between them (`_FusedEpochs`); False: one call per epoch (the same
# results: tests/test_fused_epochs.py).
FUSED_EPOCHS = True

# Rows with fewer stored entries (sparse ids and dense values, `Problem.
# entries`) train their epochs fused where they can, not ahead: an epoch
# over them takes well under a millisecond, less than what an op call and
# the thread hand-off per epoch cost. 30 default epochs, the shortest of 5
# alternating runs each (load ~5): fair's 6,366 x 9 rows (57k entries,
# squared loss) 24.9 ms ahead against 16.2 ms fused; 20,000 x 20 dense
# rows (400k entries, logistic) 93 ms ahead against 104 ms fused.
AHEAD_MIN_ENTRIES = 1 << 17

# A fused call runs about this long (its epochs sized by the last call's
# time per epoch), so that an interrupt waits at most about that.
FUSED_SECONDS = 0.05

# The first fused call's epochs, before any was timed: FUSED_SECONDS at
# this many seconds per stored entry and class an epoch (its pass and its
# evaluation), a bound above what was measured so that the first call does
# not run long: 2,000 text-like rows (87k entries), binary hinge, ~4 ns
# (~0.25 ms a pass, ~0.1 ms an evaluation). Where a whole short fit fits
# in one call, a call fewer saves its dispatch, its copies and the
# evaluations it runs in turn (the first and last of a call): 16 epochs of
# those rows took 5.2 ms in one call against 5.9 ms in calls of 4 and 12
# (min of 30, momentum 0).
FUSED_FIRST_SECONDS_PER_ENTRY = 10e-9


class _FusedEpochs:
  """Runs `epochs_of`'s epochs several per op call (`TfSdca>PackedEpochs`)
  where nothing runs between them: the epochs' passes, the extrapolation
  (`Extrapolation`'s heavy ball, its restarts) and the exact objective
  (where `epochs_of` evaluates it) inside the call, stopping at the epoch
  whose gap is below `tol` as the epochs one by one would; the bookkeeping
  (history, the gap stop, warnings) then runs on each epoch's objective
  parts as it does after a call per epoch, so the weights, duals, history
  and extrapolation are the same bits (tests/test_fused_epochs.py). On data
  sets of a few thousand rows an op call per epoch, the evaluation's and
  the extrapolation's numpy work cost several times the epoch itself.

  Only for one training thread over packed rows, with no `train_epoch`,
  average, block step or reader between the epochs (a callback, Keras'
  loop), and not extrapolating the Poisson loss (progress is printed per
  epoch as each call returns, within FUSED_SECONDS of the epoch); where
  `_TrainAhead` applies it runs instead. The first call runs the epochs
  that FUSED_SECONDS allows at FUSED_FIRST_SECONDS_PER_ENTRY, later ones
  about FUSED_SECONDS each by the last call's time per epoch; momentum
  'auto' chooses its beta inside the call (`Extrapolation.fused_auto`).
  An error inside a call (a step out of range) raises with the state where
  the call started. Inside a call an epoch's objective is evaluated on
  another thread while the next epoch trains where the op measures that
  faster (`train_ahead='timed'`; 'never' with TRAIN_AHEAD False), with the
  same results.
  """

  def __init__(self, state, problem, config, epochs, tol, gap_every,
               extrapolation, initial_epoch, start_time, evaluate_all=False):
    self._state = state
    self._problem = problem
    self._config = config
    self._epochs = epochs
    self._tol = -1.0 if tol is None else float(tol)
    self._gap_every = gap_every
    self._evaluate_all = evaluate_all  # (progress prints every epoch's)
    self._extrapolation = extrapolation
    self._first = initial_epoch if start_time is not None else None
    self._start_time = start_time
    first = (max(problem.entries, 1) * max(config.num_classes or 1, 1) *
             FUSED_FIRST_SECONDS_PER_ENTRY)
    self._size = max(1, int(FUSED_SECONDS / first))
    self._done = collections.deque()  # (seconds, parts or None) by epoch
    self._epoch = initial_epoch  # the next epoch to run

  @staticmethod
  def applies(problem, config, train_epoch, extrapolation, average,
              second_order, reads):
    return (train_epoch is None and average is None and
            second_order is None and not reads and
            packed_epochs_run(problem, config, extrapolation))

  def take(self, epoch):
    """(training seconds, objective parts, whether evaluated) of `epoch`,
    whose result the state then holds once the last epoch run is taken;
    the parts NaN where not evaluated, but the dual loss and |w|^2 where
    the op read them (`tol`, an extrapolation's restart test)."""
    if not self._done:
      self._run(epoch)
    return self._done.popleft()

  def check_stopped(self):
    """At the stop: no epoch was run past it."""
    if self._done:
      raise RuntimeError(
          f"TfSdca>PackedEpochs ran {len(self._done)} epoch(s) past the "
          "stop: its gap test differs from objective_and_gap's")

  def _run(self, epoch):
    if epoch != self._epoch:
      raise RuntimeError(f"fused epochs at {self._epoch}, asked for {epoch}")
    extrapolation = self._extrapolation
    count = min(self._size, self._epochs - epoch)
    evaluate = [self._evaluate_all or epoch + k + 1 == self._epochs or
                bool(self._gap_every and
                     (epoch + k + 1) % self._gap_every == 0)
                for k in range(count)]
    beta, previous, last_dual, restart = -1.0, None, -np.inf, False
    auto = None
    if extrapolation is not None:
      # 'auto''s plain epochs are evaluated (their gaps choose its beta,
      # in the op).
      undecided = extrapolation.undecided_epochs
      evaluate[:undecided] = [True] * min(undecided, count)
      auto = extrapolation.fused_auto()
      beta, point, last_dual, restart = extrapolation.fused_inputs()
      if point is not None:
        previous = (aliased(point[1]),
                    aliased(np.ascontiguousarray(point[0]).reshape(-1)))
    state, config = self._state, self._config
    start = time.perf_counter()
    out = sdca_ops.packed_epochs(
        self._problem.rows, aliased(state.weight_table()),
        aliased(np.ascontiguousarray(state.duals, np.float64).reshape(-1)),
        epoch_seed(config.seed, epoch), np.asarray(evaluate[:count]),
        self._tol, config.loss, config.l1, config.l2,
        visit_order=config.visit_order, gamma=config.gamma,
        num_classes=config.num_classes, hinge_step=config.hinge_step,
        beta=beta, previous=previous, last_dual=last_dual, restart=restart,
        auto_momentum=auto, train_ahead="timed" if TRAIN_AHEAD else "never")
    w, duals, parts, seconds, prev_w, prev_duals, chosen = out
    wall = time.perf_counter() - start
    shape = state.duals.shape
    state.install_table(w)
    state.duals = output_array(duals).reshape(shape)
    parts, seconds = parts.numpy(), seconds.numpy()
    run = seconds.shape[0]
    if extrapolation is not None:
      # (Where the call ran past 'auto''s last plain epoch, it chose.)
      extrapolation.fused_previous(
          (output_array(prev_duals).reshape(shape), output_array(prev_w)),
          float(chosen) if auto is not None and run >= undecided else None)
    for k in range(run):
      elapsed = float(seconds[k])
      if epoch + k == self._first:  # the fit's first epoch: preparing too
        elapsed += start - self._start_time
      # Evaluated: asked for, or by the op for `tol` (its primal loss read;
      # or the epoch it stopped after, whose gap may be invalid).
      self._done.append((elapsed, parts[k], bool(
          evaluate[k] or not math.isnan(parts[k][0]) or
          (k + 1 == run and run < count))))
    self._epoch = epoch + seconds.shape[0]
    per_epoch = wall / max(seconds.shape[0], 1)
    self._size = max(1, int(FUSED_SECONDS / max(per_epoch, 1e-9)))


class _TrainAhead:
  """Trains epoch e + 1 while epoch e's exact gap is evaluated on another
  thread, with the results of `run_epochs` in order, bit for bit.

  The evaluation reads the point epoch e ended at (arrays that training
  never changes in place) while the next epoch trains from it on the
  calling thread: about the cost of the evaluation is saved per epoch,
  a third of an epoch's time on 1M Criteo-shaped rows. What epoch e's
  bookkeeping decides comes after the next epoch started: where that
  changes how it starts (an extrapolation restart) or whether it runs at
  all (`tol` reached), the epoch trained ahead is dropped and the state
  put back (`settle`), so that the weights, duals and history are those
  of epochs run one by one. The one gap known to decide how the next
  epoch starts, the one momentum 'auto' chooses its beta from
  (`Extrapolation.chooses_next`), `run_epochs` evaluates before that
  epoch starts instead (it would drop a pass per fit: one in 18 on 1M
  Criteo-shaped rows).

  A callback sees the model as epoch e left it (`as_of_epoch`: e.g. a
  checkpoint saves epoch e's weights, duals and extrapolation), and must
  not change it.

  Only for one training thread over packed rows (not parts), with no
  per-epoch `train_epoch`, average or block step, on a machine with 2 or
  more cores; not in the order 'shrinking', whose active rows the packed
  rows keep from epoch to epoch (an epoch dropped would have moved them).
  """

  def __init__(self, state, problem, config, extrapolation):
    import concurrent.futures  # pylint: disable=import-outside-toplevel
    self._state = state
    self._problem = problem
    self._config = config
    self._extrapolation = extrapolation
    self._executor = concurrent.futures.ThreadPoolExecutor(1)
    self._saved = None  # (point, extrapolation mark, plan) before ahead
    self._trained = None  # (epoch, seconds) of the epoch trained ahead
    self._behind = None  # (point, mark) of the epoch before one kept

  @staticmethod
  def applies(problem, config, train_epoch, average, second_order):
    return (train_epoch is None and average is None and
            second_order is None and config.visit_order != "shrinking"
            and isinstance(problem, Problem) and
            problem.num_threads <= 1 and (os.cpu_count() or 1) >= 2)

  def evaluate_and_train(self, next_epoch):
    """The objective parts at the state (numpy), evaluated on another
    thread while `next_epoch` trains from it here."""
    point = self._state.point()
    # One thread beside the one training (the same sums as on more).
    future = self._executor.submit(objective_parts_at, self._problem, point,
                                   self._config, 1)
    extrapolation = self._extrapolation
    # Started as if this epoch's dual objective rose (no restart): an
    # extrapolation restarts after the rare epoch where it fell.
    self._saved = (point,
                   None if extrapolation is None else extrapolation.mark(),
                   None if extrapolation is None else
                   extrapolation.plan(restart=False))
    try:
      start = time.perf_counter()
      train_one_epoch(self._state, self._problem, next_epoch, self._config,
                      extrapolation, restart=False)
      self._trained = (next_epoch, time.perf_counter() - start)
    except Exception:  # pylint: disable=broad-except
      # Raised again when the epoch is trained in its turn (after this
      # epoch's bookkeeping, whose errors come first).
      self.undo()
    return future.result()

  def undo(self):
    """Puts the state back where the epoch trained ahead started."""
    if self._saved is None:
      return
    point, mark, _ = self._saved
    self._state.set_point(*point)
    if mark is not None:
      self._extrapolation.rewind(mark)
    self._saved = self._trained = None

  def settle(self, keep):
    """After the bookkeeping of the epoch before it: keeps the epoch
    trained ahead where it started as it would have (and `keep`), else
    undoes it."""
    if self._saved is None:
      return
    point, mark, plan = self._saved
    if not keep or (plan is not None and plan != self._extrapolation.plan()):
      self.undo()
    else:
      self._behind = (point, mark)
    self._saved = None

  @contextlib.contextmanager
  def as_of_epoch(self):
    """Within it, the state (and extrapolation) as the epoch before the
    one trained ahead left them; then back to the one trained ahead,
    unless the reader stopped there (GeneratorExit: the epoch trained
    ahead is dropped)."""
    behind, self._behind = self._behind, None
    if behind is None:
      yield
      return
    ahead = self._state.point()
    mark = (None if self._extrapolation is None else
            self._extrapolation.mark())
    self._state.set_point(*behind[0])
    if mark is not None:
      self._extrapolation.rewind(behind[1])
    try:
      yield
    except GeneratorExit:
      raise
    except BaseException:
      self._put_back(ahead, mark)
      raise
    self._put_back(ahead, mark)

  def _put_back(self, point, mark):
    self._state.set_point(*point)
    if mark is not None:
      self._extrapolation.rewind(mark)

  def take(self, epoch):
    """The training seconds of `epoch` when it was trained ahead (its
    result is the state), else None."""
    trained, self._trained = self._trained, None
    if trained is None or trained[0] != epoch:
      return None
    return trained[1]

  def close(self):
    self._executor.shutdown(wait=True)


def first_fractional(ids):
  """The flat position of the first id of a float array that is not a
  whole number within int64 (2.5, NaN, inf), or None: the check of every
  door that takes feature ids as floats (cutting them trained 2.999 as id
  2, NaN as an arbitrary id)."""
  if ids.dtype.kind not in "fc":
    return None
  with np.errstate(invalid="ignore"):
    bad = np.flatnonzero(ids.astype(np.int64) != ids)
  return int(bad[0]) if bad.size else None


def _integer_ids(name, ids):
  """`ids` as integers: integer arrays as they are, others as int64, where
  each value is a whole number (a float id of 2.5 is refused, not cut)."""
  if ids.dtype.kind in "iu":
    return ids
  bad = first_fractional(ids)
  if bad is not None:
    k = np.unravel_index(bad, ids.shape)
    where = ", ".join(str(int(i)) for i in k)
    raise ValueError(f"{name} must be whole numbers (feature ids), got "
                     f"{name}[{where}] = {ids[k]}")
  return ids.astype(np.int64)


def csr_arrays(n, ids=None, indptr=None, indices=None, values=None):
  """The sparse part of `n` rows, given as fixed-width `ids` `[n, k]` or as
  CSR (`indptr`, `indices`, optional `values`), as CSR arrays `(indptr,
  indices, values or None)`, or None without a sparse part.

  Raises:
    ValueError: on inconsistent shapes.
  """
  if ids is not None:
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] != n or (n and ids.shape[1] == 0):
      raise ValueError(f"ids must have shape [{n}, k], k >= 1, got "
                       f"{ids.shape}")
    k = max(ids.shape[1], 1)
    return (np.arange(0, n * k + 1, k, dtype=np.int64),
            # int32 ids stay int32 (half the memory of 26 ids a row);
            # each batch converts its own slice.
            np.ascontiguousarray(_integer_ids("ids", ids)).ravel(), None)
  if indices is None:
    return None
  indptr = np.asarray(indptr, dtype=np.int64)
  if indptr.shape != (n + 1,):
    raise ValueError(f"indptr must have shape [{n + 1}], got {indptr.shape}")
  indices = _integer_ids("indices", np.asarray(indices))
  # Row i's entries are indices[indptr[i]:indptr[i + 1]]: whatever reads
  # them (scipy's products in `second_order`, packing) needs these bounds
  # (a decreasing indptr crashed scipy inside a fit).
  if n and (indptr[0] < 0 or indptr[-1] > indices.size):
    raise ValueError(f"indptr must run within [0, {indices.size}] (the "
                     f"entries of indices), got indptr[0] = {indptr[0]}, "
                     f"indptr[{n}] = {indptr[-1]}")
  falls = np.flatnonzero(indptr[1:] < indptr[:-1])
  if falls.size:
    i = int(falls[0])
    raise ValueError(f"indptr must be nondecreasing, got indptr[{i}] = "
                     f"{indptr[i]} > indptr[{i + 1}] = {indptr[i + 1]}")
  if values is not None:
    values = np.asarray(values, dtype=np.float32)
    if values.shape != indices.shape:
      raise ValueError(f"values has shape {values.shape} but indices has "
                       f"{indices.shape}")
  return indptr, indices, values

# Rows `row_norms` reads (evenly spaced through the data set).
NORM_SPREAD_ROWS = 4096
# The rows' squared norms as the default order reads them
# (`options.visit_order_for`): `spread` the coefficient of variation (std /
# mean) of |x_i|^2, `largest` the largest |x_i|^2.
RowNorms = collections.namedtuple("RowNorms", ["spread", "largest"])


def norm_rows(n):
  """The rows `row_norms` reads of `n`: all of them up to NORM_SPREAD_ROWS,
  else NORM_SPREAD_ROWS evenly spaced through them."""
  # (All of them when n <= NORM_SPREAD_ROWS: linspace's step is then 1.)
  return (np.arange(n) if n <= NORM_SPREAD_ROWS else np.unique(
      np.linspace(0, n - 1, NORM_SPREAD_ROWS).astype(np.int64)))


def row_norms(n, sparse_norms=None, dense=None):
  """The `RowNorms` of the rows' squared norms |x_i|^2 on the rows
  `norm_rows(n)` of `n`: how widely the rows' scales spread, and the
  largest, which with l2 bounds SDCA's passes (`options.visit_order_for`).
  Spread 0 for no rows or all-zero rows.

  Args:
    n: the rows.
    sparse_norms: float64, the sparse part of those rows' |x_i|^2 as
      `TfSdca>PackRows` returns it for them (`Problem(norms=True)`: each
      row's entries' squared values added in order, a repeated id once per
      entry), or None without a sparse part.
    dense: `[n, d]` all rows' dense part, or None.
  """
  if n == 0:
    return RowNorms(0.0, 0.0)
  rows = norm_rows(n)
  norms = np.zeros(len(rows))
  if sparse_norms is not None:
    norms += sparse_norms
  if dense is not None:
    if len(rows) == n and isinstance(dense, np.ndarray) and (
        dense.flags.c_contiguous):
      # Every row of a C-ordered array: the squares of the gather below in
      # the same layout (so the same row sums), without the gather, and
      # squared in one pass (np.square of float32 to float64 squares each
      # value's double, as astype(np.float64) ** 2 does).
      norms += np.square(dense, dtype=np.float64).sum(axis=1)
    else:
      norms += (np.asarray(dense[rows], np.float64) ** 2).sum(axis=1)
  mean = norms.mean()
  return RowNorms(float(norms.std() / mean) if mean > 0 else 0.0,
                  float(norms.max()))


def normalise(labels, dense=None, ids=None, indptr=None, indices=None,
               values=None, example_weights=None):
  """`fit`'s data arguments as (n, csr or None, dense or None, labels,
  weights): float32 labels, dense `[n, d]` and weights, the sparse part as
  CSR (`csr_arrays`).

  Raises:
    ValueError: on inconsistent shapes, or no features.
  """
  sparse = hasattr(labels, "tocsr")  # a scipy matrix (np.shape fails)
  shape = labels.shape if sparse else np.shape(labels)
  if not sparse and len(shape) == 2 and shape[1] == 1:
    labels = np.reshape(labels, (-1,))
  elif len(shape) != 1:
    # fit(x, y) in scikit-learn's order lands the features here.
    raise ValueError(
        f"labels must have shape [n], got {tuple(shape)}: fit takes the "
        "labels first and the features by name, e.g. fit(y, dense=x), "
        "fit(y, indptr=m.indptr, indices=m.indices, values=m.data) for a "
        "CSR matrix m, or fit(y, ids=ids)")
  labels = np.ascontiguousarray(labels, dtype=np.float32)
  n = labels.shape[0]
  csr = csr_arrays(n, ids, indptr, indices, values)
  if dense is not None:
    dense = np.ascontiguousarray(dense, dtype=np.float32)
    if dense.ndim == 1:
      dense = dense[:, None]
    if dense.ndim != 2:
      raise ValueError(f"dense must have shape [n] or [n, d], got "
                       f"{dense.shape}")
    if dense.shape[0] != n:
      raise ValueError(f"dense has {dense.shape[0]} rows but labels has {n}")
    if dense.shape[1] == 0:
      dense = None  # (no dense part)
  if dense is None and csr is None:
    raise ValueError("give dense features, sparse ids, or both")
  weights = (np.ones(n, np.float32) if example_weights is None else
             np.ascontiguousarray(example_weights, dtype=np.float32))
  if weights.shape != (n,):
    raise ValueError(f"example_weights must have shape [{n}], got "
                     f"{weights.shape}")
  return n, csr, dense, labels, weights

class RowChunks:
  """A data set given as consecutive chunks of rows, for
  `InMemorySdca.fit(rows=...)`.

  `fit` packs one chunk at a time (`tf_sdca.new_packed_rows`,
  `tf_sdca.append_rows`), so that the data set's whole arrays are never
  held beside its packed records: `tf-sdca train` reads its memory-mapped
  cache so. The rows train exactly as the same rows given to `fit` whole,
  in the same visit_order (arrays with visit_order None may take
  'adaptive' by their rows' norms; chunks never do).

  Example:
    >>> def chunks():
    ...   for start in range(0, n, 65536):
    ...     rows = slice(start, start + 65536)
    ...     yield dict(labels=y[rows], dense=x[rows], ids=ids[rows])
    >>> model.fit(rows=RowChunks(chunks, num_examples=n, num_ids=ids.size,
    ...                          dense_dim=x.shape[1], num_features=2**20))

  Args:
    chunks: an iterable, or a function returning one, of dicts with `fit`'s
      data arguments for consecutive rows: `labels`, and `dense`, `ids` or
      `indptr`/`indices`/`values`, `example_weights` as `fit` takes them;
      optionally `source`, a string naming where the rows come from (errors
      name it). Iterated once per `fit`.
    num_examples: the rows of all chunks.
    num_ids: their sparse entries (`ids.size` or `indptr[-1]` summed; 0
      without a sparse part).
    dense_dim: their dense columns (0: no dense part).
    num_features: rows of the sparse weight table (None: no sparse part).
    has_values: the sparse entries come with `values`.
  """

  def __init__(self, chunks, num_examples, num_ids=0, dense_dim=0,
               num_features=None, has_values=False):
    self.chunks = chunks
    self.num_examples = int(num_examples)
    self.num_ids = int(num_ids)
    self.dense_dim = int(dense_dim)
    self.num_features = None if num_features is None else int(num_features)
    self.has_values = bool(has_values)
    for name in ("num_examples", "num_ids", "dense_dim"):
      if getattr(self, name) < 0:
        raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
    if self.num_features is not None and not (
        0 <= self.num_features < 2**31):
      raise ValueError(f"num_features = {num_features} does not fit the "
                       "op's int32 ids")
    if self.num_features is None and self.num_ids:
      raise ValueError(f"num_ids = {num_ids} sparse entries need "
                       "num_features")

  def normalised(self):
    """Yields (first row, source, csr, dense, labels, weights) per chunk,
    each normalised as `fit` normalises whole arrays (a tuple chunk is
    already normalised)."""
    chunks = self.chunks() if callable(self.chunks) else self.chunks
    first = ids = 0
    for index, chunk in enumerate(chunks):
      if isinstance(chunk, tuple):
        csr, dense, labels, weights = chunk
        source = None
      else:
        chunk = dict(chunk)
        source = chunk.pop("source", None)
        where = source or f"chunk {index}"
        try:
          _, csr, dense, labels, weights = normalise(**chunk)
        except (TypeError, ValueError) as error:
          raise ValueError(f"{where} (rows from {first:,} on): "
                           f"{error}") from None
        if (dense.shape[1] if dense is not None else 0) != self.dense_dim:
          raise ValueError(
              f"{where} (rows from {first:,} on) has "
              f"{0 if dense is None else dense.shape[1]} dense columns; "
              f"dense_dim is {self.dense_dim}")
        # (These three reached the packing op: a TypeError comparing None,
        # and its errors about a buffer's room.)
        if csr is not None and self.num_features is None:
          raise ValueError(f"{where} (rows from {first:,} on) has sparse "
                           "ids; num_features is None (no sparse part)")
        if first + labels.shape[0] > self.num_examples:
          raise ValueError(f"{where} (rows from {first:,} on) holds rows "
                           f"past num_examples = {self.num_examples:,}")
        ids += 0 if csr is None else int(csr[0][-1] - csr[0][0])
        if ids > self.num_ids:
          raise ValueError(f"{where} (rows from {first:,} on): the chunks "
                           f"hold more than num_ids = {self.num_ids:,} "
                           "sparse entries")
        source = where
      yield first, source, csr, dense, labels, weights
      first += labels.shape[0]

class Problem:
  """A problem's rows: a `RowChunks` validated and packed once for
  `TfSdca>PackedSolve`, chunk by
  chunk (`new_packed_rows`, then `append_rows` per chunk, each chunk's
  numpy memory aliased by DLPack), or in one `pack_rows` call where the
  `RowChunks` is one normalised chunk (a fit's arrays); `total_weight`: the
  sum of their example weights; `labels`: with `keep_labels`, all rows'
  labels (else None); `row_norms`: with `norms` (one normalised chunk
  only), the rows' `RowNorms`, their sparse part read by the packing op
  (else None)."""

  def __init__(self, chunks, loss, gamma, num_threads, num_classes=1,
               keep_labels=False, norms=False):
    n = chunks.num_examples
    self.num_threads = num_threads
    # Stored entries: the sparse ids and the dense values.
    self.entries = int(chunks.num_ids) + n * int(chunks.dense_dim)
    self.row_norms = None
    whole = chunks.chunks
    if (isinstance(whole, (list, tuple)) and len(whole) == 1 and
        isinstance(whole[0], tuple) and whole[0][2].shape[0] == n):
      # One chunk of arrays: one op call instead of two (each eager op
      # dispatch costs ~0.1 ms with the caches cold, as a fit meets it).
      csr, dense, labels, weights = whole[0]
      packed = sdca_ops.pack_rows(
          *_op_inputs(csr, dense, labels, weights, chunks.num_features),
          num_sparse_features=chunks.num_features or 0, loss_type=loss,
          gamma=gamma, num_threads=num_threads, num_classes=num_classes,
          norm_rows=aliased(norm_rows(n)) if norms else None)
      self.rows, sparse_norms = packed if norms else (packed, None)
      if norms:
        self.row_norms = row_norms(
            n, None if csr is None else output_array(sparse_norms), dense)
      self.total_weight = float(weights.sum(dtype=np.float64))
      # (The normalised array itself: only read.)
      self.labels = np.asarray(labels) if keep_labels else None
      return
    if norms:
      raise ValueError("Problem(norms=True) needs one normalised chunk")
    kept = []
    self.rows = sdca_ops.new_packed_rows(
        n, chunks.num_ids, chunks.dense_dim, chunks.num_features or 0, loss,
        gamma=gamma, num_threads=num_threads, has_values=chunks.has_values,
        num_classes=num_classes)
    self.total_weight = 0.0
    appended = 0
    for first, source, csr, dense, labels, weights in chunks.normalised():
      tensors = _op_inputs(csr, dense, labels, weights, chunks.num_features,
                           first, source)
      try:
        appended = int(sdca_ops.append_rows(self.rows, *tensors))
      except tf.errors.InvalidArgumentError as error:
        if source is None:
          raise
        raise type(error)(error.node_def, error.op,
                          f"{source}: {error.message}") from None
      self.total_weight += float(weights.sum(dtype=np.float64))
      if keep_labels:
        kept.append(np.asarray(labels))
    # The labels as the op read them (for the dual domains), when asked.
    self.labels = np.concatenate(kept) if kept else None
    if appended != n:
      raise ValueError(f"the chunks hold {appended:,} rows; num_examples "
                       f"is {n:,}")

def packed_row_bytes(num_ids, dense_dim, has_values=False):
  """Bytes of the packed record of a row with `num_ids` sparse entries and
  `dense_dim` dense columns (kernels/core/packed_rows.h: a 32-byte header,
  the ids, their values, the dense values, padded to 8 bytes; 192 for a
  Criteo row)."""
  size = 32 + 4 * num_ids * (2 if has_values else 1) + 4 * dense_dim
  return -(-size // 8) * 8


class RowParts:
  """A data set too large to hold packed, for `InMemorySdca.fit(rows=...)`:
  consecutive blocks of rows, dealt every epoch into parts of
  `blocks_per_part` blocks, each part packed, solved
  (`TfSdca>PackedSolve`) and dropped in turn, so that the packed records
  of at most one part are held (`PartedProblem`); the duals (one per row)
  and the weight table stay in memory. `tf-sdca train --memory-budget`
  trains its cache so when the packed rows would not fit.

  Args:
    blocks: a function of a block's index returning the chunks of its rows,
      as `RowChunks`' `chunks`.
    block_rows: the rows of each block (all > 0).
    block_ids: the sparse entries of each block.
    blocks_per_part: blocks per part (the last part may have fewer).
    dense_dim, num_features, has_values: as `RowChunks`'.
    labels: all rows' labels as the op reads them, in order (needed for
      momentum, whose steps are capped by the dual domains; else None).
  """

  def __init__(self, blocks, block_rows, block_ids, blocks_per_part,
               dense_dim=0, num_features=None, has_values=False,
               labels=None):
    self.blocks = blocks
    self.block_rows = np.asarray(block_rows, np.int64).reshape(-1)
    self.block_ids = np.asarray(block_ids, np.int64).reshape(-1)
    if not self.block_rows.size or self.block_rows.min() <= 0 or \
        self.block_ids.shape != self.block_rows.shape:
      raise ValueError(f"blocks must have rows > 0 and one count of ids "
                       f"each, got rows {self.block_rows[:10]} and ids "
                       f"{self.block_ids[:10]}")
    self.blocks_per_part = int(blocks_per_part)
    if self.blocks_per_part < 1:
      raise ValueError(f"blocks_per_part must be >= 1, got {blocks_per_part}")
    self.num_parts = -(-self.block_rows.size // self.blocks_per_part)
    self.num_examples = int(self.block_rows.sum())
    self.num_ids = int(self.block_ids.sum())
    self.dense_dim = int(dense_dim)
    self.num_features = None if num_features is None else int(num_features)
    self.has_values = bool(has_values)
    self.labels = labels
    self.starts = np.concatenate([[0], np.cumsum(self.block_rows)])

  def part(self, blocks):
    """The rows of `blocks` (block indices, in this order) as a
    `RowChunks`."""
    def chunks():
      for block in blocks:
        yield from self.blocks(int(block))
    return RowChunks(chunks, int(self.block_rows[blocks].sum()),
                     int(self.block_ids[blocks].sum()), self.dense_dim,
                     self.num_features, self.has_values)

  def rows_of(self, blocks):
    """The row indices of `blocks`, in order."""
    return np.concatenate([np.arange(self.starts[b], self.starts[b + 1])
                           for b in blocks])


def part_seed(seed, epoch, part):
  """The seed of the `part`-th part's pass in epoch `epoch` of a parted fit:
  the first takes the epoch's seed (so one part trains as the rows in
  memory)."""
  return epoch_seed(seed, epoch) + (part << 32)


class PartedProblem:
  """The rows of a `RowParts`, packed part by part on every pass.

  Each epoch deals the blocks into parts afresh (numpy's
  `default_rng([seed, epoch, blocks])`: a random permutation of the blocks
  cut into parts, each part's blocks then in the rows' order; 'cyclic':
  consecutive blocks, in order), visits the parts in that order and each
  part's rows in the visit order from `part_seed`. These are SDCA's steps
  in another order of the rows, so the same optimum; dealing the blocks
  afresh matters: parts fixed once took many more epochs to high accuracy
  (in a simulation of squared loss on Criteo-like rows, 2 fixed parts
  stalled near a relative gap of 6e-5 where one part and 2 or 5 dealt
  parts reached 1e-9 in 40 epochs). With one part (or 'cyclic' order on
  one thread) the steps are those of the rows in memory, bit for bit (the
  objective summed part by part may differ in its last bits). The exact
  objective and duality gap after an epoch take a second sweep over the
  parts (packing each again but the one still held). Only the orders
  without state in the packed rows run so (`PARTED_VISIT_ORDERS`).

  `total_weight` is known after the first pass; `labels` are the
  `RowParts`' when `keep_labels`.
  """

  def __init__(self, parts, loss, gamma, num_threads, num_classes=1,
               keep_labels=False):
    self.parts = parts
    self.loss = loss
    self.gamma = gamma
    self.num_threads = num_threads
    self.num_classes = num_classes
    if keep_labels and parts.labels is None:
      raise ValueError("momentum over parts needs RowParts(labels=...)")
    self.labels = parts.labels if keep_labels else None
    self.total_weight = None
    self._held = None   # (blocks, packed rows) of the last part packed
    self._dealt = None  # the last epoch's parts (tuples of blocks)

  def _deal(self, epoch, config):
    """The parts of epoch `epoch`, as tuples of block indices."""
    count = self.parts.block_rows.size
    if config.visit_order == "cyclic" or self.parts.num_parts == 1:
      order = np.arange(count)
    else:
      order = np.random.default_rng([config.seed, epoch, count]).permutation(
          count)
    size = self.parts.blocks_per_part
    return [tuple(sorted(int(b) for b in order[k:k + size]))
            if config.visit_order != "cyclic" else
            tuple(int(b) for b in order[k:k + size])
            for k in range(0, count, size)]

  def _rows(self, blocks):
    """The part of `blocks` packed (the part held before is dropped first,
    so that two are never held); (packed rows, its total weight)."""
    if self._held is not None and self._held[0] == blocks:
      return self._held[1]
    self._held = None
    chunks = self.parts.part(list(blocks))
    problem = Problem(chunks, self.loss, self.gamma,
                      _packed_threads(self.num_threads, chunks.num_examples),
                      self.num_classes)
    self._held = (blocks, (problem.rows, problem.total_weight))
    return self._held[1]

  def pass_over(self, state, epoch, config, passes=1):
    """`State.pass_over` for parts: one pass over every part (`passes`
    = 1) or the objective parts at the state (0)."""
    table = state.weight_table()
    duals = np.ascontiguousarray(state.duals, np.float64)
    if passes == 0:
      return self.objective_parts(table, duals, config)
    if passes != 1:
      raise ValueError(f"passes = {passes}: parts take one pass per epoch")
    self._dealt = self._deal(epoch, config)
    # New duals (the extrapolation keeps the last point's, unchanged).
    out = duals.copy()
    total_weight = 0.0
    for position, blocks in enumerate(self._dealt):
      rows, weight = self._rows(blocks)
      index = self.parts.rows_of(blocks)
      w, part_duals, _ = packed_pass(
          rows, aliased(table),
          aliased(np.ascontiguousarray(duals[index]).reshape(-1)),
          part_seed(config.seed, epoch, position), config,
          compute_objective=False)
      table = output_array(w)
      out[index] = output_array(part_duals).reshape((-1,) + out.shape[1:])
      total_weight += weight
      # (dropped before the next part is packed: else two are held)
      del rows, w, part_duals
    self.total_weight = total_weight
    state.install_table(table)
    state.duals = out
    return None

  def objective_parts(self, table, duals, config):
    """The exact objective's sums (`objective_and_gap`) at (weight table,
    duals), summed over the last epoch's parts, the one held first."""
    dealt = self._dealt or self._deal(0, config._replace(
        visit_order="cyclic"))
    if self._held is not None and self._held[0] in dealt:
      dealt = [self._held[0]] + [b for b in dealt if b != self._held[0]]
    total = np.zeros(4, np.float64)
    duals = np.ascontiguousarray(duals, np.float64)
    for blocks in dealt:
      rows, _ = self._rows(blocks)
      index = self.parts.rows_of(blocks)
      parts = objective_parts(
          rows, aliased(table),
          aliased(np.ascontiguousarray(duals[index]).reshape(-1)),
          config).numpy()
      total[:2] += parts[:2]
      total[2:] = parts[2:]  # the weights' norms, the same in every part
      del rows  # (before the next part is packed)
    return total


# The visit orders a parted fit runs: 'adaptive' and 'shrinking' keep state
# in the packed rows from call to call, and ASDCA's iterate spans them.
PARTED_VISIT_ORDERS = options.PARTED_VISIT_ORDERS


def check_sparse_ids(csr, num_features, first_row=0, source=None):
  """Raises a ValueError for an id of the CSR arrays `csr` outside `[0,
  num_features)`, naming the row (counting from `first_row`), the id and
  `source`, or for a `num_features` beyond the op's int32 ids. Before
  anything reads the rows by their ids (scipy's products in
  `second_order` wrote outside their arrays on a negative id)."""
  indptr, indices = csr[0], csr[1]
  if num_features >= 2**31:
    raise ValueError(f"num_features = {num_features} does not fit the "
                     "op's int32 ids")
  if indices.size and (int(indices.min()) < 0 or
                       int(indices.max()) >= num_features):
    k = int(np.flatnonzero((indices < 0) | (indices >= num_features))[0])
    row = first_row + int(np.searchsorted(indptr, k, side="right")) - 1
    raise ValueError(
        f"{source + ': ' if source else ''}sparse ids must be in "
        f"[0, {num_features}), got {indices[k]} in row {row:,}")


def _op_inputs(csr, dense, labels, weights, num_features, first_row=0,
               source=None):
  """The six data inputs of `append_rows` for normalised rows (numpy
  memory aliased by DLPack, CSR indices as int32).

  Raises:
    ValueError: for an id outside `[0, num_features)`, naming the row
      (counting from `first_row`), the id and `source`.
  """
  n = labels.shape[0]
  if csr is None:
    row_ptr = np.zeros(0, np.int64)
    ids = np.zeros(0, np.int32)
    values = np.zeros(0, np.float32)
  else:
    check_sparse_ids(csr, num_features, first_row, source)
    indptr, indices, values = csr
    row_ptr = indptr
    ids = indices if indices.dtype == np.int32 else indices.astype(np.int32)
    if values is None:
      values = np.zeros(0, np.float32)
  if dense is None:
    dense = np.zeros((n, 0), np.float32)
  return (aliased(row_ptr), aliased(ids), aliased(values),
          aliased(dense), aliased(weights), aliased(labels))

class ArrayRows:
  """The data of a `fit` on arrays (`keras.LinearModel` packs its arrays so),
  checked, then packed for `TfSdca>PackedSolve` as one chunk of rows."""

  def __init__(self, n, csr, dense, labels, weights, num_features):
    if csr is not None:
      check_sparse_ids(csr, num_features)
    self.chunks = RowChunks([(csr, dense, labels, weights)], n,
                            0 if csr is None else int(csr[0][-1]),
                            0 if dense is None else dense.shape[1],
                            num_features if csr is not None else None,
                            csr is not None and csr[2] is not None)
    self.rows = None
    self.problem = None  # the `Problem`, once packed

  def pack(self, num_features, loss, gamma, num_threads, num_classes=1,
           norms=False):
    """Validates and packs the rows once for `num_threads` threads (and K
    classes of a multiclass loss; with `norms`, the problem's `row_norms`);
    epochs then go through `TfSdca>PackedSolve`. The packed copy replaces
    the arrays."""
    del num_features  # given to the constructor
    self.problem = Problem(self.chunks, loss, gamma, num_threads,
                           num_classes, norms=norms)
    self.rows = self.problem.rows
    self.chunks = None

def _packed_threads(num_threads, n):
  """Threads to pack n rows for: num_threads, at most one per
  MIN_ROWS_PER_THREAD rows, at least one."""
  return max(1, min(num_threads, n // MIN_ROWS_PER_THREAD))


def choose_threads(num_threads, n, num_classes=1):
  """The lock-free threads `fit` packs n rows (of a loss with `num_classes`
  classes) for, with a warning whenever
  that is not what was asked or is likely slower than fewer threads: at
  most one per 4096 rows (thread start-up dominates shorter epochs) and one
  per core (threads sharing a core only see each other's changes later);
  and with three or more the weights that most rows share are merged
  between the threads nearly every row, so that up to 8 threads converge
  in about one thread's epochs, at a cost per row not yet measured on more
  than 2 cores (g3doc/benchmarks.md); more threads fall behind where the
  steps couple strongly through the shared weights (|x_i|^2 / l2 >> 1)."""
  threads = _packed_threads(num_threads, n)
  if num_threads <= 1:
    # (One thread whatever the cores: os.cpu_count reads a file, 6-50 us.)
    return threads
  cores = os.cpu_count() or 1
  if threads > cores:
    threads = cores
  if num_threads > 1 and threads < num_threads:
    warnings.warn(
        f"num_threads={num_threads}: using {threads} lock-free thread(s) "
        f"for {n} rows on {cores} core(s) (at most one per "
        f"{MIN_ROWS_PER_THREAD} rows and one per core)", UserWarning,
        stacklevel=3)
  if threads >= 3:
    warnings.warn(
        f"num_threads={threads}: with 3 or more lock-free threads the "
        "weights most rows share are merged between the threads nearly "
        "every row (so that up to 8 threads an epoch makes about one "
        "thread's progress), which may cost more time than the threads save "
        "(not yet measured on more than 2 cores, g3doc/benchmarks.md)"
        + ("; with more than 8, epochs make less progress where |x_i|^2 / "
           "l2 >> 1 (16 threads in lockstep: 15-130x one thread's gap after "
           "10-20 epochs at |x_i|^2 / l2 ~ 31)" if threads > 8 else "")
        + ": compare with num_threads=2 on your data", UserWarning,
        stacklevel=3)
  if threads >= 2 and num_classes > 1:
    warnings.warn(
        f"num_threads={threads}: a multiclass step adds up to K = "
        f"{num_classes} class weights per rarely used id to the shared table "
        "by compare-and-swap; on 2 cores 2 threads took 1.5x (softmax) and "
        "1.2-1.5x (multiclass hinge) one thread's time per epoch on 60k "
        "text-like rows (g3doc/multiclass.md): compare with num_threads=1 "
        "on your data", UserWarning, stacklevel=3)
  return threads

def _views_of(table, parts):
  """True when `parts` are consecutive float64 views covering `table`."""
  address = table.__array_interface__["data"][0]
  size = 0
  for part in parts:
    if (part.dtype != np.float64 or part.ndim != 1 or
        not part.flags.c_contiguous or
        part.__array_interface__["data"][0] != address + 8 * size):
      return False
    size += part.shape[0]
  return size == table.shape[0] and table.dtype == np.float64


def output_array(tensor):
  """An op's output tensor as a numpy array over its memory, which the
  array holds (`Tensor.numpy()` copies it: on 4M Criteo-shaped rows 0.34 s
  of a 12 s fit went to copying the duals and weights each call returned).
  Nothing else holds an output, so the array is as much the caller's as a
  copy."""
  return tensor._numpy()  # pylint: disable=protected-access


def aliased(array):
  """A tensor over `array`'s memory (DLPack: no copy). The op reads it in
  place every epoch; copying a 10M-row data set per call would cost more
  than the epoch."""
  array = np.ascontiguousarray(array)
  if not array.flags.writeable:  # DLPack cannot export read-only memory
    array = array.copy()
  return tf.experimental.dlpack.from_dlpack(array.__dlpack__())

def objective_and_gap(parts, loss, l1, l2):
  """(primal, duality gap) from the objective parts of `packed_solve`:
  (sum s_i phi_i, sum s_i phi_i*, |w|^2, |w|_1).

  The gap P(w) - D(alpha) is >= 0 for any weights and feasible duals, so a
  negative or non-finite one means the parts are wrong (e.g. a step that
  left the dual domain, or weights that are not w(alpha)), never that
  training converged: that raises. Only float64 rounding of the sums can
  leave a converged gap a little below zero (seen: -4e-15 of the primal);
  such a gap, within 1e-9 of the parts' magnitude, is reported as 0.

  `l1` and `l2` are rounded to float32 first, as the ops' attrs hold
  them: the weights the op keeps are W(alpha) = X^T alpha / float32(l2),
  and the gap of that pair with the float64 l2 missed by l2 |w|^2 times
  float32's rounding of it (0.1: 1.5e-8 relative), which a converged gap
  falls below (softmax on standardised wine, l2 = 0.1: -2.2e-8 after 200
  epochs, raised as invalid). So the primal is the objective of the
  problem the ops solve, within that rounding of the one asked for.

  Raises:
    FloatingPointError: for a non-finite gap or one below zero by more
      than rounding.
  """
  # (Python floats and math.isfinite: the same values and tests as numpy
  # scalars and np.isfinite, 1.2 us a call against 2.9: an epoch of a few
  # hundred rows, heart_scale's 270, takes about as long as its
  # bookkeeping.)
  l1, l2 = float(np.float32(l1)), float(np.float32(l2))
  loss_sum, dual_sum, norm_sq, norm_1 = (
      parts.tolist() if isinstance(parts, np.ndarray) else
      (float(v) for v in parts))
  primal = loss_sum + 0.5 * l2 * norm_sq + l1 * norm_1
  gap = loss_sum + dual_sum + l2 * norm_sq + l1 * norm_1
  scale = abs(loss_sum) + abs(dual_sum) + l2 * norm_sq + l1 * norm_1
  if not (math.isfinite(primal) and math.isfinite(gap) and
          gap >= -1e-9 * scale):
    raise FloatingPointError(
        f"{loss}: invalid duality gap {gap!r} (loss sum {loss_sum!r}, "
        f"dual loss sum {dual_sum!r}, |w|^2 {norm_sq!r}, |w|_1 "
        f"{norm_1!r}): the weights and duals are not a primal-dual pair")
  return primal, max(gap, 0.0)

def dual_objective(parts, l2):
  """The dual objective D(alpha) = -sum s_i phi_i*(-alpha_i) - l2/2 |w|^2
  from the objective parts of `packed_solve` (only the dual loss and |w|^2
  are read: `TfSdca>PackedEpochs` gives those of an epoch it does not
  evaluate), `l2` rounded to float32 as the ops hold it; the arithmetic of
  the op's restart test, so that a restart is decided alike in and out of
  it. Algebraically primal - gap of `objective_and_gap`."""
  l2 = float(np.float32(l2))
  return -float(parts[1]) - 0.5 * l2 * float(parts[2])


# momentum='auto': plain epochs 1 to AUTO_MOMENTUM_EPOCHS; their relative
# gaps give the plain contraction rho (the geometric mean of gap_3 / gap_2
# and gap_4 / gap_3), and beta rises linearly from 0 at rho =
# AUTO_MOMENTUM_FLOOR to AUTO_MOMENTUM_BETA at rho = AUTO_MOMENTUM_FULL.
# Measured (g3doc/trainer.md): where beta = 0.5 cut the epochs the
# contraction was 0.23-0.93; where it cost epochs (breast_cancer and
# Criteo-shaped rows at l2 = 10) 0.10-0.21. A step at 0.2 (the rule before)
# flipped with thread timing on 200k Criteo-shaped rows at l2 = 10 (rho
# 0.17-0.21 from run to run), and beta = 0.5 there ended 12 epochs 70-330x
# above plain; the ramp gives beta 0.02-0.11 there, which ended 0.36-1.15x
# plain's gap. A check of the extrapolated epochs against plain's pace
# (gap_4 rho^r) was tried and dropped: plain epochs slow down after the
# 4th (breast_cancer, l2 = 1: 0.45 an epoch, then 0.6-0.75), so it fell
# back on every slowly contracting problem, where beta = 0.5 halves the
# epochs.
#
# With lock-free threads (num_threads > 1) timing changes every epoch's
# progress a little and, under load, one epoch's a lot (measured up to 1.8x
# its gap): on 50k Criteo-shaped rows at l2 = 6 (plain ~0.22 an epoch) one
# 2-thread run read slow epochs among 2-4 as rho ~0.31, beta 0.41, and
# ended 12 epochs 5.7x above plain. So with threads epoch 5 is plain too,
# rho is the smaller of sqrt(gap_4 / gap_2) and sqrt(gap_5 / gap_3) (one
# slow or fast epoch raises at most one of them, so never the smaller),
# and beta is at most rho (heavy ball with
# beta <= the plain contraction q does not slow the directions that
# contract at q: sqrt(q beta) <= q). Measured (g3doc/trainer.md): readings
# of epochs 2-5 with any one of them 2x off ended within 0.2-0.6x of plain
# where the one-thread rule ended up to 7x above it.
AUTO_MOMENTUM_EPOCHS = 4
AUTO_MOMENTUM_EPOCHS_LOCK_FREE = 5
AUTO_MOMENTUM_FLOOR = 0.15
AUTO_MOMENTUM_FULL = 0.35
AUTO_MOMENTUM_BETA = 0.5


class Extrapolation:
  """Heavy-ball extrapolation of SDCA's epochs (`InMemorySdca(momentum=)`,
  and the Keras model's in-memory fits).

  Epoch r + 1 starts at y = x_r + beta_r (x_r - x_{r-1}) (x: the duals and
  the weight table, the points the epochs ended at), beta_r = beta capped
  at 0.9 times the largest step that keeps every dual in its domain, and
  0 after an epoch whose dual objective fell (a restart; O'Donoghue and
  Candes). SDCA's epochs contract slow directions by 1 - c each; a fixed
  extrapolation makes that about 1 - sqrt(c) (the same reason as
  CoCoA+'s rounds, `tf_sdca.distributed.shard.Momentum`; a constant beta,
  not t / (t + 3): the problem is strongly convex). The caller keeps x_r
  as its model after each epoch, so the history and a stopped `fit`
  certify it.

  Where one thread trains packed rows (`packed_epochs_run`), the epochs'
  start is the op's (`train_one_epoch`, `_FusedEpochs`), and for the
  logistic loss the op caps each dual's step on its own instead (at 0.9
  of its room to its bound, the weights moved by the cut duals' rows:
  `sdca_ops.packed_epochs`), which `start_epoch` here does not: one beta
  for all let the duals nearest their bounds hold back every other's
  extrapolation (on 1M Criteo-shaped rows 17 epochs to a relative
  suboptimality of 1e-4 against 15). `start_epoch` serves the lock-free
  threads and parted rows.

  With beta 'auto' the first AUTO_MOMENTUM_EPOCHS epochs are plain, and
  their relative gaps choose beta (`choose_auto_momentum`: from 0 where
  they contract fast, the plain epochs then going on unchanged, to
  AUTO_MOMENTUM_BETA where they contract slowly); with `lock_free`, the
  first AUTO_MOMENTUM_EPOCHS_LOCK_FREE, read so that one noisy epoch
  cannot raise beta.

  Args:
    beta: the extrapolation, in (0, 1), or 'auto'.
    loss: the loss (its dual domain caps beta).
    labels: every row's label, in the rows' order.
    get_point: returns the current (duals, weight table) as numpy arrays
      that the next epoch does not modify in place.
    set_point: sets (duals, weight table) where the next epoch starts.
    lock_free: whether the epochs run on more than one lock-free thread
      (their gaps carry timing noise; 'auto' reads them robustly).
  """

  def __init__(self, beta, loss, labels, get_point, set_point,
               lock_free=False):
    self._auto = beta == "auto"
    self._lock_free = lock_free
    self._plain = (AUTO_MOMENTUM_EPOCHS_LOCK_FREE if self._lock_free else
                   AUTO_MOMENTUM_EPOCHS)
    self._beta = 0.0 if self._auto else float(beta)
    self._gaps = []  # 'auto': the relative gaps of the epochs so far
    self._loss = loss
    self._labels = labels
    self._signs = None  # `losses.binary_signs` of the labels, once needed
    self._get_point = get_point
    self._set_point = set_point
    self._previous = None  # (duals, table) of the epoch before
    self._last_dual = -np.inf
    self._restart = False
    self._fused_beta = None  # the beta a fused call chose ('auto')

  def start_epoch(self, restart=None):
    """Moves to the extrapolated start of the next epoch (`restart`: None
    restarts where the last `end_epoch` said to, else as given: an epoch
    started ahead of it assumes False)."""
    duals, table = self._get_point()
    previous, self._previous = self._previous, (duals, table)
    if previous is None or (self._restart if restart is None else restart):
      return
    if not self._beta > 0.0:  # (the cap below would leave it so)
      return
    if self._signs is None:
      self._signs = losses.binary_signs(self._loss, self._labels)
    change = duals - previous[0]
    beta = losses.capped_extrapolation(
        self._loss, self._signs, duals.reshape(-1), change.reshape(-1),
        self._beta, 0.9)
    if beta > 0.0:
      # duals + beta * change and table + beta * (table - previous), each
      # in the one new array (the sum's operands swapped: the same bits).
      change *= beta
      change += duals
      step = table - previous[1]
      step *= beta
      step += table
      self._set_point(change, step)

  def plan(self, restart=None):
    """What the next `start_epoch(restart)` does: the beta it extrapolates
    with before the cap of the duals' domain (0.0: it starts where the last
    epoch ended)."""
    if self._previous is None or (self._restart if restart is None else
                                  restart):
      return 0.0
    return self._beta

  def mark(self):
    """A mark of what `start_epoch` changes, for `rewind`."""
    return self._previous

  def rewind(self, mark):
    """Undoes the `start_epoch` calls since `mark()` (the caller puts the
    state's point back)."""
    self._previous = mark

  @property
  def reads_gaps(self):
    """Whether the next `end_epoch` needs the epoch's relative duality gap
    (the exact objective): while 'auto' has not chosen its beta."""
    return self._auto and len(self._gaps) < self._plain

  @property
  def reads_duals(self):
    """Whether the next `end_epoch` needs the epoch's dual objective (its
    restart test; `dual_objective`, O(n + d) without the gap): while it
    extrapolates or 'auto' has not chosen. False once 'auto' chose 0."""
    return self._beta > 0.0 or self.reads_gaps

  @property
  def chooses_next(self):
    """Whether the next `end_epoch` chooses 'auto''s beta: the epoch after
    it starts as that choice says, so `_TrainAhead` would drop an epoch
    trained ahead of it (`run_epochs` evaluates that gap first)."""
    return self._auto and len(self._gaps) == self._plain - 1

  @property
  def beta(self):
    """The extrapolation used (with 'auto': 0 until it is chosen)."""
    return self._beta

  @property
  def undecided_epochs(self):
    """With 'auto': the plain epochs still to read before beta is chosen
    (0 once chosen, or without 'auto')."""
    return max(0, self._plain - len(self._gaps)) if self._auto else 0

  def fused_inputs(self):
    """What `TfSdca>PackedEpochs` needs to start epochs as `start_epoch`
    does: (beta, the previous point (duals, table) or None, the last dual
    objective, whether a restart is due)."""
    return self._beta, self._previous, self._last_dual, self._restart

  def fused_auto(self):
    """`TfSdca>PackedEpochs`' `auto_momentum`: None, or while 'auto' is
    choosing, its rule and the gaps read so far (`choose_auto_momentum`,
    one thread: fused epochs run one)."""
    if not self.reads_gaps:
      return None
    if self._lock_free:
      raise RuntimeError("fused epochs run one thread; the lock-free "
                         "'auto' rule is not the op's")
    return np.array([self._plain, AUTO_MOMENTUM_FLOOR, AUTO_MOMENTUM_FULL,
                     AUTO_MOMENTUM_BETA, *self._gaps], np.float64)

  def fused_previous(self, point, beta=None):
    """After a `TfSdca>PackedEpochs` call: the point its last epoch
    started from (what `start_epoch` would have kept), and where the call
    chose 'auto''s beta, that beta (`end_epoch` checks that it chooses the
    same). Its dual objectives still go to `end_epoch`."""
    self._previous = point
    self._fused_beta = beta

  def end_epoch(self, dual_objective, relative_gap=None):
    """Records the dual objective at the point the epoch reached (and, for
    'auto', the epoch's relative duality gap)."""
    self._restart = dual_objective < self._last_dual
    self._last_dual = dual_objective
    if self._auto and len(self._gaps) < self._plain:
      self._gaps.append(float(relative_gap))
      if len(self._gaps) == self._plain:
        self._beta = choose_auto_momentum(self._gaps, self._lock_free)
        if self._fused_beta is not None and self._fused_beta != self._beta:
          raise RuntimeError(
              f"TfSdca>PackedEpochs chose momentum 'auto''s beta "
              f"{self._fused_beta!r} where choose_auto_momentum chooses "
              f"{self._beta!r} from the same gaps")

  def state(self):
    """What the next epoch needs, as a dict of numpy values (None before
    the first epoch): `previous_duals`, `previous_table` (the point the
    epoch before the last ended at), `last_dual` and `restart`."""
    if self._previous is None:
      return None
    # No copies: the points are never changed in place (every epoch and
    # every extrapolation makes new arrays), and a checkpoint per epoch
    # would copy the duals and the table twice for nothing.
    state = dict(previous_duals=np.asarray(self._previous[0], np.float64),
                 previous_table=np.asarray(self._previous[1], np.float64),
                 last_dual=np.float64(self._last_dual),
                 restart=np.bool_(self._restart))
    if self._auto:  # the gaps seen (beta follows from them)
      state["auto_gaps"] = np.asarray(self._gaps, np.float64)
    return state

  def restore(self, state, duals_shape, table_shape):
    """Continues from `state()` of an earlier run, whose arrays must have
    these shapes (ValueError otherwise)."""
    duals = np.asarray(state["previous_duals"], np.float64)
    table = np.asarray(state["previous_table"], np.float64)
    if duals.shape != tuple(duals_shape) or table.shape != tuple(table_shape):
      raise ValueError(
          f"momentum state of duals {duals.shape} and table {table.shape} "
          f"does not fit the model's {tuple(duals_shape)} and "
          f"{tuple(table_shape)}")
    self._previous = (duals, table)
    self._last_dual = float(state["last_dual"])
    self._restart = bool(state["restart"])
    if self._auto:
      # A state saved without 'auto' (a fixed beta) gives no gaps: the
      # choice starts over from the next epochs.
      self._gaps = [float(g) for g in np.asarray(
          state.get("auto_gaps", ()), np.float64).reshape(-1)]
      if len(self._gaps) >= self._plain:  # (end_epoch stops there)
        self._beta = choose_auto_momentum(self._gaps[:self._plain],
                                          self._lock_free)


def auto_contraction(gaps, lock_free=False):
  """The plain epochs' contraction that momentum='auto' reads: the relative
  gap's ratio from one epoch to the next over the last two of the first
  AUTO_MOMENTUM_EPOCHS epochs (geometric mean), or 0 once converged. With
  `lock_free` (AUTO_MOMENTUM_EPOCHS_LOCK_FREE gaps) the smaller of that and
  the same over the epoch after: one epoch that timing made slow (or fast)
  enters one of the two, as a numerator or a denominator, and never the
  smaller one upwards."""
  spans = [(AUTO_MOMENTUM_EPOCHS - 3, AUTO_MOMENTUM_EPOCHS - 1)]
  if lock_free:
    spans.append((AUTO_MOMENTUM_EPOCHS - 2, AUTO_MOMENTUM_EPOCHS))
  rho = math.inf
  for first, last in spans:
    if not gaps[first] > 0.0:
      return 0.0
    rho = min(rho, math.sqrt(max(gaps[last], 0.0) / gaps[first]))
  return rho


def choose_auto_momentum(gaps, lock_free=False):
  """momentum='auto''s beta from the relative gaps of the first
  AUTO_MOMENTUM_EPOCHS plain epochs (`auto_contraction`: rho): 0 at rho <=
  AUTO_MOMENTUM_FLOOR (fast plain epochs, which a fixed beta would slow:
  it caps the rate near beta an epoch), AUTO_MOMENTUM_BETA at rho >=
  AUTO_MOMENTUM_FULL (slow ones), linear between, so that a contraction
  that noise moves a little moves beta a little. With `lock_free`, also at
  most rho itself (a beta above the plain contraction q slows the
  directions contracting at q to sqrt(q beta): a rho read too high must
  not buy that)."""
  rho = auto_contraction(gaps, lock_free)
  share = ((rho - AUTO_MOMENTUM_FLOOR) /
           (AUTO_MOMENTUM_FULL - AUTO_MOMENTUM_FLOOR))
  beta = AUTO_MOMENTUM_BETA * min(max(share, 0.0), 1.0)
  if lock_free:
    beta = min(beta, rho)
  return beta

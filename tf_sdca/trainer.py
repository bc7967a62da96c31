"""In-memory SDCA training: the whole data set resident, duals indexed by row.

`InMemorySdca` is the fastest way to train a linear model with tf_sdca when the
data fits in memory: no example-id hashing (the dual of row `i` lives at
`duals[i]`, float64, 8 bytes per example), weights kept as float64 numpy
arrays (no drift from float32 accumulation), the rows validated and packed
once per `fit` (`TfSdca>PackRows`: one contiguous record per row, ~192 bytes
for a Criteo row) and one `TfSdca>PackedSolve` call per epoch (or, where
nothing runs between the epochs, several per `TfSdca>PackedEpochs` call:
`tf_sdca.engine`), which visits
every row once in a random order (or as `visit_order` says) and returns the
new weights, the duals and the exact duality gap; with `num_threads > 1` that
many threads share the epoch lock-free (see `tf_sdca.pack_rows`). With
`batch_size < n` the rows are dealt into mini-batches handed to the
`TfSdca>Optimizer` op instead, which packs and solves each batch the same way.

Example:
  >>> import numpy as np
  >>> from tf_sdca.trainer import InMemorySdca
  >>> x = np.random.default_rng(0).normal(size=(1000, 5)).astype("float32")
  >>> y = (x[:, 0] > 0).astype("float32")
  >>> model = InMemorySdca(loss="logistic_loss", l2=1.0)
  >>> history = model.fit(labels=y, dense=x, epochs=20, tol=1e-6, verbose=0)
  >>> scores = model.predict(dense=x)
"""
import re
import time
import warnings

import numpy as np
import tensorflow as tf

from tf_sdca import engine
from tf_sdca import files
from tf_sdca import losses
from tf_sdca import options
from tf_sdca import second_order
from tf_sdca.engine import RowChunks  # pylint: disable=unused-import (API)
from tf_sdca.ops import sdca_ops

# A sparse table at most this many times larger than a batch's entries is
# passed whole (ids = arange): cheaper than finding the distinct ids.
_FULL_TABLE_FACTOR = 4
# Consecutive rows that stay together when rows are dealt into new batches.
_SHUFFLE_CHUNK = 64
# Rows scored at a time by decision_function.
_SCORE_CHUNK = 1 << 18
_ASDCA_BATCH_SIZE = options.ASDCA_BATCH_SIZE


def _check_finite(name, x):
  """Raises a ValueError naming `name` and the first non-finite entry of
  the float array `x` (scores of NaN or inf features would be NaN)."""
  if x.size and not np.isfinite(x.min() + x.max()):
    k = np.unravel_index(int(np.flatnonzero(~np.isfinite(x))[0]), x.shape)
    where = ", ".join(str(int(i)) for i in k)
    raise ValueError(f"{name}[{where}] = {x[k]} must be finite")


class InMemorySdca:
  """Linear model trained by SDCA on data held in memory.

  Features are an optional dense matrix `[n, d]` and an optional sparse part
  given as fixed-width ids `[n, k]` (e.g. 26 hashed categorical fields) or as
  CSR (`indptr`, `indices`, optional `values`), all sharing one weight table of
  `num_features` rows. The objective is that of `SdcaModel`:
  `sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1`.

  With a multiclass loss (`'softmax'`, `'multiclass_hinge'`) and
  `num_classes=K` the weights are `[rows, K]` (`sparse_weights`
  `[num_features, K]`, `dense_weights` `[d, K]`), the objective
  `sum_i s_i loss_i(W^T x_i) + l2/2 |W|^2 + l1 |W|_1`, the labels class ids
  in `[0, K)`, the duals `[n, K]`; each visit of a row solves its block of
  K duals exactly (g3doc/multiclass.md). The whole data set per epoch (no
  `batch_size`), on `num_threads` lock-free threads as for the binary
  losses, visiting orders 'permutation', 'uniform', 'cyclic', and for the
  multiclass hinge 'shrinking' (rows resting at alpha = 0 left out of
  passes: ~3.5x less training time on digits; one thread only, with more
  it is 'permutation').

  Example:
    >>> model = InMemorySdca(loss="softmax", num_classes=10, l2=1.0)
    >>> model.fit(labels=digit, dense=pixels, epochs=50, tol=1e-6)
    >>> model.predict(dense=pixels)          # [n, 10] probabilities
    >>> model.predict_classes(dense=pixels)  # [n] class ids

  Args:
    loss: a loss of `tf_sdca.losses`, by short name ('logistic') or the
      op's name ('logistic_loss').
    l1: L1 regularisation (>= 0).
    l2: L2 regularisation (> 0).
    visit_order: None (the default: 'shrinking' for the hinge, smooth
      hinge and multiclass hinge, 'adaptive' for the absolute deviation
      and Poisson, 'permutation' for the others and for mini-batches;
      'adaptive' for the logistic, squared, hinge and smooth hinge losses
      on arrays whose rows' squared norms spread widely, std / mean > 2,
      and for the logistic, squared and smooth hinge losses where l2 is
      weak for the rows (SDCA's bound max |x_i|^2 L / l2 above 25, 25
      and 100), `options.visit_order_for`; the order a fit took is
      `visit_order_used`); see `tf_sdca.sdca_optimizer`; or 'asdca': accelerated
      mini-batch SDCA (Shalev-Shwartz and Zhang 2013; `tf_sdca.asdca_solve`)
      for a smooth loss (logistic, squared, smooth hinge), one
      `TfSdca>AsdcaSolve` call per epoch on rows packed for one thread.
      The weights are W(alpha) of its duals (the history's duality gap
      certifies them, as for SDCA); the accelerated iterate it carries
      from epoch to epoch is `asdca_iterate` (shrunk weights: the sparse
      ones, then the dense ones, in one vector). Whole data set per epoch
      only (no `batch_size`).
    seed: seed of the visiting order and of the batch order.
    gamma: smooth-hinge smoothing.
    num_threads: threads solving each epoch (0 or 1: one). Packed rows:
      lock-free threads over one weight table (`tf_sdca.pack_rows`; ~0.7x
      the time per epoch with 2 threads on Criteo-shaped rows, results vary
      in the last bits between runs), at most one per 4096 rows and one
      per core; 3 or more merge the weights most rows share nearly every
      row, to converge in about the epochs of one thread, which may make an
      epoch slower than with 2 (not yet measured on more than 2 cores; a
      warning says so, and says when fewer threads than asked are used). Mini-batches
      use them to read each batch. The exact objective uses TensorFlow's
      intra-op threads.
    pack: deprecated and ignored: the rows are always packed once per `fit`
      (`tf_sdca.pack_rows`: a copy of the data, ~192 bytes per Criteo row of
      26 ids and 14 dense values). False (which read the arrays in place
      every epoch, ~1.5x slower) warns.
    num_classes: K (>= 2) for a multiclass loss; None (or 1) for the
      others.
    average_from: None, or an epoch T0 >= 0: output averaging (the
      reference's SDCA with averaging, over epochs). `fit` then leaves the
      model at the mean of the iterates after epochs T0, T0 + 1, ..., T (the
      weights and the duals alike: the weights stay W(mean alpha), since
      they are linear in the duals, and the mean duals are feasible), so
      that `predict` uses the averaged weights; `last_iterate` keeps the
      last epoch's (`sparse_weights`, `dense_weights`, `duals`). With
      T0 = T the average is the last iterate. The history's `loss` and
      `duality_gap` are then those of the average (`last_loss`,
      `last_duality_gap`: the last iterate's). `average_count` is the
      number of iterates in the mean. A later `fit` with `initial_epoch=0`
      starts from the average; one that resumes (`initial_epoch > 0`, with
      `last_iterate` and `average_count > 0` as a finished `fit` left them,
      or as restored from a checkpoint) starts from the last iterate and
      continues the same mean, so that `fit(epochs=5)` then
      `fit(epochs=10, initial_epoch=5)` ends where `fit(epochs=10)` does.
      During `fit`, `running_average()` gives the mean so far (for
      checkpoints).
    asdca_batch_size: rows per ASDCA step m (>= 1; visit_order 'asdca').
      Each epoch deals a fresh permutation of the rows into n/m batches.
    asdca_theta: ASDCA's theta in (0, 1], or None for the paper's
      1/4 min{1, sqrt(k/m), k, k^(2/3)/m^(1/3)}, k = l2 gamma_loss /
      max_i s_i |x_i|^2 (gamma_loss = 1 / sup loss'': 4 logistic, 1
      squared, gamma smooth hinge), which provably converges but, on
      ill-conditioned data (small k), slowly: a larger theta can be much
      faster or diverge (g3doc/benchmarks.md). The theta used is
      `asdca_theta_used` after `fit`.
    momentum: None (the default: 'auto' where it applies, whole epochs in
      the 'permutation', 'uniform', 'shrinking' or 'adaptive' order without
      'asdca' or `average_from`, else off), beta in [0, 1) (0: off) or
      'auto' (also `keras.LinearModel(momentum=)` and `tf-sdca train
      --momentum`): each epoch after the first starts from the last two
      epochs' points extrapolated, alpha_r + beta (alpha_r - alpha_{r-1}),
      and the weights alike (they are linear in the duals, so they stay
      W(alpha)), with beta
      capped so that every dual stays in its loss's domain
      (`losses.extrapolation_limit`); an epoch whose dual objective fell
      restarts it (the next epoch starts at its own point). The history's gap
      and the model are always an epoch's own point, never the extrapolated
      one, so the certificate holds. On weakly regularised rows it cuts the
      epochs to a small gap (200k Criteo-shaped rows, logistic, l2 = 1, beta =
      0.5: 15 / 21 epochs to a relative gap of 1e-4 / 1e-6 against 22 / 35;
      about half on the real data sets in g3doc/trainer.md); where plain
      epochs already converge fast (strong regularisation) it can cost a few
      epochs. A given beta or 'auto' needs the whole data set per epoch
      (no `batch_size`), and not 'asdca' or `average_from`. A `fit` with
      `initial_epoch > 0` continues
      the extrapolation of the last `fit` (`momentum_state`; checkpoints save
      `current_momentum_state()`), so that `fit(epochs=5)` then
      `fit(epochs=10, initial_epoch=5)` ends where `fit(epochs=10)` does; from
      epoch 0 it starts afresh. 'auto': the first 4 epochs plain; over the
      last two of them the relative gap's ratio from one epoch to the next
      (geometric mean), rho, chooses beta: 0 at rho <= 0.15 (fast epochs,
      which a fixed beta would slow: it caps the rate near beta an epoch;
      the plain epochs go on unchanged), 0.5 at rho >= 0.35 (slow ones,
      which extrapolation speeds up), linear between; with num_threads > 1
      the first 5 epochs plain, rho the smaller of that mean and the one an
      epoch later, and beta at most rho (timing noise of lock-free threads
      must not raise it); the beta chosen is `momentum_used` after `fit`
      (g3doc/trainer.md). With visit_order
      'cyclic' 'auto' is 0 (extrapolation slowed it). The
      default is 'auto' because on every problem measured it took at most
      three epochs more than the better of plain and 0.5 and never more
      than plain, and across seeds and 1-8 threads it never ended a fit
      above 1.5x plain's gap (200k Criteo-shaped rows at l2 = 10, 12
      epochs: 0.36-1.15x, where 0.5 ends 70-330x; g3doc/trainer.md).
    hinge_step: the multiclass hinge's block step: 'projection' (the
      default: the exact maximiser of the row's block), or the reference's
      sequential dual ascent along one direction, 'steepest_ascent'
      (block-coordinate Frank-Wolfe) or 'near_max_gain' (two classes at a
      time); all reach the same optimum, the projection in the fewest
      epochs (g3doc/multiclass.md).
    second_order: 'auto' (the default), 'on' or 'off': the exact block
      step after each epoch's passes, for the logistic, squared, Poisson
      and softmax losses with l1 = 0, at most 1,024 weights (d K) and the
      data given as arrays: Newton's method on the primal maximises the
      dual over all rows at once, then every dual is set to -phi'(w.x_i)
      and the weights to X^T (s alpha) / l2, so the epoch's gap certifies
      the pair as any epoch's (`tf_sdca.second_order`, g3doc/losses.md).
      'auto' takes it where SDCA's bound, max_i s_i |x_i|^2 L / l2 passes
      per factor e (L: the loss's largest curvature, Poisson's the largest
      count), exceeds 1,000: features in natural units at a weak l2, where
      300 plain epochs ended 0.8-7.6 |P*| above the optimum (Poisson on
      doctor visits, raw breast_cancer, raw wine at l2 = 1) and the step
      reaches a gap of ~1e-15 in the first epoch. `second_order_used` says
      whether the last `fit` took it; with it and momentum None no
      extrapolation is used.
  """

  def __init__(self, loss="logistic_loss", l1=0.0, l2=1.0,
               visit_order=None, seed=0, gamma=1.0, num_threads=0,
               pack=True, num_classes=None, average_from=None,
               asdca_batch_size=_ASDCA_BATCH_SIZE, asdca_theta=None,
               hinge_step="projection", momentum=None, second_order="auto"):
    loss, num_classes, given = options.validate(
        loss, dict(l1=l1, l2=l2, visit_order=visit_order, seed=seed,
                   gamma=gamma, num_threads=num_threads,
                   average_from=average_from,
                   asdca_batch_size=asdca_batch_size,
                   asdca_theta=asdca_theta, hinge_step=hinge_step,
                   momentum=momentum, second_order=second_order),
        options.IN_MEMORY,
        options.IN_MEMORY_SDCA, num_classes)
    self.hinge_step = hinge_step
    self._asdca = visit_order == "asdca"
    self.asdca_batch_size = (given["asdca_batch_size"] if self._asdca
                             else None)
    self.asdca_theta = given["asdca_theta"]
    self.asdca_theta_used = None
    if self._asdca and given["num_threads"] > 1:
      warnings.warn(
          f"num_threads={num_threads}: visit_order 'asdca' runs on one "
          "thread (its batches' margins are not split over threads yet)",
          UserWarning, stacklevel=2)
    self.loss = loss
    # K of a multiclass loss; 1 for the others (weights and duals then have
    # no class axis).
    self.num_classes = num_classes
    self._multiclass = losses.is_multiclass(loss)
    self.l1 = given["l1"]
    self.l2 = given["l2"]
    # The order before seeing data; a fit of arrays may take 'adaptive'
    # for rows whose norms spread widely or a weak l2 (`visit_order_used`).
    self.visit_order = options.visit_order_for(loss, visit_order)
    self._visit_order_given = visit_order
    self.visit_order_used = None  # the last fit's order
    # Mini-batches (batch_size < rows) stream: their default order is
    # 'permutation'.
    self._batch_order = options.visit_order_for(loss, visit_order,
                                                options.STREAMED)
    self.seed = given["seed"]
    self.gamma = given["gamma"]
    self.num_threads = given["num_threads"]
    self.average_from = given["average_from"]
    self.momentum = given["momentum"]
    self.second_order = given["second_order"]
    # Whether the last fit took the exact block step (None: no fit yet).
    self.second_order_used = None
    # The extrapolation's state after the last fit (or as a checkpoint
    # restored it): a fit with initial_epoch > 0 continues it.
    self.momentum_state = None
    self.momentum_used = None  # the beta of the last fit (None: no fit yet)
    self._extrapolation = None
    self._fitting = False   # inside fit's epochs (its callback sees them)
    self.last_iterate = None
    self.average_count = 0  # iterates in the mean (average_from)
    self._average = None    # the running mean during fit
    if not pack:
      warnings.warn(
          "InMemorySdca(pack=False) is deprecated and ignored: the rows are "
          "always packed (one engine; the in-place path was ~1.5x slower per "
          "epoch)", DeprecationWarning, stacklevel=2)
    # The weights (float64, unshrunk), the duals by row and ASDCA's iterate:
    # the engine's state, shown as this model's attributes.
    self._state = engine.State(self.num_classes, self._multiclass)

  sparse_weights = property(
      lambda self: self._state.sparse_weights,
      lambda self, w: setattr(self._state, "sparse_weights", w),
      doc="float64 `[num_features]` (`[num_features, K]`), unshrunk.")
  dense_weights = property(
      lambda self: self._state.dense_weights,
      lambda self, w: setattr(self._state, "dense_weights", w),
      doc="float64 `[d]` (`[d, K]`), unshrunk.")
  duals = property(
      lambda self: self._state.duals,
      lambda self, d: setattr(self._state, "duals", d),
      doc="float64 `[n]` (`[n, K]`), the dual of each row.")
  asdca_iterate = property(
      lambda self: self._state.asdca_iterate,
      lambda self, v: setattr(self._state, "asdca_iterate", v),
      doc="ASDCA's accelerated iterate, float64 `[num_features + d]`, "
      "shrunk.")

  def _config(self, order=None):
    """The engine's view of this model's options (in visit `order`;
    None: `visit_order`)."""
    return engine.Config(self.loss, self.l1, self.l2, self.gamma, self.seed,
                         order or self.visit_order, self.hinge_step,
                         self.num_classes,
                         self.asdca_batch_size, self.asdca_theta)

  # --------------------------------------------------------------- data
  def _batches(self, n, csr, batch_size, num_features, order=None):
    """Yields per batch: (rows, op-ready sparse arrays), one batch at a time
    (a whole epoch's arrays would take 24 bytes per non-zero).

    Args:
      n: number of rows.
      csr: (indptr, indices, values) or None.
      batch_size: rows per batch.
      num_features: rows of the sparse weight table.
      order: None for consecutive fixed batches (rows are slices), else a
        permutation of the rows dealt into batches (rows are index arrays).
    """
    for start in range(0, n, batch_size):
      stop = min(n, start + batch_size)
      rows = slice(start, stop) if order is None else order[start:stop]
      sparse = None
      if csr is not None:
        indptr, indices, values = csr
        if order is None:
          lengths = np.diff(indptr[start:stop + 1])
          pos = slice(indptr[start], indptr[stop])
        else:
          # Entries of the chosen rows: row r's run starts at indptr[r].
          first = indptr[rows]
          lengths = indptr[rows + 1] - first
          pos = (np.repeat(first - np.cumsum(lengths) + lengths, lengths) +
                 np.arange(lengths.sum()))
        ids = indices[pos].astype(np.int64, copy=False)
        ex = np.repeat(np.arange(stop - start, dtype=np.int64), lengths)
        if num_features <= _FULL_TABLE_FACTOR * max(1, ids.size):
          uniq = None  # the whole table
        else:
          uniq = np.unique(ids)
        sparse = (ex, ids, None if values is None else values[pos], uniq)
      yield rows, sparse

  @staticmethod
  def _dealt_order(n, rng):
    """A random order of the rows that keeps chunks of `_SHUFFLE_CHUNK`
    consecutive rows together (cheap to gather, and as good for SDCA as a
    full permutation)."""
    chunks = rng.permutation(-(-n // _SHUFFLE_CHUNK))
    order = (chunks[:, None] * _SHUFFLE_CHUNK +
             np.arange(_SHUFFLE_CHUNK)[None, :]).ravel()
    return order[order < n]

  # ------------------------------------------------------------ training
  def fit(self, labels=None, dense=None, ids=None, indptr=None, indices=None,
          values=None, num_features=None, example_weights=None, epochs=10,
          batch_size=None, tol=None, verbose=1, shuffle=True,
          initial_epoch=0, callback=None, rows=None, gap_every=1):
    """Trains for up to `epochs` passes; stops early when the relative
    duality gap falls below `tol`.

    Args:
      labels: `[n]` labels.
      dense: optional float `[n, d]` dense features.
      ids: optional int `[n, k]` sparse feature ids (k per row, value 1).
      indptr, indices, values: optional CSR sparse features instead of `ids`.
      num_features: rows of the sparse weight table (default: max id + 1).
      example_weights: optional `[n]` weights (default 1).
      epochs: maximum number of passes.
      batch_size: rows per op call. Default: all rows, packed once and one
        `TfSdca>PackedSolve` call per epoch (the fast path; a copy of the
        data as packed records). Smaller values deal the rows into
        mini-batches for `TfSdca>Optimizer`.
      tol: stop when the relative duality gap (gap / primal) is below it.
      verbose: 1 shows a Keras progress bar per epoch, 0 is silent.
      initial_epoch: the epoch to start at (resuming: set `duals` and the
        weights first, of these rows' shapes; epochs count from 0). At 0, a
        state of other shapes (an earlier fit on other rows) is dropped:
        the fit starts from zero.
      callback: called as `callback(epoch, history)` after each epoch (e.g.
        to checkpoint).
      shuffle: with several batches, deal the rows (in chunks of 64) into
        new batches every epoch; False keeps fixed consecutive batches,
        visited in a random order, which converges much more slowly.
      rows: instead of the data arguments above, a `RowChunks`: the data
        set chunk by chunk, packed one chunk at a time, so that its whole
        arrays are never held beside the packed records (what `tf-sdca
        train` does with its cache). The same rows give the same training
        as the arrays whole in the same visit_order (None may take
        'adaptive' by the rows' norms on arrays, never on chunks). Not
        with mini-batches. Or a `RowParts`: the
        rows in parts packed one at a time every epoch (bounded memory; the
        same optimum, another order of the steps: `engine.PartedProblem`).
      gap_every: evaluate the exact objective and duality gap after every
        `gap_every`-th epoch and after the last one (0: the last one only);
        the other epochs' `loss` and `duality_gap` in the history are NaN.
        That evaluation is a pass over the rows (with one training thread
        on 2 or more cores it runs beside the next epoch's training, the
        results unchanged: `tf_sdca.engine.run_epochs`): with
        `gap_every=0` a fit of k epochs without `tol` does k epochs and one
        evaluation instead of k of each. `tol` is checked on every epoch
        whatever `gap_every` is: the fit stops at the epoch it would stop
        at evaluating every one, certified by its gap. Where its epochs
        run several per op call (one thread, small data: the engine's
        `_FusedEpochs`) an epoch `gap_every` skips is evaluated only where
        the next epoch's dual objective does not already show its gap
        above `tol` (weak duality), else every epoch is.
        Every epoch is still evaluated where something reads it:
        `verbose`, a `callback`, averaging, momentum while it
        extrapolates ('auto' reads the first 4 epochs, 5 with threads;
        with a beta > 0 chosen, fused epochs read only each epoch's dual
        objective, O(n + d)). The weights and duals are the same whatever
        `gap_every` is.

    Returns:
      A dict of per-epoch lists: `loss` (regularised objective / total weight),
      `duality_gap` (relative, >= 0; 0 when below float64 rounding),
      `rows_per_sec` (training time only; the first epoch's also counts
      validating and packing the data).

    Raises:
      ValueError: on inconsistent shapes (or an `indptr` that decreases or
        runs past `indices`), `epochs`, `initial_epoch` or `gap_every` not
        an integer >= 0, or `batch_size` not None or an integer >= 1.
      tf.errors.InvalidArgumentError: on bad values (NaN, bad labels, ...),
        or when a step's exact result is out of range (non-finite).
      FloatingPointError: when an epoch's duality gap is negative beyond
        rounding or not finite (a bug, never convergence).
    """
    # The first epoch's time includes preparing (and packing) the data.
    prepare_start = time.perf_counter()
    tol = options.check("tol", tol)
    for name, count in (("epochs", epochs), ("initial_epoch", initial_epoch),
                        ("gap_every", gap_every)):
      if not options.integer_at_least(0)(count):
        raise ValueError(f"{name} must be an integer >= 0, got {count!r}")
    if batch_size is not None and not options.integer_at_least(1)(batch_size):
      # (-3 trained nothing and returned; 0 meant all rows unasked.)
      raise ValueError(f"batch_size must be None (all rows) or an integer "
                       f">= 1, got {batch_size!r}")
    from_arrays = rows is None
    order = self.visit_order
    if rows is None:
      if labels is None:
        raise ValueError("give labels and features, or rows=RowChunks(...)")
      n, csr, dense, labels, weights = engine.normalise(
          labels, dense, ids, indptr, indices, values, example_weights)
      # (Both ended in a ZeroDivisionError after the first epoch: the
      # objective is a mean over the rows' weights.)
      if n == 0:
        raise ValueError("no rows to train on: labels is empty")
      bad = np.flatnonzero(~(np.isfinite(weights) & (weights >= 0.0)))
      if bad.size:
        raise ValueError(f"example_weights[{bad[0]}] = {weights[bad[0]]} "
                         "must be finite and >= 0")
      if not weights.sum(dtype=np.float64) > 0.0:
        raise ValueError("example_weights are all 0: no row counts in the "
                         "objective (a mean over the rows' weights)")
      if csr is not None and num_features is None:
        num_features = int(csr[1].max()) + 1 if csr[1].size else 1
      rows = RowChunks([(csr, dense, labels, weights)], n,
                       0 if csr is None else int(csr[0][-1]),
                       0 if dense is None else dense.shape[1],
                       num_features if csr is not None else None,
                       csr is not None and csr[2] is not None)
      has_dense = dense is not None
    else:
      if any(a is not None for a in (labels, dense, ids, indptr, indices,
                                     values, num_features, example_weights)):
        raise ValueError("give either rows=RowChunks(...) or the data "
                         "arrays, not both")
      n = rows.num_examples
      if batch_size is not None and int(batch_size) < n:
        raise ValueError(f"batch_size={batch_size} < {n} rows: mini-batches "
                         "need the data arrays, not rows=RowChunks(...)")
      num_features = rows.num_features
      has_dense = rows.dense_dim > 0
    average = None
    if self.average_from is not None:
      average = engine.IterateAverage(self._state)
      if (initial_epoch > 0 and self.average_count > 0 and
          self.last_iterate is not None):
        # Resuming: the model holds the mean of `average_count` iterates;
        # training goes on from the last one.
        average.resume(self.average_count)
        self.sparse_weights = self.last_iterate["sparse_weights"]
        self.dense_weights = self.last_iterate["dense_weights"]
        self.duals = self.last_iterate["duals"]
        self._state.table = None
    self._state.shape(n, num_features, rows.dense_dim if has_dense else 0,
                      resuming=initial_epoch > 0)
    if from_arrays and initial_epoch == 0 and not self._asdca:
      self._pair_with_rows(csr, dense, labels, weights, num_features)

    batch_size = int(batch_size or n)
    one_call = batch_size >= n
    if self._asdca and not one_call:
      raise ValueError(f"batch_size={batch_size} < {n} rows: visit_order "
                       "'asdca' trains on the whole data set per epoch "
                       "(its own mini-batches are asdca_batch_size)")
    if self._multiclass and not one_call:
      raise ValueError(f"batch_size={batch_size} < {n} rows: {self.loss} "
                       "trains on the whole data set per epoch (no "
                       "mini-batches)")
    if self.momentum and not one_call:
      raise ValueError(f"batch_size={batch_size} < {n} rows: momentum "
                       "extrapolates whole epochs (no mini-batches)")
    block_step = None
    if from_arrays:
      block_step = second_order.block_step_for(
          self.second_order, self.loss, self.l1, self.l2, n, csr, dense,
          num_features, labels, weights, self.num_classes)
    self.second_order_used = block_step is not None

    def momentum_in(order):
      momentum = options.momentum_for(self.momentum, order,
                                      one_call, self._asdca,
                                      self.average_from is not None)
      return second_order.momentum_with(block_step, self.momentum, momentum)

    # Packed also for mini-batches: the exact objective after each epoch is
    # a PackedSolve call without passes.
    threads = ((1 if self._asdca else
                engine.choose_threads(self.num_threads, n, self.num_classes))
               if one_call else 1)
    # The loss's default order may give way to 'adaptive' by the rows'
    # norms, which packing the arrays reads (`engine.row_norms`).
    by_norms = (from_arrays and self._visit_order_given is None and
                losses.op_name(self.loss) in options.NORM_SPREAD_LOSSES)
    if isinstance(rows, engine.RowParts):
      if order not in engine.PARTED_VISIT_ORDERS:
        raise ValueError(
            f"visit_order={order!r} needs all rows packed at once "
            f"(rows in {rows.num_parts} parts are packed one part at a "
            f"time); use one of {engine.PARTED_VISIT_ORDERS}")
      problem = engine.PartedProblem(rows, self.loss, self.gamma, threads,
                                     self.num_classes,
                                     keep_labels=bool(momentum_in(order)))
    else:
      # (Arrays' labels are kept without a copy.)
      problem = engine.Problem(
          rows, self.loss, self.gamma, threads, self.num_classes,
          keep_labels=from_arrays or bool(momentum_in(order)),
          norms=by_norms)
    if by_norms:
      order = options.visit_order_for(self.loss, None,
                                      row_norms=problem.row_norms,
                                      l2=self.l2, gamma=self.gamma)
    self.visit_order_used = order
    momentum = momentum_in(order)
    extrapolate = None
    if momentum:
      state = self._state
      extrapolate = engine.Extrapolation(
          momentum, self.loss, problem.labels,
          lambda: (state.duals, state.weight_table()), state.set_point,
          lock_free=problem.num_threads > 1)
      if initial_epoch > 0 and self.momentum_state is not None:
        # Resuming: the extrapolation goes on as an uninterrupted fit's.
        extrapolate.restore(self.momentum_state, self.duals.shape,
                            state.weight_table().shape)
    self._extrapolation = extrapolate
    config = self._config(order)
    train_epoch = None
    if self._asdca:
      def train_epoch(epoch, rng, bar, start):
        del rng, bar, start
        self.asdca_theta_used = self._state.asdca_over(problem, epoch,
                                                       config)
    elif not one_call:
      fixed = None if shuffle else list(self._batches(
          n, csr, batch_size, num_features or 0))

      def train_epoch(epoch, rng, bar, start):
        if fixed is None:
          # Rows dealt into new batches every epoch: SDCA over fixed batches
          # in a shuffled order converged orders of magnitude slower (20k
          # Criteo-shaped rows, 4 batches: relative gap 2e-3 after 60 epochs
          # against 4e-11 with one batch or reshuffled rows).
          batches = self._batches(n, csr, batch_size, num_features or 0,
                                  self._dealt_order(n, rng))
        else:
          batches = [fixed[b] for b in rng.permutation(len(fixed))]
        done = 0
        for k, (rows, sparse) in enumerate(batches):
          self._step(rows, sparse, dense, labels, weights, epoch, k)
          files.kill_point(f"epoch-{epoch + 1}-batch-{k + 1}")
          done += (rows.stop - rows.start if isinstance(rows, slice) else
                   len(rows))
          if bar is not None and done < n:
            rate = done / max(time.perf_counter() - start, 1e-9)
            bar.update(done, values=[("rows/s", rate)])

    def asdca_error(error):
      return FloatingPointError(
          f"ASDCA with theta = {self.asdca_theta_used:.4g} diverged "
          f"({error}); lower asdca_theta (None: the paper's, which "
          "converges)")

    def asdca_slow(text):
      return text + (f". ASDCA's theta = {self.asdca_theta_used:.3g} is "
                     "small when some |x_i|^2 is large: a larger "
                     "asdca_theta can be much faster (or diverge; "
                     "g3doc/trainer.md)")

    self._average = average
    self._fitting = True
    try:
      history = engine.run_epochs(
          self._state, problem, config, n, epochs, initial_epoch, tol,
          verbose, callback, train_epoch, extrapolate, average,
          self.average_from, prepare_start,
          describe_slow=asdca_slow if self._asdca else None,
          explain_error=asdca_error if self._asdca else None,
          gap_every=gap_every, second_order=block_step)
    finally:
      self._fitting = False
    self._average = None
    self.momentum_used = (extrapolate.beta if extrapolate is not None
                          else 0.0)
    if extrapolate is not None:
      self.momentum_state = extrapolate.state()
    self._extrapolation = None
    if average is not None and average.count:
      # The last iterate is kept in `last_iterate`; the mean becomes the
      # model's weights and duals.
      mean = average.split()
      self.last_iterate = dict(sparse_weights=self.sparse_weights,
                               dense_weights=self.dense_weights,
                               duals=self.duals)
      self.sparse_weights = mean["sparse_weights"]
      self.dense_weights = mean["dense_weights"]
      self.duals = mean["duals"]
      self.average_count = average.count
      self._state.table = None
    return history

  def state_dict(self):
    """The training state as a flat dict of numpy arrays, for a checkpoint
    (during `fit`, from its callback, or after it): `sparse_weights`,
    `dense_weights`, `duals`; with averaging under way the mean as those
    and the last iterate as `last_*` with `average_count`; ASDCA's
    `asdca_iterate`; the extrapolation's `momentum_*`. `load_state_dict`
    takes it back, so that a fit resumed from it goes on bit for bit
    (under visit_order 'shrinking', the hinge losses' default, from the same
    weights and duals with every row back in the pass: the shrunk rows are
    not part of the state, and the path to the optimum differs)."""
    last = dict(sparse_weights=self.sparse_weights,
                dense_weights=self.dense_weights, duals=self.duals)
    mean = self.running_average()
    if mean is None and self.average_count and self.last_iterate:
      # After fit: the model is the mean, `last_iterate` the last iterate.
      mean = dict(last, count=self.average_count)
      last = self.last_iterate
    if mean is None:  # no averaging, or not yet at epoch T0
      saved = last
    else:  # the mean is the model; the last iterate resumes training
      saved = dict(sparse_weights=mean["sparse_weights"],
                   dense_weights=mean["dense_weights"], duals=mean["duals"],
                   average_count=np.int64(mean["count"]),
                   **{"last_" + key: value for key, value in last.items()})
    if self.asdca_iterate is not None:
      saved["asdca_iterate"] = self.asdca_iterate
    # During fit (its callback) the running extrapolation's, if any; after
    # it, the one the fit left.
    state = (self.current_momentum_state() if self._fitting else
             self.momentum_state)
    if state is not None:  # momentum: what the next epoch extrapolates
      saved.update({"momentum_" + key: value for key, value in state.items()})
    # (A part the data lacks, sparse or dense, has no array.)
    return {key: value for key, value in saved.items() if value is not None}

  def load_state_dict(self, state, num_examples, num_features, dense_dim):
    """Restores `state_dict()`'s dict (or a checkpoint `np.load` read) for
    data of `num_examples` rows, `num_features` sparse weights (None: no
    sparse part) and `dense_dim` dense columns (0: none); resume with
    `fit(initial_epoch=...)`.

    Raises:
      ValueError: naming an array that is missing, has the wrong shape,
        holds no real numbers or a value that is not finite, or an
        `average_count` that is not a whole number >= 0.

    What the state does not hold is cleared, as a model that trained it
    would not have it: the extrapolation's point (`momentum_state`),
    ASDCA's iterate and the running average (`average_count` 0,
    `last_iterate` None), so that nothing of an earlier fit of this model
    mixes with the state restored.
    """
    classes = (self.num_classes,) if self._multiclass else ()
    shapes = dict(duals=(num_examples,) + classes)
    if num_features is not None:
      shapes["sparse_weights"] = (num_features,) + classes
    if dense_dim:
      shapes["dense_weights"] = (dense_dim,) + classes
    count = options.whole_count(state.get("average_count", 0),
                                "average_count")
    averaged = count > 0
    if averaged:
      shapes.update({"last_" + key: shape for key, shape in
                     list(shapes.items())})
    def checked(key, shape=None, finite=True):
      """state[key] as an array of real numbers (of `shape` where given,
      finite where `finite`), or a ValueError naming it."""
      array = np.asarray(state[key])
      if array.dtype.kind not in "biuf":
        raise ValueError(f"{key} must hold real numbers, got a "
                         f"{array.dtype} array")
      if shape is not None and array.shape != shape:
        raise ValueError(f"{key} has shape {array.shape}, the data needs "
                         f"{shape}")
      bad = np.argwhere(~np.isfinite(array) if finite else np.isnan(array))
      if bad.size:
        bad = bad[0]
        raise ValueError(f"{key}[{', '.join(str(int(i)) for i in bad)}] = "
                         f"{float(array[tuple(bad)])!r} is not finite")
      return array

    arrays = {}
    for key, shape in shapes.items():
      if key not in state or state[key] is None:
        raise ValueError(f"{key} is missing; the data needs it, of shape "
                         f"{shape}")
      arrays[key] = checked(key, shape)
    # ASDCA's iterate (a wrong one was dropped, and the resumed fit went
    # another way) and the extrapolation's state (NaNs were blamed on the
    # data, other types on numpy's conversions).
    if state.get("asdca_iterate") is not None:
      checked("asdca_iterate", ((num_features or 0) + dense_dim,))
    for key, shape in (("momentum_previous_duals", None),
                       ("momentum_previous_table", None),
                       ("momentum_last_dual", ()), ("momentum_restart", ()),
                       ("momentum_auto_gaps", None)):
      if key in state:
        array = checked(key, shape, finite=key != "momentum_last_dual")
        if key == "momentum_auto_gaps" and array.ndim != 1:
          raise ValueError(f"{key} has shape {array.shape}: a list of gaps")
    self.sparse_weights = arrays.get("sparse_weights")
    self.dense_weights = arrays.get("dense_weights")
    self.duals = arrays["duals"]
    # ASDCA's accelerated iterate goes on where the state holds one.
    self.asdca_iterate = state.get("asdca_iterate")
    self.momentum_state = None
    if "momentum_previous_duals" in state:
      # The extrapolation goes on as in an uninterrupted run (the fit
      # checks the shapes).
      self.momentum_state = {key: state["momentum_" + key] for key in (
          "previous_duals", "previous_table", "last_dual", "restart",
          "auto_gaps") if "momentum_" + key in state}
    self.last_iterate, self.average_count = None, 0
    if averaged:  # the state's weights are the mean so far
      self.last_iterate = {key: arrays.get("last_" + key) for key in
                           ("sparse_weights", "dense_weights", "duals")}
      self.average_count = count

  def current_momentum_state(self):
    """During a `fit` with `momentum`: what the next epoch's extrapolation
    needs (`Extrapolation.state()`: the previous epoch's duals and weight
    table, the last dual objective, the restart flag), else None. A
    checkpoint written from `fit`'s callback saves it so that a resumed
    `fit` (`momentum_state` set, `initial_epoch > 0`) continues bit for bit
    as an uninterrupted one; after `fit` it is `momentum_state`."""
    if self._extrapolation is None:
      return None
    return self._extrapolation.state()

  def running_average(self):
    """During a `fit` with `average_from`: the mean of the iterates so far
    as a dict (`sparse_weights`, `dense_weights`, `duals`, `count`), or
    None before the first iterate counts or outside `fit`. A checkpoint
    written from `fit`'s callback saves it beside the last iterate (the
    model's weights then) to resume the mean."""
    if self._average is None or not self._average.count:
      return None
    return self._average.split()

  def _step(self, rows, sparse, dense, labels, weights, epoch, index):
    sp_args = ([], [], [], [], [])
    if sparse is not None:
      ex, ids, vals, uniq = sparse
      if uniq is None:
        table_ids = tf.range(self.sparse_weights.shape[0], dtype=tf.int64)
        table_w = self.sparse_weights.astype(np.float32)
      else:
        table_ids = uniq
        table_w = self.sparse_weights[uniq].astype(np.float32)
      sp_args = ([ex], [ids], [] if vals is None else [vals], [table_ids],
                 [table_w])
    dense_args = ([] if dense is None else [dense[rows]],
                  [] if dense is None else
                  [self.dense_weights.astype(np.float32)])
    state = np.zeros((len(labels[rows]), 4), np.float32)
    state[:, 0] = self.duals[rows]
    state[:, 3] = weights[rows]
    try:
      state, d_sparse, d_dense = sdca_ops.sdca_optimizer(
          sp_args[0], sp_args[1], sp_args[2], dense_args[0], weights[rows],
          labels[rows], sp_args[3], sp_args[4], dense_args[1],
          state, loss_type=self.loss, l1=self.l1, l2=self.l2,
          visit_order=self._batch_order, seed=self.seed + epoch,
          gamma=self.gamma, num_threads=self.num_threads,
          # The epoch's k-th batch: new rows (zero duals) in equal-sized
          # batches would otherwise all be visited in one order.
          call_index=index)
    except tf.errors.InvalidArgumentError as error:
      raise tf.errors.InvalidArgumentError(
          error.node_def, error.op, _in_user_rows(
              error.message, rows, sparse,
              0 if dense is None else dense.shape[1], epoch, index)) from None
    self.duals[rows] = state.numpy()[:, 0]
    if sparse is not None:
      if sparse[3] is None:
        self.sparse_weights += d_sparse[0].numpy()
      else:
        self.sparse_weights[sparse[3]] += d_sparse[0].numpy()
    if dense is not None:
      self.dense_weights += d_dense[0].numpy()

  # ---------------------------------------------------------- evaluation
  def _shrunk(self, w):
    if w is None:
      return None
    return losses.shrink_l1(w, self.l1, self.l2)

  def decision_function(self, dense=None, ids=None, indptr=None, indices=None,
                        values=None):
    """Returns `w.x` per row (float64); `[n, K]` scores `W^T x` for a
    multiclass loss."""
    if self.dense_weights is None and self.sparse_weights is None:
      raise ValueError("this model has no weights yet: fit it (or set its "
                       "weights) before scoring rows")
    if dense is None and ids is None and indptr is None:
      raise ValueError("give the rows' features: dense, ids, or indptr / "
                       "indices (/ values), as fit took them")
    n = (np.shape(dense)[0] if dense is not None else
         (np.asarray(ids).shape[0] if ids is not None else len(indptr) - 1))
    k = self.num_classes if self._multiclass else None
    z = np.zeros(n if k is None else (n, k))
    if dense is not None:
      dense = np.asarray(dense, dtype=np.float32)
      if dense.ndim == 1:
        dense = dense[:, None]
      width = (0 if self.dense_weights is None else
               self.dense_weights.shape[0])
      if dense.ndim != 2 or dense.shape[1] != width:
        raise ValueError(f"dense has shape {dense.shape}; this model's "
                         f"dense weights take [n, {width}]")
      _check_finite("dense", dense)
      z += dense.astype(np.float64) @ self._shrunk(self.dense_weights)
    csr = engine.csr_arrays(n, ids, indptr, indices, values)
    if csr is not None:
      if self.sparse_weights is None:
        raise ValueError("this model has no sparse weights: it was fitted "
                         "without ids")
      engine.check_sparse_ids(csr, self.sparse_weights.shape[0])
      if csr[2] is not None:
        _check_finite("values", csr[2])
      ws = self._shrunk(self.sparse_weights)
      indptr_, indices_, values_ = csr
      # In chunks of rows: whole-data temporaries would take 16 bytes per
      # non-zero (4 GB for 10M Criteo rows).
      for start in range(0, n, _SCORE_CHUNK):
        stop = min(n, start + _SCORE_CHUNK)
        lo, hi = indptr_[start], indptr_[stop]
        contrib = ws[indices_[lo:hi]]  # [nnz] or [nnz, K]
        if values_ is not None:
          contrib = contrib * (values_[lo:hi] if k is None else
                               values_[lo:hi, None])
        lengths = np.diff(indptr_[start:stop + 1])
        if k is None:
          rows = np.repeat(np.arange(stop - start), lengths)
          z[start:stop] += np.bincount(rows, weights=contrib,
                                       minlength=stop - start)
        else:  # sums over each non-empty row's run of entries
          full = np.flatnonzero(lengths)
          if full.size:
            z[start + full] += np.add.reduceat(
                contrib, indptr_[start + full] - lo, axis=0)
    return z

  def _pair_with_rows(self, csr, dense, labels, weights, num_features):
    """A fit from epoch 0 goes on from the model's state, which another fit
    on other rows, labels, example weights or l2 of the same shapes left
    (`engine.rows_table`): its duals outside these labels' domains start
    from 0 and its weights become those the duals give on these rows
    where they are not (the same weights, bit for bit, on the same rows).
    Before, such a fit converged to another problem's point (200 rows'
    weights set to 0: 0.47 from the optimum, stalled at a gap of 0.17) or
    the op refused the duals."""
    state = self._state
    duals = engine.project_duals(state.duals, self.loss, labels)
    table = state.weight_table()
    made = engine.rows_table(table, duals, csr, dense, weights, self.l2,
                             num_features or 0)
    if duals is not state.duals or made is not table:
      state.duals = duals
      state.install_table(np.array(made, np.float64))
      state.asdca_iterate = None

  def predict(self, **features):
    """Probabilities for logistic, rates for Poisson, `w.x` otherwise;
    `[n, K]` class probabilities for softmax, scores for multiclass
    hinge."""
    z = self.decision_function(**features)
    return losses.activation(self.loss, z)

  def predict_classes(self, **features):
    """The predicted class of each row (int64): the highest score's class
    for a multiclass loss, 1 where `w.x > 0` for the binary losses
    (logistic, hinge, smooth hinge).

    Raises:
      ValueError: for a regression loss (squared, absolute, Poisson).
    """
    z = self.decision_function(**features)
    if self._multiclass:
      return np.argmax(z, axis=1)
    if self.loss not in losses.BINARY:
      raise ValueError(f"predict_classes needs a classification loss, not "
                       f"{self.loss}")
    return (z > 0).astype(np.int64)


_BATCH_POSITION = re.compile(
    r"\b(?:(example) (\d+)|(example_labels|example_weights|"
    r"example_state_data)\[(\d+)|(dense_features)\[0\]\[(\d+)\]|"
    r"(sparse_example_indices|sparse_feature_indices|"
    r"sparse_feature_values)\[0\]\[(\d+)\])")


def _in_user_rows(message, rows, sparse, dense_dim, epoch, index):
  """The op's error for one mini-batch with each position inside the batch
  followed by the row of the user's data it is: "example 188" -> "example
  188 (row 3042 of the data)", `dense_features[0][208]` (flat) ->
  "... (row R of the data)", `sparse_*[0][k]` (entry k) -> its row. The
  op sees only the batch; the dealt rows `rows` (a slice or an index array)
  map it back."""
  first = rows.start if isinstance(rows, slice) else None

  def row_of(position):
    return (first + position if first is not None else
            int(rows[position]))

  def annotate(match):
    text = match.group(0)
    try:
      if match.group(1) or match.group(3):
        position = int(match.group(2) or match.group(4))
      elif match.group(5):
        position = int(match.group(6)) // max(1, dense_dim)
      else:
        position = int(sparse[0][int(match.group(8))])  # entry -> row
      return f"{text} (row {row_of(position)} of the data)"
    except (IndexError, TypeError, ValueError):  # not a position after all
      return text
  # TensorFlow's wrapping of an eager op's error says nothing to the user.
  message = sdca_ops.op_message(message)
  return (f"in mini-batch {index + 1} of epoch {epoch + 1}: " +
          _BATCH_POSITION.sub(annotate, message))



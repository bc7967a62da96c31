"""In-memory SDCA training: the whole data set resident, duals indexed by row.

`InMemorySdca` is the fastest way to train a linear model with tf_sdca when the
data fits in memory: no example-id hashing (the dual of row `i` lives at
`duals[i]`, float64, 8 bytes per example), weights kept as float64 numpy
arrays (no drift from float32 accumulation), the rows validated and packed
once per `fit` (`TfSdca>PackRows`: one contiguous record per row, ~192 bytes
for a Criteo row) and one `TfSdca>PackedSolve` call per epoch, which visits
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
import math
import numbers
import os
import re
import time
import warnings

import numpy as np
import tensorflow as tf

from tf_sdca import files
from tf_sdca import losses
from tf_sdca.ops import sdca_ops

# A sparse table at most this many times larger than a batch's entries is
# passed whole (ids = arange): cheaper than finding the distinct ids.
_FULL_TABLE_FACTOR = 4
# Consecutive rows that stay together when rows are dealt into new batches.
_SHUFFLE_CHUNK = 64
# Rows scored at a time by decision_function.
_SCORE_CHUNK = 1 << 18
# Fewest rows per lock-free thread over packed rows: with fewer, starting
# the threads every epoch costs more than they gain (scikit-learn's
# breast_cancer, 569 rows: two threads took 1.7x the time of one).
_MIN_ROWS_PER_THREAD = 4096
# Rows per ASDCA step when the user gives none: the reference's 8. The
# paper's theta shrinks like 1/sqrt(m) once m > 1 / k, and m = 64 took 1.7-3x
# the epochs of m = 8 at about the same time per epoch (bench_variants.py,
# g3doc/benchmarks.md); smaller m pays the per-step bookkeeping more often.
_ASDCA_BATCH_SIZE = 8


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
    visit_order: see `tf_sdca.sdca_optimizer`; or 'asdca': accelerated
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
      the 'permutation', 'uniform' or 'shrinking' order without 'asdca' or
      `average_from`, else off), beta in [0, 1) (0: off) or 'auto' (also
      `keras.LinearModel(momentum=)` and `tf-sdca train --momentum`): each
      epoch after the first starts from the last two epochs' points
      extrapolated, alpha_r + beta (alpha_r - alpha_{r-1}), and the weights
      alike (they are linear in the duals, so they stay W(alpha)), with beta
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
      epoch 0 it starts afresh. 'auto': the first 4 epochs plain, then beta =
      0.5 if over the last two of them the relative gap kept at least 0.2 of
      itself an epoch (fell at most 5x: slowly contracting epochs, which
      extrapolation speeds up), else 0 (the plain epochs go on unchanged); the beta chosen is
      `momentum_used` after `fit` (g3doc/trainer.md). With visit_order
      'cyclic' or 'adaptive' 'auto' is 0 (extrapolation slowed them). The
      default is 'auto' because on every problem measured it took at most
      two epochs more than the better of plain and 0.5, and never more
      than plain (g3doc/trainer.md).
    hinge_step: the multiclass hinge's block step: 'projection' (the
      default: the exact maximiser of the row's block), or the reference's
      sequential dual ascent along one direction, 'steepest_ascent'
      (block-coordinate Frank-Wolfe) or 'near_max_gain' (two classes at a
      time); all reach the same optimum, the projection in the fewest
      epochs (g3doc/multiclass.md).
  """

  def __init__(self, loss="logistic_loss", l1=0.0, l2=1.0,
               visit_order="permutation", seed=0, gamma=1.0, num_threads=0,
               pack=True, num_classes=None, average_from=None,
               asdca_batch_size=_ASDCA_BATCH_SIZE, asdca_theta=None,
               hinge_step="projection", momentum=None):
    loss = losses.op_name(loss)
    sdca_ops.check_hinge_step(loss, hinge_step)
    self.hinge_step = hinge_step
    self._asdca = visit_order == "asdca"
    if self._asdca:
      sdca_ops.check_asdca_options(loss, asdca_batch_size, asdca_theta)
    self.asdca_batch_size = int(asdca_batch_size) if self._asdca else None
    self.asdca_theta = None if asdca_theta is None else float(asdca_theta)
    self.asdca_theta_used = None
    self.asdca_iterate = None  # float64 [num_features + d], shrunk
    if self._asdca and int(num_threads) > 1:
      warnings.warn(
          f"num_threads={num_threads}: visit_order 'asdca' runs on one "
          "thread (its batches' margins are not split over threads yet)",
          UserWarning, stacklevel=2)
    if losses.is_multiclass(loss) and num_classes is None:
      raise ValueError(f"{losses.short_name(loss)} needs num_classes (the "
                       "number of classes K >= 2)")
    sdca_ops._check_options(loss, l1, l2, 1, 1, self._packed_order(
        visit_order), gamma,
                            num_threads,
                            1 if num_classes is None else int(num_classes))
    self.loss = loss
    # K of a multiclass loss; 1 for the others (weights and duals then have
    # no class axis).
    self.num_classes = 1 if num_classes is None else int(num_classes)
    self._multiclass = losses.is_multiclass(loss)
    self.l1 = float(l1)
    self.l2 = float(l2)
    self.visit_order = visit_order
    self.seed = int(seed)
    self.gamma = float(gamma)
    self.num_threads = int(num_threads)
    if average_from is not None and (
        isinstance(average_from, bool) or
        not isinstance(average_from, numbers.Integral) or average_from < 0):
      raise ValueError(f"average_from must be None or an epoch count >= 0, "
                       f"got {average_from!r}")
    self.average_from = None if average_from is None else int(average_from)
    self.momentum = check_momentum(momentum, self._asdca,
                                   self.average_from is not None)
    # The extrapolation's state after the last fit (or as a checkpoint
    # restored it): a fit with initial_epoch > 0 continues it.
    self.momentum_state = None
    self.momentum_used = None  # the beta of the last fit (None: no fit yet)
    self._extrapolation = None
    self.last_iterate = None
    self.average_count = 0  # iterates in the mean (average_from)
    self._average = None    # the running mean during fit
    if not pack:
      warnings.warn(
          "InMemorySdca(pack=False) is deprecated and ignored: the rows are "
          "always packed (one engine; the in-place path was ~1.5x slower per "
          "epoch)", DeprecationWarning, stacklevel=2)
    self.sparse_weights = None  # float64 [num_features], unshrunk
    self.dense_weights = None   # float64 [d], unshrunk
    self._table = None          # the last op call's weight table
    self.duals = None           # float64 [n], the dual of each row

  def _packed_order(self, visit_order=None):
    """The visit_order of the PackedSolve calls: ASDCA's objective
    evaluations take 'permutation' (no passes: the order is unused)."""
    order = self.visit_order if visit_order is None else visit_order
    return "permutation" if order == "asdca" else order

  # --------------------------------------------------------------- data
  @staticmethod
  def _csr(n, ids=None, indptr=None, indices=None, values=None):
    """Normalises the sparse part to CSR arrays (or None)."""
    if ids is not None:
      ids = np.asarray(ids)
      if ids.ndim != 2 or ids.shape[0] != n:
        raise ValueError(f"ids must have shape [{n}, k], got {ids.shape}")
      k = ids.shape[1]
      return (np.arange(0, n * k + 1, k, dtype=np.int64),
              # int32 ids stay int32 (half the memory of 26 ids a row);
              # each batch converts its own slice.
              np.ascontiguousarray(ids if ids.dtype.kind in "iu" else
                                   ids.astype(np.int64)).ravel(), None)
    if indices is None:
      return None
    indptr = np.asarray(indptr, dtype=np.int64)
    if indptr.shape != (n + 1,):
      raise ValueError(f"indptr must have shape [{n + 1}], got {indptr.shape}")
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
      indices = indices.astype(np.int64)
    if values is not None:
      values = np.asarray(values, dtype=np.float32)
      if values.shape != indices.shape:
        raise ValueError(f"values has shape {values.shape} but indices has "
                         f"{indices.shape}")
    return indptr, indices, values

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
          initial_epoch=0, callback=None, rows=None):
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
        weights first; epochs count from 0).
      callback: called as `callback(epoch, history)` after each epoch (e.g.
        to checkpoint).
      shuffle: with several batches, deal the rows (in chunks of 64) into
        new batches every epoch; False keeps fixed consecutive batches,
        visited in a random order, which converges much more slowly.
      rows: instead of the data arguments above, a `RowChunks`: the data
        set chunk by chunk, packed one chunk at a time, so that its whole
        arrays are never held beside the packed records (what `tf-sdca
        train` does with its cache). The same rows give the same training
        as the arrays whole. Not with mini-batches.

    Returns:
      A dict of per-epoch lists: `loss` (regularised objective / total weight),
      `duality_gap` (relative, >= 0; 0 when below float64 rounding),
      `rows_per_sec` (training time only; the first epoch's also counts
      validating and packing the data).

    Raises:
      ValueError: on inconsistent shapes.
      tf.errors.InvalidArgumentError: on bad values (NaN, bad labels, ...),
        or when a step's exact result is out of range (non-finite).
      FloatingPointError: when an epoch's duality gap is negative beyond
        rounding or not finite (a bug, never convergence).
    """
    # The first epoch's time includes preparing (and packing) the data.
    prepare_start = time.perf_counter()
    if rows is None:
      if labels is None:
        raise ValueError("give labels and features, or rows=RowChunks(...)")
      n, csr, dense, labels, weights = _normalise(
          labels, dense, ids, indptr, indices, values, example_weights)
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
    # The class axis of a multiclass loss's weights and duals.
    classes = (self.num_classes,) if self._multiclass else ()
    average = None
    if self.average_from is not None:
      average = _IterateAverage(self)
      if (initial_epoch > 0 and self.average_count > 0 and
          self.last_iterate is not None):
        # Resuming: the model holds the mean of `average_count` iterates;
        # training goes on from the last one.
        average.resume(self.average_count)
        self.sparse_weights = self.last_iterate["sparse_weights"]
        self.dense_weights = self.last_iterate["dense_weights"]
        self.duals = self.last_iterate["duals"]
        self._table = None
    if self.duals is None or self.duals.shape != (n,) + classes:
      self.duals = np.zeros((n,) + classes, np.float64)
    if num_features is not None and (
        self.sparse_weights is None or
        self.sparse_weights.shape != (num_features,) + classes):
      self.sparse_weights = np.zeros((num_features,) + classes, np.float64)
    if has_dense and (self.dense_weights is None or
                      self.dense_weights.shape != (rows.dense_dim,) +
                      classes):
      self.dense_weights = np.zeros((rows.dense_dim,) + classes, np.float64)

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
    momentum = momentum_for(self.momentum, self.visit_order, one_call,
                            self._asdca, self.average_from is not None)
    # Packed also for mini-batches: the exact objective after each epoch is
    # a PackedSolve call without passes.
    resident = _Packed(rows, self.loss, self.gamma,
                       (1 if self._asdca else
                        _choose_threads(self.num_threads, n, self.num_classes))
                       if one_call else 1, self.num_classes,
                       keep_labels=bool(momentum))
    extrapolate = None
    if momentum:
      def set_point(duals, table):
        self.duals = duals
        self._install_table(table)
      extrapolate = Extrapolation(
          momentum, self.loss, resident.labels,
          lambda: (self.duals, self._weight_table()), set_point)
      if initial_epoch > 0 and self.momentum_state is not None:
        # Resuming: the extrapolation goes on as an uninterrupted fit's.
        extrapolate.restore(self.momentum_state, self.duals.shape,
                            self._weight_table().shape)
    self._extrapolation = extrapolate
    total_weight = resident.total_weight
    fixed = None if one_call or shuffle else list(self._batches(
        n, csr, batch_size, num_features or 0))
    history = {"loss": [], "duality_gap": [], "rows_per_sec": []}
    if average is not None:
      history.update(last_loss=[], last_duality_gap=[])
      if not average.count and initial_epoch >= self.average_from:
        average.add()  # the start is an iterate
      self._average = average
    watch = losses.ProgressWatch(loss=self.loss)
    for epoch in range(initial_epoch, epochs):
      # Each epoch's order depends on (seed, epoch) only, so training resumed
      # at an epoch repeats what an uninterrupted run would have done.
      rng = np.random.default_rng([self.seed, epoch])
      bar = (tf.keras.utils.Progbar(n, stateful_metrics=["rows/s"],
                                    unit_name="row")
             if verbose else None)
      if bar is not None:
        print(f"Epoch {epoch + 1}/{epochs}")
      start_time = time.perf_counter()
      if epoch == initial_epoch:
        start_time = prepare_start
      if self._asdca:
        self._asdca_call(resident, epoch)
      elif one_call:
        if extrapolate is not None:
          extrapolate.start_epoch()
        self._resident_call(resident, epoch, passes=1)
      else:
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
            rate = done / max(time.perf_counter() - start_time, 1e-9)
            bar.update(done, values=[("rows/s", rate)])
      # Training time only: the exact objective below is bookkeeping.
      elapsed = time.perf_counter() - start_time
      parts = self._resident_call(resident, epoch, passes=0)
      try:
        objective, gap = self._objective_and_gap_from(parts)
      except FloatingPointError as error:
        if not self._asdca:
          raise
        raise FloatingPointError(
            f"ASDCA with theta = {self.asdca_theta_used:.4g} diverged "
            f"({error}); lower asdca_theta (None: the paper's, which "
            "converges)") from None
      if extrapolate is not None:
        extrapolate.end_epoch(objective - gap,
                              gap / max(abs(objective), 1e-300))
      if average is not None:
        history["last_loss"].append(objective / total_weight)
        history["last_duality_gap"].append(gap / max(abs(objective), 1e-300))
        if epoch + 1 >= self.average_from:
          average.add()
        if average.count:
          objective, gap = self._objective_and_gap_from(
              average.parts(resident))
      history["loss"].append(objective / total_weight)
      history["duality_gap"].append(gap / max(abs(objective), 1e-300))
      history["rows_per_sec"].append(n / elapsed)  # training only
      if bar is not None:
        bar.update(n, values=[("rows/s", n / elapsed)], finalize=True)
      if verbose:
        print(f"  loss {history['loss'][-1]:.6f}  relative duality gap "
              f"{history['duality_gap'][-1]:.3e}  {n / elapsed:,.0f} rows/s")
      slow = watch.update(history["duality_gap"][-1])
      if slow and self._asdca:
        slow += (f". ASDCA's theta = {self.asdca_theta_used:.3g} is small "
                 "when some |x_i|^2 is large: a larger asdca_theta can be "
                 "much faster (or diverge; g3doc/trainer.md)")
      if slow:
        warnings.warn(slow, UserWarning, stacklevel=2)
      if callback is not None:
        callback(epoch, history)
      if tol is not None and history["duality_gap"][-1] < tol:
        break
    self._average = None
    self.momentum_used = (extrapolate.beta if extrapolate is not None
                          else 0.0)
    if extrapolate is not None:
      self.momentum_state = extrapolate.state()
    self._extrapolation = None
    if average is not None and average.count:
      average.install()
    return history

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

  def _weight_table(self):
    """The op's weight table: sparse weights, then dense ones. When both are
    still views of the table the last call returned, that table itself (no
    copy)."""
    parts = [w.reshape(-1) for w in (self.sparse_weights, self.dense_weights)
             if w is not None]
    table = getattr(self, "_table", None)
    if table is not None and _views_of(table, parts):
      return table
    return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

  def _resident_call(self, resident, epoch, passes):
    """One `TfSdca>PackedSolve` call on the packed rows: `passes` passes
    over every row (and nothing else), or with `passes=0` the exact
    objective parts at the current weights and duals."""
    # Inputs by DLPack (no copy: the op copies them into its outputs).
    options = dict(
        weights=_aliased(self._weight_table()),
        duals=_aliased(np.ascontiguousarray(self.duals,
                                            np.float64).reshape(-1)),
        seed=self.seed * 1_000_003 + epoch, loss_type=self.loss, l1=self.l1,
        l2=self.l2, num_passes=passes, visit_order=self._packed_order(),
        gamma=self.gamma, compute_objective=passes == 0,
        num_classes=self.num_classes, hinge_step=self.hinge_step)
    w, duals, parts = sdca_ops.packed_solve(resident.rows, **options)
    if passes:
      self._install_table(w)
      self.duals = duals.numpy().reshape(self.duals.shape)
    return parts.numpy()

  def _install_table(self, w):
    """Makes the weight table `w` (the op's output, or a numpy array) the
    model's sparse and dense weights (views of it)."""
    w = self._table = w.numpy() if isinstance(w, tf.Tensor) else w
    if self._multiclass:
      w = w.reshape(-1, self.num_classes)
    k = 0 if self.sparse_weights is None else self.sparse_weights.shape[0]
    if self.sparse_weights is not None:
      self.sparse_weights = w[:k]
    if self.dense_weights is not None:
      self.dense_weights = w[k:]

  def _asdca_call(self, resident, epoch):
    """One `TfSdca>AsdcaSolve` pass over the packed rows. A run starts (or
    resumes from weights without an iterate) at w = shrink(W)."""
    table = self._weight_table()
    iterate = self.asdca_iterate
    if iterate is None or iterate.shape != table.shape:
      iterate = losses.shrink_l1(table, self.l1, self.l2)
    w, duals, iterate, _, theta = sdca_ops.asdca_solve(
        resident.rows, _aliased(table),
        _aliased(np.ascontiguousarray(self.duals, np.float64)),
        _aliased(np.asarray(iterate, np.float64)),
        self.seed * 1_000_003 + epoch, self.loss, self.l1, self.l2,
        self.asdca_batch_size, self.asdca_theta, gamma=self.gamma,
        compute_objective=False)
    self._install_table(w)
    self.duals = duals.numpy().reshape(self.duals.shape)
    self.asdca_iterate = iterate.numpy()
    self.asdca_theta_used = float(theta)

  def _objective_and_gap_from(self, parts):
    """(primal, duality gap) from the op's objective parts (see
    `objective_and_gap`)."""
    return objective_and_gap(parts, self.loss, self.l1, self.l2)

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
          visit_order=self.visit_order, seed=self.seed + epoch,
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
    n = (dense.shape[0] if dense is not None else
         (np.asarray(ids).shape[0] if ids is not None else len(indptr) - 1))
    k = self.num_classes if self._multiclass else None
    z = np.zeros(n if k is None else (n, k))
    if dense is not None:
      dense = np.asarray(dense, dtype=np.float32)
      if dense.ndim == 1:
        dense = dense[:, None]
      z += dense.astype(np.float64) @ self._shrunk(self.dense_weights)
    csr = self._csr(n, ids, indptr, indices, values)
    if csr is not None:
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
  message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
  message = re.sub(r"\s*\[Op:[^\]]*\]( name: \S*)?\s*$", "", message)
  return (f"in mini-batch {index + 1} of epoch {epoch + 1}: " +
          _BATCH_POSITION.sub(annotate, message))


class _IterateAverage:
  """The running mean of a model's iterates (its float64 weight table and
  duals) for `InMemorySdca(average_from=...)`."""

  def __init__(self, model):
    self.model = model
    self.count = 0
    self.table = None
    self.duals = None

  def resume(self, count):
    """Takes the model's weights and duals as the mean of `count`
    iterates."""
    self.add()
    self.count = int(count)

  def add(self):
    """Adds the model's current iterate to the mean."""
    table = np.array(self.model._weight_table(), np.float64)  # pylint: disable=protected-access
    duals = np.array(self.model.duals, np.float64).reshape(-1)
    self.count += 1
    if self.count == 1:
      self.table, self.duals = table, duals
    else:
      self.table += (table - self.table) / self.count
      self.duals += (duals - self.duals) / self.count

  def parts(self, resident):
    """The exact objective parts at the mean (a PackedSolve call without
    passes)."""
    m = self.model
    return sdca_ops.packed_solve(
        resident.rows, _aliased(self.table), _aliased(self.duals), 0,
        loss_type=m.loss, l1=m.l1, l2=m.l2, num_passes=0,
        visit_order=m._packed_order(), gamma=m.gamma,  # pylint: disable=protected-access
        num_classes=m.num_classes)[2].numpy()

  def split(self):
    """The mean as the model's parts: dict(sparse_weights, dense_weights,
    duals, count) (copies)."""
    m = self.model
    table = self.table.copy()
    if m._multiclass:  # pylint: disable=protected-access
      table = table.reshape(-1, m.num_classes)
    k = 0 if m.sparse_weights is None else m.sparse_weights.shape[0]
    return dict(
        sparse_weights=None if m.sparse_weights is None else table[:k],
        dense_weights=None if m.dense_weights is None else table[k:],
        duals=self.duals.reshape(m.duals.shape).copy(), count=self.count)

  def install(self):
    """Keeps the last iterate in `last_iterate` and makes the mean the
    model's weights and duals."""
    m = self.model
    mean = self.split()
    m.last_iterate = dict(sparse_weights=m.sparse_weights,
                          dense_weights=m.dense_weights, duals=m.duals)
    m.sparse_weights = mean["sparse_weights"]
    m.dense_weights = mean["dense_weights"]
    m.duals = mean["duals"]
    m.average_count = self.count
    m._table = None  # pylint: disable=protected-access


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
  l1, l2 = float(np.float32(l1)), float(np.float32(l2))
  loss_sum, dual_sum, norm_sq, norm_1 = (float(v) for v in parts)
  primal = loss_sum + 0.5 * l2 * norm_sq + l1 * norm_1
  gap = loss_sum + dual_sum + l2 * norm_sq + l1 * norm_1
  scale = abs(loss_sum) + abs(dual_sum) + l2 * norm_sq + l1 * norm_1
  if not (np.isfinite(primal) and np.isfinite(gap) and gap >= -1e-9 * scale):
    raise FloatingPointError(
        f"{loss}: invalid duality gap {gap!r} (loss sum {loss_sum!r}, "
        f"dual loss sum {dual_sum!r}, |w|^2 {norm_sq!r}, |w|_1 "
        f"{norm_1!r}): the weights and duals are not a primal-dual pair")
  return primal, max(gap, 0.0)


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


def _aliased(array):
  """A tensor over `array`'s memory (DLPack: no copy). The op reads it in
  place every epoch; copying a 10M-row data set per call would cost more
  than the epoch."""
  array = np.ascontiguousarray(array)
  if not array.flags.writeable:  # DLPack cannot export read-only memory
    array = array.copy()
  return tf.experimental.dlpack.from_dlpack(array.__dlpack__())


def _normalise(labels, dense=None, ids=None, indptr=None, indices=None,
               values=None, example_weights=None):
  """`fit`'s data arguments as (n, csr or None, dense or None, labels,
  weights): float32 labels, dense `[n, d]` and weights, the sparse part as
  CSR (`InMemorySdca._csr`).

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
  csr = InMemorySdca._csr(n, ids, indptr, indices, values)  # pylint: disable=protected-access
  if dense is not None:
    dense = np.ascontiguousarray(dense, dtype=np.float32)
    if dense.ndim == 1:
      dense = dense[:, None]
    if dense.shape[0] != n:
      raise ValueError(f"dense has {dense.shape[0]} rows but labels has {n}")
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
  cache so. The rows train exactly as the same rows given to `fit` whole.

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

  def _normalised(self):
    """Yields (first row, source, csr, dense, labels, weights) per chunk,
    each normalised as `fit` normalises whole arrays (a tuple chunk is
    already normalised)."""
    chunks = self.chunks() if callable(self.chunks) else self.chunks
    first = 0
    for index, chunk in enumerate(chunks):
      if isinstance(chunk, tuple):
        csr, dense, labels, weights = chunk
        source = None
      else:
        chunk = dict(chunk)
        source = chunk.pop("source", None)
        where = source or f"chunk {index}"
        try:
          _, csr, dense, labels, weights = _normalise(**chunk)
        except (TypeError, ValueError) as error:
          raise ValueError(f"{where} (rows from {first:,} on): "
                           f"{error}") from None
        if (dense.shape[1] if dense is not None else 0) != self.dense_dim:
          raise ValueError(
              f"{where} (rows from {first:,} on) has "
              f"{0 if dense is None else dense.shape[1]} dense columns; "
              f"dense_dim is {self.dense_dim}")
      yield first, source, csr, dense, labels, weights
      first += labels.shape[0]


def check_momentum(momentum, asdca, averaging):
  """`momentum` as a float in [0, 1), 'auto' or None (the default: 'auto'
  where it applies, `momentum_for`), or ValueError (also where a given
  momentum does not apply: with ASDCA, accelerated already, or output
  averaging)."""
  if momentum is None:
    return None
  if momentum != "auto" and (
      isinstance(momentum, bool) or not isinstance(momentum, numbers.Real)
      or not 0.0 <= momentum < 1.0):
    raise ValueError(f"momentum must be a number in [0, 1) or 'auto', got "
                     f"{momentum!r}")
  if momentum and (asdca or averaging):
    raise ValueError(
        f"momentum={momentum!r} extrapolates SDCA's epochs; it does not "
        "combine with " + ("visit_order 'asdca' (accelerated already)"
                           if asdca else "average_from"))
  return momentum if momentum == "auto" else float(momentum)


def momentum_for(momentum, visit_order, whole_epochs=True, asdca=False,
                 averaging=False):
  """The momentum a fit uses. The default (None) is 'auto' where
  extrapolation applies, whole epochs over in-memory rows without ASDCA or
  output averaging, and 0 elsewhere. 'auto' extrapolates only the random
  orders it was measured on ('permutation', 'uniform', 'shrinking'); with
  'cyclic' and 'adaptive' it is 0 (on standardised breast_cancer, logistic,
  l2 = 1, beta = 0.5 took 329 cyclic epochs to 1e-7 against 233 plain;
  adaptive, on one categorical data set, ended 15 epochs at 2e-6 against
  < 1e-7). A fixed beta is used as given."""
  if momentum is None:
    if not whole_epochs or asdca or averaging:
      return 0.0
    momentum = "auto"
  if momentum == "auto" and visit_order in ("cyclic", "adaptive"):
    return 0.0
  return momentum


# momentum='auto': plain epochs 1 to AUTO_MOMENTUM_EPOCHS, then beta =
# AUTO_MOMENTUM_BETA if the relative gap's ratio from one epoch to the next
# over the last two of them (the geometric mean of gap_3 / gap_2 and gap_4
# / gap_3, "the contraction") is at least AUTO_MOMENTUM_RATIO, else 0. Measured (g3doc/trainer.md): where
# beta = 0.5 cut the epochs (standardised breast_cancer logistic and smooth
# hinge, diabetes squared, digit counts Poisson, digits softmax, wine
# softmax, Criteo-shaped rows at l2 = 1) that contraction was 0.25-0.93;
# where it cost epochs (breast_cancer and Criteo-shaped rows at l2 = 10)
# 0.10-0.15.
AUTO_MOMENTUM_EPOCHS = 4
AUTO_MOMENTUM_RATIO = 0.2
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

  With beta 'auto' the first AUTO_MOMENTUM_EPOCHS epochs are plain, and
  their relative gaps choose beta (AUTO_MOMENTUM_BETA where they contract
  slowly, else 0: the plain epochs go on unchanged).

  Args:
    beta: the extrapolation, in (0, 1), or 'auto'.
    loss: the loss (its dual domain caps beta).
    labels: every row's label, in the rows' order.
    get_point: returns the current (duals, weight table) as numpy arrays
      that the next epoch does not modify in place.
    set_point: sets (duals, weight table) where the next epoch starts.
  """

  def __init__(self, beta, loss, labels, get_point, set_point):
    self._auto = beta == "auto"
    self._beta = 0.0 if self._auto else float(beta)
    self._gaps = []  # 'auto': the relative gaps of the epochs so far
    self._loss = loss
    self._labels = labels
    self._get_point = get_point
    self._set_point = set_point
    self._previous = None  # (duals, table) of the epoch before
    self._last_dual = -np.inf
    self._restart = False

  def start_epoch(self):
    """Moves to the extrapolated start of the next epoch."""
    duals, table = self._get_point()
    previous, self._previous = self._previous, (duals, table)
    if previous is None or self._restart:
      return
    change = duals - previous[0]
    beta = min(self._beta, 0.9 * losses.extrapolation_limit(
        self._loss, self._labels, duals.reshape(-1), change.reshape(-1)))
    if beta > 0.0:
      self._set_point(duals + beta * change,
                      table + beta * (table - previous[1]))

  @property
  def beta(self):
    """The extrapolation used (with 'auto': 0 until it is chosen)."""
    return self._beta

  def end_epoch(self, dual_objective, relative_gap=None):
    """Records the dual objective at the point the epoch reached (and, for
    'auto', the epoch's relative duality gap)."""
    self._restart = dual_objective < self._last_dual
    self._last_dual = dual_objective
    if self._auto and len(self._gaps) < AUTO_MOMENTUM_EPOCHS:
      self._gaps.append(float(relative_gap))
      if len(self._gaps) == AUTO_MOMENTUM_EPOCHS:
        self._beta = choose_auto_momentum(self._gaps)

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
      if len(self._gaps) == AUTO_MOMENTUM_EPOCHS:  # (end_epoch stops there)
        self._beta = choose_auto_momentum(self._gaps)


def choose_auto_momentum(gaps):
  """momentum='auto''s beta from the relative gaps of the first
  AUTO_MOMENTUM_EPOCHS plain epochs: AUTO_MOMENTUM_BETA when over the last
  two of them the gap's ratio from one epoch to the next is at least
  AUTO_MOMENTUM_RATIO (in geometric mean: slow epochs), else 0 (fast plain
  epochs, which extrapolation slows)."""
  first, last = gaps[AUTO_MOMENTUM_EPOCHS - 3], gaps[AUTO_MOMENTUM_EPOCHS - 1]
  if not first > 0.0:
    return 0.0
  contraction = math.sqrt(max(last, 0.0) / first)
  return AUTO_MOMENTUM_BETA if contraction >= AUTO_MOMENTUM_RATIO else 0.0


class _Packed:
  """The rows of a `RowChunks` packed for `TfSdca>PackedSolve`, chunk by
  chunk (`new_packed_rows`, then `append_rows` per chunk, each chunk's
  numpy memory aliased by DLPack); `total_weight`: the sum of their example
  weights; `labels`: with `keep_labels`, all rows' labels (else None)."""

  def __init__(self, chunks, loss, gamma, num_threads, num_classes=1,
               keep_labels=False):
    n = chunks.num_examples
    kept = []
    self.rows = sdca_ops.new_packed_rows(
        n, chunks.num_ids, chunks.dense_dim, chunks.num_features or 0, loss,
        gamma=gamma, num_threads=num_threads, has_values=chunks.has_values,
        num_classes=num_classes)
    self.total_weight = 0.0
    appended = 0
    for first, source, csr, dense, labels, weights in chunks._normalised():  # pylint: disable=protected-access
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
    indptr, indices, values = csr
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
    row_ptr = indptr
    ids = indices if indices.dtype == np.int32 else indices.astype(np.int32)
    if values is None:
      values = np.zeros(0, np.float32)
  if dense is None:
    dense = np.zeros((n, 0), np.float32)
  return (_aliased(row_ptr), _aliased(ids), _aliased(values),
          _aliased(dense), _aliased(weights), _aliased(labels))


class _Resident:
  """The data of a `fit` on arrays (`keras.LinearModel` packs its arrays so),
  checked, then packed for `TfSdca>PackedSolve` as one chunk of rows."""

  def __init__(self, n, csr, dense, labels, weights, num_features):
    if csr is not None:
      _op_inputs(csr, None, labels[:0], weights[:0], num_features)
    self.chunks = RowChunks([(csr, dense, labels, weights)], n,
                            0 if csr is None else int(csr[0][-1]),
                            0 if dense is None else dense.shape[1],
                            num_features if csr is not None else None,
                            csr is not None and csr[2] is not None)
    self.rows = None

  def pack(self, num_features, loss, gamma, num_threads, num_classes=1):
    """Validates and packs the rows once for `num_threads` threads (and K
    classes of a multiclass loss); epochs then go through
    `TfSdca>PackedSolve`. The packed copy replaces the arrays."""
    del num_features  # given to the constructor
    self.rows = _Packed(self.chunks, loss, gamma, num_threads,
                        num_classes).rows
    self.chunks = None


def _packed_threads(num_threads, n):
  """Threads to pack n rows for: num_threads, at most one per
  _MIN_ROWS_PER_THREAD rows, at least one."""
  return max(1, min(num_threads, n // _MIN_ROWS_PER_THREAD))


def _choose_threads(num_threads, n, num_classes=1):
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
  cores = os.cpu_count() or 1
  if threads > cores:
    threads = cores
  if num_threads > 1 and threads < num_threads:
    warnings.warn(
        f"num_threads={num_threads}: using {threads} lock-free thread(s) "
        f"for {n} rows on {cores} core(s) (at most one per "
        f"{_MIN_ROWS_PER_THREAD} rows and one per core)", UserWarning,
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

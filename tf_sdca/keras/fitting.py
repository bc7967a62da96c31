"""The training state of `tf_sdca.keras.LinearModel`, from fit to fit.

The model keeps its configuration, its Keras weights and the
`tf_sdca.SdcaModel` over them; `TrainingState` is the plain-Python rest of
its training. For each `fit` it packs in-memory rows once and runs the
engine's epochs over them, one a Keras step (`_EngineEpochs`; all in one
go, `engine_epochs`, where nothing reads the model between them, the
progress printed after runs of them;
ASDCA's and averaging fits: one `TfSdca>PackedSolve` call a traced step),
or leaves
them for streamed batches (`SdcaModel`, one batch a step), and gives the
callbacks that fit runs with (`tf_sdca.keras.callbacks`: the gap's logging
and stop, averaging). Between fits it holds what the next fit, `duality_gap`, `save`
and `load_model` go on from: the last in-memory fit's packed rows (or the
duals a saved file kept of them), the extrapolation's state, the running
mean of an averaging fit and the training data's total weight.

It reads the model's public options (`loss_type`, `l1`, `l2`, `seed`, ...)
and is handed the model's `SdcaModel` and feature spec where it needs them.
"""
import time
import warnings

import numpy as np
import tensorflow as tf

from tf_sdca import engine
from tf_sdca import losses
from tf_sdca import options
from tf_sdca import second_order
from tf_sdca.keras import callbacks as callbacks_lib
from tf_sdca.keras import data as data_lib
from tf_sdca.keras import multi_worker
from tf_sdca.keras import saving
from tf_sdca.keras import state as state_lib
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.sdca_model import state_meaning

# What the model's traced `train_step` does: one epoch over packed rows, or
# one streamed batch.
PACKED = "packed"
BATCHES = "batches"

# A fit's data in the words of `check_mode`'s messages.
_MODE_WORDS = {
    options.IN_MEMORY: "numpy, scipy or dicts of arrays",
    options.STREAMED: "a tf.data.Dataset",
    options.PROCESSES: "the workers of a MultiWorkerMirroredStrategy"}


class TrainingState:
  """The training state of one `LinearModel`.

  Args:
    model: the `LinearModel` whose options it reads (and whose training the
      gap's callback stops).

  Attributes:
    pending_state: the SDCA state of a loaded file, until `new_sdca`
      creates the model's `SdcaModel` (its shapes come from the weights).
    mode: PACKED or BATCHES, what the last fit's steps were; None before.
    packed: the last in-memory fit's `tf_sdca.keras.state.PackedRows`
      (None after a streamed or multi-worker fit, or `load_model`).
    row_duals: `(example keys, float64 duals)` of the in-memory fit a saved
      file kept, for the next fit on the same rows.
    gap_data: the last streamed fit's dataset, which `duality_gap()`
      measures (None after an in-memory fit).
    train_weight: the training data's total example weight (0 before any
      fit): `evaluate` divides the regularisation by it.
    average: the `tf_sdca.keras.callbacks.Average` of the last averaging
      fit, else None.
    momentum_state: `(example keys, Extrapolation.state())` of the last
      in-memory fit with momentum: the next fit on the same rows goes on
      from it.
  """

  def __init__(self, model):
    self._model = model
    self.pending_state = None
    self.mode = None
    self.packed = None
    self.row_duals = None
    self.gap_data = None
    self._train_weight = 0.0
    self._train_weight_variable = None
    self.average = None
    self.momentum_state = None
    self._run = None  # the engine's epochs of an in-memory fit under way
    self._run_end = None  # (its last epoch, its tol): `callbacks`

  @property
  def train_weight(self):
    return self._train_weight

  @train_weight.setter
  def train_weight(self, value):
    self._train_weight = float(value)
    if self._train_weight_variable is not None:
      self._train_weight_variable.assign(self._train_weight)

  def train_weight_tensor(self):
    """`train_weight` as a float64 variable for `test_step`: read when a
    traced step runs, where a Python number was frozen into Keras' cached
    test function at its first trace (an `evaluate` before `fit` left the
    regularisation out of every later one; a fit on other rows kept the
    old divisor)."""
    if self._train_weight_variable is None:
      with tf.init_scope():
        self._train_weight_variable = tf.Variable(
            self._train_weight, trainable=False, dtype=tf.float64,
            name="sdca_train_weight")
    return self._train_weight_variable

  @property
  def asdca(self):
    """Whether in-memory fits run accelerated mini-batch SDCA."""
    return self._model.visit_order == "asdca"

  def check_mode(self, mode):
    """ValueError for an option set that does not run in `mode`
    (`tf_sdca.options.IN_MEMORY`, `STREAMED` or `PROCESSES`, this fit's),
    naming the doors that run it; and for a fit of one replica
    (in-memory or streamed) with `num_loss_partitions` > 1."""
    m = self._model
    if mode != options.PROCESSES and m.num_loss_partitions != 1:
      raise ValueError(
          f"num_loss_partitions={m.num_loss_partitions}: fit trains one "
          "replica on all the data, which needs num_loss_partitions=1 (use "
          "tf_sdca.SdcaModel to sum the updates of several replicas)")
    options.applies(
        dict(visit_order=m.visit_order, momentum=m.momentum,
             average_from=m.average_from, carry_over=m.carry_over,
             second_order=m.second_order, num_threads=m.num_threads,
             **({"num_loss_partitions": m.num_loss_partitions}
                if mode == options.PROCESSES else {})),
        mode, options.KERAS, _MODE_WORDS[mode])

  def _sdca_over(self, spec, kernels, bias):
    """A `SdcaModel` over the tf.Variables `kernels` `{name: variable}` of
    the features in `spec` (the sparse and categorical ones first, then
    the dense ones, as the weight table holds them) and `bias` (or
    None)."""
    sparse, dense = [], []
    for name, kind, _, _, _ in spec:
      (dense if kind == "dense" else sparse).append(kernels[name])
    if bias is not None:
      dense.append(bias)
    return SdcaModel(None, {"sparse_features_weights": sparse,
                            "dense_features_weights": dense},
                     self._sdca_options())

  def check_state(self, state, spec, kernels=None, bias=None):
    """Refuses a loaded SDCA `state` as the SdcaModel `new_sdca` creates
    would (`SdcaModel.check_state`), on one of its own: over the model's
    Keras weights `kernels` and `bias`, or, for a model not built yet
    (`kernels` None), over zero weights of `spec`'s shapes. A refused
    state so leaves a model never fitted without an SdcaModel (its pending
    state kept) and one never built unbuilt.

    Returns:
      The SdcaModel that took the check, for the model to keep when it
      then sets `state` into it (over its weights).

    Raises:
      ValueError: naming the part, as `SdcaModel.check_state`.
    """
    if kernels is None:
      k = self._model.num_classes
      kernels = {name: tf.Variable(tf.zeros([size, k]))
                 for name, _, size, _, _ in spec}
      bias = (tf.Variable(tf.zeros([k])) if self._model.use_bias else
              None)
    else:
      kernels = {name: kernel.value for name, kernel in kernels.items()}
      bias = None if bias is None else bias.value
    sdca = self._sdca_over(spec, kernels, bias)
    sdca.check_state(state)
    return sdca

  def new_sdca(self, spec, kernels, bias):
    """A `SdcaModel` (created eagerly) over the model's Keras weights:
    `kernels` `{name: variable}` of the features in `spec` (the sparse and
    categorical ones first, then the dense ones, as the weight table holds
    them) and the `bias` variable or None; it takes a loaded state that
    waited for it."""
    sdca = self._sdca_over(
        spec, {name: kernel.value for name, kernel in kernels.items()},
        None if bias is None else bias.value)
    if self.pending_state is not None:
      sdca.set_state(self.pending_state)
      self.pending_state = None
    else:
      # Training starts at zero duals, whose weights are zero: the slots
      # `SdcaModel` took from the variables (weights set before any fit)
      # would not be their pair (`check_weights` says so at fit).
      for group in sdca.weight_groups():
        for slot in group.slots:
          slot.assign(tf.zeros_like(slot))
    return sdca

  def check_weights(self, sdca, consequence):
    """Warns when the model's Keras weights are not those its SDCA
    training left (`state.weights_set_outside`), saying the `consequence`
    for the call.

    SDCA trains its weights and duals as a pair (w = X^T alpha / l2): the
    weights alone are no point to start from or to certify, and paired with
    the old duals they would train another objective. `predict` and
    `evaluate` use the weights set; a `fit` goes on from the training state
    and replaces them."""
    m = self._model
    if sdca is None or not state_lib.weights_set_outside(sdca, m.l1, m.l2):
      return
    warnings.warn(
        "LinearModel: the model's weights are not the ones its SDCA "
        "training left (set by set_weights, EarlyStopping("
        "restore_best_weights=True), ...); SDCA trains weights and duals as "
        f"a pair, so {consequence}", UserWarning,
        stacklevel=losses.caller_stacklevel())

  def _sdca_options(self):
    """The `SdcaModel`'s options: the model's, with 'permutation' for
    `visit_order='asdca'` (ASDCA runs on packed rows only)."""
    m = self._model
    return {"loss_type": m.loss_type,
            "symmetric_l1_regularization": m.l1,
            "symmetric_l2_regularization": m.l2,
            "num_loss_partitions": m.num_loss_partitions,
            "num_table_shards": m.num_table_shards,
            "visit_order": ("permutation" if self.asdca else
                            options.visit_order_for(
                                m.loss_type, m.visit_order,
                                options.STREAMED)), "seed": m.seed,
            "gamma": m.gamma, "num_threads": m.num_threads,
            "hinge_step": m.hinge_step, "carry_over": m.carry_over,
            "second_order": m.second_order,
            **({"num_classes": m.num_classes} if m.num_classes > 1
               else {})}

  def visit_order(self):
    """The in-memory order: the model's, or for None the loss's default
    for the packed rows (`options.visit_order_for`, by their norms and
    the l2)."""
    m = self._model
    return options.visit_order_for(
        m.loss_type, m.visit_order,
        row_norms=None if self.packed is None else self.packed.row_norms,
        l2=m.l2, gamma=m.gamma)

  def config(self):
    """The in-memory engine's view of the model's options."""
    m = self._model
    return engine.Config(m.loss_type, m.l1, m.l2, m.gamma, m.seed,
                         self.visit_order(), m.hinge_step, m.num_classes,
                         m.asdca_batch_size, m.asdca_theta)

  # ---------------------------------------------------------- packed rows
  def pack(self, sdca, spec, x, n, labels, weights, ids, transform=None,
           arrays_only=False):
    """Packs validated in-memory training rows once (`TfSdca>PackRows`, as
    `InMemorySdca` does), with the state to train from: the float64
    weights of `sdca` and one float64 dual per row (those of the last
    in-memory fit or saved file on the same example ids, else what the
    streaming state holds for them, else 0).

    Args:
      sdca: the model's `SdcaModel`.
      spec: the model's feature spec.
      x, n, labels, weights: the `n` rows' features, labels and example
        weights, checked (`tf_sdca.keras.data.training_inputs`).
      ids: their example ids.
      transform: the model's feature transform, to compute the train
        metrics on all rows after each epoch; None without metrics.
      arrays_only: return the rows before packing instead: `(csr or None,
        dense, labels, weights, num_sparse)`, the columns in the weight
        table's order.

    Returns:
      The `PackedRows`, for `use_packed`.
    """
    m = self._model
    keys = sdca.example_keys(
        ids if ids.dtype == tf.string else tf.strings.as_string(ids))
    keys = keys.numpy()
    duals = self._duals_for(sdca, keys, labels)
    sparse, dense, num_sparse = data_lib.weight_table_columns(
        x, n, spec, m.categorical_features, m.use_bias)
    if arrays_only:
      return (data_lib.merged_rows(n, sparse) if sparse else None,
              np.concatenate(dense, axis=1) if dense else None, labels,
              weights, num_sparse)
    table = state_lib.weight_table(sdca)
    csr = data_lib.merged_rows(n, sparse) if sparse else None
    # (One dense block, e.g. a numpy array without a bias: packed from the
    # features' own array, not a copy of it.)
    dense = (None if not dense else dense[0] if len(dense) == 1 else
             np.concatenate(dense, axis=1))
    k = m.num_classes
    duals = engine.project_duals(
        np.reshape(duals, (n, k) if k > 1 else (n,)), m.loss_type, labels)
    if self._on_engine():
      made = engine.rows_table(table, duals, csr, dense, weights, m.l2,
                               num_sparse)
      if made is not table:  # other rows under these keys: a new problem
        self.momentum_state = None
      table = made
    by_norms = (m.visit_order is None and
                losses.op_name(m.loss_type) in options.NORM_SPREAD_LOSSES)
    # The exact block step of the engine's epochs (not ASDCA's or an
    # averaging fit's), where `second_order` takes it on these rows.
    block_step = (second_order.block_step_for(
        m.second_order, m.loss_type, m.l1, m.l2, n, csr, dense, num_sparse,
        labels, weights, m.num_classes) if self._on_engine() else None)
    resident = engine.ArrayRows(n, csr, dense, labels, weights, num_sparse)
    resident.pack(num_sparse, m.loss_type, m.gamma,
                  1 if self.asdca else
                  engine.choose_threads(m.num_threads, n, m.num_classes),
                  m.num_classes, norms=by_norms)
    norms = resident.problem.row_norms
    metric_inputs = None
    if transform is not None:
      features = transform({name: data_lib.to_host(value)
                            for name, value in x.items()})
      metric_inputs = (features, tf.constant(labels), tf.constant(weights))
    return state_lib.PackedRows(resident.problem, keys, duals.reshape(-1),
                                table, weights, metric_inputs,
                                losses.shrink_l1(table, m.l1, m.l2)
                                if self.asdca else None, labels, norms,
                                block_step)

  def _duals_for(self, sdca, keys, labels):
    """float64 duals of the rows with these example-id keys (`[n, K]`
    blocks for a multiclass loss, whose rows have these `labels`): those
    of the last in-memory fit or saved file on the same keys, else what
    the streaming state holds for them, else 0."""
    duals = state_lib.known_duals(keys, self.packed, self.row_duals)
    if duals is not None:
      return duals
    self.flush(sdca)
    return state_lib.stored_duals(sdca, keys, labels,
                                  self._model.num_classes)

  def use_packed(self, packed):
    """Makes `packed` (from `pack`) the rows of this fit."""
    self.packed = packed
    self.gap_data = None

  @staticmethod
  def packed_steps():
    """The training data of a packed fit run by Keras' loop: one element
    per step, a step being a whole epoch."""
    return tf.data.Dataset.from_tensors(0).repeat()

  def epoch(self, sdca):
    """One epoch over the packed rows (the traced `train_step` of an
    in-memory fit): one `TfSdca>PackedSolve` call, seeded like
    `InMemorySdca`'s epochs by the count of epochs and `minimize` calls so
    far, then the new weights written to the variables of `sdca`. Returns
    the objective the call measured, per unit of example weight (float32,
    the logged loss until the gap's callback replaces it)."""
    m, p = self._model, self.packed
    calls = sdca.calls
    w, parts = p.epoch(engine.epoch_seed(m.seed, calls), self.config(),
                       self.asdca)
    calls.assign_add(1)
    state_lib.write_weights(sdca, w, m.l1, m.l2)
    primal = parts[0] + 0.5 * m.l2 * parts[2] + m.l1 * parts[3]
    return tf.cast(primal / max(p.total_weight, 1e-300), tf.float32)

  def packed_gap(self):
    """(objective per unit weight, relative gap) after the last epoch."""
    m = self._model
    return self.packed.gap(m.loss_type, m.l1, m.l2)

  def flush(self, sdca):
    """Writes the packed rows' duals into the example state of `sdca`, so
    that streaming, `duality_gap(data)` and saving see them (as float32,
    the streaming state's type; saved files keep the float64 ones too)."""
    p = self.packed
    if p is None:
      return
    sdca.state_insert(tf.constant(p.keys),
                      tf.constant(p.state_rows(self._model.num_classes)))

  def leave_packed(self, sdca):
    """Before streaming: the example state takes over the packed duals."""
    self.flush(sdca)
    self.packed = None
    self.row_duals = None

  # ------------------------------------------------------------------ fit
  def callbacks(self, sdca, streamed, tol, initial_epoch, epochs,
                callbacks, unread=False):
    """Starts a fit of `epochs` (Keras' count, from `initial_epoch`),
    packed (`use_packed` done) or on the `streamed` dataset (None: packed),
    and returns its callbacks: the user's `callbacks` after the gap's
    logger and stop at `tol`; averaging continues or starts the model's
    mean. A packed fit without
    ASDCA or averaging runs the engine's epochs (`engine_step`, then
    `end_fit`); with `unread` (nothing reads the model between its epochs:
    no callbacks of the user's, validation or compiled metrics) they write
    the model's variables once, at the end (`_EngineEpochs`)."""
    m = self._model
    packed = streamed is None
    if packed:
      measure, total = self.packed_gap, self.packed.total_weight
      if self._on_engine():
        # (The fit's last epoch in the model's count of steps, and its tol:
        # a restore during the fit starts the epochs again from there.)
        self._run_end = (int(sdca.calls.numpy()) + epochs - initial_epoch,
                         tol)
        self._run = _EngineEpochs(
            m, self.packed, sdca, epochs - initial_epoch, tol, self.config(),
            self.visit_order(), self.momentum_state, self._keep_momentum,
            write_at_end=unread and WRITE_AT_END)

        def measure():
          return self._run.measure()
      else:
        self.packed.variables()  # (before the traced steps of `epoch`)
    else:
      total = None

      def measure():
        self.gap_data = streamed
        return m.duality_gap(streamed)
    self.mode = PACKED if packed else BATCHES
    averaging = self._start_average(sdca, packed, initial_epoch)
    if total is not None:
      self.train_weight = total
    callbacks = list(callbacks or [])
    if total is None:
      self.train_weight_tensor()  # (before the train step is traced)
      callbacks.insert(0, callbacks_lib.StreamedWeightCount(self))
    # Streamed batches (no total weight of packed rows) come in the
    # dataset's order.
    callbacks.insert(0, callbacks_lib.DualityGapLogger(
        m, measure, tol, m.loss_type, total is None and not m.carry_over,
        averaging, streamed=total is None))
    return callbacks

  def _on_engine(self):
    """Whether this in-memory fit's epochs are the engine's
    (`tf_sdca.engine.epochs_of`, as `InMemorySdca` runs them): all but
    ASDCA's and averaging fits, whose traced step is one `epoch`."""
    return not self.asdca and self._model.average_from is None

  @property
  def on_engine(self):
    """Whether the fit under way runs the engine's epochs."""
    return self._run is not None

  @property
  def writes_at_end(self):
    """Whether the fit under way runs the engine's epochs and writes the
    model's variables after the last (`engine_epochs` can run them)."""
    return self._run is not None and self._run.write_at_end

  def engine_step(self, sdca):
    """The step of a fit on the engine's epochs: its next epoch (trained,
    evaluated, the next one trained beside the evaluation where the
    engine does so), the weights then written into the variables of
    `sdca`. Returns the objective per unit weight (float32)."""
    return self._run.step(sdca)

  def engine_epochs(self, sdca, seconds=None):
    """The epochs of a fit on the engine's epochs whose variables are
    written at the end (`callbacks`' `unread`), in one go: the engine runs
    them to its end or `tol`, fused several per op call where it can; with
    `seconds`, only until the first epoch that ends that long after the
    call (the next call goes on from there, with the same results as one
    call). Returns the logged objectives per unit weight of the epochs
    this call ran (float32, one per epoch, for the Keras loss tracker; none
    once the engine has ended); `show_epoch(i)` then makes the gap's
    logger measure the fit's i-th epoch."""
    return self._run.run_all(sdca, seconds)

  def show_epoch(self, index):
    """Makes the gap's logger of a fit run by `engine_epochs` measure its
    `index`-th epoch (counted from the fit's first)."""
    self._run.shown = index

  def end_fit(self):
    """After a fit on the engine's epochs (also when it raised): the state
    stays the last epoch's, momentum's kept for the next fit."""
    run, self._run = self._run, None
    if run is not None:
      run.close()

  def _keep_momentum(self, state):
    """Keeps the momentum's state at the end of a fit (`_EngineEpochs`)."""
    self.momentum_state = state

  def fit_across_processes(self, sdca, strategy, arrays, epochs, tol,
                           verbose, rows_error=None, num_features=None):
    """`fit` in one worker of a multi-worker strategy: CoCoA+ rounds across
    the workers (`tf_sdca.keras.multi_worker.train`) on `arrays`, this
    worker's fixed shard (`pack(arrays_only=True)`); a round is one pass
    over every shard (`epochs` bounds them). Every worker ends with the
    same weights; the History has the rounds' `loss` and `duality_gap`.
    Each call trains from zero duals (w = 0): the rounds' duals live in the
    workers' shards, not the model. `rows_error`: what this worker's rows
    raised (`arrays` None; `num_features`: the sparse slots' width, where
    known): the other workers are told, then it is raised."""
    m = self._model
    result = multi_worker.train(
        strategy, arrays, epochs, tol, verbose, rows_error=rows_error,
        num_features=num_features, loss=m.loss_type, l1=m.l1,
        l2=m.l2, gamma=m.gamma, seed=m.seed, num_classes=m.num_classes,
        hinge_step=m.hinge_step)
    self.packed, self.row_duals = None, None
    state_lib.write_weights(sdca, multi_worker.weight_table(result), m.l1,
                            m.l2)
    return multi_worker.history(m, result)

  # ------------------------------------------------------------ averaging
  def _start_average(self, sdca, packed, initial_epoch):
    """At the start of `fit`: the `Averaging` hook of an averaging fit
    (continuing or starting the model's mean), else None."""
    m = self._model
    if m.average_from is None:
      self.average = None
      return None

    def rows():
      return self.packed if self.mode == PACKED else None

    def iterate():
      # The training state now (see `tf_sdca.keras.state.iterate`).
      return state_lib.iterate(rows(), sdca)

    def set_iterate(keys, table, duals):
      state_lib.set_iterate(rows(), sdca, keys, table, duals, m.l1, m.l2)

    mean_gap = None
    if packed:
      p, config = self.packed, self.config()

      def mean_gap(table, duals):
        return p.gap_at(table, duals, config, m.loss_type, m.l1, m.l2)
    hook = callbacks_lib.Averaging(
        m.average_from, iterate, set_iterate,
        1 if m.num_classes == 1 else m.num_classes, mean_gap)
    self.average = hook.start(self.average, packed,
                              self.packed.keys if packed else None,
                              initial_epoch)
    return hook

  def last_iterate(self, sdca, spec):
    """`LinearModel.last_iterate` of the model's `sdca` and feature `spec`:
    the last epoch's shrunk weights after an averaging fit, else None."""
    m, average = self._model, self.average
    if average is None or not average.installed:
      return None
    return state_lib.kernels_and_bias(
        sdca, average.last[1], [s[:2] for s in spec], m.use_bias, m.l1,
        m.l2, m.num_classes)

  # ---------------------------------------------------------- duality gap
  def duality_gap(self, sdca, data, gap_batch):
    """`LinearModel.duality_gap(data)`: of the packed rows when `data` is
    None after an in-memory fit, else over `data` (None: the last streamed
    fit's), summing `gap_batch(batch)`, each batch's
    `SdcaModel.gap_parts`."""
    if data is None and self.packed is not None:
      p = self.packed
      parts = engine.objective_parts(p.rows, p.table, p.duals, self.config())
      p.parts.assign(parts)
      self.train_weight = p.total_weight
      return self.packed_gap()
    data = self.gap_data if data is None else data
    if data is None or sdca is None:
      raise ValueError("duality_gap needs training data: call fit first")
    self.flush(sdca)
    # The sums of tf_sdca.SdcaModel.duality_gap, batch by batch.
    parts = np.zeros(3)
    for batch in data:
      parts += gap_batch(batch).numpy()
    self.train_weight = float(parts[2])
    return sdca.gap_from_parts(parts)

  # --------------------------------------------------------------- saving
  def sdca_state(self, sdca):
    """`LinearModel.sdca_state()` of the model's `sdca` (None before it is
    created), the packed rows' duals included."""
    if sdca is None:
      if self.pending_state is not None:  # loaded, not yet trained
        return self.pending_state
      raise ValueError("the model has no SDCA state: fit or load it first")
    self.flush(sdca)
    return sdca.get_state()

  def save(self, store, sdca):
    """Saves the SDCA state of `sdca` (or the loaded one it has not taken
    yet) into `store` with this training state (the packed rows' float64
    duals, momentum's and the mean's state) and the options it was trained
    under (`state_meaning`; see
    `tf_sdca.keras.saving.save_state`); nothing before any."""
    self.flush(sdca)
    state = sdca.get_state() if sdca is not None else self.pending_state
    if state is None:
      return
    rows = (self.row_duals if self.packed is None else
            (self.packed.keys, self.packed.duals.numpy()))
    # During a fit on the engine's epochs (a backup or checkpoint at an
    # epoch's end) its momentum now, which a fit resumed from the file
    # goes on from, as the uninterrupted one does.
    momentum = (self.momentum_state if self._run is None else
                self._run.momentum_state())
    saving.save_state(store, state, self.state_meaning(), rows,
                      self.train_weight, momentum, self.average)

  def state_meaning(self):
    """The options that give the model's SDCA state its meaning
    (`tf_sdca.sdca_model.state_meaning`), saved beside it and checked at
    load; not the table shards, as a loaded state is re-sharded."""
    return state_meaning(SdcaModel.check_options(self._sdca_options()),
                         sharded=False)

  def restore(self, loaded, sdca):
    """Takes the training state of a loaded file
    (`tf_sdca.keras.saving.load_state`'s dict), its SDCA state into `sdca`
    (or, None, into the SdcaModel `new_sdca` creates)."""
    if sdca is not None:  # first: a refused state sets nothing
      sdca.set_state(loaded["state"])
      self.pending_state = None  # (replaced)
    else:
      self.pending_state = loaded["state"]
    if loaded["row_duals"] is not None:
      self.row_duals = loaded["row_duals"]
    self.momentum_state = loaded["momentum"]
    self.average = loaded["average"]
    self.train_weight = loaded["train_weight"]
    if self._run is not None and sdca is not None:
      self._restart_run(sdca)
    else:
      self.packed = None

  def _restart_run(self, sdca):
    """A load during an in-memory fit on the engine's epochs (Keras'
    `BackupAndRestore` loads its backup in `on_train_begin`, after the rows
    were packed): the fit goes on from the loaded state, its epochs
    started again from it (the load dropped the packed rows, and the next
    step failed on them)."""
    p, run = self.packed, self._run
    duals = state_lib.known_duals(p.keys, None, self.row_duals)
    if duals is None:
      self._run, self.packed = None, None
      run.abandon()
      raise ValueError(
          "LinearModel: the weights loaded during this fit were saved from "
          "a fit on other rows (their duals are not these rows'); load them "
          "before fit, or train them on their own rows")
    p.set_arrays(state_lib.weight_table(sdca), duals)
    run.abandon()
    end, tol = self._run_end
    self._run = _EngineEpochs(
        self._model, p, sdca, end - int(sdca.calls.numpy()), tol,
        self.config(), self.visit_order(), self.momentum_state,
        self._keep_momentum, write_at_end=run.write_at_end)


# Whether a packed fit on the engine's epochs that nothing reads between
# its epochs (`TrainingState.callbacks`' `unread`) writes the model's
# variables only after its last epoch, and lets the engine run its epochs
# several per op call where it can (`engine.epochs_of`'s `read_state`:
# each Keras step then logs its epoch from the history), False: after
# every epoch, one epoch per step; the same variables, duals and History
# at the end (tests/test_keras_engine_writes.py). Writing the weight
# table, the duals and the shrunk weights into the variables is ~10
# TensorFlow ops per Keras step, an epoch's op calls two more.
WRITE_AT_END = True


# Whether such a fit runs its epochs in one go and then shows each epoch's
# logs to the callbacks (the gap's logger, History, Keras' progress bar),
# not in Keras' loop of a step per epoch (`LinearModel._fit_in_one_go`;
# the same History, variables, duals and printed progress:
# tests/test_keras_one_go.py). Keras' loop costs ~0.4 ms per epoch (its
# metrics' resets and results, the callbacks' hooks) and ~6 ms per fit
# (its data iterator, the loss tracker's updates), against epochs of
# 0.02-1 ms on small data sets.
ONE_GO = True

# A fit in one go that prints its progress (verbose 'auto', 1 or 2) runs
# its epochs in runs of about this many seconds (to the first epoch that
# ends after it; the engine's fused op calls take up to
# `tf_sdca.engine.FUSED_SECONDS`), each run's epochs then shown to the
# callbacks: the progress is printed at most about this late. A fit
# without progress runs all its epochs in one run.
PROGRESS_SECONDS = 0.1


class _EngineEpochs:
  """The epochs of an in-memory fit on the engine (`engine.epochs_of` over
  the packed rows, with momentum's extrapolation and the gap beside the
  next epoch), one per Keras step, seeded by the model's count of steps
  as `TrainingState.epoch` seeds them: the same weights and duals.

  Args:
    model: the `LinearModel` (its options).
    packed: this fit's `tf_sdca.keras.state.PackedRows`.
    sdca: the model's `SdcaModel` (its count of steps).
    epochs: the most epochs Keras will ask for.
    tol: the gap at which the engine stops (as the gap's logger does).
    config: the engine's `Config` of the model's options.
    visit_order: the fit's order (`TrainingState.visit_order`).
    momentum_state: `(example keys, Extrapolation.state())` of the model's
      last fit with momentum, or None.
    keep_momentum: called at the end with the state to keep (or None).
    write_at_end: write the variables (the packed table and duals, the
      model's weights) at `close` from the point the last step left (the
      arrays the engine replaces, never changes in place), not at every
      step, and let the engine fuse epochs: for a fit where nothing reads
      the model in between and only the engine's end or `tol` stops it
      (the gap's logger stops at the epoch the engine stops at).
  """

  def __init__(self, model, packed, sdca, epochs, tol, config, visit_order,
               momentum_state, keep_momentum, write_at_end=False):
    m = model
    self.write_at_end = write_at_end
    self._unwritten = None  # (sdca, table, duals) of the last step
    self.shown = -1  # the epoch `measure` reports (-1: the last one run)
    p = self._packed = packed
    self._l1, self._l2 = m.l1, m.l2
    self._keep_momentum = keep_momentum
    k = m.num_classes
    state = self._state = engine.State(k, k > 1)
    table, duals = p.arrays()
    state.sparse_weights = table  # the whole table, as one part
    state.install_table(table)
    n = p.keys.shape[0]
    state.duals = duals.reshape((n, k) if k > 1 else (n,))
    momentum = second_order.momentum_with(
        p.block_step, m.momentum,
        options.momentum_for(m.momentum, visit_order, True, False, False))
    self._extrapolation = None
    if momentum:
      self._extrapolation = engine.Extrapolation(
          momentum, m.loss_type, p.labels,
          lambda: (state.duals, state.weight_table()), state.set_point,
          lock_free=p.problem.num_threads > 1)
      saved = momentum_state
      if saved is not None and np.array_equal(saved[0], p.keys):
        # A fit that continues the model on the same rows goes on as an
        # uninterrupted one: the epochs' orders follow the model's count
        # of steps.
        self._extrapolation.restore(saved[1], state.duals.shape,
                                    table.shape)
    first = int(sdca.calls.numpy())
    self.history = {"loss": [], "duality_gap": [], "rows_per_sec": []}
    self._epochs = engine.epochs_of(
        self.history, state, p.problem, config, n,
        first + max(int(epochs), 0), first, tol, read=True,
        extrapolation=self._extrapolation, second_order=p.block_step,
        warn_slow=False, read_state=not write_at_end)

  def step(self, sdca):
    epoch = next(self._epochs)
    sdca.calls.assign(epoch + 1)
    state = self._state
    if self.write_at_end:
      self._unwritten = (sdca, state.weight_table(), state.duals)
    else:
      self._write(sdca, state.weight_table(), state.duals)
    return tf.constant(self.history["loss"][-1], tf.float32)

  def run_all(self, sdca, seconds=None):
    """`step` until the engine ends (write_at_end only) or, given
    `seconds`, until the first epoch that ends that long after the call
    (pausing the engine's epochs between two of them changes nothing they
    compute), the count of steps written once; returns the objectives of
    the epochs it ran (float32)."""
    if not self.write_at_end:
      raise RuntimeError("the epochs of a fit read between its epochs run "
                         "one a step")
    state, epoch = self._state, None
    first = len(self.history["loss"])
    deadline = None if seconds is None else time.perf_counter() + seconds
    try:
      for epoch in self._epochs:
        self._unwritten = (sdca, state.weight_table(), state.duals)
        if deadline is not None and time.perf_counter() >= deadline:
          break
    finally:
      if epoch is not None:
        sdca.calls.assign(epoch + 1)
    return np.asarray(self.history["loss"][first:], np.float32)

  def _write(self, sdca, table, duals):
    self._packed.set_arrays(table, duals)
    state_lib.write_weights(sdca, table, self._l1, self._l2)

  def measure(self):
    """(objective per unit weight, relative gap) of the last epoch (or
    after `run_all`, of the `shown`-th)."""
    return (self.history["loss"][self.shown],
            self.history["duality_gap"][self.shown])

  def momentum_state(self):
    """`(example keys, Extrapolation.state())` now, or None without
    momentum (as `close` keeps it)."""
    if self._extrapolation is None:
      return None
    state = self._extrapolation.state()
    return None if state is None else (self._packed.keys, state)

  def abandon(self):
    """Stops the epochs without writing or keeping anything (a load
    replaced the state they train)."""
    self._epochs.close()
    self._unwritten = None

  def close(self):
    self._epochs.close()
    unwritten, self._unwritten = self._unwritten, None
    if unwritten is not None:
      self._write(*unwritten)
    if self._extrapolation is not None:
      self._keep_momentum(self.momentum_state())

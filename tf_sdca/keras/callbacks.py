"""Callbacks and engine hooks of `tf_sdca.keras.LinearModel.fit`.

`fit` adds them itself (`tf_sdca.keras.fitting.TrainingState.callbacks`):
`DualityGapLogger` (the exact objective and duality gap after every epoch,
the `tol` stop) and, with `average_from`, the `Averaging` hook that keeps
the running mean of the iterates (`Average`). (Momentum's extrapolated
epochs are the engine's: `tf_sdca.keras.fitting`.) Each works
through what it is given (the packed rows, measuring and state functions),
not through the model's internals.
"""
import warnings

import keras
import numpy as np

from tf_sdca import averaging
from tf_sdca import losses


def _overridden(callback, *names):
  """Whether `callback` overrides one of Keras' default hooks `names`."""
  return any(not getattr(getattr(callback, name), "_is_default", False)
             for name in names)


class EpochHooks:
  """The per-epoch hooks of a `keras.callbacks.CallbackList`, as its own
  `on_epoch_begin`, `on_train_batch_begin`, `on_train_batch_end` and
  `on_epoch_end` call them (each callback in order, given one copy of the
  logs, float values, keys sorted), on the callbacks that override them:
  Keras' hooks cost ~10 us each per epoch converting the logs for
  callbacks (History, the gap's logger) that do nothing there. For a list
  of synchronous callbacks (no async dispatch), with Python float logs.
  """

  def __init__(self, callback_list):
    callbacks = callback_list.callbacks
    self._epoch_begin = [c for c in callbacks
                         if _overridden(c, "on_epoch_begin")]
    # (Keras' default on_train_batch_* call the older on_batch_*.)
    self._batch_begin = [c for c in callbacks if _overridden(
        c, "on_train_batch_begin", "on_batch_begin")]
    self._batch_end = [c for c in callbacks if _overridden(
        c, "on_train_batch_end", "on_batch_end")]
    self._epoch_end = [self._history_end(c) if
                       type(c) is keras.callbacks.History else  # pylint: disable=unidiomatic-typecheck
                       c.on_epoch_end for c in callbacks
                       if _overridden(c, "on_epoch_end")]
    self._histories = [c for c in callbacks
                       if type(c) is keras.callbacks.History]  # pylint: disable=unidiomatic-typecheck
    self._ended = False

  @staticmethod
  def _history_end(history):
    """Keras' `History.on_epoch_end` but for its `model.history = self`
    (a tracked attribute set, ~10 us), which `finish` does once."""

    def on_epoch_end(epoch, logs):
      history.epoch.append(epoch)
      for key, value in logs.items():
        history.history.setdefault(key, []).append(value)
    return on_epoch_end

  @staticmethod
  def _logs(logs):
    return dict(sorted((logs or {}).items()))

  def epoch_begin(self, epoch):
    logs = {}
    for c in self._epoch_begin:
      c.on_epoch_begin(epoch, logs)

  def batch_begin(self, batch):
    logs = {}
    for c in self._batch_begin:
      c.on_train_batch_begin(batch, logs=logs)

  def batch_end(self, batch, logs):
    logs = self._logs(logs)
    for c in self._batch_end:
      c.on_train_batch_end(batch, logs=logs)

  def epoch_end(self, epoch, logs):
    logs = self._logs(logs)
    for on_epoch_end in self._epoch_end:
      on_epoch_end(epoch, logs)
    self._ended = True

  def finish(self):
    """After the last epoch: what Keras' History sets at each epoch's
    end, `model.history`."""
    if self._ended:
      for history in self._histories:
        history.model.history = history


class StreamedWeightCount(keras.callbacks.Callback):
  """A streamed fit's training weight, the divisor of the regularisation in
  `test_step`'s loss, summed by its train steps over each epoch (zeroed as
  one begins): Keras validates an epoch before its callbacks end it, and
  the first epoch of a model's first streamed fit validated with a weight
  of 0, its regularisation left out of `val_loss` (an EarlyStopping on it
  saw epoch 1 lower than it was)."""

  def __init__(self, training):
    super().__init__()
    self._training = training

  def on_epoch_begin(self, epoch, logs=None):
    del epoch, logs
    self._training.train_weight = 0.0


class DualityGapLogger(keras.callbacks.Callback):
  """Runs first at each epoch's end: replaces `loss` by the exact
  regularised objective, adds `duality_gap`, stops below `tol`.

  Args:
    model: the model to stop (`stop_training`).
    measure: returns (objective per unit weight, relative gap) of the
      training state now.
    tol: stop after the first epoch whose gap is below it (None: never).
    loss_type: the op's loss name (for the progress watch's messages).
    fixed_batches: the batches come in the same order every epoch
      (streamed, without held rows): what the progress watch expects.
    streamed: the fit streams a dataset (float32 duals: the progress
      watch's floor is `losses.STREAMED_GAP_FLOOR`).
    averaging: the `Averaging` hook of an averaging fit, else None: the
      logged `loss` and `duality_gap` are then the mean's, `last_loss` and
      `last_duality_gap` the last iterate's.
  """

  def __init__(self, model, measure, tol, loss_type, fixed_batches,
               averaging=None, streamed=False):
    super().__init__()
    self._linear = model
    self._measure = measure
    self._tol = tol
    self._averaging = averaging
    # (A dataset's gap is measured over its float32 duals: the streamed
    # floor; packed rows keep float64 ones.)
    self._watch = losses.ProgressWatch(
        fixed_batches=fixed_batches, loss=loss_type,
        floor=losses.STREAMED_GAP_FLOOR if streamed else 1e-9)

  def on_epoch_end(self, epoch, logs=None):
    objective, gap = self._measure()
    if self._averaging is not None:
      objective, gap = self._averaging.epoch_end(epoch, objective, gap, logs,
                                                 self._measure)
    if logs is not None:
      logs["loss"] = objective
      logs["duality_gap"] = gap
    slow = self._watch.update(gap)
    if slow:
      warnings.warn(slow, UserWarning,
                    stacklevel=losses.caller_stacklevel())
    if self._tol is not None and gap < self._tol:
      self._linear.stop_training = True

  def on_train_end(self, logs=None):
    if self._averaging is not None:
      self._averaging.install()


class Average:
  """The running mean of an averaging `fit`'s iterates: the float64 weight
  table (the SdcaModel's slots end to end) and the duals of the examples
  `keys` (packed rows: float64 per row; streamed: the float32 state's dual
  columns). `installed`: the model holds the mean, and `last` the last
  iterate (as `tf_sdca.keras.state.iterate` gives it) to resume from."""

  def __init__(self, packed, count=0, keys=None, parts=None):
    self.packed = bool(packed)
    self.mean = averaging.RunningMean(count, parts)
    self.keys = keys
    self.installed = False
    self.last = None


class Averaging:
  """`average_from`'s engine hook: adds the iterates after epochs
  `average_from`, ... to the model's `Average`, measures the mean, and
  makes it the model at the end of training.

  Args:
    average_from: the first epoch T0 whose iterate enters the mean.
    iterate: returns the training state now as (keys, table, duals).
    set_iterate: makes (keys, table, duals) the training state.
    dual_columns: duals per example (1, or K of a multiclass loss).
    mean_gap: `(table, duals) -> (objective, relative gap)` of packed rows
      at a mean; None for streamed batches (the mean is then installed for
      the while and measured as the iterates are).
  """

  def __init__(self, average_from, iterate, set_iterate, dual_columns,
               mean_gap):
    self.average_from = average_from
    self._iterate = iterate
    self._set_iterate = set_iterate
    self._dual_columns = dual_columns
    self._mean_gap = mean_gap
    self.average = None

  def start(self, average, packed, keys, initial_epoch):
    """At the start of `fit`: continues the mean `average` when resuming
    (`initial_epoch > 0` after an averaged fit: the last iterate becomes
    the training state again), else starts a new one (holding the start
    when it is an iterate to average, `initial_epoch >= average_from`).
    `keys`: the packed rows' example keys (None when streamed). Returns the
    `Average` for the model to keep.

    Raises:
      ValueError: when resuming a packed mean on other rows.
    """
    if (initial_epoch > 0 and average is not None and average.mean.count and
        average.packed == packed):
      if packed and not np.array_equal(average.keys, keys):
        raise ValueError(
            f"fit(initial_epoch={initial_epoch}) with average_from="
            f"{self.average_from} continues the mean of the last fit, over "
            "other rows (example ids) than these: resume on the same rows, "
            "or start a new mean with initial_epoch=0")
      if average.installed:
        self._set_iterate(*average.last)
        average.installed, average.last = False, None
      self.average = average
      return average
    self.average = Average(packed)
    if initial_epoch >= self.average_from:
      self.add()
    return self.average

  def epoch_end(self, epoch, objective, gap, logs, measure):
    """After an epoch whose iterate measured (objective, gap): adds it to
    the mean when due, logs it as `last_loss` and `last_duality_gap`, and
    returns the mean's (objective, gap) once the mean has an iterate."""
    if epoch + 1 >= self.average_from:
      self.add()
    if logs is not None:
      logs["last_loss"] = objective
      logs["last_duality_gap"] = gap
    if self.average.mean.count:
      objective, gap = self.gap(measure)
    return objective, gap

  def add(self):
    """Adds the training state to the mean (examples the mean has not seen
    yet, e.g. streamed ones, enter it with dual 0, what they had)."""
    average = self.average
    keys, table, duals = self._iterate()
    if not average.packed:
      duals = duals[:, :self._dual_columns]
    if average.keys is not None and not np.array_equal(average.keys, keys):
      union = np.union1d(average.keys, keys)
      average.mean.parts[1] = on_keys(average.keys, average.mean.parts[1],
                                      union)
      duals = on_keys(keys, duals, union)
      keys = union
    average.keys = keys
    average.mean.add([table, duals])

  def mean_iterate(self, current):
    """The mean as an iterate (keys, table, duals) for `set_iterate`;
    `current`: the training state (`iterate()`), whose example rows
    outside the duals (streaming) the mean keeps."""
    average = self.average
    table, duals = average.mean.parts
    if average.packed:
      return average.keys, table, duals
    keys, _, values = current
    values = on_keys(keys, values, average.keys).astype(np.float32)
    values[:, :self._dual_columns] = duals
    return average.keys, table, values

  def gap(self, measure):
    """(objective per unit weight, relative gap) of the mean: for packed
    rows one `PackedSolve` call without passes on the mean table and duals;
    streamed, `measure` run with the mean installed for the while."""
    average = self.average
    if average.packed:
      table, duals = average.mean.parts
      return self._mean_gap(table, duals)
    current = self._iterate()
    self._set_iterate(*self.mean_iterate(current))
    try:
      return measure()
    finally:
      self._set_iterate(*current)

  def install(self):
    """At the end of `fit`: the mean becomes the model (weights, SDCA
    state); the last iterate is kept to resume from."""
    average = self.average
    if average is None or not average.mean.count or average.installed:
      return
    current = self._iterate()
    self._set_iterate(*self.mean_iterate(current))
    average.last, average.installed = current, True


def on_keys(keys, values, new_keys):
  """`values` (rows keyed by sorted or packed `keys`) on `new_keys`, a
  superset: the rows of keys not in `keys` are 0."""
  if np.array_equal(keys, new_keys):
    return values
  out = np.zeros((new_keys.shape[0],) + values.shape[1:], values.dtype)
  order = np.argsort(keys, kind="stable")
  out[np.searchsorted(new_keys, keys[order])] = values[order]
  return out

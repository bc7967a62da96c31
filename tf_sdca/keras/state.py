"""The SDCA training state of `tf_sdca.keras.LinearModel`.

An in-memory `fit` packs its rows once (`PackedRows`) and trains them with
`TfSdca>PackedSolve` on the same float64 weights (the `SdcaModel`'s slots,
end to end as one weight table) that streamed batches train through
`tf_sdca.SdcaModel`; the functions here move that state between the two
forms: the weight table, the duals of packed rows and the example state's
float32 rows, and an iterate `(example keys, weight table, duals)` as output
averaging takes and gives it.
"""
import numpy as np
import tensorflow as tf

from tf_sdca import engine
from tf_sdca import losses


class PackedRows:
  """What an in-memory `fit` trains: the rows packed once, their example-id
  keys, example weights and float64 duals, the float64 weight table (the
  SdcaModel's slots end to end), the last epoch's objective parts, and the
  inputs of the train metrics (None without compiled metrics)."""

  def __init__(self, problem, keys, duals, table, example_weights,
               metric_inputs, iterate=None, labels=None, row_norms=None,
               block_step=None):
    # The `tf_sdca.engine.Problem` of the packed rows (`rows`), which the
    # engine's epochs train.
    self.problem = problem
    self.rows = problem.rows
    # The rows' `engine.row_norms` where the default order reads them.
    self.row_norms = row_norms
    # The `tf_sdca.second_order.ExactBlockStep` the engine's epochs take
    # after each pass, or None.
    self.block_step = block_step
    self.labels = labels  # the rows' labels (momentum's dual domains)
    self.keys = keys
    self.example_weights = example_weights
    self.total_weight = float(example_weights.sum(dtype=np.float64))
    # The float64 duals, weight table and objective parts: numpy arrays
    # until something reads them as the variables `duals`, `table` and
    # `parts` (created then; at once with `variables`, for the traced
    # steps of `epoch`). A fit on the engine's epochs reads and writes the
    # arrays (`arrays`, `set_arrays`): a fresh model's fit creates none of
    # the three variables (~0.1 ms each).
    self._arrays = {"duals": np.asarray(duals, np.float64),
                    "table": np.asarray(table, np.float64),
                    "parts": np.full(4, np.nan)}
    self._variables = {}
    self.metric_inputs = metric_inputs
    # ASDCA's accelerated iterate (visit_order='asdca'), else None.
    self.iterate = (None if iterate is None else
                    tf.Variable(iterate, trainable=False, dtype=tf.float64))

  def _variable(self, name):
    if name not in self._variables:
      with tf.init_scope():
        self._variables[name] = tf.Variable(
            self._arrays.pop(name), trainable=False, dtype=tf.float64)
    return self._variables[name]

  @property
  def duals(self):
    """The float64 duals `[n]` (`[n K]`: each row's K), a variable."""
    return self._variable("duals")

  @property
  def table(self):
    """The float64 weight table, a variable."""
    return self._variable("table")

  @property
  def parts(self):
    """The last epoch's float64 objective parts, a variable."""
    return self._variable("parts")

  def variables(self):
    """Creates the variables `duals`, `table` and `parts` now."""
    for name in ("duals", "table", "parts"):
      self._variable(name)

  def arrays(self):
    """Copies of the float64 weight table and duals (numpy)."""
    return tuple(np.array(self._arrays[name]) if name in self._arrays else
                 self._variables[name].numpy() for name in ("table", "duals"))

  def set_arrays(self, table, duals):
    """Makes the float64 `table` and `duals` (any shape of their sizes)
    the rows' weight table and duals (copied)."""
    for name, value in (("table", table), ("duals", duals)):
      if name in self._variables:
        self._variables[name].assign(np.reshape(value, -1))
      else:
        self._arrays[name] = np.array(np.reshape(value, -1), np.float64)

  def epoch(self, seed, config, asdca):
    """One epoch over the rows (one `TfSdca>PackedSolve` call, ASDCA's when
    `asdca`), its results kept; returns (the new weight table, the
    objective parts)."""
    if asdca:
      w, duals, iterate, parts, _ = engine.asdca_pass(
          self.rows, self.table, self.duals, self.iterate, seed, config)
      self.iterate.assign(iterate)
    else:
      w, duals, parts = engine.packed_pass(self.rows, self.table,
                                           self.duals, seed, config)
    self.table.assign(w)
    self.duals.assign(duals)
    self.parts.assign(parts)
    return w, parts

  def gap(self, loss_type, l1, l2, parts=None):
    """(objective per unit weight, relative gap) of the objective `parts`
    (those after the last epoch when None)."""
    if parts is None:
      parts = self.parts.numpy()
    objective, gap = engine.objective_and_gap(parts, loss_type, l1, l2)
    return (objective / max(self.total_weight, 1e-300),
            gap / max(abs(objective), 1e-300))

  def gap_at(self, table, duals, config, loss_type, l1, l2):
    """`gap` at the weight table and duals given (one `PackedSolve` call
    without passes), e.g. those of a mean of iterates."""
    parts = engine.objective_parts(
        self.rows, tf.constant(table), tf.constant(duals.reshape(-1)),
        config).numpy()
    return self.gap(loss_type, l1, l2, parts)

  def state_rows(self, num_classes):
    """The rows' float32 example-state rows (duals, then the example weight
    last), as `SdcaModel.state_insert` takes them."""
    k = num_classes
    values = np.zeros((self.keys.shape[0], 4 if k == 1 else k + 3),
                      np.float32)
    if k == 1:
      values[:, 0] = self.duals.numpy()
    else:
      values[:, :k] = float32_blocks(self.duals.numpy().reshape(-1, k))
    values[:, -1] = self.example_weights
    return values


def weight_table(sdca):
  """The float64 weight table of `sdca`: its slots end to end (row-major
  `[slots, K]` for a multiclass loss: the engine's layout)."""
  return np.concatenate([slot.numpy().reshape(-1)
                         for group in sdca.weight_groups()
                         for slot in group.slots])


def write_weights(sdca, table, l1, l2):
  """Splits the float64 weight `table` (a tensor, or a numpy array: then
  split and shrunk in numpy, two ops a slot where slicing the tensor takes
  six) into the slots of `sdca` and writes the shrunk weights into its
  variables."""
  offset = 0
  host = isinstance(table, np.ndarray)
  for group in sdca.weight_groups():
    for var, slot in zip(group.variables_, group.slots):
      size = slot.shape.num_elements()
      if host:
        part = table[offset:offset + size].reshape(slot.shape)
        shrunk = losses.shrink_l1(part, l1, l2).reshape(var.shape)
      else:
        part = tf.reshape(table[offset:offset + size], slot.shape)
        shrunk = tf.reshape(losses.shrink_l1(part, l1, l2), var.shape)
      offset += size
      slot.assign(part)
      # (float64 to the variable's type by TensorFlow's cast either way.)
      var.assign(tf.cast(shrunk, var.dtype))


def weights_set_outside(sdca, l1, l2):
  """Whether the variables of `sdca` (the model's Keras weights) hold other
  weights than its training state's: the shrunk slots, as `write_weights`
  and `SdcaModel.update_weights` write them. They differ only where
  something wrote the variables itself (`set_weights`, Keras'
  `EarlyStopping(restore_best_weights=True)`)."""
  for group in sdca.weight_groups():
    for var, slot in zip(group.variables_, group.slots):
      shrunk = losses.shrink_l1(slot.numpy(), l1, l2)
      if not np.array_equal(
          var.numpy(), shrunk.reshape(var.shape).astype(
              var.dtype.as_numpy_dtype)):
        return True
  return False


def table_slots(sdca, table):
  """The weight `table` split into arrays of the shapes of the slots of
  `sdca`."""
  slots, offset = [], 0
  for group in sdca.weight_groups():
    for slot in group.slots:
      size = slot.shape.num_elements()
      slots.append(table[offset:offset + size].reshape(slot.shape))
      offset += size
  return slots


def known_duals(keys, packed, row_duals):
  """float64 duals of the rows with the example-id `keys`, from the packed
  rows or the saved `(keys, duals)` of an in-memory fit when either is on
  the same keys in the same order; else None."""
  for source in (None if packed is None else (packed.keys, packed.duals),
                 row_duals):
    if source is not None and np.array_equal(source[0], keys):
      duals = source[1]
      return np.array(getattr(duals, "numpy", lambda: duals)(), np.float64)
  return None


def stored_duals(sdca, keys, labels, num_classes):
  """float64 duals of `keys` in the example state of `sdca` (0 for keys
  not stored; `[n, K]` blocks for a multiclass loss, whose rows have these
  `labels`)."""
  k = num_classes
  if sdca.state_size() == 0:
    return np.zeros((keys.shape[0], k) if k > 1 else keys.shape[0],
                    np.float64)
  state = sdca.state_lookup(tf.constant(keys)).numpy()
  if k == 1:
    return state[:, 0].astype(np.float64)
  return dual_blocks(state, labels)


def iterate(packed, sdca):
  """The training state now, as (example keys, float64 weight table,
  duals): for `packed` rows the keys in row order and the float64 duals
  (`[n]` or `[n, K]`); without (streamed batches) the example state's keys
  sorted and its float32 rows `[m, width]` (the duals in the first 1 or K
  columns)."""
  if packed is not None:
    return packed.keys, packed.table.numpy(), packed.duals.numpy()
  state = sdca.get_state()
  order = np.argsort(state["keys"], kind="stable")
  table = np.concatenate([np.reshape(slot, -1) for slot in state["slots"]])
  return state["keys"][order], table, state["values"][order]


def set_iterate(packed, sdca, keys, table, duals, l1, l2):
  """Makes (keys, table, duals) as `iterate` returns them the training
  state (of the `packed` rows, or of `sdca` without) and writes the shrunk
  weights into the variables.

  Raises:
    ValueError: when `keys` are not those of the packed rows.
  """
  if packed is not None:
    if not np.array_equal(packed.keys, keys):
      raise ValueError("average_from: the rows of this fit are not those "
                       "of the mean it continues (initial_epoch > 0 "
                       "resumes a mean on the same examples)")
    packed.table.assign(table)
    packed.duals.assign(np.reshape(duals, packed.duals.shape))
    write_weights(sdca, tf.constant(table), l1, l2)
    return
  sdca.set_state(dict(keys=keys, values=duals,
                      slots=table_slots(sdca, table)))


def kernels_and_bias(sdca, table, features, with_bias, l1, l2,
                     num_classes):
  """The shrunk weights of a weight `table` of `sdca` as `{"kernels":
  {feature: [size, K] array}, "bias": [K] array or None}`; `features`:
  (name, kind) of the model's features in spec order (the slots hold the
  sparse and categorical ones first, then the dense ones, then the bias
  when `with_bias`)."""
  kernels, bias, offset = {}, None, 0
  names = ([n for n, kind in features if kind != "dense"] +
           [n for n, kind in features if kind == "dense"])
  names += ["bias"] if with_bias else []
  slots = [slot for group in sdca.weight_groups() for slot in group.slots]
  for name, slot in zip(names, slots):
    size = slot.shape.num_elements()
    part = losses.shrink_l1(table[offset:offset + size], l1, l2)
    offset += size
    if name == "bias":
      bias = part.reshape(-1)
    else:
      kernels[name] = part.reshape(size // num_classes, num_classes)
  return {"kernels": kernels, "bias": bias}


def dual_blocks(state, labels):
  """float64 `[n, K]` dual blocks from float32 state rows `[n, K + 3]`:
  the label's dual is the negated sum of the others (as the op reads it)."""
  k = state.shape[1] - 3
  alpha = state[:, :k].astype(np.float64)
  rows = np.arange(alpha.shape[0])
  labels = np.asarray(labels, np.int64)
  alpha[rows, labels] = 0.0
  alpha[rows, labels] = -alpha.sum(axis=1)
  return alpha


def float32_blocks(alpha):
  """`[n, K]` dual blocks in float32 as the op stores them: every dual
  rounded toward zero (so that the blocks stay e_y - p with p on the
  simplex once the label's is rebuilt from the others)."""
  rounded = alpha.astype(np.float32)
  away = np.abs(rounded) > np.abs(alpha)
  rounded[away] = np.nextafter(rounded[away], np.float32(0))
  return rounded

"""`SdcaModel`: TensorFlow's SDCA linear-model API for TF 2, on our op.

Code written for the old `tensorflow.python.ops.sdca_ops.SdcaModel` runs by
changing the import; it works eagerly and inside `tf.function`.

Objective (weighted mean of the losses, regularisation divided by the total
example weight, as in TensorFlow):

    sum_i s_i loss_i(w.x_i) / sum_i s_i + (l1 |w|_1 + l2/2 |w|^2) / sum_i s_i

State:
- per weight variable, a float64 "unshrunk" slot (`v / l2` in the notation of
  g3doc/losses.md; the float64 accumulation keeps it equal to w(alpha));
  `update_weights` writes `shrink(slot)` into the user's variable;
- per example, the 4 state columns of the op (dual, primal loss, dual loss,
  weight) in `num_table_shards` tables (`TfSdca>ExampleStateTable`) keyed by
  the 64-bit fingerprint of the example id, so an example seen again in a
  later batch resumes from its dual.
Both are tracked: `tf.train.Checkpoint(model=model)` saves and restores them.

Example:
  >>> w = tf.Variable(tf.zeros([2]))
  >>> examples = dict(sparse_features=[], dense_features=[x],
  ...                 example_weights=tf.ones([n]), example_labels=y,
  ...                 example_ids=tf.strings.as_string(tf.range(n)))
  >>> model = SdcaModel(examples, dict(sparse_features_weights=[],
  ...                                  dense_features_weights=[w]),
  ...                   dict(loss_type="logistic_loss",
  ...                        symmetric_l2_regularization=1.0,
  ...                        symmetric_l1_regularization=0.0))
  >>> for _ in range(20):
  ...   model.update_weights(model.minimize())
"""
import collections
import functools
import itertools
import json
import numbers

import numpy as np
import tensorflow as tf

from tf_sdca import losses
from tf_sdca import options as options_lib
from tf_sdca import second_order
from tf_sdca.ops import sdca_ops

_REQUIRED_OPTIONS = ("loss_type", "symmetric_l2_regularization")
# The training options' defaults come from the one table; the rest are
# SdcaModel's own (the dual table, the op's passes, K).
_OPTION_DEFAULTS = dict(
    {option.sdca_key: option.default
     for option in options_lib.OPTIONS.values()
     if option.sdca_key is not None and
     option.sdca_key not in _REQUIRED_OPTIONS},
    num_table_shards=1,
    adaptive=False,
    num_inner_iterations=1,
    num_classes=1,
)

# The methods have no tensor-dependent Python control flow; letting
# AutoGraph transpile them made tracing a tf.function training loop take
# ~4 s instead of ~0.5 s.
_plain_python = tf.autograph.experimental.do_not_convert


class SparseFeatureColumn(
    collections.namedtuple("SparseFeatureColumn",
                           ["example_indices", "feature_indices",
                            "feature_values"])):
  """One sparse feature group of a batch, in coordinate form.

  Args:
    example_indices: int64 `[nnz]`, the row of each entry.
    feature_indices: int64 `[nnz]`, the feature id (row of the weight
      variable) of each entry.
    feature_values: optional float `[nnz]`; None means all 1.0.

  Other integer and bool dtypes are cast; float indices must be whole
  numbers (2.0 is 2; 1.5, NaN or inf is an InvalidArgumentError naming the
  argument, the value and its index), and strings or complex numbers are a
  ValueError naming the argument and the dtype.
  """

  def __new__(cls, example_indices, feature_indices, feature_values=None):
    def convert(value, dtype, name):
      # tf.nest rebuilds the tuple from TensorSpecs when a tf.function
      # takes a batch as its argument: those pass through unchanged.
      if value is None or isinstance(value, tf.TypeSpec):
        return value
      if isinstance(value, np.ndarray) and value.dtype.kind in "iuf":
        # (One aligned copy where tf.convert_to_tensor makes two.)
        value = sdca_ops.to_tensor(value, tf.as_dtype(value.dtype), name)
      # Strings or complex numbers (a tensor's, a numpy array's or a
      # list's) are refused by name: the cast failed with an
      # UnimplementedError naming nothing, or kept the real part.
      argument = f"SparseFeatureColumn's {name}"
      value = _real(value, argument, name)
      if dtype == tf.int64 and value.dtype.is_floating:
        return whole_number_ids(value, argument, "feature id" if name ==
                                "feature_indices" else "example index")
      return tf.cast(value, dtype)

    with tf.name_scope("SparseFeatureColumn"):
      return super().__new__(
          cls, convert(example_indices, tf.int64, "example_indices"),
          convert(feature_indices, tf.int64, "feature_indices"),
          convert(feature_values, tf.float32, "feature_values"))


def _as_list(v):
  return list(v) if isinstance(v, (list, tuple)) else [v]


class _Weights(tf.Module):
  """A (possibly partitioned along axis 0) weight and its float64 slot."""

  def __init__(self, variables, name, num_classes=1):
    super().__init__(name=name)
    self.variables_ = _as_list(variables)
    if not self.variables_:
      raise ValueError(f"{name}: an empty list of variables")
    for v in self.variables_:
      if not isinstance(v, tf.Variable):
        raise ValueError(f"{name}: expected tf.Variable(s), got {type(v)}")
      if not v.shape.is_fully_defined() or v.shape.rank == 0:
        raise ValueError(f"{name}: variable {v.name} needs a known shape of "
                         f"rank >= 1, got {v.shape}")
    # Rows: a variable's elements, or its rows of K class weights (any
    # shape with K in the last axis, e.g. [n, K], or [K] for one bias row).
    for v in self.variables_:
      if num_classes > 1 and v.shape[-1] != num_classes:
        raise ValueError(f"{name}: variable {v.name} has shape {v.shape}; "
                         f"with num_classes={num_classes} its last axis "
                         f"must be the {num_classes} classes")
    sizes = [v.shape.num_elements() // num_classes for v in self.variables_]
    self.size = sum(sizes)
    slot_shape = [-1] if num_classes == 1 else [-1, num_classes]
    # Built outside any tf.function, so that a model created while tracing
    # (e.g. by SDCAOptimizer's first step) owns eager state usable by every
    # later trace.
    with tf.init_scope():
      # In a TF1-style graph the user's variables may not be initialised yet
      # when the slots' initialisers run: start from their initial values.
      initial = [v if tf.executing_eagerly() else v.initial_value
                 for v in self.variables_]
      self.slots = [tf.Variable(tf.cast(tf.reshape(v, slot_shape),
                                        tf.float64),
                                trainable=False, name="unshrunk")
                    for v in initial]
      self.offsets = tf.constant([0] + list(_cumsum(sizes)), tf.int64)
      # Rows changed since the last update_weights (sparse groups), so that
      # updating a 2^24-row variable writes only those rows.
      self.touched = tf.Variable(tf.zeros([0], tf.int64), shape=[None],
                                 trainable=False, name="touched_rows")
    self.means = None  # float64 means of the slots (average_from)

  def start_average(self):
    """Creates the float64 running means of the slots, starting at their
    current values."""
    with tf.init_scope():
      self.means = [tf.Variable(slot.read_value() if tf.executing_eagerly()
                                else slot.initial_value,
                                trainable=False, name="unshrunk_mean")
                    for slot in self.slots]

  def _partition(self, ids):
    part = tf.searchsorted(self.offsets[1:], ids, side="right")
    return tf.cast(part, tf.int32), ids - tf.gather(self.offsets,
                                                     tf.cast(part, tf.int64))

  def gather(self, ids, mean=False):
    """Rows `ids` (int64, global) of the unshrunk weights (of their mean
    with `mean`), float64."""
    slots = self.means if mean else self.slots
    if len(slots) == 1:
      return tf.gather(slots[0], ids)
    part, local = self._partition(ids)
    n = len(slots)
    pieces = tf.dynamic_partition(local, part, n)
    positions = tf.dynamic_partition(tf.range(tf.size(ids)), part, n)
    return tf.dynamic_stitch(
        positions, [tf.gather(s, p) for s, p in zip(slots, pieces)])

  def scatter_update(self, ids, values):
    """Writes float64 `values` at distinct global rows `ids`."""
    if len(self.slots) == 1:
      return [self.slots[0].scatter_update(tf.IndexedSlices(values, ids))]
    part, local = self._partition(ids)
    n = len(self.slots)
    idx = tf.dynamic_partition(local, part, n)
    vals = tf.dynamic_partition(values, part, n)
    return [s.scatter_update(tf.IndexedSlices(v, i))
            for s, i, v in zip(self.slots, idx, vals)]

  def update_variables(self, rows, shrink):
    """Writes shrink(slot) of global `rows` into the user's variables
    (which may have shape [n] or [n, 1, ...])."""
    if len(self.slots) == 1:
      parts = [rows]
    else:
      part, local = self._partition(rows)
      parts = tf.dynamic_partition(local, part, len(self.slots))
    out = []
    for var, slot, idx in zip(self.variables_, self.slots, parts):
      values = _shrink_l1(tf.gather(slot, idx), shrink)
      values = tf.reshape(tf.cast(values, var.dtype),
                          [-1] + var.shape[1:].as_list())
      out.append(var.scatter_update(tf.IndexedSlices(values, idx)))
    return out

  def all_rows(self, mean=False):
    slots = self.means if mean else self.slots
    return tf.concat(slots, axis=0) if len(slots) > 1 else slots[0]

  def distinct_ids(self, ids, argument):
    """The distinct values of a batch's int64 `ids`, ascending, which the
    op gets with their weights; an id outside `[0, size)` fails, the
    message naming `argument`.

    One op (TfSdca>DistinctIds): it marks the ids in a table-sized bitmap
    (2^20 rows: 128 KiB) or, for a table much larger than the batch, sorts
    them. On 50k Criteo-shaped rows (1.3M ids, a 2^20-row table) tf.unique
    took 71-129 ms of a 240 ms `minimize`; this op takes 1.4-1.5 ms, and
    with ExampleKeys 3.5 ms where the TF ops they replace took 10
    (g3doc/benchmarks.md). The op needs the distinct ids, not the whole
    table: with a slot per table row its slots stop fitting the cache.
    """
    return sdca_ops.distinct_ids(ids, self.size, argument=argument)

  def apply_delta(self, rows, start, delta):
    """Adds the op's float32 `delta` of distinct `rows` to the float64
    slots, whose values at those rows were `start` (gathered for the op),
    and appends the rows to those `update_variables` will write.

    Writing `start + delta` is the scatter-add, bit for bit (the rows are
    distinct and nothing else writes them in between), and took 0.45 ms
    for 120k rows against 2.2 ms for ResourceScatterAdd.

    Returns:
      The assignment of the rows to write (after the update).
    """
    with tf.control_dependencies(self.scatter_update(
        rows, start + tf.cast(delta, tf.float64))):
      # Not deduplicated per step (a row written twice gets one value):
      # only a list longer than the table, after many steps without
      # update_weights, is.
      pending = tf.concat([self.touched, rows], 0)
    pending = _static_or_cond(
        tf.size(pending, out_type=tf.int64) > self.size,
        lambda: tf.unique(pending)[0], lambda: pending)
    return self.touched.assign(pending)

  def assign_add_all(self, delta):
    """Adds `delta` (all rows, float64) to the slots."""
    if len(self.slots) == 1:
      return [self.slots[0].assign_add(delta)]
    out, start = [], 0
    for s in self.slots:
      size = s.shape[0]
      out.append(s.assign_add(delta[start:start + size]))
      start += size
    return out


def _static_or_cond(pred, true_fn, false_fn):
  """`true_fn()` or `false_fn()` chosen in Python when `pred` is known when
  the step is built (a Python bool, or any value eagerly), else `tf.cond`."""
  value = pred if isinstance(pred, bool) else tf.get_static_value(pred)
  if value is not None:
    return true_fn() if value else false_fn()
  return tf.cond(pred, true_fn, false_fn)


def _shrink_l1(values, shrink):
  """`sign(u) max(|u| - shrink, 0)`; `u` itself without L1 (no ops to run:
  the two differ at most in the sign of a zero)."""
  if shrink == 0:
    return values
  return tf.sign(values) * tf.maximum(tf.abs(values) - shrink, 0.0)


# The two lowest int64 keys, which the DenseHashTable of earlier versions
# reserved for its empty and deleted buckets (the table today reserves
# both). An example whose fingerprint is one of them is stored under that
# key + 2 (`_table_keys`): one more 64-bit collision, as likely as any other.
# Checkpoints hold these keys: never change the mapping.
_DELETED_KEY = -2**63 + 1


def _table_keys(keys):
  """int64 fingerprints as keys of `_ExampleStateTable`."""
  return tf.where(keys <= _DELETED_KEY, keys + 2, keys)


_TABLE_NAMES = itertools.count()


def _dim(shape, i):
  """`shape[i]` as an int or None, also under TF1's shapes
  (`tf.compat.v1.disable_v2_behavior()`), where it is a `Dimension`: never
  None, and unhashable."""
  return tf.compat.dimension_value(shape[i])


class _ExampleStateTable(tf.saved_model.experimental.TrackableResource):
  """The `[width]` state rows of examples by key (TfSdca>ExampleStateTable).

  Each bucket holds its key beside its row, the probes of a batch are
  prefetched, and `find` returns where each key sits so that `insert` after
  the solve writes there without a second search: in a stream of 50k-row
  batches over 1M examples the find and insert of a step took 1.9 and 1.2
  ms, where TensorFlow's DenseHashTable it replaced took 3.1 and 3.8 ms
  (g3doc/benchmarks.md). It checkpoints as that table did (and the
  MutableHashTable before it): `table-keys` and `table-values` of its
  entries only, restored by emptying the table and inserting them, so that
  checkpoints written by earlier versions restore, and the other way round.
  A SavedModel leaves it out (`SdcaModel._trackable_children`).
  """

  def __init__(self, name, width=4):
    super().__init__()
    self._name = name
    self.width = width
    # Eagerly each table needs its own name (the op's node name is the same
    # for all); in a TF1 graph the node names it.
    self._shared_name = (f"{name}_{next(_TABLE_NAMES)}"
                         if tf.executing_eagerly() else "")
    self._resource_handle = self._create_resource()
    if not tf.executing_eagerly():
      # A TF1 graph's `tf.compat.v1.train.Saver()` (and the sessions that
      # make one) saves the global variables and this collection, where
      # TensorFlow's own tables put themselves: without it a Saver's
      # checkpoint held the weights and no duals, and training after its
      # restore went on from zero duals under trained weights (their
      # offset never unlearned: 7% above the optimum for good).
      tf.compat.v1.add_to_collection(
          tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS, _SaverEntries(self))

  def _create_resource(self):
    return sdca_ops.example_state_table(self.width, self._shared_name,
                                        name=self._name)

  def _destroy_resource(self):
    if tf.executing_eagerly() and self._shared_name:
      tf.raw_ops.DestroyResourceOp(resource=self.resource_handle,
                                   ignore_lookup_error=True)

  def find(self, keys):
    """(rows `[n, width]`, zeros for keys never stored; `slots` for
    `insert`)."""
    return sdca_ops.example_state_find(self.resource_handle, keys,
                                       self.width)

  def lookup(self, keys):
    """The rows `[n, width]` of int64 `keys`; zeros for keys never stored."""
    return self.find(keys)[0]

  def insert(self, keys, values, slots=None):
    """Stores `values` under `keys`; `slots` from `find` on the same keys
    saves the search."""
    return sdca_ops.example_state_write(self.resource_handle, keys, values,
                                        slots)

  def size(self):
    return sdca_ops.example_state_size(self.resource_handle)

  def entries(self):
    """(keys `[m]`, values `[m, width]`) of the stored examples."""
    return sdca_ops.example_state_export(self.resource_handle, self.width)

  def replace(self, keys, values):
    """Empties the table, then stores `values` under `keys`."""
    return sdca_ops.example_state_import(self.resource_handle,
                                         _table_keys(keys), values)

  # Checkpoint keys `<path>/.ATTRIBUTES/table-keys` and `table-values`, as
  # TensorFlow's tables write them (their legacy saveable name "table" and
  # the tensors "-keys" and "-values").
  def _serialize_to_tensors(self):
    keys, values = self.entries()
    return {"table-keys": keys, "table-values": values}

  def _restore_from_tensors(self, restored_tensors):
    return self.replace(restored_tensors["table-keys"],
                        restored_tensors["table-values"])

  def _copy_trackable_to_cpu(self, object_map):
    if self not in object_map:
      object_map[self] = _ExampleStateTable(self._name, self.width)
    object_map[self]._restore_from_tensors(self._serialize_to_tensors())  # pylint: disable=protected-access


class _SaverEntries(tf.__internal__.tracking.Trackable):
  """What a TF1 graph's `tf.compat.v1.train.Saver` saves of one
  `_ExampleStateTable`: its entries, `<table op>/table-keys` and
  `<table op>/table-values` (the Saver names a trackable's tensors by their
  own names alone when it is handed the trackable itself, and every table's
  would be "table-keys")."""

  def __init__(self, table):
    self._table = table
    self.name = table.resource_handle.op.name

  def _gather_saveables_for_checkpoint(self):
    return {
        key: functools.partial(factory, name=self.name + "/")
        for key, factory in
        tf.__internal__.tracking.saveable_objects_from_trackable(
            self._table).items()}


# What held rows given to a model built with carry_over=0 would lose (the
# middle of `_StateMeaning`'s and `SdcaModel.set_state`'s messages).
_HELD_ROWS_DROPPED = (
    " held rows: examples that its model (built with carry_over) held "
    "back from a minimize call to visit with the next. This model is "
    "built with carry_over=0 and would drop them, losing those examples' "
    "pending updates. ")


def state_meaning(options, sharded=True):
  """The options that give a dual state its meaning, from `options` (a dict
  `SdcaModel.check_options` returned): the loss and l2 its duals and
  weight slots (v / l2, v = X^T alpha) were trained under and the classes
  (a state row's width); with `sharded`, the table shards too, which
  matter where the state is read into the tables as written (a
  checkpoint), not through `set_state` (which re-shards).

  Not among them: l1 (the slots are unshrunk, the weights shrink(v / l2):
  the state is the same dual point under any l1), gamma (the smooth
  hinge's duals lie in [0, 1] under any) and the options of speed or path
  (threads, visiting order, seed, carry_over, whose held rows
  `set_state` and `_StateMeaning` check apart)."""
  meaning = dict(
      loss_type=options["loss_type"],
      symmetric_l2_regularization=float(
          options["symmetric_l2_regularization"]),
      num_classes=options["num_classes"])
  if sharded:
    meaning["num_table_shards"] = options["num_table_shards"]
  return meaning


def check_state_meaning(theirs, ours, whose, remedy, label=str, show=None):
  """Refuses a state trained under other options than this model's.

  Args:
    theirs: `state_meaning` of the state's writer (a dict, e.g. as read
      back from JSON).
    ours: `state_meaning` of the model reading it.
    whose: the state in the message ("the checkpoint's SdcaModel state").
    remedy: the message's last sentence(s): what to do instead.
    label: option key -> its name in the message (the door's spelling).
    show: (option key, value) -> the value as the message writes it (the
      door's spelling, e.g. the Keras loss 'logistic' for the op's
      'logistic_loss'); None: its repr.

  Raises:
    ValueError: naming every option that differs, its value in the state
      and in this model.
  """
  if theirs == ours:
    return
  show = show or (lambda key, value: repr(value))
  differ = ", ".join(f"{label(key)} {show(key, theirs.get(key))} (this model "
                     f"{show(key, ours.get(key))})"
                     for key in sorted(set(theirs) | set(ours))
                     if theirs.get(key) != ours.get(key))
  raise ValueError(f"{whose} was trained with {differ}: its duals and "
                   f"weight slots mean something else in this model. "
                   f"{remedy}")


# `_StateMeaning`'s record of whether its model keeps the mean of its
# iterates (true or false; after "held_rows" among the sorted keys, which
# the restore's pattern expects first, and before "num_classes", so that
# the pattern's ", " follows it).
_MEAN_KEY = "mean_of_iterates"
# A state's parts that hold the mean of the iterates (`get_state()` of a
# model built with `average_from`).
_MEAN_PARTS = ("average_slots", "average_count")
# The checkpoint key of a model's `_StateMeaning` record, after the model's
# path.
_RECORD_KEY = "_state_meaning/.ATTRIBUTES/meaning"


class _StateMeaning(tf.Module):
  """What a model's dual state means: the options its duals and slots were
  trained under (loss, l2, classes), its table shards, and how many rows it
  held back for its next `minimize` call (`carry_over`). Checkpointed
  beside the state (`.../_state_meaning/.ATTRIBUTES/meaning`, a JSON
  string) and compared on restore: a checkpoint of another loss or l2 read
  into a model passed every check of `tf.train.Checkpoint` and left it
  silently wrong for good (logistic duals taken as squared-loss ones; slots
  v / l2 under another l2, so w stopped being w(alpha): an exact gap of
  0.48 after 150 more epochs), and one of another shard count put the
  examples in tables that never look them up. Held rows read into a model
  built with carry_over=0, which has nowhere to keep them, were dropped
  just as silently (their examples' pending updates lost); a model with
  `carry_over` reading a checkpoint that held none (one written with
  carry_over=0) empties its own held rows, as the writer had none. The
  mean of the iterates of a model built with `average_from` (its record
  says `"mean_of_iterates": true`) read into one built without it, which
  has no means to read it into, was dropped as silently (the model went
  on from the last iterate, its weights no longer the mean): refused. So
  is the reverse, the checkpoint of a model built without `average_from`
  (its record says `"mean_of_iterates": false`) read into one built with
  it, which has no mean to read and kept its own means and count beside
  the checkpoint's weights (its initial ones, or another run's: the
  outputs then a mean of iterates the checkpoint never had, or a mean
  started afresh after the checkpoint's calls, which no uninterrupted
  run has). A checkpoint without the record (written before 2026-11-28)
  restores unchecked, and one whose record has no `held_rows` (written
  earlier on 2026-11-28) leaves the held rows unchecked, one without
  `mean_of_iterates` (written before 2026-11-29, by a model with or
  without averaging: it cannot tell) the mean."""

  def __init__(self, meaning, held_rows, averaged=False):
    """`meaning`: the options (a JSON-able dict); `held_rows`: a callable
    returning the model's `_HeldRows`, or None without `carry_over`;
    `averaged`: the model keeps the mean of its iterates
    (`average_from`)."""
    super().__init__(name="state_meaning")
    self._text = json.dumps(meaning, sort_keys=True)
    self._held_rows = held_rows
    self._averaged = averaged
    # The saved text is `meaning` with "held_rows": <count> (first of the
    # sorted keys), joined at save time around the count, and
    # "mean_of_iterates": true for an averaging model, false for another.
    recorded = json.dumps(
        dict(meaning, held_rows=0, **{_MEAN_KEY: bool(averaged)}),
        sort_keys=True)
    self._head, self._tail = recorded.split('"held_rows": 0', 1)
    self._head += '"held_rows": '
    self._frozen_count = None  # (a copy's count: `_copy_trackable_to_cpu`)

  def _held_count(self):
    """int64 scalar: the rows the model holds now."""
    if self._frozen_count is not None:
      return self._frozen_count
    held = self._held_rows()
    return (tf.constant(0, tf.int64) if held is None else
            tf.size(held.keys, out_type=tf.int64))

  def _serialize_to_tensors(self):
    return {"meaning": tf.strings.join(
        [self._head, tf.strings.as_string(self._held_count()), self._tail])}

  # The message for held rows read into a model without carry_over, before
  # and after their count.
  _HELD_MESSAGE = (
      "the checkpoint holds ",
      _HELD_ROWS_DROPPED + "Restore it into a model built with carry_over "
      "(e.g. 'auto', the default); to drop them knowingly, restore it into "
      "such a model and give its get_state(), less 'held', to this model's "
      "set_state()")

  # The message for a mean read into a model without average_from (no
  # quote marks, which a graph's assertion prints escaped).
  _MEAN_MESSAGE = (
      "the checkpoint holds the mean of the iterates of a model built with "
      "average_from; this model is built without it and would drop the "
      "mean, its weights then those of the last iterate. Restore it into a "
      "model built with average_from; to take the last iterate knowingly, "
      "restore it into such a model and give its get_state(), less "
      "average_slots and average_count, to the set_state() of this model")

  # The message for a checkpoint without a mean read into a model with
  # average_from (no quote marks either).
  _NO_MEAN_MESSAGE = (
      "the checkpoint holds no mean of the iterates: it was written by a "
      "model built without average_from; this model is built with it and "
      "would keep its own mean and count beside the checkpoint's iterate, "
      "its weights then a mean the checkpoint's run never had. Restore it "
      "into a model built without average_from; to start a mean knowingly, "
      "restore it into such a model and give its get_state(), with "
      "average_slots and average_count added (average_slots its slots and "
      "average_count 1: a mean of this iterate alone), to the set_state() "
      "of this model")

  def _restore_from_tensors(self, restored_tensors):
    saved = restored_tensors["meaning"]
    held = self._held_rows()
    if not tf.executing_eagerly():
      head = r'^\{"held_rows": '
      options = tf.strings.regex_replace(saved, head + r"[0-9]+, ", "{")
      options = tf.strings.regex_replace(
          options, f'"{_MEAN_KEY}": (true|false), ', "")
      checks = [tf.debugging.assert_equal(
          options, self._text, message="the checkpoint's SdcaModel state "
          "was trained under other options than this model's")]
      checks.append(tf.debugging.Assert(
          tf.logical_not(tf.strings.regex_full_match(
              saved, f'.*"{_MEAN_KEY}": {str(not self._averaged).lower()}'
              '.*')),
          [self._NO_MEAN_MESSAGE if self._averaged else self._MEAN_MESSAGE]))
      if held is None:
        count = tf.strings.regex_replace(saved, head + r"([0-9]+), .*$",
                                         r"\1")
        checks.append(tf.debugging.Assert(
            tf.logical_not(tf.strings.regex_full_match(
                saved, head + r"[1-9][0-9]*, .*")),
            [self._HELD_MESSAGE[0], count, self._HELD_MESSAGE[1]]))
        return tf.group(*checks)
      with tf.control_dependencies(checks):
        return tf.cond(
            tf.strings.regex_full_match(saved, head + r"0, .*"),
            lambda: tf.group(*held.clear()), tf.no_op)
    count = self._check(saved.numpy().decode())
    if count == 0 and held is not None:
      held.clear()
    return tf.no_op()

  def _check(self, saved):
    """Refuses the record `saved` (its JSON text) as a restore does, with a
    ValueError naming what differs; else its held rows' count (None: not
    recorded). Sets nothing."""
    theirs, ours = json.loads(saved), json.loads(self._text)
    count = theirs.pop("held_rows", None)
    mean = theirs.pop(_MEAN_KEY, None)  # None: not recorded
    check_state_meaning(
        theirs, ours, "the checkpoint's SdcaModel state",
        "Restore it into a model built with the checkpoint's options "
        "(num_table_shards may differ through get_state() / set_state(), "
        "which re-shard), or train this one from zero")
    if mean is True and not self._averaged:
      raise ValueError(self._MEAN_MESSAGE)
    if mean is False and self._averaged:
      raise ValueError(self._NO_MEAN_MESSAGE)
    if count is not None and self._held_rows() is None and count > 0:
      raise ValueError(f"{count}".join(self._HELD_MESSAGE))
    return count

  def check_checkpoint(self, reader):
    """Refuses, before a restore sets anything, the checkpoint `reader` reads
    when every record in it (`_RECORD_KEY`) is one that `_check` refuses:
    `_restore_from_tensors` checked the record only when its turn came,
    and a restore had by then set whichever of the model's values came
    before it (the call counter, weights, duals: a refused checkpoint left
    the model part restored). The model's own record is one of them, as
    the models in one checkpoint are written by one version; a checkpoint
    of several models whose records differ, one of them taken, is left to
    `_restore_from_tensors`. `reader`: `tf.train.load_checkpoint`'s."""
    records = sorted({reader.get_tensor(key) for key in
                      reader.get_variable_to_dtype_map()
                      if key == _RECORD_KEY or
                      key.endswith("/" + _RECORD_KEY)})
    refusal = None
    for saved in records:
      try:
        self._check(saved.decode())
        return
      except ValueError as e:
        refusal = refusal or e
    if refusal is not None:
      raise refusal

  def _copy_trackable_to_cpu(self, object_map):
    if self not in object_map:
      copy = _StateMeaning(json.loads(self._text), self._held_rows,
                           self._averaged)
      copy._frozen_count = tf.identity(self._held_count())  # pylint: disable=protected-access
      object_map[self] = copy


def holds_numbers(dtype):
  """Whether tensors of `dtype` cast to the ops' float32 (or int64 ids):
  a float, integer or bool dtype, not strings or complex numbers."""
  return dtype.is_floating or dtype.is_integer or dtype == tf.bool


def _check_real(x, argument):
  """Raises a ValueError naming `argument` and the dtype where `x`, a
  tensor, variable or numpy array (or scalar), holds no real numbers:
  strings or complex numbers, which a cast would parse or cut to their
  real part without a word. A numpy array of object dtype (as pandas
  gives) passes when its elements are real numbers (Python or numpy
  floats, integers or bools; `_first_unreal`), and is refused naming the
  first other element (a string, bytes, a complex number, None: the
  conversion parsed '0.5' and made None NaN). Anything else passes
  unchecked.

  A tf.function makes such an array, given as its argument, a string
  tensor (and TensorFlow then refuses to feed it one of floats): a string
  tensor while tracing is refused saying so, and how to pass the numbers."""
  if isinstance(x, (tf.Tensor, tf.Variable)):
    if not holds_numbers(x.dtype):
      hint = ""
      if x.dtype == tf.string and not tf.executing_eagerly():
        hint = (" (a tf.function makes a numpy array of object dtype, as "
                "pandas gives, that is its argument a string tensor, and "
                "cannot be called with one of floats: give it "
                "array.astype(np.float32), or use the object array outside "
                "the function's arguments, eagerly or captured)")
      raise ValueError(f"{argument} must hold real numbers (a float, "
                       f"integer or bool dtype), got a {x.dtype.name} "
                       f"tensor{hint}")
  elif isinstance(x, (np.ndarray, np.generic)):
    if x.dtype.kind not in "biufO":
      raise ValueError(f"{argument} must hold real numbers (a float, "
                       f"integer or bool dtype), got a {x.dtype} numpy array")
    if x.dtype.kind == "O":
      bad = _first_unreal(np.asarray(x))
      if bad is not None:
        index, value = bad
        raise ValueError(
            f"{argument} must hold real numbers (a float, integer or bool "
            f"dtype), got a numpy array of object dtype holding "
            f"{value!r} ({type(value).__name__}) at index {index}")


_REAL_TYPES = (numbers.Real, np.bool_)


def _first_unreal(array):
  """(index, element) of the first element of the object-dtype `array`
  that is not a real number (`_REAL_TYPES`), or None. The types are
  gathered at C speed (one `type` call an element, ~30 ns, as the
  conversion that follows takes); only a refused array is walked in
  Python to find its first bad element."""
  flat = array.reshape(-1)
  if all(issubclass(t, _REAL_TYPES) for t in set(map(type, flat))):
    return None
  for i, value in enumerate(flat):
    if not isinstance(value, _REAL_TYPES):
      if array.ndim > 1:
        i = tuple(int(j) for j in np.unravel_index(i, array.shape))
      return i, value
  return None

def _state_array(value, argument, dtype, ndim=None):
  """`value`, a part of a state given to `SdcaModel.set_state`, as a numpy
  array of `dtype` (an int64 one takes integers only), or a ValueError
  naming `argument` and the bad dtype or number of dimensions."""
  array = np.asarray(value)
  _check_real(array, argument)
  if (np.dtype(dtype).kind == "i" and array.size and
      array.dtype.kind not in "iu"):
    raise ValueError(f"{argument} must hold integers, got a {array.dtype} "
                     f"array")
  if ndim is not None and array.ndim != ndim and not (
      array.size == 0 and ndim == 1):
    raise ValueError(f"{argument} must have {ndim} dimension(s), got shape "
                     f"{array.shape}")
  return array.astype(dtype).reshape(-1) if ndim == 1 else array.astype(
      dtype)


def _state_count(state, key):
  """`state[key]`, a count given to `SdcaModel.set_state`, as an int, or a
  ValueError naming it and the value where it is not a whole number >= 0."""
  return options_lib.whole_count(state[key], f"state['{key}']")


def whole_number_ids(values, argument, what="feature id", positions=None):
  """Float `values` as int64 ids (or example indices): 2.0 is 2, but one
  that is not a whole number (1.5, NaN, inf), which a cast cut to another
  row (1.5 became 1) without a word, is an InvalidArgumentError naming
  `argument`, `what` it is, the value and its position (`positions[i]`,
  e.g. a SparseTensor's indices, or `i`): eagerly at once, in a graph when
  run."""
  whole = tf.logical_and(tf.math.is_finite(values),
                         tf.equal(values, tf.floor(values)))
  first = tf.argmin(tf.cast(tf.reshape(whole, [-1]), tf.int32),
                    output_type=tf.int64)
  tail = "not a whole number (a cast would cut it to another row)"
  where = first if positions is None else tf.gather(positions, first)
  if tf.executing_eagerly():
    if not bool(tf.reduce_all(whole)):
      value = float(tf.gather(tf.reshape(values, [-1]), first))
      raise tf.errors.InvalidArgumentError(
          None, None, f"{argument} has {what} {value!r} at index "
          f"{where.numpy().tolist()}, {tail}")
    return tf.cast(values, tf.int64)
  check = tf.debugging.Assert(
      tf.reduce_all(whole),
      [f"{argument} has {what}",
       tf.gather(tf.reshape(values, [-1]), first),
       "at index", where, tail])
  with tf.control_dependencies([check]):
    return tf.cast(values, tf.int64)


def _real(x, argument, name=None):
  """`x` as a tensor (as `tf.cast` converts it), refused as `_check_real`
  refuses it: strings (a numpy array of them too, or a list) or complex
  numbers. A numpy array of object dtype holding real numbers is taken in
  the dtype numpy infers for them (float64, int64 or bool)."""
  _check_real(x, argument)
  if isinstance(x, np.ndarray) and x.dtype.kind == "O":
    # Real numbers (checked) in the dtype numpy gives them: TensorFlow's
    # conversion takes no object array of floats.
    x = np.array(x.tolist())
  x = tf.convert_to_tensor(x, name=name)
  _check_real(x, argument)
  return x


def _floats(x, argument="value"):
  """`x` as the float32 tensor the ops take. A tensor of another real dtype
  (float64, float16, bfloat16, an integer type, bool) is cast, as a numpy
  array of one is converted, eagerly or in a `tf.function` alike (there
  TensorFlow's own conversion refused a float64 tensor without naming it);
  any other dtype, a tensor's or a numpy array's (whose strings the
  conversion parsed, and whose complex numbers it cut to their real part),
  is a ValueError naming `argument` and the dtype."""
  _check_real(x, argument)
  if isinstance(x, (tf.Tensor, tf.Variable)):
    if x.dtype == tf.float32:
      return tf.convert_to_tensor(x)
    return tf.cast(x, tf.float32)
  try:
    return sdca_ops.to_tensor(x, tf.float32)
  except (TypeError, ValueError) as e:
    raise type(e)(f"{argument} cannot be a float32 tensor: {e}") from None


# carry_over='auto': f = B / (B + 6) for a stream of B batches an epoch
# (measured, six batches of breast_cancer and wine: 0.5 needs the passes of
# one batch, 0.75 up to 1.3x; twenty Criteo-shaped batches: 0.75 matches one
# batch, 0.5 is 14x above it after 20 epochs; two batches: 0.25), at most
# 0.8 (the held rows, f / (1 - f) batches of them, then 4 batches).
# The hinge holds more, f = B / (B + 4): its duals rest at a bound and the
# rows that move must spread further. Measured (bench/bench_defaults.py's
# streamed door, l2 = mean |x_i|^2, passes to 1e-6 of P*, median of seeds
# 0-4), B / (B + 6) -> B / (B + 4): four batches breast_cancer 69 -> 66,
# anes96 34 -> 29, spector 34 -> 25, fair 198 -> 190; eight batches 124 ->
# 56, 24 -> 32, 48 -> 31, 252 -> 143 (g3doc/sdca_model.md). The smooth
# hinge's medians are within 1-2 passes at 0.4-0.6 and keep B / (B + 6).
_AUTO_CARRY_BATCHES = 6.0
_AUTO_CARRY_BATCHES_BY_LOSS = {"hinge_loss": 4.0}
_AUTO_CARRY_MAX = 0.8


def _auto_carry_over(examples_stored, batch_rows, loss_type=None):
  """carry_over='auto''s share for a batch of `batch_rows` rows when the
  dual table holds `examples_stored` examples (B = their ratio: the
  batches of an epoch, once the first epoch has filled the table):
  B / (B + 6), B / (B + 4) for the hinge loss, at most 0.8.

  0 while B < 2: one batch given again and again (an estimator's input_fn
  returning its tensors, a dataset of one batch) is visited whole, in a
  fresh order, by every call, and held rows would only delay a share of
  it (breast_cancer, f = 0.5: 86 passes against 40); a stream's second
  call, with one batch in the table, holds nothing either."""
  spread = _AUTO_CARRY_BATCHES_BY_LOSS.get(loss_type, _AUTO_CARRY_BATCHES)
  batches = tf.cast(examples_stored, tf.float64) / tf.cast(
      tf.maximum(batch_rows, 1), tf.float64)
  return tf.where(batches < 2.0, tf.constant(0.0, tf.float64),
                  tf.minimum(batches / (batches + spread),
                             _AUTO_CARRY_MAX))


def _hold_batch(examples, keys, widths):
  """The batch side of `sdca_ops.hold_rows` from a batch dict (`minimize`'s
  structure) and its int64 `keys`; `widths`: each dense group's columns."""
  return dict(
      keys=keys,
      example_weights=_floats(examples["example_weights"],
                              "examples['example_weights']"),
      example_labels=_floats(examples["example_labels"],
                             "examples['example_labels']"),
      sparse=[(col.example_indices, col.feature_indices,
               None if col.feature_values is None else
               _floats(col.feature_values,
                       f"examples['sparse_features'][{g}].feature_values"))
              for g, col in enumerate(examples["sparse_features"])],
      dense=[tf.reshape(_floats(x, f"examples['dense_features'][{g}]"),
                        [-1, width])
             for g, (x, width) in enumerate(zip(examples["dense_features"],
                                                widths))])


def _no_held_rows(num_sparse, widths):
  """A held side of `sdca_ops.hold_rows` without rows: `num_sparse` sparse
  groups and dense groups of `widths` columns."""
  return dict(keys=np.zeros([0], np.int64),
              example_weights=np.zeros([0], np.float32),
              example_labels=np.zeros([0], np.float32),
              sparse=[(np.zeros([1], np.int64), np.zeros([0], np.int64),
                       np.zeros([0], np.float32)) for _ in range(num_sparse)],
              dense=[np.zeros([0, width], np.float32) for width in widths])


class _HeldRows(tf.Module):
  """The rows a `minimize` call holds back for the next (option
  `carry_over`): their keys, example weights, labels and features, in
  variables that checkpoints keep.

  A stream of the same consecutive batches every epoch is a block-cyclic
  order, and SDCA needs 2-2.5x the passes of one batch on it (each call
  visiting its batch in a fresh order does not change that; g3doc/
  sdca_model.md, 'Streaming orders'). Holding back a random share of each
  call's rows, to be visited with the next call's, lets a row move between
  neighbouring calls from one epoch to the next: with half held back, six
  fixed batches need 0.9-1.23x the passes of one batch on scikit-learn's
  sets; more batches need a larger share ('auto'). One op per call,
  `TfSdca>HoldRows`.
  """

  def __init__(self, num_sparse, dense_widths):
    super().__init__(name="held_rows")

    def empty(dtype, name, width=None, rows=0):
      shape = [None] if width is None else [None, width]
      return tf.Variable(tf.zeros([rows] + shape[1:], dtype), shape=shape,
                         trainable=False, name=name)

    with tf.init_scope():
      self.keys = empty(tf.int64, "keys")
      self.weights = empty(tf.float32, "example_weights")
      self.labels = empty(tf.float32, "example_labels")
      # Per sparse group the held rows' entries as rows (a CSR: row splits,
      # feature ids, values), as `TfSdca>HoldRows` reads and writes them.
      # A checkpoint written before 2026-11-28 restores an example index
      # per entry into the first: `_row_splits` reads either.
      self.sparse = [(empty(tf.int64, f"sparse_{g}_row_splits", rows=1),
                      empty(tf.int64, f"sparse_{g}_feature_indices"),
                      empty(tf.float32, f"sparse_{g}_feature_values"))
                     for g in range(num_sparse)]
      self.dense = [empty(tf.float32, f"dense_{g}", width)
                    for g, width in enumerate(dense_widths)]

  def _fields(self):
    return [("keys", self.keys), ("example_weights", self.weights),
            ("example_labels", self.labels)]

  def numpy(self):
    """The held rows as numpy arrays (`SdcaModel.get_state()['held']`;
    each sparse group as (example indices, feature ids, values))."""
    out = {name: var.numpy() for name, var in self._fields()}
    n = len(out["keys"])
    out["sparse"] = []
    for group in self.sparse:
      splits, ids, values = (t.numpy() for t in _row_splits(
          *(v.read_value() for v in group), n))
      rows = np.repeat(np.arange(n, dtype=np.int64), np.diff(splits))
      out["sparse"].append((rows, ids, values))
    out["dense"] = [v.numpy() for v in self.dense]
    return out

  def checked(self, held, checks, argument="state['held']"):
    """`held` (`numpy()`'s structure) as the numpy arrays `assign` takes,
    each row's sparse entries together; sets nothing. `checks`: the
    keyword arguments with which `TfSdca>HoldRows` checks a batch's labels
    (`loss_type`, `num_classes`) and feature ids (`id_limits`, per sparse
    group the rows of its weight variable, `id_arguments` its name).

    Raises:
      ValueError: naming the part of `argument` and the bad value, where
        its groups are not the model's, a part holds no real numbers (or
        keys or ids no integers), the parts disagree on the number of rows
        or entries, an example index is not a held row, a feature id is
        outside its group's weight variable, an example weight is negative
        or not finite, or a label outside the loss's domain (which the next
        `minimize` refused, the state already set, at a merged row's index).
    """
    if (len(held["sparse"]) != len(self.sparse) or
        len(held["dense"]) != len(self.dense)):
      raise ValueError(
          f"held rows of {len(held['sparse'])} sparse and "
          f"{len(held['dense'])} dense groups; the model has "
          f"{len(self.sparse)} and {len(self.dense)}")
    out = {}
    for name, var in self._fields():
      out[name] = _state_array(held[name], f"{argument}['{name}']",
                               var.dtype.as_numpy_dtype, ndim=1)
    n = len(out["keys"])
    for name in ("example_weights", "example_labels"):
      if len(out[name]) != n:
        raise ValueError(f"{argument}['{name}'] has {len(out[name])} rows, "
                         f"{argument}['keys'] {n}")
    weights = out["example_weights"]
    bad = np.flatnonzero(~(np.isfinite(weights) & (weights >= 0)))
    if bad.size:
      raise ValueError(f"{argument}['example_weights'][{bad[0]}] = "
                       f"{weights[bad[0]]} must be finite and >= 0")
    out["sparse"] = []
    for g, (rows, ids, values) in enumerate(held["sparse"]):
      part = f"{argument}['sparse'][{g}]"
      rows = _state_array(rows, f"{part}[0]", np.int64, ndim=1)
      ids = _state_array(ids, f"{part}[1]", np.int64, ndim=1)
      values = _state_array(values, f"{part}[2]", np.float32, ndim=1)
      if len(ids) != len(rows) or len(values) not in (0, len(rows)):
        raise ValueError(
            f"{part} has {len(rows)} example indices, {len(ids)} feature "
            f"ids and {len(values)} values; each entry needs one of each "
            f"(values may be empty: all 1.0)")
      if rows.size and (rows.min() < 0 or rows.max() >= n):
        raise ValueError(f"held example indices must be rows of the {n} "
                         f"held examples, got {rows.min()} to {rows.max()}")
      limit = checks["id_limits"][g]
      outside = np.flatnonzero((ids < 0) | (ids >= limit))
      if outside.size:
        k = int(outside[0])
        raise ValueError(
            f"{part}[1] has an id >= {limit} or < 0, outside the rows of its "
            f"weight variable ({checks['id_arguments'][g]}): feature id "
            f"[{k}] = {ids[k]}")
      # Each row's entries together, in their order (a stable sort).
      order = np.argsort(rows, kind="stable")
      splits = np.concatenate(
          [[0], np.cumsum(np.bincount(rows, minlength=n))]).astype(np.int64)
      out["sparse"].append((splits, ids[order],
                            values[order] if values.size else values))
    out["dense"] = []
    for g, (var, value) in enumerate(zip(self.dense, held["dense"])):
      value = _state_array(value, f"{argument}['dense'][{g}]", np.float32)
      width = var.shape[1]
      if value.size != n * width:
        raise ValueError(
            f"{argument}['dense'][{g}] has shape {value.shape}; the "
            f"{n} held rows of this dense group need {n} x {width}")
      out["dense"].append(value.reshape(n, width))
    self._check_labels(out, checks, argument)
    return out

  def _check_labels(self, held, checks, argument):
    """Raises a ValueError naming `argument` where a label of the checked
    `held` is outside the loss's domain: `TfSdca>HoldRows` checks them as
    a batch (the held rows as one, none held, none kept back)."""
    n = len(held["keys"])
    if not n:
      return
    batch = dict(
        held, sparse=[(np.repeat(np.arange(n), np.diff(splits)), ids,
                       values if values.size else None)
                      for splits, ids, values in held["sparse"]])
    none = _no_held_rows(len(held["sparse"]),
                         [d.shape[1] for d in held["dense"]])
    try:
      sdca_ops.hold_rows(batch, none, 0, 0.0, loss_type=checks["loss_type"],
                         num_classes=checks["num_classes"])
    except tf.errors.InvalidArgumentError as e:
      raise ValueError(
          f"{argument}: {sdca_ops.op_message(e.message)}") from None

  def assign(self, held):
    """Sets the held rows from `checked`'s arrays."""
    for name, var in self._fields():
      var.assign(held[name])
    for group, arrays in zip(self.sparse, held["sparse"]):
      for var, value in zip(group, arrays):
        var.assign(value)
    for var, value in zip(self.dense, held["dense"]):
      var.assign(value)

  def clear(self):
    """The assignments that empty the held rows."""
    assigns = [var.assign(tf.zeros([0], var.dtype))
               for _, var in self._fields()]
    for splits, ids, values in self.sparse:
      assigns += [splits.assign(tf.zeros([1], tf.int64)),
                  ids.assign(tf.zeros([0], tf.int64)),
                  values.assign(tf.zeros([0], tf.float32))]
    assigns += [v.assign(tf.zeros([0, v.shape[1]], tf.float32))
                for v in self.dense]
    return assigns

  def take(self, examples, keys, fraction, seed, call, checks):
    """Merges the held rows into a batch and holds back a fresh share.

    Args:
      examples: the batch (`minimize`'s structure).
      keys: its int64 example keys (distinct).
      fraction: the share of the merged rows to hold back, in [0, 1) (a
        number or a float scalar tensor).
      seed, call: the random draw's seed: the option and the call index.
      checks: `sdca_ops.hold_rows`' keyword arguments checking the batch's
        labels and feature ids before any row is held.

    Returns:
      (the rows to visit now as `examples` with `sparse_features`,
      `dense_features`, `example_weights` and `example_labels`, their keys,
      the rows to hold for the next call, for `hold`). A held row whose key
      is back in the batch is dropped: the batch's copy is visited or held
      in its place.
    """
    batch = _hold_batch(examples, keys, [var.shape[1] for var in self.dense])
    held_keys = self.keys.read_value()
    held = dict(keys=held_keys,
                example_weights=self.weights.read_value(),
                example_labels=self.labels.read_value(),
                sparse=[_row_splits(*(v.read_value() for v in group),
                                    tf.size(held_keys, out_type=tf.int64))
                        for group in self.sparse],
                dense=[v.read_value() for v in self.dense])
    # One op: in TensorFlow's own (unique, boolean masks, gathers and
    # concats over every sparse entry) the same took ~100 ms of a 140 ms
    # step on bench_sdca_model's 50k-row batches.
    visit, later = sdca_ops.hold_rows(batch, held, call, fraction, seed,
                                      **checks)
    out = dict(sparse_features=[SparseFeatureColumn(*col)
                                for col in visit["sparse"]],
               dense_features=visit["dense"],
               example_weights=visit["example_weights"],
               example_labels=visit["example_labels"])
    return out, visit["keys"], later

  def hold(self, later):
    """The assignments that hold `later` (`take`'s third value) for the
    next call; the caller runs them only once the call's solve succeeded,
    so that a failed call leaves the held rows as they were."""
    assigns = [self.keys.assign(later["keys"]),
               self.weights.assign(later["example_weights"]),
               self.labels.assign(later["example_labels"])]
    for group, values in zip(self.sparse, later["sparse"]):
      splits, ids, vals = values
      assigns += [group[0].assign(splits), group[1].assign(ids),
                  group[2].assign(tf.zeros([0], tf.float32) if vals is None
                                  else vals)]
    assigns += [v.assign(x) for v, x in zip(self.dense, later["dense"])]
    return assigns


def _known_shape(x):
  """The static shape of a tensor, variable or numpy array (unknown for
  anything else: a list is not converted to find out)."""
  if isinstance(x, (tf.Tensor, tf.Variable, np.ndarray)):
    return tf.TensorShape(x.shape)
  return tf.TensorShape(None)


def _row_splits(first, ids, values, n):
  """A held sparse group's (row splits, feature ids, values) from its
  variables: as stored, or, where a checkpoint written before the held rows
  were stored as rows restored an example index per entry (never n + 1 of
  them: the last would have to be the entries' count, above every row),
  grouped by row in their order."""
  def from_example_indices():
    order = tf.argsort(first, stable=True)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(first), first, n)
    splits = tf.concat([tf.zeros([1], tf.int64), tf.cumsum(counts)], 0)
    vals = tf.cond(tf.size(values) > 0, lambda: tf.gather(values, order),
                   lambda: values)
    return splits, tf.gather(ids, order), vals

  return tf.cond(tf.equal(tf.size(first, out_type=tf.int64), n + 1),
                 lambda: (first, ids, values), from_example_indices)


def _batch_tensors(examples):
  """The fields of a batch that `minimize` reads, as tensors of the op's
  dtypes (so that a compiled step is traced per structure, not per value;
  inside the step, tensors already of those dtypes pass unchanged)."""
  return dict(
      sparse_features=[SparseFeatureColumn(*col)
                       for col in examples["sparse_features"]],
      dense_features=[_floats(x, f"examples['dense_features'][{g}]")
                      for g, x in enumerate(examples["dense_features"])],
      example_weights=_floats(examples["example_weights"],
                              "examples['example_weights']"),
      example_labels=_floats(examples["example_labels"],
                             "examples['example_labels']"),
      example_ids=sdca_ops.example_id_tensor(examples["example_ids"]))


def _cumsum(values):
  total = 0
  for v in values:
    total += v
    yield total


def _total_weight(example_weights):
  """sum(example_weights) (float64), which must be > 0 for a weighted
  mean: 0 (no examples, or all weighted 0) is an InvalidArgumentError,
  not a NaN."""
  total = tf.reduce_sum(example_weights)
  check = tf.debugging.Assert(
      total > 0.0,
      ["the example_weights sum to 0 (no examples, or every weight 0): "
       "the weighted mean loss is undefined"])
  with tf.control_dependencies([check]):
    return tf.identity(total)


class SdcaModel(tf.Module):
  """Linear model trained by SDCA with TensorFlow's `SdcaModel` interface.

  Args:
    examples: dict with `sparse_features` (list of `SparseFeatureColumn`),
      `dense_features` (list of float `[B, d]` or `[B]` tensors),
      `example_weights` (`[B]`), `example_labels` (`[B]`) (the three cast
      to the ops' float32 from any real dtype, tensors and arrays alike),
      `example_ids`
      (`[B]` strings or integers, unique per example across batches; an
      integer id is keyed as its decimal text, so `5` and `"5"` name one
      example, and the strings are never built).
    variables: dict with `sparse_features_weights` and
      `dense_features_weights`: lists (one per feature group) of `tf.Variable`
      or of lists of Variables partitioned along axis 0 (contiguous: the
      first holds rows [0, n0), the next [n0, n0 + n1), ...).
    options: dict with `loss_type` (one of `tf_sdca.ops.LOSSES`, or its
      short name as in `tf_sdca.losses.NAMES`),
      `symmetric_l2_regularization` (> 0) and optionally
      `symmetric_l1_regularization` (0), `num_loss_partitions` (1),
      `num_table_shards` (1), `adaptive` (False), and tf_sdca's extras
      `visit_order` ('permutation'), `seed` (0), `gamma` (1.0, smooth hinge),
      `num_inner_iterations` (1), `num_threads` (0), `num_classes` (1; K >= 2
      with `loss_type` `softmax_loss` or `multiclass_hinge_loss`: labels are
      class ids in [0, K), every weight variable has the K classes in its
      last axis, e.g. `[rows, K]`, and `predictions` are `[B, K]`),
      `hinge_step` ('projection'; the multiclass hinge's block step, or
      the reference's 'steepest_ascent' / 'near_max_gain', see
      `tf_sdca.ops.packed_solve`),
      `carry_over` ('auto'; 'auto' or a share f in [0, 1): each
      `minimize` call holds back a random f of its rows, its batch's plus
      those held back by the previous call, and visits them with the next
      call's batch instead. A stream of the same consecutive batches every
      epoch otherwise converges like a block-cyclic order: 2-2.5x the
      passes of one batch on six batches of scikit-learn's sets, and on
      twenty batches of Criteo-shaped rows 270x one batch's suboptimality
      after 20 epochs. Held rows need about one batch's passes when f fits
      the B batches of an epoch, f ~ B / (B + 6): 0.25 for two, 0.5 for
      six, 0.75 for twenty; 'auto' takes that f (B / (B + 4) for the
      hinge loss, whose rows resting at a bound leave fewer to move; at
      most 0.8) with B = the
      examples in the dual table / the batch's rows, and 0 while B < 2 (one
      batch given again: held rows would only delay a share of it). Each
      call costs more, as every held row is rewritten per call: 1.0-1.46x
      with 'auto' (f ~ 0.77) on twenty 50k-row batches of Criteo-shaped
      rows, over ten epochs, in three runs (g3doc/sdca_model.md, 'The loops users
      write'). 0 is
      TensorFlow's semantics, a call trains exactly the batch it is given.
      The held rows, f / (1 - f) batches of them, live in variables that
      checkpoints and `get_state` keep; a model built with 0 refuses a
      checkpoint holding some),
      `second_order` ('auto'; 'on' or 'off': after the op's step, the
      exact block step on the call's rows: the batch's duals set to the
      maximiser of the dual over them by Newton's method on the batch's
      primal, for dense features only, the logistic, squared, Poisson and
      softmax losses, l1 = 0, one loss partition and at most 1,024 dense
      weights (D K);
      'auto' where the batch's max_i s_i |x_i|^2 L / l2 exceeds 1,000.
      With carry_over='auto' it took Poisson on doctor visits at l2 = 1 to
      3e-6 of the optimum in 10 passes; fixed batches without held rows
      converge slowly (g3doc/losses.md)),
      `average_from` (None; T0 >= 0: output averaging counted in `minimize`
      calls. The model keeps float64 running means of the unshrunk weights
      over the iterates after calls T0, T0 + 1, ... (T0 = 0: the starting
      weights too); `update_weights` writes the shrunk mean into the
      variables (every row: O(table) per call, against the touched rows
      without averaging), and `predictions`, `linear_predictions`,
      `unregularized_loss` and `regularized_loss` use the mean, while
      training goes on from the last iterate (`regularization`,
      `example_state` and the duals are the last iterate's: the per-example
      duals are not averaged). The means and their count are tracked
      variables (checkpoints keep them) and part of `get_state`.)

  Raises:
    ValueError: for unknown option keys, missing or bad values, or
      malformed `examples` / `variables`.
  """

  def __init__(self, examples, variables, options, name="sdca_model"):
    super().__init__(name=name)
    self._options = self.check_options(options)
    for key in ("sparse_features_weights", "dense_features_weights"):
      if key not in variables:
        raise ValueError(f"variables must have key {key!r}")
    unknown = set(variables) - {"sparse_features_weights",
                                "dense_features_weights"}
    if unknown:
      raise ValueError(f"unknown variables keys: {sorted(unknown)}")
    # K of a multiclass loss (weights [rows, K], state rows of K duals then
    # primal loss, dual loss, weight); 1 for the others (state rows of 4).
    self._num_classes = self._options["num_classes"]
    self._state_width = (4 if self._num_classes == 1 else
                         self._num_classes + 3)
    self._sparse = [_Weights(v, f"sparse_{i}", self._num_classes)
                    for i, v in
                    enumerate(variables["sparse_features_weights"])]
    self._dense = [_Weights(v, f"dense_{i}", self._num_classes)
                   for i, v in enumerate(variables["dense_features_weights"])]
    self._examples = examples
    # The compiled steps of eager calls: not state, not checkpointed.
    self._functions = self._no_dependency({})
    # The features a front end made the groups from, by kind, for messages
    # (`_name_groups`); not state.
    self._group_names = self._no_dependency({})
    if examples is not None:
      self._check_examples(examples)
    with tf.init_scope():
      self._tables = [
          _ExampleStateTable(name=f"sdca_example_state_{i}",
                             width=self._state_width)
          for i in range(self._options["num_table_shards"])]
      # Mixed into the op's seed: each minimize call visits its batch in a
      # fresh order, even when the batch's duals repeat (all zero in a first
      # epoch). Checkpointed, so a resumed run visits the same orders.
      self._calls = tf.Variable(tf.constant(0, tf.int64), trainable=False,
                                name="minimize_calls")
    self._state_meaning = _StateMeaning(
        state_meaning(self._options), self._held_rows,
        averaged=self._options["average_from"] is not None)
    # The held rows of `carry_over`, created at their first use
    # (`_held_rows`): their variables are ~0.5 ms of a model's ~1.7 ms
    # creation, which front ends training packed rows never use. In a TF1
    # graph now: TensorFlow's own SdcaModel pattern runs
    # `global_variables_initializer()` before `minimize()`, and variables
    # created by minimize were then uninitialized.
    self._held = None
    if not tf.executing_eagerly() and not tf.inside_function():
      self._held_rows()
    self._average_from = self._options["average_from"]
    if self._average_from is not None:
      for weights in self._sparse + self._dense:
        weights.start_average()
      with tf.init_scope():
        # Iterates in the means: the start is the first when T0 = 0.
        self._average_count = tf.Variable(
            tf.constant(1 if self._average_from == 0 else 0, tf.int64),
            trainable=False, name="average_count")

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    """Checkpoints hold everything; a SavedModel (e.g. a Keras export for
    serving, which scores with the weights alone) leaves out the dual
    tables, whose op a TensorFlow without tf_sdca could not load.

    Eagerly, held rows that hold no row are left out of a checkpoint too:
    a checkpoint of a model built with carry_over=0 has none, and its
    record (`_StateMeaning`, 0 held rows) empties those of a model with
    `carry_over` that reads it. Listed, their variables were the objects
    `assert_existing_objects_matched()` (and the estimators' resume, which
    asserts it) found unmatched there, though the pair is supported.
    Written, they are the same as none (a reader empties its own on the
    record); `_lookup_dependency` finds them for a checkpoint that holds
    some."""
    held = None
    if save_type == "checkpoint":
      # (checkpoints keep them, saving and restoring)
      held = self._held_rows()
    children = super()._trackable_children(save_type, **kwargs)
    if save_type == "savedmodel":
      children.pop("_tables", None)
      children.pop("_held", None)
      children.pop("_state_meaning", None)
    elif (held is not None and tf.executing_eagerly() and
          int(tf.size(held.keys)) == 0):
      children.pop("_held", None)
    return children

  def _checkpoint_adapter(self, path):
    """Eagerly, refuses a checkpoint whose record (`_StateMeaning`) this
    model refuses before anything of it is restored
    (`_StateMeaning.check_checkpoint`): a restore calls this as it reaches
    the model, before it sets the values of the model's children. A graph
    refuses it when its restore ops run, with the record's assertions
    (which do not order the other restore ops)."""
    if path and tf.executing_eagerly():
      reader = tf.train.load_checkpoint(path)
      self._state_meaning.check_checkpoint(reader)
      self._check_checkpoint_shapes(path, reader)
    return super()._checkpoint_adapter(path)

  def _check_checkpoint_shapes(self, path, reader):
    """Refuses, before a restore sets anything, a checkpoint of one model
    whose weight variables or slots have other shapes than this model's (a
    feature of another size: TensorFlow's own refusal came as the restore
    reached that variable, after the call counter, the dense weights and
    their slots had been restored). A checkpoint of several models is left
    to TensorFlow (which of them is this one is not known here)."""
    shapes = reader.get_variable_to_shape_map()
    records = [key for key in shapes
               if key == _RECORD_KEY or key.endswith("/" + _RECORD_KEY)]
    if len(records) != 1:
      return
    prefix = records[0][:-len(_RECORD_KEY)]

    def key(kind, g, name, k):
      return f"{prefix}_{kind}/{g}/{name}/{k}/.ATTRIBUTES/VARIABLE_VALUE"

    for kind, groups in (("sparse", self._sparse), ("dense", self._dense)):
      for g, weights in enumerate(groups):
        group = self._group(f"{kind}_features", g,
                            f"{kind}_features_weights[{g}]")
        saved_parts = 0
        while key(kind, g, "slots", saved_parts) in shapes:
          saved_parts += 1
        if saved_parts and saved_parts != len(weights.slots):
          # (Another partitioner of the same feature read as "a feature of
          # another size", naming the first part's shape.)
          raise ValueError(
              f"the checkpoint at {path} holds {group} in {saved_parts} "
              f"part(s), this model's in {len(weights.slots)} (another "
              "partitioning of its weights, or a feature of another size): "
              "nothing was restored")
        for part, name in ((weights.variables_, "variables_"),
                           (weights.slots, "slots")):
          for k, variable in enumerate(part):
            saved = shapes.get(key(kind, g, name, k))
            if saved is not None and list(saved) != variable.shape.as_list():
              raise ValueError(
                  f"the checkpoint at {path} holds {group}"
                  f"{'' if len(part) == 1 else f' (part {k})'} of "
                  f"shape {list(saved)}, this model's is "
                  f"{variable.shape.as_list()} (a feature of another "
                  "size): nothing was restored")

  def _lookup_dependency(self, name, cached_dependencies=None):
    """A checkpoint's held rows restore into the model's, whether or not
    `_trackable_children` (which a restore calls first: it creates them)
    listed them (it leaves out empty ones)."""
    if name == "_held" and self._held is not None:
      return self._held
    return super()._lookup_dependency(name, cached_dependencies)

  def _hold_checks(self):
    """`TfSdca>HoldRows`' checks of a batch (its labels against the loss,
    its feature ids against the weight variables), as keyword arguments:
    a call's, and `set_state`'s of held rows."""
    return dict(loss_type=self._options["loss_type"],
                num_classes=self._num_classes,
                id_limits=[w.size for w in self._sparse],
                id_arguments=[self._group("sparse_features", g)
                              for g in range(len(self._sparse))],
                dense_arguments=self._dense_arguments())

  def _dense_arguments(self):
    """The dense groups' names in the ops' messages, where a front end
    named them (`_name_groups`), else None (the ops' `dense_features[g]`)."""
    if self._group_names.get("dense_features") is None:
      return None
    return [self._group("dense_features", g) for g in range(len(self._dense))]

  def create_variables(self):
    """Creates now the variables `minimize` would create at its first call
    (with `carry_over`, the held rows'). TensorFlow traces a `tf.function`
    twice when its first trace creates variables: call this (eagerly)
    before tracing a function or Keras step that calls `minimize`, and the
    step is traced once (eager `minimize` calls do so themselves). Creates
    nothing the second time."""
    self._held_rows()

  def _held_rows(self):
    """The `_HeldRows` of a model with `carry_over` (created at the first
    call that needs them), else None."""
    if self._held is None and self._options["carry_over"]:
      self._held = _HeldRows(len(self._sparse),
                             [w.size for w in self._dense])
    return self._held

  # ------------------------------------------------------------ checking
  def _name_groups(self, sparse_features, dense_features):
    """Names the feature groups in error messages after the features a
    front end made them from (`SDCAOptimizer`'s feature dict keys): a
    message then says `sparse_features[0] (features['city'])`, not only
    the op's argument."""
    self._group_names["sparse_features"] = list(sparse_features)
    self._group_names["dense_features"] = list(dense_features)

  def _group(self, kind, g, argument=None):
    """`argument` (default `kind[g]`) for group `g` of `kind`
    ('sparse_features' or 'dense_features') in a message, with the feature
    it was made from where `_name_groups` named it."""
    argument = argument or f"{kind}[{g}]"
    names = self._group_names.get(kind)
    return argument if names is None else (
        f"{argument} (features[{names[g]!r}])")

  @staticmethod
  def check_options(options):
    """`options` (the constructor's dict) checked and normalised: defaults
    filled in, every training option through `tf_sdca.options.validate`.

    Raises:
      ValueError: naming the bad key (`options['key']`) and value.
    """
    if not isinstance(options, dict):
      raise ValueError(f"options must be a dict, got {type(options)}")
    known = set(_OPTION_DEFAULTS) | set(_REQUIRED_OPTIONS)
    unknown = set(options) - known
    if unknown:
      raise ValueError(f"unknown options: {sorted(unknown)}; known: "
                       f"{sorted(known)}")
    for key in _REQUIRED_OPTIONS:
      if key not in options:
        raise ValueError(f"options must have key {key!r}")
    opts = dict(_OPTION_DEFAULTS, **options)
    if opts["visit_order"] is None:  # the table's default, for a stream
      opts["visit_order"] = options_lib.visit_order_for(
          opts["loss_type"], None, options_lib.STREAMED)

    def fail(key, expected):
      raise ValueError(f"options[{key!r}] must be {expected}, got "
                       f"{opts[key]!r}")

    # SdcaModel's own options (the table and the op's passes); the training
    # options through the one validator.
    for key, low in (("num_table_shards", 1), ("num_inner_iterations", 1)):
      value = opts[key]
      if (isinstance(value, bool) or not isinstance(value, numbers.Integral)
          or value < low):
        fail(key, f"an integer >= {low}")
    if not isinstance(opts["adaptive"], bool):
      fail("adaptive", "a bool")
    shared = {name: opts[option.sdca_key]
              for name, option in options_lib.OPTIONS.items()
              if option.sdca_key in opts}
    opts["loss_type"], _, checked = options_lib.validate(
        opts["loss_type"], shared, options_lib.STREAMED,
        options_lib.SDCA_MODEL, opts["num_classes"])
    for name, value in checked.items():
      opts[options_lib.OPTIONS[name].sdca_key] = value
    if opts["adaptive"] and losses.is_multiclass(opts["loss_type"]):
      fail("adaptive", f"False for {opts['loss_type']}")
    return opts

  def _check_examples(self, examples):
    required = ("sparse_features", "dense_features", "example_weights",
                "example_labels", "example_ids")
    for key in required:
      if key not in examples:
        raise ValueError(f"examples must have key {key!r}")
    if len(examples["sparse_features"]) != len(self._sparse):
      raise ValueError(
          f"examples has {len(examples['sparse_features'])} sparse feature "
          f"groups but variables has {len(self._sparse)}")
    if len(examples["dense_features"]) != len(self._dense):
      raise ValueError(
          f"examples has {len(examples['dense_features'])} dense feature "
          f"groups but variables has {len(self._dense)}")
    # What the shapes known here already tell (the ops check every call,
    # but name their own inputs: a dense group's rows are cut by its
    # weights' width, and the example ids reach them as keys).
    for g, (x, weights) in enumerate(zip(examples["dense_features"],
                                         self._dense)):
      shape = _known_shape(x)
      columns = (1 if shape.rank == 1 else
                 _dim(shape, 1) if shape.rank == 2 else None)
      if columns is not None and columns != weights.size:
        group = self._group("dense_features", g,
                            f"examples['dense_features'][{g}]")
        raise ValueError(f"{group} has {columns} column(s) but its weight "
                         f"variable has {weights.size} row(s)")
    rows = {}
    for key in ("example_ids", "example_weights", "example_labels"):
      x = examples[key]
      shape = (tf.TensorShape([len(x)]) if isinstance(x, (list, tuple)) else
               _known_shape(x))
      if shape.rank and _dim(shape, 0) is not None:
        rows[key] = _dim(shape, 0)
    if len(set(rows.values())) > 1:
      raise ValueError("examples' rows differ: " + ", ".join(
          f"{key} has {n}" for key, n in rows.items()))

  def _dense_width_check(self, x, g):
    """The assertion, when run, that dense group `g`'s tensor `x` has its
    weight variable's rows as columns; None where the static shape let
    `_check_examples` compare them."""
    shape = x.shape
    if shape.rank == 1 or (shape.rank == 2 and _dim(shape, 1) is not None):
      return None
    width = self._dense[g].size
    columns = tf.reduce_prod(tf.shape(x, out_type=tf.int64)[1:])
    # (Named as the ops name their inputs: Assert escapes quotes.)
    return tf.debugging.Assert(
        tf.equal(columns, width),
        [f"{self._group('dense_features', g)} has", columns,
         f"column(s) but its weight variable has {width} row(s)"])

  def _checked_when_run(self, examples):
    """`examples` (tensors) waiting for what `_check_examples` checks but
    their static shapes left to run time (a tf.function traced with
    unknown sizes): the rows of example_ids, example_weights and
    example_labels agree, and each dense group has its weight variable's
    rows as columns. The ops check both too, under their own inputs'
    names: HoldRows named the ids `keys`, and reported a dense group, cut
    into rows of the variable's width, as having more or fewer rows."""
    checks = [self._dense_width_check(x, g)
              for g, x in enumerate(examples["dense_features"])]
    checks = [check for check in checks if check is not None]
    fields = ("example_ids", "example_weights", "example_labels")
    if not all(examples[key].shape.rank and
               _dim(examples[key].shape, 0) is not None for key in fields):
      rows = [tf.size(examples[key], out_type=tf.int64) for key in fields]
      checks.append(tf.debugging.Assert(
          tf.logical_and(tf.equal(rows[0], rows[1]),
                         tf.equal(rows[0], rows[2])),
          ["example_ids has", rows[0], "rows but example_weights", rows[1],
           "and example_labels", rows[2]]))
    if not checks:
      return examples
    with tf.control_dependencies(checks):
      return dict(examples,
                  dense_features=[tf.identity(x)
                                  for x in examples["dense_features"]],
                  **{key: tf.identity(examples[key]) for key in fields})

  # ---------------------------------------------------------------- state
  def _keys(self, examples):
    ids = sdca_ops.example_id_tensor(examples["example_ids"])
    if ids.dtype != tf.string:  # keyed as their decimal text
      ids = tf.strings.as_string(ids)
    return _table_keys(sdca_ops.sdca_fprint(ids)[:, 0])

  def _shards(self, keys):
    return tf.cast(tf.math.floormod(keys, len(self._tables)), tf.int32)

  def _lookup_state(self, keys):
    return self._find_state(keys)[0]

  def _find_state(self, keys):
    """(the state rows of `keys`, zeros for keys never stored; where they
    sit, for `_insert_state`: None with several shards)."""
    if len(self._tables) == 1:
      return self._tables[0].find(keys)
    shard = self._shards(keys)
    n = len(self._tables)
    parts = tf.dynamic_partition(keys, shard, n)
    positions = tf.dynamic_partition(tf.range(tf.size(keys)), shard, n)
    return tf.dynamic_stitch(
        positions, [t.lookup(k) for t, k in zip(self._tables, parts)]), None

  def _insert_state(self, keys, values, slots=None):
    if len(self._tables) == 1:
      return [self._tables[0].insert(keys, values, slots)]
    shard = self._shards(keys)
    n = len(self._tables)
    return [t.insert(k, v) for t, k, v in zip(
        self._tables, tf.dynamic_partition(keys, shard, n),
        tf.dynamic_partition(values, shard, n))]

  # ------------------------------------------------- state, for the doors
  # Public views of the state above for the front ends that train it in
  # their own ways (tf_sdca.keras packs in-memory rows and runs
  # `TfSdca>PackedSolve` on the same weights and example state).
  def example_keys(self, example_ids):
    """int64 keys `[n]` of the example state for `example_ids` (strings
    `[n]`): the ids' fingerprints, as `minimize` stores them."""
    return self._keys({"example_ids": example_ids})

  def state_lookup(self, keys):
    """float32 state rows `[n, width]` of `keys` (from `example_keys`);
    rows of zeros for keys never stored."""
    return self._lookup_state(keys)

  def state_insert(self, keys, values):
    """Stores the float32 state rows `values` `[n, width]` of `keys`,
    replacing those stored."""
    return self._insert_state(keys, values)

  def state_size(self):
    """The number of examples the example state holds (every shard)."""
    return sum(int(table.size()) for table in self._tables)

  @property
  def calls(self):
    """The int64 `tf.Variable` counting `minimize` calls (checkpointed):
    mixed into each call's seed, so that a front end training the same
    weights by other calls counts its own on it to draw the same orders."""
    return self._calls

  def weight_groups(self):
    """The weight groups in slot order (sparse groups, then dense ones):
    each has `variables_` (the user's variables) and `slots` (their float64
    unshrunk weights, one per variable)."""
    return self._sparse + self._dense

  # --------------------------------------------------------------- train
  @_plain_python
  def minimize(self, global_step=None, examples=None, name=None):
    """Runs one SDCA call (num_inner_iterations passes) on a batch.

    Args:
      global_step: optional variable incremented by one.
      examples: the batch (same structure as the constructor's); None uses
        the constructor's. One model object trains a stream of batches:
        weights and per-example duals are shared.
      name: name scope.

    Returns:
      The new per-example state `[B, 4]` (`[B, K + 3]` multiclass; with
      `carry_over`, of the rows the call visited), as a
      tensor that depends on every update (in eager mode the update has run
      when this returns). Pass it to `update_weights`.

    Raises:
      ValueError: if there are no examples or their structure does not
        match the variables.
      tf.errors.InvalidArgumentError: (when run) for an example id twice in
        the batch, a feature id outside its variable, bad data (see
        `tf_sdca.sdca_optimizer`), or, in a `tf.function` traced with
        unknown sizes, the mismatches the ValueError names when the shapes
        are known (a dense group's columns, the rows of example_ids,
        example_weights and example_labels).
    """
    examples = self._examples if examples is None else examples
    if examples is None:
      raise ValueError("no examples: pass examples= or give them to the "
                       "constructor")
    self._check_examples(examples)
    if tf.executing_eagerly():
      self.create_variables()
      # One call of the step compiled for the batch's structure, not ~40
      # ops dispatched one by one from Python; TensorFlow's executor also
      # overlaps the independent ones.
      state = self._compiled("minimize", self._minimize_step)(
          _batch_tensors(examples))
      if global_step is not None:
        global_step.assign_add(1)
      return state
    with tf.name_scope(name or "sdca_minimize"):
      return self._minimize_step(examples, global_step)

  def _compiled(self, key, fn):
    """`fn` as a tf.function of this model, built once (traced per batch
    structure; a second batch shape makes its sizes unknown, not another
    trace per shape)."""
    if key not in self._functions:
      # Traced through a partial of this model's own: TensorFlow counts the
      # traces of a method (or of a closure's code) across all its objects,
      # and a partial by itself; a process making a few models (each traced
      # once, for its own variables) was warned of "excessive retracing".
      self._functions[key] = tf.function(functools.partial(fn),
                                         reduce_retracing=True,
                                         autograph=False)
    return self._functions[key]

  def _minimize_step(self, examples, global_step=None):
    """The ops of `minimize` (in a graph or a tf.function being traced)."""
    examples = self._checked_when_run(_batch_tensors(examples))
    # The op checks that the ids are unique: an id twice in one batch would
    # give the solve two duals for one table row; one would be lost and the
    # weights would stop being w(alpha).
    keys = sdca_ops.example_keys(examples["example_ids"])
    later = None
    if self._held_rows() is not None:
      share = self._options["carry_over"]
      if share == "auto":
        share = _auto_carry_over(
            tf.add_n([t.size() for t in self._tables]),
            tf.size(keys, out_type=tf.int64), self._options["loss_type"])
      # The batch's labels and ids are checked before its rows are dealt:
      # a bad row held (not visited) would fail a later call instead, at a
      # row the user never gave it, and every call after.
      examples, keys, later = self._held.take(
          examples, keys, share, self._options["seed"],
          self._calls.read_value(), self._hold_checks())
    state, slots = self._find_state(keys)
    ex_idx, feat_idx, feat_val, uniq_ids, sp_weights = [], [], [], [], []
    start_values = []
    groups_with_values = []
    for col in examples["sparse_features"]:
      groups_with_values.append(col.feature_values is not None)
    # The op takes values for the first groups only; groups without
    # values get explicit ones when a later group has values.
    last_with_values = max([i + 1 for i, v in enumerate(groups_with_values)
                            if v] or [0])
    for g, (col, weights) in enumerate(zip(examples["sparse_features"],
                                           self._sparse)):
      # Checked before the ids index anything: a clearer message than a
      # failed gather or the op's "not in sparse_indices".
      uniq = weights.distinct_ids(
          col.feature_indices, argument=self._group("sparse_features", g))
      ex_idx.append(col.example_indices)
      feat_idx.append(col.feature_indices)
      if g < last_with_values:
        feat_val.append(col.feature_values if col.feature_values is not None
                        else tf.ones_like(col.feature_indices, tf.float32))
      uniq_ids.append(uniq)
      start_values.append(weights.gather(uniq))
      sp_weights.append(tf.cast(start_values[-1], tf.float32))
    dense = [self._dense_matrix(x, g)
             for g, x in enumerate(examples["dense_features"])]
    dense_w = [tf.cast(w.all_rows(), tf.float32) for w in self._dense]
    o = self._options
    new_state, d_sparse, d_dense = sdca_ops.sdca_optimizer(
        ex_idx, feat_idx, feat_val, dense,
        examples["example_weights"], examples["example_labels"], uniq_ids,
        sp_weights, dense_w, state, loss_type=o["loss_type"],
        l1=o["symmetric_l1_regularization"],
        l2=o["symmetric_l2_regularization"],
        num_loss_partitions=o["num_loss_partitions"],
        num_inner_iterations=o["num_inner_iterations"],
        adaptive=o["adaptive"], visit_order=o["visit_order"],
        seed=o["seed"], gamma=o["gamma"], num_threads=o["num_threads"],
        num_classes=self._num_classes, hinge_step=o["hinge_step"],
        call_index=self._calls.read_value(),
        dense_arguments=self._dense_arguments())
    if self._block_step_applies(examples):
      new_state, d_dense = self._block_step(examples, dense, new_state,
                                            d_dense)
    updates = self._insert_state(keys, new_state, slots)
    with tf.control_dependencies([new_state]):
      updates.append(self._calls.assign_add(1))
      if later is not None:
        # After the solve: a call that fails (a feature id outside its
        # variable, a label outside the loss's domain, found by the ops
        # after HoldRows) holds nothing new, and its rows are not lost.
        updates += self._held.hold(later)
    for weights, uniq, start, delta in zip(self._sparse, uniq_ids,
                                           start_values, d_sparse):
      updates.append(weights.apply_delta(uniq, start, delta))
    for weights, delta in zip(self._dense, d_dense):
      updates += weights.assign_add_all(tf.cast(delta, tf.float64))
    if self._average_from is not None:
      with tf.control_dependencies(updates):
        updates += self._average_step()
    if global_step is not None:
      with tf.control_dependencies(updates):
        updates.append(global_step.assign_add(1))
    with tf.control_dependencies(updates):
      return tf.identity(new_state, name="train_op")

  def _block_step_applies(self, examples):
    """Whether `second_order` takes the exact block step on this batch's
    structure: dense features only, a loss with phi'', l1 = 0, one
    partition, D K <= second_order.MAX_DIM."""
    o = self._options
    return (o["second_order"] != "off" and
            o["loss_type"] in second_order.STREAMED_LOSSES and
            not examples["sparse_features"] and
            o["symmetric_l1_regularization"] == 0 and
            o["num_loss_partitions"] == 1 and
            0 < sum(w.size for w in self._dense) * self._num_classes <=
            second_order.MAX_DIM)

  def _block_step(self, examples, dense, new_state, d_dense):
    """The op's result moved by `second_order.streamed_block_step`: the
    batch's duals maximise the dual over the batch (new state, dense
    deltas, float64)."""
    o = self._options
    k = self._num_classes
    x = tf.concat([tf.cast(d, tf.float64) for d in dense], axis=1)
    delta = tf.concat([tf.reshape(tf.cast(d, tf.float64), [-1, k])
                       for d in d_dense], axis=0)
    w = tf.concat([tf.reshape(w.all_rows(), [-1, k]) for w in self._dense],
                  axis=0) + delta
    s = tf.cast(examples["example_weights"], tf.float64)
    y = tf.cast(examples["example_labels"], tf.float64)
    duals, change = second_order.shared_streamed_block_step(
        o["loss_type"], o["symmetric_l2_regularization"], x, s, y, w,
        tf.cast(new_state[:, :k], tf.float64), o["second_order"])
    dual64 = tf.cast(duals, tf.float64)
    dual_loss = s * losses.dual(o["loss_type"],
                                dual64 if k > 1 else dual64[:, 0], y,
                                o["gamma"])
    new_state = tf.concat([duals, new_state[:, k:k + 1],
                           tf.cast(dual_loss, tf.float32)[:, None],
                           new_state[:, k + 2:]], axis=1)
    # float64 deltas: the slots are float64 (assign_add_all's cast is then
    # the identity).
    total = delta + change
    return new_state, [tf.reshape(t, tf.shape(d)) for t, d in zip(
        tf.split(total, [w.size for w in self._dense]), d_dense)]

  def _average_step(self):
    """After a `minimize` call's updates: adds the new iterate to the means
    when the call is the T0-th or later (`mean += (slot - mean) / count`,
    as `InMemorySdca` averages its epochs)."""
    added = self._calls.read_value() >= self._average_from
    count = self._average_count.assign_add(tf.cast(added, tf.int64))
    rate = tf.where(added, 1.0 / tf.cast(tf.maximum(count, 1), tf.float64),
                    tf.constant(0.0, tf.float64))
    return [mean.assign_add(rate * (slot.read_value() - mean.read_value()))
            for weights in self._sparse + self._dense
            for mean, slot in zip(weights.means, weights.slots)]

  def _averaged(self):
    """Whether the outputs come from the means: averaging, with an iterate
    in them (a bool tensor, or False)."""
    if self._average_from is None:
      return False
    return self._average_count.read_value() > 0

  @staticmethod
  def _dense_matrix(x, g):
    """Dense group `g`'s `x` as a float32 `[B, d]` matrix."""
    x = _floats(x, f"examples['dense_features'][{g}]")
    return tf.reshape(x, [-1, 1]) if x.shape.rank == 1 else x

  @_plain_python
  def update_weights(self, train_op):
    """Writes the shrunk solution into the user's variables.

    Sparse variables are written only at the rows changed since the last
    call (a 2^24-row table is not copied per step); dense ones whole.

    Args:
      train_op: what `minimize` returned (a control dependency in graphs).

    Returns:
      A grouped op, as in TensorFlow (None eagerly, where the assignments
      have run). Inside a `tf.function` do not return it: a function cannot
      return an `Operation`, and automatic control dependencies already
      order the writes.
    """
    if tf.executing_eagerly():
      self._compiled("update_weights",
                     functools.partial(self._update_step, group=False))()
      return None
    with tf.control_dependencies([train_op]):
      return self._update_step()

  def _update_step(self, group=True):
    """The ops of `update_weights`; their grouped op, or None without
    `group` (a compiled step cannot return an Operation)."""
    shrink = (self._options["symmetric_l1_regularization"] /
              self._options["symmetric_l2_regularization"])
    assigns = []
    if self._average_from is not None:
      # The mean moves at every row each call: every row is written.
      averaged = self._averaged()
      for weights in self._sparse + self._dense:
        for var, slot, mean in zip(weights.variables_, weights.slots,
                                   weights.means):
          value = tf.where(averaged, mean.read_value(), slot.read_value())
          assigns.append(var.assign(tf.reshape(
              tf.cast(_shrink_l1(value, shrink), var.dtype), var.shape)))
        if weights in self._sparse:
          assigns.append(weights.touched.assign(tf.zeros([0], tf.int64)))
      return tf.group(*assigns) if group else None
    for weights in self._sparse:
      rows = weights.touched.read_value()
      written = weights.update_variables(rows, shrink)
      with tf.control_dependencies(written):
        assigns.append(weights.touched.assign(tf.zeros([0], tf.int64)))
    for weights in self._dense:
      for var, slot in zip(weights.variables_, weights.slots):
        shrunk = _shrink_l1(slot.read_value(), shrink)
        assigns.append(var.assign(tf.reshape(tf.cast(shrunk, var.dtype),
                                             var.shape)))
    return tf.group(*assigns) if group else None

  # ----------------------------------------------------------- evaluate
  def _shrink(self, w):
    return losses.shrink_l1(w, self._options["symmetric_l1_regularization"],
                            self._options["symmetric_l2_regularization"])

  def _shrunk(self, weights):
    return self._shrink(weights.all_rows())

  def _evaluated(self, examples, labels=True, ids=False):
    """`examples` for an evaluation method, checked first as `minimize`
    checks a batch (TfSdca>HoldRows' checks: the ranks and rows of every
    field, finite features and weights >= 0, feature ids within their
    variables, with `labels` the labels in the loss's domain, with `ids`
    the example ids distinct): evaluated unchecked, labels `[n, 1]`
    broadcast against the `[n]` scores into an `[n, n]` loss (breast_cancer:
    2368 for 0.053), an out-of-range class was scored, and a bad id or
    width failed in a gather or matmul naming no argument. Returns the
    fields as given (their dtypes, so the numbers are those of the
    unchecked evaluation), each to be read after the check."""
    examples = dict(examples)
    if not ids and "example_labels" in examples:
      # (Not read: rows by position, so that the checks below name the
      # labels and weights, not the ids.)
      labels_given = _real(examples["example_labels"],
                           "examples['example_labels']")
      examples["example_ids"] = tf.range(
          tf.shape(labels_given, out_type=tf.int64)[0] if
          labels_given.shape.rank else tf.constant(1, tf.int64))
    self._check_examples(examples)
    batch = self._checked_when_run(_batch_tensors(examples))
    # A dense group's rows against the labels', where the shapes tell (in a
    # tf.function the scores' sum failed first, naming no argument).
    rows = (_dim(batch["example_labels"].shape, 0)
            if batch["example_labels"].shape.rank else None)
    for g, x in enumerate(batch["dense_features"]):
      if x.shape.rank and rows is not None and _dim(x.shape, 0) not in (
          None, rows):
        raise ValueError(f"dense_features[{g}] has {_dim(x.shape, 0)} rows, "
                         f"not {rows}")
    keys = (sdca_ops.example_keys(batch["example_ids"]) if ids else
            batch["example_ids"])
    checks = self._hold_checks()
    if not labels:
      checks["loss_type"] = ""
    visit, _ = sdca_ops.hold_rows(
        _hold_batch(batch, keys, [w.size for w in self._dense]),
        _no_held_rows(len(self._sparse), [w.size for w in self._dense]),
        0, 0.0, **checks)
    # (A stateful op reading the check's output: a control dependency on
    # the stateless op itself was pruned from a tf.function's graph.)
    done = [tf.debugging.Assert(tf.size(visit["keys"]) >= 0,
                                ["unreachable"])]

    def after(x):
      if x is None:
        return None
      with tf.control_dependencies(done):
        return tf.identity(x)

    return dict(
        examples,
        sparse_features=[SparseFeatureColumn(after(col.example_indices),
                                             after(col.feature_indices),
                                             after(col.feature_values))
                         for col in batch["sparse_features"]],
        dense_features=[after(_real(x, f"examples['dense_features'][{g}]"))
                        for g, x in enumerate(examples["dense_features"])],
        example_weights=after(_real(examples["example_weights"],
                                    "examples['example_weights']")),
        example_labels=after(_real(examples["example_labels"],
                                   "examples['example_labels']")),
        example_ids=after(batch["example_ids"]))

  def _linear_predictions(self, examples):
    """`w.x` at the model's weights: the mean of the iterates when
    averaging (once it holds one), else the training state's."""
    averaged = self._averaged()
    if averaged is False:
      return self._linear_predictions_at(examples, False)
    return _static_or_cond(
        averaged, lambda: self._linear_predictions_at(examples, True),
        lambda: self._linear_predictions_at(examples, False))

  def _linear_predictions_at(self, examples, mean):
    n = tf.shape(_real(examples["example_labels"],
                       "examples['example_labels']"))[0]
    k = self._num_classes
    z = tf.zeros([n] if k == 1 else [n, k], tf.float64)
    for col, weights in zip(examples["sparse_features"], self._sparse):
      # Only the rows the batch uses: a 2^24-row table is not read whole.
      w = self._shrink(weights.gather(col.feature_indices, mean))
      if col.feature_values is not None:
        values = tf.cast(col.feature_values, tf.float64)
        w *= values if k == 1 else values[:, None]
      z += tf.math.unsorted_segment_sum(w, col.example_indices, n)
    for g, (x, weights) in enumerate(zip(examples["dense_features"],
                                         self._dense)):
      x = self._dense_matrix(x, g)
      check = self._dense_width_check(x, g)
      if check is not None:  # (else a matmul's error names no argument)
        with tf.control_dependencies([check]):
          x = tf.identity(x)
      x = tf.cast(x, tf.float64)
      w = self._shrink(weights.all_rows(mean))
      z += tf.linalg.matvec(x, w) if k == 1 else tf.matmul(x, w)
    return z

  @_plain_python
  def predictions(self, examples):
    """Sigmoid for logistic, exp for Poisson, w.x otherwise (float32);
    `[B, K]` class probabilities for softmax, scores `W^T x` for the
    multiclass hinge."""
    z = losses.activation(
        self._options["loss_type"],
        self._linear_predictions(self._evaluated(examples, labels=False)))
    return tf.cast(z, tf.float32)

  @_plain_python
  def unregularized_loss(self, examples):
    """Weighted mean loss on `examples` at the current (shrunk) weights.

    Each loss is the one the op minimises (TensorFlow's version reported the
    hinge loss for `smooth_hinge_loss`; here it is the smooth hinge itself).

    Args:
      examples: a batch dict, as for the constructor (`example_ids` unused).

    Returns:
      float64 scalar `sum_i s_i loss_i / sum_i s_i`.
    """
    return self._unregularized_loss(self._evaluated(examples))

  def _unregularized_loss(self, examples):
    z = self._linear_predictions(examples)
    y = tf.cast(_real(examples["example_labels"],
                      "examples['example_labels']"),
                tf.float64 if self._num_classes == 1 else tf.int64)
    s = tf.cast(_real(examples["example_weights"],
                      "examples['example_weights']"), tf.float64)
    per = losses.primal(self._options["loss_type"], z, y,
                        self._options["gamma"])
    return tf.reduce_sum(s * per) / _total_weight(s)

  def _regularization(self, mean=False):
    l1 = self._options["symmetric_l1_regularization"]
    l2 = self._options["symmetric_l2_regularization"]
    total_l1 = tf.constant(0.0, tf.float64)
    total_l2 = tf.constant(0.0, tf.float64)
    for weights in self._sparse + self._dense:
      w = self._shrink(weights.all_rows(mean))
      total_l1 += tf.reduce_sum(tf.abs(w))
      total_l2 += tf.reduce_sum(tf.square(w))
    return l1 * total_l1, l2 * total_l2

  @_plain_python
  def regularized_loss(self, examples):
    """unregularized_loss + (l1 |w|_1 + l2/2 |w|^2) / sum of the weights
    (at the mean of the iterates when averaging)."""
    examples = self._evaluated(examples)
    averaged = self._averaged()
    if averaged is False:
      r1, r2 = self._regularization()
    else:
      r1, r2 = _static_or_cond(averaged,
                               lambda: self._regularization(True),
                               self._regularization)
    s = _total_weight(tf.cast(_real(examples["example_weights"],
                                    "examples['example_weights']"),
                              tf.float64))
    return self._unregularized_loss(examples) + (r1 + 0.5 * r2) / s

  @_plain_python
  def linear_predictions(self, examples):
    """float64 `w.x` per example (`[B, K]` `W^T x` for a multiclass loss)
    at the current shrunk float64 weights."""
    return self._linear_predictions(self._evaluated(examples, labels=False))

  @_plain_python
  def example_state(self, examples):
    """The stored `[B, 4]` state rows (dual, primal loss, dual loss, weight)
    of the batch's example ids (`[B, K + 3]`, the K duals first, for a
    multiclass loss); zeros for ids never trained."""
    return self._lookup_state(self._keys(examples))

  @_plain_python
  def regularization(self):
    """`(l1 |w|_1, l2 |w|^2)` at the shrunk weights, float64 scalars."""
    return self._regularization()

  @_plain_python
  def gap_parts(self, examples):
    """One batch's sums of the exact duality gap (see `duality_gap`).

    Args:
      examples: a batch dict, as for the constructor.

    Returns:
      float64 `[3]`: `sum_i s_i phi_i(w.x_i)` at the training state's shrunk
      weights, `sum_i s_i phi_i*(-alpha_i)` at the stored duals (0 for ids
      never trained) and `sum_i s_i`. Works inside `tf.function`.
    """
    return self._gap_parts(self._evaluated(examples, ids=True))

  def _gap_parts(self, examples):
    """`gap_parts` of a batch already checked (a front end's, which
    `minimize` checked in training)."""
    loss, gamma = self._options["loss_type"], self._options["gamma"]
    z = self._linear_predictions_at(examples, False)
    state = tf.cast(self.example_state(examples), tf.float64)
    s = tf.cast(_real(examples["example_weights"],
                      "examples['example_weights']"), tf.float64)
    labels = _real(examples["example_labels"], "examples['example_labels']")
    if self._num_classes == 1:
      y = tf.cast(labels, tf.float64)
      alpha = state[:, 0]
    else:
      # The state keeps the K duals; the label's is rebuilt as the negated
      # sum of the others, as the op reads it.
      y = tf.cast(labels, tf.int64)
      label = tf.one_hot(y, self._num_classes, dtype=tf.float64)
      others = state[:, :self._num_classes] * (1.0 - label)
      alpha = others - label * tf.reduce_sum(others, axis=1, keepdims=True)
    return tf.stack([tf.reduce_sum(s * losses.primal(loss, z, y, gamma)),
                     tf.reduce_sum(s * losses.dual(loss, alpha, y, gamma)),
                     tf.reduce_sum(s)])

  def duality_gap(self, examples):
    """The exact objective and relative duality gap of the training state.

    Unlike `approximate_duality_gap` (TensorFlow's estimate from the primal
    losses each example's last `minimize` call saw, which lags and can be
    negative), this evaluates `P(w) = sum_i s_i phi_i(w.x_i) + l1 |w|_1 +
    l2/2 |w|^2` at the current weights and `D(alpha)` at the stored duals,
    so `P(w) - D(alpha) >= 0` bounds `P(w) - P(w*)`. It is one pass over
    the data without training, in eager mode. With `average_from` it is
    the last iterate's (whose duals the state holds), not the mean's.

    Args:
      examples: every training example once: a batch dict, or an iterable
        of them (the stream's batches). Examples never trained count with
        dual 0; an example trained but left out would make the gap invalid,
        so fewer examples than the tables hold is an error.

    Returns:
      `(objective, relative_gap)` as Python floats: `P(w)` per unit of
      example weight (what `regularized_loss` reports over all the data)
      and `(P(w) - D(alpha)) / |P(w)|`.

    Raises:
      ValueError: when the examples are fewer than the trained examples,
        or their weights sum to 0.
    """
    batches = [examples] if isinstance(examples, dict) else examples
    parts = np.zeros(3)
    count = 0
    for batch in batches:
      parts += self.gap_parts(batch).numpy()
      count += int(tf.size(tf.convert_to_tensor(batch["example_ids"])))
    stored = sum(int(table.size()) for table in self._tables)
    if count < stored:
      raise ValueError(
          f"duality_gap needs every trained example: the state holds "
          f"{stored}, the examples given are {count}")
    return self.gap_from_parts(parts)

  def gap_from_parts(self, parts, exact=True):
    """`duality_gap`'s result from `gap_parts` summed over batches holding
    every trained example (not checked here: `duality_gap` checks it).

    Args:
      parts: float64 `[3]`, the sum of `gap_parts` over the batches.
      exact: the parts are the exact gap's (False: an estimate, such as the
        state's losses, which lag the weights and may sum to a negative
        gap: returned as it is).

    Returns:
      `(objective, relative_gap)` as in `duality_gap`.

    Raises:
      ValueError: when the examples' weights sum to 0, or (`exact`) the gap
        is negative beyond rounding (not each trained example once).
    """
    parts = np.asarray(parts, np.float64)
    if parts[2] <= 0.0:
      raise ValueError("duality_gap: the examples' weights sum to "
                       f"{parts[2]}; the gap per unit of weight is undefined")
    r1, r2 = (float(r) for r in self._regularization())
    objective = parts[0] + r1 + 0.5 * r2
    gap = parts[0] + parts[1] + r1 + r2
    if exact and gap < -1e-6 * (abs(parts[0]) + abs(parts[1]) + r1 + r2):
      # Weak duality, P(w) >= D(alpha), holds over each trained example
      # once; a stream that repeats an example (a dataset concatenated
      # with itself) counts its loss and dual loss twice but its weights'
      # share once, and the gap goes negative: no certificate (a `tol`
      # stop on it would stop anywhere). The room is the float32 state's
      # rounding: softmax's float32 dual blocks on iris near the optimum,
      # -1.6e-7 in a scale of 94 (a negative gap from repeated examples is
      # of the order of the regularisation: -10 in 23 on breast_cancer).
      raise ValueError(
          f"duality_gap: P(w) - D(alpha) = {gap:.6g} < 0 over the batches "
          "given, which are not each trained example once: an example id "
          "repeats (e.g. a dataset concatenated with itself) or rows differ "
          "from those trained under their ids")
    return objective / parts[2], gap / max(abs(objective), 1e-300)

  def get_state(self):
    """The training state as numpy arrays: every example's state row keyed
    by its id fingerprint, and the unshrunk float64 weights.

    Returns:
      dict with `keys` (int64 `[m]`), `values` (float32 `[m, 4]`, or
      `[m, K + 3]` for a multiclass loss),
      `slots` (list of float64 arrays, one per weight variable, in the
      order sparse groups then dense groups) and `calls` (the number of
      `minimize` calls so far, which the visiting orders depend on); with
      `average_from`, `average_count` (iterates in the means) and
      `average_slots` (the means of `slots`); with `carry_over`, `held`:
      the rows held for the next call (`keys`, `example_weights`,
      `example_labels`, `sparse`: per sparse group (example indices,
      feature ids, values or an empty array), `dense`: per dense group).
    """
    keys, values = [], []
    for table in self._tables:
      k, v = table.entries()
      keys.append(k.numpy())
      values.append(v.numpy())
    return dict(keys=np.concatenate(keys),
                values=np.concatenate(values).reshape(-1, self._state_width),
                slots=[slot.numpy() for w in self._sparse + self._dense
                       for slot in w.slots],
                calls=int(self._calls.numpy()),
                **({} if self._average_from is None else dict(
                    average_count=int(self._average_count.numpy()),
                    average_slots=[mean.numpy() for w in
                                   self._sparse + self._dense
                                   for mean in w.means])),
                **({} if self._held_rows() is None else dict(
                    held=self._held.numpy())))

  @staticmethod
  def _state_slots(state, key, slots):
    """`state[key]` as float64 arrays of the shapes of `slots` (ValueError
    naming the slot and its shape where they differ)."""
    if len(state[key]) != len(slots):
      raise ValueError(f"state['{key}'] has {len(state[key])} weight "
                       f"slots, the model {len(slots)}")
    out = []
    for i, (slot, value) in enumerate(zip(slots, state[key])):
      array = _state_array(value, f"state['{key}'][{i}]", np.float64)
      if array.size != slot.shape.num_elements():
        raise ValueError(f"state['{key}'][{i}] has shape {array.shape}; "
                         f"the model's slot {i} has shape "
                         f"{slot.shape.as_list()}")
      out.append(array.reshape(slot.shape))
    return out

  def check_state(self, state):
    """Raises the ValueError `set_state(state)` would raise, setting
    nothing (a front end restoring more than this model's state checks it
    before it sets any of it)."""
    self._checked_state(state)

  def _checked_state(self, state):
    """`set_state`'s checks of `state`, and its parts as the arrays it
    sets (nothing is set here)."""
    held = state.get("held")
    if held is not None and self._held_rows() is None:
      count = len(held["keys"])
      if count:
        raise ValueError(
            f"state['held'] holds {count}{_HELD_ROWS_DROPPED}Give the state "
            f"to a model built with carry_over (e.g. 'auto', the default); "
            f"to drop them knowingly, give this model the state less "
            f"'held' ({{k: v for k, v in state.items() if k != 'held'}})")
    means_given = [k for k in _MEAN_PARTS if k in state]
    if self._average_from is None and means_given:
      # (Skipped, the caller's mean became the last iterate unsaid.)
      raise ValueError(
          f"state['{means_given[0]}'] holds the mean of the iterates of a "
          f"model built with average_from; this model is built without it "
          f"and would drop the mean, its weights the last iterate's. Give "
          f"the state to a model built with average_from; to take the last "
          f"iterate knowingly, give this model the state less "
          f"'average_slots' and 'average_count'")
    missing = [k for k in _MEAN_PARTS if k not in means_given]
    if self._average_from is not None and missing:
      # (Skipped, the model's own mean and count stayed beside the state's
      # iterate: its outputs a mean the state's run never had.)
      raise ValueError(
          f"state has no '{missing[0]}': "
          + ("it holds no mean of the iterates, as the state of a model "
             "built without average_from; " if len(missing) == 2 else
             "it holds half of the mean of the iterates; ")
          + "this model is built with average_from and would keep its own "
          "mean and count beside the state's iterate, its weights then a "
          "mean the state's run never had. Give the state to a model built "
          "without average_from; to start a mean knowingly, give this model "
          "the state with 'average_slots' and 'average_count' (e.g. "
          "average_slots=state['slots'], average_count=1: a mean of this "
          "iterate alone)")
    groups = self._sparse + self._dense
    slots = [slot for w in groups for slot in w.slots]
    slot_values = self._state_slots(state, "slots", slots)
    keys = _state_array(state["keys"], "state['keys']", np.int64, ndim=1)
    values = _state_array(state["values"], "state['values']", np.float32)
    if (values.ndim < 1 or values.shape[-1] != self._state_width or
        values.size != len(keys) * self._state_width):
      raise ValueError(f"state values have shape {np.shape(state['values'])};"
                       f" the model keeps {self._state_width} numbers per "
                       f"example, for {len(keys)} keys")
    values = values.reshape(-1, self._state_width)
    calls = _state_count(state, "calls") if "calls" in state else None
    if held is not None and self._held_rows() is not None:
      held = self._held.checked(held, self._hold_checks())
    else:
      held = None
    means = None
    if self._average_from is not None:
      means = [mean for w in groups for mean in w.means]
      mean_values = self._state_slots(state, "average_slots", means)
      average_count = _state_count(state, "average_count")
    return dict(slots=(slots, slot_values), keys=keys, values=values,
                calls=calls, held=held,
                means=None if means is None else (means, mean_values,
                                                  average_count))

  def set_state(self, state):
    """Restores what `get_state` returned (and writes the shrunk weights
    into the variables). Example state already stored is replaced; a state
    without `calls` (or `held`) leaves the call count (the held rows) as
    it is.

    Every part is checked before anything is set, so that a refused state
    leaves the model (weights, slots, example state, held rows, means and
    counts) exactly as it was; `check_state` runs the same checks alone.

    Raises:
      ValueError: naming the part and the bad value, for a state of other
        weight slots (their number or shapes, `average_slots`' too) or
        state width, keys or values of different lengths, a part that holds
        no real numbers (keys no integers), `calls` or `average_count` not a
        whole number >= 0, held rows that are not the model's groups, whose
        parts disagree, whose feature ids are outside their group's weight
        variable, whose example weights are negative or not finite or
        whose labels are outside the loss's domain, or one whose `held`
        holds rows, given to a model built with `carry_over=0`, which has
        no place for them (as a
        checkpoint holding some is refused on restore): give it to a model
        with `carry_over`, or drop them knowingly by giving this model the
        state less `'held'`; likewise for `average_slots` or
        `average_count` (an averaging model's mean) given to a model built
        without `average_from`, which would drop the mean: give the state
        less them to take the last iterate knowingly; and for a state
        without them (a model's built without `average_from`) given to a
        model built with it, which would keep its own mean beside the
        state's iterate: give the state with them (e.g. `average_slots`
        the state's `slots`, `average_count` 1) to start a mean knowingly.
    """
    checked = self._checked_state(state)  # sets nothing, or raises
    slots, slot_values = checked["slots"]
    keys, values = checked["keys"], checked["values"]
    calls, held = checked["calls"], checked["held"]
    means = checked["means"]
    for slot, value in zip(slots, slot_values):
      slot.assign(value)
    keys = _table_keys(tf.constant(keys, tf.int64))
    values = tf.constant(values, tf.float32)
    shard = self._shards(keys)
    for i, table in enumerate(self._tables):
      mine = tf.equal(shard, i)
      table.replace(tf.boolean_mask(keys, mine),
                    tf.boolean_mask(values, mine))
    if calls is not None:
      self._calls.assign(calls)
    if held is not None:
      self._held.assign(held)
    if means is not None:
      means, mean_values, average_count = means
      for mean, value in zip(means, mean_values):
        mean.assign(value)
      self._average_count.assign(average_count)
    if self._average_from is not None:  # the variables show the mean
      self._update_step(group=False)
      return
    shrink = (self._options["symmetric_l1_regularization"] /
              self._options["symmetric_l2_regularization"])
    for weights in self._sparse + self._dense:
      for var, slot in zip(weights.variables_, weights.slots):
        shrunk = _shrink_l1(slot.read_value(), shrink)
        var.assign(tf.reshape(tf.cast(shrunk, var.dtype), var.shape))

  @_plain_python
  def approximate_duality_gap(self):
    """TensorFlow's duality-gap estimate over every example in the tables.

    `(sum primal + sum dual losses + l1 |w|_1 + l2 |w|^2) / sum weights`,
    where each example's primal loss is the one at the weights its last
    visit saw (as the pass reached it): the estimate lags when later batches
    moved the weights (it can be negative: -3.5e-3 of the objective on
    three fixed batches of heart_scale, squared loss, while the weights were
    6.7e-4 above the optimum, g3doc/sdca_model.md), and equals the
    true gap P(w) - D(alpha) once the weights stop moving.

    Returns:
      float64 scalar; NaN before any training (no examples in the tables),
      as TensorFlow's.

    Raises:
      tf.errors.InvalidArgumentError: when the tables hold examples whose
        weights are all 0 (the gap per unit of weight is undefined).
    """
    total = tf.zeros([self._state_width], tf.float64)
    entries = tf.constant(0, tf.int64)
    for table in self._tables:
      _, values = table.entries()
      total += tf.reduce_sum(tf.cast(values, tf.float64), axis=0)
      entries += tf.shape(values, out_type=tf.int64)[0]
    r1, r2 = self._regularization()
    check = tf.debugging.Assert(
        tf.logical_or(tf.equal(entries, 0), total[-1] > 0.0),
        ["approximate_duality_gap: every trained example's weight is 0 "
         "(example_weights); the gap per unit of weight is undefined"])
    with tf.control_dependencies([check]):
      # primal losses, dual losses, weights: the last three columns.
      return (total[-3] + total[-2] + r1 + r2) / tf.identity(total[-1])

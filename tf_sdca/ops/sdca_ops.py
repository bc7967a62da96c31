"""Python wrappers of tf_sdca's ops.

`sdca_optimizer` takes the inputs of `tf.raw_ops.SdcaOptimizerV2` (so that a
TensorFlow user recognises them) plus tf_sdca's extras: the visiting order,
its seed, the smooth-hinge gamma and the thread count.
"""
import re

import numpy as np
import tensorflow as tf

from tf_sdca.ops._loader import load_ops

LOSSES = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "poisson_loss", "absolute_loss")
VISIT_ORDERS = ("permutation", "uniform", "cyclic", "adaptive", "shrinking")
# The multiclass losses of the packed-rows ops (`num_classes` = K >= 2): a
# block of K duals per row, labels class ids; one thread, and the visiting
# orders below.
MULTICLASS_LOSSES = ("softmax_loss", "multiclass_hinge_loss")
MULTICLASS_VISIT_ORDERS = ("permutation", "uniform", "cyclic")
# ... and for the multiclass hinge, whose rows classified with margin rest
# at alpha = 0, LIBLINEAR-style shrinking of those rows.
MULTICLASS_HINGE_VISIT_ORDERS = MULTICLASS_VISIT_ORDERS + ("shrinking",)
# The multiclass hinge's block steps (g3doc/multiclass.md): the exact
# maximiser of the block, or one of the reference's sequential dual ascent
# steps along one feasible direction.
HINGE_STEPS = ("projection", "steepest_ascent", "near_max_gain")


def check_hinge_step(loss_type, hinge_step):
  """ValueError unless `hinge_step` is one of HINGE_STEPS and, when not
  'projection', the loss is the multiclass hinge."""
  if hinge_step not in HINGE_STEPS:
    raise ValueError(f"hinge_step must be one of {HINGE_STEPS}, got "
                     f"{hinge_step!r}")
  if hinge_step != "projection" and loss_type != "multiclass_hinge_loss":
    raise ValueError(f"hinge_step {hinge_step!r} is a block step of "
                     f"multiclass_hinge_loss, not of {loss_type}")
# The losses accelerated mini-batch SDCA (`asdca_solve`) converges for: the
# smooth ones (bounded loss'').
ASDCA_LOSSES = ("logistic_loss", "squared_loss", "smooth_hinge_loss")


# The most passes one op call makes (kMaxPasses in solver_options.h); a call
# also stops, with CancelledError, when its step is cancelled (checked every
# 2^16 rows).
MAX_PASSES = 1 << 20


def op_message(message):
  """An op error's `message` without TensorFlow's wrapping of an eager
  op's error (`{{function_node ...}}`, `[Op:...]`), which says nothing to
  the user."""
  message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message)
  return re.sub(r"\s*\[Op:[^\]]*\]( name: \S*)?\s*$", "", message)


# Numpy arrays of at least this many bytes become tensors through one
# 64-byte-aligned copy handed to TensorFlow by DLPack (`to_tensor`).
_DLPACK_MIN_BYTES = 1 << 16


def to_tensor(value, dtype, name=None):
  """`value` as a `dtype` tensor, as `tf.convert_to_tensor` makes it.

  Eagerly, a numpy array of `dtype`'s numeric type and at least 64 KiB is
  copied once into 64-byte-aligned memory that the tensor then owns
  (DLPack): the 1.3M int64 example indices of a 50k-row Criteo-shaped
  batch took 0.5 ms that way and 7.8 ms through `tf.convert_to_tensor`
  (which copies the array, and copies that copy again unless it happens to
  be aligned; medians of 30 in one process, load ~5). The values are the
  same, and the tensor never shares the caller's array.

  Eagerly, a numpy bytes array (dtype `S`) of at least 64 KiB becomes a
  string tensor by one copy of its buffer into a scalar string, cut into
  its items by `tf.strings.substr` at the lengths numpy gives them
  (trailing NULs stripped, as numpy reads an item): 50k ids of 6-7 bytes
  took 0.43 ms that way and 0.85 ms through `tf.convert_to_tensor`, which
  builds a Python bytes object per item (medians of 30, load ~2). The
  strings are the same.
  """
  if (dtype == tf.string and isinstance(value, np.ndarray) and
      value.dtype.kind == "S" and value.ndim == 1 and
      _DLPACK_MIN_BYTES <= value.nbytes < 1 << 31 and tf.executing_eagerly()):
    return _bytes_to_tensor(value, name)
  if (isinstance(value, np.ndarray) and value.nbytes >= _DLPACK_MIN_BYTES
      and value.dtype.kind in "iuf" and dtype.is_numpy_compatible and
      value.dtype == np.dtype(dtype.as_numpy_dtype) and
      tf.executing_eagerly()):
    buffer = np.empty(value.nbytes + 64, np.uint8)
    start = -buffer.ctypes.data % 64
    aligned = buffer[start:start + value.nbytes].view(value.dtype).reshape(
        value.shape)
    np.copyto(aligned, value)
    return tf.experimental.dlpack.from_dlpack(aligned.__dlpack__())
  return tf.convert_to_tensor(value, dtype, name=name)


def _bytes_to_tensor(value, name=None):
  """A 1-D numpy bytes array as a string tensor (see `to_tensor`)."""
  width = value.dtype.itemsize
  return tf.strings.substr(
      tf.constant(np.ascontiguousarray(value).tobytes()),
      tf.range(0, value.size * width, width, dtype=tf.int32),
      tf.constant(np.char.str_len(value).astype(np.int32)), name=name)


def _tensor(value, dtype, name):
  """`value` as a `dtype` tensor; a value that cannot be one is an error
  naming the argument (TF's own says "Attempt to convert a value (None)")."""
  if isinstance(value, tf.Tensor) and value.dtype == dtype:
    # What convert_to_tensor returns for it, without its ~6 us of dispatch
    # (an epoch call hands over its weights and duals so).
    return value
  if value is None:
    raise ValueError(f"{name} is None; expected a {dtype.name} tensor")
  if dtype.is_integer and isinstance(value, np.ndarray) and value.size and \
      value.dtype.kind == "f":
    # TF would truncate 1.5 to 1.
    fractional = value[np.mod(value, 1) != 0]
    if fractional.size:
      raise ValueError(f"{name} must hold integers, got the value "
                       f"{fractional.flat[0]}")
  if dtype.is_integer and isinstance(value, np.ndarray) and value.size and \
      value.dtype.kind in "iuf":
    # Narrowing wraps silently (2^32 + 1 -> 1 as int32): refuse instead.
    low, high = value.min(), value.max()
    if low < dtype.min or high > dtype.max:
      bad = low if low < dtype.min else high
      raise ValueError(f"{name} has the value {bad}, outside {dtype.name} "
                       f"[{dtype.min}, {dtype.max}]")
  try:
    return to_tensor(value, dtype, name=name)
  except (TypeError, ValueError) as e:
    raise type(e)(f"{name} cannot be a {dtype.name} tensor: {e}") from None


def _check_options(loss_type, l1, l2, num_loss_partitions,
                   num_inner_iterations, visit_order, gamma, num_threads,
                   num_classes=None):
  """Checks the options; `num_classes` None: only the binary and regression
  losses (the mini-batch op), else the packed-rows ops' K."""
  if num_classes is not None and loss_type in MULTICLASS_LOSSES:
    if int(num_classes) < 2:
      raise ValueError(f"num_classes must be >= 2 for {loss_type}, got "
                       f"{num_classes}")
    orders = (MULTICLASS_HINGE_VISIT_ORDERS
              if loss_type == "multiclass_hinge_loss"
              else MULTICLASS_VISIT_ORDERS)
    if visit_order not in orders:
      raise ValueError(f"visit_order must be one of {orders} for "
                       f"{loss_type}, got {visit_order!r}")
  elif loss_type not in LOSSES:
    allowed = LOSSES if num_classes is None else LOSSES + MULTICLASS_LOSSES
    raise ValueError(f"loss_type must be one of {allowed}, got {loss_type!r}")
  elif num_classes is not None and int(num_classes) != 1:
    raise ValueError(f"num_classes must be 1 for {loss_type}, got "
                     f"{num_classes}")
  if visit_order == "asdca":
    raise ValueError(
        "visit_order='asdca' (accelerated mini-batch SDCA) needs the whole "
        "data set in memory: InMemorySdca, keras.LinearModel's in-memory "
        "fit or tf-sdca train --visit-order asdca; this op takes one "
        f"of {VISIT_ORDERS}")
  if visit_order not in VISIT_ORDERS:
    raise ValueError(
        f"visit_order must be one of {VISIT_ORDERS}, got {visit_order!r}")
  if not l1 >= 0:
    raise ValueError(f"l1 must be >= 0, got {l1}")
  if not l2 > 0:
    raise ValueError(f"l2 must be > 0, got {l2}")
  if not gamma > 0:
    raise ValueError(f"gamma must be > 0, got {gamma}")
  if int(num_loss_partitions) < 1:
    raise ValueError(
        f"num_loss_partitions must be >= 1, got {num_loss_partitions}")
  if not 1 <= int(num_inner_iterations) <= MAX_PASSES:
    raise ValueError(f"num_inner_iterations must be in [1, {MAX_PASSES}], "
                     f"got {num_inner_iterations}")
  if int(num_threads) < 0:
    raise ValueError(f"num_threads must be >= 0, got {num_threads}")


def sdca_optimizer(sparse_example_indices,
                   sparse_feature_indices,
                   sparse_feature_values,
                   dense_features,
                   example_weights,
                   example_labels,
                   sparse_indices,
                   sparse_weights,
                   dense_weights,
                   example_state_data,
                   loss_type,
                   l1,
                   l2,
                   num_loss_partitions=1,
                   num_inner_iterations=1,
                   adaptive=False,
                   visit_order="permutation",
                   seed=0,
                   gamma=1.0,
                   num_threads=0,
                   call_index=0,
                   name=None,
                   num_classes=1,
                   hinge_step="projection",
                   dense_arguments=None):
  """Runs SDCA on one mini-batch; the inputs of `tf.raw_ops.SdcaOptimizerV2`.

  Minimises `sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1` over the batch,
  starting from the given (unshrunk) weights and duals. The batch is packed
  and solved as `packed_solve` solves packed rows (the same coordinate step
  and visiting orders, float64 weights and duals); each new dual is rounded
  to float32, the format of `example_state_data`, before the weights move by
  it, so that the returned deltas are exactly those of the returned duals.

  Args:
    sparse_example_indices: list (one per sparse feature group) of int64
      vectors: the example of each entry.
    sparse_feature_indices: list of int64 vectors: the feature id of each
      entry (ids repeated inside one example are summed).
    sparse_feature_values: list of float vectors for the first
      `len(sparse_feature_values)` groups; the other groups' values are 1.
    dense_features: list of float matrices `[batch, d]`.
    example_weights: float `[batch]`, >= 0.
    example_labels: float `[batch]`.
    sparse_indices: list of int64 vectors: the distinct ids of each group
      whose weights are passed in `sparse_weights`.
    sparse_weights: list of float vectors, the unshrunk weights of
      `sparse_indices`.
    dense_weights: list of float tensors with `d` elements each.
    example_state_data: float `[batch, 4]`: dual, primal loss, dual loss,
      example weight (zeros for unseen examples); `[batch, K + 3]` for a
      multiclass loss (the K duals first).
    loss_type: one of `LOSSES`.
    l1: L1 regularisation, >= 0.
    l2: L2 regularisation, > 0.
    num_loss_partitions: CoCoA+ sigma: how many solvers' deltas are added.
    num_inner_iterations: passes over the batch.
    adaptive: TensorFlow's flag; True means `visit_order='adaptive'`.
    visit_order: one of `VISIT_ORDERS`.
    seed: seed of the visiting order.
    gamma: smoothing of `smooth_hinge_loss`.
    num_threads: threads reading the batch and computing the rows' losses
      after the solve (0: TensorFlow's CPU threads); the solve itself is
      exact sequential SDCA on one thread.
    call_index: int64 scalar (may be a tensor) mixed into the seed: give
      successive calls successive values (`SdcaModel` counts its
      `minimize` calls) and each call visits its batch in a fresh order.
      With the default 0 the order still depends on the input duals, so it
      repeats when they do (e.g. equal-sized batches of new examples).
    name: op name.
    num_classes: K (>= 2) for `softmax_loss` / `multiclass_hinge_loss`:
      labels are class ids in `[0, K)`, `sparse_weights` `[u, K]`,
      `dense_weights` `[d, K]`, the state `[batch, K + 3]` (the K duals of
      a row are `e_y - p`, p on the simplex); 1 for the other losses.
    hinge_step: the multiclass hinge's block step, one of `HINGE_STEPS`
      (see `packed_solve`).
    dense_arguments: per dense group, its name in error messages (None:
      `dense_features[g]`), e.g. the feature a front end made it from.

  Returns:
    `(out_example_state_data, out_delta_sparse_weights,
    out_delta_dense_weights)`.

  Raises:
    ValueError: for a bad option.
    tf.errors.InvalidArgumentError: for bad data (the message names the
      argument, the position and the value).

  Example:
    >>> state, dsw, ddw = sdca_optimizer(
    ...     [], [], [], [tf.constant([[1.0], [2.0]])], tf.ones([2]),
    ...     tf.constant([0.0, 1.0]), [], [], [tf.zeros([1])],
    ...     tf.zeros([2, 4]), loss_type="logistic_loss", l1=0.0, l2=1.0)
  """
  multiclass = loss_type in MULTICLASS_LOSSES
  # (num_threads only reads the batch here: the solve is on one thread.)
  _check_options(loss_type, l1, l2, num_loss_partitions, num_inner_iterations,
                 "permutation" if adaptive and multiclass else visit_order,
                 gamma, 0 if multiclass else num_threads,
                 num_classes if multiclass or num_classes != 1 else None)
  if adaptive and multiclass:
    raise ValueError(f"adaptive=True is not available for {loss_type}")
  check_hinge_step(loss_type, hinge_step)
  sparse_example_indices = list(sparse_example_indices)
  sparse_feature_values = list(sparse_feature_values)
  dense_features = list(dense_features)
  if len(sparse_feature_values) > len(sparse_example_indices):
    raise ValueError(
        f"{len(sparse_feature_values)} sparse_feature_values for "
        f"{len(sparse_example_indices)} sparse feature groups")
  for arg, n in (("sparse_feature_indices", sparse_feature_indices),
                 ("sparse_indices", sparse_indices),
                 ("sparse_weights", sparse_weights)):
    if len(n) != len(sparse_example_indices):
      raise ValueError(f"{arg} has {len(n)} groups but sparse_example_indices "
                       f"has {len(sparse_example_indices)}")
  if len(dense_weights) != len(dense_features):
    raise ValueError(f"dense_weights has {len(dense_weights)} groups but "
                     f"dense_features has {len(dense_features)}")
  with tf.name_scope(name or "sdca_optimizer"):
    def tensors(values, dtype, name):
      return [_tensor(t, dtype, name) for t in values]

    return load_ops().tf_sdca_optimizer(
        sparse_example_indices=tensors(sparse_example_indices, tf.int64,
                                       "sparse_example_indices"),
        sparse_feature_indices=tensors(sparse_feature_indices, tf.int64,
                                       "sparse_feature_indices"),
        sparse_feature_values=tensors(sparse_feature_values, tf.float32,
                                      "sparse_feature_values"),
        dense_features=tensors(dense_features, tf.float32, "dense_features"),
        example_weights=_tensor(example_weights, tf.float32,
                                "example_weights"),
        example_labels=_tensor(example_labels, tf.float32, "example_labels"),
        sparse_indices=tensors(sparse_indices, tf.int64, "sparse_indices"),
        sparse_weights=tensors(sparse_weights, tf.float32, "sparse_weights"),
        dense_weights=tensors(dense_weights, tf.float32, "dense_weights"),
        example_state_data=_tensor(example_state_data, tf.float32,
                                   "example_state_data"),
        call_index=_tensor(call_index, tf.int64, "call_index"),
        loss_type=loss_type,
        adaptive=bool(adaptive),
        l1=float(l1),
        l2=float(l2),
        num_loss_partitions=int(num_loss_partitions),
        num_inner_iterations=int(num_inner_iterations),
        visit_order=visit_order,
        seed=int(seed),
        gamma=float(gamma),
        num_threads=int(num_threads),
        num_classes=int(num_classes),
        hinge_step=hinge_step,
        dense_arguments=list(dense_arguments or []))


def sdca_shrink_l1(weights, l1, l2, name=None):
  """Soft-thresholds unshrunk weights: `sign(w) * max(|w| - l1/l2, 0)`.

  Args:
    weights: float tensor of unshrunk weights.
    l1: L1 regularisation, >= 0.
    l2: L2 regularisation, > 0.
    name: op name.

  Returns:
    The weights used for prediction, same shape.

  Raises:
    ValueError: if l1 < 0 or l2 <= 0.
  """
  if not l1 >= 0:
    raise ValueError(f"l1 must be >= 0, got {l1}")
  if not l2 > 0:
    raise ValueError(f"l2 must be > 0, got {l2}")
  with tf.name_scope(name or "sdca_shrink_l1"):
    return load_ops().tf_sdca_shrink_l1(
        _tensor(weights, tf.float32, "weights"),
        l1=float(l1), l2=float(l2))


def sdca_fprint(example_ids, name=None):
  """128-bit fingerprints of string example ids, as `[n, 2]` int64.

  Args:
    example_ids: string vector.
    name: op name.

  Returns:
    int64 tensor `[n, 2]`; equal ids give equal rows, in every process.
  """
  with tf.name_scope(name or "sdca_fprint"):
    return load_ops().tf_sdca_fprint(
        _tensor(example_ids, tf.string, "example_ids"))


def example_keys(example_ids, name=None):
  """Keys of a batch's examples in `SdcaModel`'s dual-state table.

  Args:
    example_ids: string vector, or integer ids (keyed as their decimal
      text: an integer id and its `tf.strings.as_string` share one key,
      without building the strings), unique within the batch.
    name: op name.

  Returns:
    int64 `[n]`: the low half of each id's `sdca_fprint`, moved by +2 when
    it is one of the two lowest int64 values (the table reserves those).

  Raises:
    tf.errors.InvalidArgumentError: (when run) naming the first id that
      repeats an earlier one (or shares its key).
  """
  with tf.name_scope(name or "example_keys"):
    return load_ops().tf_sdca_example_keys(example_id_tensor(example_ids))


def example_id_tensor(example_ids):
  """Example ids as the ops key them: int64 for integer ids (a tensor or a
  numpy array of any integer type), strings otherwise."""
  dtype = getattr(example_ids, "dtype", None)
  if dtype is not None and tf.as_dtype(dtype).is_integer:
    if tf.is_tensor(example_ids):
      return tf.cast(example_ids, tf.int64)
    return _tensor(example_ids, tf.int64, "example_ids")
  return _tensor(example_ids, tf.string, "example_ids")


def hold_rows(batch, held, call_index, fraction, seed=0, name=None,
              loss_type="", num_classes=1, id_limits=None,
              id_arguments=None, dense_arguments=None):
  """`SdcaModel`'s `carry_over`: merges the rows held back by the last call
  into a batch, and deals the merged rows into those visited now and
  `floor(fraction * m)` held for the next call (drawn from `seed` and
  `call_index`). A held row whose key is back in the batch is dropped: the
  batch's copy stands for it.

  Args:
    batch, held: dicts with `keys` (int64 `[n]`), `example_weights` and
      `example_labels` (float `[n]`), `sparse` (per sparse group a triple:
      the batch's example indices in `[0, n)` (`[nnz]`), the held rows'
      int64 row splits (`[n + 1]`, row i's entries at `splits[i]` to
      `splits[i + 1] - 1`); feature ids and float values, each `[nnz]`;
      values None in the batch for a group without values, whose held
      values are then `[0]`) and `dense` (per dense group a float
      `[n, d]`); the same groups on both sides.
    call_index: int64 scalar mixed into the draw.
    fraction: the share held, in [0, 1) (a number, or a float32 scalar
      tensor checked when run).
    seed: the draw's seed.
    name: op name.
    loss_type, num_classes: the solve's loss (and K for a multiclass one):
      the batch's labels are checked against its domain here, whether their
      rows are visited or held ('' checks none).
    id_limits, id_arguments: per sparse group, the rows of its weight
      variable, and the name its out-of-range ids are reported under (None
      checks none).
    dense_arguments: per dense group, its name in the batch's messages
      (None: `dense_features[g]`).

  Returns:
    (rows to visit now, rows held for the next call), each a dict as above:
    the visited rows' sparse entries by example index, in input order (the
    batch's, then the held rows'), the held rows' by row splits.

  Raises:
    ValueError: for a `fraction` outside [0, 1) or sides of different groups.
    tf.errors.InvalidArgumentError: (when run) for inconsistent sizes, an
      example index outside its side's rows, a fraction tensor outside
      [0, 1), or a batch's label or feature id out of range (as asked).
  """
  if not tf.is_tensor(fraction) and not 0.0 <= fraction < 1.0:
    raise ValueError(f"fraction must be in [0, 1), got {fraction!r}")
  if (len(batch["sparse"]) != len(held["sparse"]) or
      len(batch["dense"]) != len(held["dense"])):
    raise ValueError("batch and held rows must have the same feature groups")

  def side(rows, prefix):
    out = dict(keys=_tensor(rows["keys"], tf.int64, prefix + "keys"))
    for key in ("example_weights", "example_labels"):
      out[key] = _tensor(rows[key], tf.float32, prefix + key)
    for k, (key, dtype) in enumerate((
        ("sparse_row_splits" if prefix else "sparse_example_indices",
         tf.int64),
        ("sparse_feature_indices", tf.int64),
        ("sparse_feature_values", tf.float32))):
      out[key] = [tf.zeros([0], tf.float32) if col[k] is None else
                  _tensor(col[k], dtype, prefix + key)
                  for col in rows["sparse"]]
    out["dense_features"] = [_tensor(x, tf.float32, prefix + "dense_features")
                             for x in rows["dense"]]
    return out

  values = [col[2] is not None for col in batch["sparse"]]
  with tf.name_scope(name or "hold_rows"):
    ins = side(batch, "")
    ins.update({"held_" + k: v for k, v in side(held, "held_").items()})
    outs = load_ops().tf_sdca_hold_rows(
        **ins, call_index=_tensor(call_index, tf.int64, "call_index"),
        fraction=tf.cast(fraction, tf.float32), seed=int(seed),
        values=values, loss_type=loss_type, num_classes=int(num_classes),
        id_limits=[int(v) for v in id_limits or []],
        id_arguments=list(id_arguments or []),
        dense_arguments=list(dense_arguments or []))
    parts = []
    for first in (0, 7):  # keys, weights, labels, then the four groups' lists
      keys, weights, labels, rows, ids, vals, dense = outs[first:first + 7]
      parts.append(dict(keys=keys, example_weights=weights,
                        example_labels=labels,
                        sparse=[(r, i, v if has else None) for r, i, v, has
                                in zip(rows, ids, vals, values)],
                        dense=list(dense)))
    return parts[0], parts[1]


def example_state_table(width, shared_name="", name=None):
  """A handle of `SdcaModel`'s per-example state table (float32 rows of
  `width` by int64 key), created empty the first time; named by
  `shared_name`, or by the op's node when it is empty (TF1 graphs)."""
  return load_ops().tf_sdca_example_state_table(
      width=width, shared_name=shared_name, name=name)


def example_state_find(table, keys, width):
  """(rows `[n, width]` of `keys`, zeros for keys not stored; int64 `slots`
  `[n]`, each key's place or -1, for `example_state_write`)."""
  return load_ops().tf_sdca_example_state_find(
      table, _tensor(keys, tf.int64, "keys"), width=width)


def example_state_write(table, keys, values, slots=None):
  """Stores float32 `values` `[n, width]` under int64 `keys`; `slots` from
  `example_state_find` on the same keys skips the second search."""
  if slots is None:
    slots = tf.zeros([0], tf.int64)
  return load_ops().tf_sdca_example_state_write(
      table, _tensor(keys, tf.int64, "keys"), slots,
      _tensor(values, tf.float32, "values"))


def example_state_export(table, width):
  """(keys `[m]`, rows `[m, width]`) of every stored example."""
  return load_ops().tf_sdca_example_state_export(table, width=width)


def example_state_import(table, keys, values):
  """Empties the table, then stores `values` under `keys`."""
  return load_ops().tf_sdca_example_state_import(
      table, _tensor(keys, tf.int64, "keys"),
      _tensor(values, tf.float32, "values"))


def example_state_size(table):
  """int64 scalar: the examples stored."""
  return load_ops().tf_sdca_example_state_size(table)


def distinct_ids(ids, num_rows, argument="ids", name=None):
  """The distinct values of int64 feature `ids`, ascending.

  Args:
    ids: int64 vector, each in `[0, num_rows)`.
    num_rows: Python int >= 1, the rows of the ids' weight variable.
    argument: what an error message calls the ids.
    name: op name.

  Returns:
    int64 vector of the distinct ids, ascending.

  Raises:
    tf.errors.InvalidArgumentError: (when run) naming the first id outside
      `[0, num_rows)`.
  """
  with tf.name_scope(name or "distinct_ids"):
    return load_ops().tf_sdca_distinct_ids(
        _tensor(ids, tf.int64, argument), num_rows=int(num_rows),
        argument=argument)


def _data_tensors(row_ptr, feature_ids, feature_values, dense_features,
                  example_weights, example_labels):
  """The data inputs of PackRows as tensors of their dtypes."""
  return (
      _tensor(row_ptr, tf.int64, "row_ptr"),
      _tensor(feature_ids, tf.int32, "feature_ids"),
      _tensor(feature_values, tf.float32, "feature_values"),
      _tensor(dense_features, tf.float32, "dense_features"),
      _tensor(example_weights, tf.float32, "example_weights"),
      _tensor(example_labels, tf.float32, "example_labels"))


def _epoch_args(weights, duals, seed, loss_type, l1, l2, num_loss_partitions,
                num_passes, visit_order, gamma, compute_objective,
                num_classes=1, hinge_step="projection"):
  """(weights, duals, seed) as tensors and the attributes of one epoch call
  (PackedSolve)."""
  state = (_tensor(weights, tf.float64, "weights"),
           _tensor(duals, tf.float64, "duals"),
           # (An integer as it is: the op's fast path converts it, ~1 us
           # against ~10 us through convert_to_tensor.)
           int(seed) if isinstance(seed, (int, np.integer)) and
           not isinstance(seed, bool) else _tensor(seed, tf.int64, "seed"))
  attrs = dict(loss_type=loss_type, l1=float(l1), l2=float(l2),
               num_loss_partitions=int(num_loss_partitions),
               num_passes=int(num_passes), visit_order=visit_order,
               gamma=float(gamma), compute_objective=bool(compute_objective),
               num_classes=int(num_classes), hinge_step=hinge_step)
  return state, attrs


# Every visiting order runs on packed rows (the name predates the adaptive
# order's move onto them).
PACKED_VISIT_ORDERS = VISIT_ORDERS


def pack_rows(row_ptr, feature_ids, feature_values, dense_features,
              example_weights, example_labels, num_sparse_features,
              loss_type, gamma=1.0, num_threads=1, name=None, num_classes=1,
              norm_rows=None):
  """Validates a data set held in memory once and packs it for
  `packed_solve`.

  The weights of `packed_solve` are one float64 table: sparse ids index its
  first `num_sparse_features` rows directly, the `d` dense columns follow.
  Each row becomes one contiguous record (row index, |x_i|^2, label, weight,
  ids, values, dense part), so that an epoch visiting rows in a random order
  reads one place per row (and its dual) instead of eight arrays (~0.6x the
  time per epoch on 1M Criteo-shaped rows), and nothing is validated again
  per epoch. The records are a copy of the inputs (~192 bytes per Criteo
  row of 26 ids and 14 dense values). `tf_sdca.sdca_optimizer` solves each
  mini-batch the same way.

  With `num_threads > 1` every `packed_solve` on the rows runs that many
  threads over one shared weight table, lock-free (asynchronous SDCA with
  atomic adds; each row visited by one thread): ids in at least 1/1024 of
  the rows and the dense columns are kept per thread and merged every <=
  1024 rows (the dense ones and the 16 most frequent ids more often), the
  other ids are added to atomically. No update is lost (the
  weights stay the sum of the rows' changes), but results vary in the last
  bits from run to run. On 1M Criteo-shaped rows two threads do an epoch in
  ~0.7x the time of one, and need ~5% more epochs for the same gap.

  Args:
    row_ptr: int64 `[n + 1]` CSR row offsets (`[0]`-shaped: no sparse part).
    feature_ids: int32 `[nnz]` sparse ids, row by row (repeats are summed).
    feature_values: float `[nnz]` values, or an empty vector for all 1.0.
    dense_features: float `[n, d]` (d may be 0).
    example_weights: float `[n]`, >= 0.
    example_labels: float `[n]`, in the loss's domain.
    num_sparse_features: sparse ids must be in `[0, num_sparse_features)`;
      the weight table of `packed_solve` has `num_sparse_features + d`
      entries.
    loss_type: one of `LOSSES` or `MULTICLASS_LOSSES`; labels are checked
      against its domain and `packed_solve` must use the same loss.
    gamma: smooth-hinge smoothing (must match `packed_solve`'s).
    num_threads: threads of each `packed_solve` on these rows (>= 1; 1 for
      a multiclass loss).
    name: op name.
    num_classes: K (>= 2) for a multiclass loss, whose labels are class ids
      (integers in `[0, K)` as floats); 1 for the others.
    norm_rows: optional int64 `[m]` rows (in `[0, n)`) whose sparse sums of
      squares to return beside the handle: each row's sparse entries'
      squared values (1 for an entry without a value) added in the entries'
      order from 0 in float64, a repeated id once per entry (what
      `tf_sdca.engine.row_norms` reads for the default visiting order).

  Returns:
    A scalar resource tensor that owns the packed rows (freed when the last
    reference to it goes); with `norm_rows`, `(rows, sparse_norms)`,
    `sparse_norms` float64 `[m]`.

  Raises:
    ValueError: on bad options.
    tf.errors.InvalidArgumentError: on bad inputs (shapes, ids outside the
      table, NaN or inf, labels outside the loss's domain, negative weights);
      the message names the argument, the position and the value.
  """
  _check_options(loss_type, 0.0, 1.0, 1, 1, "permutation", gamma,
                 num_threads, num_classes)
  if int(num_sparse_features) < 0:
    raise ValueError(
        f"num_sparse_features must be >= 0, got {num_sparse_features}")
  if int(num_threads) < 1:
    raise ValueError(f"num_threads must be >= 1, got {num_threads}")
  with tf.name_scope(name or "pack_rows"):
    rows, sparse_norms = load_ops().tf_sdca_pack_rows(
        *_data_tensors(row_ptr, feature_ids, feature_values, dense_features,
                       example_weights, example_labels),
        _no_rows() if norm_rows is None else
        _tensor(norm_rows, tf.int64, "norm_rows"),
        loss_type=loss_type, gamma=float(gamma),
        num_sparse_features=int(num_sparse_features),
        num_threads=int(num_threads), num_classes=int(num_classes))
  return rows if norm_rows is None else (rows, sparse_norms)


_NO_ROWS = []  # the empty int64 tensor of `_no_rows`, once made eagerly


def _no_rows():
  """An empty int64 vector (PackRows' norm_rows when none are asked for),
  made once eagerly (a conversion per call costs ~10 us)."""
  if not tf.executing_eagerly():
    return tf.zeros([0], tf.int64)
  if not _NO_ROWS:
    _NO_ROWS.append(tf.zeros([0], tf.int64))
  return _NO_ROWS[0]


def new_packed_rows(num_examples, num_ids, dense_dim, num_sparse_features,
                    loss_type, gamma=1.0, num_threads=1, has_values=False,
                    name=None, num_classes=1):
  """Packed rows to fill chunk by chunk with `append_rows`.

  The records `pack_rows` writes, for a data set read in pieces (e.g. from
  a memory-mapped cache) that need not be held whole beside them: the
  memory is reserved here and touched only as rows are appended. Appending
  the rows in any pieces gives the records of `pack_rows` on all of them.
  `packed_solve` takes the rows once all `num_examples` are appended.

  Example:
    >>> rows = new_packed_rows(n, num_ids=26 * n, dense_dim=14,
    ...                        num_sparse_features=2**20,
    ...                        loss_type="logistic_loss")
    >>> for chunk in chunks:  # consecutive rows, row_ptr from 0 in each
    ...   append_rows(rows, **chunk)

  Args:
    num_examples: the rows to come (>= 0).
    num_ids: their sparse entries together (>= 0).
    dense_dim: their dense columns (>= 0).
    num_sparse_features, loss_type, gamma, num_threads, num_classes: as
      for `pack_rows`.
    has_values: whether the sparse entries come with values (else 1.0).
    name: op name.

  Returns:
    A scalar resource tensor that owns the packed rows.

  Raises:
    ValueError: on bad options or sizes.
  """
  _check_options(loss_type, 0.0, 1.0, 1, 1, "permutation", gamma,
                 num_threads, num_classes)
  for label, value in (("num_examples", num_examples), ("num_ids", num_ids),
                       ("dense_dim", dense_dim),
                       ("num_sparse_features", num_sparse_features)):
    if int(value) < 0:
      raise ValueError(f"{label} must be >= 0, got {value}")
  if int(num_threads) < 1:
    raise ValueError(f"num_threads must be >= 1, got {num_threads}")
  if not isinstance(has_values, (bool, np.bool_)):
    raise TypeError(f"has_values must be a bool, got {has_values!r}")
  with tf.name_scope(name or "new_packed_rows"):
    return load_ops().tf_sdca_new_packed_rows(
        _tensor(num_examples, tf.int64, "num_examples"),
        _tensor(num_ids, tf.int64, "num_ids"),
        _tensor(dense_dim, tf.int64, "dense_dim"),
        num_sparse_features=int(num_sparse_features), loss_type=loss_type,
        gamma=float(gamma), num_threads=int(num_threads),
        has_values=bool(has_values), num_classes=int(num_classes))


def append_rows(rows, row_ptr, feature_ids, feature_values, dense_features,
                example_weights, example_labels, name=None):
  """Validates the next rows of a data set and appends them to `rows`.

  Args:
    rows: the handle from `new_packed_rows`.
    row_ptr, feature_ids, feature_values, dense_features, example_weights,
      example_labels: these rows as `pack_rows` takes a data set (`row_ptr`
      starts at 0).
    name: op name.

  Returns:
    An int64 scalar: the rows appended so far.

  Raises:
    tf.errors.InvalidArgumentError: on bad inputs, as for `pack_rows`
      (the message also says at which row these rows start), or rows that
      do not fit what `new_packed_rows` reserved (more rows or sparse
      entries, other dense columns, values present or missing, the last
      rows short of `num_ids`). Nothing is appended then.
  """
  with tf.name_scope(name or "append_rows"):
    return load_ops().tf_sdca_append_rows(
        rows, *_data_tensors(row_ptr, feature_ids, feature_values,
                             dense_features, example_weights, example_labels))


def packed_solve(rows, weights, duals, seed, loss_type, l1, l2,
                 num_loss_partitions=1, num_passes=1,
                 visit_order="permutation", gamma=1.0,
                 compute_objective=True, name=None, num_classes=1,
                 hinge_step="projection", num_parts=1, part=0,
                 objective_threads=0):
  """SDCA passes over rows packed by `pack_rows`: one call per epoch.

  Minimises `sum_i s_i loss_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1`; only
  `weights` and `duals` are validated per call. Rows packed with
  `num_threads > 1` are solved by that many threads (see `pack_rows`).

  Args:
    rows: the handle returned by `pack_rows`.
    weights: float64 `[num_sparse_features + d]` unshrunk weights; for a
      multiclass loss `[(num_sparse_features + d) * K]`, the `[m, K]` table
      row-major.
    duals: float64 `[n]`, one per packed row; for a multiclass loss
      `[n * K]`, row i's block `e_y - p` (p on the simplex) at
      `[i * K, (i + 1) * K)`.
    seed: int; pass p visits rows in an order that depends on (seed, p).
    loss_type: one of `LOSSES`, the one the rows were packed for.
    l1, l2: regularisation (the objective of `sdca_optimizer`).
    num_loss_partitions: CoCoA+ sigma; the weights move by 1/K of the local
      change.
    num_passes: passes in this call (0: only evaluate the objective).
    visit_order: one of `VISIT_ORDERS` ('adaptive': draws by the dual
      residual, half uniform; each pass first sweeps all rows for it;
      'shrinking': LIBLINEAR's shrinking of hinge-loss duals held at a
      bound, one thread only, the shrunk rows remembered by `rows` from
      call to call).
    gamma: smooth-hinge smoothing (the packing's).
    compute_objective: evaluate the objective parts after the passes.
    name: op name.
    num_classes: the rows' `num_classes` (K of a multiclass loss: each
      visit solves the row's block of K duals exactly).
    hinge_step: the multiclass hinge's block step (`HINGE_STEPS`).
    num_parts, part: each pass visits only part `part` of `num_parts`
      equal consecutive parts of its visiting order, so that `num_parts`
      calls with the same `seed` and parts `0 .. num_parts - 1` make one
      pass between them ('permutation' and 'cyclic': each row once;
      'uniform': the pass's n draws; not 'adaptive' or 'shrinking'; rows
      packed for one thread; CoCoA+ exchanges the weights after each part,
      `tf_sdca.distributed`).
    objective_threads: the threads that evaluate the objective (0: the CPU
      device's intra-op threads; 1 beside another thread's training,
      `tf_sdca.engine.run_epochs`). The sums are chunked by it, so the
      objective's last bits depend on it.

  Returns:
    `(weights, duals, objective)`: the new weights and duals and, at them,
    float64 `[4]` = (sum s_i phi_i(w.x_i), sum s_i phi_i*(-alpha_i), |w|^2,
    |w|_1) of the shrunk weights (NaN when not computed). The primal is
    `o[0] + l2/2 o[2] + l1 o[3]`, the duality gap `o[0] + o[1] + l2 o[2] +
    l1 o[3]`.

  Raises:
    ValueError: on bad options.
    tf.errors.InvalidArgumentError: on bad weights or duals, or rows packed
      for another loss.
    tf.errors.CancelledError: the step was cancelled (checked every 2^16
      rows and before every pass; tests/test_cancellation.py).
  """
  if not 0 <= int(num_passes) <= MAX_PASSES:
    raise ValueError(f"num_passes must be in [0, {MAX_PASSES}], got "
                     f"{num_passes}")
  _check_options(loss_type, l1, l2, num_loss_partitions, 1, visit_order,
                 gamma, 0, num_classes)
  check_hinge_step(loss_type, hinge_step)
  if not 0 <= int(part) < int(num_parts):
    raise ValueError(f"need 0 <= part < num_parts, got part {part}, "
                     f"num_parts {num_parts}")
  if int(num_parts) > 1 and visit_order in ("adaptive", "shrinking"):
    raise ValueError(f"num_parts = {num_parts} cuts a pass's order into "
                     f"parts: visit_order must be 'permutation', 'cyclic' "
                     f"or 'uniform', not {visit_order!r} (its passes are "
                     f"no order drawn up front)")
  with tf.name_scope(name or "packed_solve"):
    state, attrs = _epoch_args(weights, duals, seed, loss_type, l1, l2,
                               num_loss_partitions, num_passes, visit_order,
                               gamma, compute_objective, num_classes,
                               hinge_step)
    return load_ops().tf_sdca_packed_solve(
        rows, *state, num_parts=int(num_parts), part=int(part),
        objective_threads=int(objective_threads), **attrs)


_NO_POINT = (np.zeros(0), np.zeros(0))


def packed_epochs(rows, weights, duals, seed, evaluate, tol, loss_type, l1,
                  l2, visit_order="permutation", gamma=1.0, num_classes=1,
                  hinge_step="projection", beta=-1.0, previous=None,
                  last_dual=-np.inf, restart=False, auto_momentum=None,
                  train_ahead="timed", name=None):
  """Consecutive `packed_solve` epochs in one call (`TfSdca>PackedEpochs`),
  for data sets so small that a call per epoch costs more than the epoch.

  Epoch e (from 0) is, bit for bit, a `packed_solve` call with the seed
  `seed + e` from the previous epoch's outputs, followed, where
  `evaluate[e]`, by the objective parts at its result. The call stops
  after the first evaluated epoch whose relative duality gap (gap /
  max(|primal|, 1e-300), as `tf_sdca.engine.objective_and_gap` computes
  them) is below `tol` (< 0: never), or whose gap is invalid (not finite,
  or below zero beyond rounding).

  With `beta >= 0` each epoch starts as `tf_sdca.engine.Extrapolation`'s
  heavy ball with that beta starts it (the same bits): from `x + beta_r (x
  - x_prev)`, `beta_r` = min(beta, 0.9 times the largest step keeping the
  duals in their domain), or from x after an epoch whose dual objective
  (`tf_sdca.engine.dual_objective`: -dual_loss - l2/2 |w|^2, with beta > 0
  read after every epoch, in O(n + d) where not evaluated) fell below the
  one before (a restart) or without `previous`.
  For logistic_loss (beta > 0) instead each dual's step beta (alpha -
  alpha_prev) is capped at 0.9 of its own room to its domain's bound, and
  the weights move by beta (w - w_prev) plus the cut duals' rows times
  their cuts / l2 (the start is again a primal-dual pair; where no dual is
  cut, the bits of beta_r = beta). Not for poisson_loss.

  Args:
    evaluate: bool `[E]`, E the most epochs to run.
    tol: float; the relative gap to stop below.
    beta: the extrapolation (< 0: none).
    previous: `(weights, duals)` where the epoch before the first one here
      ended (x_prev), or None.
    last_dual, restart: the dual objective of the last epoch before this
      call that read it, and whether it fell (a restart is due).
    auto_momentum: None, or for momentum='auto' still choosing its beta
      (`tf_sdca.engine.Extrapolation.fused_auto`): float64 `[N, floor,
      full, most, the relative gaps of the plain epochs before this call]`
      (`tf_sdca.engine.choose_auto_momentum`'s rule, one thread). The
      call's epochs are plain (beta 0, `evaluate` must list them) until the
      N-th gap; the epochs after it start with the beta that rule chooses
      from the N gaps, the same bits (the epoch that chooses is evaluated
      in turn).
    train_ahead: where each epoch's objective is evaluated: on another
      thread while the next epoch trains (that epoch undone where the
      objective stops the call, and run again where it restarts the
      extrapolation), or in turn. 'timed': ahead on 2 or more cores, for
      the epochs where the call measures it faster; 'always' (but the last
      epoch); 'never'. The same results whichever.
    The others: `packed_solve`'s.

  Returns:
    `(weights, duals, objective, seconds, previous_weights,
    previous_duals, beta)`: after the last epoch run, R of them; `objective`
    float64 `[R, 4]` (`packed_solve`'s parts after each, NaN for an epoch
    not evaluated, but with beta > 0 its dual loss and |w|^2, columns 1
    and 2), `seconds` `[R]` each epoch's passes; with `beta >= 0`
    x_prev for the next epoch (where the last one started before its
    extrapolation), else `[0]`; `beta` (a scalar tensor) the beta the call
    ended with (with `auto_momentum`, the one chosen once it was).
  """
  return _packed_epochs(rows, weights, duals, seed, evaluate, tol, loss_type,
                        l1, l2, visit_order, gamma, num_classes, hinge_step,
                        beta, previous, last_dual, restart,
                        name or "packed_epochs", train_ahead=train_ahead,
                        auto_momentum=auto_momentum)


def extrapolated_pass(rows, weights, duals, seed, loss_type, l1, l2, beta,
                      previous, visit_order="permutation", gamma=1.0,
                      num_classes=1, hinge_step="projection", name=None):
  """One `packed_solve` pass from the heavy ball's start `x + beta_r (x -
  x_prev)` (`packed_epochs` of one epoch, not evaluated, without a restart:
  `tf_sdca.engine.Extrapolation.start_epoch`'s step in C++, the same bits).

  Returns:
    `(weights, duals, previous_weights, previous_duals)`: after the pass,
    and x, the point it extrapolated from (x_prev of the next epoch).
  """
  w, d, _, _, prev_w, prev_d, _ = _packed_epochs(
      rows, weights, duals, seed, np.zeros(1, bool), -1.0, loss_type, l1, l2,
      visit_order, gamma, num_classes, hinge_step, beta, previous, -np.inf,
      False, name or "extrapolated_pass")
  return w, d, prev_w, prev_d


def _packed_epochs(rows, weights, duals, seed, evaluate, tol, loss_type, l1,
                   l2, visit_order, gamma, num_classes, hinge_step, beta,
                   previous, last_dual, restart, name, train_ahead="timed",
                   auto_momentum=None):
  _check_options(loss_type, l1, l2, 1, 1, visit_order, gamma, 0, num_classes)
  check_hinge_step(loss_type, hinge_step)
  if train_ahead not in ("timed", "always", "never"):
    raise ValueError(f"train_ahead must be 'timed', 'always' or 'never', "
                     f"got {train_ahead!r}")
  with tf.name_scope(name):
    state, attrs = _epoch_args(weights, duals, seed, loss_type, l1, l2, 1, 1,
                               visit_order, gamma, True, num_classes,
                               hinge_step)
    # (The scalars as they are: the op's fast path converts them.)
    return load_ops().tf_sdca_packed_epochs(
        rows, *state,
        # (A bool array as it is: the op's fast path converts it, ~2 us
        # against ~20 us through convert_to_tensor.)
        evaluate if isinstance(evaluate, np.ndarray) and
        evaluate.dtype == np.bool_ else _tensor(evaluate, tf.bool, "evaluate"),
        float(tol),
        float(beta), *(previous if previous is not None else _NO_POINT),
        float(last_dual), bool(restart),
        _NO_POINT[0] if auto_momentum is None else np.asarray(
            auto_momentum, np.float64), train_ahead=train_ahead, **attrs)


def check_asdca_options(loss_type, batch_size, theta):
  """Raises ValueError unless ASDCA can run `loss_type` with `batch_size`
  rows per step and `theta` (None: the paper's)."""
  if loss_type not in ASDCA_LOSSES:
    raise ValueError(
        f"ASDCA runs the smooth binary and real-valued losses "
        f"({', '.join(ASDCA_LOSSES)}), not {loss_type}: use "
        "smooth_hinge_loss for a hinge-like loss, or another visit_order "
        "for SDCA")
  if (isinstance(batch_size, bool) or
      not isinstance(batch_size, (int, np.integer)) or batch_size < 1):
    raise ValueError(f"asdca_batch_size must be an integer >= 1, got "
                     f"{batch_size!r}")
  if theta is not None and (isinstance(theta, bool) or
                            not isinstance(theta, (int, float, np.number)) or
                            not 0.0 < float(theta) <= 1.0):
    raise ValueError(f"asdca_theta must be None (the paper's) or in (0, 1], "
                     f"got {theta!r}")


def asdca_solve(rows, weights, duals, iterate, seed, loss_type, l1, l2,
                batch_size, theta=None, num_passes=1, gamma=1.0,
                compute_objective=True, name=None):
  """Accelerated mini-batch SDCA passes over rows packed by `pack_rows`
  (with `num_threads=1`): one call per epoch.

  ASDCA (Shalev-Shwartz and Zhang, "Accelerated Mini-Batch Stochastic Dual
  Coordinate Ascent", NIPS 2013) minimises the objective of `packed_solve`
  for a smooth loss. Each pass deals a permutation of the rows into batches
  of `batch_size`; per batch, with v = shrink(weights) and the accelerated
  iterate w: u = (1 - theta) w + theta v, every dual of the batch moves
  theta of the way to -loss'(x_i.u), the weights by their changes, and
  w <- (1 - theta) w + theta v. The returned weights are W(alpha) (their
  duality gap with the duals certifies them); the iterate must be passed
  to the next call.

  Args:
    rows: the handle from `pack_rows` / `new_packed_rows`, one thread.
    weights: float64 `[m]` unshrunk weights W(alpha).
    duals: float64 `[n]`.
    iterate: float64 `[m]` accelerated iterate (shrunk); start a run with
      `shrink(weights)`.
    seed: int; the batches of pass p depend on (seed, p).
    loss_type: one of `ASDCA_LOSSES`, the rows' loss.
    l1, l2: regularisation.
    batch_size: rows per step (>= 1).
    theta: in (0, 1], or None for the paper's 1/4 min{1, sqrt(k/m), k,
      k^(2/3)/m^(1/3)}, k = l2 gamma_loss / max_i s_i |x_i|^2.
    num_passes: passes in this call (0: only the objective).
    gamma: smooth-hinge smoothing (the packing's).
    compute_objective: evaluate the objective parts after the passes.
    name: op name.

  Returns:
    `(weights, duals, iterate, objective, theta)`: objective as
    `packed_solve`'s, theta the one used.

  Raises:
    ValueError: on bad options (a loss that is not smooth, batch_size < 1,
      theta outside (0, 1]).
    tf.errors.InvalidArgumentError: on bad weights, duals or iterate, rows
      packed for another loss, or a theta so large that the passes
      diverged.
    tf.errors.UnimplementedError: rows packed for several threads.
  """
  _check_options(loss_type, l1, l2, 1, 1, "permutation", gamma, 0, 1)
  check_asdca_options(loss_type, batch_size, theta)
  if not 0 <= int(num_passes) <= MAX_PASSES:
    raise ValueError(f"num_passes must be in [0, {MAX_PASSES}], got "
                     f"{num_passes}")
  with tf.name_scope(name or "asdca_solve"):
    return load_ops().tf_sdca_asdca_solve(
        rows, _tensor(weights, tf.float64, "weights"),
        _tensor(duals, tf.float64, "duals"),
        _tensor(iterate, tf.float64, "iterate"),
        _tensor(seed, tf.int64, "seed"), loss_type=loss_type, l1=float(l1),
        l2=float(l2), gamma=float(gamma), num_passes=int(num_passes),
        batch_size=int(batch_size),
        theta=0.0 if theta is None else float(theta),
        compute_objective=bool(compute_objective))


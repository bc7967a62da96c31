"""Data adaptation of `tf_sdca.keras.LinearModel`.

Turns what users pass to `fit`, `evaluate` and `predict` (numpy arrays,
scipy sparse matrices, tensors, dicts of them, `tf.data` datasets) into the
model's features: the feature spec the weights are built from, checked
labels and example weights (class weights included), validation splits, the
model-side features, their logits and `SdcaModel` batches, and the CSR rows
that in-memory training packs. Bad data raises `InvalidInputError` here, before any
training step.
"""
import math
import numbers
import re

import keras
import numpy as np
import tensorflow as tf

from tf_sdca import engine
from tf_sdca import losses
from tf_sdca.sdca_model import SparseFeatureColumn

# The name a non-dict input gets.
DEFAULT_FEATURE = "features"
# Rows per batch when in-memory data is scored (evaluate, predict, the
# validation data of fit).
DEFAULT_BATCH_SIZE = 8192


class InvalidInputError(tf.errors.InvalidArgumentError, ValueError):
  """Bad training or scoring data, found before any training step.

  Both a `tf.errors.InvalidArgumentError` (like the op's own errors) and a
  `ValueError` (like Keras' input errors), so either `except` catches it.
  """

  def __init__(self, message, *op_error_args):
    # Keras' traceback filter rebuilds an OpError raised in `call` as
    # type(e)(node_def, op, message, ...): with one argument that raised a
    # TypeError in place of the message.
    if op_error_args:
      super().__init__(message, op_error_args[0], op_error_args[1],
                       *op_error_args[2:])
    else:
      super().__init__(None, None, message)


def vocabulary_size(name, spec):
  """Rows of a categorical feature's weights: an int, or the size a Keras
  preprocessing layer (Hashing, IntegerLookup, StringLookup) maps into."""
  if isinstance(spec, numbers.Integral) and not isinstance(spec, bool):
    size = int(spec)
  elif hasattr(spec, "num_bins") and spec.num_bins:
    size = int(spec.num_bins)
  elif callable(getattr(spec, "vocabulary_size", None)):
    size = int(spec.vocabulary_size())
  else:
    raise ValueError(
        f"categorical_features[{name!r}] must be a vocabulary size or a Keras "
        f"layer with num_bins or vocabulary_size() (Hashing, IntegerLookup, "
        f"StringLookup), got {spec!r}")
  if getattr(spec, "output_mode", "int") != "int":
    raise ValueError(f"categorical_features[{name!r}] must output integer "
                     f"ids (output_mode='int'), got output_mode="
                     f"{spec.output_mode!r}")
  if size < 1:
    raise ValueError(f"categorical_features[{name!r}] has {size} ids")
  return size


_MISSING_IDS = (
    "SDCA keeps one dual variable per example, so a streamed dataset needs "
    "an example id: make its features a dict with a {name!r} feature "
    "(unique per example, string or int), e.g. add row numbers before "
    "batching with {how}, or pass in-memory arrays (row positions are used)")


# The op's refusal of a stored dual for the label it comes with
# (`TfSdca>Optimizer`'s example_state_data check; the multiclass block's
# form has no value): in a streamed fit, an example id trained before
# with another label.
_STORED_DUAL = re.compile(
    r"example_state_data\[\d+, 0(?::\d+)?\] (?:= (\S+) )?is not a valid "
    r"dual(?: block)? of (\w+) for example_labels\[\d+\] = (\S+)")


# The tag of `class_weighted`'s assertion on a streamed batch's labels.
_CLASS_TAG = "tf_sdca class_weight label"
_CLASS_ASSERTION = re.compile(re.escape(f"[{_CLASS_TAG}] [") + r"([^\]]*)\]")


def streamed_error(error, example_id):
  """The `InvalidInputError` to raise for `error`, raised by a streamed
  fit's batches: for a label that `class_weight` has no weight for
  (`class_weighted`'s assertion), and where the op refused an example's
  stored dual for its label (the example id came back with another label:
  SDCA keeps one dual per id); None for any other error."""
  if isinstance(error, InvalidInputError):
    return None
  found = _CLASS_ASSERTION.search(error.message or "")
  if found is not None:
    return _class_error(float(found.group(1)), None, None)
  found = _STORED_DUAL.search(error.message or "")
  if found is None:
    return None
  dual, loss, label = found.groups()
  stored = f" {dual}" if dual is not None else " block"
  loss = losses.short_name(loss)  # as LinearModel(loss=...) takes it
  return InvalidInputError(
      f"a streamed batch has a row of label {label} whose example id "
      f"(feature {example_id!r}) was trained before with another label: "
      f"its stored dual{stored} is not one of {loss} for label {label}. "
      f"SDCA keeps one dual per example id, so "
      f"rows that share an id are one example (seen again in a later batch "
      f"or epoch, it resumes from its dual) and need the same label; give "
      f"each example its own id, e.g. number the rows before batching")


def serialized_categorical(categorical_features):
  """`categorical_features` as `get_config` keeps them: vocabulary sizes as
  they are, layers serialised."""
  return {name: (spec if isinstance(spec, numbers.Integral) else
                 keras.saving.serialize_keras_object(spec))
          for name, spec in categorical_features.items()}


def deserialized_categorical(config, custom_objects=None):
  """The categorical features of a `serialized_categorical` config."""
  return {name: (spec if isinstance(spec, numbers.Integral) else
                 keras.saving.deserialize_keras_object(
                     spec, custom_objects=custom_objects))
          for name, spec in config.items()}


def missing_ids(name, features_spec):
  """The error for a training dataset without example ids, with a snippet
  that fits the dataset's features: a dict, or one tensor (which the model
  names DEFAULT_FEATURE)."""
  if isinstance(features_spec, dict):
    how = f"dataset.enumerate().map(lambda i, xy: (dict(xy[0], {name}=i), " \
          "xy[1]))"
  else:
    how = f"dataset.enumerate().map(lambda i, xy: ({{{DEFAULT_FEATURE!r}: " \
          f"xy[0], {name!r}: i}}, xy[1]))"
  return InvalidInputError(_MISSING_IDS.format(name=name, how=how))


def is_scipy(value):
  """Whether `value` is a scipy sparse matrix (False without scipy)."""
  try:
    import scipy.sparse  # pylint: disable=import-outside-toplevel
  except ImportError:
    return False
  return scipy.sparse.issparse(value)


def canonical_csr(value):
  """A scipy matrix as CSR with sorted column indices and duplicate
  entries (the same row and column twice) summed, as scipy itself reads
  them: a `tf.SparseTensor` refuses repeated indices ("indices[1] = [0,0]
  is repeated"), and training must see the same rows as prediction. The
  caller's matrix is not modified."""
  csr = value.tocsr()
  if not csr.has_canonical_format:
    csr = csr.copy() if csr is value else csr
    csr.sum_duplicates()  # also sorts the indices
  return csr


def host(value):
  """In-memory feature -> scipy sparse matrix (kept: packing reads its CSR
  arrays) or what `to_host` makes."""
  return value if is_scipy(value) else to_host(value)


def num_rows(x):
  """The common first dimension of in-memory features."""
  n = None
  for name, value in x.items():
    rows = value.shape[0] if len(value.shape) else None
    if rows is None:
      raise InvalidInputError(f"feature {name!r} must have a first "
                              f"(example) dimension, got shape "
                              f"{value.shape}")
    if n is None:
      n = int(rows)
    elif rows != n:
      raise InvalidInputError(f"feature {name!r} has {rows} rows but "
                              f"{next(iter(x))!r} has {n}")
  return n


def leading_rows(x):
  """The first dimension of the first feature of in-memory `x` (a value or
  a dict of them), as given (not converted, not checked); None where it is
  not known without converting."""
  for value in as_dict(x).values():
    shape = getattr(value, "shape", None)
    try:
      return int(shape[0]) if shape is not None else len(value)
    except (TypeError, IndexError, ValueError):
      return None
  return None


def csr_of(value, n):
  """(indptr, int64 columns, float32 values) of a model-side feature: a
  SparseTensor, a RaggedTensor of ids or dense ids `[n, k]`."""
  if isinstance(value, tf.RaggedTensor):
    return (value.row_splits.numpy().astype(np.int64),
            value.flat_values.numpy().astype(np.int64), None)
  if isinstance(value, tf.SparseTensor):
    index = value.indices.numpy()
    rows, cols = index[:, 0], index[:, 1]
    values = value.values.numpy()
    if rows.size and np.any(rows[1:] < rows[:-1]):
      order = np.argsort(rows, kind="stable")
      rows, cols, values = rows[order], cols[order], values[order]
    indptr = np.zeros(n + 1, np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, cols.astype(np.int64), values.astype(np.float32)
  ids = value.numpy().reshape(n, -1)
  k = ids.shape[1]
  return (np.arange(0, n * k + 1, k, dtype=np.int64),
          ids.ravel().astype(np.int64), None)


def merged_rows(n, parts):
  """One CSR (indptr, indices, values or None) of several features' CSR
  parts with their columns already offset: row i holds each part's entries
  of row i, part after part."""
  if len(parts) == 1:
    return parts[0]
  lengths = [np.diff(indptr) for indptr, _, _ in parts]
  indptr = np.zeros(n + 1, np.int64)
  np.cumsum(sum(lengths), out=indptr[1:])
  indices = np.empty(indptr[-1], np.int64)
  with_values = any(values is not None for _, _, values in parts)
  values = np.empty(indptr[-1], np.float32) if with_values else None
  start = indptr[:-1].copy()
  for (part_ptr, part_ids, part_values), length in zip(parts, lengths):
    # Entry e of row r goes to start[r] + (e - part_ptr[r]).
    dest = (np.repeat(start - part_ptr[:-1], length) +
            np.arange(part_ptr[-1], dtype=np.int64))
    indices[dest] = part_ids
    if with_values:
      values[dest] = 1.0 if part_values is None else part_values
    start += length
  return indptr, indices, values


def to_host(value):
  """In-memory feature -> tf.Tensor or tf.SparseTensor."""
  if isinstance(value, (tf.Tensor, tf.SparseTensor, tf.RaggedTensor)):
    return value
  if is_scipy(value):
    csr = canonical_csr(value)
    # CSR with sorted indices is already in the SparseTensor's row-major
    # order.
    rows = np.repeat(np.arange(csr.shape[0], dtype=np.int64),
                     np.diff(csr.indptr))
    return tf.SparseTensor(
        np.stack([rows, csr.indices.astype(np.int64)], 1),
        csr.data.astype(np.float32), csr.shape)
  array = np.asarray(value)
  if array.dtype.kind in "OUS":
    return tf.constant(array.astype(str))
  return tf.constant(array)


def checked_labels(y, n, loss_type, num_classes=1):
  """float32 labels `[n]` of `y`, checked for the loss `loss_type` (the
  op's name; the messages name it as `LinearModel(loss=...)` takes it).

  Raises:
    InvalidInputError: for non-numeric, misshaped, non-finite or
      out-of-domain labels.
  """
  y = np.asarray(y.numpy() if isinstance(y, tf.Tensor) else y)
  if y.dtype.kind not in "biuf":
    raise InvalidInputError(
        f"labels must be numeric, got dtype {y.dtype}"
        + (" (encode classes as 0/1)" if loss_type in losses.BINARY else ""))
  y = y.reshape(len(y), -1) if y.ndim > 1 else y
  if y.ndim > 1 and y.shape[1] != 1:
    raise InvalidInputError(f"labels must have shape [n] or [n, 1], got "
                            f"{y.shape}")
  y = y.reshape(-1).astype(np.float64)
  if y.shape[0] != n:
    raise InvalidInputError(f"labels have {y.shape[0]} rows but the "
                            f"features have {n}")
  bad = np.flatnonzero(~np.isfinite(y))
  if bad.size:
    raise InvalidInputError(f"labels[{bad[0]}] = {y[bad[0]]} is not finite")
  if loss_type in losses.BINARY:
    bad = np.flatnonzero((y != 0) & (y != 1))
    if bad.size:
      raise InvalidInputError(f"labels[{bad[0]}] = {y[bad[0]]} must be 0 or "
                              f"1 for {losses.short_name(loss_type)}")
  elif losses.is_multiclass(loss_type):
    bad = np.flatnonzero((y < 0) | (y >= num_classes) | (y != np.round(y)))
    if bad.size:
      raise InvalidInputError(f"labels[{bad[0]}] = {y[bad[0]]} must be a "
                              f"class id in [0, {num_classes}) for "
                              f"{losses.short_name(loss_type)}")
  elif loss_type == "poisson_loss":
    bad = np.flatnonzero(y < 0)
    if bad.size:
      raise InvalidInputError(f"labels[{bad[0]}] = {y[bad[0]]} must be >= 0 "
                              f"for poisson")
  return y.astype(np.float32)


def class_weight_table(class_weight):
  """float32 weight per class id `[max id + 1]` (1 for the classes not in
  `class_weight`).

  Raises:
    InvalidInputError: for a negative class or a weight that is not finite
      and >= 0.
  """
  classes = [int(c) for c in class_weight]
  if min(classes) < 0:
    raise InvalidInputError(f"class_weight has a negative class {min(classes)}")
  table = np.ones(max(classes) + 1, np.float32)
  for c, w in class_weight.items():
    if not (math.isfinite(w) and w >= 0):
      raise InvalidInputError(f"class_weight[{c}] = {w} must be finite and "
                              ">= 0")
    table[int(c)] = w
  return tf.constant(table)


def checked_weights(sample_weight, n, y, class_weight):
  """float32 example weights `[n]`: `sample_weight` (1 when None) times the
  weights of the labels `y` in `class_weight`.

  Raises:
    InvalidInputError: for a wrong shape, a weight that is not finite and
      >= 0, or with class weights a label that is no class id (a whole
      number >= 0) or a class above the largest of `class_weight`.
  """
  s = (np.ones(n, np.float32) if sample_weight is None else
       np.asarray(sample_weight, np.float32))
  if s.ndim > 1 and math.prod(s.shape[1:]) != 1:
    # (Flattened, [n, 2] had "2n rows".)
    raise InvalidInputError(f"sample_weight must have shape [n] or [n, 1] "
                            f"(one weight per example), got {s.shape}")
  s = s.reshape(-1)
  if s.shape[0] != n:
    raise InvalidInputError(f"sample_weight has {s.shape[0]} rows but the "
                            f"features have {n}")
  bad = np.flatnonzero(~np.isfinite(s) | (s < 0))
  if bad.size:
    raise InvalidInputError(f"sample_weight[{bad[0]}] = {s[bad[0]]} must be "
                            "finite and >= 0")
  if class_weight:
    if y is None:
      raise InvalidInputError("class_weight needs labels")
    table = class_weight_table(class_weight).numpy()
    classes = y.astype(np.int64)
    bad = np.flatnonzero((classes < 0) | (classes >= table.size) |
                         (classes != y))
    if bad.size:
      raise _class_error(y[bad[0]], bad[0], table.size)
    s = s * table[classes]
  return s


def _class_error(label, row, size):
  """The error for a `label` that `class_weight` (its table of `size`
  classes, or None) has no weight for: not a class id, or a class above
  its largest; `row`: the label's in-memory row (None: a streamed
  batch's)."""
  where = (f"a streamed batch's label {label}" if row is None else
           f"labels[{row}] = {label}")
  if not (label >= 0 and label == math.floor(label)):
    return InvalidInputError(f"class_weight needs class ids as labels "
                             f"(whole numbers >= 0), got {where}")
  return InvalidInputError(
      f"class_weight has no weight for class {int(label)} ({where}): give "
      "one to every class of the labels (a class it skips below its "
      "largest weighs 1)")


def split(x, y, sample_weight, fraction):
  """Keras' validation_split: the last `fraction` of the rows.

  Raises:
    ValueError: where either part would have 0 rows, as Keras refuses
      such a split (it left the validation no rows and the History no
      val_ metrics, without a word).
  """
  x = {k: host(v) for k, v in (x.items() if isinstance(x, dict) else
                                 [(DEFAULT_FEATURE, x)])}
  n = int(next(iter(x.values())).shape[0])
  cut = int(n * (1.0 - fraction))
  if cut in (0, n):
    raise ValueError(
        f"validation_split={fraction!r} splits the {n} rows into {cut} to "
        f"train on and {n - cut} to validate on: each needs at least one. "
        f"Give more rows or another validation_split")

  def rows(value, lo, hi):
    if is_scipy(value):
      return value.tocsr()[lo:hi]
    if isinstance(value, tf.SparseTensor):
      return tf.sparse.slice(value, [lo, 0], [hi - lo, value.dense_shape[1]])
    return value[lo:hi]

  y = np.asarray(y)
  sw = None if sample_weight is None else np.asarray(sample_weight)
  train = {k: rows(v, 0, cut) for k, v in x.items()}
  held = {k: rows(v, cut, n) for k, v in x.items()}
  validation = (held, y[cut:]) if sw is None else (held, y[cut:], sw[cut:])
  return train, y[:cut], None if sw is None else sw[:cut], validation


def as_dict(x):
  """`x` as a dict of named features (a non-dict is `DEFAULT_FEATURE`)."""
  if isinstance(x, dict):
    return x
  return {DEFAULT_FEATURE: x}


def feature_spec(x, categorical_features):
  """(name, kind, size, raw dtype, raw inner shape) per feature of `x` (a
  dict of values or of tensor specs), sorted by name; `kind` is
  'categorical' (listed in `categorical_features`), 'sparse' or 'dense'.

  Raises:
    InvalidInputError: for a ragged or string feature that is not
      categorical, strings for a vocabulary size (ids), or a feature of
      unknown width.
  """
  missing = sorted(set(categorical_features) - set(x))
  if missing:
    # (A misspelt name trained the feature as a dense number.)
    raise InvalidInputError(
        f"categorical_features names {missing}, not among the features "
        f"{sorted(x)}")
  spec = []
  for name in sorted(x):
    value = x[name]
    dtype = value.dtype
    inner = list(value.shape[1:])
    if name in categorical_features:
      kind = "categorical"
      size = vocabulary_size(name, categorical_features[name])
      if dtype == tf.string and isinstance(categorical_features[name],
                                           numbers.Integral):
        # (The ids' range check compared bytes with ints: a TypeError.)
        raise InvalidInputError(
            f"feature {name!r} holds strings, but categorical_features"
            f"[{name!r}] = {size} takes integer ids in [0, {size}): give "
            f"the ids as numbers, or map the strings by a layer "
            f"(keras.layers.StringLookup(vocabulary=...) or "
            f"keras.layers.Hashing(num_bins=...))")
    elif isinstance(value, (tf.SparseTensor, tf.SparseTensorSpec)) or \
        is_scipy(value):
      kind = "sparse"
      size = inner[0] if inner else None
    elif isinstance(value, (tf.RaggedTensor, tf.RaggedTensorSpec)):
      raise InvalidInputError(
          f"feature {name!r} is ragged: list it in categorical_features "
          f"(ids) or pass a tf.SparseTensor (numeric)")
    else:
      if dtype == tf.string:
        raise InvalidInputError(
            f"feature {name!r} holds strings: list it in "
            f"categorical_features with a lookup or hashing layer")
      kind = "dense"
      size = int(np.prod(inner)) if inner else 1
    if size is None:
      raise InvalidInputError(f"feature {name!r} needs a known width, got "
                              f"shape {value.shape}")
    spec.append([name, kind, int(size), tf.as_dtype(dtype).name,
                 [None if d is None else int(d) for d in inner]])
  return spec


def shapes_spec(input_shape, categorical_features, example_id):
  """The feature spec (see `feature_spec`) of numeric inputs of the shapes
  `LinearModel.build` takes: one shape `(None, d)` (the `DEFAULT_FEATURE`)
  or a dict `{name: shape}` (the example ids' left out), as float32 dense
  features.

  Raises:
    ValueError: for no shape, a categorical feature (its raw type and ids
      come from data) or a shape of unknown width.
  """
  how = ("build((None, d)) for one input of d numbers, build({name: (None, "
         "k), ...}) for named numeric features, or call the model on data "
         "(model(x)), which builds sparse and categorical features too")
  if input_shape is None:
    raise ValueError(f"LinearModel.build needs the input's shape to size "
                     f"its weights: {how}")
  shapes = (dict(input_shape) if isinstance(input_shape, dict) else
            {DEFAULT_FEATURE: input_shape})
  categorical = sorted(set(shapes) & set(categorical_features))
  if categorical:
    raise ValueError(f"LinearModel.build takes numeric features; "
                     f"{categorical} are categorical (their raw values come "
                     f"from data): call the model on data (model(x))")
  try:
    specs = {name: tf.TensorSpec(shape, tf.float32)
             for name, shape in shapes.items() if name != example_id}
  except (TypeError, ValueError) as error:
    raise ValueError(f"LinearModel.build: {input_shape!r} is no input "
                     f"shape ({error}): {how}") from None
  return feature_spec(specs, categorical_features)


def _not_finite(values):
  """The positions of the values that are not finite. Floats are checked
  in their own type (a float32 is finite exactly when its float64 is; no
  float64 copy of the data), with one pass when all are finite."""
  if values.dtype.kind not in "fiub":
    values = values.astype(np.float64)
  if values.dtype.kind != "f" or np.isfinite(values).all():
    return np.zeros(0, np.int64)
  return np.flatnonzero(~np.isfinite(values))


def row_major(value, kind, index=None):
  """A `tf.SparseTensor` feature (its `kind`, indices `index` as numpy when
  read already) in row-major order with each index once, as scoring's
  batches need it (tf.data refuses repeated and unordered indices) and as
  `fit` trains it: a numeric feature's repeated entries summed (as
  `canonical_csr` sums a scipy matrix's), a categorical feature's ids
  kept, each at its own position in the row (each id counts). `value`
  itself when it is so already."""
  index = value.indices.numpy() if index is None else index
  rows, cols = index[:, 0], index[:, 1]
  step = np.diff(rows)
  if np.all((step > 0) | ((step == 0) & (np.diff(cols) > 0))):
    return value
  order = np.lexsort((cols, rows))  # stable: repeats keep their order
  rows, cols = rows[order], cols[order]
  values = value.values.numpy()[order]
  width = int(value.dense_shape[1])
  if kind == "categorical":
    starts = np.searchsorted(rows, rows, side="left")
    cols = np.arange(rows.size, dtype=np.int64) - starts
    width = max(width, int(cols.max()) + 1)
  else:
    first = np.ones(rows.size, bool)
    first[1:] = (rows[1:] != rows[:-1]) | (cols[1:] != cols[:-1])
    starts = np.flatnonzero(first)
    rows, cols = rows[starts], cols[starts]
    values = np.add.reduceat(values, starts)
  return tf.SparseTensor(np.stack([rows, cols], 1), values,
                         [int(value.dense_shape[0]), width])


def check_values(x, spec, categorical_features, for_scoring=False):
  """Checks the in-memory features `x` against the model's `spec`.

  Returns:
    With `for_scoring`, `x` with its `tf.SparseTensor` features in
    row-major order, each index once (`row_major`); else None.

  Raises:
    InvalidInputError: for a categorical id or sparse column outside the
      feature's size, a non-numeric feature or a value that is not finite.
  """
  out = dict(x) if for_scoring else None
  for name, kind, size, _, _ in spec:
    value = x[name]
    if kind == "categorical":
      if for_scoring and isinstance(value, tf.SparseTensor):
        out[name] = row_major(value, kind)
      if isinstance(categorical_features[name], numbers.Integral):
        ids = value.values if isinstance(value, tf.SparseTensor) else value
        ids = tf.reshape(ids, [-1]).numpy()
        fractional = engine.first_fractional(ids)
        if fractional is not None:
          raise InvalidInputError(f"feature {name!r} has id "
                                  f"{ids[fractional]}: ids must be whole "
                                  f"numbers")
        bad = np.flatnonzero((ids < 0) | (ids >= size))
        if bad.size:
          raise InvalidInputError(
              f"feature {name!r} has id {ids[bad[0]]} outside [0, {size})")
      continue
    if is_scipy(value):
      bad = _not_finite(value.data)
      if bad.size:
        coo = value.tocoo()
        finite = np.isfinite(coo.data.astype(np.float64))
        at = np.flatnonzero(~finite)[0]
        raise InvalidInputError(
            f"feature {name!r}[{coo.row[at]}, {coo.col[at]}] = "
            f"{coo.data[at]} is not finite")
      continue
    values = value.values if isinstance(value, tf.SparseTensor) else value
    if not values.dtype.is_floating and not values.dtype.is_integer and \
        values.dtype != tf.bool:
      raise InvalidInputError(f"feature {name!r} must be numeric, got "
                              f"{values.dtype.name}")
    values = tf.reshape(values, [-1]).numpy()
    bad = _not_finite(values)
    if bad.size:
      where = (value.indices[bad[0]].numpy().tolist()
               if isinstance(value, tf.SparseTensor) else
               [int(i) for i in np.unravel_index(bad[0], value.shape)])
      raise InvalidInputError(f"feature {name!r}{where} = {values[bad[0]]}"
                              " is not finite")
    if kind == "sparse":
      index = value.indices.numpy()
      cols = index[:, 1]
      if cols.size and (cols.min() < 0 or cols.max() >= size):
        raise InvalidInputError(f"feature {name!r} has a column outside "
                                f"[0, {size})")
      if for_scoring:
        out[name] = row_major(value, kind, index)
  return out


def transform(x, spec, categorical_features):
  """Model-side features of the raw input `x`: {name: dense float [B, d] |
  SparseTensor float | categorical ids (dense int [B, k], SparseTensor or
  RaggedTensor)}.

  Raises:
    InvalidInputError: when `x` lacks one of the features of `spec`.
  """
  x = as_dict(x)
  out = {}
  for name, kind, _, _, _ in spec:
    if name not in x:
      raise InvalidInputError(f"the input has no feature {name!r}; the "
                              f"model takes {[s[0] for s in spec]}")
    out[name] = transform_one(name, kind, x[name], categorical_features)
  return out


def transform_one(name, kind, value, categorical_features):
  """One feature's model-side value (see `transform`): categorical values
  mapped by their layer to int64 ids, numeric ones as float32."""
  if kind == "categorical":
    layer = categorical_features[name]
    if not isinstance(layer, numbers.Integral):
      value = layer(value)
    if isinstance(value, tf.SparseTensor):
      return tf.SparseTensor(value.indices, tf.cast(value.values, tf.int64),
                             value.dense_shape)
    if isinstance(value, tf.RaggedTensor):
      return tf.cast(value, tf.int64)
    value = tf.cast(value, tf.int64)
    return tf.reshape(value, [tf.shape(value)[0], -1])
  if isinstance(value, tf.SparseTensor):
    return tf.SparseTensor(value.indices, tf.cast(value.values, tf.float32),
                           value.dense_shape)
  value = tf.cast(value, tf.float32)
  return tf.reshape(value, [tf.shape(value)[0], -1])


def sdca_examples(features, labels, weights, ids, spec, with_bias):
  """An `SdcaModel` batch from model-side `features` (see `transform`):
  the sparse and categorical features as `SparseFeatureColumn`s and the
  dense ones in `spec` order, a constant-1 column for the bias when
  `with_bias`, and the example ids as strings ("" when `ids` is None)."""
  sparse, dense = [], []
  batch = tf.shape(labels)[0]
  for name, kind, _, _, _ in spec:
    value = features[name]
    if kind == "dense":
      dense.append(value)
      continue
    if isinstance(value, tf.SparseTensor):
      rows, cols, vals = value.indices[:, 0], value.indices[:, 1], \
          value.values
    elif isinstance(value, tf.RaggedTensor):
      rows, cols, vals = value.value_rowids(), value.flat_values, None
    else:  # dense ids [B, k]
      width = tf.shape(value)[1]
      rows = tf.repeat(tf.range(tf.cast(batch, tf.int64)), width)
      cols, vals = tf.reshape(value, [-1]), None
    if kind == "categorical":
      sparse.append(SparseFeatureColumn(rows, tf.cast(cols, tf.int64),
                                        None))
    else:
      sparse.append(SparseFeatureColumn(rows, cols, vals))
  if with_bias:
    dense.append(tf.ones([batch, 1], tf.float32))
  if ids is None:
    ids = tf.fill([batch], "")
  elif ids.dtype.is_integer:  # keyed as their decimal text by SdcaModel
    ids = tf.cast(ids, tf.int64)
  elif ids.dtype != tf.string:
    ids = tf.strings.as_string(ids)
  return {"sparse_features": sparse, "dense_features": dense,
          "example_weights": weights, "example_labels": labels,
          "example_ids": tf.reshape(ids, [-1])}


def logits(features, spec, kernels, bias, num_classes):
  """float32 `w.x + b` per example `[B]` from model-side `features` (see
  `transform`) and the Keras weights (`kernels`: `{name: [size, K]}`, `bias`
  `[K]` or None); `[B, K]` `W^T x + b` for a multiclass loss (`num_classes`
  K > 1)."""
  multiclass = num_classes > 1
  z = None
  for name, kind, _, _, _ in spec:
    value, kernel = features[name], kernels[name]
    if kind == "categorical":
      if isinstance(value, tf.SparseTensor):
        value = tf.RaggedTensor.from_sparse(value)
      # Dense [B, k] or ragged ids: the sum of their weights per row (the K
      # weights of each id, [B, K], multiclass).
      part = tf.reduce_sum(
          tf.gather(kernel if multiclass else kernel[:, 0], value), axis=1)
    elif isinstance(value, tf.SparseTensor):
      part = tf.sparse.sparse_dense_matmul(value, kernel)
      part = part if multiclass else part[:, 0]
    elif multiclass:
      part = tf.matmul(value, kernel)
    else:
      part = tf.linalg.matvec(value, kernel[:, 0])
    z = part if z is None else z + part
  if bias is not None:
    z = z + (bias if multiclass else bias[0])
  return z


def unpack(data):
  """(features dict, float32 labels [B], float32 weights [B], 1 when
  absent) of a batch `(x, y[, sample_weight])`."""
  x, y, sw = keras.utils.unpack_x_y_sample_weight(data)
  x = as_dict(x)
  y = tf.reshape(tf.cast(y, tf.float32), [-1])
  sw = (tf.ones_like(y) if sw is None else
        tf.reshape(tf.cast(sw, tf.float32), [-1]))
  return x, y, sw


def dataset_features(dataset, example_id, for_training):
  """The features' specs `{name: spec}` of a user `tf.data.Dataset` of
  `(features, labels[, sample_weight])` (or of features), without the
  example ids.

  Raises:
    ValueError: when training (`for_training`) on features that are not a
      dict holding the `example_id` feature.
  """
  spec = dataset.element_spec
  x_spec = spec[0] if isinstance(spec, tuple) else spec
  if for_training and (not isinstance(x_spec, dict) or
                       example_id not in x_spec):
    raise missing_ids(example_id, x_spec)
  return {k: v for k, v in as_dict(x_spec).items() if k != example_id}


def check_dataset_targets(dataset):
  """Checks the labels and example weights of a user `tf.data.Dataset` of
  `(features, labels[, sample_weight])` batches by their element spec
  (their shapes, before any batch: each batch's are flattened, and a
  second column made twice the rows).

  Raises:
    InvalidInputError: for labels or weights with more than one number
      per example.
  """
  spec = dataset.element_spec
  if not isinstance(spec, tuple):
    check_batched(dataset)
    return
  for name, part in zip(("labels", "sample_weight"), spec[1:3]):
    shape = getattr(part, "shape", None)
    if shape is not None and shape.rank == 0:
      raise _unbatched(f"its {name} are scalars")
    if shape is None or shape.rank is None or shape.rank < 2:
      continue
    inner = shape[1:]
    if inner.is_fully_defined() and inner.num_elements() != 1:
      raise InvalidInputError(
          f"the dataset's {name} must have shape [batch] or [batch, 1] (one "
          f"number per example), got {tuple(shape.as_list())}")


def check_batched(dataset):
  """InvalidInputError for a dataset whose features are scalars (no batch
  dimension): a dataset of single examples, not batches."""
  spec = dataset.element_spec
  x_spec = spec[0] if isinstance(spec, tuple) else spec
  for name, part in as_dict(x_spec).items():
    shape = getattr(part, "shape", None)
    if shape is not None and shape.rank == 0:
      raise _unbatched(f"its feature {name!r} is a scalar")


def _unbatched(what):
  # Keras' own models refuse such datasets; here an evaluate scored every
  # example as one feature row (a loss of 30 log 2 at zero weights) and
  # built the model for it.
  return InvalidInputError(
      f"the dataset gives single examples, not batches ({what}): batch it, "
      "e.g. dataset.batch(256)")


def class_weighted(dataset, class_weight):
  """`dataset` of `(x, y[, sample_weight])` batches with each example's
  weight multiplied by its class's weight in `class_weight` (1 for a class
  it skips below its largest); a batch with a label that is no class id or
  above its largest class fails an assertion that `streamed_error` turns
  into the error naming the label."""
  table = class_weight_table(class_weight)
  size = int(table.shape[0])

  def weigh(*parts):
    x, y, sw = keras.utils.unpack_x_y_sample_weight(parts)
    labels = tf.reshape(y, [-1])
    classes = tf.cast(labels, tf.int32)
    # A label that is no class id, or above the table (the gather's own
    # error named its indices): `streamed_error` reads the first one.
    known = ((classes >= 0) & (classes < size) &
             (tf.cast(classes, labels.dtype) == labels))
    first = tf.argmin(tf.cast(known, tf.int32))
    check = tf.debugging.Assert(
        tf.reduce_all(known),
        [_CLASS_TAG, tf.cast(tf.gather(labels, first), tf.float64)])
    with tf.control_dependencies([check]):
      cw = tf.gather(table, classes)
    sw = cw if sw is None else tf.reshape(tf.cast(sw, tf.float32),
                                          [-1]) * cw
    return x, y, sw
  return dataset.map(weigh)


def scoring_inputs(x, y, sample_weight, loss_type, num_classes):
  """In-memory data to score, checked: (features as tensors, rows, float32
  labels or None, float32 weights or None).

  Raises:
    InvalidInputError: for mismatched lengths, non-numeric or out-of-domain
      labels or bad weights.
  """
  x = {name: to_host(value) for name, value in as_dict(x).items()}
  n = num_rows(x)
  if y is not None:
    y = checked_labels(y, n, loss_type, num_classes)
  if sample_weight is not None:
    sample_weight = checked_weights(sample_weight, n, y, None)
  return x, n, y, sample_weight


def scoring_rows(x, n, y, sample_weight, batch_size):
  """(dataset of the rows `(x[, y[, sample_weight]])`, batch size, total
  example weight or None) of checked in-memory data to score."""
  parts = (x,) if y is None else (
      (x, y) if sample_weight is None else (x, y, sample_weight))
  rows = tf.data.Dataset.from_tensor_slices(parts)
  total = None if sample_weight is None else float(
      tf.reduce_sum(tf.cast(sample_weight, tf.float64)))
  return rows, batch_size or min(max(n, 1), DEFAULT_BATCH_SIZE), total


def training_inputs(x, y, sample_weight, class_weight, loss_type,
                    num_classes, example_id):
  """In-memory training data, checked: (features without the example ids,
  rows, float32 labels, float32 example weights, the ids or None).

  Raises:
    InvalidInputError: for no rows, mismatched lengths, out-of-domain
      labels, bad weights or weights that are all 0.
  """
  x = {name: host(value) for name, value in as_dict(x).items()}
  n = num_rows(x)
  if n == 0:
    raise InvalidInputError("fit got no examples (x has 0 rows)")
  labels = checked_labels(y, n, loss_type, num_classes)
  weights = checked_weights(sample_weight, n, labels, class_weight)
  if not weights.any():
    raise InvalidInputError(
        "every example's weight (sample_weight, class_weight) is 0: "
        "nothing to train")
  ids = x.pop(example_id, None)
  return x, n, labels, weights, ids


def example_ids(ids, n, example_id):
  """The example ids of `n` in-memory rows as a tensor `[n]`: the row
  positions when `ids` is None.

  Raises:
    InvalidInputError: when an id repeats.
  """
  if ids is None:
    return tf.range(n, dtype=tf.int64)
  ids = tf.reshape(to_host(ids), [-1])
  if int(tf.size(tf.unique(ids)[0])) != n:
    raise InvalidInputError(f"feature {example_id!r} repeats an "
                            "example id: each example needs its own")
  return ids


def weight_table_columns(x, n, spec, categorical_features, with_bias):
  """The columns of `n` in-memory rows in the weight table's order (the
  SdcaModel's slots: the sparse and categorical features in spec order,
  then the dense ones and the bias): (CSR parts `(int64 indptr, integer
  columns offset into the sparse slots, float32 values or None)` to merge
  with `merged_rows`, float32 dense blocks `[n, d]`, sparse slots'
  width)."""
  sparse, dense, num_sparse = [], [], 0
  for name, kind, size, _, _ in spec:
    value = x[name]
    if kind == "dense":
      dense.append(np.reshape(
          tf.cast(value, tf.float32).numpy(), (n, -1)))
      continue
    if is_scipy(value):
      # scipy's own arrays where they can be (int32 columns: the op's ids;
      # copying 33M of them to int64 and back took ~0.3 s a 1M-row fit).
      csr = canonical_csr(value)
      part = (csr.indptr.astype(np.int64, copy=False), csr.indices,
              csr.data.astype(np.float32, copy=False))
    else:
      part = csr_of(transform_one(name, kind, value, categorical_features), n)
    columns = part[1]
    if num_sparse:  # offset into the sparse slots
      columns = columns.astype(np.int64) + num_sparse
    sparse.append((part[0], columns,
                   None if kind == "categorical" else part[2]))
    num_sparse += size
  if with_bias:
    dense.append(np.ones((n, 1), np.float32))
  return sparse, dense, num_sparse

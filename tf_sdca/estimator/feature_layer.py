"""Feature columns and Keras preprocessing as the linear model's groups.

A linear estimator's input is a dict of raw features; its columns turn them
into *groups*, each with one weight variable:

- a **sparse group** (`kind='sparse'`): ids in `[0, rows)` with values per
  example, from a categorical `tf.feature_column` (hash bucket, vocabulary
  list or file, identity, bucketized, crossed, weighted categorical), an
  `indicator_column` (the same ids: a linear model over a multi-hot vector
  is a weight per id), a Keras preprocessing layer that outputs integer ids
  (`StringLookup`, `IntegerLookup`, `Hashing`, `Discretization`), or a
  categorical / hashed / discretized feature or a cross of a
  `keras.utils.FeatureSpace`;
- a **dense group** (`kind='dense'`): a float `[B, d]` block, from a
  `numeric_column` of a 1-D shape or a float feature of a `FeatureSpace`.

Out-of-vocabulary ids (-1) are dropped, as TensorFlow's `LinearSDCA` did;
`sdca_columns` also sums the values of an id repeated within an example (the
op wants each (example, id) once), which leaves `w.x` unchanged.

Groups are sorted by name, TensorFlow's order, and each group's weight is
TensorFlow's `linear/linear_model/<name>/weights`.
"""
import collections
import numbers

import tensorflow as tf

# One group: its name (the column's), 'sparse' or 'dense', and its number of
# weight rows.
Group = collections.namedtuple("Group", ["name", "kind", "rows"])

_fc = tf.__internal__.feature_column


class _Resources(_fc.StateManager):
  """Holds the lookup tables feature columns create, so that every trace
  (training, evaluation, the serving signatures) shares one table and a
  SavedModel tracks it."""

  def __init__(self, store):
    self._store = store
    self._owners = {}  # key -> the column whose resource it holds

  def _key(self, column, name):
    # Two columns may share a name (two vocabularies over one raw
    # feature: "city" and indicator_column("city")): the second gets its
    # own table, not the first's (its ids were the other vocabulary's,
    # past its size). TensorFlow keeps a table per column object.
    base = key = f"{column.name}/{name}"
    k = 1
    while self._owners.get(key, column) != column:
      k += 1
      key = f"{base}_{k}"
    return key

  def add_resource(self, feature_column, name, resource):
    key = self._key(feature_column, name)
    self._owners[key] = feature_column
    self._store[key] = resource

  def has_resource(self, feature_column, name):
    return self._key(feature_column, name) in self._store

  def get_resource(self, feature_column, name):
    return self._store[self._key(feature_column, name)]


def _is_keras_layer(value):
  return hasattr(value, "compute_output_shape") and callable(value)


def _is_feature_space(value):
  return hasattr(value, "preprocessors") and hasattr(value, "crossers") and \
      hasattr(value, "features")


def _id_count(name, layer, check_mode=True):
  """Weight rows of a Keras layer that outputs integer ids (FeatureSpace
  encodes its preprocessors' ids itself: `check_mode=False`)."""
  mode = getattr(layer, "output_mode", "int")
  if check_mode and mode != "int":
    raise ValueError(
        f"feature {name!r}: a linear model wants the layer's integer ids "
        f"(output_mode='int'), got output_mode={mode!r}; the one-hot or "
        "multi-hot vector of those ids is what the weights multiply")
  boundaries = getattr(layer, "bin_boundaries", None)
  if boundaries is not None:           # Discretization
    return len(boundaries) + 1
  if getattr(layer, "num_bins", None):  # Hashing, HashedCrossing
    return int(layer.num_bins)
  if callable(getattr(layer, "vocabulary_size", None)):  # Lookup layers
    return int(layer.vocabulary_size())
  raise ValueError(
      f"feature {name!r}: cannot tell how many ids {type(layer).__name__} "
      "outputs; use StringLookup, IntegerLookup, Hashing or Discretization "
      "(or a tf.feature_column)")


def _dense_2d(x):
  x = tf.convert_to_tensor(x)
  if x.shape.rank == 1:
    return x[:, None]
  return x


def _ids_of(value):
  """(rows, ids, batch size) of a layer's integer output: dense `[B]` /
  `[B, k]`, ragged or sparse."""
  if isinstance(value, tf.SparseTensor):
    return (value.indices[:, 0], tf.cast(value.values, tf.int64),
            value.dense_shape[0])
  if isinstance(value, tf.RaggedTensor):
    return (value.value_rowids(), tf.cast(value.flat_values, tf.int64),
            value.nrows())
  value = _dense_2d(value)
  batch = tf.shape(value, out_type=tf.int64)[0]
  width = tf.shape(value, out_type=tf.int64)[1]
  return (tf.repeat(tf.range(batch), width),
          tf.cast(tf.reshape(value, [-1]), tf.int64), batch)


class FeatureLayer(tf.Module):
  """The groups of a list of feature columns / Keras preprocessing.

  Args:
    feature_columns: an iterable whose items are `tf.feature_column`
      columns (V2), dicts `{feature name: Keras preprocessing layer with
      integer output}`, or an adapted `keras.utils.FeatureSpace`.

  Raises:
    ValueError: for an empty list or a column type a linear SDCA model
      cannot train (embeddings, sequences, numeric columns of rank > 1);
      `groups` raises it for two groups with one name.
  """

  def __init__(self, feature_columns):
    super().__init__(name="linear_model")
    if isinstance(feature_columns, dict) or _is_feature_space(
        feature_columns):
      feature_columns = [feature_columns]
    items = list(feature_columns or [])
    if not items:
      raise ValueError("feature_columns must not be empty")
    self._columns = []       # tf.feature_column columns
    self._layers = {}        # feature name -> Keras layer
    self._spaces = []        # keras.utils.FeatureSpace
    for item in items:
      if isinstance(item, dict):
        for name, layer in item.items():
          if not _is_keras_layer(layer):
            raise ValueError(f"feature_columns[{name!r}] must be a Keras "
                             f"preprocessing layer, got {layer!r}")
          self._layers[str(name)] = layer
      elif _is_feature_space(item):
        self._spaces.append(item)
      elif isinstance(item, _fc.FeatureColumn):
        self._check_column(item)
        self._columns.append(item)
      else:
        raise ValueError(
            f"feature_columns: {item!r} is not a tf.feature_column column "
            "(V2), a dict of Keras preprocessing layers or a "
            "keras.utils.FeatureSpace")
    self.tables = {}
    self._resources = _Resources(self.tables)
    self._groups = None
    self._feature_keys = None

  # ---------------------------------------------------------- structure
  @staticmethod
  def _check_column(column):
    kind = type(column).__name__
    if kind == "NumericColumn":
      if len(column.shape) != 1:
        raise ValueError(
            f"numeric_column {column.name!r} has shape {column.shape}: "
            "LinearSDCA takes numeric columns of a 1-D shape")
    elif kind == "IndicatorColumn":
      # (A sequence inside trained as a bag of ids, where the docs and
      # TensorFlow's own transform refuse it.)
      inner = type(column.categorical_column).__name__
      if inner.startswith("Sequence"):
        raise ValueError(
            f"LinearSDCA does not support {inner} "
            f"{column.categorical_column.name!r} (in indicator_column "
            f"{column.name!r}): sequence columns are refused, as "
            "TensorFlow's feature-column transform refuses them there")
    elif (kind.startswith("Sequence") or not hasattr(column, "num_buckets") or
          not hasattr(column, "get_sparse_tensors")):
      raise ValueError(
          f"LinearSDCA does not support {kind} {column.name!r}: it trains "
          "numeric, categorical (hash bucket, vocabulary list or file, "
          "identity, bucketized, crossed, weighted) and indicator columns, "
          "one weight per number or id")

  @property
  def groups(self):
    """The groups, sorted by name (built on first use, so Keras layers may
    be adapted after the estimator is constructed)."""
    if self._groups is None:
      groups = []
      for column in self._columns:
        kind = type(column).__name__
        if kind == "NumericColumn":
          groups.append(Group(column.name, "dense", int(column.shape[0])))
        elif kind == "IndicatorColumn":
          groups.append(Group(column.name, "sparse",
                              column.categorical_column.num_buckets))
        else:
          groups.append(Group(column.name, "sparse", column.num_buckets))
      for name, layer in self._layers.items():
        groups.append(Group(name, "sparse", _id_count(name, layer)))
      for space in self._spaces:
        for name, spec in space.features.items():
          layer = space.preprocessors[name]
          if spec.output_mode == "float":
            width = layer.compute_output_shape((None, 1))[-1]
            if not isinstance(width, numbers.Integral):
              raise ValueError(f"FeatureSpace feature {name!r}: unknown "
                               "output width")
            groups.append(Group(name, "dense", int(width)))
          else:
            groups.append(Group(name, "sparse",
                                _id_count(name, layer, check_mode=False)))
        for cross in space.crosses:
          groups.append(Group(cross.name, "sparse",
                              int(space.crossers[cross.name].num_bins)))
      names = [g.name for g in groups]
      twice = sorted({n for n in names if names.count(n) > 1})
      if twice:
        raise ValueError(f"feature_columns: two columns named {twice}")
      for g in groups:
        if g.rows < 1:
          raise ValueError(f"column {g.name!r} has {g.rows} weight rows")
      self._groups = sorted(groups, key=lambda g: g.name)
    return self._groups

  @property
  def feature_keys(self):
    """The raw features the columns read."""
    if self._feature_keys is None:
      # Each column's own keys: one spec of them all failed for columns
      # that read a key two ways (a numeric "hour" beside a cross of the raw
      # "hour", parsed as strings), which TensorFlow's transform takes.
      keys = set()
      for column in self._columns:
        keys.update(tf.feature_column.make_parse_example_spec([column]))
      keys.update(self._layers)
      for space in self._spaces:
        keys.update(space.features)
      self._feature_keys = frozenset(keys)
    return self._feature_keys

  def check_widths(self, features):
    """Refuses a raw feature whose width (numbers per example, from its
    shape) is not that of its `numeric_column`: TensorFlow's reshape to
    the column's shape failed in its own words ('Dimension size must be
    evenly divisible by 3'), or, where the batch's numbers divided
    evenly, made other rows of them.

    Raises:
      ValueError: naming the column, its shape and the feature's width.
    """
    for column in self._columns:
      if type(column).__name__ != "NumericColumn":
        continue
      shape = getattr(features.get(column.key), "shape", None)
      if shape is None or isinstance(features[column.key], tf.SparseTensor):
        continue
      shape = tf.TensorShape(shape)
      if shape.rank is None or shape.rank == 0 or \
          not shape[1:].is_fully_defined():
        continue
      width, declared = shape[1:].num_elements(), int(column.shape[0])
      if width != declared:
        raise ValueError(
            f"numeric_column {column.name!r} has shape "
            f"{tuple(column.shape)} ({declared} numbers per example), but "
            f"feature {column.key!r} has {width} per example (shape "
            f"{tuple(shape.as_list())})")

  # -------------------------------------------------------- transformation
  def transform(self, features):
    """The groups of a batch of raw features, and the batch size (int64).

    Returns:
      `({group name: ('sparse', rows, ids, values) | ('dense', x)}, B)`:
      int64 rows and ids with out-of-vocabulary ids dropped and float32
      values; float32 `[B, d]` blocks.
    """
    out, sizes = {}, []

    def dense(name, x):
      x = tf.cast(x, tf.float32)
      sizes.append(tf.shape(x, out_type=tf.int64)[0])
      return ("dense", tf.reshape(x, [-1, self._rows(name)]))

    def sparse(rows, ids, batch, values=None):
      sizes.append(tf.cast(batch, tf.int64))
      return self._sparse(rows, ids, values)

    if self._columns:
      cache = _fc.FeatureTransformationCache(features)
      for column in self._columns:
        if type(column).__name__ == "NumericColumn":
          out[column.name] = dense(
              column.name, column.get_dense_tensor(cache, self._resources))
          continue
        categorical = (column.categorical_column
                       if type(column).__name__ == "IndicatorColumn"
                       else column)
        pair = categorical.get_sparse_tensors(cache, self._resources)
        ids = pair.id_tensor
        values = (None if pair.weight_tensor is None else
                  tf.cast(pair.weight_tensor.values, tf.float32))
        out[column.name] = sparse(ids.indices[:, 0], ids.values,
                                  ids.dense_shape[0], values)
    for name, layer in self._layers.items():
      out[name] = sparse(*_ids_of(layer(_dense_2d(features[name]))))
    for space in self._spaces:
      preprocessed = {}
      for name, spec in space.features.items():
        x = space.preprocessors[name](_dense_2d(features[name]))
        preprocessed[name] = x
        out[name] = (dense(name, x) if spec.output_mode == "float" else
                     sparse(*_ids_of(x)))
      for cross in space.crosses:
        ids = space.crossers[cross.name](
            [preprocessed[n] for n in cross.feature_names])
        out[cross.name] = sparse(*_ids_of(ids))
    return out, sizes[0]

  def _rows(self, name):
    return next(g.rows for g in self.groups if g.name == name)

  @staticmethod
  def _sparse(rows, ids, values=None):
    ids = tf.cast(ids, tf.int64)
    if values is None:
      values = tf.ones_like(ids, tf.float32)
    keep = ids >= 0  # -1: out of vocabulary
    return ("sparse", tf.boolean_mask(tf.cast(rows, tf.int64), keep),
            tf.boolean_mask(ids, keep), tf.boolean_mask(values, keep))


def sdca_columns(rows, ids, values, num_rows):
  """The op's view of a sparse group: each (example, id) once, with the
  values of repeats summed (the op's |x_i|^2 needs them merged). An id
  outside [0, num_rows) is an error (folded into the key, it became
  another example's feature)."""
  tf.debugging.assert_less(
      ids, tf.cast(num_rows, ids.dtype),
      message=f"a feature column gave ids past its {num_rows} weight rows")
  key = rows * num_rows + ids
  unique, index = tf.unique(key)
  summed = tf.math.unsorted_segment_sum(values, index, tf.size(unique))
  return unique // num_rows, unique % num_rows, summed

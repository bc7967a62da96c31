"""`SDCAOptimizer`: builds SDCA training steps from feature dicts.

The TF 2 counterpart of `tf.contrib.linear_optimizer.SDCAOptimizer`: given a
batch of named features (dense tensors, or `tf.SparseTensor`s of int64 ids),
labels and the model's variables per feature, it runs `SdcaModel.minimize`
and `update_weights`. It creates one `SdcaModel` on the first call and reuses
it, so the per-example duals persist across batches.

Example:
  >>> opt = SDCAOptimizer("example_id", symmetric_l2_regularization=1.0)
  >>> variables = {"age": tf.Variable(tf.zeros([1])),
  ...              "city": tf.Variable(tf.zeros([1000]))}
  >>> features = {"example_id": ids, "age": age,            # [B] floats
  ...             "city": city_ids}                          # SparseTensor
  >>> for _ in range(10):
  ...   opt.get_train_step(features, labels, variables)
"""
import tensorflow as tf

from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn, holds_numbers
from tf_sdca.sdca_model import whole_number_ids


def _numbers(value, argument):
  """`value` cast to float32, as before; a dtype that holds no numbers
  (strings) is a ValueError naming `argument` and the dtype, where the
  cast failed with TensorFlow's UnimplementedError naming nothing."""
  value = tf.convert_to_tensor(value)
  if not holds_numbers(value.dtype):
    raise ValueError(f"{argument} must hold numbers, got a "
                     f"{value.dtype.name} tensor")
  return tf.cast(value, tf.float32)


def _feature_ids(ids, argument):
  """A SparseTensor's values as the int64 feature ids (rows of the
  feature's variable), cast as before; strings are a ValueError naming
  `argument`. Float ids must be whole numbers (2.0 is id 2): one that is
  not (1.5, NaN, inf), which the cast cut to another row (1.5 became 1)
  without a word, is an InvalidArgumentError naming `argument`, the id and
  its index in `ids` (`whole_number_ids`)."""
  values = ids.values
  if not holds_numbers(values.dtype):
    raise ValueError(
        f"{argument} must hold integer feature ids (the rows of its "
        f"variable), got {values.dtype.name} values: map strings to ids "
        f"first (e.g. tf.strings.to_hash_bucket_fast or a "
        f"tf.keras.layers.StringLookup)")
  if values.dtype.is_floating:
    return whole_number_ids(values, argument, positions=ids.indices)
  return tf.cast(values, tf.int64)


class SDCAOptimizer:
  """Trains a linear model by SDCA from feature dicts.

  TensorFlow's `get_train_step(columns_to_variables, weight_column_name,
  loss_type, features, targets, global_step)` becomes
  `get_train_step(features, labels, variables, weight_column_name,
  global_step)`: `variables` maps feature names (not feature columns) to
  their variables, and `loss_type` is given here. The first call creates the
  `SdcaModel` (`self.model`, e.g. for `tf.train.Checkpoint(model=opt.model)`
  or `opt.model.regularized_loss(opt.examples(features, labels))`); later
  calls reuse it. It works eagerly and inside `tf.function`.

  Args:
    example_id_column: name of the feature holding unique example ids
      (strings or integers).
    num_loss_partitions: CoCoA+ sigma (number of workers whose updates are
      added; 1 on one machine).
    num_table_shards: hash-table shards of the dual state (default 1).
    symmetric_l1_regularization: l1 >= 0.
    symmetric_l2_regularization: l2 > 0.
    adaptive: adaptive importance sampling of examples.
    loss_type: one of `tf_sdca.ops.LOSSES`.
    **options: tf_sdca's extra `SdcaModel` options (`visit_order`, `seed`,
      `gamma`, `num_inner_iterations`, `num_threads`, `carry_over`: the
      share of each step's rows held back for the next ('auto' by default;
      0 for TensorFlow's semantics), `average_from`: output
      averaging counted in train steps, the variables then holding the
      mean of the iterates after step T0 on; see `SdcaModel`).
  """

  def __init__(self, example_id_column, num_loss_partitions=1,
               num_table_shards=None, symmetric_l1_regularization=0.0,
               symmetric_l2_regularization=1.0, adaptive=False,
               loss_type="logistic_loss", **options):
    self.example_id_column = example_id_column
    self.options = dict(
        loss_type=loss_type,
        symmetric_l1_regularization=symmetric_l1_regularization,
        symmetric_l2_regularization=symmetric_l2_regularization,
        num_loss_partitions=num_loss_partitions,
        num_table_shards=num_table_shards or 1, adaptive=adaptive, **options)
    SdcaModel.check_options(self.options)  # fail early on bad options
    self.model = None
    self._names = None

  @tf.autograph.experimental.do_not_convert
  def examples(self, features, labels, weight_column_name=None):
    """Converts a feature dict to `SdcaModel` examples (sorted by name).

    Useful to evaluate `self.model` (e.g. `regularized_loss`) on a batch
    after the first `get_train_step`, which fixes the feature names.
    """
    if self._names is None:
      raise ValueError("examples() needs the feature names that the first "
                       "get_train_step call fixes")
    if self.example_id_column not in features:
      raise ValueError(f"features has no example id column "
                       f"{self.example_id_column!r}; add one with a unique "
                       "id per example")
    ids = tf.convert_to_tensor(features[self.example_id_column])
    if ids.dtype.is_integer:
      # SdcaModel keys an integer id as its decimal text without building
      # it (~15 ms of a 50k-row step for tf.strings.as_string).
      ids = tf.cast(ids, tf.int64)
    elif ids.dtype != tf.string:
      ids = tf.strings.as_string(ids)
    ids = tf.reshape(ids, [-1])
    labels = tf.reshape(_numbers(labels, "labels"), [-1])
    if weight_column_name is None:
      weights = tf.ones_like(labels)
    else:
      if weight_column_name not in features:
        raise ValueError(f"features has no weight column "
                         f"{weight_column_name!r} (weight_column_name); its "
                         f"keys: {sorted(features)}")
      weights = tf.reshape(_numbers(features[weight_column_name],
                                    f"features[{weight_column_name!r}]"),
                           [-1])
    sparse, dense = [], []
    for name in self._names:
      value = features[name]
      argument = f"features[{name!r}]"
      if isinstance(value, tf.SparseTensor):
        sparse.append(SparseFeatureColumn(
            value.indices[:, 0], _feature_ids(value, argument)))
      elif isinstance(value, tuple):  # (ids SparseTensor, values SparseTensor)
        sparse.append(SparseFeatureColumn(
            value[0].indices[:, 0], _feature_ids(value[0], argument),
            value[1].values))
      else:
        dense.append(_numbers(value, argument))
    return dict(sparse_features=sparse, dense_features=dense,
                example_weights=weights, example_labels=labels,
                example_ids=ids)

  @tf.autograph.experimental.do_not_convert
  def get_train_step(self, features, labels, variables,
                     weight_column_name=None, global_step=None):
    """Runs (or, in a graph, builds) one SDCA step and the weight update.

    Args:
      features: dict of name -> dense `[B]` / `[B, d]` tensor, int64 id
        `tf.SparseTensor` `[B, k]`, or a pair (ids, values) of SparseTensors;
        must contain the example id column.
      labels: `[B]` labels.
      variables: dict of feature name -> `tf.Variable` (or list of Variables
        partitioned along axis 0): rows = ids for sparse features, `d` for
        dense ones.
      weight_column_name: optional feature with example weights.
      global_step: optional step variable, incremented.

    Returns:
      `SdcaModel.update_weights`' grouped op (None eagerly; inside a
      `tf.function`, do not return it).

    Raises:
      ValueError: if `features` lacks the example id column or a feature
        that has variables, or a feature holds strings (each message names
        the feature: `features['city']`).
      tf.errors.InvalidArgumentError: (when run) for bad values, e.g. a
        feature id outside its variable (`sparse_features[0]
        (features['city']) has an id >= ...`) or a float id that is not a
        whole number (`features['city'] has feature id 1.5 at index [3,
        1], ...`; 2.0 is id 2).
    """
    if self._names is None:
      self._names = sorted(variables)
      missing = [n for n in self._names if n not in features]
      if missing:
        raise ValueError(f"features lacks {missing} that have variables")
    examples = self.examples(features, labels, weight_column_name)
    if self.model is None:
      sparse_vars, dense_vars, sparse_names, dense_names = [], [], [], []
      for name in self._names:
        is_sparse = isinstance(features[name], (tf.SparseTensor, tuple))
        (sparse_vars if is_sparse else dense_vars).append(variables[name])
        (sparse_names if is_sparse else dense_names).append(name)
      self.model = SdcaModel(
          None, dict(sparse_features_weights=sparse_vars,
                     dense_features_weights=dense_vars), self.options)
      # Messages about a group name the feature it came from as well.
      self.model._name_groups(sparse_names, dense_names)  # pylint: disable=protected-access
    train_op = self.model.minimize(global_step=global_step,
                                   examples=examples)
    return self.model.update_weights(train_op)

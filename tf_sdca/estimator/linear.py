"""`LinearClassifier` / `LinearRegressor` trained by `LinearSDCA`.

TensorFlow's canned linear estimators with `optimizer=LinearSDCA(...)`, on
tf_sdca's engine: each training step hands the input_fn's batch to one
`tf_sdca.SdcaModel.minimize` and `update_weights` inside a `tf.function`,
exactly TensorFlow's step (so TensorFlow's step counts carry over). The
model is `logits = sum over columns of their weights . features + bias`;
the bias is the weight of a constant-1 feature, regularised like the others,
as TensorFlow's SDCA did. Checkpoints in `model_dir` hold the weights, the
global step and the SDCA state (float64 weights and every example's dual),
so a new estimator on the same `model_dir` continues where the last one
stopped.

  >>> optimizer = LinearSDCA(example_id_column="example_id",
  ...                        symmetric_l2_regularization=1.0)
  >>> classifier = LinearClassifier(
  ...     feature_columns=[tf.feature_column.numeric_column("age")],
  ...     optimizer=optimizer)
  >>> classifier.train(input_fn, steps=100)
  >>> classifier.evaluate(input_fn, steps=1)["auc"]
"""
import inspect
import logging
import numbers
import os
import tempfile
import time
import warnings

import numpy as np
import tensorflow as tf

from tf_sdca import losses
from tf_sdca import model_files
from tf_sdca import options as options_lib
from tf_sdca.estimator import checkpoints
from tf_sdca.estimator import export as export_lib
from tf_sdca.estimator import heads
from tf_sdca.estimator.feature_layer import FeatureLayer, sdca_columns
from tf_sdca.estimator.run_config import RunConfig
from tf_sdca.optimizer import SDCAOptimizer
from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

_LOG = logging.getLogger("tf_sdca.estimator")
_PREFIX = "linear/linear_model/"
BIAS = _PREFIX + "bias_weights"
# Suffix of the example id of a soft label's negative part (see
# `_split_soft_labels`).
_NEGATIVE_PART = "\x1fnegative"


class ModeKeys:
  """The `mode` an input_fn may ask for (TensorFlow's values)."""
  TRAIN = "train"
  EVAL = "eval"
  PREDICT = "infer"


class LinearSDCA:
  """SDCA for the linear estimators (TensorFlow's `LinearSDCA`).

  Pass it as `optimizer=` to `LinearClassifier` / `LinearRegressor`. The
  input_fn's features must hold `example_id_column`: one id (string or
  integer) per example, the same every time the example is seen, unique
  within a batch; SDCA keeps each example's dual variable under it.

  Args:
    example_id_column: name of the feature holding the example ids.
    num_loss_partitions: CoCoA+ sigma, the number of workers whose updates
      are added (1 on one machine).
    num_table_shards: shards of the dual-state hash table (None: 1).
    symmetric_l1_regularization: l1 >= 0.
    symmetric_l2_regularization: l2 > 0.
    adaptive: adaptive example sampling.
    **options: tf_sdca's extra `SdcaModel` options (`visit_order`, `seed`,
      `num_inner_iterations`, `num_threads`, `average_from`, `carry_over`).
      `carry_over` ('auto', the default, or a share in [0, 1)) holds back
      a random share of each training step's rows for the next steps: an
      input_fn that yields the same consecutive batches every epoch then
      needs about the epochs of one batch, not 2x or far more
      (g3doc/sdca_model.md, 'Streaming orders'); the checkpoint keeps the
      held rows. `carry_over=0` trains each step on exactly its batch, as
      TensorFlow's LinearSDCA did.
      `average_from=T0` (None: off) is output averaging counted in training
      steps (the estimator's unit: one `minimize` call per batch, the global
      step): the weights that `predict`, `evaluate`, `export_saved_model`
      and `get_variable_value` see are the mean of the iterates after steps
      T0, T0 + 1, ..., the last (T0 = 0 counts the starting weights), while
      SDCA goes on from the last iterate. The checkpoint keeps the running
      mean and its count, so `train` called again continues it. The `tol`
      gap is the last iterate's (the per-example duals are not averaged).
      One process only.

  Raises:
    ValueError: for bad values (the messages of `tf_sdca.SDCAOptimizer`).
  """

  def __init__(self, example_id_column, num_loss_partitions=1,
               num_table_shards=None, symmetric_l1_regularization=0.0,
               symmetric_l2_regularization=1.0, adaptive=False, **options):
    if not isinstance(example_id_column, str) or not example_id_column:
      raise ValueError(f"example_id_column must be a feature name, got "
                       f"{example_id_column!r}")
    unknown = sorted(set(options) - {"visit_order", "seed",
                                     "num_inner_iterations", "num_threads",
                                     "average_from", "carry_over"})
    if unknown:
      raise ValueError(f"LinearSDCA: unknown options {unknown}")
    # SDCAOptimizer checks every value the SdcaModel will get.
    SDCAOptimizer(example_id_column, num_loss_partitions, num_table_shards,
                  symmetric_l1_regularization, symmetric_l2_regularization,
                  adaptive, **options)
    self.example_id_column = example_id_column
    self.num_loss_partitions = num_loss_partitions
    self.num_table_shards = num_table_shards
    self.symmetric_l1_regularization = symmetric_l1_regularization
    self.symmetric_l2_regularization = symmetric_l2_regularization
    self.adaptive = adaptive
    self.extra_options = dict(options)

  def sdca_options(self, loss_type, seed=None, num_classes=1):
    """The `SdcaModel` options for `loss_type` (with K classes); `seed`
    (RunConfig's tf_random_seed) unless the options name one."""
    options = dict(
        loss_type=loss_type,
        symmetric_l1_regularization=self.symmetric_l1_regularization,
        symmetric_l2_regularization=self.symmetric_l2_regularization,
        num_loss_partitions=self.num_loss_partitions,
        num_table_shards=self.num_table_shards or 1, adaptive=self.adaptive)
    if num_classes > 1:
      options["num_classes"] = num_classes
    if seed is not None:
      options["seed"] = seed
    options.update(self.extra_options)
    return options

  def __repr__(self):
    return (f"LinearSDCA(example_id_column={self.example_id_column!r}, "
            f"symmetric_l1_regularization="
            f"{self.symmetric_l1_regularization}, "
            f"symmetric_l2_regularization="
            f"{self.symmetric_l2_regularization})")


def _partition_sizes(partitioner, rows):
  """Rows of each part: TensorFlow's partitioners name the number of parts
  along axis 0; the first `rows % k` parts get one row more ('div')."""
  if partitioner is None:
    return [rows]
  counts = list(partitioner(shape=tf.TensorShape([rows, 1]),
                            dtype=tf.float32))
  if any(int(c) != 1 for c in counts[1:]):
    raise ValueError(f"partitioner: weights split along axis 0 only, got "
                     f"{counts}")
  k = max(1, min(int(counts[0]), rows))
  base, extra = divmod(rows, k)
  return [base + (1 if i < extra else 0) for i in range(k)]


class _LinearModel(tf.Module):
  """The weights (TensorFlow's names), the global step, the feature layer
  and, once started, the `SdcaModel` over the weights."""

  def __init__(self, layer, partitioner, num_classes=1):
    super().__init__(name="linear")
    self.layer = layer
    # Logits per class: 1 (binary, regression) or K (multiclass); each
    # feature's weights are [rows, width], the bias [width].
    self.width = num_classes
    self.global_step = tf.Variable(tf.constant(0, tf.int64),
                                   trainable=False, name="global_step")
    self.weights = {}
    self.groups = layer.groups
    for group in self.groups:
      name = self.weight_name(group)
      sizes = _partition_sizes(partitioner, group.rows)
      parts = [tf.Variable(tf.zeros([size, self.width]),
                           name=name + (f"/part_{i}" if len(sizes) > 1
                                        else ""))
               for i, size in enumerate(sizes)]
      self.weights[name] = parts[0] if len(parts) == 1 else parts
    self.weights[BIAS] = tf.Variable(tf.zeros([self.width]), name=BIAS)
    self.sdca = None

  @staticmethod
  def weight_name(group):
    return f"{_PREFIX}{group.name}/weights"

  def parts(self, name):
    value = self.weights[name]
    return list(value) if isinstance(value, (list, tuple)) else [value]

  def shapes(self):
    return {name: ([sum(int(p.shape[0]) for p in self.parts(name))]
                   if name != BIAS else []) + [self.width]
            for name in self.weights}

  def assign(self, name, value):
    start = 0
    for part in self.parts(name):
      size = int(part.shape[0])
      part.assign(np.reshape(value[start:start + size], part.shape))
      start += size

  def start_sdca(self, options):
    """Creates the `SdcaModel` over the weights' current values (zeros, or
    warm-started: SDCA then keeps them as an offset, as TensorFlow's did)."""
    sparse = [self.weights[self.weight_name(g)] for g in self.groups
              if g.kind == "sparse"]
    dense = [self.weights[self.weight_name(g)] for g in self.groups
             if g.kind == "dense"] + [self.weights[BIAS]]
    self.sdca = SdcaModel(None, dict(sparse_features_weights=sparse,
                                     dense_features_weights=dense), options)

  def logits(self, transformed, batch):
    """float32 `[B]` logits (`[B, K]` multiclass) from the weights (not the
    SDCA slots): what was trained, written by `update_weights`."""
    if self.width > 1:
      return self._class_logits(transformed, batch)
    z = tf.zeros([batch], tf.float32)
    for group in self.groups:
      block = transformed[group.name]
      parts = self.parts(self.weight_name(group))
      if block[0] == "sparse":
        _, rows, ids, values = block
        # 'div' matches _partition_sizes' split of the rows.
        w = tf.nn.embedding_lookup(parts, ids)[:, 0]
        z += tf.math.unsorted_segment_sum(w * values, rows, batch)
      else:
        w = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
        z += tf.linalg.matvec(block[1], w[:, 0])
    return z + self.weights[BIAS][0]

  def _class_logits(self, transformed, batch):
    z = tf.zeros([batch, self.width], tf.float32)
    for group in self.groups:
      block = transformed[group.name]
      parts = self.parts(self.weight_name(group))
      if block[0] == "sparse":
        _, rows, ids, values = block
        w = tf.nn.embedding_lookup(parts, ids)  # [nnz, K]
        z += tf.math.unsorted_segment_sum(w * values[:, None], rows, batch)
      else:
        w = parts[0] if len(parts) == 1 else tf.concat(parts, axis=0)
        z += tf.matmul(block[1], w)
    return z + self.weights[BIAS]


def _split_soft_labels(sparse, dense, labels, weights, ids, batch):
  """Logistic loss on a label p in (0, 1) is p loss(z, 1) + (1 - p)
  loss(z, 0): such an example enters the op as two, label 1 with weight
  s p (its own id) and label 0 with weight s (1 - p) (its id plus a
  suffix), each keeping its own dual. The op takes labels 0 and 1 only;
  examples with those labels pass unchanged."""
  if ids.dtype != tf.string:  # the negative part's id is the text + suffix
    ids = tf.strings.as_string(ids)
  soft = (labels > 0.0) & (labels < 1.0)
  extra = tf.where(soft)[:, 0]
  n = tf.size(extra, out_type=tf.int64)
  position = tf.tensor_scatter_nd_update(
      tf.fill([batch], tf.constant(-1, tf.int64)), extra[:, None],
      tf.range(n))
  split = []
  for rows, feature_ids, values in sparse:
    p = tf.gather(position, rows)
    copy = p >= 0
    split.append((tf.concat([rows, batch + tf.boolean_mask(p, copy)], 0),
                  tf.concat([feature_ids, tf.boolean_mask(feature_ids, copy)],
                            0),
                  tf.concat([values, tf.boolean_mask(values, copy)], 0)))
  dense = [tf.concat([x, tf.gather(x, extra)], 0) for x in dense]
  negative = tf.gather(weights * (1.0 - labels), extra)
  weights = tf.concat([tf.where(soft, weights * labels, weights), negative],
                      0)
  labels = tf.concat([tf.where(soft, 1.0, labels),
                      tf.zeros([n], tf.float32)], 0)
  ids = tf.concat([ids, tf.gather(ids, extra) + _NEGATIVE_PART], 0)
  return split, dense, labels, weights, ids


class _Input:
  """What an input_fn returned: a `tf.data.Dataset`, or tensors used for
  every step (`constant`)."""

  def __init__(self, result, mode):
    self.mode = mode
    self.dataset = result if isinstance(result, tf.data.Dataset) else None
    self.constant = None if self.dataset is not None else \
        self._element(result)

  def _element(self, element):
    if isinstance(element, dict):
      if self.mode != ModeKeys.PREDICT:
        raise ValueError(f"the input_fn of {self._name()} must return "
                         "(features, labels), got features alone")
      return _tensors(element), None
    if isinstance(element, (tuple, list)) and len(element) == 2 and \
        isinstance(element[0], dict):
      return _tensors(element[0]), (None if element[1] is None else
                                    tf.convert_to_tensor(element[1]))
    raise ValueError(
        f"the input_fn of {self._name()} must return a tf.data.Dataset or "
        f"a (features dict, labels) tuple, got {type(element).__name__}")

  def _name(self):
    return {ModeKeys.TRAIN: "train", ModeKeys.EVAL: "evaluate",
            ModeKeys.PREDICT: "predict"}[self.mode]

  def batches(self):
    if self.dataset is None:
      while True:
        yield self.constant
    for element in self.dataset:
      yield self._element(element)


def _tensors(features):
  return {k: v if isinstance(v, (tf.Tensor, tf.SparseTensor,
                                 tf.RaggedTensor, tf.Variable))
          else tf.convert_to_tensor(v) for k, v in features.items()}


def _call_input_fn(input_fn, mode, config):
  if not callable(input_fn):
    raise ValueError(f"input_fn must be callable, got {input_fn!r}")
  parameters = inspect.signature(input_fn).parameters
  kwargs = {}
  if "mode" in parameters:
    kwargs["mode"] = mode
  if "params" in parameters:
    kwargs["params"] = {}
  if "config" in parameters:
    kwargs["config"] = config
  if "input_context" in parameters:
    kwargs["input_context"] = None
  return _Input(input_fn(**kwargs), mode)


def _check_hooks(hooks, where):
  hooks = list(hooks or [])
  for hook in hooks:
    if isinstance(hook, tf.compat.v1.train.SessionRunHook):
      raise TypeError(
          f"{where}: {type(hook).__name__} is a TF1 SessionRunHook, which "
          "needs a tf.compat.v1 Session; tf_sdca.estimator hooks are "
          "objects with any of begin(), after_step(step, logs) -> stop? "
          "and end() (see g3doc/estimator.md)")
  return hooks


class _LinearEstimator:
  """The estimator calls over a head, feature columns and `LinearSDCA`."""

  def __init__(self, head, feature_columns, model_dir, optimizer, config,
               warm_start_from, partitioner, sparse_combiner):
    if not isinstance(optimizer, LinearSDCA):
      raise ValueError(
          f"{type(self).__name__} of tf_sdca trains by SDCA: optimizer must "
          "be tf_sdca.estimator.LinearSDCA(example_id_column=...), got "
          f"{optimizer!r}")
    if sparse_combiner != "sum":
      raise ValueError(f"sparse_combiner must be 'sum' with LinearSDCA, got "
                       f"{sparse_combiner!r}")
    if config is None:
      config = RunConfig()
    elif not isinstance(config, RunConfig):
      raise ValueError(f"config must be a tf_sdca.estimator.RunConfig, got "
                       f"{type(config).__name__}")
    model_dir = None if model_dir is None else os.fspath(model_dir)
    if model_dir and config.model_dir and \
        os.path.abspath(model_dir) != os.path.abspath(config.model_dir):
      raise ValueError(f"model_dir {model_dir!r} differs from "
                       f"config.model_dir {config.model_dir!r}")
    model_dir = model_dir or config.model_dir
    if model_dir is None:
      model_dir = tempfile.mkdtemp()
      _LOG.warning("Using temporary folder as model directory: %s",
                   model_dir)
    self._model_dir = model_dir
    self._config = config.replace(model_dir=model_dir)
    self._head = head
    self._optimizer = optimizer
    self._layer = FeatureLayer(feature_columns)
    self._partitioner = partitioner
    self._warm_start_from = warm_start_from
    self._model = None
    self._loaded = None  # the checkpoint the weights come from

  # ------------------------------------------------------------ properties
  model_dir = property(lambda self: self._model_dir)
  config = property(lambda self: self._config)
  params = property(lambda self: {})

  def latest_checkpoint(self):
    """The newest checkpoint in `model_dir`, or None."""
    return tf.train.latest_checkpoint(self._model_dir)

  # ------------------------------------------------------------- the model
  def _build(self):
    if self._model is not None:
      return self._model
    model = _LinearModel(self._layer, self._partitioner,
                         getattr(self._head, "n_classes", 1)
                         if self._head.loss_type == "softmax_loss" else 1)
    if self.latest_checkpoint() is None and self._warm_start_from:
      values = checkpoints.warm_start_values(self._warm_start_from,
                                             model.shapes())
      for name, value in values.items():
        model.assign(name, value)
      _LOG.info("Warm-started %d weights from %s", len(values),
                self._warm_start_from)
    model.start_sdca(self._optimizer.sdca_options(
        self._head.loss_type, self._config.tf_random_seed,
        num_classes=model.width))
    self._checkpoint = tf.train.Checkpoint(
        weights=model.weights, global_step=model.global_step,
        sdca=model.sdca)
    self._manager = tf.train.CheckpointManager(
        self._checkpoint, self._model_dir,
        max_to_keep=self._config.keep_checkpoint_max or None,
        keep_checkpoint_every_n_hours=(
            self._config.keep_checkpoint_every_n_hours),
        checkpoint_name="model.ckpt", step_counter=model.global_step)
    self._model = model
    # The steps have no tensor-dependent Python control flow: AutoGraph
    # would only slow their tracing down.
    compile_step = lambda step: tf.function(  # noqa: E731
        tf.autograph.experimental.do_not_convert(step),
        reduce_retracing=True)
    self._train_fn = compile_step(self._train_step)
    self._gap_parts_fn = compile_step(
        lambda features, labels: self._model.sdca._gap_parts(  # pylint: disable=protected-access
            self._examples(features, labels)))
    self._eval_fn = compile_step(self._eval_step)
    self._predict_fn = compile_step(self._predict_step)
    return model

  def _restore(self, path):
    """Loads checkpoint `path` unless the weights already come from it."""
    if path is None or path == self._loaded:
      return
    # (The checkpoint's index read once: its variables' keys and shapes.)
    stored = dict(tf.train.list_variables(path))
    saved = checkpoints.variables(path)
    names = set(saved) - {checkpoints.GLOBAL_STEP}
    if not names:
      raise ValueError(
          f"{path!r} is not a tf_sdca.estimator checkpoint (a TensorFlow 1 "
          "estimator's?): start from its weights with "
          "warm_start_from=<it> and a new model_dir")
    if names != set(self._model.weights):
      raise ValueError(
          f"the checkpoint {path!r} holds the weights {sorted(names)}, this "
          f"estimator has {sorted(self._model.weights)}: its feature "
          "columns differ from those that wrote it")
    # (A column of another size, e.g. hash_bucket_size, met TensorFlow's
    # "incompatible tensor with shape" naming neither the column nor the
    # checkpoint.)
    shapes = self._model.shapes()
    for name, keys in saved.items():
      if name == checkpoints.GLOBAL_STEP:
        continue
      parts = [list(stored[key]) for key in keys]
      saved_shape = ([sum(part[0] for part in parts)] + parts[0][1:]
                     if name != BIAS else parts[0])
      if saved_shape != shapes[name]:
        raise ValueError(
            f"the checkpoint {path!r} holds {name} of shape {saved_shape}, "
            f"this estimator's is {shapes[name]}: its feature column has "
            "another size (e.g. hash_bucket_size) than the one that wrote "
            "it; train in a new model_dir")
    status = self._checkpoint.restore(path)
    if any("_state_meaning" in name for name in stored):
      status.assert_existing_objects_matched()
    else:
      # Written before the model recorded its state's meaning (2026-11-28):
      # everything restores but that record (the weights checked above).
      status.expect_partial()
    self._loaded = path

  def _trained_model(self, checkpoint_path=None):
    model = self._build()
    path = checkpoint_path or self.latest_checkpoint()
    if path is None:
      raise ValueError(f"Could not find trained model in model_dir: "
                       f"{self._model_dir}.")
    self._restore(checkpoints.resolve(path))
    return model

  def _save(self, listeners):
    step = int(self._model.global_step)
    for listener in listeners:
      if hasattr(listener, "before_save"):
        listener.before_save(None, step)
    path = self._manager.save(checkpoint_number=step)
    self._loaded = path
    _LOG.info("Saving checkpoints for %d into %s.", step, path)
    for listener in listeners:
      if hasattr(listener, "after_save"):
        listener.after_save(None, step)
    return path

  # ------------------------------------------------------------- features
  def _check_features(self, features, mode):
    if not isinstance(features, dict):
      raise ValueError(f"features must be a dict, got "
                       f"{type(features).__name__}")
    needed = self._layer.feature_keys
    weight = self._head.weight_column
    known = set(needed) | {self._optimizer.example_id_column}
    if weight is not None:
      known.add(weight)
      if mode != ModeKeys.PREDICT:
        needed = needed | {weight}
    if mode == ModeKeys.TRAIN:
      if self._optimizer.example_id_column not in features:
        raise ValueError(
            f"features has no example id column "
            f"{self._optimizer.example_id_column!r} (LinearSDCA's "
            "example_id_column): SDCA keeps one dual variable per example "
            "under its id; add a feature with a unique string or integer id "
            "per example, the same each time the example is seen")
    missing = sorted(needed - set(features))
    if missing:
      raise ValueError(f"features lacks {missing}, which the feature "
                       f"columns read; it has {sorted(features)}")
    self._layer.check_widths(features)
    unknown = sorted(set(features) - known)
    if unknown:
      raise ValueError(
          f"features has {unknown}, which no feature column reads (nor is "
          "it the example id or weight column); remove it in the input_fn "
          "or add a column for it")
    if mode != ModeKeys.TRAIN:
      # Training's op refuses them; scored, a NaN or inf feature gave NaN
      # probabilities and metrics without a word.
      for name in sorted(needed):
        value = features[name]
        if isinstance(value, tf.SparseTensor):
          value = value.values
        if not (isinstance(value, (tf.Tensor, np.ndarray)) and
                tf.as_dtype(value.dtype).is_floating):
          continue
        flat = np.asarray(value).ravel()
        bad = np.flatnonzero(~np.isfinite(flat))
        if bad.size:
          raise ValueError(
              f"features[{name!r}] has {flat[bad[0]]} (entry {bad[0]}): "
              "features must be finite")

  def _example_ids(self, features):
    ids = features[self._optimizer.example_id_column]
    if isinstance(ids, (tf.SparseTensor, tf.RaggedTensor)):
      raise ValueError("the example id column must be a dense tensor")
    ids = tf.reshape(ids, [-1])
    if ids.dtype.is_integer:  # keyed as their decimal text by SdcaModel
      ids = tf.cast(ids, tf.int64)
    elif ids.dtype != tf.string:
      raise ValueError(f"example ids must be strings or integers, got "
                       f"{ids.dtype.name}")
    return ids

  # ----------------------------------------------------------------- steps
  def _batch(self, features, labels):
    model = self._model
    transformed, batch = model.layer.transform(features)
    y = self._head.labels(labels)
    check = tf.debugging.assert_equal(
        tf.size(y, out_type=tf.int64), batch,
        message="labels and features have different batch sizes")
    with tf.control_dependencies([check]):
      s = self._head.weights(features, batch)
    return transformed, batch, y, s

  def _examples(self, features, labels):
    """The batch as `SdcaModel` examples (the bias a dense column of ones;
    soft logistic labels split into two weighted rows)."""
    model = self._model
    transformed, batch, y, s = self._batch(features, labels)
    sparse, dense = [], []
    for group in model.groups:
      block = transformed[group.name]
      if block[0] == "sparse":
        sparse.append(sdca_columns(*block[1:], group.rows))
      else:
        dense.append(block[1])
    dense.append(tf.ones([batch, 1], tf.float32))  # the bias
    ids = self._example_ids(features)
    if self._head.loss_type == "logistic_loss":
      sparse, dense, y, s, ids = _split_soft_labels(sparse, dense, y, s, ids,
                                                    batch)
    return dict(
        sparse_features=[SparseFeatureColumn(*group) for group in sparse],
        dense_features=dense, example_weights=s, example_labels=y,
        example_ids=ids)

  def _train_step(self, features, labels):
    model = self._model
    examples = self._examples(features, labels)
    s = examples["example_weights"]
    state = model.sdca.minimize(global_step=model.global_step,
                                examples=examples)
    model.sdca.update_weights(state)
    # The state's primal column (1 of 4; K of K + 3) holds s_i loss_i at the
    # weights each row's own coordinate step saw (an online loss of the
    # visited rows): the step's loss for the logs, without another pass.
    return (tf.reduce_sum(tf.cast(state[:, -3], tf.float64)),
            tf.reduce_sum(tf.cast(s, tf.float64)))

  def _eval_step(self, features, labels):
    transformed, batch, y, s = self._batch(features, labels)
    return self._model.logits(transformed, batch), y, s

  def _predict_step(self, features):
    transformed, batch = self._model.layer.transform(features)
    return self._head.predictions(self._model.logits(transformed, batch))

  # ------------------------------------------------------------------ train
  def _restored_model(self, max_steps):
    """(model, its global step) restored from the latest checkpoint, or
    (None, step) when max_steps is already reached (training is skipped, as
    TF's estimators skip it)."""
    model = self._build()
    self._restore(self.latest_checkpoint())
    step = int(model.global_step)
    if max_steps is not None and step >= max_steps:
      _LOG.info("Skipping training since max_steps has already saved.")
      return None, step
    return model, step

  def train(self, input_fn, hooks=None, steps=None, max_steps=None,
            saving_listeners=None, tol=None):
    """Trains: one `SdcaModel.minimize` + `update_weights` per batch.

    Args:
      input_fn: returns a `tf.data.Dataset` of `(features, labels)` (trained
        until it ends, `steps` or `max_steps`) or a `(features, labels)`
        tuple of tensors (used for every step). May take `mode`, `params`,
        `config`.
      hooks: objects with any of `begin()`, `after_step(step, logs)` (a true
        result stops training; `logs` has `loss` and, with `tol`,
        `duality_gap`) and `end()`.
      steps: train this many more steps.
      max_steps: train until the global step reaches this (nothing when it
        already has).
      saving_listeners: objects with any of `begin()`, `before_save(session,
        step)`, `after_save(session, step)`, `end(session, step)`
        (TensorFlow's `CheckpointSaverListener` calls; `session` is None).
      tol: stop once the relative duality gap `(P - D) / P` falls below it;
        checked after roughly every pass over the examples seen so far
        (every step for a tensor input), from the state's per-example
        losses (`SdcaModel`'s estimate, which lags while later batches
        still move the weights, and near the optimum wanders around 0).
        For a tensor input, whose one batch is every example, the gap is
        the exact one (`SdcaModel.duality_gap`: a pass without training
        after every step).

    Returns:
      self.

    Raises:
      ValueError: both `steps` and `max_steps`; a tensor input with none of
        `steps`, `max_steps`, `tol` (it would train forever); features or
        labels the estimator cannot use (before the first step).
      NotImplementedError: a config whose cluster has several workers.
      tf.errors.InvalidArgumentError: a batch with bad values (labels
        outside [0, 1] or `label_vocabulary`, repeated ids, ...), before the
        batch changes anything.
    """
    if steps is not None and max_steps is not None:
      raise ValueError("Can not provide both steps and max_steps.")
    for name, value in (("steps", steps), ("max_steps", max_steps)):
      if value is not None and (not isinstance(value, numbers.Integral) or
                                value <= 0):
        raise ValueError(f"Must specify {name} > 0, given: {value}")
    if tol is not None and not tol > 0:
      raise ValueError(f"tol must be > 0, got {tol!r}")
    hooks = _check_hooks(hooks, "train")
    if self._config.is_distributed:
      options_lib.applies(
          {**{key: self._optimizer.extra_options[key] for key in
              ("average_from", "carry_over", "visit_order", "num_threads")
              if key in self._optimizer.extra_options},
           "num_loss_partitions": self._optimizer.num_loss_partitions},
          options_lib.PROCESSES,
          options_lib.Door("LinearSDCA", "keyword", "step"),
          "a TF_CONFIG cluster")
      return self._train_across_processes(input_fn, hooks, steps, max_steps,
                                          saving_listeners, tol)
    listeners = list(saving_listeners or [])
    if model_files.trained_across_processes(self._model_dir):
      # (It went on from the weights with zero duals: a fresh model's
      # weights after the first step, the trained model thrown away.)
      raise ValueError(
          f"{self._model_dir} was trained across processes (its duals are in "
          "the workers' files under cocoa/): train it further with the same "
          "multi-worker TF_CONFIG; evaluate, predict and export read it in "
          "one process")
    model, step = self._restored_model(max_steps)
    if model is None:
      return self
    last = max_steps if max_steps is not None else (
        step + steps if steps is not None else None)
    source = _call_input_fn(input_fn, ModeKeys.TRAIN, self._config)
    if source.dataset is None and last is None and tol is None:
      raise ValueError(
          "the input_fn returns tensors, which are used for every step: "
          "give steps, max_steps or tol (or return a tf.data.Dataset that "
          "ends)")
    for hook in hooks + listeners:
      if hasattr(hook, "begin"):
        hook.begin()
    saved_step, saved_time = step, time.time()
    rows_since_gap, examples_seen = 0, 0
    every_steps = self._config.save_checkpoints_steps
    every_secs = self._config.save_checkpoints_secs
    watch = losses.ProgressWatch(  # once per pass, with tol
        fixed_batches=not self._optimizer.extra_options.get(
            "carry_over", options_lib.OPTIONS["carry_over"].default),
        loss=self._head.loss_type,
        floor=(losses.STREAMED_GAP_FLOOR if source.dataset is None else
               losses.ESTIMATED_GAP_FLOOR))
    for features, labels in source.batches():
      if last is not None and step >= last:
        break
      self._check_features(features, ModeKeys.TRAIN)
      primal, weight = self._train_fn(features, labels)
      step += 1
      loss = float(primal) / max(float(weight), 1e-300) * \
          (2.0 if self._head.loss_type == "squared_loss" else 1.0)
      logs = {"loss": loss}
      rows_since_gap += int(tf.shape(labels)[0]) if labels.shape.rank else 1
      if tol is not None and rows_since_gap >= examples_seen:
        if source.dataset is None:
          # Tensors: this batch is every example, so the exact gap costs one
          # pass without training. The state's estimate lags the weights by
          # a pass: near the optimum it wandered from -5e-5 to +8e-5 while
          # the exact gap fell below 1e-8 (standardised breast_cancer), and
          # a stop on |estimate| < tol was a coin toss.
          _, gap = self._model.sdca.gap_from_parts(
              self._gap_parts_fn(features, labels).numpy())
        else:
          gap, examples_seen = self._relative_gap()
        rows_since_gap = 0
        logs["duality_gap"] = gap
        slow = watch.update(gap)
        if slow:
          warnings.warn(slow, UserWarning, stacklevel=2)
      if step % self._config.log_step_count_steps == 0:
        _LOG.info("loss = %g, step = %d%s", loss, step,
                  f", duality_gap = {logs['duality_gap']:.3g}"
                  if "duality_gap" in logs else "")
      # Every hook sees every step, even after one asked to stop.
      stop = any([bool(hook.after_step(step, logs)) for hook in hooks
                  if hasattr(hook, "after_step")])
      if "duality_gap" in logs and abs(logs["duality_gap"]) < tol:
        _LOG.info("Stopping at step %d: relative duality gap %.3g < tol "
                  "%g", step, logs["duality_gap"], tol)
        stop = True
      if (every_steps and step - saved_step >= every_steps) or \
          (every_secs and time.time() - saved_time >= every_secs):
        self._save(listeners)
        saved_step, saved_time = step, time.time()
      if stop:
        break
    if step != saved_step or self.latest_checkpoint() is None:
      self._save(listeners)
    for hook in hooks:
      if hasattr(hook, "end"):
        hook.end()
    for listener in listeners:
      if hasattr(listener, "end"):
        listener.end(None, step)
    return self

  def _train_across_processes(self, input_fn, hooks, steps, max_steps,
                              saving_listeners, tol):
    """`train` in one process of a multi-worker `TF_CONFIG` cluster: CoCoA+
    rounds across the processes (`tf_sdca.distributed.train`).

    Every process runs the same script; its input_fn yields this worker's
    rows (a fixed shard, read once to its end). A round is one SDCA pass
    over every worker's rows; `steps` / `max_steps` bound the rounds (the
    global step counts them), `tol` stops at a relative duality gap of the
    whole problem (default 1e-4 when neither bounds them). The chief saves
    the checkpoint; every process ends with the same weights.
    """
    from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
    cluster = self._config.join_cluster()
    if self._warm_start_from:
      raise NotImplementedError(
          "warm_start_from with a multi-worker TF_CONFIG: CoCoA+ rounds start "
          "from zero duals (w = 0); train in one process to warm-start")
    model, step = self._restored_model(max_steps)
    if model is None:
      return self
    rounds = (steps if steps is not None else
              max_steps - step if max_steps is not None else 1000)
    if tol is None and steps is None and max_steps is None:
      tol = 1e-4
    source = _call_input_fn(input_fn, ModeKeys.TRAIN, self._config)
    try:
      rows, rows_error = self._shard_arrays(source), None
    except (ValueError, tf.errors.InvalidArgumentError) as error:
      # Told to the other workers, which waited for this one otherwise.
      rows = dict.fromkeys(("labels", "dense", "indptr", "indices", "values",
                            "weights"))
      rows["num_features"] = sum(group.rows for group in model.groups
                                 if group.kind == "sparse")
      rows_error = error
    l1 = self._optimizer.symmetric_l1_regularization
    l2 = self._optimizer.symmetric_l2_regularization
    for hook in hooks + list(saving_listeners or []):
      if hasattr(hook, "begin"):
        hook.begin()
    result = training.train(
        rows["labels"], dense=rows["dense"], indptr=rows["indptr"],
        indices=rows["indices"], values=rows["values"],
        example_weights=rows["weights"], num_features=rows["num_features"],
        model_dir=self._model_dir, loss=self._head.loss_type, l1=l1, l2=l2,
        max_rounds=step + rounds, tol=tol, seed=int(
            self._config.tf_random_seed or 0),
        resume=step > 0, verbose=0, cluster=cluster,
        num_classes=model.width, rows_error=rows_error)
    # [rows, K] blocks for K > 1 classes (the variables' shapes).
    sparse = losses.shrink_l1(result.sparse_weights, l1, l2)
    dense = losses.shrink_l1(result.dense_weights, l1, l2)
    start = 0
    for group in model.groups:
      if group.kind == "sparse":
        model.assign(self._model.weight_name(group),
                     sparse[start:start + group.rows])
        start += group.rows
    column = 0
    for group in model.groups:
      if group.kind == "dense":
        model.assign(self._model.weight_name(group),
                     dense[column:column + group.rows])
        column += group.rows
    model.assign(BIAS, dense[column:column + 1] if model.width == 1 else
                 dense[column])
    model.global_step.assign(result.rounds)
    for record in result.history[-rounds:]:
      logs = {"loss": record["loss"], "duality_gap": record["duality_gap"]}
      for hook in hooks:
        if hasattr(hook, "after_step"):
          hook.after_step(record["round"], logs)
    _LOG.info("Trained %d CoCoA+ round(s) on %d workers: relative duality "
              "gap %.3g", result.rounds, cluster.size,
              result.history[-1]["duality_gap"] if result.history else
              float("nan"))
    if cluster.is_chief:
      self._save(list(saving_listeners or []))
    # Every worker returns once the chief's checkpoint is written: the
    # others' get_variable_value, evaluate and predict read it (they found
    # no checkpoint yet, or the one before this train).
    cluster.barrier()
    for hook in hooks:
      if hasattr(hook, "end"):
        hook.end()
    for listener in saving_listeners or []:
      if hasattr(listener, "end"):
        listener.end(None, result.rounds)
    return self

  def _shard_arrays(self, source):
    """This worker's rows from its input_fn, read to the end, as the arrays
    of `tf_sdca.distributed.train`: CSR over the sparse groups' weights
    (each group's rows after the previous groups'), dense columns then the
    bias column, labels and example weights."""
    model = self._model
    offsets, total = {}, 0
    for group in model.groups:
      if group.kind == "sparse":
        offsets[group.name] = total
        total += group.rows
    labels, weights, dense_blocks, parts = [], [], [], []
    seen = 0
    for features, batch_labels in source.batches():
      self._check_features(features, ModeKeys.TRAIN)
      transformed, batch, y, s = self._batch(features, batch_labels)
      batch = int(batch)
      rows, ids, values, dense = [], [], [], []
      for group in model.groups:
        block = transformed[group.name]
        if block[0] == "sparse":
          r, i, v = (t.numpy() for t in sdca_columns(*block[1:], group.rows))
          rows.append(r)
          ids.append(i + offsets[group.name])
          values.append(v)
        else:
          dense.append(block[1].numpy())
      dense.append(np.ones((batch, 1), np.float32))  # the bias
      y = y.numpy()
      if self._head.loss_type == "logistic_loss" and \
          ((y > 0) & (y < 1)).any():
        raise ValueError(
            "labels strictly between 0 and 1 (soft labels) are not "
            "supported across processes yet; round them or train in one "
            "process")
      labels.append(y)
      weights.append(s.numpy())
      dense_blocks.append(np.hstack(dense))
      if rows:
        r = np.concatenate(rows)
        parts.append((r + seen, np.concatenate(ids), np.concatenate(values)))
      seen += batch
      if source.dataset is None:
        break  # a tensor input is the whole shard
    if not labels:
      raise ValueError("the input_fn yielded no rows for this worker")
    if parts:
      r, i, v = (np.concatenate(x) for x in zip(*parts))
      order = np.lexsort((i, r))
      r, i, v = r[order], i[order], v[order]
      indptr = np.concatenate([[0], np.cumsum(np.bincount(r, minlength=seen))])
    else:
      indptr, i, v = None, None, None
    return dict(labels=np.concatenate(labels), weights=np.concatenate(weights),
                dense=np.vstack(dense_blocks), indptr=indptr, indices=i,
                values=v, num_features=total)

  def _relative_gap(self):
    """(P - D) / P estimated from the per-example state (it lags the
    weights and may be below zero), and the examples in it."""
    sdca = self._model.sdca
    values = sdca.get_state()["values"].astype(np.float64)
    # primal losses, dual losses, weights: the state's last three columns.
    # Not the exact gap's check (it raised on the estimate's dips below 0,
    # stopping `train(dataset, tol=...)` within ~100 steps).
    _, gap = sdca.gap_from_parts([values[:, c].sum() for c in (-3, -2, -1)],
                                 exact=False)
    return gap, values.shape[0]

  # --------------------------------------------------------------- evaluate
  def evaluate(self, input_fn, steps=None, hooks=None, checkpoint_path=None,
               name=None):
    """TensorFlow's evaluation metrics of the latest checkpoint.

    Args:
      input_fn: a `tf.data.Dataset` of `(features, labels)` (evaluated until
        it ends or `steps` batches) or a `(features, labels)` tuple (one
        batch: repeating it would not change any metric).
      steps: batches to evaluate.
      hooks: not supported (None or empty).
      checkpoint_path: a checkpoint to evaluate instead of the latest.
      name: kept for compatibility.

    Returns:
      dict of metric name to numpy scalar, and `global_step`.
    """
    del name
    if hooks:
      raise NotImplementedError("evaluate: hooks are not supported")
    if steps is not None and steps <= 0:
      raise ValueError(f"Must specify steps > 0, given: {steps}")
    model = self._trained_model(checkpoint_path)
    source = _call_input_fn(input_fn, ModeKeys.EVAL, self._config)
    metrics = self._head.metrics()
    count = steps if source.dataset is not None else 1
    for i, (features, labels) in enumerate(source.batches()):
      if count is not None and i >= count:
        break
      self._check_features(features, ModeKeys.EVAL)
      if labels is None:
        raise ValueError("evaluate needs labels")
      metrics.update(*self._eval_fn(features, labels))
    results = metrics.result()
    results["global_step"] = np.int64(model.global_step.numpy())
    _LOG.info("Evaluation: %s", results)
    return results

  # ---------------------------------------------------------------- predict
  def predict(self, input_fn, predict_keys=None, hooks=None,
              checkpoint_path=None, yield_single_examples=True):
    """Yields TensorFlow's prediction dicts of the latest checkpoint.

    Args:
      input_fn: returns features (a dict of tensors, scored once), a
        `tf.data.Dataset` of feature dicts, or either with labels (ignored).
      predict_keys: the keys to return (default all).
      hooks: not supported (None or empty).
      checkpoint_path: a checkpoint to use instead of the latest.
      yield_single_examples: one dict per example (else per batch).

    Yields:
      dicts of numpy arrays.
    """
    if hooks:
      raise NotImplementedError("predict: hooks are not supported")
    keys = self._head.prediction_keys
    if predict_keys is not None:
      wanted = [predict_keys] if isinstance(predict_keys, str) else \
          list(predict_keys)
      unknown = sorted(set(wanted) - set(keys))
      if unknown:
        raise ValueError(f"predict_keys {unknown} are not among {keys}")
      keys = tuple(k for k in keys if k in wanted)
    self._trained_model(checkpoint_path)
    source = _call_input_fn(input_fn, ModeKeys.PREDICT, self._config)
    for i, (features, _) in enumerate(source.batches()):
      if source.dataset is None and i >= 1:
        break
      self._check_features(features, ModeKeys.PREDICT)
      out = self._predict_fn(features)
      batch = {k: out[k].numpy() for k in keys}
      if not yield_single_examples:
        yield batch
        continue
      for row in range(next(iter(batch.values())).shape[0]):
        yield {k: v[row] for k, v in batch.items()}

  # ------------------------------------------------------------ variables
  def get_variable_names(self):
    """TensorFlow's names of the weights in the latest checkpoint (and
    `global_step`)."""
    return sorted(checkpoints.variables(self._latest_or_raise()))

  def get_variable_value(self, name):
    """The value of weight `name` in the latest checkpoint (a partitioned
    weight whole)."""
    path = self._latest_or_raise()
    names = checkpoints.variables(path)
    if name not in names:
      raise ValueError(f"no variable {name!r} in {path}; it has "
                       f"{sorted(names)}")
    return checkpoints.value(path, names[name])

  def _latest_or_raise(self):
    path = self.latest_checkpoint()
    if path is None:
      raise ValueError(f"Estimator has no checkpoint yet in {self._model_dir}"
                       ": train it first")
    return path

  # ----------------------------------------------------------------- export
  def export_saved_model(self, export_dir_base, serving_input_receiver_fn,
                         assets_extra=None, as_text=False,
                         checkpoint_path=None,
                         experimental_mode=ModeKeys.PREDICT):
    """Writes a SavedModel that scores raw features; returns its path.

    The signatures (`serving_default`, `classification` for the classifier,
    `regression`, `predict`) take what `serving_input_receiver_fn`'s
    receiver tensors take (serialized `tf.Example`s with
    `build_parsing_serving_input_receiver_fn`, raw tensors with
    `build_raw_serving_input_receiver_fn`, or your own function using
    `tf.compat.v1.placeholder`) and return TensorFlow's export outputs. It
    loads with TensorFlow alone (no tf_sdca), e.g. in TF Serving.

    Args:
      export_dir_base: the SavedModel goes to `<export_dir_base>/<time>`.
      serving_input_receiver_fn: returns a `ServingInputReceiver`.
      assets_extra: `{destination: source}` files copied to
        `assets.extra/`.
      as_text: also write `saved_model.pbtxt`.
      checkpoint_path: a checkpoint to export instead of the latest.
      experimental_mode: only `ModeKeys.PREDICT` is supported.

    Returns:
      The export directory (bytes, as TensorFlow returned it).
    """
    if experimental_mode != ModeKeys.PREDICT:
      raise NotImplementedError("export_saved_model exports the PREDICT "
                                "mode only")
    model = self._trained_model(checkpoint_path)
    return export_lib.write_saved_model(
        model, self._head, self._predict_step, serving_input_receiver_fn,
        export_dir_base, assets_extra=assets_extra, as_text=as_text)


def _weight_column_name(weight_column):
  if weight_column is None or isinstance(weight_column, str):
    return weight_column
  key = getattr(weight_column, "key", None)
  if isinstance(key, str):
    return key
  raise ValueError(f"weight_column must be a feature name or a "
                   f"numeric_column, got {weight_column!r}")


def _with_weights(head, weight_column):
  """`head` with the normalizer_fn of a numeric_column `weight_column`."""
  head.weight_normalizer = getattr(weight_column, "normalizer_fn", None)
  return head


def _classifier_head(n_classes, weight_column, label_vocabulary,
                     loss_reduction):
  if isinstance(n_classes, bool) or not isinstance(n_classes,
                                                   numbers.Integral) \
      or n_classes < 2:
    raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
  if n_classes > 2:
    return _with_weights(heads.MultiClassHead(
        n_classes, _weight_column_name(weight_column), label_vocabulary,
        loss_reduction), weight_column)
  return _with_weights(heads.BinaryClassHead(
      _weight_column_name(weight_column), label_vocabulary, loss_reduction),
                       weight_column)


def _regression_head(label_dimension, weight_column, loss_reduction):
  if isinstance(label_dimension, bool) or not isinstance(
      label_dimension, numbers.Integral) or label_dimension < 1:
    raise ValueError(f"label_dimension must be an integer >= 1, got "
                     f"{label_dimension!r}")
  if label_dimension > 1:
    raise NotImplementedError(
        f"label_dimension={label_dimension}: LinearSDCA trains one label per "
        "example (structured output is issue 16)")
  return _with_weights(heads.RegressionHead(
      _weight_column_name(weight_column), loss_reduction), weight_column)


class LinearClassifier(_LinearEstimator):
  """Linear classifier trained by SDCA (TensorFlow's
  `tf.estimator.LinearClassifier` with `LinearSDCA`): the logistic loss for
  two classes, the softmax (multinomial logistic) loss for `n_classes > 2`,
  which TensorFlow's SDCA never trained.

  Args:
    feature_columns: `tf.feature_column` columns (numeric, bucketized,
      categorical with hash bucket / vocabulary list or file / identity,
      weighted categorical, crossed, indicator), dicts of Keras
      preprocessing layers with integer output keyed by feature name, or an
      adapted `keras.utils.FeatureSpace`.
    model_dir: checkpoint directory (a temporary one if None).
    n_classes: number of classes (2: binary; more: softmax, whose weights
      are `[rows, n_classes]` per column and `[n_classes]` for the bias, and
      whose predictions carry TensorFlow's multi-class keys).
    weight_column: feature (or numeric_column) of example weights.
    label_vocabulary: the n_classes label strings (mapped to 0, 1, ...);
      without it labels are numbers: in [0, 1] for two classes
      (probabilities allowed), class ids in [0, n_classes) for more.
    optimizer: a `LinearSDCA`.
    config: a `RunConfig`.
    warm_start_from: a checkpoint, model_dir or `WarmStartSettings` whose
      weights start the training (ignored when model_dir has a checkpoint).
    loss_reduction: how `evaluate`'s `loss` reduces a batch (default
      `sum_over_batch_size`, TensorFlow 2's; `sum` was TensorFlow 1's).
    sparse_combiner: 'sum' (the only combiner SDCA trains).
    partitioner: a TensorFlow partitioner (e.g.
      `tf.compat.v1.fixed_size_partitioner(2)`): each column's weights are
      split along axis 0 into that many variables.

  Raises:
    ValueError: for a bad argument.
  """

  def __init__(self, feature_columns, model_dir=None, n_classes=2,
               weight_column=None, label_vocabulary=None, optimizer=None,
               config=None, warm_start_from=None,
               loss_reduction="sum_over_batch_size", sparse_combiner="sum",
               partitioner=None):
    super().__init__(
        _classifier_head(n_classes, weight_column, label_vocabulary,
                         loss_reduction),
        feature_columns, model_dir, optimizer, config, warm_start_from,
        partitioner, sparse_combiner)


class LinearRegressor(_LinearEstimator):
  """Linear regression trained by SDCA on the squared loss (TensorFlow's
  `tf.estimator.LinearRegressor` with `LinearSDCA`).

  SDCA minimises `sum_i s_i (y_i - z_i)^2 / 2 + l2/2 |w|^2 + l1 |w|_1`;
  `evaluate` reports TensorFlow's `(y - z)^2` losses.

  Args:
    feature_columns, model_dir, weight_column, optimizer, config,
      warm_start_from, loss_reduction, sparse_combiner, partitioner: as for
      `LinearClassifier`.
    label_dimension: 1 (one label per example).
  """

  def __init__(self, feature_columns, model_dir=None, label_dimension=1,
               weight_column=None, optimizer=None, config=None,
               warm_start_from=None, loss_reduction="sum_over_batch_size",
               sparse_combiner="sum", partitioner=None):
    super().__init__(
        _regression_head(label_dimension, weight_column, loss_reduction),
        feature_columns, model_dir, optimizer, config, warm_start_from,
        partitioner, sparse_combiner)


class LinearClassifierV1(LinearClassifier):
  """`tf.compat.v1.estimator.LinearClassifier`'s spelling: `partitioner`
  before `warm_start_from`, and `loss_reduction='sum'` by default."""

  def __init__(self, feature_columns, model_dir=None, n_classes=2,
               weight_column=None, label_vocabulary=None, optimizer=None,
               config=None, partitioner=None, warm_start_from=None,
               loss_reduction="sum", sparse_combiner="sum"):
    super().__init__(feature_columns, model_dir, n_classes, weight_column,
                     label_vocabulary, optimizer, config, warm_start_from,
                     loss_reduction, sparse_combiner, partitioner)


class LinearRegressorV1(LinearRegressor):
  """`tf.compat.v1.estimator.LinearRegressor`'s spelling: `partitioner`
  before `warm_start_from`, and `loss_reduction='sum'` by default."""

  def __init__(self, feature_columns, model_dir=None, label_dimension=1,
               weight_column=None, optimizer=None, config=None,
               partitioner=None, warm_start_from=None, loss_reduction="sum",
               sparse_combiner="sum"):
    super().__init__(feature_columns, model_dir, label_dimension,
                     weight_column, optimizer, config, warm_start_from,
                     loss_reduction, sparse_combiner, partitioner)


# TensorFlow 2's class names.
LinearClassifierV2 = LinearClassifier
LinearRegressorV2 = LinearRegressor

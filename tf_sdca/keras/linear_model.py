"""A linear Keras model trained by SDCA: `tf_sdca.keras.LinearModel`.

Keras habits (`compile`, `fit`, `evaluate`, `predict`, callbacks, `save` /
`keras.models.load_model`, `export`) on a linear model whose training is not
gradient descent but SDCA, which maximises the dual exactly, coordinate by
coordinate, while the weights follow the duals. `fit` on in-memory data
(numpy, scipy sparse, tensors, dicts of them) validates and packs the rows
once and runs each epoch as one `TfSdca>PackedSolve` call, the engine of
`tf_sdca.trainer.InMemorySdca`; `fit` on a `tf.data.Dataset` streams its
batches through `tf_sdca.SdcaModel` (the `TfSdca>Optimizer` op, duals kept by
example id). There is no learning rate; the duality gap, logged after every
epoch, certifies how far the weights are from the optimum and can stop
training (`fit(tol=...)`).

The objective is `SdcaModel`'s: `sum_i s_i loss(w.x_i + b, y_i) +
l2/2 (|w|^2 + b^2) + l1 (|w|_1 + |b|)` with example weights `s_i`
(`sample_weight` times `class_weight`). The bias `b` is the weight of a
constant-1 feature and is regularised like the other weights, as in
TensorFlow's `LinearSDCA` (scikit-learn's `liblinear` with
`intercept_scaling=1` does the same).

Inputs: a numpy array `[n, d]`, a scipy sparse matrix or `tf.SparseTensor`
`[n, d]` (one feature named `"features"`), or a dict of named features:
dense numeric `[n]` / `[n, k]`, sparse numeric `tf.SparseTensor`, or
categorical features listed in `categorical_features` (raw values mapped by
a Keras preprocessing layer, or integer ids). A `tf.data.Dataset` of
`(features, labels[, sample_weight])` batches works too; SDCA keeps one
dual variable per example, so streamed features must be a dict with an
`example_id` feature (unique per example, string or integer); in-memory
data uses the row position when it has none.

Labels: `{0, 1}` for the classification losses, any real number for
`squared` / `absolute`, counts `>= 0` for `poisson`, class ids in
`[0, K)` for `softmax` / `multiclass_hinge`. Outputs `[n, 1]`:
probabilities for `logistic`, expected counts for `poisson`, `w.x + b`
otherwise; `[n, K]` for the multiclass losses (class probabilities for
`softmax`, scores `W^T x + b` for `multiclass_hinge`), whose kernels are
`[size, K]` and bias `[K]`.

Constructor arguments (`LinearModel(...)`):
  loss: 'logistic', 'hinge', 'smooth_hinge', 'squared', 'absolute',
    'poisson', or the multiclass 'softmax' and 'multiclass_hinge' (or the
    op's names, 'logistic_loss', ...).
  l1: L1 regularisation strength, >= 0.
  l2: L2 regularisation strength, > 0.
  use_bias: add a bias (a constant-1 feature, regularised).
  categorical_features: dict `{name: layer or vocabulary size}`: features
    holding categories. A layer (e.g. `keras.layers.Hashing(num_bins=...)`,
    `StringLookup(vocabulary=...)`) maps the raw values to ids in the
    model, so saved and exported models take raw values; an int says the
    feature already holds ids in `[0, size)`.
  example_id: name of the feature with example ids.
  num_loss_partitions: CoCoA+ partitions. `fit` trains one replica, so it
    must be 1 there; larger values are for several replicas each training
    1/num_loss_partitions of the data whose updates are summed (see
    `tf_sdca.SdcaModel`).
  visit_order: order of the coordinate steps (None, the default:
    on in-memory data 'shrinking' for the hinge losses and 'adaptive' for
    the absolute deviation, Poisson, and rows whose norms spread widely
    or a weak l2 for them, `tf_sdca.options.visit_order_for`, else
    'permutation'; 'permutation',
    'uniform', 'cyclic', 'adaptive',
    'shrinking'; see `tf_sdca.sdca_optimizer`), or
    'asdca': accelerated mini-batch SDCA (`InMemorySdca`'s, for the smooth
    losses logistic, squared and smooth_hinge, one thread) on in-memory
    data; a streamed `tf.data` fit refuses it.
  asdca_batch_size, asdca_theta: ASDCA's rows per step and theta (None:
    the paper's), as for `tf_sdca.trainer.InMemorySdca`. Each in-memory
    `fit` starts the accelerated iterate at the shrunk weights.
  hinge_step: the multiclass hinge's block step ('projection', or the
    reference's 'steepest_ascent' / 'near_max_gain'), as for
    `tf_sdca.trainer.InMemorySdca`; in-memory, streamed and
    multi-worker fits.
  seed: seed of the visiting orders.
  gamma: smoothing of the smooth hinge loss.
  num_threads: lock-free threads of each epoch over packed rows (0 or 1:
    one; at most one per 4096 rows and per core, see
    `tf_sdca.trainer.InMemorySdca`); for streamed batches, the op's
    threads reading a batch.
  num_table_shards: shards of the dual-state hash table (streaming).
  num_classes: K (>= 2) for 'softmax' and 'multiclass_hinge' (one
    process); None for the other losses.
  average_from: None, or an epoch T0 >= 0: output averaging, as
    `tf_sdca.trainer.InMemorySdca(average_from=T0)` does it (the
    reference's SDCA with averaging, over Keras epochs), for in-memory
    and streamed fits. After `fit` the kernels and bias (and the SDCA
    state: unshrunk weights, duals) are the mean of the iterates after
    epochs T0, T0 + 1, ..., the last, so that `predict`, `evaluate`,
    `save` and `export` use the average; `last_iterate` gives the last
    epoch's kernels and bias. The logged `loss` and `duality_gap` are the
    average's (a valid certificate: the mean duals are feasible and the
    mean weights are theirs), `last_loss` and `last_duality_gap` the last
    iterate's; validation during `fit` scores the last iterate. T0 =
    epochs leaves the last iterate. A `fit` with `initial_epoch > 0` after
    an averaged one (or after `load_model` of one) goes on from the last
    iterate and continues the same mean (`fit(epochs=4)` then
    `fit(epochs=8, initial_epoch=4)` ends where `fit(epochs=8)` does); a
    `fit` from epoch 0 starts a new mean from the current weights. Kept by
    `get_config` and `save`. Not with a multi-worker strategy.
  momentum: None (the default: 'auto' for in-memory fits where it
    applies, 'adaptive' among them, off for a streamed dataset,
    `visit_order` 'cyclic' or 'asdca', `average_from` and multi-worker
    fits), beta in
    [0, 1) (0: off) or 'auto' (beta 0 to 0.5, chosen from the first 4
    epochs' gaps as `InMemorySdca(momentum='auto')` does): in-memory fits
    start each epoch after a `fit`'s first from the last two epochs'
    points extrapolated, as `tf_sdca.trainer.InMemorySdca(momentum=beta)`
    does (capped to the duals' domains, restarted when the dual objective
    falls; the logged gap and the weights are always an epoch's own
    point): 0.5 about halved the epochs to a given gap on weakly
    regularised data and cost a few on strongly regularised data
    (g3doc/trainer.md). A given beta or 'auto' is refused with
    `visit_order='asdca'`, `average_from`, a streamed `tf.data.Dataset`
    or a multi-worker strategy (whose rounds extrapolate already). Kept
    by `get_config`; a `fit` on the same rows (example ids) continues the
    last `fit`'s extrapolation, from any `initial_epoch` and after `save`
    and `load_model`, as one uninterrupted `fit`.
  carry_over: 'auto' (the default) or a share f in [0, 1) for fits on a
    streamed `tf.data.Dataset`: each step holds back a random f of its
    rows for the next step (`tf_sdca.SdcaModel`'s option; 'auto': f = B /
    (B + 6), B / (B + 4) for the hinge loss, at most 0.8, for B >= 2
    batches an epoch, 0 for one). A
    dataset of the same consecutive batches every epoch otherwise needs
    2-2.5x the epochs of one batch, or far more with many batches; held
    rows bring it to about those of one batch, at ~1.4-2x the time per
    step (g3doc/sdca_model.md, 'Streaming orders'). 0 trains each step on
    exactly its batch, as TensorFlow's SDCA does. In-memory fits visit
    every row in a fresh order each epoch and refuse a share > 0. Kept by
    `get_config`; `save` keeps the held rows.
  second_order: 'auto' (the default), 'on' or 'off': the exact block step
    (Newton on the primal over all rows, then every dual set from it), as
    `tf_sdca.trainer.InMemorySdca(second_order=...)` takes it after each
    epoch of an in-memory fit (logistic, squared, Poisson, softmax; l1 =
    0; at most 1,024 weights d K; 'auto' where SDCA's bound needs more
    than 1,000 passes per factor e: features in natural units at a weak
    l2), and as `tf_sdca.SdcaModel` takes it per batch of a streamed fit
    (dense features). Not with `visit_order='asdca'` or `average_from` in
    memory. Kept by `get_config`.
  **kwargs: `keras.Model` arguments (`name`, ...).

Example:
  >>> import numpy as np
  >>> from tf_sdca.keras import LinearModel
  >>> x = np.random.default_rng(0).normal(size=(500, 4)).astype("float32")
  >>> y = (x[:, 0] + 0.5 * x[:, 1] > 0).astype("float32")
  >>> model = LinearModel(loss="logistic", l2=1.0)
  >>> model.compile(metrics=["auc"])
  >>> history = model.fit(x, y, epochs=20, tol=1e-6, verbose=0)
  >>> probabilities = model.predict(x, verbose=0)
"""
import numbers
import warnings

import keras
import numpy as np
import tensorflow as tf

from tf_sdca import losses
from tf_sdca import options
from tf_sdca.keras import callbacks as callbacks_lib
from tf_sdca.keras import data as data_lib
from tf_sdca.keras import export as export_lib
from tf_sdca.keras import fitting
from tf_sdca.keras import multi_worker
from tf_sdca.keras import saving
from tf_sdca.keras.data import InvalidInputError


def _check_finite(dataset, name):
  """ValueError for an infinite dataset (`.repeat()`): a streamed fit ends
  each epoch on the exact gap, a pass over the whole dataset, and over a
  repeated one (Keras' `.repeat()` with steps_per_epoch) that pass never
  ended."""
  if tf.executing_eagerly() and (
      int(dataset.cardinality()) == tf.data.INFINITE_CARDINALITY):
    raise ValueError(
        f"{name} got an infinite dataset (.repeat()): the exact duality gap "
        f"that ends each epoch is a pass over the whole dataset; give it "
        f"once (without .repeat()) and let epochs= repeat it")


# `fit`'s validation data of 0 rows, which Keras' loop would score as no
# batch: the History would hold no val_ metrics, without a word.
_NO_VALIDATION_ROWS = ("{} has 0 rows: fit {} no val_ metrics. Give it "
                       "rows to validate on, or leave it out")


class _EmptyValidationWarning(keras.callbacks.Callback):
  """Warns (a `UserWarning`, once per fit) at the end of the first epoch
  whose validation was due (`validation_freq`) and logged no val_ metric:
  a validation dataset of unknown size (e.g. filtered) that yielded no
  batch, which Keras scores as nothing, the History then without val_
  metrics (and Keras' only word its warning that the input "ran out of
  data", interrupting a training it does not interrupt). Its size is
  known only once read, after training: a warning, not an error, keeps
  the epochs trained."""

  def __init__(self, validation_freq):
    super().__init__()
    self._freq = validation_freq
    self._warned = False

  def on_epoch_end(self, epoch, logs=None):
    due = ((epoch + 1) % self._freq == 0
           if isinstance(self._freq, numbers.Integral)
           else epoch + 1 in self._freq)
    if self._warned or not due or any(
        k.startswith("val_") for k in (logs or {})):
      return
    self._warned = True
    warnings.warn(_NO_VALIDATION_ROWS.format(
        "validation_data (a dataset of unknown size)", "logs") +
                  f" (epoch {epoch + 1} validated no batch)", UserWarning,
                  stacklevel=2)


def _refuse_callbacks(callbacks):
  """Raises ValueError, before any training, for a callback that sets the
  optimizer's learning rate (SDCA has none: `compile` takes no optimizer;
  they failed after the first epoch with "'NoneType' object has no
  attribute 'learning_rate'") or saves the model to a legacy HDF5 file."""
  for callback in callbacks or []:
    if isinstance(callback, (keras.callbacks.ReduceLROnPlateau,
                             keras.callbacks.LearningRateScheduler)):
      raise ValueError(
          f"{type(callback).__name__}: SDCA has no learning rate (each "
          "coordinate step is exact); leave the callback out")
    if (isinstance(callback, keras.callbacks.ModelCheckpoint) and
        not callback.save_weights_only and
        str(callback.filepath).lower().endswith((".h5", ".hdf5"))):
      # (Refused by `save` too, but only after the first epoch trained.)
      raise ValueError(
          f"ModelCheckpoint({callback.filepath!r}): a legacy HDF5 file "
          "cannot hold the SDCA training state: save to a .keras file")


@keras.saving.register_keras_serializable(package="tf_sdca")
class LinearModel(keras.Model):
  """Linear model for classification, regression or counts, trained by SDCA.

  Minimises `SdcaModel`'s objective `sum_i s_i loss(w.x_i + b, y_i) +
  l2/2 (|w|^2 + b^2) + l1 (|w|_1 + |b|)` on in-memory data (packed once,
  `tf_sdca.trainer.InMemorySdca`'s engine) or a `tf.data.Dataset` with
  example ids (streamed through `SdcaModel`). The inputs, labels, outputs
  and every constructor argument are described in this module's docstring
  (`tf_sdca.keras.linear_model`) and g3doc/keras.md.
  """

  def __init__(self, loss="logistic", l1=0.0, l2=1.0, use_bias=True,
               categorical_features=None, example_id="example_id",
               num_loss_partitions=1, visit_order=None, seed=0,
               gamma=1.0, num_threads=0, num_table_shards=1, num_classes=None,
               average_from=None, asdca_batch_size=8, asdca_theta=None,
               hinge_step="projection", momentum=None,
               carry_over=options.OPTIONS["carry_over"].default,
               second_order=options.OPTIONS["second_order"].default,
               **kwargs):
    super().__init__(**kwargs)
    # The mode (in memory or streamed) is known at fit: the options' domains
    # and combinations are checked here, where each runs at fit.
    self.loss_type, k, given = options.validate(
        loss, dict(l1=l1, l2=l2, visit_order=visit_order, seed=seed,
                   gamma=gamma, num_threads=num_threads,
                   num_loss_partitions=num_loss_partitions,
                   average_from=average_from,
                   asdca_batch_size=asdca_batch_size,
                   asdca_theta=asdca_theta, hinge_step=hinge_step,
                   momentum=momentum, carry_over=carry_over,
                   second_order=second_order),
        None, options.KERAS, num_classes)
    self.carry_over = given["carry_over"]
    self.second_order = given["second_order"]
    self.average_from = given["average_from"]
    self.loss_name = loss
    multiclass = losses.is_multiclass(self.loss_type)
    self.asdca_batch_size = given["asdca_batch_size"]
    self.asdca_theta = given["asdca_theta"]
    self.hinge_step = hinge_step
    self.momentum = given["momentum"]
    # K of a multiclass loss: kernels [size, K], bias [K], outputs [n, K];
    # 1 for the others.
    self.num_classes = int(num_classes) if multiclass else 1
    self.l1 = float(l1)
    self.l2 = float(l2)
    self.use_bias = bool(use_bias)
    self.example_id = str(example_id)
    self.num_loss_partitions = int(num_loss_partitions)
    self.visit_order = visit_order
    self.seed = int(seed)
    self.gamma = float(gamma)
    self.num_threads = int(num_threads)
    self.num_table_shards = int(num_table_shards)
    categorical_features = dict(categorical_features or {})
    for name, spec in categorical_features.items():
      data_lib.vocabulary_size(name, spec)
    self.categorical_features = categorical_features
    self._spec = None  # [(name, kind, size, raw dtype, raw inner shape)]
    self._kernels = {}
    self.bias = None
    self._sdca = None
    # Packed rows, momentum's and the mean's state, from fit to fit.
    self._training = fitting.TrainingState(self)
    # What a tf.train.Checkpoint keeps of the model: the whole store of
    # `save_own_variables` (see `_trackable_children`).
    self._sdca_training = saving.CheckpointRecord(self._checkpoint_bytes,
                                                  self._restore_checkpoint)

  # ------------------------------------------------------------ structure
  def _build_spec(self, spec):
    """Creates the weights for `spec` (one entry per feature, sorted)."""
    if self._spec is not None:
      if [tuple(s[:3]) for s in spec] != [tuple(s[:3]) for s in self._spec]:
        raise InvalidInputError(
            f"the features {[s[:3] for s in spec]} (name, kind, size) differ "
            f"from those the model was built for "
            f"{[s[:3] for s in self._spec]}")
      return
    self._spec = [list(s) for s in spec]
    for name, _, size, _, _ in self._spec:
      self._kernels[name] = self.add_weight(
          shape=(size, self.num_classes), initializer="zeros",
          name=f"kernel_{name}")
    if self.use_bias:
      self.bias = self.add_weight(shape=(self.num_classes,),
                                  initializer="zeros", name="bias")
    self.built = True

  def get_build_config(self):
    return {"spec": self._spec}

  def build_from_config(self, config):
    if config.get("spec"):
      self._build_spec(config["spec"])

  def build(self, input_shape=None):
    """Creates the weights for numeric inputs of these shapes (the batch
    dimension first): `(None, d)` for one input of d numbers (the
    `"features"` a lone array is), `{name: (None, k), ...}` for named
    ones. `fit`, `predict`, `evaluate` and calling the model on data
    (`model(x)`) build it from the data instead, with sparse and
    categorical features too.

    Raises:
      ValueError: without a shape, or for shapes that do not say how to
        build the model (a categorical feature, an unknown width).
    """
    if self._spec is None:
      self._build_spec(data_lib.shapes_spec(
          input_shape, self.categorical_features, self.example_id))

  def get_config(self):
    config = super().get_config()
    config.update(
        loss=self.loss_name, l1=self.l1, l2=self.l2, use_bias=self.use_bias,
        categorical_features=data_lib.serialized_categorical(
            self.categorical_features),
        example_id=self.example_id,
        num_loss_partitions=self.num_loss_partitions,
        visit_order=self.visit_order, seed=self.seed, gamma=self.gamma,
        num_threads=self.num_threads, num_table_shards=self.num_table_shards)
    if self.num_classes > 1:
      config["num_classes"] = self.num_classes
    if self.average_from is not None:
      config["average_from"] = self.average_from
    if self.visit_order == "asdca":
      config.update(asdca_batch_size=self.asdca_batch_size,
                    asdca_theta=self.asdca_theta)
    if self.hinge_step != "projection":
      config["hinge_step"] = self.hinge_step
    if self.momentum is not None:
      config["momentum"] = self.momentum
    if self.carry_over != options.OPTIONS["carry_over"].default:
      config["carry_over"] = self.carry_over
    if self.second_order != options.OPTIONS["second_order"].default:
      config["second_order"] = self.second_order
    return config

  @classmethod
  def from_config(cls, config, custom_objects=None):
    config = dict(config)
    config["categorical_features"] = data_lib.deserialized_categorical(
        config.get("categorical_features", {}), custom_objects)
    return cls(**config)

  # ------------------------------------------------------------- features
  def _transform(self, x):
    return data_lib.transform(x, self._spec, self.categorical_features)

  def _logits(self, features):
    """float32 `w.x + b` `[B]` (`[B, K]` multiclass) at the Keras weights."""
    return data_lib.logits(features, self._spec, self._kernels, self.bias,
                           self.num_classes)

  def _outputs(self, features, logits=None):
    """The model's outputs `[B, 1]` (`[B, K]` multiclass)."""
    y = losses.activation(self.loss_type, self._logits(features)
                          if logits is None else logits)
    return y if self.num_classes > 1 else y[:, None]

  def __call__(self, *args, **kwargs):
    # Keras builds a layer before its first call by `build(input_shape)`,
    # then refuses new weights: the features' kinds, sizes and raw types
    # come from the data, so the model is built from it first.
    inputs = args[0] if args else kwargs.get("inputs")
    if self._spec is None and inputs is not None:
      x = {name: (data_lib.host(value) if isinstance(
          value, (np.ndarray, list, tuple)) else value)
           for name, value in data_lib.as_dict(inputs).items()
           if name != self.example_id}
      self._build_spec(data_lib.feature_spec(x, self.categorical_features))
    return super().__call__(*args, **kwargs)

  def call(self, inputs, training=False):
    """Probabilities (logistic), rates (Poisson) or scores, `[B, 1]`;
    `[B, K]` class probabilities (softmax) or scores (multiclass hinge)."""
    del training
    if self._spec is None:
      x = data_lib.as_dict(inputs)
      self._build_spec(data_lib.feature_spec(
          {k: v for k, v in x.items() if k != self.example_id},
          self.categorical_features))
    return self._outputs(self._transform(inputs))

  # ----------------------------------------------------------------- SDCA
  def _ensure_sdca(self):
    """Creates the `SdcaModel` (eagerly) over the Keras weights."""
    if self._sdca is None:
      self._sdca = self._training.new_sdca(self._spec, self._kernels,
                                           self.bias)

  def _examples(self, features, labels, weights, ids):
    """An `SdcaModel` batch from transformed features."""
    return data_lib.sdca_examples(features, labels, weights, ids, self._spec,
                                  self.bias is not None)

  def _update_metrics(self, y, y_pred, sw, loss):
    self._loss_tracker.update_state(loss, sample_weight=tf.reduce_sum(sw))
    if self._compile_metrics is not None:
      self._compile_metrics.update_state(y[:, None], y_pred, sw)
    return self.get_metrics_result()

  def train_step(self, data):
    if self._training.mode == fitting.PACKED:
      return self._packed_step()
    x, y, sw = data_lib.unpack(data)
    if self.example_id not in x:
      raise data_lib.missing_ids(self.example_id, x)
    features = self._transform(x)
    y_pred = self._outputs(features)
    examples = self._examples(features, y, sw, x[self.example_id])
    state = self._sdca.minimize(examples=examples)
    self._sdca.update_weights(state)
    # The epoch's training weight so far (`callbacks.StreamedWeightCount`).
    self._training.train_weight_tensor().assign_add(
        tf.reduce_sum(tf.cast(sw, tf.float64)))
    # The state's primal column (1 of 4; K of K + 3) is each example's
    # weighted loss at the weights its step started from: the batch's loss,
    # for the progress bar.
    loss = tf.reduce_sum(state[:, -3]) / tf.maximum(tf.reduce_sum(sw),
                                                    1e-30)
    return self._update_metrics(y, y_pred, sw, loss)

  def test_step(self, data):
    # The loss of the model as it predicts: its Keras weights (those SDCA
    # left, or any set since), as `SdcaModel.regularized_loss` sums it.
    x, y, sw = data_lib.unpack(data)
    z = self._logits(self._transform(x))
    labels = tf.cast(y, tf.float64 if self.num_classes == 1 else tf.int64)
    s = tf.cast(sw, tf.float64)
    loss = tf.math.divide_no_nan(
        tf.reduce_sum(s * losses.primal(self.loss_type, tf.cast(
            z, tf.float64), labels, self.gamma)), tf.reduce_sum(s))
    # The regularisation per unit of the training data's weight (0 before
    # any fit), read from a variable when the step runs.
    w = [tf.cast(v, tf.float64) for v in list(self._kernels.values()) +
         ([self.bias] if self.bias is not None else [])]
    loss += tf.math.divide_no_nan(
        self.l1 * tf.add_n([tf.reduce_sum(tf.abs(v)) for v in w]) +
        0.5 * self.l2 * tf.add_n([tf.reduce_sum(tf.square(v)) for v in w]),
        self._training.train_weight_tensor())
    return self._update_metrics(y, self._outputs(None, z), sw,
                                tf.cast(loss, tf.float32))

  def predict_step(self, data):
    x, _, _ = keras.utils.unpack_x_y_sample_weight(data)
    return self(x)

  # ---------------------------------------------------------- packed rows
  def _pack(self, x, y, sample_weight, class_weight, arrays_only=False):
    """Validates in-memory training data (building the model for it) and
    packs its rows once with the state to train from (see
    `tf_sdca.keras.fitting.TrainingState.pack`, which `arrays_only` goes
    to as well).

    Raises:
      InvalidInputError: for mismatched lengths, out-of-domain labels,
        non-finite features, bad weights or repeated ids.
    """
    x, n, labels, weights, ids = data_lib.training_inputs(
        x, y, sample_weight, class_weight, self.loss_type, self.num_classes,
        self.example_id)
    self._build_spec(data_lib.feature_spec(x, self.categorical_features))
    data_lib.check_values(x, self._spec, self.categorical_features)
    ids = data_lib.example_ids(ids, n, self.example_id)
    self._ensure_sdca()
    # Train metrics are computed on all rows after each epoch.
    transform = (self._transform if self._compile_metrics is not None else
                 None)
    return self._training.pack(self._sdca, self._spec, x, n, labels, weights,
                               ids, transform, arrays_only)

  def make_train_function(self, force=False):
    """Keras' traced step, except for an in-memory fit on the engine's
    epochs: each step is then the engine's next epoch, run eagerly (the
    engine trains the next epoch beside the gap of this one, on another
    thread), then the train metrics."""
    if not self._training.on_engine:
      return super().make_train_function(force)

    track = self._loss_tracking()

    def train_function(iterator):
      del iterator  # a step is an epoch over the packed rows
      track(self._training.engine_step(self._sdca))
      return self._packed_metrics()

    self.train_function = train_function
    return train_function

  def _track_last(self, objective):
    """Keras' metrics as its loop leaves them after an epoch that logged
    the float32 `objective`: reset, then the loss tracker given it."""
    tracker = self._loss_tracker
    sums = self._tracker_sums()
    if sums is not None and [m is tracker for m in self.metrics] == [True]:
      # Reset (0) and added to: 0 + objective, in float32 as the
      # variable's add computes it, and a count of 1.
      sums[0].assign(np.float32(0.0) + objective)
      sums[1].assign(1.0)
      return
    self.reset_metrics()
    self._loss_tracking()(tf.constant(objective))

  def _tracker_sums(self):
    """The float32 variables `(total, count)` under Keras' loss tracker
    when it is Keras' Mean of them, else None."""
    tracker = self._loss_tracker
    if (type(tracker) is keras.metrics.Mean and  # pylint: disable=unidiomatic-typecheck
        tracker.dtype == "float32"):
      sums = (tracker.total.value, tracker.count.value)
      if all(isinstance(v, tf.Variable) and v.dtype == tf.float32
             for v in sums):
        return sums
    return None

  def _loss_tracking(self):
    """`objective -> None`: adds a float32 scalar to Keras' loss tracker
    (its `update_state`)."""
    tracker = self._loss_tracker
    # Keras' Mean of one scalar: its update_state adds the value to `total`
    # and 1 to `count`, here as two float32 adds on the TensorFlow
    # variables under them (the same bits; Keras' update_state and even its
    # variables' assign_add take ~10 ops each, a tenth of the ~1 ms Keras
    # spends per epoch on data sets that train in 0.03 ms per epoch).
    sums = self._tracker_sums()
    if sums is not None:

      def add(objective):
        sums[0].assign_add(objective)
        sums[1].assign_add(1.0)
      return add
    return tracker.update_state

  def _packed_step(self):
    """One epoch over the packed rows (the traced `train_step` of an
    in-memory `fit`, `TrainingState.epoch`), then the train metrics."""
    self._loss_tracker.update_state(self._training.epoch(self._sdca))
    return self._packed_metrics()

  def _packed_metrics(self):
    """The train metrics on all packed rows (after an epoch)."""
    metric_inputs = self._training.packed.metric_inputs
    if metric_inputs is not None:
      features, y, sw = metric_inputs
      y_pred = self._outputs(features)
      self._compile_metrics.update_state(y[:, None], y_pred, sw)
    return self.get_metrics_result()

  @property
  def last_iterate(self):
    """After a `fit` with `average_from`: the last epoch's weights as
    `{"kernels": {feature: array}, "bias": array or None}` (shrunk, as the
    model's own); None otherwise."""
    average = self._training.average
    if average is not None and average.installed:
      self._ensure_sdca()  # after load_model, the slots' shapes
    return self._training.last_iterate(self._sdca, self._spec)

  # -------------------------------------------------------------- compile
  def compile(self, metrics=None, weighted_metrics=None, run_eagerly=False,
              steps_per_execution=1, **kwargs):
    """Configures the metrics; there is no optimizer or loss to choose.

    Args:
      metrics: Keras metrics on `(labels, outputs)` ("auc", "accuracy",
        `keras.metrics.BinaryCrossentropy()`, "mse", ...). The outputs are
        probabilities for the logistic loss; for the hinge and smooth hinge
        they are scores w . x + b (the class is their sign), where
        "accuracy" (a 0.5 threshold) and "auc" (probabilities in [0, 1])
        are wrong: use `keras.metrics.BinaryAccuracy(threshold=0.0)` and
        `keras.metrics.AUC(from_logits=True)`.
      weighted_metrics: metrics weighted by the example weights.
      run_eagerly: run steps eagerly (debugging).
      steps_per_execution: steps per compiled call.
      **kwargs: `optimizer` and `loss` are accepted only as None (the model
        trains by SDCA with its own loss); `jit_compile` only as False (the
        op has no XLA kernel).
    """
    for key in ("optimizer", "loss"):
      if kwargs.pop(key, None) is not None:
        raise ValueError(f"LinearModel trains by SDCA on its own loss "
                         f"({self.loss_name!r}): do not pass {key}= to "
                         f"compile()")
    if kwargs.pop("jit_compile", False) not in (False, "auto"):
      raise ValueError("LinearModel cannot be XLA-compiled (jit_compile)")
    super().compile(optimizer=None, loss=None, metrics=metrics,
                    weighted_metrics=weighted_metrics,
                    run_eagerly=run_eagerly,
                    steps_per_execution=steps_per_execution,
                    jit_compile=False, **kwargs)

  def compile_from_config(self, config):
    config = dict(keras.saving.deserialize_keras_object(config))
    for key in ("optimizer", "loss", "loss_weights", "auto_scale_loss"):
      config.pop(key, None)
    self.compile(**config)

  # ----------------------------------------------------------------- data
  def _batches(self, x, y=None, sample_weight=None, batch_size=None,
               targets=True, argument=None):
    """Data to score (evaluate, predict, validation) as batches: in-memory
    data checked (building the model for it) and batched, or a user
    `tf.data.Dataset` (see `_dataset`; `targets`: whether its labels and
    weights are read, not by predict).

    Raises:
      InvalidInputError: for mismatched lengths, non-numeric or out-of-
        domain labels, non-finite features or bad weights; with
        `argument` (the data's name in the message), for 0 rows.
    """
    if isinstance(x, tf.data.Dataset):
      return self._dataset(x, targets=targets)
    x, n, y, sample_weight = data_lib.scoring_inputs(
        x, y, sample_weight, self.loss_type, self.num_classes)
    if argument is not None and n == 0:
      raise data_lib.InvalidInputError(
          _NO_VALIDATION_ROWS.format(argument, "would log"))
    self._build_spec(data_lib.feature_spec(
        {k: v for k, v in x.items() if k != self.example_id},
        self.categorical_features))
    x = data_lib.check_values(x, self._spec, self.categorical_features,
                              for_scoring=True)
    rows, batch, _ = data_lib.scoring_rows(x, n, y, sample_weight,
                                           batch_size)
    return rows.batch(batch)

  def _dataset(self, data, class_weight=None, for_training=False,
               targets=True):
    """A user `tf.data.Dataset`: builds the model from its element spec,
    applies class weights, checks for example ids when training and, when
    its `targets` are read, the shapes of its labels and weights."""
    if targets:
      data_lib.check_dataset_targets(data)
    else:
      data_lib.check_batched(data)
    self._build_spec(data_lib.feature_spec(
        data_lib.dataset_features(data, self.example_id, for_training),
        self.categorical_features))
    return data_lib.class_weighted(data, class_weight) if class_weight else \
        data

  # ------------------------------------------------------------------ fit
  def fit(self, x=None, y=None, batch_size=None, epochs=1, verbose="auto",
          callbacks=None, validation_split=0.0, validation_data=None,
          shuffle=True, class_weight=None, sample_weight=None,
          initial_epoch=0, steps_per_epoch=None, validation_steps=None,
          validation_batch_size=None, validation_freq=1, tol=None):
    """Trains by SDCA; Keras' `fit` with a duality-gap stop.

    In-memory data is validated and packed once, and every epoch is one
    step: one `TfSdca>PackedSolve` call visiting every row (the engine of
    `tf_sdca.trainer.InMemorySdca`, with the same results). A dataset is
    streamed batch by batch through `tf_sdca.SdcaModel`.

    After every epoch the exact duality gap over the training data is
    logged as `duality_gap` (relative: gap / primal objective; for packed
    rows computed by the epoch's call, for a dataset by a pass over it
    without updates), and `loss` becomes the regularised
    objective per unit of example weight at the epoch's end weights
    (`sum s_i loss_i + l1 |w|_1 + l2/2 |w|^2) / sum s_i`). Training stops
    after the first epoch whose gap is below `tol`: the objective is then
    within `tol` (relative) of the optimum. Weights written since the last
    fit (`set_weights`, `EarlyStopping(restore_best_weights=True)`) are not
    trained from (SDCA trains weights and duals as a pair): the fit warns,
    goes on from its training state and replaces them.

    Args:
      x: features (see the module docstring) or a `tf.data.Dataset` of
        `(features, labels[, sample_weight])` batches.
      y: labels (not with a dataset).
      batch_size: rows per batch of in-memory `validation_data` (training
        visits single rows, so it does not change training).
      epochs: maximum number of passes.
      verbose: Keras' progress output ("auto", 0, 1, 2).
      callbacks: Keras callbacks (EarlyStopping, ModelCheckpoint, ...).
      validation_split: fraction of in-memory rows (the last ones) held
        out; ValueError where either part would have 0 rows.
      validation_data: `(x, y[, sample_weight])` or a dataset;
        ValueError for 0 rows (a dataset: of known cardinality 0; one of
        unknown size that yields no batch: a UserWarning at the end of
        the first epoch that validated, `_EmptyValidationWarning`).
      shuffle: unused (Keras compatibility): in-memory rows are visited in
        the order `visit_order` draws every epoch; a dataset in its own.
      class_weight: `{class: weight}` multiplying the example weights.
      sample_weight: `[n]` example weights (>= 0).
      initial_epoch, steps_per_epoch, validation_steps,
      validation_batch_size, validation_freq: as in Keras.
      tol: stop when the relative duality gap is below this.

    Returns:
      A `keras.callbacks.History`.

    Raises:
      InvalidInputError: for bad data: in memory before any step; in a
        streamed batch (a label `class_weight` has no weight for, an
        example id trained before with another label) before that batch
        changes anything.
      TypeError: for `epochs` or `initial_epoch` not an integer (as
        Keras' own `fit`).
      ValueError: for a streamed dataset without example ids.
    """
    for name, count in (("epochs", epochs), ("initial_epoch", initial_epoch)):
      # (Keras' loop takes any int, a bool too, and raises for the rest;
      # the engine's epochs would run 2 for 2.5 and none from 1.5.)
      if not isinstance(count, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {count!r}")
    # (tol=nan or -1 was taken, and never stopped a fit.)
    tol = options.check("tol", tol, options.KERAS)
    _refuse_callbacks(callbacks)
    if self._spec is not None:
      self._ensure_sdca()
      self._training.check_weights(
          self._sdca, "fit goes on from its training state (zero before any "
          "fit), not from the weights set, and replaces them")
    workers = multi_worker.strategy_workers(self.distribute_strategy)
    if workers is not None:
      multi_worker.check_fit(x, y, validation_data, validation_split,
                             callbacks, initial_epoch, steps_per_epoch)
      self._training.check_mode(options.PROCESSES)
      try:
        arrays, rows_error = self._pack(x, y, sample_weight, class_weight,
                                        arrays_only=True), None
      except (ValueError, tf.errors.InvalidArgumentError) as error:
        # Told to the other workers, which waited for this one otherwise.
        arrays, rows_error = None, error
      return self._training.fit_across_processes(
          self._sdca, workers, arrays, epochs, tol, verbose, rows_error,
          None if self._spec is None else sum(
              size for _, kind, size, _, _ in self._spec if kind != "dense"))
    streamed = isinstance(x, tf.data.Dataset)
    if streamed:
      _check_finite(x, "fit")
      if validation_split:  # (ignored without a word; Keras refuses it)
        raise ValueError(
            f"validation_split={validation_split} is only supported for "
            "arrays and tensors, not a tf.data.Dataset: pass "
            "validation_data")
    if isinstance(validation_data, tf.data.Dataset):
      data_lib.check_dataset_targets(validation_data)
      if tf.executing_eagerly() and int(
          validation_data.cardinality()) == 0:  # (unknown: -2)
        raise ValueError(_NO_VALIDATION_ROWS.format(
            "validation_data (a dataset)", "would log"))
    elif validation_data is not None and data_lib.leading_rows(
        keras.utils.unpack_x_y_sample_weight(tuple(validation_data))[0]) == 0:
      # (before the training rows are packed; `_batches` checks it again,
      # for data whose rows are known only once converted)
      raise data_lib.InvalidInputError(
          _NO_VALIDATION_ROWS.format("validation_data", "would log"))
    self._training.check_mode(options.STREAMED if streamed else
                              options.IN_MEMORY)
    if not self.compiled:
      self.compile()
    del shuffle
    if not streamed:
      if y is None:
        raise ValueError("fit needs labels y")
      if validation_split and validation_data is None:
        x, y, sample_weight, validation_data = data_lib.split(
            x, y, sample_weight, validation_split)
      self._training.use_packed(
          self._pack(x, y, sample_weight, class_weight))
      train = None  # (Keras' loop: a step is an epoch over the rows)
      steps_per_epoch = 1
    else:
      if y is not None or sample_weight is not None:
        raise ValueError("with a dataset, labels and weights come from it")
      self._training.leave_packed(self._sdca)
      train = self._dataset(x, class_weight, for_training=True)
    if validation_data is not None and not isinstance(
        validation_data, tf.data.Dataset):
      vx, vy, vsw = keras.utils.unpack_x_y_sample_weight(
          tuple(validation_data))
      validation_data = self._batches(vx, vy, vsw,
                                      validation_batch_size or batch_size,
                                      argument="validation_data")
    self._ensure_sdca()
    if streamed:
      # Keras' step traced once, not twice (`SdcaModel.create_variables`).
      self._sdca.create_variables()
    # The traced step differs between packed rows and streamed batches, and
    # captures one fit's packed rows.
    if not streamed or self._training.mode != fitting.BATCHES:
      self.train_function = None
    # Nothing reads the model between the epochs of a packed fit without
    # callbacks of the user's, validation or compiled metrics (and Keras
    # runs all its epochs: no keras.config.max_epochs cap below them).
    cap = getattr(keras.config, "max_epochs", lambda: None)()
    unread = (not streamed and not callbacks and validation_data is None
              and self._training.packed.metric_inputs is None and
              (not cap or cap >= epochs))
    callbacks = self._training.callbacks(
        self._sdca, train if streamed else None, tol, initial_epoch, epochs,
        callbacks, unread=unread)
    if (isinstance(validation_data, tf.data.Dataset) and
        tf.executing_eagerly() and int(validation_data.cardinality()) ==
        tf.data.UNKNOWN_CARDINALITY):
      # (its emptiness shows only when read, at the first validation)
      callbacks = list(callbacks) + [
          _EmptyValidationWarning(validation_freq)]
    try:
      if (unread and fitting.ONE_GO and
          self._training.writes_at_end and epochs > initial_epoch and
          not self._initial_epoch and len(self.metrics) == 1):
        return self._fit_in_one_go(callbacks, epochs, initial_epoch,
                                   verbose)
      if train is None:
        train = self._training.packed_steps()
      return super().fit(
          train, epochs=epochs, verbose=verbose, callbacks=callbacks,
          validation_data=validation_data, initial_epoch=initial_epoch,
          shuffle=False,
          steps_per_epoch=steps_per_epoch, validation_steps=validation_steps,
          validation_freq=validation_freq)
    except tf.errors.InvalidArgumentError as error:
      # A streamed batch's label without a class weight, or an id reused
      # with another label (which the op names by its own input,
      # example_state_data, one the user never gave).
      clear = (data_lib.streamed_error(error, self.example_id)
               if streamed else None)
      if clear is None:
        raise
      raise clear from error
    finally:
      self._training.end_fit()

  def _fit_in_one_go(self, callbacks, epochs, initial_epoch, verbose):
    """Keras' `fit` loop for a packed fit on the engine's epochs that
    nothing reads between its epochs (no callbacks of the user's,
    validation, compiled metrics): the engine runs its epochs first
    (`TrainingState.engine_epochs`, fused several per op call where it
    can; with Keras' progress bar, `verbose` 'auto', 1 or 2, in runs of
    about `fitting.PROGRESS_SECONDS`), then the callbacks (the gap's
    logger, History, the progress bar) see each epoch's hooks and logs in
    order, as Keras' loop of a step per epoch calls them; the loss tracker
    ends as that loop leaves it (the last epoch's objective). The History,
    weights, duals and printed progress (but its timings) are that loop's,
    bit for bit, without its ~0.4 ms of Keras per epoch and ~6 ms per fit
    (tests/test_keras_one_go.py)."""
    callbacks = keras.callbacks.CallbackList(
        callbacks, add_history=True, add_progbar=verbose != 0,
        verbose=verbose, epochs=epochs, steps=1, model=self)
    self.stop_training = False
    self._eval_epoch_iterator = None
    self.make_train_function()
    callbacks.on_train_begin()
    seconds = None if verbose == 0 else fitting.PROGRESS_SECONDS
    hooks = callbacks_lib.EpochHooks(callbacks)
    logs, index, objective = None, 0, None
    while not self.stop_training:
      objectives = self._training.engine_epochs(self._sdca, seconds)
      for objective in objectives.tolist():
        epoch = initial_epoch + index
        hooks.epoch_begin(epoch)
        # The step's logs (the loss tracker's result after the epoch: its
        # objective), then Keras' epoch logs, which the gap's logger
        # overwrites with the epoch's objective and gap.
        hooks.batch_begin(0)
        hooks.batch_end(0, {"loss": objective})
        logs = {"loss": objective}
        self._training.show_epoch(index)
        index += 1
        hooks.epoch_end(epoch, logs)
        if self.stop_training:
          break
      if seconds is None or not objectives.shape[0]:
        break
    hooks.finish()
    if objective is not None:
      self._track_last(np.float32(objective))
    callbacks.on_train_end(logs=logs)
    return self.history

  def train_on_batch(self, *args, **kwargs):
    """Not available: raises NotImplementedError (it failed inside Keras'
    loop, on a fresh model with "'NoneType' object is not iterable")."""
    del args, kwargs
    raise NotImplementedError(
        f"{self.name}: train_on_batch is not available: SDCA trains a "
        "data set (its duals by row, or by example id for batches streamed "
        "from a dataset); call fit(x, y, epochs=1), or fit on a "
        "tf.data.Dataset of batches with example ids to stream them")

  def save(self, filepath, *args, **kwargs):
    """`keras.Model.save`; a legacy HDF5 file (`.h5`, `.hdf5`) is refused:
    it cannot hold the SDCA training state (Keras' HDF5 writer failed with
    "The truth value of an array ... is ambiguous", a ModelCheckpoint
    after its first epoch's training)."""
    if str(filepath).lower().endswith((".h5", ".hdf5")):
      raise ValueError(
          f"{self.name}: {filepath} is a legacy HDF5 file, which cannot "
          "hold the SDCA training state: save to a .keras file (or "
          "save_weights to a .weights.h5 file)")
    return super().save(filepath, *args, **kwargs)

  def evaluate(self, x=None, y=None, batch_size=None, verbose="auto",
               sample_weight=None, steps=None, callbacks=None,
               return_dict=False, **kwargs):
    """Keras' `evaluate`: the `loss` is the weighted mean loss plus the
    regularisation divided by the training data's total weight (so on the
    training data it equals the training objective), then the compiled
    metrics; at the model's Keras weights (those training left, or any set
    since by `set_weights` or `EarlyStopping(restore_best_weights=True)`),
    as `predict` scores them.

    Raises:
      ValueError: for no rows (an empty array, or a dataset that gives no
        batch): every metric would be undefined (Keras returned `[]`).
    """
    if not self.compiled:
      self.compile()
    # (fit's validation passes the dataset its loop cached.)
    validating = kwargs.get("_use_cached_eval_dataset", False)
    x = self._batches(x, y, sample_weight, batch_size)
    if not validating and int(x.cardinality()) == 0:
      raise _no_rows_to_evaluate()
    logs = super().evaluate(x, verbose=verbose, steps=steps,
                            callbacks=callbacks, return_dict=return_dict,
                            **kwargs)
    # Keras' logs of a loop that saw no batch (a dataset of unknown size,
    # filtered to nothing) are empty: `[]` or `{}`, never a loss.
    if not validating and isinstance(logs, (list, dict)) and not logs:
      raise _no_rows_to_evaluate()
    return logs

  def predict(self, x, batch_size=None, verbose="auto", steps=None,
              callbacks=None):
    """Keras' `predict`: `[n, 1]` probabilities (logistic), rates (Poisson)
    or scores (`[n, K]` multiclass); `[0, 1]` (`[0, K]`) for no rows."""
    data = self._batches(x, batch_size=batch_size, targets=False)
    empty = np.zeros((0, self.num_classes), np.float32)
    if int(data.cardinality()) == 0:
      # (Keras' loop read its outputs of no batch: an UnboundLocalError.)
      return empty
    try:
      return super().predict(data, verbose=verbose, steps=steps,
                             callbacks=callbacks)
    except UnboundLocalError as error:
      # The same for a dataset of unknown size that gave no batch (one
      # filtered to nothing): the loop's `batch_outputs` were never set.
      if "batch_outputs" not in str(error):
        raise
      return empty

  # ---------------------------------------------------------- duality gap
  def duality_gap(self, data=None):
    """Exact objective and relative duality gap over training data.

    Args:
      data: the training data as a batched dataset of `(x, y[, s])` with
        example ids; None uses the last `fit`'s (its packed rows, for
        in-memory data).

    Returns:
      `(objective, relative_gap)`: the regularised objective per unit of
      example weight and `(P(w) - D(alpha)) / P(w)`, of the SDCA training
      state (weights written since by `set_weights` are not its; it warns).
    """
    if isinstance(data, tf.data.Dataset):
      _check_finite(data, "duality_gap")
    self._training.check_weights(
        self._sdca, "duality_gap measures its training state, not the "
        "weights set")
    return self._training.duality_gap(self._sdca, data, self._gap_batch)

  @tf.function(reduce_retracing=True)
  def _gap_batch(self, data):
    x, y, sw = data_lib.unpack(data)
    # (Unchecked: the batches come through this model's own pipeline, as
    # in training, and a streamed fit measures the gap every epoch, where
    # the checks' copy of each batch would add to every epoch.)
    return self._sdca._gap_parts(  # pylint: disable=protected-access
        self._examples(self._transform(x), y, sw, x[self.example_id]))

  def sdca_state(self):
    """The SDCA training state, as `tf_sdca.SdcaModel.get_state()` returns
    it: every example's state row keyed by its id's fingerprint (the dual
    in column 0, float32; in-memory fits' rows included) and the unshrunk
    float64 weights (`slots`: one per feature, then the bias).

    Raises:
      ValueError: before the model has trained or loaded a state.
    """
    return self._training.sdca_state(self._sdca)

  # -------------------------------------------------------- save / export
  def save_own_variables(self, store):
    """Keras weights, then the SDCA state (duals and float64 weights) with
    the options it was trained under (loss, l2, classes), so that training
    resumes where it stopped after `load_model`."""
    super().save_own_variables(store)
    self._training.save(store, self._sdca)

  def set_weights(self, weights):
    """Keras' `set_weights`, all or none: every shape is checked before
    any weight is set (Keras set each weight before it checked the next
    one's shape, so a list refused at the bias left the kernels set).

    Raises:
      ValueError: naming the weight and both shapes, for a weight of
        another shape (Keras' own error for another count of weights).
    """
    variables = self.weights
    if len(weights) == len(variables):
      for i, (v, value) in enumerate(zip(variables, weights)):
        if tuple(np.shape(value)) != tuple(v.shape):
          raise ValueError(
              f"{self.name}.set_weights: weight {i} ({v.path}) has shape "
              f"{tuple(v.shape)}, got {tuple(np.shape(value))}; nothing "
              f"was set")
    super().set_weights(weights)

  def load_own_variables(self, store):
    """Keras weights and the SDCA state of `store`: every part is checked
    before any is set, so that a refused file (a state trained under
    another loss, l2 or number of classes, weights of other shapes, a
    state `SdcaModel.set_state` refuses, e.g. held rows for a model built
    with `carry_over=0`, the mean of the iterates for one built without
    `average_from`) leaves the model's weights and training state as they
    were. A model built but never fitted has the file's state checked
    at load too, on an SdcaModel it keeps only once the state is taken
    (it was checked only at the next fit, which refused it after the
    file's weights were set): refused, it is left at zero weights without
    an SdcaModel, as it was. A file saved before the options were recorded
    loads unchecked.

    Raises:
      ValueError: naming the part (for other options: each option, the
        file's value and the model's).
    """
    saving.check_options(store, self._training.state_meaning(), self.name)
    saving.check_average(store, self.average_from, self.name)
    variables = self._trainable_variables + self._non_trainable_variables
    values = saving.check_weights(store, variables, self.name)
    loaded = saving.load_state(store)
    sdca = self._sdca
    if loaded is not None and self._spec is not None:
      if sdca is None:
        # A model built but never fitted has its state checked here, not
        # at the next fit, on an SdcaModel it keeps only once the state
        # is taken.
        sdca = self._training.check_state(loaded["state"], self._spec,
                                          self._kernels, self.bias)
      else:
        sdca.check_state(loaded["state"])
    if loaded is not None:
      self._sdca = sdca
      self._training.restore(loaded, self._sdca)
    # The weights the model had when saved, after the state (whose restore
    # writes the weights its training left): weights set since that
    # training (set_weights, EarlyStopping(restore_best_weights=True)) were
    # replaced by the last epoch's at load, where predict and evaluate had
    # used them before the save. A fit after the load warns of them, as it
    # would have before.
    for v, value in zip(variables, values):
      v.assign(value)

  # ---------------------------------------------------- tf.train.Checkpoint
  # The children a checkpoint held before `_sdca_training` did (the weights
  # and the SdcaModel, without the packed rows' duals): read from older
  # checkpoints, no longer written.
  _OLDER_CHILDREN = ("_sdca", "bias")

  def _trackable_children(self, save_type="checkpoint", **kwargs):
    """A checkpoint holds `_sdca_training` alone (`saving.CheckpointRecord`:
    the weights and the whole SDCA training state, restored all or none);
    the weights and the SdcaModel were children of their own, which a
    restore set one by one, before the model had built them or its
    SdcaModel only at a fit, and without the duals of in-memory rows. A
    SavedModel (`export`, for serving) holds no training state."""
    children = super()._trackable_children(save_type, **kwargs)
    if save_type == "checkpoint":
      for name in self._OLDER_CHILDREN:
        children.pop(name, None)
    else:
      children.pop("_sdca_training", None)
    return children

  def _lookup_dependency(self, name, cached_dependencies=None):
    """A checkpoint written before `_sdca_training` restores its `_sdca`
    and `bias` into the model's (the SdcaModel's when it is created)."""
    if name in self._OLDER_CHILDREN:
      return getattr(self, name, None)
    return super()._lookup_dependency(name, cached_dependencies)

  def _checkpoint_bytes(self):
    """The store `save_own_variables` writes, and the feature spec, as
    `saving.to_bytes` packs them for `_sdca_training`."""
    store = {}
    self.save_own_variables(store)
    return saving.to_bytes(store, self._spec)

  def _restore_checkpoint(self, data):
    """Takes a checkpoint's `_sdca_training` (`_checkpoint_bytes`): builds
    a model never built from the spec, then loads the store as
    `load_own_variables` does; nothing for a checkpoint of a model never
    built.

    Raises:
      ValueError: naming the part, for a state trained under other options
        (loss, l2, classes), features other than the model's (name, kind,
        size), weights of other shapes or a state `load_own_variables`
        refuses; nothing is set: a model never built stays so (its state
        is checked before the model is built, on an SdcaModel over zero
        weights of the checkpoint's shapes), and a built or trained one
        keeps its weights and state.
    """
    spec, store = saving.from_bytes(data)
    if spec is None:
      if store:  # (spec-less stores are not written)
        raise ValueError(f"{self.name}: the checkpoint's training state has "
                         f"no feature spec")
      return
    saving.check_options(store, self._training.state_meaning(), self.name)
    saving.check_average(store, self.average_from, self.name)
    if self._spec is None:
      k = self.num_classes
      shapes = [(s[2], k) for s in spec] + ([(k,)] if self.use_bias else [])
      saving.check_weights(store, [tf.TensorSpec(shape, name=f"weight {i}")
                                   for i, shape in enumerate(shapes)],
                           self.name)
      loaded = saving.load_state(store)
      if loaded is not None:
        self._training.check_state(loaded["state"], spec)
    self._build_spec(spec)
    self.load_own_variables(store)

  def serving_signature(self):
    """The input signature of raw features (a dict of specs)."""
    return export_lib.serving_signature(self._spec)

  def export(self, filepath, format="tf_saved_model", verbose=True,
             input_signature=None, **kwargs):
    """Writes a SavedModel for serving that scores raw features
    (`tf_sdca.keras.export.export`; `**kwargs`: unused, for Keras)."""
    del kwargs
    export_lib.export(self, filepath, format, verbose, input_signature)


def _no_rows_to_evaluate():
  """evaluate's error for no rows (the CLI's `evaluate` refuses so too)."""
  return ValueError("evaluate: no rows to evaluate (the data gave no batch):"
                    " every metric would be undefined")


# The strategy check under its former name (tests call it).
_strategy_workers = multi_worker.strategy_workers

"""Heads: what a linear estimator does with its logits and labels.

TensorFlow's `BinaryClassHead`, `MultiClassHead` and `RegressionHead`, for
the losses its linear estimators train by SDCA: logistic for a binary
`LinearClassifier`, softmax for `LinearClassifier(n_classes > 2)` (which
TensorFlow's SDCA never trained), squared for `LinearRegressor`. A head checks and converts the labels, names
the SDCA loss, turns logits into TensorFlow's prediction dicts, keeps the
evaluation metrics (TensorFlow's keys and definitions) and says what each
serving signature returns.
"""
import numpy as np
import tensorflow as tf

# Loss reductions, under each spelling TensorFlow had
# (tf.compat.v1.losses.Reduction, tf.keras.losses.Reduction).
_REDUCTIONS = {
    "sum": "sum", "weighted_sum": "sum",
    "sum_over_batch_size": "sum_over_batch_size",
    "weighted_sum_over_batch_size": "sum_over_batch_size",
    "auto": "sum_over_batch_size",
    "mean": "mean", "weighted_mean": "mean",
    "sum_by_nonzero_weights": "sum_by_nonzero_weights",
    "weighted_sum_by_nonzero_weights": "sum_by_nonzero_weights",
}


def loss_reduction(value):
  """The reduction named by `value` (a string or an enum member of
  either TensorFlow spelling).

  Raises:
    ValueError: 'none' or an unknown name.
  """
  name = str(getattr(value, "value", value)).lower()
  if name not in _REDUCTIONS:
    raise ValueError(f"loss_reduction must be one of "
                     f"{sorted(set(_REDUCTIONS))} (not 'none'), got "
                     f"{value!r}")
  return _REDUCTIONS[name]


def reduce_loss(losses, weights, reduction):
  """A batch's training loss as the head reduces it (float64)."""
  weighted = tf.reduce_sum(losses * weights)
  if reduction == "sum":
    return weighted
  if reduction == "sum_over_batch_size":
    return weighted / tf.cast(tf.maximum(tf.size(losses), 1), tf.float64)
  if reduction == "mean":
    return tf.math.divide_no_nan(weighted, tf.reduce_sum(weights))
  nonzero = tf.math.count_nonzero(weights, dtype=tf.float64)
  return tf.math.divide_no_nan(weighted, nonzero)


def _class_predictions(scores, class_names):
  """TensorFlow's class entries of a classifier's prediction dict, for
  float32 per-class scores `[B, K]` (logits, or 0 and the logit)."""
  batch = tf.shape(scores)[0]
  class_ids = tf.argmax(scores, axis=1)[:, None]
  names = tf.constant(class_names)
  return {
      "probabilities": tf.nn.softmax(scores),
      "class_ids": class_ids,
      "classes": tf.gather(names, class_ids),
      "all_class_ids": tf.tile(tf.range(len(class_names))[None, :],
                               [batch, 1]),
      "all_classes": tf.tile(names[None, :], [batch, 1]),
  }


def _assert_each(ok, values, message, name):
  """An Assert that `ok` holds for every entry of `values` (a batch's
  labels or weights); it names the first entry that fails, by its position
  in the batch and its value (the message printed the batch's first five,
  good ones too)."""
  first = tf.argmin(tf.cast(ok, tf.int32))
  template = name.replace("{", "(").replace("}", ")") + "[{}] = {}"
  detail = tf.strings.format(template, (first, tf.gather(values, first)))
  return tf.debugging.Assert(tf.reduce_all(ok), [message + "; got", detail],
                             summarize=1)


class _Head:
  """What the two heads share: the loss reduction, the weights, the batch
  loss and the mean metrics."""

  def __init__(self, weight_column, reduction):
    self.weight_column = weight_column
    self.reduction = loss_reduction(reduction)
    # A numeric_column's normalizer_fn, applied to the weight feature as
    # TensorFlow's heads applied it (it was dropped: the raw weights
    # trained and scored); None for a feature name.
    self.weight_normalizer = None

  def weights(self, features, batch):
    """float32 `[B]` example weights (ones without a weight column)."""
    if self.weight_column is None:
      return tf.ones([batch], tf.float32)
    w = tf.cast(features[self.weight_column], tf.float32)
    if self.weight_normalizer is not None:
      w = tf.cast(self.weight_normalizer(w), tf.float32)
    w = tf.reshape(w, [-1])
    check = _assert_each(
        tf.math.is_finite(w) & (w >= 0.0), w,
        f"weight column {self.weight_column!r} must be finite and >= 0",
        "weights")
    with tf.control_dependencies([check]):
      return tf.identity(w)

  def _set_vocabulary(self, label_vocabulary, n_classes):
    """Checks `label_vocabulary` (None or `n_classes` distinct strings)
    and builds the table mapping each string to its class id."""
    self.vocabulary_table = None
    if label_vocabulary is not None:
      if not isinstance(label_vocabulary, (list, tuple)) or not all(
          isinstance(v, str) for v in label_vocabulary):
        raise ValueError(f"label_vocabulary must be a list or tuple of "
                         f"strings, got {label_vocabulary!r}")
      if len(label_vocabulary) != n_classes or \
          len(set(label_vocabulary)) != n_classes:
        raise ValueError(f"label_vocabulary must hold n_classes = "
                         f"{n_classes} distinct strings, got "
                         f"{list(label_vocabulary)}")
      with tf.init_scope():
        self.vocabulary_table = tf.lookup.StaticHashTable(
            tf.lookup.KeyValueTensorInitializer(
                tf.constant(list(label_vocabulary)),
                tf.range(n_classes, dtype=tf.int64)), default_value=-1)
    self.label_vocabulary = (None if label_vocabulary is None else
                             list(label_vocabulary))
    self.class_names = self.label_vocabulary or [
        str(k) for k in range(n_classes)]

  def _vocabulary_ids(self, labels):
    """int64 class ids of string labels; raises (when run) for a label
    outside `label_vocabulary`."""
    if labels.dtype != tf.string:
      raise ValueError(f"with label_vocabulary the labels must be "
                       f"strings, got {labels.dtype.name}")
    ids = self.vocabulary_table.lookup(labels)
    check = tf.debugging.Assert(
        tf.reduce_all(ids >= 0),
        ["labels must be in label_vocabulary (" +
         ", ".join(self.label_vocabulary) + "); got",
         tf.boolean_mask(labels, ids < 0)], summarize=5)
    with tf.control_dependencies([check]):
      return tf.identity(ids)

  @staticmethod
  def _one_label_per_example(labels, name):
    if labels.shape.rank is not None and labels.shape.rank > 1 and \
        labels.shape[-1] is not None and labels.shape[-1] != 1:
      raise ValueError(f"{name} takes one label per example, got labels of "
                       f"shape {labels.shape}")
    return tf.reshape(labels, [-1])


class BinaryClassHead(_Head):
  """Logistic loss on labels in [0, 1] (or two strings of
  `label_vocabulary`); TensorFlow's binary classifier outputs."""

  loss_type = "logistic_loss"
  prediction_keys = ("logits", "logistic", "probabilities", "class_ids",
                     "classes", "all_class_ids", "all_classes")
  signature_names = ("serving_default", "classification", "regression",
                     "predict")

  def __init__(self, weight_column=None, label_vocabulary=None,
               reduction="sum_over_batch_size"):
    super().__init__(weight_column, reduction)
    self._set_vocabulary(label_vocabulary, 2)

  def labels(self, labels):
    """float32 `[B]` labels in [0, 1]; raises (when run) for labels outside
    [0, 1] or outside `label_vocabulary`."""
    labels = self._one_label_per_example(tf.convert_to_tensor(labels),
                                         "LinearClassifier")
    if self.label_vocabulary is not None:
      return tf.cast(self._vocabulary_ids(labels), tf.float32)
    if labels.dtype == tf.string:
      raise ValueError("the labels are strings: give label_vocabulary "
                       "(LinearClassifier maps its 2 strings to 0 and 1)")
    labels = tf.cast(labels, tf.float32)
    check = _assert_each(
        (labels >= 0.0) & (labels <= 1.0), labels,
        "labels must be in [0, 1] for LinearClassifier(n_classes=2) "
        "(class ids 0 and 1, or probabilities)", "labels")
    with tf.control_dependencies([check]):
      return tf.identity(labels)

  @staticmethod
  def losses(logits, labels):
    """Unweighted sigmoid cross-entropy per example (float64)."""
    z, y = tf.cast(logits, tf.float64), tf.cast(labels, tf.float64)
    return tf.nn.softplus(z) - y * z

  def predictions(self, logits):
    """TensorFlow's dict for float32 logits `[B]`."""
    logits = tf.reshape(logits, [-1, 1])
    two = tf.concat([tf.zeros_like(logits), logits], axis=1)
    return {"logits": logits, "logistic": tf.sigmoid(logits),
            **_class_predictions(two, self.class_names)}

  @staticmethod
  def signature_outputs(predictions):
    """The outputs of each serving signature (TensorFlow's export outputs)."""
    classification = {"classes": predictions["all_classes"],
                      "scores": predictions["probabilities"]}
    return {"serving_default": classification,
            "classification": classification,
            "regression": {"outputs": predictions.get("logistic")},
            "predict": dict(predictions)}

  def metrics(self):
    return _BinaryMetrics(self)


class MultiClassHead(_Head):
  """Softmax (multinomial logistic) loss on class ids in [0, n_classes)
  (or the strings of `label_vocabulary`); TensorFlow's multi-class
  classifier outputs."""

  loss_type = "softmax_loss"
  prediction_keys = ("logits", "probabilities", "class_ids", "classes",
                     "all_class_ids", "all_classes")
  signature_names = ("serving_default", "classification", "predict")

  def __init__(self, n_classes, weight_column=None, label_vocabulary=None,
               reduction="sum_over_batch_size"):
    super().__init__(weight_column, reduction)
    self.n_classes = n_classes
    self._set_vocabulary(label_vocabulary, n_classes)

  def labels(self, labels):
    """float32 `[B]` class ids; raises (when run) for an id that is
    negative, not an integer or >= n_classes, or a string outside
    `label_vocabulary`."""
    labels = self._one_label_per_example(tf.convert_to_tensor(labels),
                                         "LinearClassifier")
    if self.label_vocabulary is not None:
      return tf.cast(self._vocabulary_ids(labels), tf.float32)
    if labels.dtype == tf.string:
      raise ValueError(f"the labels are strings: give label_vocabulary "
                       f"(LinearClassifier maps its {self.n_classes} strings "
                       f"to the class ids 0 ... {self.n_classes - 1})")
    ids = tf.cast(labels, tf.float64)
    check = _assert_each(
        (ids >= 0) & (ids < self.n_classes) & (ids == tf.round(ids)), labels,
        f"labels must be class ids in [0, {self.n_classes}) for "
        f"LinearClassifier(n_classes={self.n_classes})", "labels")
    with tf.control_dependencies([check]):
      return tf.cast(ids, tf.float32)

  @staticmethod
  def losses(logits, labels):
    """Unweighted softmax cross-entropy per example (float64)."""
    return tf.nn.sparse_softmax_cross_entropy_with_logits(
        labels=tf.cast(labels, tf.int64), logits=tf.cast(logits, tf.float64))

  def predictions(self, logits):
    """TensorFlow's dict for float32 logits `[B, n_classes]`."""
    logits = tf.reshape(logits, [-1, self.n_classes])
    return {"logits": logits, **_class_predictions(logits, self.class_names)}

  @staticmethod
  def signature_outputs(predictions):
    """The outputs of each serving signature (TensorFlow's export outputs)."""
    outputs = BinaryClassHead.signature_outputs(predictions)
    del outputs["regression"]  # one score per class: nothing to regress
    return outputs

  def metrics(self):
    return _MultiClassMetrics(self)


class RegressionHead(_Head):
  """Squared loss on one real label per example; TensorFlow's regression
  outputs."""

  loss_type = "squared_loss"
  prediction_keys = ("predictions",)
  signature_names = ("serving_default", "regression", "predict")

  def labels(self, labels):
    labels = tf.convert_to_tensor(labels)
    if labels.dtype == tf.string:
      raise ValueError("LinearRegressor labels must be numbers, got strings")
    labels = tf.cast(self._one_label_per_example(labels, "LinearRegressor"),
                     tf.float32)
    check = _assert_each(tf.math.is_finite(labels), labels,
                         "labels must be finite", "labels")
    with tf.control_dependencies([check]):
      return tf.identity(labels)

  @staticmethod
  def losses(logits, labels):
    """Unweighted squared error per example, (y - z)^2 (float64): the
    head's loss, twice SDCA's squared loss."""
    return tf.square(tf.cast(labels, tf.float64) - tf.cast(logits,
                                                           tf.float64))

  @staticmethod
  def predictions(logits):
    return {"predictions": tf.reshape(logits, [-1, 1])}

  @staticmethod
  def signature_outputs(predictions):
    regression = {"outputs": predictions["predictions"]}
    return {"serving_default": regression, "regression": regression,
            "predict": dict(predictions)}

  def metrics(self):
    return _Metrics(self)


class _Metrics:
  """Running evaluation metrics: `loss` (the mean over batches of each
  batch's reduced loss, as the estimator reported it), `average_loss`
  (weighted mean loss per example), `label/mean`, `prediction/mean`."""

  def __init__(self, head):
    self._head = head
    self._batch_losses = []
    self._sums = np.zeros(4)  # sum w l, sum w, sum w y, sum w prediction

  def _prediction(self, logits):
    return logits

  def update(self, logits, labels, weights):
    losses = self._head.losses(logits, labels)
    w = tf.cast(weights, tf.float64)
    self._batch_losses.append(float(reduce_loss(losses, w,
                                                self._head.reduction)))
    y = tf.cast(labels, tf.float64)
    p = tf.cast(self._prediction(logits), tf.float64)
    self._sums += [float(tf.reduce_sum(w * losses)), float(tf.reduce_sum(w)),
                   float(tf.reduce_sum(w * y)), float(tf.reduce_sum(w * p))]

  def result(self):
    if not self._batch_losses:
      raise ValueError("evaluate: the input_fn gave no batch")
    total_loss, weight, label, prediction = self._sums
    mean = lambda x: np.float32(x / weight if weight else np.nan)  # noqa
    return {"loss": np.float32(np.mean(self._batch_losses)),
            "average_loss": mean(total_loss), "label/mean": mean(label),
            "prediction/mean": mean(prediction)}


class _BinaryMetrics(_Metrics):
  """`_Metrics` plus accuracy, precision, recall (of the class ids), the
  ROC and PR AUCs (of the probabilities; Keras' 200-threshold
  interpolation, as TensorFlow's head) and `accuracy_baseline`."""

  def __init__(self, head):
    super().__init__(head)
    import keras  # pylint: disable=import-outside-toplevel
    self._keras = dict(
        accuracy=keras.metrics.Accuracy(), precision=keras.metrics.Precision(),
        recall=keras.metrics.Recall(), auc=keras.metrics.AUC(),
        auc_precision_recall=keras.metrics.AUC(curve="PR"))

  def _prediction(self, logits):
    return tf.sigmoid(tf.cast(logits, tf.float64))

  def update(self, logits, labels, weights):
    super().update(logits, labels, weights)
    class_ids = tf.cast(logits > 0, tf.float32)
    probabilities = tf.sigmoid(tf.cast(logits, tf.float32))
    for name, metric in self._keras.items():
      predicted = class_ids if name in ("accuracy", "precision",
                                        "recall") else probabilities
      metric.update_state(labels, predicted, sample_weight=weights)

  def result(self):
    out = super().result()
    for name, metric in self._keras.items():
      out[name] = np.float32(metric.result())
    label_mean = float(out["label/mean"])
    out["accuracy_baseline"] = np.float32(max(label_mean, 1.0 - label_mean))
    return out


class _MultiClassMetrics:
  """TensorFlow's multi-class head metrics: `loss` (the mean over batches
  of each batch's reduced loss), `average_loss` (weighted mean
  cross-entropy per example) and `accuracy` (weighted, of the argmax
  class)."""

  def __init__(self, head):
    self._head = head
    self._batch_losses = []
    self._sums = np.zeros(3)  # sum w l, sum w, sum w [argmax == label]

  def update(self, logits, labels, weights):
    losses = self._head.losses(logits, labels)
    w = tf.cast(weights, tf.float64)
    self._batch_losses.append(float(reduce_loss(losses, w,
                                                self._head.reduction)))
    hit = tf.cast(tf.equal(tf.argmax(logits, axis=1),
                           tf.cast(labels, tf.int64)), tf.float64)
    self._sums += [float(tf.reduce_sum(w * losses)), float(tf.reduce_sum(w)),
                   float(tf.reduce_sum(w * hit))]

  def result(self):
    if not self._batch_losses:
      raise ValueError("evaluate: the input_fn gave no batch")
    total_loss, weight, hits = self._sums
    mean = lambda x: np.float32(x / weight if weight else np.nan)  # noqa
    return {"loss": np.float32(np.mean(self._batch_losses)),
            "average_loss": mean(total_loss), "accuracy": mean(hits)}

"""Serving exports of `tf_sdca.keras.LinearModel`: `export` and its input
signature.

A model is exported as a SavedModel whose endpoint `serve` scores raw
features (categorical ones before their preprocessing layers; no example
id), so that serving needs TensorFlow only, not tf_sdca.
"""
import keras
import tensorflow as tf


def serving_signature(spec):
  """The input signature of raw features (a dict of specs) of a model
  built for `spec` (its `(name, kind, size, raw dtype, raw inner shape)`
  per feature; None when it is not built).

  Raises:
    ValueError: when the model is not built.
  """
  if spec is None:
    raise ValueError("the model is not built: fit or load it first")
  signature = {}
  for name, kind, _, dtype, inner in spec:
    shape = [None] + list(inner)
    if kind == "sparse":
      signature[name] = tf.SparseTensorSpec(shape, tf.float32)
    else:
      signature[name] = tf.TensorSpec(shape, tf.as_dtype(dtype), name=name)
  return signature


# `format` is Keras' name for the argument.
def export(model, filepath, format="tf_saved_model", verbose=True,  # pylint: disable=redefined-builtin
           input_signature=None):
  """Writes a SavedModel for serving that scores raw features.

  The endpoint `serve` (also the `serving_default` signature when every
  feature is dense) takes a dict of the raw features (categorical ones
  before their preprocessing layers; no example id) and returns the
  model's `[n, 1]` outputs (`[n, K]` multiclass). Loading needs TensorFlow
  only, not tf_sdca.

  Args:
    model: the `LinearModel` to export.
    filepath: directory to write.
    format: "tf_saved_model" (the only one supported).
    verbose: print a summary of the endpoint.
    input_signature: override of `model.serving_signature()`.

  Raises:
    ValueError: for another format, or a model not built.
  """
  if format != "tf_saved_model":
    raise ValueError(f"LinearModel exports tf_saved_model only, got "
                     f"{format!r}")
  signature = input_signature or model.serving_signature()
  padded = padding_of(model._spec)  # pylint: disable=protected-access

  def serve(inputs):
    # A multi-valued categorical feature comes as a dense [n, k] tensor,
    # short rows padded: the padding is no value (it went through the
    # lookup as an out-of-vocabulary value and added that weight: a row of
    # one tag scored 0.61 for 0.39).
    inputs = dict(inputs)
    for name, pad in padded.items():
      if name in inputs and isinstance(inputs[name], tf.Tensor):
        inputs[name] = tf.RaggedTensor.from_tensor(inputs[name], padding=pad)
    return model(inputs)

  archive = keras.export.ExportArchive()
  archive.track(model)
  # A tf.function with its signature: Keras' `input_signature=` takes
  # dense specs only (a sparse feature's SparseTensorSpec was a TypeError).
  archive.add_endpoint("serve", tf.function(serve,
                                            input_signature=[signature]))
  archive.write_out(filepath, verbose=verbose)


def padding_of(spec):
  """{name: padding value} of the multi-valued categorical features of
  `spec` (several values per example: served as a dense `[n, k]` tensor
  whose short rows are padded with '' (strings) or -1 (integers))."""
  padded = {}
  for name, kind, _, dtype, inner in spec or ():
    inner = list(inner)
    if kind == "categorical" and inner and (inner[0] is None or
                                            inner[0] > 1):
      padded[name] = "" if tf.as_dtype(dtype) == tf.string else -1
  return padded

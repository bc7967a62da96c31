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
  archive = keras.export.ExportArchive()
  archive.track(model)
  archive.add_endpoint("serve", lambda inputs: model(inputs),
                       input_signature=[signature])
  archive.write_out(filepath, verbose=verbose)

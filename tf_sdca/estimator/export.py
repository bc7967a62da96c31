"""Serving: receivers of raw inputs and the SavedModel of an estimator.

`tf.estimator.export`'s receiver functions for TF 2: a
`serving_input_receiver_fn` returns a `ServingInputReceiver` built from
`tf.compat.v1.placeholder`s (the receiver tensors, what a client sends) and
the features computed from them. `write_saved_model` traces it in a TF1-style
graph (`tf.compat.v1.wrap_function`, where placeholders exist), appends the
model (feature columns, weights, head), keeps the part from the receiver
tensors to the outputs (`prune`), and saves it with `tf.saved_model.save` as
TensorFlow's signatures:

- classifier: `serving_default` and `classification` (`classes`, `scores`:
  `[B, 2]` class names and probabilities), `regression` (`outputs`: the
  probability of class 1), `predict` (every prediction key);
- regressor: `serving_default` and `regression` (`outputs`), `predict`.

When the receiver is one string tensor (serialized `tf.Example`s, as
`build_parsing_serving_input_receiver_fn` makes), `classification` /
`regression` (and `serving_default`) take it as `inputs` and carry the
`tensorflow/serving/classify` / `regress` method names, so TF Serving's
Classify and Regress APIs serve them as they served TensorFlow's exports;
otherwise every signature takes the receiver tensors by name.
"""
import collections
import os
import time

import tensorflow as tf

_CLASSIFY = "tensorflow/serving/classify"
_REGRESS = "tensorflow/serving/regress"


class ServingInputReceiver(
    collections.namedtuple("ServingInputReceiver",
                           ["features", "receiver_tensors",
                            "receiver_tensors_alternatives"])):
  """What a `serving_input_receiver_fn` returns (TensorFlow's class).

  Args:
    features: dict of feature name to `Tensor` / `SparseTensor` (a single
      tensor becomes `{'feature': tensor}`).
    receiver_tensors: the placeholders clients feed: a dict, or one tensor
      (named `input`).
    receiver_tensors_alternatives: not supported (None).
  """

  def __new__(cls, features, receiver_tensors,
              receiver_tensors_alternatives=None):
    if receiver_tensors_alternatives:
      raise NotImplementedError("receiver_tensors_alternatives is not "
                                "supported")
    if not isinstance(features, dict):
      features = {"feature": features}
    if not isinstance(receiver_tensors, dict):
      receiver_tensors = {"input": receiver_tensors}
    if not receiver_tensors:
      raise ValueError("receiver_tensors must not be empty")
    for name, tensor in receiver_tensors.items():
      if not isinstance(tensor, tf.Tensor):
        raise ValueError(f"receiver_tensors[{name!r}] must be a dense "
                         f"Tensor (a signature input), got {tensor!r}")
    return super().__new__(cls, features, receiver_tensors, None)


def build_parsing_serving_input_receiver_fn(feature_spec,
                                            default_batch_size=None):
  """A receiver of serialized `tf.Example`s (`examples`) parsed with
  `feature_spec`, e.g. `tf.feature_column.make_parse_example_spec(
  columns)`."""

  def serving_input_receiver_fn():
    examples = tf.compat.v1.placeholder(
        tf.string, [default_batch_size], name="input_example_tensor")
    features = tf.io.parse_example(examples, feature_spec)
    return ServingInputReceiver(features, {"examples": examples})

  return serving_input_receiver_fn


def build_raw_serving_input_receiver_fn(features, default_batch_size=None):
  """A receiver of raw tensors shaped like `features` (a dict of tensors or
  `tf.TensorSpec`s; the first dimension is the batch)."""

  def serving_input_receiver_fn():
    receivers = {}
    for name, value in features.items():
      shape = tf.TensorShape(value.shape)
      shape = tf.TensorShape([default_batch_size]).concatenate(shape[1:]) \
          if shape.rank else shape
      receivers[name] = tf.compat.v1.placeholder(value.dtype, shape,
                                                 name=name)
    return ServingInputReceiver(dict(receivers), receivers)

  return serving_input_receiver_fn


class _Served(tf.Module):
  """What the SavedModel keeps: the weights, the feature columns' tables
  and Keras layers, the label vocabulary (not the SDCA duals)."""


def write_saved_model(model, head, predict, serving_input_receiver_fn,
                      export_dir_base, assets_extra=None, as_text=False):
  """Writes the SavedModel of `predict` (features -> prediction dict).

  Returns:
    The export directory, `<export_dir_base>/<seconds since the epoch>`,
    as bytes.
  """
  traced = {}

  def serving_graph():
    receiver = serving_input_receiver_fn()
    if not isinstance(receiver, ServingInputReceiver):
      raise ValueError(f"serving_input_receiver_fn must return a "
                       f"ServingInputReceiver, got {type(receiver).__name__}")
    traced["inputs"] = receiver.receiver_tensors
    traced["outputs"] = predict(receiver.features)

  graph_fn = tf.compat.v1.wrap_function(serving_graph, [])
  names = sorted(traced["inputs"])
  graph = graph_fn.graph
  inputs = [graph.get_tensor_by_name(traced["inputs"][n].name)
            for n in names]
  outputs = {k: graph.get_tensor_by_name(v.name)
             for k, v in traced["outputs"].items()}
  scoring = graph_fn.prune(feeds=inputs, fetches=outputs)
  specs = [tf.TensorSpec(t.shape, t.dtype, name=n)
           for n, t in zip(names, inputs)]
  # TF Serving's Classify / Regress take one string tensor named `inputs`.
  examples = len(specs) == 1 and specs[0].dtype == tf.string

  served = _Served()
  served.weights = dict(model.weights)
  served.layer = model.layer
  served.head_table = getattr(head, "vocabulary_table", None)
  served.scoring = scoring
  signatures, methods = {}, {}
  for signature, selected in head.signature_outputs(
      {k: k for k in outputs}).items():
    by_example = examples and signature != "predict"
    arg_specs = [tf.TensorSpec(specs[0].shape, tf.string, name="inputs")] \
        if by_example else specs
    signatures[signature] = _signature(scoring, selected, arg_specs)
    if by_example:
      methods[signature] = _REGRESS if "outputs" in selected else _CLASSIFY

  export_dir = _fresh_directory(export_dir_base)
  staging = export_dir + ".tmp"
  tf.saved_model.save(served, staging, signatures=signatures)
  _set_methods(staging, methods, as_text)
  if assets_extra:
    extra = os.path.join(staging, "assets.extra")
    for destination, source in assets_extra.items():
      target = os.path.join(extra, destination)
      tf.io.gfile.makedirs(os.path.dirname(target))
      tf.io.gfile.copy(source, target, overwrite=True)
  tf.io.gfile.rename(staging, export_dir)
  return export_dir.encode()


def _signature(scoring, selected, specs):
  """A signature function: the inputs `specs` (in the receiver's order),
  the outputs `selected` ({output name: prediction key})."""

  @tf.function(input_signature=specs)
  def signature(*args):
    out = scoring(*args)
    return {name: out[key] for name, key in selected.items()}

  return signature


def _fresh_directory(base):
  base = os.fspath(base)
  if isinstance(base, bytes):
    base = base.decode()
  tf.io.gfile.makedirs(base)
  stamp = int(time.time())
  while tf.io.gfile.exists(os.path.join(base, str(stamp))) or \
      tf.io.gfile.exists(os.path.join(base, f"{stamp}.tmp")):
    stamp += 1
  return os.path.join(base, str(stamp))


def _set_methods(directory, methods, as_text):
  """Gives signatures TF Serving's classify / regress method names
  (`tf.saved_model.save` writes every signature as a predict one)."""
  from tensorflow.core.protobuf import saved_model_pb2  # pylint: disable=g-direct-tensorflow-import,import-outside-toplevel
  path = os.path.join(directory, "saved_model.pb")
  proto = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(path, "rb") as f:
    proto.ParseFromString(f.read())
  for meta_graph in proto.meta_graphs:
    for name, method in methods.items():
      meta_graph.signature_def[name].method_name = method
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(proto.SerializeToString())
  if as_text:
    from google.protobuf import text_format  # pylint: disable=import-outside-toplevel
    with tf.io.gfile.GFile(os.path.join(directory, "saved_model.pbtxt"),
                           "w") as f:
      f.write(text_format.MessageToString(proto))
  # The fingerprint was of the file before this edit; a SavedModel without
  # one is valid (the loader only logs it), a stale one would mislead.
  fingerprint = os.path.join(directory, "fingerprint.pb")
  if tf.io.gfile.exists(fingerprint):
    tf.io.gfile.remove(fingerprint)

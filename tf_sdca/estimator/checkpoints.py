"""Checkpoint names: TensorFlow's variable names over object-based
checkpoints, and warm starting from either kind.

An estimator's checkpoint (`model_dir/model.ckpt-<step>`) is a
`tf.train.Checkpoint` of `weights` (a dict keyed by TensorFlow's names,
`linear/linear_model/<column>/weights` and `.../bias_weights`; a partitioned
weight is a list of parts), `global_step` and `sdca` (the `SdcaModel`: its
float64 weights and the dual of every example seen). A dict key is stored
with `/` written `.S` and `.` written `..`, so TensorFlow's names can be read
back from the keys, which is what `variables` does.

`warm_start_values` reads weights by TensorFlow name from a tf_sdca
checkpoint or from a TF1 name-based one (an old `tf.estimator`
`LinearClassifier`'s model_dir).
"""
import collections
import os
import re

import numpy as np
import tensorflow as tf

_WEIGHTS = "weights/"
_VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
GLOBAL_STEP = "global_step"

WarmStartSettings = collections.namedtuple(
    "WarmStartSettings", ["ckpt_to_initialize_from", "vars_to_warm_start",
                          "var_name_to_vocab_info",
                          "var_name_to_prev_var_name"])
WarmStartSettings.__new__.__defaults__ = (".*", None, None)
WarmStartSettings.__doc__ = """What `warm_start_from` loads (TensorFlow's
fields): `ckpt_to_initialize_from` (a checkpoint or a model_dir),
`vars_to_warm_start` (a regular expression or a list of them / names,
default every weight), `var_name_to_prev_var_name` (renames). Remapping
vocabularies (`var_name_to_vocab_info`) is not supported."""


def _escape(name):
  return name.replace(".", "..").replace("/", ".S")


def _unescape(key):
  out, i = [], 0
  while i < len(key):
    if key[i] == "." and i + 1 < len(key):
      out.append("/" if key[i + 1] == "S" else key[i + 1])
      i += 2
    else:
      out.append(key[i])
      i += 1
  return "".join(out)


def resolve(path):
  """The checkpoint prefix of `path` (a prefix or a directory)."""
  path = os.fspath(path)
  if tf.io.gfile.isdir(path):
    latest = tf.train.latest_checkpoint(path)
    if latest is None:
      raise ValueError(f"no checkpoint in {path!r}")
    return latest
  return path


def variables(checkpoint):
  """`{TensorFlow name: [checkpoint keys, in partition order]}` of a
  tf_sdca estimator checkpoint (weights and `global_step`)."""
  names = {}
  for key, _ in tf.train.list_variables(checkpoint):
    if key == GLOBAL_STEP + _VALUE:
      names[GLOBAL_STEP] = [(0, key)]
    elif key.startswith(_WEIGHTS) and key.endswith(_VALUE):
      path = key[len(_WEIGHTS):-len(_VALUE)].split("/")
      part = int(path[1]) if len(path) > 1 else 0
      names.setdefault(_unescape(path[0]), []).append((part, key))
  return {n: [k for _, k in sorted(keys)] for n, keys in names.items()}


def value(checkpoint, keys):
  reader = tf.train.load_checkpoint(checkpoint)
  parts = [reader.get_tensor(k) for k in keys]
  return parts[0] if len(parts) == 1 else np.concatenate(parts, axis=0)


def warm_start_values(warm_start_from, shapes):
  """`{name: numpy value}` for the weights `shapes` (`{name: shape}`) that
  `warm_start_from` selects.

  Args:
    warm_start_from: a checkpoint prefix, a model_dir or a
      `WarmStartSettings`.
    shapes: the estimator's weights, by TensorFlow name.

  Raises:
    ValueError: a selected weight that the checkpoint lacks, or whose shape
      differs.
    NotImplementedError: `var_name_to_vocab_info`.
  """
  settings = (warm_start_from if isinstance(warm_start_from,
                                            WarmStartSettings)
              else WarmStartSettings(warm_start_from))
  if settings.var_name_to_vocab_info:
    raise NotImplementedError("warm_start_from: var_name_to_vocab_info "
                              "(remapping vocabularies) is not supported")
  checkpoint = resolve(settings.ckpt_to_initialize_from)
  wanted = settings.vars_to_warm_start
  patterns = [wanted] if isinstance(wanted, str) else list(wanted or [])
  renames = settings.var_name_to_prev_var_name or {}
  ours = variables(checkpoint)
  theirs = dict(tf.train.list_variables(checkpoint))
  out = {}
  for name, shape in shapes.items():
    if not any(re.match(p, name) for p in patterns):
      continue
    previous = renames.get(name, name)
    if previous in ours:
      loaded = value(checkpoint, ours[previous])
    elif previous in theirs:  # a TF1 name-based checkpoint
      loaded = tf.train.load_checkpoint(checkpoint).get_tensor(previous)
    else:
      raise ValueError(f"warm_start_from: {checkpoint!r} has no variable "
                       f"{previous!r} (for {name!r})")
    if int(np.prod(loaded.shape)) != int(np.prod(shape)):
      raise ValueError(f"warm_start_from: {previous!r} has shape "
                       f"{list(loaded.shape)}, {name!r} has {list(shape)}")
    out[name] = np.reshape(loaded, shape)
  return out

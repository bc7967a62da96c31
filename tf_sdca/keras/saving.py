"""Saving and loading the SDCA state of `tf_sdca.keras.LinearModel`.

Keras saves a model's variables; `LinearModel.save_own_variables` adds the
SDCA training state under `sdca_*` names of the same store, so that a
`fit` after `keras.models.load_model` resumes where training stopped: the
example state and float64 weights (`SdcaModel.get_state()`), the float64
duals of in-memory rows, held rows (carry_over), the momentum's
extrapolation and the running mean of an averaging fit, and the options
that give that state its meaning (`sdca_options`: loss, l2, classes; see
`tf_sdca.sdca_model.state_meaning`), which a model of other ones refuses
to load (`check_options`). The names are the file format: files saved
before an entry existed load without it (one without `sdca_options`
unchecked, as before the record).

`tf.train.Checkpoint(model=...)` holds the same store: `CheckpointRecord`
is the model's one checkpointed child, its store and feature spec in one
tensor, restored as `load_own_variables` loads a file.
"""
import io
import json

import numpy as np
import tensorflow as tf

from tf_sdca import losses
from tf_sdca import options
from tf_sdca import sdca_model
from tf_sdca.keras import callbacks


def save_state(store, state, meaning, row_duals, train_weight,
               momentum_state, average):
  """Writes the SDCA state into a Keras variable store.

  Args:
    store: the store `save_own_variables` gets.
    state: `SdcaModel.get_state()`'s dict.
    meaning: the options the state was trained under
      (`tf_sdca.sdca_model.state_meaning`, a JSON-able dict).
    row_duals: `(example keys, float64 duals)` of in-memory rows, or None.
    train_weight: the total example weight of the training data.
    momentum_state: `(example keys, Extrapolation.state())` or None.
    average: the `callbacks.Average` of an averaging fit, or None.
  """
  # The float64 duals of in-memory training, so that it resumes exactly.
  if row_duals is not None:
    store["sdca_row_keys"] = row_duals[0]
    store["sdca_row_duals"] = row_duals[1]
  # JSON as bytes: an .h5 store holds no numpy string arrays.
  store[_OPTIONS] = np.frombuffer(
      json.dumps(meaning, sort_keys=True).encode(), np.uint8)
  store["sdca_keys"] = state["keys"]
  store["sdca_values"] = state["values"]
  for i, slot in enumerate(state["slots"]):
    store[f"sdca_slot_{i}"] = slot
  store["sdca_train_weight"] = np.array([train_weight])
  store["sdca_calls"] = np.array([state.get("calls", 0)], np.int64)
  if "held" in state:  # carry_over: the rows held for the next step
    for name, value in flat_held(state["held"]):
      store["sdca_held_" + name] = value
  if momentum_state is not None:
    # The extrapolation's state, so that a fit after load_model goes on.
    keys, momentum = momentum_state
    store["sdca_momentum_keys"] = keys
    store["sdca_momentum_previous_duals"] = momentum["previous_duals"]
    store["sdca_momentum_previous_table"] = momentum["previous_table"]
    store["sdca_momentum_last"] = np.array(
        [momentum["last_dual"], float(momentum["restart"])], np.float64)
    if "auto_gaps" in momentum:
      store["sdca_momentum_auto_gaps"] = momentum["auto_gaps"]
  if average is not None and average.mean.count:
    # The running mean (and, when the model holds it, the last iterate),
    # so that a resumed fit continues the same mean.
    store["sdca_average_count"] = np.array(
        [average.mean.count, int(average.installed), int(average.packed)],
        np.int64)
    store["sdca_average_keys"] = average.keys
    store["sdca_average_table"] = average.mean.parts[0]
    store["sdca_average_duals"] = average.mean.parts[1]
    if average.installed:
      store["sdca_average_last_keys"] = average.last[0]
      store["sdca_average_last_table"] = average.last[1]
      store["sdca_average_last_duals"] = average.last[2]


# The store's entry of the options the SDCA state was trained under.
_OPTIONS = "sdca_options"


def check_options(store, meaning, name):
  """Refuses a store whose SDCA state was trained under other options than
  `meaning` (the loading model's `tf_sdca.sdca_model.state_meaning`): its
  duals and weight slots would mean something else in the model, which
  would train on from them without a word. A store without the record
  (saved before it existed) passes unchecked.

  Raises:
    ValueError: naming the model `name` and each option that differs
      and its value as `LinearModel` spells them (loss 'logistic'), the
      store's value and the model's.
  """
  if _OPTIONS not in list(store.keys()):
    return
  saved = json.loads(np.asarray(store[_OPTIONS]).tobytes().decode())
  sdca_model.check_state_meaning(
      saved, meaning, f"{name}: the saved SDCA state",
      "Load it into a model built with the saved options, or train this "
      "one from zero; nothing was set",
      lambda key: _KERAS_NAMES.get(key, key), _keras_value)


def check_average(store, average_from, name):
  """Refuses a store holding the mean of the iterates (saved by a model
  built with `average_from`) for a model built without it (`average_from`
  None): the model took the file's weights (the mean) and its SDCA state
  (the last iterate) and went on from the last iterate at the next fit,
  the mean dropped without a word (`SdcaModel.set_state` refuses means
  given to a model without averaging alike). Momentum's saved state is
  not refused: it is the path's (the extrapolation's last point), the
  duals and weights mean the same without it, and a model built with
  `momentum=0` trains on plainly from them.

  Raises:
    ValueError: naming the model `name` and `average_from`.
  """
  if average_from is None and "sdca_average_count" in list(store.keys()):
    raise ValueError(
        f"{name}: the saved SDCA state holds the mean of the iterates of a "
        f"model built with average_from; this model is built without it "
        f"and would drop the mean, training on from the last iterate. Load "
        f"it into a model built with average_from; nothing was set")


def _keras_value(key, value):
  """An option's value as `LinearModel` takes it: the loss by its short
  name ('logistic', not the op's 'logistic_loss')."""
  if key == "loss_type" and isinstance(value, str):
    try:
      return repr(losses.short_name(value))
    except ValueError:  # not a loss of this version: as saved
      pass
  return repr(value)


# `LinearModel`'s names of the `sdca_options` keys, for messages.
_KERAS_NAMES = dict(
    {o.sdca_key: o.name for o in options.OPTIONS.values() if o.sdca_key},
    loss_type="loss")


def check_finite(store, name):
  """Refuses a store with a NaN or inf entry, which would load and then
  predict (or resume to) NaN everywhere.

  Raises:
    ValueError: naming the model `name`, the entry and the value.
  """
  for key in list(store.keys()):
    value = np.asarray(store[key])
    if value.dtype.kind == "f":
      bad = np.flatnonzero(~np.isfinite(value))
      if bad.size:
        raise ValueError(f"{name}: the saved variable {key!r} has "
                         f"[{bad[0]}] = {value.flat[bad[0]]}, not finite")


def check_weights(store, variables, name):
  """The Keras weights of `store` (entries "0", "1", ...; the SDCA state's
  are "sdca_*") as arrays for the model's `variables`, after refusing a
  store with a non-finite entry (`check_finite`); assigns nothing.

  Raises:
    ValueError: naming the model `name`, for a non-finite entry, another
      count of weights than the model's, or a weight of another shape.
  """
  check_finite(store, name)
  weights = [k for k in store.keys() if not k.startswith("sdca_")]
  if len(weights) != len(variables):
    raise ValueError(f"{name}: the file has {len(weights)} weights, "
                     f"the model {len(variables)}")
  values = [np.asarray(store[f"{i}"]) for i in range(len(variables))]
  for i, (v, value) in enumerate(zip(variables, values)):
    if tuple(value.shape) != tuple(v.shape):
      raise ValueError(f"{name}: the file's weight {i} has shape "
                       f"{tuple(value.shape)}, the model's "
                       f"{v.path if hasattr(v, 'path') else v.name} "
                       f"{tuple(v.shape)}")
  return values


def load_state(store):
  """The SDCA state `save_state` wrote, or None for a store without one.

  Returns:
    dict with `state` (for `SdcaModel.set_state`), `row_duals`, `momentum`
    and `average` (each None when not saved) and `train_weight`.
  """
  keys = list(store.keys())
  if "sdca_keys" not in keys:
    return None
  slots = sorted((k for k in keys if k.startswith("sdca_slot_")),
                 key=lambda k: int(k.rsplit("_", 1)[1]))
  state = dict(keys=np.asarray(store["sdca_keys"]),
               values=np.asarray(store["sdca_values"]),
               slots=[np.asarray(store[k]) for k in slots])
  if "sdca_calls" in keys:  # absent from files saved before it existed
    state["calls"] = int(np.asarray(store["sdca_calls"])[0])
  held = {k[len("sdca_held_"):]: np.asarray(store[k]) for k in keys
          if k.startswith("sdca_held_")}
  if held:
    state["held"] = nested_held(held)
  row_duals = None
  if "sdca_row_keys" in keys:
    row_duals = (np.asarray(store["sdca_row_keys"]),
                 np.asarray(store["sdca_row_duals"]))
  momentum_state = None
  if "sdca_momentum_keys" in keys:
    last_dual, restart = np.asarray(store["sdca_momentum_last"])
    momentum = dict(
        previous_duals=np.asarray(store["sdca_momentum_previous_duals"]),
        previous_table=np.asarray(store["sdca_momentum_previous_table"]),
        last_dual=float(last_dual), restart=bool(restart))
    if "sdca_momentum_auto_gaps" in keys:
      momentum["auto_gaps"] = np.asarray(store["sdca_momentum_auto_gaps"])
    momentum_state = (np.asarray(store["sdca_momentum_keys"]), momentum)
  average = None
  if "sdca_average_count" in keys:
    count, installed, packed = (
        int(v) for v in np.asarray(store["sdca_average_count"]))
    average = callbacks.Average(
        packed, count, np.asarray(store["sdca_average_keys"]),
        [np.asarray(store["sdca_average_table"]),
         np.asarray(store["sdca_average_duals"])])
    if installed:
      average.installed = True
      average.last = tuple(np.asarray(store[f"sdca_average_last_{part}"])
                           for part in ("keys", "table", "duals"))
  return dict(state=state, row_duals=row_duals, momentum=momentum_state,
              average=average,
              train_weight=float(np.asarray(store["sdca_train_weight"])[0]))


def flat_held(held):
  """(name, array) pairs of `SdcaModel.get_state()['held']`, for a Keras
  store of flat names."""
  for name in ("keys", "example_weights", "example_labels"):
    yield name, held[name]
  for g, group in enumerate(held["sparse"]):
    for part, value in zip(("rows", "ids", "values"), group):
      yield f"sparse_{g}_{part}", value
  for g, value in enumerate(held["dense"]):
    yield f"dense_{g}", value


def nested_held(flat):
  """`flat_held`'s pairs (as a dict) back in `get_state`'s structure."""
  def groups(prefix):
    return sorted({int(k.split("_")[1]) for k in flat
                   if k.startswith(prefix)})
  return dict(
      keys=flat["keys"], example_weights=flat["example_weights"],
      example_labels=flat["example_labels"],
      sparse=[tuple(flat[f"sparse_{g}_{part}"]
                    for part in ("rows", "ids", "values"))
              for g in groups("sparse_")],
      dense=[flat[f"dense_{g}"] for g in groups("dense_")])


# The store's entry in `to_bytes` that holds the model's feature spec (JSON);
# no entry of `save_own_variables` is named so.
_SPEC = "keras_build_spec"


def to_bytes(store, spec):
  """The `store` (`save_own_variables`' entries: arrays) and the model's
  feature `spec` as the bytes of one uncompressed .npz (no pickled
  objects); b"" for a model never built (no spec, an empty store)."""
  if spec is None and not store:
    return b""
  out = io.BytesIO()
  # (Keras' own entries are its variables: their values.)
  entries = {key: np.asarray(getattr(value, "numpy", lambda v=value: v)())
             for key, value in store.items()}
  if spec is not None:
    entries[_SPEC] = np.array(json.dumps(spec))
  np.savez(out, **entries)
  return out.getvalue()


def from_bytes(data):
  """`(spec or None, store)` of `to_bytes`' bytes; `(None, {})` for b""."""
  if not data:
    return None, {}
  with np.load(io.BytesIO(data), allow_pickle=False) as npz:
    store = {key: npz[key] for key in npz.files}
  spec = store.pop(_SPEC, None)
  return (None if spec is None else json.loads(str(spec))), store


class CheckpointRecord(tf.__internal__.tracking.Trackable):
  """The training state of a `LinearModel` as `tf.train.Checkpoint` keeps
  it: one string tensor (`<path>/.ATTRIBUTES/store`), the store
  `save_own_variables` writes (the Keras weights, the SdcaModel's state,
  the float64 duals of in-memory rows, momentum's and the mean's state,
  the options they were trained under) with the feature spec, as
  `to_bytes` packs them. Restoring it reads the
  whole store back through `restore` (`LinearModel`'s, which checks every
  part before it sets any), so that a restored model resumes as
  `load_model` does, the duals included.

  Args:
    write: `() -> bytes`, the model's store and spec (`to_bytes`).
    restore: `(bytes) -> None`, takes a written record.
  """

  def __init__(self, write, restore):
    self._write = write
    self._restore = restore

  def _serialize_to_tensors(self):
    if not tf.executing_eagerly():
      raise ValueError("a LinearModel's training state is written to a "
                       "tf.train.Checkpoint eagerly, not in a graph")
    return {"store": tf.constant(self._write(), tf.string)}

  def _restore_from_tensors(self, restored_tensors):
    if not tf.executing_eagerly():
      raise ValueError("a LinearModel's training state is read from a "
                       "tf.train.Checkpoint eagerly, not in a graph")
    self._restore(restored_tensors["store"].numpy())
    return tf.no_op()

  def _copy_trackable_to_cpu(self, object_map):
    # (An asynchronous checkpoint writes this copy: the store as it is now.)
    if self not in object_map:
      data = self._write()
      object_map[self] = CheckpointRecord(lambda: data, self._restore)

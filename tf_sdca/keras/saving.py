"""Saving and loading the SDCA state of `tf_sdca.keras.LinearModel`.

Keras saves a model's variables; `LinearModel.save_own_variables` adds the
SDCA training state under `sdca_*` names of the same store, so that a
`fit` after `keras.models.load_model` resumes where training stopped: the
example state and float64 weights (`SdcaModel.get_state()`), the float64
duals of in-memory rows, held rows (carry_over), the momentum's
extrapolation and the running mean of an averaging fit. The names are the
file format: files saved before an entry existed load without it.
"""
import numpy as np

from tf_sdca.keras import callbacks


def save_state(store, state, row_duals, train_weight, momentum_state,
               average):
  """Writes the SDCA state into a Keras variable store.

  Args:
    store: the store `save_own_variables` gets.
    state: `SdcaModel.get_state()`'s dict.
    row_duals: `(example keys, float64 duals)` of in-memory rows, or None.
    train_weight: the total example weight of the training data.
    momentum_state: `(example keys, Extrapolation.state())` or None.
    average: the `callbacks.Average` of an averaging fit, or None.
  """
  # The float64 duals of in-memory training, so that it resumes exactly.
  if row_duals is not None:
    store["sdca_row_keys"] = row_duals[0]
    store["sdca_row_duals"] = row_duals[1]
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

"""Keras' in-memory fit where nothing reads or prints anything between its
epochs (no callbacks of the user's, validation or compiled metrics;
verbose=0) runs all its epochs in one go and then shows each epoch's logs
to the gap's logger and History (`fitting.ONE_GO`): the History, the
weights, the packed duals, the loss tracker and a continued fit are those
of Keras' loop of a step per epoch, bit for bit, as is the state an error
mid-fit leaves. With Keras' progress bar (verbose 'auto', 1 or 2) it runs
its epochs in runs of about `fitting.PROGRESS_SECONDS` and prints each run's
epochs as Keras' loop prints them (but the timings). Fits with callbacks or
validation still run Keras' loop, and their callbacks see every epoch."""
import contextlib
import io
import re
import warnings

import keras
import numpy as np
import pytest
from sklearn.datasets import load_digits, load_wine
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from sdca_testutil import flat_arrays, heart_scale, same_bytes
from tf_sdca import engine
from tf_sdca.keras import LinearModel
from tf_sdca.keras import fitting
from tf_sdca.ops import sdca_ops


def _data(name):
  if name == "heart":
    x, y = heart_scale()
    return np.asarray(x, np.float32), (y > 0).astype(np.float32), None
  if name == "digits":
    x, y = load_digits(return_X_y=True)
    return (x / 16.0).astype(np.float32), y, 10
  x, y = load_wine(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y, 3


def _fit(monkeypatch, one_go, name, loss, fits, callbacks=None, verbose=0,
         printed=None, **options):
  """Runs `fits` ((epochs, tol, initial_epoch), ...) on one model; returns
  the model, the History objects, the warnings' messages and how many fits
  ran in one go; appends what they printed to the list `printed`."""
  monkeypatch.setattr(fitting, "ONE_GO", one_go)
  went = []
  original = LinearModel._fit_in_one_go  # pylint: disable=protected-access

  def spy(self, *args):
    went.append(1)
    return original(self, *args)

  monkeypatch.setattr(LinearModel, "_fit_in_one_go", spy)
  x, y, k = _data(name)
  model = LinearModel(loss=loss, l2=1.0, use_bias=False, num_classes=k,
                      **options)
  histories = []
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
      for epochs, tol, initial in fits:
        histories.append(model.fit(x, y, epochs=epochs, tol=tol,
                                   initial_epoch=initial, verbose=verbose,
                                   callbacks=callbacks))
  if printed is not None:
    printed.append(out.getvalue())
  monkeypatch.undo()
  return model, histories, [str(w.message) for w in caught], len(went)


CASES = {
    # name: (data, loss, fits, model options)
    "hinge heart_scale": ("heart", "hinge", ((62, None, 0),), {}),
    "hinge heart_scale tol": ("heart", "hinge", ((300, 1e-3, 0),), {}),
    "hinge heart_scale continued": (
        "heart", "hinge", ((7, None, 0), (16, None, 7), (5, None, 0)), {}),
    "multiclass hinge wine tol": ("wine", "multiclass_hinge",
                                  ((300, 1e-5, 0),), {}),
    "multiclass hinge digits": ("digits", "multiclass_hinge",
                                ((30, None, 0),), {}),
    "hinge heart_scale permutation": ("heart", "hinge", ((20, None, 0),),
                                      dict(visit_order="permutation")),
    "logistic heart_scale tol": ("heart", "logistic", ((50, 1e-9, 0),), {}),
    "smooth hinge wine momentum": ("heart", "smooth_hinge",
                                   ((25, None, 0),), dict(momentum=0.5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_one_go_is_kerass_loop_bit_for_bit(monkeypatch, case):
  name, loss, fits, options = CASES[case]
  loop, loop_histories, loop_warned, loop_went = _fit(
      monkeypatch, False, name, loss, fits, **options)
  go, go_histories, go_warned, go_went = _fit(monkeypatch, True, name, loss,
                                              fits, **options)
  assert loop_went == 0 and go_went == len(fits)
  for a, b in zip(loop_histories, go_histories):
    assert a.history == b.history
    assert a.epoch == b.epoch and a.params == b.params
    assert set(a.history) == {"loss", "duality_gap"}
  assert go.history is go_histories[-1]
  assert same_bytes(loop.get_weights(), go.get_weights())
  assert loop.duality_gap() == go.duality_gap()
  assert same_bytes(flat_arrays(loop.sdca_state()), flat_arrays(go.sdca_state()))
  # Keras' loss tracker holds the last epoch's objective (float32), once.
  tracked = {m: {k: np.asarray(v).tobytes()
                 for k, v in model.get_metrics_result().items()}
             for m, model in (("loop", loop), ("go", go))}
  assert tracked["loop"] == tracked["go"]
  assert float(go.get_metrics_result()["loss"]) == pytest.approx(
      go_histories[-1].history["loss"][-1], rel=1e-6)
  assert loop.stop_training == go.stop_training
  # The slow-progress warnings, in the same order.
  assert loop_warned == go_warned
  first = fits[0]
  if first[1] is not None:  # stopped by tol at the engine's epoch
    gaps = go_histories[0].history["duality_gap"]
    assert gaps[-1] < first[1] and all(g >= first[1] for g in gaps[:-1])
    assert go.stop_training
  else:
    assert len(go_histories[0].history["loss"]) == first[0] - first[2]


def test_one_go_reaches_liblinears_optimum_on_digits(monkeypatch):
  """Crammer-Singer on digits (pixels / 16), l2 = 1 (C = 1), no bias: the
  fit in one go stops at a gap below 1e-5, which certifies its objective
  against LIBLINEAR's at a tight tolerance."""
  model, (history,), _, went = _fit(monkeypatch, True, "digits",
                                    "multiclass_hinge", ((3000, 1e-5, 0),))
  assert went == 1
  gap = history.history["duality_gap"][-1]
  assert gap < 1e-5
  x, y, k = _data("digits")
  rows = np.arange(len(y))

  def objective(w):
    z = x.astype(np.float64) @ w
    return ((1.0 - np.eye(k)[y] + z).max(axis=1) - z[rows, y]).sum() + (
        0.5 * np.sum(w * w))

  ours = objective(np.asarray(model.get_weights()[0], np.float64))
  assert ours / len(y) == pytest.approx(history.history["loss"][-1],
                                        rel=1e-6)
  svc = LinearSVC(C=1.0, loss="hinge", dual=True, fit_intercept=False,
                  tol=1e-8, max_iter=100000, multi_class="crammer_singer")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    svc.fit(x, y)
  theirs = objective(svc.coef_.T.astype(np.float64))
  assert theirs >= ours * (1.0 - gap) - 1e-7 * ours
  assert ours <= theirs * (1.0 + 2e-5)


def test_an_error_mid_fit_leaves_the_same_state(monkeypatch):
  """An error in the engine's second op call (an interrupt, say) leaves the
  model at the last epoch the first call ran, with its count of steps, in
  one go as in Keras' loop."""
  states = {}
  for one_go in (False, True):
    calls = []
    original = sdca_ops.packed_epochs

    def failing(*args, **kwargs):
      calls.append(1)
      if len(calls) == 2:
        raise KeyboardInterrupt
      return original(*args, **kwargs)

    monkeypatch.setattr(fitting, "ONE_GO", one_go)
    monkeypatch.setattr(sdca_ops, "packed_epochs", failing)
    x, y, _ = _data("heart")
    # A first call of 4 epochs (its size from the rows' x.size entries,
    # 4.5 a call's worth), not the whole fit: the second call is the one
    # that fails.
    monkeypatch.setattr(engine, "FUSED_FIRST_SECONDS_PER_ENTRY",
                        engine.FUSED_SECONDS / (4.5 * x.size))
    model = LinearModel(loss="hinge", l2=1.0, use_bias=False)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      with pytest.raises(KeyboardInterrupt):
        model.fit(x, y, epochs=40, verbose=0)
    monkeypatch.undo()
    assert len(calls) == 2
    states[one_go] = (model.get_weights(), flat_arrays(model.sdca_state()),
                      model.duality_gap())
  assert same_bytes(states[False][0], states[True][0])
  assert same_bytes(states[False][1], states[True][1])
  assert states[False][2] == states[True][2]
  # The first call ran 4 epochs: the model is then 4 epochs in, not 0.
  four = LinearModel(loss="hinge", l2=1.0, use_bias=False)
  x, y, _ = _data("heart")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    four.fit(x, y, epochs=4, verbose=0)
  assert same_bytes(four.get_weights(), states[True][0])


def test_callbacks_validation_and_progress_run_kerass_loop(monkeypatch):
  """A callback sees every epoch (its logs are the History's); with
  validation data or verbose=2 the fit runs Keras' loop too, with the same
  History."""
  seen = []

  class Watch(keras.callbacks.Callback):

    def on_epoch_end(self, epoch, logs=None):
      seen.append((epoch, dict(logs), self.model.get_weights()[0].copy()))

  model, (history,), _, went = _fit(monkeypatch, True, "heart", "hinge",
                                    ((6, None, 0),), callbacks=[Watch()])
  assert went == 0
  assert [e for e, _, _ in seen] == list(range(6))
  assert [logs["duality_gap"] for _, logs, _ in seen] == (
      history.history["duality_gap"])
  assert np.array_equal(seen[-1][2], model.get_weights()[0])
  assert not np.array_equal(seen[0][2], seen[-1][2])
  plain, (plain_history,), _, plain_went = _fit(
      monkeypatch, True, "heart", "hinge", ((6, None, 0),))
  assert plain_went == 1
  assert plain_history.history == history.history
  assert same_bytes(plain.get_weights(), model.get_weights())
  _, (shown,), _, shown_went = _fit(monkeypatch, True, "heart", "hinge",
                                    ((6, None, 0),), verbose=2)
  assert shown_went == 1 and shown.history == plain_history.history


def test_early_stopping_stops_where_a_shorter_fit_ends(monkeypatch):
  """EarlyStopping on the logged gap (a callback: Keras' loop) stops after
  `patience` epochs without a fall of min_delta; the model is then that
  many epochs' fit in one go, bit for bit."""
  stop = keras.callbacks.EarlyStopping(monitor="duality_gap", mode="min",
                                       patience=2, min_delta=1e-3)
  model, (history,), _, went = _fit(monkeypatch, True, "heart", "hinge",
                                    ((200, None, 0),), callbacks=[stop])
  assert went == 0
  gaps = history.history["duality_gap"]
  epochs = len(gaps)
  assert 3 <= epochs < 200
  best = min(gaps[:-2])
  assert gaps[-1] > best - 1e-3 and gaps[-2] > best - 1e-3
  short, (short_history,), _, short_went = _fit(
      monkeypatch, True, "heart", "hinge", ((epochs, None, 0),))
  assert short_went == 1
  assert short_history.history == history.history
  assert same_bytes(short.get_weights(), model.get_weights())


def _untimed(text):
  """Keras' progress output without its timings (the seconds so far, the
  time per step) and the padding and backspaces their widths set."""
  text = re.sub(r"\d+(us|ms|s)/step", "T/step", text)
  text = re.sub(r"\x1b\[1m\d+s\x1b\[0m", "Ts", text)
  text = re.sub(r" - \d+s - ", " - Ts - ", text)
  text = re.sub(r" +(?=\x08|\n|$)", "", text)
  return re.sub(r"\x08+", "", text)


PROGRESS_CASES = {
    # name: (data, loss, fits, verbose, model options)
    "hinge heart_scale 2": ("heart", "hinge", ((62, None, 0),), 2, {}),
    "hinge heart_scale auto tol": ("heart", "hinge", ((300, 1e-3, 0),),
                                   "auto", {}),
    "hinge heart_scale 1 continued": (
        "heart", "hinge", ((7, None, 0), (16, None, 7), (1, None, 0)), 1,
        {}),
    "multiclass hinge wine 2 tol": ("wine", "multiclass_hinge",
                                    ((300, 1e-5, 0),), 2, {}),
    "smooth hinge heart_scale 1 momentum": (
        "heart", "smooth_hinge", ((25, None, 0),), 1, dict(momentum=0.5)),
    # The next epoch trained beside the last one's gap, on another thread
    # (as the engine does for rows of 2^17 entries and more).
    "logistic heart_scale 2 ahead": ("heart", "logistic", ((12, None, 0),),
                                     2, dict(ahead=True)),
}


@pytest.mark.parametrize("seconds", [fitting.PROGRESS_SECONDS, 0.0])
@pytest.mark.parametrize("case", sorted(PROGRESS_CASES))
def test_progress_in_one_go_prints_and_fits_as_kerass_loop(
    monkeypatch, case, seconds):
  """With Keras' progress bar the fit in one go (in runs of `seconds`; 0:
  one epoch a run) gives the History, weights, duals and loss tracker of
  Keras' loop bit for bit, and prints the same lines (an epoch's header,
  its step's bar, its logs), but the timings."""
  name, loss, fits, verbose, options = PROGRESS_CASES[case]
  options = dict(options)
  ahead = options.pop("ahead", False)
  if ahead:  # (`_fit` undoes it)
    monkeypatch.setattr(engine, "AHEAD_MIN_ENTRIES", 0)
  printed = []
  loop, loop_histories, loop_warned, loop_went = _fit(
      monkeypatch, False, name, loss, fits, verbose=verbose,
      printed=printed, **options)
  if ahead:
    monkeypatch.setattr(engine, "AHEAD_MIN_ENTRIES", 0)
  monkeypatch.setattr(fitting, "PROGRESS_SECONDS", seconds)
  go, go_histories, go_warned, go_went = _fit(
      monkeypatch, True, name, loss, fits, verbose=verbose, printed=printed,
      **options)
  assert loop_went == 0 and go_went == len(fits)
  for a, b in zip(loop_histories, go_histories):
    assert a.history == b.history
    assert a.epoch == b.epoch and a.params == b.params
  assert same_bytes(loop.get_weights(), go.get_weights())
  assert same_bytes(flat_arrays(loop.sdca_state()),
                    flat_arrays(go.sdca_state()))
  assert {k: np.asarray(v).tobytes()
          for k, v in loop.get_metrics_result().items()} == {
              k: np.asarray(v).tobytes()
              for k, v in go.get_metrics_result().items()}
  assert loop_warned == go_warned
  assert _untimed(printed[0]) == _untimed(printed[1])
  # Every epoch is printed with its logged objective and gap.
  epochs = sum(len(h.epoch) for h in go_histories)
  lines = re.findall(r"loss: \S+ - duality_gap: \S+\n", printed[1])
  assert len(lines) == epochs
  last = go_histories[-1].history
  assert lines[-1] == "loss: %.4f - duality_gap: %s\n" % (
      last["loss"][-1], "%.4f" % last["duality_gap"][-1]
      if last["duality_gap"][-1] > 1e-3 else
      "%.4e" % last["duality_gap"][-1])


def test_progress_is_printed_between_runs(monkeypatch):
  """In runs of one epoch (PROGRESS_SECONDS 0) every epoch's line is
  printed before the engine runs the next epoch."""
  monkeypatch.setattr(fitting, "PROGRESS_SECONDS", 0.0)
  monkeypatch.setattr(fitting, "ONE_GO", True)
  seen = []
  original = fitting.TrainingState.engine_epochs
  out = io.StringIO()

  def spy(self, sdca, seconds=None):
    seen.append(out.getvalue().count("duality_gap:"))
    return original(self, sdca, seconds)

  monkeypatch.setattr(fitting.TrainingState, "engine_epochs", spy)
  x, y, _ = _data("heart")
  model = LinearModel(loss="hinge", l2=1.0, use_bias=False)
  with contextlib.redirect_stdout(out):
    history = model.fit(x, y, epochs=8, verbose=2)
  assert len(history.epoch) == 8
  # A call per epoch (each epoch printed before the next call), and a last
  # that finds the engine ended.
  assert seen == list(range(9))


class _Recorder(keras.callbacks.Callback):
  """Records the hooks it overrides (the older `on_batch_end` among them)
  and changes the epoch's logs as the gap's logger does."""

  def __init__(self, seen):
    super().__init__()
    self.seen = seen

  def on_epoch_begin(self, epoch, logs=None):
    self.seen.append(("epoch_begin", epoch, dict(logs)))

  def on_batch_end(self, batch, logs=None):
    self.seen.append(("batch_end", batch, dict(logs)))

  def on_epoch_end(self, epoch, logs=None):
    logs["duality_gap"] = 0.5 / (epoch + 1)
    self.seen.append(("epoch_end", epoch, dict(logs)))


def test_epoch_hooks_call_what_kerass_callback_list_calls():
  """`EpochHooks` (the one-go fit's per-epoch hooks, on the callbacks that
  override them, History's model attribute set once) leaves the callbacks
  and the History as Keras' CallbackList does."""
  from tf_sdca.keras import callbacks as callbacks_lib  # pylint: disable=import-outside-toplevel
  model = LinearModel(loss="hinge", l2=1.0)
  runs = []
  for one_go in (False, True):
    seen = []
    callbacks = keras.callbacks.CallbackList(
        [_Recorder(seen), keras.callbacks.Callback()], add_history=True,
        add_progbar=False, epochs=3, steps=1, model=model)
    callbacks.on_train_begin()
    hooks = callbacks_lib.EpochHooks(callbacks) if one_go else None
    for epoch in range(3):
      loss = 1.0 / (epoch + 2)
      logs = {"loss": loss}
      if one_go:
        hooks.epoch_begin(epoch)
        hooks.batch_begin(0)
        hooks.batch_end(0, {"loss": loss})
        hooks.epoch_end(epoch, logs)
      else:
        callbacks.on_epoch_begin(epoch)
        callbacks.on_train_batch_begin(0)
        callbacks.on_train_batch_end(0, {"loss": loss})
        callbacks.on_epoch_end(epoch, logs)
      assert logs == {"loss": loss}  # (each hook given a copy)
    if one_go:
      hooks.finish()
    history = model.history
    runs.append((seen, history.epoch, history.history))
    assert history is callbacks.callbacks[-1]
  assert runs[0] == runs[1]
  assert runs[1][2]["duality_gap"] == [0.5, 0.25, 0.5 / 3]
  assert runs[1][2]["loss"] == [0.5, 1.0 / 3, 0.25]

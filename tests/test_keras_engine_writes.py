"""Keras' in-memory fit on the engine's epochs where nothing reads the model
between its epochs (no callbacks of the user's, no validation, no compiled
metrics): the variables are written once, after the last epoch, and the
engine runs its epochs several per op call (`fitting.WRITE_AT_END`). The
weights, the packed duals, the History and a continued fit are those of a
write and an op call per epoch, bit for bit; a fit with a callback still
sees every epoch's weights; and the hinge losses reach LIBLINEAR's optimum
with the gap certificate."""
import warnings

import keras
import numpy as np
import pytest
from sklearn.datasets import load_wine
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from sdca_testutil import flat_arrays, heart_scale, same_bytes
from tf_sdca.keras import LinearModel
from tf_sdca.keras import fitting
from tf_sdca.ops import sdca_ops


def _wine():
  x, y = load_wine(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y


def _data(name):
  if name == "heart":
    x, y = heart_scale()
    return np.asarray(x, np.float32), (y > 0).astype(np.float32), None
  x, y = _wine()
  return x, y, 3


def _fit(monkeypatch, at_end, name, loss, fits=((40, None),), callbacks=None,
         **options):
  """Runs `fits` ((epochs, tol), ...) on one model; returns the model,
  the histories and the epochs each fused op call ran."""
  monkeypatch.setattr(fitting, "WRITE_AT_END", at_end)
  calls = []
  original = sdca_ops.packed_epochs

  def spy(*args, **kwargs):
    out = original(*args, **kwargs)
    calls.append(int(out[3].shape[0]))  # the epochs it ran
    return out

  monkeypatch.setattr(sdca_ops, "packed_epochs", spy)
  x, y, k = _data(name)
  model = LinearModel(loss=loss, l2=1.0, use_bias=False, num_classes=k,
                      **options)
  histories = []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for epochs, tol in fits:
      histories.append(model.fit(x, y, epochs=epochs, tol=tol, verbose=0,
                                 callbacks=callbacks).history)
  monkeypatch.undo()
  return model, histories, calls


CASES = {
    # name: (data, loss, fits, model options)
    "hinge heart_scale": ("heart", "hinge", ((40, None),), {}),
    "hinge heart_scale tol": ("heart", "hinge", ((300, 1e-3),), {}),
    "hinge heart_scale continued": ("heart", "hinge", ((7, None), (9, None)),
                                    {}),
    "multiclass hinge wine tol": ("wine", "multiclass_hinge",
                                  ((300, 1e-5),), {}),
    "hinge heart_scale permutation": ("heart", "hinge", ((20, None),),
                                      dict(visit_order="permutation")),
    "logistic heart_scale": ("heart", "logistic", ((12, None),), {}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_written_at_the_end_as_every_epoch(monkeypatch, case):
  name, loss, fits, options = CASES[case]
  each, each_history, each_calls = _fit(monkeypatch, False, name, loss,
                                        fits, **options)
  end, end_history, end_calls = _fit(monkeypatch, True, name, loss, fits,
                                     **options)
  assert same_bytes(each.get_weights(), end.get_weights())
  assert each_history == end_history
  # The packed rows' table and duals were written too: the same gap.
  assert each.duality_gap() == end.duality_gap()
  assert same_bytes(flat_arrays(each.sdca_state()), flat_arrays(end.sdca_state()))
  # One epoch per step before; the shrinking orders' epochs are fused now
  # (the others train the next epoch beside the gap: no fused calls).
  assert not each_calls
  epochs = sum(len(h["loss"]) for h in end_history)
  if options.get("visit_order", "shrinking") == "shrinking" and (
      loss != "logistic"):
    assert sum(end_calls) == epochs and len(end_calls) < epochs
  if fits[0][1] is not None:  # stopped by tol at the engine's epoch
    assert end_history[0]["duality_gap"][-1] < fits[0][1]
    assert all(g >= fits[0][1] for g in end_history[0]["duality_gap"][:-1])


def test_a_callback_sees_every_epochs_weights(monkeypatch):
  seen = {}
  for at_end in (False, True):
    weights = []

    class Watch(keras.callbacks.Callback):

      def on_epoch_end(self, epoch, logs=None):
        weights.append(self.model.get_weights()[0].copy())

    model, _, calls = _fit(monkeypatch, at_end, "heart", "hinge",
                           ((6, None),), callbacks=[Watch()])
    seen[at_end] = weights
    assert not calls  # an epoch per step: the callback reads each
    assert np.array_equal(weights[-1], model.get_weights()[0])
  assert same_bytes(seen[False], seen[True])
  assert len(seen[True]) == 6
  assert not np.array_equal(seen[True][0], seen[True][-1])


@pytest.mark.parametrize("name", ["heart", "wine"])
def test_hinge_reaches_liblinear_with_the_gap_certificate(monkeypatch, name):
  """At l2 = 1 (C = 1): the logged objective P and gap certify P - P* <=
  gap * P; LIBLINEAR's objective at a tight tolerance lies between the
  dual bound and P."""
  x, y, k = _data(name)
  loss = "hinge" if k is None else "multiclass_hinge"
  model, (history,), calls = _fit(monkeypatch, True, name, loss,
                                  ((2000, 1e-6),))
  assert calls
  gap = history["duality_gap"][-1]
  assert gap < 1e-6
  w = np.asarray(model.get_weights()[0], np.float64)
  z = x.astype(np.float64) @ w
  if k is None:
    sign = np.where(y > 0, 1.0, -1.0)
    ours = np.maximum(0.0, 1.0 - sign * z.ravel()).sum() + 0.5 * np.sum(w * w)
    extra = {}
    labels = sign
  else:
    rows = np.arange(len(y))
    ours = ((1.0 - np.eye(k)[y] + z).max(axis=1) - z[rows, y]).sum() + (
        0.5 * np.sum(w * w))
    extra = dict(multi_class="crammer_singer")
    labels = y
  # The model's weights are float32: its objective is the logged one to
  # float32 rounding.
  assert ours / len(y) == pytest.approx(history["loss"][-1], rel=1e-6)
  svc = LinearSVC(C=1.0, loss="hinge", dual=True, fit_intercept=False,
                  tol=1e-10, max_iter=200000, **extra)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    svc.fit(x, labels)
  v = svc.coef_.T.astype(np.float64)
  zl = x.astype(np.float64) @ v
  if k is None:
    theirs = np.maximum(0.0, 1.0 - sign * zl.ravel()).sum() + 0.5 * np.sum(
        v * v)
  else:
    theirs = ((1.0 - np.eye(k)[y] + zl).max(axis=1) - zl[rows, y]).sum() + (
        0.5 * np.sum(v * v))
  assert theirs >= ours * (1.0 - gap) - 1e-6 * ours
  assert ours <= theirs + 2e-6 * ours


def test_a_keras_epoch_cap_keeps_an_epoch_per_step(monkeypatch):
  """keras.config.max_epochs below `epochs` stops Keras' loop before the
  engine's end: the epochs are then run one per step, the model the last
  logged epoch's."""
  keras.config.set_max_epochs(5)
  try:
    model, (history,), calls = _fit(monkeypatch, True, "heart", "hinge",
                                    ((40, None),))
  finally:
    keras.config.set_max_epochs(None)
  assert not calls and len(history["loss"]) == 5
  five, (history5,), _ = _fit(monkeypatch, True, "heart", "hinge",
                              ((5, None),))
  assert history == history5
  assert same_bytes(model.get_weights(), five.get_weights())

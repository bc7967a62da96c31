"""The epoch engine trains epoch e + 1 while epoch e's exact gap is
evaluated on another thread (`engine.TRAIN_AHEAD`), where one thread trains
packed rows. Whatever epoch e's bookkeeping decides afterwards (momentum
'auto' choosing its beta, an extrapolation restart, `tol` reached, an epoch
whose gap nobody reads), the weights, duals, history and momentum state are
those of the epochs run one after the other, bit for bit; the evaluations
really ran beside the training."""
import os
import threading

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_digits

from tf_sdca import engine
from tf_sdca.trainer import InMemorySdca

_EVALUATE = engine.objective_parts_at

pytestmark = pytest.mark.skipif(
    (os.cpu_count() or 1) < 2, reason="training ahead needs 2 or more cores")


def _breast_cancer():
  """Natural units (areas in the thousands) with an intercept column."""
  d = load_breast_cancer()
  return (np.hstack([d.data, np.ones((len(d.data), 1))]),
          d.target.astype(np.float32))


def _sparse_rows(n=3000, d=2000, k=12, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, d, size=(n, k))
  w = rng.normal(size=d)
  y = (w[ids].sum(1) + rng.normal(size=n) > 0).astype(np.float32)
  return ids, y


def _watch_evaluations(monkeypatch, ahead):
  """Training ahead on or off; returns the list that gets, for each exact
  gap evaluated, whether it ran on the main thread."""
  monkeypatch.setattr(engine, "TRAIN_AHEAD", ahead)
  # (The cases' rows are few: train them ahead all the same.)
  monkeypatch.setattr(engine, "AHEAD_MIN_ENTRIES", 0)
  threads = []

  def spy(*args):
    threads.append(threading.current_thread() is threading.main_thread())
    return _EVALUATE(*args)

  monkeypatch.setattr(engine, "objective_parts_at", spy)
  return threads


def _fit(monkeypatch, ahead, model_options, data, fit_options):
  """A fit with training ahead on or off; also returns the threads the
  evaluations ran on."""
  threads = _watch_evaluations(monkeypatch, ahead)
  model = InMemorySdca(**model_options)
  history = model.fit(**data, verbose=0, **fit_options)
  return model, history, threads


def _assert_same(first, second):
  (a, ha, _), (b, hb, _) = first, second
  for name in ("dense_weights", "sparse_weights", "duals"):
    x, y = getattr(a, name), getattr(b, name)
    if x is None:
      assert y is None
    else:
      np.testing.assert_array_equal(x, y, err_msg=name)
  assert ha["loss"] == hb["loss"] or np.array_equal(
      ha["loss"], hb["loss"], equal_nan=True)
  np.testing.assert_array_equal(ha["duality_gap"], hb["duality_gap"])
  assert a.momentum_used == b.momentum_used
  sa, sb = a.momentum_state, b.momentum_state
  assert (sa is None) == (sb is None)
  if sa is not None:
    assert sorted(sa) == sorted(sb)
    for key in sa:
      np.testing.assert_array_equal(sa[key], sb[key], err_msg=key)


CASES = {
    # 'auto' chooses beta > 0 after 4 epochs (the 4th's gap is evaluated
    # before the 5th starts extrapolated: tests/test_extrapolation_cap.py).
    # (The block step, which natural units call for, trains nothing
    # ahead: off.)
    "breast_cancer_auto": (dict(loss="logistic", l2=1.0, second_order="off"),
                           "breast_cancer", dict(epochs=14)),
    # A fixed beta restarts where the dual objective falls.
    "breast_cancer_beta": (dict(loss="logistic", l2=0.1, momentum=0.7,
                                second_order="off"),
                           "breast_cancer", dict(epochs=20)),
    # Plain, stopped by tol: the epoch trained ahead of the stop is dropped.
    "sparse_tol": (dict(loss="logistic", l2=0.5, momentum=0.0),
                   "sparse", dict(epochs=60, tol=1e-7)),
    "sparse_gap_every": (dict(loss="squared", l2=0.5, momentum=0.0, l1=0.05),
                         "sparse", dict(epochs=9, gap_every=4)),
    "digits_softmax": (dict(loss="softmax", num_classes=10, l2=1.0,
                            second_order="off"),
                       "digits", dict(epochs=8)),
}


def _data(name):
  if name == "breast_cancer":
    x, y = _breast_cancer()
    return dict(labels=y, dense=x)
  if name == "digits":
    d = load_digits()
    return dict(labels=d.target.astype(np.float32),
                dense=d.data.astype(np.float32))
  ids, y = _sparse_rows()
  return dict(labels=y, ids=ids)


@pytest.mark.parametrize("case", sorted(CASES))
def test_training_ahead_gives_the_epochs_run_one_by_one(monkeypatch, case):
  model_options, data_name, fit_options = CASES[case]
  data = _data(data_name)
  serial = _fit(monkeypatch, False, model_options, data, fit_options)
  ahead = _fit(monkeypatch, True, model_options, data, fit_options)
  _assert_same(serial, ahead)
  # One by one every evaluation runs here; ahead, they run beside the next
  # epoch's training, except the last epoch's (nothing trains after it)
  # where the fit ran all its epochs.
  assert all(serial[2])
  assert ahead[2].count(False) >= 1
  if len(ahead[1]["loss"]) == fit_options["epochs"]:
    assert ahead[2][-1]


def test_the_cases_exercise_what_they_claim(monkeypatch):
  """The decisions the bit-for-bit cases rest on did happen: 'auto' chose
  a beta > 0, and tol stopped the fit before its last epoch."""
  options, name, fit_options = CASES["breast_cancer_auto"]
  model, _, _ = _fit(monkeypatch, True, options, _data(name), fit_options)
  assert model.momentum_used > 0.0
  options, name, fit_options = CASES["sparse_tol"]
  _, history, _ = _fit(monkeypatch, True, options, _data(name), fit_options)
  assert len(history["loss"]) < fit_options["epochs"]
  assert history["duality_gap"][-1] < 1e-7


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss"])
def test_objective_sums_are_the_same_bits_on_any_threads(loss):
  """The exact objective is summed in fixed blocks of rows whatever the
  threads (the machine's cores, or 1 beside the training): 50k rows, 4
  blocks, on 1, 2, 3 and the device's threads; and the sums are the loss
  sums computed here in float64."""
  # pylint: disable=import-outside-toplevel
  from tf_sdca import pack_rows, packed_solve
  ids, y = _sparse_rows(n=50_000, d=5000, k=8, seed=3)
  n, k = ids.shape
  if loss == "squared_loss":
    y = (2.0 * y - 1.0 + 0.1 * np.arange(n) / n).astype(np.float32)
  rng = np.random.default_rng(4)
  weights = rng.uniform(0.5, 2.0, n).astype(np.float32)
  rows = pack_rows(np.arange(0, n * k + 1, k, dtype=np.int64),
                   ids.ravel().astype(np.int32), np.zeros(0, np.float32),
                   np.zeros((n, 0), np.float32), weights, y,
                   num_sparse_features=5000, loss_type=loss)
  w = rng.normal(size=5000) * 0.1
  margins = w[ids].sum(1)
  signs = 2.0 * y - 1.0
  if loss == "logistic_loss":
    duals = signs * rng.uniform(0.01, 0.99, n)
    primal = np.logaddexp(0.0, -signs * margins)
    b = duals * signs
    dual = b * np.log(b) + (1 - b) * np.log(1 - b)
  else:
    duals = rng.normal(size=n)
    primal = 0.5 * (margins - y) ** 2
    dual = 0.5 * duals ** 2 - duals * y
  sums = [packed_solve(rows, w, duals, seed=0, loss_type=loss, l1=0.0,
                       l2=1.0, num_passes=0,
                       objective_threads=t)[2].numpy()
          for t in (0, 1, 2, 3)]
  for other in sums[1:]:
    np.testing.assert_array_equal(other, sums[0])
  np.testing.assert_allclose(
      sums[0], [np.sum(weights * primal), np.sum(weights * dual),
                np.sum(w * w), np.sum(np.abs(w))], rtol=1e-9)


def test_a_default_fit_repeats_bit_for_bit():
  """One thread (the default) is reproducible: two default fits of 40k
  sparse rows (3 blocks of the objective's sums, the gap evaluated beside
  the training, momentum 'auto') give the same bits."""
  ids, y = _sparse_rows(n=40_000, d=20_000, k=10, seed=5)
  runs = []
  for _ in range(2):
    model = InMemorySdca(loss="logistic", l2=0.5)
    history = model.fit(y, ids=ids, epochs=8, verbose=0)
    runs.append((model, history))
  (a, ha), (b, hb) = runs
  np.testing.assert_array_equal(a.sparse_weights, b.sparse_weights)
  np.testing.assert_array_equal(a.duals, b.duals)
  assert ha["loss"] == hb["loss"]
  assert ha["duality_gap"] == hb["duality_gap"]
  assert ha["duality_gap"][-1] < 1e-3


@pytest.mark.parametrize("momentum", [0.0, "auto"])
def test_a_callback_sees_the_epoch_it_is_called_for(monkeypatch, momentum):
  """A checkpointing callback (what `tf-sdca train` passes) saves, after
  each epoch, that epoch's weights, duals and extrapolation, as with the
  epochs run one by one, though the next epoch trained meanwhile."""
  ids, y = _sparse_rows(n=3000, d=2000, k=12, seed=1)
  saved = {}
  for ahead in (False, True):
    monkeypatch.setattr(engine, "TRAIN_AHEAD", ahead)
    monkeypatch.setattr(engine, "AHEAD_MIN_ENTRIES", 0)
    states = saved[ahead] = []
    model = InMemorySdca(loss="logistic", l2=0.3, momentum=momentum)

    def checkpoint(epoch, history, model=model, states=states):
      states.append((epoch, history["duality_gap"][-1],
                     {k: np.copy(v) for k, v in model.state_dict().items()
                      if v is not None}))

    model.fit(y, ids=ids, epochs=10, tol=1e-9, verbose=0,
              callback=checkpoint)
  assert len(saved[True]) == len(saved[False]) == 10
  for (e1, g1, s1), (e2, g2, s2) in zip(saved[False], saved[True]):
    assert e1 == e2 and g1 == g2
    assert sorted(s1) == sorted(s2)
    for key in s1:
      np.testing.assert_array_equal(s1[key], s2[key], err_msg=key)
  # The weights move from one checkpoint to the next.
  assert not np.array_equal(saved[True][3][2]["sparse_weights"],
                            saved[True][4][2]["sparse_weights"])


def _keras_fit(monkeypatch, ahead, x, y, epochs, stop_after=None):
  """A keras.LinearModel fit (the engine's epochs, one a Keras step) with
  training ahead on or off, a callback recording the weights and SDCA
  state each epoch's callbacks see, and stopping Keras after
  `stop_after` epochs; also the threads the evaluations ran on."""
  import keras  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  threads = _watch_evaluations(monkeypatch, ahead)
  seen = []

  class Record(keras.callbacks.Callback):

    def on_epoch_end(self, epoch, logs=None):
      state = self.model.sdca_state()
      seen.append((self.model.get_weights()[0].copy(),
                   state["slots"][0].copy(), logs["duality_gap"]))
      if stop_after is not None and epoch + 1 == stop_after:
        self.model.stop_training = True

  model = LinearModel(l2=1.0, use_bias=False)
  history = model.fit(x, y, epochs=epochs, verbose=0, callbacks=[Record()])
  return model, history.history, seen, threads


def test_keras_callbacks_see_their_epoch_and_a_stop_keeps_it(monkeypatch):
  # Keras' in-memory fit trains epoch e + 1 beside epoch e's gap: the
  # callbacks of epoch e (a checkpoint, EarlyStopping) still see epoch e's
  # weights and state, and a fit they stop ends there, as a fit of that
  # many epochs one by one does; the next fit goes on identically.
  x, y = _breast_cancer()
  x = ((x - x.mean(0)) / np.maximum(x.std(0), 1e-12)).astype(np.float32)
  x[:, -1] = 1.0
  stopped, history, seen, threads = _keras_fit(monkeypatch, True, x, y, 30,
                                               stop_after=6)
  assert not all(threads)  # evaluated beside the training
  plain, plain_history, plain_seen, _ = _keras_fit(monkeypatch, False, x, y,
                                                   6)
  assert history == plain_history and len(history["loss"]) == 6
  for (w, slot, gap), (pw, pslot, pgap) in zip(seen, plain_seen,
                                               strict=True):
    np.testing.assert_array_equal(w, pw)
    np.testing.assert_array_equal(slot, pslot)
    assert gap == pgap
  for a, b in zip(stopped.get_weights(), plain.get_weights()):
    np.testing.assert_array_equal(a, b)
  after = stopped.fit(x, y, epochs=5, verbose=0).history
  plain_after = plain.fit(x, y, epochs=5, verbose=0).history
  assert after == plain_after

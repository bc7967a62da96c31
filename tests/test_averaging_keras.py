"""`tf_sdca.keras.LinearModel(average_from=T0)`: output averaging for the
packed (in-memory) and the streamed (tf.data) fit, checked against the
iterates of a fit without averaging recorded by a callback, on
breast_cancer in natural units (standardised)."""
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

import keras
from tf_sdca.keras import LinearModel


@pytest.fixture(scope="module")
def cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return (StandardScaler().fit_transform(x).astype(np.float32),
          y.astype(np.float32))


class _Iterates(keras.callbacks.Callback):
  """The float64 weight slots and the dual state after every epoch."""

  def __init__(self):
    super().__init__()
    self.slots, self.duals = [], []

  def on_epoch_end(self, epoch, logs=None):
    state = self.model.sdca_state()
    order = np.argsort(state["keys"])
    self.slots.append(np.concatenate([s.reshape(-1) for s in
                                      state["slots"]]))
    self.duals.append(state["values"][order, 0].astype(np.float64))


def _slots(model):
  return np.concatenate([s.reshape(-1) for s in
                         model.sdca_state()["slots"]])


def _duals(model):
  state = model.sdca_state()
  return state["values"][np.argsort(state["keys"]), 0]


def _stream(x, y):
  return tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y)).batch(100)


def _fit(x, y, epochs, average_from=None, callbacks=None, **kwargs):
  # Plain epochs, as averaging trains them (the recorded iterates too).
  model = LinearModel(loss="logistic", l2=1.0, average_from=average_from,
                      momentum=0)
  if isinstance(x, tf.data.Dataset):
    history = model.fit(x, epochs=epochs, verbose=0, callbacks=callbacks,
                        **kwargs)
  else:
    history = model.fit(x, y, epochs=epochs, verbose=0, callbacks=callbacks,
                        **kwargs)
  return model, history.history


@pytest.mark.parametrize("streamed", [False, True])
def test_the_model_is_the_mean_of_the_recorded_iterates(cancer, streamed):
  x, y = cancer
  data = _stream(x, y) if streamed else x
  iterates = _Iterates()
  plain, plain_history = _fit(data, y, 8, callbacks=[iterates])
  model, history = _fit(data, y, 8, average_from=3)
  mean = np.mean(iterates.slots[2:], axis=0)
  np.testing.assert_allclose(_slots(model), mean, rtol=1e-10, atol=1e-13)
  # The kernels and bias are the mean's (l1 = 0: no shrinking).
  np.testing.assert_allclose(
      np.concatenate([v.numpy().reshape(-1) for v in model.weights]),
      mean.astype(np.float32), rtol=1e-6, atol=1e-7)
  # The mean duals (float32 in the example state).
  np.testing.assert_allclose(_duals(model),
                             np.mean(iterates.duals[2:], axis=0),
                             rtol=1e-6, atol=1e-7)
  last = model.last_iterate
  np.testing.assert_allclose(last["kernels"]["features"][:, 0],
                             plain.weights[0].numpy()[:, 0], rtol=1e-6)
  np.testing.assert_allclose(last["bias"], plain.bias.numpy(), rtol=1e-6)
  # The history: the mean's objective and gap, the last iterate's beside.
  np.testing.assert_allclose(history["last_loss"], plain_history["loss"],
                             rtol=1e-9)
  np.testing.assert_allclose(history["last_duality_gap"],
                             plain_history["duality_gap"], rtol=1e-6)
  assert history["loss"][:2] == history["last_loss"][:2]
  assert history["duality_gap"][-1] > 0
  # The gap logged at the end is the installed mean's.
  objective, gap = model.duality_gap(None if not streamed else data)
  assert objective == pytest.approx(history["loss"][-1], rel=1e-6)
  assert gap == pytest.approx(history["duality_gap"][-1], rel=1e-3)
  # predict uses the mean.
  z = x @ mean[:30] + mean[30]
  np.testing.assert_allclose(model.predict(x, verbose=0)[:, 0],
                             1 / (1 + np.exp(-z)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("streamed", [False, True])
def test_average_from_the_last_epoch_is_the_last_iterate(cancer, streamed):
  x, y = cancer
  data = _stream(x, y) if streamed else x
  plain, _ = _fit(data, y, 6)
  model, history = _fit(data, y, 6, average_from=6)
  np.testing.assert_array_equal(_slots(model), _slots(plain))
  for a, b in zip(model.weights, plain.weights):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  assert history["loss"] == history["last_loss"]


def test_averaging_reaches_the_plain_optimum(cancer):
  x, y = cancer
  plain, plain_history = _fit(x, y, 300)
  model, history = _fit(x, y, 300, average_from=150)
  assert history["duality_gap"][-1] < 1e-6
  assert history["loss"][-1] == pytest.approx(plain_history["loss"][-1],
                                              rel=1e-6)
  np.testing.assert_allclose(_slots(model), _slots(plain), atol=1e-6)


@pytest.mark.parametrize("streamed", [False, True])
def test_resumed_and_reloaded_fits_continue_the_mean(cancer, tmp_path,
                                                     streamed):
  x, y = cancer
  data = _stream(x, y) if streamed else x
  whole, _ = _fit(data, y, 8, average_from=2)
  parts, _ = _fit(data, y, 4, average_from=2)
  path = str(tmp_path / "half.keras")
  parts.save(path)
  loaded = keras.models.load_model(path)
  assert loaded.get_config()["average_from"] == 2
  for model in (parts, loaded):
    if streamed:
      model.fit(data, epochs=8, initial_epoch=4, verbose=0)
    else:
      model.fit(x, y, epochs=8, initial_epoch=4, verbose=0)
    np.testing.assert_allclose(_slots(model), _slots(whole), rtol=1e-12,
                               atol=1e-15)
    np.testing.assert_allclose(
        model.last_iterate["kernels"]["features"],
        whole.last_iterate["kernels"]["features"], rtol=1e-12)
    np.testing.assert_allclose(_duals(model), _duals(whole), rtol=1e-6,
                               atol=1e-8)
  # A saved averaged model predicts with the mean.
  path = str(tmp_path / "whole.keras")
  whole.save(path)
  np.testing.assert_array_equal(
      keras.models.load_model(path).predict(x, verbose=0),
      whole.predict(x, verbose=0))


def test_multiclass_packed_average(tmp_path):
  from sklearn.datasets import load_wine  # pylint: disable=import-outside-toplevel
  x, y = load_wine(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  iterates = _Iterates()
  plain = LinearModel(loss="softmax", num_classes=3, l2=1.0, momentum=0)
  plain.fit(x, y, epochs=6, verbose=0, callbacks=[iterates])
  model = LinearModel(loss="softmax", num_classes=3, l2=1.0, average_from=2)
  history = model.fit(x, y, epochs=6, verbose=0).history
  np.testing.assert_allclose(_slots(model), np.mean(iterates.slots[1:], 0),
                             rtol=1e-10, atol=1e-13)
  assert model.last_iterate["kernels"]["features"].shape == (13, 3)
  assert 0 < history["duality_gap"][-1] < history["duality_gap"][0]
  path = str(tmp_path / "wine.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  np.testing.assert_allclose(loaded.last_iterate["kernels"]["features"],
                             model.last_iterate["kernels"]["features"])


def test_resuming_the_mean_on_other_rows_is_refused(cancer):
  x, y = cancer
  model, _ = _fit(x, y, 3, average_from=1)
  with pytest.raises(ValueError, match="initial_epoch=3.*average_from=1"):
    model.fit(x[:100], y[:100], epochs=5, initial_epoch=3, verbose=0)
  # From epoch 0, a new mean on the new rows.
  model.fit(x[:100], y[:100], epochs=2, verbose=0)
  assert model.last_iterate is not None


def test_a_saved_mean_is_refused_by_a_model_without_averaging(cancer,
                                                              tmp_path):
  """A file (or checkpoint) of a model built with average_from loaded into
  one built without it took the mean as its weights and the last iterate
  as its SDCA state, then trained on from the last iterate at the next
  fit, the mean dropped without a word. Refused now, naming average_from,
  with nothing set (a never-built model stays so); a model with
  average_from loads it. Momentum's saved state is the path's, not the
  duals' meaning: a model built with momentum=0 loads it and trains on."""
  x, y = cancer
  averaged, _ = _fit(x, y, 4, average_from=2)
  weights = str(tmp_path / "mean.weights.h5")
  averaged.save_weights(weights)
  checkpoint = tf.train.Checkpoint(model=averaged).write(
      str(tmp_path / "mean"))
  message = ("the saved SDCA state holds the mean of the iterates of a "
             "model built with average_from; this model is built without "
             "it and would drop the mean")
  plain, _ = _fit(x, y, 1)
  before, duals = plain.get_weights(), _duals(plain)
  for load in (plain.load_weights,
               lambda _: tf.train.Checkpoint(model=plain).read(checkpoint)):
    with pytest.raises(ValueError, match=message):
      load(weights)
    for a, b in zip(plain.get_weights(), before):
      np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(_duals(plain), duals)
  unbuilt = LinearModel(loss="logistic", l2=1.0)
  with pytest.raises(ValueError, match=message):
    tf.train.Checkpoint(model=unbuilt).read(checkpoint)
  assert not unbuilt.built
  other, _ = _fit(x, y, 1, average_from=5)
  other.load_weights(weights)
  np.testing.assert_array_equal(other.get_weights()[0],
                                averaged.get_weights()[0])
  # Momentum's state (the default 'auto' extrapolates these epochs).
  fast = LinearModel(loss="logistic", l2=1.0)
  fast.fit(x, y, epochs=4, verbose=0)
  assert fast._training.momentum_state is not None
  fast.save_weights(weights)
  slow, _ = _fit(x, y, 1)
  slow.load_weights(weights)
  np.testing.assert_array_equal(_duals(slow), _duals(fast))
  gap = slow.fit(x, y, epochs=6, initial_epoch=4,
                 verbose=0).history["duality_gap"]
  assert gap[-1] < 1e-3

"""`keras.LinearModel(momentum=beta)`: in-memory fits with extrapolated
epochs (InMemorySdca's), the same model in fewer epochs, kept by
get_config, refused where it does not apply."""
import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer, load_digits
from sklearn.preprocessing import StandardScaler

from tf_sdca.keras import LinearModel
from tf_sdca.trainer import InMemorySdca


def _cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y.astype(
      np.float32)


def _fit(momentum, x, y, **options):
  # The permutation order, as measured below (the default takes 'adaptive'
  # on these rows at l2 = 1: SDCA's bound max |x_i|^2 / (4 l2) is 106).
  model = LinearModel(l2=1.0, momentum=momentum, visit_order="permutation",
                      **options)
  history = model.fit(x, y, epochs=300, tol=1e-8, verbose=0)
  gaps = history.history["duality_gap"]
  assert np.all(np.asarray(gaps) >= 0.0) and gaps[-1] < 1e-8
  return model, history.history


def test_momentum_trains_the_same_model_in_fewer_epochs():
  x, y = _cancer()
  plain, h_plain = _fit(0.0, x, y)
  fast, h_fast = _fit(0.5, x, y)
  # Measured: 63 epochs plain, 28 with 0.5 (as InMemorySdca's).
  assert len(h_fast["loss"]) <= 0.6 * len(h_plain["loss"])
  assert h_fast["loss"][-1] == pytest.approx(h_plain["loss"][-1], rel=2e-8)
  # The Keras weights are the last epoch's own point: their duality gap,
  # recomputed, is the logged one.
  objective, gap = fast.duality_gap()
  assert objective == pytest.approx(h_fast["loss"][-1], rel=1e-12)
  assert gap == pytest.approx(h_fast["duality_gap"][-1], rel=1e-6)
  # The same epochs as InMemorySdca's momentum on the same rows.
  engine = InMemorySdca(loss="logistic", l2=1.0, momentum=0.5,
                        visit_order="permutation")
  history = engine.fit(y, dense=np.hstack([x, np.ones((len(y), 1),
                                                      np.float32)]),
                       epochs=300, tol=1e-8, verbose=0)
  assert len(history["loss"]) == len(h_fast["loss"])


def test_softmax_with_momentum():
  d = load_digits()
  x = (d.data / 16.0).astype(np.float32)
  _, h_plain = _fit(0.0, x, d.target, loss="softmax", num_classes=10)
  _, h_fast = _fit(0.5, x, d.target, loss="softmax", num_classes=10)
  assert len(h_fast["loss"]) <= 0.6 * len(h_plain["loss"])
  assert h_fast["loss"][-1] == pytest.approx(h_plain["loss"][-1], rel=2e-8)


def test_a_fit_resumed_in_the_process_extrapolates_as_an_uninterrupted_one():
  x, y = _cancer()
  whole = LinearModel(l2=1.0, momentum=0.5)
  whole.fit(x, y, epochs=10, verbose=0)
  split = LinearModel(l2=1.0, momentum=0.5)
  split.fit(x, y, epochs=4, verbose=0)
  split.fit(x, y, epochs=10, initial_epoch=4, verbose=0)
  for a, b in zip(whole.get_weights(), split.get_weights()):
    np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("momentum", [0.5, "auto"])
def test_continued_fits_and_a_saved_model_extrapolate_as_one_fit(
    momentum, tmp_path):
  # Keras' idiom of fit(epochs=1) in a loop, and save, load_model and fit
  # again, continue the extrapolation: the same weights, bit for bit, as
  # one uninterrupted fit ('auto' counts its four plain epochs across the
  # fits and chooses 0.5 here). Before, each fit from epoch 0 started
  # plain, and a loop of one-epoch fits never extrapolated.
  x, y = _cancer()
  whole = LinearModel(l2=1.0, momentum=momentum)
  whole.fit(x, y, epochs=10, verbose=0)
  looped = LinearModel(l2=1.0, momentum=momentum)
  for _ in range(10):
    looped.fit(x, y, epochs=1, verbose=0)
  saved = LinearModel(l2=1.0, momentum=momentum)
  saved.fit(x, y, epochs=3, verbose=0)
  path = str(tmp_path / "model.keras")
  saved.save(path)
  loaded = keras.models.load_model(path)
  loaded.fit(x, y, epochs=7, verbose=0)
  for model in (looped, loaded):
    for a, b in zip(whole.get_weights(), model.get_weights()):
      np.testing.assert_array_equal(a, b)
  # Plain epochs take another path: the extrapolation did act.
  plain = LinearModel(l2=1.0, momentum=0)
  plain.fit(x, y, epochs=10, verbose=0)
  assert np.abs(plain.get_weights()[0] - whole.get_weights()[0]).max() > 1e-6
  # Other rows start over (plainly), with no error.
  loaded.fit(x[:400], y[:400], epochs=2, verbose=0)


def test_auto_momentum_in_a_keras_fit():
  # 'auto' chooses 0.5 on these rows after four plain epochs, as
  # InMemorySdca's does: the same epochs, the same model.
  x, y = _cancer()
  _, h_plain = _fit(0.0, x, y)
  model, h_auto = _fit("auto", x, y)
  assert len(h_auto["loss"]) <= 0.6 * len(h_plain["loss"])
  assert h_auto["loss"][-1] == pytest.approx(h_plain["loss"][-1], rel=2e-8)
  engine = InMemorySdca(loss="logistic", l2=1.0, momentum="auto",
                        visit_order="permutation")
  history = engine.fit(y, dense=np.hstack([x, np.ones((len(y), 1),
                                                      np.float32)]),
                       epochs=300, tol=1e-8, verbose=0)
  assert len(history["loss"]) == len(h_auto["loss"])
  assert model.get_config()["momentum"] == "auto"
  assert LinearModel.from_config(model.get_config()).momentum == "auto"


def test_momentum_is_kept_by_get_config():
  model = LinearModel(l2=1.0, momentum=0.5)
  assert model.get_config()["momentum"] == 0.5
  assert LinearModel.from_config(model.get_config()).momentum == 0.5
  assert "momentum" not in LinearModel(l2=1.0).get_config()


def test_momentum_is_refused_where_it_does_not_apply():
  with pytest.raises(ValueError, match="momentum must be a number in"):
    LinearModel(momentum=1.0)
  with pytest.raises(ValueError, match="average_from"):
    LinearModel(momentum=0.5, average_from=2)
  x, y = _cancer()
  ds = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": tf.strings.as_string(tf.range(len(y)))},
       y)).batch(100)
  with pytest.raises(ValueError, match=r"momentum=0.5 runs in memory "
                     r"\(InMemorySdca, .*\), not streamed \(a tf.data.Dataset\)"):
    LinearModel(momentum=0.5).fit(ds, epochs=1, verbose=0)


def test_the_default_is_auto_for_in_memory_fits_and_off_elsewhere():
  x, y = _cancer()
  default, auto, plain = (LinearModel(l2=1.0, **options) for options in (
      {}, dict(momentum="auto"), dict(momentum=0)))
  for model in (default, auto, plain):
    model.fit(x, y, epochs=10, verbose=0)
  np.testing.assert_array_equal(default.get_weights()[0],
                                auto.get_weights()[0])
  assert np.abs(default.get_weights()[0] - plain.get_weights()[0]).max() > 0
  assert "momentum" not in default.get_config()
  assert LinearModel.from_config(plain.get_config()).momentum == 0.0
  # A streamed dataset and averaging train plainly by default, no error.
  ds = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": tf.strings.as_string(tf.range(len(y)))},
       y)).batch(100)
  LinearModel(l2=1.0).fit(ds, epochs=1, verbose=0)
  LinearModel(l2=1.0, average_from=2).fit(x, y, epochs=3, verbose=0)

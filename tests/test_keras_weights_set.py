"""tf_sdca.keras.LinearModel whose Keras weights were written outside its
SDCA training (`set_weights`, `EarlyStopping(restore_best_weights=True)`):
`evaluate` scores the weights the model predicts with, and `fit` /
`duality_gap` say that they go on from the SDCA training state (weights and
duals are a pair), with the results of a model never set; and a stream
that repeats its examples gets no false gap. Real data: breast_cancer and
wine, standardised."""
import os
import tempfile
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer, load_wine
from sklearn.preprocessing import StandardScaler

from sdca_testutil import primal_loss
from tf_sdca.keras import LinearModel

SET_OUTSIDE = "not the ones its SDCA training left"


def _scaled(loader):
  x, y = loader(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y


@pytest.fixture(scope="module")
def cancer():
  x, y = _scaled(load_breast_cancer)
  return x, y.astype(np.float32)


@pytest.fixture(scope="module")
def wine():
  return _scaled(load_wine)


def _objective_per_row(model, x, y):
  """The regularised objective per row at the model's Keras weights
  (numpy, float64): what `evaluate` on the training rows reports."""
  kernel, bias = [np.asarray(w, np.float64) for w in model.get_weights()]
  z = x.astype(np.float64) @ kernel + bias
  if model.num_classes == 1:
    loss = primal_loss(model.loss_type, z.ravel(), y).sum()
  else:
    zmax = z.max(axis=1)
    loss = np.sum(zmax + np.log(np.exp(z - zmax[:, None]).sum(axis=1)) -
                  z[np.arange(len(y)), y])
  w = np.concatenate([kernel.ravel(), bias.ravel()])
  return (loss + model.l1 * np.abs(w).sum() + 0.5 * model.l2 * w @ w) / len(y)


def _no_set_warning(record):
  return not [w for w in record if SET_OUTSIDE in str(w.message)]


@pytest.mark.parametrize("data,loss,l1", [("cancer", "logistic", 0.0),
                                          ("cancer", "logistic", 0.5),
                                          ("wine", "softmax", 0.0)])
def test_evaluate_scores_the_weights_the_model_predicts_with(
    data, loss, l1, request):
  x, y = request.getfixturevalue(data)
  model = LinearModel(loss=loss, l1=l1, l2=1.0,
                      num_classes=3 if loss == "softmax" else None)
  history = model.fit(x, y, epochs=40, verbose=0).history
  trained = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
  # At the weights SDCA left: the training objective it logged (float32).
  assert trained == pytest.approx(history["loss"][-1], rel=1e-6)
  assert trained == pytest.approx(_objective_per_row(model, x, y), rel=1e-6)
  # Weights set since: their objective, not the training state's (the
  # loss of the trained weights was reported beside the new weights'
  # accuracy).
  model.set_weights([0.5 * w for w in model.get_weights()])
  halved = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
  assert halved == pytest.approx(_objective_per_row(model, x, y), rel=1e-6)
  assert halved > trained * 1.01
  model.set_weights([np.zeros_like(w) for w in model.get_weights()])
  zero = model.evaluate(x, y, verbose=0, return_dict=True)["loss"]
  assert zero == pytest.approx(np.log(model.num_classes if loss == "softmax"
                                      else 2.0), rel=1e-6)


def test_evaluate_after_early_stopping_restores_the_best_weights(cancer):
  x, y = cancer
  model = LinearModel(loss="logistic", l2=1.0)
  model.compile(metrics=["accuracy"])
  stop = keras.callbacks.EarlyStopping(
      monitor="duality_gap", mode="min", patience=2, min_delta=0.5,
      restore_best_weights=True)
  history = model.fit(x, y, epochs=30, verbose=0, callbacks=[stop]).history
  assert len(history["loss"]) < 30  # stopped, and restored an earlier epoch
  result = model.evaluate(x, y, verbose=0, return_dict=True)
  expected = _objective_per_row(model, x, y)
  assert result["loss"] == pytest.approx(expected, rel=1e-6)
  assert result["loss"] != pytest.approx(history["loss"][-1], rel=1e-6)
  p = model.predict(x, verbose=0).ravel()
  assert result["accuracy"] == pytest.approx(np.mean((p > 0.5) == y))
  # The gap is the training state's, and says so.
  with pytest.warns(UserWarning, match=SET_OUTSIDE):
    objective, _ = model.duality_gap()
  assert objective == pytest.approx(history["loss"][-1], rel=1e-9)


@pytest.mark.parametrize("streamed", [False, True])
def test_fit_after_set_weights_warns_and_goes_on_from_the_training_state(
    cancer, streamed):
  x, y = cancer
  data = (tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(100)
          if streamed else None)

  def fit(model, epochs):
    if streamed:
      return model.fit(data, epochs=epochs, verbose=0).history
    return model.fit({"x": x}, y, epochs=epochs, verbose=0).history

  plain, moved = (LinearModel(loss="logistic", l2=1.0) for _ in range(2))
  fit(plain, 4)
  fit(moved, 4)
  moved.set_weights([np.full_like(w, 0.3) for w in moved.get_weights()])
  with pytest.warns(UserWarning, match=SET_OUTSIDE):
    history = fit(moved, 4)
  expected = fit(plain, 4)
  # The same weights, duals and gaps as a model whose weights were never
  # set: the set ones are replaced, not trained from with old duals.
  for a, b in zip(moved.get_weights(), plain.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert history["duality_gap"] == expected["duality_gap"]


@pytest.mark.parametrize("streamed", [False, True])
def test_weights_set_before_any_fit_are_not_paired_with_zero_duals(
    cancer, streamed):
  # Before, the SDCA state took the set weights beside zero duals: an
  # in-memory fit failed in its first gap ("not a primal-dual pair") and a
  # streamed one trained another objective.
  x, y = cancer
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(100)
  fresh, set_first = (LinearModel(loss="logistic", l2=1.0) for _ in range(2))
  set_first.predict({"x": x[:2]}, verbose=0)  # builds the weights
  set_first.set_weights([np.full_like(w, 0.3)
                         for w in set_first.get_weights()])
  args = (data,) if streamed else ({"x": x}, y)
  with pytest.warns(UserWarning, match=SET_OUTSIDE):
    history = set_first.fit(*args, epochs=20, verbose=0).history
  expected = fresh.fit(*args, epochs=20, verbose=0).history
  for a, b in zip(set_first.get_weights(), fresh.get_weights()):
    np.testing.assert_array_equal(a, b)
  assert history["loss"] == expected["loss"]
  assert history["duality_gap"][-1] < 1e-3


@pytest.mark.parametrize("l1,average_from", [(0.0, None), (0.5, None),
                                             (0.0, 3)])
def test_no_warning_where_the_weights_are_the_trainings(cancer, l1,
                                                        average_from):
  x, y = cancer
  model = LinearModel(loss="logistic", l1=l1, l2=1.0,
                      average_from=average_from)
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(100)
  with warnings.catch_warnings(record=True) as record:
    warnings.simplefilter("always")
    model.fit({"x": x}, y, epochs=5, verbose=0)
    model.fit({"x": x}, y, epochs=5, verbose=0)
    model.evaluate({"x": x}, y, verbose=0)
    model.duality_gap()
    path = os.path.join(tempfile.mkdtemp(), "m.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    loaded.fit({"x": x}, y, epochs=2, verbose=0)
    if average_from is None:
      loaded.fit(data, epochs=2, verbose=0)
      loaded.duality_gap()
  assert _no_set_warning(record), [str(w.message) for w in record]


def test_a_stream_repeating_its_examples_gets_no_false_certificate(cancer):
  # Each row twice per epoch (one example id, two rows): the gap over the
  # stream counts the losses twice and the weights once. It went negative
  # and fit(tol=1e-6) stopped after 2 epochs on a "gap" of -0.14; now the
  # gap refuses the data.
  x, y = cancer
  once = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(100)
  model = LinearModel(loss="logistic", l2=1.0)
  with pytest.raises(ValueError, match=r"not each trained example once: "
                     r"an example id repeats"):
    model.fit(once.concatenate(once), epochs=30, verbose=0, tol=1e-6)


def test_set_weights_of_a_wrong_shape_sets_none(cancer):
  """Keras' set_weights assigned the kernel before it refused the bias of
  another shape, leaving the model half-set. Every shape is checked first
  now: the ValueError names the weight and both shapes, and the weights
  are those before, bit for bit."""
  x, y = cancer
  model = LinearModel(loss="logistic")
  model.fit(x, y, epochs=2, verbose=0)
  before = model.get_weights()
  with pytest.raises(ValueError, match=(
      r"^linear_model\S*\.set_weights: weight 1 \(\S+\) has shape \(1,\), "
      r"got \(2,\); nothing was set$")):
    model.set_weights([np.ones((x.shape[1], 1), np.float32),
                       np.ones(2, np.float32)])
  for a, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(a, b)
  with pytest.raises(ValueError):  # (Keras': another count of weights)
    model.set_weights([np.ones((x.shape[1], 1), np.float32)])
  for a, b in zip(model.get_weights(), before):
    np.testing.assert_array_equal(a, b)

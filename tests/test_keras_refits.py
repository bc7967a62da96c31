"""Keras `LinearModel` across fits and loads (found by the Keras door's
audit): a second in-memory `fit` on other arrays reaches their optimum;
`evaluate` and `val_loss` add the regularisation of the data trained last;
`keras.callbacks.BackupAndRestore` resumes an in-memory fit bit for bit;
datasets of single examples and `validation_split` with a dataset are
refused; the hinge's scores are read by the metrics keras.md names."""
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.preprocessing import StandardScaler

from tf_sdca.keras import LinearModel


@pytest.fixture(scope="module")
def cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y.astype(
      np.float32)


def _weights(model):
  kernel, bias = model.get_weights()
  return np.concatenate([kernel[:, 0], bias]).astype(np.float64)


def _fresh(x, y, **options):
  model = LinearModel(**options)
  model.compile()
  model.fit(x, y, epochs=300, tol=1e-12, verbose=0)
  return model


def test_a_second_fit_on_other_rows_reaches_their_optimum():
  # Without ids a row's example key is its position: the second fit took
  # the first one's duals and weight table (its weights hold rows this fit
  # does not have). Squared loss on the other half of diabetes stuck at a
  # gap of 0.1, 0.07 from the closed form.
  x, y = load_diabetes(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  y = ((y - y.mean()) / y.std()).astype(np.float32)
  a, b = slice(0, 221), slice(221, 442)
  model = LinearModel(loss="squared", l2=1.0)
  model.compile()
  model.fit(x[a], y[a], epochs=300, tol=1e-12, verbose=0)
  with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    history = model.fit(x[b], y[b], epochs=300, tol=1e-10, verbose=0)
  assert history.history["duality_gap"][-1] < 1e-10
  design = np.hstack([x[b], np.ones((221, 1))]).astype(np.float64)
  exact = np.linalg.solve(design.T @ design + np.eye(11),
                          design.T @ y[b].astype(np.float64))
  np.testing.assert_allclose(_weights(model), exact, atol=1e-5)


@pytest.mark.parametrize("second", ["subset", "other_half", "flipped"])
def test_logistic_refits_on_other_rows_match_a_fresh_model(cancer, second):
  # The second half's duals were outside their labels' domain (the op
  # refused them: "not a valid dual"); a subset's fit stuck at a gap of 0.9.
  x, y = cancer
  model = _fresh(x, y, l2=1.0)
  xs, ys = {"subset": (x[:100], y[:100]),
            "other_half": (x[285:], y[285:]),
            "flipped": (x, 1.0 - y)}[second]
  history = model.fit(xs, ys, epochs=300, tol=1e-10, verbose=0)
  assert history.history["duality_gap"][-1] < 1e-10
  np.testing.assert_allclose(_weights(model), _weights(_fresh(xs, ys, l2=1.0)),
                             atol=1e-5)


def test_a_fit_going_on_on_the_same_rows_is_the_uninterrupted_one(cancer):
  x, y = cancer
  once = LinearModel(l2=0.1, seed=3)
  once.compile()
  once.fit(x, y, epochs=8, verbose=0)
  twice = LinearModel(l2=0.1, seed=3)
  twice.compile()
  twice.fit(x, y, epochs=3, verbose=0)
  twice.fit(x, y, epochs=5, verbose=0)
  np.testing.assert_array_equal(_weights(twice), _weights(once))


def test_evaluate_adds_the_regularisation_of_the_data_trained_last(cancer):
  # test_step read the training weight as a Python number, frozen into
  # Keras' cached test function at its first trace: an evaluate before fit
  # left the regularisation out of every later one, and a fit on other rows
  # kept the old divisor.
  x, y = cancer
  l2 = 1.0

  def objective(model, xs, ys):
    w = _weights(model)
    z = xs.astype(np.float64) @ w[:-1] + w[-1]
    return (np.logaddexp(0.0, -np.where(ys > 0, 1.0, -1.0) * z).mean() +
            0.5 * l2 * w @ w / len(ys))

  model = LinearModel(l2=l2)
  model.compile()
  assert model.evaluate(x, y, verbose=0) == pytest.approx(np.log(2.0),
                                                          rel=1e-6)
  history = model.fit(x, y, epochs=300, tol=1e-12, verbose=0)
  assert model.evaluate(x, y, verbose=0) == pytest.approx(
      objective(model, x, y), rel=1e-6)
  assert history.history["loss"][-1] == pytest.approx(
      objective(model, x, y), rel=1e-6)
  model.fit(x[:100], y[:100], epochs=300, tol=1e-12, verbose=0)
  assert model.evaluate(x[:100], y[:100], verbose=0) == pytest.approx(
      objective(model, x[:100], y[:100]), rel=1e-6)


@pytest.mark.parametrize("metrics", [None, ["accuracy"]])
def test_backup_and_restore_resumes_an_in_memory_fit_bit_for_bit(
    cancer, tmp_path, metrics):
  # BackupAndRestore loads its backup in on_train_begin, after the rows
  # were packed: the load dropped them ('NoneType' object has no attribute
  # 'metric_inputs'); the backup lacked the fit's momentum.
  x, y = cancer
  options = dict(l2=0.01, second_order="off")

  def model():
    made = LinearModel(**options)
    made.compile(metrics=metrics)
    return made

  whole = model()
  whole.fit(x, y, epochs=10, verbose=0)

  class Interrupt(keras.callbacks.Callback):
    def on_epoch_end(self, epoch, logs=None):
      if epoch == 4:
        raise RuntimeError("interrupted")

  backup = str(tmp_path / "backup")
  with pytest.raises(RuntimeError, match="interrupted"):
    model().fit(x, y, epochs=10, verbose=0, callbacks=[
        keras.callbacks.BackupAndRestore(backup), Interrupt()])
  resumed = model()
  history = resumed.fit(x, y, epochs=10, verbose=0, callbacks=[
      keras.callbacks.BackupAndRestore(backup)])
  assert history.epoch == [5, 6, 7, 8, 9]
  np.testing.assert_array_equal(_weights(resumed), _weights(whole))


def test_a_dataset_of_single_examples_is_refused_naming_batch(cancer):
  # Keras' own models refuse them; here evaluate scored every example as
  # one feature row (30 log 2 at zero weights) and built the model for it,
  # and fit failed inside the op.
  x, y = cancer
  model = LinearModel(l2=1.0)
  model.compile()
  single = tf.data.Dataset.from_tensor_slices((x, y))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"single examples, not batches .*labels.*batch"):
    model.evaluate(single, verbose=0)
  ids = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y))
  with pytest.raises(ValueError, match=r"single examples.*dataset.batch"):
    model.fit(ids, epochs=1, verbose=0)
  with pytest.raises(ValueError, match=r"feature 'a' is a scalar"):
    model.predict(tf.data.Dataset.from_tensor_slices({"a": x[:, 0]}),
                  verbose=0)
  assert model.evaluate(single.batch(64), verbose=0) == pytest.approx(
      np.log(2.0), rel=1e-6)


def test_validation_split_with_a_dataset_is_refused(cancer):
  # (Ignored without a word; Keras refuses it.)
  x, y = cancer
  data = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y)).batch(100)
  model = LinearModel(l2=1.0)
  model.compile()
  with pytest.raises(ValueError, match=r"validation_split=0.2 .*not a "
                     r"tf.data.Dataset: pass validation_data"):
    model.fit(data, epochs=1, validation_split=0.2, verbose=0)


def test_hinge_scores_metrics_as_the_docs_say(cancer):
  # The hinge's outputs are scores: keras.md names the metrics that read
  # them (threshold 0, AUC from logits); "accuracy" and "auc" do not.
  from sklearn.metrics import roc_auc_score  # pylint: disable=import-outside-toplevel
  x, y = cancer
  model = LinearModel(loss="hinge", l2=1.0)
  model.compile(metrics=[keras.metrics.BinaryAccuracy(threshold=0.0),
                         keras.metrics.AUC(from_logits=True,
                                           num_thresholds=2000)])
  model.fit(x, y, epochs=200, tol=1e-8, verbose=0)
  scores = model.predict(x, verbose=0)[:, 0]
  _, accuracy, auc = model.evaluate(x, y, verbose=0)
  assert accuracy == pytest.approx(np.mean((scores > 0) == (y > 0)))
  assert auc == pytest.approx(roc_auc_score(y, scores), abs=2e-3)


def test_first_streamed_epoch_validates_with_the_regularisation(cancer):
  """Keras validates an epoch before its callbacks end it, and the training
  weight (the divisor of the regularisation) of a streamed fit was set by
  the gap measured at the epoch's end: the first epoch of a model's first
  streamed fit validated with a weight of 0, the regularisation left out
  of its `val_loss` (an EarlyStopping on val_loss saw epoch 1 lower than
  it was). The train steps sum it now, so every epoch's `val_loss` is what
  `evaluate` gives at that epoch's weights."""
  x, y = cancer
  data = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y)).batch(100)
  model = LinearModel(l2=30.0)
  model.compile()
  history = model.fit(data, epochs=1, verbose=0, validation_data=(x, y))
  evaluated = model.evaluate(x, y, verbose=0)
  kernel, bias = model.get_weights()
  penalty = 0.5 * 30.0 * (np.sum(kernel.astype(np.float64) ** 2) +
                          np.sum(bias.astype(np.float64) ** 2)) / len(y)
  assert penalty > 1e-3  # what the first epoch's val_loss left out
  assert history.history["val_loss"][0] == pytest.approx(evaluated,
                                                         rel=1e-6)
  history = model.fit(data, epochs=2, verbose=0, validation_data=(x, y))
  assert history.history["val_loss"][-1] == pytest.approx(
      model.evaluate(x, y, verbose=0), rel=1e-6)


def test_save_and_load_keep_the_weights_set_after_training(cancer, tmp_path):
  """`save` / `load_model`, `save_weights` / `load_weights` and a
  tf.train.Checkpoint restored the SDCA state's weights over the file's:
  weights set after the training (`set_weights`,
  `EarlyStopping(restore_best_weights=True)`), which predict and evaluate
  used before the save, loaded as the last epoch's. They load as saved,
  and a fit after the load warns of them as it would have before it."""
  x, y = cancer
  model = LinearModel(l2=1.0)
  model.compile()
  model.fit(x, y, epochs=5, verbose=0)
  set_to = [np.full_like(w, 0.01) for w in model.get_weights()]
  model.set_weights(set_to)
  expected = model.predict(x[:5], verbose=0)
  model.save(str(tmp_path / "m.keras"))
  model.save_weights(str(tmp_path / "m.weights.h5"))
  tf.train.Checkpoint(model=model).write(str(tmp_path / "ckpt"))
  loaded = [keras.models.load_model(str(tmp_path / "m.keras"))]
  for load in ("weights", "checkpoint"):
    other = LinearModel(l2=1.0)
    other.compile()
    other.fit(x[:50], y[:50], epochs=1, verbose=0)  # (built, trained)
    if load == "weights":
      other.load_weights(str(tmp_path / "m.weights.h5"))
    else:
      tf.train.Checkpoint(model=other).read(
          str(tmp_path / "ckpt")).assert_consumed()
    loaded.append(other)
  for other in loaded:
    for got, want in zip(other.get_weights(), set_to):
      np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(other.predict(x[:5], verbose=0), expected)
  with pytest.warns(UserWarning, match="not the ones its SDCA training left"):
    loaded[0].fit(x, y, epochs=1, verbose=0)


def test_what_keras_offers_and_sdca_has_not_is_refused_clearly(cancer,
                                                               tmp_path):
  """train_on_batch failed inside Keras' loop ("'NoneType' object is not
  iterable", or "has no attribute 'step'" after a fit); the learning-rate
  callbacks after the first epoch ("'NoneType' object has no attribute
  'learning_rate'"); a legacy .h5 save in Keras' HDF5 writer ("The truth
  value of an array ... is ambiguous"), a ModelCheckpoint after its first
  epoch's training; and a dict missing a feature given to `model(x)` lost
  its message to Keras' traceback filter (a TypeError rebuilding the
  error)."""
  x, y = cancer
  model = LinearModel(l2=1.0)
  model.compile()
  with pytest.raises(NotImplementedError, match="train_on_batch is not "
                     "available: SDCA trains a data set"):
    model.train_on_batch(x[:10], y[:10])
  for callback in (keras.callbacks.ReduceLROnPlateau(),
                   keras.callbacks.LearningRateScheduler(lambda e, r: r)):
    with pytest.raises(ValueError, match="SDCA has no learning rate"):
      model.fit(x, y, epochs=2, verbose=0, callbacks=[callback])
  with pytest.raises(ValueError, match="a legacy HDF5 file cannot hold"):
    model.fit(x, y, epochs=2, verbose=0, callbacks=[
        keras.callbacks.ModelCheckpoint(str(tmp_path / "ck.h5"))])
  assert model._spec is None  # (nothing trained before the refusals)  # pylint: disable=protected-access
  model.fit({"a": x[:, :10], "b": x[:, 10:]}, y, epochs=1, verbose=0)
  with pytest.raises(ValueError, match="legacy HDF5 file, which cannot "
                     "hold the SDCA training state"):
    model.save(str(tmp_path / "m.h5"))
  for call in (lambda: model({"a": x[:5, :10]}),
               lambda: model.predict_on_batch({"a": x[:5, :10]})):
    with pytest.raises(ValueError, match=r"the input has no feature 'b'; "
                       r"the model takes \['a', 'b'\]"):
      call()

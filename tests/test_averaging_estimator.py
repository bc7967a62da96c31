"""`LinearSDCA(average_from=T0)` in the estimators: output averaging counted
in training steps, checked against the weights of an estimator without
averaging recorded step by step, on breast_cancer in natural units
(standardised); checkpoints keep the running mean."""
import json

import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer
from sklearn.preprocessing import StandardScaler

from tf_sdca import estimator

fc = tf.feature_column
X_WEIGHTS = "linear/linear_model/x/weights"
BIAS = "linear/linear_model/bias_weights"


@pytest.fixture(scope="module")
def cancer():
  data = load_breast_cancer()
  x = StandardScaler().fit_transform(data.data).astype(np.float32)
  features = {"example_id": np.arange(len(x)), "x": x}
  return features, data.target.astype(np.float32)


def _input(features, labels):
  """One batch of every row, used for every step: a step is an epoch."""
  return lambda: ({k: tf.constant(v) for k, v in features.items()},
                  tf.constant(labels))


def _classifier(model_dir, average_from=None):
  options = {} if average_from is None else dict(average_from=average_from)
  return estimator.LinearClassifier(
      [fc.numeric_column("x", shape=30)], model_dir=str(model_dir),
      optimizer=estimator.LinearSDCA(example_id_column="example_id",
                                     symmetric_l2_regularization=1.0,
                                     **options))


def _weights(classifier):
  return np.append(classifier.get_variable_value(X_WEIGHTS)[:, 0],
                   classifier.get_variable_value(BIAS))


def test_the_weights_are_the_mean_of_the_recorded_iterates(cancer,
                                                          tmp_path):
  features, y = cancer
  plain = _classifier(tmp_path / "plain")
  iterates = [np.zeros(31)]  # the start
  for _ in range(10):
    plain.train(_input(features, y), steps=1)
    iterates.append(_weights(plain))
  for t0 in (0, 4, 10):
    averaged = _classifier(tmp_path / f"avg{t0}", average_from=t0)
    averaged.train(_input(features, y), steps=10)
    w = _weights(averaged)
    if t0 == 10:  # the last iterate itself
      np.testing.assert_array_equal(w, iterates[-1])
    else:
      np.testing.assert_allclose(w, np.mean(iterates[t0:], axis=0),
                                 rtol=1e-6, atol=1e-7)
  # predict and evaluate use the mean.
  z = features["x"].astype(np.float64) @ w[:30] + w[30]
  p = np.array([row["logistic"][0] for row in averaged.predict(
      _input(features, y))])
  np.testing.assert_allclose(p, 1 / (1 + np.exp(-z)), rtol=1e-5)
  result = averaged.evaluate(_input(features, y))
  assert result["average_loss"] == pytest.approx(
      np.mean(np.logaddexp(0.0, z) - y * z), rel=1e-5)


def test_averaging_reaches_the_plain_optimum(cancer, tmp_path):
  features, y = cancer
  plain = _classifier(tmp_path / "plain")
  plain.train(_input(features, y), steps=300)
  averaged = _classifier(tmp_path / "avg", average_from=150)
  averaged.train(_input(features, y), steps=300)
  np.testing.assert_allclose(_weights(averaged), _weights(plain), atol=1e-6)


def test_the_exported_model_serves_the_mean(cancer, tmp_path):
  features, y = cancer
  averaged = _classifier(tmp_path / "avg", average_from=2)
  averaged.train(_input(features, y), steps=6)
  w = _weights(averaged)
  path = averaged.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_raw_serving_input_receiver_fn(
          {"x": tf.TensorSpec([None, 30], tf.float32)}))
  served = tf.saved_model.load(path.decode()).signatures["predict"](
      x=tf.constant(features["x"]))
  z = features["x"].astype(np.float64) @ w[:30] + w[30]
  np.testing.assert_allclose(served["logits"].numpy()[:, 0], z, rtol=1e-5,
                             atol=1e-6)


def test_averaging_is_refused_across_processes(cancer, tmp_path,
                                               monkeypatch):
  features, y = cancer
  monkeypatch.setenv("TF_CONFIG", json.dumps(dict(
      cluster=dict(worker=["localhost:1", "localhost:2"]),
      task=dict(type="worker", index=0))))
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=30)], model_dir=str(tmp_path),
      optimizer=estimator.LinearSDCA(example_id_column="example_id",
                                     average_from=2),
      config=estimator.RunConfig())
  with pytest.raises(ValueError, match="average_from=2"):
    classifier.train(_input(features, y), steps=3)


@pytest.mark.parametrize("first, then, message", [
    (None, 2, "the checkpoint holds no mean of the iterates"),
    (2, None, "the checkpoint holds the mean of the iterates"),
])
def test_a_model_dir_of_the_other_kind_is_refused(cancer, tmp_path, first,
                                                  then, message):
  """An estimator resuming a model_dir written with (or without) averaging
  would take a mean that run never had (or drop it): refused, and the
  model_dir's weights are left as they were."""
  features, y = cancer
  written = _classifier(tmp_path, average_from=first)
  written.train(_input(features, y), steps=3)
  before = _weights(written)
  resumed = _classifier(tmp_path, average_from=then)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match=message):
    resumed.train(_input(features, y), steps=2)
  np.testing.assert_array_equal(_weights(_classifier(tmp_path)), before)

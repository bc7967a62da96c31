"""`LinearClassifier(n_classes=K)`: the softmax loss through SdcaModel and
the mini-batch op, on real data (iris in centimetres, wine standardised),
with TensorFlow's multi-class predictions and metrics."""
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tf_sdca import estimator
from tf_sdca import losses

fc = tf.feature_column
L2 = 1.0
X_WEIGHTS = "linear/linear_model/x/weights"
BIAS = "linear/linear_model/bias_weights"


def _sdca(l2=L2):
  return estimator.LinearSDCA(example_id_column="example_id",
                              symmetric_l2_regularization=l2)


def _constant(features, labels):
  return lambda: ({k: tf.constant(v) for k, v in features.items()},
                  tf.constant(labels))


def _objective(w, x1, y):
  return float(np.sum(losses.primal("softmax", x1 @ w, y)) +
               0.5 * L2 * np.sum(w * w))


@pytest.mark.parametrize("name", ["iris", "wine"])
def test_softmax_classifier_reaches_scikit_learns_optimum(tmp_path, name):
  if name == "iris":  # raw measurements, cm
    x, y = load_iris(return_X_y=True)
  else:
    x, y = load_wine(return_X_y=True)
    x = StandardScaler().fit_transform(x)
  x = x.astype(np.float32)
  k = int(y.max()) + 1
  features = {"example_id": np.arange(len(y)), "x": x}
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=x.shape[1])], n_classes=k,
      model_dir=str(tmp_path), optimizer=_sdca())
  classifier.train(_constant(features, y.astype(np.int64)), steps=3000,
                   tol=1e-8)
  w = np.vstack([classifier.get_variable_value(X_WEIGHTS),
                 classifier.get_variable_value(BIAS)[None]])
  assert w.shape == (x.shape[1] + 1, k)
  x1 = np.column_stack([x, np.ones(len(y))]).astype(np.float64)
  ref = LogisticRegression(C=1.0 / L2, fit_intercept=False, tol=1e-12,
                           max_iter=100_000).fit(x1, y)
  best = _objective(ref.coef_.T, x1, y)
  assert _objective(w.astype(np.float64), x1, y) == pytest.approx(best,
                                                                  rel=1e-6)
  z = x1 @ w
  p = np.exp(z - z.max(1, keepdims=True))
  p /= p.sum(1, keepdims=True)
  result = classifier.evaluate(_constant(features, y.astype(np.int64)))
  assert result["accuracy"] == pytest.approx(np.mean(p.argmax(1) == y),
                                             abs=1e-6)
  assert result["average_loss"] == pytest.approx(
      -np.mean(np.log(p[np.arange(len(y)), y])), rel=1e-5)
  predictions = list(classifier.predict(lambda: {"x": tf.constant(x[:5])}))
  np.testing.assert_allclose(
      np.stack([q["probabilities"] for q in predictions]), p[:5], rtol=1e-4)
  assert [int(q["class_ids"][0]) for q in predictions] == list(
      p[:5].argmax(1))


def test_label_vocabulary_and_a_categorical_column(tmp_path):
  x, y = load_iris(return_X_y=True)
  names = np.array(["setosa", "versicolor", "virginica"])
  # Petal length in whole centimetres as a category, beside the numbers.
  bucket = np.floor(x[:, 2]).astype(np.int64)
  features = {"example_id": np.arange(len(y)), "x": x.astype(np.float32),
              "petal_cm": bucket}
  columns = [fc.numeric_column("x", shape=4),
             fc.categorical_column_with_identity("petal_cm", num_buckets=8)]
  classifier = estimator.LinearClassifier(
      columns, n_classes=3, label_vocabulary=list(names),
      model_dir=str(tmp_path), optimizer=_sdca())
  classifier.train(_constant(features, names[y]), steps=400, tol=1e-7)
  result = classifier.evaluate(_constant(features, names[y]))
  assert result["accuracy"] > 0.95
  out = next(iter(classifier.predict(
      lambda: {"x": tf.constant(x[:1].astype(np.float32)),
               "petal_cm": tf.constant(bucket[:1])})))
  assert out["classes"][0] == b"setosa"
  assert list(out["all_classes"]) == [b"setosa", b"versicolor", b"virginica"]
  # The SavedModel classifies raw features: TensorFlow's classification
  # outputs (the class names and their probabilities).
  path = classifier.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_raw_serving_input_receiver_fn(
          {"x": tf.TensorSpec([None, 4], tf.float32),
           "petal_cm": tf.TensorSpec([None], tf.int64)}))
  served = tf.saved_model.load(path.decode()).signatures["predict"](
      x=tf.constant(x[:3].astype(np.float32)),
      petal_cm=tf.constant(bucket[:3]))
  assert served["probabilities"].shape == (3, 3)
  assert [c[0] for c in served["classes"].numpy()] == [b"setosa"] * 3
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="labels must be in label_vocabulary"):
    classifier.train(_constant(features, np.array(["rose"] * len(y))),
                     steps=1)


def test_class_ids_outside_n_classes_are_named(tmp_path):
  x, y = load_iris(return_X_y=True)
  features = {"example_id": np.arange(len(y)), "x": x.astype(np.float32)}
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=4)], n_classes=3,
      model_dir=str(tmp_path), optimizer=_sdca())
  bad = y.copy()
  bad[7] = 3
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"class ids in \[0, 3\)"):
    classifier.train(_constant(features, bad), steps=1)

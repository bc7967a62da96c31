"""tf_sdca.estimator.LinearClassifier(n_classes > 2): softmax trained by
SDCA through SdcaModel reaches InMemorySdca's softmax optimum on the same
design matrix (the bias a constant-1 column), predicts and evaluates with
TensorFlow's multi-class keys, agrees with scikit-learn's multinomial
LogisticRegression, takes string labels through label_vocabulary, exports
`classes` / `scores` signatures, and names bad labels.
"""
import warnings

import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_iris
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tf_sdca import estimator
from tf_sdca.trainer import InMemorySdca

fc = tf.feature_column
BIAS = "linear/linear_model/bias_weights"
NAMES = ["setosa", "versicolor", "virginica"]


def _sdca(l2=1.0):
  return estimator.LinearSDCA(example_id_column="example_id",
                              symmetric_l2_regularization=l2)


def _constant(features, labels):
  return lambda: ({k: tf.constant(v) for k, v in features.items()},
                  tf.constant(labels))


def _objective(w, design, y, l2):
  z = design.astype(np.float64) @ w
  top = z.max(axis=1)
  lse = top + np.log(np.exp(z - top[:, None]).sum(axis=1))
  return (lse - z[np.arange(len(y)), y]).sum() + 0.5 * l2 * np.sum(w * w)


@pytest.fixture(scope="module")
def iris():
  data = load_iris()
  x = StandardScaler().fit_transform(data.data).astype(np.float32)
  return x, data.target.astype(np.int64)


def _reference(design, y, l2):
  ref = InMemorySdca(loss="softmax", num_classes=3, l2=l2)
  h = ref.fit(labels=y, dense=design, epochs=3000, tol=1e-12, verbose=0)
  assert h["duality_gap"][-1] < 1e-10
  return ref.dense_weights


def test_iris_numeric_columns_reach_the_in_memory_softmax_optimum(
    tmp_path, iris):
  x, y = iris
  l2 = 1.0
  names = [f"x{j}" for j in range(4)]
  features = {"example_id": np.arange(len(y))}
  features.update({n: x[:, j] for j, n in enumerate(names)})
  classifier = estimator.LinearClassifier(
      [fc.numeric_column(n) for n in names], model_dir=str(tmp_path),
      n_classes=3, optimizer=_sdca(l2))
  classifier.train(_constant(features, y), steps=2000, tol=1e-8)
  w = np.vstack([classifier.get_variable_value(
      f"linear/linear_model/{n}/weights") for n in names] +
                [classifier.get_variable_value(BIAS)[None, :]])
  assert w.shape == (5, 3)
  design = np.hstack([x, np.ones((len(y), 1), np.float32)])
  ours = _objective(w, design, y, l2)
  theirs = _objective(_reference(design, y, l2), design, y, l2)
  assert abs(ours - theirs) <= 1e-5 * theirs

  # evaluate: TensorFlow's multi-class metrics at these weights.
  z = design.astype(np.float64) @ w
  top = z.max(axis=1)
  log_loss = top + np.log(np.exp(z - top[:, None]).sum(axis=1)) - z[
      np.arange(len(y)), y]
  result = classifier.evaluate(_constant(features, y), steps=1)
  np.testing.assert_allclose(result["average_loss"], log_loss.mean(),
                             rtol=1e-5)
  np.testing.assert_allclose(result["accuracy"],
                             np.mean(z.argmax(axis=1) == y), rtol=1e-6)
  # Close to scikit-learn's multinomial model with the bias as a feature
  # (the same objective): the same class for nearly every flower.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    sk = LogisticRegression(C=1.0 / l2, fit_intercept=False, tol=1e-12,
                            max_iter=10000).fit(design, y)
  assert np.mean(sk.predict(design) == z.argmax(axis=1)) >= 0.99
  np.testing.assert_allclose(result["accuracy"], sk.score(design, y),
                             atol=1.5 / len(y))

  # predict: TensorFlow's multi-class dict.
  del features["example_id"]
  out = list(classifier.predict(lambda: {k: tf.constant(v) for k, v in
                                          features.items()}))
  assert sorted(out[0]) == sorted(["logits", "probabilities", "class_ids",
                                   "classes", "all_class_ids",
                                   "all_classes"])
  probs = np.stack([o["probabilities"] for o in out])
  e = np.exp(z - top[:, None])
  np.testing.assert_allclose(probs, e / e.sum(axis=1, keepdims=True),
                             rtol=1e-4, atol=1e-6)
  np.testing.assert_array_equal([o["class_ids"][0] for o in out],
                                z.argmax(axis=1))
  assert out[0]["classes"][0] == str(z[0].argmax()).encode()


def test_label_vocabulary_and_a_categorical_column(tmp_path, iris):
  # Petal length as a categorical feature (its quartile as a string) next
  # to the numeric petal width; string labels through label_vocabulary.
  x, y = iris
  l2 = 0.5
  quartile = np.searchsorted(np.quantile(x[:, 2], [0.25, 0.5, 0.75]),
                             x[:, 2])
  words = np.array(["q0", "q1", "q2", "q3"])[quartile]
  labels = np.array(NAMES)[y]
  features = {"example_id": np.arange(len(y)), "width": x[:, 3],
              "length": words}
  columns = [fc.numeric_column("width"),
             fc.categorical_column_with_vocabulary_list(
                 "length", ["q0", "q1", "q2", "q3"])]
  classifier = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path), n_classes=3,
      label_vocabulary=NAMES, optimizer=_sdca(l2))
  classifier.train(_constant(features, labels), steps=2000, tol=1e-8)
  onehot = np.eye(4, dtype=np.float32)[quartile]
  design = np.hstack([onehot, x[:, 3:4], np.ones((len(y), 1), np.float32)])
  w = np.vstack([
      classifier.get_variable_value("linear/linear_model/length/weights"),
      classifier.get_variable_value("linear/linear_model/width/weights"),
      classifier.get_variable_value(BIAS)[None, :]])
  assert w.shape == (6, 3)
  ours = _objective(w, design, y, l2)
  theirs = _objective(_reference(design, y, l2), design, y, l2)
  assert abs(ours - theirs) <= 1e-5 * theirs
  out = list(classifier.predict(lambda: {
      "width": tf.constant(x[:, 3]), "length": tf.constant(words)}))
  z = design.astype(np.float64) @ w
  assert [o["classes"][0].decode() for o in out] == [
      NAMES[k] for k in z.argmax(axis=1)]
  result = classifier.evaluate(_constant(features, labels), steps=1)
  np.testing.assert_allclose(result["accuracy"],
                             np.mean(z.argmax(axis=1) == y), rtol=1e-6)

  # A SavedModel's classification signature: the class names and scores.
  spec = fc.make_parse_example_spec(columns)
  path = classifier.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_parsing_serving_input_receiver_fn(spec))
  loaded = tf.saved_model.load(path if isinstance(path, str) else
                               path.decode())
  serialized = [tf.train.Example(features=tf.train.Features(feature={
      "width": tf.train.Feature(float_list=tf.train.FloatList(
          value=[float(x[i, 3])])),
      "length": tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[words[i].encode()]))})).SerializeToString()
                for i in range(5)]
  served = loaded.signatures["classification"](
      inputs=tf.constant(serialized))
  assert [c.decode() for c in served["classes"].numpy()[0]] == NAMES
  e = np.exp(z[:5] - z[:5].max(axis=1, keepdims=True))
  np.testing.assert_allclose(served["scores"].numpy(),
                             e / e.sum(axis=1, keepdims=True), rtol=1e-4,
                             atol=1e-6)


def test_bad_labels_are_named(tmp_path, iris):
  x, y = iris
  features = {"example_id": np.arange(10), "x": x[:10]}
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=4)], model_dir=str(tmp_path / "a"),
      n_classes=3, optimizer=_sdca())
  bad = y[:10].copy()
  bad[4] = 3
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"class ids in \[0, 3\)"):
    classifier.train(_constant(features, bad), steps=1)
  words = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=4)], model_dir=str(tmp_path / "b"),
      n_classes=3, label_vocabulary=NAMES, optimizer=_sdca())
  strings = np.array(NAMES)[y[:10]]
  strings[2] = "rose"
  with pytest.raises(tf.errors.InvalidArgumentError, match="rose"):
    words.train(_constant(features, strings), steps=1)
  with pytest.raises(ValueError, match="label_vocabulary must hold"):
    estimator.LinearClassifier([fc.numeric_column("x", shape=4)],
                               n_classes=3, label_vocabulary=NAMES[:2],
                               optimizer=_sdca())

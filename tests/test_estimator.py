"""tf_sdca.estimator: the optimum on real data, soft labels, the gap stop,
resuming from model_dir, warm starts, evaluation metrics, predictions,
Keras preprocessing and FeatureSpace, RunConfig and hooks.

(TensorFlow's own LinearSDCA expectations are in test_estimator_tf.py; the
SavedModel and bad input in test_estimator_serving.py.)
"""
import json
import warnings

import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tf_sdca import estimator
from tf_sdca import metrics as np_metrics
from tf_sdca.trainer import InMemorySdca

fc = tf.feature_column
X_WEIGHTS = "linear/linear_model/x/weights"
BIAS = "linear/linear_model/bias_weights"


def _sdca(l2=1.0, **kwargs):
  return estimator.LinearSDCA(example_id_column="example_id",
                              symmetric_l2_regularization=l2, **kwargs)


def _constant(features, labels):
  """An input_fn of one batch of tensors, used for every step."""
  return lambda: ({k: tf.constant(v) for k, v in features.items()},
                  tf.constant(labels))


def _relative(a, b):
  return np.linalg.norm(np.asarray(a) - np.asarray(b)) / np.linalg.norm(b)


@pytest.fixture(scope="module")
def cancer():
  data = load_breast_cancer()
  x = StandardScaler().fit_transform(data.data).astype(np.float32)
  return x, data.target.astype(np.float32)


def test_breast_cancer_reaches_the_in_memory_and_liblinear_optimum(
    tmp_path, cancer):
  x, y = cancer
  features = {"example_id": np.arange(len(y)), "x": x}
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=x.shape[1])], model_dir=str(tmp_path),
      optimizer=_sdca(1.0))
  # One batch of every row per step: a step is an epoch. tol stops it once
  # the relative gap is 1e-8 (103 steps; 1e-6 took 66 and left the weights
  # 6e-5 from the optimum, 1e-8 leaves 1e-6), far before 1000.
  classifier.train(_constant(features, y), steps=1000, tol=1e-8)
  steps = classifier.get_variable_value("global_step")
  assert steps < 200
  w = np.append(classifier.get_variable_value(X_WEIGHTS)[:, 0],
                classifier.get_variable_value(BIAS))
  reference = InMemorySdca(loss="logistic", l2=1.0)
  ones = np.ones((len(y), 1), np.float32)
  reference.fit(labels=y, dense=np.hstack([x, ones]), epochs=300, tol=1e-12,
                verbose=0)
  assert _relative(w, reference.dense_weights) < 1e-4
  # liblinear solves the same problem (C = 1 / l2, the intercept an
  # l2-regularised column of ones).
  clf = LogisticRegression(solver="liblinear", C=1.0, tol=1e-12,
                           intercept_scaling=1.0, max_iter=100_000).fit(x, y)
  assert _relative(w, np.append(clf.coef_.ravel(), clf.intercept_)) < 1e-4
  # evaluate on the training data: the mean logistic loss at w.
  z = x.astype(np.float64) @ w[:-1] + w[-1]
  mean_loss = np.mean(np.logaddexp(0.0, z) - y * z)
  result = classifier.evaluate(_constant(features, y))
  assert result["average_loss"] == pytest.approx(mean_loss, rel=1e-5)
  assert result["loss"] == pytest.approx(mean_loss, rel=1e-5)
  assert result["global_step"] == steps


def test_diabetes_regression_matches_the_ridge_closed_form(tmp_path):
  # Nine numeric features in one column and 'sex' (two values) as a
  # bucketized column, i.e. one sparse weight per sex; example weights.
  data = load_diabetes()
  x = StandardScaler().fit_transform(data.data).astype(np.float32)
  sex, others = x[:, 1:2], np.delete(x, 1, axis=1)
  y = data.target.astype(np.float32)
  s = np.random.default_rng(0).uniform(0.5, 2.0, len(y)).astype(np.float32)
  features = {"example_id": np.array([f"p{i}" for i in range(len(y))]),
              "x": others, "sex": sex, "s": s}
  l2 = 5.0
  regressor = estimator.LinearRegressor(
      [fc.numeric_column("x", shape=9),
       fc.bucketized_column(fc.numeric_column("sex"), boundaries=[0.0])],
      model_dir=str(tmp_path), weight_column="s", optimizer=_sdca(l2))
  regressor.train(_constant(features, y), steps=2000, tol=1e-8)
  w = np.concatenate([
      regressor.get_variable_value(X_WEIGHTS)[:, 0],
      regressor.get_variable_value(
          "linear/linear_model/sex_bucketized/weights")[:, 0],
      regressor.get_variable_value(BIAS)])
  one_hot = np.stack([sex[:, 0] < 0, sex[:, 0] >= 0], 1)
  a = np.hstack([others, one_hot, np.ones((len(y), 1))]).astype(np.float64)
  exact = np.linalg.solve(a.T @ (s[:, None] * a) + l2 * np.eye(a.shape[1]),
                          a.T @ (s * y))
  assert _relative(w, exact) < 1e-4
  result = regressor.evaluate(_constant(features, y))
  residual = (a @ w - y) ** 2
  assert result["average_loss"] == pytest.approx(
      (s * residual).sum() / s.sum(), rel=1e-5)
  assert result["loss"] == pytest.approx((s * residual).mean(), rel=1e-5)
  assert result["label/mean"] == pytest.approx((s * y).sum() / s.sum(),
                                               rel=1e-6)
  assert sorted(result) == ["average_loss", "global_step", "label/mean",
                            "loss", "prediction/mean"]


def test_soft_labels_reach_the_cross_entropy_optimum(tmp_path):
  # Labels in [0, 1]: the loss is y softplus(-z) + (1 - y) softplus(z).
  rng = np.random.default_rng(1)
  n = 60
  x = rng.normal(size=(n, 3)).astype(np.float32)
  y = np.clip(rng.uniform(-0.3, 1.3, n), 0, 1).astype(np.float32)
  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=3)], model_dir=str(tmp_path),
      optimizer=_sdca(2.0))
  classifier.train(_constant({"example_id": np.arange(n), "x": x}, y),
                   steps=500, tol=1e-10)
  w = np.append(classifier.get_variable_value(X_WEIGHTS)[:, 0],
                classifier.get_variable_value(BIAS))
  a = np.hstack([x, np.ones((n, 1))]).astype(np.float64)

  def objective(v):
    z = a @ v
    p = 1.0 / (1.0 + np.exp(-z))
    return (np.sum(np.logaddexp(0.0, z) - y * z) + v @ v,
            a.T @ (p - y) + 2.0 * v)

  best = minimize(objective, np.zeros(4), jac=True, method="L-BFGS-B",
                  options=dict(ftol=1e-15, gtol=1e-12)).x
  assert _relative(w, best) < 1e-4


def test_every_column_kind_trains_its_counts_encoding(tmp_path):
  # Multi-valued inputs with repeated ids (counted twice), out-of-vocabulary
  # values (dropped) and missing ones (''), through a vocabulary file, an
  # identity, a hash bucket, a weighted categorical and an indicator column:
  # the squared loss then has the ridge closed form on the counts matrix.
  rng = np.random.default_rng(4)
  n = 60
  vocabulary = ["a", "b", "c", "d"]
  vocabulary_file = tmp_path / "vocabulary.txt"
  vocabulary_file.write_text("\n".join(vocabulary) + "\n")
  words = rng.choice(vocabulary + ["zz", ""], (n, 3))
  items = rng.integers(0, 6, (n, 2))
  tags = rng.choice(["t1", "t2", "t3", "t4"], (n, 1))
  colors = rng.choice(["red", "blue", "pink"], (n, 2))
  weighted_ids = rng.choice(["x", "y"], (n, 2))
  weighted_values = rng.uniform(0.5, 2.0, (n, 2)).astype(np.float32)
  y = rng.normal(size=n).astype(np.float32)
  index = np.stack(np.meshgrid(np.arange(n), np.arange(2), indexing="ij"),
                   -1).reshape(-1, 2)

  def input_fn():
    return {"example_id": tf.range(n),
            "word": tf.constant(words), "item": tf.constant(items),
            "tag": tf.constant(tags), "color": tf.constant(colors),
            "kind": tf.SparseTensor(index, weighted_ids.ravel(), [n, 2]),
            "kind_weight": tf.SparseTensor(index, weighted_values.ravel(),
                                           [n, 2])}, tf.constant(y)

  columns = [
      fc.categorical_column_with_vocabulary_file("word",
                                                 str(vocabulary_file)),
      fc.categorical_column_with_identity("item", num_buckets=6),
      fc.categorical_column_with_hash_bucket("tag", hash_bucket_size=3),
      fc.indicator_column(fc.categorical_column_with_vocabulary_list(
          "color", ["red", "blue"])),
      fc.weighted_categorical_column(
          fc.categorical_column_with_vocabulary_list("kind", ["x", "y"]),
          "kind_weight")]
  regressor = estimator.LinearRegressor(columns, model_dir=str(tmp_path),
                                        optimizer=_sdca(1.0))
  regressor.train(input_fn, steps=3000, tol=1e-8)
  # The counts matrix, in the columns' (sorted) order.
  blocks = {}

  def counts(ids, size, values=None):
    out = np.zeros((n, size))
    values = np.ones(ids.shape) if values is None else values
    for (row, _), i, v in zip(np.ndindex(*ids.shape), ids.ravel(),
                              values.ravel()):
      if i >= 0:
        out[row, i] += v
    return out

  blocks["color_indicator"] = counts(
      np.vectorize({"red": 0, "blue": 1}.get)(colors, -1), 2)
  blocks["item"] = counts(items, 6)
  blocks["kind_weighted_by_kind_weight"] = counts(
      np.vectorize({"x": 0, "y": 1}.get)(weighted_ids), 2, weighted_values)
  blocks["tag"] = counts(
      tf.strings.to_hash_bucket_fast(tags, 3).numpy(), 3)
  blocks["word"] = counts(
      np.vectorize(lambda w: vocabulary.index(w) if w in vocabulary
                   else -1)(words), 4)
  assert blocks["word"].max() >= 2  # some word repeats within a row
  a = np.hstack([blocks[k] for k in sorted(blocks)] + [np.ones((n, 1))])
  exact = np.linalg.solve(a.T @ a + np.eye(a.shape[1]), a.T @ y)
  ours = np.concatenate(
      [regressor.get_variable_value(f"linear/linear_model/{k}/weights")[:, 0]
       for k in sorted(blocks)] + [regressor.get_variable_value(BIAS)])
  assert _relative(ours, exact) < 1e-4
  predictions = np.array([p["predictions"][0] for p in regressor.predict(
      lambda: input_fn()[0])])
  np.testing.assert_allclose(predictions, a @ exact, rtol=1e-3, atol=1e-3)


def _mixed_problem(n=48, seed=2):
  rng = np.random.default_rng(seed)
  countries = np.array(["US", "IT", "GB", "MX", "FR"])
  features = {
      "example_id": np.array([f"e{i}" for i in range(n)]),
      "price": rng.normal(size=(n, 1)).astype(np.float32),
      "country": countries[rng.integers(0, 5, (n, 1))],
      "size": rng.uniform(0, 10, (n, 1)).astype(np.float32)}
  y = (rng.uniform(size=n) < 0.4).astype(np.float32)
  size = fc.bucketized_column(fc.numeric_column("size"), [2.0, 5.0])
  country = fc.categorical_column_with_vocabulary_list("country",
                                                       list(countries[:4]))
  columns = [fc.numeric_column("price"), size, fc.indicator_column(country),
             fc.crossed_column([size, "country"], hash_bucket_size=7)]
  return features, y, columns


def _state(classifier):
  names = classifier.get_variable_names()
  return {n: classifier.get_variable_value(n) for n in names}


def test_resume_from_model_dir_equals_an_uninterrupted_run(tmp_path):
  features, y, columns = _mixed_problem()

  def dataset():
    # Two batches per pass; the input restarts with every train call.
    data = tf.data.Dataset.from_tensor_slices((features, y))
    return data.batch(24).repeat()

  for input_fn, steps in ((_constant(features, y), 7), (dataset, 4)):
    def make(directory):
      return estimator.LinearClassifier(
          columns, model_dir=str(tmp_path / directory),
          optimizer=_sdca(0.5, num_table_shards=2))

    whole = make(f"whole{steps}").train(input_fn, steps=2 * steps)
    first = make(f"parts{steps}").train(input_fn, steps=steps)
    del first  # a new object continues from the checkpoint
    resumed = make(f"parts{steps}").train(input_fn, steps=steps)
    a, b = _state(whole), _state(resumed)
    assert a["global_step"] == b["global_step"] == 2 * steps
    assert sorted(a) == sorted(b)
    for name in a:
      np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    # The duals too: the same SDCA state.
    whole_state = whole._model.sdca.get_state()
    resumed_state = resumed._model.sdca.get_state()
    order = lambda s: np.argsort(s["keys"])  # noqa: E731
    np.testing.assert_array_equal(
        whole_state["values"][order(whole_state)],
        resumed_state["values"][order(resumed_state)])
  # max_steps counts from the global step: nothing more to do.
  assert resumed.train(dataset, max_steps=8).get_variable_value(
      "global_step") == 8



def test_model_dir_checks_the_states_options_and_reads_older_checkpoints(
    tmp_path, monkeypatch):
  """A model_dir trained under another l2 is refused (its slots v / l2
  would stay off w(alpha) for good); one written before the model recorded
  its state's options resumes as it did."""
  from tf_sdca import sdca_model  # pylint: disable=import-outside-toplevel
  features, y, columns = _mixed_problem()
  make = lambda l2, name="dir": estimator.LinearClassifier(  # noqa: E731
      columns, model_dir=str(tmp_path / name), optimizer=_sdca(l2))
  make(0.5).train(_constant(features, y), steps=2)
  with pytest.raises(ValueError, match=r"symmetric_l2_regularization 0.5 "
                     r"\(this model 2.0\)"):
    make(2.0).train(_constant(features, y), steps=2)
  children = sdca_model.SdcaModel._trackable_children

  def without_record(self, save_type="checkpoint", **kwargs):
    out = children(self, save_type, **kwargs)
    out.pop("_state_meaning", None)
    return out

  monkeypatch.setattr(sdca_model.SdcaModel, "_trackable_children",
                      without_record)
  make(0.5, "old").train(_constant(features, y), steps=2)
  monkeypatch.undo()
  resumed = make(0.5, "old").train(_constant(features, y), steps=2)
  assert resumed.get_variable_value("global_step") == 4


def test_model_dir_of_a_column_of_another_size_is_refused_by_name(tmp_path):
  """A crossed column's hash_bucket_size changed (7 -> 9) met TensorFlow's
  "incompatible tensor with shape", naming neither the column nor the
  checkpoint; the model_dir is left as it was."""
  features, y, columns = _mixed_problem()
  model_dir = str(tmp_path / "dir")
  estimator.LinearClassifier(columns, model_dir=model_dir,
                             optimizer=_sdca(0.5)).train(
                                 _constant(features, y), steps=2)
  before = _state(estimator.LinearClassifier(columns, model_dir=model_dir,
                                             optimizer=_sdca(0.5)))
  wider = columns[:3] + [fc.crossed_column([columns[1], "country"],
                                           hash_bucket_size=9)]
  with pytest.raises(ValueError, match=r"holds linear/linear_model/.*"
                     r"weights of shape \[7, 1\], this estimator's is "
                     r"\[9, 1\]: its feature column has another size"):
    estimator.LinearClassifier(wider, model_dir=model_dir,
                               optimizer=_sdca(0.5)).train(
                                   _constant(features, y), steps=2)
  after = _state(estimator.LinearClassifier(columns, model_dir=model_dir,
                                            optimizer=_sdca(0.5)))
  assert sorted(after) == sorted(before)
  for name, value in before.items():
    np.testing.assert_array_equal(after[name], value)


def test_predict_and_evaluate_refuse_features_that_are_not_finite(tmp_path):
  """Training's op refuses them; predict gave NaN probabilities and evaluate
  a NaN loss (beside a finite accuracy) without a word."""
  rng = np.random.default_rng(0)
  price = rng.normal(size=200).astype(np.float32)
  y = (price > 0).astype(np.float32)
  model = estimator.LinearClassifier(
      [tf.feature_column.numeric_column("price")],
      model_dir=str(tmp_path / "m"), optimizer=_sdca())
  model.train(_constant({"example_id": np.arange(200), "price": price}, y),
              steps=2)
  bad = price.copy()
  bad[3] = np.nan
  with pytest.raises(ValueError, match=r"features\['price'\] has nan "
                     r"\(entry 3\): features must be finite"):
    next(iter(model.predict(_constant({"price": bad}, y))))
  bad[3] = np.inf
  with pytest.raises(ValueError, match=r"features\['price'\] has inf"):
    model.evaluate(_constant({"price": bad}, y))
  good = next(iter(model.predict(_constant({"price": price}, y))))
  assert np.all(np.isfinite(good["probabilities"]))

def test_warm_start_loads_weights_from_tf_sdca_and_tf1_checkpoints(tmp_path):
  features, y, columns = _mixed_problem()
  source = estimator.LinearClassifier(columns, model_dir=str(tmp_path / "a"),
                                      optimizer=_sdca())
  source.train(_constant(features, y), steps=5)
  # A step on examples of weight 0 moves nothing: what the new estimator
  # holds after it is what it loaded.
  zero = dict(features, s=np.zeros(len(y), np.float32))

  def warm(directory, warm_start_from):
    target = estimator.LinearClassifier(
        columns, model_dir=str(tmp_path / directory), weight_column="s",
        optimizer=_sdca(), warm_start_from=warm_start_from)
    return _state(target.train(_constant(zero, y), steps=1))

  loaded = warm("b", str(tmp_path / "a"))
  for name, value in _state(source).items():
    if name != "global_step":
      np.testing.assert_array_equal(loaded[name], value, err_msg=name)
  assert loaded["global_step"] == 1  # the step is not warm-started

  # Only the weights vars_to_warm_start selects.
  price = "linear/linear_model/price/weights"
  partial = warm("c", estimator.WarmStartSettings(str(tmp_path / "a"),
                                                  vars_to_warm_start=price))
  np.testing.assert_array_equal(partial[price], _state(source)[price])
  assert not partial[BIAS].any()

  # A TF1 name-based checkpoint, as tf.estimator wrote them.
  graph = tf.Graph()
  with graph.as_default():
    tf1 = {name: tf.compat.v1.get_variable(
        name, initializer=np.full(value.shape, 0.5, np.float32))
           for name, value in _state(source).items() if name != "global_step"}
    saver = tf.compat.v1.train.Saver(list(tf1.values()))
    with tf.compat.v1.Session() as session:
      session.run(tf.compat.v1.global_variables_initializer())
      prefix = saver.save(session, str(tmp_path / "tf1" / "model.ckpt"))
  loaded = warm("d", prefix)
  for name in tf1:
    np.testing.assert_array_equal(loaded[name], 0.5)
  # Resuming in a TF1 model_dir is refused: its duals are not there.
  tf1_dir = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path / "tf1"), optimizer=_sdca())
  with pytest.raises(ValueError, match="not a tf_sdca.estimator checkpoint"):
    tf1_dir.train(_constant(features, y), steps=1)


def test_evaluate_reports_tensorflows_classifier_metrics(tmp_path):
  features, y, columns = _mixed_problem()
  weights = np.linspace(0.5, 1.5, len(y)).astype(np.float32)
  classifier = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path), weight_column="w",
      optimizer=_sdca())
  data = dict(features, w=weights)
  classifier.train(_constant(data, y), steps=10)

  def batches():  # two batches of 32 and 16
    return tf.data.Dataset.from_tensor_slices((data, y)).batch(32)

  result = classifier.evaluate(batches)
  logits = np.array([p["logits"][0] for p in classifier.predict(
      lambda: tf.data.Dataset.from_tensor_slices(features).batch(10))])
  p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
  losses = np.logaddexp(0.0, logits) - y * logits
  wl = weights * losses
  expected = {
      "average_loss": wl.sum() / weights.sum(),
      # the mean over batches of sum(w l) / batch size
      "loss": np.mean([wl[:32].sum() / 32, wl[32:].sum() / 16]),
      "accuracy": (weights * ((logits > 0) == y)).sum() / weights.sum(),
      "label/mean": (weights * y).sum() / weights.sum(),
      "prediction/mean": (weights * p).sum() / weights.sum()}
  expected["accuracy_baseline"] = max(expected["label/mean"],
                                      1 - expected["label/mean"])
  predicted = logits > 0
  expected["precision"] = (weights * (predicted & (y == 1))).sum() / (
      weights * predicted).sum()
  expected["recall"] = (weights * (predicted & (y == 1))).sum() / (
      weights * (y == 1)).sum()
  for key, value in expected.items():
    assert result[key] == pytest.approx(value, rel=1e-5), key
  # Keras' 200-threshold AUC is within 0.01 of the exact one (unweighted
  # here, so that the Mann-Whitney statistic applies).
  unweighted = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path), optimizer=_sdca()).evaluate(
          lambda: tf.data.Dataset.from_tensor_slices((features, y)).batch(48))
  assert abs(unweighted["auc"] - np_metrics.auc(y, logits)) < 0.01
  assert 0 < result["auc_precision_recall"] <= 1
  assert result["global_step"] == 10
  # TensorFlow 1's reduction: the weighted sum per batch.
  v1 = estimator.LinearClassifierV1(columns, model_dir=str(tmp_path),
                                    weight_column="w", optimizer=_sdca())
  assert v1.evaluate(batches)["loss"] == pytest.approx(
      np.mean([wl[:32].sum(), wl[32:].sum()]), rel=1e-5)


def test_predict_with_a_label_vocabulary_and_predict_keys(tmp_path):
  features, y, columns = _mixed_problem()
  words = np.where(y > 0, "yes", "no")
  classifier = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path), label_vocabulary=["no", "yes"],
      optimizer=_sdca())
  classifier.train(_constant(features, words), steps=5)
  first = next(classifier.predict(_constant(features, words)))
  assert sorted(first) == sorted(["logits", "logistic", "probabilities",
                                  "class_ids", "classes", "all_class_ids",
                                  "all_classes"])
  assert first["probabilities"][1] == pytest.approx(first["logistic"][0])
  assert first["classes"][0] == (b"yes" if first["logits"][0] > 0 else b"no")
  np.testing.assert_array_equal(first["all_classes"], [b"no", b"yes"])
  np.testing.assert_array_equal(first["all_class_ids"], [0, 1])
  batch = next(classifier.predict(lambda: {k: tf.constant(v) for k, v in
                                           features.items()},
                                  predict_keys=["class_ids"],
                                  yield_single_examples=False))
  assert list(batch) == ["class_ids"] and batch["class_ids"].shape == (48, 1)
  # The tensor input is scored once.
  assert len(list(classifier.predict(_constant(features, words)))) == 48


def test_keras_lookup_layer_trains_like_the_vocabulary_column(tmp_path):
  # StringLookup puts the OOV id first, the vocabulary list column last: the
  # same model with its rows permuted, so the same predictions.
  features, y, _ = _mixed_problem()
  vocabulary = ["US", "IT", "GB", "MX"]
  runs = {}
  for kind, column in (
      ("keras", {"country": keras.layers.StringLookup(vocabulary=vocabulary)}),
      ("column", fc.categorical_column_with_vocabulary_list(
          "country", vocabulary, num_oov_buckets=1))):
    model = estimator.LinearClassifier(
        [fc.numeric_column("price"), column], model_dir=str(tmp_path / kind),
        optimizer=_sdca())
    features_of = {k: features[k] for k in ("example_id", "price",
                                            "country")}
    model.train(_constant(features_of, y), steps=20)
    runs[kind] = np.array([p["logits"][0] for p in model.predict(
        _constant(features_of, y))])
    weights = model.get_variable_value("linear/linear_model/country/weights")
    assert weights.shape == (5, 1)
  np.testing.assert_allclose(runs["keras"], runs["column"], atol=1e-5)


def test_feature_space_matches_in_memory_sdca_on_its_encoding(tmp_path):
  rng = np.random.default_rng(3)
  n = 80
  raw = {"amount": rng.normal(5.0, 2.0, n).astype(np.float32),
         "color": rng.choice(["red", "green", "blue"], n),
         "code": rng.integers(0, 50, n).astype(np.int32)}
  y = (rng.uniform(size=n) < 0.5).astype(np.float32)
  space = keras.utils.FeatureSpace(
      features={"amount": keras.utils.FeatureSpace.float_normalized(),
                "color": keras.utils.FeatureSpace.string_categorical(),
                "code": keras.utils.FeatureSpace.integer_hashed(num_bins=8)},
      crosses=[keras.utils.FeatureSpace.cross(("color", "code"),
                                              crossing_dim=6)],
      output_mode="dict")
  space.adapt(tf.data.Dataset.from_tensor_slices(raw))
  classifier = estimator.LinearClassifier(space, model_dir=str(tmp_path),
                                          optimizer=_sdca(0.5))
  classifier.train(_constant(dict(raw, example_id=np.arange(n)), y),
                   steps=1000, tol=1e-10)
  # The same model in numpy: FeatureSpace's multi-hot encoding of each
  # group (its "dict" output), then a column of ones.
  encoded = space({k: v for k, v in raw.items()})
  names = sorted(["amount", "color", "code", "color_X_code"])
  design = np.hstack([np.asarray(encoded[k], np.float32) for k in names] +
                     [np.ones((n, 1), np.float32)])
  ref = InMemorySdca(loss="logistic", l2=0.5)
  ref.fit(labels=y, dense=design, epochs=500, tol=1e-12, verbose=0)
  ours = np.concatenate(
      [classifier.get_variable_value(f"linear/linear_model/{k}/weights")[:, 0]
       for k in names] + [classifier.get_variable_value(BIAS)])
  assert design.shape[1] == ours.size == 1 + 4 + 8 + 6 + 1
  assert _relative(ours, ref.dense_weights) < 1e-4
  # The SavedModel runs the FeatureSpace's layers on raw values.
  path = classifier.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_raw_serving_input_receiver_fn(
          {k: tf.TensorSpec([None], tf.constant(v).dtype)
           for k, v in raw.items()}))
  served = tf.saved_model.load(path.decode())
  logits = served.signatures["predict"](
      **{k: tf.constant(v) for k, v in raw.items()})["logits"].numpy()
  np.testing.assert_allclose(logits[:, 0], design @ ours, rtol=1e-4,
                             atol=1e-5)


def test_run_config_checkpoints_and_cluster(tmp_path, monkeypatch):
  features, y, columns = _mixed_problem()
  config = estimator.RunConfig(save_checkpoints_steps=10,
                               keep_checkpoint_max=2, tf_random_seed=7)
  assert config.save_checkpoints_secs is None
  assert estimator.RunConfig().save_checkpoints_secs == 600
  classifier = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path), config=config, optimizer=_sdca())
  assert classifier.config.model_dir == str(tmp_path)
  classifier.train(_constant(features, y), steps=25)
  kept = tf.train.get_checkpoint_state(str(tmp_path)).all_model_checkpoint_paths
  assert [p.rsplit("-", 1)[1] for p in kept] == ["20", "25"]
  with pytest.raises(ValueError, match="differs"):
    estimator.LinearClassifier(columns, model_dir=str(tmp_path / "x"),
                               config=estimator.RunConfig(model_dir="y"),
                               optimizer=_sdca())
  # TF_CONFIG: carried; train then runs CoCoA+ across the processes
  # (tests/test_distributed_doors.py), which needs joining before the
  # runtime starts: in this process (runtime started) a clear error, at
  # once, before any network wait.
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"chief": ["host0:2222"],
                  "worker": ["host1:2222", "host2:2222"]},
      "task": {"type": "worker", "index": 1}}))
  config = estimator.RunConfig()
  assert (config.task_type, config.task_id, config.is_chief) == (
      "worker", 1, False)
  assert config.num_worker_replicas == 3 and config.num_ps_replicas == 0
  assert config.master == "grpc://host2:2222"
  distributed = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path / "d"), config=config,
      optimizer=_sdca())
  from tf_sdca.distributed.cluster import ClusterError  # pylint: disable=import-outside-toplevel
  with pytest.raises(ClusterError, match="before any TensorFlow op runs") \
      as refused:
    distributed.train(_constant(features, y), steps=1)
  # TensorFlow's own refusal at set-up (not a timeout waiting for the
  # unreachable hosts, which would say "not every worker ... joined").
  assert isinstance(refused.value.__cause__, RuntimeError)
  assert "program startup" in str(refused.value.__cause__)
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": ["host1:2222"], "ps": ["host2:2222"]},
      "task": {"type": "worker", "index": 0}}))
  with pytest.raises(ClusterError, match="no parameter"):
    estimator.LinearClassifier(
        columns, model_dir=str(tmp_path / "p"), config=estimator.RunConfig(),
        optimizer=_sdca()).train(_constant(features, y), steps=1)
  monkeypatch.setenv("TF_CONFIG", json.dumps({
      "cluster": {"worker": ["host0:2222"]},
      "task": {"type": "worker", "index": 0}}))
  single = estimator.RunConfig()
  assert single.is_chief and not single.is_distributed


class _Recorder:
  """A hook and a saving listener in one."""

  def __init__(self, stop_at):
    self.stop_at, self.calls = stop_at, []

  def begin(self):
    self.calls.append("begin")

  def after_step(self, step, logs):
    self.calls.append(("step", step, "loss" in logs))
    return step >= self.stop_at

  def after_save(self, session, step):
    self.calls.append(("saved", step))

  def end(self, *args):
    self.calls.append("end")


def test_hooks_stop_training_and_listeners_see_saves(tmp_path):
  features, y, columns = _mixed_problem()

  def input_fn(mode, params, config):
    # The input_fn gets the arguments it names.
    assert mode == estimator.ModeKeys.TRAIN and params == {}
    assert config.model_dir == str(tmp_path)
    return _constant(features, y)()

  hook, listener = _Recorder(stop_at=3), _Recorder(stop_at=None)
  classifier = estimator.LinearClassifier(columns, model_dir=str(tmp_path),
                                          optimizer=_sdca())
  classifier.train(input_fn, steps=10, hooks=[hook],
                   saving_listeners=[listener])
  assert classifier.get_variable_value("global_step") == 3
  assert hook.calls == ["begin", ("step", 1, True), ("step", 2, True),
                        ("step", 3, True), "end"]
  assert listener.calls == ["begin", ("saved", 3), "end"]
  with pytest.raises(TypeError, match="SessionRunHook"):
    classifier.train(input_fn, steps=1,
                     hooks=[tf.compat.v1.train.SessionRunHook()])


def test_tol_on_a_tensor_input_stops_on_the_exact_gap(tmp_path, cancer):
  """A tensor input_fn's one batch is every example: train(tol=...)
  checks the exact duality gap after every step (the state's estimate
  lags a pass and near the optimum wanders around 0), so the gaps the
  hooks see fall steadily, the stop leaves the model within tol (P - D
  over the same rows, recomputed here), and no false 'gap barely moves'
  warning comes (the estimate's wandering raised one)."""
  x, y = cancer
  features = {"example_id": np.arange(len(y)), "x": x}
  seen = []

  class Gaps:
    def after_step(self, step, logs):
      seen.append(logs["duality_gap"])

  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=x.shape[1])], model_dir=str(tmp_path),
      optimizer=_sdca(1.0))
  with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    classifier.train(_constant(features, y), steps=1000, tol=1e-8,
                     hooks=[Gaps()])
  assert 0.0 <= seen[-1] < 1e-8 and min(seen[:-1]) >= 1e-8, seen
  # Steadily, as SDCA's exact gap falls: each gap at most 2x the best
  # before it (measured: 1.6x at worst; the estimate went from -1e-3 to
  # +1e-2 and back).
  for k in range(1, len(seen)):
    assert seen[k] <= 2.0 * min(seen[:k]), (k, seen)
  sdca = classifier._model.sdca  # pylint: disable=protected-access
  examples = classifier._examples(*_constant(features, y)())  # pylint: disable=protected-access
  assert sdca.duality_gap(examples)[1] == pytest.approx(seen[-1], rel=1e-9)



def test_tol_on_a_dataset_stops_on_the_estimate_through_its_dips_below_0(
    tmp_path, cancer):
  """A dataset's stop reads the state's estimate, which lags the weights
  and dips below 0 near the optimum: estimator.md says a value below -tol
  does not stop. It raised the exact gap's ValueError ("an example id
  repeats") within ~100 steps instead, and its wandering read as 'badly
  conditioned'."""
  x, y = cancer
  seen = []

  class Gaps:
    def after_step(self, step, logs):
      if "duality_gap" in logs:
        seen.append(logs["duality_gap"])

  def input_fn():
    rows = tf.data.Dataset.from_tensor_slices(
        ({"example_id": np.arange(len(y)), "x": x}, y))
    return rows.batch(100).repeat()

  classifier = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=x.shape[1])], model_dir=str(tmp_path),
      optimizer=_sdca(1.0, carry_over=0))
  with warnings.catch_warnings():
    warnings.simplefilter("error", UserWarning)
    classifier.train(input_fn, steps=2000, tol=1e-6, hooks=[Gaps()])
  assert min(seen) < 0.0, seen  # it dipped, and training went on
  assert abs(seen[-1]) < 1e-6 and all(abs(g) >= 1e-6 for g in seen[:-1])
  sdca = classifier._model.sdca  # pylint: disable=protected-access
  examples = classifier._examples(  # pylint: disable=protected-access
      *_constant({"example_id": np.arange(len(y)), "x": x}, y)())
  assert sdca.duality_gap(examples)[1] < 1e-4

def test_a_numeric_feature_of_another_width_than_its_column_is_named(
    tmp_path):
  """numeric_column("x", shape=(3,)) fed 4 numbers per example failed in
  TensorFlow's Reshape ('Dimension size must be evenly divisible by 3 but
  is 128'); 6 per example (or one, in a batch of a multiple of 3 rows)
  was reshaped into other rows without a word."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 6)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  model = estimator.LinearClassifier(
      [fc.numeric_column("x", shape=(3,))], model_dir=str(tmp_path / "m"),
      optimizer=_sdca())
  for width, shape in ((4, r"\(60, 4\)"), (6, r"\(60, 6\)"),
                       (1, r"\(60,\)")):
    features = {"example_id": np.arange(60),
                "x": x[:, 0] if width == 1 else x[:, :width]}
    with pytest.raises(ValueError, match=(
        r"numeric_column 'x' has shape \(3,\) \(3 numbers per example\), "
        rf"but feature 'x' has {width} per example \(shape {shape}\)")):
      model.train(_constant(features, y), steps=1)
  model.train(_constant({"example_id": np.arange(60), "x": x[:, :3]}, y),
              steps=2)
  with pytest.raises(ValueError, match=r"feature 'x' has 4 per example"):
    next(iter(model.predict(_constant({"x": x[:, :4]}, y))))
  with pytest.raises(ValueError, match=r"feature 'x' has 4 per example"):
    model.evaluate(_constant({"x": x[:, :4]}, y))


def test_two_columns_on_one_raw_feature_keep_their_own_vocabularies(
    tmp_path):
  """Two vocabularies over one raw feature ("city" and an indicator of
  "city", which TensorFlow accepts): the second column took the first's
  lookup table (tables were keyed by the inner column's name), its ids
  were the other vocabulary's, past its size, and became other examples'
  features; predict failed on them."""
  from tensorflow.python.feature_column import feature_column_v2 as fcv2  # pylint: disable=import-outside-toplevel
  from tf_sdca.estimator.feature_layer import FeatureLayer  # pylint: disable=import-outside-toplevel
  city = np.array(["lima", "oslo", "rome", "zzz", "lima", "paris"] * 20)
  y = (city == "rome").astype(np.float32)
  big = fc.categorical_column_with_vocabulary_list(
      "city", ["paris", "rome", "oslo", "lima"], num_oov_buckets=2)
  small = fc.indicator_column(fc.categorical_column_with_vocabulary_list(
      "city", ["paris", "rome", "oslo"]))
  out, _ = FeatureLayer([big, small]).transform({"city": tf.constant(city)})
  reference = small.categorical_column.get_sparse_tensors(
      fcv2.FeatureTransformationCache({"city": tf.constant(city)}), None)
  ids = reference.id_tensor.values.numpy()
  np.testing.assert_array_equal(out["city_indicator"][2].numpy(),
                                ids[ids >= 0])
  classifier = estimator.LinearClassifier(
      [big, small], model_dir=str(tmp_path), optimizer=_sdca(1.0))
  classifier.train(lambda: ({"city": city, "example_id": np.arange(len(y))},
                            y), steps=5)
  logits = np.array([p["logits"][0] for p in classifier.predict(
      lambda: {"city": city[:6]})])
  weights = classifier.get_variable_value(
      "linear/linear_model/city_indicator/weights").ravel()
  others = classifier.get_variable_value(
      "linear/linear_model/city/weights").ravel()
  bias = classifier.get_variable_value(
      "linear/linear_model/bias_weights")[0]
  big_ids = {"paris": 0, "rome": 1, "oslo": 2, "lima": 3}
  small_ids = {"paris": 0, "rome": 1, "oslo": 2}
  expected = [bias + others[big_ids[c]] if c in big_ids else None
              for c in city[:6]]
  for k, c in enumerate(city[:6]):
    if c in big_ids:
      assert logits[k] == pytest.approx(
          expected[k] + (weights[small_ids[c]] if c in small_ids else 0.0),
          abs=1e-5), c


def test_a_weight_columns_normalizer_is_applied(tmp_path, cancer):
  """weight_column=numeric_column("w", normalizer_fn=...) kept only the
  key: the raw weights trained and scored. Weights of 5 normalised by /5
  train the unweighted model, and evaluate's loss is the unweighted one."""
  x, y = cancer
  runs = {}
  for name, weight_column, value in (
      ("normalised", fc.numeric_column("w", normalizer_fn=lambda w: w / 5.0),
       5.0), ("ones", fc.numeric_column("w"), 1.0)):
    features = {"example_id": np.arange(len(y)), "x": x,
                "w": np.full(len(y), value, np.float32)}
    classifier = estimator.LinearClassifier(
        [fc.numeric_column("x", shape=x.shape[1])],
        model_dir=str(tmp_path / name), weight_column=weight_column,
        optimizer=_sdca(1.0))
    classifier.train(_constant(features, y), steps=30)
    runs[name] = (classifier.get_variable_value(
        "linear/linear_model/x/weights").ravel(),
                  classifier.evaluate(_constant(features, y), steps=1)["loss"])
  np.testing.assert_allclose(runs["normalised"][0], runs["ones"][0],
                             rtol=1e-5, atol=1e-6)
  assert runs["normalised"][1] == pytest.approx(runs["ones"][1], rel=1e-5)


def test_a_model_dir_of_another_partitioner_is_named_as_such(tmp_path):
  """The same column and size, its weights in 3 parts against 1: read 'a
  feature of another size' naming the first part's shape."""
  rng = np.random.default_rng(0)
  c = rng.choice(["a", "b", "c", "d"], 300)
  y = (c == "a").astype(np.float32)
  columns = [fc.categorical_column_with_hash_bucket("c", 8)]

  def make(partitioner):
    return estimator.LinearClassifier(
        columns, model_dir=str(tmp_path), partitioner=partitioner,
        optimizer=_sdca(1.0))

  make(tf.compat.v1.fixed_size_partitioner(3)).train(
      lambda: ({"example_id": np.arange(300), "c": c}, y), steps=2)
  with pytest.raises(ValueError, match=r"in 3 part\(s\), this model's in 1 "
                     r"\(another partitioning of its weights"):
    make(None).train(lambda: ({"example_id": np.arange(300), "c": c}, y),
                     steps=1)

"""tf_sdca.estimator: SavedModels that score raw features in a fresh
process, and bad input refused with a clear error before training."""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from tf_sdca import estimator

fc = tf.feature_column


def _sdca(**kwargs):
  return estimator.LinearSDCA(example_id_column="example_id", **kwargs)


def _data(n=40, seed=0):
  rng = np.random.default_rng(seed)
  countries = np.array(["US", "IT", "GB", "MX", "ZZ"])  # ZZ: out of vocab
  features = {
      "example_id": np.arange(n).astype(np.int64),
      "price": rng.normal(size=(n, 1)).astype(np.float32),
      "size": rng.uniform(0, 10, (n, 1)).astype(np.float32),
      "country": countries[rng.integers(0, 5, (n, 1))],
      "user": np.array([[f"u{i}"] for i in rng.integers(0, 30, n)]),
      "city": rng.choice(["a", "b", "c"], (n, 1)),
      "clicks": rng.uniform(0.5, 2.0, (n, 1)).astype(np.float32),
  }
  labels = (rng.uniform(size=n) < 0.5).astype(np.float32)
  size = fc.bucketized_column(fc.numeric_column("size"), [2.0, 5.0])
  country = fc.categorical_column_with_vocabulary_list(
      "country", ["US", "IT", "GB", "MX"])
  columns = [
      fc.numeric_column("price"), size,
      fc.weighted_categorical_column(country, "clicks"),
      fc.categorical_column_with_hash_bucket("user", 16),
      fc.crossed_column([size, "country"], hash_bucket_size=9),
      {"city": keras.layers.StringLookup(vocabulary=["a", "b"])}]
  return features, labels, columns


def _constant(features, labels):
  return lambda: ({k: tf.constant(v) for k, v in features.items()},
                  tf.constant(labels))


def _example(row):
  feature = {}
  for name, value in row.items():
    value = np.ravel(value)
    if value.dtype.kind in "US":
      feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(
          value=[v.encode() for v in value]))
    else:
      feature[name] = tf.train.Feature(float_list=tf.train.FloatList(
          value=value.tolist()))
  return tf.train.Example(features=tf.train.Features(
      feature=feature)).SerializeToString()


_LOAD = r"""
import json, sys
import numpy as np
import tensorflow as tf
parsing, raw, request = sys.argv[1:4]
with open(request) as f:
  request = json.load(f)
served = tf.saved_model.load(parsing)
examples = tf.constant([bytes.fromhex(e) for e in request["examples"]])
out = {"signatures": sorted(served.signatures),
       "classification": served.signatures["classification"](
           inputs=examples)["scores"].numpy()[:, 1].tolist(),
       "serving_default": served.signatures["serving_default"](
           inputs=examples)["scores"].numpy()[:, 1].tolist(),
       "classes": served.signatures["classification"](
           inputs=examples)["classes"].numpy()[0].astype(str).tolist(),
       "regression": served.signatures["regression"](
           inputs=examples)["outputs"].numpy()[:, 0].tolist(),
       "predict": served.signatures["predict"](
           examples=examples)["logits"].numpy()[:, 0].tolist()}
served = tf.saved_model.load(raw)
features = {k: tf.constant(np.array(v, dtype=np.float32 if k in
                                    ("price", "size", "clicks") else str))
            for k, v in request["raw"].items()}
out["raw"] = served.signatures["predict"](**features)["logits"].numpy()[
    :, 0].tolist()
out["raw_inputs"] = sorted(
    served.signatures["serving_default"].structured_input_signature[1])
out["tf_sdca_loaded"] = any(m.startswith("tf_sdca") for m in sys.modules)
print(json.dumps(out))
"""


def test_saved_model_scores_raw_features_in_a_fresh_process(tmp_path):
  features, labels, columns = _data()
  words = np.where(labels > 0, "click", "skip")
  classifier = estimator.LinearClassifier(
      columns, model_dir=str(tmp_path / "model"),
      label_vocabulary=["skip", "click"],
      optimizer=_sdca(symmetric_l2_regularization=0.5))
  classifier.train(_constant(features, words), steps=30)
  serving = {k: v for k, v in features.items() if k != "example_id"}
  expected = np.array([p["logits"][0] for p in classifier.predict(
      lambda: {k: tf.constant(v) for k, v in serving.items()})])

  spec = fc.make_parse_example_spec(columns[:-1])
  spec["city"] = tf.io.FixedLenFeature([1], tf.string)
  parsing = classifier.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_parsing_serving_input_receiver_fn(spec))
  raw = classifier.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_raw_serving_input_receiver_fn(
          {k: tf.TensorSpec([None, 1], tf.constant(v).dtype)
           for k, v in serving.items()}))
  assert os.path.dirname(parsing) == os.path.dirname(raw) == \
      str(tmp_path / "export").encode()
  request = tmp_path / "request.json"
  rows = [{k: v[i] for k, v in serving.items()} for i in range(len(labels))]
  request.write_text(json.dumps({
      "examples": [_example(r).hex() for r in rows],
      "raw": {k: v.tolist() for k, v in serving.items()}}))
  script = tmp_path / "load.py"
  script.write_text(_LOAD)
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  env.pop("PYTHONPATH", None)  # TensorFlow alone
  done = subprocess.run(
      [sys.executable, str(script), parsing.decode(), raw.decode(),
       str(request)], capture_output=True, text=True, env=env,
      cwd=str(tmp_path), timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  out = json.loads(done.stdout.strip().splitlines()[-1])
  assert not out["tf_sdca_loaded"]
  assert out["signatures"] == ["classification", "predict", "regression",
                               "serving_default"]
  probabilities = 1.0 / (1.0 + np.exp(-expected))
  np.testing.assert_allclose(out["predict"], expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(out["raw"], expected, rtol=1e-5, atol=1e-6)
  for key in ("classification", "serving_default", "regression"):
    np.testing.assert_allclose(out[key], probabilities, rtol=1e-5,
                               atol=1e-6)
  assert out["classes"] == ["skip", "click"]
  assert out["raw_inputs"] == sorted(serving)
  # TF Serving's Classify / Regress method names on the tf.Example model.
  proto = saved_model_pb2.SavedModel()
  proto.ParseFromString(
      (tmp_path / "export" / parsing.decode().rsplit("/", 1)[1] /
       "saved_model.pb").read_bytes())
  methods = {name: signature.method_name for name, signature in
             proto.meta_graphs[0].signature_def.items()}
  assert methods["classification"] == "tensorflow/serving/classify"
  assert methods["serving_default"] == "tensorflow/serving/classify"
  assert methods["regression"] == "tensorflow/serving/regress"
  assert methods["predict"] == "tensorflow/serving/predict"


def test_regressor_exports_regression_and_predict(tmp_path):
  features, labels, columns = _data(seed=1)
  regressor = estimator.LinearRegressor(
      columns[:2], model_dir=str(tmp_path), optimizer=_sdca())
  data = {k: features[k] for k in ("example_id", "price", "size")}
  regressor.train(_constant(data, labels), steps=5)
  path = regressor.export_saved_model(
      str(tmp_path / "export"),
      estimator.export.build_raw_serving_input_receiver_fn(
          {"price": tf.TensorSpec([None, 1]),
           "size": tf.TensorSpec([None, 1])}))
  served = tf.saved_model.load(path.decode())
  assert sorted(served.signatures) == ["predict", "regression",
                                       "serving_default"]
  out = served.signatures["regression"](price=tf.constant(data["price"]),
                                        size=tf.constant(data["size"]))
  expected = [p["predictions"][0] for p in regressor.predict(
      _constant({k: data[k] for k in ("price", "size")}, labels))]
  np.testing.assert_allclose(out["outputs"].numpy()[:, 0], expected,
                             rtol=1e-6)


# -------------------------------------------------------------- bad input
@pytest.fixture(scope="module")
def problem():
  return _data()


def _untrained(tmp_path, columns, **kwargs):
  return estimator.LinearClassifier(columns, model_dir=str(tmp_path),
                                    optimizer=_sdca(), **kwargs)


def _refused(tmp_path, model, input_fn, error, match):
  with pytest.raises(error, match=match):
    model.train(input_fn, steps=3)
  # Nothing trained, nothing written.
  assert tf.train.latest_checkpoint(str(tmp_path)) is None
  if model._model is not None:
    assert int(model._model.global_step) == 0
    assert not model._model.sdca.get_state()["keys"].size


def test_missing_example_id_column(tmp_path, problem):
  features, labels, columns = problem
  no_ids = {k: v for k, v in features.items() if k != "example_id"}
  _refused(tmp_path, _untrained(tmp_path, columns),
           _constant(no_ids, labels), ValueError,
           "no example id column 'example_id'")


def test_features_the_columns_do_not_know_or_lack(tmp_path, problem):
  features, labels, columns = problem
  model = _untrained(tmp_path, columns)
  _refused(tmp_path, model, _constant(dict(features, colour=features["city"]),
                                      labels),
           ValueError, r"has \['colour'\], which no feature column reads")
  lacking = {k: v for k, v in features.items() if k != "clicks"}
  _refused(tmp_path, model, _constant(lacking, labels), ValueError,
           r"lacks \['clicks'\]")


def test_labels_outside_the_vocabulary_or_the_binary_range(tmp_path,
                                                           problem):
  features, labels, columns = problem
  words = np.where(labels > 0, "click", "skip")
  words[7] = "maybe"
  model = _untrained(tmp_path, columns, label_vocabulary=["skip", "click"])
  _refused(tmp_path, model, _constant(features, words),
           tf.errors.InvalidArgumentError,
           r"labels must be in label_vocabulary \(skip, click\); got\] "
           r"\[maybe\]")
  _refused(tmp_path, model, _constant(features, labels), ValueError,
           "with label_vocabulary the labels must be strings")
  plain = _untrained(tmp_path, columns)
  # The first bad label by its row and value (the message printed the
  # batch's first five labels, good ones too).
  bad = labels.astype(np.float32).copy()
  bad[9] = np.nan
  _refused(tmp_path, plain, _constant(features, bad),
           tf.errors.InvalidArgumentError,
           r"labels must be in \[0, 1\] for LinearClassifier\(n_classes=2\) "
           r"\(class ids 0 and 1, or probabilities\); got\] \[labels\[9\] = "
           r"nan\]")
  _refused(tmp_path, plain, _constant(features, labels * 2),
           tf.errors.InvalidArgumentError,
           r"labels must be in \[0, 1\] for LinearClassifier\(n_classes=2\)")
  _refused(tmp_path, plain, _constant(features, words), ValueError,
           "the labels are strings: give label_vocabulary")


def test_n_classes_and_label_dimension_that_sdca_cannot_train(tmp_path,
                                                              problem):
  _, _, columns = problem
  with pytest.raises(ValueError, match="n_classes must be an integer >= 2"):
    _untrained(tmp_path, columns, n_classes=1)
  with pytest.raises(ValueError, match="n_classes = 2 distinct strings"):
    _untrained(tmp_path, columns, label_vocabulary=["a", "b", "c"])
  with pytest.raises(NotImplementedError, match="one label per example"):
    estimator.LinearRegressor(columns, label_dimension=2,
                              model_dir=str(tmp_path), optimizer=_sdca())
  with pytest.raises(ValueError, match="trains by SDCA"):
    estimator.LinearClassifier(columns, optimizer="Ftrl")
  with pytest.raises(ValueError, match="sparse_combiner must be 'sum'"):
    estimator.LinearClassifier(columns, optimizer=_sdca(),
                               sparse_combiner="mean")
  with pytest.raises(ValueError, match="does not support EmbeddingColumn"):
    estimator.LinearClassifier(
        [fc.embedding_column(fc.categorical_column_with_identity("i", 5),
                             2)], optimizer=_sdca())
  with pytest.raises(ValueError, match="symmetric_l2_regularization"):
    _sdca(symmetric_l2_regularization=0.0)
  # A sequence column inside an indicator column trained as a bag of ids
  # (the docs and TensorFlow's own transform refuse it).
  with pytest.raises(ValueError, match="does not support "
                     "SequenceCategoricalColumn 's' \\(in indicator_column"):
    estimator.LinearClassifier(
        [fc.indicator_column(
            fc.sequence_categorical_column_with_identity("s", 3))],
        optimizer=_sdca())


def test_columns_reading_one_key_two_ways_train(tmp_path):
  """A cross of a raw feature beside another column of that feature (the
  pattern TensorFlow asks for: a cross takes the raw name, not a hash
  bucket column) failed every train with "feature_columns contain
  different parse_spec for key k": the raw keys came from one parse spec
  of all the columns. The logits are TensorFlow's design times the
  weights."""
  rng = np.random.default_rng(1)
  n = 60
  features = {"a": rng.choice(["u", "v"], n),
              "k": rng.integers(0, 50, n).astype(np.int64)}
  labels = (rng.uniform(size=n) > 0.5).astype(np.float32)
  columns = [fc.crossed_column(["a", "k"], 37),
             fc.categorical_column_with_hash_bucket("k", 11,
                                                    dtype=tf.int64)]
  model = estimator.LinearClassifier(columns, optimizer=_sdca(),
                                     model_dir=str(tmp_path))
  model.train(lambda: ({"example_id": np.arange(n), **features}, labels),
              steps=5)
  design = tf.compat.v1.feature_column.input_layer(
      {k: tf.constant(v) for k, v in features.items()},
      [fc.indicator_column(c) for c in columns]).numpy()
  logits = np.concatenate([p["logits"] for p in model.predict(
      lambda: {"example_id": np.arange(n), **features})])
  names = sorted(c.name for c in columns)
  weights = np.concatenate(
      [model.get_variable_value(f"linear/linear_model/{name}/weights")[:, 0]
       for name in sorted(names, key=lambda m: [c.name for c in columns]
                          .index(m))])
  bias = model.get_variable_value("linear/linear_model/bias_weights")[0]
  assert np.abs(weights).max() > 0
  np.testing.assert_allclose(logits, design @ weights + bias, rtol=1e-5,
                             atol=1e-6)


def test_train_arguments(tmp_path, problem):
  features, labels, columns = problem
  model = _untrained(tmp_path, columns)
  with pytest.raises(ValueError, match="both steps and max_steps"):
    model.train(_constant(features, labels), steps=1, max_steps=2)
  with pytest.raises(ValueError, match="give steps, max_steps or tol"):
    model.train(_constant(features, labels))
  with pytest.raises(ValueError, match="features alone"):
    model.train(lambda: {k: tf.constant(v) for k, v in features.items()},
                steps=1)
  with pytest.raises(ValueError, match="Could not find trained model"):
    model.evaluate(_constant(features, labels))
  with pytest.raises(ValueError, match="no checkpoint yet"):
    model.get_variable_names()
  # A repeated example id in one batch: the op's check, before any update.
  repeated = dict(features, example_id=np.zeros(len(labels), np.int64))
  _refused(tmp_path, model, _constant(repeated, labels),
           tf.errors.InvalidArgumentError, "unique within a batch")
  # A checkpoint of other columns is not silently mixed in.
  model.train(_constant(features, labels), steps=1)
  other = estimator.LinearClassifier(columns[:2], model_dir=str(tmp_path),
                                     optimizer=_sdca())
  with pytest.raises(ValueError, match="feature columns differ"):
    other.train(_constant({k: features[k] for k in
                           ("example_id", "price", "size")}, labels),
                steps=1)

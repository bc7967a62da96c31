"""TensorFlow's own expectations for linear estimators with LinearSDCA.

Each test is one of tensorflow_estimator's `linear_optimizer/python/
sdca_test.py` cases (the last release, 2.15), rewritten for
`tf_sdca.estimator`: the same input_fn, feature columns, optimizer settings,
step counts and the same thresholds on the evaluation loss and on the
weights. Classes without a version suffix are TensorFlow 2's (`LinearClassifierV2`:
the loss is the weighted sum over the batch divided by the batch size);
`partitioned_variables` used TensorFlow 1's classes, whose loss is the
weighted sum (`LinearClassifierV1`).
"""
import numpy as np
import pytest
import tensorflow as tf

from tf_sdca import estimator

fc = tf.feature_column


def _classifier(tmp_path, columns, l2=1.0, cls=estimator.LinearClassifier,
                **kwargs):
  return cls(feature_columns=columns, model_dir=str(tmp_path),
             optimizer=estimator.LinearSDCA(
                 example_id_column="example_id",
                 symmetric_l2_regularization=l2), **kwargs)


def _regressor(tmp_path, columns, l2=0.1, l1=0.0,
               cls=estimator.LinearRegressor, model_dir=None, **kwargs):
  return cls(feature_columns=columns,
             model_dir=str(model_dir or tmp_path),
             optimizer=estimator.LinearSDCA(
                 example_id_column="example_id",
                 symmetric_l1_regularization=l1,
                 symmetric_l2_regularization=l2, **kwargs.pop("sdca", {})),
             **kwargs)


def _loss(model, input_fn):
  return model.evaluate(input_fn=input_fn, steps=1)["loss"]


# ------------------------------------------------------------ classifiers
def test_real_valued_features(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2"]),
            "maintenance_cost": tf.constant([[500.0], [200.0]]),
            "sq_footage": tf.constant([[800.0], [600.0]]),
            "weights": tf.constant([[1.0], [1.0]])}, tf.constant([[0], [1]])

  classifier = _classifier(tmp_path, [fc.numeric_column("maintenance_cost"),
                                      fc.numeric_column("sq_footage")],
                           weight_column="weights")
  classifier.train(input_fn=input_fn, steps=100)
  assert _loss(classifier, input_fn) < 0.2


def test_real_valued_feature_with_higher_dimension(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2"]),
            "dense_feature": tf.constant([[500.0, 800.0], [200.0, 600.0]])}, \
        tf.constant([[0], [1]])

  classifier = _classifier(tmp_path, [fc.numeric_column("dense_feature",
                                                        shape=2)])
  classifier.train(input_fn=input_fn, steps=100)
  assert _loss(classifier, input_fn) < 0.2


def test_bucketized_features(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2", "3"]),
            "price": tf.constant([[600.0], [1000.0], [400.0]]),
            "sq_footage": tf.constant([[1000.0], [600.0], [700.0]]),
            "weights": tf.constant([[1.0], [1.0], [1.0]])}, \
        tf.constant([[1], [0], [1]])

  price = fc.bucketized_column(fc.numeric_column("price"),
                               boundaries=[500.0, 700.0])
  sq_footage = fc.bucketized_column(fc.numeric_column("sq_footage"),
                                    boundaries=[650.0])
  classifier = _classifier(tmp_path, [price, sq_footage], l2=0.01,
                           weight_column="weights")
  classifier.train(input_fn=input_fn, steps=100)
  assert _loss(classifier, input_fn) < 0.2


def test_sparse_features(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2", "3"]),
            "country": tf.SparseTensor(values=["IT", "US", "GB"],
                                       indices=[[0, 0], [1, 0], [2, 0]],
                                       dense_shape=[3, 5]),
            "weights": tf.constant([[1.0], [1.0], [1.0]])}, \
        tf.constant([[1], [0], [1]])

  country = fc.categorical_column_with_hash_bucket("country",
                                                   hash_bucket_size=5)
  classifier = _classifier(tmp_path, [country], l2=0.01,
                           weight_column="weights")
  classifier.train(input_fn=input_fn, steps=100)
  assert _loss(classifier, input_fn) < 0.2


def _weighted_input_fn():
  return {"example_id": tf.constant(["1", "2", "3"]),
          "price": tf.SparseTensor(values=[2.0, 3.0, 1.0],
                                   indices=[[0, 0], [1, 0], [2, 0]],
                                   dense_shape=[3, 5]),
          "country": tf.SparseTensor(values=["IT", "US", "GB"],
                                     indices=[[0, 0], [1, 0], [2, 0]],
                                     dense_shape=[3, 5])}, \
      tf.constant([[1], [0], [1]])


def test_weighted_sparse_features(tmp_path):
  country = fc.categorical_column_with_hash_bucket("country",
                                                   hash_bucket_size=5)
  classifier = _classifier(
      tmp_path, [fc.weighted_categorical_column(country, "price")], l2=0.01)
  classifier.train(input_fn=_weighted_input_fn, steps=100)
  assert _loss(classifier, _weighted_input_fn) < 0.2


def test_weighted_sparse_features_out_of_vocabulary_with_no_oov_buckets(
    tmp_path):
  # 'GB' is out of the vocabulary: its id is -1 and it is dropped. The third
  # example then has no feature but the bias, which the other two share, and
  # still the loss falls below TensorFlow's threshold.
  country = fc.categorical_column_with_vocabulary_list(
      "country", vocabulary_list=["US", "CA", "MK", "IT", "CN"])
  classifier = _classifier(
      tmp_path, [fc.weighted_categorical_column(country, "price")], l2=0.01)
  classifier.train(input_fn=_weighted_input_fn, steps=100)
  assert _loss(classifier, _weighted_input_fn) < 0.2
  weights = classifier.get_variable_value(
      "linear/linear_model/country_weighted_by_price/weights")[:, 0]
  # Only 'US' (id 0) and 'IT' (id 3) were seen; SDCA never moves the rest.
  assert weights[0] < 0 < weights[3]
  np.testing.assert_array_equal(weights[[1, 2, 4]], 0.0)


def test_crossed_features(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2", "3"]),
            "language": tf.SparseTensor(
                values=["english", "italian", "spanish"],
                indices=[[0, 0], [1, 0], [2, 0]], dense_shape=[3, 1]),
            "country": tf.SparseTensor(values=["US", "IT", "MX"],
                                       indices=[[0, 0], [1, 0], [2, 0]],
                                       dense_shape=[3, 1])}, \
        tf.constant([[0], [0], [1]])

  country_language = fc.crossed_column(["language", "country"],
                                       hash_bucket_size=100)
  classifier = _classifier(tmp_path, [country_language], l2=0.01)
  classifier.train(input_fn=input_fn, steps=100)
  assert _loss(classifier, input_fn) < 0.2


def _mixed_input_fn():
  return {"example_id": tf.constant(["1", "2", "3"]),
          "price": tf.constant([[0.6], [0.8], [0.3]]),
          "sq_footage": tf.constant([[900.0], [700.0], [600.0]]),
          "country": tf.SparseTensor(values=["IT", "US", "GB"],
                                     indices=[[0, 0], [1, 3], [2, 1]],
                                     dense_shape=[3, 5]),
          "weights": tf.constant([[3.0], [1.0], [1.0]])}, \
      tf.constant([[1], [0], [1]])


def _mixed_columns():
  sq_footage = fc.bucketized_column(fc.numeric_column("sq_footage"),
                                    boundaries=[650.0, 800.0])
  country = fc.categorical_column_with_hash_bucket("country",
                                                   hash_bucket_size=5)
  return [fc.numeric_column("price"), sq_footage, country,
          fc.crossed_column([sq_footage, "country"], hash_bucket_size=10)]


def test_mixed_features(tmp_path):
  classifier = _classifier(tmp_path, _mixed_columns(), l2=0.01,
                           weight_column="weights")
  classifier.train(input_fn=_mixed_input_fn, steps=100)
  assert _loss(classifier, _mixed_input_fn) < 0.2


def test_partitioned_variables(tmp_path):
  # TensorFlow 1's class: the loss is the weighted sum, not the mean.
  classifier = _classifier(
      tmp_path, _mixed_columns(), l2=0.01, weight_column="weights",
      cls=estimator.LinearClassifierV1,
      partitioner=tf.compat.v1.fixed_size_partitioner(num_shards=2, axis=0))
  classifier.train(input_fn=_mixed_input_fn, steps=100)
  assert _loss(classifier, _mixed_input_fn) < 0.2
  # Each column's weights are two variables; the checkpoint and
  # get_variable_value show the whole weight, as TensorFlow's did.
  parts = classifier._model.parts("linear/linear_model/country/weights")
  assert [int(p.shape[0]) for p in parts] == [3, 2]
  assert classifier.get_variable_value(
      "linear/linear_model/country/weights").shape == (5, 1)


# ------------------------------------------------------------- regressors
def test_real_valued_linear_features(tmp_path):
  x = [[1.2, 2.0, -1.5], [-2.0, 3.0, -0.5], [1.0, -0.5, 4.0]]
  weights = [[3.0], [-1.2], [0.5]]
  y = np.dot(x, weights)

  def input_fn():
    return {"example_id": tf.constant(["1", "2", "3"]),
            "x": tf.constant(x),
            "weights": tf.constant([[10.0], [10.0], [10.0]])}, tf.constant(y)

  regressor = _regressor(tmp_path, [fc.numeric_column("x", shape=3)],
                         weight_column="weights")
  regressor.train(input_fn=input_fn, steps=20)
  assert _loss(regressor, input_fn) < 0.01
  assert "linear/linear_model/x/weights" in regressor.get_variable_names()
  np.testing.assert_allclose(
      regressor.get_variable_value("linear/linear_model/x/weights").ravel(),
      [w[0] for w in weights], rtol=0.1)


def _mixed_regression_input_fn():
  return {"example_id": tf.constant(["1", "2", "3"]),
          "price": tf.constant([0.6, 0.8, 0.3]),
          "sq_footage": tf.constant([[900.0], [700.0], [600.0]]),
          "country": tf.SparseTensor(values=["IT", "US", "GB"],
                                     indices=[[0, 0], [1, 3], [2, 1]],
                                     dense_shape=[3, 5]),
          "weights": tf.constant([[3.0], [5.0], [7.0]])}, \
      tf.constant([[1.55], [-1.25], [-3.0]])


def test_mixed_features_arbitrary_weights(tmp_path):
  regressor = _regressor(tmp_path, _mixed_columns(), weight_column="weights")
  regressor.train(input_fn=_mixed_regression_input_fn, steps=20)
  assert _loss(regressor, _mixed_regression_input_fn) < 0.05


def test_regressor_partitioned_variables(tmp_path):
  regressor = _regressor(
      tmp_path, _mixed_columns(), weight_column="weights",
      cls=estimator.LinearRegressorV1,
      partitioner=tf.compat.v1.fixed_size_partitioner(num_shards=2, axis=0))
  regressor.train(input_fn=_mixed_regression_input_fn, steps=20)
  assert _loss(regressor, _mixed_regression_input_fn) < 0.05


def test_sparse_features_with_l1_reg(tmp_path):
  def input_fn():
    return {"example_id": tf.constant(["1", "2", "3"]),
            "price": tf.constant([[0.4], [0.6], [0.3]]),
            "country": tf.SparseTensor(values=["IT", "US", "GB"],
                                       indices=[[0, 0], [1, 3], [2, 1]],
                                       dense_shape=[3, 5]),
            "weights": tf.constant([[10.0], [10.0], [10.0]])}, \
        tf.constant([[1.4], [-0.8], [2.6]])

  columns = [fc.numeric_column("price"),
             fc.categorical_column_with_hash_bucket("country",
                                                    hash_bucket_size=5)]
  names = ["linear/linear_model/price/weights",
           "linear/linear_model/country/weights"]
  results = {}
  for l1 in (0.0, 1.0):
    regressor = _regressor(tmp_path, columns, l1=l1, weight_column="weights",
                           model_dir=tmp_path / f"l1_{l1}")
    regressor.train(input_fn=input_fn, steps=20)
    assert set(names) <= set(regressor.get_variable_names())
    results[l1] = (_loss(regressor, input_fn),
                   sum(np.abs(regressor.get_variable_value(n)).sum()
                       for n in names))
  # The data loss is lower without L1, and the L1 model's weights smaller.
  assert results[0.0][0] < results[1.0][0]
  assert results[0.0][0] < 0.05
  assert results[1.0][1] < results[0.0][1]


def test_bias_only(tmp_path):
  # A quarter of the labels are 1 and no feature is ever nonzero: the bias
  # is the regularised mean, 10 / (40 + 0.1) = 0.249.
  def input_fn():
    n = 40
    return {"example_id": tf.constant([str(i + 1) for i in range(n)]),
            "place_holder": tf.constant([[0.0]] * n)}, \
        tf.constant([1 if i % 4 == 0 else 0 for i in range(n)])

  regressor = _regressor(tmp_path, [fc.numeric_column("place_holder")])
  regressor.train(input_fn=input_fn, steps=100)
  bias = regressor.get_variable_value("linear/linear_model/bias_weights")[0]
  assert abs(bias - 0.25) < 0.1
  # 40 copies of one feature with l2 = 0.1 is ill-conditioned for SDCA
  # (n / l2 = 400): 100 passes leave 6e-5 of relative error.
  assert bias == pytest.approx(10 / 40.1, rel=2e-4)


def test_bias_and_other_columns(tmp_path):
  # 'a' rows are 40% positive, 'b' rows 20%. With the bias regularised like
  # the weights the optimum is bias 0.2, a 0.2, b 0.0 (not 0.3, 0.1, -0.1).
  def input_fn():
    half = 100
    return {"example_id": tf.constant([str(i + 1) for i in range(2 * half)]),
            "a": tf.constant([[1]] * half + [[0]] * half),
            "b": tf.constant([[0]] * half + [[1]] * half)}, \
        tf.constant([[y] for y in [1, 0, 0, 1, 1, 0, 0, 0, 1, 0] * 10 +
                     [0, 1, 0, 0, 0, 0, 0, 0, 1, 0] * 10])

  regressor = _regressor(tmp_path, [fc.numeric_column("a"),
                                    fc.numeric_column("b")])
  regressor.train(input_fn=input_fn, steps=200)
  names = regressor.get_variable_names()
  for name in ("bias_weights", "a/weights", "b/weights"):
    assert "linear/linear_model/" + name in names
  value = lambda n: regressor.get_variable_value(  # noqa: E731
      "linear/linear_model/" + n)[0]
  assert abs(value("bias_weights") - 0.2) < 0.05
  assert abs(value("a/weights") - 0.2) < 0.05
  assert abs(value("b/weights") - 0.0) < 0.05


def test_bias_and_other_columns_fabricated_centered(tmp_path):
  def input_fn():
    half = 100
    return {"example_id": tf.constant([str(i + 1) for i in range(2 * half)]),
            "a": tf.constant([[1]] * half + [[0]] * half),
            "b": tf.constant([[0]] * half + [[1]] * half)}, \
        tf.constant([[1 if i % 10 == 0 else 0] for i in range(half)] +
                    [[-1 if i % 10 == 0 else 0] for i in range(half)])

  regressor = _regressor(tmp_path, [fc.numeric_column("a"),
                                    fc.numeric_column("b")])
  regressor.train(input_fn=input_fn, steps=100)
  value = lambda n: regressor.get_variable_value(  # noqa: E731
      "linear/linear_model/" + n)[0]
  assert abs(value("bias_weights") - 0.0) < 0.05
  assert abs(value("a/weights") - 0.1) < 0.05
  assert abs(value("b/weights") + 0.1) < 0.05


def test_unknown_batch_size(tmp_path):
  # TensorFlow fed placeholders of unknown batch size; here the input is a
  # dataset whose batches have an unknown static batch size, and the table
  # of duals has 3 shards.
  features = {"example_id": tf.constant(["0", "1"]),
              "always_zero": tf.constant([[0.0]] * 2)}
  labels = tf.constant([0.0, 1.0])

  def input_fn():
    data = tf.data.Dataset.from_tensors((features, labels)).repeat()
    return data.map(lambda f, y: (
        {k: tf.ensure_shape(v, [None] + v.shape[1:]) for k, v in f.items()},
        y))

  regressor = _regressor(tmp_path, [fc.numeric_column("always_zero")],
                         sdca=dict(num_table_shards=3))
  regressor.train(input_fn=input_fn, steps=100)
  bias = regressor.get_variable_value("linear/linear_model/bias_weights")[0]
  assert abs(bias - 0.5) < 0.1
  assert bias == pytest.approx(1 / 2.1, abs=1e-5)

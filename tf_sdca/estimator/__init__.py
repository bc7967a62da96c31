"""Estimator-style linear models trained by SDCA: `tf_sdca.estimator`.

A home for code written against TensorFlow's `tf.estimator.LinearClassifier`
/ `LinearRegressor` with `optimizer=tf.estimator.experimental.LinearSDCA`,
which TensorFlow 2.16 removed: the same constructors, `train`, `evaluate`,
`predict`, `export_saved_model`, `get_variable_names` /
`get_variable_value`, input functions, feature columns and checkpoint
layout, trained by tf_sdca's `SdcaModel` (see g3doc/estimator.md).

  >>> from tf_sdca import estimator
  >>> classifier = estimator.LinearClassifier(
  ...     feature_columns=columns,
  ...     optimizer=estimator.LinearSDCA(example_id_column="example_id"))
  >>> classifier.train(input_fn, steps=100).evaluate(input_fn, steps=1)
"""
from tf_sdca.estimator import export
from tf_sdca.estimator.checkpoints import WarmStartSettings
from tf_sdca.estimator.linear import (LinearClassifier, LinearClassifierV1,
                                      LinearClassifierV2, LinearRegressor,
                                      LinearRegressorV1, LinearRegressorV2,
                                      LinearSDCA, ModeKeys)
from tf_sdca.estimator.run_config import RunConfig

__all__ = ["LinearClassifier", "LinearClassifierV1", "LinearClassifierV2",
           "LinearRegressor", "LinearRegressorV1", "LinearRegressorV2",
           "LinearSDCA", "ModeKeys", "RunConfig", "WarmStartSettings",
           "export"]

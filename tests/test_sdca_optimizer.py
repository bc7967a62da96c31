"""SDCAOptimizer: feature dicts with dense and SparseTensor features train to
the same optimum as SdcaModel on the same objective."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize

import tf_sdca
from test_sdca_model import DENSE, N, VOCAB, _data, _objective


def _features(x, ids, s, rows):
  k = ids.shape[1]
  sparse = tf.SparseTensor(
      indices=np.stack([np.repeat(np.arange(len(rows)), k),
                        np.tile(np.arange(k), len(rows))], 1),
      values=ids[rows].ravel(), dense_shape=[len(rows), k])
  return {"id": np.asarray(rows, np.int64), "num": x[rows], "cat": sparse,
          "w": s[rows]}


def test_feature_dict_training_reaches_the_optimum_over_batches():
  x, ids, y, s = _data("logistic_loss", seed=11, weighted=True)
  variables = {"num": tf.Variable(tf.zeros([DENSE])),
               "cat": tf.Variable(tf.zeros([VOCAB]))}
  opt = tf_sdca.SDCAOptimizer("id", symmetric_l2_regularization=1.0,
                              num_inner_iterations=3)
  step = tf.Variable(0, dtype=tf.int64)
  for _ in range(60):
    for start in range(0, N, 40):
      rows = np.arange(start, start + 40)
      opt.get_train_step(_features(x, ids, s, rows), y[rows], variables,
                         weight_column_name="w", global_step=step)
  assert int(step.numpy()) == 120
  w = np.concatenate([variables["cat"].numpy(), variables["num"].numpy()])
  ref = minimize(lambda v: _objective(v, x, ids, y, s, "logistic_loss", 0.0,
                                      1.0, True, True),
                 np.zeros(VOCAB + DENSE), method="L-BFGS-B",
                 options=dict(ftol=1e-15, gtol=1e-10))
  ours = _objective(w.astype(np.float64), x, ids, y, s, "logistic_loss", 0.0,
                    1.0, True, True)
  assert ours == pytest.approx(ref.fun, rel=1e-5)


def test_missing_example_id_column_is_a_clear_error():
  opt = tf_sdca.SDCAOptimizer("example_id")
  with pytest.raises(ValueError, match="no example id column 'example_id'"):
    opt.get_train_step({"num": np.ones((3, 1), np.float32)},
                       np.zeros(3, np.float32),
                       {"num": tf.Variable(tf.zeros([1]))})


def test_bad_options_fail_at_construction():
  with pytest.raises(ValueError, match="symmetric_l2_regularization"):
    tf_sdca.SDCAOptimizer("id", symmetric_l2_regularization=-1.0)


def test_package_exports_the_op_wrapper_and_the_classes():
  # A submodule named like the op wrapper once shadowed it on import.
  assert callable(tf_sdca.sdca_optimizer)
  assert tf_sdca.sdca_optimizer.__module__ == "tf_sdca.ops.sdca_ops"
  assert isinstance(tf_sdca.SDCAOptimizer, type)
  assert isinstance(tf_sdca.SdcaModel, type)

"""`LinearModel(loss="softmax" | "multiclass_hinge", num_classes=K)`:
in-memory and streamed fits on real data against scikit-learn's optimum,
`[n, K]` outputs, Keras metrics, save and load, bad labels."""
import numpy as np
import pytest
import scipy.sparse
import tensorflow as tf
from sklearn.datasets import load_digits, load_iris, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

import keras
from tf_sdca import losses
from tf_sdca.keras import LinearModel

L2 = 1.0


def _objective(loss, w, x1, y, l2=L2):
  return float(np.sum(losses.primal(loss, x1 @ w, y)) +
               0.5 * l2 * np.sum(w * w))


def _weights(model):
  kernel, bias = model.get_weights()[:2]
  return np.vstack([kernel, bias[None]]).astype(np.float64)


def test_softmax_fit_reaches_scikit_learns_optimum_and_predicts_k_columns():
  x, y = load_iris(return_X_y=True)  # raw centimetres
  x = x.astype(np.float32)
  model = LinearModel(loss="softmax", num_classes=3, l2=L2)
  model.compile(metrics=["sparse_categorical_accuracy"])
  history = model.fit(x, y, epochs=2000, tol=1e-9, verbose=0)
  assert history.history["duality_gap"][-1] < 1e-9
  w = _weights(model)
  assert w.shape == (5, 3)
  x1 = np.column_stack([x, np.ones(len(y))]).astype(np.float64)
  ref = LogisticRegression(C=1.0 / L2, fit_intercept=False, tol=1e-12,
                           max_iter=100_000).fit(x1, y)
  assert _objective("softmax", w, x1, y) == pytest.approx(
      _objective("softmax", ref.coef_.T, x1, y), rel=1e-6)
  p = model.predict(x, verbose=0)
  assert p.shape == (150, 3)
  np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
  np.testing.assert_allclose(p, ref.predict_proba(x1), atol=1e-3)
  result = model.evaluate(x, y, verbose=0, return_dict=True)
  assert result["sparse_categorical_accuracy"] == pytest.approx(
      np.mean(p.argmax(1) == y), abs=1e-6)


def test_sparse_input_and_a_dataset_stream_reach_the_same_optimum():
  x, y = load_digits(return_X_y=True)
  x = (x[:600] / 16.0).astype(np.float32)  # pixels in [0, 1]
  y = y[:600]
  csr = scipy.sparse.csr_matrix(x)
  packed = LinearModel(loss="softmax", num_classes=10, l2=L2)
  packed.fit(csr, y, epochs=300, tol=1e-8, verbose=0)
  best = _objective("softmax", _weights(packed),
                    np.column_stack([x, np.ones(len(y))]), y)
  streamed = LinearModel(loss="softmax", num_classes=10, l2=L2)
  data = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y)).batch(200)
  streamed.fit(data, epochs=300, tol=1e-8, verbose=0)
  assert _objective("softmax", _weights(streamed),
                    np.column_stack([x, np.ones(len(y))]), y) == \
      pytest.approx(best, rel=1e-6)


def test_multiclass_hinge_and_save_load_continue(tmp_path):
  x, y = load_wine(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  model = LinearModel(loss="multiclass_hinge", num_classes=3, l2=10.0)
  model.fit(x, y, epochs=5, verbose=0)
  path = str(tmp_path / "m.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  np.testing.assert_array_equal(loaded.predict(x, verbose=0),
                                model.predict(x, verbose=0))
  # Training resumes from the saved duals: the same as not stopping.
  model.fit(x, y, epochs=5, verbose=0)
  loaded.fit(x, y, epochs=5, verbose=0)
  np.testing.assert_allclose(_weights(loaded), _weights(model), rtol=0,
                             atol=1e-12)


def test_bad_labels_and_missing_num_classes():
  x, y = load_iris(return_X_y=True)
  with pytest.raises(ValueError, match="needs num_classes"):
    LinearModel(loss="softmax")
  with pytest.raises(ValueError, match="num_classes"):
    LinearModel(loss="logistic", num_classes=3)
  model = LinearModel(loss="softmax", num_classes=3)
  bad = y.astype(np.float64)
  bad[4] = 2.5
  with pytest.raises(ValueError, match=r"labels\[4\] = 2.5 must be a class "
                     r"id in \[0, 3\)"):
    model.fit(x, bad, verbose=0)


def test_hinge_step_trains_in_memory_and_streamed_and_saves(tmp_path):
  # hinge_step='near_max_gain' on wine: the in-memory fit reaches the
  # projection's optimum (same objective), the step survives save/load
  # (the loaded model continues as the original does), and a streamed fit
  # runs it in its mini-batch op.
  x, y = load_wine(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  x1 = np.column_stack([x, np.ones(len(y))]).astype(np.float64)
  best = LinearModel(loss="multiclass_hinge", num_classes=3, l2=10.0)
  best.fit(x, y, epochs=3000, tol=1e-8, verbose=0)
  model = LinearModel(loss="multiclass_hinge", num_classes=3, l2=10.0,
                      hinge_step="near_max_gain")
  history = model.fit(x, y, epochs=3000, tol=1e-8, verbose=0)
  assert history.history["duality_gap"][-1] < 1e-8
  assert _objective("multiclass_hinge", _weights(model), x1, y, 10.0) == \
      pytest.approx(_objective("multiclass_hinge", _weights(best), x1, y,
                               10.0), rel=1e-7)
  assert model.get_config()["hinge_step"] == "near_max_gain"
  path = str(tmp_path / "m.keras")
  early = LinearModel(loss="multiclass_hinge", num_classes=3, l2=10.0,
                      hinge_step="near_max_gain")
  early.fit(x, y, epochs=3, verbose=0)
  early.save(path)
  loaded = keras.models.load_model(path)
  assert loaded.hinge_step == "near_max_gain"
  early.fit(x, y, epochs=3, verbose=0)
  loaded.fit(x, y, epochs=3, verbose=0)
  np.testing.assert_allclose(_weights(loaded), _weights(early), rtol=0,
                             atol=1e-12)
  # A streamed fit (the mini-batch op, SdcaModel) takes the step too and
  # reaches the optimum, to what its float32 dual state keeps: measured,
  # 3.6e-6 above it after 300 epochs (the projection: 1.7e-7); the two-class
  # moves that are left are below float32's resolution of the duals.
  streamed = LinearModel(loss="multiclass_hinge", num_classes=3, l2=10.0,
                         hinge_step="near_max_gain")
  data = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(len(y))}, y)).batch(64)
  streamed.fit(data, epochs=300, tol=1e-8, verbose=0)
  assert _objective("multiclass_hinge", _weights(streamed), x1, y, 10.0) == \
      pytest.approx(_objective("multiclass_hinge", _weights(best), x1, y,
                               10.0), rel=2e-5)
  with pytest.raises(ValueError, match="block step of multiclass_hinge, not "
                     "of softmax$"):
    LinearModel(loss="softmax", num_classes=3, hinge_step="steepest_ascent")

"""tf_sdca.keras.LinearModel: optimum against scikit-learn and closed forms,
the duality-gap stop, every input kind, callbacks, save/load/export, and
errors on bad data."""
import csv
import json
import os
import pathlib
import re
import runpy
import subprocess
import sys
import zipfile

import keras
import numpy as np
import pytest
import scipy.sparse
import tensorflow as tf
import tf_sdca
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.preprocessing import StandardScaler

from sdca_testutil import dual_loss, primal_loss
from tf_sdca import losses
from tf_sdca.keras import InvalidInputError, LinearModel
from tf_sdca.trainer import InMemorySdca


def _objective(loss, w, b, x, y, l2, s=None):
  """sum_i s_i loss(w.x_i + b) + l2/2 (|w|^2 + b^2), float64."""
  z = np.asarray(x @ w, np.float64).ravel() + b
  s = np.ones(len(y)) if s is None else s
  return float(s @ primal_loss(loss, z, y)) + 0.5 * l2 * (w @ w + b * b)


def _weights(model):
  kernel, bias = model.get_weights()
  return kernel.ravel().astype(np.float64), float(bias[0])


def _liblinear(x, y, l2):
  """scikit-learn's liblinear on the same objective: C = 1 / l2, and an
  intercept column of 1 regularised like the other weights."""
  clf = LogisticRegression(solver="liblinear", C=1.0 / l2, tol=1e-12,
                           intercept_scaling=1.0, max_iter=100_000)
  clf.fit(x, y)
  return clf.coef_.ravel(), float(clf.intercept_[0]), clf


@pytest.fixture(scope="module")
def cancer():
  data = load_breast_cancer()
  rng = np.random.default_rng(0)
  order = rng.permutation(len(data.target))
  x, y = data.data[order], data.target[order].astype(np.float32)
  cut = int(0.75 * len(y))
  scaler = StandardScaler().fit(x[:cut])
  x = scaler.transform(x).astype(np.float32)
  return x[:cut], y[:cut], x[cut:], y[cut:]


def test_breast_cancer_reaches_liblinears_objective_and_auc(cancer):
  x, y, xt, yt = cancer
  l2 = 1.0
  model = LinearModel(loss="logistic", l2=l2)
  model.compile(metrics=[keras.metrics.AUC(name="auc")])
  history = model.fit(x, y, epochs=300, tol=1e-9, verbose=0)
  w, b = _weights(model)
  w_ref, b_ref, clf = _liblinear(x, y, l2)
  ours = _objective("logistic_loss", w, b, x, y, l2)
  ref = _objective("logistic_loss", w_ref, b_ref, x, y, l2)
  assert abs(ours - ref) <= 1e-4 * ref
  # The logged loss is that objective per example.
  assert history.history["loss"][-1] == pytest.approx(ours / len(y), rel=1e-5)
  auc = roc_auc_score(yt, model.predict(xt, verbose=0).ravel())
  auc_ref = roc_auc_score(yt, clf.decision_function(xt))
  assert abs(auc - auc_ref) <= 0.005
  assert auc > 0.98


def test_sparse_csr_reaches_liblinears_objective_and_auc():
  rng = np.random.default_rng(1)
  n, d = 3000, 400
  x = scipy.sparse.random(n, d, density=0.02, random_state=2, format="csr",
                          data_rvs=lambda k: rng.uniform(0.5, 1.5, k))
  x = x.astype(np.float32)
  truth = rng.normal(size=d) * 2.0
  p = 1.0 / (1.0 + np.exp(-(x @ truth - 0.3)))
  y = (rng.uniform(size=n) < p).astype(np.float32)
  train, test = slice(0, 2400), slice(2400, n)
  l2 = 2.0
  model = LinearModel(loss="logistic", l2=l2)
  model.fit(x[train], y[train], epochs=300, tol=1e-9, verbose=0)
  w, b = _weights(model)
  w_ref, b_ref, clf = _liblinear(x[train], y[train], l2)
  ours = _objective("logistic_loss", w, b, x[train], y[train], l2)
  ref = _objective("logistic_loss", w_ref, b_ref, x[train], y[train], l2)
  assert abs(ours - ref) <= 1e-4 * ref
  auc = roc_auc_score(y[test], model.predict(x[test], verbose=0).ravel())
  auc_ref = roc_auc_score(y[test], clf.decision_function(x[test]))
  assert abs(auc - auc_ref) <= 0.005
  # The same data as a tf.SparseTensor and as a dense array give the same
  # model (the op sees the same rows in the same order).
  coo = x[train].tocoo()
  sparse = tf.SparseTensor(np.stack([coo.row, coo.col], 1).astype(np.int64),
                           coo.data, coo.shape)
  for features in (sparse, x[train].toarray()):
    other = LinearModel(loss="logistic", l2=l2)
    other.fit(features, y[train], epochs=3, verbose=0)
    first = LinearModel(loss="logistic", l2=l2)
    first.fit(x[train], y[train], epochs=3, verbose=0)
    for a, c in zip(other.get_weights(), first.get_weights()):
      np.testing.assert_allclose(a, c, rtol=1e-5, atol=1e-6)


def test_diabetes_regression_matches_the_ridge_closed_form():
  data = load_diabetes()
  x = StandardScaler().fit_transform(data.data).astype(np.float32)
  y = data.target.astype(np.float32)
  l2 = 5.0
  model = LinearModel(loss="squared", l2=l2)
  model.compile(metrics=[keras.metrics.MeanSquaredError(name="mse")])
  # (The gap bottoms out near 2e-10: the op stores duals in float32.)
  model.fit(x, y, epochs=500, tol=1e-9, verbose=0)
  w, b = _weights(model)
  a = np.hstack([x.astype(np.float64), np.ones((len(y), 1))])
  exact = np.linalg.solve(a.T @ a + l2 * np.eye(a.shape[1]),
                          a.T @ y.astype(np.float64))
  ours = _objective("squared_loss", w, b, x, y, l2)
  ref = _objective("squared_loss", exact[:-1], exact[-1], x, y, l2)
  assert abs(ours - ref) <= 1e-4 * ref
  np.testing.assert_allclose(np.append(w, b), exact, rtol=1e-3, atol=1e-3)
  # evaluate on the training data reports the same objective per example.
  result = model.evaluate(x, y, verbose=0, return_dict=True)
  assert result["loss"] == pytest.approx(ours / len(y), rel=1e-4)
  assert result["mse"] == pytest.approx(
      np.mean((a @ np.append(w, b) - y) ** 2), rel=1e-4)


def test_gap_tolerance_stops_early_with_a_certified_gap(cancer):
  x, y, _, _ = cancer
  model = LinearModel(loss="logistic", l2=0.5)
  history = model.fit(x, y, epochs=200, tol=1e-4, verbose=0)
  gaps = history.history["duality_gap"]
  assert len(gaps) < 200
  assert gaps[-1] < 1e-4 and all(g >= 1e-4 for g in gaps[:-1])
  # Recompute the gap independently: P(w) - D(alpha) with alpha from the
  # model's stored duals and w from its weights.
  w, b = _weights(model)
  primal = _objective("logistic_loss", w, b, x, y, 0.5)
  state = model.sdca_state()
  assert state["keys"].shape == (len(y),)
  by_key = dict(zip(state["keys"].tolist(), state["values"][:, 0]))
  ids = tf.strings.as_string(tf.range(len(y), dtype=tf.int64))
  keys = tf_sdca.sdca_fprint(ids).numpy()[:, 0]
  alpha = np.array([by_key[k] for k in keys.tolist()], np.float64)
  yy = 2.0 * y - 1.0
  v = np.hstack([x, np.ones((len(y), 1))]).T @ alpha
  dual = -float(dual_loss("logistic_loss", alpha, y).sum()) - \
      v @ v / (2 * 0.5)
  assert dual <= primal + 1e-6
  assert (primal - dual) / primal < 1e-4
  assert np.all(alpha * yy >= 0)


def test_all_losses_train_with_a_shrinking_gap():
  rng = np.random.default_rng(3)
  x = rng.normal(size=(300, 5)).astype(np.float32)
  z = x @ np.array([1.0, -0.5, 0.2, 0.0, 0.3])
  labels = {
      "logistic": (z > 0).astype(np.float32),
      "hinge": (z > 0).astype(np.float32),
      "smooth_hinge": (z > 0).astype(np.float32),
      "squared": z.astype(np.float32),
      "absolute": z.astype(np.float32),
      "poisson": rng.poisson(np.exp(0.3 * z)).astype(np.float32),
  }
  for loss, y in labels.items():
    model = LinearModel(loss=loss, l2=1.0)
    history = model.fit(x, y, epochs=40, tol=1e-5, verbose=0)
    gaps = history.history["duality_gap"]
    if loss in ("hinge", "absolute", "poisson"):
      # Not smooth (hinge, absolute) or with an unbounded curvature
      # (Poisson's exp): the gap shrinks slowly, not geometrically.
      assert gaps[-1] < 1e-2, (loss, gaps)
    else:
      assert gaps[-1] < 1e-4, (loss, gaps[-5:])
    out = model.predict(x[:4], verbose=0).ravel()
    w, b = _weights(model)
    score = x[:4] @ w + b
    expected = {"logistic": 1 / (1 + np.exp(-score)),
                "poisson": np.exp(score)}.get(loss, score)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_sample_weight_two_equals_a_duplicated_row_and_class_weight(cancer):
  x, y, _, _ = cancer
  x, y = x[:200], y[:200]
  weights = np.where(y == 1, 2.0, 1.0).astype(np.float32)
  weighted = LinearModel(loss="logistic", l2=1.0)
  weighted.fit(x, y, sample_weight=weights, epochs=300, tol=1e-10,
               verbose=0)
  by_class = LinearModel(loss="logistic", l2=1.0)
  by_class.fit(x, y, class_weight={0: 1.0, 1: 2.0}, epochs=300, tol=1e-10,
               verbose=0)
  twice = np.concatenate([np.arange(200), np.flatnonzero(y == 1)])
  duplicated = LinearModel(loss="logistic", l2=1.0)
  duplicated.fit(x[twice], y[twice], epochs=300, tol=1e-10, verbose=0)
  for other in (by_class, duplicated):
    for a, b in zip(weighted.get_weights(), other.get_weights()):
      np.testing.assert_allclose(a, b, atol=2e-4)


def _categorical_data(n=2000, seed=4):
  rng = np.random.default_rng(seed)
  cities = np.array([f"city{i}" for i in range(30)])
  city = cities[rng.integers(0, 30, n)]
  user = rng.integers(0, 10_000, n).astype(np.int64)
  age = rng.normal(size=(n, 1)).astype(np.float32)
  effect = {c: e for c, e in zip(cities, rng.normal(size=30))}
  z = np.array([effect[c] for c in city]) + 0.8 * age[:, 0]
  y = (rng.uniform(size=n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  return {"city": city, "user": user, "age": age}, y, cities


def test_dict_features_with_preprocessing_layers_and_a_dataset():
  features, y, cities = _categorical_data()
  categorical = {
      "city": keras.layers.StringLookup(vocabulary=list(cities[:25])),
      "user": keras.layers.Hashing(num_bins=64),
  }
  model = LinearModel(loss="logistic", l2=10.0,
                      categorical_features=categorical)
  model.compile(metrics=["auc"])
  history = model.fit(features, y, epochs=100, tol=1e-7, batch_size=512,
                      verbose=0)
  assert history.history["duality_gap"][-1] < 1e-7
  assert history.history["auc"][-1] > 0.7
  names = [w.path for w in model.weights]
  assert len(names) == 4  # age, city (26 ids: 25 + OOV), user (64), bias
  assert [w.shape for w in model.weights] == [(1, 1), (26, 1), (64, 1), (1,)]
  # The same data streamed as a tf.data.Dataset with example ids (unshuffled
  # batches of the same rows) trains to the same optimum.
  ids = np.arange(len(y))
  stream = tf.data.Dataset.from_tensor_slices(
      (dict(features, example_id=ids), y)).batch(512)
  streamed = LinearModel(loss="logistic", l2=10.0,
                         categorical_features={
                             "city": keras.layers.StringLookup(
                                 vocabulary=list(cities[:25])),
                             "user": keras.layers.Hashing(num_bins=64)})
  streamed.fit(stream, epochs=100, tol=1e-7, verbose=0)
  for a, b in zip(model.get_weights(), streamed.get_weights()):
    np.testing.assert_allclose(a, b, atol=1e-3)
  # Without ids a streamed dataset is refused, saying what to add.
  no_ids = tf.data.Dataset.from_tensor_slices((features, y)).batch(512)
  with pytest.raises(InvalidInputError, match="example_id"):
    LinearModel(categorical_features={"city": len(cities),
                                      "user": 10_000}).fit(no_ids)


@pytest.mark.parametrize("as_dict", [False, True])
def test_missing_example_ids_error_gives_a_snippet_that_works(as_dict):
  """A stream of (tensor, label) or (dict, label) without ids is refused
  with a map() that adds them; that map, as printed, makes the dataset
  train, to the in-memory fit's optimum."""
  rng = np.random.default_rng(3)
  x = rng.normal(size=(300, 4)).astype(np.float32)
  y = (x @ [1.0, -2.0, 0.5, 0.0] + rng.normal(size=300) > 0).astype(
      np.float32)
  dataset = tf.data.Dataset.from_tensor_slices(
      ({"x": x} if as_dict else x, y))
  model = LinearModel(loss="logistic")
  with pytest.raises(InvalidInputError, match="example_id") as error:
    model.fit(dataset.batch(100), verbose=0)
  snippet = re.search(r"with (dataset\.enumerate\(\)\.map\(.*\)\)), or",
                      str(error.value)).group(1)
  with_ids = eval(snippet, {"dataset": dataset})  # pylint: disable=eval-used
  history = model.fit(with_ids.batch(100), epochs=200, tol=1e-9, verbose=0)
  assert history.history["duality_gap"][-1] < 1e-9
  in_memory = LinearModel(loss="logistic")
  in_memory.fit({"x": x} if as_dict else x, y, epochs=200, tol=1e-9,
                verbose=0)
  # Both within a relative gap of 1e-9 (P ~ 100, l2 = 1): |w - w*| ~ 1e-4.
  for a, b in zip(model.get_weights(), in_memory.get_weights()):
    np.testing.assert_allclose(a, b, atol=1e-3)


def test_in_memory_fit_runs_the_packed_engine_of_in_memory_sdca():
  """fit on in-memory data is InMemorySdca's engine: a dict of a CSR matrix,
  a categorical feature and a dense one gives the same gaps, bit for bit,
  as InMemorySdca on the same rows laid out by hand (sparse features in
  name order, then dense ones, then the bias), whatever batch_size says."""
  features, y, cities = _categorical_data()
  rng = np.random.default_rng(5)
  n = len(y)
  words = scipy.sparse.random(n, 50, density=0.1, random_state=3,
                              format="csr", dtype=np.float32,
                              data_rvs=lambda k: rng.uniform(0.5, 2.0, k))
  x = {"age": features["age"], "city": features["city"], "words": words}
  model = LinearModel(loss="logistic", l1=0.01, l2=1.0,
                      categorical_features={
                          "city": keras.layers.StringLookup(
                              vocabulary=list(cities))})
  history = model.fit(x, y, epochs=8, batch_size=64, shuffle=False,
                      verbose=0)
  city = keras.layers.StringLookup(vocabulary=list(cities))(
      features["city"]).numpy().astype(np.int64)  # 31 ids: OOV first
  # Row i: its city id, then its words' ids (offset by 31).
  lengths = np.diff(words.indptr) + 1
  indptr = np.concatenate([[0], np.cumsum(lengths)])
  cols = np.empty(indptr[-1], np.int64)
  vals = np.empty(indptr[-1], np.float32)
  cols[indptr[:-1]] = city
  vals[indptr[:-1]] = 1.0
  rest = np.setdiff1d(np.arange(indptr[-1]), indptr[:-1])
  cols[rest] = 31 + words.indices
  vals[rest] = words.data
  reference = InMemorySdca(loss="logistic", l1=0.01, l2=1.0)
  ref = reference.fit(y, dense=np.hstack([features["age"],
                                          np.ones((n, 1), np.float32)]),
                      indptr=indptr, indices=cols, values=vals,
                      num_features=81, epochs=8, verbose=0)
  assert history.history["duality_gap"] == ref["duality_gap"]
  assert history.history["loss"] == ref["loss"]
  age, city_w, words_w, bias = model.get_weights()
  shrunk = losses.shrink_l1(np.concatenate(
      [reference.sparse_weights, reference.dense_weights]), 0.01, 1.0)
  np.testing.assert_allclose(
      np.concatenate([city_w.ravel(), words_w.ravel(), age.ravel(), bias]),
      shrunk, rtol=1e-6, atol=1e-7)


def test_adaptive_order_trains_in_memory_data_on_packed_rows():
  # Packed rows take every visiting order: in-memory data trains one epoch
  # per step whatever batch_size and shuffle say (once, in mini-batches,
  # fixed batches in a random order stalled near 1e-3 here).
  features, y, _ = _categorical_data()
  x = features["age"]
  gaps = {}
  for shuffle in (True, False):
    model = LinearModel(loss="logistic", l2=1.0, visit_order="adaptive")
    history = model.fit(x, y, batch_size=512, epochs=15,
                        shuffle=shuffle, verbose=0)
    gaps[shuffle] = history.history["duality_gap"]
  assert gaps[True] == gaps[False]
  assert gaps[True][-1] < 1e-7


def test_callbacks_see_the_gap_and_save_checkpoints(cancer, tmp_path):
  x, y, xt, yt = cancer
  log = tmp_path / "log.csv"
  ckpt = tmp_path / "best.keras"
  board = tmp_path / "tb"
  model = LinearModel(loss="logistic", l2=1.0)
  model.compile(metrics=["accuracy"])
  history = model.fit(
      x, y, epochs=50, validation_data=(xt, yt), verbose=0,
      callbacks=[keras.callbacks.CSVLogger(str(log)),
                 keras.callbacks.ModelCheckpoint(str(ckpt),
                                                 monitor="duality_gap",
                                                 mode="min"),
                 keras.callbacks.TensorBoard(str(board)),
                 keras.callbacks.EarlyStopping(monitor="duality_gap",
                                               mode="min", min_delta=1e-3,
                                               patience=0)])
  gaps = history.history["duality_gap"]
  # EarlyStopping on the gap: it stops at the first epoch that improves the
  # gap by less than 1e-3.
  assert len(gaps) < 50 and gaps[-2] - gaps[-1] < 1e-3
  with open(log) as f:
    rows = list(csv.DictReader(f))
  assert len(rows) == len(gaps)
  np.testing.assert_allclose([float(r["duality_gap"]) for r in rows], gaps,
                             rtol=1e-6)
  assert "val_loss" in rows[0] and "val_accuracy" in rows[0]
  assert any(name.startswith("events") for _, _, files in os.walk(board)
             for name in files)
  restored = keras.models.load_model(str(ckpt))
  np.testing.assert_array_equal(restored.predict(xt, verbose=0),
                                model.predict(xt, verbose=0))


def test_save_load_predicts_identically_and_resumes_training(tmp_path):
  features, y, cities = _categorical_data(seed=6)
  def make():
    return LinearModel(loss="logistic", l1=0.05, l2=1.0,
                       categorical_features={
                           "city": keras.layers.StringLookup(
                               vocabulary=list(cities)),
                           "user": keras.layers.Hashing(num_bins=32)})
  model = make()
  model.compile(metrics=["auc"])
  model.fit(features, y, epochs=3, batch_size=700, shuffle=False, verbose=0)
  path = str(tmp_path / "model.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  np.testing.assert_array_equal(loaded.predict(features, verbose=0),
                                model.predict(features, verbose=0))
  assert loaded.get_config()["l1"] == 0.05
  # The duals and the unshrunk weights were saved too: 3 more epochs after
  # loading equal 6 uninterrupted epochs.
  loaded.fit(features, y, epochs=3, batch_size=700, shuffle=False, verbose=0)
  uninterrupted = make()
  uninterrupted.fit(features, y, epochs=6, batch_size=700, shuffle=False,
                    verbose=0)
  for a, b in zip(loaded.get_weights(), uninterrupted.get_weights()):
    np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_exported_savedmodel_serves_raw_features_in_a_fresh_process(
    tmp_path):
  features, y, cities = _categorical_data(seed=7)
  model = LinearModel(loss="logistic", l2=1.0, categorical_features={
      "city": keras.layers.StringLookup(vocabulary=list(cities)),
      "user": keras.layers.Hashing(num_bins=32)})
  model.fit(features, y, epochs=5, verbose=0)
  export = str(tmp_path / "export")
  model.export(export, verbose=False)
  rows = slice(0, 5)
  np.save(tmp_path / "age.npy", features["age"][rows])
  np.save(tmp_path / "user.npy", features["user"][rows])
  np.save(tmp_path / "city.npy", features["city"][rows].astype(str))
  code = f"""
import os
os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'
import numpy as np, tensorflow as tf
d = {str(tmp_path)!r}
served = tf.saved_model.load(os.path.join(d, 'export'))
fn = served.signatures['serving_default']
out = fn(age=tf.constant(np.load(os.path.join(d, 'age.npy'))),
         user=tf.constant(np.load(os.path.join(d, 'user.npy'))),
         city=tf.constant(np.load(os.path.join(d, 'city.npy'))))
import sys
print('tf_sdca' in sys.modules)
print(repr(list(next(iter(out.values())).numpy().ravel().astype(float))))
"""
  run = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True)
  lines = run.stdout.strip().splitlines()
  assert lines[-2] == "False"  # served by TensorFlow alone
  served = np.array(eval(lines[-1]))  # pylint: disable=eval-used
  expected = model.predict({k: v[rows] for k, v in features.items()},
                           verbose=0).ravel()
  np.testing.assert_allclose(served, expected, rtol=1e-6)


@pytest.mark.parametrize("case", ["string labels", "label 2", "lengths",
                                  "nan feature", "negative weight",
                                  "repeated ids"])
def test_bad_input_fails_before_training(case, cancer):
  x, y, _, _ = cancer
  x, y = x[:50].copy(), y[:50].copy()
  kwargs = {}
  if case == "string labels":
    y = np.where(y > 0, "yes", "no")
    match = "labels must be numeric"
  elif case == "label 2":
    y[7] = 2.0
    match = r"labels\[7\] = 2.0 must be 0 or 1"
  elif case == "lengths":
    y = y[:49]
    match = "labels have 49 rows but the features have 50"
  elif case == "nan feature":
    x[3, 4] = np.nan
    match = r"feature 'features'\[3, 4\] = nan is not finite"
  elif case == "negative weight":
    kwargs["sample_weight"] = np.ones(50)
    kwargs["sample_weight"][9] = -1.0
    match = r"sample_weight\[9\] = -1.0 must be finite and >= 0"
  else:
    x = {"features": x, "example_id": np.arange(50) % 49}
    match = "repeats an example id"
  model = LinearModel(loss="logistic")
  with pytest.raises(InvalidInputError, match=match):
    model.fit(x, y, epochs=2, verbose=0, **kwargs)
  # Both kinds of except clause catch it, and nothing was trained.
  assert issubclass(InvalidInputError, ValueError)
  assert issubclass(InvalidInputError, tf.errors.InvalidArgumentError)
  assert model._sdca is None  # pylint: disable=protected-access


def test_options_are_checked():
  with pytest.raises(ValueError, match="loss must be one of"):
    LinearModel(loss="cross_entropy")
  with pytest.raises(ValueError, match="l2"):
    LinearModel(l2=0.0)
  with pytest.raises(ValueError, match="output_mode"):
    LinearModel(categorical_features={
        "c": keras.layers.Hashing(num_bins=4, output_mode="one_hot")})
  model = LinearModel()
  with pytest.raises(ValueError, match="do not pass optimizer"):
    model.compile(optimizer="adam")


def test_the_g3doc_examples_run(tmp_path, capsys, monkeypatch):
  doc = pathlib.Path(__file__).parent.parent / "g3doc" / "keras.md"
  # The two examples are run here, not by test_docs_examples (their
  # marker says so).
  keras_example, loop_example = re.findall(
      r"<!-- docs-test: skip \(run, and its numbers checked, by "
      r"tests/test_keras_model.py's test_the_g3doc_examples_run\) -->\n"
      r"```python\n(.*?)```", doc.read_text(), re.S)
  # Run from files: AutoGraph needs the source of the tf.function. The
  # examples write their files to the working directory.
  monkeypatch.chdir(tmp_path)
  results = []
  for i, code in enumerate((keras_example, loop_example)):
    script = tmp_path / f"example{i}.py"
    script.write_text(code)
    results.append(runpy.run_path(str(script)))
  printed = {}
  for line in capsys.readouterr().out.splitlines():
    parts = line.split()
    if len(parts) == 2 and parts[0] in ("epochs", "gap", "val_auc", "same",
                                        "objective"):
      printed.setdefault(parts[0], []).append(parts[1])
  assert int(printed["epochs"][0]) < 100
  assert float(printed["gap"][0]) < 1e-6
  assert float(printed["val_auc"][0]) > 0.7
  assert printed["same"] == ["True"]
  assert (tmp_path / "keras_linear_export" / "saved_model.pb").exists()
  # The custom loop's objective is that of its variables, and close to the
  # optimum scipy finds for the same problem.
  g = results[1]
  n, vocab = g["n"], g["vocab"]
  design = np.hstack([g["dense"], np.eye(vocab)[g["ids"]]]).astype(
      np.float64)

  def objective(w):
    return (primal_loss("logistic_loss", design @ w, g["y"]).sum() +
            2.5 * w @ w) / n

  w_loop = np.concatenate([g["variables"]["dense"].numpy(),
                           g["variables"]["cat"].numpy()])
  best = minimize(objective, np.zeros(design.shape[1]), method="L-BFGS-B",
                  options=dict(ftol=1e-14, gtol=1e-10)).fun
  assert float(printed["objective"][0]) == pytest.approx(objective(w_loop),
                                                         rel=1e-5)
  assert best <= objective(w_loop) <= best * (1 + 1e-3)


def test_in_memory_and_streamed_fits_continue_each_other():
  """The duals of in-memory training reach the streaming state (and back):
  switching doors continues the same dual ascent instead of restarting."""
  rng = np.random.default_rng(8)
  n = 2400
  x = scipy.sparse.random(n, 100, density=0.05, random_state=1,
                          format="csr", dtype=np.float32)
  y = (rng.uniform(size=n) < 1 / (1 + np.exp(-x @ rng.normal(size=100) * 3))
       ).astype(np.float32)
  model = LinearModel(loss="logistic", l2=1.0)
  packed = model.fit(x, y, epochs=4, verbose=0).history["duality_gap"]
  assert model.duality_gap()[1] == packed[-1]
  coo = x.tocoo()
  sparse = tf.SparseTensor(np.stack([coo.row, coo.col], 1).astype(np.int64),
                           coo.data, coo.shape)
  stream = tf.data.Dataset.from_tensor_slices(
      ({"features": sparse, "example_id": np.arange(n)}, y)).batch(600)
  streamed = model.fit(stream, epochs=3, verbose=0).history["duality_gap"]
  again = model.fit(x, y, epochs=3, verbose=0).history["duality_gap"]
  gaps = packed + streamed + again
  # Restarting from zero duals would put the first gap of each door back
  # near the first epoch's.
  assert all(b < a for a, b in zip(gaps, gaps[1:])), gaps
  assert gaps[-1] < 1e-3 * gaps[0]


def test_fit_without_examples_or_weight_says_so():
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  model = LinearModel(loss="logistic")
  with pytest.raises(ValueError, match=r"fit got no examples \(x has 0 "
                                       r"rows\)"):
    model.fit(np.zeros((0, 3), np.float32), np.zeros(0, np.float32),
              verbose=0)
  with pytest.raises(ValueError, match=r"every example's weight .* is 0"):
    model.fit(np.ones((4, 3), np.float32), np.ones(4, np.float32),
              sample_weight=np.zeros(4, np.float32), verbose=0)



def test_epochs_that_are_not_integers_are_refused_as_keras_does():
  """Keras' `fit` raises a TypeError for epochs=2.5 (its range()); the
  engine's epochs ran 2 for 2.5, and none from initial_epoch=1.5."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  x = np.random.RandomState(0).rand(20, 3).astype(np.float32)
  y = (x[:, 0] > 0.5).astype(np.float32)
  model = LinearModel(loss="logistic")
  for kwargs, name in ((dict(epochs=2.5), "epochs"),
                       (dict(epochs=2, initial_epoch=1.5), "initial_epoch"),
                       (dict(epochs="3"), "epochs")):
    with pytest.raises(TypeError, match=f"{name} must be an integer"):
      model.fit(x, y, verbose=0, **kwargs)
  assert not model.built or not np.any(model.get_weights()[0])
  for tol in (float("nan"), -1.0):  # (taken, and never stopped a fit)
    with pytest.raises(ValueError, match=r"tol must be None or a number "
                       r">= 0"):
      model.fit(x, y, epochs=2, tol=tol, verbose=0)
  history = model.fit(x, y, epochs=np.int64(2), verbose=0)
  assert len(history.history["loss"]) == 2


def test_an_infinite_dataset_is_refused_not_walked_for_ever():
  """Keras' .repeat() with steps_per_epoch: the exact gap ending each epoch
  walked the whole dataset, and fit never returned."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  x = np.random.default_rng(0).normal(size=(40, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(40)}, y)).batch(10)
  model = LinearModel(loss="logistic")
  model.compile()
  with pytest.raises(ValueError, match=r"fit got an infinite dataset"):
    model.fit(data.repeat(), epochs=2, steps_per_epoch=3, verbose=0)
  with pytest.raises(ValueError, match=r"duality_gap got an infinite"):
    model.duality_gap(data.repeat())
  history = model.fit(data, epochs=2, verbose=0)  # once: epochs repeat it
  assert len(history.history["duality_gap"]) == 2


def test_categorical_ids_must_be_whole_and_categorical_names_present():
  """Float ids 2.999 trained as id 2 (2.5 predicted as 2, NaN as the lowest
  int64), and a misspelt categorical_features name trained its feature as
  one dense number, without a word."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras.data import InvalidInputError  # pylint: disable=import-outside-toplevel
  item = np.random.default_rng(3).integers(0, 10, 200)
  y = (item % 2).astype(np.float32)
  model = LinearModel(loss="logistic", categorical_features={"item": 10})
  model.compile()
  with pytest.raises(InvalidInputError,
                     match=r"feature 'item' has id 8.999: ids must be whole"):
    model.fit({"item": item + 0.999}, y, epochs=1, verbose=0)
  model.fit({"item": item.astype(np.float64)}, y, epochs=2, verbose=0)
  for ids, shown in (([2.5, 2.0], "2.5"), ([np.nan, 2.0], "nan")):
    with pytest.raises(InvalidInputError, match=f"has id {shown}: ids must"):
      model.predict({"item": np.array(ids)}, verbose=0)
  whole = model.predict({"item": np.array([2.0, 3.0])}, verbose=0)
  np.testing.assert_array_equal(
      whole, model.predict({"item": np.array([2, 3])}, verbose=0))
  typo = LinearModel(loss="logistic", categorical_features={"itme": 10})
  with pytest.raises(InvalidInputError, match=r"categorical_features names "
                     r"\['itme'\], not among the features \['item'\]"):
    typo.fit({"item": item}, y, epochs=1, verbose=0)

def test_a_saved_model_with_non_finite_weights_is_refused_on_load(
    cancer, tmp_path):
  x, y, _, _ = cancer
  model = LinearModel(loss="logistic", l2=1.0)
  model.fit(x, y, epochs=2, verbose=0)
  store = {}
  model.save_own_variables(store)
  slot = next(k for k in store if k.startswith("sdca_slot_"))
  for key, index in (("0", 5), (slot, 3), ("sdca_row_duals", 11)):
    assert key in store, sorted(store)
    damaged = {k: np.array(v, copy=True) for k, v in store.items()}
    damaged[key].flat[index] = np.nan
    fresh = LinearModel(loss="logistic", l2=1.0)
    fresh.fit(x[:10], y[:10], epochs=1, verbose=0)  # built, then loaded
    with pytest.raises(ValueError, match=rf"the saved variable '{key}' has "
                       rf"\[{index}\] = nan, not finite"):
      fresh.load_own_variables(damaged)
  # The undamaged store loads and predicts as the model.
  fresh = LinearModel(loss="logistic", l2=1.0)
  fresh.fit(x[:10], y[:10], epochs=1, verbose=0)
  fresh.load_own_variables(store)
  np.testing.assert_array_equal(fresh.predict(x, verbose=0),
                                model.predict(x, verbose=0))


def test_a_csr_matrix_with_duplicate_entries_trains_as_its_sum():
  """scipy reads a CSR matrix's repeated (row, column) entries as their
  sum; fit, validation, predict and evaluate must too (a tf.SparseTensor
  refused them: "indices[1] = [0,0] is repeated")."""
  rng = np.random.default_rng(3)
  base = scipy.sparse.random(300, 12, density=0.3, random_state=4,
                             format="csr", dtype=np.float32)
  y = (rng.uniform(size=300) > 0.5).astype(np.float32)
  # Every third entry split into two halves, the second half appended at
  # the end of its row (so the row's indices are also unsorted).
  rows = np.repeat(np.arange(300), np.diff(base.indptr))
  split = np.arange(base.nnz) % 3 == 0
  data = np.where(split, base.data / 2, base.data)
  all_rows = np.concatenate([rows, rows[split]])
  all_cols = np.concatenate([base.indices, base.indices[split]])
  all_data = np.concatenate([data, base.data[split] - data[split]])
  order = np.argsort(all_rows, kind="stable")
  dup = scipy.sparse.csr_matrix(
      (all_data[order], all_cols[order],
       np.concatenate([[0], np.cumsum(np.bincount(all_rows, minlength=300))])),
      shape=base.shape)
  assert not dup.has_canonical_format and dup.nnz > base.nnz
  summed = dup.copy()
  summed.sum_duplicates()
  np.testing.assert_allclose(summed.toarray(), base.toarray(), rtol=1e-6)
  kept = dup.copy()
  models = []
  for x in (dup, summed):
    model = LinearModel(loss="logistic", l2=1.0)
    history = model.fit(x, y, epochs=4, shuffle=False, verbose=0,
                        validation_data=(x, y))
    models.append((model, history.history))
  (a, ha), (b, hb) = models
  for wa, wb in zip(a.get_weights(), b.get_weights()):
    np.testing.assert_array_equal(wa, wb)
  assert ha == hb
  np.testing.assert_array_equal(a.predict(dup, verbose=0),
                                b.predict(summed, verbose=0))
  assert a.evaluate(dup, y, verbose=0) == b.evaluate(summed, y, verbose=0)
  # The caller's matrix is left as it was.
  assert (dup != kept).nnz == 0 and not dup.has_canonical_format


def test_a_streamed_id_reused_with_another_label_is_named_as_such():
  """Example ids repeated across a stream's batches are one example each
  (one dual): the same rows given twice train; an id that comes back with
  another label was refused by the op's check of its stored dual, in the
  op's words (example_state_data[0, 0] = ...), an input the user never
  gave."""
  rng = np.random.default_rng(0)
  n = 200
  x = rng.normal(size=(n, 4)).astype(np.float32)
  y = (x[:, 0] + rng.normal(size=n) > 0).astype(np.float32)
  classes = rng.integers(0, 3, n).astype(np.float32)

  def stream(ids, labels):
    return tf.data.Dataset.from_tensor_slices(
        ({"features": x, "example_id": ids}, labels)).batch(50)
  same = stream(np.arange(n), y)
  model = LinearModel(loss="logistic")
  model.compile()
  history = model.fit(same.concatenate(same), epochs=2, verbose=0)
  assert len(history.history["duality_gap"]) == 2
  for loss, labels, dual in (("logistic", y, r" -?[0-9.e-]+"),
                             ("hinge", y, r" -?[0-9.e-]+"),
                             ("softmax", classes, " block")):
    model = LinearModel(loss=loss, num_classes=3 if loss == "softmax"
                        else None)
    model.compile()
    with pytest.raises(InvalidInputError, match=(
        r"a streamed batch has a row of label [0-9] whose example id "
        r"\(feature 'example_id'\) was trained before with another label: "
        rf"its stored dual{dual} is not one of {loss} for label [0-9]"
        r"\. SDCA keeps one dual per example id")):
      model.fit(stream(np.arange(n) % 50, labels), epochs=3, verbose=0)


def test_a_streamed_label_or_weight_of_two_columns_is_refused_by_shape():
  """Labels [n, 2] (one-hot) for a binary loss were flattened to 2n per
  batch, and the op said 'keys has 25 rows but example_weights 50 and
  example_labels 50'."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(50, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  features = {"features": x, "example_id": np.arange(50)}
  two = np.stack([y, 1 - y], 1)
  good = tf.data.Dataset.from_tensor_slices((features, y)).batch(25)
  model = LinearModel(loss="logistic")
  model.compile()
  for parts, name in (((features, two), "labels"),
                      ((features, y, np.ones((50, 2), np.float32)),
                       "sample_weight")):
    data = tf.data.Dataset.from_tensor_slices(parts).batch(25)
    with pytest.raises(InvalidInputError, match=(
        rf"the dataset's {name} must have shape \[batch\] or \[batch, 1\] "
        r"\(one number per example\), got \(None, 2\)")):
      model.fit(data, epochs=1, verbose=0)
    assert model._sdca is None  # pylint: disable=protected-access
    with pytest.raises(InvalidInputError, match=f"the dataset's {name}"):
      model.fit(good, validation_data=data, epochs=1, verbose=0)
    with pytest.raises(InvalidInputError, match=f"the dataset's {name}"):
      model.evaluate(data, verbose=0)
  # predict reads no labels; [n, 1] labels train as [n].
  assert model.predict(tf.data.Dataset.from_tensor_slices(
      (features, two)).batch(25), verbose=0).shape == (50, 1)
  column = LinearModel(loss="logistic")
  column.fit(tf.data.Dataset.from_tensor_slices(
      (features, y[:, None])).batch(25), epochs=2, verbose=0)
  flat = LinearModel(loss="logistic")
  flat.fit(good, epochs=2, verbose=0)
  for a, b in zip(column.get_weights(), flat.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_class_weight_without_a_class_of_the_labels_names_the_class():
  """class_weight={0: 2.0} on 0/1 labels said 'class_weight needs integer
  labels in [0, 1)' in memory and 'indices[0] = 1 is not in [0, 1)' from
  a gather in a streamed batch's map."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(50, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  first = int(np.flatnonzero(y == 1)[0])
  stream = tf.data.Dataset.from_tensor_slices(
      ({"features": x, "example_id": np.arange(50)}, y)).batch(25)
  model = LinearModel(loss="logistic")
  model.compile()
  with pytest.raises(InvalidInputError, match=(
      rf"class_weight has no weight for class 1 \(labels\[{first}\] = 1.0\)"
      r": give one to every class of the labels")):
    model.fit(x, y, class_weight={0: 2.0}, epochs=1, verbose=0)
  assert model._sdca is None  # pylint: disable=protected-access
  with pytest.raises(InvalidInputError, match=(
      r"class_weight has no weight for class 1 \(a streamed batch's label "
      r"1.0\)")):
    model.fit(stream, class_weight={0: 2.0}, epochs=1, verbose=0)
  regression = LinearModel(loss="squared")
  for labels, shown in ((y - 1, r"labels\[\d+\] = -1.0"),
                        (y + 0.5, r"labels\[0\] = 1.5")):
    with pytest.raises(InvalidInputError, match=(
        r"class_weight needs class ids as labels \(whole numbers >= 0\), "
        rf"got {shown}")):
      regression.fit(x, labels, class_weight={0: 1.0, 1: 2.0}, verbose=0)
  # A class skipped below the largest weighs 1, in memory and streamed.
  for data, kwargs in ((x, dict(y=y)), (stream, {})):
    skipped = LinearModel(loss="logistic")
    skipped.fit(data, class_weight={1: 2.0}, epochs=2, verbose=0, **kwargs)
    full = LinearModel(loss="logistic")
    full.fit(data, class_weight={0: 1.0, 1: 2.0}, epochs=2, verbose=0,
             **kwargs)
    for a, b in zip(skipped.get_weights(), full.get_weights()):
      np.testing.assert_array_equal(a, b)


def test_sample_weight_of_two_columns_is_refused_by_its_shape():
  """sample_weight [50, 2] was flattened and refused as having '100 rows
  but the features have 50'."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(50, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  model = LinearModel(loss="logistic")
  match = (r"sample_weight must have shape \[n\] or \[n, 1\] \(one weight "
           r"per example\), got \(50, 2\)")
  with pytest.raises(InvalidInputError, match=match):
    model.fit(x, y, sample_weight=np.ones((50, 2)), verbose=0)
  assert model._sdca is None  # pylint: disable=protected-access
  model.fit(x, y, sample_weight=np.ones((50, 1)), epochs=2, verbose=0)
  with pytest.raises(InvalidInputError, match=match):
    model.evaluate(x, y, sample_weight=np.ones((50, 2)), verbose=0)
  flat = LinearModel(loss="logistic")
  flat.fit(x, y, sample_weight=np.ones(50), epochs=2, verbose=0)
  for a, b in zip(model.get_weights(), flat.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_strings_for_a_categorical_vocabulary_size_are_named():
  """String ids for categorical_features={"item": 10} failed in the ids'
  range check: "'<' not supported between instances of 'bytes' and
  'int'"; streamed, TensorFlow's cast from string to int64."""
  rng = np.random.default_rng(0)
  item = rng.integers(0, 10, 50)
  y = (item % 2).astype(np.float32)
  match = (r"feature 'item' holds strings, but categorical_features\['item'"
           r"\] = 10 takes integer ids in \[0, 10\): give the ids as "
           r"numbers, or map the strings by a layer")
  model = LinearModel(loss="logistic", categorical_features={"item": 10})
  with pytest.raises(InvalidInputError, match=match):
    model.fit({"item": item.astype(str)}, y, verbose=0)
  assert model._sdca is None  # pylint: disable=protected-access
  stream = tf.data.Dataset.from_tensor_slices(
      ({"item": item.astype(str), "example_id": np.arange(50)}, y)).batch(25)
  with pytest.raises(InvalidInputError, match=match):
    LinearModel(loss="logistic", categorical_features={"item": 10}).fit(
        stream, verbose=0)
  model.fit({"item": item}, y, epochs=2, verbose=0)
  with pytest.raises(InvalidInputError, match=match):
    model.predict({"item": np.array(["3"])}, verbose=0)


def test_a_fresh_model_called_or_built_takes_load_weights(tmp_path):
  """Keras' way to build a subclassed model before load_weights: model(x)
  raised Keras' 'cannot add new elements of state' (its build came first,
  made nothing and locked the model), and build((None, d)) returned
  without weights, so load_weights and fit failed after it."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  trained = LinearModel(loss="logistic")
  trained.fit(x, y, epochs=3, verbose=0)
  path = str(tmp_path / "m.weights.h5")
  trained.save_weights(path)
  expected = trained.predict(x, verbose=0)
  called = LinearModel(loss="logistic")
  np.testing.assert_array_equal(called(x[:2]), np.full((2, 1), 0.5))
  built = LinearModel(loss="logistic")
  built.build((None, 3))
  assert [w.shape for w in built.get_weights()] == [(3, 1), (1,)]
  for model in (called, built):
    model.load_weights(path)
    np.testing.assert_array_equal(model.predict(x, verbose=0), expected)
  # The loaded SDCA state resumes: 3 + 3 epochs are 6.
  called.fit(x, y, epochs=3, verbose=0)
  whole = LinearModel(loss="logistic")
  whole.fit(x, y, epochs=6, verbose=0)
  for a, b in zip(called.get_weights(), whole.get_weights()):
    np.testing.assert_array_equal(a, b)
  named = LinearModel(loss="logistic")
  named.build({"a": (None, 2), "b": (None,), "example_id": (None,)})
  assert [w.shape for w in named.get_weights()] == [(2, 1), (1, 1), (1,)]
  # Shapes that cannot build it say how to; the model stays unbuilt.
  shapeless = LinearModel(loss="logistic")
  with pytest.raises(ValueError, match=r"LinearModel.build needs the "
                     r"input's shape to size its weights: build\(\(None, "
                     r"d\)\)"):
    shapeless.build()
  shapeless.fit(x, y, epochs=1, verbose=0)
  with pytest.raises(ValueError, match=r"\['c'\] are categorical .*: call "
                     r"the model on data \(model\(x\)\)"):
    LinearModel(categorical_features={"c": 4}).build({"c": (None, 1)})
  ids = LinearModel(loss="logistic", categorical_features={"c": 4})
  assert ids({"c": np.array([1, 3])}).shape == (2, 1)


def test_a_tf_train_checkpoint_holds_the_training_state(tmp_path):
  """tf.train.Checkpoint(model=LinearModel) held the weights and the
  SdcaModel as children of their own: read into a new model it restored
  the bias alone until a fit created the SdcaModel (assert_consumed
  failed, predict scored zero kernels), and never the duals of in-memory
  rows, so a resumed fit left the path of an uninterrupted one (the
  resumed runs are in test_door_contract). It holds the store of
  save_own_variables now, read back as load_own_variables loads a file:
  a model never built is built from it, one never fitted or never built
  checkpoints and restores, a checkpoint refused sets nothing, and one
  written before the change still restores."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  trained = LinearModel(loss="logistic")
  trained.fit(x, y, epochs=3, verbose=0)
  path = tf.train.Checkpoint(model=trained).write(str(tmp_path / "trained"))
  fresh = LinearModel(loss="logistic")
  tf.train.Checkpoint(model=fresh).read(path).assert_consumed()
  np.testing.assert_array_equal(fresh.predict(x, verbose=0),
                                trained.predict(x, verbose=0))
  for key in ("keys", "values", "calls"):
    np.testing.assert_array_equal(fresh.sdca_state()[key],
                                  trained.sdca_state()[key])
  # Before any fit: the weights; never built: nothing, into any model.
  built = LinearModel(loss="logistic")
  built.build((None, 3))
  built.set_weights([np.ones((3, 1), np.float32), np.ones(1, np.float32)])
  unfitted = tf.train.Checkpoint(model=built).write(str(tmp_path / "built"))
  unbuilt = tf.train.Checkpoint(model=LinearModel(loss="logistic")).write(
      str(tmp_path / "unbuilt"))
  model = LinearModel(loss="logistic")
  tf.train.Checkpoint(model=model).read(unfitted).assert_consumed()
  for a, b in zip(model.get_weights(), built.get_weights()):
    np.testing.assert_array_equal(a, b)
  model.fit(x, y, epochs=1, verbose=0)
  model = LinearModel(loss="logistic")
  tf.train.Checkpoint(model=model).read(unbuilt).assert_consumed()
  assert not model.built
  tf.train.Checkpoint(model=fresh).read(unbuilt).assert_consumed()
  for a, b in zip(fresh.get_weights(), trained.get_weights()):
    np.testing.assert_array_equal(a, b)
  # Refused (other features; held rows for carry_over=0): nothing set.
  wide = LinearModel(loss="logistic")
  wide.fit(np.concatenate([x, x], axis=1), y, epochs=1, verbose=0)
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(7)
  held = LinearModel(loss="logistic", carry_over="auto")
  held.fit(data, epochs=2, verbose=0)
  assert len(held.sdca_state()["held"]["keys"]) > 0
  narrow = LinearModel(loss="logistic", carry_over=0)
  narrow.fit(data, epochs=1, verbose=0)
  for writer, model, message in (
      (wide, LinearModel(loss="logistic"), r"the features \[\['features', "
       r"'dense', 6\]\] \(name, kind, size\) differ"),
      (held, narrow, r"state\['held'\] holds \d+ held rows")):
    if model is not narrow:
      model.fit(x, y, epochs=2, verbose=0)
    weights, state = model.get_weights(), model.sdca_state()
    path = tf.train.Checkpoint(model=writer).write(str(tmp_path / "other"))
    with pytest.raises(ValueError, match=message):
      tf.train.Checkpoint(model=model).read(path)
    for a, b in zip(model.get_weights(), weights):
      np.testing.assert_array_equal(a, b)
    for key in ("keys", "values", "calls"):
      np.testing.assert_array_equal(model.sdca_state()[key], state[key])
  # Written before the change: the bias and the SdcaModel as children.
  older = tmp_path / "older"
  original = LinearModel._trackable_children
  try:
    LinearModel._trackable_children = keras.Model._trackable_children
    path = tf.train.Checkpoint(model=trained).write(str(older))
  finally:
    LinearModel._trackable_children = original
  assert any("_sdca/" in name for name, _ in tf.train.list_variables(path))
  model = LinearModel(loss="logistic")
  model.fit(x, y, epochs=1, verbose=0)
  tf.train.Checkpoint(model=model).read(path).assert_consumed()
  np.testing.assert_array_equal(model.predict(x, verbose=0),
                                trained.predict(x, verbose=0))


def _assert_same_state(a, b):
  """Asserts that two `sdca_state()`s hold the same rows (in any order:
  tables of other shard counts list them so) and weight slots."""
  for state in (a, b):
    order = np.argsort(state["keys"], kind="stable")
    state["keys"], state["values"] = (state["keys"][order],
                                      state["values"][order])
  for key in ("keys", "values"):
    np.testing.assert_array_equal(a[key], b[key])
  for x, y in zip(a["slots"], b["slots"], strict=True):
    np.testing.assert_array_equal(x, y)


def _rewrite_keras_config(path, **changes):
  """Sets `changes` in the LinearModel config of the .keras file `path`."""
  with zipfile.ZipFile(path) as archive:
    entries = {name: archive.read(name) for name in archive.namelist()}
  config = json.loads(entries["config.json"])
  config["config"].update(changes)
  entries["config.json"] = json.dumps(config).encode()
  with zipfile.ZipFile(path, "w") as archive:
    for name, data in entries.items():
      archive.writestr(name, data)


def test_a_state_saved_under_other_options_is_refused_on_load(
    tmp_path, monkeypatch):
  """The saved SDCA state recorded no options: a state trained under one
  loss, l2 or number of classes loaded (load_weights, load_model,
  tf.train.Checkpoint) into a model built with others and trained on from
  duals that mean something else there, without a word. It records them
  now (sdca_options, as SdcaModel's checkpoints do) and a model of other
  ones refuses it naming each option, the saved value and its own, with
  nothing set; options of speed or path (threads, order, seed, shards)
  and l1 (the state is the same dual point under any) load, and files
  saved before the record load unchecked."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  trained = LinearModel(loss="logistic", l2=1.0)
  trained.fit(x, y, epochs=3, verbose=0)

  def save_all(name):
    weights = str(tmp_path / f"{name}.weights.h5")
    whole = str(tmp_path / f"{name}.keras")
    trained.save_weights(weights)
    trained.save(whole)
    checkpoint = tf.train.Checkpoint(model=trained).write(
        str(tmp_path / name))
    return weights, whole, checkpoint

  weights, whole, checkpoint = save_all("options")
  refused = (
      # The losses as LinearModel takes them, not the op's 'hinge_loss'.
      (dict(loss="hinge"), r"loss 'logistic' \(this model 'hinge'\): "),
      (dict(loss="squared_loss"),
       r"loss 'logistic' \(this model 'squared'\): "),
      (dict(l2=2.0), r"l2 1\.0 \(this model 2\.0\)"),
      (dict(loss="softmax", num_classes=2),
       r"loss 'logistic' \(this model 'softmax'\), num_classes "
       r"1 \(this model 2\)"))
  for options, match in refused:
    match = r"the saved SDCA state was trained with " + match
    model = LinearModel(**options)
    model.fit(x, y, epochs=1, verbose=0)
    before, state = model.get_weights(), model.sdca_state()
    for load in (model.load_weights,
                 lambda path, m=model: tf.train.Checkpoint(model=m).read(
                     checkpoint)):
      with pytest.raises(ValueError, match=match) as error:
        load(weights)
      assert "_loss" not in str(error.value)
      for a, b in zip(model.get_weights(), before):
        np.testing.assert_array_equal(a, b)
      for key in ("keys", "values", "calls"):
        np.testing.assert_array_equal(model.sdca_state()[key], state[key])
    # Never built: the checkpoint leaves it so.
    unbuilt = LinearModel(**options)
    with pytest.raises(ValueError, match=match):
      tf.train.Checkpoint(model=unbuilt).read(checkpoint)
    assert not unbuilt.built
  # load_model rebuilds the model from the file's config: refused where the
  # config says other options than the state's.
  keras.models.load_model(whole)
  _rewrite_keras_config(whole, l2=2.0)
  with pytest.raises(ValueError, match=r"trained with l2 1\.0 \(this "
                     r"model 2\.0\)"):
    keras.models.load_model(whole)
  # Options that change the path or the speed, and l1: loaded, resumed.
  for options in (dict(num_threads=1, seed=4, visit_order="cyclic",
                       num_table_shards=3), dict(l1=0.1)):
    model = LinearModel(**options)
    model.fit(x, y, epochs=1, verbose=0)
    model.load_weights(weights)
    tf.train.Checkpoint(model=model).read(checkpoint).assert_consumed()
    _assert_same_state(model.sdca_state(), trained.sdca_state())
    model.fit(x, y, epochs=1, verbose=0)
  # Saved before the record: loaded unchecked, as before.
  original = LinearModel.save_own_variables

  def without_record(self, store):
    written = {}
    original(self, written)
    assert "sdca_options" in written
    for key, value in written.items():
      if key != "sdca_options":
        store[key] = value

  monkeypatch.setattr(LinearModel, "save_own_variables", without_record)
  weights, whole, checkpoint = save_all("older")
  monkeypatch.undo()
  _rewrite_keras_config(whole, l2=2.0)
  assert keras.models.load_model(whole).l2 == 2.0
  model = LinearModel(l2=2.0)
  model.fit(x, y, epochs=1, verbose=0)
  model.load_weights(weights)
  tf.train.Checkpoint(model=model).read(checkpoint).assert_consumed()
  _assert_same_state(model.sdca_state(), trained.sdca_state())


def test_a_sparse_tensor_with_repeated_indices_scores_as_fit_trains_it():
  """fit summed a tf.SparseTensor's repeated entries (as scipy's CSR is
  summed) and took unordered ones, while predict and evaluate raised
  tf.data's 'indices[1] = [0,1] is repeated' / 'is out of order'."""
  rng = np.random.default_rng(5)
  n, d = 120, 6
  dense = np.where(rng.uniform(size=(n, d)) < 0.4,
                   rng.integers(1, 8, size=(n, d)) / 4.0, 0.0)
  y = (dense[:, 0] - dense[:, 1] + rng.normal(size=n) > 0).astype(np.float32)
  rows, cols = np.nonzero(dense)
  summed = tf.SparseTensor(np.stack([rows, cols], 1),
                           dense[rows, cols].astype(np.float32), [n, d])
  # Every other entry split in two parts (multiples of 1/4: exact sums),
  # the second appended at the end: repeated and out of row-major order.
  split = np.arange(rows.size) % 2 == 0
  half = np.floor(dense[rows, cols] * 2) / 4
  values = np.where(split, half, dense[rows, cols])
  index = np.concatenate([np.stack([rows, cols], 1),
                          np.stack([rows[split], cols[split]], 1)])
  repeated = tf.SparseTensor(
      index, np.concatenate([values, dense[rows, cols][split] -
                             half[split]]).astype(np.float32), [n, d])
  models = []
  for x in (repeated, summed):
    model = LinearModel(loss="logistic", l2=1.0)
    model.fit(x, y, epochs=4, verbose=0, validation_data=(x, y))
    models.append(model)
  a, b = models
  for wa, wb in zip(a.get_weights(), b.get_weights()):
    np.testing.assert_allclose(wa, wb, rtol=1e-6, atol=1e-7)
  np.testing.assert_array_equal(a.predict(repeated, verbose=0),
                                a.predict(summed, verbose=0))
  assert a.evaluate(repeated, y, verbose=0) == a.evaluate(summed, y,
                                                          verbose=0)
  # Categorical ids at a repeated position count each, as fit trains them.
  ids = tf.SparseTensor([[0, 0], [0, 0], [2, 1], [2, 0]], [1, 3, 2, 0],
                        [3, 2])
  apart = tf.SparseTensor([[0, 0], [0, 1], [2, 0], [2, 1]], [1, 3, 2, 0],
                          [3, 2])
  cat = LinearModel(loss="logistic", categorical_features={"c": 4})
  cat.fit({"c": apart}, np.array([1, 0, 0], np.float32), epochs=3,
          verbose=0)
  np.testing.assert_array_equal(cat.predict({"c": ids}, verbose=0),
                                cat.predict({"c": apart}, verbose=0))


def test_predict_on_no_rows_returns_no_rows():
  """predict on 0 rows raised an UnboundLocalError from Keras' loop."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  model = LinearModel(loss="logistic")
  model.fit(x, y, epochs=2, verbose=0)
  for empty in (x[:0], tf.data.Dataset.from_tensor_slices(
      {"features": x[:0]}).batch(8)):
    out = model.predict(empty, verbose=0)
    assert out.shape == (0, 1) and out.dtype == np.float32
  softmax = LinearModel(loss="softmax", num_classes=3)
  softmax.fit(x, (x[:, 1] > 0) + (x[:, 2] > 0), epochs=2, verbose=0)
  assert softmax.predict(x[:0], verbose=0).shape == (0, 3)
  assert LinearModel().predict(x[:0], verbose=0).shape == (0, 1)
  assert model.predict(x[:1], verbose=0).shape == (1, 1)


def test_predict_on_a_dataset_filtered_to_nothing_returns_no_rows():
  """A dataset of unknown size that gives no batch raised Keras'
  UnboundLocalError; it predicts no rows as one known to be empty does."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  model = LinearModel(loss="logistic")
  model.fit(x, y, epochs=2, verbose=0)
  rows = tf.data.Dataset.from_tensor_slices({"features": x})
  nothing = rows.filter(lambda r: False).batch(8)
  assert int(nothing.cardinality()) == tf.data.UNKNOWN_CARDINALITY
  out = model.predict(nothing, verbose=0)
  assert out.shape == (0, 1) and out.dtype == np.float32
  some = rows.filter(lambda r: r["features"][0] > 0).batch(8)
  np.testing.assert_array_equal(model.predict(some, verbose=0),
                                model.predict(x[x[:, 0] > 0], verbose=0))
  softmax = LinearModel(loss="softmax", num_classes=3)
  softmax.fit(x, (x[:, 1] > 0) + (x[:, 2] > 0), epochs=2, verbose=0)
  assert softmax.predict(nothing, verbose=0).shape == (0, 3)


def test_evaluate_on_no_rows_is_an_error():
  """evaluate on 0 rows returned Keras' [] (no loss, no metric) as if it
  had measured something; like the CLI's evaluate it now refuses."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  model = LinearModel(loss="logistic")
  model.compile(metrics=["accuracy"])
  model.fit(x, y, epochs=2, verbose=0)
  rows = tf.data.Dataset.from_tensor_slices(({"features": x}, y))
  message = ("evaluate: no rows to evaluate (the data gave no batch): "
             "every metric would be undefined")
  for empty in ((x[:0], y[:0]), (rows.take(0).batch(8),),
                (rows.filter(lambda r, label: False).batch(8),)):
    for return_dict in (False, True):
      with pytest.raises(ValueError) as raised:
        model.evaluate(*empty, verbose=0, return_dict=return_dict)
      assert str(raised.value) == message
  loss, accuracy = model.evaluate(x, y, verbose=0)
  assert loss > 0 and 0.5 < accuracy <= 1
  assert model.evaluate(rows.filter(lambda r, label: label > 0).batch(8),
                        verbose=0)[0] == pytest.approx(
                            model.evaluate(x[y > 0], y[y > 0], verbose=0)[0],
                            rel=1e-6)


def test_the_keras_messages_name_the_loss_as_the_user_gave_it():
  """LinearModel takes its loss as loss="hinge"; its messages named it by
  the op's name ('hinge_loss', 'poisson_loss', 'softmax_loss'), which the
  user never typed."""
  x = np.ones((4, 2), np.float32)
  with pytest.raises(ValueError, match=r"on its own loss \('hinge'\): do "
                     r"not pass loss= to compile\(\)"):
    LinearModel(loss="hinge").compile(loss="mse")
  for options, y, match in (
      (dict(loss="hinge"), [0, 1, 2, 1],
       r"labels\[2\] = 2\.0 must be 0 or 1 for hinge$"),
      (dict(loss="poisson"), [0, -1, 2, 1],
       r"labels\[1\] = -1\.0 must be >= 0 for poisson$"),
      (dict(loss="softmax", num_classes=3), [0, 1, 5, 1],
       r"labels\[2\] = 5\.0 must be a class id in \[0, 3\) for softmax$")):
    model = LinearModel(**options)
    with pytest.raises(ValueError, match=match):
      model.fit(x, np.array(y, np.float32), epochs=1, verbose=0)
  with pytest.raises(ValueError, match=r"^softmax needs num_classes"):
    LinearModel(loss="softmax")
  with pytest.raises(ValueError, match=r"num_classes must be 1 for logistic "
                     r"\(K classes need loss softmax or multiclass_hinge\)"):
    LinearModel(loss="logistic", num_classes=3)


def test_validation_of_no_rows_is_refused():
  """validation_data of 0 rows (arrays or a dataset of known size) or a
  validation_split leaving one part no rows trained and logged no val_
  metrics without a word. Each is a ValueError naming the argument and the
  counts now (Keras refuses such a split alike), before any training; one
  row to validate on logs val_loss."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(10, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  empty = (x[:0], y[:0])
  for validation, name in (
      (dict(validation_data=empty), r"validation_data"),
      (dict(validation_data=tf.data.Dataset.from_tensor_slices(empty)
            .batch(4)), r"validation_data \(a dataset\)")):
    model = LinearModel()
    with pytest.raises(ValueError, match="^" + name + r" has 0 rows: fit "
                       r"would log no val_ metrics"):
      model.fit(x, y, epochs=1, verbose=0, **validation)
    assert model._sdca is None or not model.sdca_state()["keys"].size
  for fraction, train, held in ((1e-17, 10, 0), (0.95, 0, 10)):
    model = LinearModel()
    with pytest.raises(ValueError, match=re.escape(
        f"validation_split={fraction!r} splits the 10 rows into {train} to "
        f"train on and {held} to validate on: each needs at least one")):
      model.fit(x, y, epochs=1, verbose=0, validation_split=fraction)
  history = LinearModel().fit(x, y, epochs=1, verbose=0,
                              validation_split=0.1).history
  assert np.isfinite(history["val_loss"][0])


def test_validation_dataset_of_unknown_size_that_is_empty_warns():
  """A validation dataset of unknown size (filtered) that yields no batch
  logged no val_ metrics, and Keras' only word was that the input "ran out
  of data; interrupting training", which it did not interrupt. Its size
  shows only once read, after an epoch's training: fit warns now, once, at
  the end of the first epoch that validated (validation_freq), naming
  validation_data; one whose filter keeps rows logs val_loss, unwarned."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(10, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  streamed = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(10)}, y)).batch(4)

  def validation(keep):
    return tf.data.Dataset.from_tensor_slices(({"x": x}, y)).filter(
        lambda *_: keep).batch(4)
  assert int(validation(False).cardinality()) == tf.data.UNKNOWN_CARDINALITY
  message = ("validation_data (a dataset of unknown size) has 0 rows: fit "
             "logs no val_ metrics. Give it rows to validate on, or leave it "
             "out (epoch 2 validated no batch)")
  for data in (dict(x={"x": x}, y=y), dict(x=streamed)):
    with pytest.warns(UserWarning) as caught:
      history = LinearModel().fit(**data, epochs=3, verbose=0,
                                  validation_data=validation(False),
                                  validation_freq=2).history
    assert [str(w.message) for w in caught
            if "validation_data" in str(w.message)] == [message]
    assert not [k for k in history if k.startswith("val_")]
    import warnings  # pylint: disable=import-outside-toplevel
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      history = LinearModel().fit(**data, epochs=2, verbose=0,
                                  validation_data=validation(True)).history
    assert not [w for w in caught if "validation_data" in str(w.message)]
    assert np.isfinite(history["val_loss"]).all()


def test_a_model_with_a_sparse_feature_exports_and_serves(tmp_path):
  # Keras' add_endpoint(input_signature=...) refused the sparse feature's
  # SparseTensorSpec (a TypeError), where keras.md says it exports and is
  # served through serve(dict).
  import scipy.sparse as sp  # pylint: disable=import-outside-toplevel
  x = sp.random(200, 30, density=0.1, format="csr", random_state=0,
                dtype=np.float32)
  y = (np.asarray(x.sum(1)).ravel() > 0.7).astype(np.float32)
  model = LinearModel(l2=0.1)
  model.fit(x, y, epochs=20, verbose=0)
  path = str(tmp_path / "served")
  model.export(path, verbose=False)
  served = tf.saved_model.load(path)
  coo = x.tocoo()
  rows = tf.sparse.reorder(tf.SparseTensor(
      np.stack([coo.row, coo.col], axis=1).astype(np.int64),
      coo.data.astype(np.float32), [200, 30]))
  scores = served.serve({"features": rows}).numpy()
  np.testing.assert_allclose(scores, model.predict(x, verbose=0), rtol=1e-6,
                             atol=1e-7)


def test_a_multi_valued_categorical_feature_serves_padded_rows(tmp_path):
  # Served as a dense [n, k] string tensor, a short row's padding went
  # through the lookup as an out-of-vocabulary value and added its weight
  # (a row of one tag scored 0.61 for 0.39): '' pads, as keras.md says.
  rng = np.random.default_rng(0)
  vocab = [f"t{i}" for i in range(10)]
  tags = tf.ragged.constant([
      [(vocab + ["zz"])[j] for j in rng.choice(11, rng.integers(1, 4),
                                                replace=False)]
      for _ in range(300)])
  y = rng.integers(0, 2, 300).astype(np.float32)
  model = LinearModel(categorical_features={
      "tags": keras.layers.StringLookup(vocabulary=vocab)})
  model.fit({"tags": tags}, y, epochs=5, verbose=0)
  path = str(tmp_path / "served")
  model.export(path, verbose=False)
  served = tf.saved_model.load(path)
  rows = tf.ragged.constant([["t1"], ["t2", "t3", "t4"], ["zz", "t5"]])
  expected = model.predict({"tags": rows}, verbose=0)
  out = served.signatures["serving_default"](tags=rows.to_tensor(""))
  np.testing.assert_allclose(next(iter(out.values())).numpy(), expected,
                             rtol=1e-6, atol=1e-7)

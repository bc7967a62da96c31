"""Accelerated mini-batch SDCA (`InMemorySdca(visit_order="asdca")`,
`tf_sdca.ops.asdca_solve`, kernels/core/asdca.h).

ASDCA's duals must reach SDCA's optimum: the same weights (to 1e-6) and
primal (to 1e-9), the exact duality gap of (W(alpha), alpha) below 1e-10 of
the primal, on scikit-learn's bundled data in their own units: iris (cm;
versicolor against virginica, not separable) with the smooth hinge and the
logistic loss, diabetes (as bundled: each column centred with unit norm,
the raw target) with the squared loss, with and without L1, and
breast_cancer standardised with a theta above the paper's (which needs
~6000 epochs there, see g3doc/benchmarks.md). One step is checked against
the paper's formulas computed here in numpy; the core's lazy iterate
against a dense implementation in kernels/tests/asdca_main.cc.
"""
import json
import os
import shutil
import subprocess
import warnings

import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer, load_diabetes, load_iris

import core_build
from tf_sdca.ops import sdca_ops
from tf_sdca.trainer import InMemorySdca
from tf_sdca.engine import RowChunks

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _iris():
  data = load_iris()
  keep = data.target > 0
  x = np.hstack([data.data[keep], np.ones((keep.sum(), 1))])
  return x.astype(np.float32), (data.target[keep] == 2).astype(np.float32)


def _diabetes():
  data = load_diabetes()
  x = np.hstack([data.data, np.ones((len(data.target), 1))])
  return x.astype(np.float32), data.target.astype(np.float32)


def _breast_cancer():
  data = load_breast_cancer()
  x = (data.data - data.data.mean(0)) / data.data.std(0)
  x = np.hstack([x, np.ones((len(x), 1))])
  return x.astype(np.float32), data.target.astype(np.float32)


# (data, loss, l1, l2, theta or None for the paper's).
PROBLEMS = {
    "iris-smooth_hinge": (_iris, "smooth_hinge", 0.0, 10.0, None),
    "iris-logistic": (_iris, "logistic", 0.0, 10.0, None),
    "diabetes-squared": (_diabetes, "squared", 0.0, 1.0, None),
    "diabetes-squared-l1": (_diabetes, "squared", 30.0, 1.0, None),
    "iris-smooth_hinge-l1": (_iris, "smooth_hinge", 5.0, 10.0, None),
    "breast_cancer-logistic-theta": (_breast_cancer, "logistic", 0.0, 1.0,
                                     0.05),
}


def _fit(model, x, y, epochs=20000, tol=1e-13):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # slow-progress notes
    return model.fit(labels=y, dense=x, epochs=epochs, tol=tol, verbose=0)


@pytest.mark.parametrize("problem", sorted(PROBLEMS))
def test_asdca_reaches_the_sdca_optimum_on_real_data(problem):
  load, loss, l1, l2, theta = PROBLEMS[problem]
  x, y = load()
  sdca = InMemorySdca(loss=loss, l1=l1, l2=l2)
  sdca_history = _fit(sdca, x, y, tol=1e-13)
  asdca = InMemorySdca(loss=loss, l1=l1, l2=l2, visit_order="asdca",
                       asdca_batch_size=8, asdca_theta=theta)
  history = _fit(asdca, x, y)
  gaps = np.asarray(history["duality_gap"])
  assert np.all(np.isfinite(gaps)) and np.all(gaps >= 0)
  # 1e-13: P is l2-strongly convex, so |w - w*|^2 <= 2 gap / l2, and on
  # diabetes (weights ~500, P ~9e5) a weight error of 1e-6 relative needs
  # a gap of ~1e-13 of P. (With l2 = 0.1 there even SDCA's weights, gap
  # "0" within the objective's rounding, were 5e-6 away from the
  # closed-form ridge solution: l2 = 1 keeps the comparison meaningful.)
  assert gaps[-1] < 1e-13, f"did not converge: gap {gaps[-1]:.2e}"
  # The gap falls (not every epoch: momentum): each tenth of the run ends
  # below where the run started.
  tenths = np.array_split(gaps, 10)
  assert all(t[-1] < gaps[0] for t in tenths)
  assert history["loss"][-1] == pytest.approx(sdca_history["loss"][-1],
                                             rel=1e-9)
  scale = np.abs(sdca.dense_weights).max()
  np.testing.assert_allclose(asdca.dense_weights, sdca.dense_weights,
                             rtol=0, atol=1e-6 * scale)
  if l1 > 0:  # some weights at zero, the same ones
    shrunk = np.abs(sdca.dense_weights) <= l1 / l2
    assert shrunk.any() and not shrunk.all()
    np.testing.assert_array_equal(np.abs(asdca.dense_weights) <= l1 / l2,
                                  shrunk)
  # The accelerated iterate converges to the same (shrunk) weights.
  np.testing.assert_allclose(
      asdca.asdca_iterate, np.sign(sdca.dense_weights) * np.maximum(
          np.abs(sdca.dense_weights) - l1 / l2, 0), rtol=0,
      atol=1e-5 * scale)
  if theta is None:  # the paper's, for m = 8
    assert 0 < asdca.asdca_theta_used <= 0.25


def test_paper_theta_matches_its_formula():
  x, y = _iris()
  l2, m = 10.0, 8
  model = InMemorySdca(loss="smooth_hinge", l2=l2, gamma=0.5,
                       visit_order="asdca", asdca_batch_size=m)
  _fit(model, x, y, epochs=1)
  # k = gamma lambda n = l2 gamma_loss / max_i |x_i|^2 (smooth hinge:
  # gamma_loss = its smoothing).
  k = l2 * 0.5 / np.max(np.sum(x.astype(np.float64) ** 2, axis=1))
  expected = 0.25 * min(1, np.sqrt(k / m), k, k ** (2 / 3) / m ** (1 / 3))
  assert model.asdca_theta_used == pytest.approx(expected, rel=1e-12)


def _packed(x, y, loss, num_threads=1):
  n = len(y)
  return sdca_ops.pack_rows(
      np.zeros(0, np.int64), np.zeros(0, np.int32), np.zeros(0, np.float32),
      x, np.linspace(0.5, 1.5, n).astype(np.float32), y, 0, loss,
      num_threads=num_threads)


@pytest.mark.parametrize("l1", [0.0, 0.25])
@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss",
                                  "smooth_hinge_loss"])
def test_two_steps_follow_the_papers_formulas(loss, l1):
  # One batch of all n rows (so the permutation does not matter), two
  # passes = two steps, from a feasible start that is not W(alpha) of a
  # fresh run: duals inside the domain, an arbitrary iterate.
  rng = np.random.default_rng(3)
  # Values exact in float32 (the op's attributes and data are).
  n, d, l2, theta = 6, 3, 2.0, 0.375
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (rng.random(n) < 0.5).astype(np.float32)
  s = np.linspace(0.5, 1.5, n).astype(np.float32).astype(np.float64)
  if loss == "squared_loss":
    y = rng.normal(size=n).astype(np.float32)
    sign = np.ones(n)
  else:
    sign = 2.0 * y - 1.0
  alpha = sign * rng.uniform(0.1, 0.9, n)
  x64 = x.astype(np.float64)
  w_table = x64.T @ (s * alpha) / l2
  iterate = rng.normal(size=d)

  def derivative(z):
    if loss == "logistic_loss":
      return -sign / (1.0 + np.exp(sign * z))
    if loss == "squared_loss":
      return z - y
    m = sign * z  # smooth hinge, gamma = 1
    return np.where(m >= 1, 0.0, np.where(m <= 0, -sign, -sign * (1 - m)))

  def shrink(w):
    return np.sign(w) * np.maximum(np.abs(w) - l1 / l2, 0.0)

  a, big_w, w = alpha.copy(), w_table.copy(), iterate.copy()
  for _ in range(2):
    u = (1 - theta) * w + theta * shrink(big_w)
    new = (1 - theta) * a + theta * -derivative(x64 @ u)
    big_w = big_w + x64.T @ (s * (new - a)) / l2
    a = new
    w = (1 - theta) * w + theta * shrink(big_w)
  rows = _packed(x, y, loss)
  out_w, out_a, out_it, objective, theta_used = (
      t.numpy() for t in sdca_ops.asdca_solve(
          rows, w_table, alpha, iterate, 0, loss, l1, l2, batch_size=n,
          theta=theta, num_passes=2))
  np.testing.assert_allclose(out_a, a, rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(out_w, big_w, rtol=1e-12, atol=1e-14)
  np.testing.assert_allclose(out_it, w, rtol=1e-12, atol=1e-14)
  assert theta_used == theta
  assert objective[2] == pytest.approx(np.sum(shrink(big_w) ** 2), rel=1e-12)


def test_resumed_fit_continues_the_accelerated_iterate():
  # Epoch e's batches depend on (seed, e) only and the iterate is kept:
  # 12 epochs in two fits are the 12 epochs of one.
  x, y = _iris()
  whole = InMemorySdca(loss="logistic", l2=10.0, visit_order="asdca")
  _fit(whole, x, y, epochs=12, tol=None)
  split = InMemorySdca(loss="logistic", l2=10.0, visit_order="asdca")
  _fit(split, x, y, epochs=5, tol=None)
  split.fit(labels=y, dense=x, epochs=12, initial_epoch=5, verbose=0)
  np.testing.assert_array_equal(split.dense_weights, whole.dense_weights)
  np.testing.assert_array_equal(split.asdca_iterate, whole.asdca_iterate)
  np.testing.assert_array_equal(split.duals, whole.duals)


def test_sparse_rows_train_as_their_dense_copy():
  # The lazy iterate on sparse slots (ids a batch does not touch decay in
  # closed form) against the same rows given dense.
  rng = np.random.default_rng(0)
  n, vocab = 300, 40
  ids = rng.integers(0, vocab, size=(n, 3))
  x = np.zeros((n, vocab), np.float32)
  for i in range(n):
    for j in ids[i]:
      x[i, j] += 1.0
  y = (rng.random(n) < 0.4).astype(np.float32)
  kwargs = dict(loss="logistic", l2=1.0, visit_order="asdca",
                asdca_batch_size=16)
  sparse = InMemorySdca(**kwargs)
  sparse.fit(labels=y, ids=ids, num_features=vocab, epochs=30, verbose=0)
  dense = InMemorySdca(**kwargs)
  _fit(dense, x, y, epochs=30, tol=None)
  np.testing.assert_allclose(sparse.sparse_weights, dense.dense_weights,
                             rtol=1e-10, atol=1e-12)
  np.testing.assert_allclose(sparse.asdca_iterate, dense.asdca_iterate,
                             rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("loss", ["hinge", "absolute", "poisson", "softmax"])
def test_non_smooth_losses_are_refused(loss):
  with pytest.raises(ValueError, match=r"use smooth_hinge for a hinge-like "
                     "loss") as error:
    InMemorySdca(loss=loss, visit_order="asdca", num_classes=None)
  # The losses as InMemorySdca(loss=...) takes them, not the op's names.
  assert ("ASDCA runs the smooth binary and real-valued losses (logistic, "
          f"squared, smooth_hinge), not {loss}:" in str(error.value))
  assert "_loss" not in str(error.value)


def test_threads_are_not_used_and_say_so():
  with pytest.warns(UserWarning, match="'asdca' runs on one thread"):
    InMemorySdca(loss="logistic", visit_order="asdca", num_threads=2)


def test_row_chunks_and_averaging_take_asdca_too():
  # fit(rows=RowChunks) packs chunk by chunk, average_from averages the
  # (W(alpha), alpha) iterates: both compose with ASDCA's epochs, and the
  # gap of the average stays a valid certificate.
  x, y = _iris()
  chunks = [dict(labels=y[:40], dense=x[:40]), dict(labels=y[40:],
                                                    dense=x[40:])]
  kwargs = dict(loss="logistic", l2=10.0, visit_order="asdca")
  whole = InMemorySdca(**kwargs)
  _fit(whole, x, y, epochs=15, tol=None)
  chunked = InMemorySdca(**kwargs)
  chunked.fit(rows=RowChunks(chunks, num_examples=len(y), dense_dim=5),
              epochs=15, verbose=0)
  np.testing.assert_array_equal(chunked.dense_weights, whole.dense_weights)
  averaged = InMemorySdca(average_from=5, **kwargs)
  history = _fit(averaged, x, y, epochs=15, tol=None)
  assert np.all(np.asarray(history["duality_gap"]) >= 0)
  np.testing.assert_array_equal(averaged.last_iterate["dense_weights"],
                                whole.dense_weights)


def test_slow_progress_warning_points_to_theta():
  # The paper's theta on breast_cancer with l2 = 0.1 is 6e-5: the gap
  # barely moves in 10 epochs.
  x, y = _breast_cancer()
  model = InMemorySdca(loss="smooth_hinge", l2=0.1, visit_order="asdca")
  with pytest.warns(UserWarning, match="larger asdca_theta"):
    model.fit(labels=y, dense=x, epochs=12, verbose=0)


def test_minibatches_of_the_trainer_are_refused():
  x, y = _iris()
  model = InMemorySdca(loss="logistic", visit_order="asdca")
  with pytest.raises(ValueError, match=r"batch_size=10 .*asdca"):
    model.fit(labels=y, dense=x, batch_size=10, verbose=0)


def test_op_refuses_threaded_rows_and_bad_state():
  x, y = _iris()
  d = x.shape[1]
  zeros_w, zeros_a = np.zeros(d), np.zeros(len(y))
  rows = _packed(x, y, "logistic_loss", num_threads=2)
  with pytest.raises(tf.errors.UnimplementedError, match="num_threads = 1"):
    sdca_ops.asdca_solve(rows, zeros_w, zeros_a, zeros_w, 0,
                         "logistic_loss", 0.0, 1.0, 8)
  rows = _packed(x, y, "logistic_loss")
  with pytest.raises(tf.errors.InvalidArgumentError, match="iterate"):
    sdca_ops.asdca_solve(rows, zeros_w, zeros_a, np.zeros(d + 1), 0,
                         "logistic_loss", 0.0, 1.0, 8)
  bad = zeros_w.copy()
  bad[2] = np.nan
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"iterate\[2\] = nan"):
    sdca_ops.asdca_solve(rows, zeros_w, zeros_a, bad, 0, "logistic_loss",
                         0.0, 1.0, 8)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="packed for logistic_loss"):
    sdca_ops.asdca_solve(rows, zeros_w, zeros_a, zeros_w, 0, "squared_loss",
                         0.0, 1.0, 8)


def test_a_diverging_theta_is_reported():
  # theta = 1 with one batch of all rows is the fixed-point iteration
  # alpha <- -loss'(X W(alpha)): on diabetes' raw target with a tiny l2 it
  # blows up, and fit says so (the op when a weight overflows, the exact
  # objective when only |w|^2 does) instead of returning inf.
  x, y = _diabetes()
  # (Without the exact block step, which at this l2 would solve the
  # problem after the first epoch and hide the iteration's divergence.)
  model = InMemorySdca(loss="squared", l2=1e-4, visit_order="asdca",
                       asdca_batch_size=len(y), asdca_theta=1.0,
                       second_order="off")
  with pytest.raises((tf.errors.InvalidArgumentError, FloatingPointError),
                     match="diverged"):
    _fit(model, x * 100, y, epochs=200)


def _run_core_driver(tmp_path, flags):
  """Builds kernels/tests/asdca_main.cc (the lazy iterate against a dense
  implementation of the paper's step, convergence to SDCA's optimum, the
  refusals) with `flags` and asserts it prints OK with no sanitizer
  report."""
  try:
    binary = core_build.build(
        str(tmp_path / "asdca_main"),
        [os.path.join(ROOT, "kernels", "tests", "asdca_main.cc")], flags)
  except subprocess.CalledProcessError as e:
    if "-fsanitize" in " ".join(flags):  # no libasan / libubsan here
      pytest.skip("cannot build with ASan + UBSan: " + e.stderr[-300:])
    raise
  result = subprocess.run([binary], capture_output=True, text=True,
                          timeout=300)
  for report in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
    assert report not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "OK"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_core_driver_passes(tmp_path):
  _run_core_driver(tmp_path, ["-O2"])


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_core_driver_is_clean_under_asan_and_ubsan(tmp_path):
  # The core's sanitizer build is shared with tests/test_core_sanitizers.py
  # (tests/core_build.py): only the driver compiles here.
  _run_core_driver(tmp_path, core_build.ASAN_UBSAN)


def test_keras_model_trains_asdca_in_memory_to_the_sdca_optimum(tmp_path):
  """keras.LinearModel(visit_order='asdca') on iris in cm: the epochs run
  TfSdca>AsdcaSolve over the packed rows and end at InMemorySdca's ASDCA
  weights (same seeds, same batches) and at SDCA's optimum; save/load keeps
  the options; a streamed dataset is refused."""
  from tf_sdca import keras as sdca_keras  # pylint: disable=import-outside-toplevel
  x, y = _iris()
  x = x[:, :4]  # the model's bias is the intercept
  model = sdca_keras.LinearModel(loss="smooth_hinge", l2=10.0,
                                 visit_order="asdca", asdca_batch_size=8)
  model.fit({"x": x}, y, epochs=1500, verbose=0)
  kernel = model.get_weights()
  ours = np.concatenate([kernel[0].ravel(), kernel[1].ravel()])
  ref = InMemorySdca(loss="smooth_hinge", l2=10.0)
  ref.fit(labels=y, dense=np.hstack([x, np.ones((len(y), 1), np.float32)]),
          epochs=5000, tol=1e-14, verbose=0)
  np.testing.assert_allclose(ours, ref.dense_weights, rtol=1e-5, atol=1e-6)
  path = str(tmp_path / "asdca.keras")
  model.save(path)
  loaded = tf.keras.models.load_model(path)
  assert loaded.visit_order == "asdca" and loaded.asdca_batch_size == 8
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(10)
  with pytest.raises(ValueError, match=r"ASDCA .*needs the whole data set in "
                     r"memory .*not streamed \(a tf.data.Dataset\), got 'asdca'"):
    model.fit(data, epochs=1, verbose=0)
  with pytest.raises(ValueError, match=r"smooth_hinge\), not hinge:"):
    sdca_keras.LinearModel(loss="hinge", visit_order="asdca")


def test_cli_trains_asdca_and_resumes_its_iterate(tmp_path):
  """`tf-sdca train --visit-order asdca` on iris in cm as LIBSVM lines: 6
  epochs in one run equal 3 + 3 with `--resume` (the checkpoint keeps the
  accelerated iterate); refused with --local-cluster and for a loss that is
  not smooth."""
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  x, y = _iris()
  x = x[:, :4]
  path = str(tmp_path / "iris.svm")
  with open(path, "w") as f:
    for label, row in zip(y, x):
      f.write(f"{int(label)} " + " ".join(f"{j + 1}:{v:.9g}"
                                          for j, v in enumerate(row)) + "\n")
  args = ["--format", "libsvm", "--loss", "smooth_hinge", "--l2", "10",
          "--tol", "0", "--quiet", "--visit-order", "asdca",
          "--asdca-batch-size", "4"]

  def train(model_dir, epochs, *extra):
    assert cli.main(["train", path, "--model-dir", model_dir, "--epochs",
                     str(epochs), *args, *extra]) == 0
    with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
      return {k: ckpt[k] for k in ckpt.files}

  whole = train(str(tmp_path / "whole"), 6)
  train(str(tmp_path / "parts"), 3)
  parts = train(str(tmp_path / "parts"), 6, "--resume")
  for key in ("dense_weights", "sparse_weights", "duals", "asdca_iterate"):
    np.testing.assert_array_equal(whole[key], parts[key])
  with open(os.path.join(tmp_path, "whole", "model.json")) as f:
    assert json.load(f)["visit_order"] == "asdca"
  assert cli.main(["train", path, "--model-dir", str(tmp_path / "x"),
                   "--epochs", "1", *args[:2], "--loss", "hinge",
                   "--visit-order", "asdca", "--quiet"]) != 0
  assert cli.main(["train", path, "--model-dir", str(tmp_path / "y"),
                   "--epochs", "1", *args, "--local-cluster", "2"]) != 0


def test_the_streaming_doors_say_where_asdca_runs():
  """SdcaModel (and so SDCAOptimizer and the estimators) solve mini-batches
  as they come: 'asdca' is refused with the doors that run it."""
  from tf_sdca import SdcaModel  # pylint: disable=import-outside-toplevel
  options = dict(loss_type="logistic_loss", symmetric_l1_regularization=0.0,
                 symmetric_l2_regularization=1.0, num_loss_partitions=1,
                 num_table_shards=1, visit_order="asdca")
  with pytest.raises(ValueError, match="InMemorySdca, keras.LinearModel"):
    SdcaModel(None, {"sparse_features_weights": [],
                     "dense_features_weights": [tf.Variable(tf.zeros([2]))]},
              options)

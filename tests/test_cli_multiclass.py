"""`tf-sdca train --loss softmax | multiclass_hinge --num-classes K` on LIBSVM
files with class labels: the optimum, evaluate, predict, export, resume and
the errors."""
import json
import os

import numpy as np
import pytest
import sklearn.datasets
import sklearn.linear_model
import tensorflow as tf

from interruptions import interrupted_after_epoch
from tf_sdca import cli
from tf_sdca import losses

L2 = 1.0


def _write_libsvm(path, labels, x):
  """LIBSVM lines of dense rows, zeros left out."""
  with open(path, "w") as f:
    for label, row in zip(labels, x):
      items = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v)
      f.write(f"{label:g} {items}\n")


@pytest.fixture(scope="module")
def iris_file(tmp_path_factory):
  """Iris as LIBSVM ships it: labels 1, 2, 3, raw measurements in cm."""
  x, y = sklearn.datasets.load_iris(return_X_y=True)
  path = str(tmp_path_factory.mktemp("iris") / "iris.svm")
  _write_libsvm(path, y + 1, x)
  return path, x, y


def _train(path, model_dir, loss="softmax", *extra):
  return cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--loss", loss, "--num-classes", "3", "--l2",
                   str(L2), "--epochs", "1000", "--tol", "1e-8", "--quiet",
                   *extra])


def _objective(loss, w, x1, y):
  z = x1 @ w
  return float(np.sum(losses.primal(loss, z, y)) + 0.5 * L2 * np.sum(w * w))


def test_softmax_from_the_command_line_reaches_scikit_learns_optimum(
    iris_file, tmp_path, capsys):
  path, x, y = iris_file
  model_dir = str(tmp_path / "m")
  assert _train(path, model_dir) == 0
  meta = json.loads(open(os.path.join(model_dir, "model.json")).read())
  assert meta["classes"] == [1.0, 2.0, 3.0] and meta["num_classes"] == 3
  assert meta["history"][-1]["duality_gap"] < 1e-8
  ckpt = np.load(os.path.join(model_dir, "checkpoint.npz"))
  # The LIBSVM features (ids from 0), then the intercept column (regularised, as
  # every door's bias): W is [4 + 1, 3].
  w = np.concatenate([ckpt["sparse_weights"], ckpt["dense_weights"]])
  assert w.shape == (5, 3)
  x1 = np.column_stack([x, np.ones(len(x))])
  # scikit-learn's multinomial logistic regression with the same
  # regularised intercept column: C = 1 / l2 on the summed loss.
  ref = sklearn.linear_model.LogisticRegression(
      C=1.0 / L2, fit_intercept=False, tol=1e-12, max_iter=100_000).fit(x1, y)
  ours, theirs = (_objective("softmax", w, x1, y),
                  _objective("softmax", ref.coef_.T, x1, y))
  assert ours <= theirs * (1 + 1e-6)
  assert ours == pytest.approx(theirs, rel=1e-6)

  capsys.readouterr()
  assert cli.main(["evaluate", path, "--model-dir", model_dir, "--format",
                   "libsvm"]) == 0
  printed = dict(line.split() for line in capsys.readouterr().out.splitlines())
  p = tf.nn.softmax(x1 @ w).numpy()
  assert float(printed["accuracy"]) == pytest.approx(
      np.mean(np.argmax(p, 1) == y), abs=1e-6)
  assert float(printed["log_loss"]) == pytest.approx(
      -np.mean(np.log(p[np.arange(len(y)), y])), rel=1e-5)

  out = str(tmp_path / "pred.txt")
  assert cli.main(["predict", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--out", out]) == 0
  with open(out) as f:
    assert f.readline().split() == ["labels", "1", "2", "3"]
  rows = np.loadtxt(out, skiprows=1)
  np.testing.assert_array_equal(rows[:, 0], np.argmax(p, 1) + 1)
  np.testing.assert_allclose(rows[:, 1:], p, rtol=1e-6, atol=1e-9)

  # The SavedModel scores raw lines as predict does.
  saved = str(tmp_path / "saved")
  assert cli.main(["export", "--model-dir", model_dir, "--out", saved]) == 0
  with open(path) as f:
    lines = [line.strip() for line in f][:20]
  scored = tf.saved_model.load(saved).signatures["serving_default"](
      lines=tf.constant(lines))
  np.testing.assert_allclose(scored["scores"].numpy(), p[:20], rtol=1e-6)


def test_multiclass_hinge_from_the_command_line_matches_the_engine(
    iris_file, tmp_path):
  path, x, y = iris_file
  model_dir = str(tmp_path / "h")
  # The engine's in-memory default order for the hinge, which the command
  # line (Criteo files) leaves at 'permutation': 1,000 permuted epochs
  # ended 2.5e-3 above the optimum here.
  assert _train(path, model_dir, "multiclass_hinge", "--visit-order",
                "shrinking") == 0
  ckpt = np.load(os.path.join(model_dir, "checkpoint.npz"))
  w = np.concatenate([ckpt["sparse_weights"], ckpt["dense_weights"]])
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  x1 = np.column_stack([x, np.ones(len(x))]).astype(np.float32)
  engine = InMemorySdca(loss="multiclass_hinge", num_classes=3, l2=L2)
  engine.fit(labels=y.astype(np.float32), dense=x1, epochs=1000, tol=1e-8,
             verbose=0)
  # Same objective at the optimum (the weights of a hinge optimum need not
  # be unique).
  assert _objective("multiclass_hinge", w, x1, y) == pytest.approx(
      _objective("multiclass_hinge", engine.dense_weights, x1, y), rel=1e-6)


def test_resume_continues_a_multiclass_model(iris_file, tmp_path):
  path, _, _ = iris_file
  whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
  extra = ["--epochs", "6", "--tol", "0"]
  assert _train(path, whole, "softmax", *extra) == 0
  with interrupted_after_epoch(3):
    assert _train(path, parts, "softmax", *extra) == 130
  assert _train(path, parts, "softmax", *extra, "--resume") == 0
  a = np.load(os.path.join(whole, "checkpoint.npz"))
  b = np.load(os.path.join(parts, "checkpoint.npz"))
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(a[key], b[key])


def test_class_ids_as_labels_may_leave_a_class_out(tmp_path):
  x = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [2.0, 0.0]])
  path = str(tmp_path / "ids.svm")
  _write_libsvm(path, [0, 2, 2, 0], x)
  model_dir = str(tmp_path / "m")
  assert _train(path, model_dir) == 0
  meta = json.loads(open(os.path.join(model_dir, "model.json")).read())
  assert meta["classes"] == [0.0, 1.0, 2.0]


def test_multiclass_errors_are_one_line(iris_file, tmp_path, capsys):
  path, x, y = iris_file
  model_dir = str(tmp_path / "m")
  assert cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--loss", "softmax", "--quiet"]) == 2
  assert "needs --num-classes" in capsys.readouterr().err
  assert cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--num-classes", "3", "--quiet"]) == 2
  assert "--num-classes is for the multiclass losses" in \
      capsys.readouterr().err
  assert cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--loss", "softmax", "--num-classes", "2",
                   "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "3 distinct values (1, 2, 3)" in err and err.count("\n") == 1
  assert cli.main(["train", path, "--model-dir", model_dir, "--loss",
                   "softmax", "--num-classes", "3", "--quiet"]) == 2
  assert "--format libsvm" in capsys.readouterr().err
  # A label the model has no class for.
  assert _train(path, model_dir, "softmax", "--epochs", "2") == 0
  other = str(tmp_path / "other.svm")
  _write_libsvm(other, [1, 7], x[:2])
  capsys.readouterr()
  assert cli.main(["evaluate", other, "--model-dir", model_dir, "--format",
                   "libsvm"]) == 2
  assert (f"{other}:2: the label 7 is none of the model's classes "
          "(1, 2, 3)") in capsys.readouterr().err
  # predict scores without the labels, as it does for a binary model (a 7
  # there is any label): one none of the classes is not refused (it was,
  # as "label 7 (row 1)", the row counted within a 65,536-row chunk).
  odd, plain = str(tmp_path / "odd.svm"), str(tmp_path / "plain.svm")
  _write_libsvm(odd, [7, -3.5, 1], x[:3])
  _write_libsvm(plain, [1, 1, 1], x[:3])
  scores = []
  for data in (odd, plain):
    out = str(tmp_path / "scores.txt")
    assert cli.main(["predict", data, "--model-dir", model_dir, "--format",
                     "libsvm", "--out", out]) == 0
    with open(out) as f:
      assert f.readline().split() == ["labels", "1", "2", "3"]
    scores.append(np.loadtxt(out, skiprows=1))
  assert scores[0].shape == (3, 4)
  np.testing.assert_array_equal(scores[0], scores[1])


def test_sparse_multiclass_checkpoint_shapes_are_checked(iris_file, tmp_path,
                                                         capsys):
  path, _, _ = iris_file
  model_dir = str(tmp_path / "m")
  assert _train(path, model_dir, "softmax", "--epochs", "2") == 0
  ckpt_path = os.path.join(model_dir, "checkpoint.npz")
  with np.load(ckpt_path) as ckpt:
    arrays = {k: ckpt[k] for k in ckpt.files}
  arrays["duals"] = arrays["duals"][:, :2]
  np.savez(ckpt_path, **arrays)
  capsys.readouterr()
  assert cli.main(["evaluate", path, "--model-dir", model_dir, "--format",
                   "libsvm"]) == 2
  assert "duals" in capsys.readouterr().err


def test_hinge_step_is_kept_and_resumed(iris_file, tmp_path):
  # --hinge-step near_max_gain: kept in model.json, so --resume goes on with
  # it (bit for bit against an uninterrupted run), and the weights are the
  # engine's with the same step.
  path, x, y = iris_file
  whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
  extra = ["--epochs", "6", "--tol", "0", "--hinge-step", "near_max_gain"]
  assert _train(path, whole, "multiclass_hinge", *extra) == 0
  with open(os.path.join(whole, "model.json")) as f:
    assert json.load(f)["hinge_step"] == "near_max_gain"
  with interrupted_after_epoch(3):
    assert _train(path, parts, "multiclass_hinge", *extra) == 130
  # Resumed without the flag: the model's own step goes on.
  assert _train(path, parts, "multiclass_hinge", "--epochs", "6", "--tol",
                "0", "--resume") == 0
  a = np.load(os.path.join(whole, "checkpoint.npz"))
  b = np.load(os.path.join(parts, "checkpoint.npz"))
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(a[key], b[key])
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  x1 = np.column_stack([x, np.ones(len(x))]).astype(np.float32)
  for step, same in (("near_max_gain", True), ("projection", False)):
    engine = InMemorySdca(loss="multiclass_hinge", num_classes=3, l2=L2,
                          hinge_step=step)
    engine.fit(labels=y.astype(np.float32), dense=x1, epochs=6, tol=0,
               verbose=0)
    w = np.concatenate([a["sparse_weights"], a["dense_weights"]])
    assert np.allclose(w, engine.dense_weights, rtol=0, atol=1e-5) == same


def test_class_ids_names_the_row_in_the_labels_it_was_given():
  """model_files.class_ids named a bad label's row as "(row 1)", whose
  origin (the labels given, a chunk's or the data's, counted from 0 where
  the commands' file:line count from 1) the message left to guess. Its
  contract says it now: rows of the labels given, counted from 0, and the
  commands refuse such a label by its file:line before they reach it
  (evaluate's 'label 7 is none of the model's classes' above)."""
  from tf_sdca import model_files  # pylint: disable=import-outside-toplevel
  meta = dict(classes=[1.0, 2.0, 3.0])
  np.testing.assert_array_equal(
      model_files.class_ids(np.float32([3, 1, 2]), meta), [2, 0, 1])
  labels = np.ones(70000, np.float32)
  labels[65540] = 7
  with pytest.raises(ValueError, match=r"^label 7 \(row 65,540, counted "
                     r"from 0\) is none of the model's classes \(1, 2, 3\)$"):
    model_files.class_ids(labels, meta)

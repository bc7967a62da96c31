"""`tf-sdca train --resume` continues a model with the options it keeps
(format, loss, l1, l2, bucket bits, classes, seed, visit order, hinge step,
ASDCA's): one left out is the model's, one given must be the model's, and a
conflicting one is a one-line error naming the flag and both values, before
any data is read. The options of a run (--epochs, --tol, --threads, ...)
apply to the resumed run."""
import json
import os

import numpy as np
import pytest

from tf_sdca import cli

# cancer_file: tests/conftest.py


def _train(path, model_dir, *extra):
  return cli.main(["train", path, "--model-dir", model_dir, "--quiet",
                   *extra])


def _meta(model_dir):
  with open(os.path.join(model_dir, "model.json")) as f:
    return json.load(f)


def _checkpoint(model_dir):
  with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
    return {k: ckpt[k] for k in ckpt.files}


@pytest.fixture(scope="module")
def hinge_model(cancer_file, tmp_path_factory):
  """A LIBSVM model trained with kept options other than the defaults
  (--loss hinge --l2 1 --seed 3 --visit-order cyclic), 2 epochs."""
  model_dir = str(tmp_path_factory.mktemp("hinge") / "m")
  assert _train(cancer_file, model_dir, "--format", "libsvm", "--loss",
                "hinge", "--l2", "1", "--seed", "3", "--visit-order",
                "cyclic", "--epochs", "2", "--tol", "0") == 0
  return model_dir


@pytest.mark.parametrize("given,said", [
    (["--loss", "logistic"], "with --loss hinge_loss, got --loss logistic"),
    (["--loss", "logistic_loss"],
     "with --loss hinge_loss, got --loss logistic_loss"),
    (["--l2", "10"], "with --l2 1.0, got --l2 10.0"),
    (["--l1", "0.5"], "with --l1 0.0, got --l1 0.5"),
    (["--format", "criteo"], "with --format libsvm, got --format criteo"),
    (["--bucket-bits", "16"], "with --bucket-bits 20, got --bucket-bits 16"),
    (["--seed", "0"], "with --seed 3, got --seed 0"),
    (["--visit-order", "permutation"],
     "with --visit-order cyclic, got --visit-order permutation"),
    (["--hinge-step", "near_max_gain"],
     "with --hinge-step projection, got --hinge-step near_max_gain"),
    (["--asdca-batch-size", "16"],
     "with --asdca-batch-size 8, got --asdca-batch-size 16"),
    (["--num-classes", "3"], "without --num-classes, got --num-classes 3"),
])
def test_resume_refuses_an_option_that_conflicts_with_the_model(
    hinge_model, tmp_path, capsys, given, said):
  before = _checkpoint(hinge_model)
  capsys.readouterr()
  # Data that does not exist: the refusal comes before any data is read.
  missing = str(tmp_path / "never_read.svm")
  assert _train(missing, hinge_model, "--resume", *given) == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err  # one line
  assert err.startswith("tf-sdca train: error: --resume: the model in "), err
  assert f" was trained {said} (leave {given[0]} out " in err, err
  assert "never_read" not in err
  after = _checkpoint(hinge_model)
  assert sorted(after) == sorted(before)
  for key, value in before.items():
    np.testing.assert_array_equal(after[key], value)


def test_resume_takes_the_model_options_it_is_not_given_and_the_run_options(
    cancer_file, hinge_model, tmp_path):
  # The same values given (in the other spelling) are no conflict; left
  # out, the model's are used (not --loss logistic, --l2 10, --seed 0, the
  # defaults of a new model); --epochs, --tol and --threads apply.
  model_dir = str(tmp_path / "m")
  os.makedirs(model_dir)
  for name in ("model.json", "checkpoint.npz"):
    with open(os.path.join(hinge_model, name), "rb") as src, \
        open(os.path.join(model_dir, name), "wb") as dst:
      dst.write(src.read())
  assert _train(cancer_file, model_dir, "--resume", "--loss", "hinge_loss",
                "--l2", "1.0", "--format", "libsvm", "--epochs", "3",
                "--tol", "0") == 0
  # --threads reaches the trainer (which says it uses one for 569 rows).
  with pytest.warns(UserWarning, match="num_threads=2"):
    assert _train(cancer_file, model_dir, "--resume", "--epochs", "5",
                  "--tol", "0", "--threads", "2") == 0
  meta = _meta(model_dir)
  assert meta["epochs_done"] == 5
  assert (meta["format"], meta["loss"], meta["l1"], meta["l2"],
          meta["seed"], meta["visit_order"]) == (
              "libsvm", "hinge_loss", 0.0, 1.0, 3, "cyclic")
  # Its first 3 epochs (the fixture's 2, one resumed, one thread) are an
  # uninterrupted 3-epoch run's: the resumes went on with the model's own
  # loss, l2, seed and order.
  whole = str(tmp_path / "whole")
  assert _train(cancer_file, whole, "--format", "libsvm", "--loss", "hinge",
                "--l2", "1", "--seed", "3", "--visit-order", "cyclic",
                "--epochs", "3", "--tol", "0") == 0
  assert [h["duality_gap"] for h in _meta(whole)["history"]] == [
      h["duality_gap"] for h in meta["history"][:3]]


def test_a_new_model_gets_the_defaults(cancer_file, tmp_path):
  model_dir = str(tmp_path / "m")
  assert _train(cancer_file, model_dir, "--format", "libsvm", "--epochs",
                "1") == 0
  meta = _meta(model_dir)
  assert (meta["loss"], meta["l1"], meta["l2"], meta["seed"],
          meta["bucket_bits"], meta["visit_order"]) == (
              "logistic_loss", 0.0, 10.0, 0, 20, "permutation")
  assert "hinge_step" not in meta and "num_classes" not in meta


def test_resume_of_a_criteo_model_refuses_other_bucket_bits(tmp_path,
                                                            capsys):
  data = str(tmp_path / "data")
  assert cli.main(["generate", "--rows", "600", "--out", data]) == 0
  path = os.path.join(data, "part-00000.tsv")
  model_dir = str(tmp_path / "m")
  assert _train(path, model_dir, "--bucket-bits", "12", "--epochs",
                "1") == 0
  capsys.readouterr()
  assert _train(path, model_dir, "--resume", "--bucket-bits", "14") == 2
  assert ("was trained with --bucket-bits 12, got --bucket-bits 14 "
          in capsys.readouterr().err)
  # Left out, the model's 12 (not the default 20) reads the data again.
  assert _train(path, model_dir, "--resume", "--epochs", "2") == 0
  meta = _meta(model_dir)
  assert (meta["bucket_bits"], meta["num_features"], meta["epochs_done"]) \
      == (12, 1 << 12, 2)
  # Scoring hashes as the model did: another --bucket-bits is refused (it
  # was taken and ignored), the model's own accepted.
  capsys.readouterr()
  assert cli.main(["evaluate", path, "--model-dir", model_dir,
                   "--bucket-bits", "18"]) == 2
  assert ("the model was trained with --bucket-bits 12, got --bucket-bits 18"
          in capsys.readouterr().err)
  out = str(tmp_path / "scores.txt")
  assert cli.main(["predict", path, "--model-dir", model_dir, "--out", out,
                   "--bucket-bits", "12"]) == 0
  assert len(np.loadtxt(out)) == 600
  # One class in the labels: the AUC is undefined, and says so (it printed
  # 'auc nan' with exit 0).
  with open(path) as f:
    positives = [line for line in f if line.startswith("1\t")]
  one_class = tmp_path / "positives.tsv"
  one_class.write_text("".join(positives))
  capsys.readouterr()
  assert cli.main(["evaluate", str(one_class), "--model-dir",
                   model_dir]) == 0
  out = capsys.readouterr().out
  assert "auc undefined (every label is positive)" in out and "nan" not in out


def test_resume_refuses_data_with_features_past_the_models(
    cancer_file, tmp_path, capsys):
  """The same rows with wider indices used to train with every new feature
  dropped (the weights end at the model's features), without a word."""
  model_dir = str(tmp_path / "m")
  assert _train(cancer_file, model_dir, "--format", "libsvm", "--epochs",
                "1") == 0
  wide = tmp_path / "wide.svm"
  with open(cancer_file) as f:
    lines = f.read().splitlines()
  wide.write_text("".join(
      line.split(" ", 1)[0] + "".join(
          f" {int(token.split(':')[0]) * 100}:{token.split(':')[1]}"
          for token in line.split()[1:]) + "\n" for line in lines))
  before = _checkpoint(model_dir)
  capsys.readouterr()
  assert _train(str(wide), model_dir, "--format", "libsvm", "--resume") == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  features = _meta(model_dir)["num_features"]
  assert (f"--resume: the data has feature index 3,000 (1-based), past the "
          f"{features:,} features of the model in {model_dir}") in err, err
  for key, value in before.items():
    np.testing.assert_array_equal(_checkpoint(model_dir)[key], value)


def test_resume_refuses_other_rows_of_the_same_length(cancer_file, tmp_path,
                                                      capsys):
  """Other rows as many as the model's used to train on (exit 0): the
  model's duals belong to its rows, so the squared loss's gap stayed near 1
  (and a logistic dual of a flipped label failed in the op)."""
  model_dir = str(tmp_path / "m")
  assert _train(cancer_file, model_dir, "--format", "libsvm", "--loss",
                "squared", "--epochs", "2") == 0
  with open(cancer_file) as f:
    lines = f.read().splitlines()
  other = tmp_path / "other.svm"
  # The same features, other labels: a row's label moved one row on.
  labels = [line.split(" ", 1)[0] for line in lines]
  other.write_text("".join(
      label + " " + line.split(" ", 1)[1] + "\n"
      for label, line in zip(labels[1:] + labels[:1], lines)))
  before = _checkpoint(model_dir)
  capsys.readouterr()
  assert _train(str(other), model_dir, "--format", "libsvm", "--resume") == 2
  err = capsys.readouterr().err
  assert err.count("\n") == 1, err
  assert (f"--resume: {other} is not the data the model in {model_dir} was "
          "trained on (its labels differ") in err, err
  for key, value in before.items():
    np.testing.assert_array_equal(_checkpoint(model_dir)[key], value)
  # Its own rows, from a copy elsewhere, resume.
  copy = tmp_path / "copy.svm"
  copy.write_text("\n".join(lines) + "\n")
  assert _train(str(copy), model_dir, "--format", "libsvm", "--resume",
                "--epochs", "3") == 0
  assert _meta(model_dir)["epochs_done"] == 3


def test_files_where_directories_go_and_bucket_bits_of_libsvm_are_named(
    cancer_file, tmp_path, capsys):
  """A file as --model-dir / --cache-dir / --out said '[Errno 17] File
  exists'; --bucket-bits on a LIBSVM model named the unused default 20 as
  the model's."""
  a_file = tmp_path / "a_file"
  a_file.write_text("x")
  for argv, flag in (
      (["train", cancer_file, "--format", "libsvm", "--model-dir",
        str(a_file)], "--model-dir"),
      (["train", cancer_file, "--format", "libsvm", "--model-dir",
        str(tmp_path / "m"), "--cache-dir", str(a_file)], "--cache-dir"),
      (["generate", "--rows", "10", "--out", str(a_file)], "--out")):
    capsys.readouterr()
    assert cli.main([*argv, "--quiet"] if argv[0] == "train" else argv) == 2
    err = capsys.readouterr().err
    assert f"error: {flag} {a_file} is a file, not a directory" in err, err
  model_dir = str(tmp_path / "m2")
  assert _train(cancer_file, model_dir, "--format", "libsvm", "--epochs",
                "1") == 0
  capsys.readouterr()
  assert cli.main(["evaluate", cancer_file, "--model-dir", model_dir,
                   "--bucket-bits", "12"]) == 2
  err = capsys.readouterr().err
  assert (f"--bucket-bits is for Criteo files; the model in {model_dir} was "
          "trained on libsvm files") in err, err
  capsys.readouterr()
  assert cli.main(["predict", cancer_file, "--model-dir", model_dir,
                   "--out", str(tmp_path)]) == 2
  err = capsys.readouterr().err
  assert f"--out {tmp_path} is a directory; give the path of the file" in err

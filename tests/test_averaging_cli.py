"""`tf-sdca train --average-from T0`: the saved model is the mean of the
epochs' iterates (checked against iterates recorded by training one epoch
at a time without averaging), `--resume` continues the same mean, and the
option's errors."""
import json
import os

import numpy as np
import pytest

from interruptions import interrupted_after_epoch
from tf_sdca import cli

EPOCHS = 12
KEYS = ("sparse_weights", "dense_weights", "duals")


# cancer_file: tests/conftest.py


def _train(path, model_dir, *extra):
  # Plain epochs, as averaging trains them (the recorded iterates too).
  return cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--l2", "1", "--tol", "0", "--quiet",
                   "--momentum", "0", *extra])


def _checkpoint(model_dir):
  with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
    return {k: ckpt[k] for k in ckpt.files}


@pytest.fixture(scope="module")
def iterates(cancer_file, tmp_path_factory):
  """The plain iterates after epochs 1..EPOCHS, one `--resume` at a time
  (resuming repeats an uninterrupted run exactly)."""
  model_dir = str(tmp_path_factory.mktemp("plain") / "m")
  out = []
  for epoch in range(1, EPOCHS + 1):
    assert _train(cancer_file, model_dir, "--epochs", str(epoch),
                  *(["--resume"] if epoch > 1 else [])) == 0
    ckpt = _checkpoint(model_dir)
    out.append({k: ckpt[k] for k in KEYS})
  return out


def test_the_saved_model_is_the_mean_of_the_recorded_iterates(
    cancer_file, iterates, tmp_path, capsys):
  model_dir = str(tmp_path / "avg")
  assert _train(cancer_file, model_dir, "--epochs", str(EPOCHS),
                "--average-from", "5") == 0
  ckpt = _checkpoint(model_dir)
  for key in KEYS:
    mean = np.mean([it[key] for it in iterates[4:]], axis=0)
    np.testing.assert_allclose(ckpt[key], mean, rtol=1e-12, atol=1e-15)
    np.testing.assert_array_equal(ckpt["last_" + key], iterates[-1][key])
  assert int(ckpt["average_count"]) == EPOCHS - 4
  meta = json.load(open(os.path.join(model_dir, "model.json")))
  assert meta["average_from"] == 5
  assert meta["history"][-1]["last_duality_gap"] < \
      meta["history"][-1]["duality_gap"]
  # predict scores with the mean: sigmoid(x w + b) of the saved weights.
  capsys.readouterr()
  out = str(tmp_path / "scores.txt")
  assert cli.main(["predict", cancer_file, "--model-dir", model_dir,
                   "--format", "libsvm", "--out", out]) == 0
  with open(cancer_file) as f:  # the features as the file holds them
    lines = [line.split()[1:] for line in f]
  dense = np.zeros((len(lines), 30))
  for i, items in enumerate(lines):
    for item in items:
      j, v = item.split(":")
      dense[i, int(j) - 1] = float(v)
  z = dense @ ckpt["sparse_weights"][:30] + ckpt["dense_weights"][0]
  np.testing.assert_allclose(np.loadtxt(out), 1 / (1 + np.exp(-z)),
                             rtol=1e-5)


def test_average_from_the_last_epoch_saves_the_last_iterate(
    cancer_file, iterates, tmp_path):
  model_dir = str(tmp_path / "last")
  assert _train(cancer_file, model_dir, "--epochs", str(EPOCHS),
                "--average-from", str(EPOCHS)) == 0
  ckpt = _checkpoint(model_dir)
  for key in KEYS:
    np.testing.assert_array_equal(ckpt[key], iterates[-1][key])


def test_resume_continues_the_mean(cancer_file, tmp_path):
  whole, parts = str(tmp_path / "whole"), str(tmp_path / "parts")
  extra = ["--epochs", str(EPOCHS), "--average-from", "3"]
  assert _train(cancer_file, whole, *extra) == 0
  with interrupted_after_epoch(7):
    assert _train(cancer_file, parts, *extra) == 130
  assert int(_checkpoint(parts)["average_count"]) == 5
  assert _train(cancer_file, parts, "--epochs", str(EPOCHS),
                "--resume") == 0
  a, b = _checkpoint(whole), _checkpoint(parts)
  for key in KEYS + tuple("last_" + k for k in KEYS) + ("average_count",):
    np.testing.assert_array_equal(a[key], b[key])


def test_averaging_reaches_the_plain_optimum(cancer_file, tmp_path):
  plain, avg = str(tmp_path / "plain"), str(tmp_path / "avg")
  assert _train(cancer_file, plain, "--epochs", "300") == 0
  assert _train(cancer_file, avg, "--epochs", "300", "--average-from",
                "150") == 0
  meta_plain = json.load(open(os.path.join(plain, "model.json")))
  meta_avg = json.load(open(os.path.join(avg, "model.json")))
  assert meta_avg["history"][-1]["duality_gap"] < 1e-6
  assert meta_avg["history"][-1]["loss"] == pytest.approx(
      meta_plain["history"][-1]["loss"], rel=1e-6)
  a, b = _checkpoint(plain), _checkpoint(avg)
  w_plain = np.concatenate([a["sparse_weights"], a["dense_weights"]])
  w_avg = np.concatenate([b["sparse_weights"], b["dense_weights"]])
  np.testing.assert_allclose(w_avg, w_plain, atol=1e-6)


def test_bad_average_from_values_and_help(cancer_file, tmp_path, capsys):
  for bad in ("-1", "2.5", "x"):
    with pytest.raises(SystemExit) as exit_:
      _train(cancer_file, str(tmp_path / "b"), "--average-from", bad)
    assert exit_.value.code == 2
    assert "--average-from" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["train", "--help"])
  assert "--average-from T0" in capsys.readouterr().out
  model_dir = str(tmp_path / "m")
  assert _train(cancer_file, model_dir, "--epochs", "2",
                "--average-from", "1") == 0
  assert _train(cancer_file, model_dir, "--epochs", "4", "--resume",
                "--average-from", "2") == 2
  assert "--average-from 1" in capsys.readouterr().err


def test_averaging_is_refused_across_processes(cancer_file, tmp_path,
                                               capsys):
  assert _train(cancer_file, str(tmp_path / "d"), "--epochs", "2",
                "--average-from", "1", "--local-cluster", "2") == 2
  assert "--average-from 1" in capsys.readouterr().err

"""`tf-sdca train --momentum BETA`: InMemorySdca's extrapolated epochs from
the command line (fewer epochs to the same model), kept in model.json
across `--resume`, and its refusals."""
import json
import os

import numpy as np
import pytest

from tf_sdca import cli


# cancer_file: tests/conftest.py


def _train(path, model_dir, *extra):
  return cli.main(["train", path, "--model-dir", model_dir, "--format",
                   "libsvm", "--l2", "1", "--quiet", *extra])


def _meta(model_dir):
  with open(os.path.join(model_dir, "model.json")) as f:
    return json.load(f)


def test_momentum_trains_the_same_model_in_fewer_epochs(cancer_file,
                                                        tmp_path):
  plain, fast = str(tmp_path / "plain"), str(tmp_path / "fast")
  assert _train(cancer_file, plain, "--epochs", "300", "--tol", "1e-8",
                "--momentum", "0") == 0
  assert _train(cancer_file, fast, "--epochs", "300", "--tol", "1e-8",
                "--momentum", "0.5") == 0
  a, b = _meta(plain), _meta(fast)
  assert "momentum" not in a and b["momentum"] == 0.5
  assert b["history"][-1]["duality_gap"] < 1e-8
  # Measured: 63 epochs plain, 28 with 0.5.
  assert len(b["history"]) <= 0.6 * len(a["history"])
  assert b["history"][-1]["loss"] == pytest.approx(a["history"][-1]["loss"],
                                                   rel=2e-8)


def test_resume_keeps_or_changes_the_momentum(cancer_file, tmp_path):
  model_dir = str(tmp_path / "m")
  assert _train(cancer_file, model_dir, "--epochs", "3", "--tol", "0",
                "--momentum", "0.5") == 0
  assert _train(cancer_file, model_dir, "--epochs", "6", "--tol", "0",
                "--resume") == 0
  assert _meta(model_dir)["momentum"] == 0.5
  assert _train(cancer_file, model_dir, "--epochs", "9", "--tol", "0",
                "--resume", "--momentum", "0") == 0
  meta = _meta(model_dir)
  assert "momentum" not in meta and meta["epochs_done"] == 9
  with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
    assert "momentum_previous_duals" not in ckpt.files


def test_auto_momentum_from_the_command_line(cancer_file, tmp_path):
  # Four plain epochs, then 0.5 on these rows (InMemorySdca's 'auto');
  # a --resume after epoch 2 chooses as the uninterrupted run (the
  # checkpoint keeps the gaps seen).
  plain, auto = str(tmp_path / "plain"), str(tmp_path / "auto")
  assert _train(cancer_file, plain, "--epochs", "300", "--tol", "1e-8",
                "--momentum", "0") == 0
  assert _train(cancer_file, auto, "--epochs", "300", "--tol", "1e-8",
                "--momentum", "auto") == 0
  a, b = _meta(plain), _meta(auto)
  assert b["momentum"] == "auto"
  assert len(b["history"]) <= 0.6 * len(a["history"])
  whole, split = str(tmp_path / "whole"), str(tmp_path / "split")
  assert _train(cancer_file, whole, "--epochs", "8", "--tol", "0",
                "--momentum", "auto") == 0
  assert _train(cancer_file, split, "--epochs", "2", "--tol", "0",
                "--momentum", "auto") == 0
  with np.load(os.path.join(split, "checkpoint.npz")) as ckpt:
    assert ckpt["momentum_auto_gaps"].shape == (2,)
  assert _train(cancer_file, split, "--epochs", "8", "--tol", "0",
                "--resume") == 0
  with np.load(os.path.join(whole, "checkpoint.npz")) as x, \
      np.load(os.path.join(split, "checkpoint.npz")) as y:
    for key in ("dense_weights", "duals", "momentum_auto_gaps"):
      np.testing.assert_array_equal(x[key], y[key], err_msg=key)


def test_bad_momentum_values_and_where_it_does_not_apply(cancer_file,
                                                        tmp_path, capsys):
  for bad in ("-0.1", "1", "x"):
    with pytest.raises(SystemExit) as exit_:
      _train(cancer_file, str(tmp_path / "b"), "--momentum", bad)
    assert exit_.value.code == 2
    assert "--momentum" in capsys.readouterr().err
  assert _train(cancer_file, str(tmp_path / "c"), "--momentum", "0.5",
                "--batch-size", "100") == 2
  assert "no mini-batches" in capsys.readouterr().err
  assert _train(cancer_file, str(tmp_path / "d"), "--momentum", "0.5",
                "--local-cluster", "2") == 2
  assert "--no-momentum" in capsys.readouterr().err


def test_the_default_is_auto_and_an_older_model_resumes_plainly(cancer_file,
                                                                 tmp_path):
  default, auto = str(tmp_path / "default"), str(tmp_path / "auto")
  assert _train(cancer_file, default, "--epochs", "10", "--tol", "0") == 0
  assert _train(cancer_file, auto, "--epochs", "10", "--tol", "0",
                "--momentum", "auto") == 0
  assert _meta(default)["momentum"] is None  # the default, kept
  with np.load(os.path.join(default, "checkpoint.npz")) as a, \
      np.load(os.path.join(auto, "checkpoint.npz")) as b:
    np.testing.assert_array_equal(a["duals"], b["duals"])
    assert "momentum_previous_duals" in a.files
  # A model directory from before the default has no momentum in its
  # model.json: it resumes with plain epochs, as it was trained.
  old, plain = str(tmp_path / "old"), str(tmp_path / "plain")
  assert _train(cancer_file, old, "--epochs", "3", "--tol", "0") == 0
  meta = _meta(old)
  del meta["momentum"]
  with open(os.path.join(old, "model.json"), "w") as f:
    json.dump(meta, f)
  path = os.path.join(old, "checkpoint.npz")
  with np.load(path) as ckpt:  # its copy of model.json, and no momentum
    arrays = {k: ckpt[k] for k in ckpt.files if not k.startswith("momentum")}
  saved = json.loads(str(arrays["meta_json"]))
  del saved["momentum"]
  arrays["meta_json"] = np.array(json.dumps(saved))
  np.savez(path, **arrays)
  assert _train(cancer_file, old, "--epochs", "8", "--tol", "0",
                "--resume") == 0
  assert _train(cancer_file, plain, "--epochs", "8", "--tol", "0",
                "--momentum", "0") == 0
  with np.load(os.path.join(old, "checkpoint.npz")) as a, \
      np.load(os.path.join(plain, "checkpoint.npz")) as b:
    np.testing.assert_array_equal(a["duals"], b["duals"])

"""`tf-sdca train`'s flags do what they say or are refused (found by the CLI
parts audit, 2026-11-29): the flags of training across processes were
accepted and ignored in one process (bad values too; `--no-momentum` left
the epochs' momentum on), `--memory-budget` across processes and ASDCA's
flags without `--visit-order asdca` likewise; the `memory:` line counted
fewer parts than were trained; an order that needs the rows in memory was
refused over parts only after the parse, in the trainer's keyword words;
`--resume` with `--epochs` at or below the model's said "trained" having
trained nothing; and `train`'s output to a file held Keras's colour
codes."""
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_sdca import cli
from tf_sdca import model_files
from tf_sdca.data import cache
from tf_sdca.data import generate_criteo_arrays, write_criteo_tsv


@pytest.fixture(scope="module")
def day_files(tmp_path_factory):
  """Three Criteo-shaped files of 1,000 rows (three cache chunks)."""
  out = tmp_path_factory.mktemp("days")
  arrays = generate_criteo_arrays(3000, num_buckets=2**12, seed=5)
  paths = []
  for k in range(3):
    path = str(out / f"day-{k}.tsv")
    write_criteo_tsv(path, {key: arrays[key][1000 * k:1000 * (k + 1)]
                            for key in ("labels", "counts", "cat_values")})
    paths.append(path)
  return paths


def _train(capsys, data, model_dir, *flags):
  """`tf-sdca train` in this process: (exit status, stdout, stderr)."""
  capsys.readouterr()
  try:
    status = cli.main(["train", *data, "--model-dir", str(model_dir),
                       "--bucket-bits", "12", *flags])
  except SystemExit as stop:  # argparse's refusals
    status = stop.code
  out, err = capsys.readouterr()
  return status, out, err


@pytest.mark.parametrize("flags,named", [
    (["--no-momentum"], "--no-momentum"),
    (["--checkpoint-every", "3"], "--checkpoint-every"),
    (["--local-passes", "2", "--exchanges-per-pass", "4"],
     "--local-passes, --exchanges-per-pass"),
    (["--exchange", "allgather"], "--exchange"),
    (["--startup-timeout", "5"], "--startup-timeout"),
])
def test_flags_across_processes_are_refused_in_one_process(
    tmp_path, capsys, day_files, flags, named):
  status, _, err = _train(capsys, day_files, tmp_path / "m", *flags)
  assert status == 2, err
  assert err.startswith(f"tf-sdca train: error: {named}: for training "
                        "across processes (--local-cluster K or TF_CONFIG)")
  assert not os.path.exists(tmp_path / "m" / "model.json")


@pytest.mark.parametrize("flag,value", [
    ("--local-passes", "-4"), ("--exchanges-per-pass", "0"),
    ("--checkpoint-every", "0"), ("--startup-timeout", "-1"),
    ("--local-passes", "two")])
def test_bad_values_of_the_flags_across_processes_are_refused(
    tmp_path, capsys, day_files, flag, value):
  status, _, err = _train(capsys, day_files, tmp_path / "m",
                          "--local-cluster", "2", flag, value)
  assert status == 2
  assert f"{flag} must be" in err and f"got {value}" in err


def test_memory_budget_across_processes_is_refused(tmp_path, capsys,
                                                   day_files):
  status, _, err = _train(capsys, day_files, tmp_path / "m",
                          "--local-cluster", "2", "--memory-budget", "1G")
  assert status == 2
  assert "--memory-budget plans one process's parts, not training across " \
      "processes" in err


def test_asdca_flags_need_the_asdca_order(tmp_path, capsys, day_files):
  status, _, err = _train(capsys, day_files, tmp_path / "m", "--quiet",
                          "--asdca-batch-size", "4", "--asdca-theta", "0.5")
  assert status == 2
  assert ("--asdca-batch-size and --asdca-theta set ASDCA's steps "
          "(--visit-order asdca), not --visit-order permutation") in err
  status, _, err = _train(capsys, day_files, tmp_path / "m", "--quiet",
                          "--epochs", "2", "--visit-order", "asdca",
                          "--asdca-theta", "0.5")
  assert status == 0, err
  assert model_files.read_meta(str(tmp_path / "m"))["asdca_theta"] == 0.5


def test_the_memory_line_counts_the_parts_trained(tmp_path, capsys,
                                                  day_files):
  """Each cache chunk ends in a short block, so the parts can outnumber
  ceil(rows / part_rows): the line said 18 where the rows went in 19."""
  plan = model_files.memory_plan("criteo", 3000, 26 * 3000, 2**12, None,
                                 1 << 50)
  budget = plan["kept"] + (plan["in_memory"] - plan["kept"]) // 17
  status, out, err = _train(capsys, day_files, tmp_path / "m", "--epochs",
                            "1", "--memory-budget", str(budget))
  assert status == 0, err
  line = [l for l in out.splitlines() if l.startswith("memory:")][-1]
  shown = int(line.split(": ")[-1].split()[0])
  part_rows = int(line.split("at most ")[1].split()[0].replace(",", ""))
  arrays, _ = cache.load_or_build(day_files, "criteo", str(tmp_path / "c"),
                                  12, verbose=0)
  meta = dict(model_files.read_meta(str(tmp_path / "m")))
  trained = model_files.row_parts("criteo", arrays, meta, part_rows)
  assert shown == trained.num_parts
  assert shown > -(-3000 // part_rows)  # the case the plan miscounted
  # An order that needs the rows in memory: refused before the training,
  # in the flags' words.
  status, _, err = _train(capsys, day_files, tmp_path / "a", "--epochs", "1",
                          "--memory-budget", str(budget), "--visit-order",
                          "adaptive")
  assert status == 2
  assert (f"the 3,000 rows train in {shown} parts, and --visit-order "
          "adaptive needs them in memory (use --visit-order permutation, "
          "uniform, cyclic, or give a larger --memory-budget)") in err


def test_resume_with_epochs_already_done_says_so(tmp_path, capsys,
                                                 day_files):
  common = ["--quiet", "--tol", "0"]
  assert _train(capsys, day_files, tmp_path / "m", *common, "--epochs",
                "4")[0] == 0
  before = np.load(tmp_path / "m" / "checkpoint.npz")["sparse_weights"]
  status, out, _ = _train(capsys, day_files, tmp_path / "m", *common,
                          "--resume", "--epochs", "2")
  assert status == 0
  assert out.strip() == ("--epochs 2: the model has 4 epoch(s) done "
                         "already; --epochs counts them (give more to "
                         "train further)")
  np.testing.assert_array_equal(
      np.load(tmp_path / "m" / "checkpoint.npz")["sparse_weights"], before)
  assert model_files.read_meta(str(tmp_path / "m"))["epochs_done"] == 4


def test_train_output_to_a_file_has_no_escapes(tmp_path, day_files):
  exe = os.path.join(os.path.dirname(sys.executable), "tf-sdca")
  cmd = ([exe] if os.path.exists(exe) else
         [sys.executable, "-m", "tf_sdca.cli"])
  # Not --quiet: Keras's progress bar is what wrote escapes.
  result = subprocess.run(cmd + ["train", *day_files, "--model-dir",
                                 str(tmp_path / "m"), "--bucket-bits", "12",
                                 "--epochs", "2"],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "\x1b[" not in result.stdout
  assert "\r" not in result.stdout and "\b" not in result.stdout
  assert "Epoch 2/2" in result.stdout
  assert "trained 2 epoch(s)" in result.stdout

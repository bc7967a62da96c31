"""The `tf-sdca demo` command; the model files `train` writes."""
import json
import os
import subprocess
import sys

import numpy as np


def test_demo_command_trains_and_reports(capsys):
  # In this process (a TensorFlow start saved): the console script's own
  # process is the next test's.
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  capsys.readouterr()
  assert cli.main(["demo", "--rows", "30000", "--epochs", "3",
                   "--bucket-bits", "14", "--quiet"]) == 0
  stdout = capsys.readouterr().out
  lines = {l.split()[0] + " " + l.split()[1]: l.split()
           for l in stdout.splitlines() if l.startswith(("tf_sdca model",
                                                         "ground truth"))}
  model_auc = float(lines["tf_sdca model"][3])
  truth_auc = float(lines["ground truth"][3])
  assert 0.7 < model_auc <= truth_auc + 0.02


def test_demo_with_one_class_held_out_says_the_auc_is_undefined(capsys):
  # 10 rows: 1 held out, one class: its AUC printed 'nan'.
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  capsys.readouterr()
  assert cli.main(["demo", "--rows", "10", "--quiet"]) == 0
  stdout = capsys.readouterr().out
  assert "nan" not in stdout, stdout
  model = [l for l in stdout.splitlines() if l.startswith("tf_sdca model")]
  assert model[0].split()[3] == "-", stdout
  assert "(AUC undefined: every held-out label is " in stdout, stdout


def test_demo_output_to_a_pipe_has_no_escapes_and_says_what_it_compares():
  exe = os.path.join(os.path.dirname(sys.executable), "tf-sdca")
  cmd = ([exe] if os.path.exists(exe) else
         [sys.executable, "-m", "tf_sdca.cli"])
  # Not --quiet: the progress lines and Keras's bar are what wrote escapes.
  result = subprocess.run(cmd + ["demo", "--rows", "20000", "--epochs", "2",
                                 "--bucket-bits", "14"],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  assert "\x1b[" not in result.stdout
  assert "\r" not in result.stdout and "\b" not in result.stdout
  assert "Epoch 2/2" in result.stdout  # the progress is kept, as plain lines
  assert "parsed 18,000 rows" in result.stdout
  assert ("held-out rows: the trained model against the ground truth"
          in result.stdout)


def test_model_json_is_read_back_whole_and_one_history_entry_a_line(
    tmp_path):
  """`files.readable_json`: the model's JSON with one key a line and one
  history entry a line (each part through json's C encoder: the Python
  encoder of `indent=` over the whole history after every epoch made the
  saves quadratic in the epochs), read back to the same values, given
  entries already encoded or not."""
  from tf_sdca import files  # pylint: disable=import-outside-toplevel
  history = [dict(epoch=k, loss=1.0 / k, duality_gap=float("nan") if k == 2
                  else 10.0 ** -k) for k in range(1, 5)]
  meta = dict(format="libsvm", scale=[1.5, 2.0], history=history,
              classes=[0.0, 1.0], seed=0, nested={"a": [1, {"b": None}]})
  plain = files.readable_json(meta)
  cached = files.readable_json(
      meta, {"history": [json.dumps(entry) for entry in history]})
  # A stale cache (other length) is not used.
  stale = files.readable_json(meta, {"history": ["{}"]})
  assert plain == cached == stale
  back = json.loads(plain)
  assert json.dumps(back, sort_keys=True) == json.dumps(meta, sort_keys=True)
  rows = plain.splitlines()
  assert rows[0] == "{" and rows[-1] == "}"
  assert rows.count(' "history": [') == 1
  assert [r.rstrip(",") for r in rows if r.startswith('  {"epoch": ')] == [
      "  " + json.dumps(entry) for entry in history]
  # tf-sdca train's files: checkpoint.npz's meta and model.json the same.
  files.save_model_atomically(str(tmp_path), meta, epoch=4,
                              weights=np.arange(3.0))
  with np.load(tmp_path / "checkpoint.npz") as ckpt:
    assert str(ckpt["meta_json"]) == (tmp_path / "model.json").read_text()

"""The `tf-sdca demo` command."""
import os
import subprocess
import sys


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

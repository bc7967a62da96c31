"""The `tf-sdca demo` command."""
import os
import subprocess
import sys


def test_demo_command_trains_and_reports():
  exe = os.path.join(os.path.dirname(sys.executable), "tf-sdca")
  cmd = ([exe] if os.path.exists(exe) else
         [sys.executable, "-m", "tf_sdca.cli"])
  result = subprocess.run(cmd + ["demo", "--rows", "30000", "--epochs", "3",
                                 "--bucket-bits", "14", "--quiet"],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  lines = {l.split()[0] + " " + l.split()[1]: l.split()
           for l in result.stdout.splitlines() if l.startswith(("tf_sdca model",
                                                               "ground truth"))}
  model_auc = float(lines["tf_sdca model"][3])
  truth_auc = float(lines["ground truth"][3])
  assert 0.7 < model_auc <= truth_auc + 0.02

"""bench/bench_criteo.py's runner: a `tf-sdca` command in its own process,
its output and its peak RSS (the command ends its process with os._exit,
which skips a `finally`: the wrapper reads the peak on that way out)."""
import os
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import bench_criteo  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_run_returns_the_commands_output_and_its_peak_rss(tmp_path):
  out = tmp_path / "data"
  seconds, stdout, peak_gib = bench_criteo._run(  # pylint: disable=protected-access
      ["generate", "--rows", "500", "--out", str(out), "--files", "2"])
  assert seconds > 0.0
  assert "wrote 2 file(s)" in stdout
  # A Python process holding numpy: tens of MiB, well under a GiB here.
  assert 10.0 / 1024 < peak_gib < 1.0
  assert len(np.load(out / "truth.npy")) > 0
  assert sorted(f for f in os.listdir(out) if f.endswith(".tsv")) == [
      "part-00000.tsv", "part-00001.tsv"]

"""Scale tests (marked slow: run with `pytest --run-slow tests/test_scale.py`).

`tf-sdca train` on 10M generated Criteo-shaped rows, each run in a fresh
process from the same binary cache, against issue 13's memory bound: peak
RSS within 4 GB (4e9 bytes), the rows packed from the cache part by part
(2.82 GiB measured; packing the whole arrays at once took 4.44 GiB).
"""
import os
import subprocess
import sys

import pytest

ROWS = 10_000_000
BOUND = 4e9  # bytes

pytestmark = pytest.mark.slow

_WRAPPER = """
import resource, runpy, sys
sys.argv = ["tf-sdca"] + sys.argv[1:]
try:
  runpy.run_module("tf_sdca.cli", run_name="__main__")
finally:
  print("PEAK_RSS_KB", resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        file=sys.stderr)
"""


def _cli(*args):
  """Runs `tf-sdca ARGS` in a new process; returns its own peak RSS in bytes
  (measured inside it: RUSAGE_CHILDREN would be the largest of all runs)."""
  env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
  done = subprocess.run([sys.executable, "-c", _WRAPPER, *args],
                        capture_output=True, text=True, env=env, check=False)
  assert done.returncode == 0, done.stderr[-3000:]
  kb = [int(line.split()[1]) for line in done.stderr.splitlines()
        if line.startswith("PEAK_RSS_KB")][-1]
  return kb * 1024


@pytest.fixture(scope="module")
def criteo_10m(tmp_path_factory):
  """10M generated rows as TSV files and their parsed cache (built once)."""
  root = tmp_path_factory.mktemp("scale")
  data = root / "data"
  _cli("generate", "--rows", str(ROWS), "--out", str(data), "--files", "10")
  files = sorted(str(p) for p in data.glob("*.tsv"))
  cache_dir = str(root / "cache")
  _cli("train", *files, "--model-dir", str(root / "first"), "--cache-dir",
       cache_dir, "--epochs", "1", "--tol", "0", "--quiet")
  return root, files, cache_dir


def test_training_10m_rows_stays_within_4gb(criteo_10m):
  root, files, cache_dir = criteo_10m
  peak = _cli("train", *files, "--model-dir", str(root / "packed"),
              "--cache-dir", cache_dir, "--epochs", "2", "--tol", "0",
              "--quiet")
  print(f"tf-sdca train, 10M rows: peak RSS {peak / 2**30:.2f} GiB")
  assert peak < BOUND, f"peak RSS {peak / 2**30:.2f} GiB"

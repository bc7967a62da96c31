"""The TensorFlow-independent solver core, built on its own: free of data
races under ThreadSanitizer with 4 shards, deterministic, finite."""
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOURCES = [os.path.join(ROOT, "kernels", "tests", "core_tsan_main.cc"),
           os.path.join(ROOT, "kernels", "core", "loss.cc"),
           os.path.join(ROOT, "kernels", "core", "solver.cc")]

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


def _build_and_run(tmp_path, flags, env=None):
  binary = str(tmp_path / "core_main")
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, *SOURCES, "-o",
                  binary, "-lpthread"], check=True, capture_output=True)
  return subprocess.run([binary], capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=600)


def test_core_is_deterministic_and_finite_with_four_shards(tmp_path):
  result = _build_and_run(tmp_path, ["-O2"])
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "OK"


def test_core_has_no_data_races_under_thread_sanitizer(tmp_path):
  try:
    result = _build_and_run(tmp_path, ["-O1", "-g", "-fsanitize=thread"],
                            env={"TSAN_OPTIONS": "halt_on_error=1"})
  except subprocess.CalledProcessError as e:  # no libtsan on this machine
    pytest.skip("cannot build with -fsanitize=thread: " + e.stderr[-300:])
  assert "ThreadSanitizer" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "OK"

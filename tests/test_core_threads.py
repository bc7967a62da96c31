"""The TensorFlow-independent solver core, built on its own: the lock-free
threads over packed rows (kernels/tests/packed_threads_main.cc) are free of
data races under ThreadSanitizer, lose no update and converge with 3, 4 and
8 threads in lockstep."""
import glob
import os
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = sorted(glob.glob(os.path.join(ROOT, "kernels", "core", "*.cc")))
DRIVERS = {
    "packed": os.path.join(ROOT, "kernels", "tests", "packed_threads_main.cc"),
    "chunks": os.path.join(ROOT, "kernels", "tests", "packed_chunks_main.cc"),
}

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


def _build_and_run(tmp_path, flags, env=None, driver="packed"):
  binary = str(tmp_path / ("core_main_" + driver))
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, DRIVERS[driver],
                  *CORE, "-o", binary, "-lpthread"], check=True,
                 capture_output=True)
  return subprocess.run([binary], capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=600)


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_core_drivers_pass(tmp_path, driver):
  result = _build_and_run(tmp_path, ["-O2"], driver=driver)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "OK"


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_core_has_no_data_races_under_thread_sanitizer(tmp_path, driver):
  try:
    result = _build_and_run(tmp_path, ["-O1", "-g", "-fsanitize=thread"],
                            env={"TSAN_OPTIONS": "halt_on_error=1"},
                            driver=driver)
  except subprocess.CalledProcessError as e:  # no libtsan on this machine
    pytest.skip("cannot build with -fsanitize=thread: " + e.stderr[-300:])
  assert "ThreadSanitizer" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "OK"

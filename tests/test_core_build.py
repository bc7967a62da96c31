"""tests/core_build.py's shared object files: each compiled once per run,
by whichever thread or process takes its lock first."""
import fcntl
import os
import threading
import time

import pytest

import core_build


@pytest.fixture
def build_dir(tmp_path, monkeypatch):
  """core_build pointed at a fresh run directory, `_compile` replaced by a
  counting fake (a slow one: the others must wait for it)."""
  monkeypatch.setattr(core_build, "_directory", [str(tmp_path)])
  calls = []

  def fake_compile(flags, source, obj):
    calls.append((tuple(flags), source))
    time.sleep(0.2)
    with open(obj, "w") as f:
      f.write(source)

  monkeypatch.setattr(core_build, "_compile", fake_compile)
  return calls


def test_threads_asking_for_one_object_compile_it_once(build_dir):
  source = core_build.CORE[0]
  results = []
  threads = [threading.Thread(
      target=lambda: results.append(core_build.driver_object(source, ["-O2"])))
             for _ in range(4)]
  for t in threads:
    t.start()
  for t in threads:
    t.join()
  assert build_dir == [(("-O2",), source)]
  assert len(set(results)) == 1 and os.path.exists(results[0])
  # Other flags: another object.
  other = core_build.driver_object(source, ["-O1"])
  assert other != results[0] and len(build_dir) == 2


def test_an_object_being_compiled_elsewhere_is_skipped_without_waiting(
    build_dir):
  source = core_build.CORE[0]
  obj = core_build._object_path(source, ["-O2"])  # pylint: disable=protected-access
  with open(obj + ".lock", "w") as lock:  # another process compiling it
    fcntl.flock(lock, fcntl.LOCK_EX)
    assert core_build._compile_once(["-O2"], source, wait=False) is None  # pylint: disable=protected-access
    with open(obj, "w") as f:  # (which it finishes)
      f.write("done")
    fcntl.flock(lock, fcntl.LOCK_UN)
  assert core_build._compile_once(["-O2"], source) == obj  # pylint: disable=protected-access
  assert not build_dir


def test_a_session_shares_its_build_directory_with_its_workers():
  # Made by tests/conftest.py in the process running the session; pytest-
  # xdist's workers inherit it.
  shared = os.environ.get(core_build.BUILD_DIR_ENV)
  assert shared and os.path.isdir(shared)

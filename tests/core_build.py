"""Builds the TensorFlow-free drivers of kernels/tests against the solver
core (kernels/core/*.cc), compiling each core source once per set of
compiler flags per test session, the sources side by side on the machine's
cores.

Each driver used to compile the whole core itself: twelve builds of ~17 s
(-O2) or more (sanitizers) were the largest part of the suite's time; a
driver's own source takes ~1 s.

A test session that collects tests building drivers starts their core
builds on one background thread as it begins (`prebuild`, from
tests/conftest.py) and runs those tests last, so the ~2 minutes of
compiling overlap the TensorFlow tests, which leave the second core mostly
idle; a test needing objects still being built waits for them.
"""
import atexit
import concurrent.futures
import glob
import os
import shutil
import subprocess
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = sorted(glob.glob(os.path.join(ROOT, "kernels", "core", "*.cc")))

# AddressSanitizer + UndefinedBehaviorSanitizer, any report fatal. -g1:
# the line tables a report's file:line needs; -g's full debug information
# made the build ~40% slower (packed_rows.cc 41 s against 29 on one core).
ASAN_UBSAN = ["-O1", "-g1", "-fsanitize=address,undefined",
              "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]

# ThreadSanitizer (tests/test_core_threads.py).
TSAN = ["-O1", "-g1", "-fsanitize=thread"]

# The flag sets the drivers' tests build the core with, in the order they
# first need them (the tests' files in order).
FLAG_SETS = (["-O2"], ASAN_UBSAN, TSAN)

_builds = {}  # tuple(flags) -> Future of the object files of CORE
_lock = threading.Lock()
_directory = []


def _scratch():
  if not _directory:
    _directory.append(tempfile.mkdtemp(prefix="tf_sdca_core_"))
    atexit.register(shutil.rmtree, _directory[0], ignore_errors=True)
  return _directory[0]


def _compile(flags, source, obj):
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, "-c", source,
                  "-o", obj], check=True, capture_output=True, text=True)


def _build_objects(flags, workers):
  out = tempfile.mkdtemp(dir=_scratch())
  objs = [os.path.join(out, os.path.basename(src)[:-3] + ".o")
          for src in CORE]
  with concurrent.futures.ThreadPoolExecutor(workers) as pool:
    for done in [pool.submit(_compile, flags, src, obj)
                 for src, obj in zip(CORE, objs)]:
      done.result()
  return objs


def _claim(flags):
  """The future of `flags`' objects, and whether the caller must build
  them (nobody has started)."""
  with _lock:
    future = _builds.get(tuple(flags))
    if future is not None:
      return future, False
    future = _builds[tuple(flags)] = concurrent.futures.Future()
    return future, True


def _fill(future, flags, workers):
  try:
    future.set_result(_build_objects(flags, workers))
  except BaseException as e:  # pylint: disable=broad-except
    future.set_exception(e)


def core_objects(flags):
  """The core's object files built with `flags` (compiled on first use, or
  waited for where `prebuild` is compiling them).

  Raises:
    subprocess.CalledProcessError: when a source does not compile.
  """
  future, mine = _claim(flags)
  if mine:
    _fill(future, flags, os.cpu_count() or 2)
  return future.result()


def prebuild(flag_sets):
  """Starts building the core with each of `flag_sets` in turn, one source
  at a time, on a daemon thread (a set a test claimed first is left to
  it)."""
  def run():
    for flags in flag_sets:
      future, mine = _claim(flags)
      if mine:
        _fill(future, flags, 1)
  threading.Thread(target=run, name="core_build.prebuild",
                   daemon=True).start()


def build(binary, sources, flags):
  """Compiles `sources` (a driver) with `flags` and links them with the
  core built with the same flags into `binary`.

  Raises:
    subprocess.CalledProcessError: (with `stderr` text) when compiling or
      linking fails, e.g. without the sanitizer's runtime library.
  """
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, *sources,
                  *core_objects(flags), "-o", binary, "-lpthread"],
                 check=True, capture_output=True, text=True)
  return binary

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
idle; a test needing objects still being built waits for them. The
drivers' own sources (`DRIVER_BUILDS`: 2-10 s each, fourteen builds, one of
them twice) are compiled there too, after the core, each once per flag set;
a test then only links.
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


def _driver(name):
  return os.path.join(ROOT, "kernels", "tests", name)


# The drivers the tests build with each of FLAG_SETS (tests/test_asdca.py,
# test_core_sanitizers.py, test_core_threads.py), for `prebuild`; a driver
# missing here is compiled when its test builds it.
DRIVER_BUILDS = (
    (FLAG_SETS[0], [_driver(name) for name in (
        "asdca_main.cc", "packed_chunks_main.cc", "packed_threads_main.cc",
        "packed_rows_bench_main.cc", "multiclass_blocks_main.cc")]),
    (FLAG_SETS[1], [_driver(name) for name in (
        "asdca_main.cc", "packed_threads_main.cc", "loss_steps_main.cc",
        "multiclass_blocks_main.cc", "corpus_replay_main.cc",
        "text_reader_main.cc")]),
    (FLAG_SETS[2], [_driver(name) for name in (
        "packed_chunks_main.cc", "multiclass_blocks_main.cc",
        "packed_threads_main.cc")]),
)

_builds = {}  # tuple(flags) -> Future of the object files of CORE
_driver_objects = {}  # (source, tuple(flags)) -> Future of its object file
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


def _claim(flags, table=None, key=None):
  """The future of `flags`' objects (or of `table[key]`), and whether the
  caller must build them (nobody has started)."""
  table = _builds if table is None else table
  key = tuple(flags) if key is None else key
  with _lock:
    future = table.get(key)
    if future is not None:
      return future, False
    future = table[key] = concurrent.futures.Future()
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


def driver_object(source, flags):
  """`source` (a driver's own file) compiled with `flags` (compiled on
  first use, or waited for where `prebuild` is compiling it).

  Raises:
    subprocess.CalledProcessError: when it does not compile.
  """
  future, mine = _claim(flags, _driver_objects, (source, tuple(flags)))
  if mine:
    try:
      obj = os.path.join(tempfile.mkdtemp(dir=_scratch()),
                         os.path.basename(source)[:-3] + ".o")
      _compile(flags, source, obj)
      future.set_result(obj)
    except BaseException as e:  # pylint: disable=broad-except
      future.set_exception(e)
  return future.result()


def prebuild(flag_sets, driver_builds=DRIVER_BUILDS):
  """Starts building the core with each of `flag_sets` in turn, one source
  at a time, then the drivers of `driver_builds` ((flags, sources) pairs),
  on a daemon thread (what a test claimed first is left to it)."""
  def run():
    for flags in flag_sets:
      future, mine = _claim(flags)
      if mine:
        _fill(future, flags, 1)
    for flags, sources in driver_builds:
      for source in sources:
        try:
          driver_object(source, flags)
        except subprocess.CalledProcessError:
          pass  # kept in its future: the test that builds it reports it
  threading.Thread(target=run, name="core_build.prebuild",
                   daemon=True).start()


def build(binary, sources, flags):
  """Compiles `sources` (a driver) with `flags` and links them with the
  core built with the same flags into `binary`.

  Raises:
    subprocess.CalledProcessError: (with `stderr` text) when compiling or
      linking fails, e.g. without the sanitizer's runtime library.
  """
  objects = [driver_object(source, flags) for source in sources]
  subprocess.run(["g++", *flags, *objects, *core_objects(flags), "-o",
                  binary, "-lpthread"],
                 check=True, capture_output=True, text=True)
  return binary

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
compiling overlap the TensorFlow tests; a test needing objects still being
built waits for them. The
drivers' own sources (`DRIVER_BUILDS`: 2-10 s each, fourteen builds, one of
them twice) are compiled there too, after the core, each once per flag set;
a test then only links.

Under pytest-xdist (`-n 2`, what .ci/run uses) every worker collects the
same tests and starts the same prebuild: the object files live in one
directory for the whole run (`BUILD_DIR_ENV`, made by tests/conftest.py in
the controlling process and removed there at its end), each compiled once
by whichever process takes its lock first (`_compile_once`). A prebuild
skips an object another process is compiling (a test needing it waits for
it then), so that two prebuilds share the work instead of taking turns.
"""
import atexit
import concurrent.futures
import fcntl
import glob
import hashlib
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

# The environment variable naming the run's shared build directory.
BUILD_DIR_ENV = "TF_SDCA_CORE_BUILD_DIR"

_lock = threading.Lock()
_directory = []


def _scratch():
  """The build directory: the run's shared one where the test session made
  it (`BUILD_DIR_ENV`), else this process's own, removed at its exit."""
  with _lock:
    if not _directory:
      shared = os.environ.get(BUILD_DIR_ENV)
      if shared and os.path.isdir(shared):
        _directory.append(shared)
      else:
        _directory.append(tempfile.mkdtemp(prefix="tf_sdca_core_"))
        atexit.register(shutil.rmtree, _directory[0], ignore_errors=True)
    return _directory[0]


def _object_path(source, flags):
  """Where `source` compiled with `flags` goes: one name per (flags,
  source), the same in every process of the run."""
  tag = hashlib.sha1(" ".join(flags).encode()).hexdigest()[:12]
  out = os.path.join(_scratch(), tag)
  os.makedirs(out, exist_ok=True)
  folder = os.path.basename(os.path.dirname(source))
  return os.path.join(out, f"{folder}_{os.path.basename(source)[:-3]}.o")


def _compile(flags, source, obj):
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, "-c", source,
                  "-o", obj], check=True, capture_output=True, text=True)


def _compile_once(flags, source, wait=True):
  """`source` compiled with `flags` (its object file's path): by this
  thread unless another thread or process of the run compiled it, or is
  compiling it (then waited for; with `wait` False, None is returned
  instead).

  Raises:
    subprocess.CalledProcessError: when it does not compile.
  """
  obj = _object_path(source, flags)
  if os.path.exists(obj):
    return obj
  # (flock: each open() is its own lock, between threads as between
  # processes.)
  with open(obj + ".lock", "w") as lock:
    try:
      fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
      return None
    try:
      if not os.path.exists(obj):
        partial = f"{obj}.{os.getpid()}.{threading.get_ident()}.tmp"
        _compile(flags, source, partial)
        os.replace(partial, obj)
    finally:
      fcntl.flock(lock, fcntl.LOCK_UN)
  return obj


def core_objects(flags):
  """The core's object files built with `flags` (compiled on first use,
  on all the machine's cores, or waited for where a prebuild is compiling
  them).

  Raises:
    subprocess.CalledProcessError: when a source does not compile.
  """
  with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
    return list(pool.map(lambda src: _compile_once(flags, src), CORE))


def driver_object(source, flags):
  """`source` (a driver's own file) compiled with `flags` (compiled on
  first use, or waited for where a prebuild is compiling it).

  Raises:
    subprocess.CalledProcessError: when it does not compile.
  """
  return _compile_once(flags, source)


def prebuild(flag_sets, driver_builds=DRIVER_BUILDS):
  """Starts compiling the core with each of `flag_sets` in turn, then the
  drivers of `driver_builds` ((flags, sources) pairs), one source at a
  time, on a daemon thread. A source another thread or process is
  compiling is left to it: a test needing it waits for it then."""
  def run():
    jobs = [(flags, source) for flags in flag_sets for source in CORE]
    jobs += [(flags, source) for flags, sources in driver_builds
             for source in sources]
    for flags, source in jobs:
      try:
        _compile_once(flags, source, wait=False)
      except subprocess.CalledProcessError:
        pass  # the test that builds it compiles it again and reports it
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

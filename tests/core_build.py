"""Builds the TensorFlow-free drivers of kernels/tests against the solver
core (kernels/core/*.cc), compiling each core source once per set of
compiler flags per test session, the sources side by side on the machine's
cores.

Each driver used to compile the whole core itself: twelve builds of ~17 s
(-O2) or more (sanitizers) were the largest part of the suite's time; a
driver's own source takes ~1 s.
"""
import atexit
import concurrent.futures
import glob
import os
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CORE = sorted(glob.glob(os.path.join(ROOT, "kernels", "core", "*.cc")))

# AddressSanitizer + UndefinedBehaviorSanitizer, any report fatal.
ASAN_UBSAN = ["-O1", "-g", "-fsanitize=address,undefined",
              "-fno-sanitize-recover=all", "-fno-omit-frame-pointer"]

_objects = {}  # tuple(flags) -> object files of CORE
_directory = []


def _scratch():
  if not _directory:
    _directory.append(tempfile.mkdtemp(prefix="tf_sdca_core_"))
    atexit.register(shutil.rmtree, _directory[0], ignore_errors=True)
  return _directory[0]


def _compile(flags, source, obj):
  subprocess.run(["g++", "-std=c++17", "-I" + ROOT, *flags, "-c", source,
                  "-o", obj], check=True, capture_output=True, text=True)


def core_objects(flags):
  """The core's object files built with `flags` (compiled on first use).

  Raises:
    subprocess.CalledProcessError: when a source does not compile.
  """
  key = tuple(flags)
  if key not in _objects:
    out = tempfile.mkdtemp(dir=_scratch())
    objs = [os.path.join(out, os.path.basename(src)[:-3] + ".o")
            for src in CORE]
    with concurrent.futures.ThreadPoolExecutor(os.cpu_count() or 2) as pool:
      for done in [pool.submit(_compile, flags, src, obj)
                   for src, obj in zip(CORE, objs)]:
        done.result()
    _objects[key] = objs
  return _objects[key]


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

"""Test-wide settings: quiet TensorFlow, float64 numpy references."""
import os
import shutil
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tests' numpy/scipy work is on tiny matrices: OpenBLAS's worker threads
# only spin against TensorFlow's (and other jobs') on a small machine, which
# made a 30 ms scipy solve take 0.3-2 s. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # pylint: disable=wrong-import-position


def pytest_addoption(parser):
  parser.addoption(
      "--run-slow", action="store_true", default=False,
      help="also run tests marked slow (scale tests, minutes each; the "
      "costliest cluster cases, ~20 s each)")


def pytest_configure(config):
  # One directory of the core's object files for the whole run, made by the
  # process that runs the session (pytest-xdist's workers inherit it): each
  # object is compiled once, not once per worker (tests/core_build.py).
  import core_build  # pylint: disable=import-outside-toplevel
  if (not hasattr(config, "workerinput") and
      not os.environ.get(core_build.BUILD_DIR_ENV)):
    os.environ[core_build.BUILD_DIR_ENV] = tempfile.mkdtemp(
        prefix="tf_sdca_core_")
    config.add_cleanup(lambda: (
        shutil.rmtree(os.environ.pop(core_build.BUILD_DIR_ENV),
                      ignore_errors=True)))
  config.addinivalue_line(
      "markers", "slow: a scale test taking minutes, or a costly case whose "
      "paths a cheaper test checks; runs with --run-slow "
      "or TF_SDCA_RUN_SLOW=1")


# The test files that build kernels/tests drivers against the core
# (tests/core_build.py): run last, their builds started as the session
# begins.
CORE_BUILDERS = ("test_asdca.py", "test_core_sanitizers.py",
                 "test_core_threads.py")


def pytest_collection_modifyitems(config, items):
  if not (config.getoption("--run-slow") or os.environ.get("TF_SDCA_RUN_SLOW")):
    skip = pytest.mark.skip(reason="slow: run with --run-slow")
    for item in items:
      if "slow" in item.keywords:
        item.add_marker(skip)
  builders = [item for item in items
              if os.path.basename(str(item.fspath)) in CORE_BUILDERS]
  if builders and len(builders) < len(items) and shutil.which("g++"):
    last = set(map(id, builders))
    items[:] = [item for item in items if id(item) not in last] + builders
    import core_build  # pylint: disable=import-outside-toplevel
    core_build.prebuild(core_build.FLAG_SETS)


@pytest.fixture(scope="session")
def cancer_file(tmp_path_factory):
  """breast_cancer (standardised) as LIBSVM lines with labels 0 / 1, for
  the command line's tests."""
  from sklearn.datasets import load_breast_cancer  # pylint: disable=import-outside-toplevel
  from sklearn.preprocessing import StandardScaler  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = StandardScaler().fit_transform(x)
  path = str(tmp_path_factory.mktemp("cancer") / "cancer.svm")
  with open(path, "w") as f:
    for label, row in zip(y, x):
      items = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v)
      f.write(f"{label} {items}\n")
  return path

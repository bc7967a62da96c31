"""Test-wide settings: quiet TensorFlow, float64 numpy references."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tests' numpy/scipy work is on tiny matrices: OpenBLAS's worker threads
# only spin against TensorFlow's (and other jobs') on a small machine, which
# made a 30 ms scipy solve take 0.3-2 s. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import pytest  # pylint: disable=wrong-import-position


def pytest_addoption(parser):
  parser.addoption(
      "--run-slow", action="store_true", default=False,
      help="also run tests marked slow (minutes each: scale tests)")


def pytest_configure(config):
  config.addinivalue_line(
      "markers", "slow: a scale test taking minutes; runs with --run-slow "
      "or TF_SDCA_RUN_SLOW=1")


def pytest_collection_modifyitems(config, items):
  if config.getoption("--run-slow") or os.environ.get("TF_SDCA_RUN_SLOW"):
    return
  skip = pytest.mark.skip(reason="slow: run with --run-slow")
  for item in items:
    if "slow" in item.keywords:
      item.add_marker(skip)

"""FirstNonFinite (kernels/core/first_bad_block.h), which the epoch ops run
over every weight after every epoch and packing over the feature values,
finds the first NaN or infinity and flags no finite value, double or float:
kernels/tests/first_bad_block_main.cc, built with the vectorised loop (-O2)
and without (-O0)."""
import os
import shutil
import subprocess

import pytest

import core_build

DRIVER = os.path.join(core_build.ROOT, "kernels", "tests",
                      "first_bad_block_main.cc")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


@pytest.mark.parametrize("level", ["-O2", "-O0"])
def test_first_non_finite_finds_the_first_nan_or_infinity(tmp_path, level):
  binary = str(tmp_path / "first_bad_block_main")
  subprocess.run(["g++", "-std=c++17", "-I" + core_build.ROOT, level, DRIVER,
                  "-o", binary], check=True, capture_output=True, text=True)
  result = subprocess.run([binary], capture_output=True, text=True,
                          timeout=60)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  assert result.stdout.strip() == "OK"

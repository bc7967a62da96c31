"""The adaptive order's draws (kernels/core/visit_order.h) find each row
through a guide table; kernels/tests/visit_order_main.cc checks, draw for
draw, that they are the rows the binary search over the cumulative scores
picked before it, on score vectors of every shape, built plainly and under
AddressSanitizer + UndefinedBehaviorSanitizer. (The door records show the
same for whole fits: tools/door_records.py.)"""
import os
import shutil
import subprocess

import pytest

import core_build

DRIVER = os.path.join(core_build.ROOT, "kernels", "tests",
                      "visit_order_main.cc")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


@pytest.mark.parametrize("flags", [["-O2"], core_build.ASAN_UBSAN],
                         ids=["O2", "asan-ubsan"])
def test_guide_table_draws_are_the_binary_search_draws(tmp_path, flags):
  binary = str(tmp_path / "visit_order_main")
  try:
    subprocess.run(["g++", "-std=c++17", "-I" + core_build.ROOT, *flags,
                    DRIVER, "-o", binary], check=True, capture_output=True,
                   text=True)
  except subprocess.CalledProcessError as e:
    if flags is core_build.ASAN_UBSAN:
      pytest.skip("cannot build with ASan + UBSan: " + e.stderr[-300:])
    raise
  result = subprocess.run([binary], capture_output=True, text=True,
                          timeout=300)
  assert result.returncode == 0, result.stdout + result.stderr[-3000:]
  assert result.stdout.strip() == "OK"

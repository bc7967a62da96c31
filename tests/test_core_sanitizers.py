"""The TensorFlow-independent core under AddressSanitizer and
UndefinedBehaviorSanitizer (besides ThreadSanitizer, tests/test_core_threads.py):
the packed-rows driver, the multiclass block steps and passes
(kernels/tests/multiclass_blocks_main.cc), and the losses' coordinate steps
(kernels/tests/loss_steps_main.cc) replaying a seeded corpus of ordinary,
extreme and malformed steps (labels outside the domain, NaN and inf, q from
0 to 1e300, duals at and past their bounds), and the text parsers on
mutated lines (kernels/tests/text_reader_main.cc). Any sanitizer report
fails."""
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

import core_build
from test_core_threads import DRIVERS, ROOT

FLAGS = core_build.ASAN_UBSAN
ENV = {"ASAN_OPTIONS": "detect_leaks=1:abort_on_error=0",
       "UBSAN_OPTIONS": "print_stacktrace=1"}
LOSSES = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "poisson_loss", "absolute_loss")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


def _build(tmp_path, name, driver):
  """The driver linked with the core, both under ASan + UBSan."""
  try:
    return core_build.build(str(tmp_path / name), [driver], FLAGS)
  except subprocess.CalledProcessError as e:  # no libasan / libubsan here
    pytest.skip("cannot build with ASan + UBSan: " + e.stderr[-300:])


def _assert_clean(result):
  for report in ("AddressSanitizer", "LeakSanitizer", "runtime error:"):
    assert report not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr[-3000:]


def test_packed_rows_driver_is_clean(tmp_path):
  binary = _build(tmp_path, "packed", DRIVERS["packed"])
  result = subprocess.run([binary], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=900)
  _assert_clean(result)
  assert result.stdout.strip() == "OK"


def _corpus(seed, size):
  """Lines "loss label dual wx q" of the losses' steps, a third ordinary,
  the rest extreme or malformed."""
  rng = np.random.default_rng(seed)
  extreme = [0.0, -0.0, 1e-300, -1e-300, 1e-30, 1e30, 1e300, -1e300,
             float("nan"), float("inf"), float("-inf"), 1.0, -1.0, 0.5, 2.0,
             1e15, -1e15]
  lines = []
  for k in range(size):
    loss = LOSSES[rng.integers(0, len(LOSSES))]
    if k % 3 == 0:  # ordinary
      label = float(rng.integers(0, 2)) if "hinge" in loss or \
          loss == "logistic_loss" else float(rng.normal() * 3)
      if loss == "poisson_loss":
        label = float(rng.integers(0, 10))
      values = [label, 0.0, float(rng.normal() * 5), float(rng.uniform(0, 50))]
    else:
      values = [extreme[rng.integers(0, len(extreme))] if rng.random() < 0.7
                else float(rng.normal() * 10.0 ** rng.integers(-5, 6))
                for _ in range(4)]
    lines.append(f"{loss} " + " ".join(repr(v) for v in values))
  return "\n".join(lines) + "\n"


def test_loss_steps_replay_a_corpus_clean(tmp_path):
  binary = _build(tmp_path, "loss_steps",
                  os.path.join(ROOT, "kernels", "tests", "loss_steps_main.cc"))
  corpus = _corpus(seed=0, size=3000)
  result = subprocess.run([binary], input=corpus, capture_output=True,
                          text=True, env={**os.environ, **ENV}, timeout=600)
  _assert_clean(result)
  lines = result.stdout.splitlines()
  assert len(lines) == corpus.count("\n")
  # Every step answered: three numbers, or an error for a bad label.
  for line in lines:
    if not line.startswith("error"):
      assert len(line.split()) == 3, line


def test_multiclass_blocks_driver_is_clean(tmp_path):
  """Softmax and multiclass-hinge block steps on extreme blocks (q 1e-12 ..
  1e12, scores up to 1e300) and packed passes with K up to 50 under ASan +
  UBSan; every block stays on the simplex. (It found the hinge's step
  dividing 0 by 0 when q was lost in scores 1e18 times larger.)"""
  binary = _build(tmp_path, "multiclass", DRIVERS["multiclass"])
  result = subprocess.run([binary], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=600)
  _assert_clean(result)
  assert result.stdout.strip() == "OK"


def test_the_op_fuzzers_data_replays_clean_through_the_core(tmp_path):
  """The fuzzer's pack_rows / packed_solve / append_rows data (300 calls of
  each, seed 0, mutated as in tests/test_fuzz_ops.py) validated as the ops
  do and, when valid, packed, solved and evaluated by the core under ASan +
  UBSan: TensorFlow is not built with the sanitizers, so this is how the
  fuzzer's corpus reaches them."""
  sys.path.insert(0, os.path.join(ROOT, "tools"))
  import fuzz_ops  # pylint: disable=import-outside-toplevel
  binary = _build(tmp_path, "replay",
                  os.path.join(ROOT, "kernels", "tests",
                               "corpus_replay_main.cc"))
  records = fuzz_ops.corpus(seed=0, calls=300)
  result = subprocess.run([binary], input=records, capture_output=True,
                          text=True, env={**os.environ, **ENV}, timeout=600)
  _assert_clean(result)
  counts = result.stdout.split()
  assert counts[0] == "records" and int(counts[1]) == records.count("RECORD")
  # Most calls carry a mutation that makes them invalid; the valid rest
  # (hundreds) ran through Pack, the passes and the objective.
  assert int(counts[3]) >= 100, result.stdout


def test_text_parsers_on_mutated_lines_are_clean(tmp_path):
  """Criteo and LIBSVM parsing of damaged lines (bytes changed, cut,
  binary) stays inside each block, and a block cut into ranges parses as
  the whole (kernels/tests/text_reader_main.cc)."""
  binary = _build(tmp_path, "text_reader",
                  os.path.join(ROOT, "kernels", "tests",
                               "text_reader_main.cc"))
  result = subprocess.run([binary], capture_output=True, text=True,
                          env={**os.environ, **ENV}, timeout=600)
  _assert_clean(result)
  assert result.stdout.strip() == "OK"

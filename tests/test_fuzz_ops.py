"""tools/fuzz_ops.py with a fixed seed: random malformed and extreme calls of
every op, eager and in a tf.function, each in a child process; none may
crash, hang, return a non-finite weight, dual or state, accept invalid input
or fail without naming the argument it got wrong."""
import io
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tools"))
import fuzz_ops  # pylint: disable=wrong-import-position


def test_the_fuzzer_finds_no_failure():
  out = io.StringIO()
  counts, failures = fuzz_ops.fuzz(fuzz_ops.OPS, ("eager", "function"),
                                   calls=150, seed=0, timeout=60, out=out)
  assert failures == [], out.getvalue()
  for (op, mode), counter in counts.items():
    assert sum(counter.values()) == 150, (op, mode)
    # Every call was judged: most are invalid on purpose, a few valid ones
    # must train (the generator is not only producing errors).
    assert counter["error"] > 0 and counter["ok"] > 0, (op, mode, counter)


@pytest.mark.parametrize("result,applied,expected", [
    ({"outcome": "crash"}, [], "crash"),
    ({"outcome": "hang"}, [], "hang"),
    ({"outcome": "ok", "finite": False}, [("x", "extreme", "l2")], "nonfinite"),
    ({"outcome": "ok", "finite": True}, [("x", "invalid", "l2")], "accepted"),
    ({"outcome": "ok", "finite": True}, [("x", "extreme", "l2")], "ok"),
    ({"outcome": "error", "message": "l2 = 0 must be > 0"},
     [("x", "invalid", "l2")], "error"),
    ({"outcome": "error", "message": "Attempt to convert a value (None)"},
     [("x", "invalid", "weights")], "unnamed"),
])
def test_verdicts(result, applied, expected):
  assert fuzz_ops.verdict(result, applied) == expected


def test_calls_are_reproducible_from_the_seed():
  a, applied_a = fuzz_ops.generate("optimizer", 3, 17)
  b, applied_b = fuzz_ops.generate("optimizer", 3, 17)
  assert applied_a == applied_b
  assert repr(a) == repr(b)

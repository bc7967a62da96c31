"""A cancelled step stops the solve ops within a pass (issue 17's bounded
work): TfSdca>PackedSolve and TfSdca>Optimizer ask the step's
CancellationManager before every pass and every 2^16 rows of one. Each long
call below asks for 2^20 passes, which would run for many minutes; that it
ends, with CancelledError (eager, a CancellationManager's start_cancel) or
DeadlineExceededError (a Session's RunOptions timeout, which cancels the
step and waits for its ops), is the op stopping on the cancel; its inputs
stay as they were.

No wall-clock bound is asserted (a loaded machine would fail it): the cancel
comes once the process has spent CPU time in the op, and the work done
after it is compared in CPU time, which other jobs do not inflate."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import cancellation  # no public equivalent

from tf_sdca.ops import sdca_ops

_N, _D = 20000, 20
_MAX_PASSES = 1 << 20  # kMaxPasses: far longer than any test may wait
# Seconds before a call that ignores its cancel is declared hung: a
# liveness guard only, orders of magnitude above the cancelled call's time.
_HUNG_SECONDS = 300.0


@pytest.fixture(scope="module")
def data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(_N, _D)).astype(np.float32)
  y = (rng.uniform(size=_N) > 0.5).astype(np.float32)
  return x, y


def _pack(x, y):
  return sdca_ops.pack_rows(
      np.zeros([0], np.int64), np.zeros([0], np.int32),
      np.zeros([0], np.float32), x, np.ones(_N, np.float32), y, 0,
      "logistic_loss")


def _cancel_once_running(function, args, cancel, cpu_seconds=0.1):
  """Runs function(*args) in a thread and calls cancel() once this process
  has spent `cpu_seconds` of CPU time since the call began (the op
  running: the call's own dispatch takes milliseconds); returns (the error
  raised, the process's CPU seconds from the cancel to the call's end).

  The poll sleeps between its reads of the clock, and on a loaded machine
  a sleep of 1 ms can last tens: the op's threads run on meanwhile, so the
  cancel comes later than asked. The CPU time is counted from the cancel
  itself, not from the point asked for."""
  result = {}
  start = time.process_time()

  def run():
    try:
      function(*args)
    except Exception as error:  # pylint: disable=broad-except
      result["error"] = error
    result["end"] = time.process_time()

  thread = threading.Thread(target=run, daemon=True)
  thread.start()
  while thread.is_alive() and time.process_time() - start < cpu_seconds:
    time.sleep(0.001)
  cancelled_at = time.process_time()
  cancel()
  thread.join(timeout=_HUNG_SECONDS)
  assert not thread.is_alive(), "the call went on after its cancel"
  return result.get("error"), max(0.0, result["end"] - cancelled_at)


def test_eager_cancellation_stops_packed_solve(data):
  x, y = data
  rows = _pack(x, y)
  w0, a0 = np.zeros(_D), np.zeros(_N)
  reference = sdca_ops.packed_solve(rows, w0, a0, 0, "logistic_loss", 0.0,
                                    1.0, num_passes=10)

  @tf.function
  def solve(w, a):
    return sdca_ops.packed_solve(rows, w, a, 0, "logistic_loss", 0.0, 1.0,
                                 num_passes=_MAX_PASSES)

  concrete = solve.get_concrete_function(tf.TensorSpec([_D], tf.float64),
                                         tf.TensorSpec([_N], tf.float64))
  manager = cancellation.CancellationManager()
  w, a = tf.constant(w0), tf.constant(a0)
  error, _ = _cancel_once_running(manager.get_cancelable_function(concrete),
                                  (w, a), manager.start_cancel)
  assert isinstance(error, tf.errors.CancelledError), error
  assert "TfSdca>PackedSolve was cancelled between two passes" in str(error)
  # The inputs are as they were, and the rows solve on as before.
  np.testing.assert_array_equal(w.numpy(), w0)
  np.testing.assert_array_equal(a.numpy(), a0)
  again = sdca_ops.packed_solve(rows, w0, a0, 0, "logistic_loss", 0.0, 1.0,
                                num_passes=10)
  for r, g in zip(reference, again):
    np.testing.assert_array_equal(r.numpy(), g.numpy())


def test_eager_cancellation_stops_the_mini_batch_op(data):
  x, y = data
  x, y = x[:2000], y[:2000]
  args = ([], [], [], [x], np.ones(2000, np.float32), y, [], [],
          [np.zeros(_D, np.float32)])
  state = np.zeros((2000, 4), np.float32)
  state[:, 3] = 1.0

  @tf.function
  def step(s):
    return sdca_ops.sdca_optimizer(*args, s, loss_type="logistic_loss",
                                   l1=0.0, l2=1.0,
                                   num_inner_iterations=_MAX_PASSES)

  concrete = step.get_concrete_function(tf.TensorSpec([2000, 4], tf.float32))
  manager = cancellation.CancellationManager()
  error, _ = _cancel_once_running(manager.get_cancelable_function(concrete),
                                  (tf.constant(state),), manager.start_cancel)
  assert isinstance(error, tf.errors.CancelledError), error
  assert "TfSdca>Optimizer was cancelled between two passes" in str(error)


def test_a_session_timeout_stops_packed_solve(data):
  x, y = data
  graph = tf.Graph()
  with graph.as_default():
    rows = _pack(x, y)
    long = sdca_ops.packed_solve(rows, np.zeros(_D), np.zeros(_N), 0,
                                 "logistic_loss", 0.0, 1.0,
                                 num_passes=_MAX_PASSES)
  result = {}
  with tf.compat.v1.Session(graph=graph) as session:

    def run():
      # On timeout the session cancels the step and waits for its ops to
      # end: it returns only once the op has stopped.
      try:
        session.run(long, options=tf.compat.v1.RunOptions(timeout_in_ms=500))
      except Exception as error:  # pylint: disable=broad-except
        result["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(timeout=_HUNG_SECONDS)
    assert not thread.is_alive(), "the op went on after the timeout"
  assert isinstance(result.get("error"), tf.errors.DeadlineExceededError), (
      result)


@pytest.mark.parametrize("num_threads", [1, 2])
def test_a_cancel_stops_a_single_pass_in_its_middle(num_threads):
  """One pass over 1M rows: the cancel is seen within 2^16 rows
  (kCancelCheckRows) of each thread's share, so the cancelled pass does a
  fraction of a whole pass's work (in CPU time: cancelled at about a fifth
  of it, the op stops within the next ~7% (one thread) or ~13% (two) of
  the rows, where a check only between passes would do the rest: 80%).
  A call that ended before its cancel came (a loaded machine's poll can
  oversleep a whole pass) proves nothing and is run again."""
  n, d = 1_000_000, 8
  rng = np.random.default_rng(1)
  x = rng.normal(size=(n, d)).astype(np.float32)
  y = (rng.uniform(size=n) > 0.5).astype(np.float32)
  rows = sdca_ops.pack_rows(
      np.zeros([0], np.int64), np.zeros([0], np.int32),
      np.zeros([0], np.float32), x, np.ones(n, np.float32), y, 0,
      "logistic_loss", num_threads=num_threads)
  del x

  @tf.function
  def one_pass(w, a):
    return sdca_ops.packed_solve(rows, w, a, 0, "logistic_loss", 0.0, 1.0,
                                 num_passes=1, compute_objective=False)

  concrete = one_pass.get_concrete_function(tf.TensorSpec([d], tf.float64),
                                            tf.TensorSpec([n], tf.float64))
  w, a = tf.zeros([d], tf.float64), tf.zeros([n], tf.float64)
  concrete(w, a)  # warm
  start = time.process_time()
  concrete(w, a)
  pass_cpu = time.process_time() - start
  for _ in range(3):
    manager = cancellation.CancellationManager()
    error, cpu = _cancel_once_running(
        manager.get_cancelable_function(concrete), (w, a),
        manager.start_cancel, cpu_seconds=0.2 * pass_cpu)
    if error is not None:
      break
  assert isinstance(error, tf.errors.CancelledError), (error, pass_cpu)
  # After the cancel: at most ~13% of a pass's rows, and the call's end.
  assert cpu < 0.4 * pass_cpu, (cpu, pass_cpu)

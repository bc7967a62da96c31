"""A cancelled step stops the solve ops within a pass (issue 17's bounded
work): TfSdca>PackedSolve and TfSdca>Optimizer ask the step's
CancellationManager before every pass. Each call below would run >= 10 s
uncancelled; it must end within a second of the cancel, with CancelledError
(eager, a CancellationManager's start_cancel) or DeadlineExceededError (a
Session's RunOptions timeout, which cancels the step and waits for its ops),
and leave its inputs as they were."""
import threading
import time

import numpy as np
import pytest
import tensorflow as tf
from tensorflow.python.eager import cancellation  # no public equivalent

from tf_sdca.ops import sdca_ops

_N, _D = 20000, 20
_LONG_SECONDS = 10.0  # what each call would take uncancelled
_MAX_PASSES = 1 << 20  # kMaxPasses


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


def _passes_for_long_call(seconds_per_pass):
  passes = int(_LONG_SECONDS / seconds_per_pass)
  assert passes <= _MAX_PASSES, "the machine is too fast for this test"
  return passes


def _cancel_after(function, args, delay, cancel):
  """Runs function(*args) in a thread, calls cancel() after `delay` s;
  returns (the error raised, seconds from cancel to the call's end)."""
  result = {}

  def run():
    try:
      function(*args)
    except Exception as error:  # pylint: disable=broad-except
      result["error"] = error
    result["end"] = time.perf_counter()

  thread = threading.Thread(target=run)
  thread.start()
  time.sleep(delay)
  cancelled_at = time.perf_counter()
  cancel()
  thread.join(timeout=2 * _LONG_SECONDS)
  assert not thread.is_alive(), "the call was not cancelled"
  return result.get("error"), result["end"] - cancelled_at


def test_eager_cancellation_stops_packed_solve_within_a_second(data):
  x, y = data
  rows = _pack(x, y)
  w0, a0 = np.zeros(_D), np.zeros(_N)
  start = time.perf_counter()
  reference = sdca_ops.packed_solve(rows, w0, a0, 0, "logistic_loss", 0.0,
                                    1.0, num_passes=10)
  passes = _passes_for_long_call((time.perf_counter() - start) / 10)

  @tf.function
  def solve(w, a):
    return sdca_ops.packed_solve(rows, w, a, 0, "logistic_loss", 0.0, 1.0,
                                 num_passes=passes)

  concrete = solve.get_concrete_function(tf.TensorSpec([_D], tf.float64),
                                         tf.TensorSpec([_N], tf.float64))
  manager = cancellation.CancellationManager()
  w, a = tf.constant(w0), tf.constant(a0)
  error, seconds = _cancel_after(manager.get_cancelable_function(concrete),
                                 (w, a), 0.3, manager.start_cancel)
  assert isinstance(error, tf.errors.CancelledError), error
  assert "TfSdca>PackedSolve was cancelled between two passes" in str(error)
  assert seconds < 1.0
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
  start = time.perf_counter()
  sdca_ops.sdca_optimizer(*args, state, loss_type="logistic_loss", l1=0.0,
                          l2=1.0, num_inner_iterations=50)
  passes = _passes_for_long_call((time.perf_counter() - start) / 50)

  @tf.function
  def step(s):
    return sdca_ops.sdca_optimizer(*args, s, loss_type="logistic_loss",
                                   l1=0.0, l2=1.0,
                                   num_inner_iterations=passes)

  concrete = step.get_concrete_function(tf.TensorSpec([2000, 4], tf.float32))
  manager = cancellation.CancellationManager()
  error, seconds = _cancel_after(manager.get_cancelable_function(concrete),
                                 (tf.constant(state),), 0.3,
                                 manager.start_cancel)
  assert isinstance(error, tf.errors.CancelledError), error
  assert "TfSdca>Optimizer was cancelled between two passes" in str(error)
  assert seconds < 1.0


def test_a_session_timeout_stops_packed_solve(data):
  x, y = data
  graph = tf.Graph()
  with graph.as_default():
    rows = _pack(x, y)
    short = sdca_ops.packed_solve(rows, np.zeros(_D), np.zeros(_N), 0,
                                  "logistic_loss", 0.0, 1.0, num_passes=10)
  with tf.compat.v1.Session(graph=graph) as session:
    start = time.perf_counter()
    session.run(short)
    passes = _passes_for_long_call((time.perf_counter() - start) / 10)
    with graph.as_default():
      long = sdca_ops.packed_solve(rows, np.zeros(_D), np.zeros(_N), 0,
                                   "logistic_loss", 0.0, 1.0,
                                   num_passes=passes)
    start = time.perf_counter()
    # On timeout the session cancels the step and waits for its ops to end:
    # its time is the op's.
    with pytest.raises(tf.errors.DeadlineExceededError):
      session.run(long,
                  options=tf.compat.v1.RunOptions(timeout_in_ms=500))
    assert time.perf_counter() - start < 1.5


@pytest.mark.parametrize("num_threads", [1, 2])
def test_a_cancel_stops_a_single_pass_in_its_middle(num_threads):
  """One pass over 1M rows: the cancel is seen within 2^16 rows
  (kCancelCheckRows), so well before the pass would end; with two threads
  through the lock-free threads' shares."""
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
  start = time.perf_counter()
  concrete(w, a)
  pass_seconds = time.perf_counter() - start
  manager = cancellation.CancellationManager()
  error, seconds = _cancel_after(manager.get_cancelable_function(concrete),
                                 (w, a), 0.2 * pass_seconds,
                                 manager.start_cancel)
  assert isinstance(error, tf.errors.CancelledError), (error, pass_seconds)
  assert seconds < 0.5 * pass_seconds, (seconds, pass_seconds)

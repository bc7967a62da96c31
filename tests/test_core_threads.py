"""The TensorFlow-independent solver core, built on its own: the lock-free
threads over packed rows (kernels/tests/packed_threads_main.cc) are free of
data races under ThreadSanitizer, lose no update and converge with 3, 4 and
8 threads in lockstep (the multiclass losses' blocks too,
kernels/tests/multiclass_blocks_main.cc); and issue 13's target for T threads in lockstep (the
worst-case timing of T truly parallel threads, PackedRows::SolveLockstep) on
Criteo-shaped rows (kernels/tests/packed_rows_bench_main.cc): after 20
epochs a relative duality gap within 3x of one thread's."""
import os
import shutil
import subprocess

import pytest

import core_build
from core_build import ROOT, build
DRIVERS = {
    "packed": os.path.join(ROOT, "kernels", "tests", "packed_threads_main.cc"),
    "chunks": os.path.join(ROOT, "kernels", "tests", "packed_chunks_main.cc"),
    "multiclass": os.path.join(ROOT, "kernels", "tests",
                               "multiclass_blocks_main.cc"),
}
BENCH = os.path.join(ROOT, "kernels", "tests", "packed_rows_bench_main.cc")

pytestmark = pytest.mark.skipif(shutil.which("g++") is None,
                                reason="needs g++")


def _build_and_run(tmp_path, flags, env=None, driver="packed", args=()):
  binary = build(str(tmp_path / ("core_main_" + driver)), [DRIVERS[driver]],
                 flags)
  return subprocess.run([binary, *args], capture_output=True, text=True,
                        env={**os.environ, **(env or {})}, timeout=600)


# (The multiclass driver's plain run is tests/test_core_sanitizers.py's, under
# ASan + UBSan; here it runs under TSan and in its threads mode below.)
@pytest.mark.parametrize("driver", ["chunks", "packed"])
def test_core_drivers_pass(tmp_path, driver):
  result = _build_and_run(tmp_path, ["-O2"], driver=driver)
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "OK"


@pytest.mark.parametrize("driver", sorted(DRIVERS))
def test_core_has_no_data_races_under_thread_sanitizer(tmp_path, driver):
  # "races": the drivers' checks that run threads at the same time (their
  # one-thread and lockstep checks run unsanitised and under ASan + UBSan).
  try:
    result = _build_and_run(tmp_path, core_build.TSAN,
                            env={"TSAN_OPTIONS": "halt_on_error=1"},
                            driver=driver,
                            args=() if driver == "chunks" else ("races",))
  except subprocess.CalledProcessError as e:  # no libtsan on this machine
    pytest.skip("cannot build with -fsanitize=thread: " + e.stderr[-300:])
  assert "ThreadSanitizer" not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip() == "OK"


def _lockstep_gaps(binary, rows, epochs, threads, *extra):
  """{T: relative gap after `epochs` lockstep epochs} from the bench driver."""
  result = subprocess.run(
      [binary, str(rows), str(epochs), ",".join(map(str, threads)),
       "lockstep", *extra], capture_output=True, text=True, check=True,
      timeout=600)
  gaps = {}
  for line in result.stdout.splitlines():
    fields = line.split()
    if len(fields) >= 5 and fields[1] == str(epochs):
      gaps[int(fields[0])] = float(fields[4])
  assert sorted(gaps) == sorted(threads), result.stdout
  return gaps


@pytest.fixture(scope="module")
def bench_binary(tmp_path_factory):
  """kernels/tests/packed_rows_bench_main.cc, built once for this module."""
  return build(str(tmp_path_factory.mktemp("bench") / "packed_rows_bench"),
               [BENCH], ["-O2"])


@pytest.fixture(scope="module")
def lockstep_gaps(bench_binary):
  # 20,000 Criteo-shaped rows (26 Zipf ids, 13 counts and an intercept),
  # logistic, l2 = 1: one thread ends 20 epochs at a gap of ~1.4e-5.
  return _lockstep_gaps(bench_binary, 20000, 20, [1, 2, 3, 4, 8, 16])


# With the default ThreadSync (kAuto: kFresh from 3 threads) measured 1.4x
# (3 threads), 1.4x (4), 2.0x (8) one thread's gap; kScaled, the mode for
# every count before: 67x, 370x, 4300x. 16 threads end at 130x (issue 13's
# target not met there).
@pytest.mark.parametrize("threads", [
    2, 3, 4, 8,
    pytest.param(16, marks=pytest.mark.xfail(strict=True, reason="issue 13")),
])
def test_lockstep_threads_gap_within_3x_of_one_thread(lockstep_gaps,
                                                      threads):
  one = lockstep_gaps[1]
  assert 0.0 < one < 1e-3, lockstep_gaps
  assert 0.0 < lockstep_gaps[threads] <= 3.0 * one, lockstep_gaps


def test_sixteen_lockstep_threads_keep_up_when_steps_barely_couple(
    bench_binary):
  """The 16-thread gap above comes from how strongly a row's step moves the
  weights that all rows share: T lockstep steps are a mini-batch of T rows,
  and with q_i = |x_i|^2 / l2 ~ 31 (l2 = 1) each must shrink to keep the
  batch stable. With l2 = 100 (q_i ~ 0.3: the step is set by the loss's
  curvature, not by the shared weights) the same rows and 16 threads end 5
  epochs within 3x of one thread's gap (measured 0.74x; l2 = 30: 2.0x; l2 =
  10: 12x; g3doc/benchmarks.md)."""
  gaps = _lockstep_gaps(bench_binary, 20000, 5, [1, 16], "auto", "0", "0",
                        "100")
  assert 0.0 < gaps[1] < 1e-4, gaps
  assert 0.0 < gaps[16] <= 3.0 * gaps[1], gaps


@pytest.fixture(scope="module")
def lockstep_momentum_gaps(lockstep_gaps, bench_binary):
  """(plain, momentum 0.5) gaps after 20 lockstep epochs, 1 and 16
  threads: the driver's extrapolated epochs (InMemorySdca's momentum)."""
  return lockstep_gaps, _lockstep_gaps(bench_binary, 20000, 20, [1, 16],
                                       "auto", "0", "0.5")


def test_extrapolated_epochs_cut_the_gap_at_one_and_sixteen_threads(
    lockstep_momentum_gaps):
  # Measured (20 epochs): one thread 1.4e-5 -> 8.1e-8, sixteen 1.8e-3 ->
  # 1.3e-5 (g3doc/trainer.md): 16 threads with momentum end within 3x of
  # one thread without it, not of one thread with it.
  plain, fast = lockstep_momentum_gaps
  assert 0.0 < fast[1] <= plain[1] / 20.0, (plain, fast)
  assert 0.0 < fast[16] <= plain[16] / 20.0, (plain, fast)
  assert fast[16] <= 3.0 * plain[1], (plain, fast)


def test_multiclass_threads_one_after_another_need_one_threads_epochs(
    tmp_path):
  """Softmax blocks on 20,000 rows sorted by half (labels 0/1 first, 1/2
  after, the columns' means apart): two threads whose shares run one after
  another, as threads on a loaded machine do, reach a relative gap of 1e-8
  within 1.5x + 2 of one thread's epochs in the 'uniform' and 'permutation'
  orders (kernels/tests/multiclass_blocks_main.cc's sequential mode). With
  each thread drawing within its own block of consecutive rows, 'uniform'
  alternated between the two halves' optima."""
  result = _build_and_run(tmp_path, ["-O2"], driver="multiclass",
                          args=("sequential",))
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip() == "OK"


@pytest.fixture(scope="module")
def multiclass_lockstep_gaps(tmp_path_factory):
  """{(loss, T, lockstep): relative gap after 20 epochs} of
  multiclass_blocks_main's threads mode (24,000 rows, K = 5)."""
  binary = build(str(tmp_path_factory.mktemp("multiclass") /
                     "multiclass_blocks"), [DRIVERS["multiclass"]], ["-O2"])
  result = subprocess.run([binary, "threads"], capture_output=True, text=True,
                          check=True, timeout=600)
  gaps = {}
  for line in result.stdout.splitlines():
    loss, threads, lockstep, gap = line.split()
    gaps[loss, int(threads), lockstep == "1"] = float(gap)
  return gaps


# Measured: softmax 0.99x / 1.26x / 1.14x one thread's gap with 2 / 3 / 4
# threads in lockstep and 3.9x with 8; the multiclass hinge 0.8-1.0x up to 8.
@pytest.mark.parametrize("loss,threads", [
    ("softmax_loss", 2), ("softmax_loss", 3), ("softmax_loss", 4),
    pytest.param("softmax_loss", 8, marks=pytest.mark.xfail(
        strict=True, reason="issue 16: 8 threads end at ~4x")),
    ("multiclass_hinge_loss", 2), ("multiclass_hinge_loss", 3),
    ("multiclass_hinge_loss", 4), ("multiclass_hinge_loss", 8)])
def test_multiclass_lockstep_threads_gap_within_3x_of_one_thread(
    multiclass_lockstep_gaps, loss, threads):
  one = multiclass_lockstep_gaps[loss, 1, True]
  assert 0 < one < 1e-2
  assert multiclass_lockstep_gaps[loss, threads, True] <= 3 * one

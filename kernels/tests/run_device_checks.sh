#!/bin/bash
# The checks of the TensorFlow-free core that need many real cores (a
# 16-core machine without TensorFlow: python3 with pytest, numpy and
# pytest-xdist, and g++), in one run sized for a short loan. From the
# repository root:
#
#   kernels/tests/run_device_checks.sh [rows=2000000] [threads=1,2,3,4,8,16]
#
# 1. kernels/tests/run_thread_scaling.sh: epochs and seconds to a relative
#    gap of 1e-4 on Criteo-shaped rows with each thread count on real
#    threads (its ThreadSanitizer run is 3.'s test_core_threads.py's).
# 2. multiclass_blocks_main's threads mode: softmax and multiclass hinge
#    blocks after 20 epochs with 1-8 threads, lockstep and real.
# 3. The TF-free tests (tests/test_core_threads.py, test_core_sanitizers.py,
#    test_first_bad_block.py, test_visit_order.py) with 8 workers, the
#    sanitizers' drivers running their threads on real cores.
# Logs go to ${OUT:-/tmp}/.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-2000000}
THREADS=${2:-1,2,3,4,8,16}
OUT=${OUT:-/tmp}
export OUT PYTHONUNBUFFERED=1
echo "== $(date -u +%T) thread scaling, $ROWS rows, threads $THREADS"
SKIP_TSAN=1 timeout 200 bash kernels/tests/run_thread_scaling.sh "$ROWS" "$THREADS" 60 \
    > "$OUT/scaling.txt" 2>&1
echo "rc=$?"
sed -n '/Criteo-shaped rows, logistic/,$p' "$OUT/scaling.txt"
echo "== $(date -u +%T) multiclass blocks, threads mode"
g++ -O2 -std=c++17 -pthread -I. kernels/core/*.cc \
    kernels/tests/multiclass_blocks_main.cc -o /tmp/multiclass_blocks &&
  timeout 90 /tmp/multiclass_blocks threads | tee "$OUT/multiclass.txt"
echo "rc=$?"
echo "== $(date -u +%T) TF-free tests, 8 workers"
timeout 180 python3 -m pytest -q -p no:cacheprovider -n 8 --run-slow \
    tests/test_core_threads.py tests/test_core_sanitizers.py \
    tests/test_first_bad_block.py tests/test_visit_order.py \
    > "$OUT/pytest.txt" 2>&1
echo "rc=$?"
tail -25 "$OUT/pytest.txt"
echo "== $(date -u +%T) done"

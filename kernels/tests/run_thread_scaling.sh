#!/bin/bash
# Thread scaling of the SDCA engine without TensorFlow (python3 and g++
# only), for a machine with many cores (issue 13: 16). From the repository
# root:
#
#   kernels/tests/run_thread_scaling.sh [rows=4000000] [threads=1,2,4,8,16]
#                                       [max_epochs=100]
#
# Builds kernels/tests/packed_rows_bench_main.cc (-O3) and trains the
# generated Criteo-shaped rows (logistic, l2 = 1) from zero to a relative
# duality gap of 1e-4 with each thread count, on real threads, once with the
# default thread sync (PackedRows::ThreadSync::kAuto: kScaled for 2 threads,
# kFresh from 3) and once with kScaled for every count (the mode before
# kFresh), once with the default sync and the epochs extrapolated
# (momentum 0.5, as InMemorySdca(momentum=0.5)), and prints a markdown
# table: epochs and seconds to 1e-4, rows/s, the gap after 20 epochs. Then builds kernels/tests/packed_threads_main.cc
# with ThreadSanitizer (2 and 4 real threads over every loss and order, and
# 3, 4 and 8 in lockstep) and reports whether it is race-free (not with
# SKIP_TSAN set).
# Logs go to ${OUT:-/tmp}/thread_scaling/.
set -euo pipefail
cd "$(dirname "$0")/../.."
ROWS=${1:-4000000}
THREADS=${2:-1,2,4,8,16}
MAX_EPOCHS=${3:-100}
LOG=${OUT:-/tmp}/thread_scaling
mkdir -p "$LOG"
echo "cores: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
g++ -O3 -std=c++17 -pthread -I. kernels/core/*.cc \
    kernels/tests/packed_rows_bench_main.cc -o "$LOG/packed_rows_bench"
for sync in auto scaled; do
  "$LOG/packed_rows_bench" "$ROWS" "$MAX_EPOCHS" "$THREADS" threads "$sync" \
      1e-4 | tee "$LOG/bench_$sync.txt"
done
"$LOG/packed_rows_bench" "$ROWS" "$MAX_EPOCHS" "$THREADS" threads auto \
    1e-4 0.5 | tee "$LOG/bench_momentum.txt"
python3 - "$LOG" "$ROWS" <<'EOF'
import sys
log, rows = sys.argv[1], int(sys.argv[2])
print(f"\n{rows} Criteo-shaped rows, logistic, l2 = 1, real threads; "
      "time to a relative gap of 1e-4:\n")
print("| threads | sync | epochs to 1e-4 | seconds to 1e-4 | rows/s "
      "| gap after 20 epochs |")
print("|---|---|---|---|---|---|")
for sync in ("auto", "scaled", "momentum"):
  runs = {}
  for line in open(f"{log}/bench_{sync}.txt"):
    f = line.split()
    if len(f) >= 5 and f[0].isdigit() and f[1].isdigit():
      runs.setdefault(int(f[0]), []).append(
          (int(f[1]), float(f[2]), float(f[4])))
  for threads, epochs in sorted(runs.items()):
    seconds = sum(e[1] for e in epochs)
    last = epochs[-1]
    reached = last[2] <= 1e-4
    at20 = [e[2] for e in epochs if e[0] == 20]
    name = sync if sync == "scaled" or threads < 3 else "auto (fresh)"
    if sync == "auto" and threads == 2:
      name = "auto (scaled)"
    if sync == "momentum":
      name = "auto, momentum 0.5"
    print(f"| {threads} | {name} | "
          f"{last[0] if reached else '> %d' % last[0]} | "
          f"{seconds:.2f}{'' if reached else ' (not reached)'} | "
          f"{rows * len(epochs) / seconds / 1e6:.1f}M | "
          f"{'%.2e' % at20[0] if at20 else '(reached before)' if reached else '(fewer epochs)'} |")
EOF
echo
if [ -n "${SKIP_TSAN:-}" ]; then
  exit 0  # run_device_checks.sh: tests/test_core_threads.py runs it there
fi
if g++ -O1 -g -std=c++17 -fsanitize=thread -pthread -I. kernels/core/*.cc \
    kernels/tests/packed_threads_main.cc -o "$LOG/packed_threads_tsan" \
    2> "$LOG/tsan_build.txt"; then
  if TSAN_OPTIONS=halt_on_error=1 "$LOG/packed_threads_tsan" \
      > "$LOG/tsan.txt" 2>&1 && ! grep -q ThreadSanitizer "$LOG/tsan.txt"; then
    echo "ThreadSanitizer driver (2 and 4 real threads, 3/4/8 lockstep): OK"
  else
    echo "ThreadSanitizer driver FAILED: see $LOG/tsan.txt"
    tail -30 "$LOG/tsan.txt"
  fi
else
  echo "cannot build with -fsanitize=thread: see $LOG/tsan_build.txt"
fi

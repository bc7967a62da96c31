"""The issue's two-worker target: CoCoA+ rounds on 2 local worker processes
(`tf_sdca.distributed.launch.train_local_cluster`, real processes on
loopback) against one process's SDCA epochs (`InMemorySdca`), to the same
relative duality gap, on the Criteo-shaped problem; the rounds with and
without momentum (`shard.Momentum`) and with 1 or S exchanges per pass
(`--exchanges`, the default 16 of `tf_sdca.distributed.train`) in the same
run.

Prints the epochs of one process, then per cluster run: rounds, rounds /
epochs (the target: <= 2), bytes a worker sends per round (the exchange the
cluster chose) and the mean solve / exchange seconds of a round.

  .venv/bin/python bench/bench_cocoa_rounds.py [--rows 262144] [--l2 10]
      [--tol 1e-4] [--max-rounds 600] [--momentum on,off]
      [--exchanges 1,16] [--json out.json]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # pylint: disable=wrong-import-position

from tf_sdca.distributed import launch  # pylint: disable=wrong-import-position
from tf_sdca.trainer import InMemorySdca  # pylint: disable=wrong-import-position


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rows", type=int, default=1 << 18)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--l2", default="10",
                      help="comma-separated l2 values (the CLI's default: 10)")
  parser.add_argument("--tol", type=float, default=1e-4)
  parser.add_argument("--max-rounds", type=int, default=600)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--momentum", default="on,off")
  parser.add_argument("--exchanges", default="1,16",
                      help="comma-separated exchanges per pass (S) to run")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--json", default=None)
  args = parser.parse_args()

  problem = suite.criteo_problem(args.rows, args.bucket_bits, seed=args.seed)
  print(f"{args.rows:,} Criteo-shaped rows, 2^{args.bucket_bits} buckets, "
        f"{problem.dense.shape[1]} dense columns; logistic; relative gap "
        f"{args.tol:g}; {args.workers} local worker processes", flush=True)
  results = []
  for l2 in (float(v) for v in args.l2.split(",")):
    # One process's plain epochs, as the rounds were compared with.
    single = InMemorySdca("logistic", l2=l2, seed=args.seed, momentum=0)
    start = time.perf_counter()
    history = single.fit(problem.labels, dense=problem.dense,
                         ids=problem.ids, num_features=problem.table_size,
                         epochs=args.max_rounds, tol=args.tol, verbose=0)
    epochs = len(history["duality_gap"])
    print(f"\nl2 = {l2:g}: one process {epochs} epochs (gap "
          f"{history['duality_gap'][-1]:.2e}, "
          f"{time.perf_counter() - start:.1f} s)", flush=True)
    print(f"{'momentum':>8} {'S':>3} {'rounds':>7} {'rounds/epochs':>13} "
          f"{'exchange':>9} {'MB/round':>9} {'solve s':>8} {'exch s':>7} "
          f"{'wall s':>7}", flush=True)
    for momentum, parts in ((m, int(s)) for m in args.momentum.split(",")
                            for s in args.exchanges.split(",")):
      with tempfile.TemporaryDirectory() as model_dir:
        out = launch.train_local_cluster(
            args.workers, problem.labels, dense=problem.dense,
            ids=problem.ids, num_features=problem.table_size,
            model_dir=model_dir, loss="logistic", l2=l2, tol=args.tol,
            max_rounds=args.max_rounds, seed=args.seed,
            momentum=momentum == "on", exchanges_per_pass=parts, verbose=0)
      rounds_history = out["history"]
      reached = rounds_history[-1]["duality_gap"] < args.tol
      rounds = len(rounds_history)
      row = dict(
          l2=l2, momentum=momentum, exchanges_per_pass=parts, epochs=epochs,
          rounds=rounds,
          reached=bool(reached), ratio=rounds / epochs,
          exchange=out["exchange"],
          bytes_per_round=float(np.mean([h["bytes_sent"]
                                         for h in rounds_history])),
          solve_seconds=float(np.mean([h["solve_seconds"]
                                       for h in rounds_history])),
          exchange_seconds=float(np.mean([h["exchange_seconds"]
                                          for h in rounds_history])),
          wall_seconds=out["seconds"], last_gap=rounds_history[-1][
              "duality_gap"])
      results.append(row)
      shown = str(rounds) if reached else f">{rounds}"
      print(f"{momentum:>8} {parts:>3} {shown:>7} {row['ratio']:>13.1f} "
            f"{row['exchange']:>9} {row['bytes_per_round'] / 2**20:>9.2f} "
            f"{row['solve_seconds']:>8.3f} {row['exchange_seconds']:>7.3f} "
            f"{row['wall_seconds']:>7.1f}", flush=True)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(args=vars(args), results=results), f)


if __name__ == "__main__":
  main()

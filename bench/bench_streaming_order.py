"""Benchmark: time to a given suboptimality when `SdcaModel` streams the
same consecutive batches every epoch, with and without held rows
(`carry_over`), against one batch of all the rows.

Generated Criteo-shaped rows (as `bench_sdca_model.py`: 13 dense counts
scaled to [0, 1] and 26 hashed categorical ids, logistic, l2 = 1) are cut
into fixed consecutive batches, built once as tensors, and streamed epoch
after epoch through a `tf.function` step (`update_weights(minimize(b))`).
Peers, one after the other in one process on the same rows:

  - one batch of every row (each call a fresh permutation of all rows: the
    order SDCA converges fastest on);
  - the fixed batches plainly (a block-cyclic order);
  - the fixed batches with `carry_over=f` for each f of `--carry-over`
    (shares, or 'auto').

The reference optimum is `InMemorySdca`'s (relative duality gap < 1e-10).
After every epoch each peer's relative suboptimality P(w) / P(w*) - 1 is
printed; then the epochs and seconds each took to reach each of
`--targets`, and the ratios to one batch's.

  python bench/bench_streaming_order.py [--rows 200000]
      [--batch-size 10000] [--epochs 20] [--carry-over 0.5,0.75,auto]
      [--targets 1e-2,1e-3]
"""
import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
import bench_sdca_model  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_sdca.trainer import InMemorySdca  # pylint: disable=g-import-not-at-top,wrong-import-position


def curve(batches, table, data, best, carry_over, epochs):
  """(seconds, relative suboptimality) after each epoch of one peer."""
  labels, dense, ids = data
  peer = bench_sdca_model.GraphPeer(table, carry_over=carry_over)
  peer.trace([batches[0], batches[-1]])
  out, seconds = [], 0.0
  for _ in range(epochs):
    start = time.perf_counter()
    for b in batches:
      peer.step(b)
    seconds += time.perf_counter() - start
    value = bench_sdca_model.objective(peer, labels, dense, ids)
    out.append((seconds, (value - best) / best))
  return out


def reached(points, target):
  """(epochs, seconds) of the first epoch at or below `target`, or None."""
  for epoch, (seconds, sub) in enumerate(points, 1):
    if sub <= target:
      return epoch, seconds
  return None


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=200_000)
  parser.add_argument("--batch-size", type=int, default=10_000)
  parser.add_argument("--epochs", type=int, default=20)
  parser.add_argument("--bucket-bits", type=int, default=18)
  parser.add_argument("--carry-over", default="0.5,0.75,auto",
                      help="comma-separated carry_over values: shares in "
                      "[0, 1) or 'auto'")
  parser.add_argument("--targets", default="1e-2,1e-3")
  args = parser.parse_args()
  shares = [f if f == "auto" else float(f)
            for f in args.carry_over.split(",") if f]
  targets = [float(t) for t in args.targets.split(",") if t]

  labels, dense, ids, table, batches = bench_sdca_model.prepare(
      args.rows, args.batch_size, args.bucket_bits)
  _, _, _, _, whole = bench_sdca_model.prepare(args.rows, args.rows,
                                                args.bucket_bits)
  reference = InMemorySdca(loss="logistic", l2=bench_sdca_model.L2)
  history = reference.fit(labels.astype(np.float64),
                          dense=dense.astype(np.float64), ids=ids,
                          num_features=table, epochs=500, tol=1e-10,
                          verbose=0)
  best = float(history["loss"][-1])
  print(f"{args.rows:,} Criteo-shaped rows in {len(batches)} fixed batches "
        f"of {args.batch_size:,}; logistic, l2 = {bench_sdca_model.L2}; "
        f"P(w*)/n = {best:.10f} (InMemorySdca, {len(history['loss'])} "
        f"epochs, gap {history['duality_gap'][-1]:.1e})")
  data = (labels, dense, ids)
  peers = [("one batch", whole, 0.0), ("fixed batches", batches, 0.0)]
  peers += [(f"fixed batches, carry_over={f}", batches, f) for f in shares]
  curves = {}
  print("\nrelative suboptimality after each epoch:")
  for name, stream, share in peers:
    curves[name] = curve(stream, table, data, best, share, args.epochs)
    print(f"  {name:34s}" + " ".join(f"{sub:.1e}" for _, sub in curves[name]))
  print("\nepochs / seconds to each target (ratio to one batch's seconds):")
  base = curves["one batch"]
  for target in targets:
    first = reached(base, target)
    print(f"  {target:.0e}:")
    for name, _, _ in peers:
      got = reached(curves[name], target)
      if got is None:
        print(f"    {name:34s}not within {args.epochs} epochs")
        continue
      ratio = f" ({got[1] / first[1]:.2f}x)" if first else ""
      print(f"    {name:34s}{got[0]:3d} epochs {got[1]:7.1f} s{ratio}")


if __name__ == "__main__":
  main()

"""CoCoA+ (adding, sigma = K) against CoCoA (averaging, sigma = 1) for K
shards of the Criteo-shaped problem, simulated in one process on the real
engine (`tf_sdca.distributed.simulation`: every shard packed once, one
`TfSdca>PackedSolve` per shard and exchange; `--exchanges` S per pass).

Prints, per K: rows per shard, rounds to a relative duality gap of `--tol`
for each method (`--methods`: "add" CoCoA+, "average" CoCoA, a "+m" suffix
with momentum, `shard.Momentum`, as `tf_sdca.distributed.train` runs by
default), the table rows a shard touches, and the bytes each worker would
send per round for the three exchanges (dense all-reduce of the table,
all-reduce of the rows some shard touches, all-gather of each shard's own
touched rows) and, with S > 1, for the all-gather of each part's changed
entries as (position, value) pairs (what the workers send; mean over the
rounds). `--touched-rows` also counts the distinct table rows of
larger streams of generated rows (for the projection to bigger shards).

  .venv/bin/python bench/simulate_cocoa.py [--rows 262144] [--l2 10]
      [--shards 1,2,4,...,1024] [--max-rounds 300] [--passes 1]
      [--exchanges 16] [--methods add+m,add,average]
      [--json out.json] [--svg g3doc/img/cocoa_rounds.svg]
"""
import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import suite  # pylint: disable=wrong-import-position

from tf_sdca.distributed import simulation  # pylint: disable=wrong-import-position


def _shards(text):
  return [int(k) for k in text.split(",")]


_NAMES = {"add": "CoCoA+", "average": "CoCoA"}


def _label(method):
  combine, _, momentum = method.partition("+")
  return _NAMES[combine] + (" mom." if momentum else "")


def run_one(data, num_features, num_shards, method, args, l2):
  combine, _, momentum = method.partition("+")
  sim = simulation.Simulation(data, num_shards, num_features=num_features,
                              combine=combine, num_passes=args.passes,
                              loss="logistic", l2=l2, seed=args.seed,
                              momentum=momentum == "m",
                              exchanges_per_pass=args.exchanges)
  history = sim.run(tol=args.tol, max_rounds=args.max_rounds)
  touched = [s.touched.size for s in sim.shards]
  return dict(K=num_shards, combine=combine, method=method, l2=l2, rounds=history["rounds"],
              last_gap=history["gap"][-1], gaps=history["gap"],
              seconds=history["seconds"], rows_per_shard=data[
                  "labels"].shape[0] / num_shards,
              touched_mean=float(np.mean(touched)),
              touched_max=int(np.max(touched)), union=int(
                  sim.table_ids.size), bytes=sim.bytes_per_round(),
              pairs_bytes=float(np.mean(sim.gathered_bytes or [0.0])))


def touched_counts(row_counts, bucket_bits, seed):
  """Distinct table rows among the first r generated rows, for each r."""
  from tf_sdca.data import synthetic  # pylint: disable=import-outside-toplevel
  seen = np.zeros(1 << bucket_bits, bool)
  out, done = {}, 0
  targets = sorted(row_counts)
  for chunk in synthetic.iter_criteo_chunks(targets[-1], 1 << bucket_bits,
                                            seed=seed):
    ids = chunk["cat_ids"]
    for r in targets:
      if done < r <= done + ids.shape[0]:
        seen_r = seen.copy()
        seen_r[ids[:r - done].ravel()] = True
        out[r] = int(seen_r.sum())
    seen[ids.ravel()] = True
    done += ids.shape[0]
  return out


def _fmt_rounds(result):
  if result["rounds"] is not None:
    return str(result["rounds"])
  return f">{len(result['gaps'])} ({result['last_gap']:.0e})"


def write_svg(path, results, title):
  """Rounds to the tolerance against K (log2 axis), one line per (combine,
  l2); capped runs drawn at the cap with an open marker. Plain SVG, no
  plotting library."""
  width, height, margin = 640, 400, 60
  ks = sorted({r["K"] for r in results})
  top = max(len(r["gaps"]) for r in results)
  xmax = np.log2(max(ks)) or 1.0
  ymax = np.log10(max(top, 10))

  def xy(k, rounds):
    x = margin + (width - 2 * margin) * np.log2(k) / xmax
    y = height - margin - (height - 2 * margin) * np.log10(max(rounds, 1)) / ymax
    return x, y

  colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"]
  parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" '
           f'height="{height}" font-family="sans-serif" font-size="12">',
           f'<rect width="{width}" height="{height}" fill="white"/>',
           f'<text x="{width / 2}" y="20" text-anchor="middle">{title}</text>']
  for k in ks:
    x, _ = xy(k, 1)
    parts.append(f'<text x="{x:.0f}" y="{height - margin + 18}" '
                 f'text-anchor="middle">{k}</text>')
  for decade in range(int(ymax) + 1):
    _, y = xy(1, 10 ** decade)
    parts.append(f'<line x1="{margin}" x2="{width - margin}" y1="{y:.0f}" '
                 f'y2="{y:.0f}" stroke="#ddd"/><text x="{margin - 8}" '
                 f'y="{y + 4:.0f}" text-anchor="end">{10 ** decade}</text>')
  parts.append(f'<text x="{width / 2}" y="{height - 15}" '
               'text-anchor="middle">shards K</text>')
  parts.append(f'<text x="15" y="{height / 2}" transform="rotate(-90 15 '
               f'{height / 2})" text-anchor="middle">rounds to the gap</text>')
  series = sorted({(r["method"], r["l2"]) for r in results})
  for i, (method, l2) in enumerate(series):
    color = colors[i % len(colors)]
    points = sorted((r["K"], r["rounds"] or len(r["gaps"]), r["rounds"])
                    for r in results if (r["method"], r["l2"]) == (method,
                                                                   l2))
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in
                    (xy(k, rounds) for k, rounds, _ in points))
    parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" '
                 'stroke-width="2"/>')
    for k, rounds, reached in points:
      x, y = xy(k, rounds)
      fill = color if reached is not None else "white"
      parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{fill}" '
                   f'stroke="{color}"/>')
    name = _label(method) + f", l2={l2:g}"
    parts.append(f'<text x="{margin + 10}" y="{margin + 16 * i}" '
                 f'fill="{color}">{name}</text>')
  parts.append("</svg>")
  with open(path, "w") as f:
    f.write("\n".join(parts) + "\n")


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rows", type=int, default=1 << 18)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--l2", default="10",
                      help="comma-separated l2 values (objective "
                      "sum_i loss_i + l2/2 |w|^2)")
  parser.add_argument("--shards", type=_shards,
                      default=[1 << i for i in range(11)])
  parser.add_argument("--methods", default="add+m,add,average",
                      help="comma-separated: add (CoCoA+, sigma = K), "
                      "average (CoCoA), with +m: with momentum")
  parser.add_argument("--tol", type=float, default=1e-4)
  parser.add_argument("--max-rounds", type=int, default=300)
  parser.add_argument("--passes", type=int, default=1,
                      help="local SDCA passes per round (H)")
  parser.add_argument("--exchanges", type=int,
                      default=simulation.shard_lib.EXCHANGES_PER_PASS,
                      help="exchanges per local pass (S; 1: CoCoA+ as "
                      "published, one a round)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--touched-rows", type=_shards, default=[],
                      help="also count distinct table rows in this many "
                      "generated rows (e.g. 1000000,4000000)")
  parser.add_argument("--json", default=None)
  parser.add_argument("--svg", default=None)
  args = parser.parse_args()

  start = time.perf_counter()
  problem = suite.criteo_problem(args.rows, args.bucket_bits, seed=args.seed)
  data = dict(labels=problem.labels, dense=problem.dense, ids=problem.ids)
  print(f"{args.rows:,} Criteo-shaped rows, 2^{args.bucket_bits} buckets "
        f"(+{problem.table_size - (1 << args.bucket_bits)} spare), "
        f"{problem.dense.shape[1]} dense columns (intercept included); "
        f"logistic; tol {args.tol:g}; H = {args.passes}, S = "
        f"{args.exchanges}; generated in "
        f"{time.perf_counter() - start:.1f} s", flush=True)
  results = []
  for l2 in (float(v) for v in args.l2.split(",")):
    print(f"\nl2 = {l2:g}")
    methods = args.methods.split(",")
    print(f"{'K':>5} {'rows/shard':>10} " +
          "".join(f"{_label(m):>14} " for m in methods) +
          f"{'touched':>8} {'union':>8} {'dense MB':>9} {'union MB':>9} "
          f"{'gather MB':>9} {'pairs MB':>9} {'s/round':>8}", flush=True)
    for k in args.shards:
      row = {}
      for method in methods:
        same = method.replace("average", "add")
        if k == 1 and same != method and same in row:
          row[method] = row[same]  # one shard: adding is averaging
          continue
        row[method] = run_one(data, problem.table_size, k, method, args, l2)
        results.append(row[method])
      first = next(iter(row.values()))
      mb = {key: value / 2**20 for key, value in first["bytes"].items()}
      per_round = first["seconds"] / max(1, len(first["gaps"]))
      print(f"{k:>5} {first['rows_per_shard']:>10,.0f} "
            + "".join(f"{_fmt_rounds(row[m]):>14} " for m in methods) +
            f"{first['touched_mean']:>8,.0f} {first['union']:>8,} "
            f"{mb['dense']:>9.2f} {mb['union']:>9.2f} {mb['gather']:>9.2f} "
            f"{first['pairs_bytes'] / 2**20:>9.2f} "
            f"{per_round:>8.3f}", flush=True)
  if args.touched_rows:
    print("\ndistinct table rows touched by r generated rows:")
    for r, count in sorted(touched_counts(args.touched_rows,
                                          args.bucket_bits,
                                          args.seed).items()):
      print(f"  r = {r:>11,}: {count:>9,} of {1 << args.bucket_bits:,} "
            f"({count / (1 << args.bucket_bits):.1%})")
  print(f"\ntotal {time.perf_counter() - start:.0f} s")
  if args.json:
    with open(args.json, "w") as f:
      json.dump(dict(args=vars(args), results=results), f)
  if args.svg:
    write_svg(args.svg, results, f"Rounds to a relative gap of {args.tol:g}, "
              f"{args.rows:,} Criteo-shaped rows")


if __name__ == "__main__":
  main()

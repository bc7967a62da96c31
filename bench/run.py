"""Runs the linear-solver suite (bench/suite.py) and prints, per problem, the
time each solver needs to reach a relative suboptimality of 1e-4 and 1e-6.

  python bench/run.py [--rows 1000000] [--problems criteo,dense,breast_cancer,digits]
                      [--solvers ours,ours-sdcamodel,ours-keras,tf,snapml,snapml2,liblinear,saga,sgd]
                      [--budget 60] [--ref-budget 900] [--plots g3doc/img]
                      [--no-refine] [--scaling 1000000,4000000,16000000]

All solvers run in this one process on the same data, one after the other
(each with `--budget` seconds of training on the grid, and up to as much
again bisecting below the grid's first size that reached each target:
`suite.refine`); the table gives their times and the ratio to ours (the
first solver). Snap ML is optional
(`pip install -r bench/requirements.txt`). `--scaling` instead times our
op's epochs on Criteo-shaped data of the given sizes with 1 and 2 threads.
"""
import argparse
import json
import os
import platform
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import suite  # pylint: disable=g-import-not-at-top,wrong-import-position

TARGETS = (1e-4, 1e-6)


def make_problem(name, rows):
  if name == "criteo":
    return suite.criteo_problem(rows)
  if name == "dense":
    return suite.dense_problem(max(1000, rows // 5))
  return suite.sklearn_problem(name)


def fmt_time(seconds):
  return "-" if seconds is None else f"{seconds:9.2f}"


def report(problem, reference, certified, traces):
  """Prints the table; returns its rows as dicts."""
  print(f"\n{problem.name}: n = {problem.n:,}, {problem.nnz_per_row} "
        f"non-zeros per row, l2 = {problem.l2:g}; P* = {reference:.10g} "
        f"(certified to {certified:.1e} relative)")
  ours = {t: traces[0].time_to(reference, t)[0] for t in TARGETS}
  header = (f"{'solver':22s}{'t(1e-4) s':>11s}{'t(1e-6) s':>11s}"
            f"{'epochs':>8s}{'rows/s':>12s}{'best subopt':>13s}"
            f"{'vs ours 1e-4':>14s}{'vs ours 1e-6':>14s}")
  print(header)
  rows = []
  for trace in traces:
    if not trace.points:
      print(f"{trace.solver:22s}  {trace.note}")
      continue
    times = {t: trace.time_to(reference, t) for t in TARGETS}
    seconds, epochs, _ = trace.points[-1]
    # A ladder solver's iteration limit is only an upper bound on the
    # epochs it ran, so its throughput is not known.
    rate = (float("nan") if trace.ladder or seconds <= 0 else
            problem.n * epochs / seconds)
    best = min(p[2] for p in trace.points)
    ratios = []
    for t in TARGETS:
      mine, theirs = ours[t], times[t][0]
      ratios.append("-" if mine is None or theirs is None else
                    f"{theirs / mine:.2f}x")
    epochs_to = times[1e-4][1]
    print(f"{trace.solver:22s}{fmt_time(times[1e-4][0]):>11s}"
          f"{fmt_time(times[1e-6][0]):>11s}"
          f"{'-' if epochs_to is None else f'{epochs_to:g}':>8s}"
          f"{'-' if rate != rate else f'{rate:,.0f}':>12s}"
          f"{(best - reference) / reference:13.1e}"
          f"{ratios[0]:>14s}{ratios[1]:>14s}")
    rows.append(dict(solver=trace.solver, points=trace.points,
                     t_1e4=times[1e-4][0], t_1e6=times[1e-6][0],
                     rows_per_sec=rate))
  print("(t: wall seconds of a fresh fit, from the call to the returned "
        "weights, of the fewest epochs that reached the suboptimality: the "
        f"grid {', '.join(map(str, suite.GRID[:8]))}, ..., then bisected "
        "between its last miss and first hit for every solver alike "
        "(not with --no-refine); '-': not within the budget; 'vs ours': the "
        "solver's "
        "time / ours; Snap ML does not report its epochs: the grid size is "
        "an upper bound, and rows/s unknown)")
  for trace in traces:
    b = trace.breakdown
    if b:
      print(f"  {trace.solver}, its last fit ({b['epochs']} epochs, "
            f"{b['seconds']:.2f} s): packing {b['packing']:.2f} s, epochs "
            f"{b['solve']:.2f} s, exact gap + Python "
            f"{b['gap_and_python']:.2f} s")
  return rows


def plot(problem, reference, rows, directory):
  import matplotlib  # pylint: disable=import-outside-toplevel
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt  # pylint: disable=import-outside-toplevel
  fig, ax = plt.subplots(figsize=(7, 4.5))
  for row in rows:
    pts = sorted(row["points"])
    xs = [p[0] for p in pts]
    ys = [max((p[2] - reference) / reference, 1e-12) for p in pts]
    ax.plot(xs, ys, marker=".", label=row["solver"])
  ax.set_xscale("log")
  ax.set_yscale("log")
  ax.set_xlabel("training seconds")
  ax.set_ylabel("relative suboptimality (P - P*) / P*")
  ax.set_title(f"{problem.name}, logistic, l2 = {problem.l2:g}")
  for t in TARGETS:
    ax.axhline(t, color="grey", lw=0.5, ls="--")
  ax.legend(fontsize=8)
  fig.tight_layout()
  os.makedirs(directory, exist_ok=True)
  path = os.path.join(directory, f"bench_{problem.name}.png")
  fig.savefig(path, dpi=110)
  plt.close(fig)
  return path


def scaling(sizes, budget_epochs=3):
  """Our op's seconds per epoch on Criteo-shaped data, 1 and 2 threads (the
  best of `budget_epochs` epochs: the first one also packs the rows)."""
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  print(f"\n{'rows':>12s}{'threads':>9s}{'s/epoch':>10s}{'rows/s':>12s}"
        f"{'s/epoch per 1M rows':>22s}")
  for rows in sizes:
    problem = suite.criteo_problem(rows)
    for threads in (1, 2):
      model = InMemorySdca(loss="logistic_loss", l2=problem.l2,
                           num_threads=threads)
      history = model.fit(problem.labels, dense=problem.dense,
                          ids=problem.ids, num_features=problem.table_size,
                          epochs=budget_epochs, verbose=0)
      rate = max(history["rows_per_sec"])
      print(f"{rows:12,d}{threads:9d}{rows / rate:10.2f}{rate:12,.0f}"
            f"{1e6 / rate:22.3f}", flush=True)
    del problem


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--problems",
                      default="criteo,dense,breast_cancer,digits")
  parser.add_argument("--solvers", default=",".join(suite.SOLVERS))
  parser.add_argument("--budget", type=float, default=60.0,
                      help="training seconds per solver and problem")
  parser.add_argument("--ref-budget", type=float, default=900.0)
  parser.add_argument("--no-refine", dest="refine", action="store_false",
                      help="charge each solver the grid's first size that "
                      "reaches a target, without bisecting below it")
  parser.add_argument("--threads", type=int, default=1,
                      help="threads of the 'snapml' peer ('snapml2' uses 2; "
                      "ours: one shard)")
  parser.add_argument("--plots", default=None,
                      help="directory for suboptimality-vs-time PNGs")
  parser.add_argument("--json", default=None, help="write all traces here")
  parser.add_argument("--scaling", default=None,
                      help="comma-separated row counts: scaling run only")
  args = parser.parse_args()
  if args.plots:
    try:  # before the runs: not after minutes of them
      import matplotlib  # pylint: disable=import-outside-toplevel,unused-import
    except ImportError:
      parser.error("--plots needs matplotlib (pip install matplotlib; it is "
                   "in bench/requirements.txt)")
  print(f"python {platform.python_version()}, {os.cpu_count()} cores, "
        f"{time.strftime('%Y-%m-%d %H:%M')}")
  if args.scaling:
    scaling([int(float(r)) for r in args.scaling.split(",")])
    return 0
  results = {}
  for name in args.problems.split(","):
    t0 = time.perf_counter()
    problem = make_problem(name, args.rows)
    reference, certified = suite.reference_optimum(problem, args.ref_budget)
    print(f"[{name}: data {time.perf_counter() - t0:.0f} s incl. reference]",
          flush=True)
    traces = []
    for solver in args.solvers.split(","):
      run = suite.SOLVERS[solver]
      kwargs = {"threads": args.threads} if solver == "snapml" else {}
      trace = run(problem, args.budget, **kwargs)
      if args.refine:
        suite.refine(trace, reference, TARGETS, args.budget)
      traces.append(trace)
      # The best objective any solver reached bounds P* from above too.
      reference = min([reference] + [p[2] for p in trace.points])
      print(f"  {trace.solver}: {len(trace.points)} points", flush=True)
    rows = report(problem, reference, certified, traces)
    if args.plots:
      print("plot:", plot(problem, reference, rows, args.plots))
    results[problem.name] = dict(reference=reference, certified=certified,
                                 rows=rows)
  if args.json:
    with open(args.json, "w") as f:
      json.dump(results, f, indent=1)
  return 0


if __name__ == "__main__":
  sys.exit(main())

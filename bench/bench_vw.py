"""Benchmark: `tf-sdca train` against Vowpal Wabbit on Criteo-shaped TSV.

  python bench/bench_vw.py [--rows 1000000] [--passes 1,2,3,5,8]
                           [--learning-rates 0.3,0.5,1]
                           [--epochs 1,2,3,5,8] [--l2 10,30] [--threads 1,2]
                           [--dir /tmp/tf_sdca_bench_vw] [--keep] [--json F]

Needs `pip install vowpalwabbit==9.11.9` (bench/requirements.txt; never a
dependency of tf_sdca). Generates `--rows` Criteo-shaped rows with known
ground truth as 10 TSV files (`tf-sdca generate`): the first 9 train, the
last is held out. Then:

  1. converts the TSV files to VW's text format (timed on its own, not
     counted in VW's times): `label |n I1:log1p(c1) ... |c C1=tok ...`,
     the 13 log counts in one namespace (zeros and missing counts left out,
     as ours has them 0) and the 26 categorical tokens, each prefixed with
     its field, in another (a missing token is its field's own feature, as
     in ours); labels -1 / 1;
  2. runs VW over the grid of passes x learning rates, each a fresh process
     that drives VW's own C++ parser over the file
     (`vowpalwabbit.Workspace(arg_list=['-d', FILE, '--loss_function',
     'logistic', '-b', '20', '--passes', P, '-l', LR, '--holdout_off',
     '-f', MODEL])`, with a fresh cache file `-c -k` for P > 1), timed wall
     clock from the process's start to its exit (start-up, parsing, the
     cache and writing the model included);
  3. runs `tf-sdca train TRAIN_FILES --bucket-bits 20 --threads T --epochs
     E --tol 0 --l2 L --quiet` over the grid of epochs x l2 x threads, each
     a fresh
     process into a fresh model directory, timed the same way (start-up
     importing TensorFlow, parsing the text into the cache, packing, the
     epochs with their exact duality gap, checkpoints); the two tools'
     runs alternate, one of each in turn;
  4. scores the held-out file with each model (not timed) and prints every
     run's held-out log loss, wall and CPU seconds (user + system, all its
     threads) and peak RSS (VmHWM), then each tool's best held-out log
     loss, the time each tool needs to reach the other's best (its fastest
     run that does) and the ratio ours / VW, in wall and in CPU seconds,
     and where the time of ours' run to VW's best went (its start-up timed
     inside the process, to where `train` first imports the cache module:
     its first pass starts there, TensorFlow being imported beside it).

Both use 2^20 hash buckets (VW's one table for both namespaces; ours 2^20
buckets for the tokens plus 14 dense weights). Both use two cores: VW
parses in a thread of its own beside the learner; ours trains on
`--threads` T: with 1 (the default) each epoch's exact gap is evaluated on
the second core while the next epoch trains, with 2 two lock-free threads
train and the gap follows each epoch; the grid takes both.
"""
import argparse
import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time

import numpy as np

_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# A child process's own peak RSS (VmHWM, printed on exit: getrusage's
# ru_maxrss survives exec, and would count the parent's memory when the
# parent holds more).
PEAK = """
def _peak():
  with open("/proc/self/status") as f:
    kb = [l.split()[1] for l in f if l.startswith("VmHWM")]
  print("PEAK_RSS_KB", kb[0] if kb else "nan", file=sys.stderr, flush=True)
"""
# `tf-sdca ARGS` run in this process (after PEAK), its peak printed however
# it ends: the command ends its process itself with os._exit.
TF_SDCA_MAIN = """
import os, runpy
_exit = os._exit
def _peak_then_exit(status):
  _peak()
  _exit(status)
os._exit = _peak_then_exit
sys.argv = ["tf-sdca"] + sys.argv[1:]
try:
  runpy.run_module("tf_sdca.cli", run_name="__main__")
finally:
  _peak()
"""
# Ours' start-up ends where `train` first imports tf_sdca.data.cache (after
# the checks of its arguments, before reading: TensorFlow and the op are
# loaded beside the first pass, `cache.load_or_build`'s `alongside`).
_OURS = """import importlib.abc, sys, time""" + PEAK + """
_START = time.perf_counter()
class _Clock(importlib.abc.MetaPathFinder):
  def find_spec(self, name, path, target=None):
    if name == "tf_sdca.data.cache":
      print("STARTED", time.perf_counter() - _START, time.process_time(),
            file=sys.stderr)
      sys.meta_path.remove(self)
sys.meta_path.insert(0, _Clock())
""" + TF_SDCA_MAIN
_VW = """import sys""" + PEAK + """
import vowpalwabbit
vowpalwabbit.Workspace(arg_list=sys.argv[1:]).finish()
_peak()
"""
# TensorFlow and the op as `train --quiet` loads them.
_STARTUP = """
from tf_sdca import tensorflow_import
tensorflow_import.import_tensorflow_lazily()
from tf_sdca.ops import load_ops
load_ops()
"""

NUM_INTEGER = 13
NUM_CATEGORICAL = 26


def _floats(text):
  return [float(x) for x in text.split(",") if x]


def _ints(text):
  return [int(x) for x in text.split(",") if x]


def _env():
  env = dict(os.environ)
  env["PYTHONPATH"] = os.pathsep.join(
      [os.path.abspath(_ROOT)] + [p for p in [env.get("PYTHONPATH")] if p])
  env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  return env


def _cpu_of_children():
  usage = resource.getrusage(resource.RUSAGE_CHILDREN)
  return usage.ru_utime + usage.ru_stime


def _run(code, args, cpu=None):
  """Runs `python -c CODE ARGS` in a new process: (wall seconds, stdout,
  its own peak RSS in MiB); `cpu` (a list) gets its CPU seconds (user +
  system, all its threads: what the machine's load does not stretch)."""
  start, cpu_start = time.perf_counter(), _cpu_of_children()
  done = subprocess.run([sys.executable, "-c", code] + [str(a) for a in args],
                        capture_output=True, text=True, check=False,
                        env=_env())
  seconds = time.perf_counter() - start
  if cpu is not None:
    cpu.append(_cpu_of_children() - cpu_start)
  if done.returncode:
    sys.exit(f"{args[:1]} failed:\n{done.stderr[-3000:]}")
  peak = [float(line.split()[1]) for line in done.stderr.splitlines()
          if line.startswith("PEAK_RSS_KB")]
  started = [[float(x) for x in line.split()[1:]] for line in
             done.stderr.splitlines() if line.startswith("STARTED")]
  if cpu is not None and started:
    cpu.append(started[0])
  return seconds, done.stdout, (peak[-1] / 1024 if peak else float("nan"))


def tsv_to_vw(paths, out):
  """Writes the Criteo TSV files as one VW text file; returns its rows."""
  counts = [f"I{j}:" for j in range(1, NUM_INTEGER + 1)]
  tokens = [f"C{j}=" for j in range(1, NUM_CATEGORICAL + 1)]
  log1p = math.log1p
  rows = 0
  with open(out, "w", encoding="ascii") as sink:
    for path in paths:
      with open(path, encoding="ascii") as source:
        lines = []
        for line in source:
          fields = line.rstrip("\n").split("\t")
          # Criteo's counts are integers; ours clips negatives to 0 and a
          # 0 (or missing) count is no feature.
          numeric = " ".join([
              f"{counts[j]}{log1p(int(v)):.7g}"
              for j, v in enumerate(fields[1:1 + NUM_INTEGER])
              if v and v[0] != "-" and v != "0"])
          categorical = " ".join(
              [t + v for t, v in zip(tokens, fields[1 + NUM_INTEGER:])])
          lines.append(("1 |n " if fields[0] == "1" else "-1 |n ") +
                       numeric + " |c " + categorical)
          if len(lines) == 65536:
            sink.write("\n".join(lines) + "\n")
            rows += len(lines)
            lines = []
        if lines:
          sink.write("\n".join(lines) + "\n")
          rows += len(lines)
  return rows


def log_loss(labels, p):
  p = np.clip(np.asarray(p, np.float64), 1e-15, 1 - 1e-15)
  return float(-np.mean(labels * np.log(p) + (1 - labels) * np.log1p(-p)))


def vw_fit(train_vw, model, passes, rate, work):
  args = ["-d", train_vw, "--loss_function", "logistic", "-b", "20",
          "--passes", passes, "-l", rate, "--holdout_off", "-f", model,
          "--quiet"]
  if passes > 1:
    args += ["-c", "-k", "--cache_file", os.path.join(work, "vw.cache")]
  cpu = []
  return _run(_VW, args, cpu) + (cpu[0],)


def vw_scores(test_vw, model, work):
  import vowpalwabbit  # pylint: disable=import-outside-toplevel
  out = os.path.join(work, "predictions.txt")
  vowpalwabbit.Workspace(arg_list=[
      "-d", test_vw, "-t", "-i", model, "-p", out, "--link", "logistic",
      "--quiet"]).finish()
  return np.loadtxt(out, ndmin=1)


def ours_fit(train, model_dir, epochs, l2, threads):
  shutil.rmtree(model_dir, ignore_errors=True)
  cpu = []
  return _run(_OURS, ["train", *train, "--model-dir", model_dir,
                      "--bucket-bits", 20, "--threads", threads, "--epochs",
                      epochs, "--tol", 0, "--l2", l2, "--quiet"],
              cpu) + tuple(cpu)


def ours_scores(test, model_dir):
  if "tensorflow" not in sys.modules:  # its start-up banners, to /dev/null
    saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
      import tensorflow  # pylint: disable=import-outside-toplevel,unused-import
    finally:
      os.dup2(saved, 2)
      os.close(saved)
      os.close(devnull)
  from tf_sdca import commands  # pylint: disable=import-outside-toplevel
  _, _, scores = commands.score_files(argparse.Namespace(
      data=[test], model_dir=model_dir, format=None, skip_bad_lines=False))
  return scores


def ours_phases(model_dir):
  """(parse + cache seconds, the epochs' seconds, epochs) of a model."""
  with open(os.path.join(model_dir, "model.json"), encoding="utf-8") as f:
    meta = json.load(f)
  with open(os.path.join(model_dir, "cache", "manifest.json"),
            encoding="utf-8") as f:
    parse = json.load(f)["parse_seconds"]
  epochs = sum(meta["rows"] / h["rows_per_sec"] for h in meta["history"])
  return parse, epochs, meta["history"]


def time_to(runs, target):
  """The fastest run with held-out log loss <= target, or None."""
  reached = [r for r in runs if r["log_loss"] <= target]
  return min(reached, key=lambda r: r["seconds"]) if reached else None


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--passes", type=_ints, default=[1, 2, 3, 5, 8])
  parser.add_argument("--learning-rates", type=_floats,
                      default=[0.3, 0.5, 1.0])
  parser.add_argument("--epochs", type=_ints, default=[1, 2, 3, 5, 8])
  parser.add_argument("--l2", type=_floats, default=[10.0, 30.0])
  parser.add_argument("--threads", type=_ints, default=[1, 2],
                      help="ours' training threads (a grid, as VW's "
                      "learning rates)")
  parser.add_argument("--startup-repeats", type=int, default=3)
  parser.add_argument("--dir", default="/tmp/tf_sdca_bench_vw")
  parser.add_argument("--json", default=None, help="write the runs here")
  parser.add_argument("--keep", action="store_true",
                      help="keep the generated and converted files (a "
                      "later run with --keep reuses them)")
  args = parser.parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  data_dir = os.path.join(args.dir, f"data-{args.rows}")
  work = os.path.join(args.dir, "work")
  os.makedirs(work, exist_ok=True)
  if not os.path.exists(os.path.join(data_dir, "truth.npy")):
    seconds, _, _ = _run(_OURS, ["generate", "--rows", args.rows, "--out",
                                 data_dir, "--files", 10])
    print(f"generated {args.rows:,} rows in {seconds:.0f} s")
  files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                 if f.endswith(".tsv"))
  train, test = files[:-1], files[-1]
  train_vw, test_vw = (os.path.join(work, "train.vw"),
                       os.path.join(work, "test.vw"))
  converted = os.path.join(work, "converted.json")
  if os.path.exists(converted):  # kept by an earlier run's --keep
    with open(converted, encoding="utf-8") as f:
      train_rows, test_rows, convert_seconds = json.load(f)
    print("TSV -> VW text: kept from an earlier run, which took "
          f"{convert_seconds:.1f} s for {train_rows:,} training rows")
  else:
    start = time.perf_counter()
    train_rows = tsv_to_vw(train, train_vw)
    convert_seconds = time.perf_counter() - start
    test_rows = tsv_to_vw([test], test_vw)
    print(f"TSV -> VW text: {train_rows:,} training rows in "
          f"{convert_seconds:.1f} s (Python; not counted in VW's times); "
          f"{test_rows:,} held out")
    if args.keep:
      with open(converted, "w", encoding="utf-8") as f:
        json.dump([train_rows, test_rows, convert_seconds], f)
  labels = np.array([line.startswith("1 ") for line in
                     open(test_vw, encoding="ascii")], np.float64)
  truth = np.load(os.path.join(data_dir, "truth.npy"))[-test_rows:]
  base = labels.mean()

  startup, startup_cpu, vw_startup = [], [], []
  for _ in range(args.startup_repeats):
    startup.append(_run(_STARTUP, [], startup_cpu)[0])
    vw_startup.append(_run("import vowpalwabbit", [])[0])

  startup_median = float(np.median(startup)) if startup else float("nan")
  runs = []
  print(f"\n{'tool':6s}{'setting':>12s}{'k':>4s}{'seconds':>9s}"
        f"{'CPU s':>8s}{'peak RSS MB':>13s}{'held-out log loss':>19s}")

  def record(run):
    runs.append(run)
    print(f"{run['tool']:6s}{run['setting']:>12s}{run['k']:4d}"
          f"{run['seconds']:9.2f}{run['cpu_seconds']:8.2f}"
          f"{run['rss_mb']:13.0f}"
          f"{run['log_loss']:19.5f}", flush=True)

  model = os.path.join(work, "model.vw")
  model_dir = os.path.join(work, "ours")

  def vw_job(rate, passes):
    seconds, _, rss, cpu = vw_fit(train_vw, model, passes, rate, work)
    record(dict(tool="vw", setting=f"l={rate:g}", k=passes,
                seconds=seconds, cpu_seconds=cpu, rss_mb=rss,
                log_loss=log_loss(labels, vw_scores(test_vw, model, work))))

  def ours_job(l2, epochs, threads):
    seconds, _, rss, cpu, started = ours_fit(train, model_dir, epochs, l2,
                                             threads)
    parse, epoch_seconds, history = ours_phases(model_dir)
    record(dict(tool="ours", setting=f"l2={l2:g},t={threads}", k=epochs,
                seconds=seconds, cpu_seconds=cpu, rss_mb=rss,
                startup_seconds=started[0], startup_cpu_seconds=started[1], parse_seconds=parse,
                epoch_seconds=epoch_seconds,
                duality_gap=history[-1]["duality_gap"],
                log_loss=log_loss(labels, ours_scores(test, model_dir))))

  # The two tools' runs alternate, so that a change in the machine's load
  # falls on both.
  jobs = [[(vw_job, (rate, passes)) for rate in args.learning_rates
           for passes in args.passes],
          [(ours_job, (l2, epochs, threads)) for l2 in args.l2
           for threads in args.threads for epochs in args.epochs]]
  for i in range(max(len(j) for j in jobs)):
    for queue in jobs:
      if i < len(queue):
        queue[i][0](*queue[i][1])
  shutil.rmtree(model_dir, ignore_errors=True)

  ours = [r for r in runs if r["tool"] == "ours"]
  vw = [r for r in runs if r["tool"] == "vw"]
  best = {name: min(group, key=lambda r: (r["log_loss"], r["seconds"]))
          for name, group in (("ours", ours), ("vw", vw))}
  print(f"\n{train_rows:,} training rows, {test_rows:,} held out; base rate "
        f"{log_loss(labels, np.full_like(labels, base)):.5f}, ground truth "
        f"{log_loss(labels, truth):.5f} held-out log loss")
  if startup:
    print(f"start-up alone (median of {len(startup)}): importing TensorFlow "
          f"as `train --quiet` does + loading the op {startup_median:.2f} s "
          f"(CPU "
          f"{np.median(startup_cpu):.2f} s), importing vowpalwabbit "
          f"{np.median(vw_startup):.2f} s")
  for name, run in best.items():
    print(f"best {name}: {run['log_loss']:.5f} ({run['setting']}, k = "
          f"{run['k']}, {run['seconds']:.2f} s, peak RSS "
          f"{run['rss_mb']:.0f} MB)")
  summary = {}
  for target_name in ("vw", "ours"):
    target = best[target_name]["log_loss"]
    mine, theirs = time_to(ours, target), time_to(vw, target)
    ratio = (mine["seconds"] / theirs["seconds"]
             if mine and theirs else None)
    summary[target_name] = dict(target=target, ours=mine, vw=theirs,
                                ratio=ratio)
    print(f"to {target_name}'s best ({target:.5f}): ours " +
          (f"{mine['seconds']:.2f} s ({mine['setting']}, {mine['k']} "
           f"epochs)" if mine else "not reached") + ", vw " +
          (f"{theirs['seconds']:.2f} s ({theirs['setting']}, {theirs['k']} "
           f"passes)" if theirs else "not reached") +
          (f"; ours / vw {ratio:.2f}x" if ratio else ""))
    if mine and theirs:  # the same, by CPU seconds
      mine_cpu = min(r["cpu_seconds"] for r in ours
                     if r["log_loss"] <= target)
      theirs_cpu = min(r["cpu_seconds"] for r in vw
                       if r["log_loss"] <= target)
      summary[target_name]["cpu_ratio"] = mine_cpu / theirs_cpu
      print(f"  in CPU seconds: ours {mine_cpu:.2f}, vw {theirs_cpu:.2f}; "
            f"ours / vw {mine_cpu / theirs_cpu:.2f}x")
  mine = summary["vw"]["ours"]
  if mine:
    other = (mine["seconds"] - mine["startup_seconds"] -
             mine["parse_seconds"] - mine["epoch_seconds"])
    print(f"ours' run to VW's best, {mine['seconds']:.2f} s: start-up "
          f"{mine['startup_seconds']:.2f} s (Python, the arguments; CPU "
          f"{mine['startup_cpu_seconds']:.2f} s), parsing + cache "
          f"{mine['parse_seconds']:.2f} s (TensorFlow and the op loaded "
          f"beside), {mine['k']} epochs {mine['epoch_seconds']:.2f} s "
          f"(packing in the first), the rest (TensorFlow's import where it "
          f"outlasts the parse, the exact gap after each epoch, "
          f"checkpoints, Python) {other:.2f} s")
  if args.json:
    with open(args.json, "w", encoding="utf-8") as f:
      json.dump(dict(rows=args.rows, train_rows=train_rows,
                     convert_seconds=convert_seconds,
                     startup_seconds=startup, vw_startup_seconds=vw_startup,
                     runs=runs, summary=summary), f, indent=1)
  if not args.keep:
    shutil.rmtree(args.dir, ignore_errors=True)
  return summary


if __name__ == "__main__":
  main()
  sys.exit(0)

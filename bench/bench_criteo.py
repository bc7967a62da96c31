"""Benchmark: Criteo-scale training from TSV files through `tf-sdca train`.

  python bench/bench_criteo.py [--rows 10000000] [--files 20] [--epochs 5]
                               [--dir /tmp/tf_sdca_bench] [--keep]

Generates `--rows` Criteo-shaped rows as TSV files (the last file held out),
then, each in a fresh process so that its peak RSS is its own:
  1. `tf-sdca train --epochs 1`: parse + cache + the first SDCA epoch;
  2. `tf-sdca train --resume --epochs E`: the cached epochs (memory-mapped
     cache, no parsing);
  3. `tf-sdca evaluate` on the held-out file,
and prints rows/s end to end (wall time of the process / rows processed),
rows/s of the SDCA epochs alone, peak RSS, and log loss / AUC of the model
and of the ground truth on the held-out rows. `train` packs the rows.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np

import bench_vw


# `tf-sdca ARGS` in a child process, its own peak RSS printed on the way out
# (VmHWM, whichever way it leaves: bench_vw's wrapper without its clock).
_WRAPPER = "import sys" + bench_vw.PEAK + bench_vw.TF_SDCA_MAIN


def _run(args):
  """Runs `tf-sdca ARGS` in a new process: (wall seconds, stdout, its own
  peak RSS in GiB)."""
  start = time.perf_counter()
  done = subprocess.run([sys.executable, "-c", _WRAPPER] + args,
                        capture_output=True, text=True, check=False)
  seconds = time.perf_counter() - start
  if done.returncode:
    sys.exit(f"tf-sdca {args[0]} failed:\n{done.stderr[-3000:]}")
  peak_kb = [int(line.split()[1]) for line in done.stderr.splitlines()
             if line.startswith("PEAK_RSS_KB")][-1]
  return seconds, done.stdout, peak_kb / 1024 ** 2


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=10_000_000)
  parser.add_argument("--files", type=int, default=20)
  parser.add_argument("--epochs", type=int, default=5)
  parser.add_argument("--bucket-bits", type=int, default=20)
  parser.add_argument("--dir", default="/tmp/tf_sdca_bench")
  parser.add_argument("--keep", action="store_true",
                      help="keep the generated files and the model")
  args = parser.parse_args()
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  data_dir = os.path.join(args.dir, f"data-{args.rows}")
  model_dir = os.path.join(args.dir, "model")
  shutil.rmtree(model_dir, ignore_errors=True)
  if not os.path.exists(os.path.join(data_dir, "truth.npy")):
    seconds, _, _ = _run(["generate", "--rows", str(args.rows), "--out",
                          data_dir, "--files", str(args.files)])
    print(f"generated {args.rows:,} rows in {seconds:.0f} s")
  files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                 if f.endswith(".tsv"))
  train, test = files[:-1], files[-1]
  size = sum(os.path.getsize(f) for f in train)
  common = ["--model-dir", model_dir, "--bucket-bits", str(args.bucket_bits)]
  first, _, rss_first = _run(["train", *train, *common, "--epochs",
                              "1", "--tol", "0", "--quiet"])
  with open(os.path.join(model_dir, "model.json")) as f:
    meta = json.load(f)
  with open(os.path.join(model_dir, "cache", "manifest.json")) as f:
    parse_seconds = json.load(f)["parse_seconds"]
  rows = meta["rows"]
  later, _, rss_later = _run(["train", *train, *common, "--resume",
                              "--epochs", str(args.epochs), "--tol", "0",
                              "--quiet"])
  with open(os.path.join(model_dir, "model.json")) as f:
    meta = json.load(f)
  cached = meta["history"][1:]
  _, out, _ = _run(["evaluate", test, *common])
  printed = dict(line.split() for line in out.splitlines() if " " in line)
  sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel
  from tf_sdca.data import criteo  # pylint: disable=import-outside-toplevel
  labels = np.concatenate([c["labels"] for c in criteo.read_criteo([test])])
  truth = np.load(os.path.join(data_dir, "truth.npy"))[-labels.shape[0]:]
  sdca_rate = np.mean([h["rows_per_sec"] for h in cached]) if cached else 0
  print(f"\n{rows:,} training rows in {len(train)} files ({size / 1e9:.2f} "
        f"GB of text), {labels.shape[0]:,} held out; 2^{args.bucket_bits} "
        f"buckets, logistic, l2 = 10; rows packed")
  print(f"first epoch (parse + cache + SDCA): {first:.0f} s -> "
        f"{rows / first:,.0f} rows/s end to end (parsing {parse_seconds:.0f}"
        f" s, {rows / parse_seconds:,.0f} rows/s); peak RSS "
        f"{rss_first:.2f} GiB")
  print(f"cached epochs ({len(cached)} in one resumed run, incl. loading the "
        f"cache and the per-epoch gap): {later:.0f} s -> "
        f"{rows * len(cached) / later:,.0f} rows/s end to end; SDCA loop "
        f"alone {sdca_rate:,.0f} rows/s; peak RSS {rss_later:.2f} GiB")
  print(f"final relative duality gap {meta['history'][-1]['duality_gap']:.2e}"
        f" after {meta['epochs_done']} epochs")
  print(f"{'':14s}{'log loss':>10s}{'AUC':>8s}")
  print(f"{'tf_sdca':14s}{float(printed['log_loss']):10.4f}"
        f"{float(printed['auc']):8.4f}")
  print(f"{'ground truth':14s}{metrics.log_loss(labels, truth):10.4f}"
        f"{metrics.auc(labels, truth):8.4f}")
  if not args.keep:
    shutil.rmtree(args.dir, ignore_errors=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

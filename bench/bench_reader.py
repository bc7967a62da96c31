"""Benchmark: the native Criteo reader against the TensorFlow-ops reader it
replaced, and `tf-sdca train`'s first pass end to end.

  python bench/bench_reader.py [--rows 1000000] [--repeats 3]
                               [--dir /tmp/tf_sdca_bench_reader] [--keep]
                               [--train-only]

On one generated Criteo TSV file (and its gzip copy), in one process,
alternating old and new in each repeat, medians printed:
  1. parse + hash only, one core: `text_parser.parse_criteo` on the file's
     bytes (already in memory) in 200 KB blocks, each parsed on one thread;
  2. `read_criteo` (file to numpy chunks): the native reader against the
     reader before it (TextLineDataset + `parse_criteo_lines` in a parallel
     `tf.data` map, as tf_sdca/data/criteo.py had it), plain and gzip;
  3. `tf-sdca train --epochs 1` (text -> cache -> packed rows -> one SDCA
     epoch -> saved model), called in-process with either reader, timed
     from the call to its return (TensorFlow already imported);
  4. the same as a fresh process (`python -m tf_sdca.cli`, imports
     included; the cache built in a forked child meanwhile), native reader
     only, with its peak RSS (the command's own process, not the child's);
     and that process on a 1,000-row prefix of the file: the start-up cost
     (Python, TensorFlow, the op library) and the RSS before any data.
With --train-only, only 3 (native reader) and 4, the file never held in
memory: for 10M rows, and for comparing two versions of tf_sdca (the same
script run with either on PYTHONPATH, one after the other). Each `train`
starts _SETTLE_SECONDS after the last one's model and cache were deleted
(untimed), so that it gets its memory as a first run does.
"""
import argparse
import gzip
import itertools
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import tensorflow as tf

import bench_vw
from tf_sdca import cli
from tf_sdca.data import criteo, generate_criteo_arrays, text_files
from tf_sdca.data import text_parser, write_criteo_tsv


def old_read_criteo(paths, batch_size=65536, bucket_bits=20,
                    skip_bad_lines=False, bad_lines=None):
  """The reader before the native one (bad lines raise; blank ones are
  dropped), its tf.data pipeline as it was."""
  del skip_bad_lines, bad_lines  # the benchmark's data has none

  def one_file(index, path):
    return tf.data.TextLineDataset(
        path, compression_type=compression[index]).batch(batch_size)

  compression = tf.constant(["GZIP" if text_files.is_gzip(p) else ""
                             for p in paths])
  files = tf.data.Dataset.from_tensor_slices(
      (tf.range(len(paths), dtype=tf.int32), tf.constant(list(paths))))

  def parse(lines):
    out = criteo.parse_criteo_lines(lines, bucket_bits)
    out["blank"] = tf.equal(tf.strings.length(tf.strings.strip(lines)), 0)
    return out

  ds = files.flat_map(one_file).map(
      parse, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  for batch in ds.prefetch(2):
    blank = batch["blank"].numpy()
    if (batch["bad"].numpy() & ~blank).any():
      raise ValueError("a malformed line")
    yield dict(labels=batch["labels"].numpy()[~blank],
               dense=batch["dense"].numpy()[~blank],
               ids=batch["ids"].numpy()[~blank])


def _rows(reader, path):
  return sum(c["labels"].shape[0] for c in reader([path]))


# Seconds to wait, untimed, after deleting the last run's model and cache
# and before the next run: this VM's kernel hands memory free for ~2 s back
# to the host (free page reporting), and faulting it in again costs ~2 s
# per GB (1 GB: 2.1-2.3 s; 0.06 s when reused at once). A run started right
# after the last one's 1.6 GB cache (10M rows) was deleted got those pages
# back cheaply, as no run that does not follow another does.
_SETTLE_SECONDS = 6


def _settle(work):
  """Deletes the models (and caches) the runs left in `work`, then waits
  _SETTLE_SECONDS."""
  for name in ("model", "model_process"):
    shutil.rmtree(os.path.join(work, name), ignore_errors=True)
  time.sleep(_SETTLE_SECONDS)


def _timed(function):
  start = time.perf_counter()
  value = function()
  return value, time.perf_counter() - start


def _parse_one_core(data, block=200_000):
  """Rows of `data` through `text_parser.parse_criteo` in blocks below its
  two-range size (one thread per call)."""
  rows, start = 0, 0
  while start < len(data):
    end = data.rfind(b"\n", start, start + block) + 1 or len(data)
    rows += int(text_parser.parse_criteo(data[start:end], 20)["labels"]
                .shape[0])
    start = end
  return rows


def old_chunk_pieces(paths, batch_size=65536, bucket_bits=20,
                     skip_bad_lines=False, bad_lines=None, ids_type=np.int64):
  """What the cache wrote from `old_read_criteo`'s chunks: each converted to
  the stored types (copies), one piece per chunk."""
  for chunk in old_read_criteo(paths, batch_size, bucket_bits,
                               skip_bad_lines, bad_lines):
    yield [dict(labels=chunk["labels"].astype(np.float32),
                dense=chunk["dense"].astype(np.float32),
                ids=chunk["ids"].astype(ids_type))]


def _train(path, work, chunk_pieces=None):
  """`tf-sdca train --epochs 1` in this process with `chunk_pieces` as
  criteo.criteo_chunk_pieces (what the cache reads the text with; None:
  the library's own, whatever the tf_sdca on the path has)."""
  model_dir = os.path.join(work, "model")
  shutil.rmtree(model_dir, ignore_errors=True)
  saved = getattr(criteo, "criteo_chunk_pieces", None)
  if chunk_pieces is not None:
    criteo.criteo_chunk_pieces = chunk_pieces
  try:
    status = cli.main(["train", path, "--model-dir", model_dir, "--epochs",
                       "1", "--quiet"])
  finally:
    if chunk_pieces is not None:
      criteo.criteo_chunk_pieces = saved
  assert status == 0
  return status


# The child's peak RSS from /proc (VmHWM): getrusage's ru_maxrss would
# carry over the parent's RSS at the fork (Linux keeps it across exec), and
# this parent may hold the whole file in memory. `tf-sdca` run as the
# console script ends its process with os._exit once the command returns:
# the peak is printed just before (by the child that builds the cache too,
# which ends first: the command's own peak is the last printed).
_WRAPPER = "import sys" + bench_vw.PEAK + bench_vw.TF_SDCA_MAIN
_peak_rss_gib = {}


def _train_process(path, work):
  """`tf-sdca train --epochs 1` as a new process; its peak RSS is kept in
  _peak_rss_gib[path]."""
  model_dir = os.path.join(work, "model_process")
  shutil.rmtree(model_dir, ignore_errors=True)
  done = subprocess.run(
      [sys.executable, "-c", _WRAPPER, "train", path, "--model-dir",
       model_dir, "--epochs", "1", "--quiet"], check=True,
      capture_output=True, text=True)
  _peak_rss_gib[path] = [int(line.split()[1]) for line in
                         done.stderr.splitlines()
                         if line.startswith("PEAK_RSS_KB")][-1] / 2**20


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rows", type=int, default=1_000_000)
  parser.add_argument("--repeats", type=int, default=3)
  parser.add_argument("--dir", default=None)
  parser.add_argument("--keep", action="store_true")
  parser.add_argument(
      "--train-only", action="store_true",
      help="only `train --epochs 1`, native reader (in-process, then new "
      "processes): no reader before, and the file is never held in memory "
      "(for 10M rows)")
  args = parser.parse_args()
  work = args.dir or tempfile.mkdtemp(prefix="tf_sdca_bench_reader_")
  os.makedirs(work, exist_ok=True)
  path = os.path.join(work, f"criteo_{args.rows}.tsv")
  packed = path + ".gz"
  if not os.path.exists(path if args.train_only else packed):
    write_criteo_tsv(path, generate_criteo_arrays(args.rows, seed=1))
    if not args.train_only:
      with open(path, "rb") as src, gzip.open(packed, "wb", 1) as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
  size = os.path.getsize(path)
  print(f"{args.rows:,} rows, {size / 1e6:.0f} MB "
        f"({size / args.rows:.0f} bytes/row)" + (
            "" if args.train_only else
            f", gzip {os.path.getsize(packed) / 1e6:.0f} MB") +
        f"; {os.cpu_count()} cores; median of {args.repeats}")
  small = os.path.join(work, "first_1000.tsv")
  with open(path, "rb") as f, open(small, "wb") as out:
    out.writelines(itertools.islice(f, 1000))
  if args.train_only:
    cases = [
        ("train --epochs 1 (in-process)", None, lambda: _train(path, work)),
        ("train --epochs 1 (new process)", None,
         lambda: _train_process(path, work)),
        ("  the same on 1,000 rows (start-up)", None,
         lambda: _train_process(small, work)),
    ]
    _train(small, work)  # TensorFlow and the op library loaded first
    _settle(work)
  else:
    with open(path, "rb") as f:
      data = f.read()
    cases = [
        ("parse+hash, 1 core (in memory)", None,
         lambda: _parse_one_core(data)),
        ("read_criteo plain", lambda: _rows(old_read_criteo, path),
         lambda: _rows(criteo.read_criteo, path)),
        ("read_criteo gzip", lambda: _rows(old_read_criteo, packed),
         lambda: _rows(criteo.read_criteo, packed)),
        ("train --epochs 1 (in-process)",
         lambda: _train(path, work, old_chunk_pieces),
         lambda: _train(path, work, criteo.criteo_chunk_pieces)),
        ("train --epochs 1 (new process)", None,
         lambda: _train_process(path, work)),
        ("  the same on 1,000 rows (start-up)", None,
         lambda: _train_process(small, work)),
    ]
  print(f"{'':34s} {'old rows/s':>12s} {'new rows/s':>12s} {'new/old':>8s}"
        "   (seconds: old, new)")
  for name, old, new in cases:
    rows = 1000 if "1,000 rows" in name else args.rows
    times = {"old": [], "new": []}
    for _ in range(args.repeats):
      for side, function in (("old", old), ("new", new)):
        if function is not None:
          times[side].append(_timed(function)[1])
          if "train" in name or "1,000 rows" in name:
            _settle(work)
    med = {k: statistics.median(v) if v else float("nan")
           for k, v in times.items()}
    rate = {k: rows / v for k, v in med.items()}
    print(f"{name:34s} {rate['old']:12,.0f} {rate['new']:12,.0f} "
          f"{med['old'] / med['new']:8.2f}   "
          f"({', '.join(f'{t:.2f}' for t in times['old']) or '-'}; "
          f"{', '.join(f'{t:.2f}' for t in times['new'])})", flush=True)
  for name, gib in ((path, _peak_rss_gib[path]),
                    ("1,000 rows", _peak_rss_gib[small])):
    print(f"peak RSS of train --epochs 1 on {name}: {gib:.2f} GiB")
  print(f"  per row above start-up: "
        f"{(_peak_rss_gib[path] - _peak_rss_gib[small]) * 2**30 / args.rows:.0f}"
        " bytes")
  if not args.keep and not args.dir:
    shutil.rmtree(work)


if __name__ == "__main__":
  main()

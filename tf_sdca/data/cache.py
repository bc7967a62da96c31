"""A binary cache of parsed training data, written on the first pass.

Parsing text is the slow part of a training run (tens of thousands of rows
per second per core, against hundreds of thousands for an SDCA epoch), so
the first pass writes each parsed chunk as `.npy` files and later runs
memory-map them instead of re-parsing. A JSON manifest, written last and
atomically, records the sources (path, size, modification time), the
format and its options: a cache whose sources or options changed, or whose
writing was interrupted, is rebuilt.

Bytes per row on disk: Criteo 160 (label 4, 13 float32 log-counts, 26 int32
ids); LIBSVM 4 + 8 per non-zero (int32 index, float32 value) + 8 (row
pointer).
"""
import json
import os
import shutil
import time

import numpy as np

from tf_sdca.data import criteo as criteo_reader
from tf_sdca.data import libsvm as libsvm_reader

_VERSION = 1


def _sources(paths):
  out = []
  for path in paths:
    stat = os.stat(path)
    out.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
  return out


def _chunks(paths, fmt, bucket_bits, skip_bad_lines, bad_lines):
  if fmt == "criteo":
    return criteo_reader.read_criteo(paths, bucket_bits=bucket_bits,
                                     skip_bad_lines=skip_bad_lines,
                                     bad_lines=bad_lines)
  if fmt == "libsvm":
    return libsvm_reader.read_libsvm(paths, skip_bad_lines=skip_bad_lines,
                                     bad_lines=bad_lines)
  raise ValueError(f"format must be 'criteo' or 'libsvm', got {fmt!r}")


def _compact(fmt, chunk, bucket_bits):
  """The arrays of one chunk as stored."""
  if fmt == "criteo":
    id_type = np.int32 if bucket_bits <= 31 else np.int64
    return dict(labels=chunk["labels"].astype(np.float32),
                dense=chunk["dense"].astype(np.float32),
                ids=chunk["ids"].astype(id_type))
  lengths = np.diff(chunk["indptr"])
  return dict(labels=chunk["labels"], lengths=lengths.astype(np.int64),
              indices=chunk["indices"].astype(np.int32),
              values=chunk["values"].astype(np.float32))


def load_or_build(paths, fmt, cache_dir, bucket_bits=20,
                  skip_bad_lines=False, verbose=1):
  """Returns the data of `paths` from the cache, building it if needed.

  Args:
    paths: the text files.
    fmt: "criteo" or "libsvm".
    cache_dir: directory of the cache (created).
    bucket_bits: Criteo hash buckets `2^bucket_bits`.
    skip_bad_lines: skip and count malformed lines instead of raising.
    verbose: print progress while parsing.

  Returns:
    (arrays, info): arrays are read-only memory maps, one per stored array,
    concatenated over chunks only when asked (`concatenate`); info is the
    manifest (`rows`, `bad_lines`, `parse_seconds`, ...).

  Raises:
    ValueError: for a malformed line (with file and line), unless
      `skip_bad_lines`.
  """
  paths = [str(p) for p in paths]
  wanted = dict(version=_VERSION, format=fmt, sources=_sources(paths),
                bucket_bits=bucket_bits if fmt == "criteo" else None,
                skip_bad_lines=bool(skip_bad_lines))
  manifest_path = os.path.join(cache_dir, "manifest.json")
  if os.path.exists(manifest_path):
    with open(manifest_path) as f:
      manifest = json.load(f)
    if all(manifest.get(k) == v for k, v in wanted.items()):
      return _load(cache_dir, manifest), manifest
  if os.path.isdir(cache_dir):
    shutil.rmtree(cache_dir)
  os.makedirs(cache_dir)
  bad_lines = criteo_reader.BadLines()
  start = time.perf_counter()
  chunk_rows = []
  for i, chunk in enumerate(_chunks(paths, fmt, bucket_bits, skip_bad_lines,
                                    bad_lines)):
    for name, array in _compact(fmt, chunk, bucket_bits).items():
      np.save(os.path.join(cache_dir, f"part-{i:05d}-{name}.npy"), array)
    chunk_rows.append(int(chunk["labels"].shape[0]))
    if verbose:
      rows = sum(chunk_rows)
      rate = rows / max(time.perf_counter() - start, 1e-9)
      print(f"\r  parsed {rows:,} rows ({rate:,.0f} rows/s)", end="",
            flush=True)
  if verbose:
    print()
  manifest = dict(wanted, chunks=chunk_rows, rows=sum(chunk_rows),
                  bad_lines=bad_lines.count, first_bad_lines=bad_lines.first,
                  parse_seconds=time.perf_counter() - start)
  temporary = manifest_path + ".tmp"
  with open(temporary, "w") as f:
    json.dump(manifest, f)
  os.replace(temporary, manifest_path)
  return _load(cache_dir, manifest), manifest


def _load(cache_dir, manifest):
  names = (("labels", "dense", "ids") if manifest["format"] == "criteo" else
           ("labels", "lengths", "indices", "values"))
  return {name: [np.load(os.path.join(cache_dir,
                                      f"part-{i:05d}-{name}.npy"),
                         mmap_mode="r")
                 for i in range(len(manifest["chunks"]))]
          for name in names}


def concatenate(parts, dtype=None):
  """One in-memory array from a list of chunk arrays."""
  if not parts:
    return np.zeros(0, dtype or np.float32)
  out = np.concatenate(parts)
  return out if dtype is None else out.astype(dtype, copy=False)

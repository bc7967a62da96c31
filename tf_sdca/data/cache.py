"""A binary cache of parsed training data, written on the first pass.

Parsing text is the slow part of a training run (tens of thousands of rows
per second per core, against hundreds of thousands for an SDCA epoch), so
the first pass writes each parsed chunk as `.npy` files and later runs
memory-map them instead of re-parsing. A JSON manifest, written last and
atomically, records the sources (path, size, modification time), the
format and its options: a cache whose sources or options changed, or whose
writing was interrupted, is rebuilt. So is a damaged one (a truncated or
garbage `.npy` file, an unreadable manifest, arrays whose shapes or types
do not fit the manifest), with a one-line warning on stderr: the cache is
a copy of the sources, never a reason to fail. Bytes changed in place with
the length kept are not detected (there is no checksum: it would cost a
pass over the data on every run). Only the cache's own files are ever
deleted: a `cache_dir` holding anything else is refused.

Bytes per row on disk: Criteo 160 (label 4, 13 float32 log-counts, 26 int32
ids); LIBSVM 4 + 8 per non-zero (int32 index, float32 value) + 8 (row
pointer).
"""
import functools
import json
import os
import pickle
import re
import signal
import sys
import time
import traceback

import numpy as np

from tf_sdca import files
from tf_sdca.data import criteo as criteo_reader
from tf_sdca.data import libsvm as libsvm_reader
from tf_sdca.data import text_files

_VERSION = 1


def _sources(paths):
  out = []
  for path in paths:
    stat = os.stat(path)
    out.append([os.path.abspath(path), stat.st_size, stat.st_mtime_ns])
  return out


def _chunks(paths, fmt, bucket_bits, skip_bad_lines, bad_lines,
            max_features=None):
  """The chunks to store, each a list of pieces: dicts of the stored arrays
  (`_LAYOUT`, in their stored types), to be written one after the other."""
  if fmt == "criteo":
    # The parser writes the ids in the stored type: nothing is copied.
    return criteo_reader.criteo_chunk_pieces(
        paths, bucket_bits=bucket_bits, skip_bad_lines=skip_bad_lines,
        bad_lines=bad_lines,
        ids_type=np.int32 if bucket_bits <= 31 else np.int64)
  if fmt == "libsvm":
    return ([dict(labels=chunk["labels"],
                  lengths=np.diff(chunk["indptr"]).astype(np.int64),
                  indices=chunk["indices"].astype(np.int32),
                  values=chunk["values"].astype(np.float32))]
            for chunk in libsvm_reader.read_libsvm(
                paths, skip_bad_lines=skip_bad_lines, bad_lines=bad_lines,
                max_features=max_features))
  raise ValueError(f"format must be 'criteo' or 'libsvm', got {fmt!r}")


def _save(path, pieces):
  """Writes the concatenation of the arrays `pieces` (one type and trailing
  shape) as `np.save` would write it, byte for byte, without concatenating
  them, in writes of `files.WRITE_BYTES`."""
  header = np.lib.format.header_data_from_array_1_0(pieces[0])
  header["shape"] = (sum(p.shape[0] for p in pieces),) + pieces[0].shape[1:]
  with open(path, "wb", buffering=0) as f:
    np.lib.format.write_array_header_1_0(f, header)
    for piece in pieces:
      files.write_all(f, np.ascontiguousarray(piece).reshape(-1).view(
          np.uint8))


def load_or_build(paths, fmt, cache_dir, bucket_bits=20,
                  skip_bad_lines=False, verbose=1, max_features=None,
                  on_chunk=None, alongside=None):
  """Returns the data of `paths` from the cache, building it if needed.

  Args:
    paths: the text files (or one file).
    fmt: "criteo" or "libsvm".
    cache_dir: directory of the cache (created).
    bucket_bits: Criteo hash buckets `2^bucket_bits`.
    skip_bad_lines: skip and count malformed lines instead of raising.
    verbose: print progress while parsing.
    max_features: LIBSVM: refuse a feature index above it while parsing
      (`read_libsvm`).
    on_chunk: when the cache is built, called with each chunk as it is
      written (the list of its pieces, dicts of the stored arrays, valid
      during the call): a caller can take what it needs of the rows while
      they are in memory instead of reading the cache back. What it
      returns comes back in `info["chunk_results"]`, a list in the chunks'
      order (absent when the cache was read): the build may run in another
      process (`alongside`).
    alongside: a function run in this process while the cache is built in
      a forked child (`tf-sdca train` imports TensorFlow meanwhile: the
      parser needs none of it); run in any case before this returns, after
      the check of an existing cache (whose warnings go to stderr) and
      before a build's errors are raised. Fork only while this process
      runs no other threads (the CLI before TensorFlow's import).

  Returns:
    (arrays, info): arrays are read-only memory maps, one per stored array,
    concatenated over chunks only when asked (`concatenate`); info is the
    manifest (`rows`, `bad_lines`, `parse_seconds`, ...), and
    `chunk_results` when the cache was built with `on_chunk`.

  Raises:
    ValueError: for a malformed line (with file and line), unless
      `skip_bad_lines`.
  """
  paths = text_files.path_list(paths)
  wanted = dict(version=_VERSION, format=fmt, sources=_sources(paths),
                bucket_bits=bucket_bits if fmt == "criteo" else None,
                skip_bad_lines=bool(skip_bad_lines))
  manifest_path = os.path.join(cache_dir, "manifest.json")
  loaded = None
  if os.path.exists(manifest_path):
    try:
      try:
        with open(manifest_path, encoding="utf-8") as f:
          manifest = json.load(f)
      except ValueError as error:
        raise ValueError(f"{manifest_path}: {error}") from None
      if not isinstance(manifest, dict):
        raise ValueError(f"{manifest_path} is not a JSON object")
      if all(manifest.get(k) == v for k, v in wanted.items()):
        loaded = _load(cache_dir, manifest), manifest
    except (ValueError, OSError, EOFError, KeyError, TypeError) as error:
      # (UnicodeDecodeError and JSONDecodeError are ValueErrors; KeyError
      # and TypeError: a manifest of the wrong shape)
      print(f"warning: the cache in {cache_dir} is damaged ({error}); "
            "rebuilding it from the source files", file=sys.stderr)
  if loaded is not None:
    if alongside is not None:
      alongside()
    return loaded
  _clear(cache_dir)
  build = functools.partial(_build, paths, fmt, cache_dir, bucket_bits,
                            skip_bad_lines, verbose, max_features, on_chunk,
                            wanted)
  if alongside is None:
    manifest, results = build()
  elif not hasattr(os, "fork"):
    alongside()
    manifest, results = build()
  else:
    manifest, results = _build_in_child(build, alongside)
  if on_chunk is not None:
    manifest = dict(manifest, chunk_results=results)
  return _load(cache_dir, manifest), manifest


def _build(paths, fmt, cache_dir, bucket_bits, skip_bad_lines, verbose,
           max_features, on_chunk, wanted):
  """`load_or_build`'s build of a new cache in the empty `cache_dir`: (the
  manifest, on_chunk's results)."""
  manifest_path = os.path.join(cache_dir, "manifest.json")
  bad_lines = criteo_reader.BadLines()
  start = time.perf_counter()
  chunk_rows = []
  results = []
  for i, pieces in enumerate(_chunks(paths, fmt, bucket_bits,
                                     skip_bad_lines, bad_lines,
                                     max_features)):
    for name in pieces[0]:
      _save(os.path.join(cache_dir, f"part-{i:05d}-{name}.npy"),
            [piece[name] for piece in pieces])
    if on_chunk is not None:
      results.append(on_chunk(pieces))
    chunk_rows.append(sum(int(piece["labels"].shape[0]) for piece in pieces))
    files.kill_point(f"cache-part-{i}")
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
  return manifest, results


class _ChildTraceback(Exception):
  """The traceback of an error raised in the child that built the cache."""


def _build_in_child(build, alongside):
  """`build()` in a forked child process while `alongside()` runs in this
  one: its result, or its error raised here.

  A child, not a thread: `alongside` (TensorFlow's import) holds the GIL
  for seconds, and a thread that gives the GIL up for every read, parse
  and write waits for it each time; a child shares nothing with it but the
  cores. A child killed by a signal (SIGKILL, the OOM killer) ends this
  process by the same signal: the build is part of the command."""
  read_end, write_end = os.pipe()
  sys.stdout.flush()
  sys.stderr.flush()
  pid = os.fork()
  if pid == 0:  # the child: build, send the result, end
    try:
      os.close(read_end)
      try:
        reply = ("result", build())
      except BaseException as error:  # pylint: disable=broad-except
        # (KeyboardInterrupt too: a Ctrl-C reaches both processes)
        reply = ("error", error, traceback.format_exc())
      try:
        data = pickle.dumps(reply)
      except Exception:  # pylint: disable=broad-except
        data = pickle.dumps(("error", RuntimeError(str(reply[1])),
                             reply[2]))
      with os.fdopen(write_end, "wb") as f:
        f.write(data)
      sys.stdout.flush()
    finally:
      os._exit(0)  # pylint: disable=protected-access
  os.close(write_end)
  reader = os.fdopen(read_end, "rb")
  try:
    alongside()
    data = reader.read()
    status = os.waitpid(pid, 0)[1]
    pid = None
  except BaseException:  # a failed import, a Ctrl-C: the build stops too
    if pid is not None:
      os.kill(pid, signal.SIGKILL)  # the cache stays without its manifest
      os.waitpid(pid, 0)
    raise
  finally:
    reader.close()
  if os.WIFSIGNALED(status):
    os.kill(os.getpid(), os.WTERMSIG(status))
  reply = pickle.loads(data)
  if reply[0] == "error":
    raise reply[1] from _ChildTraceback(reply[2])
  return reply[1]


_OWN_FILE = re.compile(r"(part-\d{5}-[a-z]+\.npy|manifest\.json(\.tmp)?)$")


def _clear(cache_dir):
  """An empty `cache_dir`: the cache's own files deleted (a directory
  given by mistake, holding anything else, is refused, never emptied)."""
  if not os.path.isdir(cache_dir):
    os.makedirs(cache_dir)
    return
  names = os.listdir(cache_dir)
  foreign = [n for n in names if not _OWN_FILE.match(n)]
  if foreign:
    raise ValueError(f"the cache directory {cache_dir} holds files that are "
                     f"not a tf_sdca cache (e.g. {sorted(foreign)[0]!r}); "
                     "give an empty or new directory")
  for name in names:
    os.remove(os.path.join(cache_dir, name))


# The stored arrays: (dtypes, trailing shape) per format; `ids` are int64
# only for bucket_bits > 31.
_LAYOUT = dict(
    criteo=dict(labels=((np.float32,), ()), dense=((np.float32,), (13,)),
                ids=((np.int32, np.int64), (26,))),
    libsvm=dict(labels=((np.float32, np.float64), ()),
                lengths=((np.int64,), ()), indices=((np.int32,), ()),
                values=((np.float32,), ())))


def _load(cache_dir, manifest):
  """The memory maps of the cache, each checked against the manifest
  (a ValueError naming the file otherwise)."""
  layout = _LAYOUT[manifest["format"]]
  if sum(manifest["chunks"]) != manifest["rows"]:
    # (A model trained on it kept the wrong count: nothing loaded it.)
    raise ValueError(f"its manifest counts {manifest['rows']} rows, its "
                     f"chunks {sum(manifest['chunks'])}")
  arrays = {name: [] for name in layout}
  for i, rows in enumerate(manifest["chunks"]):
    for name, (dtypes, inner) in layout.items():
      path = os.path.join(cache_dir, f"part-{i:05d}-{name}.npy")
      try:
        array = np.load(path, mmap_mode="r")
      except OSError as error:
        raise ValueError(f"{path}: {error.strerror}") from None
      except (ValueError, EOFError) as error:
        # (numpy takes a file without the .npy magic for a pickle)
        raise ValueError(f"{path}: " + (
            "not a .npy file" if "pickle" in str(error) else
            str(error))) from None
      length = (int(np.sum(arrays["lengths"][i]))
                if name in ("indices", "values") else rows)
      if (not isinstance(array, np.ndarray) or
          array.dtype not in [np.dtype(t) for t in dtypes] or
          array.shape != (length,) + inner):
        raise ValueError(f"{path} holds {getattr(array, 'dtype', '?')} "
                         f"{getattr(array, 'shape', '?')}, the manifest "
                         f"{length} rows of {inner}")
      arrays[name].append(array)
  return arrays


def concatenate(parts, dtype=None):
  """One in-memory array from a list of chunk arrays."""
  if not parts:
    return np.zeros(0, dtype or np.float32)
  out = np.concatenate(parts)
  return out if dtype is None else out.astype(dtype, copy=False)

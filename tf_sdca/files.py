"""Files written whole or not at all: checkpoints of `tf-sdca train` and of
the distributed rounds are written to a temporary file and renamed over the
old one, so that a kill at any moment leaves the previous version intact."""
import io
import json
import os

import numpy as np

# Bytes per write(2) of the files written here and of the data cache. Linux
# (6.x, ext4 with large folios) gives a buffered write page-cache folios as
# large as the write, up to 2 MB, and on the project's virtual machine fresh
# 2 MB pages cost several times as much to fault in as 4 KB ones: 1 GB
# written in 16 MB writes took 1.3-1.7 s, in 64 KB writes 0.25-0.6 s
# (single runs, load 2-5).
WRITE_BYTES = 1 << 16


def write_all(f, data):
  """Writes the bytes of `data` (any contiguous buffer) to the unbuffered
  file `f` in writes of at most WRITE_BYTES."""
  view = memoryview(data).cast("B")
  size = view.nbytes
  while view:
    view = view[f.write(view[:WRITE_BYTES]):]
  return size


class _SmallWrites(io.FileIO):
  """A file written in writes of at most WRITE_BYTES."""

  def write(self, data):
    return write_all(super(), data)


def kill_point(name, partial_file=None):
  """A named moment at which a crash test kills the process; does nothing
  here. The crash tests run the command through a launcher that replaces
  this function (tests/interruptions.py), so that they hit the moments a
  timed kill rarely does: `cache-part-P` (half a cache), `epoch-E-batch-B`
  (the middle of a mini-batch epoch), `checkpoint-E-half-written`, and
  `worker-K-round-R-solved` (worker K after its first local solve of
  round R).

  Args:
    name: the moment.
    partial_file: a file being written at this moment, which a kill here
      would leave cut short.
  """
  del name, partial_file


def save_npz_atomically(path, **arrays):
  """`np.savez(path, **arrays)`, replacing `path` in one rename."""
  temporary = path + ".tmp.npz"
  with _SmallWrites(temporary, "w") as f:
    np.savez(f, **arrays)
  if "epoch" in arrays:
    kill_point(f"checkpoint-{int(arrays['epoch'])}-half-written",
               partial_file=temporary)
  os.replace(temporary, path)


def save_model_atomically(model_dir, meta, encoded=None, **arrays):
  """A model directory's state as one atomic unit: `checkpoint.npz` holds
  the arrays and `meta` (as JSON in `meta_json`), replaced in one rename,
  so that a kill at any moment leaves the old state or the new one, never
  weights of one epoch with the epoch count of another. `model.json` is
  then written as a readable copy of `meta` (the same text); readers trust
  the checkpoint's. `encoded`: `readable_json`'s."""
  text = readable_json(meta, encoded)
  save_npz_atomically(os.path.join(model_dir, "checkpoint.npz"),
                      meta_json=np.array(text), **arrays)
  _save_text_atomically(os.path.join(model_dir, "model.json"), text)


def readable_json(value, encoded=None):
  """`value` as JSON text for people to read: a dict of string keys one key
  a line, a list of dicts under one (a history of epochs) one dict a line,
  everything else compact.

  Each part goes through json's C encoder (`json.dump(indent=...)` takes its
  Python one), and `encoded` may give a key's list items already encoded
  (`{key: [json.dumps(item) for item in value[key]]}`, kept by a caller that
  appends to the list): `tf-sdca train` rewrites its model's JSON after every
  epoch, and encoding the whole history each time (its floats' shortest
  repr, ~20 us an epoch's entry on the 2-core VM) made the saves of 1,000
  epochs on iris take ~20 s, most of the training."""
  encoded = encoded or {}
  if not (isinstance(value, dict) and value and
          all(isinstance(key, str) for key in value)):
    return json.dumps(value)

  def item(key, entry):
    if (isinstance(entry, list) and entry and
        all(isinstance(part, dict) for part in entry)):
      lines = encoded.get(key)
      if lines is None or len(lines) != len(entry):
        lines = [json.dumps(part) for part in entry]
      return "[\n" + ",\n".join("  " + line for line in lines) + "\n ]"
    return json.dumps(entry)

  return "{\n" + ",\n".join(f" {json.dumps(key)}: {item(key, entry)}"
                             for key, entry in value.items()) + "\n}\n"


def save_json_atomically(path, value):
  """`value` as readable JSON (`readable_json`) at `path`, replacing it in
  one rename."""
  _save_text_atomically(path, readable_json(value))


def _save_text_atomically(path, text):
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    f.write(text)
  os.replace(temporary, path)

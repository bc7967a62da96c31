"""Files written whole or not at all: checkpoints of `tf-sdca train` and of
the distributed rounds are written to a temporary file and renamed over the
old one, so that a kill at any moment leaves the previous version intact."""
import json
import os

import numpy as np


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
  np.savez(temporary, **arrays)
  if "epoch" in arrays:
    kill_point(f"checkpoint-{int(arrays['epoch'])}-half-written",
               partial_file=temporary)
  os.replace(temporary, path)


def save_model_atomically(model_dir, meta, **arrays):
  """A model directory's state as one atomic unit: `checkpoint.npz` holds
  the arrays and `meta` (as JSON in `meta_json`), replaced in one rename,
  so that a kill at any moment leaves the old state or the new one, never
  weights of one epoch with the epoch count of another. `model.json` is
  then written as a readable copy of `meta`; readers trust the
  checkpoint's."""
  save_npz_atomically(os.path.join(model_dir, "checkpoint.npz"),
                      meta_json=np.array(json.dumps(meta)), **arrays)
  save_json_atomically(os.path.join(model_dir, "model.json"), meta)


def save_json_atomically(path, value):
  """`value` as indented JSON at `path`, replacing it in one rename."""
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    json.dump(value, f, indent=1)
  os.replace(temporary, path)

"""Files written whole or not at all: checkpoints of `tf-sdca train` and of
the distributed rounds are written to a temporary file and renamed over the
old one, so that a kill at any moment leaves the previous version intact."""
import json
import os
import signal

import numpy as np


def kill_point(name):
  """Test hook: SIGKILLs this process at the named moment when the
  environment variable TF_SDCA_TEST_KILL_AT is `name`, so that the crash
  tests (tests/test_data_readers.py) hit the moments a timed kill rarely
  does (half a checkpoint written, the middle of an epoch, half a cache).
  Moments: `cache-part-P`, `epoch-E-batch-B` (mini-batches),
  `checkpoint-E-half-written`."""
  if os.environ.get("TF_SDCA_TEST_KILL_AT") == name:
    os.kill(os.getpid(), signal.SIGKILL)


def save_npz_atomically(path, **arrays):
  """`np.savez(path, **arrays)`, replacing `path` in one rename."""
  temporary = path + ".tmp.npz"
  np.savez(temporary, **arrays)
  moment = f"checkpoint-{int(arrays['epoch'])}-half-written" \
      if "epoch" in arrays else None
  if moment and os.environ.get("TF_SDCA_TEST_KILL_AT") == moment:
    # As if killed while writing: the temporary file cut in half.
    with open(temporary, "r+b") as f:
      f.truncate(os.path.getsize(temporary) // 2)
    kill_point(moment)
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

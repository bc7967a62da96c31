"""Files written whole or not at all: checkpoints of `tf-sdca train` and of
the distributed rounds are written to a temporary file and renamed over the
old one, so that a kill at any moment leaves the previous version intact."""
import json
import os

import numpy as np


def save_npz_atomically(path, **arrays):
  """`np.savez(path, **arrays)`, replacing `path` in one rename."""
  temporary = path + ".tmp.npz"
  np.savez(temporary, **arrays)
  os.replace(temporary, path)


def save_json_atomically(path, value):
  """`value` as indented JSON at `path`, replacing it in one rename."""
  temporary = path + ".tmp"
  with open(temporary, "w") as f:
    json.dump(value, f, indent=1)
  os.replace(temporary, path)

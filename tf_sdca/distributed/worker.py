"""The process a local cluster starts for each worker (`tf_sdca.distributed
.launch`):

  python -m tf_sdca.distributed.worker cli ARGS...   # tf-sdca ARGS
  python -m tf_sdca.distributed.worker arrays DATA_DIR MODEL_DIR

`arrays` trains on `DATA_DIR/worker-K.npz` (K from `TF_CONFIG`) with the
options of `DATA_DIR/options.json`. Both first tie the process's life to
the launcher's (`TF_SDCA_PARENT_PID`): if the launcher dies, so does the
worker, so no worker outlives a killed test or Ctrl-C.
"""
import ctypes
import json
import os
import signal
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent():
  """Asks Linux to SIGKILL this process when its parent dies, and exits at
  once if the parent (`TF_SDCA_PARENT_PID`) is already gone."""
  parent = os.environ.get("TF_SDCA_PARENT_PID")
  if not parent:
    return
  try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
  except (OSError, AttributeError):  # not Linux: best effort
    pass
  if os.getppid() != int(parent):
    os._exit(1)  # pylint: disable=protected-access


def _arrays(data_dir, model_dir):
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  index = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
  with open(os.path.join(data_dir, "options.json")) as f:
    options = json.load(f)
  with np.load(os.path.join(data_dir, f"worker-{index}.npz")) as f:
    data = {k: f[k] for k in f.files}
  try:
    training.train(**data, model_dir=model_dir, **options)
  except cluster_lib.ClusterError as error:
    print(f"tf_sdca worker {index}: {error}", file=sys.stderr)
    return 3
  return 0


def main(argv=None):
  argv = sys.argv[1:] if argv is None else argv
  die_with_parent()
  if argv and argv[0] == "cli":
    from tf_sdca import cli  # pylint: disable=import-outside-toplevel
    return cli.main(argv[1:])
  if len(argv) == 3 and argv[0] == "arrays":
    return _arrays(argv[1], argv[2])
  print(__doc__, file=sys.stderr)
  return 2


if __name__ == "__main__":
  sys.exit(main())

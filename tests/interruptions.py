"""Interruptions for the crash and resume tests, from the test side: the
product holds only the no-op `tf_sdca.files.kill_point` (named moments),
never a switch read from the environment.

In this process:
  with interrupted_after_epoch(2):   # `tf-sdca train` as if Ctrl-C'd right
    cli.main(["train", ...])         # after epoch 2's checkpoint: exit 130

In a child process, SIGKILLed at a moment (a module run as a script):
  subprocess.run(killed_at("checkpoint-2-half-written") + ["train", ...])
  # python tests/interruptions.py MOMENT cli ARGS...     tf-sdca ARGS
  # python tests/interruptions.py MOMENT worker ARGS...  a cluster's worker
A `cli` child arms the workers of the local cluster it starts alike, so
`worker-1-round-5-solved` kills worker 1 of `train --local-cluster 2`.
"""
import contextlib
import os
import signal
import sys

_TESTS = os.path.dirname(os.path.abspath(__file__))
_ROOT = os.path.dirname(_TESTS)


@contextlib.contextmanager
def interrupted_after_epoch(epoch):
  """`tf-sdca train` in this process raises KeyboardInterrupt (a Ctrl-C)
  right after epoch `epoch`'s checkpoint is saved, inside the block."""
  import pytest  # pylint: disable=import-outside-toplevel
  from tf_sdca import files  # pylint: disable=import-outside-toplevel
  save = files.save_model_atomically

  def save_then_interrupt(model_dir, meta, **arrays):
    save(model_dir, meta, **arrays)
    if int(arrays["epoch"]) == epoch:
      raise KeyboardInterrupt

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(files, "save_model_atomically", save_then_interrupt)
    yield


def killed_at(moment, door="cli"):
  """The command line (before the command's own arguments) of a process
  that runs `door` (`cli`: tf-sdca; `worker`: a local cluster's worker)
  and SIGKILLs itself at `tf_sdca.files.kill_point(moment)`."""
  return [sys.executable, os.path.abspath(__file__), moment, door]


def _arm(moment):
  """Replaces the no-op `files.kill_point` by a SIGKILL at `moment` (a
  file being written then is first cut in half, as a kill while writing
  it would leave it)."""
  from tf_sdca import files  # pylint: disable=import-outside-toplevel

  def kill_point(name, partial_file=None):
    if name != moment:
      return
    if partial_file is not None:
      with open(partial_file, "r+b") as f:
        f.truncate(os.path.getsize(partial_file) // 2)
    os.kill(os.getpid(), signal.SIGKILL)

  files.kill_point = kill_point


def _main(argv):
  moment, door, args = argv[0], argv[1], argv[2:]
  _arm(moment)
  if door == "worker":
    from tf_sdca.distributed import worker  # pylint: disable=import-outside-toplevel
    return worker.main(args)
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  run_workers = launch.run_workers

  def run_armed_workers(*positional, **keywords):
    keywords.setdefault("worker_command", killed_at(moment, "worker"))
    return run_workers(*positional, **keywords)

  launch.run_workers = run_armed_workers
  return cli.main(args)


if __name__ == "__main__":
  # As `python -m tf_sdca.cli` from the checkout: its tf_sdca, not this
  # directory, comes first.
  sys.path[0] = _ROOT
  sys.exit(_main(sys.argv[1:]))

"""K worker processes on 127.0.0.1, each with its own `TF_CONFIG`: for
trying distributed training on one machine, and for tests.

Every worker is a separate OS process (`python -m
tf_sdca.distributed.worker ...`) with a gRPC server on a free loopback port;
they find each other through `TF_CONFIG` exactly as processes on several
machines do. The launcher waits for them, and when one fails (non-zero
status, killed by a signal) it stops the others and raises with that
worker's log; in every case every worker process is gone when it returns
(each also dies with the launcher: Linux's parent-death signal).
"""
import json
import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from tf_sdca.distributed import shard as shard_lib

# Seconds the other workers get to stop by themselves after one fails
# before they are killed: they see the failure in their next collective,
# usually within ~1 s, but once (the test suite loading both cores) a
# survivor was still waiting after 10 s.
_GRACE_SECONDS = 30.0
# `python -P` (3.11+): the worker imports the tf_sdca on PYTHONPATH (the
# launcher's), not one that happens to sit in the working directory.
_SAFE_PATH = ["-P"] if sys.version_info >= (3, 11) else []
_WORKER_COMMAND = [sys.executable, *_SAFE_PATH, "-m",
                   "tf_sdca.distributed.worker"]


class LocalClusterError(RuntimeError):
  """A worker of a local cluster failed; the message names it and quotes
  the end of its log."""

  def __init__(self, message, returncodes):
    super().__init__(message)
    self.returncodes = returncodes


def free_ports(count):
  """`count` distinct TCP ports free on 127.0.0.1 now (held together while
  picked, so they differ; another process may still take one before the
  worker binds it, which then fails to start with a clear error)."""
  sockets = []
  try:
    for _ in range(count):
      s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
      s.bind(("127.0.0.1", 0))
      sockets.append(s)
    return [s.getsockname()[1] for s in sockets]
  finally:
    for s in sockets:
      s.close()


def tf_config(addresses, index):
  """The `TF_CONFIG` of worker `index` of a cluster of `addresses`."""
  return json.dumps({"cluster": {"worker": list(addresses)},
                     "task": {"type": "worker", "index": index}})


def run_workers(worker_args, log_dir, env=None, timeout=None, echo_chief=True,
                worker_envs=None, worker_command=None):
  """Runs `python -m tf_sdca.distributed.worker ARGS` for each ARGS in
  `worker_args` as a cluster on free loopback ports, and waits.

  Args:
    worker_args: one argument list per worker (worker k gets index k).
    log_dir: worker k's stdout and stderr go to `log_dir/worker-k.log`.
    env: extra environment variables for every worker.
    timeout: seconds before the whole cluster is stopped (None: no limit).
    echo_chief: also copy worker 0's output to this process's stdout.
    worker_envs: optional list of per-worker environment overrides (applied
      last: e.g. another PYTHONPATH for one worker).
    worker_command: the command line before each worker's ARGS (default:
      `python -P -m tf_sdca.distributed.worker`): another program that
      ends in `tf_sdca.distributed.worker.main(ARGS)`, e.g. a test's
      launcher that first arms a crash at a `files.kill_point`.

  Returns:
    dict: `addresses`, `pids`, `seconds`.

  Raises:
    LocalClusterError: a worker failed or the timeout passed; every worker
      has been stopped.
  """
  os.makedirs(log_dir, exist_ok=True)
  addresses = [f"127.0.0.1:{port}" for port in free_ports(len(worker_args))]
  base_env = dict(os.environ, **(env or {}))
  base_env["TF_SDCA_PARENT_PID"] = str(os.getpid())
  # The workers import this very tf_sdca, wherever it is.
  package_root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  base_env["PYTHONPATH"] = os.pathsep.join(
      [package_root] + [p for p in base_env.get("PYTHONPATH", "").split(
          os.pathsep) if p])
  processes, logs = [], []
  start = time.monotonic()
  try:
    for index, args in enumerate(worker_args):
      log_path = os.path.join(log_dir, f"worker-{index}.log")
      log = open(log_path, "wb")  # pylint: disable=consider-using-with
      logs.append((log_path, log))
      worker_env = dict(base_env, TF_CONFIG=tf_config(addresses, index))
      if worker_envs is not None:
        worker_env.update(worker_envs[index] or {})
      processes.append(subprocess.Popen(
          list(worker_command or _WORKER_COMMAND) + list(args),
          stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
          env=worker_env))
    failed = _wait(processes, logs, start, timeout, echo_chief)
  finally:
    _stop(processes)
    for _, log in logs:
      log.close()
  if failed is not None:
    index, reason = failed
    codes = [p.returncode for p in processes]
    tails = []
    for k in ([index] + [k for k, c in enumerate(codes)
                         if c not in (0, None) and k != index]):
      tails.append(f"--- worker {k} ({addresses[k]}), exit {_describe(codes[k])},"
                   f" last lines of {logs[k][0]}:\n{_tail(logs[k][0])}")
    raise LocalClusterError(
        f"worker {index} of {len(processes)} {reason}; the cluster was "
        f"stopped.\n" + "\n".join(tails), codes)
  return dict(addresses=addresses, pids=[p.pid for p in processes],
              seconds=time.monotonic() - start)


def _wait(processes, logs, start, timeout, echo_chief):
  """Waits for every worker; returns None on success, else (index, why)
  of the first failure."""
  echo = open(logs[0][0], "rb") if echo_chief else None  # pylint: disable=consider-using-with
  try:
    while True:
      if echo is not None:
        chunk = echo.read()
        if chunk:
          sys.stdout.write(chunk.decode(errors="replace"))
          sys.stdout.flush()
      codes = [p.poll() for p in processes]
      for index, code in enumerate(codes):
        if code not in (0, None):
          return index, f"failed ({_describe(code)})"
      if all(code == 0 for code in codes):
        if echo is not None:
          sys.stdout.write(echo.read().decode(errors="replace"))
        return None
      if timeout is not None and time.monotonic() - start > timeout:
        return (codes.index(None),
                f"was still running after the timeout of {timeout:g} s")
      time.sleep(0.1)
  finally:
    if echo is not None:
      echo.close()


def _stop(processes):
  """Lets the remaining workers stop by themselves for a while (they see a
  dead peer in their next collective), then kills them; reaps all."""
  deadline = time.monotonic() + _GRACE_SECONDS
  for process in processes:
    if process.poll() is None:
      try:
        process.wait(timeout=max(0.0, deadline - time.monotonic()))
      except subprocess.TimeoutExpired:
        pass
  for process in processes:
    if process.poll() is None:
      # SIGKILL: TensorFlow's preemption handler catches SIGTERM.
      process.kill()
  for process in processes:
    process.wait()


def _describe(code):
  if code is None:
    return "running"
  if code < 0:
    return f"killed by {signal.Signals(-code).name}"
  return f"status {code}"


def _tail(path, lines=15):
  with open(path, "rb") as f:
    text = f.read()[-20000:].decode(errors="replace")
  keep = [line for line in text.splitlines()
          if line.strip() and not line.startswith(("WARNING: All log",
                                                   "I0000", "W0000"))]
  return "\n".join(keep[-lines:])


def train_local_cluster(num_workers, labels, dense=None, ids=None,
                        indptr=None, indices=None, values=None,
                        example_weights=None, num_features=None,
                        model_dir=None, timeout=None, env=None,
                        echo_chief=False, worker_envs=None, **options):
  """`tf_sdca.distributed.train` on `num_workers` local worker processes.

  Splits the rows into `num_workers` blocks of consecutive rows, writes
  them to `model_dir/cocoa/data/`, starts the workers on free loopback
  ports and waits.

  Args:
    num_workers: K >= 2.
    labels, dense, ids, indptr, indices, values, example_weights,
      num_features: the whole data set, as `train` takes a shard.
    model_dir: the model directory (required: the workers write the
      result there).
    timeout: seconds before the cluster is stopped.
    env: extra environment variables for the workers.
    echo_chief: copy the chief's progress lines to stdout.
    worker_envs: per-worker environment overrides (see `run_workers`).
    **options: the options of `tf_sdca.distributed.train` (loss, l1, l2,
      max_rounds, tol, local_passes, exchanges_per_pass, seed, exchange,
      momentum, num_classes, hinge_step, checkpoint_every, resume,
      startup_timeout, verbose).

  Returns:
    dict: `sparse_weights`, `dense_weights`, `history` (of the chief), the
    layout (`exchange`, `table_size`, `bytes_per_round`, ...), `addresses`,
    `pids`, `seconds`.

  Raises:
    LocalClusterError: a worker failed (every worker has been stopped).
  """
  if int(num_workers) < 2:
    raise ValueError(f"num_workers must be >= 2, got {num_workers}")
  if model_dir is None:
    raise ValueError("model_dir is required")
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  data_dir = os.path.join(model_dir, "cocoa", "data")
  os.makedirs(data_dir, exist_ok=True)
  data = dict(labels=labels, dense=dense, ids=ids, indptr=indptr,
              indices=indices, values=values,
              example_weights=example_weights)
  if num_features is None and (ids is not None or indices is not None):
    num_features = int(np.max(ids if ids is not None else indices)) + 1
  for index, block in enumerate(shard_lib.split(data, num_workers)):
    np.savez(os.path.join(data_dir, f"worker-{index}.npz"),
             **{k: v for k, v in block.items() if v is not None})
  with open(os.path.join(data_dir, "options.json"), "w") as f:
    json.dump(dict(options, num_features=num_features), f)
  info = run_workers([["arrays", data_dir, model_dir]] * int(num_workers),
                     os.path.join(model_dir, "cocoa", "logs"), env=env,
                     timeout=timeout, echo_chief=echo_chief,
                     worker_envs=worker_envs)
  return dict(info, **training.read_model(model_dir, num_features))

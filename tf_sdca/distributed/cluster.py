"""This process's place in a `TF_CONFIG` cluster and the collectives CoCoA+
needs, on `tf.distribute.MultiWorkerMirroredStrategy`.

Every worker runs the same program on its own rows (g3doc/distributed.md
says why no parameter servers): the strategy starts this process's gRPC
server and TensorFlow's coordination service (its leader is the chief, or
worker 0), and the workers exchange tensors only through collective ops
(ring all-reduce and all-gather over gRPC). Nothing tf_sdca-specific runs
in another process's graph, so each worker needs only its own op library;
`join` still checks that every worker loaded it, so that a worker without
it stops the whole cluster with its name instead of failing later.

Failures: a worker that dies closes its gRPC connections, and the
collective the others wait in fails at once (`tf.errors.UnavailableError`,
seen within ~1 s on loopback); a worker that hangs is found by the
coordination service's heartbeats. A worker that never starts leaves the
others inside the strategy's constructor (TensorFlow 2.21 waits there for
every task with no deadline, whatever the coordination service's
registration timeout says, and holding Python's GIL), so a watchdog
process ends such a worker after `startup_timeout` seconds with a message
(SIGKILL: nothing inside the process can interrupt that call).
"""
import json
import os
import select
import signal
import time
import zlib

import numpy as np
import tensorflow as tf

# tf.distribute has no public setting for the coordination service's
# timeouts; without them a worker that never starts makes the others wait
# in the strategy's constructor forever.
from tensorflow.compiler.xla.tsl.protobuf import coordination_config_pb2  # pylint: disable=g-direct-tensorflow-import
from tensorflow.python.eager import context  # pylint: disable=g-direct-tensorflow-import

_JOBS = ("chief", "worker")


class ClusterError(RuntimeError):
  """The cluster cannot train: a worker is missing, lacks the op library,
  was started with other options, or failed during training."""


def cluster_spec_from_env():
  """(cluster dict, task type, task index) from `TF_CONFIG`, or None when
  it is unset or names a single task (nothing to distribute)."""
  text = os.environ.get("TF_CONFIG")
  if not text:
    return None
  config = json.loads(text)
  cluster = config.get("cluster", {})
  if sum(len(cluster.get(job, [])) for job in _JOBS) < 2:
    return None
  task = config.get("task", {})
  return cluster, task.get("type"), int(task.get("index", 0))


class Cluster:
  """The workers of a `TF_CONFIG` cluster and the collectives between them.

  Creating one starts this process's gRPC server (through
  `tf.distribute.MultiWorkerMirroredStrategy` and
  `tf.distribute.cluster_resolver.TFConfigClusterResolver`) and waits for
  the other workers, at most `startup_timeout` seconds.

  Args:
    startup_timeout: seconds to wait for every worker to start.
    heartbeat_timeout: seconds without a heartbeat before the coordination
      service declares a worker dead.

  Attributes:
    index: this worker's rank, 0 for the chief (or worker 0 without one).
    size: K, the number of workers (chief included).
    bytes_sent: bytes this worker has sent through collectives (the ring
      algorithms' counts: all-reduce 2 (K-1)/K of the tensor, all-gather
      (K-1) times its padded part).

  Raises:
    ClusterError: on a `TF_CONFIG` this design cannot run (parameter servers,
      no workers). Workers that do not all start within `startup_timeout`
      raise nothing: a watchdog prints why and kills the process (SIGKILL,
      exit status 137), since TensorFlow's wait for them cannot be
      interrupted (g3doc/distributed.md).
  """

  def __init__(self, startup_timeout=120.0, heartbeat_timeout=10.0):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    spec = resolver.cluster_spec()
    extra = sorted(set(spec.jobs) - set(_JOBS))
    if extra:
      raise ClusterError(
          f"TF_CONFIG names jobs {extra}: tf_sdca's CoCoA+ keeps the weights "
          "replicated on the workers and exchanges changes by all-reduce, "
          "so it takes only 'chief' and 'worker' tasks (no parameter "
          "servers, no evaluator)")
    jobs = [job for job in _JOBS if job in spec.jobs]
    if not jobs:
      raise ClusterError("TF_CONFIG names no 'chief' or 'worker' task")
    self.task_type, self.task_id = resolver.task_type, resolver.task_id
    has_chief = "chief" in spec.jobs
    self.index = (self.task_id + (1 if has_chief else 0)
                  if self.task_type == "worker" else 0)
    self.size = sum(spec.num_tasks(job) for job in jobs)
    self.addresses = [address for job in jobs for address in
                      spec.job_tasks(job)]
    leader = f"/job:{jobs[0]}/replica:0/task:0"
    context.context().configure_coordination_service(
        service_type="standalone", service_leader=leader,
        coordinated_jobs=[coordination_config_pb2.CoordinatedJob(
            name=job, num_tasks=spec.num_tasks(job)) for job in jobs],
        cluster_register_timeout_in_ms=int(startup_timeout * 1000),
        heartbeat_timeout_in_ms=int(heartbeat_timeout * 1000),
        shutdown_barrier_timeout_in_ms=int(heartbeat_timeout * 1000))
    start = time.monotonic()
    self._watchdog = _Watchdog(startup_timeout, (
        f"tf_sdca worker {self.index} ({self.addresses[self.index]}): not "
        f"every worker of {self.addresses} joined within {startup_timeout:g}"
        " s; is each of them started, with the same TF_CONFIG cluster and a "
        "reachable address? Stopping this worker.\n"))
    try:
      self.strategy = tf.distribute.MultiWorkerMirroredStrategy(
          cluster_resolver=resolver,
          communication_options=tf.distribute.experimental.CommunicationOptions(
              implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    except RuntimeError as error:
      self._watchdog.cancel()  # nothing to wait for: it would kill us later
      if "program startup" not in str(error):
        raise
      raise ClusterError(
          "TensorFlow's runtime already started in this process, and "
          "collectives can only be set up before it does: join the cluster "
          "(tf_sdca.distributed.cluster.Cluster(), tf_sdca.distributed.train,"
          " or tf_sdca.estimator.RunConfig(...).join_cluster()) at the start "
          "of the program, before any TensorFlow op runs (as for "
          "tf.distribute.MultiWorkerMirroredStrategy)") from error
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError,
            tf.errors.AbortedError, tf.errors.InternalError) as error:
      self._watchdog.cancel()
      raise ClusterError(
          f"worker {self.index} ({self.addresses[self.index]}): not every "
          f"worker of {self.addresses} joined within {startup_timeout:g} s "
          f"(after {time.monotonic() - start:.0f} s): {_first_line(error)}"
      ) from error
    self._build_collectives()

  @classmethod
  def from_strategy(cls, strategy):
    """A Cluster over a `tf.distribute.MultiWorkerMirroredStrategy` the
    program already made (e.g. the scope a Keras model was built in): its
    workers and collectives, no second server. Not joined yet.

    Raises:
      ClusterError: the strategy has parameter servers or fewer than two
        workers.
    """
    resolver = strategy.cluster_resolver
    spec = resolver.cluster_spec()
    extra = sorted(set(spec.jobs) - set(_JOBS))
    jobs = [job for job in _JOBS if job in spec.jobs]
    size = sum(spec.num_tasks(job) for job in jobs)
    if extra or size < 2:
      raise ClusterError(f"the strategy's cluster {spec.as_dict()} is not "
                         "one of two or more chief/worker tasks")
    self = cls.__new__(cls)
    self.task_type, self.task_id = resolver.task_type, resolver.task_id
    self.index = (self.task_id + (1 if "chief" in spec.jobs else 0)
                  if self.task_type == "worker" else 0)
    self.size = size
    self.addresses = [address for job in jobs for address in
                      spec.job_tasks(job)]
    self.strategy = strategy
    self._watchdog = _Watchdog(None, None)  # the strategy waited already
    self._build_collectives()
    return self

  def _build_collectives(self):
    self.bytes_sent = 0
    self.joined = False
    strategy = self.strategy

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float64)])
    def all_reduce(x):
      return strategy.run(lambda v: tf.distribute.get_replica_context(
      ).all_reduce(tf.distribute.ReduceOp.SUM, tf.identity(v)), args=(x,))

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float64)])
    def all_gather(x):
      return strategy.run(lambda v: tf.distribute.get_replica_context(
      ).all_gather(tf.identity(v), axis=0), args=(x,))

    self._all_reduce, self._all_gather = all_reduce, all_gather

  @property
  def is_chief(self):
    return self.index == 0

  def all_reduce(self, values):
    """The sum over the workers of a float64 vector of the same length on
    every worker (every worker gets the same bits)."""
    values = np.ascontiguousarray(values, np.float64)
    self.bytes_sent += int(2 * (self.size - 1) * values.nbytes / self.size)
    return self._collective(self._all_reduce, values)

  def all_gather(self, values, lengths=None):
    """Every worker's float64 vector, in worker order: a list of K arrays
    (lengths may differ; the collective pads them to the longest).
    `lengths`: the K lengths when every worker knows them already (saves
    the all-reduce that shares them)."""
    values = np.ascontiguousarray(values, np.float64)
    if lengths is None:
      lengths = self.all_reduce(np.eye(self.size)[self.index] * values.size)
    lengths = np.asarray(lengths).astype(np.int64)
    if lengths.shape != (self.size,) or lengths[self.index] != values.size:
      raise ValueError(f"lengths {lengths.tolist()} do not hold this "
                       f"worker's {values.size} values at {self.index}")
    if lengths.max() == 0:  # every worker knows: a 0-length gather crashes
      return [np.zeros(0) for _ in range(self.size)]
    self.bytes_sent += int((self.size - 1) * lengths.max() * 8)
    padded = np.zeros(lengths.max())
    padded[:values.size] = values
    gathered = self._collective(self._all_gather, padded)
    step = int(lengths.max())
    return [gathered[k * step:k * step + lengths[k]]
            for k in range(self.size)]

  def barrier(self):
    """Returns when every worker has called it."""
    self.all_reduce(np.zeros(1))

  def join(self, op_error, options):
    """Checks, once at start, that every worker loaded the op library and
    was started with the same options.

    Args:
      op_error: None, or why this worker's op library did not load.
      options: a JSON-serialisable dict that must be equal on every worker.

    Raises:
      ClusterError: naming the workers without the op library, or the
        workers whose options differ from the chief's.
    """
    try:
      self._check_joined(op_error, options)
    finally:
      self._watchdog.cancel()  # every worker answered (or this one failed)
    self.joined = True

  def _check_joined(self, op_error, options):
    text = json.dumps(options, sort_keys=True)
    fingerprint = float(zlib.crc32(text.encode()))
    status = np.zeros((2, self.size))
    status[0, self.index] = op_error is not None
    status[1, self.index] = fingerprint
    status = self.all_reduce(status.ravel()).reshape(2, self.size)
    missing = np.flatnonzero(status[0]).tolist()
    if missing:
      names = ", ".join(f"worker {k} ({self.addresses[k]})" for k in missing)
      detail = f": {op_error}" if op_error is not None else ""
      raise ClusterError(
          f"tf_sdca's op library did not load on {names}; every worker "
          f"needs it (build it with `pip install --no-build-isolation -e .` "
          f"in each worker's environment){detail}")
    differ = np.flatnonzero(status[1] != status[1, 0]).tolist()
    if differ:
      raise ClusterError(
          f"workers {differ} were started with other training options than "
          f"the chief (worker 0); this worker's: {text}")

  def _collective(self, function, values):
    try:
      return function(tf.constant(values)).numpy()
    except tf.errors.OpError as e:  # whatever the peer's death looks like
      raise ClusterError(
          f"worker {self.index}: a collective with the other workers "
          f"failed, a worker has probably died: {_first_line(e)}") from e


class _Watchdog:
  """Kills this process unless `cancel()` comes within `timeout` seconds.

  A forked child waits on a pipe, so it needs neither Python's GIL nor any
  thread of this process (the one that would cancel may be blocked in C++
  holding the GIL); it exits by itself when this process ends first (the
  pipe closes), so it never outlives it.
  """

  def __init__(self, timeout, message):
    self._child = None
    if timeout is None:  # nothing to watch
      return
    read_end, self._write_end = os.pipe()
    parent = os.getpid()
    self._child = os.fork()
    if self._child == 0:  # the watchdog: only system calls from here on
      os.close(self._write_end)
      ready, _, _ = select.select([read_end], [], [], timeout)
      if not ready:
        os.write(2, message.encode())
        os.kill(parent, signal.SIGKILL)
      os._exit(0)  # pylint: disable=protected-access
    os.close(read_end)

  def cancel(self):
    if self._child:
      os.write(self._write_end, b"x")
      os.close(self._write_end)
      os.waitpid(self._child, 0)
      self._child = None


def _first_line(error):
  """The telling line of a TensorFlow error (e.g. `Collective ops is
  aborted by: Socket closed`), without its graph trace."""
  text = getattr(error, "message", None) or str(error)
  lines = [line.strip() for line in text.splitlines() if line.strip()]
  for pattern in ("aborted by", "grpc_message", "remote target",
                  "unavailable", "deadline", "error"):
    for line in lines:
      if pattern in line.lower() and line != "Graph execution error:":
        return line[:300]
  return (lines or [type(error).__name__])[0][:300]

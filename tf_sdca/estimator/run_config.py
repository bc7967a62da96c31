"""`RunConfig`: where and how often an estimator saves, and which cluster
it belongs to.

The keyword arguments and properties of `tf.estimator.RunConfig` that mean
something to an SDCA trainer on TF 2: `model_dir`, the checkpoint frequency
(`save_checkpoints_steps` / `save_checkpoints_secs`, 600 s by default as in
TensorFlow), `keep_checkpoint_max`, `log_step_count_steps`,
`tf_random_seed` (the seed of SDCA's visiting order) and the cluster read
from the `TF_CONFIG` environment variable. Arguments that only configured a
TF1 session (`session_config`, `device_fn`, `protocol`, the distribution
strategies, ...) are accepted and kept so that existing code constructs, and
otherwise ignored.

A `TF_CONFIG` naming several workers (a chief and workers, as for
`tf.distribute.MultiWorkerMirroredStrategy`) makes `train` run CoCoA+
rounds across the processes (`tf_sdca.distributed`): every process runs the
same script with its own `TF_CONFIG` and its own rows from its input_fn.
TensorFlow lets a process join a cluster only before its runtime starts, so
such a script calls `config.join_cluster()` first thing (train does it too,
which works when no TensorFlow op ran before). Parameter servers are
refused (g3doc/distributed.md says why); a single-process `TF_CONFIG` (or
none) trains locally.

  >>> config = RunConfig(model_dir="/tmp/m", save_checkpoints_steps=100)
  >>> config.replace(keep_checkpoint_max=2).keep_checkpoint_max
  2
"""
import json
import os

import tensorflow as tf

_DEFAULT = object()
_JOINED = None  # this process's tf_sdca.distributed Cluster, once joined
# Properties that `replace` may change (TensorFlow's list).
_REPLACEABLE = (
    "model_dir", "tf_random_seed", "save_summary_steps",
    "save_checkpoints_steps", "save_checkpoints_secs", "session_config",
    "keep_checkpoint_max", "keep_checkpoint_every_n_hours",
    "log_step_count_steps", "train_distribute", "device_fn", "protocol",
    "eval_distribute", "experimental_distribute",
    "experimental_max_worker_delay_secs", "session_creation_timeout_secs",
    "checkpoint_save_graph_def")


class RunConfig:
  """Run configuration of a `tf_sdca.estimator` estimator.

  Args:
    model_dir: directory of the checkpoints (the estimator's `model_dir`
      must agree if both are given).
    tf_random_seed: seed of SDCA's visiting order (the `seed` option of
      `tf_sdca.SdcaModel`); None keeps `LinearSDCA`'s (0 by default).
    save_summary_steps: kept for compatibility (no summaries are written).
    save_checkpoints_steps: save every this many steps; at most one of it
      and `save_checkpoints_secs`. Neither: every 600 seconds.
    save_checkpoints_secs: save every this many seconds.
    session_config: kept for compatibility, unused.
    keep_checkpoint_max: checkpoints kept (0 or None: all).
    keep_checkpoint_every_n_hours: also keep one checkpoint every this many
      hours.
    log_step_count_steps: log the training loss every this many steps.
    train_distribute, device_fn, protocol, eval_distribute,
      experimental_distribute, experimental_max_worker_delay_secs,
      session_creation_timeout_secs, checkpoint_save_graph_def: kept for
      compatibility, unused.

  Raises:
    ValueError: for both checkpoint frequencies, negative counts, or a
      malformed `TF_CONFIG`.
  """

  def __init__(self, model_dir=None, tf_random_seed=None,
               save_summary_steps=100, save_checkpoints_steps=_DEFAULT,
               save_checkpoints_secs=_DEFAULT, session_config=None,
               keep_checkpoint_max=5, keep_checkpoint_every_n_hours=10000,
               log_step_count_steps=100, train_distribute=None,
               device_fn=None, protocol=None, eval_distribute=None,
               experimental_distribute=None,
               experimental_max_worker_delay_secs=None,
               session_creation_timeout_secs=7200,
               checkpoint_save_graph_def=True):
    if save_checkpoints_steps is _DEFAULT and \
        save_checkpoints_secs is _DEFAULT:
      save_checkpoints_steps, save_checkpoints_secs = None, 600
    elif save_checkpoints_steps is _DEFAULT:
      save_checkpoints_steps = None
    elif save_checkpoints_secs is _DEFAULT:
      save_checkpoints_secs = None
    self._values = dict(
        model_dir=_path(model_dir), tf_random_seed=tf_random_seed,
        save_summary_steps=save_summary_steps,
        save_checkpoints_steps=save_checkpoints_steps,
        save_checkpoints_secs=save_checkpoints_secs,
        session_config=session_config,
        keep_checkpoint_max=keep_checkpoint_max,
        keep_checkpoint_every_n_hours=keep_checkpoint_every_n_hours,
        log_step_count_steps=log_step_count_steps,
        train_distribute=train_distribute, device_fn=device_fn,
        protocol=protocol, eval_distribute=eval_distribute,
        experimental_distribute=experimental_distribute,
        experimental_max_worker_delay_secs=(
            experimental_max_worker_delay_secs),
        session_creation_timeout_secs=session_creation_timeout_secs,
        checkpoint_save_graph_def=checkpoint_save_graph_def)
    self._validate()
    self._cluster = _Cluster.from_environment()

  def _validate(self):
    v = self._values
    if v["save_checkpoints_steps"] and v["save_checkpoints_secs"]:
      raise ValueError("RunConfig: give at most one of "
                       "save_checkpoints_steps and save_checkpoints_secs")
    for key, low in (("save_checkpoints_steps", 1),
                     ("save_checkpoints_secs", 0),
                     ("keep_checkpoint_max", 0), ("log_step_count_steps", 1),
                     ("save_summary_steps", 0)):
      value = v[key]
      if value is not None and (isinstance(value, bool) or value < low):
        raise ValueError(f"RunConfig: {key} must be >= {low} or None, got "
                         f"{value!r}")
    if v["keep_checkpoint_every_n_hours"] <= 0:
      raise ValueError("RunConfig: keep_checkpoint_every_n_hours must be "
                       f"> 0, got {v['keep_checkpoint_every_n_hours']!r}")
    seed = v["tf_random_seed"]
    if seed is not None and (isinstance(seed, bool) or
                             not isinstance(seed, int)):
      raise ValueError(f"RunConfig: tf_random_seed must be an int or None, "
                       f"got {seed!r}")

  def join_cluster(self, startup_timeout=120.0):
    """Joins this process to the `TF_CONFIG` cluster (once per process;
    later calls return the same `tf_sdca.distributed.cluster.Cluster`).

    Call it at the start of a multi-worker script, before any TensorFlow
    op runs (TensorFlow configures collectives only then); it waits up to
    `startup_timeout` seconds for the other workers.

    Raises:
      ValueError: the config is not multi-worker.
      tf_sdca.distributed.cluster.ClusterError: TensorFlow's runtime
        already started in this process, or parameter servers in the
        cluster. Workers that do not all start within `startup_timeout`
        raise nothing: a watchdog prints why and kills the process
        (SIGKILL, exit status 137).
    """
    global _JOINED  # pylint: disable=global-statement
    if not self.is_distributed:
      raise ValueError("join_cluster: TF_CONFIG names no multi-worker "
                       "cluster")
    if _JOINED is None:
      from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
      _JOINED = cluster_lib.Cluster(startup_timeout=startup_timeout)
    return _JOINED

  def replace(self, **kwargs):
    """A copy with the given properties changed (TensorFlow's list)."""
    unknown = sorted(set(kwargs) - set(_REPLACEABLE))
    if unknown:
      raise ValueError(f"RunConfig.replace: cannot replace {unknown}; "
                       f"replaceable: {list(_REPLACEABLE)}")
    values = dict(self._values, **kwargs)
    if "save_checkpoints_steps" in kwargs and \
        "save_checkpoints_secs" not in kwargs and \
        kwargs["save_checkpoints_steps"]:
      values["save_checkpoints_secs"] = None
    if "save_checkpoints_secs" in kwargs and \
        "save_checkpoints_steps" not in kwargs and \
        kwargs["save_checkpoints_secs"]:
      values["save_checkpoints_steps"] = None
    return RunConfig(**values)

  def __getattr__(self, name):
    values = self.__dict__.get("_values", {})
    if name in values:
      return values[name]
    raise AttributeError(f"'RunConfig' object has no attribute {name!r}")

  # The cluster, from TF_CONFIG.
  cluster_spec = property(lambda self: self._cluster.spec)
  task_type = property(lambda self: self._cluster.task_type)
  task_id = property(lambda self: self._cluster.task_id)
  is_chief = property(lambda self: self._cluster.is_chief)
  num_worker_replicas = property(lambda self: self._cluster.num_workers)
  num_ps_replicas = property(lambda self: self._cluster.num_ps)
  master = property(lambda self: self._cluster.master)
  evaluation_master = property(lambda self: "")
  global_id_in_cluster = property(lambda self: self._cluster.global_id)
  service = property(lambda self: self._cluster.service)

  @property
  def is_distributed(self):
    """True when TF_CONFIG names more than one training process."""
    return self._cluster.num_workers > 1 or self._cluster.num_ps > 0

  def __repr__(self):
    shown = ", ".join(f"{k}={v!r}" for k, v in sorted(self._values.items())
                      if v is not None)
    return f"RunConfig({shown}, cluster={self._cluster.spec.as_dict()!r})"


def _path(value):
  return None if value is None else os.fspath(value)


class _Cluster:
  """The cluster and this process's task, as TF_CONFIG describes them."""

  def __init__(self, spec, task_type, task_id, service=None):
    self.spec = spec
    self.task_type = task_type
    self.task_id = task_id
    self.service = service
    jobs = spec.as_dict()
    self.num_ps = len(jobs.get("ps", []))
    self.num_workers = (len(jobs.get("chief", [])) +
                        len(jobs.get("master", [])) +
                        len(jobs.get("worker", []))) or 1
    has_chief = "chief" in jobs or "master" in jobs
    self.is_chief = (task_type in ("chief", "master") or
                     (not has_chief and task_type == "worker" and
                      task_id == 0) or not jobs)
    self.master = ""
    if jobs and task_type in jobs and task_type != "evaluator":
      self.master = "grpc://" + spec.task_address(task_type, task_id)
    order = [job for job in ("chief", "master", "worker", "ps")
             if job in jobs]
    self.global_id = 0
    for job in order:
      if job == task_type:
        self.global_id += task_id
        break
      self.global_id += len(jobs[job])

  @classmethod
  def from_environment(cls):
    raw = os.environ.get("TF_CONFIG", "")
    if not raw.strip():
      return cls(tf.train.ClusterSpec({}), "worker", 0)
    try:
      config = json.loads(raw)
    except ValueError as e:
      raise ValueError(f"TF_CONFIG is not valid JSON: {e}") from None
    cluster = config.get("cluster") or {}
    task = config.get("task") or {}
    task_type = task.get("type", "worker" if not cluster else None)
    task_id = int(task.get("index", 0))
    if cluster:
      if task_type is None:
        raise ValueError("TF_CONFIG has a cluster but no task type")
      if task_type != "evaluator":
        if task_type not in cluster:
          raise ValueError(f"TF_CONFIG task type {task_type!r} is not a job "
                           f"of the cluster {sorted(cluster)}")
        if not 0 <= task_id < len(cluster[task_type]):
          raise ValueError(f"TF_CONFIG task index {task_id} is outside job "
                           f"{task_type!r} of {len(cluster[task_type])} "
                           "tasks")
    return cls(tf.train.ClusterSpec(cluster), task_type, task_id,
               config.get("service"))

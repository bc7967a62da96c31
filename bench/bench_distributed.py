"""The exchange of a CoCoA+ round on TensorFlow's runtime, two ways, on
loopback: MultiWorkerMirroredStrategy (what tf_sdca.distributed uses: ring
all-reduce / all-gather between the workers) against ParameterServerStrategy
(the weights a ShardedVariable on parameter servers, each worker's step a
closure scheduled by ClusterCoordinator that reads the whole table and adds
its change).

For each table size it prints the median seconds of one exchange, the bytes
a worker sends (ring formulas; the parameter-server path sends the table
twice per worker: read, then add) and the loopback interface's byte count
over the timed calls (machine-wide: other local traffic adds to it), and,
for the parameter-server path, which worker ran each round's closures.

  .venv/bin/python bench/bench_distributed.py [--sizes 65536,1048576,4194304]
      [--repeats 10] [--workers 2] [--ps 2] [--only mwms|ps]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)


def _loopback_bytes():
  try:
    with open("/sys/class/net/lo/statistics/tx_bytes") as f:
      return int(f.read())
  except OSError:
    return None


def _median_time(function, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    function()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


# ------------------------------------------------------------------ MWMS
def mwms_worker(args):
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  cluster = cluster_lib.Cluster(startup_timeout=120)
  cluster.join(None, {})
  out = []
  for size in args.sizes:
    table = np.random.default_rng(cluster.index).normal(size=size)
    part = table[:size // cluster.size]
    cluster.all_reduce(table)  # warm up (traces the function)
    cluster.all_gather(part)
    lo = _loopback_bytes()
    reduce_s = _median_time(lambda: cluster.all_reduce(table), args.repeats)
    lo_reduce = None if lo is None else (_loopback_bytes() - lo) / args.repeats
    lo = _loopback_bytes()
    gather_s = _median_time(lambda: cluster.all_gather(part), args.repeats)
    lo_gather = None if lo is None else (_loopback_bytes() - lo) / args.repeats
    k = cluster.size
    out.append(dict(size=size, allreduce_s=reduce_s, allgather_s=gather_s,
                    allreduce_bytes=2 * (k - 1) / k * size * 8,
                    allgather_bytes=(k - 1) * (size // k) * 8,
                    loopback_allreduce=lo_reduce,
                    loopback_allgather=lo_gather))
  if cluster.is_chief:
    print("RESULT " + json.dumps(out), flush=True)


# -------------------------------------------------------------------- PS
def ps_server(args):
  """A worker or parameter server of the PS cluster: loads the op library
  (as a worker that runs tf_sdca closures must, before its server starts)
  and serves."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca.ops import load_ops  # pylint: disable=import-outside-toplevel
  load_ops()
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  server = tf.distribute.Server(
      resolver.cluster_spec(), job_name=resolver.task_type,
      task_index=resolver.task_id, protocol="grpc", start=True)
  del args
  server.join()


def ps_chief(args):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
  num_ps = resolver.cluster_spec().num_tasks("ps")
  num_workers = resolver.cluster_spec().num_tasks("worker")
  strategy = tf.distribute.ParameterServerStrategy(
      resolver, variable_partitioner=(
          tf.distribute.experimental.partitioners.FixedShardsPartitioner(
              num_ps)))
  coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
  out = []
  for size in args.sizes:
    with strategy.scope():
      weights = tf.Variable(tf.zeros([size], tf.float64))

    step = _make_step(tf, weights)

    def round_():
      results = [coordinator.schedule(step) for _ in range(num_workers)]
      coordinator.join()
      return [r.fetch() for r in results]

    round_()  # warm up
    placements = []
    lo = _loopback_bytes()
    times = []
    for _ in range(args.repeats):
      start = time.perf_counter()
      placements.append(round_())
      times.append(time.perf_counter() - start)
    lo_round = None if lo is None else (_loopback_bytes() - lo) / args.repeats
    counts = np.bincount(np.ravel(placements), minlength=num_workers)
    out.append(dict(size=size, round_s=float(np.median(times)),
                    worker_bytes=2 * size * 8,
                    server_bytes=2 * num_workers * size * 8 / num_ps,
                    loopback_round=lo_round, closures_per_worker=(
                        counts.tolist()),
                    rounds_not_one_each=int(sum(
                        len(set(p)) != num_workers for p in placements))))
  print("RESULT " + json.dumps(out), flush=True)


def _make_step(tf, weights):
  """A worker's closure: read the whole table from the servers, add a
  change of the same size, return the worker's index."""

  @tf.function
  def step():
    table = tf.concat([tf.convert_to_tensor(v) for v in weights.variables], 0)
    change = 1e-12 * table + 1.0
    start = 0
    for v in weights.variables:  # add the change, shard by shard
      rows = v.shape[0]
      v.assign_add(change[start:start + rows])
      start += rows
    return tf.distribute.coordinator.experimental_get_current_worker_index()

  return step


# ------------------------------------------------------------- launching
def _launch(roles, args):
  """Starts one process per (job, index, role) with its TF_CONFIG; returns
  the RESULT of the first role 'ps-chief' or the chief worker."""
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  jobs = {}
  for job, _, _ in roles:
    jobs.setdefault(job, 0)
    jobs[job] += 1
  ports = iter(launch.free_ports(len(roles)))
  cluster = {job: [f"127.0.0.1:{next(ports)}" for _ in range(count)]
             for job, count in jobs.items()}
  processes = []
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", PYTHONPATH=_ROOT)
  try:
    for job, index, role in roles:
      config = json.dumps({"cluster": cluster,
                           "task": {"type": job, "index": index}})
      processes.append((role, subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), "--role", role,
           "--sizes", ",".join(map(str, args.sizes)),
           "--repeats", str(args.repeats)],
          env=dict(env, TF_CONFIG=config), stdout=subprocess.PIPE,
          stderr=subprocess.PIPE, text=True)))
    reporter = next(p for role, p in processes if role in ("ps-chief",
                                                           "mwms"))
    stdout, stderr = reporter.communicate(timeout=600)
    for line in stdout.splitlines():
      if line.startswith("RESULT "):
        return json.loads(line[len("RESULT "):])
    raise RuntimeError(f"no result; stderr:\n{stderr[-3000:]}")
  finally:
    for _, process in processes:
      if process.poll() is None:
        process.kill()
      process.wait()


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--sizes", default="65536,1048576,4194304")
  parser.add_argument("--repeats", type=int, default=10)
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--ps", type=int, default=2)
  parser.add_argument("--only", default=None, choices=("mwms", "ps"))
  parser.add_argument("--role", default=None,
                      choices=("mwms", "ps-server", "ps-chief"))
  args = parser.parse_args()
  args.sizes = [int(v) for v in args.sizes.split(",")]
  if args.role == "mwms":
    return mwms_worker(args)
  if args.role == "ps-server":
    return ps_server(args)
  if args.role == "ps-chief":
    return ps_chief(args)
  k = args.workers
  if args.only in (None, "mwms"):
    result = _launch([("worker", i, "mwms") for i in range(k)], args)
    print(f"MultiWorkerMirroredStrategy, {k} workers (ring collectives):")
    print(f"{'table':>10} {'all-reduce s':>13} {'MB sent':>8} {'lo MB':>7} "
          f"{'all-gather 1/K s':>17} {'MB sent':>8} {'lo MB':>7}")
    for r in result:
      lo_r = r["loopback_allreduce"]
      lo_g = r["loopback_allgather"]
      print(f"{r['size']:>10,} {r['allreduce_s']:>13.4f} "
            f"{r['allreduce_bytes'] / 2**20:>8.2f} "
            f"{(lo_r or 0) / 2**20:>7.2f} {r['allgather_s']:>17.4f} "
            f"{r['allgather_bytes'] / 2**20:>8.2f} {(lo_g or 0) / 2**20:>7.2f}",
            flush=True)
  if args.only in (None, "ps"):
    roles = ([("chief", 0, "ps-chief")] +
             [("worker", i, "ps-server") for i in range(k)] +
             [("ps", i, "ps-server") for i in range(args.ps)])
    result = _launch(roles, args)
    print(f"ParameterServerStrategy, {k} workers, {args.ps} parameter "
          f"servers (ShardedVariable), one closure per worker a round:")
    print(f"{'table':>10} {'round s':>9} {'MB/worker':>10} {'MB/server':>10} "
          f"{'lo MB':>7}  closures per worker (rounds not one each)")
    for r in result:
      print(f"{r['size']:>10,} {r['round_s']:>9.4f} "
            f"{r['worker_bytes'] / 2**20:>10.2f} "
            f"{r['server_bytes'] / 2**20:>10.2f} "
            f"{(r['loopback_round'] or 0) / 2**20:>7.2f}  "
            f"{r['closures_per_worker']} ({r['rounds_not_one_each']} of "
            f"{args.repeats})", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

"""`tf-sdca train` across processes: under a multi-task `TF_CONFIG`, or
with `--local-cluster K`.

  tf-sdca train FILES --model-dir DIR                     # in every process,
                                                          # each with TF_CONFIG
  tf-sdca train FILES --model-dir DIR --local-cluster K   # K local workers

The files are dealt to the workers in K blocks of consecutive files (worker
k reads block k; give at least K files), each worker parses its own into
`cache/worker-k/` of the model directory (or of `--cache-dir`) and trains
them as its fixed shard (`tf_sdca.distributed.train`). `--epochs` bounds
the rounds (a round is `--local-passes` passes over every shard, each cut
into `--exchanges-per-pass` parts with an exchange after each). The
chief writes `model.json` and `checkpoint.npz` as the one-process command
does (so `tf-sdca evaluate / predict / export` read the model as they are),
and the round-by-round state in `cocoa/`; `--resume` continues it (with the
same K and files).
"""
import argparse
import os
import sys

import numpy as np

from tf_sdca import files
from tf_sdca import model_files

_EXIT_FAILED = 1
EXCHANGES_PER_PASS = 16  # shard.EXCHANGES_PER_PASS (no TensorFlow import here)


# The flags of training across processes, with their defaults: given
# otherwise in one process, each is refused (`refuse_in_one_process`).
_DEFAULTS = dict(local_passes=1, exchanges_per_pass=EXCHANGES_PER_PASS,
                 momentum=True, exchange="auto", checkpoint_every=1,
                 startup_timeout=120.0)


def _at_least(low, kind, flag):
  """An argparse type: a `kind` (int or float) >= `low` (> 0 for a float
  `low` of 0), so that `--local-passes -4` is refused, not trained."""
  def parse(text):
    try:
      value = kind(text)
    except ValueError:
      value = None
    ok = value is not None and (value > low if kind is float else
                                value >= low)
    if not ok:
      bound = f"> {low}" if kind is float else f">= {low}"
      raise argparse.ArgumentTypeError(
          f"{flag} must be {'a number' if kind is float else 'an integer'} "
          f"{bound}, got {text}")
    return value
  return parse


def refuse_in_one_process(args):
  """Raises ValueError naming the flags of training across processes given
  (away from their defaults) to a one-process `train`, which ignored them:
  `--no-momentum` left the epochs' momentum 'auto' on."""
  given = [name for name, default in _DEFAULTS.items()
           if getattr(args, name, default) != default]
  if given:
    flags = ", ".join("--no-momentum" if name == "momentum" else
                      "--" + name.replace("_", "-") for name in given)
    raise ValueError(
        f"{flags}: for training across processes (--local-cluster K or "
        "TF_CONFIG); one process trains without them" +
        (" (its epochs' momentum is --momentum: --momentum 0 turns it off)"
         if "momentum" in given else ""))


def add_arguments(parser):
  """Adds the distributed options to the `train` subparser."""
  group = parser.add_argument_group(
      "training across processes (TF_CONFIG or --local-cluster)")
  group.add_argument("--local-cluster", type=_workers, default=None,
                     metavar="K",
                     help="start K worker processes on 127.0.0.1 (free "
                     "ports, each with its own TF_CONFIG) and train with "
                     "CoCoA+ across them")
  group.add_argument("--local-passes",
                     type=_at_least(1, int, "--local-passes"),
                     default=_DEFAULTS["local_passes"], metavar="H",
                     help="SDCA passes over each worker's rows per round")
  group.add_argument("--exchanges-per-pass",
                     type=_at_least(1, int, "--exchanges-per-pass"),
                     default=_DEFAULTS["exchanges_per_pass"], metavar="S",
                     help="cut every local pass into S parts and add the "
                     "workers' changes after each (CoCoA+ with n_k / S "
                     "local steps; default %(default)s: about as many "
                     "passes as one process with weak regularisation, S "
                     "times the bytes of one exchange per pass)")
  group.add_argument("--no-momentum", dest="momentum",
                     action="store_false",
                     help="plain CoCoA+ rounds, without extrapolating them "
                     "(Nesterov momentum with restarts, the default; far "
                     "fewer rounds with weak regularisation)")
  group.add_argument("--exchange", default=_DEFAULTS["exchange"],
                     choices=("auto", "allreduce", "allgather"),
                     help="how the workers add their changes: all-reduce of "
                     "the touched table, all-gather of each worker's "
                     "touched rows, or whichever sends fewer bytes")
  group.add_argument("--checkpoint-every",
                     type=_at_least(1, int, "--checkpoint-every"),
                     default=_DEFAULTS["checkpoint_every"], metavar="N",
                     help="checkpoint every N rounds (and at the end)")
  group.add_argument("--startup-timeout",
                     type=_at_least(0.0, float, "--startup-timeout"),
                     default=_DEFAULTS["startup_timeout"], metavar="S",
                     help="seconds to wait for every worker")


def _workers(text):
  """--local-cluster's K: an integer >= 2 (one worker is one process)."""
  try:
    k = int(text)
  except ValueError:
    k = None
  if k is None or k < 2:
    raise argparse.ArgumentTypeError(
        f"--local-cluster must be an integer >= 2 (K worker processes), "
        f"got {text}")
  return k


def wanted(args):
  """Whether `tf-sdca train` must run across processes (without importing
  TensorFlow where TF_CONFIG is unset: `train` reads its files while it is
  imported)."""
  if getattr(args, "local_cluster", None):
    return True
  if not os.environ.get("TF_CONFIG"):
    return False
  from tf_sdca.distributed import cluster  # pylint: disable=import-outside-toplevel
  return cluster.cluster_spec_from_env() is not None


def guard_single_process_resume(args):
  """Raises ValueError when a one-process `--resume` targets a model that
  workers trained (its duals are spread over the workers' files)."""
  if getattr(args, "resume", False) and model_files.trained_across_processes(
      args.model_dir):
    raise ValueError(f"{args.model_dir} was trained across processes; resume "
                     "it the same way (--local-cluster K or TF_CONFIG)")


def train(args):
  """`tf-sdca train` across processes; returns the exit status."""
  if args.local_cluster:
    return _launch(args)
  return _work(args)


def _worker_argv(args):
  """`tf-sdca train` arguments for every worker of a local cluster."""
  argv = ["train", *args.data, "--model-dir", args.model_dir,
          "--format", args.format, "--bucket-bits", str(args.bucket_bits),
          "--loss", args.loss, "--l1", repr(args.l1), "--l2", repr(args.l2),
          "--epochs", str(args.epochs), "--tol", repr(args.tol),
          "--seed", str(args.seed), "--local-passes", str(args.local_passes),
          "--exchange", args.exchange,
          "--exchanges-per-pass", str(args.exchanges_per_pass),
          "--checkpoint-every", str(args.checkpoint_every),
          "--startup-timeout", repr(args.startup_timeout)]
  for flag in ("skip_bad_lines", "resume", "overwrite", "quiet"):
    if getattr(args, flag, False):
      argv.append("--" + flag.replace("_", "-"))
  if not getattr(args, "momentum", True):
    argv.append("--no-momentum")
  if getattr(args, "num_classes", None) is not None:
    argv += ["--num-classes", str(args.num_classes)]
  if getattr(args, "hinge_step", "projection") != "projection":
    argv += ["--hinge-step", args.hinge_step]
  if args.cache_dir:
    argv += ["--cache-dir", args.cache_dir]
  return argv


def training_options(args):
  """What every worker of a `tf-sdca train` cluster must agree on, compared
  at the join (`Cluster.join`): the flags that change what is trained,
  read or written."""
  from tf_sdca import losses  # pylint: disable=import-outside-toplevel
  options = dict(format=args.format, bucket_bits=args.bucket_bits,
                 num_classes=getattr(args, "num_classes", None),
                 files=len(args.data), loss=losses.op_name(args.loss),
                 l1=args.l1, l2=args.l2, epochs=args.epochs, tol=args.tol, seed=args.seed,
                 local_passes=args.local_passes, exchange=args.exchange,
                 exchanges_per_pass=args.exchanges_per_pass,
                 momentum=bool(args.momentum),
                 checkpoint_every=args.checkpoint_every,
                 resume=bool(args.resume), overwrite=bool(args.overwrite))
  # (Absent at its default, as training.train's: the workers compare these
  # at the join; --hinge-step was left out, and workers given different
  # steps trained without a word.)
  if getattr(args, "hinge_step", None) not in (None, "projection"):
    options["hinge_step"] = args.hinge_step
  return options


def _launch(args):
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  if args.local_cluster < 2:
    raise ValueError(f"--local-cluster must be >= 2, got {args.local_cluster}")
  os.makedirs(args.model_dir, exist_ok=True)
  log_dir = os.path.join(args.model_dir, "cocoa", "logs")
  try:
    info = launch.run_workers(
        [["cli"] + _worker_argv(args)] * args.local_cluster, log_dir,
        echo_chief=not args.quiet)
  except launch.LocalClusterError as error:
    print(f"tf-sdca train: {error}\n{_resume_hint(args.model_dir)}",
          file=sys.stderr)
    return _EXIT_FAILED
  if not args.quiet:
    print(f"{args.local_cluster} workers on {', '.join(info['addresses'])} "
          f"finished in {info['seconds']:.1f} s; logs in {log_dir}")
  return 0


def _resume_hint(model_dir):
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  try:
    history = training.read_model(model_dir)["history"]
  except FileNotFoundError:
    return "No round was checkpointed; start again."
  done = history[-1]["round"] if history else 0
  return (f"{model_dir} holds the checkpoint after round {done}; continue "
          "with the same command and --resume.")


def _work(args):
  """One worker of a `TF_CONFIG` cluster."""
  # The data modules run TensorFlow ops when imported (tf.constant), which
  # starts TensorFlow's runtime; the strategy must configure it first.
  from tf_sdca import losses  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  model_dir = args.model_dir
  state_dir = os.path.join(model_dir, "cocoa")
  if ((os.path.exists(os.path.join(state_dir, "state.json")) or
       model_files.has_model(model_dir)) and
      not (args.resume or args.overwrite)):
    raise ValueError(f"{model_dir} already has a model: pass --resume to "
                     "continue it or --overwrite to replace it")
  loss = losses.op_name(args.loss)
  num_classes = getattr(args, "num_classes", None)
  options = training_options(args)
  try:
    cluster = cluster_lib.Cluster(startup_timeout=args.startup_timeout)
    cluster.join(None, options)  # this process loaded the op to get here
    from tf_sdca.data import cache  # pylint: disable=import-outside-toplevel
    from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
    if len(args.data) < cluster.size:
      raise ValueError(f"{len(args.data)} file(s) for {cluster.size} "
                       "workers: each worker reads whole files, give at "
                       "least one per worker")
    files = np.array_split(np.asarray(args.data, dtype=object),
                           cluster.size)[cluster.index].tolist()
    verbose = 0 if (args.quiet or not cluster.is_chief) else 1
    cache_root = args.cache_dir or os.path.join(model_dir, "cache")
    arrays, info = cache.load_or_build(
        files, args.format, os.path.join(cache_root,
                                         f"worker-{cluster.index}"),
        args.bucket_bits, args.skip_bad_lines, verbose)
    meta = model_files.new_meta(args.format, loss, args.l1, args.l2,
                                args.seed, args.bucket_bits, rows=None)
    _agree_on_features(cluster, args.format, arrays, meta)
    if num_classes is not None:
      # The classes from every worker's labels (each sees only its files).
      mine = np.unique(cache.concatenate(arrays["labels"], np.float64))
      every = np.unique(np.concatenate(cluster.all_gather(mine)))
      meta.update(num_classes=num_classes,
                  classes=model_files.choose_classes(every, num_classes))
    labels, features = model_files.features(args.format, arrays, meta)
    result = training.train(
        labels, **features, model_dir=model_dir, loss=loss, l1=args.l1,
        l2=args.l2, max_rounds=args.epochs, tol=args.tol,
        local_passes=args.local_passes, seed=args.seed,
        exchange=args.exchange, exchanges_per_pass=args.exchanges_per_pass,
        checkpoint_every=args.checkpoint_every, resume=args.resume,
        verbose=0 if args.quiet else 1, cluster=cluster,
        momentum=args.momentum, num_classes=num_classes or 1,
        hinge_step=getattr(args, "hinge_step", "projection"))
  except cluster_lib.ClusterError as error:
    print(f"tf-sdca train: {error}", file=sys.stderr)
    return _EXIT_FAILED
  if cluster.is_chief:
    _write_model(model_dir, meta, result, len(args.data))
    last = result.history[-1] if result.history else None
    if last and not args.quiet:
      print(f"trained {last['round']} round(s) on {cluster.size} workers; "
            f"loss {last['loss']:.6f}, relative duality gap "
            f"{last['duality_gap']:.2e}; model in {model_dir}")
  return 0


def _agree_on_features(cluster, fmt, arrays, meta):
  """Makes the feature layout every worker's `model_files.features` builds
  the same:
  Criteo's dense scale is the maximum over all workers' rows; LIBSVM's
  table size is one more than the largest id of any worker."""
  if fmt == "criteo":
    gathered = cluster.all_gather(
        model_files.criteo_count_maxima(arrays["dense"]).astype(np.float64))
    meta["scale"] = np.max(np.stack(gathered), axis=0).astype(
        np.float32).tolist()
  else:
    largest = max((int(part.max()) for part in arrays["indices"]
                   if part.size), default=-1)
    gathered = cluster.all_gather(np.array([largest], np.float64))
    meta["num_features"] = int(max(g[0] for g in gathered)) + 1


def _write_model(model_dir, meta, result, num_files):
  """`model.json` and `checkpoint.npz` as the one-process `tf-sdca train`
  writes them (without duals: they stay in the workers' files)."""
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  meta = dict(meta, rows=result.total_rows, epochs_done=result.rounds,
              history=[dict(epoch=h["round"], loss=h["loss"],
                            duality_gap=h["duality_gap"],
                            seconds=h["seconds"], bytes_sent=h["bytes_sent"])
                       for h in result.history],
              distributed=dict(workers=result.num_workers, files=num_files,
                               exchange=result.exchange,
                               table_size=result.table_size,
                               largest_shard=result.largest_shard,
                               exchanges_per_round=result.exchanges_per_round,
                               bytes_per_round=result.bytes_per_round))
  files.save_model_atomically(
      model_dir, meta, sparse_weights=result.sparse_weights,
      dense_weights=result.dense_weights, epoch=result.rounds)

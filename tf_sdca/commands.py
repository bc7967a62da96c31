"""The `generate`, `train`, `evaluate`, `predict` and `export` commands of `tf-sdca`.

A model directory's files, metadata and checks: `tf_sdca.model_files`.
"""
import argparse
import hashlib
import json
import os
import re
import sys
import time

import numpy as np

from tf_sdca import files
from tf_sdca import losses
from tf_sdca import model_files
from tf_sdca import options
from tf_sdca.distributed import command as distributed_command

_BINARY = losses.BINARY


def int_in(low, high=None):
  """An argparse type: an int in [low, high] (high None: no bound), so that
  e.g. `--batch-size -5` is refused instead of training nothing."""
  def parse(text):
    try:
      value = int(text)
    except ValueError:
      raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < low or (high is not None and value > high):
      bound = f">= {low}" if high is None else f"in [{low}, {high}]"
      raise argparse.ArgumentTypeError(f"{value} must be {bound}")
    return value
  return parse


def add_parsers(sub):
  """Adds the subcommands to an argparse subparsers object."""
  gen = sub.add_parser("generate", help="write Criteo-shaped TSV files")
  gen.add_argument("--rows", type=int_in(1), required=True)
  gen.add_argument("--out", required=True,
                   help="output directory (its part files and truth.npy "
                   "from an earlier generate are replaced)")
  gen.add_argument("--files", type=int_in(1), default=1)
  gen.add_argument("--seed", type=options.flag_type("seed"), default=0)

  train = sub.add_parser("train", help="train by SDCA on text files")
  _data_args(train)
  train.add_argument("--loss", default=None,
                     choices=(losses.NAMES + losses.MULTICLASS_NAMES +
                              losses.OP_NAMES + losses.MULTICLASS),
                     help="loss, by short name or the op's name "
                     "(logistic = logistic_loss; the default); softmax "
                     "and multiclass_hinge need --num-classes")
  train.add_argument("--num-classes", type=int_in(2), default=None,
                     help="K classes of a multiclass loss (LIBSVM files "
                     "with class labels: K distinct label values, or class "
                     "ids in [0, K))")
  train.add_argument("--l1", type=options.flag_type("l1"), default=None,
                     help=options.flag_help("l1"))
  train.add_argument("--l2", type=options.flag_type("l2"), default=None,
                     help=options.flag_help("l2"))
  train.add_argument("--epochs", type=int_in(1), default=10,
                     help="the most epochs in all: with --resume the "
                     "model's count too (--epochs 20 trains a model of 12 "
                     "epochs 8 more); default: %(default)s")
  train.add_argument("--tol", type=options.flag_type("tol"),
                     default=options.COMMAND_LINE_DEFAULTS["tol"],
                     help=options.flag_help("tol"))
  train.add_argument("--batch-size", type=int_in(1), default=None,
                     help="rows per op call; default: all rows, one "
                     "PackedSolve call per epoch (fastest); smaller batches "
                     "go through the mini-batch op")
  train.add_argument("--threads", type=options.flag_type("num_threads"),
                     default=0, help=options.flag_help(
                         "num_threads", "0 or 1: one; lock-free threads over "
                         "the packed rows (~0.7x the time per epoch with 2)"))
  # The rows are always packed (TfSdca>PackRows); --pack is still accepted
  # from scripts written when it was an option.
  train.add_argument("--pack", action="store_true", help=argparse.SUPPRESS)
  train.add_argument("--seed", type=options.flag_type("seed"), default=None,
                     help=options.flag_help("seed"))
  train.add_argument("--visit-order", default=None,
                     choices=("permutation", "cyclic", "uniform", "adaptive",
                              "shrinking", "asdca"),
                     help="order of SDCA's coordinate steps, or asdca: the "
                     "reference's accelerated mini-batch SDCA (smooth losses: "
                     "logistic, squared, smooth_hinge; one thread); "
                     "default: permutation. Kept in model.json")
  train.add_argument("--asdca-batch-size",
                     type=options.flag_type("asdca_batch_size"), default=None,
                     help="rows per ASDCA step (--visit-order asdca); "
                     "default: 8")
  train.add_argument("--asdca-theta", type=options.flag_type("asdca_theta"),
                     default=None,
                     help="ASDCA's theta in (0, 1]; default: the paper's, "
                     "provably convergent but slow on ill-conditioned data "
                     "(g3doc/trainer.md)")
  train.add_argument("--hinge-step", default=None,
                     choices=("projection", "steepest_ascent",
                              "near_max_gain"),
                     help="--loss multiclass_hinge's block step: the exact "
                     "projection, or the reference's steepest feasible "
                     "ascent (Frank-Wolfe) or near-maximal-gain step "
                     "(g3doc/multiclass.md), also across workers; default: "
                     "projection. Kept in model.json")
  train.add_argument("--average-from", type=options.flag_type("average_from"),
                     default=None,
                     metavar="T0",
                     help="output averaging: the saved model is the mean of "
                     "the iterates after epochs T0, T0+1, ..., the last "
                     "(weights and duals; the logged loss and duality gap "
                     "are the mean's). T0 = --epochs saves the last "
                     "iterate. Kept in model.json: --resume continues the "
                     "same mean")
  train.add_argument("--momentum", type=options.flag_type("momentum"),
                     default=None,
                     dest="epoch_momentum", metavar="BETA",
                     help="extrapolate each epoch's start from the last two "
                     "epochs (InMemorySdca's momentum, 0 <= BETA < 1; 0.5 "
                     "about halved the epochs on weakly regularised data "
                     "and cost a few at the default --l2 10, "
                     "g3doc/trainer.md; 'auto': 0 to 0.5, chosen from how "
                     "fast the first 4 epochs' gap falls (5 with "
                     "threads); 0: off). "
                     "One process, whole epochs (no --batch-size); default: "
                     "'auto' where it applies (whole epochs in a random "
                     "order, without asdca or --average-from), else off; "
                     "kept in model.json, "
                     "--resume --momentum BETA changes it")
  train.add_argument("--memory-budget", type=options.memory_budget_flag,
                     default=None, metavar="SIZE",
                     help=options.MEMORY_BUDGET_HELP)
  train.add_argument("--cache-dir", default=None,
                     help="default: MODEL_DIR/cache")
  train.add_argument("--resume", action="store_true",
                     help="continue the model in --model-dir; the options "
                     "it keeps (format, loss, l1, l2, bucket bits, classes, "
                     "seed, visit order, hinge step, ASDCA's) are its own, "
                     "and one given otherwise is an error")
  train.add_argument("--overwrite", action="store_true",
                     help="replace a model already in --model-dir")
  train.add_argument("--quiet", action="store_true")
  distributed_command.add_arguments(train)

  evaluate = sub.add_parser(
      "evaluate", help="log loss, AUC, accuracy (multiclass: accuracy, log "
      "loss)")
  _data_args(evaluate, scoring=True)
  predict = sub.add_parser(
      "predict", help="write one score per line (multiclass: a header "
      "'labels c_0 ... c_K-1', then the predicted label and the K "
      "probabilities or scores)")
  _data_args(predict, scoring=True)
  predict.add_argument("--out", required=True)
  export = sub.add_parser(
      "export", help="write a SavedModel that scores raw text lines")
  export.add_argument("--model-dir", required=True)
  export.add_argument("--out", required=True,
                      help="directory of the SavedModel (must not exist)")


def _data_args(parser, scoring=False):
  """The data arguments; `scoring` (evaluate, predict): --format defaults
  to the model's."""
  parser.add_argument("data", nargs="+", help="text files")
  parser.add_argument("--model-dir", required=True)
  # train: None (not given) is criteo for a new model, the model's on
  # --resume.
  parser.add_argument(
      "--format", default=None,
      choices=("criteo", "libsvm"),
      help="the files' format (default: the model's)" if scoring else
      "the files' format (default: criteo; on --resume: the model's)")
  # Feature ids are int32: at most 2^31 buckets.
  # (Scoring reads the model's; one given must be it: evaluate --bucket-bits
  # 18 on a 2^20-bucket model ran with 20 and said nothing.)
  parser.add_argument("--bucket-bits", type=int_in(1, 31), default=None,
                      help="Criteo: 2^k hash buckets (1 <= k <= 31); "
                      "default: " + ("the model's" if scoring else "20"))
  parser.add_argument("--skip-bad-lines", action="store_true",
                      help="skip and count malformed lines")


def check_bucket_bits(bucket_bits, num_classes=None):
  """ValueError unless a table of 2^bucket_bits weights (times the
  classes) fits this machine's memory."""
  limit = model_files.max_sparse_features(num_classes or 1)
  if (1 << bucket_bits) > limit:
    raise ValueError(
        f"--bucket-bits {bucket_bits}: 2^{bucket_bits} weights are past the "
        f"{limit:,} whose table fits this machine's memory; give at most "
        f"--bucket-bits {limit.bit_length() - 1}")


def run(args, start_tensorflow=None, body=None):
  """Runs a parsed subcommand (or `body()`, a command of its own: the
  demo); returns the exit status (`start_tensorflow`: `train`'s). A bad
  value or path, or data an op refuses, is one line and status 2."""
  try:
    if body is not None:
      return body()
    if args.command == "train":
      return train(args, start_tensorflow)
    return {"generate": generate, "evaluate": evaluate, "predict": predict,
            "export": export}[args.command](args)
  except (ValueError, OSError) as error:  # OSError: missing, a directory,
    # unreadable or unwritable paths
    print(f"tf-sdca {args.command}: error: {error}", file=sys.stderr)
    return 2
  except Exception as error:  # pylint: disable=broad-except
    # An op's InvalidArgumentError (data the op refuses, a step beyond
    # float32) is the user's data, not a bug: one line, not a traceback.
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    if not isinstance(error, tf.errors.InvalidArgumentError):
      raise
    from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
    message = sdca_ops.op_message(error.message)
    print(f"tf-sdca {args.command}: error: {' '.join(message.split())}",
          file=sys.stderr)
    return 2


def _check_labels(paths, fmt, label_parts, meta, first_row=0):
  """Refuses, by its `file:line`, the first LIBSVM label outside the
  model's loss's domain that the reader cannot know: a count < 0 for
  Poisson, a label none of a multiclass model's classes (a `--resume`'s
  new one, or one in evaluate's data). The op (or
  `model_files.class_ids`) would name only its row. `label_parts` are the
  labels of rows `first_row`, `first_row + 1`, ... of `paths`.

  Raises:
    ValueError: `path:line: the label ...`.
  """
  if fmt != "libsvm":
    return
  if meta["loss"] == "poisson_loss":
    bad, what = (lambda y: ~(y >= 0.0)), "is not a count (>= 0) for Poisson"
  elif meta.get("classes") is not None:
    classes = np.asarray(meta["classes"], np.float64)
    bad = lambda y: ~np.isin(y, classes)
    what = (f"is none of the model's classes "
            f"({', '.join(f'{c:g}' for c in classes)})")
  else:
    return
  offset = first_row
  for part in label_parts:
    hit = np.flatnonzero(bad(np.asarray(part, np.float64)))
    if hit.size:
      from tf_sdca.data import libsvm  # pylint: disable=import-outside-toplevel
      where = libsvm.line_of_row(paths, offset + int(hit[0]))
      where = (f"{where[0]}:{where[1]}" if where is not None else
               f"row {offset + int(hit[0])}")
      raise ValueError(f"{where}: the label {float(part[hit[0]]):g} {what}")
    offset += part.shape[0]


# ------------------------------------------------------------------ generate
def generate(args):
  """Writes `--rows` generated rows into `--files` TSV files (streamed, so
  any size fits) and the rows' true click probabilities (truth.npy). An
  earlier generate's files in `--out` are replaced, its part files past
  this run's removed."""
  from tf_sdca.data import synthetic  # pylint: disable=import-outside-toplevel
  _check_directory("--out", args.out)
  os.makedirs(args.out, exist_ok=True)
  per_file = -(-args.rows // max(1, args.files))
  count = -(-args.rows // per_file)
  # An earlier generate's part files past this one's would stay beside a
  # truth.npy that is not theirs, and a `train` on the directory would
  # read them too.
  stale = sorted(name for name in os.listdir(args.out)
                 if re.fullmatch(r"part-(\d{5,})\.tsv", name) and
                 int(name[5:-4]) >= count)
  for name in stale:
    os.remove(os.path.join(args.out, name))
  if stale:
    print(f"removed {len(stale)} part file(s) of an earlier generate "
          f"({stale[0]}{' ...' if len(stale) > 1 else ''})")
  truth = np.lib.format.open_memmap(
      os.path.join(args.out, "truth.npy"), mode="w+", dtype=np.float32,
      shape=(args.rows,))
  start, handle, index, written = time.perf_counter(), None, -1, 0
  for chunk in synthetic.iter_criteo_chunks(args.rows, seed=args.seed):
    offset = 0
    size = chunk["labels"].shape[0]
    truth[written:written + size] = chunk["true_probabilities"]
    while offset < size:
      if handle is None or (written - index * per_file) >= per_file:
        if handle is not None:
          handle.close()
        index += 1
        handle = open(os.path.join(args.out, f"part-{index:05d}.tsv"), "w",
                      encoding="ascii", newline="\n")
      take = min(size - offset, (index + 1) * per_file - written)
      part = {k: chunk[k][offset:offset + take]
              for k in ("labels", "counts", "cat_values")}
      handle.write(synthetic.tsv_lines(part["labels"], part["counts"],
                                       part["cat_values"]))
      offset += take
      written += take
    print(f"\r  {written:,} / {args.rows:,} rows", end="", flush=True)
  if handle is not None:
    handle.close()
  truth.flush()
  print(f"\nwrote {index + 1} file(s) and truth.npy to {args.out} in "
        f"{time.perf_counter() - start:.1f} s")
  return 0


# The options of `train` that a model keeps, with their defaults for a new
# model; their flags default to None (not given). On --resume a given value
# must be the model's, and one not given is the model's.
_KEPT_OPTIONS = dict(
    format="criteo", loss="logistic", bucket_bits=20, num_classes=None,
    **{name: options.COMMAND_LINE_DEFAULTS.get(name,
                                               options.OPTIONS[name].default)
       for name in ("l1", "l2", "seed", "visit_order", "hinge_step",
                    "asdca_batch_size", "asdca_theta")})


def _kept_options(args):
  """Sets the kept options of `train` that were not given: the model's on
  --resume, else the defaults.

  Raises:
    ValueError: on --resume, a given option that differs from the model's
      (before any data is read).
  """
  meta = None
  if getattr(args, "resume", False) and \
      model_files.has_model(args.model_dir):
    meta = model_files.read_meta(args.model_dir)
  for name, default in _KEPT_OPTIONS.items():
    given = getattr(args, name, None)
    if meta is None or not (name in meta or name in model_files.DEFAULTS):
      # A new model, or one whose metadata load_model will refuse.
      setattr(args, name, default if given is None else given)
      continue
    trained = model_files.setting(meta, name) if \
        name in model_files.DEFAULTS else meta[name]
    if given is not None and given != trained and not (
        name == "loss" and losses.op_name(given) == trained):
      flag = "--" + name.replace("_", "-")
      raise ValueError(
          f"--resume: the model in {args.model_dir} was trained " +
          (f"without {flag}" if trained is None else
           f"with {flag} {trained}") + f", got {flag} {given} (leave "
          f"{flag} out to continue it as it was trained)")
    setattr(args, name, trained)
  average_from = getattr(args, "average_from", None)
  if meta is not None and average_from is not None and \
      average_from != meta.get("average_from"):
    trained = meta.get("average_from")
    raise ValueError(
        f"--resume --average-from {average_from}: the model was trained "
        + ("without --average-from" if trained is None else
           f"with --average-from {trained}") +
        " (a mean cannot change its first epoch; leave --average-from "
        "out to continue as it was trained)")


def train(args, start_tensorflow=None):
  """`tf-sdca train`.

  `start_tensorflow` (optional, as `run`'s; given only while TensorFlow is
  not imported) is called after the arguments are checked, while a new
  cache is built in a child process (`cache.load_or_build`'s
  `alongside`): the text parser needs no TensorFlow, so the first pass
  does not wait for its import."""
  asdca_flags = [flag for flag in ("asdca_batch_size", "asdca_theta")
                 if getattr(args, flag, None) is not None]
  _kept_options(args)
  if asdca_flags and args.visit_order != "asdca":
    # (They were ignored, and model.json kept neither.)
    raise ValueError(
        " and ".join("--" + flag.replace("_", "-") for flag in asdca_flags) +
        f" set ASDCA's steps (--visit-order asdca), not --visit-order "
        f"{args.visit_order}")
  if losses.is_multiclass(args.loss) and distributed_command.wanted(args):
    if getattr(args, "num_classes", None) is None:
      raise ValueError(f"--loss {args.loss} needs --num-classes K")
    if args.format != "libsvm":
      raise ValueError(f"--loss {args.loss} trains on LIBSVM files with "
                       "class labels (--format libsvm); Criteo labels are "
                       "binary")
  average_from = getattr(args, "average_from", None)
  epoch_momentum = getattr(args, "epoch_momentum", None)
  if distributed_command.wanted(args):
    # (--momentum 0 asks for nothing to refuse; the rounds across processes
    # extrapolate by default, --no-momentum turns that off.)
    options.applies(dict(momentum=epoch_momentum, average_from=average_from,
                         visit_order=getattr(args, "visit_order", None) or
                         "permutation",
                         num_threads=getattr(args, "threads", None) or 0),
                    options.PROCESSES, options.COMMAND_LINE,
                    "--local-cluster or TF_CONFIG")
    if getattr(args, "memory_budget", None) is not None:
      # (Each worker packs its rows whole: the flag was accepted and
      # ignored, none of the one-process plan's refusals either.)
      raise ValueError(
          "--memory-budget plans one process's parts, not training across "
          "processes (--local-cluster or TF_CONFIG), where each worker "
          "trains its rows in memory")
    if getattr(args, "batch_size", None) is not None:
      # (Each worker holds its rows in memory and solves them whole: the
      # flag was accepted and ignored.)
      raise ValueError(
          f"--batch-size {args.batch_size} streams rows in one process, not "
          "across processes (--local-cluster or TF_CONFIG), where each "
          "worker trains its rows in memory")
    if start_tensorflow is not None:
      start_tensorflow()
    return distributed_command.train(args)
  distributed_command.guard_single_process_resume(args)
  distributed_command.refuse_in_one_process(args)
  # The weight table's width, bounded before any directory or memory is
  # taken (LIBSVM's largest index is bounded while parsing).
  limit = model_files.max_sparse_features(
      getattr(args, "num_classes", None) or 1)
  if args.format == "criteo":
    check_bucket_bits(args.bucket_bits, getattr(args, "num_classes", None))
  from tf_sdca.data import cache  # pylint: disable=import-outside-toplevel
  for flag, path in (("--model-dir", args.model_dir),
                     ("--cache-dir", args.cache_dir)):
    _check_directory(flag, path)
  os.makedirs(args.model_dir, exist_ok=True)
  exists = model_files.has_model(args.model_dir)
  if exists and not (args.resume or args.overwrite):
    raise ValueError(f"{args.model_dir} already has a model: pass --resume "
                     "to continue it or --overwrite to replace it")
  if args.resume and not exists:
    raise ValueError(f"--resume: {args.model_dir} has no model to continue "
                     "(no checkpoint.npz); run without --resume to train one")
  verbose = 0 if args.quiet else 1
  multiclass = losses.is_multiclass(args.loss)
  # (`tf-sdca demo` builds its own arguments, without --num-classes.)
  num_classes = getattr(args, "num_classes", None)
  if multiclass != (num_classes is not None):
    raise ValueError(
        f"--loss {args.loss} needs --num-classes K" if multiclass else
        f"--num-classes is for the multiclass losses (softmax, "
        f"multiclass_hinge), not --loss {args.loss}")
  if multiclass and args.format != "libsvm":
    raise ValueError(f"--loss {args.loss} trains on LIBSVM files with class "
                     "labels (--format libsvm); Criteo labels are binary")

  def chunk_maxima(pieces):
    return model_files.criteo_count_maxima(
        [piece["dense"] for piece in pieces])

  arrays, info = cache.load_or_build(
      args.data, args.format, args.cache_dir or os.path.join(
          args.model_dir, "cache"), args.bucket_bits, args.skip_bad_lines,
      verbose, max_features=limit if args.format == "libsvm" else None,
      on_chunk=chunk_maxima if args.format == "criteo" else None,
      alongside=start_tensorflow)
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  # The Criteo counts' maxima of each chunk of a new cache.
  maxima = info.get("chunk_results", [])
  if info["bad_lines"]:
    print(f"skipped {info['bad_lines']:,} malformed line(s); first: "
          f"{info['first_bad_lines'][0]}")
  if not info["rows"]:
    raise ValueError(f"no rows to train on in {', '.join(args.data)}" +
                     (" (every line was malformed)" if info["bad_lines"]
                      else ""))
  digest = _labels_digest(arrays["labels"])
  if args.resume and exists:
    meta, ckpt = model_files.load_model(args.model_dir)
    if meta["rows"] != info["rows"]:
      raise ValueError(f"--resume: the model was trained on {meta['rows']:,} "
                       f"rows, the data has {info['rows']:,}")
  else:
    meta = model_files.new_meta(
        args.format, losses.op_name(args.loss), args.l1, args.l2, args.seed,
        args.bucket_bits, info["rows"], average_from=average_from,
        visit_order=getattr(args, "visit_order", "permutation"),
        labels_digest=digest)
    if meta["visit_order"] == "asdca":
      meta.update(asdca_batch_size=args.asdca_batch_size,
                  asdca_theta=args.asdca_theta)
    if getattr(args, "hinge_step", "projection") != "projection":
      meta["hinge_step"] = args.hinge_step
    if multiclass:
      meta["num_classes"] = num_classes
      meta["classes"] = model_files.choose_classes(
          cache.concatenate(arrays["labels"], np.float64), num_classes)
    ckpt = None
  if meta.get("scale") is None and maxima:
    # (taken as the cache was written: `criteo_scale` would read the counts
    # back from it; the same maxima)
    meta["scale"] = model_files.criteo_count_maxima(
        [np.stack(maxima)]).tolist()
  if epoch_momentum is not None:  # new, or changed on --resume
    meta["momentum"] = epoch_momentum
  elif not args.resume:
    # The default, 'auto' where it applies (InMemorySdca's None); a model
    # saved before it was the default has no key and resumes plainly.
    meta["momentum"] = None
  if meta.get("momentum") == 0:
    meta.pop("momentum", None)
  if multiclass and args.resume and (
      meta.get("num_classes") != num_classes or
      meta["loss"] != losses.op_name(args.loss)):
    raise ValueError(f"--resume: the model was trained with --loss "
                     f"{meta['loss']} --num-classes {meta.get('num_classes')}")
  if args.resume and args.format == "libsvm" and meta.get("num_features"):
    # The model's weights end at its features: wider data would train with
    # its new features dropped (as scoring drops features unseen in
    # training), without a word.
    top = max((int(a.max()) for a in arrays["indices"] if a.size),
              default=-1)
    if top >= meta["num_features"]:
      raise ValueError(
          f"--resume: the data has feature index {top + 1:,} (1-based), past "
          f"the {meta['num_features']:,} features of the model in "
          f"{args.model_dir}; a model cannot take new features: train a new "
          f"one (--overwrite)")
  _check_labels(args.data, args.format, arrays["labels"], meta)
  # (After the labels' own check, which names a bad one's file and line. A
  # model saved before the digest was kept has none.)
  if args.resume and meta.get("labels_digest", digest) != digest:
    raise ValueError(
        f"--resume: {', '.join(args.data)} is not the data the model in "
        f"{args.model_dir} was trained on (its labels differ: its duals "
        "belong to those rows); train a new model (--overwrite)")
  plan = _memory_plan(args, arrays, info, meta, verbose)
  if plan["parts"]:
    labels = None
    features = dict(rows=model_files.row_parts(args.format, arrays, meta,
                                               plan["part_rows"]))
  elif args.format == "criteo" and (args.batch_size is None or
                                    args.batch_size >= info["rows"]):
    labels = None
    features = dict(rows=model_files.criteo_row_chunks(arrays, meta))
  else:
    labels, features = model_files.features(args.format, arrays, meta)
  # A resumed model keeps the order (and ASDCA's options, the hinge's step)
  # it was trained with.
  model = InMemorySdca(loss=meta["loss"], l1=meta["l1"], l2=meta["l2"],
                       seed=meta["seed"], num_threads=args.threads,
                       **{key: model_files.setting(meta, key) for key in (
                           "num_classes", "average_from", "visit_order",
                           "asdca_batch_size", "asdca_theta", "hinge_step",
                           "momentum")})
  if ckpt is not None:
    if "rows" in features:  # packed cache part by cache part
      num_features = features["rows"].num_features
      dense_dim = features["rows"].dense_dim
    else:
      num_features = features["num_features"]
      dense = features.get("dense")
      dense_dim = 0 if dense is None else dense.shape[1]
    try:
      model.load_state_dict(ckpt, info["rows"], num_features or 0,
                            dense_dim)
    except ValueError as error:
      raise ValueError(f"--resume: {args.model_dir}/checkpoint.npz: "
                       f"{error}") from None

  # The history's entries as JSON, each encoded once (`files.readable_json`).
  history_json = [json.dumps(entry) for entry in meta["history"]]

  def checkpoint(epoch, history):
    meta["epochs_done"] = epoch + 1
    meta["history"].append(dict(epoch=epoch + 1, loss=history["loss"][-1],
                                duality_gap=history["duality_gap"][-1],
                                rows_per_sec=history["rows_per_sec"][-1]))
    if "last_loss" in history and model.running_average() is not None:
      meta["history"][-1].update(
          last_loss=history["last_loss"][-1],
          last_duality_gap=history["last_duality_gap"][-1])
    history_json.append(json.dumps(meta["history"][-1]))
    files.save_model_atomically(args.model_dir, meta,
                                encoded={"history": history_json},
                                epoch=epoch + 1, **model.state_dict())

  if meta["history"] and meta["history"][-1]["duality_gap"] < args.tol:
    print(f"already converged: gap {meta['history'][-1]['duality_gap']:.2e}")
    return 0
  if meta["epochs_done"] >= args.epochs:
    # (It trained nothing and said "trained 4 epoch(s)" as if it had.)
    print(f"--epochs {args.epochs}: the model has {meta['epochs_done']} "
          "epoch(s) done already; --epochs counts them (give more to train "
          "further)")
    return 0
  try:
    model.fit(labels, epochs=args.epochs, initial_epoch=meta["epochs_done"],
              batch_size=args.batch_size, tol=args.tol, verbose=verbose,
              callback=checkpoint, **features)
  except KeyboardInterrupt:
    print(f"\ninterrupted: {args.model_dir} holds the model after epoch "
          f"{meta['epochs_done']}; continue with --resume", file=sys.stderr)
    return 130
  last = meta["history"][-1] if meta["history"] else None
  if last:
    print(f"trained {meta['epochs_done']} epoch(s); loss {last['loss']:.6f}, "
          f"relative duality gap {last['duality_gap']:.2e}; model in "
          f"{args.model_dir}")
  return 0


def _check_directory(flag, path):
  """Raises a ValueError naming `flag` where `path` (None: not given) is an
  existing file, not a directory (os.makedirs said '[Errno 17] File
  exists')."""
  if path is not None and os.path.exists(path) and not os.path.isdir(path):
    raise ValueError(f"{flag} {path} is a file, not a directory")


def _labels_digest(parts):
  """A digest of the training rows' labels in their order (the cache's
  label arrays): `--resume` refuses other data of the same length, whose
  rows the model's duals do not belong to (it trained on without a word,
  its gap stuck near 1). 0.4-0.6 s for 45M rows (180 MB of
  labels) on the 2-core machine."""
  digest = hashlib.blake2b(digest_size=16)
  for part in parts:
    digest.update(memoryview(np.ascontiguousarray(part)).cast("B"))
  return digest.hexdigest()


def _resident_bytes():
  """The process's resident memory now (0 where /proc does not say)."""
  try:
    with open("/proc/self/statm", encoding="ascii") as f:
      return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
  except (OSError, ValueError, IndexError):
    return 0


def _memory_plan(args, arrays, info, meta, verbose):
  """`model_files.memory_plan` for `--memory-budget` (default: the
  machine's share, `options.default_memory_budget`), printed.

  Raises:
    ValueError: a budget too small for the rows' duals (naming the least),
      or parts with what needs the rows in memory (mini-batches).
  """
  budget = getattr(args, "memory_budget", None)
  given = budget is not None
  if not given:
    budget = options.default_memory_budget()
  rows = info["rows"]
  if args.format == "criteo":
    num_ids, num_features = 26 * rows, meta["num_features"]
  else:
    num_ids = sum(int(a.shape[0]) for a in arrays["indices"])
    num_features = meta.get("num_features") or max(
        (int(a.max()) + 1 for a in arrays["indices"] if a.size), default=1)
  plan = model_files.memory_plan(args.format, rows, num_ids, num_features,
                                 getattr(args, "num_classes", None), budget)
  if plan["parts"]:
    plan["parts"] = model_files.num_parts(
        [a.shape[0] for a in arrays["labels"]], plan["part_rows"])
  flag = "--memory-budget " + (f"{budget:,}" if given else
                               f"{budget:,} (the default)")
  if plan["parts"] and args.batch_size is not None and \
      args.batch_size < rows:
    raise ValueError(
        f"{flag}: the {rows:,} rows train in {plan['parts']} parts, and "
        f"--batch-size {args.batch_size} needs them in memory (leave "
        "--batch-size out, or give a larger --memory-budget)")
  order = getattr(args, "visit_order", None)
  parted = options.PARTED_VISIT_ORDERS
  if plan["parts"] and order is not None and order not in parted:
    # (Refused by the trainer after the parse, in its keyword's words.)
    raise ValueError(
        f"{flag}: the {rows:,} rows train in {plan['parts']} parts, and "
        f"--visit-order {order} needs them in memory (use --visit-order "
        f"{', '.join(parted)}, or give a larger --memory-budget)")
  if verbose:
    import resource  # pylint: disable=import-outside-toplevel
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    # The epochs' progress bars are Keras' (tf.keras loads Keras on first
    # use, ~70-100 MB): loaded before the line below, so that what the
    # budget bounds from there is the rows and the training state only.
    tf.keras.utils.Progbar  # pylint: disable=pointless-statement
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**10
    try:  # /proc/self/status's VmHWM counts the peak from here on (Linux)
      with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    except OSError:
      pass
    print(f"memory: {_resident_bytes() / 2**20:.1f} MiB held before the "
          f"data (peak {peak:.1f} MiB); training the rows in memory takes ~"
          f"{plan['in_memory'] / 2**20:,.1f} MiB of {flag} bytes" +
          (f": {plan['parts']} parts of at most {plan['part_rows']:,} rows, "
           "packed "
           "one at a time every epoch" if plan["parts"] else ""))
  return plan


# ------------------------------------------------------- evaluate / predict
def score_files(args, check_labels=False):
  """(meta, labels, scores) over the files, streamed chunk by chunk; no
  rows give empty arrays (scores [0, K] for a multiclass model).
  `check_labels`: refuse a label outside the model's loss's domain by its
  `file:line`, as `train` does (`_check_labels`), and give the labels as
  the loss reads them (`y > 0` -> 1 for the binary losses, class ids for
  a multiclass model). Without it (`predict`, which scores without the
  labels, as LIBLINEAR's does) the labels are as read and any number is
  taken: a multiclass model's data may hold labels none of its classes,
  as a binary model's may hold 7."""
  from tf_sdca.data import criteo, libsvm  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  meta, ckpt = model_files.load_model(args.model_dir)
  if args.format is None:
    args.format = meta["format"]
  if meta["format"] != args.format:
    raise ValueError(f"the model was trained on {meta['format']} data, "
                     f"got --format {args.format}")
  given = getattr(args, "bucket_bits", None)
  if given is not None and meta["format"] != "criteo":
    # (It named the default 20 the model's meta keeps, as if it applied.)
    raise ValueError(f"--bucket-bits is for Criteo files; the model in "
                     f"{args.model_dir} was trained on {meta['format']} "
                     "files, whose ids are their feature indices")
  if given is not None and given != meta.get("bucket_bits"):
    raise ValueError(
        f"the model was trained with --bucket-bits {meta.get('bucket_bits')}"
        f", got --bucket-bits {given} (leave it out: scoring hashes as the "
        f"model did)")
  model = InMemorySdca(loss=meta["loss"], l1=meta["l1"], l2=meta["l2"],
                       num_classes=meta.get("num_classes"))
  model.sparse_weights = ckpt["sparse_weights"]
  model.dense_weights = ckpt["dense_weights"]
  bad = criteo.BadLines()
  if args.format == "criteo":
    chunks = criteo.read_criteo(args.data, bucket_bits=meta["bucket_bits"],
                                skip_bad_lines=args.skip_bad_lines,
                                bad_lines=bad)
  else:
    chunks = libsvm.read_libsvm(args.data, skip_bad_lines=args.skip_bad_lines,
                                bad_lines=bad)
  all_labels, all_scores, rows = [], [], 0
  for chunk in chunks:
    if check_labels:
      _check_labels(args.data, args.format, [chunk["labels"]], meta, rows)
      rows += chunk["labels"].shape[0]
    if args.format == "criteo":
      arrays = {k: [chunk[k]] for k in ("labels", "dense", "ids")}
    else:
      arrays = dict(labels=[chunk["labels"]],
                    lengths=[np.diff(chunk["indptr"])],
                    indices=[chunk["indices"]], values=[chunk["values"]])
    labels, features = model_files.features(args.format, arrays, dict(meta),
                                            map_labels=check_labels)
    features.pop("num_features")
    all_labels.append(labels)
    # Overflowing weights are reported by `_check_scores` in one line, not
    # by numpy's RuntimeWarnings.
    with np.errstate(over="ignore", invalid="ignore"):
      all_scores.append(model.predict(**features))
  if bad.count:
    print(f"skipped {bad.count:,} malformed line(s)", file=sys.stderr)
  if not all_scores:  # no rows: no scores, K of them per row if multiclass
    return meta, np.zeros(0), np.zeros(
        (0, meta["num_classes"]) if losses.is_multiclass(meta["loss"]) else 0)
  return meta, np.concatenate(all_labels), np.concatenate(all_scores)


def _check_scores(args, scores):
  """A score that is not finite (weights that overflow w.x, though each is
  finite) is an error naming the model, never a NaN metric with exit 0."""
  bad = np.flatnonzero(~np.isfinite(scores))
  if bad.size:
    raise ValueError(
        f"the model in {args.model_dir} gives {bad.size:,} score(s) that "
        f"are not finite (first: row {bad[0]} of {', '.join(args.data)}, "
        f"{scores[bad[0]]}); its weights overflow w.x")


def _auc_line(labels, scores):
  """The AUC's line; with one class in the labels the AUC is undefined
  (it printed 'auc nan', exit 0), and the line says so."""
  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel
  positive = labels > 0
  if positive.all() or not positive.any():
    return (f"auc undefined (every label is "
            f"{'positive' if positive.all() else 'negative'})")
  return f"auc {metrics.auc(labels, scores):.6f}"


def evaluate(args):
  """`tf-sdca evaluate`: prints rows, log loss, AUC, accuracy (logistic) or
  the mean loss."""
  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel
  # (A Poisson count < 0 gave an MSE, exit 0: train refuses it.)
  meta, labels, scores = score_files(args, check_labels=True)
  _check_scores(args, scores)
  if not labels.shape[0]:
    raise ValueError(f"no rows to evaluate in {', '.join(args.data)}: "
                     "every metric would be undefined")
  print(f"rows {labels.shape[0]:,}")
  if losses.is_multiclass(meta["loss"]):
    predicted = np.argmax(scores, axis=1)
    if meta["loss"] == "softmax_loss":
      p = scores[np.arange(labels.shape[0]), labels.astype(np.int64)]
      print(f"log_loss {-np.mean(np.log(np.maximum(p, 1e-300))):.6f}")
    print(f"accuracy {np.mean(predicted == labels):.6f}")
  elif meta["loss"] == "logistic_loss":
    print(f"log_loss {metrics.log_loss(labels, scores):.6f}")
    print(_auc_line(labels, scores))
    print(f"accuracy {metrics.accuracy(labels, scores):.6f}")
  elif meta["loss"] in _BINARY:
    print(_auc_line(labels, scores))
    print(f"accuracy {np.mean((scores > 0) == (labels > 0)):.6f}")
  else:
    print(f"mse {np.mean((scores - labels) ** 2):.6f}")
    print(f"mae {np.mean(np.abs(scores - labels)):.6f}")
  return 0


def _not_an_input(out, args):
  """ValueError when `out` is one of the command's input files (or the
  model directory's files): writing there would destroy what it reads."""
  inputs = [*args.data, args.model_dir]
  for path in inputs:
    if os.path.exists(out) and os.path.exists(path) and (
        os.path.samefile(out, path) or (os.path.isdir(path) and
                                        os.path.commonpath([
                                            os.path.realpath(out),
                                            os.path.realpath(path)]) ==
                                        os.path.realpath(path))):
      raise ValueError(f"--out {out} is one of the command's inputs "
                       f"({path}); write the scores elsewhere")


def predict(args):
  """`tf-sdca predict`: one score per line (probabilities for logistic)."""
  _not_an_input(args.out, args)
  if os.path.isdir(args.out):  # (was '[Errno 21] Is a directory', late)
    raise ValueError(f"--out {args.out} is a directory; give the path of "
                     "the file to write the scores to")
  meta, _, scores = score_files(args)
  _check_scores(args, scores)
  if losses.is_multiclass(meta["loss"]):
    # LIBLINEAR's `predict -b 1` layout: the classes, then per row the
    # predicted label and the K probabilities (softmax) or scores.
    classes = np.asarray(meta["classes"])
    rows = np.column_stack([classes[np.argmax(scores, axis=1)], scores])
    np.savetxt(args.out, rows, fmt="%.9g", comments="",
               header="labels " + " ".join(f"{c:.9g}" for c in classes))
    print(f"wrote {scores.shape[0]:,} predictions to {args.out}")
    return 0
  np.savetxt(args.out, scores, fmt="%.9g")
  print(f"wrote {scores.shape[0]:,} scores to {args.out}")
  return 0


def export(args):
  """`tf-sdca export`: a SavedModel whose `serving_default` scores raw lines
  of the model's format (tf_sdca.serving)."""
  from tf_sdca import serving  # pylint: disable=import-outside-toplevel
  meta, ckpt = model_files.load_model(args.model_dir)
  if os.path.exists(args.out):
    raise ValueError(f"--out {args.out} exists; give a new directory")
  parent = os.path.dirname(os.path.abspath(args.out))
  if not os.path.isdir(parent) or not os.access(parent, os.W_OK):
    raise ValueError(f"--out {args.out}: cannot create it in {parent} "
                     "(missing or not writable)")
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  try:
    serving.export_lines_scorer(meta, ckpt["sparse_weights"],
                                ckpt["dense_weights"], args.out)
  except tf.errors.OpError as error:  # e.g. the disk filled while writing
    raise ValueError(f"--out {args.out}: {error.message}") from None
  print(f"wrote a SavedModel scoring raw {meta['format']} lines to "
        f"{args.out} (signature serving_default: lines -> scores, margins, "
        "valid)")
  return 0


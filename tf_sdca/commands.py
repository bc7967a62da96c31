"""The `generate`, `train`, `evaluate`, `predict` and `export` commands of `tf-sdca`.

A model directory holds:
  - `model.json`: the format, loss, regularisation, feature layout (hash
    buckets, the dense columns' scale) and the training history;
  - `checkpoint.npz`: the unshrunk float64 weights, the per-example duals
    (float64: 8 bytes per example) and the epochs done; with
    `--average-from T0` the weights and duals are the mean of the iterates
    after epochs T0, T0 + 1, ... (what evaluate, predict and export use),
    and `last_sparse_weights`, `last_dense_weights`, `last_duals` and
    `average_count` keep the last iterate and the mean's size for
    `--resume`;
  - with `--momentum`, `checkpoint.npz` also keeps the point the epoch
    before the last ended at (`momentum_previous_duals`,
    `momentum_previous_table`), `momentum_last_dual` and
    `momentum_restart` (with `--momentum auto` also `momentum_auto_gaps`,
    the gaps its choice of beta reads), so that `--resume` extrapolates as
    an uninterrupted run would;
  - `cache/`: the parsed training data (`tf_sdca.data.cache`).
After every epoch the checkpoint, with a copy of `model.json`'s contents
inside, is replaced in one rename (`files.save_model_atomically`), then
`model.json`; readers trust the checkpoint's copy, so a kill between the
two renames loses nothing. A checkpoint that is truncated, corrupt, or does
not fit its own metadata (duals, epochs, non-finite weights) is an error,
never patched.
"""
import argparse
import json
import os
import re
import sys
import time
import zipfile

import numpy as np

from tf_sdca import files
from tf_sdca import losses
from tf_sdca import options
from tf_sdca.distributed import command as distributed_command

_BINARY = losses.BINARY


def _int_in(low, high=None):
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


def _momentum(text):
  """An argparse type: `--momentum`'s beta, a number in [0, 1) or
  'auto'."""
  if text == "auto":
    return text
  try:
    value = float(text)
  except ValueError:
    raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
  if not 0.0 <= value < 1.0:
    raise argparse.ArgumentTypeError(f"{value} must be in [0, 1)")
  return value


def add_parsers(sub):
  """Adds the subcommands to an argparse subparsers object."""
  gen = sub.add_parser("generate", help="write Criteo-shaped TSV files")
  gen.add_argument("--rows", type=int, required=True)
  gen.add_argument("--out", required=True, help="output directory")
  gen.add_argument("--files", type=int, default=1)
  gen.add_argument("--seed", type=int, default=0)

  train = sub.add_parser("train", help="train by SDCA on text files")
  _data_args(train)
  train.add_argument("--loss", default="logistic",
                     choices=(losses.NAMES + losses.MULTICLASS_NAMES +
                              losses.OP_NAMES + losses.MULTICLASS),
                     help="loss, by short name or the op's name "
                     "(logistic = logistic_loss); softmax and "
                     "multiclass_hinge need --num-classes")
  train.add_argument("--num-classes", type=_int_in(2), default=None,
                     help="K classes of a multiclass loss (LIBSVM files "
                     "with class labels: K distinct label values, or class "
                     "ids in [0, K))")
  train.add_argument("--l1", type=float, default=0.0)
  train.add_argument("--l2", type=float, default=10.0)
  train.add_argument("--epochs", type=_int_in(1), default=10)
  train.add_argument("--tol", type=float, default=1e-3,
                     help="stop when the relative duality gap is below this")
  train.add_argument("--batch-size", type=_int_in(1), default=None,
                     help="rows per op call; default: all rows, one "
                     "PackedSolve call per epoch (fastest); smaller batches "
                     "go through the mini-batch op")
  train.add_argument("--threads", type=_int_in(0), default=0,
                     help="threads per epoch (0 or 1: one): lock-free "
                     "threads over the packed rows (~0.7x the time per "
                     "epoch with 2)")
  # The rows are always packed (TfSdca>PackRows); --pack is still accepted
  # from scripts written when it was an option.
  train.add_argument("--pack", action="store_true", help=argparse.SUPPRESS)
  train.add_argument("--seed", type=int, default=0)
  train.add_argument("--visit-order", default="permutation",
                     choices=("permutation", "cyclic", "uniform", "adaptive",
                              "shrinking", "asdca"),
                     help="order of SDCA's coordinate steps, or asdca: the "
                     "reference's accelerated mini-batch SDCA (smooth losses: "
                     "logistic, squared, smooth_hinge; one thread). Kept in "
                     "model.json")
  train.add_argument("--asdca-batch-size", type=_int_in(1), default=8,
                     help="rows per ASDCA step (--visit-order asdca)")
  train.add_argument("--asdca-theta", type=float, default=None,
                     help="ASDCA's theta in (0, 1]; default: the paper's, "
                     "provably convergent but slow on ill-conditioned data "
                     "(g3doc/trainer.md)")
  train.add_argument("--hinge-step", default="projection",
                     choices=("projection", "steepest_ascent",
                              "near_max_gain"),
                     help="--loss multiclass_hinge's block step: the exact "
                     "projection, or the reference's steepest feasible "
                     "ascent (Frank-Wolfe) or near-maximal-gain step "
                     "(g3doc/multiclass.md), also across workers. Kept in "
                     "model.json")
  train.add_argument("--average-from", type=_int_in(0), default=None,
                     metavar="T0",
                     help="output averaging: the saved model is the mean of "
                     "the iterates after epochs T0, T0+1, ..., the last "
                     "(weights and duals; the logged loss and duality gap "
                     "are the mean's). T0 = --epochs saves the last "
                     "iterate. Kept in model.json: --resume continues the "
                     "same mean")
  train.add_argument("--momentum", type=_momentum, default=None,
                     dest="epoch_momentum", metavar="BETA",
                     help="extrapolate each epoch's start from the last two "
                     "epochs (InMemorySdca's momentum, 0 <= BETA < 1; 0.5 "
                     "about halved the epochs on weakly regularised data "
                     "and cost a few at the default --l2 10, "
                     "g3doc/trainer.md; 'auto': 0.5 or 0, chosen from how "
                     "fast the first 4 epochs' gap falls; 0: off). "
                     "One process, whole epochs (no --batch-size); default: "
                     "'auto' where it applies (whole epochs in a random "
                     "order, without asdca or --average-from), else off; "
                     "kept in model.json, "
                     "--resume --momentum BETA changes it")
  train.add_argument("--cache-dir", default=None,
                     help="default: MODEL_DIR/cache")
  train.add_argument("--resume", action="store_true",
                     help="continue the model in --model-dir")
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
  parser.add_argument(
      "--format", default=None if scoring else "criteo",
      choices=("criteo", "libsvm"),
      help="the files' format (default: the model's)" if scoring else
      "the files' format (default: criteo)")
  # Feature ids are int32: at most 2^31 buckets.
  parser.add_argument("--bucket-bits", type=_int_in(1, 31), default=20,
                      help="Criteo: 2^k hash buckets (1 <= k <= 31)")
  parser.add_argument("--skip-bad-lines", action="store_true",
                      help="skip and count malformed lines")


def run(args):
  """Runs a parsed subcommand; returns the exit status."""
  try:
    return {"generate": generate, "train": train, "evaluate": evaluate,
            "predict": predict, "export": export}[args.command](args)
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
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "",
                     error.message)
    message = re.sub(r"\s*\[Op:[^\]]*\]( name: \S*)?\s*$", "", message)
    print(f"tf-sdca {args.command}: error: {' '.join(message.split())}",
          file=sys.stderr)
    return 2


# ------------------------------------------------------------------ generate
def generate(args):
  """Writes `--rows` generated rows into `--files` TSV files (streamed, so
  any size fits) and the rows' true click probabilities (truth.npy)."""
  from tf_sdca.data import synthetic  # pylint: disable=import-outside-toplevel
  os.makedirs(args.out, exist_ok=True)
  per_file = -(-args.rows // max(1, args.files))
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
      handle.write(synthetic._tsv_lines(  # pylint: disable=protected-access
          part["labels"], part["counts"], part["cat_values"]))
      offset += take
      written += take
    print(f"\r  {written:,} / {args.rows:,} rows", end="", flush=True)
  if handle is not None:
    handle.close()
  truth.flush()
  print(f"\nwrote {index + 1} file(s) and truth.npy to {args.out} in "
        f"{time.perf_counter() - start:.1f} s")
  return 0


# --------------------------------------------------------------- features
def _criteo_scale(arrays, meta):
  """The divisors of the 13 Criteo counts (their training maxima, kept in
  `meta` so that resumed training and scoring divide alike)."""
  if meta.get("scale") is None:
    top = np.full(13, 1e-6, np.float32)
    for part in arrays["dense"]:
      if part.shape[0]:
        top = np.maximum(top, part.max(axis=0))
    meta["scale"] = top.tolist()
  return np.asarray(meta["scale"], np.float32)


def _criteo_row_chunks(arrays, meta):
  """The cached Criteo chunks as a `RowChunks` for `InMemorySdca.fit`: each
  cache part is scaled and packed in turn and its memory map dropped, so
  the whole arrays are never held beside the packed rows (issue 13's 4 GB
  target for 10M rows)."""
  from tf_sdca.engine import RowChunks  # pylint: disable=import-outside-toplevel
  scale = _criteo_scale(arrays, meta)
  n = sum(p.shape[0] for p in arrays["labels"])

  def chunks():
    while arrays["labels"]:
      labels = np.asarray(arrays["labels"].pop(0), np.float32)
      counts = arrays["dense"].pop(0)
      dense = np.empty((labels.shape[0], 14), np.float32)
      dense[:, :13] = counts / scale
      dense[:, 13] = 1.0  # the intercept
      # Increasing ids in a row, as in `_features`.
      ids = np.sort(arrays["ids"].pop(0), axis=1)
      yield dict(labels=labels, dense=dense, ids=ids)

  return RowChunks(chunks, num_examples=n, num_ids=26 * n, dense_dim=14,
                   num_features=meta["num_features"])


def _features(fmt, arrays, meta):
  """InMemorySdca feature kwargs from cached (or streamed) arrays.

  Consumes `arrays` (lists of chunk arrays, possibly memory maps): each chunk
  is copied into the result and dropped, so a memory-mapped chunk's pages
  leave the process's resident set as soon as they are copied.
  """
  from tf_sdca.data import cache  # pylint: disable=import-outside-toplevel
  if fmt == "criteo":
    parts = arrays["labels"]
    n = sum(p.shape[0] for p in parts)
    scale = _criteo_scale(arrays, meta)
    labels = np.empty(n, np.float32)
    dense = np.empty((n, 14), np.float32)
    dense[:, 13] = 1.0  # the intercept
    id_parts = arrays["ids"]
    ids = np.empty((n, 26), id_parts[0].dtype if id_parts else np.int32)
    start = 0
    while parts:
      rows = slice(start, start + parts[0].shape[0])
      labels[rows] = parts.pop(0)
      dense[rows, :13] = arrays["dense"].pop(0) / scale
      ids[rows] = id_parts.pop(0)
      start = rows.stop
    # Increasing ids in every row (the order of a row's fields does not
    # matter to a linear model) let the op take |x_i|^2 without merging
    # repeats; sorting here, in place, spares InMemorySdca a sorted copy.
    ids.sort(axis=1)
    return labels, dict(dense=dense, ids=ids,
                        num_features=meta["num_features"])
  labels = cache.concatenate(arrays["labels"], np.float32)
  n = labels.shape[0]
  ones = np.ones((n, 1), np.float32)
  lengths = cache.concatenate(arrays["lengths"], np.int64)
  indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  indices = cache.concatenate(arrays["indices"])  # int32
  values = cache.concatenate(arrays["values"], np.float32)
  if meta.get("num_features") is None:
    meta["num_features"] = int(indices.max()) + 1 if indices.size else 1
  keep = indices < meta["num_features"]  # features unseen in training
  if not keep.all():
    rows = np.repeat(np.arange(n), lengths)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(
        rows[keep], minlength=n))]).astype(np.int64)
    indices, values = indices[keep], values[keep]
  if meta["loss"] in _BINARY:
    labels = (labels > 0).astype(np.float32)
  elif losses.is_multiclass(meta["loss"]):
    labels = class_ids(labels, meta)
  return labels, dict(dense=ones, indptr=indptr, indices=indices,
                      values=values, num_features=meta["num_features"])


def choose_classes(labels, num_classes):
  """The label value of each class id, from the training labels: their K
  distinct values in increasing order, or (fewer distinct values) the ids
  0 ... K-1 themselves when every label is one.

  Raises:
    ValueError: more than K distinct labels, or fewer that are not ids in
      [0, K).
  """
  values = np.unique(labels)
  if values.size == num_classes:
    return [float(v) for v in values]
  if values.size < num_classes and np.all(
      (values >= 0) & (values < num_classes) & (values == np.round(values))):
    return [float(k) for k in range(num_classes)]
  shown = ", ".join(f"{v:g}" for v in values[:10])
  raise ValueError(
      f"--num-classes {num_classes}: the labels have {values.size} distinct "
      f"values ({shown}{', ...' if values.size > 10 else ''}); give as many "
      f"classes as distinct labels, or labels that are class ids in "
      f"[0, {num_classes})")


def class_ids(labels, meta):
  """float32 class ids of label values, by the model's `classes`.

  Raises:
    ValueError: a label that is none of the model's classes (named with
      its row).
  """
  classes = np.asarray(meta["classes"], np.float64)
  order = np.argsort(classes)
  pos = np.searchsorted(classes[order], labels)
  pos = np.minimum(pos, classes.size - 1)
  bad = np.flatnonzero(classes[order][pos] != labels)
  if bad.size:
    raise ValueError(f"label {labels[bad[0]]:g} (row {bad[0]}) is none of "
                     f"the model's classes "
                     f"({', '.join(f'{c:g}' for c in classes)})")
  return order[pos].astype(np.float32)


# ------------------------------------------------------------------ train




_META_KEYS = ("format", "loss", "l1", "l2", "num_features", "rows",
              "epochs_done", "history")


def has_model(model_dir):
  """Whether `model_dir` holds a model (its checkpoint or its model.json)."""
  return any(os.path.exists(os.path.join(model_dir, name))
             for name in ("checkpoint.npz", "model.json"))


def load_model(model_dir):
  """(meta dict, checkpoint arrays) of a model directory, checked against
  each other.

  Raises:
    FileNotFoundError: no model in `model_dir`.
    ValueError: a truncated or corrupt file, missing keys, or arrays that do
      not fit the metadata (a clear error, never patched).
  """
  meta_path = os.path.join(model_dir, "model.json")
  ckpt_path = os.path.join(model_dir, "checkpoint.npz")
  if not has_model(model_dir):
    raise FileNotFoundError(f"no model in {model_dir} (no checkpoint.npz "
                            "or model.json)")
  if not os.path.exists(ckpt_path):
    raise ValueError(f"{model_dir} has model.json but no checkpoint.npz")
  try:
    with np.load(ckpt_path) as ckpt:
      arrays = {k: ckpt[k] for k in ckpt.files}
  except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError) as e:
    raise ValueError(f"{ckpt_path} is truncated or corrupt ({e}); train "
                     "again with --overwrite") from None
  try:
    if "meta_json" in arrays:  # written with the arrays: authoritative
      meta = json.loads(str(arrays.pop("meta_json")))
    else:  # a checkpoint from before the metadata moved inside it
      with open(meta_path) as f:
        meta = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f"the model metadata in {model_dir} is unreadable "
                     f"({e}); train again with --overwrite") from None
  missing = [k for k in _META_KEYS if not isinstance(meta, dict) or
             k not in meta]
  if missing:
    raise ValueError(f"the model metadata in {model_dir} lacks "
                     f"{', '.join(missing)}; train again with --overwrite")
  _check_checkpoint(model_dir, meta, arrays)
  return meta, arrays


def _class_axis(meta):
  """The trailing axis of a multiclass model's weights and duals: (K,);
  () for the other losses."""
  return ((meta["num_classes"],) if losses.is_multiclass(meta["loss"])
          else ())


def _check_checkpoint(model_dir, meta, arrays):
  """The arrays fit the metadata: weights present and finite, one dual per
  row (when the checkpoint has duals), the epoch count the same."""
  def fail(what):
    raise ValueError(f"{model_dir}/checkpoint.npz {what}; train again with "
                     "--overwrite")
  for key in ("sparse_weights", "dense_weights"):
    if key not in arrays:
      fail(f"has no {key}")
    bad = np.flatnonzero(~np.isfinite(arrays[key]))
    if bad.size:
      fail(f"has {key}[{bad[0]}] = {arrays[key][bad[0]]}, not finite")
  classes = _class_axis(meta)
  if meta["num_features"] is not None and \
      arrays["sparse_weights"].shape != (meta["num_features"],) + classes:
    fail(f"has {arrays['sparse_weights'].shape[0]} sparse weights, the "
         f"metadata {meta['num_features']} features")
  if "duals" in arrays and \
      arrays["duals"].shape != (meta["rows"],) + classes:
    fail(f"has {arrays['duals'].shape[0]} duals for {meta['rows']} rows")
  if "duals" in arrays:
    bad = np.flatnonzero(~np.isfinite(arrays["duals"]))
    if bad.size:
      fail(f"has duals[{bad[0]}] = {arrays['duals'][bad[0]]}, not finite")
  # The metadata's numbers enter every score too: a NaN l1 or scale would
  # make every prediction NaN as surely as a NaN weight.
  for key in ("l1", "l2"):
    if not isinstance(meta[key], (int, float)) or not np.isfinite(meta[key]):
      fail(f"has metadata {key} = {meta[key]!r}, not a finite number")
  if meta.get("scale") is not None:
    scale = np.asarray(meta["scale"], np.float64)
    bad = np.flatnonzero(~(np.isfinite(scale) & (scale > 0)))
    if bad.size:
      fail(f"has metadata scale[{bad[0]}] = {scale[bad[0]]}, not a finite "
           "positive number")
  for key in ("last_sparse_weights", "last_dense_weights", "last_duals"):
    if key in arrays:  # the last iterate of an averaged model
      bad = np.flatnonzero(~np.isfinite(arrays[key]))
      if bad.size:
        fail(f"has {key}[{bad[0]}] = {arrays[key].flat[bad[0]]}, not finite")
  if "epoch" in arrays and int(arrays["epoch"]) != meta["epochs_done"]:
    fail(f"is of epoch {int(arrays['epoch'])}, the metadata of epoch "
         f"{meta['epochs_done']}")


def train(args):
  """`tf-sdca train`."""
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
                         visit_order=getattr(args, "visit_order",
                                             "permutation")),
                    options.PROCESSES, options.COMMAND_LINE,
                    "--local-cluster or TF_CONFIG")
    return distributed_command.train(args)
  distributed_command.guard_single_process_resume(args)
  from tf_sdca.data import cache  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  os.makedirs(args.model_dir, exist_ok=True)
  exists = has_model(args.model_dir)
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
  arrays, info = cache.load_or_build(
      args.data, args.format, args.cache_dir or os.path.join(
          args.model_dir, "cache"), args.bucket_bits, args.skip_bad_lines,
      verbose)
  if info["bad_lines"]:
    print(f"skipped {info['bad_lines']:,} malformed line(s); first: "
          f"{info['first_bad_lines'][0]}")
  if not info["rows"]:
    raise ValueError(f"no rows to train on in {', '.join(args.data)}" +
                     (" (every line was malformed)" if info["bad_lines"]
                      else ""))
  if args.resume and exists:
    meta, ckpt = load_model(args.model_dir)
    if meta["rows"] != info["rows"]:
      raise ValueError(f"--resume: the model was trained on {meta['rows']:,} "
                       f"rows, the data has {info['rows']:,}")
    if average_from is not None and \
        average_from != meta.get("average_from"):
      trained = meta.get("average_from")
      raise ValueError(
          f"--resume --average-from {average_from}: the model was trained "
          + ("without --average-from" if trained is None else
             f"with --average-from {trained}") +
          " (a mean cannot change its first epoch; leave --average-from "
          "out to continue as it was trained)")
  else:
    meta = dict(format=args.format, loss=losses.op_name(args.loss),
                l1=args.l1, l2=args.l2,
                gamma=1.0, seed=args.seed, bucket_bits=args.bucket_bits,
                num_features=(1 << args.bucket_bits
                              if args.format == "criteo" else None),
                scale=None, rows=info["rows"], epochs_done=0, history=[],
                average_from=average_from,
                visit_order=getattr(args, "visit_order", "permutation"))
    if meta["visit_order"] == "asdca":
      meta.update(asdca_batch_size=args.asdca_batch_size,
                  asdca_theta=args.asdca_theta)
    if getattr(args, "hinge_step", "projection") != "projection":
      meta["hinge_step"] = args.hinge_step
    if multiclass:
      meta["num_classes"] = num_classes
      meta["classes"] = choose_classes(
          cache.concatenate(arrays["labels"], np.float64), num_classes)
    ckpt = None
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
  if args.format == "criteo" and (args.batch_size is None or
                                  args.batch_size >= info["rows"]):
    labels, features = None, dict(rows=_criteo_row_chunks(arrays, meta))
  else:
    labels, features = _features(args.format, arrays, meta)
  # A resumed model keeps the order (and ASDCA's options, the hinge's step)
  # it was trained with.
  model = InMemorySdca(loss=meta["loss"], l1=meta["l1"], l2=meta["l2"],
                       seed=meta["seed"], num_threads=args.threads,
                       num_classes=meta.get("num_classes"),
                       average_from=meta.get("average_from"),
                       visit_order=meta.get("visit_order", "permutation"),
                       asdca_batch_size=meta.get("asdca_batch_size", 8),
                       asdca_theta=meta.get("asdca_theta"),
                       hinge_step=meta.get("hinge_step", "projection"),
                       momentum=meta.get("momentum", 0.0))
  if ckpt is not None:
    if "rows" in features:  # packed cache part by cache part
      num_features = features["rows"].num_features
      dense_dim = features["rows"].dense_dim
    else:
      num_features = features["num_features"]
      dense = features.get("dense")
      dense_dim = 0 if dense is None else dense.shape[1]
    classes = _class_axis(meta)
    shapes = dict(sparse_weights=(num_features or 0,) + classes,
                  dense_weights=(dense_dim,) + classes,
                  duals=(info["rows"],) + classes)
    averaged = int(ckpt.get("average_count", 0)) > 0
    if averaged:
      shapes.update({"last_" + key: shape for key, shape in
                     list(shapes.items())})
    for key, shape in shapes.items():
      if key not in ckpt or ckpt[key].shape != shape:
        raise ValueError(
            f"--resume: {args.model_dir}/checkpoint.npz has {key} of shape "
            f"{ckpt[key].shape if key in ckpt else 'none'}, the data needs "
            f"{shape}")
    model.sparse_weights = ckpt["sparse_weights"]
    model.dense_weights = ckpt["dense_weights"]
    model.duals = ckpt["duals"]
    if "asdca_iterate" in ckpt:  # ASDCA's accelerated iterate goes on
      model.asdca_iterate = ckpt["asdca_iterate"]
    if "momentum_previous_duals" in ckpt:
      # The extrapolation goes on as in an uninterrupted run (the fit
      # checks the shapes).
      model.momentum_state = {key: ckpt["momentum_" + key] for key in (
          "previous_duals", "previous_table", "last_dual", "restart",
          "auto_gaps") if "momentum_" + key in ckpt}
    if averaged:  # the checkpoint's weights are the mean so far
      model.last_iterate = {key: ckpt["last_" + key] for key in
                            ("sparse_weights", "dense_weights", "duals")}
      model.average_count = int(ckpt["average_count"])

  def checkpoint(epoch, history):
    meta["epochs_done"] = epoch + 1
    meta["history"].append(dict(epoch=epoch + 1, loss=history["loss"][-1],
                                duality_gap=history["duality_gap"][-1],
                                rows_per_sec=history["rows_per_sec"][-1]))
    last = dict(sparse_weights=model.sparse_weights,
                dense_weights=model.dense_weights, duals=model.duals)
    mean = model.running_average()
    if mean is None:  # no averaging, or not yet at epoch T0
      saved = last
    else:  # the mean is the model; the last iterate resumes training
      saved = dict(sparse_weights=mean["sparse_weights"],
                   dense_weights=mean["dense_weights"], duals=mean["duals"],
                   average_count=np.int64(mean["count"]),
                   **{"last_" + key: value for key, value in last.items()})
      if meta["history"]:
        meta["history"][-1].update(last_loss=history["last_loss"][-1],
                                   last_duality_gap=(
                                       history["last_duality_gap"][-1]))
    if model.asdca_iterate is not None:
      saved["asdca_iterate"] = model.asdca_iterate
    state = model.current_momentum_state()
    if state is not None:  # --momentum: what the next epoch extrapolates
      saved.update({"momentum_" + key: value for key, value in state.items()})
    files.save_model_atomically(args.model_dir, meta, epoch=epoch + 1,
                                **saved)
    if os.environ.get("TF_SDCA_TEST_STOP_AFTER_EPOCH") == str(epoch + 1):
      raise KeyboardInterrupt  # test hook: an interruption after saving

  if meta["history"] and meta["history"][-1]["duality_gap"] < args.tol:
    print(f"already converged: gap {meta['history'][-1]['duality_gap']:.2e}")
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


# ------------------------------------------------------- evaluate / predict
def score_files(args):
  """(labels, scores) over the files, streamed chunk by chunk."""
  from tf_sdca.data import criteo, libsvm  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  meta, ckpt = load_model(args.model_dir)
  if args.format is None:
    args.format = meta["format"]
  if meta["format"] != args.format:
    raise ValueError(f"the model was trained on {meta['format']} data, "
                     f"got --format {args.format}")
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
  all_labels, all_scores = [], []
  for chunk in chunks:
    if args.format == "criteo":
      arrays = {k: [chunk[k]] for k in ("labels", "dense", "ids")}
    else:
      arrays = dict(labels=[chunk["labels"]],
                    lengths=[np.diff(chunk["indptr"])],
                    indices=[chunk["indices"]], values=[chunk["values"]])
    labels, features = _features(args.format, arrays, dict(meta))
    features.pop("num_features")
    all_labels.append(labels)
    # Overflowing weights are reported by `_check_scores` in one line, not
    # by numpy's RuntimeWarnings.
    with np.errstate(over="ignore", invalid="ignore"):
      all_scores.append(model.predict(**features))
  if bad.count:
    print(f"skipped {bad.count:,} malformed line(s)", file=sys.stderr)
  return (meta, np.concatenate(all_labels) if all_labels else np.zeros(0),
          np.concatenate(all_scores) if all_scores else np.zeros(0))


def _check_scores(args, scores):
  """A score that is not finite (weights that overflow w.x, though each is
  finite) is an error naming the model, never a NaN metric with exit 0."""
  bad = np.flatnonzero(~np.isfinite(scores))
  if bad.size:
    raise ValueError(
        f"the model in {args.model_dir} gives {bad.size:,} score(s) that "
        f"are not finite (first: row {bad[0]} of {', '.join(args.data)}, "
        f"{scores[bad[0]]}); its weights overflow w.x")


def evaluate(args):
  """`tf-sdca evaluate`: prints rows, log loss, AUC, accuracy (logistic) or
  the mean loss."""
  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel
  meta, labels, scores = score_files(args)
  _check_scores(args, scores)
  print(f"rows {labels.shape[0]:,}")
  if losses.is_multiclass(meta["loss"]):
    predicted = np.argmax(scores, axis=1)
    if meta["loss"] == "softmax_loss":
      p = scores[np.arange(labels.shape[0]), labels.astype(np.int64)]
      print(f"log_loss {-np.mean(np.log(np.maximum(p, 1e-300))):.6f}")
    print(f"accuracy {np.mean(predicted == labels):.6f}")
  elif meta["loss"] == "logistic_loss":
    print(f"log_loss {metrics.log_loss(labels, scores):.6f}")
    print(f"auc {metrics.auc(labels, scores):.6f}")
    print(f"accuracy {metrics.accuracy(labels, scores):.6f}")
  elif meta["loss"] in _BINARY:
    print(f"auc {metrics.auc(labels, scores):.6f}")
    print(f"accuracy {np.mean((scores > 0) == (labels > 0)):.6f}")
  else:
    print(f"mse {np.mean((scores - labels) ** 2):.6f}")
    print(f"mae {np.mean(np.abs(scores - labels)):.6f}")
  return 0


def predict(args):
  """`tf-sdca predict`: one score per line (probabilities for logistic)."""
  meta, _, scores = score_files(args)
  _check_scores(args, scores)
  if losses.is_multiclass(meta["loss"]):
    # LIBLINEAR's `predict -b 1` layout: the classes, then per row the
    # predicted label and the K probabilities (softmax) or scores.
    classes = np.asarray(meta["classes"])
    rows = np.column_stack([classes[np.argmax(scores, axis=1)], scores])
    np.savetxt(args.out, rows, fmt="%.9g", comments="",
               header="labels " + " ".join(f"{c:g}" for c in classes))
    print(f"wrote {scores.shape[0]:,} predictions to {args.out}")
    return 0
  np.savetxt(args.out, scores, fmt="%.9g")
  print(f"wrote {scores.shape[0]:,} scores to {args.out}")
  return 0


def export(args):
  """`tf-sdca export`: a SavedModel whose `serving_default` scores raw lines
  of the model's format (tf_sdca.serving)."""
  from tf_sdca import serving  # pylint: disable=import-outside-toplevel
  meta, ckpt = load_model(args.model_dir)
  if os.path.exists(args.out):
    raise ValueError(f"--out {args.out} exists; give a new directory")
  serving.export_lines_scorer(meta, ckpt["sparse_weights"],
                              ckpt["dense_weights"], args.out)
  print(f"wrote a SavedModel scoring raw {meta['format']} lines to "
        f"{args.out} (signature serving_default: lines -> scores, margins, "
        "valid)")
  return 0


"""The `tf-sdca` command line.

  tf-sdca generate --rows N --out DIR [--files K] [--seed S]
  tf-sdca train DATA... --model-dir DIR [--format criteo|libsvm] [--loss L]
                [--l1 X] [--l2 X] [--epochs E] [--tol T] [--batch-size B]
                [--threads T] [--bucket-bits K] [--resume]
                [--skip-bad-lines]
  tf-sdca evaluate DATA... --model-dir DIR
  tf-sdca predict DATA... --model-dir DIR --out FILE
  tf-sdca export --model-dir DIR --out SAVEDMODEL_DIR
  tf-sdca demo [--rows N] [--epochs E] [--tol T] [--threads T]

`generate` writes Criteo-shaped synthetic click logs (TSV, known ground
truth). `train` parses the files once into a binary cache in the model
directory (in a child process while it imports TensorFlow; later runs
memory-map the cache), trains by SDCA on the rows packed once
(`TfSdca>PackRows`) with a progress
bar (rows/s; the exact duality gap after each epoch) and checkpoints the weights
and the dual state after every epoch, atomically: a Ctrl-C or a kill loses at
most the current epoch, and `--resume` continues to the same model an
uninterrupted run gives. `evaluate` prints log loss, AUC and accuracy;
`predict` writes one score per line; `export` writes a SavedModel that
scores raw text lines (parsing, hashing, scaling in TensorFlow ops), for
TensorFlow Serving. `demo` generates TSV files in a
temporary directory, trains on all its files but the last (90% of the
rows where they divide by 10) the way `train` does, and reports on the
last one against the ground truth.
"""
import argparse
import contextlib
import functools
import json
import os
import re
import sys
import time

from tf_sdca import commands
from tf_sdca import model_files
from tf_sdca import options
from tf_sdca import tensorflow_import
from tf_sdca.data import text_parser


def _quietly(function):
  """Runs `function` with the process's stderr (fd 2) pointed at
  /dev/null: TensorFlow's C++ start-up writes banners there (oneDNN, CUDA
  probing, absl's "log messages before InitializeLog") that
  TF_CPP_MIN_LOG_LEVEL does not silence and that a command-line user has no
  use for. A failure restores stderr first, so its traceback is seen.
  TF_SDCA_VERBOSE=1 keeps them."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if os.environ.get("TF_SDCA_VERBOSE") == "1":
    function()
    return
  sys.stderr.flush()
  saved = os.dup(2)
  try:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    os.close(devnull)
    function()
  finally:
    os.dup2(saved, 2)
    os.close(saved)


def _start_tensorflow(lazily=False):
  """Imports TensorFlow (without Keras: `tensorflow_import`; `lazily`: its
  runtime, each API name imported on first use), probes the devices (which
  log) and loads the op."""
  tf = (tensorflow_import.import_tensorflow_lazily() if lazily else
        tensorflow_import.import_tensorflow())
  from tf_sdca.ops import load_ops  # pylint: disable=import-outside-toplevel
  tf.config.list_physical_devices()
  load_ops()


def _start_tensorflow_quietly(lazily=False):
  """`_start_tensorflow`, `_quietly`."""
  _quietly(lambda: _start_tensorflow(lazily))


class _PlainText:
  """A text stream for output that is not a terminal (a file, a pipe, a CI
  log): the progress lines redraw themselves with carriage returns and
  Keras's progress bar writes ANSI colour codes whatever the stream is, which
  a file shows as raw escapes. This keeps, of each line, only what a terminal
  would finally show, without the escapes."""

  _ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]|\x08")

  def __init__(self, stream):
    self._stream = stream
    self._line = ""

  def write(self, text):
    self._line += self._ESCAPES.sub("", text)
    *lines, self._line = self._line.split("\n")
    for line in lines:
      shown = line.rsplit("\r", 1)[-1]
      if shown.strip() or "\r" not in line:  # a progress line's last state
        self._stream.write(shown + "\n")
    return len(text)

  def flush(self):
    self._stream.flush()

  def isatty(self):
    return False

  @property
  def encoding(self):
    return getattr(self._stream, "encoding", "utf-8")

  def close_line(self):
    """Writes what is left of an unfinished line."""
    if self._line.rsplit("\r", 1)[-1].strip():
      self._stream.write(self._line.rsplit("\r", 1)[-1] + "\n")
    self._line = ""
    self._stream.flush()


def _plain_unless_terminal(body):
  """body()'s result, its output cleaned of progress redraws and colour
  codes where stdout is not a terminal (`train > log` held Keras's raw
  escapes)."""
  if sys.stdout.isatty():
    return body()
  plain = _PlainText(sys.stdout)
  try:
    with contextlib.redirect_stdout(plain):
      return body()
  finally:
    plain.close_line()


def _demo(args, start_tensorflow=None):
  """Runs the demo, its output cleaned where stdout is not a terminal."""
  return _plain_unless_terminal(
      functools.partial(_run_demo, args, start_tensorflow))


def _run_demo(args, start_tensorflow=None):
  """Generates TSV files in a temporary directory, trains on all but the
  last (90% of the rows where they divide by 10) through the same path as
  `train` (parse, cache, SDCA, checkpoints; with `start_tensorflow`,
  TensorFlow is imported while the cache is built, as `train` does),
  evaluates on the last and compares with the ground truth."""
  import tempfile  # pylint: disable=import-outside-toplevel

  import numpy as np  # pylint: disable=import-outside-toplevel

  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel

  commands.check_bucket_bits(args.bucket_bits)  # before generating
  with tempfile.TemporaryDirectory(prefix="tf_sdca_demo_") as tmp:
    data_dir = os.path.join(tmp, "data")
    model_dir = os.path.join(tmp, "model")
    print(f"Generating {args.rows:,} Criteo-shaped rows (13 numeric + 26 "
          f"categorical features, known ground truth) in {data_dir}")
    commands.generate(argparse.Namespace(rows=args.rows, out=data_dir,
                                         files=10, seed=args.seed))
    files = sorted(os.path.join(data_dir, f) for f in os.listdir(data_dir)
                   if f.endswith(".tsv"))
    train_files, test_files = files[:-1], files[-1:]
    # (generate's split: files of ceil(rows / 10) rows, the last the rest;
    # 10% held out only where the rows divide evenly.)
    held = args.rows - -(-args.rows // 10) * len(train_files)
    print(f"Training on {len(train_files)} files ({args.rows - held:,} rows, "
          f"{100 * (args.rows - held) / args.rows:.0f}%), holding out "
          f"{os.path.basename(test_files[0])} ({held:,} row(s))")
    t0 = time.perf_counter()
    status = commands.train(argparse.Namespace(
        data=train_files, model_dir=model_dir, format="criteo",
        bucket_bits=args.bucket_bits, skip_bad_lines=False,
        loss="logistic_loss", l1=args.l1, l2=args.l2, epochs=args.epochs,
        tol=args.tol, batch_size=args.batch_size, threads=args.threads,
        seed=args.seed, cache_dir=None, resume=False, overwrite=False,
        quiet=args.quiet), start_tensorflow)
    if status:
      return status
    total_time = time.perf_counter() - t0
    meta, _ = model_files.load_model(model_dir)
    with open(os.path.join(model_dir, "cache", "manifest.json")) as f:
      parse_seconds = json.load(f)["parse_seconds"]
    _, labels, probs = commands.score_files(argparse.Namespace(
        data=test_files, model_dir=model_dir, format="criteo",
        skip_bad_lines=False))
    truth = np.load(os.path.join(data_dir, "truth.npy"))[-labels.shape[0]:]
  history = meta["history"]
  epoch_seconds = sum(meta["rows"] / h["rows_per_sec"] for h in history)
  print()
  print("tf_sdca demo report")
  print("-------------------")
  print(f"rows: {meta['rows']:,} train / {labels.shape[0]:,} test; "
        f"2^{args.bucket_bits} hash buckets; l2 = {args.l2:g}")
  print(f"parsing + caching the text: {parse_seconds:.1f} s "
        f"({meta['rows'] / parse_seconds:,.0f} rows/s); SDCA epochs run: "
        f"{len(history)}, {epoch_seconds:.1f} s "
        f"({meta['rows'] * len(history) / epoch_seconds:,.0f} rows/s); "
        f"total {total_time:.1f} s")
  print(f"final relative duality gap: {history[-1]['duality_gap']:.2e}")
  print("held-out rows: the trained model against the ground truth (the "
        "probabilities the labels were drawn from: a perfect model)")
  print(f"{'':18s}{'log loss':>10s}{'AUC':>8s}{'accuracy':>10s}")
  one_class = bool(np.all(labels > 0) or not np.any(labels > 0))
  for name, p in (("tf_sdca model", probs), ("ground truth", truth)):
    # (One class among the held-out rows: the AUC is undefined; it printed
    # nan.)
    auc = f"{'-':>8s}" if one_class else f"{metrics.auc(labels, p):8.4f}"
    print(f"{name:18s}{metrics.log_loss(labels, p):10.4f}{auc}"
          f"{metrics.accuracy(labels, p):10.4f}")
  if one_class:
    print(f"(AUC undefined: every held-out label is "
          f"{'positive' if labels[0] > 0 else 'negative'})")
  return 0


def main(argv=None):
  """Entry point of the `tf-sdca` console script: runs the command in
  `argv` (default: the process's own arguments) and returns its exit
  status.

  Run with the process's own arguments (the console script, `python -m
  tf_sdca.cli`), it ends the process itself once the command has returned
  and its output is flushed, without the interpreter's teardown: every
  file the command writes is closed by then, and tearing down TensorFlow
  and the training's arrays took 2.5-2.8 s after a 1M-row `train` on the
  loaded 2-core machine (2026-11-27, two runs). Called with an `argv`, it
  returns."""
  status = _run_command(argv)
  if argv is None:
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(int(status or 0))  # pylint: disable=protected-access
  return status


def _run_command(argv):
  """Parses `argv` and runs the command: its exit status."""
  parser = argparse.ArgumentParser(
      prog="tf-sdca", description="Linear models trained by SDCA.")
  sub = parser.add_subparsers(dest="command", required=True)
  demo = sub.add_parser(
      "demo", help="train on generated Criteo-shaped data and report")
  # (The types of `train`'s flags: a bad value is refused before any work.)
  # (At least a row in each of the 10 files: 9 to train on, 1 held out.)
  demo.add_argument("--rows", type=commands.int_in(10), default=1_000_000)
  demo.add_argument("--bucket-bits", type=commands.int_in(1, 31),
                    default=20)
  demo.add_argument("--epochs", type=commands.int_in(1), default=10)
  demo.add_argument("--tol", type=options.flag_type("tol"), default=1e-3,
                    help="stop when the relative duality gap is below this")
  demo.add_argument("--batch-size", type=commands.int_in(1), default=None)
  demo.add_argument("--l1", type=options.flag_type("l1"), default=0.0)
  demo.add_argument("--l2", type=options.flag_type("l2"), default=10.0)
  demo.add_argument("--threads", type=options.flag_type("num_threads"),
                    default=0)
  demo.add_argument("--seed", type=options.flag_type("seed"), default=0)
  demo.add_argument("--quiet", action="store_true")
  commands.add_parsers(sub)
  args = parser.parse_args(argv)
  if args.command in ("train", "demo") and "tensorflow" not in sys.modules:
    # `train` (and the demo's) reads its files while TensorFlow is
    # imported: the text parser is loaded first, with TensorFlow's
    # framework library for its hash (which writes banners too).
    _quietly(text_parser.load)
    if args.command == "demo":
      return commands.run(args, body=functools.partial(
          _demo, args, start_tensorflow=_start_tensorflow_quietly))
    # Without progress bars (Keras's) and in one process (neither
    # --local-cluster nor TF_CONFIG), `train` uses a few of TensorFlow's
    # modules: only those are imported
    # (`tensorflow_import.import_tensorflow_lazily`).
    lazily = bool(args.quiet and not getattr(args, "local_cluster", None)
                  and not os.environ.get("TF_CONFIG"))
    return _plain_unless_terminal(functools.partial(
        commands.run, args, start_tensorflow=functools.partial(
            _start_tensorflow_quietly, lazily)))
  _start_tensorflow_quietly()
  if args.command == "demo":
    return commands.run(args, body=functools.partial(_demo, args))
  return commands.run(args)


if __name__ == "__main__":
  sys.exit(main())

"""The `tf-sdca` command line.

  tf-sdca generate --rows N --out DIR [--files K] [--seed S]
  tf-sdca train DATA... --model-dir DIR [--format criteo|libsvm] [--loss L]
                [--l1 X] [--l2 X] [--epochs E] [--tol T] [--batch-size B]
                [--threads T] [--bucket-bits K] [--resume] [--skip-bad-lines]
  tf-sdca evaluate DATA... --model-dir DIR
  tf-sdca predict DATA... --model-dir DIR --out FILE
  tf-sdca demo [--rows N] [--epochs E] [--tol T] [--threads T]

`generate` writes Criteo-shaped synthetic click logs (TSV, known ground
truth). `train` parses the files once into a binary cache in the model
directory (later runs memory-map it), trains by SDCA with a progress bar
(rows/s; the exact duality gap after each epoch) and checkpoints the weights
and the dual state after every epoch, atomically: a Ctrl-C or a kill loses at
most the current epoch, and `--resume` continues to the same model an
uninterrupted run gives. `evaluate` prints log loss, AUC and accuracy;
`predict` writes one score per line. `demo` generates data in memory, trains
on 90% and reports on the other 10% against the ground truth.
"""
import argparse
import os
import sys
import time

from tf_sdca import commands


def _demo(args):
  import numpy as np  # pylint: disable=import-outside-toplevel

  from tf_sdca import metrics  # pylint: disable=import-outside-toplevel
  from tf_sdca.data import synthetic  # pylint: disable=import-outside-toplevel
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel

  print(f"Generating {args.rows:,} Criteo-shaped rows "
        f"(13 numeric + 26 categorical, 2^{args.bucket_bits} buckets)...")
  t0 = time.perf_counter()
  data = synthetic.generate_criteo_arrays(
      args.rows, num_buckets=1 << args.bucket_bits, seed=args.seed)
  print(f"  done in {time.perf_counter() - t0:.1f} s; click rate "
        f"{data['labels'].mean():.3f}")
  n_train = int(args.rows * 0.9)
  train = slice(0, n_train)
  test = slice(n_train, args.rows)

  # Log-counts scaled to [0, 1] by their training maximum, plus a constant
  # column as the intercept (regularised like TF's LinearSDCA bias).
  scale = np.maximum(data["dense"][train].max(axis=0), 1e-6)
  dense = np.concatenate(
      [data["dense"] / scale, np.ones((args.rows, 1), np.float32)], axis=1)
  model = InMemorySdca(loss="logistic_loss", l1=args.l1, l2=args.l2,
                       num_threads=args.threads, seed=args.seed)
  t0 = time.perf_counter()
  history = model.fit(
      data["labels"][train], dense=dense[train],
      ids=data["cat_ids"][train], num_features=1 << args.bucket_bits,
      epochs=args.epochs, batch_size=args.batch_size, tol=args.tol,
      verbose=0 if args.quiet else 1)
  train_time = time.perf_counter() - t0

  p = model.predict(dense=dense[test], ids=data["cat_ids"][test])
  y = data["labels"][test]
  truth = data["true_probabilities"][test]
  print()
  print("tf_sdca demo report")
  print("-------------------")
  print(f"rows: {n_train:,} train / {args.rows - n_train:,} test; "
        f"epochs run: {len(history['loss'])}; training time "
        f"{train_time:.1f} s ({n_train * len(history['loss']) / train_time:,.0f}"
        " rows/s)")
  print(f"final relative duality gap: {history['duality_gap'][-1]:.2e}")
  print(f"{'':18s}{'log loss':>10s}{'AUC':>8s}{'accuracy':>10s}")
  for name, probs in (("tf_sdca model", p), ("ground truth", truth)):
    print(f"{name:18s}{metrics.log_loss(y, probs):10.4f}"
          f"{metrics.auc(y, probs):8.4f}{metrics.accuracy(y, probs):10.4f}")
  return 0


def main(argv=None):
  """Entry point of the `tf-sdca` console script."""
  parser = argparse.ArgumentParser(
      prog="tf-sdca", description="Linear models trained by SDCA.")
  sub = parser.add_subparsers(dest="command", required=True)
  demo = sub.add_parser(
      "demo", help="train on generated Criteo-shaped data and report")
  demo.add_argument("--rows", type=int, default=1_000_000)
  demo.add_argument("--bucket-bits", type=int, default=20)
  demo.add_argument("--epochs", type=int, default=10)
  demo.add_argument("--tol", type=float, default=1e-3,
                    help="stop when the relative duality gap is below this")
  demo.add_argument("--batch-size", type=int, default=100_000)
  demo.add_argument("--l1", type=float, default=0.0)
  demo.add_argument("--l2", type=float, default=10.0)
  demo.add_argument("--threads", type=int, default=0)
  demo.add_argument("--seed", type=int, default=0)
  demo.add_argument("--quiet", action="store_true")
  commands.add_parsers(sub)
  args = parser.parse_args(argv)
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  if args.command == "demo":
    return _demo(args)
  return commands.run(args)


if __name__ == "__main__":
  sys.exit(main())

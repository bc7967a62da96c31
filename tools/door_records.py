"""Records every door's results on a fixed set of runs, to show a refactor
changes nothing.

Each run trains a few epochs through one door (InMemorySdca's paths, the
Keras model in memory and streamed, SdcaModel, the estimator, the command
line, the in-process CoCoA+ simulation) on small fixed data, with one
thread, and records a SHA-256 of every array it leaves (weights, duals,
per-epoch losses and gaps). Run it before a change with `--out before.json`,
after it with `--out after.json`, and `--compare before.json after.json`
lists every run whose bits moved.

  python tools/door_records.py --out /tmp/before.json
  python tools/door_records.py --out /tmp/after.json
  python tools/door_records.py --compare /tmp/before.json /tmp/after.json

A run that raises records the error's type and message instead, so a
changed message shows too.
"""
import argparse
import hashlib
import json
import os
import sys
import tempfile
import warnings

import numpy as np


def _digest(value):
  """SHA-256 of an array's dtype, shape and bytes (or of a float list)."""
  a = np.ascontiguousarray(np.asarray(value))
  h = hashlib.sha256(str((a.dtype.str, a.shape)).encode())
  h.update(a.tobytes())
  return h.hexdigest()[:16]


def _data():
  from sklearn.datasets import load_breast_cancer, load_digits  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  rng = np.random.default_rng(7)
  n, k, num_features = 3000, 6, 500
  ids = rng.integers(0, num_features, size=(n, k)).astype(np.int64)
  w_true = rng.normal(size=num_features)
  dense = rng.normal(size=(n, 3)).astype(np.float32)
  z = w_true[ids].sum(1) + dense @ np.array([1.0, -0.5, 0.25])
  y_sparse = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  digits_x, digits_y = load_digits(return_X_y=True)
  digits_x = (digits_x[:600] / 16.0).astype(np.float32)
  return dict(x=x, y=y.astype(np.float32), ids=ids, dense=dense,
              y_sparse=y_sparse, num_features=num_features,
              dx=digits_x, dy=digits_y[:600].astype(np.float32))


def _labels(loss, y):
  if loss in ("squared_loss", "absolute_loss"):
    return 2 * y - 1
  if loss == "poisson_loss":
    return y * 3
  return y


BINARY = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "absolute_loss", "poisson_loss")


def _in_memory_runs(d):
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel

  def run(loss, epochs=6, fit=None, **options):
    model = InMemorySdca(loss=loss, l2=options.pop("l2", 1.0), **options)
    h = model.fit(verbose=0, epochs=epochs, **fit)
    out = dict(loss=h["loss"], gap=h["duality_gap"], duals=model.duals)
    for name in ("sparse_weights", "dense_weights"):
      if getattr(model, name) is not None:
        out[name] = getattr(model, name)
    out["momentum_used"] = [model.momentum_used or 0.0]
    return out

  runs = {}
  for loss in BINARY:
    dense = dict(labels=_labels(loss, d["y"]), dense=d["x"])
    runs[f"inmemory/{loss}/default"] = lambda l=loss, f=dense: run(l, fit=f)
    runs[f"inmemory/{loss}/plain"] = (
        lambda l=loss, f=dense: run(l, fit=f, momentum=0))
  sparse = dict(labels=d["y_sparse"], ids=d["ids"], dense=d["dense"],
                num_features=d["num_features"])
  runs["inmemory/sparse/default"] = lambda: run("logistic_loss", fit=sparse)
  runs["inmemory/sparse/l1"] = lambda: run("logistic_loss", fit=sparse,
                                           l1=0.05, l2=0.5)
  for order in ("uniform", "cyclic", "adaptive", "shrinking"):
    runs[f"inmemory/sparse/{order}"] = (
        lambda o=order: run("logistic_loss", fit=sparse, visit_order=o))
  runs["inmemory/sparse/beta"] = lambda: run("logistic_loss", fit=sparse,
                                             momentum=0.5, epochs=8)
  runs["inmemory/sparse/average"] = lambda: run(
      "logistic_loss", fit=sparse, average_from=2)
  runs["inmemory/sparse/asdca"] = lambda: run(
      "logistic_loss", fit=sparse, visit_order="asdca")
  runs["inmemory/sparse/minibatch"] = lambda: run(
      "logistic_loss", fit=dict(sparse, batch_size=700))
  runs["inmemory/sparse/minibatch_fixed"] = lambda: run(
      "logistic_loss", fit=dict(sparse, batch_size=700, shuffle=False))
  runs["inmemory/sparse/weighted"] = lambda: run(
      "smooth_hinge_loss", fit=dict(sparse, example_weights=np.linspace(
          0.5, 2.0, len(d["y_sparse"])).astype(np.float32)))
  digits = dict(labels=d["dy"], dense=d["dx"])
  runs["inmemory/softmax"] = lambda: run("softmax", fit=digits,
                                         num_classes=10)
  runs["inmemory/multiclass_hinge"] = lambda: run(
      "multiclass_hinge", fit=digits, num_classes=10)
  runs["inmemory/multiclass_hinge/shrinking"] = lambda: run(
      "multiclass_hinge", fit=digits, num_classes=10,
      visit_order="shrinking")

  def resumed():
    model = InMemorySdca(loss="logistic_loss", l2=1.0)
    model.fit(verbose=0, epochs=3, **sparse)
    h = model.fit(verbose=0, epochs=7, initial_epoch=3, **sparse)
    return dict(loss=h["loss"], gap=h["duality_gap"], duals=model.duals,
                w=model.sparse_weights)
  runs["inmemory/sparse/resumed"] = resumed
  return runs


def _keras_runs(d):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel

  def run(loss, x, y, epochs=6, dataset=False, **options):
    model = LinearModel(loss=loss, l2=options.pop("l2", 1.0), **options)
    if dataset:
      x = tf.data.Dataset.from_tensor_slices(
          ({"x": x, "example_id": np.arange(len(y))}, y)).batch(200)
      y = None
    h = model.fit(x, y, epochs=epochs, verbose=0)
    out = {k: v for k, v in h.history.items()}
    for i, w in enumerate(model.get_weights()):
      out[f"w{i}"] = w
    return out

  runs = {}
  for loss in ("logistic", "squared", "hinge", "poisson"):
    y = _labels(loss + "_loss", d["y"])
    runs[f"keras/{loss}/default"] = lambda l=loss, y=y: run(l, d["x"], y)
  runs["keras/logistic/plain"] = lambda: run("logistic", d["x"], d["y"],
                                             momentum=0)
  runs["keras/logistic/average"] = lambda: run("logistic", d["x"], d["y"],
                                               average_from=2)
  runs["keras/logistic/asdca"] = lambda: run("logistic", d["x"], d["y"],
                                             visit_order="asdca")
  runs["keras/logistic/dataset"] = lambda: run("logistic", d["x"], d["y"],
                                               dataset=True)
  runs["keras/logistic/dataset_auto"] = lambda: run(
      "logistic", d["x"], d["y"], dataset=True, carry_over="auto")
  runs["keras/softmax"] = lambda: run("softmax", d["dx"], d["dy"],
                                      num_classes=10)
  return runs


def _sdca_model_runs(d):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca.sdca_model import SdcaModel  # pylint: disable=import-outside-toplevel

  def run(loss, carry_over=0.0, epochs=4):
    x, y = d["x"], _labels(loss, d["y"])
    w = tf.Variable(tf.zeros([x.shape[1]]))
    model = SdcaModel(None, dict(sparse_features_weights=[],
                                 dense_features_weights=[w]),
                      dict(loss_type=loss, symmetric_l2_regularization=1.0,
                           carry_over=carry_over))
    batches = [dict(sparse_features=[], dense_features=[x[r]],
                    example_weights=np.ones(len(r), np.float32),
                    example_labels=y[r],
                    example_ids=tf.constant([b"%d" % i for i in r]))
               for r in np.array_split(np.arange(len(y)), 3)]
    gaps = []
    for _ in range(epochs):
      for batch in batches:
        train_op = model.minimize(examples=batch)
      model.update_weights(train_op)
      gaps.append(model.duality_gap(batches))
    return dict(w=w.numpy(), gaps=np.asarray(gaps, np.float64))

  return {f"sdca_model/{loss}/{c}": (lambda l=loss, c=c: run(l, c))
          for loss in BINARY[:4] for c in (0.0, "auto")}


def _estimator_runs(d):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca import estimator  # pylint: disable=import-outside-toplevel
  fc = tf.feature_column

  def run(head):
    x, y = d["x"][:, :5], d["y"]
    if head == "regressor":
      y = 2 * y - 1
    with tempfile.TemporaryDirectory() as tmp:
      cls = (estimator.LinearClassifier if head == "classifier" else
             estimator.LinearRegressor)
      est = cls([fc.numeric_column("x", shape=5)], model_dir=tmp,
                optimizer=estimator.LinearSDCA(
                    example_id_column="example_id",
                    symmetric_l2_regularization=1.0))
      features = {"x": x, "example_id": np.arange(len(y))}
      est.train(lambda: ({k: tf.constant(v) for k, v in features.items()},
                         tf.constant(y[:, None])), steps=6)
      return {name: est.get_variable_value(name)
              for name in sorted(est.get_variable_names())}
  return {"estimator/classifier": lambda: run("classifier"),
          "estimator/regressor": lambda: run("regressor")}


def _cli_runs(d):
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel

  def run(extra):
    with tempfile.TemporaryDirectory() as tmp:
      data = os.path.join(tmp, "data")
      assert cli.main(["generate", "--out", data, "--rows", "3000",
                       "--seed", "3"]) == 0
      model = os.path.join(tmp, "model")
      assert cli.main(["train", *sorted(
          os.path.join(data, f) for f in os.listdir(data)
          if f.endswith((".tsv", ".txt"))), "--model-dir", model, "--epochs", "5",
                       "--bucket-bits", "12", "--quiet", *extra]) == 0
      with np.load(os.path.join(model, "checkpoint.npz")) as ckpt:
        # meta_json holds the run's paths and times.
        out = {k: ckpt[k] for k in ckpt.files if k != "meta_json"}
      meta = json.load(open(os.path.join(model, "model.json")))
      out["history"] = np.asarray(
          [[h.get("loss", 0.0), h.get("duality_gap", 0.0)]
           for h in meta["history"]], np.float64)
      return out
  return {"cli/default": lambda: run([]),
          "cli/hinge_plain": lambda: run(["--loss", "hinge", "--momentum",
                                          "0"])}


def _distributed_runs(d):
  from tf_sdca.distributed import simulation  # pylint: disable=import-outside-toplevel

  def run(momentum):
    sim = simulation.Simulation(
        dict(labels=d["y_sparse"], ids=d["ids"], dense=d["dense"]),
        num_shards=3, num_features=d["num_features"], loss="logistic",
        l2=1.0, momentum=momentum)
    history = sim.run(tol=1e-12, max_rounds=6)
    out = {k: np.asarray(v, np.float64) for k, v in history.items()
           if isinstance(v, list)}
    out["weights"] = sim.weights
    for i, s in enumerate(sim.shards):
      out[f"duals{i}"] = np.asarray(s.duals)
    return out
  return {"distributed/simulation": lambda: run(True),
          "distributed/simulation_plain": lambda: run(False)}


def record(selected=None):
  d = _data()
  runs = {}
  for group in (_in_memory_runs, _keras_runs, _sdca_model_runs,
                _estimator_runs, _cli_runs, _distributed_runs):
    runs.update(group(d))
  out = {}
  for name, fn in sorted(runs.items()):
    if selected and not any(s in name for s in selected):
      continue
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fn()
      out[name] = {k: _digest(v) for k, v in sorted(result.items())}
    except Exception as e:  # pylint: disable=broad-except
      out[name] = {"error": f"{type(e).__name__}: {e}"[:300]}
    print(name, "error" if "error" in out[name] else "ok", flush=True)
  return out


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--out")
  parser.add_argument("--only", nargs="*")
  parser.add_argument("--compare", nargs=2)
  args = parser.parse_args(argv)
  if args.compare:
    a, b = (json.load(open(p)) for p in args.compare)
    moved = [k for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    for k in moved:
      print(f"MOVED {k}:\n  before {a.get(k)}\n  after  {b.get(k)}")
    print(f"{len(a)} runs before, {len(b)} after, {len(moved)} moved")
    return 1 if moved else 0
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
  out = record(args.only)
  with open(args.out, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())

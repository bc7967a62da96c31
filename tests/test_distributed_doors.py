"""The estimator and Keras doors to training across processes: real worker
processes on loopback (free ports, nothing left behind), each running the
same user script with its own TF_CONFIG."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_sdca.distributed import launch
from tf_sdca.trainer import InMemorySdca

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_distributed import _assert_nothing_left, _tagged_env  # pylint: disable=wrong-import-position

_HERE = os.path.dirname(os.path.abspath(__file__))


def _rows(n=600, seed=4):
  rng = np.random.default_rng(seed)
  x = rng.normal(size=(n, 3)).astype(np.float32)
  c = rng.integers(0, 40, size=n)
  truth = x @ np.array([1.0, -2.0, 0.5]) + np.sin(c) - 0.3
  y = (rng.uniform(size=n) < 1 / (1 + np.exp(-truth))).astype(np.float32)
  w = rng.uniform(0.5, 2.0, size=n).astype(np.float32)
  y3 = np.argmax(x @ rng.normal(size=(3, 3)) + rng.gumbel(size=(n, 3)),
                 axis=1).astype(np.float32)
  return dict(x=x, c=c, y=y, w=w, y3=y3)


def _run_cluster(script_args, num_workers, timeout=150):
  """Runs tests/<script> in `num_workers` processes with their TF_CONFIGs;
  returns their (returncode, output); every process is gone after."""
  addresses = [f"127.0.0.1:{p}" for p in launch.free_ports(num_workers)]
  env, tag = _tagged_env()
  processes = []
  try:
    for index in range(num_workers):
      processes.append(subprocess.Popen(
          [sys.executable, *script_args(index)],
          env=dict(env, TF_CONFIG=launch.tf_config(addresses, index)),
          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outputs = [p.communicate(timeout=timeout)[0] for p in processes]
  finally:
    for p in processes:
      if p.poll() is None:
        p.kill()
        p.communicate()
  _assert_nothing_left(tag, addresses)
  return [(p.returncode, out) for p, out in zip(processes, outputs)]


@pytest.fixture(scope="module")
def estimator_cluster(tmp_path_factory):
  """The rows and, per worker, {class count: results} of one cluster whose
  workers train a binary LinearClassifier, then a 3-class one (one
  cluster's start, ~8-10 s of a 2-core machine, for both tests)."""
  tmp_path = tmp_path_factory.mktemp("estimator_cluster")
  data = _rows()
  np.savez(tmp_path / "data.npz", **data)
  model_dir = str(tmp_path / "model")
  results = _run_cluster(lambda k: [
      os.path.join(_HERE, "distributed_estimator_worker.py"), model_dir,
      str(tmp_path / "data.npz"), str(tmp_path / f"out-{k}.json"), "2,3"],
                         2)
  for code, output in results:
    assert code == 0, output[-3000:]
  data["model_dir"] = model_dir
  return data, [json.load(open(tmp_path / f"out-{k}.json")) for k in range(2)]


def test_estimator_with_a_multi_worker_config_trains_cocoa_plus_to_the_optimum(
    estimator_cluster):
  data, outs = estimator_cluster
  chief, other = (out["2"] for out in outs)
  # Both processes saw the same rounds and the same gap certificate, and
  # read the same model once train returned (the other worker's train
  # returned before the chief's checkpoint: "no checkpoint yet").
  assert chief["gaps"] == other["gaps"] and chief["gaps"][-1] < 1e-10
  assert chief == other
  # The optimum of the same objective, solved in this process by
  # InMemorySdca: sum_i w_i loss_i + l2/2 (|w|^2 + b^2), bias regularised.
  model = InMemorySdca("logistic", l2=2.0)
  model.fit(data["y"], dense=np.hstack([data["x"], np.ones((600, 1))]),
            ids=data["c"][:, None], num_features=40,
            example_weights=data["w"], epochs=2000, tol=1e-12, verbose=0)
  prefix = "linear/linear_model/"
  np.testing.assert_allclose(chief[prefix + "x/weights"],
                             model.dense_weights[:3], atol=1e-4)
  np.testing.assert_allclose(chief[prefix + "bias_weights"],
                             model.dense_weights[3:], atol=1e-4)
  np.testing.assert_allclose(chief[prefix + "c/weights"],
                             model.sparse_weights, atol=1e-4)
  assert chief["global_step"][0] == len(chief["gaps"])  # steps are rounds


def test_one_process_refuses_to_train_a_model_workers_trained(
    estimator_cluster):
  """Its duals are in the workers' files: one process went on from the
  weights with zero duals, its first step a fresh model's (the trained
  model thrown away, silently). It is refused; evaluate still reads it."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca import estimator  # pylint: disable=import-outside-toplevel
  data, outs = estimator_cluster
  columns = [tf.feature_column.numeric_column("x", shape=3),
             tf.feature_column.categorical_column_with_identity("c", 40)]
  classifier = estimator.LinearClassifier(
      columns, weight_column="w",
      model_dir=os.path.join(data["model_dir"], "classes-2"),
      optimizer=estimator.LinearSDCA("id", symmetric_l2_regularization=2.0))

  def input_fn():
    features = dict(x=data["x"], c=data["c"], w=data["w"],
                    id=np.arange(len(data["y"])))
    return tf.data.Dataset.from_tensor_slices((features, data["y"])).batch(64)

  with pytest.raises(ValueError, match=r"was trained across processes .*"
                     r"same multi-worker TF_CONFIG"):
    classifier.train(input_fn, steps=1)
  assert classifier.get_variable_value("global_step") == len(
      outs[0]["2"]["gaps"])
  metrics = classifier.evaluate(input_fn)
  assert metrics["global_step"] == len(outs[0]["2"]["gaps"])

def test_estimator_with_three_classes_trains_cocoa_plus_across_processes(
    estimator_cluster):
  """LinearClassifier(n_classes=3) with a multi-worker config: the softmax
  rounds end at the optimum one process reaches, in TF's variable shapes
  ([rows, 3] per column, [3] for the bias)."""
  data, outs = estimator_cluster
  chief, other = (out["3"] for out in outs)
  assert chief["gaps"] == other["gaps"] and chief["gaps"][-1] < 1e-10
  model = InMemorySdca("softmax", l2=2.0, num_classes=3)
  model.fit(data["y3"], dense=np.hstack([data["x"], np.ones((600, 1))]),
            ids=data["c"][:, None], num_features=40,
            example_weights=data["w"], epochs=3000, tol=1e-12, verbose=0)
  prefix = "linear/linear_model/"
  np.testing.assert_allclose(chief[prefix + "x/weights"],
                             model.dense_weights[:3].ravel(), atol=1e-4)
  np.testing.assert_allclose(chief[prefix + "bias_weights"],
                             model.dense_weights[3:].ravel(), atol=1e-4)
  np.testing.assert_allclose(chief[prefix + "c/weights"],
                             model.sparse_weights.ravel(), atol=1e-4)


@pytest.fixture(scope="module")
def keras_cluster(tmp_path_factory):
  """The rows and, per worker, {mode: results} of one Keras cluster that
  trains the logistic model, then the softmax one (one cluster's start,
  ~8-10 s of a 2-core machine, for both tests)."""
  tmp_path = tmp_path_factory.mktemp("keras_cluster")
  data = _rows()
  np.savez(tmp_path / "data.npz", **data)
  results = _run_cluster(lambda k: [
      os.path.join(_HERE, "distributed_keras_worker.py"),
      str(tmp_path / "data.npz"), str(tmp_path / f"out-{k}.json"),
      "logistic,softmax"], 2)
  for code, output in results:
    assert code == 0, output[-3000:]
  return data, [json.load(open(tmp_path / f"out-{k}.json")) for k in range(2)]


def test_keras_linear_model_under_multi_worker_strategy_trains_cocoa_plus(
    keras_cluster):
  data, outs = keras_cluster
  outs = [out["logistic"] for out in outs]
  assert outs[0]["gaps"] == outs[1]["gaps"] and outs[0]["gaps"][-1] < 1e-10
  assert outs[0]["predictions"] == outs[1]["predictions"]  # one model
  assert "pass this worker's x and y (not a dataset)" in outs[0]["refused"]
  model = InMemorySdca("logistic", l2=2.0)
  model.fit(data["y"], dense=np.hstack([data["x"], np.ones((600, 1))]),
            example_weights=data["w"], epochs=2000, tol=1e-12, verbose=0)
  logits = data["x"] @ model.dense_weights[:3] + model.dense_weights[3]
  np.testing.assert_allclose(outs[0]["predictions"],
                             1 / (1 + np.exp(-logits)), atol=1e-5)



def test_keras_softmax_under_multi_worker_strategy_trains_cocoa_plus(
    keras_cluster):
  """LinearModel(loss="softmax", num_classes=3) on two workers: one model,
  the probabilities of the same objective solved in this process."""
  data, outs = keras_cluster
  outs = [out["softmax"] for out in outs]
  assert outs[0]["gaps"] == outs[1]["gaps"] and outs[0]["gaps"][-1] < 1e-10
  assert outs[0]["predictions"] == outs[1]["predictions"]
  model = InMemorySdca("softmax", l2=2.0, num_classes=3)
  x1 = np.hstack([data["x"], np.ones((600, 1), np.float32)])
  model.fit(data["y3"], dense=x1, example_weights=data["w"], epochs=3000,
            tol=1e-12, verbose=0)
  np.testing.assert_allclose(np.reshape(outs[0]["predictions"], (600, 3)),
                             model.predict(dense=x1), atol=1e-5)


_BAD_ROWS = """
import sys
import numpy as np, tensorflow as tf
strategy = tf.distribute.MultiWorkerMirroredStrategy()
from tf_sdca.keras import LinearModel
index = strategy.cluster_resolver.task_id
x = np.random.default_rng(index).normal(size=(100, 3)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.float32)
if index == 1:
  x[7, 2] = np.nan
with strategy.scope():
  model = LinearModel(l2=1.0)
try:
  model.fit(x, y, epochs=5, verbose=0)
  print("TRAINED")
except Exception as error:  # pylint: disable=broad-except
  print("ERROR", type(error).__name__, error)
"""


def test_a_keras_worker_with_bad_rows_tells_the_others():
  """Worker 1's rows hold a NaN: its fit raised before joining the rounds,
  and worker 0 waited for it until its heartbeats stopped (for as long as
  its process lived, where the script caught the error) and then said a
  worker had probably died. Now worker 1 raises its own error and worker 0
  a ClusterError naming it."""
  results = _run_cluster(lambda k: ["-c", _BAD_ROWS], 2)
  for code, output in results:
    assert code == 0, output[-3000:]
  first, second = (next(line for line in output.splitlines()
                        if line.startswith(("ERROR", "TRAINED")))
                   for _, output in results)
  assert first.startswith("ERROR ClusterError") and \
      "workers [1] could not pack their rows" in first, first
  assert second.startswith("ERROR InvalidInputError") and "nan" in second, \
      second

_REPLICAS = """
import numpy as np, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(
    cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
from tf_sdca.keras import LinearModel
x = np.random.default_rng(0).normal(size=(200, 3)).astype(np.float32)
y = (x[:, 0] > 0).astype(np.float32)
with tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]).scope():
  model = LinearModel(l2=1.0)
try:
  model.fit(x, y, epochs=2, verbose=0)
  print("TRAINED")
except ValueError as error:
  print("REFUSED", error)
with tf.distribute.MirroredStrategy(["/cpu:0"]).scope():
  one = LinearModel(l2=1.0)
gap = one.fit(x, y, epochs=200, tol=1e-9, verbose=0).history["duality_gap"]
plain = LinearModel(l2=1.0)
plain.fit(x, y, epochs=200, tol=1e-9, verbose=0)
print("ONE", gap[-1], np.abs(one.predict(x, verbose=0) -
                            plain.predict(x, verbose=0)).max())
"""


def test_keras_under_a_several_replica_strategy_is_refused_one_replica_trains():
  env, tag = _tagged_env()
  result = subprocess.run([sys.executable, "-c", _REPLICAS], env=env,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == 0, result.stderr[-3000:]
  assert "REFUSED LinearModel.fit under MirroredStrategy with 2 replicas" in \
      result.stdout
  line = next(l for l in result.stdout.splitlines() if l.startswith("ONE"))
  gap, difference = (float(v) for v in line.split()[1:])
  assert gap < 1e-9 and difference < 1e-6  # the same training as no scope
  _assert_nothing_left(tag)


def test_keras_refuses_a_strategy_with_parameter_servers():
  # A ParameterServerStrategy needs its servers to construct; its cluster
  # is what LinearModel.fit looks at, so a subclass holding only that.
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras import linear_model  # pylint: disable=import-outside-toplevel

  class Unconnected(tf.distribute.experimental.ParameterServerStrategy):
    def __init__(self):  # pylint: disable=super-init-not-called
      pass
    num_replicas_in_sync = 1
    cluster_resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec({"chief": ["127.0.0.1:1"],
                              "worker": ["127.0.0.1:2", "127.0.0.1:3"],
                              "ps": ["127.0.0.1:4"]}),
        task_type="chief", task_id=0)

  with pytest.raises(ValueError, match=r"LinearModel.fit under Unconnected "
                     r"with parameter servers \['127.0.0.1:4'\]: Keras 3's "
                     "fit has no parameter-server loop"):
    linear_model._strategy_workers(Unconnected())  # pylint: disable=protected-access
  assert linear_model._strategy_workers(  # pylint: disable=protected-access
      tf.distribute.get_strategy()) is None  # no scope: train in-process

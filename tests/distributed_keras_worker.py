"""One process of tests/test_distributed_doors.py's Keras cluster: a user's
script under MultiWorkerMirroredStrategy (its own TF_CONFIG).

  python distributed_keras_worker.py DATA.npz OUT.json [MODES]

MODES: comma-separated `logistic` (the default) and `softmax` (3 classes,
labels `y3`, `LinearModel(loss="softmax", num_classes=3)`): each trains a
model of its own under the one strategy, in turn (a program's strategy is
made once, at its start); OUT.json maps each mode to its results.
"""
import json
import sys

import numpy as np
import tensorflow as tf


def main(data_path, out_path, modes="logistic"):
  strategy = tf.distribute.MultiWorkerMirroredStrategy()  # program start
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  with np.load(data_path) as f:
    data = {k: f[k] for k in f.files}
  index = strategy.cluster_resolver.task_id
  mine = np.arange(len(data["y"])) % 2 == index  # this worker's rows
  outs = {}
  for mode in modes.split(","):
    softmax = mode == "softmax"
    labels = data["y3"] if softmax else data["y"]
    with strategy.scope():
      model = (LinearModel(loss="softmax", num_classes=3, l2=2.0) if softmax
               else LinearModel(loss="logistic", l2=2.0))
    try:  # a worker's shard is its in-memory rows, not a dataset
      model.fit(tf.data.Dataset.from_tensor_slices(
          (data["x"][mine], labels[mine])).batch(32), epochs=1)
      refused = ""
    except ValueError as error:
      refused = str(error)
    history = model.fit(data["x"][mine], labels[mine],
                        sample_weight=data["w"][mine], epochs=1000, tol=1e-10,
                        verbose=0)
    outs[mode] = dict(
        gaps=history.history["duality_gap"], refused=refused,
        predictions=model.predict(data["x"], verbose=0).ravel().tolist())
  with open(out_path, "w") as f:
    json.dump(outs, f)


if __name__ == "__main__":
  main(*sys.argv[1:4])

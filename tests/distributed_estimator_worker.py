"""One process of tests/test_distributed_doors.py's estimator cluster: the
script every worker runs (its own TF_CONFIG), as a user's would be.

  python distributed_estimator_worker.py MODEL_DIR DATA.npz OUT.json [N]

N: comma-separated class counts (default 2); `3`: `LinearClassifier(
n_classes=3)` on the labels `y3` (softmax). Each trains its own classifier
in MODEL_DIR/classes-N, in turn, in the one cluster this process joins;
OUT.json maps each N to its results.
"""
import json
import os
import sys

import numpy as np

from tf_sdca import estimator


def main(model_dir, data_path, out_path, class_counts="2"):
  outs = {}
  for n_classes in class_counts.split(","):
    outs[n_classes] = _train(os.path.join(model_dir, f"classes-{n_classes}"),
                             data_path, int(n_classes))
  with open(out_path, "w") as f:
    json.dump(outs, f)


def _train(model_dir, data_path, n_classes):
  config = estimator.RunConfig(model_dir=model_dir, tf_random_seed=1)
  config.join_cluster(startup_timeout=60)  # before any TensorFlow op
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  with np.load(data_path) as f:
    data = {k: f[k] for k in f.files}
  # This worker's rows: a fixed shard (every other block of 50 rows).
  mine = (np.arange(len(data["y"])) // 50) % 2 == config.task_id
  features = dict(x=data["x"][mine], c=data["c"][mine], w=data["w"][mine],
                  id=np.flatnonzero(mine))
  columns = [tf.feature_column.numeric_column("x", shape=3),
             tf.feature_column.categorical_column_with_identity("c", 40)]
  labels = data["y3"] if n_classes > 2 else data["y"]
  classifier = estimator.LinearClassifier(
      columns, weight_column="w", config=config, n_classes=n_classes,
      optimizer=estimator.LinearSDCA("id", symmetric_l2_regularization=2.0))

  def input_fn():
    return tf.data.Dataset.from_tensor_slices(
        (features, labels[mine])).batch(64)

  gaps = []

  class Hook:
    def after_step(self, step, logs):
      gaps.append(logs["duality_gap"])

  classifier.train(input_fn, tol=1e-10, max_steps=2000, hooks=[Hook()])
  out = dict(gaps=gaps)
  # Every worker reads the chief's checkpoint once train returns.
  out.update({name: classifier.get_variable_value(name).ravel().tolist()
              for name in classifier.get_variable_names()})
  return out


if __name__ == "__main__":
  main(*sys.argv[1:5])

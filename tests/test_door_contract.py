"""The doors' contract: training stopped, saved the door's own way and
resumed ends bit for bit where one uninterrupted run ends.

One statement, run on every door and on every variant of training it claims
(plain epochs, a fixed extrapolation, the default 'auto' one, output
averaging, held rows), as scikit-learn's estimator checks run one contract
on every estimator:

- InMemorySdca: `state_dict()` written with numpy and read back into a new
  model by `load_state_dict`, then `fit(initial_epoch=k)`;
- keras.LinearModel on arrays and on a dataset: `save`, `load_model`,
  `fit(initial_epoch=k)`; and `tf.train.Checkpoint(model=...)` written,
  then read into a new model that was never built, then the same `fit`;
- tf-sdca train: a run of k epochs, then `--resume`;
- SdcaModel: a `tf.train.Checkpoint` restored into a new model;
- the estimators: `train` of a new estimator on the same `model_dir`.

What each door does beyond it (the state's shape checks, a state dropped,
other rows) stays with the door's own tests.
"""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_breast_cancer

from tf_sdca import cli, estimator
from tf_sdca.keras import LinearModel
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.trainer import InMemorySdca

# Split after epoch 3: 'auto' chooses its beta after epoch 4 from the gaps of
# epochs 1-4, and a mean from epoch 2 is under way, so the state carries both.
EPOCHS, SPLIT = 9, 3


@pytest.fixture(scope="module")
def cancer():
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  return x, y.astype(np.float32)


# ------------------------------------------------------------------ doors
# Each door: run(variant, x, y, tmp, split) -> the arrays it ends with; one
# run of EPOCHS epochs when `split` is None, else SPLIT epochs, saved and
# restored into a new object, then the rest.

def _in_memory(variant, x, y, tmp, split):
  def model():
    return InMemorySdca(loss="logistic", l2=1.0, **variant)
  first = model()
  first.fit(y, dense=x, epochs=split or EPOCHS, verbose=0)
  if split:
    path = str(tmp / "state.npz")
    np.savez(path, **{k: v for k, v in first.state_dict().items()})
    second = model()
    with np.load(path) as state:
      second.load_state_dict(dict(state), len(y), None, x.shape[1])
    second.fit(y, dense=x, epochs=EPOCHS, initial_epoch=split, verbose=0)
    first = second
  # The whole state: weights, duals, the mean's count and last iterate, the
  # extrapolation's state.
  return [value for _, value in sorted(first.state_dict().items())]


def _keras(variant, x, y, tmp, split, dataset=False, checkpoint=False):
  if dataset:
    data = tf.data.Dataset.from_tensor_slices(
        ({"x": x, "example_id": np.arange(len(y))}, y)).batch(200)
    args = (data,)
  else:
    args = (x, y)
  model = LinearModel(l2=1.0, **variant)
  model.fit(*args, epochs=split or EPOCHS, verbose=0)
  if split:
    if checkpoint:
      path = tf.train.Checkpoint(model=model).write(str(tmp / "ckpt"))
      model = LinearModel(l2=1.0, **variant)
      tf.train.Checkpoint(model=model).read(path).assert_consumed()
    else:
      path = str(tmp / "model.keras")
      model.save(path)
      model = keras.models.load_model(path)
    model.fit(*args, epochs=EPOCHS, initial_epoch=split, verbose=0)
  return model.get_weights()


def _keras_dataset(variant, x, y, tmp, split):
  return _keras(variant, x, y, tmp, split, dataset=True)


def _keras_checkpoint(variant, x, y, tmp, split):
  return _keras(variant, x, y, tmp, split, checkpoint=True)


def _keras_dataset_checkpoint(variant, x, y, tmp, split):
  return _keras(variant, x, y, tmp, split, dataset=True, checkpoint=True)


def _command_line(variant, x, y, tmp, split):
  path = str(tmp / "cancer.libsvm")
  with open(path, "w") as f:
    for row, label in zip(x, y):
      f.write(f"{int(label)} " + " ".join(
          f"{j + 1}:{v:.9g}" for j, v in enumerate(row)) + "\n")
  model_dir = str(tmp / "model")
  flags = ["--format", "libsvm", "--loss", "logistic", "--l2", "1", "--tol",
           "0", "--quiet"]
  for key, value in variant.items():
    flags += ["--" + key.replace("_", "-"), str(value)]
  def train(epochs, *extra):
    assert cli.main(["train", path, "--model-dir", model_dir, "--epochs",
                     str(epochs), *flags, *extra]) == 0
  if split:
    train(split)
    # The kept options come from the model; --momentum and the averaging's
    # first epoch are its too (given again, they must agree).
    train(EPOCHS, "--resume")
  else:
    train(EPOCHS)
  with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
    arrays = [ckpt[k] for k in sorted(ckpt.files) if k != "meta_json"]
  meta = json.load(open(os.path.join(model_dir, "model.json")))
  return arrays + [np.asarray([h["duality_gap"] for h in meta["history"]])]


def _sdca_model(variant, x, y, tmp, split):
  ones = np.ones((len(y), 1), np.float32)
  batches = [dict(sparse_features=[], dense_features=[x[r], ones[r]],
                  example_weights=np.ones(len(r), np.float32),
                  example_labels=y[r],
                  example_ids=tf.constant([b"%d" % i for i in r]))
             for r in np.array_split(np.arange(len(y)), 3)]
  options = dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
                 **variant)

  def new():
    w = [tf.Variable(tf.zeros([x.shape[1]])), tf.Variable(tf.zeros([1]))]
    return SdcaModel(None, dict(sparse_features_weights=[],
                                dense_features_weights=w), options), w

  def train(model, epochs):
    for _ in range(epochs):
      for batch in batches:
        model.update_weights(model.minimize(examples=batch))

  model, w = new()
  train(model, split or EPOCHS)
  if split:
    path = tf.train.Checkpoint(model=model).write(str(tmp / "ckpt"))
    model, w = new()
    tf.train.Checkpoint(model=model).read(path).assert_consumed()
    train(model, EPOCHS - split)
  state = model.get_state()
  return [v.numpy() for v in w] + [
      np.asarray(part, np.float64) for key in sorted(state)
      if key not in ("held",)  # (the held rows: checked by test_held_rows)
      for part in (state[key] if isinstance(state[key], list)
                   else [state[key]])]


def _estimator(variant, x, y, tmp, split):
  features = {"x": x, "example_id": np.arange(len(y))}

  def input_fn():
    return ({k: tf.constant(v) for k, v in features.items()},
            tf.constant(y))

  def classifier():
    return estimator.LinearClassifier(
        [tf.feature_column.numeric_column("x", shape=x.shape[1])],
        model_dir=str(tmp / "model"), optimizer=estimator.LinearSDCA(
            example_id_column="example_id", symmetric_l2_regularization=1.0,
            **variant))
  classifier().train(input_fn, steps=split or EPOCHS)
  if split:
    # A new object on the same model_dir: only the checkpoint carries on.
    classifier().train(input_fn, steps=EPOCHS - split)
  last = classifier()
  return [last.get_variable_value(name) for name in
          sorted(last.get_variable_names()) if "global_step" not in name]


# The variants of training each door claims.
PLAIN = {"momentum": 0}
VARIANTS = {
    "in_memory": (_in_memory, {
        "plain": PLAIN, "momentum": {"momentum": 0.5},
        "auto_default": {}, "averaging": {"average_from": 2}}),
    "keras": (_keras, {
        "plain": PLAIN, "momentum": {"momentum": 0.5},
        "auto_default": {}, "averaging": {"average_from": 2}}),
    "keras_dataset": (_keras_dataset, {
        "plain": {}, "held_rows": {"carry_over": "auto"},
        "averaging": {"average_from": 2}}),
    "keras_checkpoint": (_keras_checkpoint, {
        "plain": PLAIN, "momentum": {"momentum": 0.5},
        "auto_default": {}, "averaging": {"average_from": 2}}),
    "keras_dataset_checkpoint": (_keras_dataset_checkpoint, {
        "plain": {}, "held_rows": {"carry_over": "auto"},
        "averaging": {"average_from": 2}}),
    "command_line": (_command_line, {
        "plain": PLAIN, "momentum": {"momentum": 0.5},
        "auto_default": {}, "averaging": {"average_from": 2}}),
    "sdca_model": (_sdca_model, {
        "plain": {}, "held_rows": {"carry_over": "auto"},
        "averaging": {"average_from": 5}}),
    "estimator": (_estimator, {
        "plain": {}, "averaging": {"average_from": 2}}),
}
CASES = [(door, variant) for door, (_, variants) in VARIANTS.items()
         for variant in variants]
# A checkpoint door's uninterrupted run is its Keras door's (the same model,
# options and data, never saved): run once, compared with both doors' resumed
# runs (each door's own resumed run is still its own).
WHOLE_AS = {"keras_checkpoint": "keras",
            "keras_dataset_checkpoint": "keras_dataset"}
_WHOLE = {}


def _whole(door, variant, x, y, tmp):
  run, variants = VARIANTS[WHOLE_AS.get(door, door)]
  assert variants[variant] == VARIANTS[door][1][variant]
  key = (WHOLE_AS.get(door, door), variant)
  if key not in _WHOLE:
    _WHOLE[key] = run(variants[variant], x, y, tmp, None)
  return _WHOLE[key]


@pytest.mark.parametrize("door,variant", CASES,
                         ids=[f"{d}-{v}" for d, v in CASES])
def test_resumed_training_ends_where_one_run_ends(door, variant, cancer,
                                                  tmp_path):
  run, variants = VARIANTS[door]
  x, y = cancer
  (tmp_path / "whole").mkdir()
  (tmp_path / "parts").mkdir()
  whole = _whole(door, variant, x, y, tmp_path / "whole")
  parts = run(variants[variant], x, y, tmp_path / "parts", SPLIT)
  assert len(whole) == len(parts)
  for a, b in zip(whole, parts):
    np.testing.assert_array_equal(a, b)
  # Training happened: the weights left zero.
  assert max(np.abs(np.asarray(a, np.float64)).max() for a in whole) > 0

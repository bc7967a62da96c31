"""SDCAOptimizer: feature dicts with dense and SparseTensor features train to
the same optimum as SdcaModel on the same objective."""
import pathlib
import re
import runpy

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize

import tf_sdca
from test_sdca_model import DENSE, N, VOCAB, _data, _objective


def _features(x, ids, s, rows):
  k = ids.shape[1]
  sparse = tf.SparseTensor(
      indices=np.stack([np.repeat(np.arange(len(rows)), k),
                        np.tile(np.arange(k), len(rows))], 1),
      values=ids[rows].ravel(), dense_shape=[len(rows), k])
  return {"id": np.asarray(rows, np.int64), "num": x[rows], "cat": sparse,
          "w": s[rows]}


def test_feature_dict_training_reaches_the_optimum_over_batches():
  x, ids, y, s = _data("logistic_loss", seed=11, weighted=True)
  variables = {"num": tf.Variable(tf.zeros([DENSE])),
               "cat": tf.Variable(tf.zeros([VOCAB]))}
  opt = tf_sdca.SDCAOptimizer("id", symmetric_l2_regularization=1.0,
                              num_inner_iterations=3)
  step = tf.Variable(0, dtype=tf.int64)
  for _ in range(30):
    for start in range(0, N, 40):
      rows = np.arange(start, start + 40)
      opt.get_train_step(_features(x, ids, s, rows), y[rows], variables,
                         weight_column_name="w", global_step=step)
  assert int(step.numpy()) == 60
  w = np.concatenate([variables["cat"].numpy(), variables["num"].numpy()])
  ref = minimize(lambda v: _objective(v, x, ids, y, s, "logistic_loss", 0.0,
                                      1.0, True, True),
                 np.zeros(VOCAB + DENSE), method="L-BFGS-B",
                 options=dict(ftol=1e-15, gtol=1e-10))
  ours = _objective(w.astype(np.float64), x, ids, y, s, "logistic_loss", 0.0,
                    1.0, True, True)
  assert ours == pytest.approx(ref.fun, rel=1e-5)


def test_train_steps_inside_a_tf_function_match_eager_steps():
  # The model (slots, tables) is created during the first trace; it must
  # live outside the graph so that later traces and eager code share it.
  x, ids, y, s = _data("squared_loss", seed=12, weighted=True)
  batches = [(_features(x, ids, s, np.arange(i, i + 20)), y[i:i + 20])
             for i in range(0, N, 20)]
  results = []
  for use_function in (True, False):
    variables = {"num": tf.Variable(tf.zeros([DENSE])),
                 "cat": tf.Variable(tf.zeros([VOCAB]))}
    opt = tf_sdca.SDCAOptimizer("id", loss_type="squared_loss",
                                symmetric_l2_regularization=2.0)
    step = tf.Variable(0, dtype=tf.int64)

    def train(features, labels, opt=opt, variables=variables, step=step):
      opt.get_train_step(features, labels, variables,
                         weight_column_name="w", global_step=step)

    if use_function:
      train = tf.function(train)
    for _ in range(2):
      for features, labels in batches:
        train({k: v if isinstance(v, tf.SparseTensor) else tf.constant(v)
               for k, v in features.items()}, tf.constant(labels))
    assert int(step.numpy()) == 2 * len(batches)
    if use_function:
      # tf.function traces twice when the first call creates variables (the
      # model's slots); the later batches reuse the second trace.
      assert train.experimental_get_tracing_count() == 2
    results.append(np.concatenate([variables["cat"].numpy(),
                                   variables["num"].numpy()]))
  np.testing.assert_allclose(results[0], results[1], atol=1e-6)
  assert np.abs(results[0]).max() > 0.1


def test_missing_example_id_column_is_a_clear_error():
  opt = tf_sdca.SDCAOptimizer("example_id")
  with pytest.raises(ValueError, match="no example id column 'example_id'"):
    opt.get_train_step({"num": np.ones((3, 1), np.float32)},
                       np.zeros(3, np.float32),
                       {"num": tf.Variable(tf.zeros([1]))})
  # A weight column the features lack: a bare KeyError: 'w' before.
  with pytest.raises(ValueError, match=r"features has no weight column 'w' "
                     r"\(weight_column_name\); its keys: \['example_id', "
                     r"'num'\]"):
    opt.get_train_step({"num": np.ones((3, 1), np.float32),
                        "example_id": np.arange(3)},
                       np.zeros(3, np.float32),
                       {"num": tf.Variable(tf.zeros([1]))},
                       weight_column_name="w")


def _optimizer_step(carry_over):
  """A new SDCAOptimizer over zero "num" and "cat" variables: (the
  variables, `step(features, labels)`, one train step weighted by "w")."""
  variables = {"num": tf.Variable(tf.zeros([DENSE])),
               "cat": tf.Variable(tf.zeros([VOCAB]))}
  opt = tf_sdca.SDCAOptimizer("id", carry_over=carry_over)

  def step(features, labels):
    opt.get_train_step(features, labels, variables, weight_column_name="w")

  return variables, step


@pytest.mark.parametrize("carry_over", [0, "auto"])
def test_messages_about_a_feature_name_it(carry_over):
  """The SdcaModel under SDCAOptimizer named a group by the op's argument
  (`sparse_features[0]`, `examples['dense_features'][0]`), which the user
  never wrote, and a string feature failed in TensorFlow's cast naming
  nothing: messages name the feature (`features['cat']`) and the bad
  value, eagerly and in a tf.function traced with unknown sizes."""
  x, ids, y, s = _data("logistic_loss", seed=13, weighted=True)
  rows = np.arange(20)
  good = _features(x, ids, s, rows)

  def train(features, eager=True):
    _, step = _optimizer_step(carry_over)
    if not eager:
      step = tf.function(step, input_signature=[
          {"id": tf.TensorSpec([None], tf.int64),
           "num": tf.TensorSpec([None, None], tf.float32),
           "cat": tf.SparseTensorSpec([None, None], tf.int64),
           "w": tf.TensorSpec([None], tf.float32)},
          tf.TensorSpec([None], tf.float32)])
    step(good, y[rows])
    step(features, y[rows])

  cat = good["cat"]
  values = cat.values.numpy().copy()
  values[3] = VOCAB + 2
  for eager in (True, False):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=re.escape("sparse_features[0] (features['cat'])"
                                       f" has an id >= {VOCAB} or < 0") +
                       rf".* = {VOCAB + 2}"):
      train(dict(good, cat=tf.SparseTensor(cat.indices, values,
                                           cat.dense_shape)), eager)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=re.escape(r"[dense_features[0] (features[\'num\'])"
                                     r" has] [2] [column(s) but its weight "
                                     f"variable has {DENSE} row(s)]")):
    train(dict(good, num=x[rows, :2]), eager=False)
  with pytest.raises(ValueError, match=re.escape(
      "examples['dense_features'][0] (features['num']) has 2 column(s) but "
      f"its weight variable has {DENSE} row(s)")):
    train(dict(good, num=x[rows, :2]))
  with pytest.raises(ValueError, match=re.escape(
      "features['cat'] must hold integer feature ids (the rows of its "
      "variable), got string values")):
    train(dict(good, cat=tf.SparseTensor(
        cat.indices, tf.strings.as_string(cat.values), cat.dense_shape)))
  for name in ("num", "w"):
    with pytest.raises(ValueError, match=re.escape(
        f"features['{name}'] must hold numbers, got a string tensor")):
      train(dict(good, **{name: tf.strings.as_string(good[name])}))
  # A non-finite dense value: the ops named their argument alone
  # (dense_features[0]), and at its flat index until 2026-11-29.
  bad = good["num"].numpy().copy() if tf.is_tensor(good["num"]) else (
      np.array(good["num"], copy=True))
  bad[3, 1] = np.nan
  for eager in (True, False):
    with pytest.raises(tf.errors.InvalidArgumentError, match=re.escape(
        "dense_features[0] (features['num'])[3, 1] = nan must be finite")):
      train(dict(good, num=bad), eager)


@pytest.mark.parametrize("carry_over", [0, "auto"])
def test_float_ids_must_be_whole_numbers(carry_over):
  """Float sparse ids were cast to int64 without a word: 1.5 trained row 1.
  One that is not a whole number (1.5, -0.5, NaN, inf) is an
  InvalidArgumentError naming the feature, the id and its index in the
  SparseTensor, eagerly and in a tf.function, in either form of a sparse
  feature; whole-number floats (2.0) stay ids and train as the int64 ids."""
  x, ids, y, s = _data("logistic_loss", seed=14, weighted=True)
  rows = np.arange(30)
  good = _features(x, ids, s, rows)
  cat = good["cat"]

  def train(features, graph):
    variables, step = _optimizer_step(carry_over)
    if graph:
      step = tf.function(step)
    for _ in range(3):
      step(features, y[rows])
    return np.concatenate([variables["cat"].numpy(),
                           variables["num"].numpy()])

  def with_ids(values, pair=False):
    ids_ = tf.SparseTensor(cat.indices, values, cat.dense_shape)
    return dict(good, cat=(ids_, tf.SparseTensor(
        cat.indices, tf.ones_like(values, tf.float32), cat.dense_shape))
                if pair else ids_)

  for graph in (False, True):
    want = train(good, graph)
    assert np.abs(want).max() > 0
    for dtype in (tf.float32, tf.float64):
      np.testing.assert_array_equal(
          train(with_ids(tf.cast(cat.values, dtype)), graph), want)
    index = cat.indices.numpy()[7].tolist()
    for bad in (1.5, -0.5, np.nan, np.inf):
      values = cat.values.numpy().astype(np.float64)
      values[7] = bad
      value = re.escape(repr(bad) if np.isfinite(bad) else str(bad))
      match = (f"features\\['cat'\\] has feature id {value} at index "
               + re.escape(f"{index}, ") if not graph else
               r"\[features\[\\'cat\\'\] has feature id\] "
               rf"\[{value}\] \[at index\] \[{index[0]} {index[1]}\] \[")
      match += re.escape("not a whole number (a cast would cut it to "
                         "another row)")
      for pair in (False, True):
        with pytest.raises(tf.errors.InvalidArgumentError, match=match):
          train(with_ids(tf.constant(values), pair), graph)


def test_bad_options_fail_at_construction():
  with pytest.raises(ValueError, match="symmetric_l2_regularization"):
    tf_sdca.SDCAOptimizer("id", symmetric_l2_regularization=-1.0)


def test_package_exports_the_op_wrapper_and_the_classes():
  # A submodule named like the op wrapper once shadowed it on import.
  assert callable(tf_sdca.sdca_optimizer)
  assert tf_sdca.sdca_optimizer.__module__ == "tf_sdca.ops.sdca_ops"
  assert isinstance(tf_sdca.SDCAOptimizer, type)
  assert isinstance(tf_sdca.SdcaModel, type)


def test_the_g3doc_example_runs_and_both_front_ends_agree(tmp_path, capsys,
                                                         monkeypatch):
  doc = (pathlib.Path(__file__).parent.parent / "g3doc" / "sdca_model.md")
  # Run here, not by test_docs_examples (its marker says so).
  (code,) = re.findall(
      r"<!-- docs-test: skip \(run, and its numbers checked, by "
      r"tests/test_sdca_optimizer.py's "
      r"test_the_g3doc_example_runs_and_both_front_ends_agree\) -->\n"
      r"```python\n(.*?)```", doc.read_text(), re.S)
  # Run from a file: AutoGraph needs the source of the tf.function. The
  # example writes its checkpoint to the working directory.
  monkeypatch.chdir(tmp_path)
  script = tmp_path / "example.py"
  script.write_text(code)
  runpy.run_path(str(script))
  printed = dict(line.split() for line in capsys.readouterr().out.splitlines())
  assert float(printed["gap"]) < 1e-6
  assert float(printed["streamed"]) == pytest.approx(float(printed["loss"]),
                                                     rel=1e-6)


def test_sparse_ids_with_values_match_sdca_model_with_feature_values():
  x, ids, y, s = _data("squared_loss", seed=16)
  values = np.random.default_rng(1).uniform(0.5, 2.0, ids.shape).astype(
      np.float32)
  rows = np.arange(N)
  features = _features(x, ids, s, rows)
  features["cat"] = (features["cat"],
                     tf.SparseTensor(features["cat"].indices, values.ravel(),
                                     features["cat"].dense_shape))
  variables = {"num": tf.Variable(tf.zeros([DENSE])),
               "cat": tf.Variable(tf.zeros([VOCAB]))}
  opt = tf_sdca.SDCAOptimizer("id", loss_type="squared_loss")
  k = ids.shape[1]
  ex = dict(sparse_features=[tf_sdca.SparseFeatureColumn(
      np.repeat(rows, k), ids.ravel(), values.ravel())],
            dense_features=[x], example_weights=np.ones(N, np.float32),
            example_labels=y, example_ids=[str(r) for r in rows])
  sparse_w, dense_w = tf.Variable(tf.zeros([VOCAB])), tf.Variable(
      tf.zeros([DENSE]))
  model = tf_sdca.SdcaModel(
      ex, dict(sparse_features_weights=[sparse_w],
               dense_features_weights=[dense_w]),
      dict(loss_type="squared_loss", symmetric_l2_regularization=1.0))
  for _ in range(3):
    opt.get_train_step(features, y, variables)
    model.update_weights(model.minimize())
  np.testing.assert_allclose(variables["cat"].numpy(), sparse_w.numpy(),
                             atol=1e-6)
  np.testing.assert_allclose(variables["num"].numpy(), dense_w.numpy(),
                             atol=1e-6)
  assert np.abs(sparse_w.numpy()).max() > 0.05

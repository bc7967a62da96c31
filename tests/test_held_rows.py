"""SdcaModel's `carry_over`: each `minimize` call holds back a random share
of its rows for the next call. The weights stay w(alpha), the stream still
reaches the optimum, a held row that comes back is visited once, and a
checkpoint keeps the held rows. (The passes it saves on real data:
tests/test_streaming_order.py.)"""
import collections
import json
import re

import numpy as np
import pytest
import tensorflow as tf

from test_sdca_model import N, VOCAB, _data, _design, _examples, _flat
from test_sdca_model import _model, _primal_optimum
from tf_sdca.sdca_model import SparseFeatureColumn


def _with_values(ex, seed=0):
  """The batch with explicit values on its sparse entries (0.5 to 2)."""
  col = ex["sparse_features"][0]
  values = np.random.default_rng(seed).uniform(
      0.5, 2.0, len(col.feature_indices)).astype(np.float32)
  return dict(ex, sparse_features=[SparseFeatureColumn(
      col.example_indices, col.feature_indices, values)])


def _values_design(x, ids, batches):
  """_design with each batch's sparse values in place of the ones."""
  a = _design(x, ids)
  a[:, :ids.max() + 1] = 0.0
  for rows, ex in batches:
    col = ex["sparse_features"][0]
    np.add.at(a, (rows[col.example_indices], col.feature_indices),
              col.feature_values)
  return a


def _fixed_batches(x, ids, y, s, size=10, values=True):
  out = []
  for i in range(0, N, size):
    rows = np.arange(i, i + size)
    ex = _examples(x, ids, y, s, rows=rows)
    out.append((rows, _with_values(ex, seed=i) if values else ex))
  return out


def test_held_rows_keep_the_weights_equal_to_w_of_the_stored_duals():
  # As test_sdca_model's test of the same name: 120 streamed calls, now
  # with half of every call's rows held back and sparse values merged
  # across calls. A held row with the wrong features, values or dual
  # would leave the slots off v(alpha) / l2.
  x, ids, y, s = _data("logistic_loss", seed=3, weighted=True)
  batches = _fixed_batches(x, ids, y, s)
  model, _ = _model(batches[0][1], "logistic_loss", l2=0.5,
                    partitioned=True, num_table_shards=3, carry_over=0.5)
  for _ in range(15):
    for _, ex in batches:
      model.minimize(examples=ex)
  assert 0 < len(model._held.keys.numpy()) < N
  alpha = model._lookup_state(model._keys(_examples(x, ids, y, s)))
  alpha = alpha.numpy()[:, 0].astype(np.float64)
  assert np.all(alpha != 0.0)  # every row visited
  v = _values_design(x, ids, batches).T @ (s * alpha)
  slots = np.concatenate([model._sparse[0].all_rows().numpy(),
                          model._dense[0].all_rows().numpy()])
  np.testing.assert_allclose(slots, v / 0.5, rtol=0, atol=1e-6)


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss"])
def test_a_stream_with_held_rows_reaches_the_optimum(loss):
  x, ids, y, s = _data(loss, seed=1)
  batches = _fixed_batches(x, ids, y, s, size=16)
  model, _ = _model(batches[0][1], loss, carry_over=0.5)
  for _ in range(150):
    for _, ex in batches:
      model.minimize(examples=ex)
  a = _values_design(x, ids, batches)
  ref, _ = _primal_optimum(loss, a, y, s.astype(np.float64), 1.0)
  w = np.concatenate([model._sparse[0].all_rows().numpy(),
                      model._dense[0].all_rows().numpy()])
  z = a @ w
  primal = (0.5 * (z - y) ** 2 if loss == "squared_loss" else
            np.logaddexp(0.0, -(2.0 * y - 1.0) * z))
  ours = ((s * primal).sum() + 0.5 * w @ w) / s.sum()
  assert ours == pytest.approx(ref, rel=1e-7)


def test_each_call_visits_its_share_and_a_held_row_back_in_the_batch_once():
  x, ids, y, s = _data("logistic_loss")
  ex = _examples(x, ids, y, s, rows=np.arange(40))
  model, _ = _model(ex, "logistic_loss", carry_over=0.25)
  # floor(0.25 * 40) = 10 held, 30 visited.
  assert model.minimize(examples=ex).shape[0] == 30
  held = set(model._held.keys.numpy())
  assert len(held) == 10
  # The same 40 rows again: the held copies are dropped (no row twice in
  # the op, which would refuse it), and 10 of the 40 are held anew.
  assert model.minimize(examples=ex).shape[0] == 30
  assert len(set(model._held.keys.numpy())) == 10
  # 20 other rows: 30 in all, 7 held, 23 visited.
  other = _examples(x, ids, y, s, rows=np.arange(40, 60))
  assert model.minimize(examples=other).shape[0] == 23
  assert len(model._held.keys.numpy()) == 7


def test_a_bad_row_is_reported_in_its_own_call_and_nothing_is_lost():
  x, ids, y, s = _data("logistic_loss")
  ex = _examples(x, ids, y, s, rows=np.arange(40))
  model, _ = _model(ex, "logistic_loss", carry_over=0.5)
  twin, _ = _model(ex, "logistic_loss", carry_over=0.5)
  for m in (model, twin):
    m.minimize(examples=ex)
  nan = dict(ex, dense_features=[x[:40].copy()])
  nan["dense_features"][0][3, 1] = np.nan
  label = dict(ex, example_labels=np.asarray(ex["example_labels"]).copy())
  label["example_labels"][7] = 2.0
  col = ex["sparse_features"][0]
  far = np.asarray(col.feature_indices).copy()
  far[5] = 10**6
  wide = dict(ex, sparse_features=[SparseFeatureColumn(
      col.example_indices, far, col.feature_values)])
  # Each at its row (entry) of the batch given, whether the draw visits
  # or holds it: a bad label or id held back used to fail a later call
  # (and every call after) at a row of another batch, and the failed call
  # had already rewritten the held rows.
  for bad, message in (
      # Row 3, column 1 (named by its flat entry, 3 * 3 + 1, before
      # 2026-11-29).
      (nan, r"dense_features\[0\]\[3, 1\] = nan must be finite"),
      (label, r"example_labels\[7\] = 2 must be 0 or 1 for logistic_loss"),
      (wide, r"sparse_features\[0\] has an id >= \d+ or < 0, outside the "
       r"rows of its weight variable: feature id \[5\] = 1000000")):
    before = model.get_state()
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      model.minimize(examples=bad)
    after = model.get_state()
    for key in ("keys", "values", "calls"):
      np.testing.assert_array_equal(after[key], before[key])
    for key in ("keys", "example_labels"):
      np.testing.assert_array_equal(after["held"][key], before["held"][key])
    np.testing.assert_array_equal(after["slots"][0], before["slots"][0])
  # The failed calls changed nothing: the stream goes on as without them.
  for m in (model, twin):
    for _ in range(3):
      m.minimize(examples=ex)
  np.testing.assert_array_equal(model._sparse[0].all_rows().numpy(),
                                twin._sparse[0].all_rows().numpy())
  np.testing.assert_array_equal(model.get_state()["held"]["keys"],
                                twin.get_state()["held"]["keys"])


def test_a_checkpoint_keeps_the_held_rows(tmp_path):
  x, ids, y, s = _data("logistic_loss", seed=2)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]

  def fresh():
    return _model(batches[0], "logistic_loss", carry_over=0.5, seed=4)[0]

  def run(model, calls):
    for i in calls:
      model.minimize(examples=batches[i % len(batches)])
    return np.concatenate([model._sparse[0].all_rows().numpy(),
                           model._dense[0].all_rows().numpy()])

  straight = run(fresh(), range(20))
  first = fresh()
  run(first, range(11))
  tf.train.Checkpoint(model=first).write(str(tmp_path / "ckpt"))
  resumed = fresh()
  tf.train.Checkpoint(model=resumed).read(str(tmp_path / "ckpt")).assert_consumed()
  np.testing.assert_array_equal(resumed._held.keys.numpy(),
                                first._held.keys.numpy())
  np.testing.assert_array_equal(run(resumed, range(11, 20)), straight)
  # A checkpoint written before the held rows were stored as rows held an
  # example index per entry, in the order the batches gave them (rows'
  # entries interleaved, each row's in its order): read as such, the same
  # held rows continue the same way.
  older = fresh()
  tf.train.Checkpoint(model=older).read(str(tmp_path / "ckpt")).assert_consumed()
  held = first.get_state()["held"]
  rows, ids, values = held["sparse"][0]
  keys = np.random.default_rng(0).uniform(size=len(rows))
  for row in np.unique(rows):
    keys[rows == row] = np.sort(keys[rows == row])
  interleaved = np.argsort(keys)
  assert np.any(np.diff(rows[interleaved]) < 0)
  assert len(rows) != len(held["keys"]) + 1
  for var, value in zip(older._held.sparse[0], (rows, ids, values)):
    var.assign(value[interleaved])
  for part, want in zip(older.get_state()["held"]["sparse"][0],
                        (rows, ids, values)):
    np.testing.assert_array_equal(part, want)
  np.testing.assert_array_equal(run(older, range(11, 20)), straight)


def test_held_rows_are_not_dropped_by_a_restore_into_a_model_without_them(
    tmp_path):
  """A checkpoint holding rows, restored into a model built with
  carry_over=0 (which has no place for them and trains exactly the batch it
  is given), dropped them without a word: those examples' pending updates
  were lost. It is a ValueError giving their count and naming carry_over;
  a checkpoint whose record predates the count restores unchecked. The
  other way, a carry_over=0 checkpoint into a model with held rows of its
  own, empties them (the writer held none) and continues as a fresh model
  restored from it."""
  x, ids, y, s = _data("logistic_loss", seed=2)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]

  def train(model, calls):
    for i in calls:
      model.update_weights(model.minimize(examples=batches[i % len(batches)]))

  held, _ = _model(batches[0], "logistic_loss", carry_over=0.5)
  train(held, range(11))
  count = len(held._held.keys.numpy())
  assert count > 0
  path = tf.train.Checkpoint(model=held).write(str(tmp_path / "held"))
  plain, _ = _model(batches[0], "logistic_loss", carry_over=0)
  with pytest.raises(ValueError, match=rf"the checkpoint holds {count} held "
                     r"rows.*built with carry_over=0 and would drop them"):
    tf.train.Checkpoint(model=plain).read(path)
  again, _ = _model(batches[0], "logistic_loss", carry_over="auto")
  tf.train.Checkpoint(model=again).read(path).assert_consumed()
  np.testing.assert_array_equal(again._held.keys.numpy(),
                                held._held.keys.numpy())
  # A record without the count (written before it was kept) restores as
  # before.
  meaning = held._state_meaning
  meaning._serialize_to_tensors = lambda: {
      "meaning": tf.constant(meaning._text)}
  older = tf.train.Checkpoint(model=held).write(str(tmp_path / "older"))
  plain, _ = _model(batches[0], "logistic_loss", carry_over=0)
  tf.train.Checkpoint(model=plain).read(older).expect_partial()
  assert plain.state_size() == held.state_size()
  # carry_over=0's checkpoint into models with held rows.
  writer, _ = _model(batches[0], "logistic_loss", carry_over=0)
  train(writer, range(11))
  path = tf.train.Checkpoint(model=writer).write(str(tmp_path / "plain"))
  results = []
  for trained_before in (False, True):
    model, variables = _model(batches[0], "logistic_loss", carry_over=0.5)
    train(model, range(5 if trained_before else 0))
    if trained_before:  # (a fresh model creates them as it reads)
      assert len(model._held.keys.numpy()) > 0
    # (Its held-row variables, which the checkpoint lacks, were listed as
    # unmatched: they are left out of the listing once the record has
    # emptied them.)
    tf.train.Checkpoint(model=model).read(path).assert_consumed()
    assert len(model._held.keys.numpy()) == 0
    train(model, range(11, 20))
    results.append(_flat(variables))
  np.testing.assert_array_equal(results[0], results[1])
  # Empty held rows are written as none: either kind of model reads them.
  empty, _ = _model(batches[0], "logistic_loss", carry_over=0.5)
  path = tf.train.Checkpoint(model=empty).write(str(tmp_path / "empty"))
  assert not [n for n, _ in tf.train.list_variables(path) if "_held" in n]
  for carry_over in (0, 0.5):
    model, _ = _model(batches[0], "logistic_loss", carry_over=carry_over)
    tf.train.Checkpoint(model=model).read(path).assert_consumed()


def test_set_state_refuses_held_rows_as_a_restore_does():
  """set_state() of a carry_over=0 model dropped get_state()['held'] without
  a word (those examples' pending updates lost) where a checkpoint holding
  rows is refused. It is a ValueError giving their count and the way to
  drop them knowingly, before anything is set; the state less 'held', or
  with no held rows, is taken and continues as the held model would with
  its held rows emptied."""
  x, ids, y, s = _data("logistic_loss", seed=3)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  held, _ = _model(batches[0], "logistic_loss", carry_over=0.5)
  for ex in batches[:7]:
    held.update_weights(held.minimize(examples=ex))
  state = held.get_state()
  count = len(state["held"]["keys"])
  assert count > 0
  plain, variables = _model(batches[0], "logistic_loss", carry_over=0)
  with pytest.raises(ValueError, match=(
      rf"^state\['held'\] holds {count} held rows: .* built with "
      r"carry_over=0 and would drop them, .* to drop them knowingly, give "
      r"this model the state less 'held' \(\{k: v for k, v in "
      r"state.items\(\) if k != 'held'\}\)$")):
    plain.set_state(state)
  assert plain.state_size() == 0 and plain.calls.numpy() == 0
  np.testing.assert_array_equal(_flat(variables), 0.0)
  # Less 'held', or with none held, the state is taken.
  less = {k: v for k, v in state.items() if k != "held"}
  empty = dict(state, held={k: v[:0] if k in ("keys", "example_weights",
                                                "example_labels") else v
                            for k, v in state["held"].items()})
  empty["held"]["sparse"] = [tuple(a[:0] for a in group)
                             for group in state["held"]["sparse"]]
  empty["held"]["dense"] = [d[:0] for d in state["held"]["dense"]]
  results = []
  for given in (less, empty):
    model, variables = _model(batches[0], "logistic_loss", carry_over=0)
    model.set_state(given)
    assert model.state_size() == held.state_size()
    for ex in batches[7:]:
      model.update_weights(model.minimize(examples=ex))
    results.append(_flat(variables))
  np.testing.assert_array_equal(results[0], results[1])
  assert np.abs(results[0]).max() > 0


@pytest.mark.parametrize("carry_over", [0, 0.5, "auto"])
def test_unknown_shapes_are_checked_under_the_arguments_names(carry_over):
  """Inside a tf.function traced with unknown sizes, HoldRows reported a
  dense group of the wrong width as one of other rows (its values cut into
  rows of the variable's width: [n, 2d] as 2n rows) and ids of another
  length as `keys`; evaluating reported a matmul's shapes. Each names the
  argument and its bad size now, with or without held rows."""
  x, ids, y, s = _data("logistic_loss", seed=6)
  ex = _examples(x, ids, y, s, rows=np.arange(24), sparse=False)
  model, _ = _model(ex, "logistic_loss", carry_over=carry_over,
                    sparse=False)
  specs = (tf.TensorSpec([None, None], tf.float32),
           tf.TensorSpec([None], tf.float32), tf.TensorSpec([None], tf.float32),
           tf.TensorSpec([None], tf.string))

  def batch(dense, weights, labels, example_ids):
    return dict(sparse_features=[], dense_features=[dense],
                example_weights=weights, example_labels=labels,
                example_ids=example_ids)

  @tf.function(input_signature=specs)
  def train(*fields):
    model.minimize(examples=batch(*fields))

  @tf.function(input_signature=specs)
  def loss(*fields):
    return model.regularized_loss(batch(*fields))

  dense, ids_ = ex["dense_features"][0], np.array(ex["example_ids"])
  weights, labels = ex["example_weights"], ex["example_labels"]
  for fn in (train, loss):
    for width in (2 * dense.shape[1], dense.shape[1] - 1):
      wide = np.tile(dense, 2)[:, :width]
      with pytest.raises(tf.errors.InvalidArgumentError,
                         match=rf"\[dense_features\[0\] has\] \[{width}\] "
                         rf"\[column\(s\) but its weight variable has "
                         rf"{dense.shape[1]} row\(s\)\]"):
        fn(wide, weights, labels, ids_)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"\[example_ids has\] \[23\] \[rows but "
                     r"example_weights\] \[24\] \[and example_labels\] "
                     r"\[24\]"):
    train(dense, weights, labels, ids_[:-1])
  train(dense, weights, labels, ids_)  # (the checks pass a good batch)
  assert model.calls.numpy() == 1


def test_held_rows_in_a_tf_function_loop_match_eager_calls():
  x, ids, y, s = _data("squared_loss", seed=5)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s, values=False)]
  eager, _ = _model(batches[0], "squared_loss", carry_over=0.5)
  compiled, _ = _model(batches[0], "squared_loss", carry_over=0.5)
  step = tf.function(lambda ex: compiled.minimize(examples=ex))
  for _ in range(3):
    for ex in batches:
      eager.minimize(examples=ex)
      step(ex)
  np.testing.assert_array_equal(compiled._dense[0].all_rows().numpy(),
                                eager._dense[0].all_rows().numpy())
  np.testing.assert_array_equal(compiled._held.keys.numpy(),
                                eager._held.keys.numpy())


# ------------------------------------------------------------------ doors
def _cancer():
  from sklearn.datasets import load_breast_cancer  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  rows = np.random.default_rng(0).permutation(len(y))  # shuffled once
  return x[rows], y[rows].astype(np.float32)


def test_keras_fit_on_fixed_batches_of_a_dataset_takes_one_batchs_epochs():
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  x, y = _cancer()

  def epochs(batch, carry_over):
    data = tf.data.Dataset.from_tensor_slices(
        ({"x": x, "example_id": np.arange(len(y))}, y)).batch(batch)
    model = LinearModel(loss="logistic", l2=1.0, carry_over=carry_over)
    history = model.fit(data, epochs=300, tol=1e-6, verbose=0)
    gaps = history.history["duality_gap"]
    assert gaps[-1] < 1e-6
    return len(gaps)

  one = epochs(len(y), 0.0)
  # Six fixed batches of 95 rows. Measured: 46 epochs for one batch, 96
  # for the six, 47 with half of each step's rows held back.
  assert epochs(95, 0.5) <= 1.5 * one
  assert epochs(95, "auto") <= 1.5 * one
  # Plainly, the slow progress is flagged, naming the order's remedies.
  with pytest.warns(UserWarning, match=r"shuffle the rows before batching "
                    r"them, or hold back a share of each step's rows with "
                    r"carry_over='auto'"):
    assert epochs(95, 0.0) > 1.5 * one
  model = LinearModel(carry_over=0.5)
  assert LinearModel.from_config(model.get_config()).carry_over == 0.5
  assert LinearModel.from_config(LinearModel(
      carry_over="auto").get_config()).carry_over == "auto"
  with pytest.raises(ValueError, match=r"carry_over=0.5 runs streamed "
                     r"\(SdcaModel, .*\), not in memory \(numpy, scipy"):
    model.fit(x, y, epochs=1, verbose=0)
  with pytest.raises(ValueError, match=r"carry_over must be 'auto' or a "
                     r"number in \[0, 1\), got 1"):
    LinearModel(carry_over=1)


def test_estimator_trains_fixed_batches_with_held_rows(tmp_path):
  from tf_sdca import estimator  # pylint: disable=import-outside-toplevel
  x, y = _cancer()
  a = np.hstack([x, np.ones((len(y), 1), np.float32)])  # the bias column
  best, _ = _primal_optimum("logistic_loss", a, y, np.ones(len(y)), 1.0)

  def input_fn():
    return tf.data.Dataset.from_tensor_slices(
        ({"x": x, "example_id": np.arange(len(y))}, y)).batch(95).repeat()

  def excess(name, steps, **options):
    """P(w) / P(w*) - 1 after `steps` training steps (six a pass)."""
    classifier = estimator.LinearClassifier(
        [tf.feature_column.numeric_column("x", shape=30)],
        model_dir=str(tmp_path / name),
        optimizer=estimator.LinearSDCA(example_id_column="example_id",
                                       symmetric_l2_regularization=1.0,
                                       **options))
    classifier.train(input_fn, steps=steps)
    w = np.append(classifier.get_variable_value(
        "linear/linear_model/x/weights")[:, 0], classifier.get_variable_value(
            "linear/linear_model/bias_weights")).astype(np.float64)
    z = a @ w
    primal = (np.logaddexp(0.0, -(2.0 * y - 1.0) * z).sum() +
              0.5 * w @ w) / len(y)
    return primal / best - 1.0

  # 30 passes over six fixed batches; the held rows are in the checkpoint,
  # and the second train call (restored from it) goes on with them. Plain:
  # TensorFlow's semantics, asked for (carry_over=0).
  plain = excess("plain", 180, carry_over=0)
  excess("held", 90, carry_over="auto")
  names = [n for n, _ in tf.train.list_variables(str(tmp_path / "held"))]
  assert "sdca/_held/keys/.ATTRIBUTES/VARIABLE_VALUE" in names, names
  held = excess("held", 180, carry_over="auto")
  # Measured: 9.1e-4 plainly, 4.6e-7 with carry_over='auto' (f = 0.5 on
  # six batches, once the first epoch has filled the dual table; a fixed
  # 0.5: 6.3e-7).
  assert held < plain / 100.0
  # The plain model_dir goes on with held rows (the default): its resume
  # failed assert_existing_objects_matched on the held-row variables that
  # the checkpoint lacks.
  assert excess("plain", 186, carry_over="auto") < 1.0


# ----------------------------------------------------- the op underneath
def _side(keys, rows, ids, values, dense):
  return dict(keys=np.array(keys, np.int64),
              example_weights=np.arange(1, len(keys) + 1, dtype=np.float32),
              example_labels=np.array(keys, np.float32) % 2,
              sparse=[(np.array(rows, np.int64), np.array(ids, np.int64),
                       None if values is None else
                       np.array(values, np.float32))],
              dense=[np.array(dense, np.float32).reshape(len(keys), 2)])


def _splits(rows, n):
  """Row splits of example indices in row order (each row's entries
  together)."""
  rows = np.asarray(rows, np.int64)
  assert np.all(np.diff(rows) >= 0)
  return np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])


def _as_held(side):
  """A `_side` as the op takes held rows: its example indices (in row
  order) as row splits."""
  rows, ids, values = side["sparse"][0]
  return dict(side, sparse=[(_splits(rows, len(side["keys"])), ids,
                             np.zeros(0, np.float32) if values is None
                             else values)])


def _example_indices(splits):
  splits = np.asarray(splits)
  return np.repeat(np.arange(len(splits) - 1), np.diff(splits))


def _rows_by_key(side, held=False):
  """{key: (weight, label, sorted (id, value) entries, dense row)}; `held`:
  the op's held side (row splits)."""
  out = {}
  keys = side["keys"].numpy()
  rows, ids, values = side["sparse"][0]
  rows, ids = rows.numpy(), ids.numpy()
  if held:
    rows = _example_indices(rows)
  values = np.ones(len(ids)) if values is None else values.numpy()
  for i, key in enumerate(keys):
    mine = rows == i
    out[key] = (side["example_weights"].numpy()[i],
                side["example_labels"].numpy()[i],
                sorted(zip(ids[mine], values[mine])),
                tuple(side["dense"][0].numpy()[i]))
  return out


@pytest.mark.parametrize("with_values", [True, False])
def test_hold_rows_deals_the_merged_rows_and_drops_held_copies(with_values):
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  # Batch keys 10-13; held keys 20, 11 (back in the batch: dropped) and 21.
  batch = _side([10, 11, 12, 13], [0, 0, 1, 2, 3, 3], [5, 6, 5, 7, 8, 9],
                [1, 2, 3, 4, 5, 6] if with_values else None, range(8))
  held = _as_held(_side([20, 11, 21], [0, 1, 1, 2], [1, 2, 3, 4],
                        [7, 8, 9, 10] if with_values else None,
                        range(100, 106)))
  want = _rows_by_key(dict(
      {k: tf.constant(v) for k, v in batch.items() if k != "sparse" and
       k != "dense"}, sparse=[tuple(None if x is None else tf.constant(x)
                                    for x in batch["sparse"][0])],
      dense=[tf.constant(batch["dense"][0])]))
  # The held rows 20 and 21 as they were given.
  want[20] = (1.0, 0.0, [(1, 7.0 if with_values else 1.0)],
              (100.0, 101.0))
  want[21] = (3.0, 1.0, [(4, 10.0 if with_values else 1.0)],
              (104.0, 105.0))
  draws = set()
  for call in range(8):
    visit, later = sdca_ops.hold_rows(batch, held, call, 0.5, seed=3)
    # m = 4 + 2 = 6 merged rows: floor(0.5 * 6) = 3 held, 3 visited.
    assert len(visit["keys"]) == 3 and len(later["keys"]) == 3
    got = {**_rows_by_key(visit), **_rows_by_key(later, held=True)}
    assert got.keys() == want.keys()
    for key, row in want.items():
      assert got[key] == row, key
    assert (visit["sparse"][0][2] is None) == (not with_values)
    draws.add(tuple(sorted(later["keys"].numpy())))
    again, _ = sdca_ops.hold_rows(batch, held, call, 0.5, seed=3)
    np.testing.assert_array_equal(again["keys"], visit["keys"])
  assert len(draws) > 2  # the call index changes the draw


def test_hold_rows_drops_a_held_row_whose_key_is_the_lowest_int64():
  # The op keeps the batch's keys in a set whose empty buckets are marked
  # by the lowest int64; a key equal to it (sdca_ops.example_keys never
  # gives one, but the op takes any keys) is still found.
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  low = np.iinfo(np.int64).min
  for batch_keys, dropped in (([low, 5], True), ([4, 5], False)):
    batch = _side(batch_keys, [0, 1], [1, 2], None, range(4))
    batch["sparse"] = [(r, i, None) for r, i, _ in batch["sparse"]]
    held = _as_held(_side([low, 7], [0, 1], [3, 4], None, range(10, 14)))
    visit, later = sdca_ops.hold_rows(batch, held, 0, 0.0)
    assert len(later["keys"]) == 0
    keys = list(visit["keys"].numpy())
    assert keys == (batch_keys + [7] if dropped else batch_keys + [low, 7])
    # The kept held row's entry and dense row come with it.
    rows, ids, _ = visit["sparse"][0]
    np.testing.assert_array_equal(ids, [1, 2] + ([4] if dropped else [3, 4]))
    np.testing.assert_array_equal(rows, [0, 1] + ([2] if dropped else [2, 3]))
    np.testing.assert_array_equal(
        visit["dense"][0].numpy()[2:].ravel(),
        [12, 13] if dropped else [10, 11, 12, 13])


def _random_side(rng, keys, rows_sorted, with_values, num_ids=50):
  """Rows `keys` with 0-4 entries each (some with none), in row order or
  shuffled."""
  n = len(keys)
  rows = np.repeat(np.arange(n), rng.integers(0, 5, n))
  if not rows_sorted:
    rows = rng.permutation(rows)
  side = _side(keys, rows, rng.integers(0, num_ids, len(rows)),
               rng.uniform(-1, 1, len(rows)) if with_values else None,
               rng.uniform(-1, 1, 2 * n))
  if not with_values:
    side["sparse"] = [(r, i, None) for r, i, _ in side["sparse"]]
  return side


@pytest.mark.parametrize("with_values", [True, False])
@pytest.mark.parametrize("rows_sorted", [True, False])
def test_hold_rows_writes_each_sides_entries_in_input_order(rows_sorted,
                                                            with_values):
  # Whether the batch's example indices come row by row (the op then copies
  # each row's entries whole) or in any order (it deals entry by entry),
  # the visited side's entries are the kept input entries in input order,
  # the batch's then the held rows', each row renumbered to its place on
  # its side; the held side's are the same order grouped by row (a stable
  # sort: each row's entries in input order), its rows given by splits.
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(7 + rows_sorted + 2 * with_values)
  for _ in range(5):
    b, h = rng.integers(1, 40), rng.integers(0, 60)
    keys = rng.choice(1000, b + h, replace=False)
    back = rng.choice(keys[:b], min(b, 5), replace=False)  # held again
    held_keys = np.concatenate([keys[b:], back])
    batch = _random_side(rng, keys[:b], rows_sorted, with_values)
    held_coo = _random_side(rng, rng.permutation(held_keys), True,
                            with_values)
    held = _as_held(held_coo)
    share = rng.uniform(0.0, 0.9)
    visit, later = sdca_ops.hold_rows(batch, held, int(rng.integers(99)),
                                      share, seed=1)
    place = {}  # key: (side, row on that side)
    for s, out in enumerate((visit, later)):
      for row, key in enumerate(out["keys"].numpy()):
        place[key] = (s, row)
    want = [([], [], []), ([], [], [])]
    for src in (batch, held_coo):
      rows, ids, values = src["sparse"][0]
      values = np.ones(len(ids)) if values is None or not len(values) \
          else values
      for row, i, v in zip(rows, ids, values):
        key = src["keys"][row]
        if src is held_coo and key in batch["keys"]:
          continue  # dropped: the batch's copy stands for it
        s, at = place[key]
        for part, x in zip(want[s], (at, i, v)):
          part.append(x)
    order = np.argsort(np.array(want[1][0], np.int64), kind="stable")
    want[1] = [_splits(np.array(want[1][0], np.int64)[order],
                       len(later["keys"]))] + [
                           np.array(part)[order] for part in want[1][1:]]
    for s, out in enumerate((visit, later)):
      rows, ids, values = out["sparse"][0]
      np.testing.assert_array_equal(rows, np.array(want[s][0], np.int64))
      np.testing.assert_array_equal(ids, np.array(want[s][1], np.int64))
      if with_values:
        np.testing.assert_array_equal(values,
                                      np.array(want[s][2], np.float32))
      else:
        assert values is None or values.shape == (0,)


def test_hold_rows_keeps_each_sparse_group_of_a_row_with_it():
  # Two sparse groups (values in the second only), the batch's rows out of
  # order in the first group and in order in the second: each row comes
  # out with every entry of each group, in its order, on its side.
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(3)

  def group(n, with_values, shuffled):
    rows = np.repeat(np.arange(n), rng.integers(0, 4, n))
    if shuffled:
      rows = rng.permutation(rows)
    return (rows.astype(np.int64),
            rng.integers(0, 30, len(rows)).astype(np.int64),
            rng.uniform(-1, 1, len(rows)).astype(np.float32)
            if with_values else None)

  def side(keys, shuffled):
    n = len(keys)
    return dict(keys=np.array(keys, np.int64),
                example_weights=np.ones(n, np.float32),
                example_labels=np.zeros(n, np.float32),
                sparse=[group(n, False, shuffled), group(n, True, False)],
                dense=[rng.uniform(size=(n, 1)).astype(np.float32)])

  def entries(rows, ids, values, row):
    values = np.ones(len(ids)) if values is None or not len(values) \
        else values
    mine = np.asarray(rows) == row
    return list(zip(np.asarray(ids)[mine], np.asarray(values)[mine]))

  batch = side(list(range(10, 30)), shuffled=True)
  held_coo = side(list(range(25, 45)), shuffled=False)  # 25-29 come back
  held = dict(held_coo, sparse=[
      (_splits(r, 20), i, np.zeros(0, np.float32) if v is None else v)
      for r, i, v in held_coo["sparse"]])
  visit, later = sdca_ops.hold_rows(batch, held, 5, 0.6, seed=2)
  assert len(visit["keys"]) + len(later["keys"]) == 35
  for out, is_held in ((visit, False), (later, True)):
    for at, key in enumerate(out["keys"].numpy()):
      src = batch if key < 30 else held_coo
      row = list(src["keys"]).index(key)
      for g in range(2):
        rows, ids, values = (None if t is None else np.asarray(t)
                             for t in out["sparse"][g])
        if is_held:
          rows = _example_indices(rows)
        assert entries(rows, ids, values, at) == entries(
            *src["sparse"][g], row), (key, g)


def test_hold_rows_bad_input_is_an_error_naming_the_argument():
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  batch = _side([1, 2], [0, 1], [3, 4], [1, 1], range(4))
  held = _as_held(_side([3], [0], [5], [1], range(2)))
  for rows in ([0, 2], [2, 0]):  # the runs' check and the deal's
    bad = dict(batch, sparse=[(np.array(rows, np.int64),) +
                              batch["sparse"][0][1:]])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"sparse_example_indices\[0\]\[%d\] = 2 is not "
                       r"a row of the 2 examples" % rows.index(2)):
      sdca_ops.hold_rows(bad, held, 0, 0.5)
  # The held rows' splits: one more than the rows, 0 to the entries, in
  # order.
  for splits, message in (
      ([0], r"held_sparse_row_splits\[0\] must have the 1 \+ 1 entries of "
       r"the held rows' row splits, got shape \[1\]"),
      ([0, 2], r"held_sparse_row_splits\[0\] must run from 0 to the 1 "
       r"entries of held_sparse_feature_indices\[0\], got 0 to 2"),
      ([-1, 1], r"must run from 0 to the 1 entries")):
    bad = dict(held, sparse=[(np.array(splits, np.int64),) +
                             held["sparse"][0][1:]])
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      sdca_ops.hold_rows(batch, bad, 0, 0.5)
  three = _as_held(_side([3, 4, 7], [0, 1, 2], [5, 6, 7], [1, 1, 1],
                         range(6)))
  three["sparse"] = [(np.array([0, 2, 1, 3], np.int64),) +
                     three["sparse"][0][1:]]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"held_sparse_row_splits\[0\]\[2\] = 1 is below "
                     r"held_sparse_row_splits\[0\]\[1\] = 2"):
    sdca_ops.hold_rows(batch, three, 0, 0.5)
  # Values in the held rows, none in the batch: the stream changed.
  no_values = dict(batch, sparse=[batch["sparse"][0][:2] + (None,)])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"held_sparse_feature_values\[0\] has shape \[1\]; "
                     r"sparse group 0 has no values"):
    sdca_ops.hold_rows(no_values, held, 0, 0.5)
  wide = dict(held, dense=[np.zeros((1, 3), np.float32)])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"dense_features\[0\] has 2 columns, the held "
                     r"rows' 3"):
    sdca_ops.hold_rows(batch, wide, 0, 0.5)
  # The batch's numbers, as the optimizer would check them, before a bad
  # row can be held (and reported a call later, elsewhere).
  nan = dict(batch, dense=[np.array([[0, 1], [np.nan, 3]], np.float32)])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"dense_features\[0\]\[1, 0\] = nan must be finite"):
    sdca_ops.hold_rows(nan, held, 0, 0.5)
  inf = dict(batch, sparse=[batch["sparse"][0][:2] +
                            (np.array([1, np.inf], np.float32),)])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"sparse_feature_values\[0\]\[1\] = inf must be "
                     r"finite"):
    sdca_ops.hold_rows(inf, held, 0, 0.5)
  negative = dict(batch, example_weights=np.array([1, -2], np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_weights\[1\] = -2 must be finite and "
                     r">= 0"):
    sdca_ops.hold_rows(negative, held, 0, 0.5)
  # Labels (in the loss's domain) and feature ids (rows of their weight
  # variables), where asked.
  checks = dict(loss_type="hinge_loss", id_limits=[5],
                id_arguments=["sparse_features[0]"])
  sdca_ops.hold_rows(batch, held, 0, 0.5, **checks)  # (labels 0/1, ids < 5)
  half = dict(batch, example_labels=np.array([1, 0.5], np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_labels\[1\] = 0.5 must be 0 or 1 for "
                     r"hinge_loss"):
    sdca_ops.hold_rows(half, held, 0, 0.5, **checks)
  classes = dict(batch, example_labels=np.array([2, 3], np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"example_labels\[1\] = 3 .* for softmax"):
    sdca_ops.hold_rows(classes, held, 0, 0.5, loss_type="softmax_loss",
                       num_classes=3)
  for far in ([0, 5], [-1, 0]):
    wide = dict(batch, sparse=[(batch["sparse"][0][0], np.array(far),
                                batch["sparse"][0][2])])
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=r"sparse_features\[0\] has an id >= 5 or < 0, "
                       r"outside the rows of its weight variable: feature id "
                       r"\[%d\] = %d" % (far.index(max(far, key=abs)),
                                           max(far, key=abs))):
      sdca_ops.hold_rows(wide, held, 0, 0.5, **checks)
  with pytest.raises(ValueError, match=r"fraction must be in \[0, 1\), got "
                     r"1.0"):
    sdca_ops.hold_rows(batch, held, 0, 1.0)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"fraction = 1 must be in \[0, 1\)"):
    sdca_ops.hold_rows(batch, held, 0, tf.constant(1.0))


def test_hold_rows_out_of_range_rows_out_of_order_are_an_error_not_a_write():
  # Example indices that pass the ends' checks but leave [0, b) inside and
  # are out of order ([0, 15, 3] of 5 rows; an index below 0 just before
  # the second of two chunks of 200k entries) once wrote row starts past
  # the op's table (heap corruption); they are reported as any bad index.
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  held = _as_held(_side([90], [0], [5], [1], range(2)))
  batch = _side(list(range(5)), [0, 15, 3], [1, 2, 3], [1, 1, 1], range(10))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"sparse_example_indices\[0\]\[1\] = 15 is not a "
                     r"row of the 5 examples"):
    sdca_ops.hold_rows(batch, held, 0, 0.5)
  n, size = 1000, 200_000
  rows = np.sort(np.random.default_rng(0).integers(0, n, size))
  rows[size // 2 - 1] = -7
  batch = _side(list(range(n)), rows, np.zeros(size), np.ones(size),
                np.zeros(2 * n))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"sparse_example_indices\[0\]\[%d\] = -7 is not "
                     r"a row of the %d examples" % (size // 2 - 1, n)):
    sdca_ops.hold_rows(batch, held, 0, 0.5)


def test_hold_rows_random_bad_rows_and_splits_are_errors_or_valid_outputs():
  # Random small sides, one input spoiled per call (an example index or a
  # split moved, one too few or too many, the batch's rows shuffled): each
  # call raises InvalidArgumentError or returns sides that are well formed.
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(11)

  def side(n, values):
    rows = np.sort(rng.integers(0, max(n, 1), rng.integers(0, 4 * n + 1))
                   if n else np.zeros(0, np.int64))
    return _side(rng.choice(10**6, n, replace=False), rows,
                 rng.integers(0, 100, len(rows)),
                 rng.normal(size=len(rows)) if values else None,
                 rng.normal(size=2 * n))

  outcomes = collections.Counter()
  for call in range(400):
    values = bool(rng.integers(2))
    batch, held = side(int(rng.integers(0, 8)), values), _as_held(
        side(int(rng.integers(0, 8)), values))
    b_rows, b_ids, b_values = batch["sparse"][0]
    splits, ids, h_values = held["sparse"][0]
    spoil = int(rng.integers(0, 6))
    if spoil == 0 and len(b_rows):
      b_rows = b_rows.copy()
      b_rows[rng.integers(len(b_rows))] = rng.integers(-3, 12)
    elif spoil == 1:
      b_rows = rng.permutation(b_rows)
    elif spoil == 2:
      splits = splits.copy()
      splits[rng.integers(len(splits))] = rng.integers(-5, 40)
    elif spoil == 3:
      splits = splits[:-1]
    elif spoil == 4:
      ids = ids[:-1] if len(ids) else np.zeros(1, np.int64)
    batch["sparse"] = [(b_rows, b_ids, b_values)]
    held["sparse"] = [(splits, ids, h_values)]
    try:
      visit, later = sdca_ops.hold_rows(batch, held, call,
                                        float(rng.uniform(0, 0.95)), seed=1)
    except tf.errors.InvalidArgumentError:
      outcomes["error"] += 1
      continue
    outcomes["ok"] += 1
    out = later["sparse"][0][0].numpy()
    assert len(out) == len(later["keys"]) + 1 and out[0] == 0
    assert out[-1] == len(later["sparse"][0][1]) and np.all(np.diff(out) >= 0)
    rows = visit["sparse"][0][0].numpy()
    assert np.all((rows >= 0) & (rows < len(visit["keys"])))
  assert outcomes["ok"] > 50 and outcomes["error"] > 50, outcomes



def _assert_state_unchanged(model, before, variables, weights):
  """`model`'s state and weight variables are still `before` (a
  get_state()) and `weights` (their `_flat`): a refused set_state set
  nothing."""
  after = model.get_state()
  for key in before:
    np.testing.assert_array_equal(np.concatenate(
        [np.ravel(a) for a in tf.nest.flatten(after[key])] or [[]]),
        np.concatenate([np.ravel(b) for b in tf.nest.flatten(before[key])]
                       or [[]]), err_msg=key)
  np.testing.assert_array_equal(_flat(variables), weights)


def _bad_states(state):
  """(what is wrong, a state that is wrong in it, the ValueError's
  message) for `state` (a carry_over, average_from model's get_state())."""
  held = state["held"]
  rows, ids, values = held["sparse"][0]
  n = len(held["keys"])
  slot = state["slots"][0]
  return [
      ("slot count", dict(state, slots=state["slots"][:1]),
       r"state['slots'] has 1 weight slots, the model 2"),
      ("slot shape", dict(state, slots=[slot[:-1]] + state["slots"][1:]),
       rf"state['slots'][0] has shape ({len(slot) - 1},); the model's slot "
       rf"0 has shape [{len(slot)}]"),
      ("slot strings", dict(state, slots=[slot.astype(str)] +
                            state["slots"][1:]),
       r"state['slots'][0] must hold real numbers (a float, integer or bool "
       r"dtype), got a <U32 numpy array"),
      ("state width", dict(state, values=state["values"][:, :3]),
       rf"state values have shape ({len(state['keys'])}, 3); the model "
       rf"keeps 4 numbers per example, for {len(state['keys'])} keys"),
      ("values and keys", dict(state, values=state["values"][:-1]),
       rf"state values have shape ({len(state['keys']) - 1}, 4); the model "
       rf"keeps 4 numbers per example, for {len(state['keys'])} keys"),
      ("float keys", dict(state, keys=state["keys"].astype(np.float64)),
       r"state['keys'] must hold integers, got a float64 array"),
      ("string values", dict(state, values=state["values"].astype(bytes)),
       r"state['values'] must hold real numbers (a float, integer or bool "
       r"dtype), got a |S"),
      ("negative calls", dict(state, calls=-1),
       r"state['calls'] must be a whole number >= 0, got -1"),
      ("fractional calls", dict(state, calls=2.5),
       r"state['calls'] must be a whole number >= 0, got 2.5"),
      ("held groups", dict(state, held=dict(held, dense=[])),
       r"held rows of 1 sparse and 0 dense groups; the model has 1 and 1"),
      ("held labels", dict(state, held=dict(
          held, example_labels=held["example_labels"].astype(str))),
       r"state['held']['example_labels'] must hold real numbers"),
      ("held weights", dict(state, held=dict(
          held, example_weights=held["example_weights"][:-1])),
       rf"state['held']['example_weights'] has {n - 1} rows, "
       rf"state['held']['keys'] {n}"),
      ("held rows", dict(state, held=dict(held, sparse=[(
          rows + n, ids, values)])),
       rf"held example indices must be rows of the {n} held examples, got "
       rf"{rows.min() + n} to {rows.max() + n}"),
      ("held ids", dict(state, held=dict(held, sparse=[(
          rows, ids[:-1], values)])),
       rf"state['held']['sparse'][0] has {len(rows)} example indices, "
       rf"{len(ids) - 1} feature ids and {len(values)} values"),
      # (Feature ids outside the weight variable were taken, and refused
      # only by the next minimize, after the state was set.)
      ("held id too large", dict(state, held=dict(held, sparse=[(
          rows, np.where(np.arange(len(ids)) == 1, VOCAB, ids), values)])),
       rf"state['held']['sparse'][0][1] has an id >= {VOCAB} or < 0, "
       rf"outside the rows of its weight variable (sparse_features[0]): "
       rf"feature id [1] = {VOCAB}"),
      ("held id negative", dict(state, held=dict(held, sparse=[(
          rows, np.where(np.arange(len(ids)) == 0, -3, ids), values)])),
       rf"state['held']['sparse'][0][1] has an id >= {VOCAB} or < 0, "
       rf"outside the rows of its weight variable (sparse_features[0]): "
       rf"feature id [0] = -3"),
      # (A negative or NaN weight, a label outside the loss's domain: the
      # same, refused by the next minimize at a merged row's index.)
      ("held weight negative", dict(state, held=dict(
          held, example_weights=np.where(np.arange(n) == 2, -1.0,
                                         held["example_weights"]))),
       r"state['held']['example_weights'][2] = -1.0 must be finite and >= 0"),
      ("held weight NaN", dict(state, held=dict(
          held, example_weights=np.where(np.arange(n) == 0, np.nan,
                                         held["example_weights"]))),
       r"state['held']['example_weights'][0] = nan must be finite and >= 0"),
      ("held label", dict(state, held=dict(
          held, example_labels=np.where(np.arange(n) == 1, 7.0,
                                        held["example_labels"]))),
       r"state['held']: example_labels[1] = 7 must be 0 or 1 for "
       r"logistic_loss"),
      ("held dense", dict(state, held=dict(held, dense=[
          held["dense"][0][:, :2]])),
       rf"state['held']['dense'][0] has shape ({n}, 2); the {n} held rows "
       rf"of this dense group need {n} x 3"),
      ("average slot shape", dict(state, average_slots=[
          state["average_slots"][0][:-1]] + state["average_slots"][1:]),
       rf"state['average_slots'][0] has shape ({len(slot) - 1},); the "
       rf"model's slot 0 has shape [{len(slot)}]"),
      ("average count", dict(state, average_count="7"),
       r"state['average_count'] must be a whole number >= 0, got '7'"),
  ]


def test_a_refused_set_state_leaves_the_model_as_it_was():
  """set_state() assigned the weight slots before it checked the state
  width (and held rows, calls and means as it went), so a state refused
  part-way left the model half-set: another model's slots over its own
  duals. Every part is checked first now: each bad state is a ValueError
  naming the part and the value, get_state() after it is get_state()
  before, bit for bit, and the model trains on as an untouched twin."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  models = []
  for _ in range(2):
    model, variables = _model(batches[0], "logistic_loss", carry_over=0.5,
                              average_from=2)
    for ex in batches[:5]:
      model.update_weights(model.minimize(examples=ex))
    models.append((model, variables))
  (model, variables), (twin, twin_variables) = models
  # Another model's state, to be refused in each of its parts.
  other, _ = _model(batches[0], "logistic_loss", carry_over=0.5,
                    average_from=2, l2=0.5)
  for ex in batches[3:]:
    other.update_weights(other.minimize(examples=ex))
  given = other.get_state()
  assert len(given["held"]["keys"]) > 1
  before = model.get_state()
  weights = _flat(variables)
  for what, state, message in _bad_states(given):
    with pytest.raises(ValueError, match="^" + re.escape(message)):
      model.set_state(state)
    after = model.get_state()
    assert sorted(after) == sorted(before), what
    for key in before:
      for a, b in zip(tf.nest.flatten(after[key]),
                      tf.nest.flatten(before[key])):
        np.testing.assert_array_equal(a, b, err_msg=f"{what}: {key}")
        assert np.asarray(a).dtype == np.asarray(b).dtype
    np.testing.assert_array_equal(_flat(variables), weights, err_msg=what)
  for m in (model, twin):
    for ex in batches[5:]:
      m.update_weights(m.minimize(examples=ex))
  np.testing.assert_array_equal(_flat(variables), _flat(twin_variables))
  np.testing.assert_array_equal(model.get_state()["slots"][0],
                                twin.get_state()["slots"][0])



def test_set_state_refuses_means_given_to_a_model_without_averaging():
  """set_state() of a model built without average_from skipped the
  state's `average_slots` and `average_count` without a word: the model
  took the last iterate while its caller meant the mean. Refused now, as
  held rows given to a model without carry_over are, naming the part and
  how to drop it knowingly; nothing is set, and the state less the means
  is taken."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  averaged, _ = _model(batches[0], "logistic_loss", average_from=2)
  for ex in batches[:5]:
    averaged.update_weights(averaged.minimize(examples=ex))
  state = averaged.get_state()
  plain, variables = _model(batches[0], "logistic_loss")
  before, weights = plain.get_state(), _flat(variables)
  for given in (state, {k: v for k, v in state.items()
                        if k != "average_count"},
                {k: v for k, v in state.items() if k != "average_slots"}):
    part = "average_slots" if "average_slots" in given else "average_count"
    with pytest.raises(ValueError, match="^" + re.escape(
        f"state['{part}'] holds the mean of the iterates of a model built "
        "with average_from; this model is built without it and would drop "
        "the mean")):
      plain.set_state(given)
    _assert_state_unchanged(plain, before, variables, weights)
  plain.set_state({k: v for k, v in state.items()
                   if k not in ("average_slots", "average_count")})
  for a, b in zip(plain.get_state()["slots"], state["slots"]):
    np.testing.assert_array_equal(a, b)


def test_a_checkpoint_of_means_is_refused_by_a_model_without_averaging(
    tmp_path):
  """A checkpoint of a model built with average_from read into one built
  without it restored the last iterate and skipped the mean (the model
  has no means to read it into) without a word, where set_state refuses
  the same means: refused now, eagerly and in a graph, naming
  average_from; a model with average_from reads it whole, and a record
  written before the mean was recorded restores as before."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  averaged, _ = _model(batches[0], "logistic_loss", average_from=2)
  for ex in batches[:5]:
    averaged.update_weights(averaged.minimize(examples=ex))
  path = tf.train.Checkpoint(model=averaged).write(str(tmp_path / "mean"))
  message = re.escape(
      "the checkpoint holds the mean of the iterates of a model built with "
      "average_from; this model is built without it and would drop the "
      "mean")
  plain, _ = _model(batches[0], "logistic_loss")
  with pytest.raises(ValueError, match="^" + message):
    tf.train.Checkpoint(model=plain).read(path)
  graph = tf.Graph()
  with graph.as_default():
    in_graph, _ = _model(batches[0], "logistic_loss")
    status = tf.train.Checkpoint(model=in_graph).read(path)
  with tf.compat.v1.Session(graph=graph) as session:
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      status.run_restore_ops(session)
  # In a graph, a model with average_from reads it (the record's mark
  # is no option of its own).
  graph = tf.Graph()
  with graph.as_default():
    in_graph, _ = _model(batches[0], "logistic_loss", average_from=2)
    status = tf.train.Checkpoint(model=in_graph).read(path)
  with tf.compat.v1.Session(graph=graph) as session:
    status.run_restore_ops(session)
  again, _ = _model(batches[0], "logistic_loss", average_from=2)
  tf.train.Checkpoint(model=again).read(path).assert_consumed()
  for a, b in zip(again.get_state()["average_slots"],
                  averaged.get_state()["average_slots"]):
    np.testing.assert_array_equal(a, b)
  # A plain model's checkpoint is read by a plain model (one with
  # average_from refuses it: the next test).
  path = tf.train.Checkpoint(model=plain).write(str(tmp_path / "plain"))
  model, _ = _model(batches[0], "logistic_loss")
  tf.train.Checkpoint(model=model).read(path).assert_consumed()
  # A record without the mark (written before it was kept) restores as
  # before.
  meaning = averaged._state_meaning
  text = meaning._text[:1] + '"held_rows": 0, ' + meaning._text[1:]
  meaning._serialize_to_tensors = lambda: {"meaning": tf.constant(text)}
  older = tf.train.Checkpoint(model=averaged).write(str(tmp_path / "older"))
  plain, _ = _model(batches[0], "logistic_loss")
  tf.train.Checkpoint(model=plain).read(older).expect_partial()
  assert plain.state_size() == averaged.state_size()


def test_a_checkpoint_without_means_is_refused_by_an_averaging_model(
    tmp_path):
  """A checkpoint of a model built without average_from read into one
  built with it restored the iterate and left the model's own means and
  count (its initial ones here: average_from=0 counts the start, so its
  weights became the mean of the zero start and what followed, not the
  checkpoint's iterate) without a word. Refused now, eagerly and in a
  graph, naming average_from (eagerly before anything is set: the next
  test), and a record without the mark (written before 2026-11-29, by either kind
  of model) restores unchecked, as before."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  plain, _ = _model(batches[0], "logistic_loss")
  for ex in batches[:5]:
    plain.update_weights(plain.minimize(examples=ex))
  path = tf.train.Checkpoint(model=plain).write(str(tmp_path / "plain"))
  message = re.escape(
      "the checkpoint holds no mean of the iterates: it was written by a "
      "model built without average_from; this model is built with it")
  for average_from in (0, 2):
    averaged, _ = _model(batches[0], "logistic_loss",
                         average_from=average_from)
    with pytest.raises(ValueError, match="^" + message):
      tf.train.Checkpoint(model=averaged).read(path)
  graph = tf.Graph()
  with graph.as_default():
    in_graph, _ = _model(batches[0], "logistic_loss", average_from=0)
    status = tf.train.Checkpoint(model=in_graph).read(path)
  with tf.compat.v1.Session(graph=graph) as session:
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      status.run_restore_ops(session)
  # A record without the mark restores unchecked.
  meaning = plain._state_meaning
  recorded = json.loads(meaning._text)
  text = json.dumps(dict(recorded, held_rows=0), sort_keys=True)
  meaning._serialize_to_tensors = lambda: {"meaning": tf.constant(text)}
  older = tf.train.Checkpoint(model=plain).write(str(tmp_path / "older"))
  averaged, _ = _model(batches[0], "logistic_loss", average_from=2)
  tf.train.Checkpoint(model=averaged).read(older).expect_partial()
  np.testing.assert_array_equal(averaged.get_state()["slots"][0],
                                plain.get_state()["slots"][0])


@pytest.mark.parametrize("writer, reader, message", [
    (dict(average_from=2), dict(),
     "the checkpoint holds the mean of the iterates of a model built with "
     "average_from; this model is built without it"),
    (dict(), dict(average_from=2),
     "the checkpoint holds no mean of the iterates: it was written by a "
     "model built without average_from"),
    (dict(), dict(loss="squared_loss"),
     "the checkpoint's SdcaModel state was trained with loss_type "
     "'logistic_loss' (this model 'squared_loss')"),
    (dict(), dict(l2=0.5),
     "the checkpoint's SdcaModel state was trained with "
     "symmetric_l2_regularization 1.0 (this model 0.5)"),
    (dict(carry_over=0.5), dict(carry_over=0), "the checkpoint holds "),
], ids=["mean", "no mean", "loss", "l2", "held rows"])
def test_a_refused_restore_leaves_the_model_as_it_was(tmp_path, writer,
                                                      reader, message):
  """An eager restore checked the record (`_StateMeaning`) only when its
  turn came among the checkpoint's values: a refused checkpoint had by
  then set the call counter, weights, slots or duals that came before it,
  and the model, refused, was left part restored. The record is checked
  before anything is set now: the ValueError as before, and the weights,
  every variable of the model and its get_state() bit for bit as they
  were."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  written, _ = _model(batches[0], "logistic_loss", **writer)
  for ex in batches[:5]:
    written.update_weights(written.minimize(examples=ex))
  path = tf.train.Checkpoint(model=written).write(str(tmp_path / "ckpt"))
  reader = dict(reader)
  model, variables = _model(batches[0], reader.pop("loss", "logistic_loss"),
                            **reader)
  for ex in batches[2:4]:
    model.update_weights(model.minimize(examples=ex))
  before, weights = model.get_state(), _flat(variables)
  values = [np.copy(v.numpy()) for v in model.variables]
  assert model.calls.numpy() == 2 and np.any(weights)
  with pytest.raises(ValueError, match="^" + re.escape(message)):
    tf.train.Checkpoint(model=model).read(path)
  _assert_state_unchanged(model, before, variables, weights)
  for v, value in zip(model.variables, values):
    np.testing.assert_array_equal(v.numpy(), value, err_msg=v.name)


def test_set_state_refuses_a_state_without_means_given_to_an_averaging_model():
  """set_state() of a model built with average_from given a state without
  `average_slots` (a plain model's get_state()) set the iterate and kept
  the model's own means and count without a word (and `average_count`
  alone was skipped). Refused now, naming the missing part and
  average_from; nothing is set, and the state with a mean given is
  taken."""
  x, ids, y, s = _data("logistic_loss", seed=4)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  plain, _ = _model(batches[0], "logistic_loss")
  for ex in batches[:5]:
    plain.update_weights(plain.minimize(examples=ex))
  state = plain.get_state()
  averaged, variables = _model(batches[0], "logistic_loss", average_from=0)
  before, weights = averaged.get_state(), _flat(variables)
  for given, part in ((state, "average_slots"),
                      (dict(state, average_count=3), "average_slots"),
                      (dict(state, average_slots=state["slots"]),
                       "average_count")):
    with pytest.raises(ValueError, match="^" + re.escape(
        f"state has no '{part}': ")):
      averaged.set_state(given)
    _assert_state_unchanged(averaged, before, variables, weights)
  averaged.set_state(dict(state, average_slots=state["slots"],
                          average_count=1))
  got = averaged.get_state()
  assert got["average_count"] == 1
  for a, b in zip(got["average_slots"], state["slots"]):
    np.testing.assert_array_equal(a, b)


def test_a_refused_keras_load_weights_leaves_the_model_as_it_was(tmp_path):
  """Keras load_weights assigned the file's weights, then the rows' duals,
  momentum and mean, before SdcaModel.set_state refused the file's state
  (held rows, for a model built with carry_over=0), so the model was left
  with the file's weights over its own duals. The weights' shapes and the
  state are checked before anything is set now: a refused file leaves the
  weights and the SDCA state bit for bit, and the model trains on as an
  untouched twin."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  xs, ys = _cancer()

  def data(x):
    return tf.data.Dataset.from_tensor_slices(
        ({"x": x, "example_id": np.arange(len(ys))}, ys)).batch(95)

  held = LinearModel(loss="logistic", carry_over="auto")
  held.fit(data(xs), epochs=2, verbose=0)
  count = len(held.sdca_state()["held"]["keys"])
  assert count > 0
  held.save_weights(str(tmp_path / "held.weights.h5"))
  checkpoint = tf.train.Checkpoint(model=held).write(str(tmp_path / "held"))
  narrow = LinearModel(loss="logistic", carry_over=0)
  narrow.fit(data(xs[:, :5]), epochs=1, verbose=0)
  narrow.save_weights(str(tmp_path / "narrow.weights.h5"))
  model, twin = (LinearModel(loss="logistic", carry_over=0) for _ in "ab")
  for m in (model, twin):
    m.fit(data(xs), epochs=1, verbose=0)
  weights, state = model.get_weights(), model.sdca_state()
  for name, load, message in (
      ("held", lambda: model.load_weights(str(tmp_path / "held.weights.h5")),
       rf"state\['held'\] holds {count} held rows: "),
      ("held checkpoint",
       lambda: tf.train.Checkpoint(model=model).read(checkpoint),
       rf"state\['held'\] holds {count} held rows: "),
      ("narrow",
       lambda: model.load_weights(str(tmp_path / "narrow.weights.h5")),
       r"the file's weight 0 has shape \(5, 1\), the model's "
       r"\S+ \(30, 1\)")):
    with pytest.raises(ValueError, match=message):
      load()
    for a, b in zip(model.get_weights(), weights):
      np.testing.assert_array_equal(a, b, err_msg=name)
    after = model.sdca_state()
    for key in ("keys", "values", "calls"):
      np.testing.assert_array_equal(after[key], state[key], err_msg=name)
    for a, b in zip(after["slots"], state["slots"]):
      np.testing.assert_array_equal(a, b, err_msg=name)
  for m in (model, twin):
    m.fit(data(xs), epochs=1, verbose=0)
  for a, b in zip(model.get_weights(), twin.get_weights()):
    np.testing.assert_array_equal(a, b)


def test_a_keras_model_never_fitted_refuses_a_bad_state_at_load(tmp_path):
  """A model built but never fitted has no SdcaModel yet: load_weights
  (and load_model, through the same load_own_variables) set the file's
  weights and kept its SDCA state unchecked for the first fit, which then
  refused it. The state is checked at load now: a ValueError naming the
  part, nothing set (zero weights, still no SDCA state: the check's
  SdcaModel is not kept), and the model fits as a fresh twin. A model
  never built that reads a tf.train.Checkpoint whose state alone it
  refuses stays unbuilt (it was left built at zero weights)."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  xs, ys = _cancer()
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": xs, "example_id": np.arange(len(ys))}, ys)).batch(95)
  held = LinearModel(loss="logistic", carry_over="auto")
  held.fit(data, epochs=2, verbose=0)
  count = len(held.sdca_state()["held"]["keys"])
  held.save_weights(str(tmp_path / "held.weights.h5"))
  store = {}
  held.save_own_variables(store)
  # (less the held rows, which a carry_over=0 model refuses first)
  narrow = {k: v for k, v in store.items() if not k.startswith("sdca_held")}
  narrow["sdca_values"] = np.asarray(store["sdca_values"])[:, :3]
  shape = np.shape(narrow["sdca_values"])
  shapes = {"x": (None, 30), "example_id": (None,)}
  # The fresh twin every refused model must fit as: one fit serves the
  # three comparisons (a fresh model's fit is the same bits every time).
  twin = LinearModel(loss="logistic", carry_over=0)
  twin.fit(data, epochs=1, verbose=0)
  fresh = twin.get_weights()
  for name, load, message in (
      ("held rows", lambda m: m.load_weights(
          str(tmp_path / "held.weights.h5")),
       rf"state\['held'\] holds {count} held rows: "),
      ("state width", lambda m: m.load_own_variables(narrow),
       re.escape(f"state values have shape {shape}; the model keeps 4 "
                 f"numbers per example"))):
    model = LinearModel(loss="logistic", carry_over=0)
    model.build(shapes)
    with pytest.raises(ValueError, match=message):
      load(model)
    for w in model.get_weights():
      assert not np.any(w), name
    with pytest.raises(ValueError, match="the model has no SDCA state"):
      model.sdca_state()
    model.fit(data, epochs=1, verbose=0)
    for a, b in zip(model.get_weights(), fresh):
      np.testing.assert_array_equal(a, b, err_msg=name)
  checkpoint = tf.train.Checkpoint(model=held).write(str(tmp_path / "held"))
  model = LinearModel(loss="logistic", carry_over=0)
  with pytest.raises(ValueError, match=(
      rf"state\['held'\] holds {count} held rows: ")):
    tf.train.Checkpoint(model=model).read(checkpoint)
  assert not model.built and not model.weights
  model.fit(data, epochs=1, verbose=0)
  for a, b in zip(model.get_weights(), fresh):
    np.testing.assert_array_equal(a, b)


def test_get_state_and_keras_save_keep_the_held_rows(tmp_path):
  import keras  # pylint: disable=import-outside-toplevel
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  # SdcaModel: a model given another's get_state() continues bit for bit.
  x, ids, y, s = _data("logistic_loss", seed=6)
  batches = [ex for _, ex in _fixed_batches(x, ids, y, s)]
  first, _ = _model(batches[0], "logistic_loss", carry_over=0.5)
  for ex in batches[:5]:
    first.minimize(examples=ex)
  state = first.get_state()
  assert len(state["held"]["keys"]) > 0
  second, _ = _model(batches[0], "logistic_loss", carry_over=0.5)
  second.set_state(state)
  for model in (first, second):
    for ex in batches[5:]:
      model.minimize(examples=ex)
  np.testing.assert_array_equal(second.get_state()["slots"][0],
                                first.get_state()["slots"][0])
  with pytest.raises(ValueError, match="held rows of 0 sparse"):
    second.set_state(dict(state, held=dict(state["held"], sparse=[])))
  # Keras: save and load_model keep them with the rest of the SDCA state.
  xs, ys = _cancer()
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": xs, "example_id": np.arange(len(ys))}, ys)).batch(95)
  model = LinearModel(loss="logistic", carry_over="auto")
  model.fit(data, epochs=2, verbose=0)
  path = str(tmp_path / "held.keras")
  model.save(path)
  loaded = keras.models.load_model(path)
  saved, got = model.sdca_state()["held"], loaded.sdca_state()["held"]
  assert len(saved["keys"]) > 0
  np.testing.assert_array_equal(got["keys"], saved["keys"])
  np.testing.assert_array_equal(got["dense"][0], saved["dense"][0])


def test_a_step_calling_minimize_is_traced_once_after_create_variables(
    monkeypatch):
  """TensorFlow traces a tf.function twice when its first trace creates
  variables: the held rows' were made inside the first trace of a step
  calling `minimize` (and of Keras' streamed train step). After
  `create_variables` one trace; the same weights either way."""
  x, _, y, s = _data("logistic_loss", seed=4)
  # Arrays only (one trace per shape): a sparse group's column object is
  # a Python value, traced per object.
  batches = [dict(sparse_features=[], dense_features=[x[r]],
                  example_weights=s[r], example_labels=y[r],
                  example_ids=r.astype(np.int64))
             for r in np.split(np.arange(N), N // 20)]
  weights = []
  for create_first, traces in ((False, 2), (True, 1)):
    model, variables = _model(batches[0], "logistic_loss", sparse=False,
                              carry_over="auto")
    if create_first:
      model.create_variables()
      model.create_variables()  # makes nothing the second time

    @tf.function
    def step(ex, m=model):
      m.update_weights(m.minimize(examples=ex))
    for _ in range(3):
      for ex in batches:
        step(ex)
    assert step.experimental_get_tracing_count() == traces
    assert len(model.get_state()["held"]["keys"]) > 0
    weights.append(_flat(variables))
  np.testing.assert_array_equal(weights[0], weights[1])

  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  traced = []
  original = LinearModel.train_step
  monkeypatch.setattr(LinearModel, "train_step", lambda self, data: (
      traced.append(1), original(self, data))[1])
  dataset = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(N)}, y)).batch(20)
  LinearModel(loss="logistic").fit(dataset, epochs=2, verbose=0)
  assert len(traced) == 1

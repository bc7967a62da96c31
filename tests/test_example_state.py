"""SdcaModel's per-example state table (TfSdca>ExampleStateTable and the ops
on it, kernels/kernels/example_state_table.h).

The table alone against std::unordered_map (TF-free driver, also under ASan
+ UBSan); the ops against a Python dict: rows found where stored, zeros and
slot -1 where not, writes through slots that a growing table made stale,
export / import, the refusals; one table per graph node across
`session.run`s; SdcaModel training bit for bit as with TensorFlow's
DenseHashTable, which the table replaced (its checkpoints restore both ways:
tests/test_sdca_model.py).
"""
import os
import shutil
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from tf_sdca import SdcaModel
from tf_sdca import sdca_model
from tf_sdca.ops import sdca_ops

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@pytest.mark.parametrize("flags", [["-O2"],
                                   ["-O1", "-g1", "-fsanitize=address,undefined",
                                    "-fno-sanitize-recover=undefined"]],
                         ids=["O2", "asan-ubsan"])
def test_the_table_agrees_with_a_map(tmp_path, flags):
  binary = str(tmp_path / "example_state_table_main")
  try:
    subprocess.run(["g++", "-std=c++17", *flags, "-I" + ROOT,
                    os.path.join(ROOT, "kernels", "tests",
                                 "example_state_table_main.cc"),
                    "-o", binary], check=True, capture_output=True, text=True)
  except subprocess.CalledProcessError as e:
    if "-fsanitize" in " ".join(flags):  # no libasan / libubsan here
      pytest.skip("cannot build with ASan + UBSan: " + e.stderr[-300:])
    raise
  result = subprocess.run([binary, "check"], capture_output=True, text=True,
                          timeout=300)
  for report in ("AddressSanitizer", "runtime error:"):
    assert report not in result.stderr, result.stderr[-3000:]
  assert result.returncode == 0, result.stderr
  assert result.stdout.strip().endswith("OK")


def _table(width=4):
  return sdca_model._ExampleStateTable("test_table", width)  # pylint: disable=protected-access


def _keys(rng, n):
  return rng.integers(-2**63 + 2, 2**63 - 1, n, dtype=np.int64)


def test_rows_are_found_where_stored_and_zero_elsewhere():
  rng = np.random.default_rng(0)
  table, truth = _table(), {}
  for step in range(6):
    # Stored keys, new keys, and keys sharing their low bits (shards).
    old = rng.choice(list(truth), min(len(truth), 500), replace=False) \
        if truth else np.zeros(0, np.int64)
    keys = np.unique(np.concatenate([
        old, _keys(rng, 700), _keys(rng, 300) // 1024 * 1024]))
    rng.shuffle(keys)
    values, slots = table.find(keys)
    want = np.array([truth.get(k, np.zeros(4, np.float32)) for k in keys])
    np.testing.assert_array_equal(values.numpy(), want)
    np.testing.assert_array_equal(slots.numpy() >= 0,
                                  [k in truth for k in keys])
    new = rng.normal(size=(len(keys), 4)).astype(np.float32)
    if step == 3:  # another batch's inserts grow the table: stale slots
      more = _keys(rng, 5000)
      table.insert(more, np.ones((5000, 4), np.float32))
      truth.update({k: np.ones(4, np.float32) for k in more})
    table.insert(keys, new, slots)
    truth.update(zip(keys, new))
    assert int(table.size()) == len(truth)
  keys, values = table.entries()
  assert sorted(keys.numpy()) == sorted(truth)
  for k, v in zip(keys.numpy(), values.numpy()):
    np.testing.assert_array_equal(v, truth[k])


def test_import_replaces_everything():
  table = _table(width=2)
  table.insert(np.array([1, 2, 3]), np.ones((3, 2), np.float32))
  table.replace(tf.constant([-2**63, 5], tf.int64),
                tf.constant([[1, 2], [3, 4]], tf.float32))
  keys, values = table.entries()
  # The reserved lowest key moves to +2, as ExampleKeys moves it.
  assert dict(zip(keys.numpy(), values.numpy().tolist())) == {
      -2**63 + 2: [1, 2], 5: [3, 4]}


def test_bad_input_is_refused_with_the_argument_named():
  table = _table()
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"keys\[1\] = -9223372036854775808 is reserved"):
    table.insert(np.array([1, -2**63]), np.zeros((2, 4), np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"keys\[0\] = -9223372036854775807 is reserved"):
    table.find(np.array([-2**63 + 1]))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"values has shape \[2,3\]; expected \[2, 4\]"):
    table.insert(np.array([1, 2]), np.zeros((2, 3), np.float32))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="slots has 1 entries; expected 2"):
    table.insert(np.array([1, 2]), np.zeros((2, 4), np.float32),
                 tf.constant([0], tf.int64))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="keeps 4 floats per example, not width = 5"):
    sdca_ops.example_state_find(table.resource_handle, [1], width=5)
  assert int(table.size()) == 0  # nothing half-written


def test_a_graph_node_keeps_one_table_across_session_runs():
  graph = tf.Graph()
  with graph.as_default():
    table = _table()
    keys = tf.constant([7, 8], tf.int64)
    write = table.insert(keys, tf.constant([[1, 2, 3, 4], [5, 6, 7, 8]],
                                           tf.float32))
    read = table.lookup(keys)
    size = table.size()
  with tf.compat.v1.Session(graph=graph) as session:
    session.run(write)
    np.testing.assert_array_equal(session.run(read),
                                  [[1, 2, 3, 4], [5, 6, 7, 8]])
    assert session.run(size) == 2


def test_eager_tables_are_separate():
  a, b = _table(), _table()
  a.insert([1], np.ones((1, 4), np.float32))
  assert int(a.size()) == 1 and int(b.size()) == 0


class _DenseHashTableState(tf.lookup.experimental.DenseHashTable):
  """The table SdcaModel used before: TensorFlow's DenseHashTable behind
  the interface of today's (no slots)."""

  def __init__(self, name, width=4):
    super().__init__(tf.int64, tf.float32, tf.zeros([width], tf.float32),
                     empty_key=-2**63, deleted_key=-2**63 + 1, name=name)

  def find(self, keys):
    return self.lookup(keys), None

  def entries(self):
    keys, values = self.export()
    keys = tf.reshape(keys, [-1])
    used = keys > -2**63 + 1
    return tf.boolean_mask(keys, used), tf.boolean_mask(values, used)

  def insert(self, keys, values, slots=None):  # pylint: disable=arguments-differ
    del slots
    return super().insert(keys, values)


@pytest.mark.parametrize("num_table_shards", [1, 3])
def test_training_is_bit_for_bit_that_with_a_dense_hash_table(
    monkeypatch, num_table_shards):
  rng = np.random.default_rng(3)
  n, vocab = 600, 50
  ids = rng.integers(0, vocab, (n, 3))
  x = rng.normal(size=(n, 2)).astype(np.float32)
  y = (rng.random(n) < 0.4).astype(np.float32)

  def batch(rows):
    return dict(
        sparse_features=[sdca_model.SparseFeatureColumn(
            np.repeat(np.arange(len(rows)), 3), ids[rows].ravel(), None)],
        dense_features=[x[rows]], example_weights=np.ones(len(rows),
                                                          np.float32),
        example_labels=y[rows],
        example_ids=np.array([str(r) for r in rows]))

  results = []
  for table in (sdca_model._ExampleStateTable, _DenseHashTableState):  # pylint: disable=protected-access
    monkeypatch.setattr(sdca_model, "_ExampleStateTable", table)
    variables = dict(sparse_features_weights=[tf.Variable(tf.zeros([vocab]))],
                     dense_features_weights=[tf.Variable(tf.zeros([2]))])
    model = SdcaModel(None, variables, dict(
        loss_type="logistic_loss", symmetric_l2_regularization=1.0,
        symmetric_l1_regularization=0.1, num_table_shards=num_table_shards))
    for _ in range(3):
      for start in range(0, n, 200):
        model.update_weights(model.minimize(
            examples=batch(np.arange(start, start + 200))))
    state = model.get_state()
    order = np.argsort(state["keys"])
    results.append([v.numpy() for v in variables["sparse_features_weights"]
                    + variables["dense_features_weights"]]
                   + [state["keys"][order], state["values"][order]])
  for ours, theirs in zip(*results):
    np.testing.assert_array_equal(ours, theirs)

"""`update_weights` right after `minimize` writes the call's rows from the
values the call computed instead of gathering them again: the variables
must still be exactly shrink(slots), eagerly, in a tf.function and in a
TF1 graph, and after a checkpoint restore or `set_state` between the two
calls (which must make it gather again)."""
import numpy as np
import pytest
import tensorflow as tf

from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

ROWS, VOCAB, PER_ROW, L1, L2 = 60, 40, 3, 0.05, 0.5


def _batch(seed):
  rng = np.random.default_rng(seed)
  ids = np.stack([rng.choice(VOCAB, PER_ROW, replace=False)
                  for _ in range(ROWS)]).astype(np.int64)
  return dict(
      sparse_features=[SparseFeatureColumn(
          tf.constant(np.repeat(np.arange(ROWS), PER_ROW), tf.int64),
          tf.constant(ids.ravel()))],
      dense_features=[tf.constant(rng.normal(size=(ROWS, 2)), tf.float32)],
      example_weights=tf.ones([ROWS]),
      example_labels=tf.constant(rng.integers(0, 2, ROWS), tf.float32),
      example_ids=tf.constant([f"{seed}-{i}" for i in range(ROWS)]))


def _model(**options):
  # A partitioned sparse variable: the written values are split too.
  sparse = [tf.Variable(tf.zeros([25])), tf.Variable(tf.zeros([VOCAB - 25]))]
  dense = tf.Variable(tf.zeros([2]))
  model = SdcaModel(None, dict(sparse_features_weights=[sparse],
                               dense_features_weights=[dense]),
                    dict(loss_type="logistic_loss",
                         symmetric_l1_regularization=L1,
                         symmetric_l2_regularization=L2, **options))
  return model, sparse


def _assert_variables_are_shrunk_slots(model, sparse):
  slots = np.concatenate([s.numpy() for s in model._sparse[0].slots])
  want = (np.sign(slots) * np.maximum(np.abs(slots) - L1 / L2, 0.0)
          ).astype(np.float32)
  got = np.concatenate([v.numpy() for v in sparse])
  np.testing.assert_array_equal(got, want)
  assert np.count_nonzero(got) > 5  # trained, and l1 left some weights
  assert model._sparse[0].touched.numpy().size == 0


@pytest.mark.parametrize("carry_over", [0, "auto"])
def test_eager_and_tf_function_updates_equal_the_shrunk_slots(carry_over):
  batches = [_batch(seed) for seed in range(3)]
  eager, eager_vars = _model(carry_over=carry_over)
  graph, graph_vars = _model(carry_over=carry_over)

  @tf.function
  def step(examples):
    graph.update_weights(graph.minimize(examples=examples))

  for _ in range(4):
    for b in batches:
      eager.update_weights(eager.minimize(examples=b))
      step(b)
      _assert_variables_are_shrunk_slots(eager, eager_vars)
      _assert_variables_are_shrunk_slots(graph, graph_vars)
  assert "update_written" in eager._functions  # the path under test
  # The same bits in both loops.
  for a, b in zip(eager_vars, graph_vars):
    np.testing.assert_array_equal(a.numpy(), b.numpy())
  # Two minimize calls, then update_weights: the first call's rows are
  # gathered, the second's written from its values.
  eager.minimize(examples=batches[0])
  eager.update_weights(eager.minimize(examples=batches[1]))
  _assert_variables_are_shrunk_slots(eager, eager_vars)


def test_rows_pending_from_earlier_calls_are_gathered_in_a_tf_function():
  model, sparse = _model()
  batches = [_batch(seed) for seed in range(3)]

  @tf.function
  def step(examples):
    model.update_weights(model.minimize(examples=examples))

  @tf.function
  def two_steps(first, second):
    model.minimize(examples=first)
    model.update_weights(model.minimize(examples=second))

  for _ in range(3):
    model.minimize(examples=batches[0])  # eager, no update_weights
    step(batches[1])
    _assert_variables_are_shrunk_slots(model, sparse)
    two_steps(batches[2], batches[0])
    _assert_variables_are_shrunk_slots(model, sparse)


def test_tf1_graph_update_writes_the_shrunk_slots():
  with tf.Graph().as_default():
    model, sparse = _model()
    train = model.minimize(examples=_batch(0))
    update = model.update_weights(train)
    with tf.compat.v1.Session() as sess:
      sess.run(tf.compat.v1.global_variables_initializer())
      for _ in range(3):
        sess.run(train)  # rows pending from calls update_weights did not see
      sess.run(update)
      slots = np.concatenate(sess.run(model._sparse[0].slots))
      got = np.concatenate(sess.run(sparse))
  want = (np.sign(slots) * np.maximum(np.abs(slots) - L1 / L2, 0.0)
          ).astype(np.float32)
  np.testing.assert_array_equal(got, want)
  assert np.count_nonzero(got) > 5


@pytest.mark.parametrize("how", ["checkpoint", "set_state"])
def test_a_restore_between_minimize_and_update_weights_gathers_again(
    how, tmp_path):
  model, sparse = _model()
  model.update_weights(model.minimize(examples=_batch(0)))
  model.minimize(examples=_batch(1))  # pending rows, saved with the state
  ckpt = tf.train.Checkpoint(model=model)
  path = ckpt.write(str(tmp_path / "ckpt"))
  state = model.get_state()
  model.update_weights(model.minimize(examples=_batch(1)))
  train_op = model.minimize(examples=_batch(2))
  if how == "checkpoint":
    ckpt.read(path).assert_consumed()
  else:
    model.set_state(state)  # (writes every row; batch 2's stay pending)
  # The restored slots and pending rows, not the values of batch 2's call.
  model.update_weights(train_op)
  _assert_variables_are_shrunk_slots(model, sparse)

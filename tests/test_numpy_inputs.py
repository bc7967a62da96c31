"""Numpy arrays given to the ops eagerly become tensors through one aligned
copy (`sdca_ops.to_tensor`, DLPack) instead of `tf.convert_to_tensor`'s two:
the tensors must hold the same values and dtypes, never share the caller's
array, and a model trained from numpy batches must give the bits it gives
from the same batches as tensors."""
import numpy as np
import pytest
import tensorflow as tf

import tf_sdca
from tf_sdca.ops import sdca_ops


@pytest.mark.parametrize("dtype", [np.int64, np.int32, np.float32,
                                   np.float64, np.uint8])
@pytest.mark.parametrize("shape", [(10,), (70000,), (30000, 7)])
def test_to_tensor_equals_convert_to_tensor(dtype, shape):
  rng = np.random.default_rng(0)
  value = (rng.normal(size=shape) * 100).astype(dtype)
  for array in (value, value[::2] if value.ndim == 1 else value[:, ::3]):
    tensor = sdca_ops.to_tensor(array, tf.as_dtype(dtype))
    reference = tf.convert_to_tensor(array, tf.as_dtype(dtype))
    assert tensor.dtype == reference.dtype
    np.testing.assert_array_equal(tensor.numpy(), reference.numpy())
    before = array.copy()
    array[...] = 0  # the tensor owns its copy
    np.testing.assert_array_equal(tensor.numpy(), before)
    array[...] = before


def test_a_dtype_change_goes_through_convert_to_tensor():
  value = np.linspace(0, 1, 70000)  # float64 into a float32 tensor
  tensor = sdca_ops.to_tensor(value, tf.float32)
  np.testing.assert_array_equal(
      tensor.numpy(), tf.convert_to_tensor(value, tf.float32).numpy())


@pytest.mark.parametrize("size", [10, 20000])
def test_bytes_arrays_become_the_strings_convert_to_tensor_makes(size):
  # Above 64 KiB a bytes array is cut from one copy of its buffer: the
  # items must be numpy's (trailing NULs stripped, inner ones kept, empty
  # ones empty), strided arrays included.
  rng = np.random.default_rng(1)
  pool = [b"", b"\x00", b"a\x00b", b"abc\x00", b"\xff" * 11, b"x" * 16,
          b"12345", b"\x00\x00z"]
  value = np.array([pool[i] + b"%d" % j if j % 3 else pool[i]
                    for j, i in enumerate(rng.integers(len(pool), size=size))])
  assert value.nbytes >= (1 << 16 if size > 10 else 0)
  for array in (value, value[::3]):
    tensor = sdca_ops.to_tensor(array, tf.string)
    reference = tf.convert_to_tensor(array, tf.string)
    assert tensor.dtype == tf.string and tensor.shape == reference.shape
    assert tensor.numpy().tolist() == reference.numpy().tolist()
    assert tensor.numpy().tolist() == list(array)
  np.testing.assert_array_equal(
      sdca_ops.sdca_fprint(value).numpy(),
      sdca_ops.sdca_fprint(tf.constant(value)).numpy())


def test_numpy_and_tensor_batches_train_to_the_same_bits():
  rng = np.random.default_rng(3)
  rows, per_row, table = 3000, 8, 5000
  batches = []
  for b in range(3):
    batches.append(dict(
        example_indices=np.repeat(np.arange(rows, dtype=np.int64), per_row),
        feature_ids=np.concatenate([rng.choice(table, per_row, replace=False)
                                    for _ in range(rows)]).astype(np.int64),
        dense=rng.normal(size=(rows, 3)).astype(np.float32),
        weights=np.ones(rows, np.float32),
        labels=(rng.random(rows) < 0.4).astype(np.float32),
        ids=np.arange(b * rows, (b + 1) * rows, dtype=np.int64),
        string_ids=np.array([b"example-%032d" % i
                             for i in range(b * rows, (b + 1) * rows)])))

  def train(as_tensors, ids="ids"):
    sparse, dense = tf.Variable(tf.zeros([table])), tf.Variable(tf.zeros([3]))
    model = tf_sdca.SdcaModel(
        None, dict(sparse_features_weights=[sparse],
                   dense_features_weights=[dense]),
        dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0))
    for _ in range(3):
      for b in batches:
        b = {k: tf.constant(v) for k, v in b.items()} if as_tensors else b
        examples = dict(
            sparse_features=[tf_sdca.SparseFeatureColumn(
                b["example_indices"], b["feature_ids"])],
            dense_features=[b["dense"]], example_weights=b["weights"],
            example_labels=b["labels"], example_ids=b[ids])
        model.update_weights(model.minimize(examples=examples))
    return sparse.numpy(), dense.numpy()

  for ours, theirs in zip(train(False), train(True)):
    np.testing.assert_array_equal(ours, theirs)
  # Bytes ids of 64 KiB or more (3000 of 40 bytes) are cut from one
  # buffer: as tensors they key the same duals.
  assert batches[0]["string_ids"].nbytes >= 1 << 16
  for ours, theirs in zip(train(False, "string_ids"),
                          train(True, "string_ids")):
    np.testing.assert_array_equal(ours, theirs)
  assert np.abs(train(False)[0]).max() > 0

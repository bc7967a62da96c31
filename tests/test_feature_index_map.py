"""The op maps each sparse feature id to its position in `sparse_indices`
with one of three structures (kernels/kernels/feature_index_map.h): a rank
bitmap for ascending ids (what SdcaModel's distinct ids are), a direct
table for small unordered ids, a hash table for the others. The same batch
given with its ids in ascending and in shuffled order must train to the
same bits, and an id outside `sparse_indices` must fail the same way."""
import numpy as np
import pytest
import tensorflow as tf

import tf_sdca


def _batch(rng, ids, rows=300, per_row=6):
  """Rows of distinct ids drawn from `ids`, logistic labels, one dense
  column."""
  feature_ids = np.concatenate([rng.choice(ids, per_row, replace=False)
                                for _ in range(rows)]).astype(np.int64)
  return dict(
      sparse_example_indices=[np.repeat(np.arange(rows, dtype=np.int64),
                                        per_row)],
      sparse_feature_indices=[feature_ids],
      sparse_feature_values=[],
      dense_features=[rng.normal(size=(rows, 1)).astype(np.float32)],
      example_weights=np.ones(rows, np.float32),
      example_labels=(rng.random(rows) < 0.5).astype(np.float32),
      dense_weights=[np.zeros(1, np.float32)],
      example_state_data=np.zeros((rows, 4), np.float32),
      loss_type="logistic_loss", l1=0.0, l2=0.5, num_inner_iterations=3)


def _solve(batch, sparse_indices, weights_of):
  out = tf_sdca.sdca_optimizer(
      sparse_indices=[sparse_indices],
      sparse_weights=[weights_of(sparse_indices)], **batch)
  return out[0].numpy(), out[1][0].numpy(), out[2][0].numpy()


# Ascending ids take the rank bitmap; shuffled, the direct table (ids below
# 2^22) or the hash table (ids spread wide). Word edges (63, 64, 127, ...)
# and id 0 are in every set.
@pytest.mark.parametrize("high", [200, 1 << 23, 1 << 40])
def test_ascending_and_shuffled_sparse_indices_give_the_same_bits(high):
  rng = np.random.default_rng(high % 1000)
  edges = np.array([0, 1, 63, 64, 127, 128, 191, 192], np.int64)
  ids = np.unique(np.concatenate([edges, rng.integers(0, high, 150)]))
  batch = _batch(rng, ids)
  start = {int(i): np.float32(w) for i, w in
           zip(ids, rng.normal(scale=0.1, size=len(ids)))}

  def weights_of(sparse_indices):
    return np.array([start[int(i)] for i in sparse_indices], np.float32)

  state, d_sparse, d_dense = _solve(batch, ids, weights_of)
  order = rng.permutation(len(ids))
  state2, d_sparse2, d_dense2 = _solve(batch, ids[order], weights_of)
  np.testing.assert_array_equal(state, state2)
  np.testing.assert_array_equal(d_sparse[order], d_sparse2)
  np.testing.assert_array_equal(d_dense, d_dense2)
  # Every id of the batch moved its weight: the positions were found.
  used = np.isin(ids, batch["sparse_feature_indices"][0])
  assert np.all(d_sparse[used] != 0) and np.all(d_sparse[~used] == 0)


@pytest.mark.parametrize("missing", [65, 130, 10**6, -3])
def test_an_id_outside_ascending_sparse_indices_is_named(missing):
  """Ids absent from a word that holds others, past the last word, or
  negative: the same error as the other maps give."""
  rng = np.random.default_rng(0)
  ids = np.array([0, 63, 64, 127, 128, 129, 200], np.int64)
  batch = _batch(rng, ids, rows=5, per_row=3)
  feature_ids = batch["sparse_feature_indices"][0].copy()
  feature_ids[7] = missing
  batch["sparse_feature_indices"] = [feature_ids]
  message = (f"= {missing} must be >= 0" if missing < 0 else
             f"sparse_feature_indices\\[0\\]\\[7\\] = {missing} is not in "
             f"sparse_indices\\[0\\]")
  for sparse_indices in (ids, ids[::-1]):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
      _solve(batch, sparse_indices,
             lambda s: np.zeros(len(s), np.float32))

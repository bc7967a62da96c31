"""Packed records keep no value for a row's leading entries of value 1.0
(the one-hot ids that a scipy matrix lists before its counts): where every
value is 1.0 the rows solve to the same bits as rows without values (every
loss, L1, CoCoA+, the multiclass losses, ASDCA, the mini-batch op), and
rows that mix a leading run of ones of any length with other values match
a float64 reference step by step (tests/test_packed_reference.py)."""
import numpy as np
import pytest

from sdca_testutil import LOSSES, make_problem
from tf_sdca import asdca_solve, pack_rows, packed_solve, sdca_optimizer


def _data(ids, dense, weights, labels, use_values):
  n, k = ids.shape
  return dict(row_ptr=np.arange(0, n * k + 1, k, dtype=np.int64),
              feature_ids=ids.ravel().astype(np.int32),
              feature_values=(np.ones(n * k, np.float32) if use_values
                              else np.zeros(0, np.float32)),
              dense_features=dense, example_weights=weights,
              example_labels=labels)


def _packed(problem, loss, use_values, **kwargs):
  return pack_rows(**_data(problem["ids"], problem["dense"],
                           problem["weights"], problem["labels"], use_values),
                   num_sparse_features=problem["vocab"], loss_type=loss,
                   **kwargs)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1,partitions,order", [
    (0.0, 1, "permutation"), (0.3, 1, "shrinking"), (0.1, 2, "adaptive")])
def test_values_all_one_solve_as_rows_without_values(loss, l1, partitions,
                                                      order):
  problem = make_problem(loss, n=60, per_row=5, example_weights=np.r_[
      np.ones(55), 0.0, 2.0, 0.5, 1.0, 3.0])
  m = problem["vocab"] + problem["dense"].shape[1]
  w0 = np.random.default_rng(1).normal(size=m) * 0.1
  out = []
  for use_values in (True, False):
    rows = _packed(problem, loss, use_values)
    w, a = w0, np.zeros(60)
    for epoch in range(3):
      w, a, parts = packed_solve(rows, w, a, seed=epoch, loss_type=loss,
                                 l1=l1, l2=0.7, num_loss_partitions=partitions,
                                 visit_order=order)
    out.append((w.numpy(), a.numpy(), parts.numpy()))
  assert np.abs(out[0][1]).sum() > 0  # it moved
  for got, want in zip(out[0], out[1]):
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("loss", ["softmax_loss", "multiclass_hinge_loss"])
def test_multiclass_values_all_one_solve_as_rows_without_values(loss):
  rng = np.random.default_rng(3)
  n, k, classes, vocab = 60, 4, 4, 20
  ids = np.stack([rng.choice(vocab, k, replace=False) for _ in range(n)])
  dense = rng.normal(size=(n, 2)).astype(np.float32)
  labels = rng.integers(0, classes, n).astype(np.float32)
  out = []
  for use_values in (True, False):
    rows = pack_rows(**_data(ids, dense, np.ones(n, np.float32), labels,
                             use_values),
                     num_sparse_features=vocab, loss_type=loss,
                     num_classes=classes)
    w, a = np.zeros((vocab + 2) * classes), np.zeros(n * classes)
    for epoch in range(3):
      w, a, parts = packed_solve(rows, w, a, seed=epoch, loss_type=loss,
                                 l1=0.0, l2=0.5, num_classes=classes)
    out.append((w.numpy(), a.numpy(), parts.numpy()))
  assert np.abs(out[0][1]).sum() > 0
  for got, want in zip(out[0], out[1]):
    np.testing.assert_array_equal(got, want)


def test_asdca_values_all_one_solve_as_rows_without_values():
  loss = "logistic_loss"
  problem = make_problem(loss, n=80, per_row=5)
  m = problem["vocab"] + problem["dense"].shape[1]
  out = []
  for use_values in (True, False):
    rows = _packed(problem, loss, use_values)
    w, a, v = np.zeros(m), np.zeros(80), np.zeros(m)
    for epoch in range(3):
      w, a, v, parts, _ = asdca_solve(rows, w, a, v, epoch, loss, 0.0, 0.5,
                                      batch_size=8)
    out.append((w.numpy(), a.numpy(), v.numpy(), parts.numpy()))
  assert np.abs(out[0][1]).sum() > 0
  for got, want in zip(out[0], out[1]):
    np.testing.assert_array_equal(got, want)


def test_the_mini_batch_op_with_values_all_one_solves_as_without_values():
  loss = "logistic_loss"
  n = 50
  problem = make_problem(loss, n=n)
  vocab = problem["vocab"]
  out = []
  for use_values in (True, False):
    state, (d_sparse,), (d_dense,) = sdca_optimizer(
        [np.repeat(np.arange(n), problem["ids"].shape[1])],
        [problem["ids"].ravel()],
        [np.ones(problem["ids"].size, np.float32)] if use_values else [],
        [problem["dense"]], problem["weights"], problem["labels"],
        [np.arange(vocab)], [np.zeros(vocab, np.float32)],
        [np.zeros(3, np.float32)], np.zeros((n, 4), np.float32),
        loss_type=loss, l1=0.0, l2=0.7, num_loss_partitions=1,
        num_inner_iterations=3, visit_order="permutation")
    out.append((state.numpy(), d_sparse.numpy(), d_dense.numpy()))
  assert np.abs(out[0][0][:, 0]).sum() > 0
  for got, want in zip(out[0], out[1]):
    np.testing.assert_array_equal(got, want)

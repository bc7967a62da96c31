"""TfSdca>PackRows / TfSdca>PackedSolve: the same results as ResidentSolve
bit for bit (every loss, L1, values, CoCoA+, every visiting order), the
packed rows are a copy, bad inputs are named when packing and per call."""
import gc

import numpy as np
import pytest
import tensorflow as tf

from sdca_testutil import LOSSES, make_problem
from tf_sdca import pack_rows, packed_solve, resident_solve


def _data(problem, use_values=True):
  n, k = problem["ids"].shape
  return dict(row_ptr=np.arange(0, n * k + 1, k, dtype=np.int64),
              feature_ids=problem["ids"].ravel().astype(np.int32),
              feature_values=(problem["values"].ravel() if use_values
                              else np.zeros(0, np.float32)),
              dense_features=problem["dense"],
              example_weights=problem["weights"],
              example_labels=problem["labels"])


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1,partitions,use_values,order", [
    (0.0, 1, True, "permutation"), (0.3, 1, False, "cyclic"),
    (0.1, 2, True, "uniform"), (0.0, 1, False, "permutation")])
def test_same_results_as_resident_solve(loss, l1, partitions, use_values,
                                        order):
  problem = make_problem(loss, n=50, example_weights=np.r_[
      np.ones(45), 0.0, 2.0, 0.5, 1.0, 3.0])
  data = _data(problem, use_values)
  m = problem["vocab"] + problem["dense"].shape[1]
  rows = pack_rows(**data, num_sparse_features=problem["vocab"],
                   loss_type=loss)
  options = dict(loss_type=loss, l1=l1, l2=0.7,
                 num_loss_partitions=partitions, visit_order=order)
  w = np.random.default_rng(1).normal(size=m) * 0.1
  w_r, a_r = w, np.zeros(50)
  w_p, a_p = w, np.zeros(50)
  for seed in range(3):
    w_r, a_r, o_r = resident_solve(**data, weights=w_r, duals=a_r, seed=seed,
                                   num_passes=2, **options)
    w_p, a_p, o_p = packed_solve(rows, w_p, a_p, seed=seed, num_passes=2,
                                 **options)
    np.testing.assert_array_equal(w_p.numpy(), w_r.numpy())
    np.testing.assert_array_equal(a_p.numpy(), a_r.numpy())
    # The objective sums the same terms in the same chunks.
    np.testing.assert_allclose(o_p.numpy(), o_r.numpy(), rtol=1e-13)
  assert np.abs(a_p.numpy()).sum() > 0  # it moved


def test_duality_gap_goes_to_zero_and_objective_only_call():
  problem = make_problem("logistic_loss", n=300, vocab=40, per_row=4, seed=3)
  data = _data(problem)
  m = problem["vocab"] + 3
  rows = pack_rows(**data, num_sparse_features=problem["vocab"],
                   loss_type="logistic_loss")
  w, a = np.zeros(m), np.zeros(300)
  for epoch in range(500):
    w, a, parts = packed_solve(rows, w, a, seed=epoch,
                               loss_type="logistic_loss", l1=0.0, l2=0.5)
    p = parts.numpy()
    gap = (p[0] + p[1] + 0.5 * p[2]) / (p[0] + 0.25 * p[2])
    if gap < 1e-10:
      break
  assert 0 <= gap < 1e-10
  w2, a2, p2 = packed_solve(rows, w, a, seed=0, loss_type="logistic_loss",
                            l1=0.0, l2=0.5, num_passes=0)
  np.testing.assert_array_equal(w2.numpy(), w.numpy())
  np.testing.assert_array_equal(a2.numpy(), a.numpy())
  np.testing.assert_array_equal(p2.numpy(), p)


def test_rows_are_a_copy_and_the_handle_works_in_tf_function():
  problem = make_problem("squared_loss", n=40)
  data = {k: v.copy() for k, v in _data(problem).items()}
  m = problem["vocab"] + 3
  rows = pack_rows(**data, num_sparse_features=problem["vocab"],
                   loss_type="squared_loss")
  expected = resident_solve(**data, weights=np.zeros(m), duals=np.zeros(40),
                            seed=4, loss_type="squared_loss", l1=0.0, l2=1.0)
  for array in data.values():
    array[...] = 0  # the packed copy must not see this
  del data
  gc.collect()

  @tf.function
  def epoch(w, a):
    return packed_solve(rows, w, a, seed=4, loss_type="squared_loss",
                        l1=0.0, l2=1.0)

  got = epoch(tf.zeros(m, tf.float64), tf.zeros(40, tf.float64))
  for x, y in zip(got, expected):
    np.testing.assert_array_equal(x.numpy(), y.numpy())


@pytest.mark.parametrize("change,message", [
    (lambda a: a.update(feature_ids=np.r_[a["feature_ids"][:-1], 25]
                        .astype(np.int32)),
     r"feature_ids\[119\] = 25 is outside \[0, 25\)"),
    (lambda a: a["dense_features"].__setitem__((7, 2), np.inf),
     r"dense_features\[7, 2\] = inf must be finite"),
    (lambda a: a["feature_values"].__setitem__(5, np.nan),
     r"feature_values\[5\] = nan must be finite"),
    (lambda a: a["example_labels"].__setitem__(3, 2.0),
     r"example_labels\[3\] = 2 must be 0 or 1 for logistic_loss"),
    (lambda a: a["example_weights"].__setitem__(4, -0.5),
     r"example_weights\[4\] = -0.5 must be finite and >= 0"),
    (lambda a: a["row_ptr"].__setitem__(10, 0),
     r"row_ptr\[10\] = 0 is smaller than the entry before it"),
    (lambda a: a.update(example_labels=np.zeros(39, np.float32)),
     r"example_labels has 39 entries but example_weights has 40"),
])
@pytest.mark.parametrize("traced", [False, True])
def test_bad_data_is_named_when_packing(change, message, traced):
  problem = make_problem("logistic_loss", n=40)
  data = {k: v.copy() for k, v in _data(problem).items()}
  change(data)
  run = lambda: pack_rows(**data, num_sparse_features=25,
                          loss_type="logistic_loss")
  if traced:
    run = tf.function(run)
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    run()


@pytest.mark.parametrize("call,message", [
    (dict(weights=np.zeros(27)),
     r"weights has 27 entries; the packed rows need 28 \(25 sparse \+ 3 "
     r"dense\)"),
    (dict(weights=np.r_[np.zeros(27), np.nan]),
     r"weights\[27\] = nan must be finite"),
    (dict(duals=np.zeros(41)),
     r"duals has 41 entries but the packed rows are 40"),
    (dict(duals=np.full(40, -3.0)),
     r"duals\[0\] = -3 is not a valid dual of logistic_loss"),
    (dict(loss_type="hinge_loss"),
     r"the rows were packed for logistic_loss \(gamma 1\), not for "
     r"hinge_loss"),
    (dict(gamma=0.5),
     r"packed for logistic_loss \(gamma 1\), not for logistic_loss "
     r"\(gamma 0.5\)"),
])
@pytest.mark.parametrize("traced", [False, True])
def test_bad_call_is_named(call, message, traced):
  problem = make_problem("logistic_loss", n=40)
  rows = pack_rows(**_data(problem), num_sparse_features=25,
                   loss_type="logistic_loss")
  args = dict(weights=np.zeros(28), duals=np.zeros(40), seed=0,
              loss_type="logistic_loss", l1=0.0, l2=1.0)
  args.update(call)
  run = lambda: packed_solve(rows, **args)
  if traced:
    run = tf.function(run)
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    run()


def test_bad_options_raise_value_error():
  problem = make_problem("logistic_loss", n=10)
  rows = pack_rows(**_data(problem), num_sparse_features=25,
                   loss_type="logistic_loss")
  with pytest.raises(ValueError, match="visit_order must be one of"):
    packed_solve(rows, np.zeros(28), np.zeros(10), 0, "logistic_loss", 0.0,
                 1.0, visit_order="adaptive")
  with pytest.raises(ValueError, match="num_sparse_features must be >= 0"):
    pack_rows(**_data(problem), num_sparse_features=-1,
              loss_type="logistic_loss")


def test_in_memory_trainer_packed_and_in_place_agree():
  from tf_sdca.trainer import InMemorySdca
  rng = np.random.default_rng(7)
  n, vocab = 3000, 300
  ids = rng.integers(0, vocab, size=(n, 6))  # unsorted, some repeats
  dense = rng.normal(size=(n, 2)).astype(np.float32)
  z = dense @ [1.0, -0.5] + rng.normal(size=vocab)[ids].sum(1) * 0.3
  y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  runs = []
  for pack in (True, False):
    model = InMemorySdca("logistic_loss", l2=2.0, pack=pack)
    history = model.fit(y, dense=dense, ids=ids, num_features=vocab,
                        epochs=6, verbose=0)
    runs.append((model, history))
  (a, ha), (b, hb) = runs
  # Same visiting order and steps; the in-place path sorts each row's ids
  # (the packed one keeps them as given), so sums differ in rounding only.
  np.testing.assert_allclose(a.sparse_weights, b.sparse_weights, rtol=1e-9,
                             atol=1e-12)
  np.testing.assert_allclose(a.dense_weights, b.dense_weights, rtol=1e-9)
  np.testing.assert_allclose(a.duals, b.duals, rtol=1e-9, atol=1e-12)
  np.testing.assert_allclose(ha["loss"], hb["loss"], rtol=1e-12)
  assert ha["duality_gap"][-1] < ha["duality_gap"][0]


def test_a_handle_of_another_resource_is_refused():
  variable = tf.Variable([1.0])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="rows is not a handle made by TfSdca>PackRows"):
    packed_solve(variable.handle, np.zeros(3), np.zeros(2), 0,
                 "logistic_loss", 0.0, 1.0)

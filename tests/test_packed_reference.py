"""TfSdca>PackRows / TfSdca>PackedSolve, the engine every door solves on: a
cyclic pass equals a float64 reference of SDCA step by step (every loss, L1,
values, weights, CoCoA+; values of 1.0 leading a row, which records do
not store), the duality gap goes to zero, the objective parts
are exact, InMemorySdca's doors (one thread, two threads, mini-batches)
reach one optimum, repeated ids, and every bad input."""
import warnings

import numpy as np
import pytest
import tensorflow as tf

from sdca_testutil import (BINARY, LOSSES, dual_loss, internal_label,
                           make_problem, primal_loss, reference_dual_step,
                           shrink)
from tf_sdca import pack_rows, packed_solve


def _csr(problem):
  n, k = problem["ids"].shape
  return (np.arange(0, n * k + 1, k, dtype=np.int64),
          problem["ids"].ravel().astype(np.int32))


def _solve(row_ptr, feature_ids, feature_values, dense_features,
           example_weights, example_labels, weights, duals, seed, loss_type,
           num_sparse_features=None, gamma=1.0, **kwargs):
  """Packs the rows (a weight table of num_sparse_features sparse ids,
  default: all but the dense columns) and runs one packed_solve."""
  if num_sparse_features is None:
    num_sparse_features = np.shape(weights)[0] - np.shape(dense_features)[1]
  rows = pack_rows(row_ptr, feature_ids, feature_values, dense_features,
                   example_weights, example_labels,
                   num_sparse_features=num_sparse_features,
                   loss_type=loss_type, gamma=gamma)
  return packed_solve(rows, weights, duals, seed, loss_type=loss_type,
                      gamma=gamma, **kwargs)


def _call(problem, w, a, use_values=True, **kwargs):
  row_ptr, ids = _csr(problem)
  values = (problem["values"].ravel() if use_values
            else np.zeros(0, np.float32))
  kwargs.setdefault("l1", 0.0)
  kwargs.setdefault("l2", 1.0)
  return _solve(row_ptr, ids, values, problem["dense"], problem["weights"],
                problem["labels"], w, a, seed=kwargs.pop("seed", 0),
                num_sparse_features=problem["vocab"], **kwargs)


def _reference_pass(problem, loss, w, a, l1, l2, partitions=1,
                    use_values=True):
  """One cyclic SDCA pass in float64, each step by scipy's 1-D search."""
  vocab = problem["vocab"]
  w = w.astype(np.float64).copy()
  w0 = w.copy()
  a = a.astype(np.float64).copy()
  for i in range(len(problem["labels"])):
    x = np.zeros_like(w)
    vals = problem["values"][i] if use_values else np.ones(
        problem["ids"].shape[1])
    np.add.at(x, problem["ids"][i], vals.astype(np.float64))
    x[vocab:] = problem["dense"][i]
    s = float(problem["weights"][i])
    if s <= 0:
      continue
    wx = float(x @ shrink(w, l1, l2))
    q = partitions * s * float(x @ x) / l2
    new = reference_dual_step(loss, float(problem["labels"][i]), a[i], wx, q)
    w += partitions * s * (new - a[i]) / l2 * x
    a[i] = new
  return w0 + (w - w0) / partitions, a


def _objective_parts(problem, loss, w, a, l1, l2, use_values=True):
  vocab = problem["vocab"]
  # The op's l1 and l2 are float attrs.
  ws = shrink(w, float(np.float32(l1)), float(np.float32(l2)))
  vals = problem["values"] if use_values else np.ones(problem["ids"].shape)
  z = (ws[problem["ids"]] * vals).sum(1) + problem["dense"] @ ws[vocab:]
  y = problem["labels"].astype(np.float64)
  s = problem["weights"].astype(np.float64)
  return np.array([s @ primal_loss(loss, z, y), s @ dual_loss(loss, a, y),
                   ws @ ws, np.abs(ws).sum()])


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1,partitions,use_values",
                         [(0.0, 1, True), (0.3, 1, False), (0.1, 2, True)])
def test_cyclic_pass_matches_float64_reference(loss, l1, partitions,
                                               use_values):
  problem = make_problem(loss, n=30, example_weights=np.r_[
      np.ones(25), 0.0, 2.0, 0.5, 1.0, 3.0])
  l2 = 0.7
  m = problem["vocab"] + problem["dense"].shape[1]
  w = np.random.default_rng(1).normal(size=m) * 0.1
  a = np.zeros(30)
  for _ in range(2):  # the second pass starts from non-zero duals
    w_ref, a_ref = _reference_pass(problem, loss, w, a, l1, l2, partitions,
                                   use_values)
    w_out, a_out, parts = _call(problem, w, a, use_values,
                                loss_type=loss, l1=l1, l2=l2,
                                num_loss_partitions=partitions,
                                visit_order="cyclic")
    np.testing.assert_allclose(a_out.numpy(), a_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w_out.numpy(), w_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        parts.numpy(), _objective_parts(problem, loss, w_out.numpy(),
                                        a_out.numpy(), l1, l2, use_values),
        rtol=1e-9, atol=1e-9)
    w, a = w_out.numpy(), a_out.numpy()


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1", [0.0, 0.3])
def test_leading_values_of_one_match_float64_reference(loss, l1):
  # Records keep no value for a row's leading run of 1.0: runs of every
  # length 0-6 of the 6 entries, and ones after a run (stored).
  problem = make_problem(loss, n=28, per_row=6, seed=4)
  for i in range(28):
    problem["values"][i, :i % 7] = 1.0
  problem["values"][::3, 5] = 1.0
  problem["values"][1::4, 3] = 1.0
  l2 = 0.7
  m = problem["vocab"] + problem["dense"].shape[1]
  w = np.random.default_rng(2).normal(size=m) * 0.1
  a = np.zeros(28)
  for _ in range(2):
    w_ref, a_ref = _reference_pass(problem, loss, w, a, l1, l2)
    w_out, a_out, parts = _call(problem, w, a, loss_type=loss, l1=l1, l2=l2,
                                visit_order="cyclic")
    np.testing.assert_allclose(a_out.numpy(), a_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(w_out.numpy(), w_ref, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        parts.numpy(), _objective_parts(problem, loss, w_out.numpy(),
                                        a_out.numpy(), l1, l2),
        rtol=1e-9, atol=1e-9)
    w, a = w_out.numpy(), a_out.numpy()


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("l1", [0.0, 0.2])
def test_duality_gap_goes_to_zero(loss, l1):
  problem = make_problem(loss, n=200, vocab=40, per_row=4, seed=3)
  l2 = 0.5
  m = problem["vocab"] + problem["dense"].shape[1]
  w, a = np.zeros(m), np.zeros(200)
  # Smooth losses converge linearly, hinge and absolute deviation (not
  # smooth) sublinearly.
  limit = 1e-6 if loss in ("hinge_loss", "absolute_loss") else 1e-10
  row_ptr, ids = _csr(problem)
  rows = pack_rows(row_ptr, ids, problem["values"].ravel(), problem["dense"],
                   problem["weights"], problem["labels"],
                   num_sparse_features=problem["vocab"], loss_type=loss)
  gaps = []
  for epoch in range(3000):
    w, a, parts = packed_solve(rows, w, a, seed=epoch, loss_type=loss, l1=l1,
                               l2=l2)
    p = parts.numpy()
    l1f, l2f = float(np.float32(l1)), float(np.float32(l2))  # float attrs
    primal = p[0] + 0.5 * l2f * p[2] + l1f * p[3]
    gaps.append((p[0] + p[1] + l2f * p[2] + l1f * p[3]) / primal)
    if gaps[-1] < limit:
      break
  assert min(gaps) >= -1e-12  # weak duality
  assert gaps[-1] < limit, (loss, gaps[::20])


def test_one_thread_two_threads_and_mini_batches_reach_one_optimum():
  from tf_sdca.trainer import InMemorySdca
  rng = np.random.default_rng(5)
  n, k, vocab = 8192, 5, 500  # 2 threads need >= 2 * 4096 rows
  ids = np.stack([rng.choice(vocab, k, replace=False) for _ in range(n)])
  dense = rng.normal(size=(n, 3)).astype(np.float32)
  z = dense @ [1.0, -1.0, 0.5] + rng.normal(size=vocab)[ids].sum(1)
  y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  optima = []
  # Packed rows with one thread, two lock-free threads and the adaptive
  # order; mini-batches through TfSdca>Optimizer.
  for batch_size, threads, order in [(None, 0, "permutation"),
                                     (None, 2, "permutation"),
                                     (None, 2, "adaptive"),
                                     (1500, 0, "permutation")]:
    model = InMemorySdca("logistic_loss", l2=5.0, num_threads=threads,
                         visit_order=order)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      # 1,000 epochs at most: two real threads on a busy 2-core machine
      # sometimes needed more than 300 to reach 1e-9 (~3e-9 left).
      history = model.fit(y, dense=dense, ids=ids, num_features=vocab,
                          epochs=1000, batch_size=batch_size, tol=1e-9,
                          verbose=0)
    said = [str(w.message) for w in caught]
    assert not any("one thread" in m for m in said), said
    assert history["duality_gap"][-1] < 1e-9
    optima.append(history["loss"][-1])
  np.testing.assert_allclose(optima, optima[0], rtol=1e-8)


def test_repeated_ids_in_a_row_mean_their_sum():
  loss = "squared_loss"
  problem = make_problem(loss, n=20, per_row=3, seed=2)
  problem["ids"][:, 1] = problem["ids"][:, 0]  # every row repeats an id
  merged = dict(problem)
  merged["values"] = problem["values"].copy()
  merged["values"][:, 0] += merged["values"][:, 1]
  merged["values"][:, 1] = 0.0
  m = problem["vocab"] + 3
  w, a = np.zeros(m), np.zeros(20)
  one = _call(problem, w, a, loss_type=loss, visit_order="cyclic")
  two = _call(merged, w, a, loss_type=loss, visit_order="cyclic")
  # rtol 1e-6: the merged values were summed in float32, the op sums in
  # float64.
  np.testing.assert_allclose(one[0].numpy(), two[0].numpy(), rtol=1e-6)
  np.testing.assert_allclose(one[1].numpy(), two[1].numpy(), rtol=1e-6)


def test_long_unsorted_rows_with_and_without_a_repeat_match_reference():
  # 64 shuffled ids a row (the most packing checks for repeats without
  # sorting), every other row repeating one of them far from its first
  # place: the check hashes each row's ids to bits, and the ~12% of
  # distinct rows whose 64 ids share a bit compare every pair, so both
  # outcomes of that comparison are taken.
  loss, n = "squared_loss", 40
  # (Ids out of 2^16: small consecutive ids spread over the bits too evenly
  # to share one; here 3 of the 20 distinct rows do.)
  problem = make_problem(loss, n=n, vocab=1 << 16, per_row=64, seed=5)
  rng = np.random.default_rng(6)
  for i in range(0, n, 2):
    first, again = sorted(rng.choice(64, 2, replace=False))
    problem["ids"][i, again] = problem["ids"][i, first]
  m = problem["vocab"] + problem["dense"].shape[1]
  w, a = np.zeros(m), np.zeros(n)
  w_ref, a_ref = _reference_pass(problem, loss, w, a, 0.0, 1.0)
  w_out, a_out, _ = _call(problem, w, a, loss_type=loss,
                          visit_order="cyclic")
  np.testing.assert_allclose(a_out.numpy(), a_ref, rtol=1e-6, atol=1e-7)
  np.testing.assert_allclose(w_out.numpy(), w_ref, rtol=1e-6, atol=1e-7)


def test_only_objective_and_no_objective():
  problem = make_problem("logistic_loss", n=30)
  m = problem["vocab"] + 3
  w = np.random.default_rng(0).normal(size=m)
  a = np.full(30, 0.3) * (2 * problem["labels"] - 1)
  w_out, a_out, parts = _call(problem, w, a, loss_type="logistic_loss",
                              num_passes=0)
  np.testing.assert_array_equal(w_out.numpy(), w)
  np.testing.assert_array_equal(a_out.numpy(), a)
  np.testing.assert_allclose(
      parts.numpy(), _objective_parts(problem, "logistic_loss", w, a, 0, 1),
      rtol=1e-12)
  _, _, none = _call(problem, w, a, loss_type="logistic_loss",
                     compute_objective=False)
  assert np.isnan(none.numpy()).all()


def _bad(problem, **override):
  n, k = problem["ids"].shape
  args = dict(row_ptr=np.arange(0, n * k + 1, k, dtype=np.int64),
              feature_ids=problem["ids"].ravel().astype(np.int32),
              feature_values=problem["values"].ravel(),
              dense_features=problem["dense"],
              example_weights=problem["weights"],
              example_labels=problem["labels"],
              weights=np.zeros(problem["vocab"] + 3), duals=np.zeros(n),
              seed=0)
  args.update(override)
  return args


@pytest.mark.parametrize("change,message", [
    (lambda p, a: a.update(feature_ids=np.r_[a["feature_ids"][:-1], 25]
                           .astype(np.int32)),
     r"feature_ids\[119\] = 25 is outside \[0, 25\)"),
    (lambda p, a: a.update(feature_ids=np.r_[-1, a["feature_ids"][1:]]
                           .astype(np.int32)),
     r"feature_ids\[0\] = -1 is outside"),
    (lambda p, a: a["dense_features"].__setitem__((7, 2), np.nan),
     r"dense_features\[7, 2\] = nan must be finite"),
    (lambda p, a: a["feature_values"].__setitem__(5, np.inf),
     r"feature_values\[5\] = inf must be finite"),
    (lambda p, a: a["example_labels"].__setitem__(3, 0.5),
     r"example_labels\[3\] = 0.5 must be 0 or 1 for logistic_loss"),
    (lambda p, a: a["example_weights"].__setitem__(4, -1.0),
     r"example_weights\[4\] = -1 must be finite and >= 0"),
    (lambda p, a: a["duals"].__setitem__(2, 7.0),
     r"duals\[2\] = 7 is not a valid dual of logistic_loss"),
    (lambda p, a: a["weights"].__setitem__(1, np.nan),
     r"weights\[1\] = nan must be finite"),
    (lambda p, a: a["row_ptr"].__setitem__(10, 0),
     r"row_ptr\[10\] = 0 is smaller than the entry before it"),
    (lambda p, a: a.update(row_ptr=a["row_ptr"][:-1]),
     r"row_ptr has 40 entries; it must have 41"),
    (lambda p, a: a.update(duals=np.zeros(39)),
     r"duals has 39 entries but the packed rows are 40"),
    (lambda p, a: a.update(feature_values=np.ones(7, np.float32)),
     r"feature_values has 7 entries; it must have 120"),
    (lambda p, a: a.update(dense_features=np.ones(40, np.float32)),
     r"dense_features must have rank 2"),
    (lambda p, a: a.update(weights=np.zeros(2)),
     r"weights has 2 entries; the packed rows need 28 \(25 sparse \+ 3 "
     r"dense\)"),
])
@pytest.mark.parametrize("traced", [False, True])
def test_bad_inputs_name_the_argument_and_value(change, message, traced):
  problem = make_problem("logistic_loss", n=40)
  args = _bad(problem)
  args = {k: (v.copy() if isinstance(v, np.ndarray) else v)
          for k, v in args.items()}
  change(problem, args)
  run = lambda: _solve(**args, num_sparse_features=problem["vocab"],
                       loss_type="logistic_loss", l1=0.0, l2=1.0)
  if traced:
    run = tf.function(run)
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match=message):
    run()


def test_binary_losses_are_all_covered():
  assert set(BINARY) <= set(LOSSES)

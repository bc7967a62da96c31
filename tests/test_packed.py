"""TfSdca>PackRows / TfSdca>PackedSolve: the mini-batch op solves a batch as
PackedSolve solves it packed (every loss, L1, values, example weights,
CoCoA+; its duals rounded to float32), the adaptive order converges, the
packed rows are a copy, bad inputs are named when packing and per call,
InMemorySdca(pack=False) packs anyway."""
import gc
import warnings

import numpy as np
import pytest
import tensorflow as tf

from sdca_testutil import LOSSES, make_problem
from tf_sdca import pack_rows, packed_solve, sdca_optimizer


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
@pytest.mark.parametrize("l1,partitions,use_values", [
    (0.0, 1, True), (0.3, 1, False), (0.1, 2, True)])
def test_the_mini_batch_op_solves_a_batch_as_packed_solve(loss, l1, partitions,
                                                          use_values):
  # Row order ('cyclic'): the op mixes its seed with the input duals, so
  # only that order is the same in both. Three passes from non-zero weights.
  n = 50
  problem = make_problem(loss, n=n, example_weights=np.r_[
      np.ones(45), 0.0, 2.0, 0.5, 1.0, 3.0])
  data = _data(problem, use_values)
  vocab = problem["vocab"]
  w = (np.random.default_rng(1).normal(size=vocab + 3) * 0.1).astype(
      np.float32).astype(np.float64)  # exact in the op's float32 inputs
  options = dict(loss_type=loss, l1=l1, l2=0.7,
                 num_loss_partitions=partitions)
  rows = pack_rows(**data, num_sparse_features=vocab, loss_type=loss)
  w_p, a_p, o_p = packed_solve(rows, w, np.zeros(n), seed=0, num_passes=3,
                               visit_order="cyclic", **options)
  state, (d_sparse,), (d_dense,) = sdca_optimizer(
      [np.repeat(np.arange(n), problem["ids"].shape[1])],
      [problem["ids"].ravel()],
      [problem["values"].ravel()] if use_values else [],
      [problem["dense"]], problem["weights"], problem["labels"],
      [np.arange(vocab)], [w[:vocab].astype(np.float32)],
      [w[vocab:].astype(np.float32)], np.zeros((n, 4), np.float32),
      num_inner_iterations=3, visit_order="cyclic", **options)
  state = state.numpy()
  delta = np.r_[d_sparse.numpy(), d_dense.numpy()].astype(np.float64)
  # The same steps, but the op's duals are rounded to float32 after each
  # (6e-8 relative) and move later steps by about as much.
  np.testing.assert_allclose(state[:, 0], a_p.numpy(), rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(w + delta, w_p.numpy(), rtol=1e-5, atol=1e-6)
  # The op's weights are w(alpha) of the float32 duals it returns, to the
  # float32 rounding of the deltas: sum_i s_i (alpha_i - 0) x_i / l2.
  x = np.zeros((n, vocab + 3))
  values = (problem["values"] if use_values
            else np.ones(problem["ids"].shape, np.float32))
  for i in range(n):
    np.add.at(x[i], problem["ids"][i], values[i].astype(np.float64))
  x[:, vocab:] = problem["dense"]
  s = problem["weights"].astype(np.float64)
  from_duals = x.T @ (s * state[:, 0].astype(np.float64)) / np.float32(0.7)
  np.testing.assert_allclose(delta, from_duals, rtol=1e-6,
                             atol=1e-7 * np.abs(from_duals).max())
  # Column 2: s_i phi_i*(-alpha_i), which sums to the objective's dual
  # part; rows with s_i = 0 keep their dual and report zero losses.
  np.testing.assert_allclose(state[:, 2].astype(np.float64).sum(),
                             o_p.numpy()[1], rtol=1e-5, atol=1e-5)
  assert state[45, 0] == 0.0 and state[45, 1] == 0.0 and state[45, 2] == 0.0
  np.testing.assert_array_equal(state[:, 3], problem["weights"])
  assert np.abs(state[:, 0]).sum() > 0  # it moved


@pytest.mark.parametrize("loss", ["logistic_loss", "squared_loss",
                                  "smooth_hinge_loss"])
@pytest.mark.parametrize("threads", [1, 2])
def test_adaptive_order_converges_to_the_permutation_optimum(loss, threads):
  problem = make_problem(loss, n=300, vocab=40, per_row=4, seed=3)
  data = _data(problem)
  primal, epochs = {}, {}
  for order in ("permutation", "uniform", "adaptive"):
    rows = pack_rows(**data, num_sparse_features=problem["vocab"],
                     loss_type=loss, num_threads=threads)
    w, a = np.zeros(problem["vocab"] + 3), np.zeros(300)
    gaps = []
    for epoch in range(1000):
      w, a, parts = packed_solve(rows, w, a, seed=epoch, loss_type=loss,
                                 l1=0.05, l2=0.5, visit_order=order)
      p = parts.numpy()
      value = p[0] + 0.25 * p[2] + 0.05 * p[3]
      gaps.append((p[0] + p[1] + 0.5 * p[2] + 0.05 * p[3]) / value)
      if gaps[-1] < 1e-10:
        break
    assert min(gaps) >= -1e-12  # weak duality
    assert gaps[-1] < 1e-10, (order, gaps[::20])
    primal[order], epochs[order] = value, len(gaps)
  assert primal["adaptive"] == pytest.approx(primal["permutation"],
                                             rel=1e-9)
  if threads == 1:
    # Measured: 38 / 127 / 99 epochs against uniform draws' 53 / 182 / 159
    # (logistic / squared / smooth hinge). Two threads draw within their
    # own 150-row blocks, where adaptive and uniform draws need about as
    # many epochs (101-470).
    assert epochs["adaptive"] < epochs["uniform"], epochs


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
  expected = packed_solve(
      pack_rows(**data, num_sparse_features=problem["vocab"],
                loss_type="squared_loss"),
      np.zeros(m), np.zeros(40), seed=4, loss_type="squared_loss", l1=0.0,
      l2=1.0)
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


@pytest.mark.parametrize("position,field,value,message", [
    (2500, "feature_ids", 25, r"feature_ids\[2500\] = 25 is outside "),
    (1030, "feature_ids", -3, r"feature_ids\[1030\] = -3 is outside "),
    (0, "feature_ids", 2**31 - 1,
     r"feature_ids\[0\] = 2147483647 is outside "),
    (2049, "feature_values", np.nan, r"feature_values\[2049\] = nan must"),
    (-1, "feature_values", -np.inf, r"feature_values\[2999\] = -inf must"),
])
def test_the_first_bad_entry_of_many_is_named(position, field, value,
                                              message):
  # 3,000 sparse entries (a bad one in the first, a later or the last
  # block of the blocks checked at a time, or in the tail): the error
  # names it, and with two bad ids the first.
  problem = make_problem("logistic_loss", n=1000)
  data = {k: v.copy() for k, v in _data(problem).items()}
  assert data["feature_ids"].size == 3000
  data[field][position] = value
  if field == "feature_ids":
    data[field][2990] = 30  # a later bad id is not the one named
  with pytest.raises(tf.errors.InvalidArgumentError, match=message):
    pack_rows(**data, num_sparse_features=25, loss_type="logistic_loss")


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
                 1.0, visit_order="sideways")
  with pytest.raises(ValueError, match="num_sparse_features must be >= 0"):
    pack_rows(**_data(problem), num_sparse_features=-1,
              loss_type="logistic_loss")


def test_in_memory_trainer_pack_false_is_deprecated_and_packs():
  from tf_sdca.trainer import InMemorySdca
  rng = np.random.default_rng(7)
  n, vocab = 3000, 300
  ids = rng.integers(0, vocab, size=(n, 6))  # unsorted, some repeats
  dense = rng.normal(size=(n, 2)).astype(np.float32)
  z = dense @ [1.0, -0.5] + rng.normal(size=vocab)[ids].sum(1) * 0.3
  y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  runs = []
  for pack in (True, False):
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      model = InMemorySdca("logistic_loss", l2=2.0, pack=pack)
    said = [w for w in caught if issubclass(w.category, DeprecationWarning)]
    assert len(said) == (0 if pack else 1), [str(w.message) for w in caught]
    if not pack:
      assert "pack=False" in str(said[0].message)
    history = model.fit(y, dense=dense, ids=ids, num_features=vocab,
                        epochs=6, verbose=0)
    runs.append((model, history))
  (a, ha), (b, hb) = runs
  # One engine: the same packed rows, the same steps, bit for bit.
  np.testing.assert_array_equal(a.sparse_weights, b.sparse_weights)
  np.testing.assert_array_equal(a.dense_weights, b.dense_weights)
  np.testing.assert_array_equal(a.duals, b.duals)
  np.testing.assert_array_equal(ha["loss"], hb["loss"])
  assert ha["duality_gap"][-1] < ha["duality_gap"][0]


@pytest.mark.parametrize("traced", [False, True])
def test_sparse_norms_add_each_rows_squared_entries_in_order(traced):
  # Row 0 repeats id 1 (each entry counts: 2^2 + 3^2, where the record's
  # |x_0|^2 is (2 + 3)^2), row 2 is empty, the dense part is not counted;
  # without values each entry is 1; without a sparse part every sum is 0.
  data = dict(row_ptr=np.array([0, 2, 3, 3], np.int64),
              feature_ids=np.array([1, 1, 0], np.int32),
              feature_values=np.array([2.0, 3.0, 0.5], np.float32),
              dense_features=np.ones((3, 2), np.float32),
              example_weights=np.ones(3, np.float32),
              example_labels=np.ones(3, np.float32))
  pack = lambda rows, **changes: pack_rows(
      **{**data, **changes}, num_sparse_features=2, loss_type="hinge_loss",
      norm_rows=rows)[1]
  if traced:
    pack = tf.function(pack)
  rows = np.array([2, 0, 1, 0], np.int64)
  np.testing.assert_array_equal(pack(rows), [0.0, 13.0, 0.25, 13.0])
  np.testing.assert_array_equal(
      pack(rows, feature_values=np.zeros(0, np.float32)), [0, 2, 1, 2])
  np.testing.assert_array_equal(
      pack(rows, row_ptr=np.zeros(0, np.int64),
           feature_ids=np.zeros(0, np.int32),
           feature_values=np.zeros(0, np.float32)), [0, 0, 0, 0])
  assert pack(np.zeros(0, np.int64)).shape == (0,)
  for bad in (3, -1):
    with pytest.raises(tf.errors.InvalidArgumentError,
                       match=rf"norm_rows\[1\] = {bad} is outside \[0, 3\)"):
      pack(np.array([0, bad], np.int64))
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="norm_rows"):
    pack(np.zeros((1, 1), np.int64))


def test_a_handle_of_another_resource_is_refused():
  variable = tf.Variable([1.0])
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="rows is not a handle made by TfSdca>PackRows"):
    packed_solve(variable.handle, np.zeros(3), np.zeros(2), 0,
                 "logistic_loss", 0.0, 1.0)


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("order,parts", [("permutation", 3), ("cyclic", 4),
                                         ("permutation", 50), ("uniform", 3)])
def test_parts_of_a_pass_chained_are_the_pass(loss, order, parts):
  # num_parts calls with one seed, each from the last one's weights and
  # duals, make the steps of one pass in the same order: the same bits.
  n = 50
  problem = make_problem(loss, n=n)
  rows = pack_rows(**_data(problem), num_sparse_features=problem["vocab"],
                   loss_type=loss)
  w0 = np.random.default_rng(2).normal(size=problem["vocab"] + 3) * 0.1
  options = dict(seed=7, loss_type=loss, l1=0.1, l2=0.7, visit_order=order,
                 compute_objective=False)
  w_full, a_full, _ = packed_solve(rows, w0, np.zeros(n), **options)
  w, a = w0, np.zeros(n)
  visited = []
  for part in range(parts):
    before = a.copy()
    w, a, _ = packed_solve(rows, w, a, num_parts=parts, part=part, **options)
    w, a = w.numpy(), a.numpy()
    visited.append(np.flatnonzero(a != before))
  np.testing.assert_array_equal(w, w_full.numpy())
  np.testing.assert_array_equal(a, a_full.numpy())
  if order == "uniform":  # the pass's n draws, with replacement
    return
  # Each part moved only its own rows, at most ceil(n / parts) of them,
  # and no row in two parts.
  assert max(len(v) for v in visited) <= -(-n // parts)
  together = np.concatenate(visited)
  assert len(np.unique(together)) == len(together) > 0.8 * n


def test_parts_of_a_multiclass_pass_chained_are_the_pass():
  rng = np.random.default_rng(3)
  n, k, classes = 60, 4, 5
  ids = rng.integers(0, 20, size=(n, k))
  data = dict(row_ptr=np.arange(0, n * k + 1, k, dtype=np.int64),
              feature_ids=ids.ravel().astype(np.int32),
              feature_values=np.zeros(0, np.float32),
              dense_features=rng.normal(size=(n, 2)).astype(np.float32),
              example_weights=np.ones(n, np.float32),
              example_labels=rng.integers(0, classes, n).astype(np.float32))
  for loss in ("softmax_loss", "multiclass_hinge_loss"):
    rows = pack_rows(**data, num_sparse_features=20, loss_type=loss,
                     num_classes=classes)
    options = dict(seed=5, loss_type=loss, l1=0.0, l2=0.5,
                   num_classes=classes, compute_objective=False)
    w_full, a_full, _ = packed_solve(rows, np.zeros(22 * classes),
                                     np.zeros(n * classes), **options)
    w, a = np.zeros(22 * classes), np.zeros(n * classes)
    for part in range(3):
      w, a, _ = packed_solve(rows, w, a, num_parts=3, part=part, **options)
    np.testing.assert_array_equal(w.numpy(), w_full.numpy())
    np.testing.assert_array_equal(a.numpy(), a_full.numpy())


def test_parts_are_refused_where_a_pass_is_no_order_cut_up():
  problem = make_problem("hinge_loss", n=40)
  data = _data(problem)
  rows = pack_rows(**data, num_sparse_features=25, loss_type="hinge_loss")
  call = dict(weights=np.zeros(28), duals=np.zeros(40), seed=0,
              loss_type="hinge_loss", l1=0.0, l2=1.0)
  with pytest.raises(ValueError, match="need 0 <= part < num_parts"):
    packed_solve(rows, **call, num_parts=2, part=2)
  for order in ("adaptive", "shrinking"):
    with pytest.raises(ValueError, match="must be 'permutation', 'cyclic' "
                                         "or 'uniform', not '" + order):
      packed_solve(rows, **call, num_parts=2, visit_order=order)
  from tf_sdca.ops._loader import load_ops  # pylint: disable=import-outside-toplevel
  raw = load_ops().tf_sdca_packed_solve
  attrs = dict(loss_type="hinge_loss", l1=0.0, l2=1.0)
  state = (tf.zeros(28, tf.float64), tf.zeros(40, tf.float64),
           tf.constant(0, tf.int64))
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="part = 3 is not below num_parts = 2"):
    raw(rows, *state, num_parts=2, part=3, **attrs)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="the 'adaptive' and 'shrinking' orders have none"):
    raw(rows, *state, num_parts=2, visit_order="shrinking", **attrs)
  threaded = pack_rows(**data, num_sparse_features=25,
                       loss_type="hinge_loss", num_threads=2)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="num_parts = 2 needs rows packed for one thread, "
                           "not 2"):
    raw(threaded, *state, num_parts=2, **attrs)


@pytest.mark.parametrize("num_classes", [None, 3])
def test_a_table_past_the_weight_prefetch_size_trains_the_same_bits(
    num_classes):
  # One-thread passes prefetch a row's weights only for tables of at least
  # 4 MiB (PackedRows::PrefetchWeights); the same rows in a table of 2^19
  # slots (4 MiB binary) and in one of 2^12 must give the same bits: the
  # unused slots stay 0 and add +0 to the norms. Binary hinge and
  # Crammer-Singer, the shrinking order, 4 epochs.
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(3)
  n, per_row = 300, 12
  ids = np.stack([rng.choice(1 << 12, per_row, replace=False)
                  for _ in range(n)]).astype(np.int64)
  values = rng.uniform(0.1, 1.0, (n, per_row)).astype(np.float32)
  labels = (rng.integers(0, 3, n) if num_classes else
            rng.integers(0, 2, n)).astype(np.float32)
  indptr = np.arange(0, n * per_row + 1, per_row, dtype=np.int64)
  results = []
  for num_features in (1 << 12, 1 << 19):
    model = InMemorySdca(
        loss="multiclass_hinge" if num_classes else "hinge", l2=0.5,
        num_classes=num_classes)
    history = model.fit(labels, indptr=indptr, indices=ids.ravel(),
                        values=values.ravel(), num_features=num_features,
                        epochs=4, verbose=0)
    assert history["duality_gap"][-1] < 0.5
    results.append((np.asarray(model.sparse_weights), model.duals,
                    history["loss"], history["duality_gap"]))
  (w_small, a_small, l_small, g_small), (w_big, a_big, l_big, g_big) = results
  np.testing.assert_array_equal(w_big[:1 << 12], w_small)
  assert not np.any(w_big[1 << 12:])
  np.testing.assert_array_equal(a_big, a_small)
  assert l_big == l_small and g_big == g_small

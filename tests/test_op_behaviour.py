"""Behaviour of `tf_sdca.sdca_optimizer` beyond one coordinate step: visit
orders, determinism, sharded solving, example weights, repeated and large
ids, inner iterations, the empty batch; and the two helper ops.

Optima are compared through the duality gap: P is l2-strongly convex, so
weights w and w' whose absolute gaps are G and G' satisfy
|w - w'| <= sqrt(2 G / l2) + sqrt(2 G' / l2) (`_weight_tolerance`).
"""
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import tf_sdca
from sdca_testutil import (Model, batch_args, make_problem, one_example_args, run_ours,
                           select_rows)

VISIT_ORDERS = ("permutation", "uniform", "cyclic", "adaptive")


def _converge(model, tol, max_calls=500):
    """Full-batch calls until the relative duality gap is below `tol`."""
    for _ in range(max_calls):
        model.full_batch()
        if model.relative_gap() < tol:
            return model
    raise AssertionError(f"gap {model.relative_gap():.2e} after {max_calls} "
                         f"calls")


def _weight_tolerance(*models):
    """Bound on the distance of each model's shrunk weights from the
    optimum, summed: sqrt(2 (P - D) / l2) each, plus float32 rounding."""
    return sum(np.sqrt(2.0 * max(m.primal() - m.dual(), 0.0) / m.l2)
               for m in models) + 1e-6


def _assert_same_optimum(a, b):
    tol = _weight_tolerance(a, b)
    for wa, wb in zip(a.shrunk(), b.shrunk()):
        np.testing.assert_allclose(wa, wb, atol=tol)
    # Both primal values are within their gaps of P*.
    assert abs(a.primal() - b.primal()) <= (
        (a.primal() - a.dual()) + (b.primal() - b.dual()) + 1e-9 * a.primal())


# --------------------------------------------------------------------------
# (a) visit orders
# --------------------------------------------------------------------------

# The hinge loss is not smooth and its float32 duals stall the gap near
# 1e-8 relative: 1e-7 there (weights then agree to ~3e-3), 1e-10 for the
# logistic loss (~1e-4).
@pytest.mark.parametrize("loss,tol", [("logistic_loss", 1e-10),
                                      ("hinge_loss", 1e-7)])
@pytest.mark.parametrize("order", VISIT_ORDERS)
def test_every_visit_order_reaches_the_same_optimum(order, loss, tol):
    problem = make_problem(loss, n=60, seed=1)
    reference = _converge(Model(problem, loss, l1=0.05, l2=1.0,
                                num_inner_iterations=5,
                                visit_order="cyclic"), tol=tol)
    model = _converge(Model(problem, loss, l1=0.05, l2=1.0,
                            num_inner_iterations=5, visit_order=order,
                            seed=3), tol=tol)
    _assert_same_optimum(model, reference)


# --------------------------------------------------------------------------
# (b) determinism
# --------------------------------------------------------------------------

def _big_problem(seed=2, n=4096):
    """A batch large enough for two shards (>= 1024 examples each)."""
    return make_problem("logistic_loss", n=n, dense_dim=2, vocab=2000,
                        per_row=5, seed=seed)


@pytest.mark.parametrize("order", ["permutation", "uniform", "adaptive"])
@pytest.mark.parametrize("n,threads", [(60, 1), (4096, 2)])
def test_same_seed_and_threads_are_bit_identical_other_seed_differs(
        n, threads, order):
    problem = _big_problem(n=n)

    def run(seed):
        model = Model(problem, "logistic_loss", l2=1.0, seed=seed,
                      num_threads=threads, visit_order=order)
        states = [model.full_batch().copy() for _ in range(2)]
        return states, model.w_sparse.copy(), model.w_dense.copy()

    first, again, other = run(5), run(5), run(6)
    for x, y in zip(first[0], again[0]):
        np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(first[1], again[1])
    np.testing.assert_array_equal(first[2], again[2])
    # Another seed visits in another order: other intermediate duals.
    assert np.abs(first[0][0][:, 0] - other[0][0][:, 0]).max() > 1e-4


# --------------------------------------------------------------------------
# (c) threads read the batch; the solve is one sequential pass
# --------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [2, 4])
def test_threads_read_the_batch_and_solve_like_one_thread(threads):
    # The 32-row shard merge is gone (slower than one thread everywhere it
    # was measured): num_threads only sizes the pool that reads the batch
    # and computes the rows' losses after the passes (in 4,096-row pieces
    # at the least: 10,000 rows are two or more), so the result is the
    # one-thread solve, bit for bit, the state's losses included.
    problem = _big_problem(n=10000)
    one = Model(problem, "logistic_loss", l2=1.0, num_threads=1,
                num_inner_iterations=3)
    many = Model(problem, "logistic_loss", l2=1.0, num_threads=threads,
                 num_inner_iterations=3)
    np.testing.assert_array_equal(one.full_batch(), many.full_batch())
    np.testing.assert_array_equal(one.w_sparse, many.w_sparse)
    np.testing.assert_array_equal(one.w_dense, many.w_dense)


# --------------------------------------------------------------------------
# (d) example weights
# --------------------------------------------------------------------------

def test_weight_zero_leaves_the_dual_and_the_weights_untouched():
    args = one_example_args([0.5, -1.0], [3, 8], [1.0, 2.0], label=1.0,
                            weight=0.0, dual=0.3, w_sparse=[0.2, -0.1],
                            w_dense=[0.4, 0.1])
    state, d_sparse, d_dense = run_ours(args, "logistic_loss", l1=0.0,
                                        l2=1.0, num_inner_iterations=3)
    np.testing.assert_array_equal(state, [[np.float32(0.3), 0.0, 0.0, 0.0]])
    np.testing.assert_array_equal(d_sparse[0], [0.0, 0.0])
    np.testing.assert_array_equal(d_dense[0], [0.0, 0.0])


def test_weight_two_is_the_example_duplicated():
    loss = "squared_loss"
    weights = np.ones(30, np.float32)
    weights[0], weights[1] = 0.0, 2.0
    problem = make_problem(loss, n=30, seed=4, example_weights=weights)
    weighted = Model(problem, loss, l2=1.0, num_inner_iterations=5)
    weighted.state[0, 0] = 0.7  # an ignored example keeps any dual
    _converge(weighted, tol=1e-12)
    assert weighted.state[0, 0] == np.float32(0.7)
    # The same data without row 0 and with row 1 twice, all weights 1.
    duplicated = select_rows(problem, np.r_[1, 1:30])
    duplicated["weights"] = np.ones(30, np.float32)
    twice = _converge(Model(duplicated, loss, l2=1.0,
                            num_inner_iterations=5), tol=1e-12)
    _assert_same_optimum(weighted, twice)
    # The optimal dual is -phi'(w.x): the same for the weighted row and for
    # both copies (1e-5: the gap bounds the duals like the weights).
    np.testing.assert_allclose(twice.state[:2, 0], weighted.state[1, 0],
                               atol=1e-5)


# --------------------------------------------------------------------------
# (e), (f) sparse ids
# --------------------------------------------------------------------------

def _sparse_call(example_indices, ids, values, weight_ids, w, **kwargs):
    """Two examples (labels 1, 0), one sparse group, no dense features."""
    return run_ours(dict(
        sparse_example_indices=[np.asarray(example_indices, np.int64)],
        sparse_feature_indices=[np.asarray(ids, np.int64)],
        sparse_feature_values=[np.asarray(values, np.float32)],
        dense_features=[], example_weights=np.array([1.5, 0.5], np.float32),
        example_labels=np.array([1.0, 0.0], np.float32),
        sparse_indices=[np.asarray(weight_ids, np.int64)],
        sparse_weights=[np.asarray(w, np.float32)], dense_weights=[],
        example_state_data=np.array([[0.2, 0, 0, 0], [-0.1, 0, 0, 0]],
                                    np.float32)),
        "logistic_loss", l1=0.0, l2=0.8, visit_order="cyclic", **kwargs)


def test_an_id_repeated_inside_an_example_is_summed():
    repeated = _sparse_call([0, 0, 1], [5, 5, 9], [1.0, 2.0, 1.0], [5, 9],
                            [0.3, -0.2])
    merged = _sparse_call([0, 1], [5, 9], [3.0, 1.0], [5, 9], [0.3, -0.2])
    # x_0 = 3 e_5 either way; 1 + 2 = 3 is exact in float32, so the two
    # calls see the same numbers (1e-7: summation order only).
    np.testing.assert_allclose(repeated[0], merged[0], rtol=1e-7)
    np.testing.assert_allclose(repeated[1][0], merged[1][0], rtol=1e-7)
    # And it is not [5] with value 1 or 2 (the repeat is not dropped).
    for value in (1.0, 2.0):
        single = _sparse_call([0, 1], [5, 9], [value, 1.0], [5, 9],
                              [0.3, -0.2])
        assert abs(single[0][0, 0] - merged[0][0, 0]) > 1e-3


def _batch_of_rows(rows, n, vocab, values=None):
    """One sparse group whose entries are `rows` (a list of id lists per
    example, in order), random labels and weights, no dense features."""
    rng = np.random.default_rng(11)
    ex = np.repeat(np.arange(n), [len(r) for r in rows])
    ids = np.concatenate([np.asarray(r, np.int64) for r in rows])
    uniq = np.unique(ids)
    return dict(
        sparse_example_indices=[ex.astype(np.int64)],
        sparse_feature_indices=[ids],
        sparse_feature_values=[] if values is None else [values],
        dense_features=[],
        example_weights=rng.uniform(0.5, 2, n).astype(np.float32),
        example_labels=(rng.random(n) < 0.3).astype(np.float32),
        sparse_indices=[uniq],
        sparse_weights=[rng.normal(0, 0.1, uniq.size).astype(np.float32)],
        dense_weights=[],
        example_state_data=np.zeros((n, 4), np.float32))


def test_a_large_sorted_batch_equals_its_merged_form():
    """Over 2 x 65,536 entries sorted by example (the op maps them to slots
    in two chunks): empty rows (first, last, within) and repeats (one in
    the row across the middle of the entries) must give what the same rows
    give with the repeats summed beforehand, bit for bit."""
    rng = np.random.default_rng(5)
    n, vocab = 12_000, 3_000
    rows = [sorted(rng.choice(vocab, rng.integers(0, 30), replace=False))
            for _ in range(n)]
    for i in (0, 1, 500, n - 2, n - 1):
        rows[i] = []
    middle = np.searchsorted(np.cumsum([len(r) for r in rows]),
                             sum(len(r) for r in rows) // 2, side="right")
    for i in list(rng.choice(n, 300, replace=False)) + [middle]:
        if rows[i]:
            rows[i] = sorted(rows[i] + [rows[i][0], rows[i][-1]])
    assert sum(len(r) for r in rows) > 2 * 65_536
    merged = [sorted(set(r)) for r in rows]
    counts = np.concatenate([[r.count(i) for i in sorted(set(r))]
                             for r in rows]).astype(np.float32)
    with_repeats = run_ours(_batch_of_rows(rows, n, vocab), "logistic_loss",
                            l1=0.0, l2=0.5)
    summed = run_ours(_batch_of_rows(merged, n, vocab, counts),
                      "logistic_loss", l1=0.0, l2=0.5)
    np.testing.assert_array_equal(with_repeats[0], summed[0])
    np.testing.assert_array_equal(with_repeats[1][0], summed[1][0])


@pytest.mark.parametrize("order", ["swap", "reversed", "shuffled"])
def test_a_large_sorted_batch_gives_the_rows_of_its_unsorted_forms(order):
    """The op maps a batch's ids to slots in chunks (two of 65,536+
    entries here) and counts the entries into rows; a sorted group is then
    used in place, any other order sorted by example. The same rows in
    three unsorted orders of the entries (two rows' blocks swapped inside
    the first chunk; rows reversed; rows shuffled), each row's entries in
    their order, must solve bit for bit as the sorted batch does, with empty
    rows first, last and within."""
    rng = np.random.default_rng(9)
    n, vocab = 12_000, 3_000
    rows = [sorted(rng.choice(vocab, rng.integers(0, 30), replace=False))
            for _ in range(n)]
    for i in (0, 1, 500, 501, n - 2, n - 1):
        rows[i] = []
    args = _batch_of_rows(rows, n, vocab)
    assert args["sparse_feature_indices"][0].size > 2 * 65_536
    want = run_ours(args, "logistic_loss", l1=0.0, l2=0.5)
    row_order = {"swap": np.r_[0:100, 200, 101:200, 100, 201:n],
                 "reversed": np.arange(n)[::-1],
                 "shuffled": rng.permutation(n)}[order]
    ex = np.concatenate([np.full(len(rows[i]), i, np.int64)
                         for i in row_order])
    ids = np.concatenate([np.asarray(rows[i], np.int64) for i in row_order])
    assert np.any(np.diff(ex) < 0)
    got = run_ours(dict(args, sparse_example_indices=[ex],
                        sparse_feature_indices=[ids]),
                   "logistic_loss", l1=0.0, l2=0.5)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1][0], want[1][0])
    assert np.abs(want[1][0]).max() > 1e-3


def test_int64_ids_above_2_to_40_and_unsorted_example_indices_work():
    small = [0, 1, 2, 3]
    big = [2**40 + 3, 2**62 + 11, 2**41, 7]
    rows, ids, values = [0, 0, 1, 1, 1], [0, 1, 1, 2, 3], [1, 2, 0.5, 1, 3]
    w = [0.1, -0.3, 0.2, 0.05]
    sorted_small = _sparse_call(rows, ids, values, small, w)
    # The same entries in a shuffled order (example indices 1, 0, 1, 0, 1)
    # with the ids renamed to large int64s, and the weights listed in
    # another order.
    perm = [2, 0, 4, 1, 3]
    weight_perm = [3, 1, 0, 2]
    shuffled_big = _sparse_call(
        np.take(rows, perm), [big[i] for i in np.take(ids, perm)],
        np.take(values, perm), [big[i] for i in weight_perm],
        np.take(w, weight_perm))
    # 1e-6 relative: only the summation order inside a row differs.
    np.testing.assert_allclose(shuffled_big[0], sorted_small[0], rtol=1e-6,
                               atol=1e-7)
    np.testing.assert_allclose(shuffled_big[1][0],
                               sorted_small[1][0][weight_perm], rtol=1e-6,
                               atol=1e-7)
    assert np.abs(sorted_small[1][0]).min() > 1e-3  # every weight moved


# --------------------------------------------------------------------------
# (g) inner iterations
# --------------------------------------------------------------------------

def test_k_inner_iterations_equal_k_calls_in_cyclic_order():
    problem = make_problem("logistic_loss", n=50, seed=8)
    inner = Model(problem, "logistic_loss", l1=0.05, l2=1.0,
                  num_inner_iterations=4, visit_order="cyclic")
    inner.full_batch()
    calls = Model(problem, "logistic_loss", l1=0.05, l2=1.0,
                  visit_order="cyclic")
    for _ in range(4):
        calls.full_batch()
    # The only difference: between calls the weights pass through float32
    # (relative 6e-8 of weights ~1), which moves later steps by ~1e-7.
    np.testing.assert_allclose(inner.state[:, 0], calls.state[:, 0],
                               atol=1e-6)
    np.testing.assert_allclose(inner.w_sparse, calls.w_sparse, atol=1e-6)
    np.testing.assert_allclose(inner.w_dense, calls.w_dense, atol=1e-6)


@pytest.mark.parametrize("loss", ["logistic_loss", "hinge_loss"])
def test_more_inner_iterations_give_a_smaller_gap(loss):
    problem = make_problem(loss, n=50, seed=8)
    gaps = []
    for k in (1, 2, 4, 8):
        model = Model(problem, loss, l2=1.0, num_inner_iterations=k)
        model.full_batch()
        gaps.append(model.relative_gap())
    assert all(a > b for a, b in zip(gaps, gaps[1:])), gaps


# --------------------------------------------------------------------------
# (h) empty batch
# --------------------------------------------------------------------------

@pytest.mark.parametrize("threads", [0, 2])
def test_an_empty_batch_returns_empty_state_and_zero_deltas(threads):
    state, d_sparse, d_dense = run_ours(dict(
        sparse_example_indices=[np.zeros(0, np.int64)],
        sparse_feature_indices=[np.zeros(0, np.int64)],
        sparse_feature_values=[np.zeros(0, np.float32)],
        dense_features=[np.zeros((0, 3), np.float32)],
        example_weights=np.zeros(0, np.float32),
        example_labels=np.zeros(0, np.float32),
        sparse_indices=[np.array([4, 2**45], np.int64)],
        sparse_weights=[np.array([0.5, -1.0], np.float32)],
        dense_weights=[np.ones(3, np.float32)],
        example_state_data=np.zeros((0, 4), np.float32)),
        "logistic_loss", l1=0.1, l2=1.0, num_inner_iterations=3,
        num_threads=threads)
    assert state.shape == (0, 4)
    np.testing.assert_array_equal(d_sparse[0], [0.0, 0.0])
    np.testing.assert_array_equal(d_dense[0], [0.0, 0.0, 0.0])


# --------------------------------------------------------------------------
# (i) sdca_shrink_l1 and sdca_fprint
# --------------------------------------------------------------------------

@pytest.mark.parametrize("l1,l2", [(0.2, 2.0), (0.0, 1.0), (3.0, 0.7)])
def test_shrink_l1_is_the_soft_threshold(l1, l2):
    rng = np.random.default_rng(0)
    w = (rng.normal(size=(7, 5)) * 3).astype(np.float32)
    w[0, :4] = [0.0, l1 / l2, -l1 / l2, np.float32(l1 / l2) * 1.5]
    out = tf_sdca.sdca_shrink_l1(w, l1=l1, l2=l2).numpy()
    assert out.shape == w.shape and out.dtype == np.float32
    expected = np.sign(w) * np.maximum(np.abs(w.astype(np.float64)) -
                                       l1 / l2, 0.0)
    # Float32 output: one rounding, 1e-7 relative; the threshold itself is
    # float32(l1) / float32(l2), a few 1e-8 away from l1 / l2.
    np.testing.assert_allclose(out, expected, rtol=2e-7, atol=1e-7)
    assert np.all(out[np.abs(w) <= np.float32(l1 / l2) * (1 - 1e-6)] == 0)


FPRINT_STRINGS = ["", "a", "b", "ab", "row-17", "12345678", "123456789",
                  "0123456789abcdef0", "é", "a" * 1000]


def test_fingerprints_are_deterministic_and_separate_distinct_ids():
    fp = tf_sdca.sdca_fprint(FPRINT_STRINGS).numpy()
    assert fp.shape == (len(FPRINT_STRINGS), 2) and fp.dtype == np.int64
    np.testing.assert_array_equal(
        fp, tf_sdca.sdca_fprint(FPRINT_STRINGS).numpy())
    # Equal strings, anywhere in a batch, give equal rows.
    again = tf_sdca.sdca_fprint(["row-17", "x", "", "row-17"]).numpy()
    np.testing.assert_array_equal(again[0], fp[4])
    np.testing.assert_array_equal(again[3], fp[4])
    np.testing.assert_array_equal(again[2], fp[0])
    # Distinct strings give distinct rows (and distinct halves): 10000
    # near-identical ids, a collision has probability ~1e-31.
    many = tf_sdca.sdca_fprint([f"example-{i}" for i in range(10000)])
    many = many.numpy()
    assert len({tuple(r) for r in many}) == 10000
    assert len(set(many[:, 0])) == 10000 and len(set(many[:, 1])) == 10000


def _reference_fingerprint(text):
    """The documented fingerprint, in Python: two 64-bit hashes (seeds from
    the digits of pi) folding 8-byte little-endian words through the
    SplitMix64 finaliser. The values are part of saved state."""
    mask = (1 << 64) - 1

    def mix(z):
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        return z ^ (z >> 31)

    def hash64(data, seed):
        h = mix(seed ^ ((len(data) * 0x9E3779B97F4A7C15) & mask))
        whole = len(data) - len(data) % 8
        for k in range(0, whole, 8):
            word = int.from_bytes(data[k:k + 8], "little")
            h = mix(h ^ mix((word + 0x632BE59BD9B4E019) & mask))
        tail = int.from_bytes(data[whole:], "little")
        return mix(h ^ mix(tail ^ 0xD6E8FEB86659FD93))

    data = text.encode("utf-8")
    return [hash64(data, 0x243F6A8885A308D3),
            hash64(data, 0x13198A2E03707344)]


def test_fingerprints_are_the_documented_hash_in_every_process():
    expected = np.array([_reference_fingerprint(t) for t in FPRINT_STRINGS],
                        np.uint64).view(np.int64)
    np.testing.assert_array_equal(
        tf_sdca.sdca_fprint(FPRINT_STRINGS).numpy(), expected)
    # A fresh interpreter gives the same rows (no per-process seed). One is
    # enough beside this process: importing TensorFlow costs ~5 s each.
    code = ("import os, sys; os.environ['TF_CPP_MIN_LOG_LEVEL'] = '3'; "
            "import tf_sdca; "
            "print(tf_sdca.sdca_fprint(sys.argv[1:]).numpy().tolist())")
    out = subprocess.run([sys.executable, "-c", code, *FPRINT_STRINGS],
                         capture_output=True, text=True, timeout=120,
                         check=True).stdout
    assert out.strip() == str(expected.tolist())


# --------------------------------------------------------------------------
# Feature groups
# --------------------------------------------------------------------------

@pytest.mark.parametrize("order", ["permutation", "cyclic"])
def test_splitting_features_into_groups_does_not_change_the_solve(order):
    # The same 3 dense and 4 sparse features per row, passed as one group
    # each or as dense groups of widths 1 and 2 plus two sparse groups, the
    # second one without values (implicitly 1). Permutation order packs the
    # dense groups of a row side by side, which this covers.
    rng = np.random.default_rng(3)
    n, vocab = 50, 20
    dense = rng.normal(size=(n, 3)).astype(np.float32)
    ids_a = np.stack([rng.choice(vocab, 2, replace=False) for _ in range(n)])
    ids_b = np.stack([rng.choice(vocab, 2, replace=False) for _ in range(n)])
    values_a = rng.uniform(0.5, 1.5, size=(n, 2)).astype(np.float32)
    labels = (rng.random(n) < 0.5).astype(np.float32)
    rows = np.repeat(np.arange(n), 2)
    w_dense = np.array([0.1, -0.2, 0.3], np.float32)
    w_a = rng.normal(size=vocab).astype(np.float32) * 0.1
    w_b = rng.normal(size=vocab).astype(np.float32) * 0.1
    common = dict(example_weights=np.full(n, 1.3, np.float32),
                  example_labels=labels,
                  example_state_data=np.zeros((n, 4), np.float32))
    options = dict(l1=0.02, l2=0.5, num_inner_iterations=3,
                   visit_order=order, seed=9)
    # Grouped: sparse ids b are their own group of weights.
    grouped = run_ours(dict(
        sparse_example_indices=[rows, rows],
        sparse_feature_indices=[ids_a.ravel(), ids_b.ravel()],
        sparse_feature_values=[values_a.ravel()],
        dense_features=[dense[:, :1], dense[:, 1:]],
        sparse_indices=[np.arange(vocab), np.arange(vocab)],
        sparse_weights=[w_a, w_b],
        dense_weights=[w_dense[:1], w_dense[1:].reshape(2, 1)], **common),
        "logistic_loss", **options)
    # One group: ids b shifted by vocab, values 1.
    single = run_ours(dict(
        sparse_example_indices=[np.repeat(np.arange(n), 4)],
        sparse_feature_indices=[np.hstack([ids_a, ids_b + vocab]).ravel()],
        sparse_feature_values=[np.hstack([values_a,
                                          np.ones((n, 2), np.float32)])
                               .ravel()],
        dense_features=[dense], sparse_indices=[np.arange(2 * vocab)],
        sparse_weights=[np.concatenate([w_a, w_b])],
        dense_weights=[w_dense], **common),
        "logistic_loss", **options)
    # 1e-6: only the order of the sums inside x . w differs.
    np.testing.assert_allclose(grouped[0], single[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        np.concatenate(grouped[1]), single[1][0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        np.concatenate([d.ravel() for d in grouped[2]]), single[2][0],
        rtol=1e-6, atol=1e-7)
    assert grouped[2][1].shape == (2, 1)  # deltas keep the weights' shape
    assert np.abs(single[2][0]).min() > 1e-3


def test_the_op_runs_inside_tf_function_like_eagerly():
    problem = make_problem("logistic_loss", n=20, seed=9)
    args, _ = batch_args(problem, np.arange(20), np.zeros(25), np.zeros(3),
                         np.zeros((20, 4)))
    eager = tf_sdca.sdca_optimizer(**args, loss_type="logistic_loss", l1=0.0,
                                   l2=1.0)
    graph = tf.function(lambda: tf_sdca.sdca_optimizer(
        **args, loss_type="logistic_loss", l1=0.0, l2=1.0))()
    for a, b in zip(tf.nest.flatten(eager), tf.nest.flatten(graph)):
        np.testing.assert_array_equal(a.numpy(), b.numpy())


# --------------------------------------------------------------------------
# (i) the kernel's record arena: reused from call to call
# --------------------------------------------------------------------------

def test_records_reused_between_calls_leave_no_trace_in_the_results():
    """The kernel packs each call's rows into memory it keeps for the next
    (RecordArena): a batch solved after larger and smaller ones, and the
    same batches solved by calls on two Python threads at once (one of
    them then packs into memory of its own), give the results of their
    first calls bit for bit."""
    import concurrent.futures  # pylint: disable=import-outside-toplevel
    problems = {n: _big_problem(seed=n, n=n) for n in (3000, 20_000, 700)}

    def call(n):
        args, _ = batch_args(problems[n], np.arange(n),
                             np.full(2000, 0.01), np.full(2, -0.02),
                             np.zeros((n, 4), np.float32))
        out = run_ours(args, "logistic_loss", 0.0, 1.0,
                       num_inner_iterations=2, seed=9)
        return [out[0], *out[1], *out[2]]

    first = {n: call(n) for n in (3000, 20_000, 700)}
    for n in (700, 20_000, 3000, 20_000, 700):
        for a, b in zip(call(n), first[n]):
            np.testing.assert_array_equal(a, b)
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        results = list(pool.map(call, [20_000, 3000, 20_000, 700] * 3))
    for n, result in zip([20_000, 3000, 20_000, 700] * 3, results):
        for a, b in zip(result, first[n]):
            np.testing.assert_array_equal(a, b)

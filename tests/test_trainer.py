"""InMemorySdca end to end: optimum against scikit-learn and the ridge
closed form, duality gap certificate, sparse + dense input."""
import re

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from tf_sdca import metrics
from tf_sdca.trainer import InMemorySdca


def _breast_cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y.astype(
      np.float32)


def _logistic_objective(x, y, w):
  z = x.astype(np.float64) @ w
  s = 2 * y - 1
  grad = -(x.T.astype(np.float64) @ (s / (1 + np.exp(s * z)))) + w
  return np.logaddexp(0, -s * z).sum() + 0.5 * w @ w, grad


def test_logistic_optimum_matches_sklearn_and_scipy():
  x, y = _breast_cancer()
  model = InMemorySdca("logistic_loss", l2=1.0)
  history = model.fit(y, dense=x, epochs=300, batch_size=1000, tol=1e-9,
                      verbose=0)
  assert len(history["loss"]) < 300  # stopped on the gap certificate
  assert history["duality_gap"][-1] < 1e-9
  # sum log-loss + l2/2 |w|^2 with l2 = 1 is LogisticRegression(C=1).
  sk = LogisticRegression(C=1.0, fit_intercept=False, tol=1e-12,
                          max_iter=100_000).fit(x, y).coef_.ravel()
  sk_objective = _logistic_objective(x, y, sk)[0] / len(y)
  # lbfgs in scikit-learn stops early (gradient ~4e-3 here); we are at least
  # as good, and within 1e-6 relative of its objective.
  assert history["loss"][-1] <= sk_objective * (1 + 1e-12)
  assert history["loss"][-1] == pytest.approx(sk_objective, rel=1e-6)
  # A tight scipy L-BFGS-B pins the weights themselves: gap 1e-9 and
  # strong convexity 1 bound |w - w*| by sqrt(2 * gap * objective) ~ 3e-4.
  from scipy.optimize import minimize
  ref = minimize(lambda w: _logistic_objective(x, y, w), np.zeros(30),
                 jac=True, method="L-BFGS-B",
                 options=dict(gtol=1e-12, ftol=1e-16, maxiter=100_000)).x
  np.testing.assert_allclose(model.dense_weights, ref, atol=3e-4)


def test_ridge_matches_closed_form_on_diabetes():
  x, y = load_diabetes(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  y = ((y - y.mean()) / y.std()).astype(np.float32)
  l2 = 5.0
  model = InMemorySdca("squared_loss", l2=l2)
  history = model.fit(y, dense=x, epochs=500, batch_size=500, tol=1e-10,
                      verbose=0)
  x64 = x.astype(np.float64)
  w = np.linalg.solve(x64.T @ x64 + l2 * np.eye(x.shape[1]), x64.T @ y)
  objective = 0.5 * np.sum((x64 @ w - y) ** 2) + 0.5 * l2 * w @ w
  assert history["loss"][-1] * len(y) == pytest.approx(objective, rel=1e-8)
  # Relative to the weight vector's size (the smallest weights are ~1e-3).
  assert np.linalg.norm(model.dense_weights - w) < 1e-4 * np.linalg.norm(w)


def test_sparse_ids_with_dense_reach_small_gap_and_beat_chance():
  rng = np.random.default_rng(0)
  n = 4000
  ids = rng.integers(0, 300, size=(n, 6)) + np.arange(6) * 300
  true = rng.normal(size=1800)
  dense = rng.normal(size=(n, 3)).astype(np.float32)
  z = true[ids].sum(1) + dense @ np.array([1.0, -1.0, 0.5])
  y = (rng.random(n) < 1 / (1 + np.exp(-z))).astype(np.float32)
  # l2 = 10: each sparse weight sees ~13 examples, so a weaker penalty makes
  # SDCA need hundreds of epochs (its rate is ~1 / (1 + R^2 / l2)).
  model = InMemorySdca("logistic_loss", l2=10.0)
  history = model.fit(y, dense=dense, ids=ids, num_features=1800, epochs=200,
                      batch_size=1000, tol=1e-7, verbose=0)
  assert history["duality_gap"][-1] < 1e-7
  assert len(history["loss"]) < 200  # stopped on the gap, not on epochs
  assert metrics.auc(y, model.predict(dense=dense, ids=ids)) > 0.8


def test_auc_and_log_loss_match_sklearn():
  from sklearn.metrics import log_loss, roc_auc_score
  rng = np.random.default_rng(1)
  y = (rng.random(500) < 0.3).astype(float)
  p = np.clip(rng.random(500) * 0.5 + 0.4 * y, 1e-6, 1 - 1e-6)
  p[::7] = 0.5  # ties
  assert metrics.auc(y, p) == pytest.approx(roc_auc_score(y, p), abs=1e-12)
  assert metrics.log_loss(y, p) == pytest.approx(log_loss(y, p), rel=1e-12)


@pytest.mark.parametrize("loss,shuffle", [("squared_loss", True),
                                          ("squared_loss", False),
                                          ("logistic_loss", True)])
def test_a_mini_batch_error_names_the_row_of_the_users_data(loss, shuffle):
  """The op sees one batch; its error ("example 188") must also say which
  row of the data that is, whichever batch the row was dealt into."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  x = rng.normal(size=(1000, 5)).astype(np.float32)
  y = (rng.uniform(size=1000) > 0.5).astype(np.float32)
  x[700, 2] = 3e38  # valid, but its loss does not fit float32 state
  model = InMemorySdca(loss=loss, l2=1e-30)
  with pytest.raises(tf.errors.InvalidArgumentError) as caught:
    model.fit(y, dense=x, epochs=2, batch_size=300, shuffle=shuffle,
              verbose=0)
  message = caught.value.message
  assert re.match(rf"in mini-batch [1-4] of epoch [12]: {loss}: example "
                  r"\d+ \(row 700 of the data\)'s primal loss", message), (
                      message)
  # Where that example sat in its batch, and that the batch held row 700.
  position = int(re.search(r"example (\d+) \(", message).group(1))
  if not shuffle:
    assert position == 700 - 300 * (700 // 300)
  assert "function_node" not in message and "[Op:" not in message


def test_features_given_where_the_labels_go_is_a_clear_error():
  """fit(x, y) in scikit-learn's order puts the features in `labels`: a
  ValueError that shows fit(y, dense=x), not the op's rank error. A column
  of labels [n, 1] trains as [n]."""
  import scipy.sparse  # pylint: disable=import-outside-toplevel
  x, y = _breast_cancer()
  for features in (x, scipy.sparse.csr_matrix(x)):
    with pytest.raises(ValueError, match=r"labels must have shape \[n\], "
                       r"got \(569, 30\).*fit\(y, dense=x\)"):
      InMemorySdca(loss="logistic").fit(features, y, verbose=0)
  column = InMemorySdca(loss="logistic")
  column.fit(y[:, None], dense=x, epochs=3, verbose=0)
  flat = InMemorySdca(loss="logistic")
  flat.fit(y, dense=x, epochs=3, verbose=0)
  np.testing.assert_array_equal(column.dense_weights, flat.dense_weights)


@pytest.mark.parametrize("name, bad", [
    ("epochs", -1), ("epochs", 2.5), ("epochs", True), ("epochs", "3"),
    ("epochs", None), ("initial_epoch", -2), ("initial_epoch", 1.0)])
def test_epochs_not_a_count_is_refused_by_name(name, bad):
  # -1 used to return an empty history without a word, 2.5 to fail inside
  # the engine with a TypeError.
  x, y = load_breast_cancer(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  kwargs = dict(epochs=3, verbose=0)
  kwargs[name] = bad
  model = InMemorySdca("logistic", l2=1.0)
  with pytest.raises(ValueError, match=f"^{name} must be an integer >= 0"):
    model.fit(y.astype(np.float32), dense=x, **kwargs)
  # 0 epochs (and numpy integers) are counts: no pass, an empty history.
  history = model.fit(y.astype(np.float32), dense=x, epochs=np.int64(0),
                      verbose=0)
  assert history["loss"] == [] and not np.any(model.dense_weights)


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_batch_size_not_a_positive_count_is_refused(bad):
  # -3 trained nothing and returned a history; 0 meant all rows unasked.
  x, y = load_breast_cancer(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  with pytest.raises(ValueError, match="^batch_size must be None"):
    InMemorySdca("logistic", l2=1.0).fit(y.astype(np.float32), dense=x,
                                         epochs=2, batch_size=bad, verbose=0)


@pytest.mark.parametrize("second_order", ["auto", "off"])
@pytest.mark.parametrize("indptr_of, message", [
    (lambda n: np.r_[np.arange(n), 10], r"nondecreasing, got indptr\[59\] = "
     r"59 > indptr\[60\] = 10"),
    (lambda n: np.r_[np.arange(n), n + 5], r"within \[0, 60\].*indptr\[60\] "
     r"= 65"),
    (lambda n: np.r_[-1, np.arange(1, n + 1)], r"indptr\[0\] = -1"),
])
def test_a_malformed_indptr_is_a_clear_error_not_a_crash(
    second_order, indptr_of, message):
  # A decreasing indptr crashed the process (scipy's product inside the
  # second-order step's set-up read past its arrays) before packing saw it.
  rng = np.random.default_rng(0)
  n = 60
  y = (rng.random(n) > 0.5).astype(np.float32)
  indptr = np.asarray(indptr_of(n), np.int64)
  with pytest.raises(ValueError, match=message):
    InMemorySdca("logistic", l2=1.0, second_order=second_order).fit(
        y, indptr=indptr, indices=np.zeros(n, np.int64), num_features=5,
        epochs=1, verbose=0)


def test_no_rows_or_no_weight_is_a_clear_error():
  # Both used to end in a ZeroDivisionError after the first epoch.
  x = np.ones((5, 3), np.float32)
  y = np.array([0, 1, 0, 1, 1], np.float32)
  with pytest.raises(ValueError, match="no rows to train on"):
    InMemorySdca("logistic", l2=1.0).fit(y[:0], dense=x[:0], epochs=1,
                                         verbose=0)
  with pytest.raises(ValueError, match="example_weights are all 0"):
    InMemorySdca("logistic", l2=1.0).fit(y, dense=x, epochs=1, verbose=0,
                                         example_weights=np.zeros(5))
  # One row of weight is enough.
  history = InMemorySdca("logistic", l2=1.0).fit(
      y, dense=x, epochs=2, verbose=0,
      example_weights=np.array([0, 0, 1, 0, 0], np.float32))
  assert np.isfinite(history["loss"][-1])


@pytest.mark.parametrize("key, bad, message", [
    ("indices", 0.5, r"indices\[7\] = 0.5"),
    ("indices", np.nan, r"indices\[7\] = nan"),
    ("ids", 2.25, r"ids\[7, 0\] = 2.25")])
def test_feature_ids_that_are_not_whole_numbers_are_refused(key, bad,
                                                            message):
  # A float id was cut to an integer without a word (0.5 trained as id 0);
  # whole floats (pandas' columns often are) still train.
  n = 20
  y = (np.arange(n) % 2).astype(np.float32)
  ids = (np.arange(n) % 5).astype(np.float64)
  if key == "indices":
    data = dict(indptr=np.arange(n + 1), indices=ids)
  else:
    data = dict(ids=ids[:, None])
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, num_features=5, epochs=2, verbose=0, **data)
  whole = model.sparse_weights.copy()
  spoiled = ids.copy()
  spoiled[7] = bad
  data[key] = spoiled if key == "indices" else spoiled[:, None]
  with pytest.raises(ValueError, match=f"^{key} must be whole numbers.*"
                     f"{message}"):
    InMemorySdca("logistic", l2=1.0).fit(y, num_features=5, epochs=2,
                                         verbose=0, **data)
  ints = dict(indptr=np.arange(n + 1), indices=ids.astype(np.int64))
  again = InMemorySdca("logistic", l2=1.0)
  again.fit(y, num_features=5, epochs=2, verbose=0, **ints)
  np.testing.assert_array_equal(whole, again.sparse_weights)


def test_load_state_dict_refuses_bad_arrays_and_clears_what_it_lacks():
  """A bad array (strings, NaN, a wrong shape) or `average_count` is a
  ValueError naming it, and the model is left as it was; a state without
  the extrapolation's point (or a mean, or ASDCA's iterate) clears the
  model's own from an earlier fit, so that a resumed fit goes on as one
  from a fresh model given the same state."""
  x, y = _breast_cancer()
  labels = (y > 0).astype(np.float32)
  source = InMemorySdca(loss="logistic", l2=1.0, momentum=0)
  source.fit(labels, dense=x, epochs=3, verbose=0)
  state = source.state_dict()
  assert not any(key.startswith("momentum_") for key in state)
  model = InMemorySdca(loss="logistic", l2=1.0, momentum=0.5)
  model.fit(labels, dense=x, epochs=3, verbose=0)
  assert model.momentum_state is not None
  before = {k: np.copy(v) for k, v in model.state_dict().items()}
  n, d = x.shape
  strings = np.array(["0.5"] * n)
  nan = state["duals"].copy()
  nan[7] = np.nan
  for bad, message in [
      (dict(state, duals=strings), "duals must hold real numbers, got a <U3"),
      (dict(state, duals=nan), "duals[7] = nan is not finite"),
      (dict(state, dense_weights=np.zeros(d - 1)),
       f"dense_weights has shape ({d - 1},), the data needs ({d},)"),
      ({k: v for k, v in state.items() if k != "duals"},
       f"duals is missing; the data needs it, of shape ({n},)"),
      # (ASDCA's iterate of another shape was dropped, and the resumed fit
      # went another way; the extrapolation's NaNs were blamed on the data
      # and its other types on numpy's conversions.)
      (dict(state, asdca_iterate=np.zeros(d - 3)),
       f"asdca_iterate has shape ({d - 3},), the data needs ({d},)"),
      (dict(state, asdca_iterate=np.array(["a"])),
       "asdca_iterate must hold real numbers, got a <U1"),
      (dict(state, momentum_previous_duals=nan),
       "momentum_previous_duals[7] = nan is not finite"),
      (dict(state, momentum_previous_duals=np.zeros(n),
            momentum_previous_table=np.zeros(d), momentum_last_dual="x",
            momentum_restart=False),
       "momentum_last_dual must hold real numbers, got a <U1"),
      (dict(state, momentum_previous_duals=np.zeros(n),
            momentum_previous_table=np.zeros(d), momentum_last_dual=0.5,
            momentum_restart=np.array([True, False])),
       "momentum_restart has shape (2,), the data needs ()"),
      (dict(state, average_count="x"),
       "average_count must be a whole number >= 0, got 'x'"),
      (dict(state, average_count=-1),
       "average_count must be a whole number >= 0, got -1")]:
    with pytest.raises(ValueError, match=re.escape(message)):
      model.load_state_dict(bad, n, None, d)
    after = model.state_dict()
    assert sorted(after) == sorted(before)
    for key, value in before.items():
      np.testing.assert_array_equal(after[key], value)
  model.load_state_dict(state, n, None, d)
  assert model.momentum_state is None and model.average_count == 0
  fresh = InMemorySdca(loss="logistic", l2=1.0, momentum=0.5)
  fresh.load_state_dict(state, n, None, d)
  for resumed in (model, fresh):
    resumed.fit(labels, dense=x, epochs=6, initial_epoch=3, verbose=0)
  np.testing.assert_array_equal(model.dense_weights, fresh.dense_weights)
  np.testing.assert_array_equal(model.duals, fresh.duals)


@pytest.mark.parametrize("second_order", ["auto", "on"])
@pytest.mark.parametrize("given, bad, message", [
    ("ids", -1, r"sparse ids must be in \[0, 10\), got -1 in row 3"),
    ("ids", 12, r"sparse ids must be in \[0, 10\), got 12 in row 3"),
    ("indices", -1, r"sparse ids must be in \[0, 10\), got -1 in row 3")])
def test_ids_outside_the_table_are_refused_before_the_block_step(
    second_order, given, bad, message):
  # An id < 0 or >= num_features reached scipy's products in the block
  # step's set-up before the ids were checked: the process died of heap
  # corruption (a negative id: "double free or corruption", an id past
  # the table: a segfault after the error).
  rng = np.random.default_rng(0)
  n = 20
  y = (rng.random(n) > 0.5).astype(np.float32)
  ids = rng.integers(0, 10, size=(n, 2))
  ids[3, 1] = bad
  data = (dict(ids=ids) if given == "ids" else
          dict(indptr=np.arange(0, 2 * n + 1, 2), indices=ids.ravel()))
  with pytest.raises(ValueError, match=message):
    InMemorySdca("logistic", l2=1.0, second_order=second_order).fit(
        y, dense=rng.normal(size=(n, 3)), num_features=10, epochs=1,
        verbose=0, **data)


def test_scoring_refuses_rows_the_model_cannot_score():
  rng = np.random.default_rng(1)
  n = 30
  x = rng.normal(size=(n, 3)).astype(np.float32)
  ids = rng.integers(0, 10, size=(n, 2))
  y = (rng.random(n) > 0.5).astype(np.float32)
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, dense=x, ids=ids, num_features=10, epochs=2, verbose=0)
  # A negative id scored as numpy's negative index (id -1 as id 9).
  with pytest.raises(ValueError, match=r"sparse ids must be in \[0, 10\), "
                     r"got -1 in row 0"):
    model.predict(dense=x[:1], ids=np.array([[-1, 2]]))
  with pytest.raises(ValueError, match=r"got 10 in row 1"):
    model.predict(dense=x[:2], ids=np.array([[1, 2], [3, 10]]))
  spoiled = x[:2].copy()
  spoiled[1, 2] = np.nan
  with pytest.raises(ValueError, match=r"dense\[1, 2\] = nan must be finite"):
    model.predict(dense=spoiled, ids=ids[:2])
  with pytest.raises(ValueError, match=r"dense has shape \(2, 2\); this "
                     r"model's dense weights take \[n, 3\]"):
    model.predict(dense=x[:2, :2], ids=ids[:2])
  with pytest.raises(ValueError, match="give the rows' features"):
    model.predict()
  with pytest.raises(ValueError, match="no weights yet"):
    InMemorySdca("logistic", l2=1.0).predict(dense=x)
  z = model.decision_function(dense=x[:4], ids=ids[:4])
  expected = (x[:4].astype(np.float64) @ model.dense_weights +
              model.sparse_weights[ids[:4]].sum(axis=1))
  np.testing.assert_allclose(z, expected, rtol=1e-12)


def test_state_of_other_rows_is_refused_when_resuming_and_dropped_else():
  x, y = _breast_cancer()
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, dense=x, epochs=2, verbose=0)
  model.duals = np.zeros(3)
  # (Zeroed silently before, beside the kept weights: the next epoch's
  # gap was 0.93.)
  with pytest.raises(ValueError, match=r"duals has shape \(3,\); resuming "
                     r"a fit of these rows \(initial_epoch > 0\) needs "
                     r"\(569,\)"):
    model.fit(y, dense=x, epochs=3, initial_epoch=2, verbose=0)
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, dense=x, epochs=2, verbose=0)
  model.dense_weights = np.zeros(5)
  with pytest.raises(ValueError, match=r"dense_weights has shape \(5,\); "
                     r"resuming .* needs \(30,\)"):
    model.fit(y, dense=x, epochs=3, initial_epoch=2, verbose=0)
  # A new fit on other rows starts from zero, as a new model does: the
  # weights of the old rows beside zero duals were no primal-dual pair.
  model = InMemorySdca("logistic", l2=1.0)
  model.fit(y, dense=x, epochs=2, verbose=0)
  model.fit(y[:300], dense=x[:300], epochs=5, verbose=0)
  fresh = InMemorySdca("logistic", l2=1.0)
  fresh.fit(y[:300], dense=x[:300], epochs=5, verbose=0)
  np.testing.assert_array_equal(model.dense_weights, fresh.dense_weights)
  np.testing.assert_array_equal(model.duals, fresh.duals)


@pytest.mark.parametrize("data, message", [
    (dict(example_weights=np.r_[np.nan, np.ones(4)]),
     r"example_weights\[0\] = nan must be finite and >= 0"),
    (dict(example_weights=np.r_[1, -2, np.ones(3)]),
     r"example_weights\[1\] = -2.0 must be finite and >= 0"),
    (dict(dense=np.ones((5, 0))), "give dense features, sparse ids, or both"),
    (dict(ids=np.ones((5, 0), np.int64)),
     r"ids must have shape \[5, k\], k >= 1, got \(5, 0\)"),
    (dict(dense=np.ones((5, 2, 1))),
     r"dense must have shape \[n\] or \[n, d\], got \(5, 2, 1\)")])
def test_bad_weights_and_shapes_are_named(data, message):
  # NaN weights read "are all 0", no columns a ZeroDivisionError or
  # IndexError, a rank-3 array scipy's "CSR arrays don't yet support 3D".
  y = np.array([0, 1, 0, 1, 1], np.float32)
  data = dict(dict(dense=np.ones((5, 3), np.float32)), **data)
  with pytest.raises(ValueError, match=message):
    InMemorySdca("logistic", l2=1.0).fit(y, epochs=1, verbose=0, **data)


def test_row_chunks_that_disagree_with_their_counts_are_named():
  """Sparse ids with num_features None was a TypeError comparing None; more
  rows than num_examples or more ids than num_ids an error of the packing
  op about its buffer; an id past the table did not name its chunk."""
  from tf_sdca.engine import RowChunks  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  n = 40
  x = rng.normal(size=(n, 3)).astype(np.float32)
  y = (rng.random(n) > 0.5).astype(np.float32)
  ids = rng.integers(0, 8, size=(n, 2))

  def chunks(ids=ids):
    return [dict(labels=y[r], dense=x[r], ids=ids[r])
            for r in (slice(0, 20), slice(20, n))]

  past = ids.copy()
  past[25, 0] = 13
  for rows, message in [
      (RowChunks(chunks(), n, 0, 3, None), r"chunk 0 \(rows from 0 on\) has "
       r"sparse ids; num_features is None \(no sparse part\)"),
      (RowChunks(chunks(), 30, 2 * n, 3, 8), r"chunk 1 \(rows from 20 on\) "
       r"holds rows past num_examples = 30"),
      (RowChunks(chunks(), n, 50, 3, 8), r"chunk 1 \(rows from 20 on\): the "
       r"chunks hold more than num_ids = 50 sparse entries"),
      (RowChunks(chunks(past), n, 2 * n, 3, 8), r"chunk 1: sparse ids must "
       r"be in \[0, 8\), got 13 in row 25")]:
    with pytest.raises(ValueError, match=message):
      InMemorySdca("logistic", l2=1.0).fit(rows=rows, epochs=1, verbose=0)
  whole = InMemorySdca("logistic", l2=1.0)
  whole.fit(y, dense=x, ids=ids, num_features=8, epochs=3, verbose=0)
  parts = InMemorySdca("logistic", l2=1.0)
  parts.fit(rows=RowChunks(chunks(), n, 2 * n, 3, 8), epochs=3, verbose=0)
  np.testing.assert_array_equal(parts.sparse_weights, whole.sparse_weights)

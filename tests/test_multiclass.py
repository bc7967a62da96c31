"""The multiclass losses (softmax, multiclass hinge) on the packed-rows engine:
each block step is the exact maximiser of its block subproblem (checked
against scipy's SLSQP on the same concave function), the optimum on real
data matches scikit-learn's (LogisticRegression multinomial, LinearSVC
Crammer-Singer) in an objective computed here in numpy, K = 2 softmax is
binary logistic reparametrised, sparse and dense features and example
weights mean what they say, and bad labels / K are named errors.

The objective everywhere: sum_i s_i phi_i(W^T x_i) + l2/2 |W|^2, which is
scikit-learn's C sum_i loss_i + 1/2 |W|^2 divided by C for C = 1 / l2.
"""
import warnings

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize
from sklearn import datasets
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from tf_sdca import losses
from tf_sdca.ops import sdca_ops
from tf_sdca.ops._loader import load_ops
from tf_sdca.engine import objective_and_gap
from tf_sdca.trainer import InMemorySdca

MULTICLASS = ("softmax_loss", "multiclass_hinge_loss")


# ------------------------------------------------------------- references
def np_primal(loss, z, y):
  """phi(z) per row, written from the definitions (not tf_sdca.losses)."""
  n = z.shape[0]
  z_y = z[np.arange(n), y]
  if loss == "softmax_loss":
    top = z.max(axis=1)
    return top + np.log(np.exp(z - top[:, None]).sum(axis=1)) - z_y
  margin = 1.0 - (np.arange(z.shape[1])[None, :] == y[:, None]) + z
  return margin.max(axis=1) - z_y


def np_objective(loss, w, x, y, l2, s=None):
  z = x.astype(np.float64) @ w
  phi = np_primal(loss, z, y)
  if s is not None:
    phi = phi * s
  return phi.sum() + 0.5 * l2 * np.sum(w * w)


def block_objective(loss, p_new, p_old, z, q, y):
  """f(p') = -phi*(p' - e_y) + (p' - p) . z - q/2 |p' - p|^2."""
  if loss == "softmax_loss":
    safe = np.where(p_new > 0, p_new, 1.0)
    conj = np.sum(np.where(p_new > 0, p_new * np.log(safe), 0.0))
  else:
    conj = -(1.0 - p_new[y])
  step = p_new - p_old
  return -conj + step @ z - 0.5 * q * step @ step


def scipy_block(loss, p_old, z, q, y):
  """The block's maximiser by SLSQP over the simplex."""
  k = z.shape[0]
  lower = 1e-14 if loss == "softmax_loss" else 0.0
  best = None
  for start in (np.full(k, 1.0 / k), np.clip(p_old, lower, 1.0)):
    res = minimize(lambda p: -block_objective(loss, p, p_old, z, q, y),
                   start / start.sum(), method="SLSQP",
                   bounds=[(lower, 1.0)] * k,
                   constraints=[{"type": "eq",
                                 "fun": lambda p: p.sum() - 1.0}],
                   options={"ftol": 1e-15, "maxiter": 1000})
    if best is None or res.fun < best.fun:
      best = res
  return best.x


def _empty_sparse():
  return (np.zeros(0, np.int64), np.zeros(0, np.int32),
          np.zeros(0, np.float32))


# ------------------------------------------------------------ block steps
def _random_row(rng, k, d, decade, spread):
  """One row for a block step: x [1, d] at scale 10^decade, its weight s,
  label y, a [d, k] table giving scores up to ~(0.3 + spread) / 1e-2, and
  a block p on the simplex."""
  x = (rng.normal(size=(1, d)) * 10.0 ** decade).astype(np.float32)
  s = float(np.float32(rng.uniform(0.5, 2.0)))
  y = int(rng.integers(k))
  w = rng.normal(size=(d, k)) * (0.3 + spread) / max(
      1e-2, float(np.abs(x).max()))
  return x, s, y, w, rng.dirichlet(np.ones(k) * 0.5)


@pytest.mark.parametrize("loss", MULTICLASS)
@pytest.mark.parametrize("k", [3, 5, 10])
def test_block_step_maximises_the_block_dual(loss, k):
  rng = np.random.default_rng(k)
  d, l2 = 4, 0.625  # exact in the op's float32 attribute
  # q = s |x|^2 / l2 from ~1e-5 to ~1e3 and scores up to ~50: both the
  # warm-started joint Newton and its nested fallback (softmax) are hit.
  for trial in range(8):
    x, s, y, w, p_old = _random_row(rng, k, d, trial / 2 - 2.5, trial % 4)
    alpha = np.eye(k)[y] - p_old
    rows = sdca_ops.pack_rows(*_empty_sparse(), x, np.array([s], np.float32),
                              np.array([y], np.float32), 0, loss,
                              num_classes=k)
    w_new, a_new, _ = sdca_ops.packed_solve(
        rows, w.ravel(), alpha, 0, loss, 0.0, l2, num_passes=1,
        num_classes=k)
    a_new = a_new.numpy()
    p_new = np.eye(k)[y] - a_new
    x64 = x[0].astype(np.float64)
    z = x64 @ w
    q = s * (x64 @ x64) / l2
    ref = scipy_block(loss, p_old, z, q, y)
    ours_f = block_objective(loss, p_new, p_old, z, q, y)
    ref_f = block_objective(loss, ref, p_old, z, q, y)
    # Ours is the exact maximiser: never below SLSQP's (to its tolerance),
    # and the block is strongly concave (q > 0), so the points agree too.
    assert ours_f >= ref_f - 1e-9 * (1 + abs(ref_f))
    if loss == "softmax_loss" or q > 1e-2:
      np.testing.assert_allclose(p_new, ref, atol=2e-5)
    # On the simplex, and the weights moved by (s / l2) x (alpha' - alpha).
    assert p_new.min() >= 0.0 and abs(p_new.sum() - 1.0) < 1e-12
    np.testing.assert_allclose(
        w_new.numpy().reshape(d, k),
        w + (s / l2) * np.outer(x64, a_new - alpha), rtol=1e-12, atol=1e-12)


def sda_step(step, p, z, q, y):
  """The reference's sequential dual ascent steps written from its
  formulas (not the op's code): s_k = [k != y] + z_k; steepest feasible
  ascent moves towards the vertex of argmax s with the exact line search
  min(1, <e_u - p, s> / (q |e_u - p|^2)); near maximal gain moves mass t
  from v to u, u the better of argmax s and the support's best, v the
  support class whose exact t = min(p_v, (s_u - s_v) / 2q) gains most,
  the gain t (s_u - s_v) - q t^2, every candidate tried."""
  k = len(p)
  sc = (np.arange(k) != y) + z
  if step == "steepest_ascent":
    u = int(np.argmax(sc))
    d = np.eye(k)[u] - p
    tau = min(1.0, max(0.0, d @ sc / (q * d @ d)))
    return p + tau * d
  support = np.flatnonzero(p > 0)
  u = int(np.argmax(sc))
  best_in = int(support[np.argmax(sc[support])])
  if sc[best_in] >= sc[u]:
    u = best_in
  gains = []
  for v in support:
    diff = sc[u] - sc[v]
    if v == u or diff <= 0:
      continue
    t = min(p[v], diff / (2 * q))
    gains.append((t * diff - q * t * t, v, t))
  out = p.copy()
  if gains:
    _, v, t = max(gains)
    out[u] += t
    out[v] -= t
  return out


@pytest.mark.parametrize("step", ["steepest_ascent", "near_max_gain"])
@pytest.mark.parametrize("k", [3, 10])
def test_sequential_dual_ascent_steps_follow_the_reference(step, k):
  """hinge_step='steepest_ascent' / 'near_max_gain': one visit of a row
  equals the reference's step computed here, gains (never more than the
  projection, the block's maximiser), and moves W by (s/l2) x (alpha' -
  alpha)^T."""
  loss = "multiclass_hinge_loss"
  rng = np.random.default_rng(7 + k)
  d, l2 = 4, 0.625
  for trial in range(10):
    x, s, y, w, p_old = _random_row(rng, k, d, trial / 3 - 1.5, trial % 4)
    p_old[rng.integers(k)] = 0.0  # a class outside the support
    p_old /= p_old.sum()
    alpha = np.eye(k)[y] - p_old
    rows = sdca_ops.pack_rows(*_empty_sparse(), x, np.array([s], np.float32),
                              np.array([y], np.float32), 0, loss,
                              num_classes=k)

    def visit(hinge_step):
      w_new, a_new, _ = sdca_ops.packed_solve(
          rows, w.ravel(), alpha, 0, loss, 0.0, l2, num_passes=1,
          num_classes=k, hinge_step=hinge_step)
      return w_new.numpy().reshape(d, k), a_new.numpy()

    w_new, a_new = visit(step)
    p_new = np.eye(k)[y] - a_new
    x64 = x[0].astype(np.float64)
    z = x64 @ w
    q = s * (x64 @ x64) / l2
    np.testing.assert_allclose(p_new, sda_step(step, p_old, z, q, y),
                               rtol=0, atol=1e-12)
    f_old = block_objective(loss, p_old, p_old, z, q, y)
    f_new = block_objective(loss, p_new, p_old, z, q, y)
    _, a_proj = visit("projection")
    f_proj = block_objective(loss, np.eye(k)[y] - a_proj, p_old, z, q, y)
    assert f_old - 1e-12 <= f_new <= f_proj + 1e-9 * (1 + abs(f_proj))
    assert p_new.min() >= 0.0 and abs(p_new.sum() - 1.0) < 1e-12
    np.testing.assert_allclose(
        w_new, w + (s / l2) * np.outer(x64, a_new - alpha), rtol=1e-12,
        atol=1e-12)


@pytest.mark.parametrize("step,order", [("steepest_ascent", "permutation"),
                                        ("near_max_gain", "permutation"),
                                        ("near_max_gain", "shrinking")])
def test_sequential_dual_ascent_reaches_the_crammer_singer_optimum(step,
                                                                   order):
  # wine, standardised, l2 = 10: the same optimum as the projection's and
  # LIBLINEAR's, certified by the exact gap. Steepest ascent (Frank-Wolfe)
  # converges sublinearly: a looser certificate in more epochs.
  x, y = _real("wine")
  l2 = 10.0
  tol = 1e-3 if step == "steepest_ascent" else 1e-6
  model = InMemorySdca(loss="multiclass_hinge", num_classes=3, l2=l2,
                       visit_order=order, hinge_step=step)
  history = model.fit(labels=y, dense=x, epochs=3000, tol=tol, verbose=0)
  assert history["duality_gap"][-1] < tol
  ref = _sklearn("multiclass_hinge_loss", x, y, l2)
  ours = np_objective("multiclass_hinge_loss", model.dense_weights, x, y, l2)
  theirs = np_objective("multiclass_hinge_loss", ref, x, y, l2)
  assert ours <= theirs * (1 + tol)


def test_hinge_step_is_refused_where_it_means_nothing():
  with pytest.raises(ValueError, match="hinge_step must be one of"):
    InMemorySdca(loss="multiclass_hinge", num_classes=3, hinge_step="fw")
  with pytest.raises(ValueError, match="block step of multiclass_hinge, not "
                     "of softmax$"):
    InMemorySdca(loss="softmax", num_classes=3, hinge_step="near_max_gain")
  # The op's own check, past the Python wrappers.
  rows = sdca_ops.pack_rows(*_empty_sparse(), np.zeros((1, 2), np.float32),
                            np.ones(1, np.float32), np.ones(1, np.float32), 0,
                            "logistic_loss")
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="hinge_step 'steepest_ascent' is a block step of "
                     "multiclass_hinge_loss, not of logistic_loss"):
    load_ops().tf_sdca_packed_solve(
        rows, np.zeros(2), np.zeros(1), 0, loss_type="logistic_loss", l1=0.0,
        l2=1.0, hinge_step="steepest_ascent")
  # The mini-batch op (SdcaModel, streamed Keras fits) and SdcaModel.
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="hinge_step 'near_max_gain' is a block step of "
                     "multiclass_hinge_loss, not of softmax_loss"):
    load_ops().tf_sdca_optimizer(
        sparse_example_indices=[], sparse_feature_indices=[],
        sparse_feature_values=[], dense_features=[np.ones((1, 2), np.float32)],
        example_weights=np.ones(1, np.float32),
        example_labels=np.ones(1, np.float32), sparse_indices=[],
        sparse_weights=[], dense_weights=[np.zeros((2, 3), np.float32)],
        example_state_data=np.zeros((1, 6), np.float32), call_index=0,
        loss_type="softmax_loss", l1=0.0, l2=1.0, num_classes=3,
        hinge_step="near_max_gain")
  from tf_sdca.sdca_model import SdcaModel  # pylint: disable=import-outside-toplevel
  # (The one validator of tf_sdca.options, spelt as SdcaModel's options.)
  with pytest.raises(ValueError, match=r"options\['hinge_step'\] "
                     "'steepest_ascent' is a block step of "
                     "multiclass_hinge_loss, not of logistic_loss"):
    SdcaModel(None, dict(sparse_features_weights=[],
                         dense_features_weights=[tf.Variable(tf.zeros([2]))]),
              dict(loss_type="logistic_loss", symmetric_l2_regularization=1.0,
                   hinge_step="steepest_ascent"))


@pytest.mark.parametrize("loss", MULTICLASS)
def test_block_step_of_a_row_without_features_is_the_loss_subgradient(loss):
  # q = 0: the step maximises -phi*(p' - e_y) + p'.z, whose maximiser is
  # the loss's gradient (softmax) or the most violated class's vertex.
  k = 4
  rows = sdca_ops.pack_rows(*_empty_sparse(), np.zeros((1, 2), np.float32),
                            np.ones(1, np.float32),
                            np.array([1], np.float32), 0, loss,
                            num_classes=k)
  _, a_new, _ = sdca_ops.packed_solve(rows, np.zeros(2 * k), np.zeros(k), 0,
                                      loss, 0.0, 1.0, num_passes=1,
                                      num_classes=k)
  p = np.eye(k)[1] - a_new.numpy()
  if loss == "softmax_loss":
    np.testing.assert_allclose(p, np.full(k, 0.25), rtol=1e-14)
  else:
    assert p.max() == 1.0 and p[1] == 0.0  # a class != y (margin 1 > 0)


# --------------------------------------------------------------- optimum
def _real(name):
  data = getattr(datasets, f"load_{name}")()
  x = data.data / 16.0 if name == "digits" else (
      StandardScaler().fit_transform(data.data))
  return x.astype(np.float32), data.target.astype(np.int64)


def _sklearn(loss, x, y, l2):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    if loss == "softmax_loss":
      model = LogisticRegression(C=1.0 / l2, fit_intercept=False,
                                 tol=1e-12, max_iter=10000)
    else:
      model = LinearSVC(C=1.0 / l2, multi_class="crammer_singer",
                        fit_intercept=False, tol=1e-10, max_iter=100000)
    model.fit(x.astype(np.float64), y)
  return model.coef_.T


# Hinge SDCA's gap falls sublinearly (the loss is not smooth): digits takes
# l2 = 10 to reach 1e-6 in about a second. 'shrinking' (hinge only) leaves
# rows resting at alpha = 0 out of passes: the same optimum.
@pytest.mark.parametrize("loss,name,l2,order", [
    ("softmax_loss", "iris", 1.0, "permutation"),
    ("softmax_loss", "wine", 1.0, "cyclic"),
    ("softmax_loss", "digits", 1.0, "permutation"),
    ("multiclass_hinge_loss", "iris", 1.0, "uniform"),
    ("multiclass_hinge_loss", "wine", 1.0, "permutation"),
    ("multiclass_hinge_loss", "wine", 1.0, "shrinking"),
    ("multiclass_hinge_loss", "digits", 10.0, "permutation"),
    ("multiclass_hinge_loss", "digits", 10.0, "shrinking")])
def test_optimum_matches_sklearn(loss, name, l2, order):
  x, y = _real(name)
  k = int(y.max()) + 1
  model = InMemorySdca(loss=loss, num_classes=k, l2=l2, visit_order=order)
  history = model.fit(labels=y, dense=x, epochs=3000, tol=1e-6, verbose=0)
  assert history["duality_gap"][-1] < 1e-6
  assert model.dense_weights.shape == (x.shape[1], k)
  ours = np_objective(loss, model.dense_weights, x, y, l2)
  theirs = np_objective(loss, _sklearn(loss, x, y, l2), x, y, l2)
  assert abs(ours - theirs) <= 1e-4 * theirs
  # The history's objective is ours (per unit weight).
  np.testing.assert_allclose(history["loss"][-1] * len(y), ours, rtol=1e-9)
  # predict / predict_classes / decision_function agree with W.
  z = x.astype(np.float64) @ model.dense_weights
  np.testing.assert_allclose(model.decision_function(dense=x), z,
                             rtol=1e-12, atol=1e-12)
  out = model.predict(dense=x)
  if loss == "softmax_loss":
    np.testing.assert_allclose(out.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(np.log(out) - np.log(out[:, :1]),
                               z - z[:, :1], atol=1e-9)
  else:
    np.testing.assert_allclose(out, z, rtol=1e-12, atol=1e-12)
  np.testing.assert_array_equal(model.predict_classes(dense=x),
                                np.argmax(z, axis=1))


@pytest.mark.parametrize("loss,k,tol", [("multiclass_hinge", 2000, 1e-4),
                                        ("softmax", 1000, 1e-8)])
def test_thousands_of_classes(loss, k, tol):
  """K in the thousands on sparse rows (each class has three signature
  words; a row has two of its class's and six random ones of 4,000): the
  certified gap falls below tol, and an independent numpy evaluation of
  P(W) - D(alpha) and of W = (1/l2) X^T alpha at the returned state agrees,
  so the steps that moved only the changed classes of the rows' class rows
  lost nothing. The hinge's duals stay sparse (a few classes a row)."""
  import scipy.sparse as sp  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(0)
  n, vocab, l2 = 2000, 4000, 1.0
  sig = rng.integers(vocab, size=(k, 3))
  y = rng.integers(k, size=n)
  cols = np.concatenate([sig[y][:, :2], rng.integers(vocab, size=(n, 6))], 1)
  x = sp.csr_matrix((np.ones(cols.size), (np.repeat(np.arange(n), 8),
                                          cols.ravel())), shape=(n, vocab))
  x.sum_duplicates()
  x.sort_indices()
  x = sp.csr_matrix(x, dtype=np.float32)
  hinge = loss == "multiclass_hinge"
  model = InMemorySdca(loss=loss, num_classes=k, l2=l2,
                       visit_order="shrinking" if hinge else "permutation")
  history = model.fit(labels=y, indptr=x.indptr.astype(np.int64),
                      indices=x.indices.astype(np.int64), values=x.data,
                      num_features=vocab, epochs=200, tol=tol, verbose=0)
  assert history["duality_gap"][-1] < tol
  w, alpha = model.sparse_weights, model.duals
  xd = x.astype(np.float64)
  np.testing.assert_allclose(w, (xd.T @ alpha) / l2, rtol=0, atol=1e-9)
  p = np.eye(k)[y] - alpha
  if hinge:
    conj = -(1.0 - p[np.arange(n), y])  # phi*(-alpha_i) = -alpha_iy
  else:
    conj = np.sum(np.where(p > 0, p * np.log(np.where(p > 0, p, 1.0)), 0.0),
                  axis=1)
  primal = np_objective(loss + "_loss", w, xd, y, l2)
  dual = -conj.sum() - 0.5 * l2 * np.sum(w * w)
  assert 0.0 <= (primal - dual) / primal < tol
  np.testing.assert_allclose(primal / n, history["loss"][-1], rtol=1e-9)
  if hinge:
    assert (alpha != 0).sum(axis=1).mean() < 0.05 * k


def test_softmax_with_two_classes_is_binary_logistic():
  # With W = [w0, w1] the softmax loss is the logistic loss of
  # v = w1 - w0 (label 1 <=> class 1). At the optimum w0 = -w1 (their
  # gradients are opposite), so |W|^2 = |v|^2 / 2 and l2/2 |W|^2 =
  # (l2/2)/2 |v|^2: binary logistic with l2' = l2 / 2 has the optimum v.
  x, y = _real("breast_cancer")
  l2 = 2.0
  multi = InMemorySdca(loss="softmax", num_classes=2, l2=l2)
  multi.fit(labels=y, dense=x, epochs=500, tol=1e-12, verbose=0)
  # The softmax's order (the logistic default takes 'adaptive' at this l2:
  # another path, whose weights at a gap of 1e-12 differ by ~1e-6).
  binary = InMemorySdca(loss="logistic", l2=l2 / 2, visit_order="permutation")
  binary.fit(labels=y, dense=x, epochs=500, tol=1e-12, verbose=0)
  w = multi.dense_weights
  # Both objectives are l2' = 1-strongly convex in v, so |v - v*|^2 <= 2 x
  # the absolute gap: ~1e-5 at a relative gap of 1e-12 here; the two
  # paths' weights (softmax's heavy ball capped for all duals at once,
  # logistic's per dual) end ~2e-7 apart.
  np.testing.assert_allclose(w[:, 1] - w[:, 0], binary.dense_weights,
                             rtol=1e-6, atol=1e-6)
  np.testing.assert_allclose(w[:, 0], -w[:, 1], rtol=1e-6, atol=1e-8)
  # (Probabilities move by at most |x_i| |v - v*| / 4: here ~4e-7.)
  np.testing.assert_allclose(multi.predict(dense=x)[:, 1],
                             binary.predict(dense=x), rtol=1e-6, atol=2e-6)


@pytest.mark.parametrize("loss", MULTICLASS)
def test_sparse_and_dense_parts_share_one_table(loss):
  # The first 6 columns as CSR ids with values (zeros dropped), the rest
  # dense: the same optimum as all dense, the table split the same way.
  x, y = _real("wine")
  k, cut = 3, 6
  sparse = x[:, :cut]
  rows, cols = np.nonzero(sparse)
  indptr = np.concatenate([[0], np.cumsum(np.bincount(rows,
                                                      minlength=len(y)))])
  both = InMemorySdca(loss=loss, num_classes=k, l2=1.0)
  both.fit(labels=y, dense=x[:, cut:], indptr=indptr, indices=cols,
           values=sparse[rows, cols], num_features=cut, epochs=3000,
           tol=1e-8, verbose=0)
  dense = InMemorySdca(loss=loss, num_classes=k, l2=1.0)
  dense.fit(labels=y, dense=x, epochs=3000, tol=1e-8, verbose=0)
  assert both.sparse_weights.shape == (cut, k)
  w_both = np.vstack([both.sparse_weights, both.dense_weights])
  ours = np_objective(loss, w_both, x, y, 1.0)
  ref = np_objective(loss, dense.dense_weights, x, y, 1.0)
  assert abs(ours - ref) <= 1e-6 * ref
  np.testing.assert_allclose(
      both.decision_function(dense=x[:, cut:], indptr=indptr, indices=cols,
                             values=sparse[rows, cols]),
      x.astype(np.float64) @ w_both, rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("loss", MULTICLASS)
def test_example_weight_two_is_the_row_twice(loss):
  x, y = _real("iris")
  s = np.ones(len(y), np.float32)
  s[::3] = 2.0
  weighted = InMemorySdca(loss=loss, num_classes=3, l2=1.0)
  h = weighted.fit(labels=y, dense=x, example_weights=s, epochs=3000,
                   tol=1e-9, verbose=0)
  assert h["duality_gap"][-1] < 1e-9
  twice = InMemorySdca(loss=loss, num_classes=3, l2=1.0)
  twice.fit(labels=np.concatenate([y, y[::3]]),
            dense=np.vstack([x, x[::3]]), epochs=3000, tol=1e-9, verbose=0)
  a = np_objective(loss, weighted.dense_weights, x, y, 1.0, s)
  b = np_objective(loss, twice.dense_weights, x, y, 1.0, s)
  assert abs(a - b) <= 1e-7 * b


@pytest.mark.parametrize("loss", MULTICLASS)
def test_gap_certifies_with_l1_and_partitions(loss):
  # The gap (op objective parts) is P - D >= 0 at every epoch, and with L1
  # and CoCoA+ scaling it still falls to 0; the primal is the numpy one.
  x, y = _real("iris")
  k, l1, l2 = 3, 0.5, 1.0
  rows = sdca_ops.pack_rows(*_empty_sparse(), x, np.ones(len(y), np.float32),
                            y.astype(np.float32), 0, loss, num_classes=k)
  w = np.zeros(x.shape[1] * k)
  a = np.zeros(len(y) * k)
  gaps = []
  for epoch in range(3000):
    w, a, parts = sdca_ops.packed_solve(rows, w, a, epoch, loss, l1, l2,
                                        num_loss_partitions=2,
                                        num_classes=k)
    parts = parts.numpy()
    gap = parts[0] + parts[1] + l2 * parts[2] + l1 * parts[3]
    gaps.append(gap)
    if gap < 1e-9:
      break
  assert min(gaps) >= -1e-9 and gaps[-1] < 1e-9
  shrunk = losses.shrink_l1(w.numpy(), l1, l2).reshape(-1, k)
  primal = (np_primal(loss, x.astype(np.float64) @ shrunk, y).sum() +
            0.5 * l2 * np.sum(shrunk ** 2) + l1 * np.abs(shrunk).sum())
  np.testing.assert_allclose(parts[0] + 0.5 * l2 * parts[2] +
                             l1 * parts[3], primal, rtol=1e-12)
  assert np.count_nonzero(shrunk) < shrunk.size  # L1 zeroed some weights


def test_losses_module_matches_the_op_objective():
  x, y = _real("iris")
  rng = np.random.default_rng(0)
  for loss in MULTICLASS:
    w = rng.normal(size=(x.shape[1], 3))
    p = rng.dirichlet(np.ones(3), size=len(y))
    a = np.eye(3)[y] - p
    rows = sdca_ops.pack_rows(*_empty_sparse(), x,
                              np.ones(len(y), np.float32),
                              y.astype(np.float32), 0, loss, num_classes=3)
    _, _, parts = sdca_ops.packed_solve(rows, w.ravel(), a.ravel(), 0, loss,
                                        0.0, 1.0, num_passes=0,
                                        num_classes=3)
    z = x.astype(np.float64) @ w
    np.testing.assert_allclose(losses.primal(loss, z, y).sum(),
                               parts.numpy()[0], rtol=1e-12)
    np.testing.assert_allclose(losses.dual(loss, a, y).sum(),
                               parts.numpy()[1], rtol=1e-12)
    np.testing.assert_allclose(losses.primal(loss, z, y),
                               np_primal(loss, z, y), rtol=1e-12)
    # The Fenchel-Young gap of every row is >= 0.
    fy = losses.primal(loss, z, y) + losses.dual(loss, a, y) + (a * z).sum(1)
    assert fy.min() >= -1e-12
    # The TensorFlow spelling computes the same.
    np.testing.assert_allclose(
        losses.primal(loss, tf.constant(z), tf.constant(y)).numpy(),
        losses.primal(loss, z, y), rtol=1e-12)
    np.testing.assert_allclose(
        losses.dual(loss, tf.constant(a), tf.constant(y)).numpy(),
        losses.dual(loss, a, y), rtol=1e-12)
  z = rng.normal(size=(5, 4))
  np.testing.assert_allclose(
      losses.activation("softmax", z),
      np.exp(z) / np.exp(z).sum(axis=1, keepdims=True), rtol=1e-12)
  np.testing.assert_allclose(losses.activation("multiclass_hinge", z), z)


# ----------------------------------------------------------------- errors
@pytest.mark.parametrize("bad,row", [(-1.0, 2), (3.0, 4), (1.5, 0)])
@pytest.mark.parametrize("loss", ["softmax", "multiclass_hinge"])
def test_bad_labels_are_named(loss, bad, row):
  x, y = _real("iris")
  labels = y.astype(np.float32)
  labels[row] = bad
  model = InMemorySdca(loss=loss, num_classes=3)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"example_labels\[{row}\] = {bad:g} must be an "
                     r"integer class id in \[0, 3\)"):
    model.fit(labels=labels, dense=x, epochs=1, verbose=0)


@pytest.mark.parametrize("loss", MULTICLASS)
@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("entry,value,why", [
    (1, np.nan, "nan"),          # not finite
    (0, 1.5, "1.5"),             # the label's entry above 1
    (0, -0.25, "-0.25"),         # the label's entry below 0
    (2, 0.5, "0.5"),             # another class's entry above 0
    (2, -np.inf, "-inf"),        # not finite, off the label
])
def test_a_bad_dual_block_is_named(loss, threads, entry, value, why):
  # Row 3 (label 0, K = 3) gets one bad entry; the others are valid blocks
  # e_y - p. The op checks every block as it copies the input (one sweep)
  # and names the row, whatever the thread count.
  x, y = _real("iris")
  y = y.astype(np.float32)
  n, d = x.shape
  rows = sdca_ops.pack_rows(*_empty_sparse(), x, np.ones(n, np.float32), y,
                            0, loss, num_threads=threads, num_classes=3)
  duals = np.zeros((n, 3))
  duals[np.arange(n), y.astype(int)] = 0.5
  duals[np.arange(n), (y.astype(int) + 1) % 3] = -0.5
  r = int(np.flatnonzero(y == 0)[3])
  col = (0 + entry) % 3
  good = duals.copy()
  duals[r, col] = value
  if col != 0 and np.isfinite(value):
    duals[r, 0] -= value  # still summing to 0: only the bound is wrong
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=rf"duals\[{r}, :\] = \[.*{why}.*\] is not a valid "
                     rf"dual block of {loss} for class 0"):
    sdca_ops.packed_solve(rows, np.zeros(d * 3), duals.reshape(-1), 0, loss,
                          0.0, 1.0, num_classes=3)
  # The valid table passes, and the pass keeps every block valid.
  _, out, _ = sdca_ops.packed_solve(rows, np.zeros(d * 3), good.reshape(-1),
                                    0, loss, 0.0, 1.0, num_classes=3)
  out = out.numpy().reshape(n, 3)
  p = np.eye(3)[y.astype(int)] - out
  assert p.min() >= -1e-12 and abs(p.sum(axis=1) - 1).max() < 1e-12


def test_num_classes_below_two_is_refused():
  for k in (None, 1, 0):
    with pytest.raises(ValueError, match="num_classes"):
      InMemorySdca(loss="softmax", num_classes=k)
  with pytest.raises(ValueError, match="num_classes must be 1"):
    InMemorySdca(loss="logistic", num_classes=3)
  # The op's own check, past the Python wrappers.
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="num_classes = 1 must be >= 2 for softmax_loss"):
    load_ops().tf_sdca_pack_rows(
        *_empty_sparse(), np.zeros((1, 1), np.float32),
        np.ones(1, np.float32), np.zeros(1, np.float32),
        np.zeros(0, np.int64),
        loss_type="softmax_loss", num_sparse_features=0, num_classes=1)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="num_classes = 3 must be 1 for logistic_loss"):
    load_ops().tf_sdca_pack_rows(
        *_empty_sparse(), np.zeros((1, 1), np.float32),
        np.ones(1, np.float32), np.zeros(1, np.float32),
        np.zeros(0, np.int64),
        loss_type="logistic_loss", num_sparse_features=0, num_classes=3)


def test_unsupported_options_are_refused():
  with pytest.raises(ValueError, match="visit_order"):
    InMemorySdca(loss="softmax", num_classes=3, visit_order="adaptive")
  with pytest.raises(ValueError, match="visit_order"):
    InMemorySdca(loss="softmax", num_classes=3, visit_order="shrinking")
  x, y = _real("iris")
  with pytest.raises(ValueError, match="mini-batches"):
    InMemorySdca(loss="softmax", num_classes=3).fit(
        labels=y, dense=x, batch_size=10, verbose=0)
  # Packed for K = 3, solved as K = 4; duals off the simplex.
  rows = sdca_ops.pack_rows(*_empty_sparse(), x, np.ones(len(y), np.float32),
                            y.astype(np.float32), 0, "softmax_loss",
                            num_classes=3)
  with pytest.raises(tf.errors.InvalidArgumentError, match="num_classes 3"):
    sdca_ops.packed_solve(rows, np.zeros(16), np.zeros(len(y) * 4), 0,
                          "softmax_loss", 0.0, 1.0, num_classes=4)
  duals = np.zeros(len(y) * 3)
  duals[5 * 3 + 0] = 0.5  # row 5's block sums to 0.5
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"duals\[5, :\] = \[0.5, 0, 0\]"):
    sdca_ops.packed_solve(rows, np.zeros(12), duals, 0, "softmax_loss", 0.0,
                          1.0, num_classes=3)
  with pytest.raises(tf.errors.UnimplementedError,
                     match="visit_order 'shrinking' is not available for "
                     "softmax_loss"):
    load_ops().tf_sdca_packed_solve(
        rows, np.zeros(12), np.zeros(len(y) * 3), 0,
        loss_type="softmax_loss", l1=0.0, l2=1.0, num_classes=3,
        visit_order="shrinking")
  # The mini-batch door does not take them.
  with pytest.raises(ValueError, match="loss_type must be one of"):
    sdca_ops._check_options("softmax_loss", 0.0, 1.0, 1, 1, "permutation",
                            1.0, 0)


def test_row_chunks_train_as_the_arrays_whole():
  from tf_sdca.engine import RowChunks  # pylint: disable=import-outside-toplevel
  x, y = _real("wine")
  chunks = RowChunks([dict(labels=y[:100], dense=x[:100]),
                      dict(labels=y[100:], dense=x[100:])],
                     num_examples=len(y), dense_dim=x.shape[1])
  whole = InMemorySdca(loss="softmax", num_classes=3, seed=3)
  whole.fit(labels=y, dense=x, epochs=5, verbose=0)
  pieces = InMemorySdca(loss="softmax", num_classes=3, seed=3)
  pieces.fit(rows=chunks, epochs=5, verbose=0)
  np.testing.assert_array_equal(pieces.dense_weights, whole.dense_weights)
  np.testing.assert_array_equal(pieces.duals, whole.duals)
  assert pieces.duals.shape == (len(y), 3)


_LOCK_FREE_SOLVES = {}  # (loss, l1, threads) -> (primal, W)


def _digits_lock_free_solve(loss, l1, num_threads):
  """(primal, W [64, 10]) of Digits (8x8 pixel intensities as they come,
  0..16) packed for `num_threads` threads (the frequent pixels private per
  thread, the rare ones shared ids), row weights 1..3, solved to the
  test's certified gap. The op is deterministic for a thread count, so each
  (loss, l1, threads) is solved once per session: the one-thread optimum,
  which both thread counts' cases compare with, was solved twice."""
  key = (loss, l1, num_threads)
  if key in _LOCK_FREE_SOLVES:
    return _LOCK_FREE_SOLVES[key]
  data = datasets.load_digits()
  x = data.data.astype(np.float32)
  y = data.target.astype(np.float32)
  n, d = x.shape
  rows_i, cols = np.nonzero(x)
  row_ptr = np.searchsorted(rows_i, np.arange(n + 1)).astype(np.int64)
  ids = cols.astype(np.int64)
  values = x[rows_i, cols]
  s = (1 + np.arange(n) % 3).astype(np.float32)
  l2, tol = _lock_free_l2_tol(loss)
  rows = sdca_ops.pack_rows(row_ptr, ids, values,
                            np.zeros((n, 0), np.float32), s, y, d, loss,
                            num_threads=num_threads, num_classes=10)
  w, alpha = np.zeros(d * 10), np.zeros(n * 10)
  for epoch in range(3000):
    w, alpha, parts = sdca_ops.packed_solve(
        rows, w, alpha, epoch, loss, l1, l2, num_classes=10)
    w, alpha = w.numpy(), alpha.numpy()
    primal, gap = objective_and_gap(parts.numpy(), loss, l1, l2)
    if gap <= tol * primal:
      break
  assert gap <= tol * primal, (num_threads, epoch, gap / primal)
  _LOCK_FREE_SOLVES[key] = primal, w.reshape(d, 10)
  return _LOCK_FREE_SOLVES[key]


def _lock_free_l2_tol(loss):
  # The hinge's gap falls sublinearly: a larger l2 and a looser certificate.
  return (3000.0, 1e-6) if loss == "multiclass_hinge_loss" else (30.0, 1e-9)


@pytest.mark.parametrize("loss,l1", [("softmax_loss", 0.0),
                                     ("softmax_loss", 0.05),
                                     ("multiclass_hinge_loss", 0.0)])
@pytest.mark.parametrize("threads", [2, 3])
def test_lock_free_threads_reach_the_one_thread_optimum(loss, l1, threads):
  """Digits packed for several threads (`_digits_lock_free_solve`): the
  threads' epochs reach one thread's optimum, certified by the exact gap at
  the threads' own (W, alpha)."""
  l2, tol = _lock_free_l2_tol(loss)
  one_primal, one_w = _digits_lock_free_solve(loss, l1, 1)
  primal, w = _digits_lock_free_solve(loss, l1, threads)
  assert abs(primal - one_primal) <= 2 * tol * one_primal
  if loss != "multiclass_hinge_loss":  # its optimum need not be unique
    shrunk = lambda v: np.sign(v) * np.maximum(np.abs(v) - l1 / l2, 0)
    np.testing.assert_allclose(shrunk(w), shrunk(one_w),
                               atol=1e-3 * np.abs(shrunk(one_w)).max())


def test_threads_for_a_multiclass_loss_are_not_taken_silently():
  """Two threads run a multiclass loss (same optimum) but were slower than
  one on 2 cores: `fit` says so."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(8192, 4)).astype(np.float32)
  y = np.argmax(x[:, :3], axis=1)
  fits = {}
  for threads in (1, 2):
    model = InMemorySdca(loss="softmax", num_classes=3, l2=1.0,
                         num_threads=threads)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      history = model.fit(labels=y, dense=x, epochs=200, tol=1e-9, verbose=0)
    said = [str(w.message) for w in caught
            if "compare-and-swap" in str(w.message)]
    assert len(said) == (threads - 1), said
    assert history["duality_gap"][-1] < 1e-9
    fits[threads] = history["loss"][-1]
  assert abs(fits[2] - fits[1]) <= 1e-9 * fits[1]

"""Visiting orders of a stream of mini-batches: every call of the mini-batch
op draws a fresh order (reproducibly from one seed), and how many passes a
stream of batches needs next to one full batch, on scikit-learn's data."""
import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize
from sklearn.datasets import load_breast_cancer, load_wine

import tf_sdca
from sdca_testutil import heart_scale
from tf_sdca.sdca_model import SdcaModel

TOL = 1e-6


def _tiny_examples(n=50, seed=0):
  x = np.random.default_rng(seed).normal(size=(n, 3)).astype(np.float32)
  y = (x[:, 0] > 0).astype(np.float32)
  return dict(sparse_features=[], dense_features=[x],
              example_weights=np.ones(n, np.float32), example_labels=y,
              example_ids=[f"r{i}" for i in range(n)])


def _model(examples, d, l2=1.0, seed=0, carry_over=0.0):
  w = tf.Variable(tf.zeros([d]))
  return SdcaModel(examples, dict(sparse_features_weights=[],
                                  dense_features_weights=[w]),
                   dict(loss_type="logistic_loss",
                        symmetric_l2_regularization=l2, seed=seed,
                        carry_over=carry_over))


@pytest.mark.parametrize("in_function", [False, True])
def test_each_minimize_call_draws_a_fresh_order_reproducibly(in_function):
  # The second call starts from exactly the first call's inputs (the state
  # is reset to empty tables and zero weights), so only the order can make
  # it differ. Before the op took a call index, the seed depended on the
  # input duals only, and both calls returned the same state.
  ex = _tiny_examples()
  model = _model(ex, 3, seed=7)
  step = tf.function(model.minimize) if in_function else model.minimize
  empty = model.get_state()
  del empty["calls"]  # the call count goes on: only the data state resets
  first = step().numpy()
  model.set_state(empty)
  second = step().numpy()
  assert np.abs(first - second).max() > 1e-3
  # A new model from the same seed repeats the first call bit for bit.
  again = _model(ex, 3, seed=7)
  step = tf.function(again.minimize) if in_function else again.minimize
  np.testing.assert_array_equal(step().numpy(), first)


def test_the_op_mixes_its_call_index_into_the_seed():
  ex = _tiny_examples()
  args = dict(sparse_example_indices=[], sparse_feature_indices=[],
              sparse_feature_values=[], dense_features=ex["dense_features"],
              example_weights=ex["example_weights"],
              example_labels=ex["example_labels"], sparse_indices=[],
              sparse_weights=[], dense_weights=[np.zeros(3, np.float32)],
              example_state_data=np.zeros((50, 4), np.float32),
              loss_type="logistic_loss", l1=0.0, l2=1.0, seed=3)
  a = tf_sdca.sdca_optimizer(**args, call_index=0)[0].numpy()
  b = tf_sdca.sdca_optimizer(**args, call_index=1)[0].numpy()
  c = tf_sdca.sdca_optimizer(**args, call_index=1)[0].numpy()
  assert np.abs(a - b).max() > 1e-3
  np.testing.assert_array_equal(b, c)
  with pytest.raises((ValueError, tf.errors.InvalidArgumentError),
                     match="call_index"):
    tf_sdca.sdca_optimizer(**args, call_index=[1, 2])


# --------------------------------------------------------------------------
# Passes to a relative suboptimality of 1e-6.
# --------------------------------------------------------------------------

def _standardized(loader):
  x, y = loader(return_X_y=True)
  x = (x - x.mean(0)) / x.std(0)
  if y.max() > 1:  # wine: class 0 against the rest
    y = (y == 0)
  rows = np.random.default_rng(0).permutation(len(y))  # shuffled once
  return x[rows].astype(np.float32), y[rows].astype(np.float32)


def _primal(w, x, y, l2):
  z = x.astype(np.float64) @ w
  return np.logaddexp(0.0, -(2.0 * y - 1.0) * z).sum() + 0.5 * l2 * w @ w


def _optimum(x, y, l2):
  a, s = x.astype(np.float64), 2.0 * y.astype(np.float64) - 1.0

  def f(w):
    z = a @ w
    return (np.logaddexp(0.0, -s * z).sum() + 0.5 * l2 * w @ w,
            a.T @ (-s / (1.0 + np.exp(s * z))) + l2 * w)

  return minimize(f, np.zeros(a.shape[1]), jac=True, method="L-BFGS-B",
                  options=dict(ftol=1e-16, gtol=1e-12, maxiter=10000)).fun


def _passes_to_tol(x, y, l2, num_batches, redeal, max_passes,
                   carry_over=0.0):
  """Epochs of the stream until P(w) is within TOL (relative) of P(w*);
  None if not within max_passes. `redeal` deals the rows into new batches
  every epoch; otherwise the batches are the same consecutive rows.
  `carry_over`: SdcaModel's option."""
  n, d = x.shape
  best = _optimum(x, y, l2)
  size = -(-n // num_batches)

  def batch(rows):
    return dict(sparse_features=[], dense_features=[x[rows]],
                example_weights=np.ones(len(rows), np.float32),
                example_labels=y[rows],
                example_ids=tf.constant([b"%d" % r for r in rows]))

  fixed = [batch(np.arange(i, min(i + size, n))) for i in range(0, n, size)]
  model = _model(None, d, l2=l2, carry_over=carry_over)
  rng = np.random.default_rng(1)
  for epoch in range(1, max_passes + 1):
    if redeal:
      order = rng.permutation(n)
      batches = [batch(order[i:i + size]) for i in range(0, n, size)]
    else:
      batches = fixed
    for b in batches:
      model.minimize(examples=b)
    w = model._dense[0].slots[0].numpy()
    if (_primal(w, x, y, l2) - best) / best < TOL:
      return epoch
  return None


def _heart_scale():
  """heart_scale (Debian's liblinear-tools) as it ships, scaled to [-1, 1]
  by LIBSVM, with a column of ones for the intercept; labels {0, 1};
  shuffled once."""
  x, y = heart_scale()
  x = np.hstack([x, np.ones((len(y), 1), np.float32)])
  rows = np.random.default_rng(0).permutation(len(y))
  return x[rows], (y[rows] > 0).astype(np.float32)


DATA = {"breast_cancer": lambda: _standardized(load_breast_cancer),
        "wine": lambda: _standardized(load_wine),
        "heart_scale": _heart_scale}


@pytest.mark.parametrize("name", sorted(DATA))
def test_batches_dealt_anew_every_epoch_converge_like_one_full_batch(name):
  # Measured (l2 = 1, six batches): breast_cancer 40 passes for the full
  # batch, 41 streamed; wine 21 and 20.
  x, y = DATA[name]()
  full = _passes_to_tol(x, y, 1.0, 1, False, 200)
  assert full is not None
  streamed = _passes_to_tol(x, y, 1.0, 6, True, int(1.5 * full))
  assert streamed is not None, f"not within 1.5 x {full} passes"


# Measured (l2 = 1, one batch against six fixed ones, passes to 1e-6):
# breast_cancer 40 against 96 plainly, 40 with half of each call's rows
# held back; wine 21 against 39 and 20; heart_scale 19 against 162 and 18
# (g3doc/sdca_model.md, 'Streaming orders'). 'auto' holds back B / (B + 6) for B batches an epoch: 0.5 here.
@pytest.mark.parametrize("carry_over", [
    0.5, "auto",
    pytest.param(0.0, marks=pytest.mark.xfail(strict=True, reason=(
        "fixed consecutive batches are a block-cyclic order: each batch is "
        "visited in a fresh order every call, yet without held-back rows "
        "the stream needs 2-2.5x the passes of one batch")))])
@pytest.mark.parametrize("name", sorted(DATA))
def test_fixed_consecutive_batches_converge_like_one_full_batch(name,
                                                                 carry_over):
  x, y = DATA[name]()
  full = _passes_to_tol(x, y, 1.0, 1, False, 200)
  streamed = _passes_to_tol(x, y, 1.0, 6, False, int(1.5 * full),
                            carry_over=carry_over)
  assert streamed is not None, f"not within 1.5 x {full} passes"


@pytest.mark.parametrize("num_batches", [2, 12])
def test_auto_carry_over_fits_the_number_of_batches(num_batches):
  # 'auto' holds back B / (B + 6) of the rows for B batches an epoch, B
  # read from the dual table's size. Measured (breast_cancer, l2 = 1):
  # 2, 3, 6, 12 fixed batches 47, 42, 42, 42 passes, one batch 40; wine
  # 18, 22, 21, 21 against 21. A fixed 0.75 took 98 passes on two batches.
  x, y = DATA["breast_cancer"]()
  full = _passes_to_tol(x, y, 1.0, 1, False, 200)
  streamed = _passes_to_tol(x, y, 1.0, num_batches, False, int(1.5 * full),
                            carry_over="auto")
  assert streamed is not None, f"not within 1.5 x {full} passes"


@pytest.mark.parametrize("loss, spread", [("logistic_loss", 6.0),
                                          ("hinge_loss", 4.0)])
def test_auto_carry_over_holds_its_share_of_each_call(loss, spread):
  # 'auto' holds back a random f of each call's rows (its batch's and the
  # rows held before), f = B / (B + 6), B / (B + 4) for the hinge loss
  # (held rows the hinge's rows at a bound leave fewer to move: median
  # passes of five seeds on eight batches of breast_cancer 124 -> 56,
  # g3doc/sdca_model.md), with B = the examples in the dual table over
  # the batch's rows (the table as the call finds it). Each call's held
  # rows are a binomial draw: counted
  # here against f times the rows the call had, within 4.5 sigma.
  x, y = DATA["breast_cancer"]()
  n, d = x.shape
  size = 72  # eight batches
  w = tf.Variable(tf.zeros([d]))
  model = SdcaModel(None, dict(sparse_features_weights=[],
                               dense_features_weights=[w]),
                    dict(loss_type=loss, symmetric_l2_regularization=1.0,
                         carry_over="auto"))
  held, stored, checked = 0, 0, 0
  for _ in range(3):
    for s in range(0, n, size):
      rows = np.arange(s, min(n, s + size))
      model.minimize(examples=dict(
          sparse_features=[], dense_features=[x[rows]],
          example_weights=np.ones(len(rows), np.float32),
          example_labels=y[rows],
          example_ids=tf.constant([b"%d" % r for r in rows])))
      b = stored / len(rows)  # the table before this call's rows
      stored = min(n, stored + len(rows))
      f = 0.0 if b < 2 else min(b / (b + spread), 0.8)
      had = len(rows) + held
      held = len(model.get_state()["held"]["keys"])
      sigma = np.sqrt(had * f * (1 - f))
      assert abs(held - f * had) <= 4.5 * sigma + 1e-9, (b, f, had, held)
      checked += f > 0
  assert checked >= 20
  # The two shares are far apart at B = 8 (0.57 against 0.67): 1.33
  # batches held against 2.
  assert held > (1.6 if spread == 4.0 else 1.0) * size
  assert held < (2.5 if spread == 4.0 else 1.7) * size

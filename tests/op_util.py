"""Shared helpers for the op tests: numpy references of the losses and a
small driver that trains with the op (ours or TensorFlow's) on numpy data."""
import numpy as np
import tensorflow as tf

import tf_sdca

LOSSES = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "absolute_loss", "poisson_loss")
BINARY = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")


def internal_label(loss, y):
  return 2.0 * y - 1.0 if loss in BINARY else y


def primal_loss(loss, z, y, gamma=1.0):
  """phi(z) per example, float64; y as given to the op."""
  y = internal_label(loss, np.asarray(y, np.float64))
  z = np.asarray(z, np.float64)
  if loss == "logistic_loss":
    return np.logaddexp(0.0, -y * z)
  if loss == "squared_loss":
    return 0.5 * (z - y) ** 2
  if loss == "hinge_loss":
    return np.maximum(0.0, 1.0 - y * z)
  if loss == "smooth_hinge_loss":
    m = y * z
    return np.where(m >= 1, 0.0, np.where(m <= 1 - gamma, 1 - m - gamma / 2,
                                          (1 - m) ** 2 / (2 * gamma)))
  if loss == "absolute_loss":
    return np.abs(z - y)
  if loss == "poisson_loss":
    return np.exp(z) - y * z
  raise ValueError(loss)


def dual_loss(loss, a, y, gamma=1.0):
  """phi*(-a) per example, float64 (+inf outside the domain)."""
  y = internal_label(loss, np.asarray(y, np.float64))
  a = np.asarray(a, np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    if loss in BINARY:
      b = a * y
      inside = (b >= -1e-12) & (b <= 1 + 1e-12)
      b = np.clip(b, 0, 1)
      if loss == "logistic_loss":
        v = (np.where(b > 0, b * np.log(b), 0.0) +
             np.where(b < 1, (1 - b) * np.log1p(-b), 0.0))
      elif loss == "hinge_loss":
        v = -b
      else:
        v = -b + 0.5 * gamma * b * b
      return np.where(inside, v, np.inf)
    if loss == "squared_loss":
      return 0.5 * a * a - a * y
    if loss == "absolute_loss":
      return np.where(np.abs(a) <= 1 + 1e-12, -a * y, np.inf)
    if loss == "poisson_loss":
      t = y - a
      return np.where(t > 0, t * np.log(t) - t, np.where(t == 0, 0.0, np.inf))
  raise ValueError(loss)


def make_labels(loss, n, rng):
  if loss in BINARY:
    return (rng.random(n) < 0.4).astype(np.float32)
  if loss == "poisson_loss":
    return rng.poisson(1.5, n).astype(np.float32)
  return rng.normal(size=n).astype(np.float32)


def make_problem(n=60, dense_dim=3, vocab=25, per_row=3, seed=0, loss=None):
  """Dense [n, d] + one sparse group of `per_row` distinct ids per row."""
  rng = np.random.default_rng(seed)
  dense = (rng.normal(size=(n, dense_dim)) * 0.5).astype(np.float32)
  ids = np.stack([rng.choice(vocab, per_row, replace=False) for _ in range(n)])
  values = rng.uniform(0.5, 1.5, size=ids.shape).astype(np.float32)
  labels = make_labels(loss, n, rng) if loss else None
  return dict(dense=dense, ids=ids.astype(np.int64), values=values,
              labels=labels, vocab=vocab)


class Trainer:
  """Holds weights and state; runs the op on row subsets of a problem."""

  def __init__(self, problem, loss, l1=0.0, l2=1.0, weights=None,
               use_tf=False, **op_kwargs):
    self.p = problem
    self.loss, self.l1, self.l2 = loss, l1, l2
    n = problem["dense"].shape[0]
    self.example_weights = (np.ones(n, np.float32) if weights is None else
                            np.asarray(weights, np.float32))
    self.w_sparse = np.zeros(problem["vocab"], np.float64)
    self.w_dense = np.zeros(problem["dense"].shape[1], np.float64)
    self.state = np.zeros((n, 4), np.float32)
    self.use_tf = use_tf
    self.op_kwargs = op_kwargs

  def step(self, rows):
    rows = np.asarray(rows)
    ids = self.p["ids"][rows]
    k = ids.shape[1]
    uniq = np.unique(ids)
    args = dict(
        sparse_example_indices=[np.repeat(np.arange(len(rows)), k)],
        sparse_feature_indices=[ids.ravel()],
        sparse_feature_values=[self.p["values"][rows].ravel()],
        dense_features=[self.p["dense"][rows]],
        example_weights=self.example_weights[rows],
        example_labels=self.p["labels"][rows],
        sparse_indices=[uniq],
        sparse_weights=[self.w_sparse[uniq].astype(np.float32)],
        dense_weights=[self.w_dense.astype(np.float32)],
        example_state_data=self.state[rows],
        loss_type=self.loss, l1=self.l1, l2=self.l2)
    if self.use_tf:
      args = {k: [tf.constant(t) for t in v] if isinstance(v, list) else v
              for k, v in args.items()}
      out = tf.raw_ops.SdcaOptimizerV2(
          **args, num_loss_partitions=self.op_kwargs.get(
              "num_loss_partitions", 1),
          num_inner_iterations=1, adaptive=False)
    else:
      out = tf_sdca.sdca_optimizer(**args, **self.op_kwargs)
    state, d_sparse, d_dense = out
    self.state[rows] = state.numpy()
    self.w_sparse[uniq] += d_sparse[0].numpy()
    self.w_dense += d_dense[0].numpy()
    return state.numpy()

  def shrunk(self, w):
    return np.sign(w) * np.maximum(np.abs(w) - self.l1 / self.l2, 0.0)

  def margins(self):
    """x_i . shrink(w) for every row, float64."""
    ws, wd = self.shrunk(self.w_sparse), self.shrunk(self.w_dense)
    return (self.p["dense"].astype(np.float64) @ wd +
            (ws[self.p["ids"]] * self.p["values"]).sum(1))

  def primal(self):
    ws, wd = self.shrunk(self.w_sparse), self.shrunk(self.w_dense)
    return (np.sum(self.example_weights *
                   primal_loss(self.loss, self.margins(), self.p["labels"],
                               self.op_kwargs.get("gamma", 1.0))) +
            0.5 * self.l2 * (ws @ ws + wd @ wd) +
            self.l1 * (np.abs(ws).sum() + np.abs(wd).sum()))

  def _v(self):
    """v = sum_i s_i alpha_i x_i, split into (sparse, dense) parts."""
    a = self.state[:, 0].astype(np.float64)
    s = self.example_weights.astype(np.float64)
    v_dense = (s * a) @ self.p["dense"].astype(np.float64)
    v_sparse = np.zeros(self.p["vocab"])
    np.add.at(v_sparse, self.p["ids"],
              (s * a)[:, None] * self.p["values"].astype(np.float64))
    return v_sparse, v_dense

  def dual(self):
    """D(alpha) = -sum s phi*(-alpha) - g*(v), from the duals alone."""
    v = np.concatenate(self._v())
    # g*(v) = sum (|v| - l1)_+^2 / (2 l2)
    g_star = np.sum(np.maximum(np.abs(v) - self.l1, 0.0) ** 2) / (2 * self.l2)
    a = self.state[:, 0].astype(np.float64)
    return -np.sum(self.example_weights * dual_loss(
        self.loss, a, self.p["labels"], self.op_kwargs.get("gamma", 1.0))
                   ) - g_star

  def weights_from_duals(self):
    """w(alpha) = v / l2 (unshrunk), to compare with the accumulated weights."""
    v_sparse, v_dense = self._v()
    return v_sparse / self.l2, v_dense / self.l2

"""Shared helpers of the numerical op tests: float64 numpy references of the
losses and their conjugates, the 1-D dual subproblem solved by scipy, the op
arguments for one example (or any rows of a small problem), and a driver
that trains with our op or with `tf.raw_ops.SdcaOptimizerV2`.

Everything here is written from the formulas in the op's documentation, not
from the C++ code, so that the tests compare two independent computations.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize_scalar

import tf_sdca
from tf_sdca.data.libsvm import read_libsvm

# Real data in Debian packages, which .ci/setup unpacks here (from the
# package registry, never at test time).
DEBIAN = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                      ".cache", "debian")
HEART_SCALE = os.path.join(DEBIAN, "usr", "share", "doc", "liblinear-tools",
                           "examples", "heart_scale")
RANDHIE = os.path.join(DEBIAN, "usr", "lib", "python3", "dist-packages",
                       "statsmodels", "datasets", "randhie", "randhie.csv")

LOSSES = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "absolute_loss", "poisson_loss")
BINARY = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")
# The losses whose derivative exists everywhere: for them the updated dual
# satisfies alpha = -phi'(w.x) exactly after a one-example step.
SMOOTH = ("logistic_loss", "squared_loss", "smooth_hinge_loss",
          "poisson_loss")
# The losses `tf.raw_ops.SdcaOptimizerV2` has too (its smooth hinge has
# gamma = 1; it has no absolute loss).
TF_LOSSES = ("logistic_loss", "squared_loss", "hinge_loss",
             "smooth_hinge_loss", "poisson_loss")


# --------------------------------------------------------------------------
# Losses, in float64.
# --------------------------------------------------------------------------

def internal_label(loss, y):
    """The label the formulas use: {0, 1} -> {-1, +1} for binary losses."""
    y = np.asarray(y, np.float64)
    return 2.0 * y - 1.0 if loss in BINARY else y


def primal_loss(loss, z, y, gamma=1.0):
    """phi(z) per example; `y` as given to the op."""
    y = internal_label(loss, y)
    z = np.asarray(z, np.float64)
    if loss == "logistic_loss":
        return np.logaddexp(0.0, -y * z)
    if loss == "squared_loss":
        return 0.5 * (z - y) ** 2
    if loss == "hinge_loss":
        return np.maximum(0.0, 1.0 - y * z)
    if loss == "smooth_hinge_loss":
        m = y * z
        return np.where(m >= 1.0, 0.0,
                        np.where(m <= 1.0 - gamma, 1.0 - m - gamma / 2.0,
                                 (1.0 - m) ** 2 / (2.0 * gamma)))
    if loss == "absolute_loss":
        return np.abs(z - y)
    if loss == "poisson_loss":
        return np.exp(z) - y * z
    raise ValueError(loss)


def primal_loss_derivative(loss, z, y, gamma=1.0):
    """phi'(z) for the smooth losses."""
    y = internal_label(loss, y)
    z = np.asarray(z, np.float64)
    if loss == "logistic_loss":
        return -y / (1.0 + np.exp(y * z))
    if loss == "squared_loss":
        return z - y
    if loss == "smooth_hinge_loss":
        m = y * z
        return np.where(m >= 1.0, 0.0,
                        np.where(m <= 1.0 - gamma, -y, -y * (1.0 - m) / gamma))
    if loss == "poisson_loss":
        return np.exp(z) - y
    raise ValueError(f"{loss} has no derivative everywhere")


def dual_loss(loss, a, y, gamma=1.0):
    """phi*(-a) per example; +inf outside the dual domain."""
    y = internal_label(loss, y)
    a = np.asarray(a, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        if loss in BINARY:
            b = a * y
            # 1e-7: duals come back from float32 state.
            inside = (b >= -1e-7) & (b <= 1.0 + 1e-7)
            b = np.clip(b, 0.0, 1.0)
            if loss == "logistic_loss":
                v = (np.where(b > 0, b * np.log(b), 0.0) +
                     np.where(b < 1, (1.0 - b) * np.log1p(-b), 0.0))
            elif loss == "hinge_loss":
                v = -b
            else:
                v = -b + 0.5 * gamma * b * b
            return np.where(inside, v, np.inf)
        if loss == "squared_loss":
            return 0.5 * a * a - a * y
        if loss == "absolute_loss":
            return np.where(np.abs(a) <= 1.0 + 1e-7, -np.clip(a, -1, 1) * y,
                            np.inf)
        if loss == "poisson_loss":
            t = y - a
            return np.where(t > 0, t * np.log(t) - t,
                            np.where(t > -1e-7, 0.0, np.inf))
    raise ValueError(loss)


def shrink(w, l1, l2):
    """The weights used for prediction: sign(w) max(|w| - l1/l2, 0)."""
    w = np.asarray(w, np.float64)
    return np.sign(w) * np.maximum(np.abs(w) - l1 / l2, 0.0)


def dual_subproblem(loss, y, alpha, wx, q, gamma=1.0):
    """The function f(a) = -phi*(-a) - (a - alpha) wx - q/2 (a - alpha)^2
    that one coordinate step maximises (-inf outside the dual domain)."""
    def f(a):
        return (-dual_loss(loss, a, y, gamma) - (a - alpha) * wx -
                0.5 * q * (a - alpha) ** 2)
    return f


def reference_dual_step(loss, y, alpha, wx, q, gamma=1.0):
    """The maximiser of the 1-D dual subproblem, by scipy's bounded scalar
    search on the dual domain (no closed form involved).

    Binary losses are searched in b = y a in [0, 1]; Poisson in
    s = log(y - a) (the domain is a < y and the maximiser can be within
    1e-20 of y); the others in a.
    """
    f = dual_subproblem(loss, y, alpha, wx, q, gamma)
    yi = float(internal_label(loss, y))
    if loss in BINARY:
        bounds, to_a = (0.0, 1.0), lambda b: b * yi
    elif loss == "absolute_loss":
        bounds, to_a = (-1.0, 1.0), lambda a: a
    elif loss == "poisson_loss":
        bounds, to_a = (-60.0, 10.0), lambda s: yi - np.exp(s)
    else:
        # f is a concave quadratic with curvature 1 + q: the maximiser lies
        # within |y - wx| / (1 + q) of alpha.
        r = abs(yi - wx - alpha) + 1.0
        bounds, to_a = (alpha - r, alpha + r), lambda a: a
    res = minimize_scalar(lambda u: -float(f(to_a(u))), bounds=bounds,
                          method="bounded", options=dict(xatol=1e-14,
                                                         maxiter=2000))
    best = to_a(res.x)
    # The bounded search never evaluates the end points: a clipped optimum
    # (hinge losses, absolute loss) sits on one of them.
    for u in bounds:
        if loss == "poisson_loss":
            continue
        if f(to_a(u)) >= f(best):
            best = to_a(u)
    return float(best)


def _debian_file(path, package):
    """`path`, or a skip of the calling test if .ci/setup could not fetch
    `package`."""
    if not os.path.exists(path):
        pytest.skip(f"{os.path.basename(path)} is missing: .ci/setup could "
                    f"not fetch Debian's {package} (apt-get download)")
    return path


def heart_scale_path():
    """The path of heart_scale (Statlog heart disease: 270 patients, 13
    features scaled to [-1, 1] by LIBSVM's svm-scale, labels +1 / -1);
    skips the calling test if .ci/setup could not fetch it."""
    return _debian_file(HEART_SCALE, "liblinear-tools")


def rand_health_insurance():
    """The RAND Health Insurance Experiment's doctor visits, as Debian's
    python3-statsmodels ships them (read as CSV): (float64 [20190, 9]
    covariates in natural units, float64 [20190] counts of outpatient
    visits to a doctor, 0-77). The covariates: ln(coinsurance + 1) (0-4.6),
    an individual-deductible flag, ln(participation incentive) (0-7.2),
    ln(maximum expenditure) (0-8.3), a physical-limitation flag, the number
    of chronic diseases (0-58.6), and flags for good, fair and poor
    self-rated health."""
    table = np.genfromtxt(_debian_file(RANDHIE, "python3-statsmodels"),
                          delimiter=",", names=True)
    columns = table.dtype.names
    assert columns[0] == "mdvis" and len(table) == 20190, columns
    x = np.stack([table[c] for c in columns[1:]], 1).astype(np.float64)
    return x, table["mdvis"].astype(np.float64)


def heart_scale_csr():
    """heart_scale as tf_sdca's LIBSVM reader yields it: one CSR chunk
    (`labels`, `indptr`, `indices`, `values`)."""
    chunks = list(read_libsvm([heart_scale_path()]))
    assert len(chunks) == 1
    return chunks[0]


def heart_scale():
    """heart_scale as read by tf_sdca's LIBSVM reader: (dense float32
    [270, 13] features as the file has them, float32 labels +1 / -1)."""
    c = heart_scale_csr()
    n = len(c["labels"])
    x = np.zeros((n, 13), np.float32)
    rows = np.repeat(np.arange(n), np.diff(c["indptr"]))
    x[rows, c["indices"]] = c["values"]
    return x, c["labels"]


# --------------------------------------------------------------------------
# Problems and op arguments.
# --------------------------------------------------------------------------

def make_labels(loss, n, rng):
    if loss in BINARY:
        return (rng.random(n) < 0.4).astype(np.float32)
    if loss == "poisson_loss":
        return np.minimum(rng.poisson(1.5, n), 5).astype(np.float32)
    return rng.normal(size=n).astype(np.float32)


def make_problem(loss, n=40, dense_dim=3, vocab=25, per_row=3, seed=0,
                 example_weights=None):
    """n rows: a dense group [n, dense_dim] and one sparse group with
    `per_row` distinct ids out of `vocab` (and values) per row."""
    rng = np.random.default_rng(seed)
    dense = (rng.normal(size=(n, dense_dim)) * 0.5).astype(np.float32)
    ids = np.stack([rng.choice(vocab, per_row, replace=False)
                    for _ in range(n)]).astype(np.int64)
    values = rng.uniform(0.5, 1.5, size=ids.shape).astype(np.float32)
    labels = make_labels(loss, n, rng)
    weights = (np.ones(n, np.float32) if example_weights is None
               else np.asarray(example_weights, np.float32))
    return dict(dense=dense, ids=ids, values=values, labels=labels,
                weights=weights, vocab=vocab)


def select_rows(problem, rows):
    """The problem restricted to `rows` (which may repeat)."""
    rows = np.asarray(rows)
    return {k: (v[rows] if isinstance(v, np.ndarray) else v)
            for k, v in problem.items()}


def one_example_args(dense_x, ids, values, label, weight, dual, w_sparse,
                     w_dense, state=None):
    """The op's data arguments for a batch of one example.

    Args:
      dense_x: the example's dense features (one dense group).
      ids: the example's sparse ids (one sparse group).
      values: their values.
      label: the raw label.
      weight: the example weight s.
      dual: the starting dual.
      w_sparse: the unshrunk weights of `ids`, in the same order.
      w_dense: the unshrunk dense weights.
      state: the example's state row (default: [dual, 0, 0, 0]).

    Returns:
      A dict of the arguments `sdca_optimizer` and `SdcaOptimizerV2` share,
      except loss_type, l1, l2 and the CoCoA+ partitions.
    """
    ids = np.asarray(ids, np.int64)
    if state is None:
        state = np.array([[dual, 0.0, 0.0, 0.0]], np.float32)
    return dict(
        sparse_example_indices=[np.zeros(len(ids), np.int64)],
        sparse_feature_indices=[ids],
        sparse_feature_values=[np.asarray(values, np.float32)],
        dense_features=[np.asarray(dense_x, np.float32).reshape(1, -1)],
        example_weights=np.array([weight], np.float32),
        example_labels=np.array([label], np.float32),
        sparse_indices=[ids],
        sparse_weights=[np.asarray(w_sparse, np.float32)],
        dense_weights=[np.asarray(w_dense, np.float32)],
        example_state_data=np.asarray(state, np.float32).reshape(1, 4))


def batch_args(problem, rows, w_sparse, w_dense, state):
    """The op's data arguments for rows `rows` of `problem`, with the weights
    of every id they use; returns (args, ids whose deltas come back)."""
    rows = np.asarray(rows)
    ids = problem["ids"][rows]
    uniq = np.unique(ids)
    args = dict(
        sparse_example_indices=[np.repeat(np.arange(len(rows)),
                                          ids.shape[1])],
        sparse_feature_indices=[ids.ravel()],
        sparse_feature_values=[problem["values"][rows].ravel()],
        dense_features=[problem["dense"][rows]],
        example_weights=problem["weights"][rows],
        example_labels=problem["labels"][rows],
        sparse_indices=[uniq],
        sparse_weights=[np.asarray(w_sparse)[uniq].astype(np.float32)],
        dense_weights=[np.asarray(w_dense).astype(np.float32)],
        example_state_data=np.asarray(state, np.float32)[rows])
    return args, uniq


def run_ours(args, loss, l1, l2, **kwargs):
    """Our op on numpy arguments; numpy (state, [d_sparse], [d_dense])."""
    state, d_sparse, d_dense = tf_sdca.sdca_optimizer(
        **args, loss_type=loss, l1=l1, l2=l2, **kwargs)
    return (state.numpy(), [d.numpy() for d in d_sparse],
            [d.numpy() for d in d_dense])


def run_tf(args, loss, l1, l2, num_loss_partitions=1,
           num_inner_iterations=1):
    """TensorFlow's SdcaOptimizerV2 on the same numpy arguments."""
    def const(v, dtype):
        return tf.convert_to_tensor(v, dtype)

    out = tf.raw_ops.SdcaOptimizerV2(
        sparse_example_indices=[const(t, tf.int64)
                                for t in args["sparse_example_indices"]],
        sparse_feature_indices=[const(t, tf.int64)
                                for t in args["sparse_feature_indices"]],
        sparse_feature_values=[const(t, tf.float32)
                               for t in args["sparse_feature_values"]],
        dense_features=[const(t, tf.float32)
                        for t in args["dense_features"]],
        example_weights=const(args["example_weights"], tf.float32),
        example_labels=const(args["example_labels"], tf.float32),
        sparse_indices=[const(t, tf.int64) for t in args["sparse_indices"]],
        sparse_weights=[const(t, tf.float32) for t in args["sparse_weights"]],
        dense_weights=[const(t, tf.float32) for t in args["dense_weights"]],
        example_state_data=const(args["example_state_data"], tf.float32),
        loss_type=loss, l1=float(l1), l2=float(l2),
        num_loss_partitions=int(num_loss_partitions),
        num_inner_iterations=int(num_inner_iterations), adaptive=False)
    state, d_sparse, d_dense = out
    return (state.numpy(), [d.numpy() for d in d_sparse],
            [d.numpy() for d in d_dense])


class Model:
    """Weights and example state of a linear model trained on `problem` by
    the op; the weights are accumulated in float64 from the op's deltas (as
    a trainer's variables would be, up to their float32 rounding)."""

    def __init__(self, problem, loss, l1=0.0, l2=1.0, gamma=1.0,
                 use_tf=False, **op_kwargs):
        self.p = problem
        self.loss, self.l1, self.l2, self.gamma = loss, l1, l2, gamma
        self.use_tf = use_tf
        self.op_kwargs = dict(op_kwargs)
        if not use_tf:
            self.op_kwargs["gamma"] = gamma
        n = problem["dense"].shape[0]
        self.w_sparse = np.zeros(problem["vocab"])
        self.w_dense = np.zeros(problem["dense"].shape[1])
        self.state = np.zeros((n, 4), np.float32)
        self._constant_args = {}

    # Arguments that depend only on the rows: converted to tensors once per
    # row set (converting numpy arrays is most of an eager call's cost).
    _CONSTANT = {"sparse_example_indices": tf.int64,
                 "sparse_feature_indices": tf.int64,
                 "sparse_feature_values": tf.float32,
                 "dense_features": tf.float32,
                 "example_weights": tf.float32,
                 "example_labels": tf.float32,
                 "sparse_indices": tf.int64}

    def step(self, rows):
        """One op call on `rows`; returns its output state."""
        args, uniq = batch_args(self.p, rows, self.w_sparse, self.w_dense,
                                self.state)
        key = np.asarray(rows).tobytes()
        if key not in self._constant_args:
            self._constant_args[key] = {
                k: ([tf.constant(t, dtype) for t in args[k]]
                    if isinstance(args[k], list)
                    else tf.constant(args[k], dtype))
                for k, dtype in self._CONSTANT.items()}
        args.update(self._constant_args[key])
        if self.use_tf:
            out = run_tf(args, self.loss, self.l1, self.l2, **self.op_kwargs)
        else:
            out = run_ours(args, self.loss, self.l1, self.l2,
                           **self.op_kwargs)
        state, d_sparse, d_dense = out
        self.state[np.asarray(rows)] = state
        self.w_sparse[uniq] += d_sparse[0]
        self.w_dense += d_dense[0]
        return state

    def epoch_of_single_examples(self):
        for i in range(self.p["dense"].shape[0]):
            self.step([i])

    @property
    def n(self):
        return self.p["dense"].shape[0]

    def full_batch(self):
        return self.step(np.arange(self.n))

    # ---- objectives, all in float64 ------------------------------------

    def shrunk(self):
        return (shrink(self.w_sparse, self.l1, self.l2),
                shrink(self.w_dense, self.l1, self.l2))

    def margins(self, w_sparse=None, w_dense=None):
        """x_i . w for every row (default w: the shrunk weights)."""
        if w_sparse is None:
            w_sparse, w_dense = self.shrunk()
        return (self.p["dense"].astype(np.float64) @ w_dense +
                (w_sparse[self.p["ids"]] * self.p["values"]).sum(1))

    def primal(self, w_sparse=None, w_dense=None):
        """P(w) = sum s phi(w.x) + l2/2 |w|^2 + l1 |w|_1, w = shrink(w)."""
        if w_sparse is None:
            w_sparse, w_dense = self.shrunk()
        w = np.concatenate([w_sparse, w_dense])
        s = self.p["weights"].astype(np.float64)
        return (np.sum(s * primal_loss(self.loss,
                                       self.margins(w_sparse, w_dense),
                                       self.p["labels"], self.gamma)) +
                0.5 * self.l2 * (w @ w) + self.l1 * np.abs(w).sum())

    def v_from_duals(self):
        """v = sum_i s_i alpha_i x_i, as (sparse, dense)."""
        a = self.state[:, 0].astype(np.float64)
        sa = self.p["weights"].astype(np.float64) * a
        v_dense = sa @ self.p["dense"].astype(np.float64)
        v_sparse = np.zeros(self.p["vocab"])
        np.add.at(v_sparse, self.p["ids"],
                  sa[:, None] * self.p["values"].astype(np.float64))
        return v_sparse, v_dense

    def dual(self):
        """D(alpha) = -sum s phi*(-alpha) - g*(v), where g = l2/2 |.|^2 +
        l1 |.|_1 and g*(v) = sum (|v| - l1)_+^2 / (2 l2)."""
        v = np.concatenate(self.v_from_duals())
        g_star = np.sum(np.maximum(np.abs(v) - self.l1, 0.0) ** 2) / (
            2.0 * self.l2)
        s = self.p["weights"].astype(np.float64)
        return -np.sum(s * dual_loss(self.loss, self.state[:, 0],
                                     self.p["labels"], self.gamma)) - g_star

    def relative_gap(self):
        primal = self.primal()
        return (primal - self.dual()) / max(1.0, abs(primal))

    def weights_from_duals(self):
        """w(alpha) = v / l2, unshrunk, as (sparse, dense)."""
        v_sparse, v_dense = self.v_from_duals()
        return v_sparse / self.l2, v_dense / self.l2

    def state_gap_estimate(self):
        """The gap estimate the op's state columns give (TF's SdcaModel's
        approximate_duality_gap): (sum col1 + sum col2 + l2 |w|^2 +
        l1 |w|_1) / sum s, w shrunk."""
        w = np.concatenate(self.shrunk())
        return ((self.state[:, 1].astype(np.float64).sum() +
                 self.state[:, 2].astype(np.float64).sum() +
                 self.l2 * (w @ w) + self.l1 * np.abs(w).sum()) /
                self.p["weights"].astype(np.float64).sum())


def flat_arrays(state):
  """The arrays of a nested dict / list, with their keys, in order."""
  if isinstance(state, dict):
    return [item for key in sorted(state)
            for item in [key] + flat_arrays(state[key])]
  if isinstance(state, (list, tuple)):
    return [item for value in state for item in flat_arrays(value)]
  return [np.asarray(state)]


def same_bytes(a, b):
  """Whether two lists of arrays are equal to the byte."""
  return [np.asarray(v).tobytes() for v in a] == [
      np.asarray(v).tobytes() for v in b]

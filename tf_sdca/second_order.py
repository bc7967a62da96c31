"""The exact block step of an in-memory fit: the dual maximised over all
rows at once, by Newton's method on the primal (`InMemorySdca(
second_order=)`).

SDCA's coordinate steps contract the dual by about l2 / (s_i |x_i|^2 L) a
pass, L the loss's largest curvature. With features in natural units and a
weak l2 that is hopeless: Poisson on the RAND doctor visits (|x|^2 up to
3,475, counts to 77) at l2 = 1 ends 300 passes 77% above the optimum.
Rescaling the features cannot help: the dual of the same objective does
not change under a change of primal coordinates. What does is a step on a
block of duals large enough to see the coupling: maximising the dual over
every row is, by Fenchel duality, minimising the primal

  P(w) = sum_i s_i phi(w.x_i) + l2 / 2 |w|^2,

a problem in d (d K for K classes) unknowns that Newton's method solves in
a few passes over the rows when d is small (a d K x d K system each). The
step then sets every dual to its primal-dual image, alpha_i = -phi'(w.x_i)
(in its dual domain for every w), and the weights to X^T (s alpha) / l2,
SDCA's invariant; at the Newton point the two weights agree to rounding,
and the engine's exact duality gap after the epoch certifies the pair as
it certifies any epoch.

'auto' takes the step when d K <= MAX_DIM, l1 = 0, the loss is one of
LOSSES (twice differentiable), and SDCA's own bound needs more than
MIN_PASSES_PER_E_FOLD passes per factor e (`coordinate_passes`).
"""
import functools
import warnings

import numpy as np

from tf_sdca import options

# scipy is imported where it is used: the step is taken by in-memory fits
# only, and scipy.linalg with scipy.sparse cost 0.15-0.25 s of the start-up
# of every process that imports the trainer (`tf-sdca train` among them).

# The twice-differentiable losses (Newton's method needs phi'').
LOSSES = options.SECOND_ORDER_LOSSES
# Largest d K for the step: the Newton system is d K x d K, built in
# O(n (d K)^2) per iteration (digits' 65 x 10 softmax: ~1 s).
MAX_DIM = 1024
# 'auto' steps where SDCA's bound, max_i s_i |x_i|^2 L / l2 passes per
# factor e, exceeds this. Measured: heart_scale, standardised wine,
# diabetes and breast_cancer at l2 = 1, the digit counts and the doctor
# visits (Poisson) at l2 = 1000 are at 3-270 (SDCA converges there in tens
# to hundreds of passes); the doctor visits at l2 = 1 at 2.7e5, raw
# breast_cancer (logistic) at 6.2e6, raw wine (softmax) at 1.4e6, raw
# digits (softmax) at 3.0e3.
MIN_PASSES_PER_E_FOLD = 1e3
# Newton iterations per step at most, and the stop. The weights the step
# returns are X^T (s alpha(w)) / l2 = w - grad P(w) / l2: the gradient,
# not only P, must be at rounding. So the iterations go on until the Newton
# decrement g^T H^-1 g (twice P's distance to its minimum, to second order)
# is below REL_TOL |P|, far below what P itself resolves, or, once below
# 1e-16 |P|, stops halving (rounding reached).
MAX_ITERATIONS = 100
REL_TOL = 1e-26
# Rows per product building the softmax Hessian (bounds its scratch to
# rows x D K^2 doubles).
_HESSIAN_ROWS = 2048
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _curvature_bound(loss, labels):
  """L, the largest phi'' (Poisson's is unbounded: exp(z) near the
  optimum is the count, so the largest count stands for it)."""
  if loss == "poisson_loss":
    return max(1.0, float(np.max(labels, initial=0.0)))
  return {"logistic_loss": 0.25, "softmax_loss": 0.5}.get(loss, 1.0)


def coordinate_passes(loss, l2, design, labels, weights):
  """SDCA's bound on its passes per factor e of the dual's error,
  max_i s_i |x_i|^2 L / l2."""
  norms = np.asarray(_scaled_rows(design, design).sum(axis=1)).ravel()
  return float(np.max(weights * norms, initial=0.0) *
               _curvature_bound(loss, labels) / l2)


def design_matrix(n, csr, dense, num_features):
  """The rows as one float64 matrix `[n, num_features + d]`: sparse
  columns first, then dense ones, the weight table's order (a numpy array
  without a sparse part, else CSR)."""
  import scipy.sparse  # pylint: disable=import-outside-toplevel
  if csr is None:
    return np.asarray(dense, np.float64)
  blocks = []
  if csr is not None:
    indptr, indices, values = csr
    data = (np.ones(indices.shape, np.float64) if values is None
            else values.astype(np.float64))
    blocks.append(scipy.sparse.csr_matrix(
        (data, indices.astype(np.int64), indptr), shape=(n, num_features)))
  if dense is not None:
    blocks.append(scipy.sparse.csr_matrix(dense.astype(np.float64)))
  return scipy.sparse.hstack(blocks, format="csr")


def _scaled_rows(x, c):
  """diag(c) x, or x * x elementwise for c = x (numpy or CSR)."""
  import scipy.sparse  # pylint: disable=import-outside-toplevel
  return x.multiply(c) if scipy.sparse.issparse(x) else x * c


def _gram(xt, x, c):
  """X^T diag(c) X as a dense array."""
  import scipy.sparse  # pylint: disable=import-outside-toplevel
  out = xt @ _scaled_rows(x, c[:, None])
  return out.toarray() if scipy.sparse.issparse(out) else out


def applies(choice, loss, l1, num_features, dense_dim, num_classes):
  """Whether `second_order=choice` can take the step at all: a
  twice-differentiable loss, no l1, d K <= MAX_DIM ('off': never)."""
  dim = ((num_features or 0) + dense_dim) * max(num_classes, 1)
  return (choice != "off" and loss in LOSSES and l1 == 0 and
          dim <= MAX_DIM)


def block_step_for(choice, loss, l1, l2, n, csr, dense, num_features,
                   labels, weights, num_classes=1):
  """The `ExactBlockStep` an in-memory fit on arrays takes after each
  epoch at `second_order=choice`, or None: where it `applies`, and for
  'auto' only where SDCA's bound needs more than MIN_PASSES_PER_E_FOLD
  passes per factor e (`coordinate_passes`). `csr`: (indptr, indices,
  values) over `num_features` columns or None; `dense`: `[n, d]` or None;
  `labels`, `weights`: as normalised."""
  if not applies(choice, loss, l1, None if csr is None else num_features,
                 0 if dense is None else dense.shape[1], num_classes):
    return None
  if csr is not None:
    # Before scipy reads the rows by their ids (a negative one corrupted
    # the heap); packing checks them again where no step applies.
    from tf_sdca import engine  # pylint: disable=import-outside-toplevel
    engine.check_sparse_ids(csr, num_features)
  design = design_matrix(n, csr, dense, num_features)
  if choice == "on" or coordinate_passes(
      loss, l2, design, labels, weights) > MIN_PASSES_PER_E_FOLD:
    return ExactBlockStep(loss, l2, design, labels, weights, num_classes)
  return None


def momentum_with(block_step, asked, momentum):
  """The momentum of a fit with `block_step` (None: none): with the step
  and `momentum=None` asked, none (the step ends each epoch at the
  optimum or near it: extrapolating from the point before would only
  move away); else `momentum`, what `options.momentum_for` chose."""
  if block_step is not None and asked is None:
    return 0.0
  return momentum


class ExactBlockStep:
  """Maximises the dual over all rows (see the module's docstring).

  Args:
    loss: the op's loss name (one of LOSSES).
    l2: the l2 as the ops hold it (float32-rounded).
    design: `design_matrix` of the rows.
    labels, weights: float32 `[n]`, as normalised.
    num_classes: K (1: not multiclass).
  """

  def __init__(self, loss, l2, design, labels, weights, num_classes=1):
    import scipy.sparse  # pylint: disable=import-outside-toplevel
    self.loss = loss
    self.l2 = float(np.float32(l2))
    self.x = design
    self.xt = design.T.tocsr() if scipy.sparse.issparse(design) else design.T
    self.labels = np.asarray(labels, np.float64)
    self.weights = np.asarray(weights, np.float64)
    self.k = num_classes if loss == "softmax_loss" else 1
    if self.k > 1:
      self.onehot = np.eye(self.k)[self.labels.astype(np.int64)]
    self.iterations = 0  # Newton iterations of the last step
    self.ill_conditioned = False  # a Newton system was, in this fit
    self.warned = False

  # Per-row loss, its derivative and curvature at margins z.
  def _loss_terms(self, z):
    y, s = self.labels, self.weights
    if self.loss == "softmax_loss":
      top = z.max(axis=1, keepdims=True)
      e = np.exp(z - top)
      total = e.sum(axis=1, keepdims=True)
      p = e / total
      value = (top[:, 0] + np.log(total[:, 0]) -
               np.sum(self.onehot * z, axis=1))
      return s @ value, s[:, None] * (p - self.onehot), p
    if self.loss == "poisson_loss":
      e = np.exp(z)
      return s @ (e - y * z), s * (e - y), s * e
    if self.loss == "logistic_loss":
      sign = 2.0 * y - 1.0
      m = sign * z
      sig = 0.5 * (1.0 + np.tanh(-0.5 * m))  # sigma(-m), no overflow
      return (s @ np.logaddexp(0.0, -m), -s * sign * sig,
              s * sig * (1.0 - sig))
    r = z - y
    return 0.5 * (s @ (r * r)), s * r, s.copy()

  def _objective(self, w):
    z = self.x @ w
    value, dz, curv = self._loss_terms(z)
    return value + 0.5 * self.l2 * np.sum(w * w), dz, curv

  def _gradient(self, w, dz):
    return (self.xt @ dz + self.l2 * w).reshape(-1)

  def _newton_direction(self, w, grad, curv):
    import scipy.linalg  # pylint: disable=import-outside-toplevel
    import scipy.sparse  # pylint: disable=import-outside-toplevel
    d = w.shape[0]
    if self.k == 1:
      hess = _gram(self.xt, self.x, curv)
    else:
      # Blocks (a, b) of classes: X^T diag(s (p_a [a = b] - p_a p_b)) X,
      # as one product per chunk of rows: X^T [x_i (x) C_i], C_i the K x K
      # s_i (diag(p_i) - p_i p_i^T).
      p, s, k = curv, self.weights, self.k
      hess = np.zeros((d, d * k * k))
      for start in range(0, p.shape[0], _HESSIAN_ROWS):
        rows = slice(start, start + _HESSIAN_ROWS)
        pr = p[rows]
        c = s[rows, None, None] * (pr[:, :, None] * np.eye(k)[None] -
                                   pr[:, :, None] * pr[:, None, :])
        xr = self.x[rows]
        xr = xr.toarray() if scipy.sparse.issparse(xr) else xr
        hess += xr.T @ (xr[:, :, None] * c.reshape(-1, 1, k * k)).reshape(
            xr.shape[0], -1)
      # [D, (D, K, K)] -> [(D, K), (D, K)].
      hess = np.ascontiguousarray(
          hess.reshape(d, d, k, k).transpose(0, 2, 1, 3))
      hess = hess.reshape(d * k, d * k)
    hess[np.diag_indices_from(hess)] += self.l2
    try:
      with warnings.catch_warnings(record=True) as caught:
        # (scipy warned twice an epoch, for every epoch of the fit: `step`
        # warns once and keeps only the steps that lower P.)
        warnings.simplefilter("always", scipy.linalg.LinAlgWarning)
        step = scipy.linalg.solve(hess, grad, assume_a="pos")
      if any(issubclass(w.category, scipy.linalg.LinAlgWarning)
             for w in caught):
        self.ill_conditioned = True
    except (np.linalg.LinAlgError, ValueError):  # overflowed curvatures
      step = np.full_like(grad, np.nan)
    return step.reshape(w.shape), float(grad @ step)

  def minimise(self, w):
    """Newton's method with a backtracking line search on P from `w`
    (`[D]` or `[D, K]` float64): the minimiser, to REL_TOL."""
    w = np.array(w, np.float64)
    value, dz, curv = self._objective(w)
    self._start_value = value  # P where the step starts (`step`'s test)
    self.iterations = 0
    last = np.inf
    for self.iterations in range(1, MAX_ITERATIONS + 1):
      grad = self._gradient(w, dz)
      scale = max(abs(value), 1e-300)
      # P is l2-strongly convex: P - P* <= |grad|^2 / (2 l2). At the
      # minimum already (a later epoch's step): no Hessian.
      if grad @ grad <= 2.0 * self.l2 * REL_TOL * scale:
        break
      step, decrement = self._newton_direction(w, grad, curv)
      if not decrement > REL_TOL * scale or (
          decrement < 1e-16 * scale and not decrement < 0.5 * last):
        break
      last = decrement
      # Near the minimum P's decrease is below its rounding: full steps
      # (quadratic convergence) without the line search.
      t = 1.0
      trial = w - step
      with np.errstate(over="ignore", invalid="ignore"):
        new = self._objective(trial)
      # Armijo: a quarter of the decrease the quadratic model promises.
      while decrement > 1e-10 * scale and not (
          np.isfinite(new[0]) and new[0] <= value - 0.25 * t * decrement):
        t *= 0.5
        if t < 1e-12:
          return w
        trial = w - t * step
        with np.errstate(over="ignore", invalid="ignore"):
          new = self._objective(trial)
      w, (value, dz, curv) = trial, new
    return w

  def step(self, table):
    """(duals, weight table) after the step from weight table `table` (the
    shapes the engine's `State` holds: duals `[n]` or `[n, K]`, the table
    flat), or None where the step's point is not finite, its weights
    exceed float32's range (the ops' weights in mini-batches), or its
    weights, X^T (s alpha) / l2, have a higher P than `table` (beyond
    rounding): the epoch then keeps the coordinate steps' point. The last
    happens where the Newton system is too ill-conditioned for the duals'
    weights to follow Newton's point: a collinear column scaled by 1e6 at
    l2 = 1e-6 (the step took diabetes' squared loss 2,000x above its
    optimum, against 10x without it; a warning says so, once a fit, where
    scipy found the system ill-conditioned), raw breast_cancer at l2 =
    1e-6 (the steps' points drifted between relative gaps of 5e-9 and
    1e-4 over 300 epochs; each step kept only where it lowers P, 1e-10 in
    4 epochs)."""
    with np.errstate(all="ignore"):
      out = self._step(table)
    if not all(np.all(np.isfinite(a)) for a in out) or (
        np.max(np.abs(out[1]), initial=0.0) > _FLOAT32_MAX):
      return None
    before = self._start_value
    with np.errstate(all="ignore"):
      after = self._objective(out[1].reshape(-1, self.k) if self.k > 1
                              else out[1])[0]
    if not after <= before + 1e-12 * abs(before):
      if self.ill_conditioned and not self.warned:
        self.warned = True
        warnings.warn(
            "second_order: the exact block step's Newton system is "
            "ill-conditioned (features of very different scales, or "
            "collinear, at a weak l2): a step whose weights would raise "
            "the objective is not taken, and the fit may converge "
            "slowly; scale the features or raise l2 (or "
            "second_order='off')", UserWarning, stacklevel=2)
      return None
    return out

  def _step(self, table):
    w = np.asarray(table, np.float64)
    w = self.minimise(w.reshape(-1, self.k) if self.k > 1 else w)
    _, dz, _ = self._loss_terms(self.x @ w)
    # alpha = -phi'(z); dz holds s phi'(z), and a row of weight 0 takes the
    # dual of a row of weight 1 (it contributes nothing either way).
    s = self.weights[:, None] if self.k > 1 else self.weights
    with np.errstate(divide="ignore", invalid="ignore"):
      duals = np.where(s > 0, -dz / np.where(s > 0, s, 1.0), 0.0)
    if self.loss == "poisson_loss":
      duals = np.minimum(duals, self.labels)  # y - e^z <= y, in rounding too
    table = (self.xt @ (dz * -1.0)) / self.l2
    return duals, table.reshape(-1)


# The losses of the streamed block step.
STREAMED_LOSSES = LOSSES

# (loss, l2, choice) -> `streamed_block_step` as a tf.function.
_STEP_FUNCTIONS = {}


def shared_streamed_block_step(loss, l2, x, s, y, w, duals, choice="auto"):
  """`streamed_block_step` through one tf.function per (loss, l2, choice)
  of the process: a model's `minimize` (itself a tf.function, or a graph)
  calls its concrete function, traced once per input shapes for every
  model of the process instead of inside each model's own trace. Tracing
  the step (its Newton loop, line search and conds) was ~0.5 s of each new
  dense model's first call, ~0.13 s without it. The same ops, so the same
  values. In a TF1 graph the step is built inline, as before: the shared
  function would keep a trace for every graph, and with it the graph
  (an estimator makes one per `train` call)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if not tf.compat.v1.executing_eagerly_outside_functions():
    return streamed_block_step(loss, l2, x, s, y, w, duals, choice)
  key = (loss, float(np.float32(l2)), choice)
  if key not in _STEP_FUNCTIONS:
    _STEP_FUNCTIONS[key] = tf.function(
        functools.partial(streamed_block_step, loss, l2, choice=choice),
        autograph=False)
  return _STEP_FUNCTIONS[key](x, s, y, w, duals)


def streamed_block_step(loss, l2, x, s, y, w, duals, choice="auto"):
  """The exact block step on one streamed batch (`SdcaModel`), as
  TensorFlow ops: the batch's duals set to the maximiser of the dual over
  them, the rest held. By Fenchel duality that is the primal of the batch,

    min_u sum_B s_i phi(u.x_i) + l2 / 2 |u - c|^2,  c = w - X_B^T (s a) / l2

  (c: what the other rows' duals put in w), solved by Newton's method from
  u = w; then a_i = -phi'(u.x_i) and w moves by X_B^T (s (a_new - a)) / l2.
  With 'auto' only where the batch's bound max_i s_i |x_i|^2 L / l2 exceeds
  MIN_PASSES_PER_E_FOLD (the identity elsewhere, through `tf.cond`).

  Args:
    loss: one of STREAMED_LOSSES; l2: as the op holds it (float32).
    x: float64 `[b, D]`; s, y: float64 `[b]` (softmax: class ids); w:
      float64 `[D, K]` (after the op's step; K = 1 but for softmax);
      duals: float64 `[b, K]` (the op's new duals).

  Returns:
    (duals float32 `[b, K]`, weight change float64 `[D, K]`).
  """
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  l2 = float(np.float32(l2))
  k = w.shape[1]
  d = tf.shape(x)[1]
  c = w - tf.matmul(x, s[:, None] * duals, transpose_a=True) / l2
  if loss == "poisson_loss":
    bound = tf.maximum(tf.constant(1.0, tf.float64), tf.reduce_max(y))
  else:
    bound = tf.constant(_curvature_bound(loss, None), tf.float64)
  kappa = tf.reduce_max(s * tf.reduce_sum(x * x, axis=1)) * bound / l2
  sign = (2.0 * y - 1.0)[:, None]
  if loss == "softmax_loss":
    onehot = tf.one_hot(tf.cast(y, tf.int64), k, dtype=tf.float64)

  def terms(u):
    """P of the batch at u `[D, K]`, s phi'(z) `[b, K]` and the curvature
    (s phi''(z) `[b, 1]`; softmax: p `[b, K]`)."""
    z = tf.matmul(x, u)
    if loss == "softmax_loss":
      p = tf.nn.softmax(z)
      value = tf.reduce_logsumexp(z, axis=1) - tf.reduce_sum(onehot * z, 1)
      dz, curv = p - onehot, p
    elif loss == "poisson_loss":
      e = tf.exp(z)
      value, dz, curv = e - y[:, None] * z, e - y[:, None], s[:, None] * e
    elif loss == "logistic_loss":
      m = sign * z
      sig = tf.sigmoid(-m)
      value, dz = tf.nn.softplus(-m), -sign * sig
      curv = s[:, None] * sig * (1.0 - sig)
    else:
      value, dz, curv = 0.5 * (z - y[:, None]) ** 2, z - y[:, None], s[:, None]
    r = u - c
    return (tf.reduce_sum(s * tf.reshape(value, [-1])) +
            0.5 * l2 * tf.reduce_sum(r * r), s[:, None] * dz, curv)

  eye = tf.eye(d * k, dtype=tf.float64)

  def newton(u, dz, curv):
    grad = tf.reshape(tf.matmul(x, dz, transpose_a=True) + l2 * (u - c),
                      [-1])
    if loss == "softmax_loss":
      # Blocks (a, b): X^T diag(s p_a ([a = b] - p_b)) X, row-major in
      # (feature, class) as u's reshape.
      cc = s[:, None, None] * curv[:, :, None] * (
          tf.eye(k, dtype=tf.float64)[None] - curv[:, None, :])
      hess = tf.reshape(tf.einsum("ia,ikl,ib->akbl", x, cc, x),
                        [d * k, d * k])
    else:
      hess = tf.matmul(x * curv, x, transpose_a=True)
    hess = hess + l2 * eye
    # Overflowed curvatures (features near float32's range): a NaN step,
    # which ends the iterations, and the batch keeps the op's step.
    step = tf.cond(
        tf.reduce_all(tf.math.is_finite(hess)),
        lambda: tf.linalg.cholesky_solve(tf.linalg.cholesky(hess),
                                         grad[:, None])[:, 0],
        lambda: tf.fill(tf.shape(grad), tf.constant(np.nan, tf.float64)))
    return tf.reshape(step, tf.shape(u)), tf.reduce_sum(grad * step)

  def body(i, u, value, dz, curv, last, done):
    step, decrement = newton(u, dz, curv)
    scale = tf.maximum(tf.abs(value), 1e-300)
    stop = tf.logical_or(
        tf.logical_not(decrement > REL_TOL * scale),
        tf.logical_and(decrement < 1e-16 * scale,
                       tf.logical_not(decrement < 0.5 * last)))

    def accept(t, new_value):
      return tf.logical_or(
          decrement <= 1e-10 * scale,
          tf.logical_and(tf.math.is_finite(new_value),
                         new_value <= value - 0.25 * t * decrement))

    def search_cond(t, new_value):
      return tf.logical_and(tf.logical_not(accept(t, new_value)), t >= 1e-12)

    def search_body(t, new_value):
      del new_value
      t = 0.5 * t
      return t, terms(u - t * step)[0]

    t, _ = tf.while_loop(search_cond, search_body,
                         (tf.constant(1.0, tf.float64),
                          terms(u - step)[0]))
    moved = tf.logical_and(tf.logical_not(stop), t >= 1e-12)
    new_u = tf.where(moved, u - t * step, u)
    new_value, new_dz, new_curv = terms(new_u)
    return (i + 1, new_u, new_value, new_dz, new_curv, decrement,
            tf.logical_or(done, tf.logical_not(moved)))

  def keep():
    return tf.cast(duals, tf.float32), tf.zeros_like(w)

  def solve():
    value, dz, curv = terms(w)
    _, _, _, dz, _, _, _ = tf.while_loop(
        lambda i, *rest: tf.logical_and(i < MAX_ITERATIONS,
                                        tf.logical_not(rest[-1])),
        body, (tf.constant(0), w, value, dz, curv,
               tf.constant(np.inf, tf.float64), tf.constant(False)))
    # a = -phi'(z) (dz holds s phi'(z); a row of weight 0 keeps 0).
    new = -tf.math.divide_no_nan(dz, s[:, None])
    if loss == "poisson_loss":
      new = tf.minimum(new, y[:, None])
    # The state keeps float32 duals: the weights follow the rounded ones.
    new32 = tf.cast(new, tf.float32)
    change = tf.cast(new32, tf.float64) - duals
    move = tf.matmul(x, s[:, None] * change, transpose_a=True) / l2
    finite = tf.logical_and(
        tf.reduce_all(tf.math.is_finite(new32)),
        tf.reduce_all(tf.abs(w + move) <= _FLOAT32_MAX))
    return tf.cond(finite, lambda: (new32, move), keep)

  if choice == "on":
    return solve()
  return tf.cond(kappa > MIN_PASSES_PER_E_FOLD, solve, keep)

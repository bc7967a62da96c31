"""The losses of tf_sdca, once for every Python caller: their names, primal
and conjugate (dual) values, dual domains (`extrapolation_limit`), output
activation and the L1 shrink.

Every door takes a loss by its short name (`'logistic'`) or by the op's
`loss_type` (`'logistic_loss'`, TensorFlow's spelling); `op_name` maps either
to the op's. The functions take numpy arrays or TensorFlow tensors and
return the same kind, in float64 where they compute (the kernels' formulas
are in g3doc/losses.md):

  >>> from tf_sdca import losses
  >>> losses.op_name("poisson")
  'poisson_loss'
  >>> losses.primal("logistic", np.array([0.0]), np.array([1.0]))
  array([0.69314718])
"""
import functools
import math
import sys

import numpy as np

# Short names, in the order the docs list them; the op's name adds "_loss".
NAMES = ("logistic", "squared", "hinge", "smooth_hinge", "absolute",
         "poisson")
OP_NAMES = tuple(name + "_loss" for name in NAMES)
# Labels {0, 1} are y = 2 label - 1 in the formulas.
BINARY = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")
# The multiclass losses: scores z and duals alpha are [n, K] (K classes),
# labels class ids in [0, K); alpha_i = e_y - p_i with p_i on the simplex
# (g3doc/multiclass.md). Only the packed-rows engine solves them.
MULTICLASS_NAMES = ("softmax", "multiclass_hinge")
MULTICLASS = tuple(name + "_loss" for name in MULTICLASS_NAMES)


def op_name(loss):
  """The op's `loss_type` for `loss`, given as `'logistic'` or
  `'logistic_loss'`.

  Raises:
    ValueError: `loss` is neither spelling of a loss of tf_sdca.
  """
  if loss in OP_NAMES or loss in MULTICLASS:
    return loss
  if loss in NAMES or loss in MULTICLASS_NAMES:
    return loss + "_loss"
  raise ValueError(f"loss must be one of {NAMES + MULTICLASS_NAMES} (or the "
                   f"op's names {OP_NAMES + MULTICLASS}), got {loss!r}")


def is_multiclass(loss):
  """True for `softmax` and `multiclass_hinge` (either spelling)."""
  return op_name(loss) in MULTICLASS


def short_name(loss):
  """`'logistic'` for `'logistic'` or `'logistic_loss'`."""
  return op_name(loss)[:-len("_loss")]


class _Numpy:
  """The few array functions the formulas need, for numpy arrays."""
  asarray = staticmethod(lambda x: np.asarray(x, np.float64))
  softplus = staticmethod(lambda x: np.logaddexp(0.0, x))
  sigmoid = staticmethod(lambda x: 1.0 / (1.0 + np.exp(-x)))
  where, abs, exp, sign = np.where, np.abs, np.exp, np.sign
  maximum, clip = np.maximum, np.clip

  @staticmethod
  def logsumexp(z):
    """log sum_k exp(z[:, k]) per row, without overflow."""
    top = np.max(z, axis=1, keepdims=True)
    return (top + np.log(np.sum(np.exp(z - top), axis=1,
                                keepdims=True)))[:, 0]

  @staticmethod
  def softmax(z):
    e = np.exp(z - np.max(z, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)

  @staticmethod
  def one_hot(labels, k):
    return np.eye(k)[np.asarray(labels).astype(np.int64)]

  sum_rows = staticmethod(lambda v: np.sum(v, axis=1))
  max_rows = staticmethod(lambda v: np.max(v, axis=1))

  @staticmethod
  def xlogx(x):
    """x log x with 0 log 0 = 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
      return np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)


@functools.lru_cache(maxsize=None)
def _tensorflow():
  """The same for TensorFlow tensors (graph or eager); imported on first
  use so that numpy callers (the CLI's parsing) do not load TensorFlow."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel

  class _TensorFlow:
    asarray = staticmethod(lambda x: tf.cast(x, tf.float64))
    softplus, sigmoid, exp = tf.nn.softplus, tf.sigmoid, tf.exp
    where, abs, sign, maximum = tf.where, tf.abs, tf.sign, tf.maximum
    clip = staticmethod(tf.clip_by_value)
    xlogx = staticmethod(lambda x: tf.math.xlogy(x, x))
    logsumexp = staticmethod(lambda z: tf.reduce_logsumexp(z, axis=1))
    softmax = staticmethod(tf.nn.softmax)
    one_hot = staticmethod(
        lambda labels, k: tf.one_hot(tf.cast(labels, tf.int64), k,
                                     dtype=tf.float64))
    sum_rows = staticmethod(lambda v: tf.reduce_sum(v, axis=1))
    max_rows = staticmethod(lambda v: tf.reduce_max(v, axis=1))

  return _TensorFlow


def _backend(*arrays):
  if all(isinstance(a, (np.ndarray, np.generic, float, int))
         for a in arrays):
    return _Numpy
  return _tensorflow()


def primal(loss, z, labels, gamma=1.0):
  """Unweighted phi(z) per example: the loss at margin `z` (= w.x) for raw
  labels (`{0, 1}` for the binary losses, counts for Poisson); `gamma` is
  smooth hinge's smoothing. For a multiclass loss `z` is `[n, K]` (W^T x)
  and the labels are class ids."""
  loss = op_name(loss)
  xp = _backend(z, labels)
  z, y = xp.asarray(z), xp.asarray(labels)
  if loss in MULTICLASS:
    # z [n, K], labels class ids: log sum exp(z) - z_y, or Crammer and
    # Singer's max_k ([k != y] + z_k) - z_y.
    onehot = xp.one_hot(labels, z.shape[1])
    z_y = xp.sum_rows(onehot * z)
    if loss == "softmax_loss":
      return xp.logsumexp(z) - z_y
    return xp.max_rows(1.0 - onehot + z) - z_y
  if loss in BINARY:
    m = (2.0 * y - 1.0) * z
  if loss == "logistic_loss":
    return xp.softplus(-m)
  if loss == "squared_loss":
    return 0.5 * (z - y) ** 2
  if loss == "hinge_loss":
    return xp.maximum(1.0 - m, 0.0)
  if loss == "smooth_hinge_loss":
    return xp.where(m >= 1.0, 0.0 * m,
                    xp.where(m <= 1.0 - gamma, 1.0 - m - gamma / 2.0,
                             (1.0 - m) ** 2 / (2.0 * gamma)))
  if loss == "absolute_loss":
    return xp.abs(z - y)
  return xp.exp(z) - y * z  # poisson_loss


def dual(loss, duals, labels, gamma=1.0):
  """Unweighted conjugate phi*(-alpha) per example, for raw labels. Its sum
  with `primal` and alpha * z is the example's Fenchel-Young gap (>= 0).
  For a multiclass loss `duals` is `[n, K]` (rows e_y - p, p on the
  simplex) and the gap's middle term is the row-wise alpha . z."""
  loss = op_name(loss)
  xp = _backend(duals, labels)
  a, y = xp.asarray(duals), xp.asarray(labels)
  if loss in MULTICLASS:
    # alpha [n, K] = e_y - p: the negative entropy of p (softmax), or
    # -(1 - p_y) = -alpha_y (multiclass hinge).
    p = xp.clip(xp.one_hot(labels, a.shape[1]) - a, 0.0, 1.0)
    if loss == "softmax_loss":
      return xp.sum_rows(xp.xlogx(p))
    return -xp.sum_rows(xp.one_hot(labels, a.shape[1]) * (1.0 - p))
  if loss in BINARY:
    b = xp.clip(a * (2.0 * y - 1.0), 0.0, 1.0)
    if loss == "hinge_loss":
      return -b
    if loss == "smooth_hinge_loss":
      return -b + 0.5 * gamma * b * b
    return xp.xlogx(b) + xp.xlogx(1.0 - b)
  if loss == "squared_loss":
    return 0.5 * a * a - a * y
  if loss == "absolute_loss":
    return -xp.clip(a, -1.0, 1.0) * y
  return xp.xlogx(xp.maximum(y - a, 0.0)) - xp.maximum(y - a, 0.0)


def activation(loss, z):
  """The model's output for margin `z`: probabilities (sigmoid) for
  logistic, rates (exp) for Poisson, class probabilities (softmax over the
  last axis of `[n, K]` scores) for softmax, `z` itself otherwise."""
  loss = op_name(loss)
  xp = _backend(z)
  if loss == "softmax_loss":
    return xp.softmax(xp.asarray(z))
  if loss == "logistic_loss":
    return xp.sigmoid(z)
  if loss == "poisson_loss":
    return xp.exp(z)
  return z


def shrink_l1(w, l1, l2):
  """The weights the model uses: soft thresholding of the unshrunk weights
  by l1 / l2, sign(w) max(|w| - l1 / l2, 0) (w itself when l1 = 0)."""
  if l1 == 0:
    return w
  xp = _backend(w)
  return xp.sign(w) * xp.maximum(xp.abs(w) - l1 / l2, 0.0)


# The losses whose primal has kinks: their duals live in a box and dual
# coordinate ascent on them converges sublinearly, however the features are
# scaled; the smooth loss that converges linearly in their place.
NON_SMOOTH = {"hinge_loss": "smooth_hinge_loss", "absolute_loss": None,
              "multiclass_hinge_loss": "softmax_loss"}


# The packages whose frames a warning about the user's fit looks past
# (`caller_stacklevel`): ours, Keras' loop and TensorFlow's wrappers around
# it, and the standard library's plumbing between them.
_LIBRARY_MODULES = frozenset(("tf_sdca", "keras", "tf_keras", "tensorflow",
                              "contextlib", "functools"))


def caller_stacklevel():
  """The `stacklevel` that makes a warning raised by the function calling
  this one name the first frame outside tf_sdca, Keras and TensorFlow: the
  user's line that started the fit, through whichever door (a fixed level
  named a line inside Keras for `LinearModel.fit`). The outermost frame
  where every frame is theirs (the command line)."""
  frame = sys._getframe(2)  # pylint: disable=protected-access
  level = 2
  while frame.f_back is not None and (
      frame.f_globals.get("__name__", "").split(".")[0] in _LIBRARY_MODULES):
    frame = frame.f_back
    level += 1
  return level


class ProgressWatch:
  """Says, once, when the duality gap barely moves, and why it may.

  For a smooth loss the usual cause is conditioning: SDCA on features in
  natural units (counts, pixels, money) with a small l2 moves each dual by
  ~1 / (s |x_i|^2 / l2) of what it needs, and the remedy is standardising
  the features, not more epochs. For a loss with kinks (hinge, absolute,
  multiclass hinge) the dual ascent itself can be slow on well-scaled data:
  LIBLINEAR's dual solver and ours both take ~10,000 epochs on heart_scale
  (features in [-1, 1]) with the hinge loss at l2 = 1; the message says so,
  names the smooth loss that converges linearly and the visiting orders
  that took fewer epochs there.

  `update(gap)` after each epoch (`skip()` after one not evaluated)
  returns the warning's text the first time the relative gap fell by less
  than `factor` over the last `window` epochs while still above `floor`,
  else None. It compares the best gaps (before the window, and within
  it), so that a gap that moves up and down, as with extrapolated epochs
  (`momentum`) and their restarts, is judged by its progress, not by where
  the last epoch landed.
  """

  def __init__(self, window=10, factor=2.0, floor=1e-9, fixed_batches=False,
               loss=None, order=None, momentum=False):
    """`fixed_batches`: the epochs stream batches as the input gives them
    (without held rows), so the warning also names their order. `loss`:
    the loss trained (short or op name), which decides the likely cause
    named; None names conditioning. `order`: the visit order in use, which
    the advice then does not suggest (it advised 'adaptive' to fits that
    ran it). `momentum`: the fit extrapolates (momentum 'auto' or a beta),
    which the advice then does not suggest either."""
    self.window, self.factor, self.floor = window, factor, floor
    self.order = order
    self.momentum = momentum
    self.fixed_batches = fixed_batches
    self.loss = None if loss is None else op_name(loss)
    self._gaps = []
    self._before = None  # the best gap before the window
    self._folded = 0  # the gaps read into _before
    self._said = False

  def _cause(self):
    """The text after the gaps: the likely cause and its remedies."""
    standardise = ("Standardise features in natural units (counts, pixels, "
                   "money: keras.layers.Normalization, "
                   "sklearn.preprocessing.StandardScaler; tf-sdca train "
                   "scales Criteo counts)")
    if self.loss not in NON_SMOOTH:
      text = (f"this problem is badly conditioned for SDCA. {standardise}, "
              "or raise l2")
      # (The multiclass losses have no adaptive order.)
      if self.order != "adaptive" and (self.loss is None or
                                       not is_multiclass(self.loss)):
        text += ("; on in-memory data visit_order='adaptive' can need far "
                 "fewer epochs on unscaled data (Poisson on doctor visits "
                 "in natural units: 143 epochs against > 3,000, "
                 "g3doc/trainer.md)")
      return text
    smooth = NON_SMOOTH[self.loss]
    text = (f"the {short_name(self.loss)} loss is not smooth, and ascent on "
            "its dual (LIBLINEAR's too) can take thousands of epochs even "
            "on scaled features")
    if smooth is not None:
      text += f"; {short_name(smooth)} converges linearly"
    momentum = ("the default momentum='auto' (~2x with a binary hinge on "
                "heart_scale, g3doc/trainer.md)")
    if is_multiclass(self.loss):  # no adaptive order for a block of duals
      if not self.momentum:
        text += f"; on in-memory data {momentum} may need fewer epochs"
    elif self.order != "adaptive":
      text += ("; on in-memory data visit_order='adaptive' may need fewer "
               "epochs (2.5-6x on heart_scale)" +
               ("" if self.momentum else f", as may {momentum}"))
    elif not self.momentum:
      text += f"; on in-memory data {momentum} may need fewer epochs"
    if self.loss != "absolute_loss" and self.order != "shrinking":
      text += ("; visit_order='shrinking' (the hinge losses' default in "
               "memory) makes epochs cheaper, skipping the duals held at a "
               "bound")
    return f"{text}. {standardise} if they are not scaled"

  def skip(self):
    """An epoch whose gap was not evaluated (`fit(gap_every=)`): it counts
    in the window, with no gap."""
    self._gaps.append(math.nan)

  def update(self, gap):
    # A negative or non-finite estimate (SdcaModel's approximate gap lags
    # the weights and can be below zero) says nothing of progress: skipped.
    # Counted as a window's first epochs, such a value once made -1e-3 the
    # best gap "before", and standardised breast_cancer falling to 5e-5
    # read as no progress.
    if not (math.isfinite(gap) and gap >= 0.0):
      return None
    self._gaps.append(float(gap))
    if self._said or len(self._gaps) <= self.window:
      return None
    # One gap leaves the window per epoch: the best before it is kept as
    # they leave (a min over all of them every epoch made the watch
    # quadratic in the epochs, ~1-3 us an epoch over a few hundred).
    # Epochs not evaluated (NaN, `skip`) count in the window, with no gap.
    leaving = len(self._gaps) - self.window
    for left in self._gaps[self._folded:leaving]:
      if not math.isnan(left):
        self._before = (left if self._before is None else
                        min(self._before, left))
    self._folded = leaving
    if self._before is None:
      return None
    before = self._before
    now = min(g for g in self._gaps[-self.window:] if not math.isnan(g))
    if now <= self.floor or now * self.factor < before:
      return None
    self._said = True
    # (A gap that rose read "fell only from 4.5e-06 to 3.12e-05".)
    progress = (f"fell only from {before:.3g} to {now:.3g}" if now < before
                else f"was at best {now:.3g}, against {before:.3g} before")
    return (f"the relative duality gap {progress} in the last "
            f"{self.window} epochs: " + self._cause() +
            ("; and the same consecutive batches every epoch need ~2x the "
             "epochs of one batch: shuffle the rows before batching them, "
             "or hold back a share of each step's rows with "
             "carry_over='auto' "
             "(g3doc/sdca_model.md, 'Streaming orders')"
             if self.fixed_batches else ""))


# The gap below which a stream's progress is not judged: its duals are
# float32, and its gap bottoms out at 1e-9 to 1e-8 (softmax on standardised
# wine, 40-row batches: 1.3e-8 -> 6.4e-9 in 10 epochs read as "badly
# conditioned"); the in-memory doors' float64 duals go on to 1e-9 (the
# watch's default floor).
STREAMED_GAP_FLOOR = 1e-8
# The gap below which an estimate from the per-example state (the
# estimator's `train(dataset, tol=...)`: each example's losses at the
# weights its last visit saw, which lag the weights by a pass) is not
# judged: near the optimum it wanders between about -5e-5 and +8e-5 while
# the exact gap falls below 1e-8 (standardised breast_cancer), and the
# watch read that wandering as "badly conditioned".
ESTIMATED_GAP_FLOOR = 1e-4


def _dual_box(loss, labels, size):
  """The dual domain of `loss` over `size` flat duals as a box, the one
  definition `extrapolation_limit` and `duals_in_domain` read (the op's
  `DualInDomain`): `(sign, low, high, slack)` where each dual times `sign`
  (None: 1) must lie in [low, high], and `slack` is the op's allowance for
  rounding; None where the domain is unbounded (squared). Binary losses:
  dual * y in [0, 1] (y = +-1); absolute: |dual| <= 1; Poisson: dual <=
  label; a multiclass block (`[n * C]` duals, class-id labels) is e_y - p
  with p on the simplex, so its label's dual lies in [0, 1] and the others
  in [-1, 0] (its sum, 0, is `duals_in_domain`'s own check)."""
  loss = op_name(loss)
  labels = np.asarray(labels)
  if is_multiclass(loss):
    classes = size // max(labels.size, 1)
    is_label = (np.arange(classes)[None, :] ==
                labels.astype(np.int64)[:, None]).ravel()
    return (None, np.where(is_label, 0.0, -1.0), np.where(is_label, 1.0, 0.0),
            1e-9)  # MulticlassLoss::DualInDomain's slack
  slack = 1e-6  # the binary losses' kDualDomainSlack
  if loss in _UNIT_DOMAIN:
    return np.where(labels > 0, 1.0, -1.0), 0.0, 1.0, slack
  if loss == "absolute_loss":
    return None, -1.0, 1.0, slack
  if loss == "poisson_loss":
    high = np.asarray(labels, np.float64)
    return None, -np.inf, high, slack * (1.0 + np.abs(high))
  return None


def extrapolation_limit(loss, labels, duals, change):
  """The largest beta <= 1e300 keeping `duals + beta * change` in the dual
  domain of `loss` (`_dual_box`); `[n * C]` duals for a multiclass loss
  (both ends of the extrapolation sum to 0 in each block)."""
  duals = np.asarray(duals, np.float64)
  change = np.asarray(change, np.float64)
  box = _dual_box(loss, labels, duals.size)
  if box is None:
    return 1e300
  sign, low, high, _ = box
  value, step = ((duals, change) if sign is None else
                 (duals * sign, change * sign))
  # Each dual's room (high - value) / step where step > 0, (low - value) /
  # step where step < 0, none where step is 0: the same quotients as one
  # np.where of both, in one array written in place (over 4M duals the
  # temporaries of the two cost 3-4x the arithmetic: ~60 ms a call).
  up = step > 0
  moving = up | (step < 0)
  room = np.where(up, high, low)
  room -= value
  with np.errstate(divide="ignore", invalid="ignore"):
    np.divide(room, step, out=room)
  return float(min(1e300, np.min(room, where=moving, initial=np.inf)))


def duals_in_domain(loss, labels, duals):
  """Whether each row's dual (a multiclass loss: its block of `[n, K]`
  duals) is in the dual domain of `loss` for its label, as the op's
  `DualInDomain` checks it, with its slack for rounding (`_dual_box`):
  `[n]` booleans. A zero dual (block) is in every domain: fits start
  there."""
  duals = np.asarray(duals, np.float64)
  labels = np.asarray(labels)
  box = _dual_box(loss, labels, duals.size)
  if box is None:
    return np.isfinite(duals)
  sign, low, high, slack = box
  value = duals.ravel() if sign is None else duals * sign
  with np.errstate(invalid="ignore"):
    inside = (np.isfinite(value) & (value >= low - slack) &
              (value <= high + slack))
  if not is_multiclass(op_name(loss)):
    return inside
  blocks = duals.reshape(labels.shape[0], -1)
  return (np.all(inside.reshape(blocks.shape), axis=1) &
          (np.abs(blocks.sum(axis=1)) <= slack * blocks.shape[1]))


# `capped_extrapolation`'s margin: its check without the exact limit
# accepts a point whose every dual is at least this far inside its
# domain (|change| <= 1 there, so each dual's room is then at least this
# much above the beta checked, far beyond float64 rounding).
_INSIDE = 1e-12
# The binary losses whose dual domain is dual * y in [0, 1].
_UNIT_DOMAIN = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")


def capped_extrapolation(loss, signs, duals, change, beta, share):
  """min(beta, share * extrapolation_limit(loss, labels, duals, change)),
  the same value, in fewer passes over the duals where the cap does not
  bind (every epoch of an extrapolation that keeps its beta): for the
  binary losses it checks that every dual of duals + (beta / share)
  (1 + 1e-9) change is inside [_INSIDE, 1 - _INSIDE] (times y), which
  bounds the exact limit above beta / share, and computes the limit only
  where that fails. `signs`: `binary_signs(labels)` for those losses
  (else the labels)."""
  loss = op_name(loss)
  if loss in _UNIT_DOMAIN and beta > 0.0 and share > 0.0:
    far = (beta / share) * (1.0 + 1e-9)
    point = change * far  # duals + far * change, in one new array
    point += duals
    point *= signs
    if point.min() >= _INSIDE and point.max() <= 1.0 - _INSIDE:
      return beta
  return min(beta, share * extrapolation_limit(loss, signs, duals, change))


def binary_signs(loss, labels):
  """What `capped_extrapolation` takes for the labels: +-1 (float64) for
  the binary losses with domain dual * y in [0, 1] (whose
  `extrapolation_limit` reads only the labels' signs), else the labels."""
  if op_name(loss) in _UNIT_DOMAIN:
    return np.where(np.asarray(labels) > 0, 1.0, -1.0)
  return labels

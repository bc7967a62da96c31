"""Primal stochastic (sub)gradient peers: PEGASOS and plain SGD.

The reference documents compare SDCA with these on the same objective, in
the normalisation they use:

  f(w) = lambda/2 |w|^2 + (1/n) sum_i loss(y_i w.x_i),   y_i in {-1, +1},

which is tf_sdca's `P(w) = sum_i loss_i + l2/2 |w|^2` divided by n, with
`lambda = l2 / n`: the same minimiser, and relative suboptimalities agree.

- `pegasos`: Shalev-Shwartz, Singer and Srebro's algorithm for the hinge
  loss. Step t draws k rows (with replacement), takes the step size
  1 / (lambda t), shrinks w by (1 - 1/t) and adds (1/(lambda t k)) y_i x_i
  for the drawn rows with margin below 1; optionally projects w onto the
  ball of radius 1 / sqrt(lambda) (where the optimum lies). Also returns
  the running average of its iterates, whose expected suboptimality the
  paper bounds by (sqrt(lambda) + R)^2 (1 + ln T) / (2 lambda T) with
  projection (R: the largest |x_i|).
- `sgd`: the same 1 / (lambda t) steps on the logistic loss (its gradient),
  one row a step.

Both are plain numpy (dense or scipy.sparse CSR rows), for comparisons of
epochs and of the rate, not of speed at scale.
"""
import numpy as np


def _row(x, i):
  """Row i as (indices or None, values)."""
  if hasattr(x, "indptr"):
    lo, hi = x.indptr[i], x.indptr[i + 1]
    return x.indices[lo:hi], x.data[lo:hi]
  return None, x[i]


def _dot(w, row):
  idx, val = row
  return float(w @ val) if idx is None else float(w[idx] @ val)


def _add(w, row, coef):
  idx, val = row
  if idx is None:
    w += coef * val
  else:
    np.add.at(w, idx, coef * val)


def pegasos(x, y, lam, steps, batch_size=1, projection=True, seed=0,
            checkpoints=()):
  """PEGASOS on the hinge loss.

  Args:
    x: `[n, d]` dense array or CSR matrix.
    y: `[n]` labels in {-1, +1}.
    lam: lambda (> 0).
    steps: T.
    batch_size: k rows per step.
    projection: project onto the ball of radius 1 / sqrt(lambda).
    seed: seed of the draws.
    checkpoints: step counts at which to record (w_t, averaged w).

  Returns:
    (w_T, averaged w over steps 1..T, {t: (w_t, average_t)} at checkpoints).
  """
  rng = np.random.default_rng(seed)
  n, d = x.shape
  w = np.zeros(d)
  average = np.zeros(d)
  radius = 1.0 / np.sqrt(lam)
  marks = set(int(t) for t in checkpoints)
  recorded = {}
  draws = rng.integers(0, n, size=(steps, batch_size))
  for t in range(1, steps + 1):
    eta = 1.0 / (lam * t)
    violated = [(i, _row(x, i)) for i in draws[t - 1]]
    violated = [(i, r) for i, r in violated if y[i] * _dot(w, r) < 1.0]
    w *= 1.0 - eta * lam
    for i, r in violated:
      _add(w, r, eta * y[i] / batch_size)
    if projection:
      norm = np.linalg.norm(w)
      if norm > radius:
        w *= radius / norm
    average += (w - average) / t
    if t in marks:
      recorded[t] = (w.copy(), average.copy())
  return w, average, recorded


def sgd(x, y, lam, steps, seed=0, checkpoints=()):
  """SGD with 1 / (lambda t) steps on the logistic loss; returns (w_T,
  {t: w_t} at checkpoints)."""
  rng = np.random.default_rng(seed)
  n, d = x.shape
  w = np.zeros(d)
  marks = set(int(t) for t in checkpoints)
  recorded = {}
  for t, i in enumerate(rng.integers(0, n, size=steps), start=1):
    eta = 1.0 / (lam * t)
    r = _row(x, i)
    margin = y[i] * _dot(w, r)
    w *= 1.0 - eta * lam
    # d/dw log(1 + exp(-m)) = -y x / (1 + exp(m))
    _add(w, r, eta * y[i] / (1.0 + np.exp(min(margin, 700.0))))
    if t in marks:
      recorded[t] = w.copy()
  return w, recorded


def objective(loss, w, x, y, lam):
  """f(w) = lambda/2 |w|^2 + mean loss(y_i w.x_i), for 'hinge' or
  'logistic'."""
  m = y * (x @ w)
  per = (np.maximum(0.0, 1.0 - m) if loss == "hinge" else
         np.logaddexp(0.0, -m))
  return 0.5 * lam * float(w @ w) + float(np.mean(per))

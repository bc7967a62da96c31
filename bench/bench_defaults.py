"""Benchmark: does each default reach the optimum as fast as the best knob?

For every real data set (scikit-learn's bundled sets, Debian-packaged data,
Criteo-shaped generated rows), in natural units (an intercept column added,
nothing scaled), every loss that fits its target, and two l2 (a moderate
one, l2 = mean |x_i|^2, and a weak one, 1/30 of it, in memory), each
door trains at its defaults and at each knob setting (one option of `options.OPTIONS`
changed from its default at a time: every visit order, momentum 0 /
'auto' / 0.5, every multiclass hinge step; `carry_over` for the streamed
door), and the script prints the passes and seconds each needs to 1e-6,
the best knob's, and the ratio default / best knob. A row whose default
needs more than 1.5x the best knob's passes (or seconds, where the
default's fit takes over 0.1 s) at seed 0 is measured again (`confirm`:
passes, the medians over seeds 0-4 of the default and that setting;
seconds, the two timed in four more alternating rounds) and flagged '<<'
where the ratio still exceeds 1.5x.

The defaults are read from `tf_sdca.options.OPTIONS` (a door is built
without the option: what a user who sets nothing gets), so a rerun after a
default changes measures the new one.

The objective is `sum_i loss(w.x_i, y_i) + l2/2 |w|^2` (the intercept a
regularised column). Its optimum P* comes from scipy's L-BFGS in float64
for the smooth losses (certified by the gradient: P(w) - P* <=
|grad|^2 / (2 l2)) and from a long `InMemorySdca` run for every loss
(certified by its duality gap); P* is the least objective any of them or
any fit reached, and the table says how tightly it is certified.

Measures, per door and setting (all fresh fits, wall clock from the call
to the returned model, in one process, one after the other):

  - in memory (`InMemorySdca`, `keras.LinearModel.fit` on arrays,
    `SDCAClassifier` / `SDCARegressor`): a fit with tol = 1e-6, stopped by
    the exact relative duality gap. 'gap' is its passes, 'sub' the first
    pass whose primal (the history's, checked against ours) is within 1e-6
    (relative) of P*, 's' the fit's seconds.
  - streamed (`SdcaModel` over fixed consecutive batches, `tf.function`
    steps): 'sub' the first pass within 1e-6 of P*, 's' the seconds from
    building the model to the end of that pass, tracing included (an
    `SdcaModel` has no stopping rule; the objective after each pass is
    computed untimed).

  python bench/bench_defaults.py [--quick] [--sets breast_cancer,...]
      [--losses logistic,...] [--l2 moderate,weak]
      [--doors memory,keras,sklearn,streamed] [--max-epochs 1000]
      [--seeds 5] [--markdown] [--defaults-only] [--json out.json]

`--quick`: two small sets, the in-memory doors, the moderate l2
(CI-sized). `--markdown`: also print the defaults table and the results as
markdown rows (g3doc/defaults.md); `--defaults-only`: the defaults table
alone, no fits.
"""
import argparse
import json
import os
import platform
import sys
import time
import warnings

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # pylint: disable=g-import-not-at-top
import scipy.sparse  # pylint: disable=g-import-not-at-top
from scipy.optimize import minimize  # pylint: disable=g-import-not-at-top

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                ".."))
from tf_sdca import engine  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_sdca import losses  # pylint: disable=g-import-not-at-top,wrong-import-position
from tf_sdca import options  # pylint: disable=g-import-not-at-top,wrong-import-position

TARGET = 1e-6
FLAG = 1.5
# Seconds below which a fit's time is mostly fixed costs and timer noise:
# its seconds ratio is printed but not flagged.
MIN_FLAG_SECONDS = 0.1
# Seeds a row flagged on passes is measured again over (`confirm`), and
# the rounds a row flagged on seconds is timed again in.
SEEDS = 5
SECONDS_ROUNDS = 4
WEAK = 1.0 / 30.0
STREAMED_EPOCHS = 300  # the streamed door's cap (one tf.function step a
                       # batch: ~100x an in-memory pass on small sets)  # the weak l2 as a share of the moderate one

_HERE = os.path.dirname(os.path.abspath(__file__))
DEBIAN = os.environ.get(
    "TF_SDCA_DEBIAN", os.path.join(_HERE, "..", ".cache", "debian"))
STATSMODELS = os.path.join(DEBIAN, "usr", "lib", "python3", "dist-packages",
                           "statsmodels", "datasets")
HEART_SCALE = os.path.join(DEBIAN, "usr", "share", "doc", "liblinear-tools",
                           "examples", "heart_scale")


# ---------------------------------------------------------------- the data
def _intercept(x):
  return np.hstack([np.asarray(x, np.float64), np.ones((len(x), 1))])


def _csv(name, delimiter=","):
  path = os.path.join(STATSMODELS, name, f"{name}.csv")
  if not os.path.exists(path):
    raise FileNotFoundError(path)
  table = np.genfromtxt(path, delimiter=delimiter, names=True,
                        deletechars="'\"")
  return table, table.dtype.names


def _sk(loader):
  from sklearn import datasets  # pylint: disable=import-outside-toplevel
  return getattr(datasets, loader)()


def load_breast_cancer():
  b = _sk("load_breast_cancer")
  return _intercept(b.data), dict(binary=b.target.astype(np.float64))


def load_digits():
  # The multiclass task on the 64 pixel counts; the Poisson task the count
  # of one middle block on the other 63 (tests/test_real_data.py).
  b = _sk("load_digits")
  x = b.data
  return _intercept(x), dict(
      multiclass=b.target.astype(np.float64),
      counts=(_intercept(np.delete(x, 36, axis=1)), x[:, 36].copy()))


def load_wine():
  b = _sk("load_wine")
  return _intercept(b.data), dict(multiclass=b.target.astype(np.float64))


def load_iris():
  b = _sk("load_iris")
  return _intercept(b.data), dict(multiclass=b.target.astype(np.float64),
                                  binary=(b.target == 1).astype(np.float64))


def load_diabetes():
  b = _sk("load_diabetes", )
  return _intercept(b.data), dict(regression=b.target.astype(np.float64))


def load_linnerud():
  b = _sk("load_linnerud")
  # Weight (lb) on chins, sit-ups and jumps.
  return _intercept(b.data), dict(regression=b.target[:, 0].astype(
      np.float64))


def load_heart_scale():
  if not os.path.exists(HEART_SCALE):
    raise FileNotFoundError(HEART_SCALE)
  rows, labels = [], []
  with open(HEART_SCALE) as f:
    for line in f:
      parts = line.split()
      if not parts:
        continue
      labels.append(float(parts[0]) > 0)
      row = np.zeros(13)
      for item in parts[1:]:
        k, v = item.split(":")
        row[int(k) - 1] = float(v)
      rows.append(row)
  return _intercept(np.array(rows)), dict(
      binary=np.array(labels, np.float64))


def load_randhie():
  t, cols = _csv("randhie")
  x = np.stack([t[c] for c in cols[1:]], 1)
  return _intercept(x), dict(counts=(None, t["mdvis"].astype(np.float64)))


def load_fair():
  t, cols = _csv("fair")
  x = np.stack([t[c] for c in cols[:-1]], 1)
  return _intercept(x), dict(binary=(t["affairs"] > 0).astype(np.float64),
                             regression=t["affairs"].astype(np.float64))


def load_anes96():
  t, cols = _csv("anes96", delimiter="\t")
  x = np.stack([t[c] for c in cols if c != "vote"], 1)
  return _intercept(x), dict(binary=t["vote"].astype(np.float64))


def load_star98():
  t, cols = _csv("star98")
  # The share of a district's pupils above the national median in maths.
  x = np.stack([t[c] for c in cols[2:]], 1)
  return _intercept(x), dict(
      regression=(t["PR50M"] / t["MATHTOT"]).astype(np.float64))


def load_spector():
  t, cols = _csv("spector", delimiter=" ")
  x = np.stack([t[c] for c in ("GPA", "TUCE", "PSI")], 1)
  return _intercept(x), dict(binary=t["GRADE"].astype(np.float64))


def load_criteo(rows=5_000, bucket_bits=16):
  from tf_sdca.data import generate_criteo_arrays  # pylint: disable=import-outside-toplevel
  d = generate_criteo_arrays(rows, num_buckets=1 << bucket_bits, seed=0)
  n, m = d["cat_ids"].shape
  ids = scipy.sparse.csr_matrix(
      (np.ones(n * m), d["cat_ids"].astype(np.int64).ravel(),
       np.arange(0, n * m + 1, m)), shape=(n, 1 << bucket_bits))
  ids.sum_duplicates()  # an id twice in a row: value 2
  x = scipy.sparse.hstack([ids, scipy.sparse.csr_matrix(
      _intercept(d["dense"]))], format="csr")
  return x, dict(binary=d["labels"].astype(np.float64))


SETS = {
    "breast_cancer": load_breast_cancer, "digits": load_digits,
    "wine": load_wine, "iris": load_iris, "diabetes": load_diabetes,
    "linnerud": load_linnerud, "heart_scale": load_heart_scale,
    "randhie": load_randhie, "fair": load_fair, "anes96": load_anes96,
    "star98": load_star98, "spector": load_spector, "criteo": load_criteo,
}
QUICK_SETS = ("iris", "diabetes")
# Sets measured at the moderate l2 only: RAND HIE's 20,190 rows of Poisson
# at l2/30 reached 1e-6 in no setting within 1,000 passes (the adaptive
# order its suboptimality at 831, never the gap; 170 s of the run).
MODERATE_ONLY = ("randhie",)
TASK_LOSSES = {
    "binary": ("logistic_loss", "hinge_loss", "smooth_hinge_loss"),
    "regression": ("squared_loss", "absolute_loss"),
    "counts": ("poisson_loss",),
    "multiclass": ("softmax_loss", "multiclass_hinge_loss"),
}
SMOOTH = ("logistic_loss", "squared_loss", "smooth_hinge_loss",
          "poisson_loss", "softmax_loss")


# ------------------------------------------------------------ the objective
def primal(loss, x, y, l2, w, gamma=1.0):
  """P(w) in float64; w `[d]`, or `[d, K]` for a multiclass loss."""
  z = x @ w
  if loss in ("softmax_loss", "multiclass_hinge_loss"):
    yi = y.astype(np.int64)
    zy = z[np.arange(len(y)), yi]
    if loss == "softmax_loss":
      zmax = z.max(axis=1)
      value = np.sum(zmax + np.log(np.exp(z - zmax[:, None]).sum(1)) - zy)
    else:
      margin = z + 1.0
      margin[np.arange(len(y)), yi] -= 1.0
      value = np.sum(margin.max(axis=1) - zy)
  else:
    s = 2.0 * y - 1.0
    if loss == "logistic_loss":
      value = np.logaddexp(0.0, -s * z).sum()
    elif loss == "squared_loss":
      value = 0.5 * np.sum((z - y) ** 2)
    elif loss == "absolute_loss":
      value = np.abs(z - y).sum()
    elif loss == "poisson_loss":
      value = np.sum(np.exp(z) - y * z)
    elif loss == "hinge_loss":
      value = np.maximum(0.0, 1.0 - s * z).sum()
    elif loss == "smooth_hinge_loss":
      m = s * z
      value = np.where(m >= 1.0, 0.0, np.where(
          m <= 1.0 - gamma, 1.0 - m - gamma / 2,
          (1.0 - m) ** 2 / (2 * gamma))).sum()
    else:
      raise ValueError(loss)
  return float(value + 0.5 * l2 * np.sum(w * w))


def _gradient(loss, x, y, l2, w, k):
  """(P, grad P) of a smooth loss, for L-BFGS (w flat)."""
  w = w.reshape(-1, k) if k > 1 else w
  z = x @ w
  if loss == "softmax_loss":
    p = np.exp(z - z.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    p[np.arange(len(y)), y.astype(np.int64)] -= 1.0
    dz = p
  elif loss == "logistic_loss":
    s = 2.0 * y - 1.0
    dz = -s / (1.0 + np.exp(np.clip(s * z, -700, 700)))
  elif loss == "squared_loss":
    dz = z - y
  elif loss == "poisson_loss":
    dz = np.exp(z) - y
  elif loss == "smooth_hinge_loss":
    s = 2.0 * y - 1.0
    m = s * z
    dz = -s * np.where(m >= 1.0, 0.0, np.where(m <= 0.0, 1.0, 1.0 - m))
  g = np.asarray(x.T @ dz) + l2 * w
  return primal(loss, x, y, l2, w), g.ravel()


def lbfgs_optimum(loss, x, y, l2, k):
  """(P*, its certified bound on P - P*) by scipy's L-BFGS."""
  d = x.shape[1]
  res = minimize(lambda w: _gradient(loss, x, y, l2, w, k),
                 np.zeros(d * k), jac=True, method="L-BFGS-B",
                 options=dict(maxiter=20000, maxfun=40000, ftol=1e-16,
                              gtol=1e-13, maxcor=30))
  return float(res.fun), float(np.sum(res.jac ** 2) / (2.0 * l2))


# -------------------------------------------------------------- the doors
def _data(x):
  if scipy.sparse.issparse(x):
    return dict(indptr=x.indptr.astype(np.int64),
                indices=x.indices.astype(np.int64),
                values=x.data.astype(np.float32), num_features=x.shape[1])
  return dict(dense=x.astype(np.float32))


def _weights(model):
  parts = [w for w in (model.sparse_weights, model.dense_weights)
           if w is not None]
  return np.concatenate(parts) if len(parts) > 1 else parts[0]


class Result:
  """One fit: passes to the gap (None: not within the cap), passes to
  the suboptimality, seconds, the last relative suboptimality."""

  def __init__(self, setting, gap_passes, sub_passes, seconds, last_sub):
    self.setting = setting
    self.gap_passes = gap_passes
    self.sub_passes = sub_passes
    self.seconds = seconds
    self.last_sub = last_sub
    self.primals = []

  def as_dict(self):
    return dict(setting=self.setting, gap_passes=self.gap_passes,
                sub_passes=self.sub_passes, seconds=self.seconds,
                last_sub=self.last_sub, cap=getattr(self, "cap", None))


def _first(values, target):
  for i, v in enumerate(values, 1):
    if v <= target:
      return i
  return None


def memory_fit(problem, setting, max_epochs):
  """`InMemorySdca` with `setting` (the options changed from their
  defaults), tol = TARGET."""
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  start = time.perf_counter()
  model = InMemorySdca(loss=problem.loss, l2=problem.l2,
                       num_classes=problem.k_or_none, **setting)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    history = model.fit(problem.y, **problem.data, epochs=max_epochs,
                        tol=TARGET, verbose=0)
  seconds = time.perf_counter() - start
  primals = np.asarray(history["loss"]) * problem.n
  gaps = history["duality_gap"]
  r = Result(setting, len(gaps) if gaps[-1] <= TARGET else None, None,
             seconds, None)
  r.primals = primals
  r.weights = _weights(model)
  return r


def keras_fit(problem, setting, max_epochs):
  """`keras.LinearModel.fit` on the arrays (the intercept is our column:
  use_bias=False), tol = TARGET."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  start = time.perf_counter()
  model = LinearModel(loss=losses.short_name(problem.loss), l2=problem.l2,
                      use_bias=False, num_classes=problem.k_or_none,
                      **setting)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    history = model.fit(problem.x.astype(np.float32), problem.y,
                        epochs=max_epochs, tol=TARGET, verbose=0)
  seconds = time.perf_counter() - start
  h = history.history
  gaps = h["duality_gap"]
  r = Result(setting, len(gaps) if gaps[-1] <= TARGET else None, None,
             seconds, None)
  r.primals = np.asarray(h["loss"]) * problem.n
  return r


def sklearn_fit(problem, setting, max_epochs):
  """`SDCAClassifier` / `SDCARegressor` with C = 1 / l2 on our columns
  (fit_intercept=False), tol = TARGET, a fixed seed; `setting` its
  visit_order."""
  from tf_sdca import sklearn as sk  # pylint: disable=import-outside-toplevel
  short = losses.short_name(problem.loss)
  cls = sk.SDCAClassifier if short in sk.CLASSIFIER_LOSSES else (
      sk.SDCARegressor)
  kwargs = dict(setting)
  seed = kwargs.pop("seed", 0)
  if cls is sk.SDCAClassifier:
    kwargs["C"] = 1.0 / problem.l2
  else:
    kwargs["alpha"] = problem.l2
  start = time.perf_counter()
  # random_state=0: its default (None) draws the order's seed, which moved
  # the hinge's passes 2.5x between runs (anes96: 108 and 44).
  est = cls(loss=short, fit_intercept=False, tol=TARGET,
            max_iter=max_epochs, random_state=seed, **kwargs)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    est.fit(problem.x, problem.y)
  seconds = time.perf_counter() - start
  w = est.coef_.ravel()
  r = Result(setting, est.n_iter_ if est.duality_gap_ <= TARGET else None,
             None, seconds, None)
  r.final = primal(problem.loss, problem.x, problem.y, problem.l2, w)
  return r


def streamed_fit(problem, setting, max_epochs, batches=4):
  """`SdcaModel` over `batches` fixed consecutive batches, one
  `tf.function` step per batch, until the objective is within TARGET of
  P* (untimed after each pass) or `max_epochs`."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tf_sdca  # pylint: disable=import-outside-toplevel
  n, d = problem.x.shape
  keys = {o.name: o.sdca_key for o in options.OPTIONS.values()}
  start = time.perf_counter()
  w = tf.Variable(tf.zeros([d]))
  model = tf_sdca.SdcaModel(None, dict(
      sparse_features_weights=[], dense_features_weights=[w]), dict(
          loss_type=problem.loss, symmetric_l2_regularization=problem.l2,
          **{keys[k]: v for k, v in setting.items()}))
  size = -(-n // batches)
  parts = []
  for s in range(0, n, size):
    rows = slice(s, min(n, s + size))
    b = rows.stop - rows.start
    parts.append(dict(
        sparse_features=[], dense_features=[tf.constant(
            problem.x[rows].astype(np.float32))],
        example_weights=tf.ones([b]),
        example_labels=tf.constant(problem.y[rows].astype(np.float32)),
        example_ids=tf.strings.as_string(tf.range(s, s + b))))

  @tf.function(reduce_retracing=True)
  def step(examples):
    model.update_weights(model.minimize(examples=examples))

  # The clock runs from building the model through the steps (tracing
  # included: held rows change a call's shapes, which traces again), not
  # the objective computed after each pass.
  seconds = time.perf_counter() - start
  # (P* is negative for Poisson: within TARGET of |P*|.)
  target = problem.optimum + TARGET * abs(problem.optimum)
  primals = []
  passes = []
  for _ in range(max_epochs):
    t0 = time.perf_counter()
    for b in parts:
      step(b)
    passes.append(time.perf_counter() - t0)
    primals.append(primal(problem.loss, problem.x, problem.y, problem.l2,
                          w.numpy().astype(np.float64)))
    if primals[-1] <= target:
      break
  r = Result(setting, None, None, seconds + sum(passes), None)
  r.primals = np.asarray(primals)
  # The passes after the first, which traces the step (twice with held
  # rows: a call's shapes change): what the seconds flag compares.
  r.steady = sum(passes[1:])
  return r


# ---------------------------------------------------------- the knob grid
def knob_settings(loss, door, row_norms=None, l2=None):
  """[{option: value}] of the settings tried beside the defaults: one
  option at a time changed from `options.OPTIONS`' default (the default
  order that of rows with these `engine.row_norms` and l2)."""
  default = {name: o.default for name, o in options.OPTIONS.items()}
  out = []
  if door == "streamed":
    for f in (0.0, 0.5, 0.75, "auto"):
      if f != default["carry_over"]:
        out.append(dict(carry_over=f))
    return out
  if loss == "multiclass_hinge_loss":
    orders = options.MULTICLASS_HINGE_VISIT_ORDERS
  elif losses.is_multiclass(loss):
    orders = options.MULTICLASS_VISIT_ORDERS
  else:
    orders = options.VISIT_ORDERS + (
        ("asdca",) if loss in options.ASDCA_LOSSES else ())
  # The loss's own order when the table's default is None (in memory).
  default_order = options.visit_order_for(loss, default["visit_order"],
                                          row_norms=row_norms, l2=l2)
  for order in orders:
    if order != default_order:
      out.append(dict(visit_order=order))
  if door == "sklearn":
    return out
  for m in (0.0, "auto", 0.5):
    if m != default["momentum"]:
      out.append(dict(momentum=m))
  if loss == "multiclass_hinge_loss":
    for step in options.HINGE_STEPS:
      if step != default["hinge_step"]:
        out.append(dict(hinge_step=step))
  return out


def setting_name(setting):
  if not setting:
    return "default"
  return ", ".join(f"{k}={v}" for k, v in setting.items())


def _sparse_norms(x):
  """`engine.row_norms`' sparse part of CSR `x`: the |x_i|^2 of the rows
  `engine.norm_rows` reads, each its float32 values' squares added in order
  (what `TfSdca>PackRows` returns for them)."""
  squares = np.square(x.data.astype(np.float32).astype(np.float64))
  return np.array([np.cumsum(squares[x.indptr[i]:x.indptr[i + 1]])[-1]
                   if x.indptr[i + 1] > x.indptr[i] else 0.0
                   for i in engine.norm_rows(x.shape[0])])


# -------------------------------------------------------------- a problem
class Problem:
  """One (set, loss, l2)."""

  def __init__(self, set_name, loss, x, y, l2, l2_name):
    self.set_name, self.loss, self.x, self.y = set_name, loss, x, y
    self.l2, self.l2_name = l2, l2_name
    self.n = x.shape[0]
    self.k = int(y.max()) + 1 if losses.is_multiclass(loss) else 1
    self.k_or_none = self.k if self.k > 1 else None
    self.data = _data(x)
    self.row_norms = (
        engine.row_norms(self.n, _sparse_norms(x), None)
        if scipy.sparse.issparse(x) else engine.row_norms(self.n, None, x))
    self.optimum = None
    self.certified = None

  @property
  def label(self):
    return (f"{self.set_name} {losses.short_name(self.loss)} "
            f"l2={self.l2:.3g} ({self.l2_name})")


def problems(set_names):
  """The (set, loss, l2) problems of the sets (sets whose files are
  absent are skipped with a line saying so)."""
  out = []
  for name in set_names:
    try:
      x, tasks = SETS[name]()
    except FileNotFoundError as e:
      print(f"[{name}: skipped, {e} is missing (.ci/setup fetches it)]")
      continue
    for task, target in tasks.items():
      xx = x
      if isinstance(target, tuple):
        xx, target = target
        xx = x if xx is None else xx
      sq = (xx.multiply(xx).sum(1) if scipy.sparse.issparse(xx) else
            (xx * xx).sum(1))
      moderate = float(np.mean(sq))
      for loss in TASK_LOSSES[task]:
        for l2, l2_name in ((moderate, "moderate"),
                            (moderate * WEAK, "weak"))[
                                :1 if name in MODERATE_ONLY else 2]:
          out.append(Problem(name, loss, xx, target, l2, l2_name))
  return out


def reference(problem, max_epochs, budget):
  """P* and its certificate (an upper bound on P - P*, relative)."""
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  best, bound = np.inf, np.inf
  if problem.loss in SMOOTH:
    value, g = lbfgs_optimum(problem.loss, problem.x, problem.y, problem.l2,
                             problem.k)
    best, bound = value, g / abs(value)
  # A long run of ours, certified by its duality gap.
  order = {"hinge_loss": "adaptive", "absolute_loss": "adaptive",
           "multiclass_hinge_loss": "shrinking"}.get(problem.loss,
                                                     "permutation")
  model = InMemorySdca(loss=problem.loss, l2=problem.l2, visit_order=order,
                       num_classes=problem.k_or_none)
  start = time.perf_counter()
  gap = np.inf
  epochs = 0
  chunk = 200
  if bound <= 1e-12:  # L-BFGS certified: ours only to check the history
    budget, chunk = 0.0, 20
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    while epochs < 10 * max_epochs and (
        epochs == 0 or time.perf_counter() - start < budget):
      h = model.fit(problem.y, **problem.data, epochs=epochs + chunk,
                    tol=1e-11, verbose=0, initial_epoch=epochs)
      epochs += len(h["loss"])
      gap = h["duality_gap"][-1]
      if gap <= 1e-11:
        break
  w = _weights(model)
  ours = primal(problem.loss, problem.x, problem.y, problem.l2, w)
  if ours < best:
    best = ours
  if np.isfinite(gap):
    bound = min(bound, gap * abs(ours / best))
  # Ours' own objective (float32 rows) against ours in float64.
  problem.history_check = abs(h["loss"][-1] * problem.n - ours) / abs(ours)
  return best, bound


_WARM = set()


def _timed(fit, problem, setting, max_epochs, door):
  del door  # (repeats: `_repeat`, in rounds over the settings)
  return fit(problem, setting, max_epochs)


def _repeat(fit, problem, results, rounds=4, budget=1.0):
  """Times every setting again, one fit each a round, while a round takes
  under `budget` seconds (at most `rounds` more), keeping each setting's
  fastest seconds: the passes are the same every run (one thread, a fixed
  seed), and a few-millisecond fit's seconds are the machine's noise,
  which rounds spread over the settings alike (every other round in the
  reverse order: the default is not always the one timed first)."""
  for i in range(rounds):
    if sum(r.seconds for r in results) > budget:
      return
    for r in (results[::-1] if i % 2 == 0 else results):
      again = fit(problem, r.setting, r.cap)
      r.seconds = min(r.seconds, again.seconds)


def _bounded(fit, problem, setting, bound, door):
  r = _timed(fit, problem, setting, bound, door)
  r.cap = bound
  _measure(problem, r)
  return r


def _passes(r, door):
  return r.sub_passes if door == "streamed" else r.gap_passes


def run_problem(problem, doors, max_epochs, ref_budget):
  """{door: (default Result, [knob Results])} of one problem."""
  problem.optimum, problem.certified = reference(problem, max_epochs,
                                                 ref_budget)
  out = {}
  for door in doors:
    if door == "streamed" and (losses.is_multiclass(problem.loss) or
                               scipy.sparse.issparse(problem.x)):
      continue
    if door == "sklearn" and losses.is_multiclass(problem.loss):
      continue
    if door != "memory" and problem.l2_name != "moderate":
      continue  # (the weak l2: InMemorySdca, whose engine they share)
    fit = FITS[door]
    if (door, problem.loss) not in _WARM:  # first calls trace and load
      _WARM.add((door, problem.loss))
      fit(problem, {}, min(max_epochs, 3))
    if door == "streamed":
      max_epochs = min(max_epochs, STREAMED_EPOCHS)
    # Each fit's cap: the fewest passes to the target so far (a setting
    # that needs more is not the best; it shows as '-').
    bound = max_epochs
    results = []
    for setting in [{}]:
      results.append(_bounded(fit, problem, setting, bound, door))
      bound = _passes(results[-1], door) or bound
    settings = knob_settings(problem.loss, door,
                             None if door == "streamed" else
                             problem.row_norms, problem.l2)
    if door == "keras":
      # The same engine as InMemorySdca: its default against the best
      # in-memory knob.
      memory = out.get("memory")
      best = memory and min([memory[0]] + memory[1], key=_key)
      settings = [best.setting] if best and best.setting else []
    for setting in settings:
      try:
        results.append(_bounded(fit, problem, setting, bound, door))
      except ValueError as e:  # an option this loss refuses
        print(f"    {setting_name(setting)}: {e}")
        continue
      bound = min(bound, _passes(results[-1], door) or bound)
    if door != "streamed":
      _repeat(fit, problem, results)
    out[door] = (results[0], results[1:])
  return out


def _measure(problem, r):
  """Fills `sub_passes` and `last_sub` from the per-pass primals."""
  p = problem.optimum
  if len(r.primals):
    subs = (np.asarray(r.primals) - p) / abs(p)
    r.sub_passes = _first(subs, TARGET)
    r.last_sub = float(subs[-1])
  else:
    r.last_sub = (r.final - p) / abs(p)
    r.sub_passes = r.gap_passes if r.last_sub <= TARGET else None


def _key(r):
  """Sort key of a result: passes to the gap, not reached last (ties: the
  first tried, as in `compare`)."""
  return (r.gap_passes is None, r.gap_passes or 0)


def _ratio(a, b):
  if a is None and b is None:
    return None
  if a is None:
    return float("inf")
  if b is None:
    return 0.0
  return a / b if b else float("inf")


def compare(problem, door, default, knobs):
  """A row: the default's and the best knob's numbers and the ratios."""
  pool = [default] + list(knobs)
  # The best knob setting per measure (the default when none beats it).
  # (Ties: the default, then the first knob tried.)
  best_gap = min(pool, key=lambda r: (r.gap_passes is None,
                                      r.gap_passes or 0))
  best_sub = min(pool, key=lambda r: (r.sub_passes is None,
                                      r.sub_passes or 0))
  reached = [r for r in pool if (r.gap_passes or r.sub_passes)]
  best_sec = min(reached, key=lambda r: r.seconds) if reached else default
  measure = "gap" if door != "streamed" else "sub"
  row = dict(
      set=problem.set_name, loss=losses.short_name(problem.loss),
      l2=problem.l2, l2_name=problem.l2_name, door=door, n=problem.n,
      certified=problem.certified, optimum=problem.optimum,
      history_check=problem.history_check,
      default=default.as_dict(), best_gap=best_gap.as_dict(),
      best_sub=best_sub.as_dict(), best_seconds=best_sec.as_dict(),
      knobs=[r.as_dict() for r in knobs],
      gap_ratio=_ratio(default.gap_passes, best_gap.gap_passes),
      sub_ratio=_ratio(default.sub_passes, best_sub.sub_passes),
      seconds_ratio=(default.seconds / best_sec.seconds
                     if (default.gap_passes or default.sub_passes) else
                     (None if best_sec is default else float("inf"))))
  flags = []
  if measure == "gap" and row["gap_ratio"] and row["gap_ratio"] > FLAG:
    flags.append("gap passes")
  if row["sub_ratio"] and row["sub_ratio"] > FLAG:
    flags.append("sub passes")
  if (row["seconds_ratio"] and row["seconds_ratio"] > FLAG and
      default.seconds > MIN_FLAG_SECONDS):
    flags.append("seconds")
  row["flags"] = flags
  return row


FITS = dict(memory=memory_fit, keras=keras_fit, sklearn=sklearn_fit,
            streamed=streamed_fit)


def _median_passes(values):
  """The median of passes, a fit that did not reach the target counted
  above every other (None when the median did not reach it)."""
  m = float(np.median([np.inf if v is None else v for v in values]))
  return None if not np.isfinite(m) else m


def confirm(problem, row, default, knobs, max_epochs, seeds=SEEDS):
  """Measures a flagged row again and keeps the flags that hold.

  Passes (one thread: a seed fixes them) depend on the seed of the visiting
  order, up to 5x on a hinge stream: a row flagged on passes at seed 0 is
  fitted again with seeds 0 to `seeds` - 1, the default and the setting
  best at seed 0 in each flagged measure, and keeps its flag where the
  median of the default's passes is still over FLAG x the setting's
  median. Seconds: a row flagged on seconds is timed again, the default
  and the fastest setting, in `SECONDS_ROUNDS` more rounds alternating
  which goes first (the fastest run of each kept), and keeps its flag
  where the default still takes over FLAG x and over MIN_FLAG_SECONDS
  (the streamed door: its seconds after the first pass, which traces the
  step and costs every setting alike). Fills row["seed0_flags"] (the flags before) and row["again"]."""
  door = row["door"]
  fit = FITS[door]
  cap = min(max_epochs, STREAMED_EPOCHS) if door == "streamed" else (
      max_epochs)
  row["seed0_flags"] = list(row["flags"])
  row["again"] = {}
  flags = []
  runs = {}

  def over_seeds(setting):
    key = setting_name(setting)
    if key not in runs:
      rs = [_bounded(fit, problem, dict(setting, seed=s), cap, door)
            for s in range(seeds)]
      runs[key] = ([r.gap_passes for r in rs], [r.sub_passes for r in rs])
    return runs[key]

  for flag, measure, best in (("gap passes", 0, row["best_gap"]),
                              ("sub passes", 1, row["best_sub"])):
    if flag not in row["flags"]:
      continue
    mine = over_seeds({})[measure]
    theirs = over_seeds(best["setting"])[measure]
    a, b = _median_passes(mine), _median_passes(theirs)
    ratio = _ratio(a, b)
    row["again"][flag] = dict(setting=best["setting"], default=mine,
                              best=theirs, default_median=a,
                              best_median=b, ratio=ratio)
    if ratio is not None and ratio > FLAG:
      flags.append(flag)
  if "seconds" in row["flags"]:
    fastest = [r for r in knobs
               if r.setting == row["best_seconds"]["setting"]][:1]
    pair = [default] + fastest
    for i in range(SECONDS_ROUNDS):
      for r in (pair[::-1] if i % 2 == 0 else pair):
        again = fit(problem, r.setting, r.cap)
        r.seconds = min(r.seconds, again.seconds)
        if door == "streamed":
          r.steady = min(r.steady, again.steady)
    ratio = default.seconds / pair[-1].seconds
    # The streamed door: its passes after the first (tracing, ~1 s a fit
    # at load 7, is a fixed cost of every setting alike).
    compared = ((default.steady, pair[-1].steady) if door == "streamed"
                else (default.seconds, pair[-1].seconds))
    row["again"]["seconds"] = dict(
        setting=pair[-1].setting, default=default.seconds,
        best=pair[-1].seconds, ratio=ratio, compared=compared,
        compared_ratio=_ratio(*compared))
    row["default"]["seconds"] = default.seconds
    row["best_seconds"]["seconds"] = pair[-1].seconds
    row["seconds_ratio"] = ratio
    if _ratio(*compared) > FLAG and compared[0] > MIN_FLAG_SECONDS:
      flags.append("seconds")
  row["flags"] = flags
  return row


def _p(v):
  return "-" if v is None else f"{v:g}"


def _x(v):
  if v is None:
    return "-"
  return "inf" if v == float("inf") else f"{v:.2f}"


def _again(row):
  """The second measurement of a row flagged at seed 0, as text."""
  out = []
  for flag, a in row.get("again", {}).items():
    if flag == "seconds":
      out.append(f"s {a['default']:.3f} / {a['best']:.3f}" + (
          f", after the first pass {a['compared'][0]:.3f} / "
          f"{a['compared'][1]:.3f}" if row["door"] == "streamed" else ""))
    else:
      out.append(f"{flag.split()[0]} median {_p(a['default_median'])} / "
                 f"{_p(a['best_median'])}")
  return ", ".join(out)


def print_row(row):
  d, bg, bs = row["default"], row["best_gap"], row["best_sub"]
  flag = " << " + ", ".join(row["flags"]) if row["flags"] else ""
  if row.get("again"):
    flag += f" (again: {_again(row)})"
  print(f"  {row['door']:9s} default gap {_p(d['gap_passes']):>5s} sub "
        f"{_p(d['sub_passes']):>5s} {d['seconds']:7.3f} s | best gap "
        f"{_p(bg['gap_passes']):>5s} ({setting_name(bg['setting'])}) sub "
        f"{_p(bs['sub_passes']):>5s} ({setting_name(bs['setting'])}) "
        f"{row['best_seconds']['seconds']:7.3f} s "
        f"({setting_name(row['best_seconds']['setting'])}) | ratio gap "
        f"{_x(row['gap_ratio'])} sub {_x(row['sub_ratio'])} s "
        f"{_x(row['seconds_ratio'])}{flag}", flush=True)


# ---------------------------------------------------------------- markdown
def md_value(v):
  return "None" if v is None else repr(v) if isinstance(v, str) else f"{v:g}"


def defaults_markdown():
  """The defaults table of g3doc/defaults.md, from `options.OPTIONS`."""
  lines = ["| option | default | runs | losses | what it is |",
           "| --- | --- | --- | --- | --- |"]
  for o in options.OPTIONS.values():
    modes = ", ".join(m for m in options.MODES if m in o.modes)
    where = ("every loss" if o.losses is None else
             ", ".join(losses.short_name(l) for l in o.losses))
    lines.append(f"| `{o.name}` | `{md_value(o.default)}` | {modes} | "
                 f"{where} | {o.help} |")
  return "\n".join(lines)


def results_markdown(rows):
  lines = [
      "| set | loss | l2 | door | default: gap / sub passes, s | "
      "best setting | best: gap / sub passes, s | ratio gap / sub / s |",
      "| --- | --- | --- | --- | --- | --- | --- | --- |"]
  for r in rows:
    d = r["default"]
    bg, bs, bsec = r["best_gap"], r["best_sub"], r["best_seconds"]
    if r["door"] == "streamed":  # no gap: the best by 'sub'
      bg = bs
    mark = " **>1.5x**" if r["flags"] else ""
    if r.get("again"):
      mark += f" (again: {_again(r)})"
    lines.append(
        f"| {r['set']} | {r['loss']} | {r['l2']:.3g} ({r['l2_name']}) | "
        f"{r['door']} | {_p(d['gap_passes'])} / {_p(d['sub_passes'])}, "
        f"{d['seconds']:.3f} | {setting_name(bg['setting'])} | "
        f"{_p(bg['gap_passes'])} / {_p(bs['sub_passes'])}, "
        f"{bsec['seconds']:.3f} | {_x(r['gap_ratio'])} / "
        f"{_x(r['sub_ratio'])} / {_x(r['seconds_ratio'])}{mark} |")
  return "\n".join(lines)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--quick", action="store_true",
                      help=f"the sets {', '.join(QUICK_SETS)} only")
  parser.add_argument("--sets", default=None)
  parser.add_argument("--losses", default=None,
                      help="only these losses (short names)")
  parser.add_argument("--l2", default="moderate,weak")
  parser.add_argument("--doors", default="memory,keras,sklearn,streamed")
  parser.add_argument("--max-epochs", type=int, default=1000)
  parser.add_argument("--ref-budget", type=float, default=10.0,
                      help="seconds of the long reference run")
  parser.add_argument("--seeds", type=int, default=SEEDS,
                      help="seeds a row flagged at seed 0 is measured "
                      "again over (medians; 1: no second measurement)")
  parser.add_argument("--markdown", action="store_true")
  parser.add_argument("--defaults-only", action="store_true",
                      help="print the defaults table (markdown) and stop")
  parser.add_argument("--json", default=None)
  args = parser.parse_args(argv)
  if args.defaults_only:
    print(defaults_markdown())
    return []
  names = (args.sets.split(",") if args.sets else
           list(QUICK_SETS) if args.quick else list(SETS))
  doors = args.doors.split(",")
  wanted = set(args.l2.split(","))
  if args.quick:  # CI-sized: the in-memory doors, the moderate l2
    doors = [d for d in doors if d in ("memory", "sklearn")]
    wanted = {"moderate"}
    args.max_epochs = min(args.max_epochs, 500)
  only = set(args.losses.split(",")) if args.losses else None
  print(f"python {platform.python_version()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.1f}, {time.strftime('%Y-%m-%d %H:%M %Z')}")
  print("defaults (tf_sdca.options.OPTIONS): " + ", ".join(
      f"{o.name}={md_value(o.default)}" for o in options.OPTIONS.values()))
  start = time.perf_counter()
  rows = []
  for problem in problems(names):
    if problem.l2_name not in wanted or (
        only and losses.short_name(problem.loss) not in only):
      continue
    t0 = time.perf_counter()
    results = run_problem(problem, doors, args.max_epochs, args.ref_budget)
    print(f"{problem.label}: n = {problem.n}, P* = {problem.optimum:.10g} "
          f"(certified to {problem.certified:.1e}; history vs float64 "
          f"{problem.history_check:.1e}), {time.perf_counter() - t0:.1f} s")
    for door, (default, knobs) in results.items():
      row = compare(problem, door, default, knobs)
      if row["flags"] and args.seeds > 1:
        confirm(problem, row, default, knobs, args.max_epochs, args.seeds)
      print_row(row)
      rows.append(row)
  seed0 = [r for r in rows if r.get("seed0_flags", r["flags"])]
  flagged = [r for r in rows if r["flags"]]
  print(f"\n{len(rows)} rows, {len(seed0)} with a default > {FLAG}x the "
        f"best knob at seed 0, {len(flagged)} still once measured again ("
        f"passes: medians of seeds 0-{args.seeds - 1}; seconds: "
        f"{SECONDS_ROUNDS} more rounds) ({time.perf_counter() - start:.0f} "
        f"s, load {os.getloadavg()[0]:.1f})")
  for r in seed0:
    print(f"  {r['set']} {r['loss']} l2={r['l2']:.3g} ({r['l2_name']}) "
          f"{r['door']}: {', '.join(r.get('seed0_flags', r['flags']))}; gap "
          f"{_x(r['gap_ratio'])}, sub {_x(r['sub_ratio'])}, s "
          f"{_x(r['seconds_ratio'])}; again: {_again(r) or '-'}; "
          f"{'flagged' if r['flags'] else 'not flagged'}")
  print("(gap: passes of a fit with tol=1e-6 to the relative duality gap; "
        "sub: the first pass within 1e-6 of P*; s: wall seconds of the "
        "fresh fit, call to returned model (streamed: the steps' seconds "
        "to 'sub'); '-': not within --max-epochs; best: the best of the "
        "knob settings and the default; ratio: default / best)")
  if args.markdown:
    print("\n" + defaults_markdown() + "\n\n" + results_markdown(rows))
  if args.json:
    with open(args.json, "w") as f:
      json.dump(rows, f, indent=1, default=str)
  return rows


if __name__ == "__main__":
  main()
  sys.exit(0)

"""Linear-solver benchmark suite: time to a relative suboptimality.

Every solver minimises the same L2-regularised logistic regression

  P(w) = sum_i log(1 + exp(-y_i w.x_i)) + l2/2 |w|^2,   y_i in {-1, +1},

where x_i includes a constant-1 column (the intercept, regularised like the
other weights; TensorFlow's `l2`, scikit-learn's `C = 1 / l2` with
`fit_intercept=False`, Snap ML's `regularizer = l2`). On breast_cancer at
l2 = 1 LIBLINEAR and saga reach the optimum within 4e-11 (relative), but
Snap ML's solver stalls at 1.16e-5 whatever its `tol` and `max_iter`, at
weights that are not a stationary point of P (not a tolerance stop), so it
never reaches 1e-6 there; on breast_cancer at l2 = 10 and digits at l2 = 1
it ends within 2e-7 and 4.5e-8 of the optimum (2026-11-29). Every
solver is timed alike: a fresh fit of k epochs (iterations) for each k of
one ~1.5x grid (`GRID`), wall clock from the call to the returned weights,
all its set-up included (building batches or variables, packing, tracing),
recorded as `(seconds, epochs, P(w))`. Objective evaluations are not
timed. A reference optimum, computed once per problem and cached, gives the
relative suboptimality `(P(w) - P*) / P*`; its certificate is our duality
gap.

Run through `bench/run.py` (or `python -m bench`).
"""
import dataclasses
import json
import os
import time
import warnings

import numpy as np
import scipy.sparse

CACHE = os.path.join(os.path.dirname(os.path.abspath(__file__)), ".cache")


# ------------------------------------------------------------------ problems
@dataclasses.dataclass
class Problem:
  """A logistic-regression problem in two layouts: our trainer's (a dense
  block, optionally fixed-width sparse ids) and a CSR matrix for the peers
  (columns: [ids' table | dense block])."""
  name: str
  labels: np.ndarray            # float32 {0, 1}
  dense: np.ndarray             # float32 [n, k], last column = 1
  ids: np.ndarray = None        # int64 [n, m] or None
  table_size: int = 0
  l2: float = 1.0
  _csr: object = None

  @property
  def n(self):
    return len(self.labels)

  @property
  def nnz_per_row(self):
    return self.dense.shape[1] + (0 if self.ids is None else self.ids.shape[1])

  def csr(self):
    """The design matrix as float64 CSR (built once)."""
    if self._csr is None:
      blocks = []
      if self.ids is not None:
        n, m = self.ids.shape
        blocks.append(scipy.sparse.csr_matrix(
            (np.ones(n * m), self.ids.ravel(),
             np.arange(0, n * m + 1, m)), shape=(n, self.table_size)))
      blocks.append(scipy.sparse.csr_matrix(self.dense.astype(np.float64)))
      self._csr = scipy.sparse.hstack(blocks, format="csr")
    return self._csr

  def objective(self, w):
    """P(w) in float64 for w over the CSR columns."""
    z = self.csr() @ w
    yy = 2.0 * self.labels.astype(np.float64) - 1.0
    return float(np.logaddexp(0.0, -yy * z).sum() + 0.5 * self.l2 * w @ w)


def dedupe_row_ids(ids, buckets):
  """Moves an id repeated inside a row to a spare bucket `buckets + field`
  (TensorFlow's op rejects repeats; hashing makes ~0.06% of Criteo-shaped
  rows have one). Returns the fixed ids, the table size and the rows fixed."""
  ids = ids.copy()
  order = np.sort(ids, axis=1)
  dup_rows = np.flatnonzero((np.diff(order, axis=1) == 0).any(axis=1))
  for r in dup_rows:
    seen = set()
    for f in range(ids.shape[1]):
      if ids[r, f] in seen:
        ids[r, f] = buckets + f
      seen.add(ids[r, f])
  return ids, buckets + ids.shape[1], len(dup_rows)


def criteo_problem(rows, bucket_bits=20, l2=1.0, seed=0):
  """Criteo-shaped rows: 13 log-counts scaled to [0, 1], an intercept and 26
  hashed categorical ids (40 non-zeros per row)."""
  from tf_sdca.data import generate_criteo_arrays  # pylint: disable=import-outside-toplevel
  data = generate_criteo_arrays(rows, num_buckets=1 << bucket_bits, seed=seed)
  ids, table, _ = dedupe_row_ids(data["cat_ids"].astype(np.int64),
                                 1 << bucket_bits)
  dense = data["dense"] / np.maximum(data["dense"].max(axis=0), 1e-6)
  dense = np.hstack([dense, np.ones((rows, 1))]).astype(np.float32)
  return Problem(f"criteo-{rows}", data["labels"].astype(np.float32), dense,
                 ids, table, l2)


def dense_problem(rows, dim=64, l2=1.0, seed=0):
  """Gaussian features with correlated columns and a logistic ground truth."""
  rng = np.random.default_rng(seed)
  mix = rng.normal(size=(dim, dim)) / np.sqrt(dim)
  x = (rng.normal(size=(rows, dim)) @ (np.eye(dim) + mix)).astype(np.float32)
  x /= np.sqrt((x.astype(np.float64) ** 2).sum(axis=1).mean())
  truth = rng.normal(size=dim) * 3.0
  y = (rng.uniform(size=rows) < 1 / (1 + np.exp(-(x @ truth)))).astype(
      np.float32)
  dense = np.hstack([x, np.ones((rows, 1), np.float32)])
  return Problem(f"dense-{rows}x{dim}", y, dense, l2=l2)


def sklearn_problem(name, l2=1.0):
  """scikit-learn's bundled real sets, standardised: breast_cancer (569 x
  30) and digits (1797 x 64, classes 0-4 vs 5-9)."""
  from sklearn import datasets  # pylint: disable=import-outside-toplevel
  if name == "breast_cancer":
    bunch = datasets.load_breast_cancer()
    y = bunch.target
  elif name == "digits":
    bunch = datasets.load_digits()
    y = bunch.target >= 5
  else:
    raise ValueError(f"unknown scikit-learn set {name!r}")
  x = bunch.data.astype(np.float64)
  x = (x - x.mean(0)) / np.maximum(x.std(0), 1e-12)
  dense = np.hstack([x, np.ones((len(y), 1))]).astype(np.float32)
  return Problem(name, np.asarray(y, np.float32), dense, l2=l2)


# ----------------------------------------------------------------- reference
def reference_optimum(problem, budget, tol=1e-10):
  """P* from our trainer run until its duality gap is below `tol` (or the
  budget ends), cached in bench/.cache. Returns (P*, certified relative
  gap)."""
  os.makedirs(CACHE, exist_ok=True)
  key = os.path.join(CACHE, f"ref-{problem.name}-l2{problem.l2:g}.json")
  if os.path.exists(key):
    with open(key) as f:
      cached = json.load(f)
    return cached["objective"], cached["gap"]
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  model = InMemorySdca(loss="logistic_loss", l2=problem.l2)
  start = time.perf_counter()
  gap, objective = np.inf, np.inf
  while time.perf_counter() - start < budget and gap > tol:
    history = model.fit(problem.labels, **_our_features(problem), epochs=20,
                        batch_size=problem.n, tol=tol, verbose=0)
    gap = history["duality_gap"][-1]
    objective = history["loss"][-1] * problem.n
  with open(key, "w") as f:
    json.dump({"objective": objective, "gap": gap}, f)
  return objective, gap


def _our_features(problem):
  kwargs = dict(dense=problem.dense)
  if problem.ids is not None:
    kwargs.update(ids=problem.ids, num_features=problem.table_size)
  return kwargs


def in_memory_features(x):
  """InMemorySdca's feature arguments for a dense array or a CSR matrix
  (the multiclass and hinge benchmarks' data): the matrix's own arrays, as
  a scipy user passes them (int32 ids stay int32; a cast here, inside the
  timed call, was the bench's work charged to ours)."""
  if isinstance(x, np.ndarray):
    return dict(dense=x)
  return dict(indptr=x.indptr, indices=x.indices, values=x.data,
              num_features=x.shape[1])


def _our_weights(problem, sparse_w, dense_w):
  parts = [] if problem.ids is None else [sparse_w]
  return np.concatenate(parts + [dense_w])


# ------------------------------------------------------------------- solvers
class Trace:
  """(seconds, epochs, objective) points of one solver."""

  def __init__(self, solver):
    self.solver = solver
    self.points = []  # in the order of the sizes k asked for
    self.sizes = []  # the k of each point
    self.note = ""
    self.ladder = False  # epochs are limits, not counts (Snap ML)
    self.breakdown = None  # ours: where the last fit's time went
    self.fit = None  # fit(k) of `_grid`, for `refine`
    self.spent = 0.0  # seconds of all its fits

  def add(self, seconds, epochs, objective, size=None):
    """A fit of `size` epochs (iterations) asked for (default: `epochs`)."""
    size = epochs if size is None else size
    at = sum(1 for k in self.sizes if k <= size)
    self.points.insert(at, (float(seconds), float(epochs), float(objective)))
    self.sizes.insert(at, size)

  def time_to(self, reference, target):
    """(seconds, epochs) of the fit of the fewest epochs (iterations) asked
    for that came within `target` (relative)."""
    for seconds, epochs, objective in self.points:
      if (objective - reference) / reference <= target:
        return seconds, epochs
    return None, None


# Every solver is timed the same way: a fresh fit of k epochs (iterations)
# for each k of one grid, wall clock from the call to the returned weights,
# everything the fit does included (validating and packing the data, the
# exact gap ours computes after the last epoch - `gap_every=0`: nothing
# reads the others; '-gap' solvers after every epoch -, Python); the
# objective of the returned weights is computed afterwards, untimed. The
# grid grows by ~1.5x; `refine` then bisects between the grid's last size
# that missed a target and its first that reached it, for every solver
# alike, so that each is charged a fit of the fewest epochs (iterations)
# that reach it, not the next grid size (33 epochs, not 41).
GRID = (1, 2, 3, 5, 8, 12, 18, 27, 41, 62, 93, 140, 210, 315, 473, 710)


def _grid(trace, budget, fit):
  """Fills `trace` with one point per grid size k: `fit(k)` returns
  (weights, epochs run, breakdown or None), its wall time is the point's
  seconds. Stops once the fits so far took the budget, or a fit stopped
  early (converged: a larger k adds nothing)."""
  trace.fit = fit
  for k in GRID:
    epochs = _fit_point(trace, fit, k)
    if trace.spent > budget or epochs < k:
      break
  return trace


def _fit_point(trace, fit, k):
  """Times `fit(k)` and adds its point to `trace`; returns its epochs."""
  t0 = time.perf_counter()
  w, epochs, breakdown = fit(k)
  seconds = time.perf_counter() - t0
  trace.spent += seconds
  trace.add(seconds, epochs, trace.problem.objective(
      np.asarray(w, np.float64)), size=k)
  if breakdown is not None and k == max(trace.sizes):
    trace.breakdown = dict(breakdown, seconds=seconds, epochs=epochs)
  return epochs


def refine(trace, reference, targets, budget=float("inf")):
  """For each relative suboptimality in `targets`, bisects the sizes k
  between the largest that missed it and the smallest that reached it,
  until they are consecutive: the trace then has the fit of the fewest
  epochs (iterations) that reach each target, whatever the grid's steps.
  Done for every solver alike (`bench/run.py`); stops adding fits once
  `budget` more seconds were spent."""
  if trace.fit is None or not trace.points:
    return trace
  start = trace.spent
  for target in targets:
    while trace.spent - start <= budget:
      reached = [(objective - reference) / reference <= target
                 for _, _, objective in trace.points]
      if not any(reached):
        break
      first = reached.index(True)
      high = trace.sizes[first]
      low = max((k for k, hit in zip(trace.sizes, reached)
                 if not hit and k < high), default=0)
      if high - low <= 1:
        break
      _fit_point(trace, trace.fit, (low + high) // 2)
  return trace


def _our_fit(problem, make_model, gap_every=0, **data):
  """`fit(k)` for `_grid` of an `InMemorySdca`: a new model trained k
  epochs (the exact gap after the last one, or every `gap_every`-th), the
  weights in the problem's order, and where its time went (from the
  history's training times: the rest is packing, the exact gap and
  Python)."""
  def fit(epochs):
    start = time.perf_counter()
    model = make_model()
    history = model.fit(problem.labels, **data, epochs=epochs,
                        gap_every=gap_every, verbose=0)
    total = time.perf_counter() - start
    n = problem.n
    solve = [n / r for r in history["rows_per_sec"]]
    # The first epoch's rate counts validating and packing the data too.
    first_epoch = solve[1] if len(solve) > 1 else 0.0
    packing = max(solve[0] - first_epoch, 0.0)
    training = sum(solve) - packing
    # (On the CSR matrix every column is a sparse one.)
    w = (model.sparse_weights if model.dense_weights is None else
         _our_weights(problem, model.sparse_weights, model.dense_weights))
    return w, len(history["loss"]), dict(
        packing=packing, solve=training, gap_and_python=total - sum(solve))
  return fit


def _label(name, threads, momentum):
  return (name + (f" ({threads} thr)" if threads else "") +
          (f", momentum {momentum}" if momentum else ""))


def run_ours_raw(problem, budget, threads=0, batch_size=None, momentum=0.0):
  """Our op through `InMemorySdca` on the problem's fixed-width ids and
  dense array (rows packed once, duals by row)."""
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  trace = Trace(_label("tf_sdca op", threads, momentum))
  trace.problem = problem
  return _grid(trace, budget, _our_fit(
      problem, lambda: InMemorySdca(loss="logistic_loss", l2=problem.l2,
                                    num_threads=threads, momentum=momentum),
      batch_size=batch_size or problem.n, **_our_features(problem)))


def run_ours_csr(problem, budget, threads=0, momentum=0.0, gap_every=0):
  """`InMemorySdca` on the problem's scipy CSR matrix (ids and dense columns
  as one matrix with explicit values: what a scipy user has), validating
  and packing included in the first epoch's time."""
  from tf_sdca.trainer import InMemorySdca  # pylint: disable=import-outside-toplevel
  trace = Trace(_label("tf_sdca CSR", threads, momentum) +
                (", gap every epoch" if gap_every == 1 else ""))
  trace.problem = problem
  csr = problem.csr()
  indptr, indices = csr.indptr, csr.indices.astype(np.int32)
  values = csr.data.astype(np.float32)
  return _grid(trace, budget, _our_fit(
      problem, lambda: InMemorySdca(loss="logistic_loss", l2=problem.l2,
                                    num_threads=threads, momentum=momentum),
      gap_every=gap_every, indptr=indptr, indices=indices, values=values,
      num_features=csr.shape[1]))


def run_ours_default(problem, budget, ahead=True):
  """`InMemorySdca(loss, l2)` at every default (threads, momentum, order,
  second-order step) on the problem's CSR matrix, its fit as a default
  `fit()` runs (the exact gap after every epoch, which its progress bar
  reads; the bar itself is off). `ahead=False`: without training the next
  epoch while the gap is evaluated (`engine.TRAIN_AHEAD`; the same
  results)."""
  # pylint: disable=import-outside-toplevel
  from tf_sdca import engine
  from tf_sdca.trainer import InMemorySdca
  trace = Trace("tf_sdca CSR, defaults" +
                ("" if ahead else ", epochs one by one"))
  trace.problem = problem
  csr = problem.csr()
  fit = _our_fit(
      problem, lambda: InMemorySdca(loss="logistic_loss", l2=problem.l2),
      gap_every=1, indptr=csr.indptr, indices=csr.indices.astype(np.int32),
      values=csr.data.astype(np.float32), num_features=csr.shape[1])

  def fit_as_set(epochs):
    saved, engine.TRAIN_AHEAD = engine.TRAIN_AHEAD, ahead
    try:
      return fit(epochs)
    finally:
      engine.TRAIN_AHEAD = saved
  return _grid(trace, budget, fit_as_set)


def run_ours_sdca_model(problem, budget, batch_size=None):
  """Our op through `tf_sdca.SdcaModel` (hash-table duals, tf.function),
  by default one batch of all rows per epoch. Each point of the grid is a
  fresh model: variables, batch tensors and tracing included."""
  batch_size = batch_size or problem.n
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tf_sdca  # pylint: disable=import-outside-toplevel
  trace = Trace("tf_sdca SdcaModel")
  trace.problem = problem

  def fit(epochs):
    dense_w = tf.Variable(tf.zeros([problem.dense.shape[1]]))
    sparse_vars = ([] if problem.ids is None else
                   [tf.Variable(tf.zeros([problem.table_size]))])
    model = tf_sdca.SdcaModel(
        None, dict(sparse_features_weights=sparse_vars,
                   dense_features_weights=[dense_w]),
        dict(loss_type="logistic_loss",
             symmetric_l2_regularization=problem.l2))
    batches = []
    for start in range(0, problem.n, batch_size):
      rows = slice(start, min(problem.n, start + batch_size))
      b = rows.stop - rows.start
      sparse = []
      if problem.ids is not None:
        m = problem.ids.shape[1]
        sparse = [tf_sdca.SparseFeatureColumn(
            tf.constant(np.repeat(np.arange(b, dtype=np.int64), m)),
            tf.constant(problem.ids[rows].ravel()))]
      batches.append(dict(
          sparse_features=sparse, dense_features=[tf.constant(
              problem.dense[rows])],
          example_weights=tf.ones([b]),
          example_labels=tf.constant(problem.labels[rows]),
          example_ids=tf.strings.as_string(tf.range(start, start + b))))

    @tf.function
    def step(examples):
      model.update_weights(model.minimize(examples=examples))

    rng = np.random.default_rng(0)
    for _ in range(epochs):
      for i in rng.permutation(len(batches)):
        step(batches[i])
    w = _our_weights(problem,
                     sparse_vars[0].numpy() if sparse_vars else None,
                     dense_w.numpy())
    return w, epochs, None
  return _grid(trace, budget, fit)


def run_ours_keras(problem, budget, batch_size=100_000):
  """Our op through `tf_sdca.keras.LinearModel.fit`, a fresh model per
  point of the grid."""
  from tf_sdca.keras import LinearModel  # pylint: disable=import-outside-toplevel
  trace = Trace("tf_sdca Keras")
  trace.problem = problem
  features = {"dense": problem.dense[:, :-1]}
  categorical = {}
  if problem.ids is not None:
    features["ids"] = problem.ids
    categorical["ids"] = problem.table_size

  def fit(epochs):
    # Plain epochs, as the "ours" peers (the "-m" ones extrapolate).
    model = LinearModel(loss="logistic", l2=problem.l2, momentum=0,
                        categorical_features=categorical)
    model.fit(features, problem.labels, batch_size=batch_size,
              epochs=epochs, verbose=0)
    w = np.concatenate([v.numpy().ravel() for v in model.weights])
    # Keras orders kernels by feature name ("dense" < "ids"), then bias.
    if problem.ids is not None:
      k = problem.dense.shape[1] - 1
      w = np.concatenate([w[k:k + problem.table_size], w[:k], w[-1:]])
    return w, epochs, None
  return _grid(trace, budget, fit)


def run_tf_sdca_v2(problem, budget, batch_size=None):
  """`tf.raw_ops.SdcaOptimizerV2` with the best glue we could write: batch
  tensors built once per fit, weights float64 on the host, distinct ids
  only, by default one batch of all rows per epoch (its kernel shuffles
  them). Each point of the grid starts from scratch."""
  batch_size = batch_size or problem.n
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  trace = Trace("SdcaOptimizerV2")
  trace.problem = problem
  sparse = problem.ids is not None

  def fit(epochs):
    w_sparse = np.zeros(problem.table_size)
    w_dense = np.zeros(problem.dense.shape[1])
    state = np.zeros((problem.n, 4), np.float32)
    batches = []
    for start in range(0, problem.n, batch_size):
      rows = slice(start, min(problem.n, start + batch_size))
      b = rows.stop - rows.start
      batch = dict(rows=rows, dense=tf.constant(problem.dense[rows]),
                   labels=tf.constant(problem.labels[rows]),
                   ones=tf.ones([b]))
      if sparse:
        m = problem.ids.shape[1]
        ids = problem.ids[rows].ravel()
        batch.update(uniq=np.unique(ids), ids=tf.constant(ids),
                     ex=tf.constant(np.repeat(np.arange(b, dtype=np.int64),
                                              m)))
        batch["uniq_t"] = tf.constant(batch["uniq"])
      batches.append(batch)
    rng = np.random.default_rng(0)
    for _ in range(epochs):
      for i in rng.permutation(len(batches)):
        b = batches[i]
        out = tf.raw_ops.SdcaOptimizerV2(
            sparse_example_indices=[b["ex"]] if sparse else [],
            sparse_feature_indices=[b["ids"]] if sparse else [],
            sparse_feature_values=[], dense_features=[b["dense"]],
            example_weights=b["ones"], example_labels=b["labels"],
            sparse_indices=[b["uniq_t"]] if sparse else [],
            sparse_weights=([tf.constant(w_sparse[b["uniq"]], tf.float32)]
                            if sparse else []),
            dense_weights=[tf.constant(w_dense, tf.float32)],
            example_state_data=tf.constant(state[b["rows"]]),
            loss_type="logistic_loss", l1=0.0, l2=problem.l2,
            num_loss_partitions=1, num_inner_iterations=1, adaptive=False)
        state[b["rows"]] = out[0].numpy()
        if sparse:
          w_sparse[b["uniq"]] += out[1][0].numpy()
        w_dense += out[2][0].numpy()
    return _our_weights(problem, w_sparse, w_dense), epochs, None
  return _grid(trace, budget, fit)


def run_snapml(problem, budget, threads=1):
  """Snap ML's dual (SDCA-type) logistic regression, `n_jobs=threads`."""
  try:
    from snapml import LogisticRegression  # pylint: disable=import-outside-toplevel
  except ImportError:
    trace = Trace(f"Snap ML ({threads} thr)")
    trace.note = "not installed (pip install -r bench/requirements.txt)"
    return trace
  trace = Trace(f"Snap ML ({threads} thr)")
  trace.problem = problem
  x = problem.csr().astype(np.float32)
  y = problem.labels

  def fit(iters):
    clf = LogisticRegression(max_iter=iters, regularizer=problem.l2,
                             dual=True, n_jobs=threads, tol=1e-12,
                             fit_intercept=False)
    clf.fit(x, y)
    # (It does not say how many epochs it ran: the limit is an upper bound.)
    return np.asarray(clf.coef_, np.float64).ravel(), iters, None
  trace.ladder = True
  return _grid(trace, budget, fit)


def run_liblinear(problem, budget):
  """LIBLINEAR's dual coordinate descent through scikit-learn."""
  from sklearn.linear_model import LogisticRegression  # pylint: disable=import-outside-toplevel
  trace = Trace("LIBLINEAR dual")
  trace.problem = problem
  x = problem.csr()

  def fit(iters):
    clf = LogisticRegression(solver="liblinear", dual=True, C=1 / problem.l2,
                             fit_intercept=False, max_iter=iters, tol=1e-12)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      clf.fit(x, problem.labels)
    return (clf.coef_.ravel().astype(np.float64), int(np.max(clf.n_iter_)),
            None)
  return _grid(trace, budget, fit)


def run_saga(problem, budget):
  """scikit-learn's SAGA, a fresh fit of k epochs (`max_iter=k`)."""
  from sklearn.linear_model import LogisticRegression  # pylint: disable=import-outside-toplevel
  trace = Trace("sklearn saga")
  trace.problem = problem
  x = problem.csr()

  def fit(iters):
    clf = LogisticRegression(solver="saga", C=1 / problem.l2,
                             fit_intercept=False, max_iter=iters, tol=0)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      clf.fit(x, problem.labels)
    return clf.coef_.ravel(), int(np.max(clf.n_iter_)), None
  return _grid(trace, budget, fit)


def run_sgd(problem, budget):
  """scikit-learn's SGDClassifier (log loss, alpha = l2 / n), a fresh fit
  of k epochs (`max_iter=k`, no early stop)."""
  from sklearn.linear_model import SGDClassifier  # pylint: disable=import-outside-toplevel
  trace = Trace("sklearn SGD")
  trace.problem = problem
  x = problem.csr()

  def fit(iters):
    clf = SGDClassifier(loss="log_loss", alpha=problem.l2 / problem.n,
                        fit_intercept=False, random_state=0, max_iter=iters,
                        tol=None)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      clf.fit(x, problem.labels)
    return clf.coef_.ravel(), int(clf.n_iter_), None
  return _grid(trace, budget, fit)


SOLVERS = {
    "ours": run_ours_raw,
    # Lock-free threads over packed rows.
    "ours2": lambda problem, budget: run_ours_raw(problem, budget, threads=2),
    "ours-csr": run_ours_csr,
    "ours-csr2": lambda problem, budget: run_ours_csr(problem, budget,
                                                      threads=2),
    # The exact gap after every epoch (what fit does by default).
    "ours-csr-gap": lambda problem, budget: run_ours_csr(problem, budget,
                                                         gap_every=1),
    # Extrapolated epochs (InMemorySdca(momentum=0.5)).
    # Every default of InMemorySdca and of its fit.
    "ours-default": run_ours_default,
    "ours-default-serial": lambda problem, budget: run_ours_default(
        problem, budget, ahead=False),
    "ours-m": lambda problem, budget: run_ours_raw(problem, budget,
                                                   momentum=0.5),
    "ours-csr-m": lambda problem, budget: run_ours_csr(problem, budget,
                                                       momentum=0.5),
    "ours-csr2-m": lambda problem, budget: run_ours_csr(problem, budget,
                                                        threads=2,
                                                        momentum=0.5),
    "ours-sdcamodel": run_ours_sdca_model,
    "ours-keras": run_ours_keras,
    "tf": run_tf_sdca_v2,
    "snapml": run_snapml,
    # Its best thread count on a 2-core machine may be either.
    "snapml2": lambda problem, budget: run_snapml(problem, budget, threads=2),
    "liblinear": run_liblinear,
    "saga": run_saga,
    "sgd": run_sgd,
}

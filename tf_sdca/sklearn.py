"""scikit-learn estimators on the in-memory SDCA engine.

`SDCAClassifier` (logistic, hinge, smooth hinge; softmax and the multiclass
hinge for more than two classes) and `SDCARegressor` (squared, absolute,
Poisson) follow scikit-learn's conventions: hyper-parameters in `__init__`
only, `fit(X, y, sample_weight=None)`, `coef_`, `intercept_`, numpy arrays,
every scipy.sparse format and pandas DataFrames. Each fit is one
`InMemorySdca` fit (`tf_sdca.trainer`): the options are validated by
`tf_sdca.options` under this door's name, the epochs run by `tf_sdca.engine`,
which stops on the exact duality gap. `sdca_path` fits a grid of
regularisation strengths, each from the last one's duals;
`SDCAClassifierCV` and `SDCARegressorCV` choose the strength by
cross-validation over such paths.

The problem solved (g3doc/sklearn.md) is

    sum_i s_i loss_i(w . x_i + b) + l2/2 (|w|^2 + b^2 / intercept_scaling^2)

with `l2 = 1 / C` for the classifier (LogisticRegression's and LinearSVC's
`C`) and `l2 = alpha` for the regressor (Ridge's `alpha`: the squared loss is
`(z - y)^2 / 2`). The intercept is the weight of a constant feature
`intercept_scaling`, regularised like the others, as LIBLINEAR (and
`LogisticRegression(solver='liblinear')`, `LinearSVC`) do.

Example:
  >>> from sklearn.datasets import load_breast_cancer
  >>> from sklearn.pipeline import make_pipeline
  >>> from sklearn.preprocessing import StandardScaler
  >>> from tf_sdca.sklearn import SDCAClassifier
  >>> X, y = load_breast_cancer(return_X_y=True)
  >>> model = make_pipeline(StandardScaler(), SDCAClassifier(C=1.0)).fit(X, y)
  >>> model[-1].duality_gap_ < 1e-6
  True
"""
import functools
import numbers
import os
import warnings

import numpy as np
import scipy.sparse as sp
from scipy import special
from sklearn.base import (BaseEstimator, ClassifierMixin, RegressorMixin,
                          clone)
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import check_scoring
from sklearn.model_selection import check_cv
from sklearn.preprocessing import LabelEncoder
from sklearn.utils import check_random_state
from sklearn.utils.extmath import safe_sparse_dot
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from tf_sdca import engine
from tf_sdca import losses
from tf_sdca import options
from tf_sdca.trainer import InMemorySdca

CLASSIFIER_DOOR = options.Door("SDCAClassifier", "keyword", "epoch")
REGRESSOR_DOOR = options.Door("SDCARegressor", "keyword", "epoch")
CLASSIFIER_LOSSES = ("logistic", "hinge", "smooth_hinge")
REGRESSOR_LOSSES = ("squared", "absolute", "poisson")


def _seed_of(random_state):
  """The visiting order's seed a fit draws from `random_state`, as
  scikit-learn's `check_random_state(random_state).randint(2**31 - 1)`.
  An int's draw is the same every fit: it is remembered, since seeding a
  `RandomState` takes ~90 us (8% of a one-millisecond fit)."""
  if isinstance(random_state, numbers.Integral):
    return _seed_of_int(int(random_state))
  return int(check_random_state(random_state).randint(2**31 - 1))


@functools.lru_cache(maxsize=64)
def _seed_of_int(random_state):
  return int(check_random_state(random_state).randint(2**31 - 1))


# The loss of more than two classes with multi_class='auto': the
# multinomial one where there is one (as LogisticRegression and
# LinearSVC(multi_class='crammer_singer') do), else one-vs-rest.
_MULTICLASS_LOSS = {"logistic": "softmax", "hinge": "multiclass_hinge"}


def _positive(name, value, door, strict=True):
  if (isinstance(value, bool) or not isinstance(value, numbers.Real) or
      not np.isfinite(value) or (value <= 0 if strict else value < 0)):
    raise ValueError(f"{door.name}: {name} must be a finite number "
                     f"{'>' if strict else '>='} 0, got {value!r}")
  return float(value)


def _encode_classes(y):
  """(classes_, each label's index in them) of validated labels y, as
  `check_classification_targets` and `LabelEncoder().fit_transform` give
  them. Integer or boolean labels in one dimension are always 'binary' or
  'multiclass' targets and LabelEncoder sorts them with np.unique: that
  path alone, in ~10 us where the two took ~250 us on a few thousand rows
  (a fixed cost of every fit, a fifth of a LIBLINEAR-sized one on
  heart_scale)."""
  if isinstance(y, np.ndarray) and y.ndim == 1 and y.dtype.kind in "biu":
    classes, codes = np.unique(y, return_inverse=True)
    return classes, codes.reshape(-1)
  check_classification_targets(y)
  encoder = LabelEncoder()
  codes = encoder.fit_transform(y)
  return encoder.classes_, codes


def _checked_already(X, y):
  """Whether `validate_data`'s check of X (and y) would pass them through
  unchanged: X a float32 / float64 numpy array [n >= 1, d >= 1] or CSR
  matrix of those values, every value finite; y (when given) a numpy
  vector of n integers, or of n finite floats. Those are then not checked
  again (check_X_y took ~170-230 us on heart_scale, digits and 2,000
  text rows, a sixth of a LIBLINEAR-sized hinge fit on heart_scale; this
  test ~2-8 us). Anything else, including every input check_X_y rejects,
  takes its check and its messages."""
  # (The types exactly: np.matrix, masked arrays and other subclasses take
  # check_X_y, which rejects or converts them.)
  if type(X) in (np.ndarray,):
    values = X
    if X.ndim != 2:
      return False
  elif type(X) in (sp.csr_matrix, sp.csr_array):
    values = X.data
  else:
    return False
  n, d = X.shape
  if (n < 1 or d < 1 or X.dtype not in (np.float32, np.float64) or
      not np.isfinite(values).all()):
    return False
  if isinstance(y, str):  # "no_validation"
    return True
  return (type(y) in (np.ndarray,) and y.shape == (n,) and
          (y.dtype.kind in "biu" or
           (y.dtype.kind == "f" and np.isfinite(y).all())))


def _threads(n_jobs, n):
  """n_jobs as scikit-learn spells it (None: 1, -1: all cores) -> the
  engine's lock-free threads."""
  if n_jobs is None:
    return 1  # (whatever the cores: os.cpu_count took ~14 us a fit)
  if (not isinstance(n_jobs, numbers.Integral) or isinstance(n_jobs, bool)
      or n_jobs == 0):
    raise ValueError(f"n_jobs must be None or a nonzero integer (-1: every "
                     f"core), got {n_jobs!r}")
  cores = os.cpu_count() or 1
  if n_jobs < 0:
    jobs = max(1, cores + 1 + n_jobs)
  else:
    jobs = max(1, int(n_jobs))
  # (At most the threads engine.choose_threads takes without a warning:
  # n_jobs=-1 should not warn.)
  return max(1, min(jobs, cores, n // engine.MIN_ROWS_PER_THREAD))


def _check_float32_range(name, values, where):
  """Raises a ValueError naming `name` where a value of float32 `values`,
  converted from finite float64 ones, overflowed to +-inf; `where(k)` is
  the flat index k's (row, column)."""
  with np.errstate(invalid="ignore"):  # (inf + -inf)
    finite = np.isfinite(values.min() + values.max()) if values.size else True
  if not finite:
    k = int(np.flatnonzero(~np.isfinite(values))[0])
    i, j = where(k)
    raise ValueError(f"{name}[{i}, {j}] is beyond float32's range "
                     f"(|x| < 3.4e38), which the op's features are in: "
                     f"rescale {name}")


def _class_weights(class_weight, classes, codes, sample_weight):
  """Each class's weight (`[k]`, by code), as scikit-learn's linear models
  read `class_weight`: a dict's (1 for a class it leaves out), or
  'balanced''s total / (k x the class's total), the totals of
  `sample_weight` (a row weighted 0 counts as no row, as in
  LogisticRegression and LinearSVC; counting rows, they missed those
  fits). None for `class_weight` None."""
  k = len(classes)
  if class_weight is None:
    return None
  if isinstance(class_weight, dict):
    _check_class_weight(class_weight, classes)
    return np.array([float(class_weight.get(c, 1.0)) for c in classes])
  if not (isinstance(class_weight, str) and class_weight == "balanced"):
    raise ValueError("class_weight must be dict, 'balanced', or None, got: "
                     f"{class_weight!r}")
  totals = np.bincount(codes, weights=sample_weight, minlength=k)
  with np.errstate(divide="ignore"):
    return np.where(totals > 0, totals.sum() / (k * totals), 0.0)


def _check_class_weight(class_weight, classes):
  """Raises a ValueError for a class of the dict `class_weight` that is not
  one of `classes` (as scikit-learn's estimators do), or a weight that is
  not a finite number >= 0."""
  known = set(np.asarray(classes).tolist())
  unknown = [c for c in class_weight if c not in known]
  if unknown:
    raise ValueError(f"class_weight names classes {unknown} that are not "
                     f"in y (its classes: {np.asarray(classes).tolist()})")
  for c, weight in class_weight.items():
    try:
      ok = np.isfinite(float(weight)) and float(weight) >= 0.0
    except (TypeError, ValueError):
      ok = False
    if not ok:
      raise ValueError(f"class_weight[{c!r}] = {weight!r} must be a finite "
                       "number >= 0")


def _float32(name, X):
  """A numpy X as float32, checked against overflow (`_check_float32_range`)
  where it was of another type."""
  if isinstance(X, np.ndarray) and X.dtype == np.float32:
    return X
  with np.errstate(over="ignore"):  # (reported below, by name)
    X32 = np.asarray(X, np.float32)
  _check_float32_range(name, X32.reshape(-1),
                       lambda k: divmod(k, max(X32.shape[-1], 1)))
  return X32


class _SDCAMixin:
  """What both estimators share: the data for the engine, one problem's
  fit (warm-started from given duals), the linear scores."""

  _door = None

  def __sklearn_tags__(self):
    tags = super().__sklearn_tags__()
    tags.input_tags.sparse = True
    return tags

  def _check_common(self):
    _positive("tol", self.tol, self._door, strict=False)
    if (isinstance(self.max_iter, bool) or
        not isinstance(self.max_iter, numbers.Integral) or self.max_iter < 1):
      raise ValueError(f"{self._door.name}: max_iter must be an integer >= "
                       f"1, got {self.max_iter!r}")
    if self.fit_intercept:
      _positive("intercept_scaling", self.intercept_scaling, self._door)

  def _validate(self, X, y="no_validation", reset=True):
    if _checked_already(X, y):
      # What check_X_y would return unchanged (the feature names and
      # n_features_in_ still set or checked by validate_data).
      if reset:
        # What validate_data does then for a numpy array or CSR matrix
        # (no feature names; y given): n_features_in_ set, the
        # feature_names_in_ of an earlier fit on a DataFrame dropped
        # (~25 us warm, ~0.1 ms with the caches cold as a fit meets it,
        # most of it looking for feature names these types do not have).
        self.n_features_in_ = X.shape[1]
        if hasattr(self, "feature_names_in_"):
          del self.feature_names_in_
        return X if isinstance(y, str) else (X, y)
      return validate_data(self, X, y, reset=reset, skip_check_array=True)
    given = {} if isinstance(y, str) else dict(
        y_numeric=isinstance(self, RegressorMixin))
    return validate_data(self, X, y, reset=reset,
                         accept_sparse=("csr", "csc", "coo"),
                         dtype=(np.float64, np.float32), **given)

  def _rows(self, X):
    """X as the engine's arguments: a dense part (X and/or the intercept's
    constant column) and a CSR part (a sparse X)."""
    n = X.shape[0]
    ones = (np.full((n, 1), self.intercept_scaling, np.float32)
            if self.fit_intercept else None)
    if sp.issparse(X):
      if not (X.format == "csr" and X.dtype == np.float32 and
              X.has_canonical_format):
        # (A CSR float32 X in canonical form is used as it is: the same
        # arrays, without the ~35 us of a copy's format check.)
        # (A copy of every array: csr_matrix shares the caller's indptr and
        # indices, and sum_duplicates sorts them in place: a user's CSR of
        # unsorted columns, as column indexing leaves it, was scrambled.)
        with np.errstate(over="ignore"):  # (reported below, by name)
          X = sp.csr_matrix(X, dtype=np.float32, copy=True)
        X.sum_duplicates()
        _check_float32_range("X", X.data, lambda k: (
            int(np.searchsorted(X.indptr, k, side="right")) - 1,
            int(X.indices[k])))
      return dict(dense=ones, indptr=X.indptr, indices=X.indices,
                  values=X.data, num_features=X.shape[1])
    X = _float32("X", X)
    dense = X if ones is None else np.hstack([X, ones])
    return dict(dense=dense)

  def _warm_duals(self, y):
    """warm_start's duals for the rows' labels `y`: the last fit's (None
    for another number of rows), each row whose label changed since back
    at 0 (its dual belonged to the old label: outside the new one's domain,
    or a start far from its optimum)."""
    duals = getattr(self, "duals_", None)
    if duals is None or duals.shape[0] != len(y):
      return None
    old = getattr(self, "_duals_y", None)
    if old is not None and old.shape == np.shape(y):
      changed = old != np.asarray(y)
      if changed.any():
        duals = duals.copy()
        duals[changed] = 0.0
    return duals

  def _weights(self, sample_weight, n, extra=None):
    if sample_weight is None:
      sw = np.ones(n)
    else:
      sw = np.asarray(sample_weight, np.float64)
      if sw.ndim == 0:
        sw = np.full(n, float(sw))
      if sw.shape != (n,):
        raise ValueError(f"sample_weight.shape == {sw.shape}, expected "
                         f"{(n,)}")
      if not np.all(np.isfinite(sw)) or np.any(sw < 0):
        raise ValueError("sample_weight must be finite and >= 0")
      sw = sw.copy()
    if extra is not None:
      sw *= extra
    return sw

  def _visit_order(self, loss):
    """visit_order 'auto': None, `InMemorySdca`'s default
    (`options.visit_order_for`: 'shrinking' for the hinge losses,
    'adaptive' for the absolute deviation and Poisson (RAND HIE's 20,190
    doctor-visit counts, standardised, alpha = 16: 57 epochs to a relative
    gap of 1e-10 against 901 in a random permutation; alpha = 1: 868
    against > 3,000), and for the smooth losses where the rows' norms
    spread widely or the l2 is weak for them, 'permutation' for the
    others)."""
    del loss  # (the engine's rule reads it)
    return None if self.visit_order == "auto" else self.visit_order

  def _solve(self, loss, num_classes, labels, rows, sw, l2, duals, seed):
    """One SDCA problem: `loss` on the engine rows `rows`, from `duals`
    (None: zeros); returns (duals, the weight table [dense + 1 or sparse
    then intercept], epochs, relative duality gap)."""
    n = labels.shape[0]
    if not np.any(sw > 0):
      raise ValueError(f"{self._door.name}: every sample weight is zero "
                       "(nothing to fit)")
    model = InMemorySdca(loss=loss, l2=l2, seed=seed, num_classes=num_classes,
                         num_threads=_threads(self.n_jobs, n),
                         visit_order=self._visit_order(loss),
                         gamma=getattr(self, "gamma", 1.0))
    if duals is not None:
      # Warm start: duals of another fit's labels (the labels changed) may
      # be outside this fit's dual domain: those rows start from 0 (the op
      # refused them); the weights are those of the duals under this fit's
      # l2 and sample weights, so that the pair is a primal-dual one and
      # the gap stays exact (the engine's own pairing, which an ASDCA fit
      # does not take).
      model.duals = np.array(engine.project_duals(duals, loss, labels),
                             np.float64)
      csr = ((rows["indptr"], rows["indices"], rows["values"])
             if rows.get("indptr") is not None else None)
      model.sparse_weights, model.dense_weights = engine.paired_weights(
          model.duals, csr, rows.get("dense"), sw, l2,
          rows.get("num_features") or 0)
    with warnings.catch_warnings():
      # The engine's advice on slow epochs names its other doors (Keras
      # layers, the command line); here max_iter ends in a
      # ConvergenceWarning, scikit-learn's way.
      warnings.filterwarnings("ignore", "the relative duality gap fell only",
                              UserWarning)
      # gap_every=0: nothing here reads the gaps of the epochs before the
      # last; `tol` is still tested on every epoch (the same stop, weights
      # and duals as evaluating every one), the exact gap computed only
      # where the next epoch's dual objective does not already show it
      # above tol (tf_sdca.engine: `TfSdca>PackedEpochs`).
      history = model.fit(labels, example_weights=sw.astype(np.float32),
                          epochs=self.max_iter, tol=self.tol, verbose=0,
                          gap_every=0, **rows)
    parts = [w for w in (model.sparse_weights, model.dense_weights)
             if w is not None]
    table = np.concatenate(parts) if len(parts) > 1 else parts[0]
    return (model.duals, table, len(history["loss"]),
            history["duality_gap"][-1])

  def _split(self, table):
    """A weight table `[rows]` or `[rows, K]` -> (coef [K or 1, d],
    intercept [K or 1])."""
    table = table.reshape(table.shape[0], -1)
    d = self.n_features_in_
    coef = table[:d].T.copy()
    intercept = (table[d] * self.intercept_scaling if self.fit_intercept
                 else np.zeros(table.shape[1]))
    return coef, intercept

  def _converged(self, epochs, gap):
    # (gap > tol: a fit with tol=0, as weight-equivalence checks run, that
    # reached a gap of 0 was told "0 > tol=0: raise max_iter".)
    if epochs >= self.max_iter and gap > self.tol:
      warnings.warn(f"{self._door.name} stopped after max_iter={self.max_iter}"
                    f" epochs at a relative duality gap of {gap:.3g} > tol="
                    f"{self.tol:g}: raise max_iter", ConvergenceWarning,
                    stacklevel=losses.caller_stacklevel())

  def _scores(self, X):
    check_is_fitted(self)
    X = self._validate(X, reset=False)
    coef = np.reshape(self.coef_, (-1, self.n_features_in_))
    return (safe_sparse_dot(X, coef.T, dense_output=True) +
            np.reshape(self.intercept_, -1))


class SDCAClassifier(_SDCAMixin, ClassifierMixin, BaseEstimator):
  """Linear classifier trained by SDCA to a certified duality gap.

  Minimises `C sum_i s_i loss(y_i, w . x_i + b) + |w|^2 / 2 +
  b^2 / (2 intercept_scaling^2)` (b / intercept_scaling: the weight of the
  constant column `intercept_scaling`, regularised like the others, as
  LIBLINEAR does), i.e. the engine's objective with
  `l2 = 1 / C`: LogisticRegression's `C` (its liblinear solver's problem
  exactly; with `fit_intercept=False` every solver's) and LinearSVC's `C`.

  Losses: 'logistic', 'hinge', 'smooth_hinge'. With more than two classes
  and `multi_class='auto'`, 'logistic' is the multinomial (softmax) loss,
  LogisticRegression's, and 'hinge' the multiclass hinge of Crammer and
  Singer, `LinearSVC(multi_class='crammer_singer')`'s; 'smooth_hinge', or
  any loss with `multi_class='ovr'`, trains one binary problem per class
  (LinearSVC's default).

  Args:
    loss: 'logistic' (the default), 'hinge' or 'smooth_hinge'.
    C: inverse regularisation strength (> 0); l2 = 1 / C.
    fit_intercept: add the constant column.
    intercept_scaling: its value (the intercept is its weight times it).
    multi_class: 'auto' or 'ovr', above.
    gamma: the smooth hinge's smoothing.
    class_weight: None, 'balanced' or {class: weight}; multiplies
      `sample_weight`.
    tol: stop once the relative duality gap (gap / primal, exact, of every
      problem) is below it. The default 1e-10 costs a few epochs more than
      1e-6 (SDCA converges linearly on the smooth losses) and makes the
      results agree to ~1e-5 with any other path to the optimum.
    max_iter: the most epochs (passes over the data) per fit.
    warm_start: start from the last fit's duals (same rows; a row whose
      label changed from 0), with the weights they give under this fit's C
      and sample weights.
    n_jobs: lock-free threads per epoch (None: 1, -1: every core), at most
      one per 4096 rows. Their steps interleave as the cores run them: two
      fits with an int `random_state` are the same bits on one thread
      only (with two, 3.3e-4 apart at tol=1e-6 on 10k rows: each within
      its certified gap of the optimum).
    random_state: seed of the visiting order.
    visit_order: the engine's order of the coordinate steps
      (`InMemorySdca`'s); 'auto': the loss's in-memory default
      (`options.visit_order_for`: 'shrinking' for the hinge losses, ~10x
      fewer epochs to LinearSVC's objective on heart_scale; 'adaptive' for
      the absolute deviation, Poisson, and the smooth losses on rows whose
      norms spread widely or a weak l2 for them; 'permutation' for the
      others).

  Attributes:
    classes_, coef_ ([1 or K, d]), intercept_ ([1 or K]), n_iter_ (epochs
    of the last fit, the most over one-vs-rest problems), duality_gap_
    (the relative duality gap reached, the largest over problems),
    duals_ ([n] or [n, K]: the dual of each row, per class for softmax,
    multiclass hinge and one-vs-rest), n_features_in_, feature_names_in_.

  `partial_fit(X, y, classes=...)` appends the rows to those seen so far
  (kept, with their duals) and trains on the union from its duals, so that
  it reaches the optimum of `fit` on the union.
  """

  _door = CLASSIFIER_DOOR

  def __init__(self, loss="logistic", *, C=1.0, fit_intercept=True,
               intercept_scaling=1.0, multi_class="auto", gamma=1.0,
               class_weight=None, tol=1e-10, max_iter=1000, warm_start=False,
               n_jobs=None, random_state=None, visit_order="auto"):
    self.loss = loss
    self.C = C
    self.fit_intercept = fit_intercept
    self.intercept_scaling = intercept_scaling
    self.multi_class = multi_class
    self.gamma = gamma
    self.class_weight = class_weight
    self.tol = tol
    self.max_iter = max_iter
    self.warm_start = warm_start
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.visit_order = visit_order

  def _problems(self, k):
    """(engine loss, K of a multiclass loss or None, one-vs-rest)."""
    if self.loss not in CLASSIFIER_LOSSES:
      raise ValueError(f"SDCAClassifier: loss must be one of "
                       f"{CLASSIFIER_LOSSES}, got {self.loss!r}")
    if self.multi_class not in ("auto", "ovr"):
      raise ValueError("SDCAClassifier: multi_class must be 'auto' or "
                       f"'ovr', got {self.multi_class!r}")
    if k == 2:
      return self.loss, None, False
    if self.multi_class == "auto" and self.loss in _MULTICLASS_LOSS:
      return _MULTICLASS_LOSS[self.loss], k, False
    return self.loss, None, True

  def fit(self, X, y, sample_weight=None):
    """Fits on X `[n, d]` (array, scipy.sparse or DataFrame), labels y."""
    X, y = self._validate(X, y)
    classes, codes = _encode_classes(y)
    if (self.warm_start and getattr(self, "classes_", None) is not None and
        not np.array_equal(classes, self.classes_)):
      self.duals_ = None
    self.classes_ = classes
    self._train(X, codes, sample_weight)
    self._seen = None  # fit starts the rows of partial_fit afresh
    return self

  def partial_fit(self, X, y, classes=None, sample_weight=None):
    """Adds the rows X, y to those of earlier partial_fit calls (their
    duals kept) and trains on all of them from there: the optimum of `fit`
    on the union. `classes` (every class) is needed on the first call,
    unless `fit` gave them (its rows are not kept: the union starts
    here)."""
    first = getattr(self, "_seen", None) is None
    X, y = self._validate(X, y, reset=first)
    check_classification_targets(y)
    if first:
      if classes is None and getattr(self, "classes_", None) is None:
        raise ValueError("SDCAClassifier: the first partial_fit needs "
                         "classes (every class of the data)")
      if classes is not None:
        self.classes_ = np.unique(classes)
      self._seen = dict(X=[], y=[], sw=[])
    elif classes is not None and not np.array_equal(np.unique(classes),
                                                    self.classes_):
      raise ValueError(f"classes {classes!r} differ from the first call's "
                       f"{self.classes_!r}")
    if not np.isin(y, self.classes_).all():
      raise ValueError(f"y holds labels not in classes {self.classes_!r}")
    seen = self._seen
    duals = None
    if seen["X"]:  # the new rows start at alpha = 0
      old = self.duals_
      duals = np.concatenate([old, np.zeros((X.shape[0],) + old.shape[1:])])
    seen["X"].append(X)
    seen["y"].append(np.searchsorted(self.classes_, y))
    seen["sw"].append(self._weights(sample_weight, X.shape[0]))
    stack = (sp.vstack if any(sp.issparse(x) for x in seen["X"]) else
             np.vstack)  # (a dense batch after a sparse one: sp.vstack)
    self._train(stack(seen["X"]), np.concatenate(seen["y"]),
                np.concatenate(seen["sw"]), duals)
    return self

  def _train(self, X, codes, sample_weight, duals=None):
    self._check_common()
    l2 = 1.0 / _positive("C", self.C, self._door)
    k = len(self.classes_)
    if k < 2:
      raise ValueError("SDCAClassifier needs samples of at least 2 classes "
                       "in the data, but the data contains only one class: "
                       f"{self.classes_[0]!r}")
    loss, num_classes, ovr = self._problems(k)
    options.validate(loss, dict(l2=l2, gamma=self.gamma,
                                visit_order=self._visit_order(loss)),
                     options.IN_MEMORY, self._door, num_classes)
    n = X.shape[0]
    sw = self._weights(sample_weight, n)
    per_class = _class_weights(self.class_weight, self.classes_, codes, sw)
    if duals is None and self.warm_start:
      duals = self._warm_duals(codes)
    rows = self._rows(X)
    seed = _seed_of(self.random_state)
    labels = ([(codes == c).astype(np.float32) for c in range(k)] if ovr
              else [codes.astype(np.float32) if num_classes else
                    (codes == 1).astype(np.float32)])
    results = []
    for p, target in enumerate(labels):
      start = None if duals is None else (duals[:, p] if ovr else duals)
      # Class weights as LIBLINEAR (LinearSVC) applies them: one-vs-rest's
      # problem p weighs class p's rows by its weight and the others by 1
      # (each row by its class's in every problem reached another
      # optimum); one problem weighs each row by its class's.
      weights = (sw if per_class is None else
                 sw * np.where(codes == p, per_class[p], 1.0) if ovr else
                 sw * per_class[codes])
      results.append(self._solve(loss, num_classes, target, rows, weights,
                                 l2, start, seed))
    self.duals_ = (np.stack([r[0] for r in results], axis=1) if ovr
                   else results[0][0])
    self._duals_y = np.array(codes)
    table = (np.stack([r[1] for r in results], axis=1) if ovr
             else results[0][1])
    self.coef_, self.intercept_ = self._split(table)
    self.n_iter_ = max(r[2] for r in results)
    self.duality_gap_ = max(r[3] for r in results)
    self._loss = loss
    self._converged(self.n_iter_, self.duality_gap_)

  def decision_function(self, X):
    """`w . x + b` per row `[n]` (two classes), else `[n, K]`."""
    scores = self._scores(X)
    return scores[:, 0] if scores.shape[1] == 1 else scores

  def predict(self, X):
    scores = self.decision_function(X)
    codes = (scores > 0).astype(int) if scores.ndim == 1 else np.argmax(
        scores, axis=1)
    return self.classes_[codes]

  def _has_proba(self):
    return self.loss == "logistic"

  @available_if(_has_proba)
  def predict_proba(self, X):
    """Class probabilities `[n, K]`: the sigmoid (two classes), the
    softmax (multinomial) or the one-vs-rest sigmoids normalised."""
    return self._proba(self.decision_function(X))

  @available_if(_has_proba)
  def predict_log_proba(self, X):
    """The log of `predict_proba` (the log-softmax itself where the model
    is multinomial: no log of an underflowed 0)."""
    scores = self.decision_function(X)
    if scores.ndim == 2 and self._multinomial():
      return _log_softmax(scores)
    return np.log(self._proba(scores))

  def _proba(self, scores):
    # (expit: no overflow warning for scores below -709.)
    if scores.ndim == 1:
      p = special.expit(scores)
      return np.stack([1.0 - p, p], axis=1)
    if self._multinomial():
      return np.exp(_log_softmax(scores))
    p = special.expit(scores)
    return p / p.sum(axis=1, keepdims=True)

  def _multinomial(self):
    # `_loss` is the engine's name, short ("softmax") or the op's: the
    # test against "softmax_loss" alone never held, and every softmax
    # model's probabilities were the one-vs-rest formula's.
    return losses.op_name(self._loss) == "softmax_loss"


def _log_softmax(scores):
  shifted = scores - scores.max(axis=1, keepdims=True)
  return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


class SDCARegressor(_SDCAMixin, RegressorMixin, BaseEstimator):
  """Linear regressor trained by SDCA to a certified duality gap.

  Minimises `sum_i s_i loss(y_i, w . x_i + b) + alpha/2 (|w|^2 +
  b^2 / intercept_scaling^2)` (b / intercept_scaling: the weight of the
  constant column `intercept_scaling`, regularised like the others), i.e.
  the engine's objective with `l2 = alpha`. With the
  squared loss `(z - y)^2 / 2` that is half Ridge's objective
  `|y - Xw|^2 + alpha |w|^2`: Ridge's `alpha` (with `fit_intercept=False`
  and a column of ones, Ridge's problem exactly). PoissonRegressor's
  objective is the mean deviance: its `alpha` is this one divided by
  `sum_i s_i`.

  scikit-learn's `check_estimator` passes but for one check with the
  Poisson loss, an expected failure: `check_regressors_train` sets
  `alpha=0.01`, on this sum-of-losses scale 1/20,000 of PoissonRegressor's
  default on its 200 rows, where SDCA is still at a relative gap of 2e-3
  after 5,000 epochs (R^2 0.77 against the check's 0.5 after its 1,000).

  Args:
    loss: 'squared' (the default), 'absolute' or 'poisson' (y >= 0; the
      model predicts `exp(w . x + b)`).
    alpha: regularisation strength (> 0); l2 = alpha.
    fit_intercept, intercept_scaling, tol, max_iter, warm_start, n_jobs,
      random_state: as `SDCAClassifier`'s.
    visit_order: the engine's order of the coordinate steps; 'auto':
      `InMemorySdca`'s default ('adaptive' for Poisson, ~15x fewer epochs
      on doctor-visit counts, and the absolute deviation, and for the
      squared loss on rows whose norms spread widely or a weak l2 for
      them; else 'permutation').

  Attributes:
    coef_ ([d]), intercept_ (float), n_iter_, duality_gap_, duals_ ([n]),
    n_features_in_, feature_names_in_.
  """

  _door = REGRESSOR_DOOR

  def __init__(self, loss="squared", *, alpha=1.0, fit_intercept=True,
               intercept_scaling=1.0, tol=1e-10, max_iter=1000,
               warm_start=False, n_jobs=None, random_state=None,
               visit_order="auto"):
    self.loss = loss
    self.alpha = alpha
    self.fit_intercept = fit_intercept
    self.intercept_scaling = intercept_scaling
    self.tol = tol
    self.max_iter = max_iter
    self.warm_start = warm_start
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.visit_order = visit_order

  def __sklearn_tags__(self):
    tags = super().__sklearn_tags__()
    tags.target_tags.positive_only = self.loss == "poisson"
    return tags

  def fit(self, X, y, sample_weight=None):
    """Fits on X `[n, d]` (array, scipy.sparse or DataFrame), targets y."""
    X, y = self._validate(X, y)
    self._train(X, y, sample_weight)
    self._seen = None
    return self

  def partial_fit(self, X, y, sample_weight=None):
    """Adds the rows X, y to those of earlier partial_fit calls (their
    duals kept) and trains on all of them from there: the optimum of `fit`
    on the union."""
    first = getattr(self, "_seen", None) is None
    X, y = self._validate(X, y, reset=first)
    if first:
      self._seen = dict(X=[], y=[], sw=[])
    seen = self._seen
    duals = None
    if seen["X"]:
      duals = np.concatenate([self.duals_, np.zeros(X.shape[0])])
    seen["X"].append(X)
    seen["y"].append(y)
    seen["sw"].append(self._weights(sample_weight, X.shape[0]))
    stack = (sp.vstack if any(sp.issparse(x) for x in seen["X"]) else
             np.vstack)  # (a dense batch after a sparse one: sp.vstack)
    self._train(stack(seen["X"]), np.concatenate(seen["y"]),
                np.concatenate(seen["sw"]), duals)
    return self

  def _train(self, X, y, sample_weight, duals=None):
    self._check_common()
    if self.loss not in REGRESSOR_LOSSES:
      raise ValueError(f"SDCARegressor: loss must be one of "
                       f"{REGRESSOR_LOSSES}, got {self.loss!r}")
    l2 = _positive("alpha", self.alpha, self._door)
    options.validate(self.loss, dict(l2=l2,
                                     visit_order=self._visit_order(self.loss)),
                     options.IN_MEMORY, self._door)
    if self.loss == "poisson" and np.any(y < 0):
      raise ValueError("SDCARegressor(loss='poisson') needs y >= 0")
    n = X.shape[0]
    sw = self._weights(sample_weight, n)
    if duals is None and self.warm_start:
      duals = self._warm_duals(y)
    seed = _seed_of(self.random_state)
    self.duals_, table, self.n_iter_, self.duality_gap_ = self._solve(
        self.loss, None, np.asarray(y, np.float32), self._rows(X), sw, l2,
        duals, seed)
    self._duals_y = np.array(y)
    coef, intercept = self._split(table)
    self.coef_, self.intercept_ = coef[0], float(intercept[0])
    self._converged(self.n_iter_, self.duality_gap_)

  def predict(self, X):
    """`w . x + b` per row; `exp(w . x + b)` for Poisson."""
    z = self._scores(X)[:, 0]
    return np.exp(z) if self.loss == "poisson" else z


# -------------------------------------------------- the regularisation path
def _strength(estimator):
  return "C" if isinstance(estimator, SDCAClassifier) else "alpha"


def sdca_path(estimator, X, y, grid, sample_weight=None):
  """Fits `estimator` (an `SDCAClassifier` or `SDCARegressor`) at each
  regularisation strength of `grid` in turn, each fit starting from the
  previous one's duals (the weights rebuilt for the new strength), each
  stopped by its own exact duality gap (`estimator.tol`).

  A path is cheapest from strong to weak regularisation (C ascending, alpha
  descending): each optimum is then a small step from the last (measured
  in g3doc/sklearn.md against fitting each point from zero).

  Args:
    estimator: the settings of every fit (not modified).
    X, y, sample_weight: as `fit` takes them.
    grid: the values of C (classifier) or alpha (regressor), in order.

  Returns:
    A dict of lists, one entry per grid point: `coef`, `intercept`,
    `n_iter` (epochs), `duality_gap` (relative), and `model`, the last fit
    (at `grid[-1]`).
  """
  name = _strength(estimator)
  model = clone(estimator).set_params(warm_start=True)
  path = dict(coef=[], intercept=[], n_iter=[], duality_gap=[])
  for value in grid:
    model.set_params(**{name: value}).fit(X, y, sample_weight)
    path["coef"].append(np.copy(model.coef_))
    path["intercept"].append(np.copy(model.intercept_))
    path["n_iter"].append(model.n_iter_)
    path["duality_gap"].append(model.duality_gap_)
  path["model"] = model
  return path


class _PathCV:
  """What both CV estimators share: the folds' paths in one pass (one
  stacked problem), each point scored on each fold's held-out rows, the
  strength with the best mean score, then the path on all rows up to it
  (so that the final fit is warm-started too)."""

  def _grid(self):
    raise NotImplementedError

  def fit(self, X, y, sample_weight=None):
    """Chooses the strength by cross-validation, then fits on all rows."""
    X, y = self._validate(X, y)
    grid = np.asarray(self._grid(), np.float64)
    if grid.ndim != 1 or grid.size == 0 or np.any(grid <= 0):
      raise ValueError(f"{self._door.name}: the grid must hold values > 0, "
                       f"got {grid!r}")
    classifier = isinstance(self, ClassifierMixin)
    folds = check_cv(self.cv, y, classifier=classifier)
    scorer = check_scoring(self, scoring=self.scoring)
    base = self._single()
    splits = list(folds.split(X, y))
    self.scores_ = self._fold_scores(base, X, y, sample_weight, grid, splits,
                                     scorer)
    best = int(np.argmax(self.scores_.mean(axis=0)))
    path = sdca_path(base, X, y, grid[:best + 1], sample_weight)
    model = path["model"]
    setattr(self, _strength(base) + "_", float(grid[best]))
    setattr(self, _strength(base) + "s_", grid)
    for attribute in ("coef_", "intercept_", "n_iter_", "duality_gap_",
                      "duals_", "classes_", "_loss"):
      if hasattr(model, attribute):
        setattr(self, attribute, getattr(model, attribute))
    self.path_n_iter_ = path["n_iter"]
    return self

  def _fold_scores(self, base, X, y, sample_weight, grid, splits, scorer):
    """[folds, grid]: each fold's path scored on its held-out rows, all
    folds trained as one problem: their rows stacked, each fold's features
    (and constant column) in its own block of weights. The objective is
    the sum of the folds' (the blocks share no weight), so one engine call
    per epoch advances every fold, and the stacked gap bounds each fold's
    absolute gap. Fewer, larger calls: the per-call costs dominate at
    these sizes."""
    n, d = X.shape
    width = d + 1 if self.fit_intercept else d
    csr = sp.csr_matrix(X, dtype=np.float64)
    blocks, labels, weights = [], [], []
    # (As the single estimators read it: a scalar, the shape checked; the
    # CV ones raised an IndexError on both.)
    sw = self._weights(sample_weight, n)
    for f, (train, _) in enumerate(splits):
      part = csr[train]
      if self.fit_intercept:
        part = sp.hstack([part, np.full((len(train), 1),
                                        self.intercept_scaling)])
      part = part.tocoo()
      blocks.append((part.data, part.row + sum(len(b[0]) for b in splits[:f]),
                     part.col + f * width))
      labels.append(y[train])
      fold_sw = sw[train]
      if getattr(self, "class_weight", None) is not None:
        # Per fold, as a fit on the fold's rows would weigh its classes
        # (one-vs-rest's folds too: each row by its class's weight in every
        # problem, where the final fit weighs a problem's other rows by 1).
        classes, codes = np.unique(y[train], return_inverse=True)
        fold_sw = fold_sw * _class_weights(self.class_weight, classes,
                                           codes, fold_sw)[codes]
      weights.append(fold_sw)
    rows = sum(len(train) for train, _ in splits)
    stacked = sp.csr_matrix(
        (np.concatenate([b[0] for b in blocks]),
         (np.concatenate([b[1] for b in blocks]),
          np.concatenate([b[2] for b in blocks]))),
        shape=(rows, len(splits) * width))
    params = dict(fit_intercept=False)
    if "class_weight" in base.get_params():
      params["class_weight"] = None
    path = sdca_path(clone(base).set_params(**params), stacked,
                     np.concatenate(labels), grid, np.concatenate(weights))
    model = path["model"]
    scores = np.zeros((len(splits), len(grid)))
    for f, (_, test) in enumerate(splits):
      fold = clone(base)
      fold.n_features_in_ = d
      for attribute in ("classes_", "_loss"):
        if hasattr(model, attribute):
          setattr(fold, attribute, getattr(model, attribute))
      for g, coef in enumerate(path["coef"]):
        block = np.reshape(coef, (-1, len(splits) * width))[
            :, f * width:(f + 1) * width]
        fold.coef_ = block[:, :d]
        fold.intercept_ = (block[:, d] * self.intercept_scaling
                           if self.fit_intercept else
                           np.zeros(block.shape[0]))
        if isinstance(fold, RegressorMixin):
          fold.coef_, fold.intercept_ = fold.coef_[0], float(
              fold.intercept_[0])
        # The held-out rows weigh as they do in training (a row of weight
        # 2 scores as two rows).
        scores[f, g] = scorer(fold, _rows_of(X, test), y[test],
                              **({} if sample_weight is None else
                                 dict(sample_weight=sw[test])))
    return scores

  def _single(self):
    """The single estimator with this one's settings."""
    single = SDCAClassifier if isinstance(self, ClassifierMixin) else \
        SDCARegressor
    params = {k: v for k, v in self.get_params().items()
              if k in single().get_params()}
    return single(**params)


def _rows_of(X, rows):
  return X[rows] if not sp.issparse(X) else sp.csr_matrix(X)[rows]


class SDCAClassifierCV(_PathCV, SDCAClassifier):
  """`SDCAClassifier` with C chosen by cross-validation over a certified
  regularisation path (LogisticRegressionCV's door onto this engine).

  The folds' training rows are stacked into one problem, each fold's
  features in its own block of weights (the objective is the sum of the
  folds'), and `sdca_path` fits `Cs` in ascending order on it: one engine
  call per epoch advances every fold, each point warm-started from the
  last one's duals and stopped by the stacked duality gap, which bounds
  each fold's (a fold's relative gap is at most ~folds x tol). Each point
  is scored on each fold's held-out rows with `scoring` (None: the
  estimator's accuracy), and `C_` is the best mean score's; the final
  model is the path on all rows up to `C_`.

  Args:
    Cs: a list of C values, or an int k: k values log-spaced in [1e-4,
      1e4] (LogisticRegressionCV's default grid).
    cv, scoring: as LogisticRegressionCV's (None: 5-fold stratified,
      accuracy).
    The others: as `SDCAClassifier`'s.

  Attributes:
    C_, Cs_, scores_ ([folds, Cs]), path_n_iter_ (epochs per point of the
    final path), and `SDCAClassifier`'s.
  """

  def __init__(self, Cs=10, *, cv=None, scoring=None, loss="logistic",
               fit_intercept=True, intercept_scaling=1.0, multi_class="auto",
               gamma=1.0, class_weight=None, tol=1e-10, max_iter=1000,
               n_jobs=None, random_state=None, visit_order="auto"):
    # pylint: disable=super-init-not-called (C and warm_start are not
    # this estimator's parameters: the path sets them)
    self.Cs = Cs
    self.cv = cv
    self.scoring = scoring
    self.loss = loss
    self.fit_intercept = fit_intercept
    self.intercept_scaling = intercept_scaling
    self.multi_class = multi_class
    self.gamma = gamma
    self.class_weight = class_weight
    self.tol = tol
    self.max_iter = max_iter
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.visit_order = visit_order

  def _grid(self):
    if isinstance(self.Cs, numbers.Integral):
      return np.logspace(-4, 4, self.Cs)
    return np.sort(np.asarray(self.Cs, np.float64))

  # A choice of C over all the data is no partial fit.
  partial_fit = available_if(lambda self: False)(SDCAClassifier.partial_fit)


class SDCARegressorCV(_PathCV, SDCARegressor):
  """`SDCARegressor` with alpha chosen by cross-validation over a
  certified regularisation path, from the largest alpha down (as
  `SDCAClassifierCV` chooses C; None scoring: R^2).

  Args:
    alphas: a list of alpha values, or an int k: k values log-spaced in
      [1e-3, 1e3].
    cv, scoring: as RidgeCV's with a `cv` (None: 5-fold).
    The others: as `SDCARegressor`'s.

  Attributes:
    alpha_, alphas_ (the grid, descending), scores_ ([folds, alphas]),
    path_n_iter_, and `SDCARegressor`'s.
  """

  def __init__(self, alphas=10, *, cv=None, scoring=None, loss="squared",
               fit_intercept=True, intercept_scaling=1.0, tol=1e-10,
               max_iter=1000, n_jobs=None, random_state=None,
               visit_order="auto"):
    # pylint: disable=super-init-not-called (alpha and warm_start: the
    # path sets them)
    self.alphas = alphas
    self.cv = cv
    self.scoring = scoring
    self.loss = loss
    self.fit_intercept = fit_intercept
    self.intercept_scaling = intercept_scaling
    self.tol = tol
    self.max_iter = max_iter
    self.n_jobs = n_jobs
    self.random_state = random_state
    self.visit_order = visit_order

  def _grid(self):
    if isinstance(self.alphas, numbers.Integral):
      return np.logspace(3, -3, self.alphas)
    return np.sort(np.asarray(self.alphas, np.float64))[::-1]

  partial_fit = available_if(lambda self: False)(SDCARegressor.partial_fit)

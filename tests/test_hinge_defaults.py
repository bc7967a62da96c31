"""The hinge losses at their defaults reach LIBLINEAR's optimum in a pass
budget.

The binary hinge and the multiclass hinge of Crammer and Singer default to
the 'shrinking' order in memory (`options.visit_order_for`): LIBLINEAR's
shrinking, each epoch n steps over the rows that can still move. Checked
here on heart_scale, digits (pixels / 16), wine (standardised) and sparse
text-like rows, l2 = 1 (C = 1), no intercept: each door at its defaults (the
loss and l2 given, nothing else) reaches the objective of scikit-learn's
LinearSVC (LIBLINEAR's dual solvers, at its defaults) within the epochs
measured for it (bench/bench_hinge.py; the budgets are ~1.5x those), and
within those epochs the 'permutation' order does not, on the sets where it
took > 2x as many.
"""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn import datasets
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from sdca_testutil import heart_scale
from tf_sdca import options
from tf_sdca.sklearn import SDCAClassifier
from tf_sdca.trainer import InMemorySdca


def _text(rows=600, vocab=2000, classes=10, seed=0):
  """Text-like rows: 20-60 words from a Zipf background, 15% from the
  row's class's own Zipf topic, log(1 + count), unit L2 norm (CSR)."""
  rng = np.random.default_rng(seed)
  zipf = 1.0 / np.arange(1, vocab + 1)
  zipf /= zipf.sum()
  topics = np.stack([rng.permutation(vocab) for _ in range(classes)])
  y = rng.integers(classes, size=rows)
  row_of = np.repeat(np.arange(rows), rng.integers(20, 61, size=rows))
  words = rng.choice(vocab, size=row_of.size, p=zipf)
  words = np.where(rng.random(row_of.size) < 0.15, topics[y[row_of], words],
                   words)
  x = sp.csr_matrix((np.ones(row_of.size), (row_of, words)),
                    shape=(rows, vocab))
  x.sum_duplicates()
  x.data = np.log1p(x.data)
  x = sp.csr_matrix(sp.diags(1.0 / sp.linalg.norm(x, axis=1)) @ x,
                    dtype=np.float32)
  x.sort_indices()
  return x, y


def _problem(name):
  """(x float32 dense or CSR, y: {0, 1} or class ids, K)."""
  if name == "heart_scale":
    x, y = heart_scale()
    return x, (y > 0).astype(np.int64), 1
  if name.startswith("digits"):
    x, y = datasets.load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    return (x, y, 10) if name == "digits" else (x, y % 2, 1)
  if name == "wine":
    x, y = datasets.load_wine(return_X_y=True)
    return StandardScaler().fit_transform(x).astype(np.float32), y, 3
  x, y = _text()
  return (x, y, 10) if name == "text" else (x, (y < 5).astype(np.int64), 1)


def _objective(w, x, y, k):
  w = np.asarray(w, np.float64)
  z = np.asarray(x.astype(np.float64) @ w)
  if k == 1:
    return (np.maximum(0.0, 1.0 - (2.0 * y - 1.0) * z.ravel()).sum() +
            0.5 * np.sum(w * w))
  phi = (1.0 - np.eye(k)[y] + z).max(axis=1) - z[np.arange(len(y)), y]
  return phi.sum() + 0.5 * np.sum(w * w)


def _liblinear(x, y, k):
  svc = LinearSVC(C=1.0, loss="hinge", dual=True, fit_intercept=False,
                  random_state=0,
                  **({} if k == 1 else dict(multi_class="crammer_singer")))
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    svc.fit(x.astype(np.float64), y)
  return _objective(svc.coef_.T if k > 1 else svc.coef_.ravel(), x, y, k)


def _features(x):
  if isinstance(x, np.ndarray):
    return dict(dense=x)
  return dict(indptr=x.indptr, indices=x.indices, values=x.data,
              num_features=x.shape[1])


def _epochs_to(x, y, k, target, budget, **kwargs):
  """The first epoch (from 1) of a default InMemorySdca fit whose exact
  objective is <= target, or None within `budget`; and its weights."""
  model = InMemorySdca(loss="hinge" if k == 1 else "multiclass_hinge",
                       l2=1.0, num_classes=None if k == 1 else k, **kwargs)
  reached = []

  def stop(epoch, history):
    if history["loss"][-1] * len(y) <= target:
      reached.append(epoch + 1)
      raise StopIteration

  labels = y.astype(np.float32) if k == 1 else y
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # slow-progress advice
    try:
      model.fit(labels, **_features(x), epochs=budget, verbose=0,
                callback=stop)
    except StopIteration:
      pass
  w = (model.dense_weights if isinstance(x, np.ndarray) else
       model.sparse_weights)
  return (reached[0] if reached else None), w


# (problem, the epoch budget: ~1.5x the epochs measured at the defaults,
# whether 'permutation' takes > 2x as many).
CASES = [("heart_scale", 90, True), ("digits_binary", 70, True),
         ("digits", 360, True), ("wine", 45, True), ("text", 30, False),
         ("text_binary", 30, False)]


@pytest.mark.parametrize("name,budget,slower", CASES,
                         ids=[c[0] for c in CASES])
def test_the_default_reaches_liblinears_objective(name, budget, slower):
  x, y, k = _problem(name)
  target = _liblinear(x, y, k)
  loss = "hinge_loss" if k == 1 else "multiclass_hinge_loss"
  assert options.visit_order_for(loss, None) == "shrinking"
  epochs, w = _epochs_to(x, y, k, target, budget)
  assert epochs is not None, (name, budget)
  # The engine's objective is the exact one of the returned weights.
  assert _objective(w, x, y, k) <= target * (1 + 1e-9)
  if slower:
    plain, _ = _epochs_to(x, y, k, target, epochs,
                          visit_order="permutation")
    assert plain is None, (name, epochs, plain)


def test_the_sklearn_door_at_its_defaults_matches_linearsvc():
  # SDCAClassifier's visit_order 'auto' is the loss's default: Crammer-
  # Singer on wine, LinearSVC's objective within the budget above.
  x, y, k = _problem("wine")
  target = _liblinear(x, y, k)
  clf = SDCAClassifier(loss="hinge", C=1.0, fit_intercept=False,
                       max_iter=45)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    clf.fit(x, y)
  assert _objective(clf.coef_.T, x, y, k) <= target * (1 + 1e-9)


def test_streamed_and_the_command_line_keep_permutation():
  assert options.visit_order_for("hinge", None,
                                 options.STREAMED) == "permutation"
  assert options.visit_order_for("logistic", None) == "permutation"
  assert options.visit_order_for("hinge", "cyclic") == "cyclic"
  assert options.COMMAND_LINE_DEFAULTS["visit_order"] == "permutation"

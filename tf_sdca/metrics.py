"""Evaluation metrics in numpy (no scikit-learn needed at run time)."""
import numpy as np


def log_loss(labels, probabilities, weights=None, eps=1e-15):
  """Mean (weighted) binary cross-entropy."""
  y = np.asarray(labels, dtype=np.float64)
  p = np.clip(np.asarray(probabilities, dtype=np.float64), eps, 1.0 - eps)
  losses = -(y * np.log(p) + (1.0 - y) * np.log1p(-p))
  return float(np.average(losses, weights=weights))


def auc(labels, scores):
  """Area under the ROC curve (Mann-Whitney U with tied ranks averaged).

  Returns NaN when only one class is present.
  """
  y = np.asarray(labels) > 0.5
  s = np.asarray(scores, dtype=np.float64)
  positives = int(y.sum())
  negatives = y.size - positives
  if positives == 0 or negatives == 0:
    return float("nan")
  order = np.argsort(s, kind="mergesort")
  sorted_scores = s[order]
  ranks = np.empty(s.size, dtype=np.float64)
  # Average rank (1-based) of each run of equal scores.
  boundaries = np.flatnonzero(np.diff(sorted_scores)) + 1
  starts = np.concatenate([[0], boundaries])
  ends = np.concatenate([boundaries, [s.size]])
  run_rank = (starts + ends + 1) / 2.0
  ranks[order] = np.repeat(run_rank, ends - starts)
  u = ranks[y].sum() - positives * (positives + 1) / 2.0
  return float(u / (positives * negatives))


def accuracy(labels, probabilities, threshold=0.5):
  """Fraction of rows where (probability > threshold) equals the label."""
  y = np.asarray(labels) > 0.5
  return float(np.mean((np.asarray(probabilities) > threshold) == y))

"""The exact objective parts of packed rows (`packed_solve` with no passes,
what every epoch's gap is made of) against a reference that adds the same
numbers in the op's order in Python floats: bit for bit, for the hinge and
the squared loss, with and without values, L1, dense columns, example
weights of 0 (rows left out), row counts that are not a multiple of the
rows summed side by side, and more rows than one block of sums (16,384);
and the Crammer-Singer loss's, rows scored two at a time or one by one."""
import numpy as np
import pytest

from tf_sdca import pack_rows, packed_solve

BLOCK = 16384  # rows per block of the objective's sums


def _problem(n, loss, values, dense_dim, seed):
  rng = np.random.default_rng(seed)
  vocab = 40
  lengths = rng.integers(0, 9, size=n)
  ids = np.concatenate([rng.choice(vocab, size=k, replace=False)
                        for k in lengths]).astype(np.int32)
  row_ptr = np.r_[0, np.cumsum(lengths)].astype(np.int64)
  vals = (rng.normal(size=ids.size).astype(np.float32) if values else
          np.zeros(0, np.float32))
  dense = rng.normal(size=(n, dense_dim)).astype(np.float32)
  weights = rng.uniform(0.5, 2.0, size=n).astype(np.float32)
  weights[rng.random(n) < 0.1] = 0.0
  raw = (rng.random(n) < 0.5).astype(np.float32)
  if loss == "squared_loss":
    raw = rng.normal(size=n).astype(np.float32)
  w = rng.normal(size=vocab + dense_dim)
  w[rng.random(w.size) < 0.3] = 0.0  # a sparse model's zeros
  if loss == "hinge_loss":
    label = 2.0 * raw.astype(np.float64) - 1.0
    duals = rng.uniform(0.0, 1.0, size=n) * label
    duals[rng.random(n) < 0.2] = 0.0
  else:
    label = raw.astype(np.float64)
    duals = rng.normal(size=n)
  return dict(row_ptr=row_ptr, feature_ids=ids, feature_values=vals,
              dense_features=dense, example_weights=weights,
              example_labels=raw), vocab, w, duals, label


def _shrink(v, shrinkage):
  if v > shrinkage:
    return v - shrinkage
  if v < -shrinkage:
    return v + shrinkage
  return 0.0


def _reference(data, vocab, w, duals, label, loss, l1, l2):
  """(primal_loss, dual_loss, |w|^2, |w|_1) as the op adds them."""
  shrinkage = l1 / l2
  eff = [(_shrink(float(v), shrinkage) if l1 > 0 else float(v)) for v in w]
  l2_sq = l1_abs = 0.0
  for v in eff:
    l2_sq += v * v
    l1_abs += abs(v)
  n = len(duals)
  ptr, ids = data["row_ptr"], data["feature_ids"]
  vals, dense = data["feature_values"], data["dense_features"]
  primal = dual = 0.0
  for begin in range(0, max(n, 1), BLOCK):  # blocks, added in order
    p = q = 0.0
    for i in range(begin, min(n, begin + BLOCK)):
      s = float(data["example_weights"][i])
      if s <= 0.0:
        continue
      wx = 0.0
      for k in range(ptr[i], ptr[i + 1]):
        wx += (float(vals[k]) if vals.size else 1.0) * eff[ids[k]]
      for c in range(dense.shape[1]):
        wx += float(dense[i, c]) * eff[vocab + c]
      y, a = float(label[i]), float(duals[i])
      if loss == "hinge_loss":
        p += s * max(0.0, 1.0 - y * wx)
        q += s * -min(max(a * y, 0.0), 1.0)
      else:
        r = wx - y
        p += s * (0.5 * r * r)
        q += s * (0.5 * a * a - a * y)
    primal += p
    dual += q
  return primal, dual, l2_sq, l1_abs


@pytest.mark.parametrize("loss", ["hinge_loss", "squared_loss"])
@pytest.mark.parametrize("n,values,dense_dim,l1", [
    (203, True, 3, 0.0), (203, False, 0, 0.0), (97, True, 2, 0.125),
    (6, False, 5, 0.0), (1, True, 0, 0.0), (BLOCK + 37, True, 1, 0.0)])
def test_objective_parts_are_the_sums_in_order(loss, n, values, dense_dim,
                                                l1):
  data, vocab, w, duals, label = _problem(n, loss, values, dense_dim,
                                          seed=n + dense_dim)
  l2 = 0.5  # (l1 and l2 exact in the op's float32 attributes)
  rows = pack_rows(**data, num_sparse_features=vocab, loss_type=loss)
  _, _, parts = packed_solve(rows, w, duals, seed=0, loss_type=loss, l1=l1,
                             l2=l2, num_passes=0)
  got = tuple(float(v) for v in parts.numpy())
  want = _reference(data, vocab, w, duals, label, loss, l1, l2)
  assert got == want
  # And the numbers themselves, in numpy's own float64 arithmetic.
  eff = np.sign(w) * np.maximum(np.abs(w) - l1 / l2, 0.0)
  assert got[2] == pytest.approx(np.sum(eff * eff), rel=1e-12)
  assert got[3] == pytest.approx(np.sum(np.abs(eff)), rel=1e-12)


def _multiclass_reference(data, vocab, k, w, duals, labels):
  l2_sq = l1_abs = 0.0
  for v in w:
    l2_sq += float(v) * float(v)
    l1_abs += abs(float(v))
  ptr, ids = data["row_ptr"], data["feature_ids"]
  vals, dense = data["feature_values"], data["dense_features"]
  p = q = 0.0
  for i in range(len(labels)):
    s = float(data["example_weights"][i])
    if s <= 0.0:
      continue
    z = [0.0] * k
    for e in range(ptr[i], ptr[i + 1]):
      v = float(vals[e]) if vals.size else 1.0
      for j in range(k):
        z[j] += v * float(w[ids[e] * k + j])
    for c in range(dense.shape[1]):
      v = float(dense[i, c])
      for j in range(k):
        z[j] += v * float(w[(vocab + c) * k + j])
    y = int(labels[i])
    top = max((0.0 if j == y else 1.0) + z[j] for j in range(k))
    p += s * (top - z[y])
    q += s * -min(max(float(duals[i, y]), 0.0), 1.0)
  return p, q, l2_sq, l1_abs


@pytest.mark.parametrize("n,k,values,dense_dim", [
    (101, 10, True, 4), (64, 3, False, 2), (33, 13, True, 1)])
def test_multiclass_objective_parts_are_the_sums_in_order(n, k, values,
                                                           dense_dim):
  """The Crammer-Singer parts: rows scored two at a time (K of the
  compiled sizes) or one by one (K = 13), the same bits."""
  data, vocab, _, _, _ = _problem(n, "hinge_loss", values, dense_dim,
                                  seed=7 * n + k)
  rng = np.random.default_rng(n)
  labels = rng.integers(0, k, size=n)
  data["example_labels"] = labels.astype(np.float32)
  w = rng.normal(size=(vocab + dense_dim) * k)
  w[rng.random(w.size) < 0.3] = 0.0
  # Duals on each row's simplex: alpha_y = t in [0, 1], the others <= 0
  # summing to -t.
  t = rng.uniform(0.0, 1.0, size=n)
  duals = -rng.dirichlet(np.ones(k), size=n) * t[:, None]
  duals[np.arange(n), labels] = 0.0
  duals[np.arange(n), labels] = -duals.sum(axis=1)
  rows = pack_rows(**data, num_sparse_features=vocab,
                   loss_type="multiclass_hinge_loss", num_classes=k)
  _, _, parts = packed_solve(rows, w, duals.ravel(), seed=0,
                             loss_type="multiclass_hinge_loss", l1=0.0,
                             l2=0.5, num_passes=0, num_classes=k)
  got = tuple(float(v) for v in parts.numpy())
  assert got == _multiclass_reference(data, vocab, k, w, duals, labels)

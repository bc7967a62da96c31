"""An independent numpy model of CoCoA+'s rounds against sigma' (no
TensorFlow, no tf_sdca): does a per-coordinate sigma'_j (the number of
shards whose rows touch coordinate j, safe by Cauchy-Schwarz coordinate by
coordinate) or more local passes cut the rounds that two shards need, how
do the rounds move with a scalar sigma', and what do exchanges within a
pass do (fresh parts of each pass's permutation, or fixed parts)?

Smooth hinge (gamma = 1, closed-form SDCA steps), Criteo-shaped rows (26
Zipf ids in 2^16 buckets, 13 uniform dense values, an intercept), one SDCA
pass per shard and round over consecutive blocks of rows, rounds to a
relative duality gap of 1e-4 (g3doc/distributed.md, "Momentum").

  .venv/bin/python bench/cocoa_sigma_model.py [--rows 5000] [--l2 10]
      [--shards 2] [--max-rounds 400]

Measured 2026-11-25 (defaults, ~3 minutes): one process 17 epochs; two
shards 253 rounds with sigma' = 2 and 254 with the per-coordinate sigma';
three local passes per round 253; sigma' = 1.3 / 1.6 / 2 / 3: 170 / 205 /
253 / 378 rounds (1.3 is not safe in general; 1 stalls at a gap of 1.2).
Exchanges within a pass (2026-11-25, --max-rounds 300): fresh parts, 4 / 16
per pass: 61 / 23 rounds; one process over 2 / 4 fixed parts: 112 passes /
not within 300 (gap 6.4e-4).
"""
import argparse

import numpy as np


def problem(rows, seed=0, buckets=1 << 16):
  """(cols, vals, y, d): each row's 40 table indices and values, labels."""
  rng = np.random.default_rng(seed)
  zipf = 1.0 / np.arange(1, buckets + 1) ** 1.1
  zipf /= zipf.sum()
  ids = rng.choice(buckets, size=(rows, 26), p=zipf)
  dense = rng.random((rows, 13))
  score = (rng.normal(size=buckets)[ids].sum(1) * 0.1 +
           dense @ rng.normal(size=13) - 0.5)
  y = np.where(rng.random(rows) < 1 / (1 + np.exp(-score)), 1.0, -1.0)
  cols = np.concatenate([ids, buckets + np.tile(np.arange(14), (rows, 1))], 1)
  vals = np.concatenate([np.ones((rows, 26)), dense, np.ones((rows, 1))], 1)
  return cols, vals, y, buckets + 14


class Model:
  """CoCoA+ rounds on one problem (smooth hinge, gamma = 1)."""

  def __init__(self, cols, vals, y, d, l2):
    self.cols, self.vals, self.y, self.d, self.l2 = cols, vals, y, d, l2

  def relative_gap(self, w, a):
    m = self.y * (self.vals * w[self.cols]).sum(1)
    phi = np.where(m >= 1, 0.0, np.where(m <= 0, 0.5 - m, (1 - m) ** 2 / 2))
    primal = phi.sum() + self.l2 / 2 * w @ w
    dual = (a - a * a / 2).sum() - self.l2 / 2 * w @ w
    return (primal - dual) / primal

  def local_pass(self, rows, w, a, sigma, rng):
    """One SDCA pass of a shard's local subproblem: the steps see w + sigma
    (.) dw and count |x|^2 sigma-weighted; returns the shard's dw."""
    dw = np.zeros(self.d)
    for i in rng.permutation(rows):
      c, v = self.cols[i], self.vals[i]
      wx = (v * (w[c] + sigma[c] * dw[c])).sum()
      q = (sigma[c] * v * v).sum() / self.l2
      new = np.clip(a[i] + (1 - self.y[i] * wx - a[i]) / (q + 1), 0, 1)
      if new != a[i]:
        np.add.at(dw, c, (new - a[i]) * self.y[i] * v / self.l2)
        a[i] = new
    return dw

  def rounds(self, shards, sigma="scalar", passes=1, max_rounds=400,
             parts=1, fixed_parts=False):
    """Rounds to a relative gap of 1e-4 (a string if not within
    max_rounds). sigma: "scalar" (K), "per-coordinate", or a number.
    parts: exchanges per pass (one pass a round): each shard's pass is cut
    into `parts` pieces of a fresh permutation, the changes added after
    each; with `fixed_parts` the pieces are split once and visited in a
    random order each pass (a block-cyclic order)."""
    if parts > 1:
      return self._rounds_in_parts(shards, parts, fixed_parts, max_rounds)
    n = len(self.y)
    blocks = np.array_split(np.arange(n), shards)
    if sigma == "per-coordinate":
      touches = np.zeros(self.d)
      for block in blocks:
        touches[np.unique(self.cols[block])] += 1
      s = np.maximum(touches, 1.0)
    else:
      s = np.full(self.d, float(shards if sigma == "scalar" else sigma))
    w, a = np.zeros(self.d), np.zeros(n)
    rng = np.random.default_rng(1)
    gap = np.inf
    for r in range(1, max_rounds + 1):
      total = np.zeros(self.d)
      for block in blocks:
        dw = np.zeros(self.d)
        for _ in range(passes):
          dw += self.local_pass(block, w + s * dw, a, s, rng)
        total += dw
      w = w + total
      gap = self.relative_gap(w, a)
      if gap < 1e-4:
        return r
    return f">{max_rounds} (gap {gap:.1e})"


  def _rounds_in_parts(self, shards, parts, fixed, max_rounds):
    n = len(self.y)
    blocks = np.array_split(np.arange(n), shards)
    s = np.full(self.d, float(shards))
    w, a = np.zeros(self.d), np.zeros(n)
    rng = np.random.default_rng(1)
    pieces = [np.array_split(block, parts) for block in blocks]
    gap = np.inf
    for r in range(1, max_rounds + 1):
      if fixed:
        order = rng.permutation(parts)
        plan = [[p[o] for o in order] for p in pieces]
      else:
        plan = [np.array_split(rng.permutation(b), parts) for b in blocks]
      for j in range(parts):
        total = np.zeros(self.d)
        for k in range(shards):
          total += self.local_pass(plan[k][j], w, a, s, rng)
        w = w + total
      gap = self.relative_gap(w, a)
      if gap < 1e-4:
        return r
    return f">{max_rounds} (gap {gap:.1e})"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--rows", type=int, default=5000)
  parser.add_argument("--l2", type=float, default=10.0)
  parser.add_argument("--shards", type=int, default=2)
  parser.add_argument("--max-rounds", type=int, default=400)
  args = parser.parse_args()
  model = Model(*problem(args.rows), args.l2)
  k, cap = args.shards, args.max_rounds
  print(f"one process: {model.rounds(1, max_rounds=cap)} epochs")
  print(f"K = {k}, sigma' = K: {model.rounds(k, max_rounds=cap)} rounds")
  print(f"K = {k}, per-coordinate sigma': "
        f"{model.rounds(k, 'per-coordinate', max_rounds=cap)} rounds")
  print(f"K = {k}, sigma' = K, 3 local passes: "
        f"{model.rounds(k, passes=3, max_rounds=cap)} rounds")
  for sigma in (1.3, 1.6, 3.0):
    print(f"K = {k}, sigma' = {sigma}: "
          f"{model.rounds(k, sigma, max_rounds=cap)} rounds")
  for parts in (4, 16):
    print(f"K = {k}, {parts} exchanges per pass (fresh parts): "
          f"{model.rounds(k, parts=parts, max_rounds=cap)} rounds")
  for parts in (2, 4):
    print(f"one process, {parts} fixed parts (block-cyclic): "
          f"{model.rounds(1, parts=parts, fixed_parts=True, max_rounds=cap)}"
          f" passes")


if __name__ == "__main__":
  main()

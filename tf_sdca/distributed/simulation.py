"""CoCoA+ with K shards simulated in one process, on the real engine.

Every shard is a `tf_sdca.distributed.shard.Shard` (its rows packed once,
one `TfSdca>PackedSolve` call per round), exactly as a worker process runs
it; only the exchange is a sum in memory instead of a collective. The
simulation therefore answers what does not depend on the network - rounds to
a duality gap for any K, how many table rows each shard touches, and the
bytes each exchange would send - for K far beyond the machines at hand.

Example:
  >>> from tf_sdca.distributed import simulation
  >>> sim = simulation.Simulation(data, num_shards=8, loss="logistic", l2=1.0)
  >>> history = sim.run(tol=1e-4, max_rounds=100)
  >>> history["rounds"], sim.bytes_per_round()
"""
import time

import numpy as np

from tf_sdca import losses
from tf_sdca.distributed import shard as shard_lib
from tf_sdca.distributed import training
from tf_sdca.engine import objective_and_gap


class Simulation:
  """K shards of one data set and the weights they share.

  Args:
    data: dict of `labels` and features as `tf_sdca.distributed.shard.split`
      takes them (`dense`, `ids` or CSR, `example_weights`).
    num_shards: K.
    num_features: the sparse table's size (default: max id + 1).
    combine: "add" (CoCoA+, sigma = K) or "average" (CoCoA, sigma = 1).
    num_passes: local SDCA passes per round (H).
    momentum: extrapolate the rounds (`shard.Momentum`; what
      `tf_sdca.distributed.train` does); False: plain CoCoA+ / CoCoA.
    exchanges_per_pass: S; every local pass is cut into S parts with the
      changes added after each (`tf_sdca.distributed.train`'s option and
      default; 1: CoCoA+ as published, one exchange a round).
    loss, l1, l2, gamma, seed: as `Shard`.

  Attributes:
    shards: the K `Shard`s (consecutive blocks of rows).
    table_ids: sorted sparse ids some shard touches; the weights hold these
      ids' entries, then the dense columns.
    weights: float64 `[len(table_ids) + d]`, unshrunk.
  """

  def __init__(self, data, num_shards, num_features=None, combine="add",
               num_passes=1, loss="logistic", l1=0.0, l2=1.0, gamma=1.0,
               seed=0, momentum=True,
               exchanges_per_pass=shard_lib.EXCHANGES_PER_PASS):
    if num_features is None:
      ids = data.get("ids") if data.get("ids") is not None else data.get(
          "indices")
      num_features = int(np.max(ids)) + 1 if ids is not None else 0
    self.num_features = int(num_features)
    self.shards = [
        shard_lib.Shard(**block, num_features=num_features, loss=loss, l1=l1,
                        l2=l2, gamma=gamma, num_shards=num_shards,
                        combine=combine, num_passes=num_passes, seed=seed,
                        index=k, num_parts=exchanges_per_pass)
        for k, block in enumerate(shard_lib.split(data, num_shards))]
    self.table_ids = np.unique(np.concatenate(
        [s.touched for s in self.shards]))
    self._positions = [s.positions(self.table_ids) for s in self.shards]
    self.num_dense = self.shards[0].num_dense
    self.weights = np.zeros(self.table_ids.size + self.num_dense)
    self.loss, self.l1, self.l2 = self.shards[0].loss, float(l1), float(l2)
    self.round = 0
    self.momentum = shard_lib.Momentum() if momentum else None
    self._previous = None  # (duals per shard, weights) of the last round
    self.betas = []
    # Per round: the bytes a worker's all-gathers of (position, value)
    # pairs would send with S > 1 (`training.pack_change`; 0 with S = 1).
    self.gathered_bytes = []
    # The gap is evaluated on all rows packed once more as one shard (one
    # op call instead of K; the same sums as the K shards' parts up to the
    # order of float64 additions).
    self._whole = shard_lib.Shard(**data, num_features=num_features,
                                  loss=loss, l1=l1, l2=l2, gamma=gamma)
    self._whole_positions = self._whole.positions(self.table_ids)

  def step(self):
    """One round: every shard solves against the current weights, then the
    changes are added (in shard order); S times a pass with S exchanges per
    pass."""
    parts = self.shards[0].num_parts
    k = len(self.shards)
    gathered = 0.0
    for pass_index, part in self.shards[0].round_calls():
      w = self.weights
      deltas = [s.solve(w[p], self.round, pass_index, part)
                for s, p in zip(self.shards, self._positions)]
      w = w.copy()
      for p, delta in zip(self._positions, deltas):
        w[p] += delta
      self.weights = w
      if parts > 1:  # what the workers' all-gather would send
        longest = max(training.pack_change(d).size for d in deltas)
        gathered += (k - 1) * longest * 8.0 + 2.0 * (k - 1) * 8
    self.gathered_bytes.append(gathered)
    self.round += 1

  def objective_and_gap(self):
    """(primal, duality gap) of the whole problem: the loss and dual sums
    over all rows at the weights plus the table's norms."""
    self._whole.duals = np.concatenate([s.duals for s in self.shards])
    loss_sum, dual_sum = self._whole.evaluate(
        self.weights[self._whole_positions])
    parts = (loss_sum, dual_sum) + shard_lib.norms(self.weights, self.l1,
                                                   self.l2)
    return objective_and_gap(parts, self.loss, self.l1, self.l2)

  def extrapolate(self, primal, gap):
    """After a round whose objective is (primal, gap): moves the duals and
    weights to the next round's extrapolated start (`shard.Momentum`)."""
    current = ([s.duals for s in self.shards], self.weights)
    if self._previous is not None:
      changes = [d - p for d, p in zip(current[0], self._previous[0])]
      limit = min(losses.extrapolation_limit(s.loss, s.labels, d, c)
                  for s, d, c in zip(self.shards, current[0], changes))
      beta = self.momentum.beta(primal - gap, limit)
      self.betas.append(beta)
      if beta > 0:
        for s, d, c in zip(self.shards, current[0], changes):
          s.duals = d + beta * c
        self.weights = current[1] + beta * (current[1] - self._previous[1])
    else:
      self.momentum.last_dual = primal - gap
    self._previous = current

  def run(self, tol=1e-4, max_rounds=100):
    """Rounds until the relative duality gap is below `tol`.

    Returns:
      dict: `rounds` (to `tol`, or None if not reached), `gap` (relative,
      per round), `objective` (per round), `seconds` (wall time of the
      rounds, evaluations excluded).
    """
    history = dict(rounds=None, gap=[], objective=[], seconds=0.0)
    while self.round < max_rounds:
      start = time.perf_counter()
      self.step()
      history["seconds"] += time.perf_counter() - start
      primal, gap = self.objective_and_gap()
      history["objective"].append(primal)
      history["gap"].append(gap / max(abs(primal), 1e-300))
      if history["gap"][-1] < tol:
        history["rounds"] = self.round
        break
      if self.momentum is not None and self.round < max_rounds:
        self.extrapolate(primal, gap)
    return history

  def full_weights(self):
    """(sparse weights `[num_features]`, dense weights `[d]`), unshrunk, in
    the layout of `InMemorySdca`."""
    sparse = np.zeros(self.num_features)
    sparse[self.table_ids] = self.weights[:self.table_ids.size]
    return sparse, self.weights[self.table_ids.size:].copy()

  def bytes_per_round(self):
    """Bytes each worker would send (and receive) per round, by exchange
    (each made H S times a round with S = `exchanges_per_pass` > 1):

    - `dense`: ring all-reduce of the whole table, 2 (K-1)/K (M + d) 8;
    - `union`: ring all-reduce of the rows some shard touches (the table
      compacted once to them), 2 (K-1)/K (|U| + d) 8;
    - `gather`: ring all-gather of each shard's own touched rows' changes,
      padded to the largest shard's as TensorFlow's all-gather does,
      (K-1) max_k (|T_k| + d) 8 (the ids are fixed, sent once at start).
    """
    k = len(self.shards)
    ring = 2.0 * (k - 1) / k
    most = max(s.num_slots for s in self.shards)
    times = len(self.shards[0].round_calls())
    return dict(dense=times * ring * (self.num_features + self.num_dense) * 8,
                union=times * ring * self.weights.size * 8,
                gather=times * (k - 1) * most * 8.0)

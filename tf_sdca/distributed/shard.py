"""One worker's part of a CoCoA+ round: its rows packed once, their duals,
its local solve and its share of the duality gap.

K workers minimise `sum_i s_i phi_i(w.x_i) + l2/2 |w|^2 + l1 |w|_1` together.
Worker k owns a fixed set P_k of rows and their duals alpha_[k]; the weights
are w(alpha) = X alpha / l2 (unshrunk), so they are the sum of the workers'
parts X_[k] alpha_[k] / l2 and a round that changes every worker's duals
changes w by the sum of the workers' changes. In a round every worker solves
its local subproblem (g3doc/distributed.md) against the round's weights w:

  max over d_[k]:  -sum_{i in P_k} s_i phi_i*(-(alpha_i + d_i))
                   - w.(X d_[k]) - sigma / (2 l2) |X d_[k]|^2

by `num_passes` SDCA passes over its rows (the op's `num_loss_partitions`
is sigma: the passes see w + sigma * (local change), the step's curvature
counts |x_i|^2 sigma times, and the returned weights keep 1/sigma of the
local view's change, i.e. w + X d_[k] / l2). Then:

  - CoCoA+ ("add", sigma = K): w += sum_k X d_[k] / l2, alpha_[k] += d_[k].
    sigma = K makes the K added changes safe however the shards correlate
    (the sum of K local quadratic bounds is a bound of the global dual).
  - CoCoA ("average", sigma = 1): w += (1/K) sum_k X d_[k] / l2,
    alpha_[k] += d_[k] / K. Safe for the same reason (a convex combination
    of K feasible points), but each round keeps only 1/K of the progress.

A shard packs its rows with **local ids**: the sorted distinct sparse ids
its rows use (`touched`) are renumbered 0..|touched|-1, so its op calls read
and write a table of |touched| + d entries (d dense columns), not the whole
table. The op's arithmetic on a row does not depend on where its weights
sit in the table, so a shard's solve is the solve over the whole table bit
for bit, and the weights it returns differ from the round's only at its
touched rows: those are what it has to send.
"""
import numpy as np

from tf_sdca import engine
from tf_sdca import losses
from tf_sdca.ops import sdca_ops

COMBINES = ("add", "average")
# S, the parts of a local pass with an exchange after each, by default
# (tf_sdca.distributed.train; g3doc/distributed.md, "Exchanges within a
# pass").
EXCHANGES_PER_PASS = 16


class Shard:
  """The rows of one worker, packed once (`TfSdca>PackRows`), and their
  duals (float64, one per row).

  Args:
    labels: `[n]` labels.
    dense: optional float `[n, d]` dense features.
    ids: optional int `[n, k]` sparse ids (value 1), or CSR instead:
    indptr, indices, values: `[n + 1]` row offsets, ids, optional values.
    example_weights: optional `[n]` weights (default 1).
    num_features: the global sparse table's size (ids must be below it).
    loss: a loss of `tf_sdca.losses` (short or op name).
    l1, l2, gamma: the objective's regularisation and smooth-hinge gamma.
    num_shards: K, the number of shards whose changes are combined.
    combine: "add" (CoCoA+, sigma = K) or "average" (CoCoA, sigma = 1).
    num_passes: SDCA passes over the shard's rows per round (H).
    num_parts: S; each pass is cut into S parts of its visiting order,
      solved by S calls of `solve` (`part` 0 .. S-1) between which the
      caller exchanges the weights (1: a call makes all H passes).
    seed: pass p of round r visits the rows in an order depending only on
      (seed, r, index, p): a resumed run repeats an uninterrupted one.
    index: this shard's index in [0, K).
    num_classes: C classes of a multiclass loss (softmax, multiclass
      hinge): weights `[num_slots, C]` and duals `[n, C]`, flattened
      row-major in `solve` / `evaluate`; 1 for the others.
    hinge_step: the multiclass hinge's block step (`tf_sdca.ops.HINGE_STEPS`;
      'projection' for every other loss).

  Attributes:
    n: rows.
    touched: int64, the sorted distinct global sparse ids of the rows.
    num_dense: d.
    duals: float64 `[n]` (`[n * C]`, row-major blocks, for C classes).
    total_weight: sum of the example weights.
  """

  def __init__(self, labels, dense=None, ids=None, indptr=None, indices=None,
               values=None, example_weights=None, num_features=None,
               loss="logistic", l1=0.0, l2=1.0, gamma=1.0, num_shards=1,
               combine="add", num_passes=1, seed=0, index=0, num_classes=1,
               hinge_step="projection", num_parts=1):
    self.loss = losses.op_name(loss)
    self.num_classes = int(num_classes)
    sdca_ops.check_hinge_step(self.loss, hinge_step)
    self.hinge_step = hinge_step
    if not (l1 >= 0 and l2 > 0 and gamma > 0 and int(num_passes) >= 1 and
            int(num_parts) >= 1):
      raise ValueError(f"need l1 >= 0, l2 > 0, gamma > 0, num_passes >= 1 "
                       f"and num_parts >= 1, got l1={l1}, l2={l2}, "
                       f"gamma={gamma}, num_passes={num_passes}, "
                       f"num_parts={num_parts}")
    self.num_parts = int(num_parts)
    if combine not in COMBINES:
      raise ValueError(f"combine must be one of {COMBINES}, got {combine!r}")
    if int(num_shards) < 1 or not 0 <= int(index) < int(num_shards):
      raise ValueError(f"need 0 <= index < num_shards, got index {index}, "
                       f"num_shards {num_shards}")
    self.l1, self.l2, self.gamma = float(l1), float(l2), float(gamma)
    self.num_shards, self.combine = int(num_shards), combine
    self.num_passes, self.seed, self.index = int(num_passes), int(seed), int(
        index)
    labels = np.ascontiguousarray(labels, np.float32)
    self.n = n = labels.shape[0]
    self.labels = labels
    row_ptr, global_ids, values = _csr(n, ids, indptr, indices, values)
    if dense is None:
      dense = np.zeros((n, 0), np.float32)
    dense = np.ascontiguousarray(dense, np.float32)
    if dense.ndim == 1:
      dense = dense[:, None]
    if dense.shape[0] != n:
      raise ValueError(f"dense has {dense.shape[0]} rows but labels has {n}")
    self.num_dense = dense.shape[1]
    weights = (np.ones(n, np.float32) if example_weights is None else
               np.ascontiguousarray(example_weights, np.float32))
    if weights.shape != (n,):
      raise ValueError(f"example_weights must have shape [{n}], got "
                       f"{weights.shape}")
    if global_ids.size:
      if num_features is None:
        raise ValueError("num_features is needed with sparse features")
      low, high = int(global_ids.min()), int(global_ids.max())
      if low < 0 or high >= num_features:
        raise ValueError(f"sparse ids must be in [0, {num_features}), got "
                         f"values in [{low}, {high}]")
    self.touched, local = np.unique(global_ids, return_inverse=True)
    self.touched = self.touched.astype(np.int64)
    self.total_weight = float(weights.sum(dtype=np.float64))
    self.rows = sdca_ops.pack_rows(
        row_ptr, local.astype(np.int32).ravel(), values, dense, weights,
        labels, num_sparse_features=self.touched.size, loss_type=self.loss,
        gamma=self.gamma, num_threads=1, num_classes=self.num_classes)
    self.duals = np.zeros(n * self.num_classes, np.float64)

  @property
  def sigma(self):
    """CoCoA+'s sigma: K for adding, 1 for averaging."""
    return self.num_shards if self.combine == "add" else 1

  @property
  def num_slots(self):
    """Entries of the local table: touched sparse ids, then dense columns."""
    return self.touched.size + self.num_dense

  def positions(self, table_ids):
    """Where the local table's entries sit in a global table whose sparse
    part holds the sorted ids `table_ids` (every touched id among them) and
    whose d dense columns follow."""
    table_ids = np.asarray(table_ids)
    sparse = np.searchsorted(table_ids, self.touched)
    if sparse.size and (sparse.max() >= table_ids.size or
                        (table_ids[sparse] != self.touched).any()):
      raise ValueError("the table does not hold every id of the shard")
    return np.concatenate([sparse, table_ids.size + np.arange(
        self.num_dense)]).astype(np.int64)

  def _config(self):
    """The engine's view of this shard's options."""
    return engine.Config(self.loss, self.l1, self.l2, self.gamma, self.seed,
                         "permutation", self.hinge_step, self.num_classes)

  def call_seed(self, round_index):
    """The op's seed in round `round_index`."""
    return engine.shard_seed(self.seed, round_index, self.index)

  def round_calls(self):
    """The `(pass_index, part)` of a round's `solve` calls, in order, with
    an exchange after each: one call for the H passes with `num_parts` 1,
    else H S calls."""
    if self.num_parts == 1:
      return [(0, 0)]
    return [(p, s) for p in range(self.num_passes)
            for s in range(self.num_parts)]

  def solve(self, weights, round_index, pass_index=0, part=0):
    """A local solve against the current local weights: the round's H
    passes (`num_parts` 1), or part `part` of its pass `pass_index`.

    Args:
      weights: float64 `[num_slots * C]`, the current weights at the local
        table's entries (unshrunk; a slot's C class weights together).
      round_index: the round (seeds the visiting order).
      pass_index, part: which pass of the round and which of its
        `num_parts` parts (with `num_parts` > 1).

    Returns:
      float64 `[num_slots * C]`: this shard's change of the weights, to be
      summed over the shards (already divided by K when averaging). The
      shard's duals move accordingly.
    """
    w = np.ascontiguousarray(weights, np.float64)
    # Every part of a pass cuts the same order; a round's first pass is
    # the one a whole-round call (num_parts 1) makes first.
    seed = self.call_seed(round_index)
    if self.num_parts > 1 and pass_index > 0:
      seed = (seed * 8191 + int(pass_index)) % (1 << 63)
    new_w, new_duals, _ = engine.packed_pass(
        self.rows, w, self.duals, seed, self._config(),
        passes=self.num_passes if self.num_parts == 1 else 1,
        compute_objective=False, num_loss_partitions=self.sigma,
        num_parts=self.num_parts, part=part)
    delta = new_w.numpy() - w
    new_duals = new_duals.numpy()
    if self.combine == "average":
      delta /= self.num_shards
      new_duals = self.duals + (new_duals - self.duals) / self.num_shards
    self.duals = new_duals
    return delta

  def evaluate(self, weights):
    """This shard's part of the objective at the local weights and its
    duals: `(sum s_i phi_i(w.x_i), sum s_i phi_i*(-alpha_i))` over its rows
    (the shrunk weights' norms belong to the whole table)."""
    parts = engine.objective_parts(
        self.rows, np.ascontiguousarray(weights, np.float64), self.duals,
        self._config()).numpy()
    return float(parts[0]), float(parts[1])


class Momentum:
  """Nesterov's extrapolation of CoCoA+'s rounds, restarted whenever the
  dual objective falls (O'Donoghue and Candes' function restart).

  Why: a round of CoCoA+ is a block-Jacobi step on the dual. Modes that
  move dual mass between shards along a direction every shard's rows share
  (intercept, dense columns, frequent ids: X_[1]^T u = -X_[2]^T u', so w
  does not change) have curvature ~1 in the true dual but ~K |X_[k]^T u|^2
  / l2 in each local subproblem: with weak regularisation they contract by
  a factor ~l2 / (K n |mean x|^2) per round however well the shard is
  solved (more local passes do not help; g3doc/distributed.md measures
  it). Extrapolating the rounds, y = x_r + beta_r (x_r - x_{r-1}) with
  beta_r = t / (t + 3), turns such a slow linear rate 1 - c into about
  1 - sqrt(c).

  The extrapolation is of the duals and the weights together (w is linear
  in the duals, so they stay a primal-dual pair), with beta capped so
  that every dual stays in its loss's domain (`losses.extrapolation_limit`,
  the minimum over all workers' rows: one number each worker contributes).
  Restart: t = 0 (no extrapolation next round) when the round's dual
  objective is below the previous round's.

  State (what a checkpoint must keep to resume bit for bit): `t`,
  `last_dual`, the previous round's duals (per shard) and weights.
  """

  def __init__(self):
    self.t = 0
    self.last_dual = -np.inf

  def beta(self, dual, limit):
    """beta for the round whose dual objective is `dual`, given the domain
    limit over all rows; updates t and last_dual."""
    if dual < self.last_dual:
      self.t = 0
    beta = self.t / (self.t + 3.0)
    self.t += 1
    self.last_dual = float(dual)
    return min(beta, 0.9 * limit)

  def state(self):
    return dict(t=int(self.t), last_dual=float(self.last_dual))

  def restore(self, state):
    self.t, self.last_dual = int(state["t"]), float(state["last_dual"])


def norms(weights, l1, l2):
  """(|w|^2, |w|_1) of the shrunk weights of a table (the parts of the
  objective that belong to no shard)."""
  shrunk = losses.shrink_l1(np.asarray(weights, np.float64), l1, l2)
  return float(shrunk @ shrunk), float(np.abs(shrunk).sum())


def _csr(n, ids, indptr, indices, values):
  """(row_ptr int64, ids int64, values float32 or empty) of the sparse part,
  checked and normalised as `InMemorySdca` does (`[0]`-shaped row_ptr:
  none)."""
  csr = engine.csr_arrays(n, ids, indptr, indices, values)
  empty_values = np.zeros(0, np.float32)
  if csr is None:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), empty_values
  row_ptr, ids, values = csr
  return (row_ptr, ids.astype(np.int64, copy=False),
          empty_values if values is None else values)


def split(data, num_shards):
  """Splits a data set into `num_shards` blocks of consecutive rows (sizes
  differ by at most one).

  Args:
    data: dict with `labels` and any of `dense`, `ids` (fixed-width) or
      `indptr`/`indices`/`values` (CSR), `example_weights`; other keys are
      copied into every block.

  Returns:
    A list of dicts of the same keys, each block's arrays (views where the
    rows are contiguous; CSR offsets rebased to 0).
  """
  n = np.shape(data["labels"])[0]
  bounds = np.linspace(0, n, int(num_shards) + 1).round().astype(np.int64)
  blocks = []
  for start, stop in zip(bounds[:-1], bounds[1:]):
    block = {}
    for key, value in data.items():
      if value is None:
        block[key] = None
      elif key in ("labels", "dense", "ids", "example_weights"):
        block[key] = np.asarray(value)[start:stop]
      elif key == "indptr":
        indptr = np.asarray(value, np.int64)
        block[key] = indptr[start:stop + 1] - indptr[start]
      elif key in ("indices", "values"):
        indptr = np.asarray(data["indptr"], np.int64)
        block[key] = np.asarray(value)[indptr[start]:indptr[stop]]
      else:
        block[key] = value
    blocks.append(block)
  return blocks

"""Criteo-shaped synthetic click logs with a known ground-truth model.

Each row has a click label, 13 integer count features (I1..I13: many zeros, a
heavy tail, some missing) and 26 categorical features (C1..C26) whose values
follow a Zipf law per field, hashed with their field into `num_buckets`
buckets. The label is drawn from a logistic model over log-transformed counts
and hashed categories, with an intercept chosen so that about 25% of rows
click. Nothing is downloaded: this is tf_sdca's embedded default data set.

Example:
  >>> from tf_sdca.data import generate_criteo_arrays
  >>> data = generate_criteo_arrays(10_000, num_buckets=2**20, seed=0)
  >>> data["cat_ids"].shape, data["dense"].shape
  ((10000, 26), (10000, 13))
"""
import numpy as np

NUM_INTEGER = 13
NUM_CATEGORICAL = 26
# Distinct values per categorical field (Criteo's fields range from a few to
# millions of values).
_CARDINALITIES = np.array([
    1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683,
    8351593, 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15,
    286181, 105, 142572], dtype=np.int64)
_ZIPF_EXPONENT = 1.1
_CHUNK = 250_000


def hash_category(field, value, num_buckets):
  """Bucket of categorical `value` (int64 array) of `field` (0..25).

  A fixed arithmetic mix (SplitMix64's finaliser) of (field, value): the same
  in every process and on every platform, unlike Python's `hash`.
  """
  with np.errstate(over="ignore"):
    x = (np.asarray(value, dtype=np.int64).astype(np.uint64) *
         np.uint64(0x9E3779B97F4A7C15) +
         np.uint64(field + 1) * np.uint64(0xBF58476D1CE4E5B9))
    x ^= x >> np.uint64(30)
    x *= np.uint64(0xBF58476D1CE4E5B9)
    x ^= x >> np.uint64(27)
    x *= np.uint64(0x94D049BB133111EB)
    x ^= x >> np.uint64(31)
  return (x % np.uint64(num_buckets)).astype(np.int64)


def _zipf_values(rng, size, cardinality):
  """Zipf-distributed ranks in [0, cardinality) (inverse-CDF on a power law,
  vectorised: P(rank >= r) ~ r^(1 - s))."""
  u = rng.random(size)
  s = _ZIPF_EXPONENT
  # Continuous power law on [1, cardinality + 1), floored.
  top = (cardinality + 1.0) ** (1.0 - s)
  r = (1.0 - u * (1.0 - top)) ** (1.0 / (1.0 - s))
  return np.minimum(r.astype(np.int64) - 1, cardinality - 1)


def generate_criteo_arrays(num_rows, num_buckets=2**20, seed=0,
                           click_rate=0.25):
  """Generates `num_rows` Criteo-shaped rows in memory.

  Args:
    num_rows: number of rows.
    num_buckets: hash buckets of the categorical features (ids in
      `[0, num_buckets)`).
    seed: everything is a function of the seed (and of `num_rows`: rows are
      generated in fixed chunks, so a prefix of a larger data set equals the
      smaller one).
    click_rate: target mean of the labels.

  Returns:
    A dict with `labels` float32 `[n]` (0/1), `counts` int64 `[n, 13]` (-1 =
    missing), `dense` float32 `[n, 13]` (log(1 + count), 0 when missing),
    `cat_values` int64 `[n, 26]` (raw categorical values, -1 = missing),
    `cat_ids` int64 `[n, 26]` (hashed buckets; missing values hash to their
    field's "missing" bucket), `true_logits` float64 `[n]`,
    `true_probabilities` float64 `[n]`, and the model: `true_dense_weights`,
    `true_bucket_weights` (`[num_buckets]`), `true_bias`.
  """
  if num_rows < 0:
    raise ValueError(f"num_rows must be >= 0, got {num_rows}")
  if not 0.0 < click_rate < 1.0:
    raise ValueError(f"click_rate must be in (0, 1), got {click_rate}")
  model_rng = np.random.default_rng([seed, 0])
  dense_w = model_rng.normal(0.0, 0.15, NUM_INTEGER)
  bucket_w = model_rng.normal(0.0, 0.5, num_buckets)
  count_scale = model_rng.uniform(0.5, 40.0, NUM_INTEGER)
  missing_rate = model_rng.uniform(0.0, 0.4, NUM_INTEGER + NUM_CATEGORICAL)
  out = {k: [] for k in ("counts", "cat_values", "cat_ids", "logits")}
  for start in range(0, num_rows, _CHUNK):
    rows = min(_CHUNK, num_rows - start)
    rng = np.random.default_rng([seed, 1, start // _CHUNK])
    # Counts: zero-inflated geometric-like heavy tails.
    counts = np.floor(rng.pareto(1.5, (rows, NUM_INTEGER)) * count_scale)
    counts[rng.random((rows, NUM_INTEGER)) < 0.3] = 0
    counts = counts.astype(np.int64)
    counts[rng.random((rows, NUM_INTEGER)) < missing_rate[:NUM_INTEGER]] = -1
    values = np.empty((rows, NUM_CATEGORICAL), np.int64)
    ids = np.empty((rows, NUM_CATEGORICAL), np.int64)
    for f in range(NUM_CATEGORICAL):
      values[:, f] = _zipf_values(rng, rows, _CARDINALITIES[f])
      missing = rng.random(rows) < missing_rate[NUM_INTEGER + f]
      values[missing, f] = -1
      ids[:, f] = hash_category(f, values[:, f], num_buckets)
    dense = np.log1p(np.maximum(counts, 0)).astype(np.float32)
    logits = dense @ dense_w + bucket_w[ids].sum(axis=1)
    out["counts"].append(counts)
    out["cat_values"].append(values)
    out["cat_ids"].append(ids)
    out["logits"].append(logits)
  cat = lambda k, shape: (np.concatenate(out[k]) if out[k] else
                          np.zeros(shape, np.int64))
  counts = cat("counts", (0, NUM_INTEGER))
  logits = (np.concatenate(out["logits"]) if out["logits"] else np.zeros(0))
  bias = _bias_for_rate(logits, click_rate)
  logits = logits + bias
  probs = 1.0 / (1.0 + np.exp(-logits))
  label_rng = np.random.default_rng([seed, 2])
  labels = (label_rng.random(num_rows) < probs).astype(np.float32)
  return dict(
      labels=labels, counts=counts,
      dense=np.log1p(np.maximum(counts, 0)).astype(np.float32),
      cat_values=cat("cat_values", (0, NUM_CATEGORICAL)),
      cat_ids=cat("cat_ids", (0, NUM_CATEGORICAL)),
      true_logits=logits, true_probabilities=probs,
      true_dense_weights=dense_w, true_bucket_weights=bucket_w,
      true_bias=bias)


def _bias_for_rate(logits, rate):
  """Intercept b with mean(sigmoid(logits + b)) = rate (bisection)."""
  if logits.size == 0:
    return 0.0
  sample = logits[:: max(1, logits.size // 200_000)]
  lo, hi = -30.0, 30.0
  for _ in range(60):
    mid = 0.5 * (lo + hi)
    if np.mean(1.0 / (1.0 + np.exp(-(sample + mid)))) < rate:
      lo = mid
    else:
      hi = mid
  return 0.5 * (lo + hi)

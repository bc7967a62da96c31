"""Criteo-shaped synthetic click logs with a known ground-truth model.

Each row has a click label, 13 integer count features (I1..I13: many zeros, a
heavy tail, some missing) and 26 categorical features (C1..C26) whose values
follow a Zipf law per field, hashed with their field into `num_buckets`
buckets. The label is drawn from a logistic model over log-transformed counts
and hashed categories, with an intercept chosen so that about `click_rate` of
rows click. Nothing is downloaded: this is tf_sdca's embedded default data set.

Rows are generated in fixed chunks of 2^18 rows, each from its own random
stream, and the intercept is calibrated on a separate fixed sample, so a data
set is a function of the seed alone: the first `n` rows of a larger data set
are the data set of `n` rows, and chunks can be streamed
(`iter_criteo_chunks`) without holding the whole data set in memory.

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
_PARETO_SHAPE = 1.5
_CHUNK = 1 << 18
# Rows of the fixed sample the intercept is calibrated on: the click rate's
# sampling error is then about 0.3 / sqrt(2^16) ~ 0.001.
_CALIBRATION_ROWS = 1 << 16
# Random streams: np.random.default_rng([seed, stream, ...]).
_MODEL_STREAM, _ROWS_STREAM, _LABEL_STREAM, _CALIBRATION_STREAM = 0, 1, 2, 3

# The mixes below are SplitMix64's finaliser (64 bits) and "lowbias32" (32
# bits, a bijection): fixed arithmetic, so the same in every process and on
# every platform, unlike Python's `hash`.
_GOLDEN64 = np.uint64(0x9E3779B97F4A7C15)
_MIX64_A = np.uint64(0xBF58476D1CE4E5B9)
_MIX64_B = np.uint64(0x94D049BB133111EB)


def hash_category(field, value, num_buckets):
  """Hash buckets of one field's categorical values.

  Args:
    field: the field's index, 0..25.
    value: int64 array (or array-like) of the field's raw values; -1 (missing)
      hashes to a bucket of its own per field.
    num_buckets: number of buckets, >= 1.

  Returns:
    int64 array shaped like `value`, in `[0, num_buckets)`.
  """
  with np.errstate(over="ignore"):
    x = (np.asarray(value, dtype=np.int64).astype(np.uint64) * _GOLDEN64 +
         np.uint64(field + 1) * _MIX64_A)
    x ^= x >> np.uint64(30)
    x *= _MIX64_A
    x ^= x >> np.uint64(27)
    x *= _MIX64_B
    x ^= x >> np.uint64(31)
  return (x % np.uint64(num_buckets)).astype(np.int64)


def category_token(field, value):
  """32-bit tokens of one field's categorical values, like Criteo's.

  A bijection of 32-bit values for each field (xor with a per-field constant,
  then lowbias32), so distinct values of a field get distinct tokens.

  Args:
    field: the field's index, 0..25.
    value: integer array of raw values in `[0, 2^32)`.

  Returns:
    uint32 array shaped like `value`.
  """
  salt = np.uint32((0x9E3779B9 * (field + 1)) & 0xFFFFFFFF)
  with np.errstate(over="ignore"):
    x = np.asarray(value).astype(np.uint32) ^ salt
    x ^= x >> np.uint32(16)
    x *= np.uint32(0x7FEB352D)
    x ^= x >> np.uint32(15)
    x *= np.uint32(0x846CA68B)
    x ^= x >> np.uint32(16)
  return x


def _zipf_values(u, cardinality):
  """Zipf-distributed ranks in `[0, cardinality)` from float32 uniforms `u`.

  Inverse CDF of a continuous power law on `[1, cardinality + 1)`,
  P(rank >= r) ~ r^(1 - s), floored. float32 resolves ranks up to 2^24 and
  lets numpy vectorise exp and log.
  """
  k = np.float32(1.0 / (1.0 - _ZIPF_EXPONENT))
  top = np.float32((cardinality + 1.0) ** (1.0 - _ZIPF_EXPONENT))
  # log, not log1p: numpy vectorises float32 log (3x faster here), and
  # log1p's accuracy near u = 0 only matters for ranks that floor to 0 anyway.
  r = np.exp(np.log(np.float32(1.0) - u * (np.float32(1.0) - top)) * k)
  return np.minimum(r.astype(np.int64) - 1, cardinality - 1)


def _model(seed, num_buckets):
  """The ground-truth weights and the data's shape parameters."""
  rng = np.random.default_rng([seed, _MODEL_STREAM])
  fields = NUM_INTEGER + NUM_CATEGORICAL
  return dict(
      dense_w=rng.normal(0.0, 0.15, NUM_INTEGER),
      bucket_w=rng.normal(0.0, 0.5, num_buckets),
      count_scale=rng.uniform(0.5, 40.0, NUM_INTEGER).astype(np.float32),
      missing_rate=rng.uniform(0.0, 0.4, fields).astype(np.float32),
      num_buckets=num_buckets)


def _log_counts(counts):
  """The dense features: log(1 + count), 0 where missing."""
  return np.log1p(np.maximum(counts, 0).astype(np.float32))


def _features(key, rows, model):
  """One chunk's features and logits (without the intercept).

  Every column (or block of columns) has its own random stream,
  `default_rng(key + [column])`, so the first `k` rows of a chunk do not depend
  on the chunk's length.

  Returns:
    int32 counts `[rows, 13]` (-1 = missing), int32 categorical values
    `[rows, 26]` (-1 = missing), int64 bucket ids `[rows, 26]` and float64
    logits `[rows]`.
  """
  def uniform(column, shape):
    rng = np.random.default_rng(list(key) + [column])
    return rng.random(shape, dtype=np.float32)

  # Counts: 30% zeros, the rest Pareto-tailed (inverse CDF u^(-1/a) - 1; the
  # float32 uniform caps a draw at 2^(24/a) = 65536 times the field's scale).
  u = np.float32(1.0) - uniform(0, (rows, NUM_INTEGER))
  tail = np.exp(np.log(u) * np.float32(-1.0 / _PARETO_SHAPE)) - 1.0
  counts = np.floor(tail * model["count_scale"]).astype(np.int32)
  counts[uniform(1, (rows, NUM_INTEGER)) < 0.3] = 0
  missing = uniform(2, (rows, NUM_INTEGER))
  counts[missing < model["missing_rate"][:NUM_INTEGER]] = -1
  values = np.empty((rows, NUM_CATEGORICAL), np.int32)
  ids = np.empty((rows, NUM_CATEGORICAL), np.int64)
  for f in range(NUM_CATEGORICAL):
    v = _zipf_values(uniform(3 + 2 * f, rows), _CARDINALITIES[f])
    missing = uniform(4 + 2 * f, rows)
    v[missing < model["missing_rate"][NUM_INTEGER + f]] = -1
    values[:, f] = v
    ids[:, f] = hash_category(f, v, model["num_buckets"])
  logits = (_log_counts(counts) @ model["dense_w"] +
            np.take(model["bucket_w"], ids).sum(axis=1))
  return counts, values, ids, logits


def _bias_for_rate(logits, rate):
  """Intercept b with mean(sigmoid(logits + b)) = rate (bisection)."""
  lo, hi = -30.0, 30.0
  for _ in range(50):
    mid = 0.5 * (lo + hi)
    if np.mean(1.0 / (1.0 + np.exp(-(logits + mid)))) < rate:
      lo = mid
    else:
      hi = mid
  return 0.5 * (lo + hi)


def _check_args(num_rows, num_buckets, click_rate):
  if num_rows < 0:
    raise ValueError(f"num_rows must be >= 0, got {num_rows}")
  if num_buckets < 1:
    raise ValueError(f"num_buckets must be >= 1, got {num_buckets}")
  if not 0.0 < click_rate < 1.0:
    raise ValueError(f"click_rate must be in (0, 1), got {click_rate}")


def _true_model(seed, num_buckets, click_rate):
  """The ground-truth model, its intercept calibrated to `click_rate` on a
  fixed sample (so it does not depend on the number of rows generated)."""
  model = _model(seed, num_buckets)
  _, _, _, logits = _features([seed, _CALIBRATION_STREAM], _CALIBRATION_ROWS,
                              model)
  model["bias"] = _bias_for_rate(logits, click_rate)
  return model


def _chunks(num_rows, seed, model):
  """Yields `(start, counts, values, ids, logits, labels)` chunk by chunk."""
  for start in range(0, num_rows, _CHUNK):
    index = start // _CHUNK
    rows = min(_CHUNK, num_rows - start)
    counts, values, ids, logits = _features([seed, _ROWS_STREAM, index], rows,
                                            model)
    logits += model["bias"]
    draw = np.random.default_rng([seed, _LABEL_STREAM, index]).random(rows)
    labels = (draw < 1.0 / (1.0 + np.exp(-logits))).astype(np.float32)
    yield start, counts, values, ids, logits, labels


def iter_criteo_chunks(num_rows, num_buckets=2**20, seed=0, click_rate=0.25):
  """Streams the rows of `generate_criteo_arrays` in chunks of 2^18 rows.

  Concatenated, the chunks are exactly `generate_criteo_arrays`'s per-row
  arrays; memory stays at one chunk (for writing large files).

  Args:
    num_rows: number of rows, >= 0.
    num_buckets: hash buckets of the categorical features.
    seed: the random seed.
    click_rate: target mean of the labels, in (0, 1).

  Yields:
    Dicts with the per-row arrays of `generate_criteo_arrays` (`labels`,
    `counts`, `dense`, `cat_values`, `cat_ids`, `true_logits`,
    `true_probabilities`) for consecutive rows.

  Raises:
    ValueError: if an argument is out of range.
  """
  _check_args(num_rows, num_buckets, click_rate)
  model = _true_model(seed, num_buckets, click_rate)
  for _, counts, values, ids, logits, labels in _chunks(
      num_rows, seed, model):
    yield dict(labels=labels, counts=counts, dense=_log_counts(counts),
               cat_values=values, cat_ids=ids, true_logits=logits,
               true_probabilities=1.0 / (1.0 + np.exp(-logits)))


def generate_criteo_arrays(num_rows, num_buckets=2**20, seed=0,
                           click_rate=0.25):
  """Generates `num_rows` Criteo-shaped rows in memory.

  Per row: 13 counts (30% zeros, the rest with a Pareto tail of shape 1.5
  scaled per field; up to 40% missing per field), their log transform as
  dense features, and 26 categorical values drawn from a Zipf law (exponent
  1.1) over Criteo's per-field cardinalities (up to 40% missing), hashed with
  their field into buckets. The label is Bernoulli(sigmoid(true logit)) with
  true logit = dense . true_dense_weights + the sum of the row's
  true_bucket_weights + true_bias.

  Memory: about 440 bytes per row for the returned arrays (4.4 GB for 10M
  rows) plus one chunk of 2^18 rows while generating. 1M rows take 3-4 s on
  one core.

  Args:
    num_rows: number of rows, >= 0.
    num_buckets: hash buckets of the categorical features (ids in
      `[0, num_buckets)`).
    seed: everything is a function of the seed: the first `n` rows of a
      larger data set with the same seed (and `num_buckets`, `click_rate`)
      equal the data set of `n` rows.
    click_rate: target mean of the labels, in (0, 1). The intercept is
      calibrated on a fixed sample; the realised rate is within about 0.005
      of the target on 50k rows.

  Returns:
    A dict of numpy arrays:
      `labels`: float32 `[n]`, 0 or 1.
      `counts`: int32 `[n, 13]`, the raw counts, -1 = missing.
      `dense`: float32 `[n, 13]`, log(1 + count), 0 where missing.
      `cat_values`: int32 `[n, 26]`, raw categorical values (Zipf ranks),
        -1 = missing.
      `cat_ids`: int64 `[n, 26]`, `hash_category(field, value,
        num_buckets)`; missing values get their field's own bucket.
      `true_logits`, `true_probabilities`: float64 `[n]`.
      `true_dense_weights`: float64 `[13]`; `true_bucket_weights`: float64
        `[num_buckets]`; `true_bias`: the intercept (a float).

  Raises:
    ValueError: if an argument is out of range.
  """
  _check_args(num_rows, num_buckets, click_rate)
  model = _true_model(seed, num_buckets, click_rate)
  out = dict(
      labels=np.empty(num_rows, np.float32),
      counts=np.empty((num_rows, NUM_INTEGER), np.int32),
      cat_values=np.empty((num_rows, NUM_CATEGORICAL), np.int32),
      cat_ids=np.empty((num_rows, NUM_CATEGORICAL), np.int64),
      true_logits=np.empty(num_rows, np.float64))
  for start, counts, values, ids, logits, labels in _chunks(
      num_rows, seed, model):
    rows = slice(start, start + labels.shape[0])
    out["labels"][rows] = labels
    out["counts"][rows] = counts
    out["cat_values"][rows] = values
    out["cat_ids"][rows] = ids
    out["true_logits"][rows] = logits
  out["dense"] = _log_counts(out["counts"])
  out["true_probabilities"] = 1.0 / (1.0 + np.exp(-out["true_logits"]))
  out["true_dense_weights"] = model["dense_w"]
  out["true_bucket_weights"] = model["bucket_w"]
  out["true_bias"] = model["bias"]
  return out


def write_criteo_tsv(path, arrays, chunk_rows=100_000):
  """Writes rows in Criteo's text layout.

  One line per row: the label, the 13 counts I1..I13 in decimal, then the 26
  categorical values C1..C26 as 8 lower-case hex digits (`category_token` of
  the raw value), tab-separated; a missing value is an empty field, as in
  Criteo's files.

  Args:
    path: the file to write (overwritten).
    arrays: a dict with `labels`, `counts` and `cat_values`, as returned by
      `generate_criteo_arrays` or yielded by `iter_criteo_chunks`.
    chunk_rows: rows formatted at a time (bounds the memory used).

  Example:
    >>> data = generate_criteo_arrays(1000)
    >>> write_criteo_tsv("/tmp/train.txt", data)
  """
  labels = np.asarray(arrays["labels"])
  counts = np.asarray(arrays["counts"])
  values = np.asarray(arrays["cat_values"])
  with open(path, "w", encoding="ascii", newline="\n") as f:
    for start in range(0, labels.shape[0], chunk_rows):
      rows = slice(start, start + chunk_rows)
      f.write(tsv_lines(labels[rows], counts[rows], values[rows]))


_HEX_DIGITS = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)


def _hex8(tokens):
  """uint32 array -> array of 8-hex-digit strings, without a Python loop."""
  shifts = np.arange(28, -1, -4, dtype=np.uint32)
  digits = _HEX_DIGITS[(tokens[:, None] >> shifts) & np.uint32(15)]
  return np.ascontiguousarray(digits).view("S8").ravel().astype(str)


def tsv_lines(labels, counts, values):
  """Criteo text lines for one chunk of rows, formatted column by column."""
  if not labels.shape[0]:
    return ""
  columns = [labels.astype(np.int64).astype(str)]
  for j in range(NUM_INTEGER):
    text = counts[:, j].astype(str)
    text[counts[:, j] < 0] = ""
    columns.append(text)
  for f in range(NUM_CATEGORICAL):
    text = _hex8(category_token(f, np.maximum(values[:, f], 0)))
    text[values[:, f] < 0] = ""
    columns.append(text)
  # Lists, not arrays: zip over numpy arrays makes a numpy scalar per field.
  columns = [c.tolist() for c in columns]
  return "\n".join("\t".join(row) for row in zip(*columns)) + "\n"

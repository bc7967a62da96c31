"""Reader of Criteo's click-log text layout, streamed through `tf.data`.

One example per line, 40 tab-separated fields: the label (0 or 1), 13
integer counts I1..I13 and 26 categorical tokens C1..C26 (hex strings, 8
digits in Criteo's files). Any field but the label may be empty (missing).

Per row the reader produces:
  - `labels`: float32, 0 or 1;
  - `dense`: float32 `[13]`, `log1p(max(I_j, 0))`; a missing count is 0
    (the same as a zero count) and negative counts (Criteo has a few -1, -2)
    are clipped to 0;
  - `ids`: int64 `[26]`: `(h(token) + h("C{j}")) mod 2^bucket_bits` for
    field `j`, where `h` is `tf.strings.to_hash_bucket_fast(., 2^62)`
    (TensorFlow's FarmHash fingerprint: the same in every process and on
    every machine). Tokens are hashed as written (Criteo's are lower-case);
    a missing token gets its field's own bucket. All 26 fields share one
    table of `2^bucket_bits` weights.

Lines are parsed in batches by TensorFlow string ops, in parallel
(`num_parallel_calls`), so a file is never held whole in memory.

Example:
  >>> from tf_sdca.data import criteo
  >>> for chunk in criteo.read_criteo(["day_0.txt"], bucket_bits=20):
  ...   chunk["labels"], chunk["dense"], chunk["ids"]
"""
import re

import numpy as np
import tensorflow as tf

from tf_sdca.data import text_files

NUM_FIELDS = 40
NUM_INTEGER = 13
NUM_CATEGORICAL = 26


# A whole well-formed line: one regular expression per line is ~10x cheaper
# than checking the 40 fields one by one.
_LINE_PATTERN = (r"[01](\t-?[0-9]{0,18}){%d}(\t[0-9a-fA-F]{0,16}){%d}"
                 % (NUM_INTEGER, NUM_CATEGORICAL))
_FILLER_LINE = "0" + "\t" * (NUM_FIELDS - 1)
_DEFAULTS = ([tf.constant([], tf.int32)] +
             [tf.constant([0], tf.int64)] * NUM_INTEGER +
             [tf.constant([""])] * NUM_CATEGORICAL)


def parse_criteo_lines(lines, bucket_bits=20):
  """Parses a batch of Criteo text lines (TensorFlow ops, graph-safe).

  Args:
    lines: string `[B]`, without line ends.
    bucket_bits: hash table size is `2^bucket_bits` (1..62).

  Returns:
    dict: `labels` float32 `[B]`, `dense` float32 `[B, 13]`, `ids` int64
    `[B, 26]`, `bad` bool `[B]` (malformed lines, whose other columns are
    zeros; `diagnose_criteo_line` says what is wrong).
  """
  good = tf.strings.regex_full_match(lines, _LINE_PATTERN)
  # decode_csv fails a whole batch on one bad line: give it a filler.
  cols = tf.io.decode_csv(tf.where(good, lines, _FILLER_LINE), _DEFAULTS,
                          field_delim="\t", na_value="")
  counts = tf.stack(cols[1:1 + NUM_INTEGER], axis=1)
  dense = tf.cast(tf.math.log1p(tf.cast(tf.maximum(counts, 0), tf.float64)),
                  tf.float32)
  # Each field's hash is shifted by its own offset: a token in two fields
  # lands in unrelated buckets. Both terms are < 2^62: no overflow.
  offsets = tf.strings.to_hash_bucket_fast(
      [f"C{j + 1}" for j in range(NUM_CATEGORICAL)], 2 ** 62)
  hashed = tf.strings.to_hash_bucket_fast(tf.stack(cols[14:], axis=1),
                                          2 ** 62)
  ids = tf.math.floormod(hashed + offsets, 2 ** bucket_bits)
  return dict(labels=tf.cast(cols[0], tf.float32), dense=dense, ids=ids,
              bad=tf.logical_not(good))


# A LIBSVM line: a numeric label, then index:value pairs.
_LIBSVM_LINE = re.compile(r"\s*[-+]?[0-9.eE+-]+(\s+[0-9]+:\S+)*\s*")


def diagnose_criteo_line(text):
  """What is wrong with a malformed line: (reason, 1-based field or 0)."""
  fields = text.split("\t")
  if len(fields) != NUM_FIELDS:
    reason = f"expected {NUM_FIELDS} tab-separated fields, got {len(fields)}"
    if len(fields) == 1 and _LIBSVM_LINE.fullmatch(text):
      reason += ("; the line looks like LIBSVM ('label index:value ...'): "
                 "read it as LIBSVM (tf-sdca --format libsvm, "
                 "tf_sdca.data.read_libsvm)")
    return reason, 0
  if fields[0] not in ("0", "1"):
    return "the label must be 0 or 1", 1
  for j in range(1, 1 + NUM_INTEGER):
    if fields[j] and not re.fullmatch(r"-?[0-9]{1,18}", fields[j]):
      return f"I{j} is not a decimal integer", j + 1
  for j in range(1 + NUM_INTEGER, NUM_FIELDS):
    if not re.fullmatch(r"[0-9a-fA-F]{0,16}", fields[j]):
      return f"C{j - NUM_INTEGER} is not a hex string", j + 1
  return "malformed", 0


def criteo_dataset(paths, batch_size=65536, bucket_bits=20):
  """A `tf.data.Dataset` of parsed batches of Criteo files.

  Each element is `parse_criteo_lines`' dict plus `line` (int64, 1-based
  line number in its file), `file` (int32, index into `paths`) and `blank`
  (bool: an empty or all-whitespace line, which `read_criteo` skips). Gzip
  files are read as they are. Bad lines
  are kept and flagged in `bad`; `read_criteo` turns them into errors or
  skips them.

  Args:
    paths: list of text files, read in order.
    batch_size: lines per element.
    bucket_bits: `2^bucket_bits` hash buckets.

  Returns:
    The dataset (files read one after the other, batches parsed in
    parallel, order kept).
  """
  if not 1 <= bucket_bits <= 62:
    raise ValueError(f"bucket_bits must be in [1, 62], got {bucket_bits}")

  def one_file(index, path):
    # Batches per file (a batch never spans two files), numbered so that
    # each line knows its 1-based line number.
    batches = tf.data.TextLineDataset(
        path, compression_type=compression[index]).batch(batch_size)
    return batches.enumerate().map(
        lambda number, lines: (index, number, lines))

  # Gzip files are read as they are (by their magic bytes).
  compression = tf.constant(["GZIP" if text_files.is_gzip(p) else ""
                             for p in paths])
  files = tf.data.Dataset.from_tensor_slices(
      (tf.range(len(paths), dtype=tf.int32), tf.constant(list(paths))))
  ds = files.flat_map(one_file)

  def parse(index, number, lines):
    out = parse_criteo_lines(lines, bucket_bits)
    size = tf.shape(lines, out_type=tf.int64)[0]
    out.update(file=tf.fill([size], index),
               line=number * batch_size + 1 + tf.range(size),
               blank=tf.equal(tf.strings.length(tf.strings.strip(lines)), 0))
    return out
  return ds.map(parse, num_parallel_calls=tf.data.AUTOTUNE,
                deterministic=True).prefetch(2)


class BadLines:
  """Counts skipped lines; `first` keeps the first few as messages."""

  def __init__(self):
    self.count = 0
    self.first = []

  def add(self, message):
    self.count += 1
    if len(self.first) < 10:
      self.first.append(message)


def read_criteo(paths, batch_size=65536, bucket_bits=20,
                skip_bad_lines=False, bad_lines=None):
  """Streams numpy chunks of parsed Criteo rows.

  Args:
    paths: text files, read in order.
    batch_size: rows per chunk (before dropping bad lines).
    bucket_bits: `2^bucket_bits` hash buckets.
    skip_bad_lines: skip malformed lines (counted in `bad_lines`) instead of
      raising.
    bad_lines: a `BadLines` to count into (optional).

  Yields:
    dicts of numpy arrays `labels` `[b]`, `dense` `[b, 13]`, `ids`
    `[b, 26]` (int64).

  Raises:
    ValueError: `path:line: reason (field k): 'text'` for the first
      malformed line, unless `skip_bad_lines`.
  """
  paths = [str(p) for p in paths]
  for path in paths:
    if not tf.io.gfile.exists(path):
      raise FileNotFoundError(f"no such file: {path}")
  bad_lines = BadLines() if bad_lines is None else bad_lines
  for batch in criteo_dataset(paths, batch_size, bucket_bits):
    blank = batch["blank"].numpy()  # skipped, like a trailing empty line
    bad = batch["bad"].numpy() & ~blank
    keep = ~bad & ~blank
    for k in np.flatnonzero(bad):
      path = paths[int(batch["file"][k])]
      line = int(batch["line"][k])
      text = _line_text(path, line)
      reason, field = diagnose_criteo_line(text)
      where = f" (field {field})" if field else ""
      message = f"{path}:{line}: {reason}{where}: {text_files.shown(text)}"
      if not skip_bad_lines:
        raise ValueError(message)
      bad_lines.add(message)
    yield dict(labels=batch["labels"].numpy()[keep],
               dense=batch["dense"].numpy()[keep],
               ids=batch["ids"].numpy()[keep])


def _line_text(path, line):
  """The text of a 1-based line, for error messages."""
  with text_files.open_text(path) as f:
    for number, text in enumerate(f, 1):
      if number == line:
        return text.rstrip("\n")
  return ""

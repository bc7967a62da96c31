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

Files are parsed natively (`tf_sdca.data.text_parser`, without TensorFlow)
in blocks of whole lines, on several threads, so a file is never held whole
in memory; `parse_criteo_lines` computes the same features with TensorFlow
string ops (the serving graph's parser). TensorFlow is imported by the
functions that use it, not by this module: `tf-sdca train` reads its files
while TensorFlow is being imported.

Example:
  >>> from tf_sdca.data import criteo
  >>> for chunk in criteo.read_criteo(["day_0.txt"], bucket_bits=20):
  ...   chunk["labels"], chunk["dense"], chunk["ids"]
"""
import os
import re

import numpy as np

from tf_sdca.data import text_files
from tf_sdca.data import text_parser

NUM_FIELDS = 40
NUM_INTEGER = 13
NUM_CATEGORICAL = 26


# A whole well-formed line: one regular expression per line is ~10x cheaper
# than checking the 40 fields one by one.
# (A count is empty or 1-18 digits after an optional minus: a bare '-'
# matched '-?[0-9]{0,18}' and then failed decode_csv's whole batch.)
_LINE_PATTERN = (r"[01](\t(-?[0-9]{1,18})?){%d}(\t[0-9a-fA-F]{0,16}){%d}"
                 % (NUM_INTEGER, NUM_CATEGORICAL))
_FILLER_LINE = "0" + "\t" * (NUM_FIELDS - 1)


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
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  good = tf.strings.regex_full_match(lines, _LINE_PATTERN)
  defaults = ([tf.constant([], tf.int32)] +
              [tf.constant([0], tf.int64)] * NUM_INTEGER +
              [tf.constant([""])] * NUM_CATEGORICAL)
  # decode_csv fails a whole batch on one bad line: give it a filler.
  cols = tf.io.decode_csv(tf.where(good, lines, _FILLER_LINE), defaults,
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


def criteo_dataset(paths, batch_size=65536, bucket_bits=20,
                   skip_bad_lines=False):
  """`read_criteo` as a `tf.data.Dataset` of chunk dicts (`labels`,
  `dense`, `ids`), read in a background thread by `from_generator` and
  prefetched."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  if not 1 <= bucket_bits <= 62:
    raise ValueError(f"bucket_bits must be in [1, 62], got {bucket_bits}")
  paths = text_files.path_list(paths)
  spec = dict(labels=tf.TensorSpec([None], tf.float32),
              dense=tf.TensorSpec([None, NUM_INTEGER], tf.float32),
              ids=tf.TensorSpec([None, NUM_CATEGORICAL], tf.int64))
  return tf.data.Dataset.from_generator(
      lambda: read_criteo(paths, batch_size, bucket_bits,
                          skip_bad_lines), output_signature=spec).prefetch(2)


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

  The text is parsed natively (`tf_sdca.data.text_parser`, on one thread
  per core) in blocks of whole lines; the rows and their features are those
  of `parse_criteo_lines`, in the files' order.

  Args:
    paths: text files, read in order (or one file).
    batch_size: lines per chunk (a chunk never spans two files; its bad and
      blank lines are dropped, so it may hold fewer rows).
    bucket_bits: `2^bucket_bits` hash buckets.
    skip_bad_lines: skip malformed lines (counted in `bad_lines`) instead of
      raising.
    bad_lines: a `BadLines` to count into (optional).

  Yields:
    dicts of numpy arrays `labels` `[b]`, `dense` `[b, 13]`, `ids`
    `[b, 26]` (int64).

  Raises:
    ValueError: `path:line: reason (field k): 'text'` for the first
      malformed line, unless `skip_bad_lines`; `path: ...` for a truncated
      or damaged gzip file.
  """
  for pieces in criteo_chunk_pieces(paths, batch_size, bucket_bits,
                                    skip_bad_lines, bad_lines, np.int64):
    # (Copies: a piece is a view of a whole parsed block.)
    yield {k: (pieces[0][k].copy() if len(pieces) == 1 else
               np.concatenate([p[k] for p in pieces])) for k in pieces[0]}


def criteo_chunk_pieces(paths, batch_size=65536, bucket_bits=20,
                        skip_bad_lines=False, bad_lines=None,
                        ids_type=np.int64):
  """`read_criteo`'s chunks, each as a list of pieces (dicts of `labels`,
  `dense`, `ids`: views of the parsed blocks, possibly empty) that hold its
  rows in order, with `ids` as `ids_type` (np.int32 for bucket_bits <= 31:
  the type the cache stores): what `tf_sdca.data.cache` writes, with no
  copy of the parsed arrays. Arguments and errors as `read_criteo`'s."""
  if not 1 <= bucket_bits <= 62:
    raise ValueError(f"bucket_bits must be in [1, 62], got {bucket_bits}")
  text_files.check_chunk_rows("batch_size", batch_size)
  paths = text_files.path_list(paths)
  for path in paths:
    if not os.path.exists(path):
      raise FileNotFoundError(f"no such file: {path}")
  bad_lines = BadLines() if bad_lines is None else bad_lines

  def parse(block):
    return text_parser.parse_criteo(block, bucket_bits, ids_type=ids_type)

  def message(path, line, raw):
    text = raw.replace(b"\r", b"").decode("utf-8", errors="replace")
    reason, field = diagnose_criteo_line(text)
    where = f" (field {field})" if field else ""
    return f"{path}:{line}: {reason}{where}: {text_files.shown(text)}"

  for path in paths:
    yield from text_files.chunk_pieces_by_line(
        path, parse, ("labels", "dense", "ids"), batch_size,
        lambda line, raw, path=path: message(path, line, raw),
        skip_bad_lines, bad_lines)

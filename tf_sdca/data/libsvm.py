"""Reader of the LIBSVM / SVMlight sparse text format.

One example per line: `label index:value index:value ...`, indices 1-based
and increasing, an optional `# comment` at the end; a ranking file's
`qid:N` token after the label is read and ignored (there is no ranking
loss). Gzip files are read as they are. Labels are read as written (the command line maps them to a
loss's domain, e.g. `y > 0` -> 1 for the classification losses).

The reader parses the files natively (`tf_sdca.data.text_parser`, without
TensorFlow) in blocks of whole lines and streams chunks of rows in CSR form,
so a file is never held whole; `libsvm_dataset` wraps it as a
`tf.data.Dataset` (the only function here that imports TensorFlow).
`_parse_line` words the error of a line the native parser rejects.
"""
import numpy as np

from tf_sdca.data import text_files
from tf_sdca.data import text_parser
from tf_sdca.data.criteo import BadLines


def _finite32(value):
  """Whether a float stays finite as float32 (the type rows are stored
  in)."""
  with np.errstate(over="ignore"):
    return bool(np.isfinite(np.float32(value)))


def _parse_line(text, path, number):
  """(label, indices (0-based), values) of one line, or None if blank."""
  body = text.split("#", 1)[0].split()
  if not body:
    return None
  if text_files.is_binary(text):
    raise ValueError(f"{path}:{number}: {text_files.BINARY}")
  try:
    label = float(body[0])
  except ValueError:
    raise ValueError(f"{path}:{number}: the label {body[0]!r} is not a "
                     "number") from None
  if len(body) > 1 and body[1].startswith("qid:"):
    body = body[:1] + body[2:]
  if not _finite32(label):
    raise ValueError(f"{path}:{number}: the label {body[0]!r} is not finite")
  indices = np.empty(len(body) - 1, np.int64)
  values = np.empty(len(body) - 1, np.float32)
  previous = 0
  for k, token in enumerate(body[1:]):
    index, sep, value = token.partition(":")
    try:
      index = int(index)
      value = float(value)
    except ValueError:
      raise ValueError(f"{path}:{number}: {token!r} (feature {k + 1}) is not "
                       "index:value") from None
    if not sep or index < 1 or index <= previous or not _finite32(value):
      raise ValueError(
          f"{path}:{number}: {token!r} (feature {k + 1}): indices must be "
          f">= 1 and increasing, values finite")
    if index > 2**31:  # stored as int32 (index - 1)
      raise ValueError(f"{path}:{number}: {token!r} (feature {k + 1}): "
                       "indices must be <= 2^31")
    previous = index
    indices[k] = index - 1
    values[k] = value
  return label, indices, values


def _message(path, number, raw):
  """The error of a malformed line (1-based `number`, its bytes `raw`), as
  `_parse_line` words it."""
  text = raw.decode("utf-8", errors="replace") + "\n"
  try:
    _parse_line(text, path, number)
  except ValueError as error:
    return str(error)
  # Python's float() and int() read a few spellings the native parser does
  # not: digits with '_', non-ASCII digits or spaces.
  return (f"{path}:{number}: {text_files.shown(text.rstrip())} is not "
          "'label index:value ...' in plain ASCII numbers (decimal or "
          "scientific, as '-1.5e-3'; not '_' between digits or non-ASCII "
          "digits)")


def _past_limit(out, path, first_line, max_features):
  """ValueError for the first index of a parsed block at or past
  `max_features`, naming the file and line."""
  indices = out["indices"]
  k = int(np.flatnonzero(indices >= max_features)[0])
  row = int(np.searchsorted(np.cumsum(out["lengths"]), k, side="right"))
  line = first_line + int(out["lines"][row]) + 1
  return ValueError(
      f"{path}:{line}: feature index {int(indices[k]) + 1:,} is past the "
      f"{max_features:,} features whose weights fit this machine's memory "
      "(a weight table is as wide as the largest index)")


def _blocks(path):
  """(block, parsed rows) of `path`'s blocks of whole lines, a lone '\\r'
  ending a line too (Python's text files' line ends, as the parser's)."""
  return text_files.parsed_blocks(path, text_parser.parse_libsvm,
                                  cr_ends=True)


def line_of_row(paths, row):
  """`(path, line)` (1-based) of data row `row` (0-based, counted over
  `paths` in order as `read_libsvm` reads them: blank and malformed lines
  are no rows), for errors about a row found after reading; None past the
  last row."""
  for path in text_files.path_list(paths):
    first_line = 0
    for _, out in _blocks(path):
      rows = out["labels"].shape[0]
      if row < rows:
        return path, first_line + int(out["lines"][row]) + 1
      row -= rows
      first_line += int(out["num_lines"])
  return None


def read_libsvm(paths, chunk_rows=65536, skip_bad_lines=False,
                bad_lines=None, max_features=None):
  """Streams CSR chunks of LIBSVM files.

  The text is parsed natively (`tf_sdca.data.text_parser`, on one thread
  per core) in blocks of whole lines; the rows come in the files' order.

  Args:
    paths: files, read in order (or one file).
    chunk_rows: rows per chunk.
    skip_bad_lines: skip malformed lines (counted in `bad_lines`) instead of
      raising.
    bad_lines: a `tf_sdca.data.criteo.BadLines` to count into (optional).
    max_features: refuse an index (1-based) above it, naming the file and
      line (training sizes its weight table by the largest index); None:
      up to 2^31.

  Yields:
    dicts: `labels` float32 `[b]`, `indptr` int64 `[b + 1]`, `indices`
    int64 `[nnz]` (0-based), `values` float32 `[nnz]`.

  Raises:
    ValueError: `path:line: what is wrong` for a malformed line, unless
      `skip_bad_lines`; `path: ...` for a truncated or damaged gzip file.
  """
  text_files.check_chunk_rows("chunk_rows", chunk_rows)
  bad_lines = BadLines() if bad_lines is None else bad_lines
  pending = []

  def emit(final):
    rows = sum(p["labels"].shape[0] for p in pending)
    if rows < chunk_rows and not (final and rows):
      return
    merged = {k: np.concatenate([p[k] for p in pending])
              for k in ("labels", "lengths", "indices", "values")}
    indptr = np.concatenate([[0], np.cumsum(merged["lengths"])])
    start = 0
    while rows - start >= chunk_rows or (final and start < rows):
      end = min(start + chunk_rows, rows)
      lo, hi = indptr[start], indptr[end]
      yield dict(labels=merged["labels"][start:end],
                 indptr=indptr[start:end + 1] - lo,
                 indices=merged["indices"][lo:hi],
                 values=merged["values"][lo:hi])
      start = end
    pending[:] = [dict(labels=merged["labels"][start:],
                       lengths=merged["lengths"][start:],
                       indices=merged["indices"][indptr[start]:],
                       values=merged["values"][indptr[start]:])]

  for path in text_files.path_list(paths):
    first_line = 0
    for block, out in _blocks(path):
      text_files.bad_line_messages(
          out, block, first_line,
          lambda number, raw, path=path: _message(path, number, raw),
          skip_bad_lines, bad_lines)
      if (max_features is not None and out["indices"].size and
          int(out["indices"].max()) >= max_features):
        raise _past_limit(out, path, first_line, max_features)
      first_line += int(out["num_lines"])
      pending.append(out)
      yield from emit(final=False)
  yield from emit(final=True)


def libsvm_dataset(paths, chunk_rows=65536, skip_bad_lines=False):
  """`read_libsvm` as a `tf.data.Dataset` of CSR-chunk dicts (parsed in a
  background thread by `from_generator`; prefetched)."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  paths = text_files.path_list(paths)
  spec = dict(labels=tf.TensorSpec([None], tf.float32),
              indptr=tf.TensorSpec([None], tf.int64),
              indices=tf.TensorSpec([None], tf.int64),
              values=tf.TensorSpec([None], tf.float32))
  return tf.data.Dataset.from_generator(
      lambda: read_libsvm(paths, chunk_rows, skip_bad_lines),
      output_signature=spec).prefetch(2)

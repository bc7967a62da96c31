"""Reader of the LIBSVM / SVMlight sparse text format.

One example per line: `label index:value index:value ...`, indices 1-based
and increasing, an optional `# comment` at the end; a ranking file's
`qid:N` token after the label is read and ignored (there is no ranking
loss). Gzip files are read as they are. Labels are read as written (the command line maps them to a
loss's domain, e.g. `y > 0` -> 1 for the classification losses).

The reader streams chunks of rows in CSR form, so a file is never held
whole; `libsvm_dataset` wraps it as a `tf.data.Dataset`.
"""
import numpy as np
import tensorflow as tf

from tf_sdca.data import text_files


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
  if not np.isfinite(label):
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
    if not sep or index < 1 or index <= previous or not np.isfinite(value):
      raise ValueError(
          f"{path}:{number}: {token!r} (feature {k + 1}): indices must be "
          f">= 1 and increasing, values finite")
    previous = index
    indices[k] = index - 1
    values[k] = value
  return label, indices, values


def read_libsvm(paths, chunk_rows=65536, skip_bad_lines=False,
                bad_lines=None):
  """Streams CSR chunks of LIBSVM files.

  Args:
    paths: files, read in order.
    chunk_rows: rows per chunk.
    skip_bad_lines: skip malformed lines (counted in `bad_lines`) instead of
      raising.
    bad_lines: a `tf_sdca.data.criteo.BadLines` to count into (optional).

  Yields:
    dicts: `labels` float32 `[b]`, `indptr` int64 `[b + 1]`, `indices`
    int64 `[nnz]` (0-based), `values` float32 `[nnz]`.

  Raises:
    ValueError: `path:line: what is wrong` for a malformed line, unless
      `skip_bad_lines`.
  """
  rows = []

  def flush():
    labels = np.array([r[0] for r in rows], np.float32)
    lengths = np.array([len(r[1]) for r in rows], np.int64)
    indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    indices = (np.concatenate([r[1] for r in rows]) if rows else
               np.zeros(0, np.int64))
    values = (np.concatenate([r[2] for r in rows]) if rows else
              np.zeros(0, np.float32))
    rows.clear()
    return dict(labels=labels, indptr=indptr, indices=indices,
                values=values)

  for path in paths:
    with text_files.open_text(path) as f:
      for number, text in enumerate(f, 1):
        try:
          row = _parse_line(text, path, number)
        except ValueError as error:
          if not skip_bad_lines:
            raise
          if bad_lines is not None:
            bad_lines.add(str(error))
          continue
        if row is None:
          continue
        rows.append(row)
        if len(rows) == chunk_rows:
          yield flush()
  if rows:
    yield flush()


def libsvm_dataset(paths, chunk_rows=65536, skip_bad_lines=False):
  """`read_libsvm` as a `tf.data.Dataset` of CSR-chunk dicts (parsed in a
  background thread by `from_generator`; prefetched)."""
  spec = dict(labels=tf.TensorSpec([None], tf.float32),
              indptr=tf.TensorSpec([None], tf.int64),
              indices=tf.TensorSpec([None], tf.int64),
              values=tf.TensorSpec([None], tf.float32))
  return tf.data.Dataset.from_generator(
      lambda: read_libsvm(list(paths), chunk_rows, skip_bad_lines),
      output_signature=spec).prefetch(2)

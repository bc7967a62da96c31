"""The readers tf_sdca had before the native parser
(`tf_sdca.data.text_parser`), kept as the references it must equal: Criteo
lines through TensorFlow's TextLineDataset and `parse_criteo_lines` (the
serving graph's parser), LIBSVM lines through `libsvm._parse_line` in a
Python loop over the file's text lines."""
import gzip

import numpy as np
import tensorflow as tf

from tf_sdca.data import criteo, libsvm, text_files


def read_criteo(paths, batch_size=65536, bucket_bits=20):
  """Chunks of `batch_size` lines per file (bad lines raise, blank ones
  are dropped), as `criteo.read_criteo` yields them."""
  for path in paths:
    compression = "GZIP" if text_files.is_gzip(path) else ""
    for lines in tf.data.TextLineDataset(
        path, compression_type=compression).batch(batch_size):
      out = criteo.parse_criteo_lines(lines, bucket_bits)
      blank = tf.equal(tf.strings.length(tf.strings.strip(lines)), 0).numpy()
      bad = out["bad"].numpy() & ~blank
      if bad.any():
        raise ValueError(f"{path}: a malformed line")
      keep = ~blank
      yield dict(labels=out["labels"].numpy()[keep],
                 dense=out["dense"].numpy()[keep],
                 ids=out["ids"].numpy()[keep])


def read_libsvm(paths, chunk_rows=65536):
  """CSR chunks of `chunk_rows` rows, as `libsvm.read_libsvm` yields
  them (bad lines raise)."""
  rows = []

  def flush():
    lengths = np.array([len(r[1]) for r in rows], np.int64)
    out = dict(labels=np.array([r[0] for r in rows], np.float32),
               indptr=np.concatenate([[0], np.cumsum(lengths)]),
               indices=np.concatenate([r[1] for r in rows]),
               values=np.concatenate([r[2] for r in rows]))
    rows.clear()
    return out

  for path in paths:
    with (gzip.open(path, "rt", encoding="utf-8", errors="replace")
          if text_files.is_gzip(path) else
          open(path, encoding="utf-8", errors="replace")) as f:
      for number, text in enumerate(f, 1):
        row = libsvm._parse_line(text, path, number)  # pylint: disable=protected-access
        if row is not None:
          rows.append(row)
          if len(rows) == chunk_rows:
            yield flush()
  if rows:
    yield flush()


def _line_spans(text):
  """[start, end) of each line of `text` (bytes), its '\\n' left out, as
  the native parser numbers them: a last line without '\\n' counts."""
  spans, start = [], 0
  while start < len(text):
    end = text.find(b"\n", start)
    end = len(text) if end < 0 else end
    spans.append((start, end))
    start = end + 1
  return spans


def _parsed(spans, rows, bad):
  """The line fields of the native parser's output: `lines` (rows'),
  `bad_lines`, `bad_bytes`, `num_lines`."""
  return dict(lines=np.array(rows, np.int64),
              bad_lines=np.array(bad, np.int64),
              bad_bytes=np.array([spans[k] for k in bad],
                                 np.int64).reshape(-1, 2),
              num_lines=len(spans))


def parse_criteo_text(text, bucket_bits, ids_type=np.int64):
  """What `text_parser.parse_criteo` must give for `text`: its lines
  through `parse_criteo_lines` (a trailing '\\r' dropped, as
  TextLineDataset does), blank lines skipped, malformed ones counted."""
  spans = _line_spans(text)
  lines = [text[a:b][:-1] if text[a:b].endswith(b"\r") else text[a:b]
           for a, b in spans]
  out = criteo.parse_criteo_lines(tf.constant(lines, tf.string), bucket_bits)
  blank = tf.equal(tf.strings.length(tf.strings.strip(lines)), 0).numpy()
  bad = out["bad"].numpy() & ~blank
  keep = ~blank & ~bad
  return dict(labels=out["labels"].numpy()[keep],
              dense=out["dense"].numpy()[keep],
              ids=out["ids"].numpy()[keep].astype(ids_type),
              **_parsed(spans, np.flatnonzero(keep), np.flatnonzero(bad)))


def parse_libsvm_text(text):
  """What `text_parser.parse_libsvm` must give for `text`: its lines
  through `libsvm._parse_line`, blank and comment lines skipped, lines it
  refuses counted as bad."""
  spans = _line_spans(text)
  labels, lengths, indices, values, rows, bad = [], [], [], [], [], []
  for k, (a, b) in enumerate(spans):
    line = text[a:b].decode("utf-8", errors="replace")
    try:
      row = libsvm._parse_line(line, "text", k + 1)  # pylint: disable=protected-access
    except ValueError:
      bad.append(k)
      continue
    if row is not None:
      labels.append(row[0])
      lengths.append(len(row[1]))
      indices.append(row[1])
      values.append(row[2])
      rows.append(k)
  return dict(labels=np.array(labels, np.float32),
              lengths=np.array(lengths, np.int64),
              indices=np.concatenate(indices or [np.zeros(0, np.int64)]),
              values=np.concatenate(values or [np.zeros(0, np.float32)]),
              **_parsed(spans, rows, bad))

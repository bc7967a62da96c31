"""The readers tf_sdca had before the native parser (TfSdca>ParseCriteo /
ParseLibsvm), kept as the references the native reader must equal: Criteo
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

"""SavedModels of `tf-sdca train` models that score raw text lines.

`export_lines_scorer(model_dir, out_dir)` writes a SavedModel whose
`serving_default` signature takes a batch of raw lines, exactly as they stand
in the training files (Criteo TSV, with or without the label field; LIBSVM
`label [qid:N] index:value ...`, the label optional, the qid skipped), and
does everything `tf-sdca predict` does in TensorFlow ops: parsing, hashing
(Criteo), the dense columns' scaling and the intercept, the L1 shrink,
`w.x` and the loss's activation. It loads with `tf.saved_model.load` or TensorFlow Serving and
needs no tf_sdca:

  >>> scorer = tf.saved_model.load("exported/")
  >>> out = scorer.signatures["serving_default"](lines=tf.constant([line]))
  >>> out["scores"], out["margins"], out["valid"]

Malformed lines get `valid = False` and NaN scores (a batch is never failed
by one bad line), as do blank ones (empty, or whitespace and for LIBSVM a
comment only), which training's readers and `predict` skip. Every '\\r' of a
Criteo line is dropped, as training's reader drops it; a LIBSVM line is bad
if it holds a '\\r' or '\\n' before its own line end (one "\\n", "\\r\\n" or
"\\r" at its end is dropped), which training's reader reads as a line end.
"""
import numpy as np
import tensorflow as tf

from tf_sdca import losses
from tf_sdca.data import criteo


_NUMBER = r"[-+]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?"


def _libsvm_features(lines, num_features):
  """(indices, values, valid) of LIBSVM lines in TensorFlow ops: ragged
  `[B, None]` 0-based indices and values (indices >= num_features, unseen
  in training, dropped) and a bool `[B]`."""
  # Training's LIBSVM reader ends a line at '\r' as at '\n' (Python's
  # universal newlines, "\r\n" one end): a served line holding either is
  # two lines there, or a refused one ("1 1:1\r2:1"), and is bad here.
  # One line end at the end ("\n", "\r\n" or "\r": a line as
  # `readlines()` gives it, or split at '\n' from a CRLF file) is dropped.
  lines = tf.strings.regex_replace(lines, "(\r\n|\n|\r)$", "")
  one_line = tf.strings.regex_full_match(lines, "[^\r\n]*")
  # Training's readers split on Python's `str.split` whitespace in ASCII,
  # which holds the separators \x1c-\x1f; TensorFlow's split and strip do
  # not (a line "1 1:2\x1c3:4", two features there, was one bad token
  # here): they are spaces here too.
  lines = tf.strings.regex_replace(lines, r"[\x1c-\x1f]", " ")
  body = tf.strings.strip(tf.strings.regex_replace(lines, "#.*$", ""))
  tokens = tf.strings.split(body)
  first = tokens[:, :1].to_tensor(default_value="")[:, 0]
  # The first token is the label unless it is already index:value.
  has_label = tf.logical_not(tf.strings.regex_full_match(first, ".*:.*"))
  position = tf.ragged.range(tokens.row_lengths())
  pairs = tf.ragged.boolean_mask(
      tokens, position >= tf.cast(has_label, tf.int64)[:, None])
  flat = tf.ragged.map_flat_values
  # A `qid:N` token after the label (ranking files) is skipped, as the
  # reader skips it (tf_sdca/data/libsvm.py): not a feature, not an error.
  qid = tf.logical_and(
      tf.ragged.range(pairs.row_lengths()) == 0,
      flat(lambda t: tf.strings.regex_full_match(t, "qid:.*"), pairs))
  pairs = tf.ragged.boolean_mask(pairs, tf.logical_not(qid))
  good = flat(lambda t: tf.strings.regex_full_match(
      t, r"[0-9]{1,18}:" + _NUMBER), pairs)
  pairs = flat(lambda t, g: tf.where(g, t, "0:0"), pairs, good)
  index = flat(lambda t: tf.strings.to_number(
      tf.strings.regex_replace(t, ":.*", ""), tf.int64), pairs) - 1
  value = flat(lambda t: tf.strings.to_number(
      tf.strings.regex_replace(t, "^[^:]*:", ""), tf.float32), pairs)
  number = tf.strings.regex_full_match(first, _NUMBER)
  label_ok = tf.logical_or(tf.logical_not(has_label), tf.logical_and(
      number, tf.math.is_finite(tf.strings.to_number(
          tf.where(tf.logical_and(has_label, number), first, "0"),
          tf.float32))))
  # As the readers require (tf_sdca/data/libsvm.py): indices increasing
  # within a line (a repeated or decreasing one is an error there), the
  # label and values finite in float32 (1e39 is not).
  increasing = tf.reduce_all(index[:, 1:] > index[:, :-1], axis=1)
  valid = tf.logical_and(
      tf.logical_and(tf.logical_and(one_line, label_ok), increasing),
      tf.reduce_all(tf.logical_and(tf.logical_and(good, index >= 0),
                                   tf.math.is_finite(value)), axis=1))
  keep = tf.logical_and(index >= 0, index < num_features)
  return (tf.ragged.boolean_mask(index, keep),
          tf.ragged.boolean_mask(value, keep), valid)


class LinesScorer(tf.Module):
  """The scoring function of one trained model (see the module docstring).

  Args:
    meta: the model's `model.json` dict (format, loss, l1, l2,
      bucket_bits / num_features, scale).
    sparse_weights, dense_weights: the unshrunk float64 weights of its
      `checkpoint.npz`.
  """

  def __init__(self, meta, sparse_weights, dense_weights):
    super().__init__(name="tf_sdca_lines_scorer")
    # A SavedModel is loaded by TensorFlow (Serving), not by tf_sdca: a
    # non-finite weight must be refused here, or every score is NaN there.
    for name, w in (("sparse_weights", sparse_weights),
                    ("dense_weights", dense_weights)):
      w = np.asarray(w, np.float64)
      bad = np.flatnonzero(~np.isfinite(w))
      if bad.size:
        raise ValueError(f"{name}[{bad[0]}] = {w.flat[bad[0]]} is not "
                         "finite; refusing to export the model")
    self._format = meta["format"]
    self._loss = losses.op_name(meta["loss"])
    self._bucket_bits = meta.get("bucket_bits")
    shrink = lambda w: losses.shrink_l1(  # noqa: E731
        np.asarray(w, np.float64), meta["l1"], meta["l2"])
    self.sparse_weights = tf.Variable(shrink(sparse_weights),
                                      trainable=False, name="sparse_weights")
    self.dense_weights = tf.Variable(shrink(dense_weights), trainable=False,
                                     name="dense_weights")
    scale = meta.get("scale") or [1.0] * criteo.NUM_INTEGER
    self.scale = tf.constant(np.asarray(scale, np.float32))

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, "lines")])
  def score(self, lines):
    """{'scores', 'margins', 'valid'} of raw text lines `[B]` (`scores`
    and `margins` `[B, K]` for a multiclass model: class probabilities
    (softmax) or scores, and W^T x)."""
    if self._format == "criteo":
      # Training's reader (the native one, as TextLineDataset before it)
      # drops every '\r' of a line, a CRLF end's and any other: so does
      # serving, so that a line scores as the model read it ("1\t3\t\r5"
      # as "1\t3\t5"; it was a bad line here). A '\n' can only be the
      # line's end, as `readlines()` gives it (such a line was invalid,
      # where the LIBSVM model drops its end).
      lines = tf.strings.regex_replace(lines, "[\r\n]", "")
      # A line that strip empties (its whitespace is C's isspace, as the
      # reader's) is no example to training's reader, which skips it, nor
      # to predict: invalid here. (Of such lines only 38 tabs, a label-less
      # line of empty fields, passed the parse below, scored as one.)
      blank = tf.equal(tf.strings.strip(lines), "")
      # Serving lines may come without the label field: give them one.
      tabs = (tf.strings.length(lines) -
              tf.strings.length(tf.strings.regex_replace(lines, "\t", "")))
      lines = tf.where(tabs == criteo.NUM_FIELDS - 2, "0\t" + lines, lines)
      parsed = criteo.parse_criteo_lines(lines, self._bucket_bits)
      dense = tf.cast(parsed["dense"] / self.scale, tf.float64)
      margins = (tf.reduce_sum(tf.gather(self.sparse_weights, parsed["ids"]),
                               axis=1) +
                 tf.linalg.matvec(dense, self.dense_weights[:-1]) +
                 self.dense_weights[-1])  # the intercept column
      valid = tf.logical_not(tf.logical_or(parsed["bad"], blank))
    else:
      indices, values, valid = _libsvm_features(
          lines, tf.shape(self.sparse_weights, out_type=tf.int64)[0])
      if self.sparse_weights.shape.rank == 2:  # [F, K]: multiclass scores
        margins = (tf.reduce_sum(
            tf.gather(self.sparse_weights, indices) *
            tf.cast(values, tf.float64)[..., None], axis=1) +
                   self.dense_weights[0])
      else:
        margins = (tf.reduce_sum(
            tf.gather(self.sparse_weights, indices) *
            tf.cast(values, tf.float64), axis=1) + self.dense_weights[0])
    scores = losses.activation(self._loss, margins)
    nan = tf.constant(np.nan, tf.float64)
    # A multiclass model's rows are [K]: the row's validity on every class.
    row_valid = valid if margins.shape.rank == 1 else valid[:, None]
    return {"scores": tf.where(row_valid, scores, nan),
            "margins": tf.where(row_valid, margins, nan),
            "valid": valid}


def export_lines_scorer(meta, sparse_weights, dense_weights, out_dir):
  """Writes the SavedModel of a trained model to `out_dir`; returns it."""
  scorer = LinesScorer(meta, sparse_weights, dense_weights)
  tf.saved_model.save(scorer, out_dir,
                      signatures={"serving_default": scorer.score})
  return scorer

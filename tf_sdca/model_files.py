"""A model directory of `tf-sdca train`, one process or across processes:
its metadata (`model.json`, and the copy inside `checkpoint.npz`), the
checks a checkpoint must pass to be read, and the feature layout the
metadata fixes (how cached rows become the trainer's features).

A model directory holds:
  - `model.json`: the format, loss, regularisation, feature layout (hash
    buckets, the dense columns' scale) and the training history;
  - `checkpoint.npz`: the unshrunk float64 weights, the per-example duals
    (float64: 8 bytes per example) and the epochs done; with
    `--average-from T0` the weights and duals are the mean of the iterates
    after epochs T0, T0 + 1, ... (what evaluate, predict and export use),
    and `last_sparse_weights`, `last_dense_weights`, `last_duals` and
    `average_count` keep the last iterate and the mean's size for
    `--resume`;
  - with `--momentum`, `checkpoint.npz` also keeps the point the epoch
    before the last ended at (`momentum_previous_duals`,
    `momentum_previous_table`), `momentum_last_dual` and
    `momentum_restart` (with `--momentum auto` also `momentum_auto_gaps`,
    the gaps its choice of beta reads), so that `--resume` extrapolates as
    an uninterrupted run would;
  - `cache/`: the parsed training data (`tf_sdca.data.cache`);
  - trained across processes, also `cocoa/`: the rounds' state
    (`tf_sdca.distributed.training`).
After every epoch the checkpoint, with a copy of `model.json`'s contents
inside, is replaced in one rename (`files.save_model_atomically`), then
`model.json`; readers trust the checkpoint's copy, so a kill between the
two renames loses nothing. A checkpoint that is truncated, corrupt, or does
not fit its own metadata (duals, epochs, non-finite weights) is an error,
never patched.

Both `tf_sdca.commands` (one process) and `tf_sdca.distributed.command`
read and write model directories through this module only.
"""
import json
import os
import zipfile

import numpy as np

from tf_sdca import losses

# Keys every model's metadata has; a model without one is refused.
_META_KEYS = ("format", "loss", "l1", "l2", "num_features", "rows",
              "epochs_done", "history")

# Keys added to the metadata after the first models were saved, with the
# value that a model saved without the key was trained with: an older
# model directory resumes and scores as it was trained.
DEFAULTS = dict(visit_order="permutation", asdca_batch_size=8,
                asdca_theta=None, hinge_step="projection", momentum=0.0,
                average_from=None, num_classes=None)


def setting(meta, key):
  """`meta[key]`, or the value a model saved before the key existed was
  trained with (`DEFAULTS`)."""
  return meta.get(key, DEFAULTS[key])


def new_meta(fmt, loss, l1, l2, seed, bucket_bits, rows, **more):
  """The metadata of a model about to be trained: its options, the feature
  layout (`num_features`: Criteo's 2^bucket_bits buckets; LIBSVM's is
  set from the data by `features`; `scale` by the first `features` or
  `criteo_row_chunks` call) and no epoch yet; `more` adds keys."""
  return dict(format=fmt, loss=loss, l1=l1, l2=l2, gamma=1.0, seed=seed,
              bucket_bits=bucket_bits,
              num_features=(1 << bucket_bits if fmt == "criteo" else None),
              scale=None, rows=rows, epochs_done=0, history=[], **more)


def criteo_count_maxima(dense_parts):
  """The maxima of the 13 Criteo counts over the cached parts (at least
  1e-6: a count that is always 0 divides by that)."""
  top = np.full(13, 1e-6, np.float32)
  for part in dense_parts:
    if part.shape[0]:
      top = np.maximum(top, part.max(axis=0))
  return top


def criteo_scale(arrays, meta):
  """The divisors of the 13 Criteo counts (their training maxima, kept in
  `meta` so that resumed training and scoring divide alike)."""
  if meta.get("scale") is None:
    meta["scale"] = criteo_count_maxima(arrays["dense"]).tolist()
  return np.asarray(meta["scale"], np.float32)


def criteo_row_chunks(arrays, meta):
  """The cached Criteo chunks as a `RowChunks` for `InMemorySdca.fit`: each
  cache part is scaled and packed in turn and its memory map dropped, so
  the whole arrays are never held beside the packed rows (issue 13's 4 GB
  target for 10M rows). A chunk's `dense` and `ids` are overwritten by the
  next one's: pack each before taking the next (as `fit` does)."""
  from tf_sdca.engine import RowChunks  # pylint: disable=import-outside-toplevel
  scale = criteo_scale(arrays, meta)
  n = sum(p.shape[0] for p in arrays["labels"])

  def chunks():
    # One `dense` and one `ids` buffer for all parts, each part's rows
    # written over the last's (packed, they are no longer read): a new
    # array per part (numpy asks for huge pages from 4 MB on) cost a page
    # fault per 2 MB, ~1 GB of them per 10M rows.
    buffers = {}
    while arrays["labels"]:
      labels = np.asarray(arrays["labels"].pop(0), np.float32)
      counts = arrays["dense"].pop(0)
      part_ids = arrays["ids"].pop(0)
      rows = labels.shape[0]
      if buffers.get("rows", -1) < rows or (
          buffers["ids"].dtype != part_ids.dtype):
        buffers = dict(rows=rows, dense=np.empty((rows, 14), np.float32),
                       ids=np.empty((rows, 26), part_ids.dtype))
        buffers["dense"][:, 13] = 1.0  # the intercept
      dense, ids = buffers["dense"][:rows], buffers["ids"][:rows]
      np.divide(counts, scale, out=dense[:, :13])
      # Increasing ids in a row, as in `features`.
      ids[...] = part_ids
      ids.sort(axis=1)
      yield dict(labels=labels, dense=dense, ids=ids)

  return RowChunks(chunks, num_examples=n, num_ids=26 * n, dense_dim=14,
                   num_features=meta["num_features"])


# The memory of training in `tf-sdca train`, beyond what the process held
# before reading the data (`memory_plan`): copies of the weight table held
# at once (the state, an op's output, the extrapolation's last two points,
# the checkpoint's shrunk copy), float64 duals per row and class (the
# state, the epoch's new ones, the extrapolation's two, a checkpoint's
# copy), the bytes per row of the cache's mapped pages the in-memory path
# holds while packing (the dense counts, read for their maxima, and the
# labels), the runtime's growth once the ops run, and the transient of a
# part beyond its packed records (the block being packed, at most a
# sixteenth of the part's rows, and the part's row indices and duals,
# `row_parts`, `engine.PartedProblem`).
TABLE_COPIES = 8
DUAL_COPIES = 5
CACHE_PAGES_PER_ROW = dict(criteo=56, libsvm=12)
RUNTIME_GROWTH = 32 << 20
PART_OVERHEAD = 1.5


def _packed_bytes(fmt, rows, num_ids):
  """The packed records of `rows` rows with `num_ids` sparse entries in
  all (LIBSVM: values and one dense column, the intercept; each record
  padded to 8 bytes: at most 4 more)."""
  from tf_sdca.engine import packed_row_bytes  # pylint: disable=import-outside-toplevel
  if fmt == "criteo":
    return rows * packed_row_bytes(26, 14)
  return rows * (packed_row_bytes(0, 1) + 4) + 8 * num_ids


def memory_plan(fmt, rows, num_ids, num_features, num_classes, budget):
  """How `tf-sdca train` trains `rows` rows within `budget` bytes (beyond
  what the process holds before reading them).

  Returns:
    dict(parts: None when the packed rows fit (one packing, epochs in
    memory), else the number of parts; part_rows: rows per part (the last
    may have fewer); in_memory: the estimated bytes of training in memory;
    kept: those of the duals, labels and weight tables that any plan holds).

  Raises:
    ValueError: a budget below the duals, labels and weight tables, naming
      the least budget that trains at all.
  """
  k = num_classes or 1
  fixed = TABLE_COPIES * 8 * k * ((num_features or 0) + 14) + RUNTIME_GROWTH
  kept = fixed + rows * (8 * k * DUAL_COPIES + 4)
  packed = _packed_bytes(fmt, rows, num_ids)
  in_memory = kept + packed + rows * CACHE_PAGES_PER_ROW[fmt]
  plan = dict(parts=None, part_rows=rows, in_memory=in_memory, kept=kept)
  if in_memory <= budget:
    return plan
  per_row = PART_OVERHEAD * packed / max(rows, 1)
  part_rows = int((budget - kept) // per_row)
  if part_rows < 1:
    least = kept + int(per_row) + 1
    raise ValueError(
        f"--memory-budget {budget:,} bytes: training {rows:,} rows takes at "
        f"least {least:,} (their duals, labels and the weight tables, and "
        f"the rows in parts of one row); give --memory-budget {least:,} or "
        "more")
  parts = -(-rows // part_rows)
  return dict(plan, parts=parts, part_rows=-(-rows // parts))


def part_blocks(part_rows):
  """(rows per block, blocks per part) of `row_parts`' parts of at most
  `part_rows` rows: blocks of a sixteenth of a part (at least 16 rows, at
  most a part and 65,536 rows), within one cache chunk each, dealt into
  parts afresh every epoch."""
  block_rows = int(min(65536, part_rows, max(16, part_rows // 16)))
  return block_rows, max(1, part_rows // block_rows)


def num_parts(chunk_rows, part_rows):
  """The parts `row_parts` makes of cache chunks of `chunk_rows` rows: a
  chunk's last block is short, so there can be more than
  ceil(rows / part_rows) (the plan said 18 where the rows went in 19)."""
  block_rows, per_part = part_blocks(part_rows)
  blocks = sum(-(-int(rows) // block_rows) for rows in chunk_rows)
  return -(-blocks // per_part)


def _opened(path, rows):
  """A copy of `rows` (a slice) of the cached array at `path`, its memory
  map dropped at once, so that its pages leave the resident set."""
  return np.array(np.load(path, mmap_mode="r")[rows])


def row_parts(fmt, arrays, meta, part_rows):
  """The cached rows as an `engine.RowParts` of at most `part_rows` rows
  per part, for `InMemorySdca.fit(rows=...)`: the rows of
  `criteo_row_chunks` or `features`, in blocks of a sixteenth of a part
  (at least 16 rows), read from the cache files part by part every epoch.
  Consumes `arrays` (the memory maps are dropped; the blocks reopen the files).

  Sets `meta`'s `scale` (Criteo) or `num_features` (LIBSVM) as `features`
  would."""
  from tf_sdca.engine import RowParts  # pylint: disable=import-outside-toplevel
  names = list(arrays)
  paths = {name: [a.filename for a in arrays[name]] for name in names}
  chunk_rows = np.array([a.shape[0] for a in arrays["labels"]], np.int64)
  for name in names:
    arrays[name].clear()  # drop the memory maps (and their resident pages)
  n = int(chunk_rows.sum())
  first = np.concatenate([[0], np.cumsum(chunk_rows)])
  whole = slice(None)
  labels = np.empty(n, np.float32)
  for i, path in enumerate(paths["labels"]):
    labels[first[i]:first[i + 1]] = _opened(path, whole)
  if fmt == "criteo":
    scale = criteo_scale(
        dict(dense=(_opened(path, whole) for path in paths["dense"])), meta)
    ids_per_row = np.full(n, 26, np.int64)  # (only summed per part)
  else:
    ids_per_row = np.concatenate(
        [_opened(path, whole) for path in paths["lengths"]] or
        [np.zeros(0, np.int64)])
    if meta.get("num_features") is None:
      top = max((int(_opened(path, whole).max(initial=-1))
                 for path in paths["indices"]), default=-1)
      meta["num_features"] = max(top + 1, 1)
      limit = max_sparse_features(meta.get("num_classes") or 1)
      if meta["num_features"] > limit:  # (a cache built before the limit)
        raise ValueError(
            f"the feature index {top + 1:,} is past the {limit:,} features "
            "whose weights fit this machine's memory (a weight table is as "
            "wide as the largest index)")
    if meta["loss"] in losses.BINARY:
      labels = (labels > 0).astype(np.float32)
    elif losses.is_multiclass(meta["loss"]):
      labels = class_ids(labels, meta)
  block_rows, blocks_per_part = part_blocks(part_rows)
  starts = []
  for i in range(len(chunk_rows)):
    starts.extend(range(int(first[i]), int(first[i + 1]), block_rows))
  starts = np.array(starts + [n], np.int64)
  chunk_of = np.searchsorted(first, starts[:-1], side="right") - 1
  ends = np.minimum(starts[1:], first[chunk_of + 1])
  sums = np.concatenate([[0], np.cumsum(ids_per_row)])
  block_ids = sums[ends] - sums[starts[:-1]]
  del ids_per_row, sums
  num_features = meta["num_features"]
  offsets_of = {}

  def piece(i, rows):
    """Rows `rows` (a slice within cache chunk i) as `fit`'s arguments."""
    start = first[i]
    if fmt == "criteo":
      dense = np.empty((rows.stop - rows.start, 14), np.float32)
      dense[:, :13] = _opened(paths["dense"][i], rows) / scale
      dense[:, 13] = 1.0  # the intercept
      return dict(labels=labels[start + rows.start:start + rows.stop],
                  dense=dense,
                  ids=np.sort(_opened(paths["ids"][i], rows), axis=1))
    if offsets_of.get("chunk") != i:  # (one chunk's, kept for its blocks)
      offsets_of.update(chunk=i, offsets=np.concatenate(
          [[0], np.cumsum(_opened(paths["lengths"][i], whole))]))
    offsets = offsets_of["offsets"]
    entries = slice(int(offsets[rows.start]), int(offsets[rows.stop]))
    indices = _opened(paths["indices"][i], entries)
    values = _opened(paths["values"][i], entries)
    indptr = offsets[rows.start:rows.stop + 1] - offsets[rows.start]
    keep = indices < num_features  # features unseen in training
    if not keep.all():
      counts = np.repeat(np.arange(rows.stop - rows.start),
                         np.diff(indptr))
      indptr = np.concatenate([[0], np.cumsum(np.bincount(
          counts[keep], minlength=rows.stop - rows.start))])
      indices, values = indices[keep], values[keep]
    return dict(labels=labels[start + rows.start:start + rows.stop],
                dense=np.ones((rows.stop - rows.start, 1), np.float32),
                indptr=indptr.astype(np.int64), indices=indices,
                values=values)

  def blocks(b):
    i = int(chunk_of[b])
    yield piece(i, slice(int(starts[b] - first[i]), int(ends[b] - first[i])))

  return RowParts(blocks, ends - starts[:-1], block_ids,
                  blocks_per_part=blocks_per_part,
                  dense_dim=14 if fmt == "criteo" else 1,
                  num_features=num_features, has_values=fmt != "criteo",
                  labels=labels)


def max_sparse_features(num_classes=1):
  """The most sparse weights (rows of the weight table) a model may have on
  this machine: a weight is 8 bytes (float64) per class, and training holds
  a few copies of the table (the state, an op's output, the shrunk copy a
  checkpoint writes), so one copy gets at most 1/8 of the memory. A wider
  table is a wrong file or a wrong --bucket-bits, not a model to train:
  refused before its memory is asked for (at most 2^31, the ops' ids)."""
  try:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):  # not a POSIX system
    return 2**31
  return int(max(1, min(2**31, memory // (8 * 8 * max(1, num_classes)))))


def features(fmt, arrays, meta, map_labels=True):
  """InMemorySdca feature kwargs from cached (or streamed) arrays.

  Consumes `arrays` (lists of chunk arrays, possibly memory maps): each chunk
  is copied into the result and dropped, so a memory-mapped chunk's pages
  leave the process's resident set as soon as they are copied.
  `map_labels`: map LIBSVM labels to the loss's (`y > 0` -> 1 for the
  binary losses, class ids for a multiclass model, a label none of its
  classes refused); False leaves them as read, for scoring without them
  (`predict`).
  """
  from tf_sdca.data import cache  # pylint: disable=import-outside-toplevel
  if fmt == "criteo":
    parts = arrays["labels"]
    n = sum(p.shape[0] for p in parts)
    scale = criteo_scale(arrays, meta)
    labels = np.empty(n, np.float32)
    dense = np.empty((n, 14), np.float32)
    dense[:, 13] = 1.0  # the intercept
    id_parts = arrays["ids"]
    ids = np.empty((n, 26), id_parts[0].dtype if id_parts else np.int32)
    start = 0
    while parts:
      rows = slice(start, start + parts[0].shape[0])
      labels[rows] = parts.pop(0)
      dense[rows, :13] = arrays["dense"].pop(0) / scale
      ids[rows] = id_parts.pop(0)
      start = rows.stop
    # Increasing ids in every row (the order of a row's fields does not
    # matter to a linear model) let the op take |x_i|^2 without merging
    # repeats; sorting here, in place, spares InMemorySdca a sorted copy.
    ids.sort(axis=1)
    return labels, dict(dense=dense, ids=ids,
                        num_features=meta["num_features"])
  labels = cache.concatenate(arrays["labels"], np.float32)
  n = labels.shape[0]
  ones = np.ones((n, 1), np.float32)
  lengths = cache.concatenate(arrays["lengths"], np.int64)
  indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  indices = cache.concatenate(arrays["indices"])  # int32
  values = cache.concatenate(arrays["values"], np.float32)
  if meta.get("num_features") is None:
    meta["num_features"] = int(indices.max()) + 1 if indices.size else 1
    limit = max_sparse_features(meta.get("num_classes") or 1)
    if meta["num_features"] > limit:  # (a cache built before the limit)
      k = int(np.argmax(indices))
      row = int(np.searchsorted(indptr, k, side="right")) - 1
      raise ValueError(
          f"row {row + 1:,} has the feature index {int(indices[k]) + 1:,}, "
          f"past the {limit:,} features whose weights fit this machine's "
          "memory (a weight table is as wide as the largest index)")
  keep = indices < meta["num_features"]  # features unseen in training
  if not keep.all():
    rows = np.repeat(np.arange(n), lengths)
    indptr = np.concatenate([[0], np.cumsum(np.bincount(
        rows[keep], minlength=n))]).astype(np.int64)
    indices, values = indices[keep], values[keep]
  if map_labels and meta["loss"] in losses.BINARY:
    labels = (labels > 0).astype(np.float32)
  elif map_labels and losses.is_multiclass(meta["loss"]):
    labels = class_ids(labels, meta)
  return labels, dict(dense=ones, indptr=indptr, indices=indices,
                      values=values, num_features=meta["num_features"])


def choose_classes(labels, num_classes):
  """The label value of each class id, from the training labels: their K
  distinct values in increasing order, or (fewer distinct values) the ids
  0 ... K-1 themselves when every label is one.

  Raises:
    ValueError: more than K distinct labels, or fewer that are not ids in
      [0, K).
  """
  values = np.unique(labels)
  if values.size == num_classes:
    return [float(v) for v in values]
  if values.size < num_classes and np.all(
      (values >= 0) & (values < num_classes) & (values == np.round(values))):
    return [float(k) for k in range(num_classes)]
  shown = ", ".join(f"{v:g}" for v in values[:10])
  raise ValueError(
      f"--num-classes {num_classes}: the labels have {values.size} distinct "
      f"values ({shown}{', ...' if values.size > 10 else ''}); give as many "
      f"classes as distinct labels, or labels that are class ids in "
      f"[0, {num_classes})")


def class_ids(labels, meta):
  """float32 class ids of label values, by the model's `classes`.

  `labels` are the rows of one data set in order, from its first: the
  message names a row by its index there. Its callers (`features`,
  `row_parts`) pass every cached row of the data, except `tf-sdca
  evaluate`, which passes a chunk at a time but has refused any label
  that is none of the classes by its `file:line` first
  (`commands._check_labels`, as `train --resume` does before these
  calls; a new model's classes are its labels', across processes every
  worker's): no command reaches this error, which stays as the backstop
  of a caller without that check, who must then pass whole data or know
  that the row counts from its chunk's first.

  Raises:
    ValueError: a label that is none of the model's classes (named with
      its row, counted from 0, in `labels`).
  """
  classes = np.asarray(meta["classes"], np.float64)
  order = np.argsort(classes)
  pos = np.searchsorted(classes[order], labels)
  pos = np.minimum(pos, classes.size - 1)
  bad = np.flatnonzero(classes[order][pos] != labels)
  if bad.size:
    raise ValueError(f"label {labels[bad[0]]:g} (row {bad[0]:,}, counted "
                     f"from 0) is none of "
                     f"the model's classes "
                     f"({', '.join(f'{c:g}' for c in classes)})")
  return order[pos].astype(np.float32)


def has_model(model_dir):
  """Whether `model_dir` holds a model (its checkpoint or its model.json)."""
  return any(os.path.exists(os.path.join(model_dir, name))
             for name in ("checkpoint.npz", "model.json"))


def read_meta(model_dir):
  """The metadata of the model in `model_dir` (the checkpoint's copy, else
  model.json) without its arrays, for checks before the data is read; None
  when there is none or it is unreadable (`load_model` then says why)."""
  ckpt_path = os.path.join(model_dir, "checkpoint.npz")
  try:
    if os.path.exists(ckpt_path):
      with np.load(ckpt_path) as ckpt:
        if "meta_json" in ckpt.files:
          meta = json.loads(str(ckpt["meta_json"]))
          return meta if isinstance(meta, dict) else None
    with open(os.path.join(model_dir, "model.json")) as f:
      meta = json.load(f)
  except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError):
    return None
  return meta if isinstance(meta, dict) else None


def load_model(model_dir):
  """(meta dict, checkpoint arrays) of a model directory, checked against
  each other.

  Raises:
    FileNotFoundError: no model in `model_dir`.
    ValueError: a truncated or corrupt file, missing keys, or arrays that do
      not fit the metadata (a clear error, never patched).
  """
  meta_path = os.path.join(model_dir, "model.json")
  ckpt_path = os.path.join(model_dir, "checkpoint.npz")
  if not has_model(model_dir):
    raise FileNotFoundError(f"no model in {model_dir} (no checkpoint.npz "
                            "or model.json)")
  if not os.path.exists(ckpt_path):
    raise ValueError(f"{model_dir} has model.json but no checkpoint.npz")
  try:
    with np.load(ckpt_path) as ckpt:
      arrays = {k: ckpt[k] for k in ckpt.files}
  except (zipfile.BadZipFile, EOFError, ValueError, OSError, KeyError) as e:
    raise ValueError(f"{ckpt_path} is truncated or corrupt ({e}); train "
                     "again with --overwrite") from None
  try:
    if "meta_json" in arrays:  # written with the arrays: authoritative
      meta = json.loads(str(arrays.pop("meta_json")))
    else:  # a checkpoint from before the metadata moved inside it
      with open(meta_path) as f:
        meta = json.load(f)
  except (OSError, ValueError) as e:
    raise ValueError(f"the model metadata in {model_dir} is unreadable "
                     f"({e}); train again with --overwrite") from None
  missing = [k for k in _META_KEYS if not isinstance(meta, dict) or
             k not in meta]
  if missing:
    raise ValueError(f"the model metadata in {model_dir} lacks "
                     f"{', '.join(missing)}; train again with --overwrite")
  check_checkpoint(model_dir, meta, arrays)
  return meta, arrays


def class_axis(meta):
  """The trailing axis of a multiclass model's weights and duals: (K,);
  () for the other losses."""
  return ((meta["num_classes"],) if losses.is_multiclass(meta["loss"])
          else ())


def check_checkpoint(model_dir, meta, arrays):
  """The arrays fit the metadata: weights present and finite, one dual per
  row (when the checkpoint has duals), the epoch count the same."""
  def fail(what):
    raise ValueError(f"{model_dir}/checkpoint.npz {what}; train again with "
                     "--overwrite")
  for key in ("sparse_weights", "dense_weights"):
    if key not in arrays:
      fail(f"has no {key}")
    bad = np.flatnonzero(~np.isfinite(arrays[key]))
    if bad.size:
      fail(f"has {key}[{bad[0]}] = {arrays[key][bad[0]]}, not finite")
  classes = class_axis(meta)
  if meta["num_features"] is not None and \
      arrays["sparse_weights"].shape != (meta["num_features"],) + classes:
    fail(f"has {arrays['sparse_weights'].shape[0]} sparse weights, the "
         f"metadata {meta['num_features']} features")
  if "duals" in arrays and \
      arrays["duals"].shape != (meta["rows"],) + classes:
    fail(f"has {arrays['duals'].shape[0]} duals for {meta['rows']} rows")
  if "duals" in arrays:
    bad = np.flatnonzero(~np.isfinite(arrays["duals"]))
    if bad.size:
      fail(f"has duals[{bad[0]}] = {arrays['duals'][bad[0]]}, not finite")
  # The metadata's numbers enter every score too: a NaN l1 or scale would
  # make every prediction NaN as surely as a NaN weight.
  for key in ("l1", "l2"):
    if not isinstance(meta[key], (int, float)) or not np.isfinite(meta[key]):
      fail(f"has metadata {key} = {meta[key]!r}, not a finite number")
  if meta.get("scale") is not None:
    scale = np.asarray(meta["scale"], np.float64)
    bad = np.flatnonzero(~(np.isfinite(scale) & (scale > 0)))
    if bad.size:
      fail(f"has metadata scale[{bad[0]}] = {scale[bad[0]]}, not a finite "
           "positive number")
  for key in ("last_sparse_weights", "last_dense_weights", "last_duals"):
    if key in arrays:  # the last iterate of an averaged model
      bad = np.flatnonzero(~np.isfinite(arrays[key]))
      if bad.size:
        fail(f"has {key}[{bad[0]}] = {arrays[key].flat[bad[0]]}, not finite")
  if "epoch" in arrays and int(arrays["epoch"]) != meta["epochs_done"]:
    fail(f"is of epoch {int(arrays['epoch'])}, the metadata of epoch "
         f"{meta['epochs_done']}")


def trained_across_processes(model_dir):
  """Whether `model_dir` holds a model trained by workers (CoCoA+ rounds,
  `tf_sdca.distributed.training`'s `cocoa/state.json`): its duals are
  spread over the workers' files, so one process can go on from its
  weights but not from its duals. (Here, not beside the rounds: the
  command line asks before TensorFlow starts.)"""
  return os.path.exists(os.path.join(model_dir, "cocoa", "state.json"))

"""Fuzzes tf_sdca's ops with random malformed and extreme calls.

    python tools/fuzz_ops.py [--calls 200] [--seed 0] [--ops optimizer,...]
                             [--modes eager,function] [--timeout 30]
                             [--workers N]

Every call starts from a small valid call of one op (a random loss, random
sparse and dense groups, labels in the loss's domain) and changes one or two
of its arguments: a wrong shape, dtype or rank, a negative or out-of-range
id, an id past 2^31 or 2^32, NaN or inf in features, labels, example
weights, weights or duals, a label outside the loss's domain, an absurd
option, or an extreme but valid value (features, labels or example weights
up to 1e38, l2 from 1e-30 to 1e30, 100,000 passes). Each change is either
*invalid* (the call must fail with an error naming the argument) or
*extreme* (the call must train to finite outputs or fail with a clear
error). The calls run, eagerly and inside a `tf.function`, in a child
process that reads call numbers from a pipe, so that a crash or a hang
(past --timeout seconds) is caught, reported with the call, and the child
restarted; each op and mode's calls in one child, --workers children at
once.

Verdicts per call: `ok` (finite outputs), `error` (an error naming the
changed argument), and the failures: `crash`, `hang`, `nonfinite` (an
output with NaN or inf and no error), `accepted` (an invalid call that
returned), `unnamed` (an error that does not name the changed argument),
`unexpected` (an exception other than InvalidArgumentError, ValueError or
TypeError). A call is regenerated from (seed, op, mode, number), so
`--replay OP:MODE:NUMBER` reruns one in this process and prints it.

Exit status 1 when any failure of the kinds in --fail-on occurred.
"""
import argparse
import collections
import concurrent.futures
import json
import os
import queue
import select
import subprocess
import sys
import time

import numpy as np

LOSSES = ("logistic_loss", "squared_loss", "hinge_loss", "smooth_hinge_loss",
          "poisson_loss", "absolute_loss")
BINARY = ("logistic_loss", "hinge_loss", "smooth_hinge_loss")
# Drawn for one call in four: K classes, labels class ids, a block of K
# duals per row.
MULTICLASS = ("softmax_loss", "multiclass_hinge_loss")
OPS = ("optimizer", "pack_rows", "packed_solve", "shrink_l1", "fprint",
       "example_keys", "distinct_ids", "append_rows", "hold_rows")
FAILURES = ("crash", "hang", "nonfinite", "accepted", "unnamed", "unexpected")
HUGE = (1e20, 1e30, 3e38, -3e38)


def _loss(rng):
  """A loss, and K (1 for the binary and regression losses)."""
  if rng.random() < 0.25:
    return str(rng.choice(MULTICLASS)), int(rng.integers(2, 7))
  return str(rng.choice(LOSSES)), 1


def _labels(loss, n, rng, k=1):
  if loss in MULTICLASS:
    return rng.integers(0, k, n).astype(np.float32)
  if loss in BINARY:
    return rng.integers(0, 2, n).astype(np.float32)
  if loss == "poisson_loss":
    return rng.integers(0, 10, n).astype(np.float32)
  return rng.normal(size=n).astype(np.float32)


def _bad_label(loss, rng, k=1):
  if loss in MULTICLASS:
    return float(rng.choice([k, -1.0, 0.5, k + 0.5]))
  if loss in BINARY:
    return float(rng.choice([2.0, -1.5, 0.5]))
  if loss == "poisson_loss":
    return -1.0
  return None  # every finite real is a label


# ------------------------------------------------------------ valid calls
def _valid_optimizer(rng):
  loss, k = _loss(rng)
  shape = (lambda *dims: dims) if k == 1 else (lambda *dims: dims + (k,))
  n = int(rng.integers(1, 7))
  groups = int(rng.integers(0, 3))
  dense_groups = int(rng.integers(0 if groups else 1, 3))
  kw = dict(sparse_example_indices=[], sparse_feature_indices=[],
            sparse_feature_values=[], dense_features=[], sparse_indices=[],
            sparse_weights=[], dense_weights=[])
  for _ in range(groups):
    nnz = int(rng.integers(0, 3 * n + 1))
    vocab = int(rng.integers(1, 8))
    kw["sparse_example_indices"].append(
        np.sort(rng.integers(0, n, nnz)).astype(np.int64))
    kw["sparse_feature_indices"].append(
        rng.integers(0, vocab, nnz).astype(np.int64))
    kw["sparse_feature_values"].append(rng.normal(size=nnz).astype(np.float32))
    kw["sparse_indices"].append(np.arange(vocab, dtype=np.int64))
    kw["sparse_weights"].append(
        rng.normal(size=shape(vocab)).astype(np.float32))
  for _ in range(dense_groups):
    d = int(rng.integers(1, 4))
    kw["dense_features"].append(rng.normal(size=(n, d)).astype(np.float32))
    kw["dense_weights"].append(np.zeros(shape(d), np.float32))
  kw.update(example_weights=np.ones(n, np.float32),
            example_labels=_labels(loss, n, rng, k),
            example_state_data=np.zeros((n, 4 if k == 1 else k + 3),
                                        np.float32),
            loss_type=loss, l1=float(rng.choice([0.0, 0.1])),
            l2=float(rng.choice([0.5, 1.0, 10.0])),
            num_inner_iterations=int(rng.integers(1, 4)))
  if k > 1:
    kw["num_classes"] = k
  return kw


def _valid_rows(rng):
  loss, k = _loss(rng)
  n = int(rng.integers(1, 9))
  vocab = int(rng.integers(1, 10))
  lengths = rng.integers(0, 4, n)
  row_ptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  nnz = int(row_ptr[-1])
  d = int(rng.integers(0, 3))
  kw = dict(row_ptr=row_ptr,
            feature_ids=rng.choice(vocab, nnz).astype(np.int32),
            feature_values=rng.normal(size=nnz).astype(np.float32),
            dense_features=rng.normal(size=(n, d)).astype(np.float32),
            example_weights=np.ones(n, np.float32),
            example_labels=_labels(loss, n, rng, k),
            num_sparse_features=vocab, loss_type=loss)
  if k > 1:
    kw["num_classes"] = k
  return kw


def _valid_hold_rows(rng):
  """`sdca_ops.hold_rows`' batch and held rows as flat arguments (the held
  side's prefixed held_, its sparse rows as row splits), the same random
  sparse groups (with values or not) and dense groups on both sides."""
  groups = int(rng.integers(0, 3))
  values = [bool(rng.integers(2)) for _ in range(groups)]
  widths = [int(rng.integers(1, 4)) for _ in range(int(rng.integers(0, 3)))]
  kw = dict(values=values, call_index=int(rng.integers(0, 100)),
            fraction=float(rng.uniform(0.0, 0.9)))
  for prefix in ("", "held_"):
    n = int(rng.integers(0, 7))
    first = "sparse_row_splits" if prefix else "sparse_example_indices"
    kw.update({prefix + "keys": rng.choice(1000, n, replace=False).astype(
                   np.int64),
               prefix + "example_weights": np.ones(n, np.float32),
               prefix + "example_labels": rng.integers(0, 2, n).astype(
                   np.float32),
               prefix + first: [], prefix + "sparse_feature_indices": [],
               prefix + "sparse_feature_values": [],
               prefix + "dense_features": [
                   rng.normal(size=(n, d)).astype(np.float32)
                   for d in widths]})
    for has in values:
      rows = np.sort(rng.integers(0, max(n, 1),
                                  int(rng.integers(0, 3 * n + 1)) if n else 0))
      kw[prefix + first].append(
          np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=n))])
          .astype(np.int64) if prefix else rows.astype(np.int64))
      kw[prefix + "sparse_feature_indices"].append(
          rng.integers(0, 50, len(rows)).astype(np.int64))
      kw[prefix + "sparse_feature_values"].append(
          rng.normal(size=len(rows) if has else 0).astype(np.float32))
  return kw


# -------------------------------------------------------------- mutations
# Each: (name, kind, argument it changes, fn(kwargs, rng) -> None or False
# when it does not apply). kind: "invalid" must fail naming the argument;
# "extreme" must give finite outputs or fail clearly.
def _first_array(kw, key):
  value = kw.get(key)
  if isinstance(value, list):
    return value[0] if value else None
  return value


def _set_entry(key, value, kind="invalid", dtype=None):
  def mutate(kw, rng):
    array = _first_array(kw, key)
    if array is None or np.size(array) == 0:
      return False
    array = np.array(array, dtype=dtype or array.dtype)
    array.flat[rng.integers(0, array.size)] = value
    if isinstance(kw[key], list):
      kw[key] = [array] + list(kw[key][1:])
    else:
      kw[key] = array
    return None
  return (f"{key}[.]={value!r}", kind, key, mutate)


def _reshape(key, shape_fn):
  def mutate(kw, rng):
    array = _first_array(kw, key)
    if array is None:
      return False
    new = np.zeros(shape_fn(np.shape(array)), np.asarray(array).dtype)
    kw[key] = [new] + list(kw[key][1:]) if isinstance(kw[key], list) else new
    return None
  return (f"{key} reshaped", "invalid", key, mutate)


def _short(value):
  text = repr(value)
  return text if len(text) <= 40 else text[:37] + "..."


def _set_option(key, value, kind="invalid"):
  def mutate(kw, rng):
    kw[key] = value
  return (f"{key}={_short(value)}", kind, key, mutate)


def _bad_label_mutation(kw, rng):
  label = _bad_label(kw["loss_type"], rng, kw.get("num_classes", 1))
  if label is None:
    return False
  kw["example_labels"] = np.array(kw["example_labels"])
  kw["example_labels"][0] = label
  return None


def _wrong_num_classes(kw, rng):
  """K that does not fit the loss: 1 for a multiclass loss, 3 for another;
  in packed_solve, K + 1 for rows packed with K."""
  del rng
  if "rows" in kw:  # packed_solve: the solve's K differs from the rows'
    kw["num_classes"] = kw.get("num_classes", 1) + 1
  else:
    kw["num_classes"] = 1 if kw["loss_type"] in MULTICLASS else 3


_NUM_CLASSES_MUTATIONS = [
    ("num_classes that does not fit the loss", "invalid", "num_classes",
     _wrong_num_classes),
    _set_option("num_classes", 0), _set_option("num_classes", -4),
    _set_option("num_classes", 2**31 + 1),
]


def _with_extreme(key, scale):
  def mutate(kw, rng):
    array = _first_array(kw, key)
    if array is None or np.size(array) == 0:
      return False
    array = np.array(array, np.float32)
    array.flat[rng.integers(0, array.size)] = scale
    kw[key] = [array] + list(kw[key][1:]) if isinstance(kw[key], list) else array
    return None
  return (f"{key}[.]={scale:g}", "extreme", key, mutate)


def _common_data_mutations(ids_key, values_key, dense_key):
  out = [
      _set_entry(ids_key, -1), _set_entry(ids_key, 2**31 + 5, dtype=np.int64),
      _set_entry(ids_key, 2**32 + 1, dtype=np.int64),
      _set_entry(values_key, np.nan), _set_entry(values_key, np.inf),
      _set_entry(dense_key, np.nan), _set_entry(dense_key, -np.inf),
      _set_entry("example_weights", -1.0), _set_entry("example_weights", np.nan),
      _set_entry("example_weights", np.inf),
      _set_entry("example_labels", np.nan), _set_entry("example_labels", np.inf),
      ("example_labels outside the loss's domain", "invalid", "example_labels",
       _bad_label_mutation),
      _reshape("example_labels", lambda s: (s[0] + 1,)),
      _reshape("example_weights", lambda s: (max(s[0] - 1, 0),)),
      _reshape("example_labels", lambda s: (s[0], 1)),
      _reshape(dense_key, lambda s: (s[0] + 1,) + tuple(s[1:])),
      _reshape(dense_key, lambda s: (s[0],)),
      _set_option("example_labels", None), _set_option("example_weights", "x"),
      _set_option("l2", 0.0), _set_option("l2", -1.0),
      _set_option("l2", float("nan")), _set_option("l1", -0.5),
      _set_option("l1", float("inf")), _set_option("loss_type", "no_loss"),
      _set_option("gamma", 0.0),
  ]
  for scale in HUGE:
    out += [_with_extreme(values_key, scale), _with_extreme(dense_key, scale),
            _with_extreme("example_weights", abs(scale)),
            _with_extreme("example_labels", abs(scale))]
  out += [_set_option("l2", 1e-30, "extreme"), _set_option("l2", 1e30, "extreme")]
  return out


MUTATIONS = {
    "optimizer": _common_data_mutations(
        "sparse_feature_indices", "sparse_feature_values", "dense_features") + [
        _set_entry("sparse_example_indices", -1),
        _set_entry("sparse_example_indices", 10**6),
        _set_entry("sparse_indices", -3),
        _set_entry("sparse_weights", np.nan),
        _set_entry("dense_weights", np.inf),
        _set_entry("example_state_data", np.nan),
        _set_entry("example_state_data", np.inf),
        _set_entry("example_state_data", 1e30, "extreme"),
        _reshape("example_state_data", lambda s: (s[0], 3)),
        _reshape("sparse_weights", lambda s: (s[0] + 2,)),
        _reshape("dense_weights", lambda s: (s[0] + 1,)),
        _set_option("num_inner_iterations", 0),
        _set_option("num_inner_iterations", 2**31 - 1, "extreme"),
        _set_option("num_loss_partitions", 0),
        _set_option("num_threads", -2),
        _set_option("visit_order", "random"),
        ("dense_weights=[]", "invalid", "dense_weights",
         lambda kw, rng: False if not kw["dense_weights"] else
         kw.update(dense_weights=[])),
    ] + _NUM_CLASSES_MUTATIONS,
    "pack_rows": _common_data_mutations(
        "feature_ids", "feature_values", "dense_features") + [
        _set_entry("row_ptr", -1), _set_entry("row_ptr", 10**9),
        _reshape("row_ptr", lambda s: (max(s[0] - 1, 0),)),
        _set_option("num_sparse_features", 2**31 + 7),
        _set_option("num_sparse_features", -1),
        _set_option("num_threads", 0),
        _set_option("feature_ids", None),
    ] + _NUM_CLASSES_MUTATIONS,
    "packed_solve": [
        _set_entry("weights", np.nan), _set_entry("weights", np.inf),
        _set_entry("weights", 1e300, "extreme"),
        _set_entry("duals", np.nan),
        _set_entry("duals", 5.0, "extreme"),  # a squared loss's dual
        _reshape("weights", lambda s: (s[0] + 1,)),
        _reshape("duals", lambda s: (s[0] + 1,)),
        _reshape("duals", lambda s: (s[0], 1)),
        _set_option("num_passes", -1),
        # 10^5 passes: a million took 23 s a call (a softmax over 6 rows at
        # l2 = 1e-30), two thirds of the suite's fuzzing; 2^31 - 1, past the
        # op's limit, is the boundary's check.
        _set_option("num_passes", 10**5, "extreme"),
        _set_option("num_passes", 2**31 - 1, "extreme"),
        _set_option("l2", 0.0), _set_option("l2", float("nan")),
        _set_option("l2", 1e-30, "extreme"), _set_option("l2", 1e12, "extreme"),
        _set_option("l1", -1.0), _set_option("visit_order", "sorted"),
        _set_option("num_loss_partitions", 0),
        _set_option("seed", "seven"), _set_option("weights", None),
    ] + _NUM_CLASSES_MUTATIONS,
    "shrink_l1": [
        _set_entry("weights", np.nan), _set_entry("weights", np.inf),
        _set_entry("weights", 3e38, "extreme"),
        _set_option("l1", -1.0), _set_option("l2", 0.0),
        _set_option("l1", float("nan")), _set_option("weights", "w"),
        _set_option("l2", 1e-38, "extreme"),
    ],
    "fprint": [
        _set_option("example_ids", np.array([1, 2])),
        _set_option("example_ids", None),
        _set_option("example_ids", np.array([["a", "b"]])),
        _set_option("example_ids", np.array(["x" * 100000, ""]), "extreme"),
    ],
    # new_packed_rows reserving the data set, append_rows in two pieces.
    "append_rows": _common_data_mutations(
        "feature_ids", "feature_values", "dense_features") + [
        _set_entry("row_ptr", -1), _set_entry("row_ptr", 10**9),
        _set_option("num_examples", -1), _set_option("num_examples", 0),
        _set_option("num_ids", -3), _set_option("num_ids", 10**6),
        _set_option("dense_dim", 7), _set_option("has_values", "maybe"),
        _set_option("num_sparse_features", 2**31 + 7),
    ],
    "example_keys": [
        _set_option("example_ids", np.array(["a", "b", "a"])),
        _set_option("example_ids", None),
        _set_option("example_ids", np.array([["a", "b"]])),
        # Integer ids are keyed as their text; fractional ones are refused.
        _set_option("example_ids", np.array([3.5, 4.0])),
        _set_option("example_ids", np.array([3, 4, 3])),
        _set_option("example_ids", np.array(["x" * 100000, ""]), "extreme"),
    ],
    "hold_rows": [
        _set_entry("sparse_example_indices", -1),
        _set_entry("sparse_example_indices", 10**6),
        _set_entry("held_sparse_row_splits", -1),
        _set_entry("held_sparse_row_splits", 10**6),
        _reshape("held_sparse_row_splits", lambda s: (s[0] + 1,)),
        _reshape("sparse_feature_indices", lambda s: (s[0] + 1,)),
        _reshape("held_sparse_feature_indices", lambda s: (s[0] + 1,)),
        _set_entry("sparse_feature_values", np.nan),
        _set_entry("dense_features", np.nan),
        _set_entry("dense_features", -np.inf),
        _set_entry("example_weights", -1.0),
        _set_entry("example_weights", np.nan),
        _reshape("example_labels", lambda s: (s[0] + 1,)),
        _reshape("held_keys", lambda s: (s[0] + 1,)),
        _reshape("dense_features", lambda s: (s[0] + 1,) + tuple(s[1:])),
        _set_option("fraction", 1.0), _set_option("fraction", -0.5),
        _set_option("fraction", float("nan")),
        _set_option("call_index", "x"), _set_option("keys", None),
        _with_extreme("dense_features", 3e38),
        _with_extreme("sparse_feature_values", 1e30),
        _with_extreme("example_weights", 1e30),
    ],
    "distinct_ids": [
        _set_entry("ids", -1), _set_entry("ids", 2**40, dtype=np.int64),
        _set_option("ids", None), _set_option("ids", np.zeros((2, 2), np.int64)),
        _set_option("ids", np.array([0.5, 1.5])),
        _set_option("num_rows", 0), _set_option("num_rows", -5),
        _set_option("num_rows", 2**40, "extreme"),
        _set_option("ids", np.zeros(0, np.int64), "extreme"),
    ],
}


def generate(op, seed, number):
  """(kwargs, [(mutation name, kind, argument)]) of call `number`."""
  rng = np.random.default_rng([seed, OPS.index(op), number])
  if op == "optimizer":
    kw = _valid_optimizer(rng)
  elif op in ("pack_rows", "packed_solve", "append_rows"):
    kw = _valid_rows(rng)
    if op == "append_rows":
      kw.update(num_examples=len(kw["example_labels"]),
                num_ids=int(kw["row_ptr"][-1]),
                dense_dim=kw["dense_features"].shape[1], has_values=True)
    if op == "packed_solve":
      k = kw.get("num_classes", 1)
      kw = dict(rows=kw, weights=np.zeros((kw["num_sparse_features"] +
                                           kw["dense_features"].shape[1]) * k),
                duals=np.zeros(len(kw["example_labels"]) * k), seed=number,
                loss_type=kw["loss_type"], l1=0.0, l2=1.0,
                num_passes=int(rng.integers(1, 4)))
      if k > 1:
        kw["num_classes"] = k
  elif op == "hold_rows":
    kw = _valid_hold_rows(rng)
  elif op == "shrink_l1":
    kw = dict(weights=rng.normal(size=int(rng.integers(0, 6))).astype(
        np.float32), l1=0.1, l2=1.0)
  elif op in ("fprint", "example_keys"):
    kw = dict(example_ids=np.array([f"id{k}" for k in
                                    range(int(rng.integers(0, 5)))]))
  else:
    rows = int(rng.integers(1, 50))
    kw = dict(ids=rng.integers(0, rows, int(rng.integers(0, 20))).astype(
        np.int64), num_rows=rows)
  applied = []
  candidates = MUTATIONS[op]
  for _ in range(int(rng.integers(1, 3))):
    for _ in range(10):  # find one that applies, to another argument
      name, kind, arg, mutate = candidates[rng.integers(0, len(candidates))]
      if any(arg == a for _, _, a in applied):
        continue
      if mutate(kw, rng) is not False:
        applied.append((name, kind, arg))
        break
  return kw, applied


# ------------------------------------------------------------------ corpus
def corpus(seed, calls):
  """The data of `calls` calls of each of pack_rows, packed_solve and
  append_rows (mutated as the fuzzer mutates them) as text records for
  kernels/tests/corpus_replay_main.cc, which replays them through the
  TensorFlow-free core under the sanitizers. Calls whose data is not
  arrays (a mutation to None or a string) are left out."""
  def line(value, kind):
    flat = np.asarray(value).ravel()
    if kind == "int":
      return " ".join(str(int(v)) for v in flat)
    return " ".join(repr(float(v)) for v in flat)

  records = []
  for op in ("pack_rows", "packed_solve", "append_rows"):
    for number in range(calls):
      kw, _ = generate(op, seed, number)
      data = kw["rows"] if op == "packed_solve" else kw
      fields = [data.get(key) for key in (
          "row_ptr", "feature_ids", "feature_values", "dense_features",
          "example_weights", "example_labels")]
      if not all(isinstance(f, np.ndarray) and f.dtype.kind in "iuf"
                 for f in fields):
        continue
      sizes = (data.get("num_sparse_features"), data.get("num_classes", 1))
      if not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                 for v in sizes):
        continue
      row_ptr, ids, values, dense, weights, labels = fields
      n = max(row_ptr.size - 1, 0)
      d = dense.shape[1] if dense.ndim == 2 else 0
      records.append(
          f"RECORD {data['loss_type']} {int(sizes[1])} {n} {int(sizes[0])} "
          f"{d}\n" + "\n".join([
              line(row_ptr, "int"), line(ids, "int"), line(values, "float"),
              line(dense, "float"), line(weights, "float"),
              line(labels, "float")]) + "\n")
  return "".join(records)


# ----------------------------------------------------------------- running
def _run(op, kw, mode):
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  import tf_sdca  # pylint: disable=import-outside-toplevel
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel

  def call():
    if op == "optimizer":
      return tf_sdca.sdca_optimizer(**kw)
    if op == "pack_rows":
      return [tf_sdca.pack_rows(**kw)]
    if op == "packed_solve":
      rows = tf_sdca.pack_rows(**kw["rows"])
      rest = {k: v for k, v in kw.items() if k != "rows"}
      # The weights and duals; the objective parts are a report (|w|^2 of
      # weights near 1e300 is inf, and says so).
      return tf_sdca.packed_solve(rows, **rest)[:2]
    if op == "shrink_l1":
      return [tf_sdca.sdca_shrink_l1(**kw)]
    if op == "append_rows":
      return [_append_in_two_pieces(tf_sdca, kw)]
    if op == "example_keys":
      return [sdca_ops.example_keys(**kw)]
    if op == "distinct_ids":
      return [sdca_ops.distinct_ids(**kw)]
    if op == "hold_rows":
      return [t for t in tf.nest.flatten(_hold_rows(sdca_ops, kw))
              if t is not None]
    return [tf_sdca.sdca_fprint(**kw)]

  outputs = tf.function(call)() if mode == "function" else call()
  finite = True
  for t in tf.nest.flatten(outputs):
    if t.dtype in (tf.float16, tf.float32, tf.float64):
      finite &= bool(np.all(np.isfinite(t.numpy())))
  return finite


def _hold_rows(sdca_ops, kw):
  """hold_rows on `_valid_hold_rows`' flat arguments: (visit, held)."""
  sides = []
  for prefix in ("", "held_"):
    first = kw[prefix + ("sparse_row_splits" if prefix else
                         "sparse_example_indices")]
    sparse = [(r, i, v if has else (np.zeros(0, np.float32) if prefix
                                    else None))
              for r, i, v, has in zip(first,
                                      kw[prefix + "sparse_feature_indices"],
                                      kw[prefix + "sparse_feature_values"],
                                      kw["values"])]
    sides.append(dict(keys=kw[prefix + "keys"],
                      example_weights=kw[prefix + "example_weights"],
                      example_labels=kw[prefix + "example_labels"],
                      sparse=sparse, dense=kw[prefix + "dense_features"]))
  return sdca_ops.hold_rows(sides[0], sides[1], kw["call_index"],
                            kw["fraction"], seed=1)


def _append_in_two_pieces(tf_sdca, kw):
  """new_packed_rows for the whole data set, then append_rows of its first
  half and its second; returns the rows' objective after one pass."""
  k = kw.get("num_classes", 1)
  rows = tf_sdca.new_packed_rows(
      kw["num_examples"], kw["num_ids"], kw["dense_dim"],
      kw["num_sparse_features"], kw["loss_type"], gamma=kw.get("gamma", 1.0),
      has_values=kw["has_values"], num_classes=k)
  row_ptr = kw["row_ptr"]
  n = len(row_ptr) - 1 if row_ptr is not None and np.ndim(row_ptr) == 1 \
      else 0
  # Arrays whose length is not the row count (a mutation) go whole into one
  # append: split in two, each half could look valid.
  per_row = [kw[key] for key in ("dense_features", "example_weights",
                                 "example_labels")]
  whole = any(isinstance(v, np.ndarray) and v.ndim >= 1 and v.shape[0] != n
              for v in per_row)
  cut = 0 if whole else n // 2
  for lo, hi in ((0, cut), (cut, n)):
    if hi == lo and whole:
      continue
    part = {}
    for key in ("feature_ids", "feature_values"):
      value = kw[key]
      part[key] = value if not isinstance(value, np.ndarray) or \
          value.ndim != 1 or n == 0 else value[row_ptr[lo]:row_ptr[hi]]
    for key in ("dense_features", "example_weights", "example_labels"):
      value = kw[key]
      part[key] = value[lo:hi] if isinstance(value, np.ndarray) and \
          value.ndim >= 1 and value.shape[0] == n else value
    tf_sdca.append_rows(rows, row_ptr=row_ptr[lo:hi + 1] - row_ptr[lo],
                        **part)
  # (A reservation past int32 ids must fail in new_packed_rows, not here.)
  # (Capped: inside a tf.function a table of 2^24 zeros becomes a 128 MB
  # graph constant, and tracing it took longer than the hang timeout.)
  slots = min(kw["num_sparse_features"], 2**16) + kw["dense_dim"]
  return tf_sdca.packed_solve(rows, np.zeros(slots * k),
                              np.zeros(kw["num_examples"] * k), 0,
                              kw["loss_type"], kw.get("l1", 0.0),
                              kw.get("l2", 1.0), gamma=kw.get("gamma", 1.0),
                              num_classes=k)[:2]


def _worker(seed):
  """Reads "op mode number" lines, writes one JSON result line each."""
  os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  for line in sys.stdin:
    op, mode, number = line.split()
    kw, applied = generate(op, seed, int(number))
    result = {}
    try:
      result["finite"] = _run(op, kw, mode)
      result["outcome"] = "ok"
    except (tf.errors.InvalidArgumentError, ValueError, TypeError) as e:
      result["outcome"] = "error"
      # In a tf.function TF prefixes "Graph execution error" or the user
      # code's traceback (whose source lines would name any argument): keep
      # the op's or the wrapper's own message, the last line.
      text = str(e).strip()
      if "in user code:" in text:
        text = text.splitlines()[-1]
      result["message"] = " ".join(text.split())[:2000] or type(e).__name__
    except Exception as e:  # pylint: disable=broad-except
      result["outcome"] = "unexpected"
      result["message"] = f"{type(e).__name__}: " + " ".join(
          str(e).split())[-300:]
    sys.stdout.write(json.dumps(result) + "\n")
    sys.stdout.flush()


def verdict(result, applied):
  if result["outcome"] in ("crash", "hang", "unexpected"):
    return result["outcome"]
  invalid = [a for a in applied if a[1] == "invalid"]
  if result["outcome"] == "ok":
    if not result["finite"]:
      return "nonfinite"
    return "accepted" if invalid else "ok"
  message = result["message"]
  if invalid and not any(arg in message for _, _, arg in applied):
    return "unnamed"
  return "error"


class _Child:
  """The worker process; restarted after a crash or a hang."""

  def __init__(self, seed):
    self.seed = seed
    self.proc = None

  def ask(self, op, mode, number, timeout):
    if self.proc is None:
      self.proc = subprocess.Popen(
          [sys.executable, os.path.abspath(__file__), "--worker",
           "--seed", str(self.seed)], stdin=subprocess.PIPE,
          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    self.proc.stdin.write(f"{op} {mode} {number}\n")
    self.proc.stdin.flush()
    # The first call also waits for TensorFlow to import.
    deadline = time.monotonic() + timeout
    while True:
      left = deadline - time.monotonic()
      ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
      if ready:
        line = self.proc.stdout.readline()
        if line:
          return json.loads(line)
        code = self.proc.wait()
        self.proc = None
        return {"outcome": "crash", "message": f"exit status {code}"}
      if left <= 0:
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        return {"outcome": "hang", "message": f"no answer in {timeout} s"}

  def close(self):
    if self.proc is not None:
      self.proc.stdin.close()
      self.proc.wait()
      self.proc = None


def _fuzz_pair(child, op, mode, calls, seed, timeout):
  """One op and mode's calls in `child`: (Counter of verdicts, failures,
  the lines to print)."""
  counter, failures, lines = collections.Counter(), [], []
  for number in range(calls):
    _, applied = generate(op, seed, number)
    first = child.proc is None  # (the call then waits for the import too)
    result = child.ask(op, mode, number, timeout + (120 if first else 0))
    v = verdict(result, applied)
    counter[v] += 1
    if v in FAILURES:
      failures.append((op, mode, number, v, [name for name, _, _ in applied],
                       result.get("message", "")))
      lines.append(f"  {v}: {op}:{mode}:{number} {[a[0] for a in applied]} "
                   f"-> {result.get('message', 'outputs returned')}")
  lines.append(f"{op:<13} {mode:<9} " + " ".join(
      f"{k} {counter[k]}" for k in ("ok", "error") + FAILURES))
  return counter, failures, lines


def fuzz(ops, modes, calls, seed, timeout, out=sys.stdout, workers=None):
  """Runs the calls; returns {(op, mode): Counter of verdicts} and the list
  of failures (op, mode, number, verdict, mutations, message). The (op,
  mode) pairs run on `workers` child processes at once (default: one per
  core, at most 2), each pair's calls in order in one child; a call's
  verdict depends on its (seed, op, mode, number) alone."""
  pairs = [(op, mode) for op in ops for mode in modes]
  if workers is None:
    workers = min(2, os.cpu_count() or 1)
  workers = max(1, min(workers, len(pairs)))
  children = queue.Queue()
  for _ in range(workers):
    children.put(_Child(seed))

  def run(pair):
    child = children.get()
    try:
      return _fuzz_pair(child, *pair, calls, seed, timeout)
    finally:
      children.put(child)

  counts, failures = {}, []
  try:
    with concurrent.futures.ThreadPoolExecutor(workers) as pool:
      for pair, (counter, failed, lines) in zip(pairs, pool.map(run, pairs)):
        counts[pair] = counter
        failures.extend(failed)
        print("\n".join(lines), file=out, flush=True)
  finally:
    while not children.empty():
      children.get().close()
  return counts, failures


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--calls", type=int, default=200, help="per op and mode")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--ops", default=",".join(OPS))
  parser.add_argument("--modes", default="eager,function")
  parser.add_argument("--timeout", type=float, default=30.0)
  parser.add_argument("--workers", type=int, default=None,
                      help="child processes at once (default: one per core, "
                      "at most 2)")
  parser.add_argument("--fail-on", default=",".join(FAILURES))
  parser.add_argument("--replay", help="OP:MODE:NUMBER, run in this process")
  parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
  args = parser.parse_args(argv)
  if args.worker:
    return _worker(args.seed)
  if args.replay:
    op, mode, number = args.replay.split(":")
    kw, applied = generate(op, args.seed, int(number))
    print("mutations:", applied)
    print("arguments:", {k: (v if not isinstance(v, np.ndarray) else
                             v.tolist()) for k, v in kw.items()})
    print("finite outputs:", _run(op, kw, mode))
    return 0
  counts, failures = fuzz(args.ops.split(","), args.modes.split(","),
                          args.calls, args.seed, args.timeout,
                          workers=args.workers)
  total = collections.Counter()
  for counter in counts.values():
    total.update(counter)
  print("total " + " ".join(f"{k} {total[k]}" for k in ("ok", "error") +
                            FAILURES))
  fail_on = set(args.fail_on.split(",")) if args.fail_on else set()
  return 1 if any(f[3] in fail_on for f in failures) else 0


if __name__ == "__main__":
  sys.exit(main())

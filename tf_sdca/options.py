"""Every training option of tf_sdca, declared once, and the one validator.

Each option says its name, default, domain, the losses it applies to and
the data modes it runs in:

- `IN_MEMORY`: the whole data set resident, one engine call per epoch
  (`InMemorySdca`, `keras.LinearModel.fit` on arrays, `tf-sdca train`);
- `STREAMED`: batches as they come, duals kept by example id (`SdcaModel`,
  `SDCAOptimizer`, the estimators, `keras.LinearModel.fit` on a dataset);
- `PROCESSES`: CoCoA+ rounds across processes (`tf-sdca train` under
  `TF_CONFIG` or `--local-cluster`, `tf_sdca.distributed`).

`validate(values, mode, door)` checks the values a door was given: each
value against its domain, the combinations (an option of one loss with
another loss, momentum with ASDCA, ...), and whether each option that was
set runs in `mode`, naming the doors that run it where it does not. Every
door's constructor calls it, so a bad value gets the same message whatever
the door, spelt the door's way (`l2` for Python keywords, `options['l2']`
for `SdcaModel`'s options dict, `--l2` for the command line).

Adding an option: declare it in `OPTIONS` (and a rule in `_combinations`
if it interacts with another), then implement it in the engine.
`tf_sdca.ops.sdca_ops` keeps only the checks of op attributes.
"""
import argparse
import collections
import math
import numbers
import os
import re

import numpy as np

from tf_sdca import losses

IN_MEMORY = "in memory"
STREAMED = "streamed"
PROCESSES = "across processes"
MODES = (IN_MEMORY, STREAMED, PROCESSES)

# The orders of the coordinate step (kernels/core/visit_order.h). 'asdca'
# is not an order of the step but the accelerated mini-batch solver, chosen
# by the same option.
VISIT_ORDERS = ("permutation", "uniform", "cyclic", "adaptive", "shrinking")
MULTICLASS_VISIT_ORDERS = ("permutation", "uniform", "cyclic")
MULTICLASS_HINGE_VISIT_ORDERS = MULTICLASS_VISIT_ORDERS + ("shrinking",)
HINGE_STEPS = ("projection", "steepest_ascent", "near_max_gain")
# The in-memory default order of the losses whose best order is not
# 'permutation' (visit_order None, `visit_order_for`), measured in passes to
# a relative duality gap of 1e-6 (bench/bench_defaults.py, g3doc/defaults.md)
# and time to LIBLINEAR's objective (bench/bench_hinge.py, g3doc/losses.md):
# - the hinge losses, 'shrinking': their duals rest at the bounds of a box
#   (a simplex) that LIBLINEAR's shrinking leaves out. 'permutation' ->
#   'shrinking': heart_scale hinge 473 -> 41-62 epochs, digits even / odd
#   473 -> 41, digits Crammer-Singer not in 710 -> 315, wine Crammer-Singer
#   210 -> 27;
# - the smooth hinge, 'shrinking' (rows past the margin rest at 0): passes
#   to 1e-6 at the weak l2 iris 178 -> 100, heart_scale 146 -> 72, fair 306
#   -> 184, spector 104 -> 76, Criteo-shaped 116 -> 66, and 0.7-0.8x at the
#   moderate l2; 'adaptive' won on anes96 and weak breast_cancer;
# - the absolute deviation, 'adaptive' (non-smooth, its duals at +-1 on all
#   but a few rows): diabetes 21 -> 4 and 184 -> 17 passes, star98 278 ->
#   52, fair not in 1,000 -> 606 (only linnerud, 20 rows, 1-6 passes either
#   way, was not faster);
# - Poisson, 'adaptive': its curvature exp(z) near the optimum is the
#   count, so rows of large counts hold the slow directions whatever their
#   norms (digits' counts, |x_i|^2 spread 0.15: 61 -> 35 passes, and at
#   l2/30 not in 1,000 -> 849; RAND HIE at l2 = 1000 plain 594 -> 23,
#   g3doc/trainer.md; two statsmodels count sets, strikes 189 -> 135,
#   cpunish 34 -> 30).
# Streamed batches keep 'permutation' (a batch's rows are visited once per
# call: nothing to shrink or to weigh across calls).
# The orders that run over rows packed part by part (`engine.RowParts`:
# `tf-sdca train` past its --memory-budget), without state across parts.
PARTED_VISIT_ORDERS = ("permutation", "uniform", "cyclic")
IN_MEMORY_DEFAULT_ORDERS = {"hinge_loss": "shrinking",
                            "multiclass_hinge_loss": "shrinking",
                            "smooth_hinge_loss": "shrinking",
                            "absolute_loss": "adaptive",
                            "poisson_loss": "adaptive"}
# In memory, rows whose squared norms |x_i|^2 spread widely take
# 'adaptive' (it draws rows by their dual residual, so the few rows with
# large norms that hold the slow directions are visited more) in place of
# the loss's default order, for the losses measured: where the coefficient
# of variation of |x_i|^2 (std / mean, `engine.row_norms`' spread) is above
# ADAPTIVE_NORM_SPREAD. Measured (bench/bench_defaults.py, passes to a
# relative gap of 1e-6, default -> 'adaptive'): anes96 (spread 5.8) logistic
# 17 -> 7 and 482 -> 122 at the weak l2, smooth hinge 34 -> 10, hinge 13
# -> 6 and 466 -> 99; star98 (2.2) squared 37 -> 18 and 967 -> 270. Below
# 2 the hinge keeps 'shrinking' (standardised breast_cancer, spread 1.3,
# 13 against 24 in 'adaptive' and 33 against 82 at l2/30; standardised
# digits < 5, 1.7, 20 against 28 and 254 against 598).
ADAPTIVE_NORM_SPREAD = 2.0
NORM_SPREAD_LOSSES = ("logistic_loss", "squared_loss", "smooth_hinge_loss",
                      "hinge_loss")
# And where the l2 is weak for the rows: the smooth losses take 'adaptive'
# where SDCA's bound on its passes per factor e, max_i |x_i|^2 L / l2 (L
# the loss's largest second derivative: 1/4 logistic, 1 squared, 1/gamma
# smooth hinge; `engine.row_norms`' largest), is above
# ADAPTIVE_PASSES_BOUND: drawing by the residual beats a permutation's
# equal visits once the rows' scales set the rate, while at a strong l2
# its draws with replacement cost ~1.5x (squared at l2 = mean |x_i|^2,
# bound 1-4: ~20 passes against 11-15). Measured, passes to a relative gap
# of 1e-6, the loss's order -> 'adaptive', both with momentum 'auto'
# (bench/bench_defaults.py's sets at l2 = mean |x_i|^2 and 1/30 of it, and
# seven statsmodels sets in natural units; the bound in brackets):
# - logistic (above 25): breast_cancer 42 -> 25 (110), modechoice 72 -> 29
#   (46), standardised digits < 5 52 -> 23 (283); below, within 1-2 passes
#   either way (the Criteo-shaped rows at 19: 24 against 25, where a sparse
#   adaptive pass costs ~2x);
# - squared (above 25): linnerud 173 -> 110 (116), fair 146 -> 101 (66),
#   ccard 262 -> 108 (224), within 4% at 33-39 (diabetes, stackloss,
#   statecrime); below, a permutation (linnerud 13 against 19 at 3.9);
# - smooth hinge, against 'shrinking' (above 100): breast_cancer 116 -> 75
#   (442), modechoice 148 -> 115 (184), standardised digits < 5 134 -> 84
#   (1,131); 'shrinking' up to 77 (iris 100 against 130 at 58, heart_scale
#   72 against 101 at 39, statecrime 70 against 108 at 38).
# The hinge has no such bound (no second derivative): on the same |x_i|^2
# and l2 raw breast_cancer took 11 passes in 'adaptive' against 17 in
# 'shrinking', standardised 24 against 13.
ADAPTIVE_PASSES_BOUND = {"logistic_loss": 25.0, "squared_loss": 25.0,
                         "smooth_hinge_loss": 100.0}
# The largest second derivative of those losses (1/gamma for the smooth
# hinge).
_CURVATURE = {"logistic_loss": 0.25, "squared_loss": 1.0}
# The losses accelerated mini-batch SDCA converges for: the smooth ones
# (bounded loss'').
ASDCA_LOSSES = ("logistic_loss", "squared_loss", "smooth_hinge_loss")
# Rows per ASDCA step when none is given: the reference's 8 (the paper's
# theta shrinks like 1/sqrt(m) once m > 1 / k; m = 64 took 1.7-3x the
# epochs of m = 8, g3doc/benchmarks.md).
ASDCA_BATCH_SIZE = 8
# The losses the exact block step of an in-memory fit applies to (Newton's
# method on the primal needs phi'': tf_sdca/second_order.py).
SECOND_ORDER_LOSSES = ("logistic_loss", "squared_loss", "poisson_loss",
                       "softmax_loss")
SECOND_ORDERS = ("auto", "on", "off")

# The doors that run what only one mode runs, for "does not apply" messages.
IN_MEMORY_DOORS = ("InMemorySdca, keras.LinearModel's in-memory fit or "
                   "tf-sdca train")
STREAMED_DOORS = ("SdcaModel, SDCAOptimizer, the estimators or a "
                  "keras.LinearModel fit on a tf.data.Dataset")


def integer_at_least(low):
  """A check: whether a value is an integer (not a bool) >= `low`."""
  return lambda v: (not isinstance(v, bool) and
                    isinstance(v, numbers.Integral) and v >= low)


def whole_count(value, argument):
  """`value` (a Python or numpy integer, or a 0-d integer array: a count a
  saved state holds) as an int, or a ValueError naming `argument` and the
  value where it is not a whole number >= 0 (a float, a string, an array,
  a negative number)."""
  array = np.asarray(value)
  if array.shape or array.dtype.kind not in "iu" or array < 0:
    raise ValueError(f"{argument} must be a whole number >= 0, got "
                     f"{value!r}")
  return int(array)


# The ops hold l1, l2 and gamma as float32 attributes: a larger value would
# become inf there.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _real(low, strict):
  def ok(v):
    return (not isinstance(v, bool) and isinstance(v, numbers.Real) and
            math.isfinite(v) and abs(v) <= _FLOAT32_MAX and
            (v > low if strict else v >= low))
  return ok


def _fraction(v):
  return (not isinstance(v, bool) and isinstance(v, numbers.Real) and
          0.0 <= v < 1.0)


Option = collections.namedtuple(
    "Option", ["name", "default", "expected", "valid", "modes", "losses",
               "sdca_key", "flag", "help"])
Option.__doc__ = """One training option.

  name: its keyword in InMemorySdca, keras.LinearModel and the validator.
  default: the value a door uses when none is given.
  expected: the domain, as messages say it ("a finite number > 0").
  valid: value -> bool, the domain.
  modes: the data modes it runs in (`MODES`).
  losses: the op names of the losses it applies to (None: every loss).
  sdca_key: its key in SdcaModel's options dict (None: not an option there).
  flag: its `tf-sdca train` flag (None: none).
  help: one line for docs and `--help`.
"""

_ALL = frozenset(MODES)
# The options whose values are integers (the others: numbers or names).
_INTEGER_OPTIONS = ("seed", "num_threads", "num_loss_partitions",
                    "asdca_batch_size", "average_from")
_AT_LEAST_0 = "a finite number >= 0 (float32: <= 3.4e38)"
_ABOVE_0 = "a finite number > 0 (float32: <= 3.4e38)"
OPTIONS = collections.OrderedDict((o.name, o) for o in (
    Option("l1", 0.0, _AT_LEAST_0, _real(0, False),
           _ALL, None,
           "symmetric_l1_regularization", "--l1",
           "L1 regularisation strength"),
    Option("l2", 1.0, _ABOVE_0, _real(0, True),
           _ALL, None,
           "symmetric_l2_regularization", "--l2",
           "L2 regularisation strength"),
    Option("gamma", 1.0, _ABOVE_0, _real(0, True),
           _ALL,
           ("smooth_hinge_loss",), "gamma", None,
           "the smooth hinge's smoothing"),
    # >= 0: each epoch's order is numpy's default_rng([seed, epoch]).
    Option("seed", 0, "an integer >= 0", integer_at_least(0), _ALL, None,
           "seed", "--seed", "seed of the visiting orders"),
    # Across processes each worker solves its shard on one thread, in a
    # fresh permutation every round (`distributed.shard`): the two were
    # accepted there and ignored.
    Option("num_threads", 0, "an integer >= 0", integer_at_least(0),
           frozenset((IN_MEMORY, STREAMED)), None, "num_threads", "--threads",
           "threads solving each epoch"),
    Option("num_loss_partitions", 1, "an integer >= 1", integer_at_least(1),
           frozenset((STREAMED,)), None, "num_loss_partitions", None,
           "CoCoA+'s sigma for a stream split over workers"),
    Option("visit_order", None,
           f"None (the loss's default) or one of "
           f"{VISIT_ORDERS + ('asdca',)}",
           lambda v: v is None or v in VISIT_ORDERS + ("asdca",),
           frozenset((IN_MEMORY, STREAMED)), None, "visit_order", "--visit-order",
           "the order of the coordinate steps, or 'asdca' (None: "
           "'shrinking' for the hinge losses and 'adaptive' for the "
           "absolute deviation and Poisson in memory, and for rows whose "
           "norms spread widely or a weak l2 for them, else "
           "'permutation')"),
    Option("asdca_batch_size", ASDCA_BATCH_SIZE, "an integer >= 1",
           integer_at_least(1), frozenset((IN_MEMORY,)), ASDCA_LOSSES, None,
           "--asdca-batch-size", "rows per ASDCA step"),
    Option("asdca_theta", None, "None (the paper's) or in (0, 1]",
           lambda v: v is None or (
               not isinstance(v, bool) and isinstance(v, numbers.Real) and
               0.0 < v <= 1.0), frozenset((IN_MEMORY,)), ASDCA_LOSSES, None,
           "--asdca-theta", "ASDCA's theta"),
    Option("hinge_step", "projection", f"one of {HINGE_STEPS}",
           lambda v: v in HINGE_STEPS, _ALL, ("multiclass_hinge_loss",),
           "hinge_step", "--hinge-step", "the multiclass hinge's block step"),
    Option("momentum", None, "a number in [0, 1) or 'auto'",
           lambda v: v is None or v == "auto" or _fraction(v),
           frozenset((IN_MEMORY,)), None, None, "--momentum",
           "extrapolation of whole epochs (None: 'auto' where it applies)"),
    # 'auto': where SDCA's bound needs > 1,000 passes per factor e (weak l2,
    # features in natural units) and d K <= 1024, l1 = 0; streamed: per
    # batch, dense features only, one dual a row (tf_sdca/second_order.py).
    Option("second_order", "auto", f"one of {SECOND_ORDERS}",
           lambda v: v in SECOND_ORDERS, frozenset((IN_MEMORY, STREAMED)),
           SECOND_ORDER_LOSSES, "second_order", None,
           "the exact block step: Newton on the primal after each epoch "
           "(in memory) or batch (streamed)"),
    Option("average_from", None, "None or an epoch count >= 0",
           lambda v: v is None or integer_at_least(0)(v),
           frozenset((IN_MEMORY, STREAMED)), None, "average_from",
           "--average-from", "output averaging from this epoch on"),
    Option("tol", None, "None or a number >= 0",
           lambda v: v is None or (not isinstance(v, bool) and
                                   isinstance(v, numbers.Real) and v >= 0),
           _ALL, None, None, "--tol",
           "stop once the relative duality gap is below this"),
    # 'auto' (held rows sized to the stream's batches): fixed consecutive
    # batches otherwise need 2-2.5x the passes of one batch, far more with
    # many batches (g3doc/sdca_model.md, 'Streaming orders'). 0 is
    # TensorFlow's semantics: a minimize call trains exactly its batch.
    Option("carry_over", "auto", "'auto' or a number in [0, 1)",
           lambda v: v == "auto" or _fraction(v), frozenset((STREAMED,)),
           None, "carry_over", None,
           "the share of a streamed batch held for the next call"),
))


class Door(collections.namedtuple("Door", ["name", "style", "unit"])):
  """Who validates: `name` for messages, `style` how it spells an option
  ('keyword', 'sdca_options' or 'flag'), `unit` what `average_from`
  counts there."""

  def label(self, name):
    option = OPTIONS.get(name)
    if self.style == "sdca_options":
      return f"options[{(option.sdca_key if option else name)!r}]"
    if self.style == "flag" and option is not None and option.flag:
      return option.flag
    return name

  def loss(self, loss):
    """Loss `loss` (either spelling) as the door's messages name it: the
    op's name ('logistic_loss', tf.estimator's `loss_type`) for SdcaModel's
    options, the short name ('logistic') its `loss=` / --loss takes
    elsewhere."""
    return (losses.op_name(loss) if self.style == "sdca_options" else
            losses.short_name(loss))


IN_MEMORY_SDCA = Door("InMemorySdca", "keyword", "epoch")
KERAS = Door("keras.LinearModel", "keyword", "epoch")
SDCA_MODEL = Door("SdcaModel", "sdca_options", "minimize call")
COMMAND_LINE = Door("tf-sdca train", "flag", "epoch")


def _fail(door, name, expected, value):
  raise ValueError(f"{door.label(name)} must be {expected}, got {value!r}")


def _expected(name, door):
  """Option `name`'s domain in words, as `door` counts."""
  if name == "average_from" and door.unit != "epoch":
    return f"None or a count of {door.unit}s >= 0"
  return OPTIONS[name].expected


def check(name, value, door=IN_MEMORY_SDCA):
  """`value` of option `name` against its domain, normalised (ints as int,
  numbers as float); ValueError naming the option as `door` spells it."""
  option = OPTIONS[name]
  if not option.valid(value):
    _fail(door, name, _expected(name, door), value)
  if value is None or isinstance(value, str):
    return value
  return int(value) if name in _INTEGER_OPTIONS else float(value)


_LOSS_NAMES = (losses.NAMES + losses.OP_NAMES + losses.MULTICLASS_NAMES +
               losses.MULTICLASS)


def check_loss(loss, num_classes=None, door=IN_MEMORY_SDCA):
  """(op name of `loss`, K): K >= 2 for a multiclass loss (which needs
  it), 1 for the others (None or 1 given)."""
  if door.style == "sdca_options" and loss not in _LOSS_NAMES:
    raise ValueError(
        f"{door.label('loss_type')} must be one of "
        f"{losses.OP_NAMES + losses.MULTICLASS} (or "
        f"{losses.NAMES + losses.MULTICLASS_NAMES}), got {loss!r}")
  loss = losses.op_name(loss)  # ValueError naming the loss
  if losses.is_multiclass(loss):
    if num_classes is None:
      raise ValueError(f"{door.loss(loss)} needs num_classes (the "
                       "number of classes K >= 2)")
    if (isinstance(num_classes, bool) or
        not isinstance(num_classes, numbers.Integral) or num_classes < 2):
      raise ValueError(f"{door.label('num_classes')} must be >= 2 for "
                       f"{door.loss(loss)}, got {num_classes!r}")
    return loss, int(num_classes)
  if num_classes is not None and (
      isinstance(num_classes, bool) or
      not isinstance(num_classes, numbers.Integral) or num_classes != 1):
    raise ValueError(f"{door.label('num_classes')} must be 1 for "
                     f"{door.loss(loss)} (K classes need loss "
                     f"{door.loss('softmax')} or "
                     f"{door.loss('multiclass_hinge')}), got {num_classes!r}")
  return loss, 1


def _asdca_loss(loss, door):
  if loss not in ASDCA_LOSSES:
    smooth = ", ".join(door.loss(name) for name in ASDCA_LOSSES)
    raise ValueError(
        f"ASDCA runs the smooth binary and real-valued losses ({smooth}), "
        f"not {door.loss(loss)}: use {door.loss('smooth_hinge')} for a "
        "hinge-like loss, or another visit_order for SDCA")


def _combinations(loss, values, mode, door):
  """The rules between options (and with the loss)."""
  order = visit_order_for(loss, values.get("visit_order"),
                          mode or IN_MEMORY)
  asdca = order == "asdca"
  if asdca:
    _asdca_loss(loss, door)
  if losses.is_multiclass(loss):
    orders = (MULTICLASS_HINGE_VISIT_ORDERS
              if loss == "multiclass_hinge_loss" else
              MULTICLASS_VISIT_ORDERS)
    if order not in orders:
      _fail(door, "visit_order", f"one of {orders} for {door.loss(loss)}",
            order)
  step = values.get("hinge_step", "projection")
  if step != "projection" and loss != "multiclass_hinge_loss":
    raise ValueError(f"{door.label('hinge_step')} {step!r} is a block step "
                     f"of {door.loss('multiclass_hinge')}, not of "
                     f"{door.loss(loss)}")
  momentum = values.get("momentum")
  if momentum and (asdca or values.get("average_from") is not None):
    raise ValueError(
        f"momentum={momentum!r} extrapolates SDCA's epochs; it does not "
        "combine with " + ("visit_order 'asdca' (accelerated already)"
                           if asdca else "average_from"))


# What a user who sets an option where it does not run should know.
_NOTES = {
    ("momentum", PROCESSES): "CoCoA+'s rounds across processes extrapolate "
                             "already (tf-sdca train --no-momentum turns "
                             "that off)",
    ("carry_over", IN_MEMORY): "in-memory rows are visited in a fresh order "
                               "every epoch",
    ("num_threads", PROCESSES): "each worker solves its rows on one thread",
    ("visit_order", PROCESSES): "each worker visits its rows in a fresh "
                                "random permutation every round",
    ("num_loss_partitions", PROCESSES): "CoCoA+'s rounds set sigma to the "
                                        "number of workers themselves",
}


def _applies(name, value, mode, door, data=None):
  """ValueError when option `name`, set to `value`, does not run in
  `mode` (`data`: the door's words for it), naming the doors that run it."""
  option = OPTIONS[name]
  # momentum 0 and carry_over 0 are what the other modes do anyway, as is
  # a permutation (or 1 thread) across processes.
  if mode in option.modes or value == option.default or (
      name in ("momentum", "carry_over") and not value) or (
          mode == PROCESSES and (name, value) in (
              ("visit_order", "permutation"), ("num_threads", 1))):
    return
  where = {IN_MEMORY: IN_MEMORY_DOORS, STREAMED: STREAMED_DOORS,
           PROCESSES: "tf-sdca train with --local-cluster or TF_CONFIG"}
  modes = [m for m in MODES if m in option.modes]
  note = _NOTES.get((name, mode))
  given = (f"{door.label(name)} {value}" if door.style == "flag" else
           f"{door.label(name)}={value!r}")
  raise ValueError(f"{given} runs {' and '.join(modes)}"
                   f" ({' or '.join(where[m] for m in modes)}), not {mode}"
                   + (f" ({data})" if data else "") +
                   (f": {note}" if note else ""))


def validate(loss, values, mode=None, door=IN_MEMORY_SDCA, num_classes=None):
  """Checks a door's options; returns (op loss name, K, normalised values).

  Args:
    loss: the loss, by short or op name.
    values: {option name: value} of the options the door was given (those
      of `OPTIONS`; others are the door's own business).
    mode: the data mode they will run in, or None when the door does not
      know yet (a Keras model learns it at `fit`): then only domains and
      combinations are checked, and `applies(values, mode, door)` later.
    door: a `Door`, for the names in messages.
    num_classes: K of a multiclass loss.

  Raises:
    ValueError: naming the option as the door spells it and the value.
  """
  if values.get("visit_order") == "asdca" and loss in _LOSS_NAMES:
    _asdca_loss(losses.op_name(loss), door)  # before K: a multiclass
  loss, k = check_loss(loss, num_classes, door)
  out = {}
  for name, value in values.items():
    out[name] = check(name, value, door)
  _combinations(loss, out, mode, door)
  if mode is not None:
    applies(out, mode, door)
  return loss, k, out


def applies(values, mode, door=IN_MEMORY_SDCA, data=None):
  """ValueError for the first option of `values` set where it does not run
  (`mode`; `data`: the door's words for it, e.g. "a tf.data.Dataset"),
  naming the doors that run it."""
  if values.get("visit_order") == "asdca" and mode != IN_MEMORY:
    _fail(door, "visit_order",
          f"one of {VISIT_ORDERS}: ASDCA (accelerated mini-batch SDCA) "
          "needs the whole data set in memory (" + IN_MEMORY_DOORS + "), "
          f"not {mode}" + (f" ({data})" if data else ""), "asdca")
  for name, value in values.items():
    if name in OPTIONS:
      _applies(name, value, mode, door, data)


# `tf-sdca train`'s defaults where they differ from the library's: the
# command line trains hashed Criteo rows, 2^20 weights for ~10^6 rows, where
# l2 = 10 generalised best (g3doc/criteo.md); its order stays 'permutation'
# for every loss (the hinge's 'shrinking' was measured on small data sets,
# not on its files).
COMMAND_LINE_DEFAULTS = {"l2": 10.0, "tol": 1e-3,
                         "visit_order": "permutation"}

# `tf-sdca train --memory-budget`: the memory its rows and training state
# may take (beyond what the process holds before reading them: Python and
# TensorFlow, ~0.5 GB); rows whose packed records would not fit train part
# by part (`tf_sdca.engine.PartedProblem`). The default is this share of
# the machine's physical memory: 0.4 keeps the 45M-row Kaggle-size run of
# g3doc/benchmarks.md under 12 GB on a 24 GB machine without a flag (at 0.5,
# its ~11.1 GiB estimate in memory fitted the 11.8 GiB default and trained in
# memory, past 12 GB with the runtime).
MEMORY_BUDGET_SHARE = 0.4
MEMORY_BUDGET_HELP = (
    "memory for the rows and the training state, beyond the process's own "
    "~0.5 GB (Python, TensorFlow), e.g. 800M or 12G (K, M, G, T: powers of "
    "1024); rows whose packed records would not fit train part by part "
    "from the cache, in another order of the rows (g3doc/criteo.md); "
    f"default: {MEMORY_BUDGET_SHARE:g} of the machine's memory")
_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30,
               "t": 1 << 40}


def default_memory_budget():
  """`--memory-budget`'s default: MEMORY_BUDGET_SHARE of the physical
  memory (of 16 GiB where the system does not say)."""
  try:
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
  except (ValueError, OSError, AttributeError):  # not a POSIX system
    memory = 16 << 30
  return int(memory * MEMORY_BUDGET_SHARE)


def memory_budget_flag(text):
  """An argparse `type` for `--memory-budget`: a size in bytes, with an
  optional unit K, M, G or T (powers of 1024; 'KB', 'KiB', ... too), > 0.
  ValueError-like `argparse.ArgumentTypeError` otherwise, before any data
  is read."""
  match = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*",
                       str(text), re.IGNORECASE)
  size = (float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()]
          if match else None)
  if size is None or not math.isfinite(size) or size < 1:
    raise argparse.ArgumentTypeError(
        f"--memory-budget must be a size of at least 1 byte, such as "
        f"800M or 12G, got {text!r}")
  return int(size)


def flag_type(name):
  """An argparse `type` for option `name`'s flag: parses the text and checks
  it with the table (argparse then says `argument --l2: --l2 must be ...`,
  before any data is read)."""
  option = OPTIONS[name]

  def parse(text):
    value = text
    if not isinstance(option.default, str) and text != "auto":
      try:
        value = int(text) if name in _INTEGER_OPTIONS else float(text)
      except ValueError:
        kind = "an integer" if name in _INTEGER_OPTIONS else "a number"
        raise argparse.ArgumentTypeError(
            f"{option.flag} must be {kind}, got {text!r}") from None
    if not option.valid(value):  # the text as given, not as parsed
      raise argparse.ArgumentTypeError(
          f"{option.flag} must be {_expected(name, COMMAND_LINE)}, got "
          f"{text}")
    return check(name, value, COMMAND_LINE)

  parse.__name__ = option.flag
  return parse


def flag_help(name, extra=""):
  """The `--help` line of option `name`'s flag: the table's words, `extra`,
  and the command line's default."""
  option = OPTIONS[name]
  default = COMMAND_LINE_DEFAULTS.get(name, option.default)
  return (f"{option.help}{'; ' + extra if extra else ''} (default: "
          f"{default})")


def visit_order_for(loss, visit_order, mode=IN_MEMORY, row_norms=None,
                    l2=None, gamma=1.0):
  """The order a fit of `loss` (short or op name) uses in `mode`:
  `visit_order` as given, or for None (the default) in memory the loss's
  order (`IN_MEMORY_DEFAULT_ORDERS`: 'shrinking' for the hinge losses,
  'adaptive' for the absolute deviation and Poisson, else 'permutation'),
  'adaptive' in its place for `NORM_SPREAD_LOSSES` where the rows'
  `row_norms` (an `engine.RowNorms`), when known, spread above
  ADAPTIVE_NORM_SPREAD or, with `l2` (and the smooth hinge's `gamma`),
  bound SDCA's passes above ADAPTIVE_PASSES_BOUND; 'permutation'
  elsewhere."""
  if visit_order is not None:
    return visit_order
  if mode == IN_MEMORY:
    loss = losses.op_name(loss)
    if row_norms is not None and loss in NORM_SPREAD_LOSSES:
      if row_norms.spread > ADAPTIVE_NORM_SPREAD:
        return "adaptive"
      if (loss in ADAPTIVE_PASSES_BOUND and l2 is not None and l2 > 0 and
          row_norms.largest * _CURVATURE.get(loss, 1.0 / gamma) / l2 >
          ADAPTIVE_PASSES_BOUND[loss]):
        return "adaptive"
    return IN_MEMORY_DEFAULT_ORDERS.get(loss, "permutation")
  return "permutation"


def momentum_for(momentum, visit_order, whole_epochs=True, asdca=False,
                 averaging=False):
  """The momentum a fit uses. The default (None) is 'auto' where
  extrapolation applies, whole epochs over in-memory rows without ASDCA or
  output averaging, and 0 elsewhere. 'auto' extrapolates the orders it
  was measured on ('permutation', 'uniform', 'shrinking', 'adaptive');
  with 'cyclic' it is 0 (on standardised breast_cancer, logistic, l2 = 1,
  beta = 0.5 took 329 cyclic epochs to 1e-7 against 233 plain). In the
  adaptive order a fixed beta = 0.5 once ended 15 epochs at 2e-6 against
  < 1e-7 plain on a categorical data set, but 'auto' (which leaves fast
  epochs plain) cut the passes to a gap of 1e-6 at the weak l2 on anes96
  from 122 to 33 and on star98 from 270 to 138, and the absolute
  deviation's (its default order) held or improved on diabetes, star98,
  fair and linnerud (bench/bench_defaults.py). A fixed beta is used as
  given."""
  if momentum is None:
    if not whole_epochs or asdca or averaging:
      return 0.0
    momentum = "auto"
  if momentum == "auto" and visit_order == "cyclic":
    return 0.0
  return momentum

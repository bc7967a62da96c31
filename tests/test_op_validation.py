"""Every bad input gives an error that names the argument and the value, in
eager mode and inside tf.function; the process survives and a good call
still works afterwards."""
import numpy as np
import pytest
import tensorflow as tf

import tf_sdca
from tf_sdca.ops._loader import load_ops

ERRORS = (tf.errors.InvalidArgumentError, ValueError)


def _good(**override):
  """A valid 3-example batch: one sparse group with values, one dense."""
  args = dict(
      sparse_example_indices=[np.array([0, 1, 1, 2], np.int64)],
      sparse_feature_indices=[np.array([4, 7, 4, 9], np.int64)],
      sparse_feature_values=[np.array([1.0, 0.5, 2.0, 1.0], np.float32)],
      dense_features=[np.ones((3, 2), np.float32)],
      example_weights=np.ones(3, np.float32),
      example_labels=np.array([0.0, 1.0, 1.0], np.float32),
      sparse_indices=[np.array([4, 7, 9], np.int64)],
      sparse_weights=[np.zeros(3, np.float32)],
      dense_weights=[np.zeros(2, np.float32)],
      example_state_data=np.zeros((3, 4), np.float32),
      loss_type="logistic_loss", l1=0.0, l2=1.0)
  args.update(override)
  return args


def _run(mode, args):
  if mode == "eager":
    return tf_sdca.sdca_optimizer(**args)
  return tf.function(lambda: tf_sdca.sdca_optimizer(**args))()


BAD_INPUTS = [
    # (name, override, regex the message must match)
    ("feature ids shorter than example indices",
     dict(sparse_feature_indices=[np.array([4, 7, 4], np.int64)]),
     r"sparse_feature_indices\[0\] has 3 entries but sparse_example_indices"
     r"\[0\] has 4"),
    ("values length",
     dict(sparse_feature_values=[np.ones(2, np.float32)]),
     r"sparse_feature_values\[0\] has 2 entries but sparse_example_indices"),
    ("sparse weights vs indices",
     dict(sparse_weights=[np.zeros(2, np.float32)]),
     r"sparse_weights\[0\] has 2 entries but sparse_indices\[0\] has 3"),
    ("labels vs weights",
     dict(example_labels=np.zeros(2, np.float32)),
     r"example_labels has 2 entries but example_weights has 3"),
    ("dense rows vs batch",
     dict(dense_features=[np.ones((4, 2), np.float32)]),
     r"dense_features\[0\] (\(rows\) )?has 4 (rows|entries) but "
     r"example_weights has 3"),
    ("dense weights vs columns",
     dict(dense_weights=[np.zeros(3, np.float32)]),
     r"dense_weights\[0\] has 3 (elements|entries) but dense_features\[0\]"
     r"( \(columns\))? has 2"),
    ("example index out of range",
     dict(sparse_example_indices=[np.array([0, 1, 1, 3], np.int64)]),
     r"sparse_example_indices\[0\]\[3\] = 3 is outside \[0, 3\)"),
    ("negative example index",
     dict(sparse_example_indices=[np.array([0, -1, 1, 2], np.int64)]),
     r"sparse_example_indices\[0\]\[1\] = -1 is outside"),
    ("feature id missing from sparse_indices",
     dict(sparse_feature_indices=[np.array([4, 7, 5, 9], np.int64)]),
     r"sparse_feature_indices\[0\]\[2\] = 5 is not in sparse_indices\[0\]"),
    ("feature id above every sparse_indices",
     dict(sparse_feature_indices=[np.array([4, 7, 4, 10], np.int64)]),
     r"sparse_feature_indices\[0\]\[3\] = 10 is not in sparse_indices\[0\]"),
    ("negative feature id",
     dict(sparse_feature_indices=[np.array([4, -7, 4, 9], np.int64)]),
     r"sparse_feature_indices\[0\]\[1\] = -7 must be >= 0"),
    ("negative id in sparse_indices",
     dict(sparse_indices=[np.array([4, -7, 9], np.int64)]),
     r"sparse_indices\[0\]\[1\] = -7 must be >= 0"),
    ("repeated id in sparse_indices",
     dict(sparse_indices=[np.array([4, 7, 4], np.int64)]),
     r"sparse_indices\[0\]\[2\] = 4 repeats \[0\]"),
    ("negative example weight",
     dict(example_weights=np.array([1.0, -2.0, 1.0], np.float32)),
     r"example_weights\[1\] = -2 must be finite and >= 0"),
    ("NaN example weight",
     dict(example_weights=np.array([1.0, 1.0, np.nan], np.float32)),
     r"example_weights\[2\] = nan must be finite"),
    ("inf example weight",
     dict(example_weights=np.array([np.inf, 1.0, 1.0], np.float32)),
     r"example_weights\[0\] = inf must be finite"),
    ("NaN dense feature",
     dict(dense_features=[np.array([[1, 1], [1, np.nan], [1, 1]],
                                   np.float32)]),
     r"dense_features\[0\]\[1, 1\] = nan must be finite"),
    ("inf sparse value",
     dict(sparse_feature_values=[np.array([1, 1, np.inf, 1], np.float32)]),
     r"sparse_feature_values\[0\]\[2\] = inf must be finite"),
    ("NaN sparse weight",
     dict(sparse_weights=[np.array([0, np.nan, 0], np.float32)]),
     r"sparse_weights\[0\]\[1\] = nan must be finite"),
    ("inf dense weight",
     dict(dense_weights=[np.array([0, -np.inf], np.float32)]),
     r"dense_weights\[0\]\[1\] = -inf must be finite"),
    ("logistic label 2",
     dict(example_labels=np.array([0, 2, 1], np.float32)),
     r"example_labels\[1\] = 2 must be 0 or 1 for logistic_loss"),
    ("logistic label -1",
     dict(example_labels=np.array([0, 1, -1], np.float32)),
     r"example_labels\[2\] = -1 must be 0 or 1 for logistic_loss"),
    ("hinge label 0.5",
     dict(example_labels=np.array([0.5, 1, 1], np.float32),
          loss_type="hinge_loss"),
     r"example_labels\[0\] = 0.5 must be 0 or 1 for hinge_loss"),
    ("smooth hinge label NaN",
     dict(example_labels=np.array([0, np.nan, 1], np.float32),
          loss_type="smooth_hinge_loss"),
     r"example_labels\[1\] = nan must be 0 or 1 for smooth_hinge_loss"),
    ("poisson label -1",
     dict(example_labels=np.array([0, -1, 1], np.float32),
          loss_type="poisson_loss"),
     r"example_labels\[1\] = -1 must be finite and >= 0 for poisson_loss"),
    ("squared label NaN",
     dict(example_labels=np.array([0, 1, np.nan], np.float32),
          loss_type="squared_loss"),
     r"example_labels\[2\] = nan must be finite for squared_loss"),
    ("state with 3 columns",
     dict(example_state_data=np.zeros((3, 3), np.float32)),
     r"example_state_data must have (shape \[3, 4\]|4 columns), got "
     r"(shape )?\[3,3\]"),
    ("state of rank 1",
     dict(example_state_data=np.zeros(12, np.float32)),
     r"example_state_data must have (shape \[3, 4\]|rank 2), got "
     r"(shape )?\[12\]"),
    ("logistic dual outside (0, 1)",
     dict(example_state_data=np.array([[0, 0, 0, 0], [2, 0, 0, 0],
                                       [0, 0, 0, 0]], np.float32)),
     r"example_state_data\[1, 0\] = 2 is not a valid dual of logistic_loss "
     r"for example_labels\[1\] = 1"),
    ("NaN dual",
     dict(example_state_data=np.array([[np.nan, 0, 0, 0], [0, 0, 0, 0],
                                       [0, 0, 0, 0]], np.float32)),
     r"example_state_data\[0, 0\] = nan is not a valid dual"),
]


@pytest.mark.parametrize("mode", ["eager", "tf.function"])
@pytest.mark.parametrize("name,override,pattern", BAD_INPUTS,
                         ids=[b[0] for b in BAD_INPUTS])
def test_bad_input_names_the_argument_and_value(mode, name, override,
                                                pattern):
  del name
  with pytest.raises(ERRORS, match=pattern):
    _run(mode, _good(**override))
  # Nothing is broken: the same process still trains.
  state, _, _ = _run(mode, _good())
  assert np.all(np.isfinite(state.numpy()))


@pytest.mark.parametrize("option,value,pattern", [
    ("l2", 0.0, r"l2 must be > 0, got 0"),
    ("l2", -1.0, r"l2 must be > 0"),
    ("l1", -0.5, r"l1 must be >= 0, got -0.5"),
    ("gamma", 0.0, r"gamma must be > 0"),
    ("loss_type", "cubic_loss", r"loss_type must be one of .* 'cubic_loss'"),
    ("visit_order", "random", r"visit_order must be one of .* 'random'"),
    ("num_inner_iterations", 0, r"num_inner_iterations must be in \[1, "),
    ("num_loss_partitions", 0, r"num_loss_partitions must be >= 1"),
])
def test_bad_options_raise_value_error_naming_them(option, value, pattern):
  with pytest.raises(ValueError, match=pattern):
    tf_sdca.sdca_optimizer(**_good(**{option: value}))


@pytest.mark.parametrize("attr,value,pattern", [
    ("l2", 0.0, r"l2 = 0 must be > 0"),
    ("l1", -1.0, r"l1 = -1 must be >= 0"),
    ("gamma", -1.0, r"gamma = -1 must be > 0"),
])
def test_the_raw_op_rejects_bad_attributes_itself(attr, value, pattern):
  args = _good()
  del args["loss_type"], args["l1"], args["l2"]
  attrs = dict(loss_type="logistic_loss", l1=0.0, l2=1.0, gamma=1.0)
  attrs[attr] = value
  with pytest.raises(tf.errors.InvalidArgumentError, match=pattern):
    load_ops().tf_sdca_optimizer(**args, call_index=0, **attrs)


def test_helper_ops_validate_their_inputs():
  with pytest.raises(ValueError, match=r"l2 must be > 0"):
    tf_sdca.sdca_shrink_l1(np.ones(3, np.float32), l1=0.1, l2=0.0)
  with pytest.raises(tf.errors.InvalidArgumentError, match=r"l2 = 0 must be"):
    load_ops().tf_sdca_shrink_l1(np.ones(3, np.float32), l1=0.1, l2=0.0)
  with pytest.raises(ERRORS, match=r"rank 1|must be rank 1"):
    tf_sdca.sdca_fprint([["a", "b"]])


def test_ascending_and_unordered_sparse_indices_give_the_same_step():
  """The order of sparse_indices (ascending is what SdcaModel passes) does
  not change the step: the same state and deltas, the deltas following
  their ids."""
  rng = np.random.default_rng(3)
  n, vocab = 200, 5000
  ex = np.repeat(np.arange(n, dtype=np.int64), 5)
  ids = rng.integers(0, vocab, ex.size).astype(np.int64)
  uniq = np.unique(ids)
  perm = rng.permutation(uniq.size)
  weights = rng.normal(size=uniq.size).astype(np.float32)
  outs = []
  for order in (np.arange(uniq.size), perm):
    out = tf_sdca.sdca_optimizer(**_good(
        sparse_example_indices=[ex], sparse_feature_indices=[ids],
        sparse_feature_values=[np.full(ex.size, 0.5, np.float32)],
        dense_features=[np.ones((n, 2), np.float32)],
        example_weights=np.ones(n, np.float32),
        example_labels=(np.arange(n) % 2).astype(np.float32),
        sparse_indices=[uniq[order]], sparse_weights=[weights[order]],
        example_state_data=np.zeros((n, 4), np.float32)))
    delta = np.empty(uniq.size, np.float32)
    delta[order] = out[1][0].numpy()
    outs.append((out[0].numpy(), delta, out[2][0].numpy()))
  for a, b in zip(*outs):
    np.testing.assert_array_equal(a, b)
  assert np.abs(outs[0][1]).max() > 0


# Found by tools/fuzz_ops.py: arguments TF's conversion rejects with
# messages that do not name them, non-finite values passed through, and
# pass counts that ran for hours.
@pytest.mark.parametrize("mode", ["eager", "function"])
@pytest.mark.parametrize("arg,value,pattern", [
    ("example_labels", None, r"example_labels is None"),
    ("example_weights", "x", r"example_weights cannot be a float32 tensor"),
    ("example_state_data", np.array([[0.0, np.nan, 0, 0]] * 3, np.float32),
     r"example_state_data\[0, 1\] = nan is not finite"),
    ("num_inner_iterations", 2**31 - 1,
     r"num_inner_iterations must be in \[1, 1048576\]"),
])
def test_fuzzer_findings_name_the_argument(mode, arg, value, pattern):
  with pytest.raises(ERRORS + (TypeError,), match=pattern):
    _run(mode, _good(**{arg: value}))


def test_the_raw_ops_refuse_absurd_pass_counts():
  args = _good()
  del args["loss_type"], args["l1"], args["l2"]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"num_inner_iterations = 2000000 is more than "
                           r"the limit of 1048576"):
    load_ops().tf_sdca_optimizer(
        **args, call_index=0, loss_type="logistic_loss", l1=0.0, l2=1.0,
        num_inner_iterations=2000000)
  rows = tf_sdca.pack_rows(
      row_ptr=np.array([0, 1], np.int64), feature_ids=np.array([0], np.int32),
      feature_values=np.ones(1, np.float32),
      dense_features=np.zeros((1, 0), np.float32),
      example_weights=np.ones(1, np.float32),
      example_labels=np.ones(1, np.float32), num_sparse_features=1,
      loss_type="logistic_loss")
  with pytest.raises(ValueError, match=r"num_passes must be in \[0, 1048576\]"):
    tf_sdca.packed_solve(rows, np.zeros(1), np.zeros(1), seed=0,
                         loss_type="logistic_loss", l1=0.0, l2=1.0,
                         num_passes=2**31 - 1)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"num_passes = 2147483647 is more than the limit"):
    load_ops().tf_sdca_packed_solve(
        rows, np.zeros(1), np.zeros(1), np.int64(0), loss_type="logistic_loss",
        l1=0.0, l2=1.0, num_passes=2**31 - 1)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf])
def test_shrink_l1_refuses_non_finite_weights(value):
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"weights\[1\] \(flat index\) = .* is not finite"):
    tf_sdca.sdca_shrink_l1(np.array([1.0, value, 0.0], np.float32), 0.1, 1.0)


def test_ids_past_int32_are_refused_not_wrapped():
  # 2^32 + 1 narrowed to int32 is 1: a silent wrap to another feature.
  with pytest.raises(ValueError, match=r"feature_ids has the value 4294967297"):
    tf_sdca.pack_rows(
        row_ptr=np.array([0, 1], np.int64),
        feature_ids=np.array([2**32 + 1], np.int64),
        feature_values=np.ones(1, np.float32),
        dense_features=np.zeros((1, 0), np.float32),
        example_weights=np.ones(1, np.float32),
        example_labels=np.ones(1, np.float32), num_sparse_features=2,
        loss_type="logistic_loss")


def test_dense_features_without_columns_must_still_have_the_rows():
  args = dict(row_ptr=np.array([0, 1, 1], np.int64),
              feature_ids=np.array([0], np.int32),
              feature_values=np.ones(1, np.float32),
              example_weights=np.ones(2, np.float32),
              example_labels=np.ones(2, np.float32), num_sparse_features=1,
              loss_type="logistic_loss")
  for rows in (0, 2):  # [0, 0] and [n, 0] both mean "no dense features"
    tf_sdca.pack_rows(dense_features=np.zeros((rows, 0), np.float32), **args)
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match=r"dense_features has 3 rows but example_weights "
                           r"has 2"):
    tf_sdca.pack_rows(dense_features=np.zeros((3, 0), np.float32), **args)


def test_float_ids_with_a_fraction_are_refused_not_truncated():
  from tf_sdca.ops import sdca_ops  # pylint: disable=import-outside-toplevel
  with pytest.raises(ValueError, match=r"ids must hold integers, got the "
                                       r"value 0.5"):
    sdca_ops.distinct_ids(np.array([0.5, 1.0]), num_rows=4)
  np.testing.assert_array_equal(
      sdca_ops.distinct_ids(np.array([2.0, 1.0, 2.0]), num_rows=4), [1, 2])

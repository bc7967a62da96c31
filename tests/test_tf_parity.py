"""Parity with TensorFlow's `tf.raw_ops.SdcaOptimizerV2`.

With batches of one example, TensorFlow's kernel performs exactly one
coordinate step per call (its Newton iterations for the logistic loss then
start from the previous dual and converge), so both ops walk the same path
through the weights: after 5 epochs over 40 rows the weights and the state's
dual and primal-loss columns must agree.
"""
import numpy as np
import pytest

from sdca_testutil import TF_LOSSES, Model, dual_loss, make_problem

N = 40
EPOCHS = 5
L2 = 0.7

# (l1, num_loss_partitions, example weights != 1)
CONFIGS = {
    "plain": (0.0, 1, False),
    "l1": (0.05, 1, False),
    "two-partitions": (0.0, 2, False),
    "weighted": (0.0, 1, True),
}


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("loss", TF_LOSSES)
def test_one_example_batches_match_tensorflow_sdca_optimizer_v2(loss,
                                                                config):
    l1, partitions, weighted = CONFIGS[config]
    weights = (np.random.default_rng(2).uniform(0.3, 2.5, N) if weighted
               else None)
    problem = make_problem(loss, n=N, seed=11, example_weights=weights)
    ours = Model(problem, loss, l1=l1, l2=L2,
                 num_loss_partitions=partitions)
    theirs = Model(problem, loss, l1=l1, l2=L2, use_tf=True,
                   num_loss_partitions=partitions)
    for _ in range(EPOCHS):
        ours.epoch_of_single_examples()
        theirs.epoch_of_single_examples()
    # The path has moved: parity of two zero vectors would prove nothing.
    assert np.abs(ours.w_dense).max() > 0.05
    # 1e-5 absolute: TensorFlow keeps some intermediates in float32 where we
    # use float64, and the float32 weights passed between calls round
    # differently; over 200 steps that stays well below 1e-5 on weights ~1.
    np.testing.assert_allclose(ours.w_sparse, theirs.w_sparse, atol=1e-5)
    np.testing.assert_allclose(ours.w_dense, theirs.w_dense, atol=1e-5)
    # Column 0: dual; column 1: s * primal loss at the call's input weights.
    np.testing.assert_allclose(ours.state[:, :2], theirs.state[:, :2],
                               atol=1e-5, rtol=1e-5)
    # Column 3: the example weight, copied.
    np.testing.assert_array_equal(ours.state[:, 3], theirs.state[:, 3])
    # Column 2 differs on purpose: TensorFlow stores the dual loss of the
    # dual it started from, ours that of the new dual, so that the state
    # describes one consistent point. Float32 storage: relative 1e-6.
    np.testing.assert_allclose(
        ours.state[:, 2],
        problem["weights"] * dual_loss(loss, ours.state[:, 0],
                                       problem["labels"]),
        rtol=1e-6, atol=1e-6)

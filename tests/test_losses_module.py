"""tf_sdca.losses, the one Python module of the losses' names, primal, dual,
activation and L1 shrink: its numpy and TensorFlow forms agree with the
test references (sdca_testutil), every door takes both spellings of a loss,
`import tf_sdca` is lazy, and the CLI keeps TensorFlow's banners out of the
terminal."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from sdca_testutil import (LOSSES, dual_loss, make_labels, primal_loss,
                           primal_loss_derivative)
from tf_sdca import losses
from tf_sdca.keras import LinearModel
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.trainer import InMemorySdca

SMOOTH = ("logistic_loss", "squared_loss", "smooth_hinge_loss",
          "poisson_loss")


def test_both_spellings_name_the_same_loss():
  assert [losses.op_name(n) for n in losses.NAMES] == list(losses.OP_NAMES)
  assert [losses.op_name(n) for n in losses.OP_NAMES] == list(
      losses.OP_NAMES)
  assert losses.short_name("smooth_hinge_loss") == "smooth_hinge"
  with pytest.raises(ValueError, match=r"loss must be one of .*'logistic'.*"
                     r"got 'logit'"):
    losses.op_name("logit")


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("gamma", [1.0, 0.3])
def test_primal_and_dual_match_the_references_in_numpy_and_tf(loss, gamma):
  rng = np.random.default_rng(0)
  y = make_labels(loss, 50, rng).astype(np.float64)
  z = rng.normal(size=50) * 2
  # Duals inside the domain: -phi'(z) for the smooth losses, a valid
  # subgradient's negative otherwise.
  if loss in SMOOTH:
    a = -primal_loss_derivative(loss, z, y, gamma)
  else:
    a = rng.uniform(0, 1, 50) * (2 * y - 1 if loss == "hinge_loss"
                                 else np.sign(rng.normal(size=50)))
  expected_p = primal_loss(loss, z, y, gamma)
  expected_d = dual_loss(loss, a, y, gamma)
  np.testing.assert_allclose(losses.primal(loss, z, y, gamma), expected_p,
                             rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(losses.dual(loss, a, y, gamma), expected_d,
                             rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(
      losses.primal(loss, tf.constant(z), tf.constant(y), gamma).numpy(),
      expected_p, rtol=1e-12, atol=1e-12)
  np.testing.assert_allclose(
      losses.dual(loss, tf.constant(a), tf.constant(y), gamma).numpy(),
      expected_d, rtol=1e-12, atol=1e-12)
  # Fenchel-Young: phi(z) + phi*(-a) + a z >= 0, = 0 at a = -phi'(z).
  fy = (losses.primal(loss, z, y, gamma) + losses.dual(loss, a, y, gamma)
        + a * z)
  assert (fy >= -1e-12).all()
  if loss in SMOOTH:
    np.testing.assert_allclose(fy, 0.0, atol=1e-9)


def test_activation_and_shrink():
  z = np.array([-2.0, 0.0, 3.0])
  np.testing.assert_allclose(losses.activation("logistic", z),
                             1 / (1 + np.exp(-z)))
  np.testing.assert_allclose(losses.activation("poisson_loss", z), np.exp(z))
  np.testing.assert_array_equal(losses.activation("hinge", z), z)
  np.testing.assert_allclose(
      losses.activation("logistic", tf.constant(z)).numpy(),
      1 / (1 + np.exp(-z)))
  w = np.array([-3.0, -0.5, 0.2, 2.0])
  np.testing.assert_allclose(losses.shrink_l1(w, 1.0, 2.0),
                             [-2.5, 0.0, 0.0, 1.5])
  np.testing.assert_allclose(
      losses.shrink_l1(tf.constant(w), 1.0, 2.0).numpy(), [-2.5, 0, 0, 1.5])
  assert losses.shrink_l1(w, 0.0, 2.0) is w


def _xy(n=300):
  rng = np.random.default_rng(1)
  x = rng.normal(size=(n, 4)).astype(np.float32)
  y = (x[:, 0] + 0.3 * rng.normal(size=n) > 0).astype(np.float32)
  return x, y


def test_in_memory_trainer_takes_both_spellings():
  x, y = _xy()
  scores = []
  for name in ("logistic", "logistic_loss"):
    model = InMemorySdca(loss=name, l2=1.0)
    model.fit(labels=y, dense=x, epochs=5, verbose=0)
    assert model.loss == "logistic_loss"
    scores.append(model.predict(dense=x))
  np.testing.assert_array_equal(scores[0], scores[1])


def test_keras_and_sdca_model_take_both_spellings():
  assert LinearModel(loss="squared_loss").loss_type == "squared_loss"
  assert LinearModel(loss="squared").loss_type == "squared_loss"
  x, y = _xy(40)
  examples = dict(sparse_features=[], dense_features=[tf.constant(x)],
                  example_weights=tf.ones([40]), example_labels=tf.constant(y),
                  example_ids=tf.as_string(tf.range(40)))
  variables = lambda: dict(  # noqa: E731
      sparse_features_weights=[],
      dense_features_weights=[tf.Variable(tf.zeros([4]))])
  for name in ("hinge", "hinge_loss"):
    model = SdcaModel(examples, variables(),
                      dict(loss_type=name, symmetric_l2_regularization=1.0))
    model.minimize()
    assert float(model.unregularized_loss(examples)) < 1.0
  with pytest.raises(ValueError, match=r"options\['loss_type'\] must be one "
                     r"of .*got 'hingeloss'"):
    SdcaModel(examples, variables(),
              dict(loss_type="hingeloss", symmetric_l2_regularization=1.0))


def test_import_is_lazy_and_reaches_keras():
  code = ("import sys, tf_sdca\n"
          "assert 'tensorflow' not in sys.modules\n"
          "assert tf_sdca.keras.LinearModel.__name__ == 'LinearModel'\n"
          "assert tf_sdca.InMemorySdca is tf_sdca.trainer.InMemorySdca\n"
          "assert 'keras' in dir(tf_sdca)\n"
          "print('ok')\n")
  result = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          text=True, check=False)
  assert result.stdout.strip() == "ok", result.stderr[-2000:]
  with pytest.raises(AttributeError, match="no attribute 'nothing'"):
    import tf_sdca  # pylint: disable=import-outside-toplevel
    tf_sdca.nothing  # pylint: disable=pointless-statement


def test_cli_keeps_tensorflow_banners_out_and_takes_short_loss_names(
    tmp_path):
  exe = os.path.join(os.path.dirname(sys.executable), "tf-sdca")
  env = {k: v for k, v in os.environ.items()
         if not k.startswith(("TF_CPP", "TF_SDCA"))}
  run = lambda *args: subprocess.run(  # noqa: E731
      [exe, *args], capture_output=True, text=True, env=env, check=False)
  gen = run("generate", "--rows", "2000", "--out", str(tmp_path / "d"))
  assert gen.returncode == 0, gen.stderr
  trained = run("train", str(tmp_path / "d" / "part-00000.tsv"),
                "--model-dir", str(tmp_path / "m"), "--loss", "logistic",
                "--epochs", "2", "--bucket-bits", "12")
  assert trained.returncode == 0, trained.stderr
  for out in (gen.stderr + gen.stdout, trained.stderr):
    assert "absl::InitializeLog" not in out
    assert "oneDNN" not in out and "cuda" not in out.lower()
  assert '"loss": "logistic_loss"' in (tmp_path / "m" / "model.json"
                                      ).read_text()

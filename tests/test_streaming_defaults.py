"""Every streamed door, at its defaults, on fixed consecutive batches of real
data, reaches the independent optimum within 1.5x the passes of one batch.

A stream of the same consecutive batches every epoch is a block-cyclic
order, on which plain SDCA needs 2-2.5x the passes of one batch, far more
with many batches (g3doc/sdca_model.md, 'Streaming orders'). The default
`carry_over='auto'` holds back a share of each call's rows for the next
call, sized to the batches of an epoch. Here each door (SdcaModel,
SDCAOptimizer, the estimator, a Keras fit on a tf.data.Dataset) trains
with no option but the loss and l2, for 1.5x the passes one full batch
needs to a relative suboptimality of TOL, and must then be within TOL of
P* = min P computed by scipy's L-BFGS in float64 on the same objective:

    P(w) = sum_i s_i log(1 + exp(-y_i w.x_i)) + l2/2 |w|^2,

x_i with a column of ones (the intercept, regularised like the others, as
the doors' biases are). The data in natural units: scikit-learn's digits
(raw pixels 0-16, even against odd) at l2 = 100 in six batches, the
LIBSVM file heart_scale (sparse rows) at weak regularisation (l2 = 0.1)
in three batches, and statsmodels' star98 (log-count features, weighted
rows, l2 = 100: at l2 = 1 one batch needs > 400 passes) in ten batches. TensorFlow's exact semantics (carry_over=0) miss
the same budget by far: the defaults are what makes the bound hold.
"""
import os

import numpy as np
import pytest
import tensorflow as tf
from scipy.optimize import minimize
from sklearn.datasets import load_digits

from sdca_testutil import DEBIAN, heart_scale_csr, heart_scale_path
from tf_sdca import estimator
from tf_sdca.keras import LinearModel
from tf_sdca.optimizer import SDCAOptimizer
from tf_sdca.sdca_model import SdcaModel, SparseFeatureColumn

# P(w)/P* - 1. The mini-batch op keeps float32 duals and weights; its
# streamed objective levels off near 1e-9 (tests/test_heart_scale.py).
TOL = 1e-6
STAR98 = os.path.join(DEBIAN, "usr", "lib", "python3", "dist-packages",
                      "statsmodels", "datasets", "star98", "star98.csv")


def _digits():
  x, y = load_digits(return_X_y=True)
  return dict(x=x.astype(np.float32), y=(y % 2 == 0).astype(np.float32),
              s=np.ones(len(y), np.float32), l2=100.0, batches=6)


def _heart_scale():
  c = heart_scale_csr()
  n = len(c["labels"])
  x = np.zeros((n, 13), np.float32)
  x[np.repeat(np.arange(n), np.diff(c["indptr"])), c["indices"]] = c["values"]
  return dict(x=x, y=(c["labels"] > 0).astype(np.float32),
              s=np.ones(n, np.float32), l2=0.1, batches=3, csr=c)


def _star98():
  """star98 (California schools, 1998, from statsmodels): is a school's
  share of pupils above the national median in math over one half; the
  features are the log count of its pupils, the log count of pupils from
  low-income homes, the shares of Asian, Black and Hispanic pupils and the
  teachers' mean years of experience; each row weighted by its pupils /
  1000."""
  table = np.genfromtxt(STAR98, delimiter=",", names=True)
  pupils, above = table["MATHTOT"], table["PR50M"]
  x = np.stack([np.log(pupils), np.log1p(table["LOWINC"] * pupils / 100),
                table["PERASIAN"] / 100, table["PERBLACK"] / 100,
                table["PERHISP"] / 100, table["AVYRSEXP"]], axis=1)
  return dict(x=x.astype(np.float32),
              y=(2 * above > pupils).astype(np.float32),
              s=(pupils / 1000).astype(np.float32), l2=100.0, batches=10)


def _with_ones(x):
  return np.hstack([x, np.ones((len(x), 1), np.float32)])


def _primal(w, d):
  a = _with_ones(d["x"]).astype(np.float64)
  z = a @ w
  return float(d["s"] @ np.logaddexp(0.0, -(2.0 * d["y"] - 1.0) * z) +
               0.5 * d["l2"] * w @ w)


def _optimum(d):
  a = _with_ones(d["x"]).astype(np.float64)
  s, sign = d["s"].astype(np.float64), 2.0 * d["y"] - 1.0

  def f(w):
    z = a @ w
    return (float(s @ np.logaddexp(0.0, -sign * z) + 0.5 * d["l2"] * w @ w),
            a.T @ (-s * sign / (1.0 + np.exp(sign * z))) + d["l2"] * w)

  res = minimize(f, np.zeros(a.shape[1]), jac=True, method="L-BFGS-B",
                 options=dict(maxiter=20000, maxfun=40000, ftol=1e-16,
                              gtol=1e-12, maxcor=30))
  # P is l2-strongly convex: the bound certifies L-BFGS's point.
  assert np.sum(res.jac ** 2) / (2 * d["l2"]) <= 1e-9 * res.fun
  return res.fun


def _ranges(d, num_batches):
  return np.array_split(np.arange(len(d["y"])), num_batches)


def _examples(d, rows, sparse):
  """An SdcaModel batch of `rows`, numpy in, string ids; with `sparse` the
  features as LIBSVM's CSR entries (heart_scale), the ones a dense group."""
  if sparse:
    c = d["csr"]
    start, stop = c["indptr"][rows[0]], c["indptr"][rows[-1] + 1]
    counts = np.diff(c["indptr"][rows[0]:rows[-1] + 2])
    groups = [SparseFeatureColumn(np.repeat(np.arange(len(rows)), counts),
                                  c["indices"][start:stop],
                                  c["values"][start:stop])]
    dense = [np.ones((len(rows), 1), np.float32)]
  else:
    groups, dense = [], [_with_ones(d["x"][rows])]
  return dict(sparse_features=groups, dense_features=dense,
              example_weights=d["s"][rows], example_labels=d["y"][rows],
              example_ids=[b"%d" % i for i in rows])


def _sdca_model(d, num_batches, passes, sparse=False, **options):
  """SdcaModel.minimize once per batch and pass, numpy batches: P(w) after
  each pass, w from the user's variables."""
  width = d["x"].shape[1] + 1
  if sparse:
    variables = dict(sparse_features_weights=[tf.Variable(tf.zeros([13]))],
                     dense_features_weights=[tf.Variable(tf.zeros([1]))])
  else:
    variables = dict(sparse_features_weights=[],
                     dense_features_weights=[tf.Variable(tf.zeros([width]))])
  model = SdcaModel(None, variables,
                    dict(loss_type="logistic_loss",
                         symmetric_l2_regularization=d["l2"], **options))
  batches = [_examples(d, r, sparse) for r in _ranges(d, num_batches)]
  out = []
  for _ in range(passes):
    for batch in batches:
      train_op = model.minimize(examples=batch)
    model.update_weights(train_op)
    w = np.concatenate([v.numpy().ravel() for key in (
        "sparse_features_weights", "dense_features_weights")
                        for v in variables[key]])
    out.append(_primal(w.astype(np.float64), d))
  return np.asarray(out)


def _sdca_optimizer(d, passes):
  opt = SDCAOptimizer("example_id", symmetric_l2_regularization=d["l2"])
  variables = {"x": tf.Variable(tf.zeros([d["x"].shape[1]])),
               "bias": tf.Variable(tf.zeros([1]))}
  for _ in range(passes):
    for rows in _ranges(d, d["batches"]):
      opt.get_train_step({"example_id": rows, "x": d["x"][rows],
                          "bias": np.ones((len(rows), 1), np.float32),
                          "weight": d["s"][rows]}, d["y"][rows], variables,
                         weight_column_name="weight")
  return np.append(variables["x"].numpy(), variables["bias"].numpy())


def _estimator(d, passes, tmp_path):
  size = len(_ranges(d, d["batches"])[0])
  classifier = estimator.LinearClassifier(
      [tf.feature_column.numeric_column("x", shape=d["x"].shape[1])],
      model_dir=str(tmp_path), weight_column="weight",
      optimizer=estimator.LinearSDCA(example_id_column="example_id",
                                     symmetric_l2_regularization=d["l2"]))
  features = {"x": d["x"], "example_id": np.arange(len(d["y"])),
              "weight": d["s"]}
  classifier.train(lambda: tf.data.Dataset.from_tensor_slices(
      (features, d["y"])).batch(size).repeat(passes))
  return np.append(
      classifier.get_variable_value("linear/linear_model/x/weights"),
      classifier.get_variable_value("linear/linear_model/bias_weights"))


def _keras(d, passes):
  size = len(_ranges(d, d["batches"])[0])
  model = LinearModel(loss="logistic", l2=d["l2"])
  model.fit(tf.data.Dataset.from_tensor_slices(
      ({"x": d["x"], "example_id": np.arange(len(d["y"]))}, d["y"],
       d["s"])).batch(size), epochs=passes, verbose=0)
  kernel, bias = model.get_weights()
  return np.append(kernel.ravel(), bias)


def _passes_of_one_batch(d, best, sparse=False, limit=400):
  excess = _sdca_model(d, 1, limit, sparse) / best - 1.0
  assert excess.min() < TOL, "one batch did not reach the optimum"
  return int(np.argmax(excess < TOL)) + 1


DATA = {"digits": _digits, "heart_scale": _heart_scale, "star98": _star98}
PATHS = {"heart_scale": heart_scale_path, "star98": lambda: STAR98}


@pytest.fixture(scope="module", params=sorted(DATA))
def problem(request):
  """(name, data, P*, 1.5x the passes of one batch, sparse rows?)."""
  name = request.param
  if name in PATHS and not os.path.exists(PATHS[name]()):
    pytest.skip(f"{PATHS[name]()} is absent (.ci/setup unpacks it)")
  d = DATA[name]()
  best = _optimum(d)
  sparse = name == "heart_scale"
  one = _passes_of_one_batch(d, best, sparse)
  return name, d, best, int(np.ceil(1.5 * one)), sparse


def test_sdca_model_defaults_reach_the_optimum_in_one_batchs_passes(
    problem):
  name, d, best, budget, sparse = problem
  excess = _sdca_model(d, d["batches"], budget, sparse) / best - 1.0
  assert excess[-1] < TOL, (name, budget, excess[-5:])
  # TensorFlow's semantics, asked for: the same budget falls far short
  # (measured: 1.2e-4 to 1.4e-2 above P* here; with held rows digits took
  # 57 passes, one batch 52; heart_scale 124 and 115; star98 92 and 85).
  exact = _sdca_model(d, d["batches"], budget, sparse,
                      carry_over=0) / best - 1.0
  assert exact[-1] > 10 * TOL, (name, budget, exact[-5:])


# CI runs the feature-dict doors on digits; heart_scale's and star98's
# through them (~25 s more) with --run-slow.
@pytest.mark.parametrize("problem", [
    "digits", *(pytest.param(name, marks=pytest.mark.slow)
                for name in ("heart_scale", "star98"))], indirect=True)
@pytest.mark.parametrize("door", ["sdca_optimizer", "estimator", "keras"])
def test_every_streamed_door_at_its_defaults_reaches_the_optimum(
    problem, door, tmp_path):
  # (heart_scale's rows go in dense here, as feature dicts hold them.)
  name, d, best, budget, _ = problem
  w = {"sdca_optimizer": lambda: _sdca_optimizer(d, budget),
       "estimator": lambda: _estimator(d, budget, tmp_path),
       "keras": lambda: _keras(d, budget)}[door]()
  excess = _primal(w.astype(np.float64), d) / best - 1.0
  assert 0.0 <= excess + 1e-12 and excess < TOL, (name, door, budget,
                                                  excess)

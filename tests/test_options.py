"""The options contract: every door checks every training option with the one
validator of `tf_sdca.options`, and says the same thing, spelt its own way.

One statement per behaviour, run on every door that takes the option: a bad
value is a ValueError naming the option (as the door spells it) and the
value; an option set where it does not run names the doors that run it.
"""
import json
import re

import numpy as np
import pytest
import tensorflow as tf

from tf_sdca import cli, estimator, options
from tf_sdca.keras import LinearModel
from tf_sdca.optimizer import SDCAOptimizer
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.sklearn import CLASSIFIER_DOOR, SDCAClassifier
from tf_sdca.trainer import InMemorySdca

# (option, bad value, extra options that make it apply, loss)
_ASDCA = {"visit_order": "asdca"}
BAD = [
    ("l1", -1.0, {}, "logistic"),
    ("l1", float("nan"), {}, "logistic"),
    ("l2", 0.0, {}, "logistic"),
    ("l2", float("inf"), {}, "logistic"),
    ("l2", 1e39, {}, "logistic"),  # inf as the ops' float32 attribute
    ("gamma", 0.0, {}, "smooth_hinge"),
    ("seed", 1.5, {}, "logistic"),
    ("seed", -1, {}, "logistic"),  # numpy's default_rng([seed, epoch])
    ("num_threads", -1, {}, "logistic"),
    ("visit_order", "zigzag", {}, "logistic"),
    *[("asdca_batch_size", bad, _ASDCA, "logistic")
      for bad in (0, -3, 2.5, None, True)],
    *[("asdca_theta", bad, _ASDCA, "logistic")
      for bad in (0, 0.0, -0.5, 1.5, 2.0, float("nan"), True, "0.1")],
    ("hinge_step", "sideways", {}, "multiclass_hinge"),
    *[("momentum", bad, {}, "logistic")
      for bad in (-0.1, 1.0, 1.5, True, "0.5", "fast")],
    *[("average_from", bad, {}, "logistic") for bad in (-1, 2.5, True, "3")],
    *[("carry_over", bad, {}, "logistic")
      for bad in (1.0, -0.25, True, "0.5", "Auto", float("nan"))],
    *[("second_order", bad, {}, "logistic")
      for bad in ("always", "Auto", True, None, 1)],
]


def _in_memory_sdca(loss, values):
  return InMemorySdca(loss=loss, num_classes=3 if "multi" in loss else None,
                      **values)


def _keras(loss, values):
  return LinearModel(loss=loss, num_classes=3 if "multi" in loss else None,
                     **values)


def _sdca_model(loss, values):
  opts = {options.OPTIONS[k].sdca_key: v for k, v in values.items()}
  opts.setdefault("symmetric_l2_regularization", 1.0)
  if "multi" in loss:
    opts["num_classes"] = 3
  return SdcaModel(None, dict(sparse_features_weights=[],
                              dense_features_weights=[tf.Variable(
                                  tf.zeros([2, 3 if "multi" in loss else 1])
                              )]), dict(loss_type=loss, **opts))


_KEYWORDS = {"l1": "symmetric_l1_regularization",
             "l2": "symmetric_l2_regularization"}


def _estimator(loss, values):
  del loss
  return estimator.LinearSDCA("example_id", **{_KEYWORDS.get(k, k): v
                                               for k, v in values.items()})


def _sdca_optimizer(loss, values):
  return SDCAOptimizer("example_id", loss_type=loss,
                       num_classes=3 if "multi" in loss else 1,
                       **{_KEYWORDS.get(k, k): v for k, v in values.items()})


def _sklearn(loss, values):
  # scikit-learn's estimators take hyper-parameters as given and check them
  # in fit; the regularisation is C (l2 = 1/C), seed and threads are
  # random_state and n_jobs, so the table's options they take are these.
  x = np.arange(12, dtype=np.float64).reshape(6, 2)
  return SDCAClassifier(loss=loss, **values).fit(x, [0, 1] * 3)


# The doors and the options each takes in its constructor (an option it
# lacks is not its to check: InMemorySdca has no carry_over, SdcaModel no
# momentum or ASDCA; `tol` is an argument of fit / train; Keras' in-memory
# fits have no exact block step, its dataset fits SdcaModel's default).
DOORS = {
    "InMemorySdca": (_in_memory_sdca, options.IN_MEMORY_SDCA,
                     set(options.OPTIONS) - {"carry_over",
                                             "num_loss_partitions", "tol"}),
    "keras.LinearModel": (_keras, options.KERAS,
                          set(options.OPTIONS) - {"tol", "second_order"}),
    "SdcaModel": (_sdca_model, options.SDCA_MODEL,
                  {k for k, o in options.OPTIONS.items() if o.sdca_key}),
    "LinearSDCA": (_estimator, options.SDCA_MODEL,
                   {"l1", "l2", "visit_order", "seed", "num_threads",
                    "average_from", "carry_over"}),
    "SDCAOptimizer": (_sdca_optimizer, options.SDCA_MODEL,
                      {k for k, o in options.OPTIONS.items() if o.sdca_key}),
    "SDCAClassifier": (_sklearn, CLASSIFIER_DOOR, {"gamma", "visit_order"}),
}

CASES = [(door, bad) for door in DOORS for bad in BAD
         if bad[0] in DOORS[door][2] and
         all(k in DOORS[door][2] for k in bad[2])]


@pytest.mark.parametrize("door,bad", CASES,
                         ids=[f"{d}-{b[0]}={b[1]!r}" for d, b in CASES])
def test_a_bad_value_names_the_option_and_the_value(door, bad):
  make, spelling, _ = DOORS[door]
  name, value, extra, loss = bad
  label = spelling.label(name)
  if door in ("LinearSDCA", "SDCAOptimizer") and name in ("l1", "l2"):
    label = f"options['symmetric_{name}_regularization']"
  with pytest.raises(ValueError) as error:
    make(loss, dict(extra, **{name: value}))
  message = str(error.value)
  assert label in message and repr(value) in message, message


def test_every_door_accepts_every_default():
  defaults = {name: o.default for name, o in options.OPTIONS.items()}
  for door, (make, _, takes) in DOORS.items():
    make("logistic", {k: v for k, v in defaults.items() if k in takes})


def test_the_table_declares_each_option_once_with_a_valid_default():
  for name, option in options.OPTIONS.items():
    assert option.name == name
    assert option.valid(option.default), name
    assert option.modes and set(option.modes) <= set(options.MODES), name
  assert options.check("l2", 2) == 2.0 and isinstance(
      options.check("l2", 2), float)
  assert options.check("seed", np.int64(3)) == 3


@pytest.mark.parametrize("make", [_in_memory_sdca, _keras])
def test_asdca_needs_a_smooth_loss_on_every_in_memory_door(make):
  with pytest.raises(ValueError, match=r"smooth_hinge\), not hinge:"):
    make("hinge", {"visit_order": "asdca"})


@pytest.mark.parametrize("make", [_in_memory_sdca, _keras])
def test_momentum_does_not_combine_with_asdca_or_averaging(make):
  with pytest.raises(ValueError, match="'asdca' \\(accelerated already\\)"):
    make("logistic", {"momentum": 0.5, "visit_order": "asdca"})
  with pytest.raises(ValueError, match="does not combine with average_from"):
    make("logistic", {"momentum": 0.5, "average_from": 2})


@pytest.mark.parametrize("make", [_in_memory_sdca, _keras, _sdca_model])
def test_a_multiclass_option_with_a_binary_loss_names_both(make):
  # Each door names the losses as it takes them: SdcaModel's loss_type is
  # the op's name, the others' loss= the short one.
  names = (("multiclass_hinge_loss", "logistic_loss") if make is _sdca_model
           else ("multiclass_hinge", "logistic"))
  with pytest.raises(ValueError, match=r"'near_max_gain' is a block step of "
                     r"{}, not of {}$".format(*names)):
    make("logistic", {"hinge_step": "near_max_gain"})


def _data():
  rng = np.random.default_rng(0)
  x = rng.normal(size=(60, 3)).astype(np.float32)
  return x, (x[:, 0] > 0).astype(np.float32)


@pytest.mark.parametrize("values,runs", [
    ({"visit_order": "asdca"}, "needs the whole data set in memory"),
    ({"momentum": 0.5}, "momentum=0.5 runs in memory"),
])
def test_an_in_memory_option_on_a_stream_names_the_doors_that_run_it(
    values, runs):
  x, y = _data()
  ds = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(20)
  with pytest.raises(ValueError, match=runs) as error:
    LinearModel(**values).fit(ds, epochs=1, verbose=0)
  assert "InMemorySdca" in str(error.value)
  assert "not streamed (a tf.data.Dataset)" in str(error.value)
  if "visit_order" in values:  # SdcaModel streams: the same message
    with pytest.raises(ValueError, match=runs):
      _sdca_model("logistic", values)


def test_a_streamed_option_in_memory_names_the_doors_that_run_it():
  x, y = _data()
  with pytest.raises(ValueError, match=r"carry_over=0.5 runs streamed "
                     r"\(SdcaModel, SDCAOptimizer, the estimators or a "
                     r"keras.LinearModel fit on a tf.data.Dataset\), not in "
                     r"memory"):
    LinearModel(carry_over=0.5).fit(x, y, epochs=1, verbose=0)


@pytest.mark.parametrize("flags,named", [
    (["--momentum", "0.5"], "--momentum 0.5 runs in memory"),
    (["--average-from", "1"], "--average-from 1 runs in memory and streamed"),
    (["--visit-order", "asdca"], "--visit-order must be one of"),
])
def test_an_option_across_processes_is_refused_before_reading_data(
    flags, named, tmp_path, capsys):
  # The data file does not exist: the options are refused before it is
  # read.
  assert cli.main(["train", str(tmp_path / "missing.tsv"), "--model-dir",
                   str(tmp_path / "m"), "--local-cluster", "2", "--quiet",
                   *flags]) == 2
  err = capsys.readouterr().err
  assert named in err and "across processes" in err, err


FLAGS = [(o.flag, bad) for name, o in options.OPTIONS.items() if o.flag
         for bad in {"l1": ["-1", "nan"], "l2": ["0", "1e39", "x"],
                     "seed": ["-1", "1.5"], "num_threads": ["-1"],
                     "asdca_batch_size": ["0"], "asdca_theta": ["2"],
                     "momentum": ["1", "fast"], "average_from": ["-1"],
                     "tol": ["-1", "nan", "x"],
                     "visit_order": [], "hinge_step": []}[name]]


@pytest.mark.parametrize("flag,text", FLAGS)
def test_a_bad_flag_value_is_refused_by_the_table_before_reading_data(
    flag, text, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit_:
    cli.main(["train", str(tmp_path / "missing.tsv"), "--model-dir",
              str(tmp_path / "m"), flag, text])
  assert exit_.value.code == 2
  err = capsys.readouterr().err
  assert f"argument {flag}: {flag} must be" in err and text in err, err
  assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("values,named", [
    ({"average_from": 2}, "average_from=2 runs in memory and streamed"),
    ({"carry_over": 0.5}, "carry_over=0.5 runs streamed"),
    # Accepted and ignored across processes before (the same weights).
    ({"num_loss_partitions": 7}, "num_loss_partitions=7 runs streamed .*"
     "set sigma to the number of workers"),
    ({"visit_order": "cyclic"}, "visit_order='cyclic' runs in memory and "
     "streamed .*fresh random permutation"),
    ({"num_threads": 2}, "num_threads=2 runs in memory and streamed .*one "
     "thread"),
])
def test_an_estimator_across_processes_refuses_what_runs_in_one(
    values, named, tmp_path, monkeypatch):
  monkeypatch.setenv("TF_CONFIG", json.dumps(dict(
      cluster=dict(worker=["localhost:1", "localhost:2"]),
      task=dict(type="worker", index=0))))
  x, y = _data()
  classifier = estimator.LinearClassifier(
      [tf.feature_column.numeric_column("x", shape=3)],
      model_dir=str(tmp_path), optimizer=estimator.LinearSDCA(
          example_id_column="example_id", **values),
      config=estimator.RunConfig())
  with pytest.raises(ValueError, match=named) as error:
    classifier.train(lambda: ({"x": tf.constant(x), "example_id": tf.constant(
        np.arange(len(y)))}, tf.constant(y)), steps=1)
  assert "not across processes (a TF_CONFIG cluster)" in str(error.value)


@pytest.mark.parametrize("bad", [-1.0, float("nan"), "1e-3"])
def test_a_bad_tol_is_refused_by_fit(bad):
  x, y = _data()
  with pytest.raises(ValueError, match=f"tol must be None or a number >= 0, "
                     f"got {bad!r}"):
    InMemorySdca().fit(y, dense=x, tol=bad, verbose=0)


@pytest.mark.parametrize("flags,named", [
    (["--visit-order", "cyclic"], "--visit-order cyclic runs in memory and "
     "streamed"),
    (["--threads", "2"], "--threads 2 runs in memory and streamed"),
    (["--batch-size", "7"], "--batch-size 7 streams rows in one process"),
])
def test_the_command_line_across_processes_refuses_what_runs_in_one(
    flags, named, tmp_path, capsys):
  # They were accepted with --local-cluster and ignored (the same weights
  # as without them), where g3doc/defaults.md said they ran.
  data = tmp_path / "a.tsv"
  data.write_text("")
  code = cli.main(["train", str(data), str(data), "--model-dir",
                   str(tmp_path / "m"), "--local-cluster", "2", *flags])
  assert code != 0
  assert re.search(named, capsys.readouterr().err)
  assert not (tmp_path / "m" / "cocoa").exists()


def test_a_permutation_runs_across_processes():
  options.applies({"visit_order": "permutation", "num_threads": 1},
                  options.PROCESSES)


@pytest.mark.parametrize("values,named", [
    ({"num_loss_partitions": 5}, "num_loss_partitions=5 runs streamed"),
    ({"visit_order": "cyclic"}, "visit_order='cyclic' runs in memory"),
    ({"num_threads": 2}, "num_threads=2 runs in memory and streamed"),
])
def test_keras_across_processes_refuses_what_runs_in_one(values, named):
  # Under a MultiWorkerMirroredStrategy they were accepted and ignored
  # (num_loss_partitions was exempted from the one-replica check there).
  model = LinearModel(**values)
  with pytest.raises(ValueError, match=named + r".*not across processes "
                     r"\(the workers of a MultiWorkerMirroredStrategy\)"):
    model._training.check_mode(options.PROCESSES)  # pylint: disable=protected-access

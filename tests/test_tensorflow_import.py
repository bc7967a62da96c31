"""`tf-sdca train --quiet` in a new process imports only the TensorFlow it
uses (`tf_sdca.tensorflow_import.import_tensorflow_lazily`): a stand-in
`tensorflow` module whose names are imported on first use. What it trains
and says must be what the real import gives: the same model to the byte
over the training paths (Criteo and LIBSVM, mini-batches, parts,
ASDCA, the block step, multiclass, resume, an op's error), every name the
same object as the real module's, and the real import where the stand-in
lacks a name.
"""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from tf_sdca import cli, model_files
from tf_sdca.data import generate_criteo_arrays, write_criteo_tsv

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _python(script, *args):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  done = subprocess.run([sys.executable, "-c", script, *args],
                        capture_output=True, text=True, env=env, cwd=ROOT,
                        timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  return done.stdout


# Runs each `tf-sdca` command line of argv[1] (JSON) in one new process on
# the stand-in, as `train --quiet` does (`_start_tensorflow(lazily=True)`
# once, then each command with TensorFlow started), and prints, per
# command, its status, stdout and stderr, and at the end whether the
# stand-in was still the `tensorflow` module (no name fell back to the real
# import).
_LAUNCHER = """
import contextlib, io, json, sys
from tf_sdca import cli, tensorflow_import
assert "tensorflow" not in sys.modules
cli._start_tensorflow(lazily=True)
stand_in = sys.modules["tensorflow"]
cli._start_tensorflow_quietly = lambda lazily=False: None
results = []
for argv in json.loads(sys.argv[1]):
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    status = cli.main(argv)
  results.append([status, out.getvalue(), err.getvalue()])
print(json.dumps(dict(results=results,
                      stand_in=sys.modules["tensorflow"] is stand_in,
                      data_imported="tensorflow.python.data" in sys.modules)))
"""


def _model(model_dir):
  meta, state = model_files.load_model(str(model_dir))
  for entry in meta["history"]:
    entry.pop("rows_per_sec")
  return meta, state


@pytest.fixture(scope="module")
def files(tmp_path_factory):
  """A Criteo file (8,000 rows), a binary and a 3-class LIBSVM file
  (breast cancer, wine, standardised), and one with a label the op refuses
  for the Poisson loss (-1)."""
  from sklearn.datasets import load_breast_cancer, load_wine  # pylint: disable=import-outside-toplevel
  directory = tmp_path_factory.mktemp("lazy")
  out = dict(criteo=str(directory / "day.tsv"))
  write_criteo_tsv(out["criteo"], generate_criteo_arrays(8000, seed=3))
  for name, (x, y) in (("binary", load_breast_cancer(return_X_y=True)),
                       ("wine", load_wine(return_X_y=True))):
    x = (x - x.mean(0)) / x.std(0)
    out[name] = str(directory / f"{name}.svm")
    with open(out[name], "w") as f:
      for label, row in zip(y, x):
        items = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v)
        f.write(f"{label} {items}\n")
  out["bad"] = str(directory / "bad.svm")
  with open(out["binary"]) as f, open(out["bad"], "w") as g:
    g.write("-1" + f.read()[1:])  # (its first label is 0)
  return out


def _commands(files, root):
  """(model directory, argv) of the training paths compared."""
  criteo = [files["criteo"], "--bucket-bits", "12", "--quiet"]
  libsvm = [files["binary"], "--format", "libsvm", "--quiet"]
  plan = model_files.memory_plan("criteo", 8000, 26 * 8000, 2**12, None,
                                 1 << 50)
  budget = plan["kept"] + (plan["in_memory"] - plan["kept"]) // 3
  runs = {
      "criteo": criteo + ["--epochs", "3"],
      "batches": criteo + ["--epochs", "2", "--batch-size", "3000"],
      "parts": criteo + ["--epochs", "2", "--memory-budget", str(budget)],
      "asdca": libsvm + ["--epochs", "3", "--visit-order", "asdca"],
      "block step": libsvm + ["--epochs", "4", "--loss", "poisson",
                              "--l2", "0.1"],
      "hinge l1": libsvm + ["--epochs", "3", "--loss", "hinge", "--l1",
                            "0.5"],
      "softmax": [files["wine"], "--format", "libsvm", "--quiet",
                  "--loss", "softmax", "--num-classes", "3", "--epochs", "3"],
      "bad label": [files["bad"], "--format", "libsvm", "--quiet", "--loss",
                    "poisson", "--epochs", "1"],
  }
  out = [(name, ["train", *argv, "--model-dir", str(root / name)])
         for name, argv in runs.items()]
  out.append(("criteo", ["train", *criteo, "--epochs", "5", "--resume",
                         "--model-dir", str(root / "criteo")]))
  return out


def test_train_on_the_stand_in_writes_and_says_what_the_real_import_does(
    files, tmp_path, capsys):
  new = _commands(files, tmp_path / "new")
  old = _commands(files, tmp_path / "old")
  child = json.loads(_python(_LAUNCHER, json.dumps([a for _, a in new])))
  assert child["stand_in"] and not child["data_imported"]
  for (name, argv), (status, out, err) in zip(old, child["results"]):
    capsys.readouterr()
    expected = cli.main(argv)
    expected_out, expected_err = capsys.readouterr()
    assert (status, out.replace(str(tmp_path / "new"), str(
        tmp_path / "old")), err) == (expected, expected_out,
                                     expected_err), name
    assert (status == 2) == (name == "bad label"), name
    if status:  # the label's file and line, in one line
      assert err.startswith("tf-sdca train: error: ") and \
          ":1: the label -1 is not a count" in err and "Traceback" not in err
  for name in sorted({name for name, _ in old} - {"bad label"}):
    (new_meta, new_state), (old_meta, old_state) = (
        _model(tmp_path / "new" / name), _model(tmp_path / "old" / name))
    assert new_meta == old_meta, name
    assert new_state.keys() == old_state.keys(), name
    for key, value in old_state.items():
      assert np.asarray(new_state[key]).tobytes() == \
          np.asarray(value).tobytes(), (name, key)


def test_the_stand_in_names_are_the_real_modules_objects():
  names = ["constant", "reduce_sum", "name_scope", "float32", "int64",
           "Tensor", "__version__", "errors.InvalidArgumentError",
           "errors.OpError", "experimental.dlpack.from_dlpack",
           "math.is_finite", "linalg.cholesky", "nn.softplus",
           "raw_ops.SdcaOptimizerV2", "config.list_physical_devices",
           "autograph.experimental.do_not_convert", "function"]
  script = """
import json, sys
from tf_sdca import tensorflow_import
stand_in = tensorflow_import.import_tensorflow_lazily()
def get(module, name):
  for part in name.split("."):
    module = getattr(module, part)
  return module
lazy = {n: get(stand_in, n) for n in json.loads(sys.argv[1])}
was_stand_in = sys.modules["tensorflow"] is stand_in
progbar = stand_in.keras.utils.Progbar  # not in the API files: the real import
real = sys.modules["tensorflow"]
print(json.dumps(dict(
    was_stand_in=was_stand_in, real_after=real is not stand_in,
    # The real import's `tensorflow.experimental.numpy` wraps some ops for
    # numpy's dtype promotion (weak_tensor_ops): a wrapper that calls the op
    # as it is while that promotion is off (the default; no command sets it).
    same={n: lazy[n] is get(real, n) or (
        getattr(get(real, n), "__wrapped__", None) is lazy[n] and
        get(real, n).__code__.co_filename.endswith("weak_tensor_ops.py") and
        "weak") for n in lazy},
    promotion_off=not sys.modules[
        "tensorflow.python.framework.ops"].is_auto_dtype_conversion_enabled(),
    progbar=progbar is real.keras.utils.Progbar,
    real_import_is_tensorflow=tensorflow_import.import_tensorflow() is real,
    version=real.__version__)))
"""
  got = json.loads(_python(script, json.dumps(names)))
  assert got["was_stand_in"] and got["real_after"] and got["progbar"]
  assert got["real_import_is_tensorflow"]
  assert got["same"] == {n: "weak" if n in ("constant", "reduce_sum",
                                            "nn.softplus") else True
                         for n in names}
  assert got["promotion_off"]
  assert got["version"] == tf.__version__


def test_autograph_calls_the_op_loader_unconverted(capfd):
  from tf_sdca.ops import load_ops  # pylint: disable=import-outside-toplevel

  @tf.function
  def plus_one(x):
    load_ops()
    return x + 1

  assert float(plus_one(tf.constant(1.0))) == 2.0
  out, err = capfd.readouterr()
  assert "could not transform" not in out + err
  assert "do_not_convert" not in out + err


def test_plugins_where_tensorflow_loads_them_take_the_real_import(tmp_path):
  # TensorFlow's `__init__` loads the libraries in `tensorflow-plugins`
  # under each site-packages directory; the stand-in does not: with one
  # there (empty here), the real import runs.
  plugins = tmp_path / "site-packages" / "tensorflow-plugins"
  plugins.mkdir(parents=True)
  script = f"""
import sys
sys.path.append({str(tmp_path / "site-packages")!r})
from tf_sdca import tensorflow_import
tf = tensorflow_import.import_tensorflow_lazily()
print(type(tf).__name__, "tensorflow.python.data" in sys.modules,
      tf is sys.modules["tensorflow"])
"""
  assert _python(script).split() == ["module", "True", "True"]


def test_train_quiet_starts_tensorflow_lazily_and_without_banners(files,
                                                                  tmp_path):
  # A check added before TensorFlow's start (whether the model_dir was
  # trained across processes) imported the distributed rounds, which import
  # TensorFlow and Keras at once: the C++ banners came back on stderr and
  # the lazy start was gone.
  out = _python(
      "import contextlib, io, sys\n"
      "from tf_sdca import cli\n"
      "err = io.StringIO()\n"
      "status = cli.main(['train', sys.argv[1], '--model-dir', sys.argv[2],"
      " '--epochs', '1', '--quiet'])\n"
      "print(status, 'keras' in sys.modules, 'sklearn' in sys.modules)\n",
      files["criteo"], str(tmp_path / "m"))
  assert out.split()[-3:] == ["0", "False", "False"], out
  done = subprocess.run(
      [os.path.join(os.path.dirname(sys.executable), "tf-sdca"), "train",
       files["criteo"], "--model-dir", str(tmp_path / "m2"), "--epochs", "1",
       "--quiet"], capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-3000:]
  assert done.stderr == "", done.stderr

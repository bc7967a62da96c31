"""The command line never loses data, never trains a wrong model silently:
a matrix of bad or odd invocations, each a one-line error (exit 2) that
names the flag or the file, with the inputs left as they were.

(Bad option values on every door, the command line's flags included, are
in tests/test_options.py; --resume with conflicting options in
tests/test_cli_resume_conflicts.py.)
"""
import hashlib
import os

import pytest

from tf_sdca import cli


def _digest(path):
  return hashlib.sha256(open(path, "rb").read()).hexdigest()


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """(a Criteo-shaped TSV file, a model trained on it)."""
  root = tmp_path_factory.mktemp("matrix")
  data = str(root / "data")
  assert cli.main(["generate", "--out", data, "--rows", "2000"]) == 0
  tsv = os.path.join(data, "part-00000.tsv")
  model = str(root / "model")
  assert cli.main(["train", tsv, "--model-dir", model, "--epochs", "2",
                   "--bucket-bits", "12", "--quiet"]) == 0
  return tsv, model


def _fails(argv, capsys, *named):
  """Runs the command; asserts exit 2 and one error line naming `named`."""
  try:
    code = cli.main(argv)
  except SystemExit as exit_:  # argparse's refusals
    code = exit_.code
  err = capsys.readouterr().err.strip().splitlines()
  assert code == 2, (code, err)
  assert err and "error:" in err[-1], err
  assert "Traceback" not in "\n".join(err), err
  for word in named:
    assert word in err[-1], (word, err[-1])
  return err[-1]


def test_predict_never_writes_over_its_input(trained, tmp_path, capsys):
  tsv, model = trained
  copy = str(tmp_path / "in.tsv")
  with open(tsv, "rb") as src, open(copy, "wb") as dst:
    dst.write(src.read())
  before = _digest(copy)
  _fails(["predict", copy, "--model-dir", model, "--out", copy], capsys,
         "--out", "inputs")
  assert _digest(copy) == before
  meta = os.path.join(model, "model.json")
  before = _digest(meta)
  _fails(["predict", copy, "--model-dir", model, "--out", meta], capsys,
         "--out", model)
  assert _digest(meta) == before


def test_evaluate_on_an_empty_file_is_an_error_not_nan(trained, tmp_path,
                                                      capsys):
  _, model = trained
  empty = tmp_path / "empty.tsv"
  empty.write_text("")
  line = _fails(["evaluate", str(empty), "--model-dir", model], capsys,
                str(empty))
  assert "nan" not in line


def test_predict_on_an_empty_file_writes_its_empty_prediction(
    trained, tmp_path, capsys):
  # Unlike evaluate's metrics, the scores of no rows are defined: none.
  _, model = trained
  empty, out = tmp_path / "empty.tsv", tmp_path / "scores.txt"
  empty.write_text("")
  out.write_text("an earlier run's scores\n")
  assert cli.main(["predict", str(empty), "--model-dir", model, "--out",
                   str(out)]) == 0
  assert capsys.readouterr().out.endswith(f"wrote 0 scores to {out}\n")
  assert out.read_text() == ""
  # A multiclass model's: LIBLINEAR's header, no rows (it was numpy's
  # 'axis 1 is out of bounds for array of dimension 1').
  libsvm = tmp_path / "train.libsvm"
  libsvm.write_text("0 1:1\n2 2:1\n1 1:1 2:1\n")
  multiclass = str(tmp_path / "k")
  assert cli.main(["train", str(libsvm), "--format", "libsvm", "--loss",
                   "softmax", "--num-classes", "3", "--model-dir", multiclass,
                   "--epochs", "1", "--quiet"]) == 0
  empty_svm = tmp_path / "empty.libsvm"
  empty_svm.write_text("")
  capsys.readouterr()
  assert cli.main(["predict", str(empty_svm), "--model-dir", multiclass,
                   "--out", str(out)]) == 0
  assert capsys.readouterr().out.endswith(
      f"wrote 0 predictions to {out}\n")
  assert out.read_text() == "labels 0 1 2\n"
  # Class labels of 7 digits keep every digit in the header, as in the rows
  # (%g wrote 1234567 and 1234568 both as 1.23457e+06).
  wide = tmp_path / "wide.libsvm"
  wide.write_text("3 1:1\n1234567 2:1\n1234568 1:1 2:1\n")
  wide_model = str(tmp_path / "wide")
  assert cli.main(["train", str(wide), "--format", "libsvm", "--loss",
                   "softmax", "--num-classes", "3", "--model-dir", wide_model,
                   "--epochs", "1", "--quiet"]) == 0
  assert cli.main(["predict", str(wide), "--model-dir", wide_model,
                   "--out", str(out)]) == 0
  assert out.read_text().splitlines()[0] == "labels 3 1234567 1234568"


def test_export_into_an_unwritable_place_is_one_line(trained, tmp_path,
                                                     capsys):
  _, model = trained
  _fails(["export", "--model-dir", model, "--out",
          str(tmp_path / "missing" / "dir" / "saved")], capsys, "--out")
  blocked = tmp_path / "blocked"
  blocked.mkdir()
  blocked.chmod(0o500)
  try:
    if os.access(str(blocked), os.W_OK):  # root writes anywhere
      pytest.skip("running as a user who can write to a read-only folder")
    _fails(["export", "--model-dir", model, "--out",
            str(blocked / "saved")], capsys, "--out", "not writable")
  finally:
    blocked.chmod(0o700)


@pytest.mark.parametrize("flags,named", [
    (["--tol", "-1"], "--tol"),
    (["--tol", "nan"], "--tol"),
    (["--local-cluster", "0"], "--local-cluster"),
    (["--local-cluster", "1"], "--local-cluster"),
    (["--l2", "1e308"], "--l2"),
    (["--seed", "-1"], "--seed"),
    (["--epochs", "0"], "--epochs"),
])
def test_bad_flags_are_refused_before_any_data_is_read(flags, named,
                                                       tmp_path, capsys):
  # The data file does not exist: the refusal comes first.
  _fails(["train", str(tmp_path / "missing.tsv"), "--model-dir",
          str(tmp_path / "m"), *flags], capsys, named)
  assert not (tmp_path / "m").exists()


def test_a_missing_data_file_is_named(tmp_path, capsys):
  missing = str(tmp_path / "missing.tsv")
  _fails(["train", missing, "--model-dir", str(tmp_path / "m"), "--quiet"],
         capsys, missing)


@pytest.fixture
def small_memory(monkeypatch):
  """A machine whose memory holds the weights of 2^16 features."""
  from tf_sdca import model_files  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(model_files, "max_sparse_features",
                      lambda num_classes=1: 1 << 16)


def test_a_libsvm_index_past_the_memory_is_named_with_its_line(
    small_memory, tmp_path, capsys):
  data = tmp_path / "wide.libsvm"
  data.write_text("1 1:0.5 3:1\n0 2:1 70000:1\n")
  line = _fails(["train", str(data), "--format", "libsvm", "--model-dir",
                 str(tmp_path / "m"), "--quiet"], capsys,
                f"{data}:2", "70,000", "65,536")
  assert "memory" in line


def test_bucket_bits_past_the_memory_are_refused_before_anything(
    small_memory, tmp_path, capsys):
  _fails(["train", str(tmp_path / "missing.tsv"), "--model-dir",
          str(tmp_path / "m"), "--bucket-bits", "17"], capsys,
         "--bucket-bits 17", "at most --bucket-bits 16")
  assert not (tmp_path / "m").exists()


@pytest.mark.parametrize("text,named", [
    ("1 1:0.5\n0 2:1e40\n", ":2: '2:1e40'"),
    ("1 1:0.5\n0 99999999999:1\n", ":2: '99999999999:1'"),
])
def test_bad_libsvm_values_and_indices_name_the_line(text, named, tmp_path,
                                                     capsys):
  data = tmp_path / "bad.libsvm"
  data.write_text(text)
  _fails(["train", str(data), "--format", "libsvm", "--model-dir",
          str(tmp_path / "m"), "--quiet"], capsys, str(data) + named)


def test_a_truncated_gzip_is_one_line_naming_the_file(trained, tmp_path,
                                                      capsys):
  import gzip  # pylint: disable=import-outside-toplevel
  tsv, _ = trained
  whole = gzip.compress(open(tsv, "rb").read())
  cut = tmp_path / "cut.tsv.gz"
  cut.write_bytes(whole[:len(whole) // 2])
  _fails(["train", str(cut), "--model-dir", str(tmp_path / "m"), "--quiet"],
         capsys, str(cut), "truncated")


def test_a_label_outside_the_loss_names_its_file_and_line(tmp_path, capsys):
  # The op names the row of the rows read (example_labels[2]); the row of
  # the second file after a blank line and a comment is its line 4.
  first, second = tmp_path / "a.libsvm", tmp_path / "b.libsvm"
  first.write_text("1 1:1\n0 2:1\n")
  second.write_text("2 1:1\n\n# note\n-1 2:1\n3 1:2\n")
  _fails(["train", str(first), str(second), "--format", "libsvm", "--loss",
          "poisson", "--model-dir", str(tmp_path / "p"), "--quiet"], capsys,
         f"{second}:4: the label -1 is not a count (>= 0)")
  # A multiclass model resumed on a label none of its classes.
  model = str(tmp_path / "k")
  assert cli.main(["train", str(first), "--format", "libsvm", "--loss",
                   "softmax", "--num-classes", "2", "--model-dir", model,
                   "--epochs", "2", "--quiet"]) == 0
  other = tmp_path / "c.libsvm"
  other.write_text("0 1:1\n# c\n5 2:1\n")
  _fails(["train", str(other), "--format", "libsvm", "--loss", "softmax",
          "--num-classes", "2", "--model-dir", model, "--resume", "--quiet"],
         capsys, f"{other}:3: the label 5 is none of the model's classes")


def test_evaluate_refuses_a_label_outside_the_loss_by_file_and_line(
    tmp_path, capsys):
  # A Poisson count < 0 gave 'mse ...', exit 0, though train refuses it.
  first, second = tmp_path / "a.libsvm", tmp_path / "b.libsvm"
  first.write_text("1 1:1\n0 2:1\n")
  model = str(tmp_path / "p")
  assert cli.main(["train", str(first), "--format", "libsvm", "--loss",
                   "poisson", "--model-dir", model, "--epochs", "2",
                   "--quiet"]) == 0
  second.write_text("2 1:1\n\n# note\n-1 2:1\n3 1:2\n")
  capsys.readouterr()
  _fails(["evaluate", str(first), str(second), "--model-dir", model], capsys,
         f"{second}:4: the label -1 is not a count (>= 0) for Poisson")
  # Past the first chunk (65,536 rows) of the reading, its line still.
  big = tmp_path / "big.libsvm"
  big.write_text("1 1:1\n" * 70000 + "-3 2:1\n")
  _fails(["evaluate", str(big), "--model-dir", model], capsys,
         f"{big}:70001: the label -3 is not a count (>= 0) for Poisson")
  assert cli.main(["evaluate", str(first), "--model-dir", model]) == 0
  assert capsys.readouterr().out.startswith("rows 2\nmse ")
  # A multiclass model's label none of its classes: its line, not its row
  # in the reader's chunk ('label 7 (row 1)').
  labelled = tmp_path / "k.libsvm"
  labelled.write_text("1 1:1\n5 2:1\n9 1:1 2:1\n")
  multiclass = str(tmp_path / "k")
  assert cli.main(["train", str(labelled), "--format", "libsvm", "--loss",
                   "softmax", "--num-classes", "3", "--model-dir",
                   multiclass, "--epochs", "1", "--quiet"]) == 0
  unknown = tmp_path / "u.libsvm"
  unknown.write_text("1 1:1\n\n7 2:1\n")
  _fails(["evaluate", str(unknown), "--model-dir", multiclass], capsys,
         f"{unknown}:3: the label 7 is none of the model's classes "
         "(1, 5, 9)")


def test_generate_replaces_an_earlier_generate_s_part_files(tmp_path,
                                                          capsys):
  out = str(tmp_path / "g")
  assert cli.main(["generate", "--out", out, "--rows", "40", "--files",
                   "4"]) == 0
  assert cli.main(["generate", "--out", out, "--rows", "30", "--files",
                   "2"]) == 0
  assert "removed 2 part file(s)" in capsys.readouterr().out
  parts = sorted(f for f in os.listdir(out) if f.startswith("part-"))
  assert parts == ["part-00000.tsv", "part-00001.tsv"]
  lines = sum(len(open(os.path.join(out, f)).read().splitlines())
              for f in parts)
  assert lines == 30  # what truth.npy describes
  import numpy as np  # pylint: disable=import-outside-toplevel
  assert np.load(os.path.join(out, "truth.npy")).shape == (30,)


def test_demo_prints_its_real_split(capsys):
  assert cli.main(["demo", "--rows", "15", "--epochs", "2", "--quiet"]) == 0
  out = capsys.readouterr().out
  assert "Training on 7 files (14 rows, 93%), holding out part-00007.tsv " \
         "(1 row(s))" in out
  assert "rows: 14 train / 1 test" in out

"""`tf-sdca export`: a SavedModel that scores raw Criteo / LIBSVM lines,
loaded in a process that never imported tf_sdca (one for the module), gives
the scores of `tf-sdca predict` (parsing, hashing, scaling, intercept, L1
shrink and activation all inside the SavedModel); bad lines are flagged,
not fatal."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from tf_sdca import cli
from tf_sdca.data import generate_criteo_arrays, write_criteo_tsv
from tf_sdca.data import text_parser

_SERVE = """
import json, sys, traceback
import numpy as np
import tensorflow as tf
for request in sys.stdin:
  try:
    assert "tf_sdca" not in sys.modules
    saved, lines_path, out_path = json.loads(request)
    lines = json.load(open(lines_path))
    out = tf.saved_model.load(saved).signatures["serving_default"](
        lines=tf.constant(lines))
    json.dump({k: v.numpy().tolist() for k, v in out.items()},
              open(out_path, "w"))
    print("ok", flush=True)
  except Exception:  # the test's assertion shows it
    print(json.dumps(traceback.format_exc()), flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory):
  """One process without tf_sdca (each start of TensorFlow costs ~5 s)
  that loads each test's SavedModel afresh and serves its lines."""
  tmp = tmp_path_factory.mktemp("server")
  script = tmp / "serve.py"
  script.write_text(_SERVE)
  env = dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="3")
  with open(tmp / "stderr.txt", "w") as err:
    child = subprocess.Popen(
        [sys.executable, str(script)], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=err, text=True, env=env, cwd=str(tmp))
  yield child, tmp / "stderr.txt"
  child.stdin.close()
  child.wait(timeout=60)


def _served(server, tmp_path, saved_model, lines):
  """Scores of `lines` from the SavedModel, in the process without
  tf_sdca."""
  child, stderr = server
  (tmp_path / "lines.json").write_text(json.dumps(lines))
  child.stdin.write(json.dumps([saved_model, str(tmp_path / "lines.json"),
                                str(tmp_path / "out.json")]) + "\n")
  child.stdin.flush()
  reply = child.stdout.readline().strip()
  assert reply == "ok", (json.loads(reply) if reply else
                         stderr.read_text()[-3000:])
  return json.loads((tmp_path / "out.json").read_text())


def _predicted(tmp_path, data, model_dir, *extra):
  out = str(tmp_path / "scores.txt")
  assert cli.main(["predict", data, "--model-dir", model_dir, "--out", out,
                   *extra]) == 0
  return np.loadtxt(out)


def test_criteo_model_scores_raw_lines_like_predict(tmp_path, server):
  data = str(tmp_path / "day.tsv")
  write_criteo_tsv(data, generate_criteo_arrays(3000, seed=5))
  model_dir = str(tmp_path / "model")
  assert cli.main(["train", data, "--model-dir", model_dir, "--epochs", "3",
                   "--bucket-bits", "14", "--l1", "0.5", "--quiet"]) == 0
  saved = str(tmp_path / "served")
  assert cli.main(["export", "--model-dir", model_dir, "--out", saved]) == 0
  with open(data) as f:
    lines = f.read().splitlines()[:200]
  expected = _predicted(tmp_path, data, model_dir)[:200]
  # The same lines without their label field, and two bad ones.
  unlabeled = [line.split("\t", 1)[1] for line in lines[:50]]
  # A count of a bare '-' (once past the line check, it failed the whole
  # batch in decode_csv).
  minus = lines[0].split("\t")
  minus[1] = "-"
  # A '\r' anywhere in a line, not only a CRLF end's: training's reader
  # drops every one (as TextLineDataset did), and serving, which called
  # such a line bad, now scores it as the model read it.
  fields = lines[5].split("\t")
  fields[2] = fields[2][:1] + "\r" + fields[2][1:]  # "1\t3\t\r5" and the like
  fields[20] = "\r" + fields[20] + "\r"
  # A line as readlines() gives it, with its '\n' or '\r\n' end: it was
  # invalid, where the LIBSVM model scores it.
  carried = ["\t".join(fields), "\r" + lines[6], lines[7] + "\r",
             lines[8][:9] + "\r\r" + lines[8][9:], lines[9] + "\n",
             lines[10] + "\r\n"]
  assert all(line.replace("\r", "").replace("\n", "") == plain
             for line, plain in zip(carried, lines[5:11]))
  # Blank lines (whitespace only, '\r' dropped), which training's reader
  # and predict skip: 38 tabs, a label-less line of empty fields, scored
  # as one (the others were bad lines already).
  blank = ["", "\t" * 38, "\t" * 38 + "\r", " ", " \r\n"]
  for line in blank:  # (the reader's own verdict: no row, no bad line)
    parsed = text_parser.parse_criteo((line + "\n").encode(), 14)
    assert len(parsed["labels"]) == len(parsed["bad_lines"]) == 0, repr(line)
  bad = ["1\tx", "\t".join(minus)] + blank
  out = _served(server, tmp_path, saved, lines + unlabeled + bad + carried)
  served_carried = {key: value[-len(carried):] for key, value in out.items()}
  out = {key: value[:-len(carried)] for key, value in out.items()}
  scores = np.asarray(out["scores"])
  np.testing.assert_allclose(scores[:200], expected, rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(scores[200:250], expected[:50], rtol=1e-6,
                             atol=1e-9)
  assert out["valid"] == [True] * 250 + [False] * len(bad)
  assert np.isnan(scores[250:]).all()
  assert 0 < scores[:200].min() and scores[:200].max() < 1  # probabilities
  cr_file = tmp_path / "cr.tsv"
  with open(cr_file, "w", newline="") as f:
    f.write("\n".join(carried) + "\n")
  np.testing.assert_array_equal(_predicted(tmp_path, str(cr_file), model_dir),
                                expected[5:11])
  assert served_carried["valid"] == [True] * 6
  np.testing.assert_allclose(served_carried["scores"], expected[5:11],
                             rtol=1e-6, atol=1e-9)
  # An existing --out is refused.
  assert cli.main(["export", "--model-dir", model_dir, "--out", saved]) == 2


@pytest.mark.parametrize("loss", ["logistic", "squared"])
def test_libsvm_model_scores_raw_lines_like_predict(tmp_path, loss, server):
  x, y = load_breast_cancer(return_X_y=True)
  x = x[:, :12]  # natural units: values up to ~2,500
  data = str(tmp_path / "bc.libsvm")
  with open(data, "w") as f:
    for label, row in zip(y, x):
      items = " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row)
                       if v != 0)
      f.write(f"{label:g} {items}\n")
  model_dir = str(tmp_path / "model")
  assert cli.main(["train", data, "--format", "libsvm", "--model-dir",
                   model_dir, "--loss", loss, "--epochs", "3", "--l2",
                   "100", "--quiet"]) == 0
  saved = str(tmp_path / "served")
  assert cli.main(["export", "--model-dir", model_dir, "--out", saved]) == 0
  with open(data) as f:
    lines = f.read().splitlines()
  expected = _predicted(tmp_path, data, model_dir, "--format", "libsvm")
  # Label-less lines, a comment, a feature unseen in training (dropped, as
  # predict drops it) and bad lines.
  # A qid token after the label (or first, label-less) is skipped as the
  # reader skips it; "qid" elsewhere is a bad feature.
  label, rest = lines[3].split(" ", 1)
  # Lines the readers refuse are bad lines here too: an index repeated or
  # decreasing, a value or label past float32 (1e39).
  extra = [lines[0].split(" ", 1)[1], lines[1] + " # note",
           lines[2] + " 99:5", f"{label} qid:17 {rest}", f"qid:2 {rest}",
           "1 3:x", "1 0:2", f"{label} {rest} qid:3", "1 2:1 2:1",
           "1 3:1 2:1", "1 2:1e39", "1e39 2:1", "1 2:1 3:-1e39"]
  # '\r': training's reader ends a line there as at '\n' ("\r\n" one
  # end). One line end at the end, as `readlines()` keeps it (or a CRLF
  # end's '\r' left on a line split at '\n'), is the line's end; a line
  # holding another '\r' (or a '\n') is two lines to the reader, so bad
  # here (it was scored as one line with both halves' features).
  label2, first, rest2 = lines[2].split(" ", 2)
  ends = [lines[0] + "\r", lines[1] + "\n", lines[2] + "\r\n", lines[3]]
  split = [f"{lines[0]}\r{lines[1]}", f"{label2} {first}\r{rest2}",
           f"{label2} {first} \r {rest2}", "\r" + lines[3],
           lines[4] + "\r\r", f"{label2} {first}\n{rest2}",
           f"{lines[5]} # a\rb"]
  # Blank lines (whitespace, a comment), which the reader and predict
  # skip, are invalid.
  blank = ["", " \t ", "# a comment", "\r\n", " # 1 2:1"]
  # The separators \x1c-\x1f are whitespace to the reader (str.split's),
  # not to TensorFlow's split: these are lines 0 and 1, valid.
  separators = [lines[0].replace(" ", "\x1c"),
                "\x1f" + lines[1].replace(" ", " \x1d", 1) + "\x1e"]
  out = _served(server, tmp_path, saved,
                lines + extra + ends + split + blank + separators)
  served_separators = {key: value[-len(separators):]
                       for key, value in out.items()}
  out = {key: value[:-len(separators)] for key, value in out.items()}
  assert served_separators["valid"] == [True, True]
  np.testing.assert_allclose(served_separators["scores"], expected[:2],
                             rtol=1e-6, atol=1e-9)
  for line, plain in zip(separators, lines):  # (the reader's own verdict)
    parsed = text_parser.parse_libsvm((line + "\n").encode())
    reference = text_parser.parse_libsvm((plain + "\n").encode())
    for key in ("labels", "indices", "values"):
      np.testing.assert_array_equal(parsed[key], reference[key])
  line_ends = {key: value[len(lines) + len(extra):]
               for key, value in out.items()}
  out = {key: value[:len(lines) + len(extra)] for key, value in out.items()}
  scores = np.asarray(out["scores"])
  n = len(lines)
  np.testing.assert_allclose(scores[:n], expected, rtol=1e-6, atol=1e-9)
  np.testing.assert_allclose(scores[n:n + 5], expected[[0, 1, 2, 3, 3]],
                             rtol=1e-6, atol=1e-9)
  assert out["valid"][n:] == [True] * 5 + [False] * 8
  assert np.isnan(scores[n + 5:]).all()
  for bad in extra[-5:]:  # (the reader's own verdict on each)
    path = tmp_path / "bad.libsvm"
    path.write_text(bad + "\n")
    assert cli.main(["predict", str(path), "--model-dir", model_dir,
                     "--format", "libsvm", "--out",
                     str(tmp_path / "bad.txt")]) != 0
  # predict reads a CRLF file as the plain one.
  crlf = tmp_path / "crlf.libsvm"
  crlf.write_bytes("".join(line + "\r\n" for line in lines[:4]).encode())
  np.testing.assert_array_equal(
      _predicted(tmp_path, str(crlf), model_dir, "--format", "libsvm"),
      expected[:4])
  for line in split:  # (the reader's own verdict: two lines)
    assert text_parser.parse_libsvm(
        (line + "\n").encode())["num_lines"] == 2, repr(line)
  for line in blank:  # (the reader's own verdict: no row, no bad line)
    parsed = text_parser.parse_libsvm((line + "\n").encode())
    assert len(parsed["labels"]) == len(parsed["bad_lines"]) == 0, repr(line)
  assert line_ends["valid"] == [True] * 4 + [False] * (len(split) +
                                                      len(blank))
  np.testing.assert_allclose(line_ends["scores"][:4], expected[:4],
                             rtol=1e-6, atol=1e-9)
  assert np.isnan(line_ends["scores"][4:]).all()

"""Criteo and LIBSVM readers, the binary cache, and the train / evaluate /
predict / generate commands with checkpoints and --resume."""
import contextlib
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile

import numpy as np
import pytest
import scipy.sparse
import tensorflow as tf

import interruptions
from interruptions import interrupted_after_epoch
from tf_sdca import cli
from tf_sdca import metrics
from tf_sdca.data import cache, criteo, libsvm
from tf_sdca.data import category_token, generate_criteo_arrays
from tf_sdca.data import write_criteo_tsv
from tf_sdca.ops import sdca_ops


def _expected_ids(values, bits):
  """The documented hash, from the raw values (not through the parser)."""
  n, fields = values.shape
  tokens = np.array([[("" if values[r, j] < 0 else
                       f"{int(category_token(j, values[r, j])):08x}")
                      for j in range(fields)] for r in range(n)])
  h = tf.strings.to_hash_bucket_fast(tokens, 2**62).numpy()
  offsets = tf.strings.to_hash_bucket_fast(
      [f"C{j + 1}" for j in range(fields)], 2**62).numpy()
  return (h + offsets) % (1 << bits)


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
  data = generate_criteo_arrays(3000, seed=3)
  path = str(tmp_path_factory.mktemp("criteo") / "day.tsv")
  write_criteo_tsv(path, data)
  return path, data


def test_criteo_round_trip(criteo_file):
  path, data = criteo_file
  chunks = list(criteo.read_criteo([path], batch_size=1000, bucket_bits=18))
  assert [c["labels"].shape[0] for c in chunks] == [1000, 1000, 1000]
  labels = np.concatenate([c["labels"] for c in chunks])
  dense = np.concatenate([c["dense"] for c in chunks])
  ids = np.concatenate([c["ids"] for c in chunks])
  np.testing.assert_array_equal(labels, data["labels"])
  # log1p of the counts, 0 where missing (the generator's dense features).
  np.testing.assert_allclose(dense, data["dense"], rtol=1e-6, atol=1e-6)
  np.testing.assert_array_equal(ids[:300], _expected_ids(
      data["cat_values"][:300], 18))
  assert ids.min() >= 0 and ids.max() < 2**18
  # Missing values of a field share one bucket, different per field.
  missing = data["cat_values"] < 0
  for j in range(3):
    assert len(set(ids[missing[:, j], j])) == 1
  # The same ids in another process.
  code = (f"import os; os.environ['TF_CPP_MIN_LOG_LEVEL']='3'\n"
          f"from tf_sdca.data import criteo\nimport numpy as np\n"
          f"c = list(criteo.read_criteo([{path!r}], bucket_bits=18))\n"
          f"print(int(np.concatenate([x['ids'] for x in c]).sum()))")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True).stdout.split()[-1]
  assert int(out) == int(ids.sum())


def _bad_criteo_file(tmp_path, good_line):
  fields = good_line.split("\t")
  lines = [good_line] * 10
  lines[2] = "\t".join(fields[:39])                          # 39 fields
  lines[4] = "\t".join(fields[:3] + ["12x"] + fields[4:])    # I3
  lines[6] = "\t".join(fields[:20] + ["zz12"] + fields[21:])  # C7
  lines[8] = "\t".join(["2"] + fields[1:])                   # label
  path = tmp_path / "bad.tsv"
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def test_malformed_criteo_lines_name_file_and_line(criteo_file, tmp_path):
  path, _ = criteo_file
  with open(path) as f:
    good = f.readline().rstrip("\n")
  bad = _bad_criteo_file(tmp_path, good)
  with pytest.raises(ValueError, match=rf"{bad}:3: expected 40 tab-separated "
                     "fields, got 39"):
    list(criteo.read_criteo([bad]))
  counter = criteo.BadLines()
  chunks = list(criteo.read_criteo([bad], skip_bad_lines=True,
                                   bad_lines=counter))
  assert sum(c["labels"].shape[0] for c in chunks) == 6
  assert counter.count == 4
  assert counter.first[1].startswith(f"{bad}:5: I3 is not a decimal integer "
                                     "(field 4)")
  assert counter.first[2].startswith(f"{bad}:7: C7 is not a hex string "
                                     "(field 21)")
  assert counter.first[3].startswith(f"{bad}:9: the label must be 0 or 1")


def _write_libsvm(path, labels, x):
  with open(path, "w") as f:
    for label, row in zip(labels, x):
      items = " ".join(f"{j + 1}:{v:.6g}" for j, v in
                       zip(row.indices, row.data))
      f.write(f"{label:g} {items}  # row\n".replace("  #", " #"))


def test_libsvm_round_trip_and_errors(tmp_path):
  rng = np.random.default_rng(4)
  x = scipy.sparse.random(500, 40, density=0.1, random_state=5,
                          format="csr", dtype=np.float32)
  x.data = np.round(x.data, 4)
  labels = rng.choice([-1.0, 1.0], 500)
  path = str(tmp_path / "a.svm")
  _write_libsvm(path, labels, x)
  chunks = list(libsvm.read_libsvm([path], chunk_rows=200))
  assert [c["labels"].shape[0] for c in chunks] == [200, 200, 100]
  lengths = np.concatenate([np.diff(c["indptr"]) for c in chunks])
  back = scipy.sparse.csr_matrix(
      (np.concatenate([c["values"] for c in chunks]),
       np.concatenate([c["indices"] for c in chunks]),
       np.concatenate([[0], np.cumsum(lengths)])), shape=(500, 40))
  np.testing.assert_allclose(back.toarray(), x.toarray(), rtol=1e-6)
  np.testing.assert_array_equal(
      np.concatenate([c["labels"] for c in chunks]), labels)
  bad = tmp_path / "bad.svm"
  bad.write_text("1 1:0.5 3:1\n-1 2:x\n1 4:1 2:1\nyes 1:1\n\n1 1:2\n")
  with pytest.raises(ValueError, match=rf"{bad}:2: '2:x' \(feature 1\) is "
                     "not index:value"):
    list(libsvm.read_libsvm([str(bad)]))
  counter = criteo.BadLines()
  rows = list(libsvm.read_libsvm([str(bad)], skip_bad_lines=True,
                                 bad_lines=counter))
  assert rows[0]["labels"].tolist() == [1.0, 1.0] and counter.count == 3
  assert "bad.svm:3:" in counter.first[1] and "increasing" in counter.first[1]
  assert "bad.svm:4: the label 'yes' is not a number" in counter.first[2]
  (element,) = list(libsvm.libsvm_dataset([str(bad)], skip_bad_lines=True))
  np.testing.assert_array_equal(element["indices"].numpy(), [0, 2, 0])


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_rows_per_chunk_below_one_are_refused(criteo_file, tmp_path, bad):
  # chunk_rows=0 yielded empty chunks without end (list() never returned).
  path = tmp_path / "ok.svm"
  path.write_text("1 1:0.5 3:1\n0 2:1\n")
  with pytest.raises(ValueError, match=r"chunk_rows must be an integer >= "
                     rf"1 \(rows per chunk\), got {re.escape(repr(bad))}"):
    list(libsvm.read_libsvm([str(path)], chunk_rows=bad))
  with pytest.raises(ValueError, match=r"batch_size must be an integer >= "
                     rf"1 \(rows per chunk\), got {re.escape(repr(bad))}"):
    list(criteo.read_criteo([criteo_file], batch_size=bad))
  (chunk,) = list(libsvm.read_libsvm([str(path)], chunk_rows=2))
  assert chunk["labels"].tolist() == [1.0, 0.0]


def test_cache_is_reused_and_rebuilt_when_the_source_changes(criteo_file,
                                                             tmp_path):
  path, data = criteo_file
  cache_dir = str(tmp_path / "cache")
  arrays, info = cache.load_or_build([path], "criteo", cache_dir,
                                     bucket_bits=16, verbose=0)
  assert info["rows"] == 3000
  np.testing.assert_array_equal(cache.concatenate(arrays["labels"]),
                                data["labels"])
  assert isinstance(arrays["ids"][0], np.memmap)
  assert arrays["ids"][0].dtype == np.int32
  parts = sorted(os.listdir(cache_dir))
  stamps = [os.stat(os.path.join(cache_dir, p)).st_mtime_ns for p in parts]
  again, info2 = cache.load_or_build([path], "criteo", cache_dir,
                                     bucket_bits=16, verbose=0)
  assert info2 == info
  assert [os.stat(os.path.join(cache_dir, p)).st_mtime_ns
          for p in parts] == stamps  # not rewritten
  np.testing.assert_array_equal(cache.concatenate(again["ids"]),
                                cache.concatenate(arrays["ids"]))
  # Other options or a changed source rebuild it.
  _, info3 = cache.load_or_build([path], "criteo", cache_dir,
                                 bucket_bits=17, verbose=0)
  assert info3["bucket_bits"] == 17


@pytest.fixture(scope="module")
def generated(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("gen"))
  assert cli.main(["generate", "--rows", "24000", "--out", out, "--files",
                   "2", "--seed", "1"]) == 0
  return out


def _train(data, model_dir, *extra):
  return cli.main(["train", data, "--model-dir", model_dir, "--epochs", "4",
                   "--tol", "1e-12", "--bucket-bits", "16", "--quiet",
                   *extra])


def _train_interrupted(epochs, data, model_dir, *extra):
  """`train` stopped ("Ctrl-C") right after epoch `epochs`' save, then
  `train --resume`; returns both exit codes."""
  with interrupted_after_epoch(epochs):
    stopped = _train(data, model_dir, *extra)
  return stopped, _train(data, model_dir, *extra, "--resume")


def test_cli_generate_train_evaluate_predict(generated, tmp_path, capsys):
  files = sorted(f for f in os.listdir(generated) if f.endswith(".tsv"))
  assert files == ["part-00000.tsv", "part-00001.tsv"]
  train_file, test_file = (os.path.join(generated, f) for f in files)
  with open(train_file) as f:
    assert sum(1 for _ in f) == 12000
  model_dir = str(tmp_path / "model")
  assert _train(train_file, model_dir) == 0
  meta = json.loads((tmp_path / "model" / "model.json").read_text())
  gaps = [h["duality_gap"] for h in meta["history"]]
  assert len(gaps) == 4 and gaps[-1] < gaps[0]
  capsys.readouterr()
  assert cli.main(["evaluate", test_file, "--model-dir", model_dir]) == 0
  printed = dict(line.split() for line in capsys.readouterr().out.splitlines())
  truth = np.load(os.path.join(generated, "truth.npy"))[12000:]
  labels = np.concatenate([c["labels"] for c in criteo.read_criteo(
      [test_file], bucket_bits=16)])
  assert int(printed["rows"].replace(",", "")) == 12000
  # Better than predicting the click rate everywhere, and most of the way
  # to the ground truth (0.90 here) from 12k rows and 2^16 buckets.
  base = metrics.log_loss(labels, np.full(labels.shape, labels.mean()))
  assert float(printed["log_loss"]) < base - 0.05
  assert 0.78 < float(printed["auc"]) < metrics.auc(labels, truth)
  out = str(tmp_path / "scores.txt")
  assert cli.main(["predict", test_file, "--model-dir", model_dir, "--out",
                   out]) == 0
  scores = np.loadtxt(out)
  assert scores.shape == (12000,) and np.all((scores > 0) & (scores < 1))
  assert metrics.log_loss(labels, scores) == pytest.approx(
      float(printed["log_loss"]), abs=1e-6)
  # A second train into the same directory must be explicit.
  assert _train(train_file, model_dir) == 2
  assert "already has a model" in capsys.readouterr().err


def test_interrupted_training_resumes_to_the_uninterrupted_model(
    generated, tmp_path):
  data = os.path.join(generated, "part-00000.tsv")
  whole = str(tmp_path / "whole")
  assert _train(data, whole) == 0
  parts = str(tmp_path / "parts")
  with interrupted_after_epoch(2):
    assert _train(data, parts) == 130  # "Ctrl-C" right after epoch 2's save
  with np.load(os.path.join(parts, "checkpoint.npz")) as ckpt:
    assert int(ckpt["epoch"]) == 2
  assert _train(data, parts, "--resume") == 0
  with np.load(os.path.join(whole, "checkpoint.npz")) as a, \
      np.load(os.path.join(parts, "checkpoint.npz")) as b:
    assert int(a["epoch"]) == int(b["epoch"]) == 4
    for key in ("sparse_weights", "dense_weights", "duals"):
      np.testing.assert_array_equal(a[key], b[key])


def test_train_packs_the_rows_by_default(generated, tmp_path, monkeypatch):
  """Plain `train` packs the rows once, from the cache part by part
  (TfSdca>NewPackedRows, then TfSdca>AppendRows per part), and runs every
  epoch, and the exact gap after it, through PackedSolve."""
  data = os.path.join(generated, "part-00000.tsv")
  calls = {"new_packed_rows": 0, "append_rows": 0, "packed_solve": 0}
  for name in calls:
    def counted(*args, _op=getattr(sdca_ops, name), _name=name, **kwargs):
      calls[_name] += 1
      return _op(*args, **kwargs)
    monkeypatch.setattr(sdca_ops, name, counted)
  assert _train(data, str(tmp_path / "default")) == 0
  manifest = json.loads(open(os.path.join(tmp_path, "default", "cache",
                                          "manifest.json")).read())
  # One reservation, one append per cache part; per epoch one solve and
  # one exact gap (4 epochs).
  assert calls == {"new_packed_rows": 1,
                   "append_rows": len(manifest["chunks"]),
                   "packed_solve": 8}


def test_two_threads_resume_close_to_one_thread(generated, tmp_path):
  """`train --pack --threads 2` (lock-free threads), interrupted and
  resumed, ends near the one-thread model: same epochs, the same gap to
  within a factor 3, weights within a few percent (not bit for bit: the
  threads' order of adds varies)."""
  data = os.path.join(generated, "part-00000.tsv")
  one = str(tmp_path / "one")
  assert _train(data, one, "--pack") == 0
  two = str(tmp_path / "two")
  assert _train_interrupted(2, data, two, "--pack", "--threads",
                            "2") == (130, 0)
  gaps = []
  for model_dir in (one, two):
    meta = json.loads(open(os.path.join(model_dir, "model.json")).read())
    gaps.append(meta["history"][-1]["duality_gap"])
  assert 0 < gaps[1] < 3 * gaps[0] and 0 < gaps[0] < 3 * gaps[1], gaps
  with np.load(os.path.join(one, "checkpoint.npz")) as a, \
      np.load(os.path.join(two, "checkpoint.npz")) as b:
    assert int(a["epoch"]) == int(b["epoch"]) == 4
    for key in ("sparse_weights", "dense_weights", "duals"):
      diff = np.linalg.norm(a[key] - b[key]) / np.linalg.norm(a[key])
      assert diff < 0.05, (key, diff)


def test_cli_reports_bad_lines_or_skips_them(criteo_file, tmp_path, capsys):
  path, _ = criteo_file
  with open(path) as f:
    good = f.readline().rstrip("\n")
  bad = _bad_criteo_file(tmp_path, good)
  model_dir = str(tmp_path / "m")
  assert _train(bad, model_dir) == 2
  assert f"{bad}:3: expected 40 tab-separated fields" in capsys.readouterr().err
  assert _train(bad, model_dir, "--skip-bad-lines") == 0
  assert "skipped 4 malformed line(s)" in capsys.readouterr().out


@pytest.mark.parametrize("make,extra,message", [
    (lambda d: _write(d, "empty.svm", ""), (), r"no rows to train on in"),
    (lambda d: _write(d, "comments.svm", "# a comment\n"), (),
     r"no rows to train on in"),
    (lambda d: _write(d, "bad.svm", "1 1:x\nfoo\n"), ("--skip-bad-lines",),
     r"every line was malformed"),
    (lambda d: _mkdir(d, "a_directory"), (), r"Is a directory"),
    (lambda d: _write(d, "ok.svm", "1 1:1\n0 2:1\n"), ("--batch-size", "-5"),
     r"--batch-size: -5 must be >= 1"),
    (lambda d: _write(d, "ok.svm", "1 1:1\n0 2:1\n"), ("--epochs", "0"),
     r"--epochs: 0 must be >= 1"),
    (lambda d: _write(d, "ok.svm", "1 1:1\n0 2:1\n"), ("--bucket-bits", "40"),
     r"--bucket-bits: 40 must be in \[1, 31\]"),
    (lambda d: _write(d, "ok.svm", "1 1:1\n0 2:1\n"), ("--resume",),
     r"--resume: .* has no model to continue"),
])
def test_cli_refuses_bad_data_and_arguments_in_one_line(
    tmp_path, capsys, make, extra, message):
  data = make(tmp_path)
  with pytest.raises(SystemExit) if any(a.startswith("--") and a not in (
      "--skip-bad-lines", "--resume") for a in extra) else \
      contextlib.nullcontext():
    status = cli.main(["train", data, "--model-dir", str(tmp_path / "m"),
                       "--format", "libsvm", "--quiet", *extra])
    assert status == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  # One line says it (argparse prints its usage above).
  assert re.search(message, err.strip().splitlines()[-1]), err


@pytest.mark.parametrize("argv,message", [
    (("demo", "--rows", "-5"), r"--rows: -5 must be >= 10"),
    # (One row made one file of the ten: nothing to train on, a traceback.)
    (("demo", "--rows", "1"), r"--rows: 1 must be >= 10"),
    (("demo", "--epochs", "0"), r"--epochs: 0 must be >= 1"),
    (("demo", "--bucket-bits", "0"), r"--bucket-bits: 0 must be in \[1, 31\]"),
    (("demo", "--batch-size", "0"), r"--batch-size: 0 must be >= 1"),
    (("demo", "--l2", "0"), r"--l2: --l2 must be a finite number > 0"),
    (("demo", "--tol", "-1"), r"--tol: --tol must be None or a number >= 0"),
    (("demo", "--threads", "-2"), r"--threads: --threads must be an integer"),
    (("generate", "--rows", "-3", "--out", "OUT"), r"--rows: -3 must be >= 1"),
    (("generate", "--rows", "9", "--files", "0", "--out", "OUT"),
     r"--files: 0 must be >= 1"),
    # (It named no flag, after writing the directory and truth.npy.)
    (("generate", "--rows", "9", "--seed", "-1", "--out", "OUT"),
     r"--seed: --seed must be an integer >= 0, got -1"),
])
def test_demo_and_generate_refuse_bad_arguments_before_any_work(
    tmp_path, capsys, argv, message):
  # They used to fail deep inside (a numpy "negative dimensions" traceback,
  # a missing model after 0 epochs), or train with --batch-size 0 ignored.
  argv = [str(tmp_path / "out") if a == "OUT" else a for a in argv]
  with pytest.raises(SystemExit) as stop:
    cli.main(argv)
  assert stop.value.code == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  assert re.search(message, err.strip().splitlines()[-1]), err
  assert not (tmp_path / "out").exists()



def test_demo_reports_a_table_past_memory_in_one_line_before_generating(
    capsys, monkeypatch):
  """--bucket-bits passes argparse's [1, 31] but 2^31 weights need more
  memory than a machine may have: the demo generated its 1M rows, then
  died in a traceback; now one line and status 2 before any work."""
  from tf_sdca import model_files  # pylint: disable=import-outside-toplevel
  monkeypatch.setattr(model_files, "max_sparse_features",
                      lambda num_classes=1: 1 << 20)
  generated = []
  monkeypatch.setattr(cli.commands, "generate", generated.append)
  assert cli.main(["demo", "--bucket-bits", "21"]) == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err and not generated
  assert re.search(r"tf-sdca demo: error: --bucket-bits 21: 2\^21 weights "
                   r"are past the 1,048,576 .* give at most --bucket-bits 20",
                   err.strip().splitlines()[-1]), err

def _write(directory, name, text):
  path = directory / name
  path.write_text(text)
  return str(path)


def _mkdir(directory, name):
  (directory / name).mkdir()
  return str(directory / name)


def _checkpoint(model_dir):
  with np.load(os.path.join(model_dir, "checkpoint.npz")) as ckpt:
    return {k: ckpt[k] for k in ckpt.files}


def test_a_kill_between_the_two_renames_resumes_exactly(
    generated, tmp_path):
  # The checkpoint (with the metadata inside) is one rename; model.json a
  # copy written after it. A kill between them leaves the new checkpoint
  # beside the old model.json: resume must still follow the checkpoint.
  data = os.path.join(generated, "part-00000.tsv")
  whole, parts, old = (str(tmp_path / d) for d in ("whole", "parts", "old"))
  assert _train(data, whole) == 0
  with interrupted_after_epoch(1):
    assert _train(data, old) == 130
  with interrupted_after_epoch(2):
    assert _train(data, parts) == 130
  shutil.copy(os.path.join(old, "model.json"),
              os.path.join(parts, "model.json"))  # epoch 1's
  assert _train(data, parts, "--resume") == 0
  a, b = _checkpoint(whole), _checkpoint(parts)
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(a[key], b[key])
  # model.json missing altogether: the checkpoint is the model.
  os.remove(os.path.join(parts, "model.json"))
  assert _train(data, parts) == 2  # not silently retrained over


@pytest.mark.parametrize("damage,message", [
    ("truncate", r"checkpoint.npz is truncated or corrupt"),
    ("drop_duals", r"has \d+ duals for \d+ rows"),
    ("nan_weight", r"has sparse_weights\[3\] = nan, not finite"),
    ("empty_meta", r"lacks format, loss"),
])
def test_a_damaged_checkpoint_is_an_error_not_patched(
    generated, tmp_path, capsys, damage, message):
  data = os.path.join(generated, "part-00000.tsv")
  model_dir = str(tmp_path / "m")
  assert _train(data, model_dir, "--epochs", "1") == 0
  path = os.path.join(model_dir, "checkpoint.npz")
  arrays = _checkpoint(model_dir)
  if damage == "truncate":
    with open(path, "rb") as f:
      head = f.read(os.path.getsize(path) // 2)
    with open(path, "wb") as f:
      f.write(head)
  else:
    if damage == "drop_duals":
      arrays["duals"] = arrays["duals"][10:]
    elif damage == "nan_weight":
      arrays["sparse_weights"][3] = np.nan
    else:
      arrays["meta_json"] = np.array("{}")
    np.savez(path, **arrays)
  capsys.readouterr()
  assert _train(data, model_dir, "--resume") == 2
  assert cli.main(["evaluate", data, "--model-dir", model_dir]) == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  assert len(re.findall(message, err)) == 2, err


def _rows(fmt, path, **kw):
  reader = libsvm.read_libsvm if fmt == "libsvm" else criteo.read_criteo
  chunks = list(reader([path], **kw))
  return {k: np.concatenate([c[k] for c in chunks]) for k in chunks[0]}


@pytest.mark.parametrize("fmt", ["libsvm", "criteo"])
def test_gzip_crlf_and_blank_lines_read_as_the_plain_file(tmp_path, fmt):
  if fmt == "libsvm":
    text = "1 qid:4 1:0.5 3:2 # a comment\n# only a comment\n0 2:1\n-1 1:3\n"
  else:
    fields = ["1", "3", "", "7"] + [""] * 10 + ["a1b2c3d4"] * 26
    text = "\n".join(["\t".join(fields)] * 3) + "\n"
  plain = tmp_path / "plain"
  plain.write_text(text.replace("qid:4 ", ""))
  variants = {"crlf": text.replace("\n", "\r\n"), "blank": text + "\n  \n",
              "qid": text}
  expected = _rows(fmt, str(plain))
  for name, body in variants.items():
    (tmp_path / name).write_text(body)
  with gzip.open(tmp_path / "packed.gz", "wt") as f:
    f.write(text)
  for name in list(variants) + ["packed.gz"]:
    got = _rows(fmt, str(tmp_path / name))
    for key, value in expected.items():
      np.testing.assert_array_equal(got[key], value, err_msg=name)


@pytest.mark.parametrize("fmt,text,message", [
    ("libsvm", "1 1:1\n0 3:", r":2: '3:' \(feature 1\) is not index:value"),
    ("libsvm", "1 0:1\n", r":1: '0:1' \(feature 1\): indices must be >= 1"),
    ("libsvm", "1 -2:1\n", r":1: '-2:1' \(feature 1\): indices must be"),
    ("libsvm", "1 2:1 2:3\n", r":1: '2:3' \(feature 2\): indices must be"),
    ("libsvm", "1 3:1 2:1\n", r":1: '2:1' \(feature 2\): indices must be"),
    ("libsvm", "1:1 2:1\n", r":1: the label '1:1' is not a number"),
    ("libsvm", "\x00\x01\x02\xff\xfe garbage\n", r":1: not text \(binary"),
    ("criteo", "1\t2\n", r":1: expected 40 tab-separated fields, got 2: "),
    # A LIBSVM file read as Criteo's (the default format): said so.
    ("criteo", "+1 1:0.7 2:1 13:-1\n",
     r":1: expected 40 tab-separated fields, got 1; the line looks like "
     r"LIBSVM .*--format libsvm"),
    ("criteo", "\x00\x01\x02\xff\xfe\n", r":1: .*not text \(binary bytes\)"),
])
def test_malformed_lines_are_one_line_errors_with_file_and_line(
    tmp_path, fmt, text, message):
  path = tmp_path / "bad"
  path.write_bytes(text.encode("utf-8", errors="surrogateescape")
                   if "\xff" not in text else
                   text.encode("latin-1"))
  with pytest.raises(ValueError, match=str(path) + message) as caught:
    _rows(fmt, str(path))
  assert "\n" not in str(caught.value)


def test_a_huge_line_reads(tmp_path):
  path = tmp_path / "huge"
  path.write_text("1 " + " ".join(f"{i}:1" for i in range(1, 200001)) + "\n")
  rows = _rows("libsvm", str(path))
  assert rows["indices"].shape == (200000,)
  assert rows["indices"][-1] == 199999


def test_the_cli_trains_on_gzip_as_on_plain_text(generated, tmp_path):
  data = os.path.join(generated, "part-00000.tsv")
  packed = str(tmp_path / "part.tsv.gz")
  with open(data, "rb") as src, gzip.open(packed, "wb") as dst:
    shutil.copyfileobj(src, dst)
  assert _train(data, str(tmp_path / "plain"), "--epochs", "2") == 0
  assert _train(packed, str(tmp_path / "gz"), "--epochs", "2") == 0
  a, b = _checkpoint(str(tmp_path / "plain")), _checkpoint(str(tmp_path / "gz"))
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize("damage,message", [
    # A checkpoint from before the metadata moved inside it: model.json is
    # read beside it, and the weights are checked all the same.
    ("old_format_inf", r"checkpoint.npz has dense_weights\[2\] = inf, not "
     "finite"),
    ("nan_dual", r"checkpoint.npz has duals\[7\] = nan, not finite"),
    ("nan_scale", r"checkpoint.npz has metadata scale\[4\] = nan"),
    ("nan_l1", r"checkpoint.npz has metadata l1 = nan"),
    # Each weight finite, w.x not: +-1e308 sums to inf - inf.
    ("overflow", r"gives [\d,]+ score\(s\) that are not finite \(first: "
     r"row \d+ of .*part-00000.tsv"),
])
def test_no_command_scores_with_non_finite_weights(
    generated, tmp_path, capsys, damage, message):
  data = os.path.join(generated, "part-00000.tsv")
  model_dir = str(tmp_path / "m")
  assert _train(data, model_dir, "--epochs", "1") == 0
  path = os.path.join(model_dir, "checkpoint.npz")
  arrays = _checkpoint(model_dir)
  meta = json.loads(str(arrays["meta_json"]))
  if damage == "old_format_inf":
    del arrays["meta_json"]
    arrays["dense_weights"][2] = np.inf
  elif damage == "nan_dual":
    arrays["duals"][7] = np.nan
  elif damage in ("nan_scale", "nan_l1"):
    if damage == "nan_scale":
      meta["scale"][4] = float("nan")
    else:
      meta["l1"] = float("nan")
    arrays["meta_json"] = np.array(json.dumps(meta))
  else:
    w = arrays["sparse_weights"]
    w[:] = np.where(np.arange(w.size) % 2, 1e308, -1e308)
    arrays["dense_weights"][:] = 1e308
  np.savez(path, **arrays)
  capsys.readouterr()
  commands = [["evaluate", data, "--model-dir", model_dir],
              ["predict", data, "--model-dir", model_dir, "--out",
               str(tmp_path / "scores.txt")]]
  if damage != "overflow":  # each weight is finite: it exports
    commands.append(["export", "--model-dir", model_dir, "--out",
                     str(tmp_path / "saved")])
  for command in commands:
    assert cli.main(command) == 2, command
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert re.search(message, err), err
    assert model_dir in err or "part-00000" in err
  assert not os.path.exists(tmp_path / "scores.txt")


def test_the_saved_model_export_refuses_non_finite_weights(tmp_path):
  from tf_sdca import serving  # pylint: disable=import-outside-toplevel
  meta = dict(format="libsvm", loss="logistic_loss", l1=0.0, l2=1.0,
              num_features=3, scale=None)
  with pytest.raises(ValueError, match=r"sparse_weights\[1\] = nan is not "
                     "finite; refusing to export"):
    serving.export_lines_scorer(meta, np.array([0.5, np.nan, 1.0]),
                                np.zeros(1), str(tmp_path / "saved"))
  with pytest.raises(ValueError, match=r"dense_weights\[0\] = -inf"):
    serving.export_lines_scorer(meta, np.zeros(3), np.array([-np.inf]),
                                str(tmp_path / "saved"))
  assert not os.path.exists(tmp_path / "saved")


def _damage_cache(cache_dir, damage):
  labels = os.path.join(cache_dir, "part-00000-labels.npy")
  if damage == "truncated":
    size = os.path.getsize(labels)
    with open(labels, "r+b") as f:
      f.truncate(size - 100)  # "mmap length is greater than file size"
  elif damage == "garbage":
    with open(labels, "wb") as f:
      f.write(np.random.default_rng(0).bytes(5000))
  elif damage == "foreign":  # a valid .npy of another shape
    np.save(labels, np.zeros((7, 3)))
  elif damage == "empty_file":
    open(os.path.join(cache_dir, "part-00000-indices.npy"), "wb").close()
  elif damage == "manifest_garbage":
    with open(os.path.join(cache_dir, "manifest.json"), "wb") as f:
      f.write(b"\xff\xfe{garbage")
  elif damage == "manifest_list":
    with open(os.path.join(cache_dir, "manifest.json"), "w") as f:
      f.write("[1, 2]")
  elif damage == "missing_part":
    os.remove(os.path.join(cache_dir, "part-00000-values.npy"))
  elif damage == "manifest_rows":  # valid JSON, a count of other rows
    # (Was used: the model kept 50 rows beside 569 duals, and nothing
    # loaded it.)
    path = os.path.join(cache_dir, "manifest.json")
    with open(path) as f:
      manifest = json.load(f)
    manifest["rows"] = 50
    with open(path, "w") as f:
      json.dump(manifest, f)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "foreign",
                                    "empty_file", "manifest_garbage",
                                    "manifest_list", "missing_part",
                                    "manifest_rows"])
def test_a_damaged_cache_is_rebuilt_with_a_one_line_warning(
    tmp_path, capsys, damage):
  x, y = load_breast_cancer_libsvm(tmp_path)
  model_dir = str(tmp_path / "m")
  argv = ["train", x, "--format", "libsvm", "--model-dir", model_dir,
          "--epochs", "2", "--quiet"]
  assert cli.main(argv) == 0
  first = _checkpoint(model_dir)
  cache_dir = os.path.join(model_dir, "cache")
  _damage_cache(cache_dir, damage)
  capsys.readouterr()
  assert cli.main(argv + ["--overwrite"]) == 0
  err = capsys.readouterr().err
  assert "Traceback" not in err
  (line,) = err.strip().splitlines()
  assert line.startswith(f"warning: the cache in {cache_dir} is damaged (")
  assert line.endswith("); rebuilding it from the source files")
  again = _checkpoint(model_dir)
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(first[key], again[key])
  # Rebuilt: the next run reads it without a word.
  assert cli.main(argv + ["--overwrite"]) == 0
  assert capsys.readouterr().err == ""


def load_breast_cancer_libsvm(tmp_path):
  from sklearn.datasets import load_breast_cancer  # pylint: disable=import-outside-toplevel
  x, y = load_breast_cancer(return_X_y=True)
  path = str(tmp_path / "bc.svm")
  _write_libsvm(path, y, scipy.sparse.csr_matrix(x[:, :10]))
  return path, y


def test_a_cache_dir_with_other_files_is_refused_not_emptied(
    criteo_file, tmp_path):
  path, _ = criteo_file
  cache_dir = tmp_path / "not_a_cache"
  cache_dir.mkdir()
  (cache_dir / "notes.txt").write_text("mine")
  with pytest.raises(ValueError, match=r"holds files that are not a tf_sdca "
                     r"cache \(e.g. 'notes.txt'\)"):
    cache.load_or_build([path], "criteo", str(cache_dir), bucket_bits=16,
                        verbose=0)
  assert (cache_dir / "notes.txt").read_text() == "mine"


def _killed_train(data, model_dir, moment=None, after_epoch=None,
                  *extra):
  """`tf-sdca train` in a child process, SIGKILLed at a kill point's
  `moment` (`tf_sdca.files.kill_point`, armed by tests/interruptions.py)
  or, with `after_epoch`, by this process as soon as that epoch's
  checkpoint is there (so in the next epoch or its checkpoint write,
  wherever the child is)."""
  command = (interruptions.killed_at(moment) if moment else
             [sys.executable, "-m", "tf_sdca.cli"])
  child = subprocess.Popen(
      command + ["train", data, "--model-dir", model_dir, "--epochs", "4",
                 "--tol", "1e-12", "--bucket-bits", "16", "--quiet", *extra],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
  if after_epoch is not None:
    deadline = time.monotonic() + 60
    while child.poll() is None and time.monotonic() < deadline:
      try:
        if int(_checkpoint(model_dir)["epoch"]) >= after_epoch:
          break
      except (OSError, ValueError, KeyError, EOFError,
              zipfile.BadZipFile):  # not there yet, or being renamed
        pass
      time.sleep(0.005)
    child.kill()
  _, err = child.communicate(timeout=60)
  assert child.returncode == -9, err.decode()[-2000:]


@pytest.mark.parametrize("moment,extra", [
    ("cache-part-0", ()),               # parsing: the cache half written
    ("checkpoint-2-half-written", ()),  # epoch 2's checkpoint cut in half
    ("after-epoch-1", ()),              # timed: epoch 2 or its checkpoint
    ("epoch-3-batch-2", ("--batch-size", "5000")),  # mid-epoch, mini-batch
])
def test_sigkill_at_any_moment_then_resume_gives_the_uninterrupted_model(
    generated, tmp_path, moment, extra):
  data = os.path.join(generated, "part-00000.tsv")
  whole = str(tmp_path / "whole")
  assert _train(data, whole, *extra) == 0
  killed = str(tmp_path / "killed")
  if moment.startswith("after-epoch-"):
    _killed_train(data, killed, None, int(moment.rsplit("-", 1)[1]), *extra)
  else:
    _killed_train(data, killed, moment, None, *extra)
  # What a user does next: --resume if the kill left a model, else again.
  from tf_sdca import model_files  # pylint: disable=import-outside-toplevel
  resume = ("--resume",) if model_files.has_model(killed) else ()
  if moment == "cache-part-0":
    assert not resume and not os.path.exists(
        os.path.join(killed, "cache", "manifest.json"))
  if moment == "checkpoint-2-half-written":
    assert int(_checkpoint(killed)["epoch"]) == 1
    assert os.path.exists(os.path.join(killed, "checkpoint.npz.tmp.npz"))
  if moment == "epoch-3-batch-2":
    assert int(_checkpoint(killed)["epoch"]) == 2
  if moment == "after-epoch-1":
    assert 1 <= int(_checkpoint(killed)["epoch"]) < 4
  assert _train(data, killed, *extra, *resume) == 0
  a, b = _checkpoint(whole), _checkpoint(killed)
  assert int(a["epoch"]) == int(b["epoch"]) == 4
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(a[key], b[key])


def test_a_mini_batch_error_in_the_cli_names_the_users_row(tmp_path, capsys):
  rng = np.random.default_rng(1)
  x = scipy.sparse.csr_matrix(rng.normal(size=(1000, 4)).astype(np.float32))
  x.data[700 * 4 + 2] = 3e38  # line 701: valid, but beyond float32 state
  path = str(tmp_path / "big.svm")
  _write_libsvm(path, rng.choice([-1.0, 1.0], 1000), x)
  capsys.readouterr()
  assert cli.main(["train", path, "--format", "libsvm", "--loss", "squared",
                   "--l2", "1e-30", "--batch-size", "300", "--model-dir",
                   str(tmp_path / "m"), "--quiet"]) == 2
  err = capsys.readouterr().err
  assert "Traceback" not in err
  (line,) = err.strip().splitlines()
  assert re.match(r"tf-sdca train: error: in mini-batch \d of epoch 1: "
                  r"squared_loss: example \d+ \(row 700 of the data\)'s "
                  r"primal loss", line), line

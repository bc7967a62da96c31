"""The first pass of `tf-sdca train` as a new process: the text parser
(`tf_sdca.data.text_parser`, a plain shared library) needs no TensorFlow,
so the cache is built in a forked child while the process imports
TensorFlow. What that path writes and says must be what the in-process
path (TensorFlow already imported, the cache built in the process itself)
writes and says: the same cache files and model to the byte, the same
errors naming file and line, the same skipped-line counts.
"""
import functools
import gzip
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tf_sdca import cli, model_files
from tf_sdca.data import generate_criteo_arrays, text_files, text_parser
from tf_sdca.data import write_criteo_tsv

sys.path.insert(0, os.path.dirname(__file__))
import reference_readers  # pylint: disable=wrong-import-position

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# `tf-sdca` as a new process that says whether the cache was built in a
# child (`cache._build_in_child`) and, given TF_SDCA_TEST_KILL_AT, SIGKILLs
# itself at that `files.kill_point` (as tests/interruptions.py does, without
# the import of TensorFlow that its cluster launcher brings).
_LAUNCHER = """
import os, signal, sys
from tf_sdca import cli, files
from tf_sdca.data import cache
assert "tensorflow" not in sys.modules
build_in_child = cache._build_in_child
def traced(*args):
  print("BUILT_IN_CHILD", flush=True)
  return build_in_child(*args)
cache._build_in_child = traced
moment = os.environ.get("TF_SDCA_TEST_KILL_AT")
def kill_point(name, partial_file=None):
  if name == moment:
    os.kill(os.getpid(), signal.SIGKILL)
files.kill_point = kill_point
sys.argv = ["tf-sdca"] + sys.argv[1:]
cli.main()
"""


def _new_process(*args, kill_at=None):
  env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  if kill_at:
    env["TF_SDCA_TEST_KILL_AT"] = kill_at
  return subprocess.run([sys.executable, "-c", _LAUNCHER, "train", *args],
                        capture_output=True, text=True, env=env, cwd=ROOT,
                        timeout=300)


@pytest.fixture(scope="module")
def criteo_file(tmp_path_factory):
  """20,000 generated lines (one cache part), a blank and a CRLF line among
  them."""
  path = str(tmp_path_factory.mktemp("start") / "day.tsv")
  write_criteo_tsv(path, generate_criteo_arrays(20_000, seed=5))
  with open(path) as f:
    lines = f.read().splitlines()
  lines[100] = ""
  lines[101] += "\r"
  with open(path, "w", newline="") as f:
    f.write("\n".join(lines) + "\n")
  return path


@functools.lru_cache(maxsize=None)
def _criteo_text():
  """Criteo text with every kind of line: generated rows, an 18-digit and
  a negative count, upper-case and empty tokens, CRLF, blank and
  malformed lines; ~600 KB, so that it is parsed on two threads."""
  rng = np.random.default_rng(0)
  lines = []
  for k in range(3000):
    counts = [str(rng.integers(-3, 10**int(rng.integers(1, 19))))
              if rng.random() < 0.8 else "" for _ in range(13)]
    tokens = [format(int(rng.integers(0, 2**63)), "x")[:int(rng.integers(
        0, 17))] for _ in range(26)]
    line = "\t".join([str(k % 2)] + counts + tokens)
    lines.append(line.upper() if k % 7 == 0 else line)
  lines[5] += "\r"
  lines[6] = " \t"
  lines[7] = "2" + lines[7][1:]  # a bad label
  lines[8] = lines[8].replace("\t", "\tx", 1)  # a bad count
  lines[2999] = lines[2999][:40]  # too few fields, no '\n' after it
  return ("\n".join(lines)).encode()


def _libsvm_text():
  rng = np.random.default_rng(1)
  lines = [f"{rng.normal():.9g} qid:3 1:1e-40 7:{rng.normal():.17g} "
           f"{k + 10}:+{rng.random():.3e} # comment" for k in range(20000)]
  lines[3] = "1 2:1 1:1"  # decreasing: bad
  lines[4] = "# only a comment"
  lines[5] = "0 1:1\r"
  return ("\n".join(lines) + "\n").encode()


def _assert_same_outputs(got, expected):
  assert got.keys() == expected.keys()
  for key, value in expected.items():
    value, mine = np.asarray(value), np.asarray(got[key])
    assert (mine.dtype, mine.shape) == (value.dtype, value.shape), key
    assert mine.tobytes() == value.tobytes(), key


@pytest.mark.parametrize("bucket_bits,ids_type", [
    (20, np.int32), (20, np.int64), (31, np.int32), (62, np.int64)])
def test_the_parser_library_gives_the_tensorflow_parser_rows_to_the_byte(
    bucket_bits, ids_type):
  text = _criteo_text()
  got = text_parser.parse_criteo(text, bucket_bits, ids_type)
  assert got["bad_lines"].tolist() == [7, 8, 2999]
  _assert_same_outputs(got, reference_readers.parse_criteo_text(
      text, bucket_bits, ids_type))
  _assert_same_outputs(text_parser.parse_criteo(b"", 20),
                       reference_readers.parse_criteo_text(b"", 20))


def test_the_parser_library_reads_libsvm_as_the_python_reader():
  text = _libsvm_text()
  got = text_parser.parse_libsvm(text)
  assert got["bad_lines"].tolist() == [3]
  assert got["values"][0] == np.float32(1e-40) != 0  # a subnormal, kept
  _assert_same_outputs(got, reference_readers.parse_libsvm_text(text))
  for text in (b"", b"\n\n# only comments\n"):
    _assert_same_outputs(text_parser.parse_libsvm(text),
                         reference_readers.parse_libsvm_text(text))


def test_the_parser_library_refuses_bad_arguments():
  with pytest.raises(ValueError, match=r"bucket_bits must be in \[1, 62\], "
                     "got 63"):
    text_parser.parse_criteo(b"", 63)
  with pytest.raises(ValueError, match="ids_type must be np.int64, or "
                     "np.int32 for bucket_bits <= 31; got int32 for "
                     "bucket_bits 32"):
    text_parser.parse_criteo(b"", 32, np.int32)


def test_the_readers_and_the_cache_import_no_tensorflow():
  script = ("import sys\n"
            "from tf_sdca import cli\n"
            "from tf_sdca.data import cache, criteo, libsvm, text_parser\n"
            "out = text_parser.parse_criteo(b'1' + b'\\t' * 39, 20)\n"
            "assert out['labels'].tolist() == [1.0], out\n"
            "print(sorted(m for m in sys.modules if m.startswith("
            "'tensorflow')))\n")
  done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                        text=True, cwd=ROOT, timeout=60)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout.strip() == "[]"


def _cache_files(cache_dir):
  """{name: bytes} of a cache; the manifest without its timing."""
  out = {}
  for name in sorted(os.listdir(cache_dir)):
    with open(os.path.join(cache_dir, name), "rb") as f:
      out[name] = f.read()
  manifest = json.loads(out.pop("manifest.json"))
  assert manifest.pop("parse_seconds") > 0
  return out, manifest


def _model(model_dir):
  meta, state = model_files.load_model(model_dir)
  for entry in meta["history"]:
    entry.pop("rows_per_sec")
  return meta, state


@pytest.mark.parametrize("fmt", ["criteo", "libsvm"])
def test_a_new_process_writes_the_cache_and_model_of_the_in_process_path(
    criteo_file, tmp_path, fmt):
  if fmt == "criteo":
    path, args, rows, parts = criteo_file, ["--bucket-bits", "16"], 19_999, 3
  else:
    path = str(tmp_path / "data.svm")
    with open(path, "wb") as f:  # (without its malformed line)
      f.write(b"\n".join(_libsvm_text().split(b"\n")[4:]))
    args, rows, parts = ["--format", "libsvm"], 19_995, 4
  args += ["--epochs", "2", "--quiet"]
  child = _new_process(path, "--model-dir", str(tmp_path / "new"), *args)
  assert child.returncode == 0, child.stderr[-2000:]
  assert child.stdout.startswith("BUILT_IN_CHILD\n")
  # In this process TensorFlow is imported: the cache is built here.
  assert cli.main(["train", path, "--model-dir", str(tmp_path / "old"),
                   *args]) == 0
  new_files, new_manifest = _cache_files(tmp_path / "new" / "cache")
  old_files, old_manifest = _cache_files(tmp_path / "old" / "cache")
  assert new_manifest == old_manifest and new_manifest["rows"] == rows
  assert new_files.keys() == old_files.keys() and len(new_files) == parts
  for name, data in old_files.items():
    assert new_files[name] == data, name
  (new_meta, new_state), (old_meta, old_state) = (
      _model(tmp_path / "new"), _model(tmp_path / "old"))
  assert new_meta == old_meta
  assert (new_meta.get("scale") is not None) == (fmt == "criteo")
  assert new_state.keys() == old_state.keys()
  for key, value in old_state.items():
    assert np.asarray(new_state[key]).tobytes() == \
        np.asarray(value).tobytes(), key


def _bad_copy(criteo_file, tmp_path):
  with open(criteo_file) as f:
    lines = f.read().splitlines()
  for k in (1500, 1501, 17000):
    lines[k] = lines[k].replace("\t", "\t1-2", 1)
  path = tmp_path / "bad.tsv"
  path.write_text("\n".join(lines) + "\n")
  return str(path)


def _truncated_gzip(criteo_file, tmp_path):
  with open(criteo_file, "rb") as f:
    data = gzip.compress(f.read())
  path = tmp_path / "cut.tsv.gz"
  path.write_bytes(data[:len(data) // 2])
  return str(path)


@pytest.mark.parametrize("case", ["bad line", "skip bad lines",
                                  "truncated gzip"])
def test_a_new_process_says_what_the_in_process_path_says(
    criteo_file, tmp_path, case, capsys):
  path = (_truncated_gzip if case == "truncated gzip" else _bad_copy)(
      criteo_file, tmp_path)
  args = ["--epochs", "1", "--bucket-bits", "14", "--quiet"] + (
      ["--skip-bad-lines"] if case == "skip bad lines" else [])
  new, old = str(tmp_path / "new"), str(tmp_path / "old")
  child = _new_process(path, "--model-dir", new, *args)
  capsys.readouterr()
  status = cli.main(["train", path, "--model-dir", old, *args])
  out, err = capsys.readouterr()
  assert child.stdout.startswith("BUILT_IN_CHILD\n")
  assert (child.returncode, child.stdout[len("BUILT_IN_CHILD\n"):].replace(
      new, old), child.stderr) == (status, out, err)
  assert "Traceback" not in err
  if case == "bad line":
    with open(path) as f:
      line = f.read().splitlines()[1500]
    assert status == 2 and err == (
        f"tf-sdca train: error: {path}:1501: I1 is not a decimal integer "
        f"(field 2): {text_files.shown(line)}\n")
  elif case == "skip bad lines":
    assert status == 0 and out.startswith(
        f"skipped 3 malformed line(s); first: {path}:1501: I1 is not")
  else:
    assert status == 2 and err == (
        f"tf-sdca train: error: {path}: the gzip data ends early (the file "
        "is truncated, or damaged)\n")


def test_a_kill_of_the_child_building_the_cache_ends_the_command(
    criteo_file, tmp_path):
  model_dir = tmp_path / "killed"
  child = _new_process(criteo_file, "--model-dir", str(model_dir), "--quiet",
                       kill_at="cache-part-0")
  assert child.returncode == -9, child.stderr[-2000:]
  # Killed after the first part: no manifest, no model; the next run
  # rebuilds the cache.
  assert sorted(os.listdir(model_dir / "cache")) == [
      "part-00000-dense.npy", "part-00000-ids.npy", "part-00000-labels.npy"]
  assert not model_files.has_model(str(model_dir))


def test_a_failed_import_beside_the_build_stops_the_child_and_raises(
    criteo_file, tmp_path):
  cache_dir = str(tmp_path / "cache")
  script = f"""
import os
from tf_sdca.data import cache
def import_tensorflow():
  raise ImportError("no TensorFlow here")
try:
  cache.load_or_build([{criteo_file!r}], "criteo", {cache_dir!r}, verbose=0,
                      alongside=import_tensorflow)
except ImportError as error:
  print("raised:", error)
try:
  os.waitpid(-1, os.WNOHANG)
  print("a child is left")
except ChildProcessError:
  print("no child left")
"""
  done = subprocess.run([sys.executable, "-c", script], capture_output=True,
                        text=True, cwd=ROOT, timeout=60)
  assert done.returncode == 0, done.stderr[-2000:]
  assert done.stdout == "raised: no TensorFlow here\nno child left\n"
  assert "manifest.json" not in os.listdir(cache_dir)


def test_a_missing_library_is_an_import_error_saying_how_to_build_it():
  from tf_sdca import native_library  # pylint: disable=import-outside-toplevel
  assert native_library.path_of("_text_reader.so") == os.path.join(
      ROOT, "tf_sdca", "_text_reader.so")
  with pytest.raises(ImportError, match=r"tf_sdca/_absent\.so is missing: "
                     r"build it with `pip install --no-build-isolation -e "
                     r"\.` .* after installing TensorFlow$"):
    native_library.path_of("_absent.so", " after installing TensorFlow")

"""The native Criteo and LIBSVM readers (`tf_sdca.data.text_parser`)
against the readers they replaced (tests/reference_readers.py): the same
rows, features and chunks bit for bit, plain and gzip, in one block or many,
and on 10M generated rows (slow: `pytest --run-slow`; 60k rows otherwise);
and their errors: file and line, --skip-bad-lines counts, truncated or
damaged gzip."""
import functools
import gzip
import io
import itertools
import os
import sys
import zlib

import numpy as np
import pytest
import tensorflow as tf

from tf_sdca import cli, files, model_files
from tf_sdca.data import cache, criteo, libsvm, text_files, text_parser
from tf_sdca.data import generate_criteo_arrays, write_criteo_tsv
from tf_sdca.trainer import InMemorySdca

sys.path.insert(0, os.path.dirname(__file__))
import reference_readers  # pylint: disable=wrong-import-position

HEART_SCALE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), ".cache",
    "debian", "usr", "share", "doc", "liblinear-tools", "examples",
    "heart_scale")

# A line with a count of 18 digits, a negative and a missing count, an
# upper-case 16-digit token, an empty one and "0"; its features as today's
# reader (parse_criteo_lines, bucket_bits 20) gave them: a model trained
# before the native reader reads the same ids.
_PINNED_LINE = ("1\t5\t\t-3\t123456789012345678" + "\t" * 9 + "".join(
    "\t" + t for t in ["68fd1e64", "", "ABCDEF0123456789", "0"] +
    ["a1b2c3d4"] * 22))
_PINNED_IDS = [985224, 206024, 77772, 1043925, 298914, 309773, 675694,
               370600, 1025489, 520650, 247360, 565830, 525987, 573553,
               691783, 732957, 874714, 911896, 362414, 947422, 106284, 30130,
               802487, 232541, 763091, 32689]


def _assert_same_chunks(got, expected):
  got, expected = list(got), list(expected)
  assert len(got) == len(expected)
  for a, b in zip(got, expected):
    assert a.keys() == b.keys()
    for key in a:
      assert a[key].dtype == b[key].dtype, key
      np.testing.assert_array_equal(a[key], b[key], err_msg=key)


@pytest.fixture(scope="module")
def criteo_text(tmp_path_factory):
  """Generated Criteo rows (missing counts and tokens) plus the odd cases:
  negative and 18-digit counts, upper-case and 16-digit tokens, CRLF and
  blank lines; ~1.2 MB, so a 2-thread parse splits it."""
  directory = tmp_path_factory.mktemp("native_criteo")
  path = str(directory / "day.tsv")
  write_criteo_tsv(path, generate_criteo_arrays(5000, seed=7))
  with open(path) as f:
    lines = f.read().splitlines()
  lines[10] = _PINNED_LINE
  lines[11] = lines[11] + "\r"
  lines[12] = "  \t "
  lines[13] = lines[13].replace("\t", "\t-", 1)  # a negative count
  lines[14] = lines[14].upper()
  lines[15] = "\x0b\x0c \r"  # blank to tf.strings.strip too
  with open(path, "w", newline="") as f:
    f.write("\n".join(lines) + "\n")
  packed = path + ".gz"
  with open(path, "rb") as src, gzip.open(packed, "wb") as dst:
    dst.write(src.read())
  return path, packed


@pytest.mark.parametrize("batch_size", [1000, 4096, 65536])
@pytest.mark.parametrize("block_bytes", [None, 100_000])
def test_criteo_rows_equal_the_tensorflow_readers(criteo_text, batch_size,
                                                  block_bytes, monkeypatch):
  if block_bytes:
    monkeypatch.setattr(text_files, "BLOCK_BYTES", block_bytes)
  path, packed = criteo_text
  for name in (path, packed):
    _assert_same_chunks(
        criteo.read_criteo([name, path], batch_size, bucket_bits=18),
        reference_readers.read_criteo([name, path], batch_size, 18))


def test_criteo_ids_are_those_of_the_reader_before():
  (chunk,) = list(criteo.read_criteo([_write_temp(_PINNED_LINE + "\n")],
                                     bucket_bits=20))
  assert chunk["ids"][0].tolist() == _PINNED_IDS
  np.testing.assert_array_equal(
      chunk["dense"][0, :4],
      np.log1p([5.0, 0.0, 0.0, 123456789012345678.0]).astype(np.float32))


def test_a_line_of_python_only_whitespace_is_not_blank_criteo():
  path = _write_temp("\x1c\n")
  with pytest.raises(ValueError, match=path + r":1: expected 40"):
    list(criteo.read_criteo([path]))


def _write_temp(text, name="data", mode="w"):
  import tempfile  # pylint: disable=import-outside-toplevel
  directory = tempfile.mkdtemp()
  path = os.path.join(directory, name)
  with open(path, mode) as f:
    f.write(text)
  return path


@pytest.fixture(scope="module")
def libsvm_text(tmp_path_factory):
  """LIBSVM lines that test the number parsing: float32 double rounding,
  subnormals, exponents, '+' signs, qid, comments, CRLF and lone CR."""
  rng = np.random.default_rng(3)
  lines = []
  for r in range(3000):
    k = rng.integers(0, 12)
    index = np.sort(rng.choice(5000, k, replace=False)) + 1
    values = rng.normal(size=k) * 10.0 ** rng.integers(-40, 37, k)
    items = " ".join(f"{i}:{float(v)!r}" for i, v in zip(index, values))
    label = ["+1", "-1", "0", "2.5e0", "1E-3"][r % 5]
    lines.append(f"{label} {items}".rstrip())
  lines[5] = "1 qid:7 3:0.100000001490116119384765625 4:1e-310 9:-0"
  lines[6] = "# a comment line"
  lines[7] = "0 1:5.  2:.5   3:+4 # café"
  lines[8] = ""
  lines[9] = "1 1:3.4028235677973e38"  # rounds to float32's max
  text = "\n".join(lines[:100]) + "\r\n" + "\r\n".join(lines[100:200])
  text += "\r" + "\n".join(lines[200:]) + "\n"
  path = str(tmp_path_factory.mktemp("native_libsvm") / "a.svm")
  with open(path, "w", newline="") as f:
    f.write(text)
  packed = path + ".gz"
  with open(path, "rb") as src, gzip.open(packed, "wb") as dst:
    dst.write(src.read())
  return path, packed


@pytest.mark.parametrize("chunk_rows", [1, 700, 65536])
@pytest.mark.parametrize("block_bytes", [None, 20_000])
def test_libsvm_rows_equal_the_python_reader(libsvm_text, chunk_rows,
                                             block_bytes, monkeypatch):
  if block_bytes:
    monkeypatch.setattr(text_files, "BLOCK_BYTES", block_bytes)
  path, packed = libsvm_text
  for name in (path, packed):
    _assert_same_chunks(
        libsvm.read_libsvm([name, path], chunk_rows),
        reference_readers.read_libsvm([name, path], chunk_rows))


@pytest.mark.skipif(not os.path.exists(HEART_SCALE),
                    reason="heart_scale not fetched (.ci/setup fetches it)")
def test_heart_scale_reads_as_the_python_reader(tmp_path):
  packed = str(tmp_path / "heart_scale.gz")
  with open(HEART_SCALE, "rb") as src, gzip.open(packed, "wb") as dst:
    dst.write(src.read())
  for name in (HEART_SCALE, packed):
    _assert_same_chunks(libsvm.read_libsvm([name], 100),
                        reference_readers.read_libsvm([name], 100))


def _truncated_gzip(tmp_path, text):
  path = tmp_path / "cut.gz"
  data = gzip.compress(text.encode())
  path.write_bytes(data[:len(data) // 2])
  return str(path)


@pytest.mark.parametrize("fmt", ["criteo", "libsvm"])
def test_a_truncated_gzip_is_a_one_line_error_naming_the_file(
    tmp_path, fmt, capsys, criteo_text):
  if fmt == "criteo":
    with open(criteo_text[0]) as f:
      text = f.read()
  else:
    text = "".join(f"1 {i + 1}:{i}\n" for i in range(50000))
  path = _truncated_gzip(tmp_path, text)
  reader = criteo.read_criteo if fmt == "criteo" else libsvm.read_libsvm
  with pytest.raises(ValueError, match=rf"^{path}: the gzip data ends early "
                     r"\(the file is truncated, or damaged\)$"):
    list(reader([path]))
  status = cli.main(["train", path, "--format", fmt, "--model-dir",
                     str(tmp_path / "m"), "--quiet"])
  err = capsys.readouterr().err
  assert status == 2 and "Traceback" not in err
  assert err.strip().splitlines()[-1].endswith(
      f"{path}: the gzip data ends early (the file is truncated, or "
      "damaged)")


def test_bad_lines_in_later_blocks_name_their_line(criteo_text, tmp_path,
                                                   monkeypatch):
  monkeypatch.setattr(text_files, "BLOCK_BYTES", 50_000)
  with open(criteo_text[0]) as f:
    lines = f.read().splitlines()
  for k in (1200, 3001, 3002):
    lines[k] = lines[k].replace("\t", "\t1-2", 1)
  lines[4000] = lines[4000].replace("\t", "\t-\t", 1)[:-9]  # "-" alone
  path = tmp_path / "bad.tsv"
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match=rf"^{path}:1201: I1 is not a decimal "
                     r"integer \(field 2\): '"):
    list(criteo.read_criteo([str(path)]))
  counter = criteo.BadLines()
  rows = sum(c["labels"].shape[0] for c in criteo.read_criteo(
      [str(path)], skip_bad_lines=True, bad_lines=counter))
  assert counter.count == 4 and rows == 5000 - 2 - 4  # two blank lines
  assert [m.split(": ")[0] for m in counter.first] == [
      f"{path}:{k}" for k in (1201, 3002, 3003, 4001)]


def test_many_bad_lines_are_counted_and_the_first_ten_kept(tmp_path):
  path = tmp_path / "bad.svm"
  path.write_text("1 1:1\n" + "x\n" * 30000 + "0 2:1\n")
  counter = criteo.BadLines()
  (chunk,) = list(libsvm.read_libsvm([str(path)], skip_bad_lines=True,
                                     bad_lines=counter))
  assert chunk["labels"].tolist() == [1.0, 0.0]
  assert counter.count == 30000 and len(counter.first) == 10
  assert counter.first[9].startswith(f"{path}:11: the label 'x'")


@pytest.mark.parametrize("fmt,line,message", [
    ("libsvm", "1 1:nan", r":1: '1:nan' \(feature 1\): indices must be >= 1 "
     "and increasing, values finite"),
    ("libsvm", "1 2:1e39", r":1: '2:1e39' \(feature 1\): .*values finite"),
    # Finite in float64, infinite in float32 (the stored type).
    ("libsvm", "1 2:3.5e38", r":1: '2:3.5e38' \(feature 1\): .*finite"),
    ("libsvm", "-3.5e38 2:1", r":1: the label '-3.5e38' is not finite"),
    ("libsvm", "nan 1:1", r":1: the label 'nan' is not finite"),
    ("libsvm", "1 2147483649:1", r":1: '2147483649:1' \(feature 1\): "
     r"indices must be <= 2\^31"),
    # Past 2^64: wrapped to 4 (and 5) by the digits' multiply, and read
    # as that feature without a word.
    ("libsvm", "1 1:1.5 18446744073709551620:2.5",
     r":1: '18446744073709551620:2.5' \(feature 2\): indices must be "
     r"<= 2\^31"),
    ("libsvm", "1 36893488147419103237:1", r":1: '36893488147419103237:1' "
     r"\(feature 1\): indices must be <= 2\^31"),
    # float() reads '1_0' as 10; the reader takes plain ASCII numbers (it
    # said the line "is not ASCII").
    ("libsvm", "1 1_0:1", r":1: '1 1_0:1' is not 'label index:value \.\.\.' "
     r"in plain ASCII numbers .*not '_' between digits"),
    ("criteo", "1" + "\t1234567890123456789" * 13 + "\ta" * 26,
     r":1: I1 is not a decimal integer \(field 2\)"),
    ("criteo", "1" + "\t" * 13 + "\t0123456789abcdef0" * 26,
     r":1: C1 is not a hex string \(field 15\)"),
])
def test_values_out_of_range_are_errors_with_file_and_line(fmt, line,
                                                           message):
  path = _write_temp(line + "\n")
  reader = criteo.read_criteo if fmt == "criteo" else libsvm.read_libsvm
  with pytest.raises(ValueError, match=path + message):
    list(reader([path]))


def test_float_values_round_as_numpy_does():
  path = _write_temp("1 1:3.4028235677973e38 2:1e-46 3:0.1\n")
  (chunk,) = list(libsvm.read_libsvm([path]))
  np.testing.assert_array_equal(
      chunk["values"], np.array([3.4028235677973e38, 1e-46, 0.1],
                                np.float64).astype(np.float32))


def test_gzip_members_and_zero_padding_read_as_the_gzip_module(tmp_path):
  text = "".join(f"{i % 2} {i + 1}:{i}\n" for i in range(30000))
  half = len(text) // 2
  path = tmp_path / "members.gz"
  path.write_bytes(gzip.compress(text[:half].encode()) + b"\0" * 5 +
                   gzip.compress(text[half:].encode()) + b"\0" * 3)
  plain = tmp_path / "plain.svm"
  plain.write_text(text)
  assert gzip.decompress(path.read_bytes()) == text.encode()
  _assert_same_chunks(libsvm.read_libsvm([str(path)], 1000),
                      reference_readers.read_libsvm([str(plain)], 1000))


def test_damaged_gzip_is_a_one_line_error_naming_the_file(tmp_path):
  data = bytearray(gzip.compress(b"1 1:1\n" * 1000))
  data[len(data) // 2] ^= 0xFF
  path = tmp_path / "damaged.gz"
  path.write_bytes(bytes(data))
  with pytest.raises(ValueError, match=rf"^{path}: the gzip data is damaged "
                     r"\(Error -3 while decompressing data: "):
    list(libsvm.read_libsvm([str(path)]))


def _run_off_gzip(tmp_path, text):
  """`text` gzipped with one byte in the middle third damaged so that the
  rest decodes as other valid codes past the trailer (no zlib error, no
  end): tried byte by byte, the compressed bytes being zlib's version's."""
  whole = gzip.compress(text.encode())
  for at in range(len(whole) // 3, 2 * len(whole) // 3):
    data = bytearray(whole)
    data[at] ^= 0x55
    decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
    try:
      size = len(decompressor.decompress(bytes(data)))
    except zlib.error:
      continue
    if not decompressor.eof:
      path = tmp_path / "run_off.svm.gz"
      path.write_bytes(bytes(data))
      return str(path), size
  raise AssertionError("no byte of the middle third runs the data off")


def test_gzip_damaged_mid_stream_is_damaged_not_truncated(tmp_path, capsys):
  # Highly compressible text (200x), where one bad byte need not break a
  # code: the data then runs on past the trailer that ends the file. The
  # same file cut short (its last 8 bytes compressed data) reads as before.
  text = "".join(f"{i % 2} 1:{i % 5} 2:{i % 3} 4:7\n" for i in range(20000))
  path, size = _run_off_gzip(tmp_path, text)
  said = (f"{path}: the gzip data is damaged (the file ends in a gzip "
          f"trailer for {len(text):,} bytes, but the data decodes on past "
          f"it, to {size:,})")
  with pytest.raises(ValueError) as raised:
    list(libsvm.read_libsvm([path]))
  assert str(raised.value) == said
  status = cli.main(["train", path, "--format", "libsvm", "--model-dir",
                     str(tmp_path / "m"), "--quiet"])
  assert (status, capsys.readouterr().err) == (
      2, f"tf-sdca train: error: {said}\n")
  cut = tmp_path / "cut.svm.gz"
  cut.write_bytes(open(path, "rb").read()[:-8])
  with pytest.raises(ValueError, match=rf"^{cut}: the gzip data ends early "
                     r"\(the file is truncated, or damaged\)$"):
    list(libsvm.read_libsvm([str(cut)]))


@pytest.mark.parametrize("rows", [
    60_000, pytest.param(10_000_000, marks=pytest.mark.slow)])
def test_generated_rows_read_as_the_reference_at_scale(tmp_path, rows):
  """`tf-sdca generate`'s file, chunk by chunk against the TensorFlow-ops
  reader (streamed: memory stays flat at 10M rows)."""
  assert cli.main(["generate", "--rows", str(rows), "--out", str(tmp_path),
                   "--files", "1", "--seed", "2"]) == 0
  path = str(tmp_path / "part-00000.tsv")
  count = 0
  for got, expected in itertools.zip_longest(
      criteo.read_criteo([path], bucket_bits=20),
      reference_readers.read_criteo([path], 65536, 20)):
    assert got is not None and expected is not None
    for key in got:
      np.testing.assert_array_equal(got[key], expected[key], err_msg=key)
    count += got["labels"].shape[0]
  assert count == rows


def test_a_model_trained_on_the_old_reader_predicts_alike_on_the_new(
    criteo_text, tmp_path, monkeypatch):
  """`train` and `predict` through the reader before the native one, then
  `predict` through the native one: the same scores, to the byte."""
  path, packed = criteo_text
  model_dir = str(tmp_path / "m")

  calls = []

  def old_reader(paths, batch_size=65536, bucket_bits=20, **unused):
    del unused
    calls.append(paths)
    return reference_readers.read_criteo(paths, batch_size, bucket_bits)

  def old_pieces(paths, batch_size=65536, bucket_bits=20,
                 ids_type=np.int64, **unused):
    """What the cache wrote from the old reader's chunks (one piece each,
    converted to the stored types)."""
    for chunk in old_reader(paths, batch_size, bucket_bits, **unused):
      yield [dict(labels=chunk["labels"].astype(np.float32),
                  dense=chunk["dense"].astype(np.float32),
                  ids=chunk["ids"].astype(ids_type))]

  with monkeypatch.context() as patch:
    patch.setattr(criteo, "read_criteo", old_reader)
    patch.setattr(criteo, "criteo_chunk_pieces", old_pieces)
    assert cli.main(["train", path, "--model-dir", model_dir, "--epochs",
                     "2", "--bucket-bits", "16", "--quiet"]) == 0
    assert cli.main(["predict", path, "--model-dir", model_dir, "--out",
                     str(tmp_path / "old.txt")]) == 0
  assert len(calls) == 2  # train's cache, predict
  for name, source in (("new.txt", path), ("new_gz.txt", packed)):
    assert cli.main(["predict", source, "--model-dir", model_dir, "--out",
                     str(tmp_path / name)]) == 0
    assert (tmp_path / name).read_text() == (
        tmp_path / "old.txt").read_text()


def test_a_highly_compressed_gzip_inflates_a_block_at_a_time(tmp_path,
                                                            monkeypatch):
  monkeypatch.setattr(text_files, "BLOCK_BYTES", 1 << 16)
  line = "1 1:1" + " " * 5000 + "\n"  # ~200:1 under gzip
  path = tmp_path / "spaces.gz"
  path.write_bytes(gzip.compress((line * 3000).encode()))
  sizes = [len(b) for b in text_files.line_blocks(str(path))]
  assert sum(sizes) == len(line) * 3000
  assert max(sizes) < 2 * (1 << 16) + len(line)
  (chunk,) = list(libsvm.read_libsvm([str(path)]))
  assert chunk["labels"].shape == (3000,)


@pytest.mark.parametrize("bucket_bits", [20, 31])
def test_int32_ids_are_the_int64_ids(criteo_text, bucket_bits):
  """The parser's int32 ids (what the cache stores) hold the int64 ids
  exactly, up to 31 bits; the reader before gives the same ids."""
  path, _ = criteo_text
  with open(path, "rb") as f:
    text = f.read()
  wide = text_parser.parse_criteo(text, bucket_bits)
  narrow = text_parser.parse_criteo(text, bucket_bits, ids_type=np.int32)
  assert narrow["ids"].dtype == np.int32
  expected = wide["ids"]
  assert expected.max() >= 2 ** (bucket_bits - 1)  # the top bit is used
  np.testing.assert_array_equal(narrow["ids"], expected)
  (chunk,) = list(reference_readers.read_criteo([path], 65536, bucket_bits))
  np.testing.assert_array_equal(expected, chunk["ids"])
  for key in ("labels", "dense", "lines", "bad_lines", "num_lines"):
    np.testing.assert_array_equal(narrow[key], wide[key])
  with pytest.raises(ValueError, match="ids_type"):
    text_parser.parse_criteo(text, 32, ids_type=np.int32)


@pytest.fixture(scope="module")
def criteo_with_a_blank_chunk(tmp_path_factory):
  """3,500 generated lines, lines 1,000..1,999 blank: with 1,000 lines a
  chunk, chunk 1 has no row."""
  path = str(tmp_path_factory.mktemp("blank_chunk") / "day.tsv")
  write_criteo_tsv(path, generate_criteo_arrays(3500, seed=3))
  with open(path) as f:
    lines = f.read().splitlines()
  lines[1000:2000] = [""] * 1000
  with open(path, "w") as f:
    f.write("\n".join(lines) + "\n")
  return path


@pytest.mark.parametrize("bucket_bits", [18, 33])
def test_the_cache_files_are_np_save_of_the_reference_chunks(
    criteo_with_a_blank_chunk, tmp_path, monkeypatch, bucket_bits):
  """The cache writes each chunk's pieces (one per parsed block, no
  concatenation) under one header: byte for byte the file np.save writes of
  the reference reader's chunk in the stored types, the chunk without rows
  included, whatever the size of the writes; read_criteo's chunks (pieces
  concatenated) are the reference's too. `on_chunk` sees each chunk's
  pieces as written."""
  path = criteo_with_a_blank_chunk
  monkeypatch.setattr(text_files, "BLOCK_BYTES", 60_000)  # ~4 per chunk
  # (writes ending inside rows and inside the pieces)
  monkeypatch.setattr(files, "WRITE_BYTES", 4093)
  expected = list(reference_readers.read_criteo([path], 1000, bucket_bits))
  assert [c["labels"].shape[0] for c in expected] == [1000, 0, 1000, 500]
  _assert_same_chunks(criteo.read_criteo([path], 1000, bucket_bits), expected)
  assert max(len(p) for p in criteo.criteo_chunk_pieces(
      [path], 1000, bucket_bits)) >= 3
  monkeypatch.setattr(criteo, "criteo_chunk_pieces", functools.partial(
      criteo.criteo_chunk_pieces, batch_size=1000))
  seen = []
  _, info = cache.load_or_build(
      [path], "criteo", str(tmp_path / "c"), bucket_bits, verbose=0,
      on_chunk=lambda pieces: seen.append(
          {k: np.concatenate([p[k] for p in pieces]) for k in pieces[0]}))
  assert info["chunks"] == [1000, 0, 1000, 500]
  stored = dict(labels=np.float32, dense=np.float32,
                ids=np.int32 if bucket_bits <= 31 else np.int64)
  for i, chunk in enumerate(expected):
    for name, dtype in stored.items():
      buffer = io.BytesIO()
      np.save(buffer, chunk[name].astype(dtype))
      with open(tmp_path / "c" / f"part-{i:05d}-{name}.npy", "rb") as f:
        assert f.read() == buffer.getvalue(), (i, name)
      np.testing.assert_array_equal(seen[i][name], chunk[name].astype(dtype))
  cache.load_or_build([path], "criteo", str(tmp_path / "c"), bucket_bits,
                      verbose=0, on_chunk=seen.append)  # read: not called
  assert len(seen) == len(expected)


def test_train_takes_the_counts_maxima_as_it_builds_the_cache(
    criteo_with_a_blank_chunk, tmp_path, monkeypatch):
  """`train` building its cache takes the counts' maxima from the chunks as
  they are written; a second `train` reading that cache takes them from
  the files: the same scale, and the same model to the bit."""
  path = criteo_with_a_blank_chunk
  monkeypatch.setattr(criteo, "criteo_chunk_pieces", functools.partial(
      criteo.criteo_chunk_pieces, batch_size=1000))
  read = []
  counts = model_files.criteo_count_maxima
  monkeypatch.setattr(model_files, "criteo_count_maxima",
                      lambda parts: read.append(1) or counts(parts))
  states = []
  for built in (True, False):
    model_dir = str(tmp_path / f"m{built}")
    assert cli.main(["train", path, "--model-dir", model_dir, "--cache-dir",
                     str(tmp_path / "c"), "--epochs", "2", "--bucket-bits",
                     "14", "--quiet"]) == 0
    # built: one call per chunk (4) and one over their maxima; read: one
    assert len(read) == (5 if built else 6)
    states.append(model_files.load_model(model_dir))
  (meta, new), (meta_read, new_read) = states
  arrays, _ = cache.load_or_build([path], "criteo", str(tmp_path / "c"), 14,
                                  verbose=0)
  assert meta["scale"] == counts(arrays["dense"]).tolist()
  assert meta_read["scale"] == meta["scale"]
  assert new["duals"].std() > 0
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(new[key], new_read[key], err_msg=key)


def test_checkpoints_written_in_small_writes_load_alike(tmp_path,
                                                        monkeypatch):
  """`save_npz_atomically` writes through writes of at most WRITE_BYTES:
  the arrays load back as given."""
  monkeypatch.setattr(files, "WRITE_BYTES", 4093)
  arrays = dict(weights=np.random.default_rng(0).normal(size=70_001),
                epoch=np.array(3), meta_json=np.array('{"rows": 2}'))
  files.save_npz_atomically(str(tmp_path / "c.npz"), **arrays)
  with np.load(tmp_path / "c.npz") as saved:
    assert sorted(saved.files) == sorted(arrays)
    for name, value in arrays.items():
      np.testing.assert_array_equal(saved[name], value, err_msg=name)


def test_packing_cache_parts_in_reused_buffers_trains_as_whole_arrays():
  """`criteo_row_chunks` scales and sorts each cache part into buffers that
  the next part overwrites (grown for a larger one): the model fitted on
  them is, bit for bit, the one fitted on the whole arrays (`features`)."""
  data = generate_criteo_arrays(2100, num_buckets=2**12, seed=5)
  sizes = [300, 700, 200, 900]  # grows, shrinks, grows
  bounds = np.cumsum([0] + sizes)

  def arrays():
    cut = lambda a: [a[lo:hi] for lo, hi in zip(bounds[:-1], bounds[1:])]
    return dict(labels=cut(data["labels"].astype(np.float32)),
                dense=cut(data["dense"].astype(np.float32)),
                ids=cut(data["cat_ids"].astype(np.int32)))

  meta = model_files.new_meta("criteo", "logistic", 0.0, 1e-3, 0, 12, 2100)
  models = []
  for chunked in (True, False):
    # (The order given: on arrays the default reads the rows' norms and the
    # l2, which rows in chunks do not; this compares the packing.)
    model = InMemorySdca(loss="logistic", l2=1e-3, seed=0,
                         visit_order="permutation")
    if chunked:
      model.fit(rows=model_files.criteo_row_chunks(arrays(), meta),
                epochs=3, verbose=0)
    else:
      labels, features = model_files.features("criteo", arrays(), meta)
      model.fit(labels, epochs=3, verbose=0, **features)
    models.append(model.state_dict())
  assert models[0]["duals"].std() > 0
  for key in ("sparse_weights", "dense_weights", "duals"):
    np.testing.assert_array_equal(models[0][key], models[1][key], err_msg=key)


def test_libsvm_lone_cr_line_ends_read_in_blocks_as_newlines(
    libsvm_text, tmp_path, monkeypatch):
  # A file whose lines all end in a lone '\r' (old Mac files): the same rows
  # as with '\n', read in blocks of whole lines (they were cut at '\n' only:
  # the whole file became one block, and its parse looked for a '\n' from
  # every line to the block's end, quadratic in the lines) and split at line
  # ends for the parser's threads (ranges of >= 256 KiB).
  path, _ = libsvm_text
  with open(path, "rb") as f:
    lines = f.read().replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(
        b"\n")
  body = b"\n".join(lines * 3)
  unix, mac = tmp_path / "unix.svm", tmp_path / "mac.svm"
  unix.write_bytes(body)
  mac.write_bytes(body.replace(b"\n", b"\r"))
  assert len(body) > 2 * (1 << 18) and b"\n" not in mac.read_bytes()
  _assert_same_chunks(libsvm.read_libsvm(str(mac), 700),
                      libsvm.read_libsvm([str(unix)], 700))
  monkeypatch.setattr(text_files, "BLOCK_BYTES", 20_000)
  blocks = list(text_files.line_blocks(str(mac), cr_ends=True))
  longest = max(len(line) for line in lines) + 1
  assert len(blocks) > 10 and max(map(len, blocks)) < 20_000 + longest
  assert b"".join(blocks) == mac.read_bytes()
  assert all(b.endswith(b"\r") for b in blocks[:-1])
  _assert_same_chunks(libsvm.read_libsvm([str(mac)], 700),
                      libsvm.read_libsvm([str(unix)], 700))
  # A bad line deep in the file is named by its line, as with '\n'.
  bad = len(lines) * 2 + 5
  broken = lines * 3
  broken[bad - 1] = b"1 2:1 2:3"
  mac.write_bytes(b"\r".join(broken))
  with pytest.raises(ValueError, match=rf"mac.svm:{bad}: '2:3' \(feature 2\)"):
    list(libsvm.read_libsvm([str(mac)], 700))


def test_one_path_is_read_as_a_list_of_one(libsvm_text, criteo_text,
                                           tmp_path):
  # A str (or path object) is one file, as tf.data.TextLineDataset takes it:
  # it was read as its characters ("no such file: b").
  svm, _ = libsvm_text
  import pathlib  # pylint: disable=import-outside-toplevel
  for one in (svm, pathlib.Path(svm), svm.encode()):
    _assert_same_chunks(libsvm.read_libsvm(one, 700),
                        libsvm.read_libsvm([svm], 700))
  got = libsvm.libsvm_dataset(svm, 700).as_numpy_iterator()
  np.testing.assert_array_equal(
      np.concatenate([c["labels"] for c in got]),
      np.concatenate([c["labels"] for c in libsvm.read_libsvm([svm], 700)]))
  tsv, _ = criteo_text
  _assert_same_chunks(criteo.read_criteo(tsv, 1000),
                      criteo.read_criteo([tsv], 1000))
  got = criteo.criteo_dataset(tsv, 1000).as_numpy_iterator()
  np.testing.assert_array_equal(
      np.concatenate([c["labels"] for c in got]),
      np.concatenate([c["labels"] for c in criteo.read_criteo([tsv], 1000)]))
  one, _ = cache.load_or_build(svm, "libsvm", str(tmp_path / "c1"),
                               verbose=0)
  listed, _ = cache.load_or_build([svm], "libsvm", str(tmp_path / "c2"),
                                  verbose=0)
  assert one.keys() == listed.keys()
  for key in one:
    np.testing.assert_array_equal(cache.concatenate(one[key]),
                                  cache.concatenate(listed[key]), err_msg=key)


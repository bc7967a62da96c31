"""What the Criteo and LIBSVM readers share about their input files: gzip is
read transparently (by its magic bytes, whatever the name), and a line that
is not text is reported as such instead of as mojibake."""
import gzip

GZIP_MAGIC = b"\x1f\x8b"


def is_gzip(path):
  """Whether `path` starts with gzip's magic bytes."""
  with open(path, "rb") as f:
    return f.read(2) == GZIP_MAGIC


def open_text(path):
  """`path` as UTF-8 text (undecodable bytes replaced), gunzipped if it is
  gzip."""
  if is_gzip(path):
    return gzip.open(path, "rt", encoding="utf-8", errors="replace")
  return open(path, encoding="utf-8", errors="replace")


BINARY = "not text (binary bytes)"


def is_binary(text):
  """Whether a decoded line holds NUL bytes or is mostly undecodable."""
  return "\x00" in text or text.count("\ufffd") * 4 > len(text)


def shown(text, limit=120):
  """A line for an error message: BINARY for binary bytes, else the line
  (cut at `limit`) as a Python literal."""
  if is_binary(text):
    return BINARY
  return repr(text if len(text) <= limit else text[:limit] + "...")

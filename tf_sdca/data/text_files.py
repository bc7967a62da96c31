"""What the Criteo and LIBSVM readers share about their input files: gzip is
read transparently (by its magic bytes, whatever the name), and a line that
is not text is reported as such instead of as mojibake. The readers parse
blocks of whole lines natively (`line_blocks`)."""
import concurrent.futures
import numbers
import os
import zlib

import numpy as np

GZIP_MAGIC = b"\x1f\x8b"


def path_list(paths):
  """`paths` as a list of str: one path (a str, bytes or `os.PathLike`) is a
  list of one, as `tf.data.TextLineDataset` takes it (a str was read as its
  characters, each one a file)."""
  if isinstance(paths, (str, bytes, os.PathLike)):
    paths = [paths]
  return [os.fsdecode(p) for p in paths]


def check_chunk_rows(name, rows):
  """Raises a ValueError naming `name` unless `rows` (rows per chunk) is an
  integer >= 1 (0 made a reader yield empty chunks without end)."""
  if (not isinstance(rows, numbers.Integral) or isinstance(rows, bool) or
      rows < 1):
    raise ValueError(f"{name} must be an integer >= 1 (rows per chunk), got "
                     f"{rows!r}")


def is_gzip(path):
  """Whether `path` starts with gzip's magic bytes."""
  with open(path, "rb") as f:
    return f.read(2) == GZIP_MAGIC


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


# Bytes of text per native parse call: large enough that the call's fixed
# costs vanish (~100k Criteo rows), small enough to keep memory flat.
BLOCK_BYTES = 16 << 20


# How far the size in a damaged member's trailer may be from what its data
# decoded to (see `_early_end`): 64 KiB, plus 1% of the size up to 1 MiB.
# A file cut short ends in compressed data, whose last 4 bytes fall in that
# window by chance at most (2 x 1.06 MiB) / 4 GiB = 5e-4 of the time.
_TRAILER_SLACK = 64 << 10


def _early_end(path, last, size):
  """The error for a gzip file that ends inside a member's data, which
  `size` bytes came out of; `last`: the file's last 8 bytes.

  A truncated file ends in compressed data. Damage inside the stream
  usually breaks a code or the CRC (a zlib error), but in highly
  compressible text (hundreds of times over) one bad byte can turn the
  rest into other valid codes that never reach the end: then the file
  still ends in its member's trailer (CRC-32, and the size mod 2^32), and
  the data decoded on past it to about that size (a single byte's damage
  changed it by 0.4% at most in tests; a file of one line repeated, by up to
  15%, which this does not catch). Neither case can be told from the other
  for certain: a file that ends inside the data is the start of some
  longer stream.
  """
  if len(last) == 8:
    stated = int.from_bytes(last[4:], "little")
    apart = abs((size - stated + (1 << 31)) % (1 << 32) - (1 << 31))
    if apart <= _TRAILER_SLACK + min(size // 100, 1 << 20):
      return (f"{path}: the gzip data is damaged (the file ends in a gzip "
              f"trailer for {stated:,} bytes, but the data decodes on past "
              f"it, to {size:,})")
  return (f"{path}: the gzip data ends early (the file is truncated, or "
          "damaged)")


def _gunzipped(f, path, block_bytes):
  """The gunzipped bytes of the open gzip file `f`, in pieces of about
  `block_bytes`. zlib directly, not the gzip module: its reader adds a
  Python CRC pass and 128 KB reads (here 1.3x slower in all). Members
  follow each other; zero bytes between or after them are padding (as the
  gzip module reads them)."""
  decompressor = None  # None: between members
  member_size = 0  # the bytes the current member has given
  last = b""  # the file's last 8 bytes, so far
  pieces, size = [], 0
  while True:
    raw = f.read(1 << 22)
    if not raw:
      break
    last = (last + raw[-8:])[-8:]
    while raw:
      if decompressor is None:
        raw = raw.lstrip(b"\0")
        if not raw:
          break
        decompressor = zlib.decompressobj(zlib.MAX_WBITS | 16)
        member_size = 0
      # At most a block per call: a highly compressed 4 MB read could
      # otherwise inflate to gigabytes at once.
      piece = decompressor.decompress(raw, block_bytes)
      pieces.append(piece)
      size += len(piece)
      member_size += len(piece)
      raw = decompressor.unconsumed_tail
      if decompressor.eof:
        raw = decompressor.unused_data
        decompressor = None
      if size >= block_bytes:
        yield b"".join(pieces)
        pieces, size = [], 0
  if decompressor is not None:
    raise ValueError(_early_end(path, last, member_size))
  if pieces:
    yield b"".join(pieces)


def _raw_blocks(path, block_bytes, cr_ends=False):
  """The bytes of `path` (gunzipped if gzip) in blocks of whole lines (with
  `cr_ends`, a lone '\\r' ends a line too)."""
  gzipped = is_gzip(path)
  try:
    with open(path, "rb") as f:
      pieces = (_gunzipped(f, path, block_bytes) if gzipped else
                iter(lambda: f.read(block_bytes), b""))
      rest = b""
      for data in pieces:
        if rest:
          data = rest + data
        cut = data.rfind(b"\n") + 1
        if cut == 0 and cr_ends:
          # No '\n': the last lone '\r' (one last in `data` may be the
          # first half of a '\r\n' split between reads).
          cut = data.rfind(b"\r", 0, len(data) - 1) + 1
        if cut == 0:  # one line longer than a block: read on
          rest = data
          continue
        yield data[:cut] if cut < len(data) else data
        rest = data[cut:]
      if rest:
        yield rest
  except zlib.error as error:
    # A bad code or CRC inside the stream, or bytes after a member that are
    # not another one: the file is damaged, not cut short.
    raise ValueError(f"{path}: the gzip data is damaged ({error})") from None


_END = object()


def prefetched(items):
  """Yields `items`, each next one computed on a background thread while the
  caller works on the current one."""
  items = iter(items)
  with concurrent.futures.ThreadPoolExecutor(1) as worker:
    pending = worker.submit(next, items, _END)
    while True:
      item = pending.result()
      if item is _END:
        return
      pending = worker.submit(next, items, _END)
      yield item


def line_blocks(path, block_bytes=None, cr_ends=False):
  """Yields the bytes of `path` (gunzipped if it is gzip) in blocks of whole
  lines: each block ends with '\\n' but the file's last (with `cr_ends`, as
  the LIBSVM reader cuts lines, with a lone '\\r' where its bytes hold no
  '\\n'). The next block is read (and gunzipped) on a background thread.

  Raises:
    ValueError: `path: ...` for a truncated or damaged gzip file.
  """
  yield from prefetched(_raw_blocks(path, block_bytes or BLOCK_BYTES,
                                    cr_ends))


def parsed_blocks(path, parse, block_bytes=None, cr_ends=False):
  """Yields (block, parse(block)) for `line_blocks(path, block_bytes,
  cr_ends)`, the next block parsed on a background thread while the caller
  stores the current one (the native parser runs on its own threads,
  without the GIL)."""
  yield from prefetched((block, parse(block)) for block in
                        line_blocks(path, block_bytes, cr_ends))


def bad_line_messages(out, block, first_line, message, skip_bad_lines,
                      bad_lines):
  """Raises, or counts into `bad_lines`, the malformed lines of a parsed
  block (`out`'s `bad_lines` / `bad_bytes`, lines counted from
  `first_line`); `message(line, raw_bytes)` words one (1-based line)."""
  for k, line in enumerate(out["bad_lines"]):
    if skip_bad_lines and len(bad_lines.first) >= 10:
      bad_lines.count += len(out["bad_lines"]) - k  # no more words needed
      return
    begin, end = out["bad_bytes"][k]
    text = message(first_line + int(line) + 1, block[begin:end])
    if not skip_bad_lines:
      raise ValueError(text)
    bad_lines.add(text)


def chunk_pieces_by_line(path, parse, keys, lines_per_chunk, message,
                         skip_bad_lines, bad_lines, block_bytes=None):
  """Yields the rows of one file in chunks of `lines_per_chunk` lines, each
  chunk as the list of its pieces: views of the parsed blocks' arrays, one
  per block the chunk's lines span (possibly empty), never copied into one
  array (the cache writes them one after the other).

  Args:
    path: the file.
    parse: block bytes -> dict of numpy arrays: the row arrays `keys` (one
      entry per row along axis 0), `lines` (each row's 0-based line in the
      block), `bad_lines`, `bad_bytes`, `num_lines`.
    keys: the row arrays yielded.
    lines_per_chunk: chunk k holds the rows of lines
      [k * lines_per_chunk, (k + 1) * lines_per_chunk) (possibly none).
    message, skip_bad_lines, bad_lines: as `bad_line_messages`'.
    block_bytes: bytes per parse call (default BLOCK_BYTES).

  Yields:
    lists of dicts of `keys`' arrays.
  """
  pending = []  # the pieces of chunk `chunk`, whose lines are not all read
  chunk = first_line = 0
  for block, out in parsed_blocks(path, parse, block_bytes):
    bad_line_messages(out, block, first_line, message, skip_bad_lines,
                      bad_lines)
    lines = out["lines"] + first_line  # rows' lines in the file
    first_line += int(out["num_lines"])
    start = 0
    while (chunk + 1) * lines_per_chunk <= first_line:  # chunk complete
      end = start + int(np.searchsorted(lines[start:],
                                        (chunk + 1) * lines_per_chunk))
      pending.append({k: out[k][start:end] for k in keys})
      yield pending
      pending, chunk, start = [], chunk + 1, end
    if chunk * lines_per_chunk < first_line:  # the next chunk has begun
      pending.append({k: out[k][start:] for k in keys})
  if chunk * lines_per_chunk < first_line:
    yield pending

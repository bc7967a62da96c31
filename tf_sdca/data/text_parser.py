"""The native parser of Criteo and LIBSVM text, without TensorFlow.

`tf_sdca/_text_reader.so` (kernels/lib/text_reader_lib.cc over
kernels/core/text_reader) is a plain shared library, called through ctypes:
a call releases the GIL and parses a block of whole lines on a few threads.
Importing this module does not import TensorFlow, so `tf-sdca train` parses
and writes its cache on a thread while the main thread imports TensorFlow.
The Criteo ids are hashed with TensorFlow's own FarmHash `Fingerprint64`
(what `tf.strings.to_hash_bucket_fast` applies), taken from TensorFlow's
framework library, which is loaded for it without importing TensorFlow's
Python package.

Each parse returns a dict of numpy arrays: the rows (Criteo: `labels`
float32 `[n]`, `dense` float32 `[n, 13]`, `ids` `[n, 26]`; LIBSVM:
`labels` float32 `[n]`, `lengths` int64 `[n]`, `indices` int64 `[nnz]`
(0-based), `values` float32 `[nnz]`), `lines` int64 `[n]` (each row's
0-based line in the block), `bad_lines` int64 `[k]` and `bad_bytes` int64
`[k, 2]` (the malformed lines and their byte ranges), and `num_lines`.
"""
import ctypes
import importlib.util
import os
import threading

import numpy as np

from tf_sdca import native_library

_LIBRARY = "_text_reader.so"
# TensorFlow's framework library and its `util::Fingerprint64(const char*,
# size_t)` (exported, not declared by any header the pip package ships).
_FRAMEWORK = "libtensorflow_framework.so.2"
_FINGERPRINT64 = "_ZN4util13Fingerprint64EPKcm"

_lock = threading.Lock()
_library = None
_fingerprint = None


def _tensorflow_dir():
  """TensorFlow's package directory, found without importing it."""
  spec = importlib.util.find_spec("tensorflow")
  if spec is None or not spec.submodule_search_locations:
    raise ImportError("tf_sdca's text parser hashes with TensorFlow's "
                      "FarmHash: install TensorFlow")
  return list(spec.submodule_search_locations)[0]


def load():
  """Loads the library (and TensorFlow's framework library, for its hash)
  once; returns the library. TensorFlow's framework library writes
  start-up banners to stderr when it is loaded first (`tf-sdca` loads it
  with stderr silenced)."""
  global _library, _fingerprint
  with _lock:
    if _library is None:
      path = native_library.path_of(_LIBRARY)
      # (Loaded RTLD_LOCAL, as TensorFlow's import loads it: made global,
      # the BoringSSL inside it would stand in for OpenSSL's symbols in
      # Python's own _hashlib, which crashes. TensorFlow's import finds it
      # loaded, by its name.)
      framework = ctypes.CDLL(os.path.join(_tensorflow_dir(), _FRAMEWORK))
      library = ctypes.CDLL(path)
      i64, ptr = ctypes.c_int64, ctypes.c_void_p
      library.TfSdcaCriteoParse.restype = ptr
      library.TfSdcaCriteoParse.argtypes = [ptr, i64, ctypes.c_int, ptr,
                                            ctypes.c_int, ptr]
      library.TfSdcaCriteoTake.restype = None
      library.TfSdcaCriteoTake.argtypes = [ptr] * 4 + [ctypes.c_int] + \
          [ptr] * 3
      library.TfSdcaLibsvmParse.restype = ptr
      library.TfSdcaLibsvmParse.argtypes = [ptr, i64, ctypes.c_int, ptr]
      library.TfSdcaLibsvmTake.restype = None
      library.TfSdcaLibsvmTake.argtypes = [ptr] * 8
      _fingerprint = ctypes.cast(getattr(framework, _FINGERPRINT64),
                                 ctypes.c_void_p).value
      _library = library
  return _library


def _threads():
  try:
    return len(os.sched_getaffinity(0))
  except AttributeError:  # not Linux
    return os.cpu_count() or 1


def _address(array):
  return array.ctypes.data


def _lines(sizes):
  """The `lines`, `bad_lines`, `bad_bytes` arrays for `sizes` (rows, -, bad
  lines, lines)."""
  return dict(lines=np.empty(sizes[0], np.int64),
              bad_lines=np.empty(sizes[2], np.int64),
              bad_bytes=np.empty((sizes[2], 2), np.int64))


def parse_criteo(text, bucket_bits, ids_type=np.int64):
  """Parses a block of Criteo TSV lines (bytes): the features of
  `tf_sdca.data.criteo.parse_criteo_lines`, `ids` as `ids_type` (np.int64,
  or np.int32 for bucket_bits <= 31: the cache's type).

  Raises:
    ValueError: bucket_bits outside [1, 62], or past 31 with int32 ids.
  """
  if not 1 <= bucket_bits <= 62:
    raise ValueError(f"bucket_bits must be in [1, 62], got {bucket_bits}")
  ids_type = np.dtype(ids_type)
  if ids_type not in (np.int32, np.int64) or (
      ids_type == np.int32 and bucket_bits > 31):
    raise ValueError(f"ids_type must be np.int64, or np.int32 for "
                     f"bucket_bits <= 31; got {ids_type.name} for "
                     f"bucket_bits {bucket_bits}")
  library = load()
  data = np.frombuffer(text, np.uint8)
  sizes = np.zeros(4, np.int64)
  rows = library.TfSdcaCriteoParse(_address(data), data.size, bucket_bits,
                                   _fingerprint, _threads(),
                                   _address(sizes))
  n = int(sizes[0])
  out = dict(labels=np.empty(n, np.float32),
             dense=np.empty((n, 13), np.float32),
             ids=np.empty((n, 26), ids_type), **_lines(sizes))
  library.TfSdcaCriteoTake(
      rows, *(_address(out[k]) for k in ("labels", "dense", "ids")),
      int(ids_type == np.int32),
      *(_address(out[k]) for k in ("lines", "bad_lines", "bad_bytes")))
  out["num_lines"] = int(sizes[3])
  return out


def parse_libsvm(text):
  """Parses a block of LIBSVM lines (bytes): `labels`, `lengths`,
  `indices`, `values` of its rows (tf_sdca.data.libsvm's)."""
  library = load()
  data = np.frombuffer(text, np.uint8)
  sizes = np.zeros(4, np.int64)
  rows = library.TfSdcaLibsvmParse(_address(data), data.size, _threads(),
                                   _address(sizes))
  n, nnz = int(sizes[0]), int(sizes[1])
  out = dict(labels=np.empty(n, np.float32), lengths=np.empty(n, np.int64),
             indices=np.empty(nnz, np.int64),
             values=np.empty(nnz, np.float32), **_lines(sizes))
  library.TfSdcaLibsvmTake(
      rows, *(_address(out[k]) for k in ("labels", "lengths", "indices",
                                         "values", "lines", "bad_lines",
                                         "bad_bytes")))
  out["num_lines"] = int(sizes[3])
  return out

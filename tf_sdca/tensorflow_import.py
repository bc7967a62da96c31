"""TensorFlow's import for the `tf-sdca` command, cut to what a command uses.

`import tensorflow` runs TensorFlow's `__init__`, which imports its whole
public API eagerly: 2,400 modules (data pipelines, distribution
strategies, TPU, Lite, the legacy Keras layers, ...), and through Keras
4,000 in all: on the project's 2-core machines 1.65-1.85 s of CPU on a
fast one, 2.3-3.7 s without Keras and 4.1-6.4 s with it on a slower one
(2026-11-29), against ~0.5 s (1.0-1.3 s there) for the runtime
and the modules the training ops need. A new `tf-sdca train` process waits
for it before its first epoch. Two ways in:

- `import_tensorflow()`: the real import, without its eager import of Keras
  (a third of it).
- `import_tensorflow_lazily()`: the runtime (`pywrap_tensorflow`), TensorFlow
  2's behaviour switched on as `__init__` does, and the modules that
  register how values become tensors, with a stand-in `tensorflow` module
  whose names are each imported on first use, from where TensorFlow's
  generated `__init__.py` files say they come from (the lines `from
  tensorflow.python.X import Y as Z`): `tf.name_scope` is
  `tensorflow.python.framework.ops.name_scope_v2`, the object the real
  import binds, `tf.errors` a stand-in of `tensorflow._api.v2.errors`, and
  so on. (A few ops, `tf.constant` and `tf.reduce_sum` among them, the real
  import binds wrapped for numpy's dtype promotion,
  `tf.experimental.numpy`'s: the wrapper calls the op as it is while that
  promotion is off, the default, which no command changes.) A name those
  files do not import (`tf.keras`, which `__init__` sets up by hand)
  imports the real TensorFlow, once, and is read from it; so does any
  failure of the stand-in's own import. Where `__init__` would load kernel
  or device plugins, or a modular file system, the real import runs
  instead.

`tf-sdca train --quiet` in one process uses the stand-in (it shows no
Keras progress bar): on 1M Criteo rows on the 2-core machine its import
took 0.55 s of CPU instead of 1.65-1.75 s, 650 modules instead of 2,400
(on the slower machine of 2026-11-29, the import alone: 1.0-1.3 s, 604
modules, against 2.3-3.7 s; tests/test_tensorflow_import.py: the same
models, to the byte, and the same messages as with the real import).
"""
import importlib
import importlib.util
import os
import re
import sys
import threading
import types

# The module TensorFlow's `__init__` imports eagerly at its end, which
# imports Keras and, through Keras's scikit-learn wrappers, scikit-learn:
# about a third of `import tensorflow` (1.0 of 3.0 s on the 2-core machine).
_EAGER_KERAS = "keras.src.optimizers"

# An import line of TensorFlow's generated API `__init__.py` files.
_API_LINE = re.compile(r"^from (tensorflow[\w.]*) import (\w+)(?: as (\w+))?",
                       re.M)


def import_tensorflow():
  """Imports TensorFlow without its eager import of Keras: TensorFlow's
  `__init__` wraps that import in `except ImportError: pass`, so a None
  entry in `sys.modules` skips it; the entry is removed again, and
  `tf.keras` still loads Keras on first use (the commands that show a
  progress bar). Skipped too is what that import registers at start-up,
  Keras's optimizers for loading SavedModels that hold them, which no
  command loads. Returns the module (the real one after
  `import_tensorflow_lazily`'s stand-in, which forwards to it)."""
  imported = sys.modules.get("tensorflow")
  if isinstance(imported, _LazyApi):
    del sys.modules["tensorflow"]
  elif imported is not None or _EAGER_KERAS in sys.modules:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    return tf
  sys.modules[_EAGER_KERAS] = None
  try:
    tf = importlib.import_module("tensorflow")
  except BaseException:
    if imported is not None and "tensorflow" not in sys.modules:
      sys.modules["tensorflow"] = imported  # the stand-in, as before
    raise
  finally:
    if sys.modules.get(_EAGER_KERAS, 0) is None:
      del sys.modules[_EAGER_KERAS]
  return tf


class _LazyApi(types.ModuleType):
  """A stand-in for TensorFlow's API module `full_name` (`tensorflow`, or
  a `tensorflow._api.v2...` submodule such as `tensorflow.errors`'s):
  each name is imported on first use from where the module's `__init__.py`
  imports it; a name it does not import is read from the real module."""

  def __init__(self, full_name, init_file):
    super().__init__(full_name)
    self.__file__ = init_file
    self._lazy_names = None

  def __getattr__(self, name):
    where = self._where(name)
    if where is None and name.startswith("__") and name.endswith("__"):
      # Python's own probes (__path__, __spec__, ...); the dunders that
      # TensorFlow's `__init__` binds, __version__ among them, have lines.
      raise AttributeError(name)
    if where is None:
      value = getattr(_real(self.__name__), name)
    elif where[0].startswith("tensorflow._api."):
      child = where[0] + "." + where[1]
      value = _LazyApi(child, os.path.join(
          os.path.dirname(_ROOT_INIT[0]), *child.split(".")[1:],
          "__init__.py"))
    else:
      value = getattr(importlib.import_module(where[0]), where[1])
    setattr(self, name, value)
    return value

  def _where(self, name):
    """(module, attribute) that `name` is imported from, or None."""
    if self._lazy_names is None:
      with open(self.__file__, encoding="utf-8") as f:
        self._lazy_names = {alias or attr: (module, attr) for module, attr,
                            alias in _API_LINE.findall(f.read())}
    return self._lazy_names.get(name)


# Modules that register, as they are imported, how Python and numpy values
# and TensorFlow's own types become tensors (`tf.convert_to_tensor`):
# imported by the real import's API modules, here up front.
_REGISTERING = (
    "tensorflow.python.framework.constant_op",
    "tensorflow.python.framework.indexed_slices",
    "tensorflow.python.ops.array_ops",
    "tensorflow.python.ops.math_ops",
    "tensorflow.python.ops.resource_variable_ops",
    "tensorflow.python.ops.variables",
)

# TensorFlow's `__init__.py` (set by `import_tensorflow_lazily`).
_ROOT_INIT = [None]
# Held while the real import replaces the stand-in (the epochs' thread may
# read a name beside the main thread).
_REAL_IMPORT = threading.Lock()


def _real(name):
  """The real API module `name` (TensorFlow imported for it, once)."""
  with _REAL_IMPORT:
    tf = import_tensorflow()
  if name == "tensorflow":
    return tf
  return importlib.import_module(name)


def _needs_real_import(tf_dir):
  """Whether TensorFlow's `__init__` would do more than the stand-in:
  load kernel or device plugins, or a modular file system."""
  if os.path.exists(os.path.join(tf_dir, "core", "kernels")):
    return True
  if os.environ.get("TF_PLUGGABLE_DEVICE_LIBRARY_PATH") or \
      os.environ.get("TF_USE_MODULAR_FILESYSTEM", "0") in ("true", "1"):
    return True
  # (the directories `__init__` looks in for them)
  import site  # pylint: disable=import-outside-toplevel
  import sysconfig  # pylint: disable=import-outside-toplevel
  dirs = [p for p in sys.path if "site-packages" in p]
  if site.ENABLE_USER_SITE and site.USER_SITE is not None:
    dirs.append(site.USER_SITE)
  dirs += site.getsitepackages()
  dirs += [sysconfig.get_path(name, scheme)
           for scheme in sysconfig.get_scheme_names()
           for name in ("purelib", "platlib")]
  return any(os.path.exists(os.path.join(d, "tensorflow-plugins"))
             for d in dirs if d)


def import_tensorflow_lazily():
  """TensorFlow's runtime with a stand-in `tensorflow` module whose names
  are imported on first use (the module docstring); the real import where
  that is not the same (`_needs_real_import`) or fails. Returns the
  module."""
  if "tensorflow" in sys.modules:
    return sys.modules["tensorflow"]
  spec = importlib.util.find_spec("tensorflow")
  if spec is None or not spec.origin or \
      _needs_real_import(os.path.dirname(spec.origin)):
    return import_tensorflow()
  stand_in = _LazyApi("tensorflow", spec.origin)
  stand_in.__path__ = list(spec.submodule_search_locations)
  stand_in.__spec__ = spec
  _ROOT_INIT[0] = spec.origin
  sys.modules["tensorflow"] = stand_in
  try:
    # What TensorFlow's `__init__` does before and after its API imports.
    os.environ.setdefault("ENABLE_RUNTIME_UPTIME_TELEMETRY", "1")
    # pylint: disable=import-outside-toplevel,unused-import
    from tensorflow.python import pywrap_tensorflow  # noqa: F401
    os.environ["TF2_BEHAVIOR"] = "1"
    from tensorflow.python import tf2
    tf2.enable()
    from tensorflow.python.compat import v2_compat
    # pylint: enable=import-outside-toplevel,unused-import
    v2_compat.enable_v2_behavior()
    for name in _REGISTERING:
      importlib.import_module(name)
  except Exception:  # pylint: disable=broad-except
    return import_tensorflow()
  return stand_in

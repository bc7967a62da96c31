"""Where tf_sdca's compiled libraries are, without importing TensorFlow:
`_sdca_ops.so` (the op, loaded by `tf_sdca.ops`) and `_text_reader.so` (the
text parser, loaded by `tf_sdca.data.text_parser`)."""
import os


def path_of(name, after=""):
  """The path of the built library `name` beside the package.

  Raises:
    ImportError: it is not built; the message says how to build it (`after`:
      what must be installed first).
  """
  path = os.path.join(os.path.dirname(os.path.abspath(__file__)), name)
  if not os.path.exists(path):
    raise ImportError(
        f"{path} is missing: build it with `pip install "
        "--no-build-isolation -e .` (or `python setup.py build_ext "
        f"--inplace`){after}")
  return path

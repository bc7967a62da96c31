"""Loads the op library once, with a clear message when it is missing."""
import tensorflow as tf

from tf_sdca import native_library

_LIBRARY = "_sdca_ops.so"
_BUILT_WITH_TF = "2.21.0"
_ops = None


def load_ops():
    """Returns the module of generated op wrappers of `_sdca_ops.so`."""
    global _ops
    if _ops is None:
        path = native_library.path_of(_LIBRARY,
                                      " after installing TensorFlow")
        try:
            _ops = tf.load_op_library(path)
        except tf.errors.NotFoundError as e:
            raise ImportError(
                f"{_LIBRARY} does not load into TensorFlow {tf.__version__}; "
                f"it must be built against the installed TensorFlow (it was "
                f"written for {_BUILT_WITH_TF}): rebuild with `pip install "
                f"--no-build-isolation -e .`. Loader said: {e}") from e
    return _ops


# AutoGraph calls `load_ops` as it is, never converting it (SdcaModel's ops
# run in `tf.function` loops; converted, its call into `native_library`
# warns): the mark `tf.autograph.experimental.do_not_convert` sets on the
# function it returns, set here without importing AutoGraph, which that
# decorator imports (0.2-0.3 s of a new `tf-sdca train`'s start-up, which
# otherwise imports none of it).
load_ops.autograph_info__ = None

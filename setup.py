"""Builds tf_sdca: the Python package plus two native libraries: the
`_sdca_ops.so` TensorFlow op and `_text_reader.so`, the text parser as a
plain shared library without TensorFlow (called through ctypes, so that
`tf-sdca train` parses while TensorFlow is being imported).

The op is compiled with the flags of the TensorFlow that is installed
(`tf.sysconfig.get_compile_flags()` / `get_link_flags()`: they carry the C++
standard and the ABI flag), so install TensorFlow first and build without
isolation:

    pip install tensorflow==2.21.0
    pip install --no-build-isolation .        # or -e . for development
"""
import os
import platform
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

from setuptools import Extension, find_packages, setup
from setuptools.command.build_ext import build_ext

HERE = os.path.dirname(os.path.abspath(__file__))
TF_VERSION = "2.21.0"
SOURCES = [
    "kernels/ops/sdca_ops.cc",
    "kernels/kernels/sdca_kernels.cc",
    "kernels/kernels/batch_index_kernels.cc",
    "kernels/kernels/example_state_kernels.cc",
    "kernels/kernels/packed_rows_kernels.cc",
    "kernels/core/asdca.cc",
    "kernels/core/loss.cc",
    "kernels/core/multiclass_loss.cc",
    "kernels/core/packed_rows.cc",
    "kernels/core/packed_rows_threads.cc",
]
# The text parser without TensorFlow (tf_sdca/data/text_parser.py).
TEXT_READER_SOURCES = [
    "kernels/lib/text_reader_lib.cc",
    "kernels/core/text_reader.cc",
]


def tf_flags():
    """Returns (compile_flags, link_flags) of the installed TensorFlow."""
    try:
        import tensorflow as tf  # pylint: disable=import-outside-toplevel
    except ImportError as e:
        raise RuntimeError(
            "tf_sdca's op is built against the installed TensorFlow: "
            f"run `pip install tensorflow=={TF_VERSION}` first and install "
            "tf_sdca with --no-build-isolation") from e
    return tf.sysconfig.get_compile_flags(), tf.sysconfig.get_link_flags()


def build_op_library(output, build_dir, debug=False):
    """Compiles SOURCES into the shared library `output`."""
    compile_flags, link_flags = tf_flags()
    if platform.machine().lower() in ("x86_64", "amd64"):
        # POPCNT for __builtin_popcountll (the op's rank bitmap of feature
        # ids; otherwise a libgcc call per lookup). TensorFlow's x86 builds
        # need AVX, and every CPU with AVX has POPCNT.
        compile_flags = [*compile_flags, "-mpopcnt"]
    build_library(SOURCES, output, build_dir, compile_flags, link_flags,
                  debug)


def build_text_reader_library(output, build_dir, debug=False):
    """Compiles TEXT_READER_SOURCES into the plain shared library `output`
    (no TensorFlow flags: the TensorFlow code it calls, FarmHash, is handed
    to it as a function pointer)."""
    build_library(TEXT_READER_SOURCES, output, build_dir,
                  ["-std=c++17", "-pthread"], ["-pthread"], debug)


def build_library(sources, output, build_dir, compile_flags, link_flags,
                  debug=False):
    """Compiles `sources` in parallel and links them into the shared library
    `output`."""
    os.makedirs(build_dir, exist_ok=True)
    opt = ["-O0", "-g"] if debug else ["-O3", "-DNDEBUG"]
    objects = []
    commands = []
    for src in sources:
        obj = os.path.join(build_dir, src.replace("/", "_") + ".o")
        objects.append(obj)
        commands.append(["g++", "-c", os.path.join(HERE, src), "-o", obj,
                         "-fPIC", "-I" + HERE, "-Wall", "-Wno-sign-compare", "-Wno-deprecated-declarations",
                         *opt, *compile_flags])
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        for cmd, result in zip(commands, pool.map(
                lambda c: subprocess.run(c, capture_output=True, text=True),
                commands)):
            if result.returncode != 0:
                sys.stderr.write(result.stderr)
                raise RuntimeError("compiling failed: " + " ".join(cmd))
    os.makedirs(os.path.dirname(output), exist_ok=True)
    subprocess.run(["g++", "-shared", "-o", output, *objects, *link_flags],
                   check=True)


class BuildOp(build_ext):
    """Builds the native libraries instead of CPython extensions."""

    def get_ext_filename(self, fullname):
        # Libraries loaded by tf.load_op_library or ctypes, not import.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        build = (build_text_reader_library
                 if ext.name == "tf_sdca._text_reader" else build_op_library)
        build(self.get_ext_fullpath(ext.name),
              os.path.join(self.build_temp, ext.name.rsplit(".", 1)[1]))


setup(
    name="tf_sdca",
    version="0.1.0",
    description=("Stochastic dual coordinate ascent for linear models in "
                 "TensorFlow 2: a custom op, SdcaModel and friends."),
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_sdca", "tf_sdca.*"]),
    ext_modules=[Extension("tf_sdca._sdca_ops", sources=SOURCES),
                 Extension("tf_sdca._text_reader",
                           sources=TEXT_READER_SOURCES)],
    cmdclass={"build_ext": BuildOp},
    python_requires=">=3.9",
    # The .so is tied to the C++ ABI of the TensorFlow it was built with.
    install_requires=[f"tensorflow=={TF_VERSION}", "numpy"],
    extras_require={"sklearn": ["scipy", "scikit-learn>=1.6"],
                    "test": ["pytest", "scipy", "scikit-learn"]},
    entry_points={"console_scripts": ["tf-sdca = tf_sdca.cli:main"]},
    zip_safe=False,
)

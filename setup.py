"""Builds tf_sdca: the Python package plus the `_sdca_ops.so` TensorFlow op.

The op is compiled with the flags of the TensorFlow that is installed
(`tf.sysconfig.get_compile_flags()` / `get_link_flags()`: they carry the C++
standard and the ABI flag), so install TensorFlow first and build without
isolation:

    pip install tensorflow==2.21.0
    pip install --no-build-isolation .        # or -e . for development
"""
import os
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
    "kernels/kernels/text_reader_kernels.cc",
    "kernels/core/asdca.cc",
    "kernels/core/loss.cc",
    "kernels/core/multiclass_loss.cc",
    "kernels/core/packed_rows.cc",
    "kernels/core/packed_rows_threads.cc",
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
    os.makedirs(build_dir, exist_ok=True)
    opt = ["-O0", "-g"] if debug else ["-O3", "-DNDEBUG"]
    objects = []
    commands = []
    for src in SOURCES:
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
    """Builds the op library instead of a CPython extension."""

    def get_ext_filename(self, fullname):
        # A TensorFlow op library, loaded by tf.load_op_library, not import.
        return os.path.join(*fullname.split(".")) + ".so"

    def build_extension(self, ext):
        build_op_library(self.get_ext_fullpath(ext.name), self.build_temp)


setup(
    name="tf_sdca",
    version="0.1.0",
    description=("Stochastic dual coordinate ascent for linear models in "
                 "TensorFlow 2: a custom op, SdcaModel and friends."),
    long_description=open(os.path.join(HERE, "README.md")).read(),
    long_description_content_type="text/markdown",
    packages=find_packages(include=["tf_sdca", "tf_sdca.*"]),
    ext_modules=[Extension("tf_sdca._sdca_ops", sources=SOURCES)],
    cmdclass={"build_ext": BuildOp},
    python_requires=">=3.9",
    # The .so is tied to the C++ ABI of the TensorFlow it was built with.
    install_requires=[f"tensorflow=={TF_VERSION}", "numpy"],
    extras_require={"sklearn": ["scipy", "scikit-learn>=1.6"],
                    "test": ["pytest", "scipy", "scikit-learn"]},
    entry_points={"console_scripts": ["tf-sdca = tf_sdca.cli:main"]},
    zip_safe=False,
)

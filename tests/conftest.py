"""Test-wide settings: quiet TensorFlow, float64 numpy references."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
# The tests' numpy/scipy work is on tiny matrices: OpenBLAS's worker threads
# only spin against TensorFlow's (and other jobs') on a small machine, which
# made a 30 ms scipy solve take 0.3-2 s. Set before numpy is first imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

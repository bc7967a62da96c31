"""Test-wide settings: quiet TensorFlow, float64 numpy references."""
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

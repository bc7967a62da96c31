"""Data sources for tf_sdca: the Criteo-shaped synthetic generator."""
from tf_sdca.data.synthetic import generate_criteo_arrays
from tf_sdca.data.synthetic import hash_category

"""Data sources for tf_sdca: the Criteo-shaped synthetic generator."""
from tf_sdca.data.synthetic import category_token
from tf_sdca.data.synthetic import generate_criteo_arrays
from tf_sdca.data.synthetic import hash_category
from tf_sdca.data.synthetic import iter_criteo_chunks
from tf_sdca.data.synthetic import write_criteo_tsv

"""Data sources for tf_sdca: the Criteo-shaped synthetic generator, the
Criteo TSV and LIBSVM readers (`criteo`, `libsvm`) and the binary cache
(`cache`)."""
from tf_sdca.data.synthetic import category_token
from tf_sdca.data.synthetic import generate_criteo_arrays
from tf_sdca.data.synthetic import hash_category
from tf_sdca.data.synthetic import iter_criteo_chunks
from tf_sdca.data.synthetic import write_criteo_tsv
from tf_sdca.data.criteo import criteo_dataset
from tf_sdca.data.criteo import read_criteo
from tf_sdca.data.libsvm import libsvm_dataset
from tf_sdca.data.libsvm import read_libsvm

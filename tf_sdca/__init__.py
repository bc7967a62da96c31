"""tf_sdca: stochastic dual coordinate ascent for linear models in TF 2."""
from tf_sdca.ops import sdca_fprint
from tf_sdca.ops import pack_rows
from tf_sdca.ops import packed_solve
from tf_sdca.ops import resident_solve
from tf_sdca.ops import sdca_optimizer
from tf_sdca.ops import sdca_shrink_l1
from tf_sdca.sdca_model import SdcaModel
from tf_sdca.sdca_model import SparseFeatureColumn
from tf_sdca.optimizer import SDCAOptimizer

__version__ = "0.1.0"

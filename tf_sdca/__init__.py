"""tf_sdca: stochastic dual coordinate ascent for linear models in TF 2."""
from tf_sdca.ops import sdca_fprint
from tf_sdca.ops import sdca_optimizer
from tf_sdca.ops import sdca_shrink_l1

__version__ = "0.1.0"

"""tf_sdca's TensorFlow ops."""
from tf_sdca.ops._loader import load_ops
from tf_sdca.ops.sdca_ops import LOSSES
from tf_sdca.ops.sdca_ops import VISIT_ORDERS
from tf_sdca.ops.sdca_ops import sdca_fprint
from tf_sdca.ops.sdca_ops import append_rows
from tf_sdca.ops.sdca_ops import asdca_solve
from tf_sdca.ops.sdca_ops import new_packed_rows
from tf_sdca.ops.sdca_ops import pack_rows
from tf_sdca.ops.sdca_ops import packed_solve
from tf_sdca.ops.sdca_ops import sdca_optimizer
from tf_sdca.ops.sdca_ops import sdca_shrink_l1

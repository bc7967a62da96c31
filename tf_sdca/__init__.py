"""tf_sdca: stochastic dual coordinate ascent for linear models in TF 2.

The names below are loaded on first use (PEP 562), so `import tf_sdca` is
cheap and does not start TensorFlow by itself; `tf_sdca.keras`,
`tf_sdca.estimator`, `tf_sdca.trainer`, `tf_sdca.losses`, `tf_sdca.data`,
`tf_sdca.sklearn` and `tf_sdca.ops` are reachable from the package as
attributes:

  >>> import tf_sdca
  >>> model = tf_sdca.keras.LinearModel(loss="logistic", l2=1.0)
"""
import importlib

__version__ = "0.1.0"

# Public name -> (module, attribute in it); None: the module itself.
_LAZY = {
    "sdca_fprint": ("tf_sdca.ops", "sdca_fprint"),
    "pack_rows": ("tf_sdca.ops", "pack_rows"),
    "new_packed_rows": ("tf_sdca.ops", "new_packed_rows"),
    "append_rows": ("tf_sdca.ops", "append_rows"),
    "asdca_solve": ("tf_sdca.ops", "asdca_solve"),
    "packed_solve": ("tf_sdca.ops", "packed_solve"),
    "sdca_optimizer": ("tf_sdca.ops", "sdca_optimizer"),
    "sdca_shrink_l1": ("tf_sdca.ops", "sdca_shrink_l1"),
    "SdcaModel": ("tf_sdca.sdca_model", "SdcaModel"),
    "SparseFeatureColumn": ("tf_sdca.sdca_model", "SparseFeatureColumn"),
    "SDCAOptimizer": ("tf_sdca.optimizer", "SDCAOptimizer"),
    "InMemorySdca": ("tf_sdca.trainer", "InMemorySdca"),
    "SDCAClassifier": ("tf_sdca.sklearn", "SDCAClassifier"),
    "SDCARegressor": ("tf_sdca.sklearn", "SDCARegressor"),
    "SDCAClassifierCV": ("tf_sdca.sklearn", "SDCAClassifierCV"),
    "SDCARegressorCV": ("tf_sdca.sklearn", "SDCARegressorCV"),
    "sdca_path": ("tf_sdca.sklearn", "sdca_path"),
    "data": ("tf_sdca.data", None),
    "estimator": ("tf_sdca.estimator", None),
    "keras": ("tf_sdca.keras", None),
    "losses": ("tf_sdca.losses", None),
    "sklearn": ("tf_sdca.sklearn", None),
    "ops": ("tf_sdca.ops", None),
    "trainer": ("tf_sdca.trainer", None),
}

__all__ = sorted(_LAZY)


def __getattr__(name):
  if name not in _LAZY:
    raise AttributeError(f"module 'tf_sdca' has no attribute {name!r}")
  module_name, attribute = _LAZY[name]
  module = importlib.import_module(module_name)
  value = module if attribute is None else getattr(module, attribute)
  globals()[name] = value  # later lookups skip __getattr__
  return value


def __dir__():
  return sorted(set(globals()) | set(_LAZY))

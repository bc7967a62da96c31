"""tf_sdca.sklearn: scikit-learn's estimator checks, the meta-estimators,
pickle, warm starts, partial_fit, and the anchors' optima on real data."""
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.exceptions import ConvergenceWarning
from sklearn.utils.estimator_checks import parametrize_with_checks

from tf_sdca.sklearn import SDCAClassifier, SDCARegressor

# The checks that compare two fits to 1e-7 (rtol) of each other need the
# optimum closer than any tolerance on the gap says (a relative gap of 1e-15
# left 2e-7 between the weighted and the repeated rows): scikit-learn runs
# them on its own linear models with tol=1e-12 (LogisticRegression, Ridge,
# in sklearn.utils._test_common.instance_generator); here on 15 rows, a
# fixed 300 epochs.
_EXACT = {"check_sample_weight_equivalence_on_dense_data",
          "check_sample_weight_equivalence_on_sparse_data"}


def _name(check):
  return getattr(check, "func", check).__name__


@parametrize_with_checks([SDCAClassifier(random_state=0),
                          SDCARegressor(random_state=0)])
def test_estimator_check(estimator, check):
  if _name(check) in _EXACT:
    estimator.set_params(tol=0.0, max_iter=300)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    check(estimator)

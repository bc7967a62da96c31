"""tf_sdca.sklearn: inputs check_X_y would pass through unchanged (finite
float numpy arrays and CSR matrices, integer or finite float labels) skip
its check; every other input takes it. Both give the same fit, bit for bit,
and the same errors."""
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.datasets import load_digits, load_wine
from sklearn.exceptions import ConvergenceWarning, DataConversionWarning
from sklearn.preprocessing import StandardScaler

from tf_sdca import sklearn as tf_sklearn
from tf_sdca.sklearn import SDCAClassifier, SDCARegressor


def _digits_binary():
  x, y = load_digits(return_X_y=True)
  return (x[:400] / 16.0).astype(np.float32), (y[:400] % 2).astype(np.int64)


def _matrix(x):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", PendingDeprecationWarning)
    return np.asmatrix(x)


def _fit(x, y, **kwargs):
  params = dict(loss="hinge", C=1.0, max_iter=40, random_state=3)
  params.update(kwargs)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    return SDCAClassifier(**params).fit(x, y)


def test_which_inputs_skip_the_check():
  x, y = _digits_binary()
  assert tf_sklearn._checked_already(x, y)
  assert tf_sklearn._checked_already(x.astype(np.float64), y.astype(float))
  assert tf_sklearn._checked_already(sp.csr_matrix(x), y)
  assert tf_sklearn._checked_already(x, "no_validation")
  bad = x.copy()
  bad[3, 5] = np.nan
  for other_x, other_y in [(x.tolist(), y), (x, y.tolist()),
                           (x.astype(np.float16), y), (x.astype(int), y),
                           (bad, y), (x[:, :0], y), (x[:0], y[:0]),
                           (x, y[:-1]), (x, y[:, None]),
                           (x, np.where(y > 0, np.inf, 0.0)),
                           (sp.csc_matrix(x), y), (x, y.astype(object)),
                           (_matrix(x), y), (np.ma.masked_array(x), y),
                           (x, np.ma.masked_array(y))]:
    assert not tf_sklearn._checked_already(other_x, other_y)


def test_skipped_check_gives_the_checked_fit_bit_for_bit():
  x, y = _digits_binary()
  fast = _fit(x, y)
  checked = _fit(x.tolist(), y.tolist())  # check_X_y converts these
  np.testing.assert_array_equal(fast.coef_, checked.coef_)
  np.testing.assert_array_equal(fast.duals_, checked.duals_)
  assert fast.n_iter_ == checked.n_iter_ == 40
  assert fast.n_features_in_ == checked.n_features_in_ == 64
  # CSR float32 in canonical form is used as it is; float64 or unsorted
  # CSR is converted: the same float32 rows, the same fit.
  rows = sp.csr_matrix(x)
  csr = _fit(rows, y)
  unsorted = rows.copy()
  unsorted.indices = unsorted.indices.copy()
  for i in range(unsorted.shape[0]):  # each row's entries reversed
    a, b = unsorted.indptr[i], unsorted.indptr[i + 1]
    unsorted.indices[a:b] = unsorted.indices[a:b][::-1]
    unsorted.data[a:b] = unsorted.data[a:b][::-1]
  unsorted.has_sorted_indices = False
  wide = _fit(sp.csr_matrix(x.astype(np.float64)), y)
  np.testing.assert_array_equal(csr.coef_, wide.coef_)
  assert np.abs(csr.coef_ - _fit(unsorted, y).coef_).max() < 1e-9


def test_skipped_check_keeps_the_checked_errors_and_names():
  pd = pytest.importorskip("pandas")
  x, y = _digits_binary()
  bad = x.copy()
  bad[0, 0] = np.inf
  with pytest.raises(ValueError, match="Input X contains infinity"):
    _fit(bad, y)
  with pytest.raises(ValueError, match="inconsistent numbers of samples"):
    _fit(x, y[:-1])
  with pytest.warns(DataConversionWarning):
    SDCAClassifier(loss="hinge", max_iter=40, tol=1.0).fit(x, y[:, None])
  model = _fit(pd.DataFrame(x, columns=[f"p{j}" for j in range(64)]), y)
  assert list(model.feature_names_in_)[:2] == ["p0", "p1"]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", ConvergenceWarning)
    model.fit(x, y)  # a refit on an array drops the names, as check_X_y does
  assert not hasattr(model, "feature_names_in_")
  with pytest.raises(ValueError,
                     match="X has 10 features, but SDCAClassifier is"):
    model.decision_function(x[:, :10])


def test_regressor_and_multiclass_take_the_same_path():
  wx, wy = load_wine(return_X_y=True)
  wx = StandardScaler().fit_transform(wx)
  fast = _fit(wx, wy, max_iter=30)
  checked = _fit(wx.tolist(), wy.tolist(), max_iter=30)
  np.testing.assert_array_equal(fast.coef_, checked.coef_)
  assert fast.coef_.shape == (3, 13)
  target = wx @ np.linspace(-1.0, 1.0, 13)
  fast = SDCARegressor(alpha=1.0, random_state=0).fit(wx, target)
  checked = SDCARegressor(alpha=1.0, random_state=0).fit(wx.tolist(),
                                                         target.tolist())
  np.testing.assert_array_equal(fast.coef_, checked.coef_)
  # (Ridge's optimum: (X^T X + alpha I) w = X^T y on [X, 1] with the
  # intercept's column regularised alike.)
  ones = np.hstack([wx, np.ones((len(wx), 1))])
  exact = np.linalg.solve(ones.T @ ones + np.eye(14), ones.T @ target)
  assert np.abs(fast.coef_ - exact[:13]).max() < 1e-6

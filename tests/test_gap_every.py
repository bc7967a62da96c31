"""InMemorySdca.fit(gap_every=k): the exact objective and duality gap only
after every k-th epoch and the last (0: the last only), where nothing else
reads them; the training itself is the same, bit for bit."""
import math

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from tf_sdca import data as tf_sdca_data
from tf_sdca.trainer import InMemorySdca


def _breast_cancer():
  d = load_breast_cancer()
  x = (d.data - d.data.mean(0)) / d.data.std(0)
  return np.hstack([x, np.ones((len(x), 1))]), d.target.astype(np.float64)


def _fit(x, y, momentum=0.0, l2=1.0, **fit_options):
  # The permutation order, as measured below (the default takes 'adaptive'
  # here at l2 = 1: SDCA's bound max |x_i|^2 / (4 l2) is 106).
  model = InMemorySdca(loss="logistic", l2=l2, momentum=momentum,
                       visit_order="permutation")
  history = model.fit(y, dense=x, verbose=0, **fit_options)
  return model, history


@pytest.mark.parametrize("gap_every", [0, 3])
def test_skipped_gaps_leave_the_training_bit_for_bit(gap_every):
  x, y = _breast_cancer()
  every, full = _fit(x, y, epochs=10)
  some, part = _fit(x, y, epochs=10, gap_every=gap_every)
  np.testing.assert_array_equal(some.dense_weights, every.dense_weights)
  np.testing.assert_array_equal(some.duals, every.duals)
  evaluated = [e for e in range(10)
               if e == 9 or (gap_every and (e + 1) % gap_every == 0)]
  for e in range(10):
    if e in evaluated:
      assert part["duality_gap"][e] == full["duality_gap"][e]
      assert part["loss"][e] == full["loss"][e]
    else:
      assert math.isnan(part["duality_gap"][e]) and math.isnan(part["loss"][e])
  assert len(part["rows_per_sec"]) == 10
  # The last epoch's gap certifies the returned model (~2e-3 after 10).
  assert 0.0 < part["duality_gap"][-1] < 1e-2


def test_tol_is_checked_on_the_evaluated_epochs():
  x, y = _breast_cancer()
  _, full = _fit(x, y, epochs=200, tol=1e-8)
  stop = len(full["loss"])  # 63 epochs measured
  _, part = _fit(x, y, epochs=200, tol=1e-8, gap_every=5)
  # The first multiple of 5 at or after the plain stop.
  assert len(part["loss"]) == 5 * math.ceil(stop / 5)
  assert part["duality_gap"][-1] < 1e-8


def test_what_reads_every_gap_still_gets_it():
  x, y = _breast_cancer()
  seen = []
  _, history = _fit(x, y, epochs=6, gap_every=0,
                    callback=lambda epoch, h: seen.append(h["duality_gap"][-1]))
  assert not np.isnan(history["duality_gap"]).any()
  assert seen == history["duality_gap"]
  # momentum='auto' reads the first 4 gaps; on breast_cancer at l2 = 1 it
  # chooses 0.5 and then reads every epoch's dual objective (restarts).
  auto, history = _fit(x, y, momentum="auto", epochs=8, gap_every=0)
  plain_auto, full = _fit(x, y, momentum="auto", epochs=8)
  assert auto.momentum_used == 0.5
  np.testing.assert_array_equal(history["duality_gap"], full["duality_gap"])
  # At l2 = 10 it chooses 0 after 4 epochs: later gaps are skipped, and the
  # model is the same.
  auto, history = _fit(x, y, momentum="auto", l2=10.0, epochs=8, gap_every=0)
  plain, full = _fit(x, y, momentum="auto", l2=10.0, epochs=8)
  assert auto.momentum_used == 0.0
  assert not np.isnan(history["duality_gap"][:4]).any()
  assert np.isnan(history["duality_gap"][4:7]).all()
  assert history["duality_gap"][7] == full["duality_gap"][7]
  np.testing.assert_array_equal(auto.dense_weights, plain.dense_weights)


def test_threads_and_csr_keep_the_model_bit_for_bit_with_one_thread():
  rows = tf_sdca_data.generate_criteo_arrays(20000, num_buckets=1 << 16,
                                             seed=1)
  data = dict(dense=rows["dense"] / np.maximum(rows["dense"].max(0), 1e-6),
              ids=rows["cat_ids"], num_features=1 << 16)
  models = []
  for gap_every in (1, 0):
    model = InMemorySdca(loss="logistic", l2=1.0, momentum=0.0,
                         num_threads=1)
    model.fit(rows["labels"], epochs=5, verbose=0, gap_every=gap_every,
              **data)
    models.append(model)
  np.testing.assert_array_equal(models[0].sparse_weights,
                                models[1].sparse_weights)
  np.testing.assert_array_equal(models[0].duals, models[1].duals)


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2", None])
def test_bad_gap_every_is_refused(bad):
  x, y = _breast_cancer()
  with pytest.raises(ValueError, match="gap_every"):
    _fit(x, y, epochs=2, gap_every=bad)

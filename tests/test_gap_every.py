"""InMemorySdca.fit(gap_every=k): the exact objective and duality gap only
after every k-th epoch and the last (0: the last only), where nothing else
reads them; `tol` tested on every epoch (lazily where epochs are fused);
the training itself is the same, bit for bit."""
import math

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer, load_wine

from sdca_testutil import heart_scale
from tf_sdca import data as tf_sdca_data
from tf_sdca import engine
from tf_sdca import losses
from tf_sdca.ops import sdca_ops
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


def _count_evaluations(monkeypatch):
  """A list that counts the epochs the fused op evaluates (those whose
  objective row holds a primal loss)."""
  counts = []
  op = sdca_ops.packed_epochs

  def counted(*args, **kwargs):
    out = op(*args, **kwargs)
    counts.append(int(np.sum(~np.isnan(out[2].numpy()[:, 0]))))
    return out

  monkeypatch.setattr(sdca_ops, "packed_epochs", counted)
  return counts


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("momentum", [0.0, "auto"])
def test_tol_stops_where_every_epoch_evaluated_stops(monkeypatch, momentum,
                                                     fused):
  # tol is tested on every epoch whatever gap_every is. Fused (one op call
  # for several epochs) an epoch gap_every skips is evaluated only where
  # the next epoch's dual objective does not already show its gap above
  # tol; in one call per epoch every epoch is evaluated.
  monkeypatch.setattr(engine, "FUSED_EPOCHS", fused)
  x, y = _breast_cancer()
  every, full = _fit(x, y, momentum=momentum, epochs=200, tol=1e-8)
  stop = len(full["loss"])  # 48-63 epochs measured
  assert 20 < stop < 200
  for gap_every in (0, 5):
    counts = _count_evaluations(monkeypatch)
    some, part = _fit(x, y, momentum=momentum, epochs=200, tol=1e-8,
                      gap_every=gap_every)
    monkeypatch.undo()
    monkeypatch.setattr(engine, "FUSED_EPOCHS", fused)
    assert len(part["loss"]) == stop
    assert part["duality_gap"][-1] == full["duality_gap"][-1] < 1e-8
    np.testing.assert_array_equal(some.dense_weights, every.dense_weights)
    np.testing.assert_array_equal(some.duals, every.duals)
    # The history holds the epochs gap_every names (and those momentum
    # 'auto' reads, and the last), whichever were evaluated for tol.
    shown = [e for e in range(stop) if not math.isnan(part["duality_gap"][e])]
    named = [e for e in range(stop) if e + 1 == stop or (
        gap_every and (e + 1) % gap_every == 0) or (
            momentum == "auto" and e < engine.AUTO_MOMENTUM_EPOCHS)]
    assert shown == named
    for e in shown:
      assert part["duality_gap"][e] == full["duality_gap"][e]
    if fused and gap_every == 0:
      # (momentum 'auto' reads its first 4, a call's last epoch is
      # evaluated, and those near the stop: 10 of 30 measured with 'auto',
      # 6 of 63 without.)
      assert sum(counts) < 0.4 * stop
    elif not fused:
      assert not counts


@pytest.mark.parametrize("loss, tol", [("hinge", 1e-4), ("squared", 1e-6),
                                       ("smooth_hinge", 1e-7)])
def test_lazy_tol_on_heart_scale_is_every_epochs_stop(monkeypatch, loss,
                                                      tol):
  # LIBLINEAR's example in its units, the doors' default order (shrinking
  # for the hinge) and momentum 'auto': the stop, weights and duals of
  # evaluating every epoch, with a fraction of the evaluations.
  x, y = heart_scale()
  labels = (y > 0).astype(np.float32) if loss != "squared" else y
  runs = []
  for gap_every in (1, 0):
    counts = _count_evaluations(monkeypatch)
    model = InMemorySdca(loss=loss, l2=1.0)
    history = model.fit(labels, dense=x, epochs=400, tol=tol, verbose=0,
                        gap_every=gap_every)
    runs.append((model, history))
  (every, full), (lazy, part) = runs
  assert 5 < len(full["loss"]) < 400  # stopped by tol
  assert len(part["loss"]) == len(full["loss"])
  assert part["duality_gap"][-1] == full["duality_gap"][-1] < tol
  np.testing.assert_array_equal(lazy.dense_weights, every.dense_weights)
  np.testing.assert_array_equal(lazy.duals, every.duals)
  # (Near tol an epoch's dual rises less than tol: evaluated. Measured:
  # hinge 23 of 35, squared 11 of 35, smooth hinge 7 of 31.)
  assert sum(counts) < (0.7 if loss == "hinge" else 0.4) * len(full["loss"])


@pytest.mark.parametrize("beta", [-1.0, 0.5])
def test_packed_epochs_lazy_rows(beta):
  # TfSdca>PackedEpochs with tol > 0 and no epoch listed: the same weights
  # and duals as every epoch evaluated; the epochs whose gap the next
  # epoch's dual objective shows above tol hold NaN, but with an
  # extrapolation (beta > 0) their dual loss and |w|^2, the whole
  # evaluation's bits (its restart test's); the call's last epoch is
  # evaluated.
  x, y = _breast_cancer()
  x = x.astype(np.float32)
  out = {}
  for name, flags in (("all", np.ones(12, bool)), ("none", np.zeros(12, bool))):
    rows = engine.Problem(
        engine.RowChunks([(None, x, y.astype(np.float32),
                           np.ones(len(y), np.float32))],
                         len(y), 0, x.shape[1], None, False),
        "logistic_loss", 1.0, 1).rows
    w, d = np.zeros(x.shape[1]), np.zeros(len(y))
    result = sdca_ops.packed_epochs(rows, w, d, 7, flags, 1e-12,
                                    "logistic_loss", 0.0, 1.0,
                                    visit_order="permutation", beta=beta)
    out[name] = [np.asarray(t) for t in result[:3]]
  np.testing.assert_array_equal(out["none"][0], out["all"][0])
  np.testing.assert_array_equal(out["none"][1], out["all"][1])
  rows, full = out["none"][2], out["all"][2]
  assert rows.shape == full.shape == (12, 4)
  assert np.isnan(rows[:11, 0]).all() and np.isnan(rows[:11, 3]).all()
  if beta > 0:
    np.testing.assert_array_equal(rows[:11, 1:3], full[:11, 1:3])
  else:
    assert np.isnan(rows[:11]).all()
  np.testing.assert_array_equal(rows[11], full[11])


def test_progress_watch_counts_skipped_epochs_in_its_window():
  # Gaps that leave the window during skipped epochs still count as the
  # best before it: 1.0 and 0.1 before, 0.09 now is no progress.
  watch = losses.ProgressWatch(window=3)
  assert watch.update(1.0) is None and watch.update(0.1) is None
  for _ in range(3):
    watch.skip()
  assert "fell only from 0.1 to 0.09" in watch.update(0.09)
  # A window of skipped epochs with the gap now halved: progress.
  watch = losses.ProgressWatch(window=3)
  watch.update(1.0)
  watch.skip()
  watch.skip()
  assert watch.update(0.4) is None


def test_what_reads_every_gap_still_gets_it():
  x, y = _breast_cancer()
  seen = []
  _, history = _fit(x, y, epochs=6, gap_every=0,
                    callback=lambda epoch, h: seen.append(h["duality_gap"][-1]))
  assert not np.isnan(history["duality_gap"]).any()
  assert seen == history["duality_gap"]
  # momentum='auto' reads the first 4 gaps; on breast_cancer at l2 = 1 it
  # chooses 0.5 and then reads every epoch's dual objective (restarts):
  # fused, from the op's O(n + d) dual parts, the gaps left NaN.
  auto, history = _fit(x, y, momentum="auto", epochs=8, gap_every=0)
  plain_auto, full = _fit(x, y, momentum="auto", epochs=8)
  assert auto.momentum_used == 0.5
  np.testing.assert_array_equal(history["duality_gap"][:4],
                                full["duality_gap"][:4])
  assert np.isnan(history["duality_gap"][4:7]).all()
  assert history["duality_gap"][7] == full["duality_gap"][7]
  np.testing.assert_array_equal(auto.dense_weights, plain_auto.dense_weights)
  np.testing.assert_array_equal(auto.duals, plain_auto.duals)
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


@pytest.mark.parametrize("loss, momentum", [("multiclass_hinge", 0.0),
                                            ("multiclass_hinge", 0.5),
                                            ("softmax", 0.5)])
def test_lazy_tol_on_wine_multiclass(monkeypatch, loss, momentum):
  # The multiclass losses' dual parts alone (EvaluateBlocksDual) for the
  # lazy test and the restart test: the stop, weights and duals of every
  # epoch evaluated, with fewer evaluations.
  x, y = load_wine(return_X_y=True)
  x = ((x - x.mean(0)) / x.std(0)).astype(np.float32)
  runs = []
  for gap_every in (1, 0):
    counts = _count_evaluations(monkeypatch)
    model = InMemorySdca(loss=loss, l2=1.0, num_classes=3, momentum=momentum)
    history = model.fit(y, dense=x, epochs=300, tol=1e-7, verbose=0,
                        gap_every=gap_every)
    runs.append((model, history, sum(counts)))
  (every, full, _), (lazy, part, evaluations) = runs
  assert 5 < len(full["loss"]) < 300  # stopped by tol
  assert len(part["loss"]) == len(full["loss"])
  assert part["duality_gap"][-1] == full["duality_gap"][-1] < 1e-7
  np.testing.assert_array_equal(lazy.dense_weights, every.dense_weights)
  np.testing.assert_array_equal(lazy.duals, every.duals)
  # (Measured: Crammer-Singer 36 of 59 epochs, 21 of 33 with momentum: its
  # dual converges ahead of its primal, as the binary hinge's.)
  assert evaluations < 0.7 * len(full["loss"])

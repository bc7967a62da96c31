"""Every training door says when conditioning makes progress slow: raw
breast_cancer (features up to 4,254, l2 = 1) barely moves the gap, and the
trainer, the Keras model and the estimator warn once, pointing to standardisation; the same
data standardised trains without the warning."""
import warnings

import numpy as np
import pytest
from sklearn.datasets import load_breast_cancer

from tf_sdca import losses
from tf_sdca.keras import LinearModel
from tf_sdca.trainer import InMemorySdca


@pytest.fixture(scope="module")
def breast_cancer():
  x, y = load_breast_cancer(return_X_y=True)
  return x.astype(np.float32), y.astype(np.float32)


def test_progress_watch_speaks_once_when_the_gap_stalls():
  watch = losses.ProgressWatch(window=3, factor=2.0)
  # Halving every epoch: fine.
  assert all(watch.update(0.5 ** k) is None for k in range(8))
  stalled = losses.ProgressWatch(window=3, factor=2.0)
  said = [stalled.update(g) for g in (0.9, 0.5, 0.45, 0.44, 0.43, 0.42)]
  assert said[:4] == [None] * 4
  assert "fell only from 0.5 to 0.43 in the last 3 epochs" in said[4]
  assert "Standardise" in said[4] and said[5] is None
  # Below the floor a flat gap is convergence, not a problem.
  tiny = losses.ProgressWatch(window=2, floor=1e-9)
  assert [tiny.update(g) for g in (1e-10,) * 5] == [None] * 5
  # Extrapolated epochs move the gap up and down: the best gaps count. The
  # last epoch here (0.3) is above the one three epochs back (0.2), but the
  # best of the window (0.01) is 20x below the best before it.
  bumpy = losses.ProgressWatch(window=3, factor=2.0)
  assert [bumpy.update(g) for g in (0.9, 0.2, 0.01, 0.05, 0.3)] == [None] * 5
  # A bumpy gap without progress still warns.
  stuck = losses.ProgressWatch(window=3, factor=2.0)
  said = [stuck.update(g) for g in (0.9, 0.2, 0.3, 0.25, 0.4, 0.35)]
  # (A rise read "fell only from 0.2 to 0.25".)
  assert said[:4] == [None] * 4 and (
      "was at best 0.25, against 0.2 before in the last 3 epochs" in said[4])
  assert said[5] is None
  # A negative estimate (SdcaModel's approximate gap lags the weights) is
  # no measure of progress: skipped, not the best gap "before" (it made
  # the estimator warn on standardised breast_cancer falling 1e-3 -> 5e-5).
  estimated = losses.ProgressWatch(window=3, factor=2.0)
  assert [estimated.update(g) for g in
          (-1e-3, float("nan"), 1e-3, 3e-4, 1e-4, 3e-5, 1e-5)] == [None] * 7
  assert estimated.update(-1.0) is None


def test_progress_watch_compares_the_best_gaps_before_and_in_the_window():
  # The best gap before the window, kept as gaps leave it, against the
  # definition (the min over all of them) on gap sequences that stall at
  # random epochs, with skipped (negative, NaN) estimates among them.
  rng = np.random.default_rng(0)
  for trial in range(200):
    window = int(rng.integers(1, 6))
    gaps = list(np.exp(np.cumsum(rng.uniform(-1.0, 0.3, 40))))
    for k in rng.integers(0, 40, 3):
      gaps[k] = [-1e-3, float("nan")][trial % 2]
    watch = losses.ProgressWatch(window=window, factor=2.0)
    seen, said = [], None
    for k, gap in enumerate(gaps):
      text = watch.update(gap)
      if not (np.isfinite(gap) and gap >= 0):
        assert text is None
        continue
      seen.append(gap)
      expected = None
      if said is None and len(seen) > window:
        before, now = min(seen[:-window]), min(seen[-window:])
        if not (now <= 1e-9 or now * 2.0 < before):
          expected = (f"fell only from {before:.3g} to {now:.3g}"
                      if now < before else
                      f"was at best {now:.3g}, against {before:.3g} before")
      if expected is None:
        assert text is None, (trial, k)
      else:
        assert text is not None and expected in text, (trial, k, text)
        said = k


@pytest.mark.parametrize("loss,cause,remedies,not_named", [
    ("logistic", "badly conditioned for SDCA",
     ["Standardise", "raise l2", "visit_order='adaptive'"],
     ["shrinking", "not smooth"]),
    ("softmax", "badly conditioned for SDCA", ["Standardise", "raise l2"],
     ["shrinking", "not smooth", "adaptive"]),
    ("hinge_loss", "the hinge loss is not smooth",
     ["smooth_hinge converges linearly", "visit_order='adaptive'",
      "momentum='auto'", "visit_order='shrinking'", "Standardise features"],
     ["badly conditioned"]),
    ("absolute", "the absolute loss is not smooth",
     ["visit_order='adaptive'", "Standardise features"],
     ["badly conditioned", "shrinking", "converges linearly"]),
    ("multiclass_hinge", "the multiclass_hinge loss is not smooth",
     ["softmax converges linearly", "momentum='auto'",
      "visit_order='shrinking'"], ["badly conditioned", "adaptive"])])
def test_progress_watch_names_the_likely_cause_for_the_loss(
    loss, cause, remedies, not_named):
  # A loss with kinks is slow on well-scaled data too (hinge on heart_scale,
  # tests/test_heart_scale.py): its warning does not call the data badly
  # conditioned, and names the smooth loss that converges linearly.
  watch = losses.ProgressWatch(window=3, factor=2.0, loss=loss)
  text = [watch.update(g) for g in (0.9, 0.5, 0.45, 0.44, 0.43)][4]
  assert cause in text
  for phrase in remedies:
    assert phrase in text
  for phrase in not_named:
    assert phrase not in text


def _warnings_of(fit):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    fit()
  return [str(w.message) for w in caught if "badly conditioned" in
          str(w.message)]


def test_trainer_warns_on_raw_features_not_on_standardised(breast_cancer):
  x, y = breast_cancer
  # By default the exact block step (second_order='auto') solves the raw
  # features in the first epoch (tests/test_curvature.py): nothing to say.
  # The coordinate steps alone stall there.
  assert _warnings_of(lambda: InMemorySdca("logistic", l2=1.0).fit(
      y, dense=x, epochs=30, verbose=0)) == []
  raw = _warnings_of(lambda: InMemorySdca(
      "logistic", l2=1.0, second_order="off").fit(
          y, dense=x, epochs=30, verbose=0))
  assert len(raw) == 1 and "Standardise" in raw[0]
  z = (x - x.mean(0)) / x.std(0)
  assert _warnings_of(lambda: InMemorySdca("logistic", l2=1.0).fit(
      y, dense=z, epochs=30, verbose=0)) == []


def test_keras_model_warns_on_raw_features(breast_cancer):
  x, y = breast_cancer
  # As InMemorySdca (the same epochs): the default block step solves the
  # raw features at once; the coordinate steps alone stall and say so.
  model = LinearModel(loss="logistic", l2=1.0)
  model.compile()
  assert _warnings_of(lambda: model.fit(x, y, epochs=14, verbose=0)) == []
  model = LinearModel(loss="logistic", l2=1.0, second_order="off")
  model.compile()
  raw = _warnings_of(lambda: model.fit(x, y, epochs=14, verbose=0))
  assert len(raw) == 1 and "Standardise" in raw[0]
  z = (x - x.mean(0)) / x.std(0)
  model = LinearModel(loss="logistic", l2=1.0)
  model.compile()
  assert _warnings_of(lambda: model.fit(z, y, epochs=14, verbose=0)) == []


def test_slow_progress_warning_names_the_callers_line(breast_cancer):
  # Through InMemorySdca and through Keras' `fit` loop alike, the warning
  # points at the line of the caller's code that started the fit (here, this
  # file's lambdas), not inside tf_sdca or Keras.
  x, y = breast_cancer
  model = LinearModel(loss="logistic", l2=1.0, second_order="off")
  model.compile()
  fits = [
      lambda: InMemorySdca("logistic", l2=1.0, second_order="off").fit(
          y, dense=x, epochs=30, verbose=0),
      lambda: model.fit(x, y, epochs=14, verbose=0)]
  for fit in fits:
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      fit()
    slow = [w for w in caught if "badly conditioned" in str(w.message)]
    assert len(slow) == 1
    assert slow[0].filename == __file__, slow[0].filename


def test_estimator_warns_on_raw_features_when_it_watches_the_gap(
    breast_cancer, tmp_path):
  """With `tol` the estimator computes the gap once per pass, and says when
  it stalls, as the other doors do."""
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from tf_sdca import estimator  # pylint: disable=import-outside-toplevel
  x, y = breast_cancer

  def train(features, model_dir):
    columns = [tf.feature_column.numeric_column("x", shape=(30,))]
    clf = estimator.LinearClassifier(
        columns, model_dir=str(model_dir),
        optimizer=estimator.LinearSDCA("example_id",
                                       symmetric_l2_regularization=1.0))
    data = {"x": tf.constant(features),
            "example_id": tf.as_string(tf.range(len(y)))}
    # One batch of every row per step: a step is a pass.
    return _warnings_of(lambda: clf.train(
        lambda: (data, tf.constant(y)), steps=14, tol=1e-12))

  raw = train(x, tmp_path / "raw")
  assert len(raw) == 1 and "Standardise" in raw[0]
  z = (x - x.mean(0)) / x.std(0)
  assert train(z, tmp_path / "standardised") == []


def test_a_stream_at_its_float32_floor_is_not_called_badly_conditioned():
  """Softmax on standardised wine streamed in 40-row batches reaches its
  float32 duals' floor (~6e-9) and stays: the watch read 1.3e-8 -> 6.4e-9
  in 10 epochs as "badly conditioned ... Standardise features"."""
  import warnings  # pylint: disable=import-outside-toplevel
  import tensorflow as tf  # pylint: disable=import-outside-toplevel
  from sklearn.datasets import load_wine  # pylint: disable=import-outside-toplevel
  from sklearn.preprocessing import StandardScaler  # pylint: disable=import-outside-toplevel
  import tf_sdca.keras as sdca_keras  # pylint: disable=import-outside-toplevel
  x, y = load_wine(return_X_y=True)
  x = StandardScaler().fit_transform(x).astype(np.float32)
  data = tf.data.Dataset.from_tensor_slices(
      ({"x": x, "example_id": np.arange(len(y))}, y)).batch(40)
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    model = sdca_keras.LinearModel(loss="softmax", l2=1.0, num_classes=3)
    model.compile()
    history = model.fit(data, epochs=60, verbose=0)
  gaps = history.history["duality_gap"]
  assert 1e-9 < gaps[-1] < 1e-8
  assert not [w for w in caught if "duality gap" in str(w.message)]


def test_progress_watch_does_not_advise_the_order_in_use():
  # It advised visit_order='adaptive' to fits that ran it (smooth hinge at
  # l2 = 3e-5, logistic with l1 on standardised breast_cancer).
  def said(loss, order):
    watch = losses.ProgressWatch(window=3, factor=2.0, loss=loss, order=order)
    texts = [watch.update(g) for g in (0.9, 0.5, 0.45, 0.44, 0.43)]
    return texts[-1]

  assert "visit_order='adaptive'" in said("logistic_loss", "permutation")
  assert "visit_order='adaptive'" not in said("logistic_loss", "adaptive")
  assert "visit_order='adaptive'" in said("hinge_loss", "shrinking")
  assert "visit_order='adaptive'" not in said("hinge_loss", "adaptive")
  assert "visit_order='shrinking'" in said("hinge_loss", "adaptive")
  assert "visit_order='shrinking'" not in said("hinge_loss", "shrinking")
  assert "Standardise" in said("logistic_loss", "adaptive")


def test_progress_watch_does_not_advise_momentum_in_use():
  # It advised the default momentum='auto' to multiclass hinge fits that
  # ran it (raw wine, InMemorySdca at its defaults: beta 0.5 in use).
  def said(loss, order, momentum):
    watch = losses.ProgressWatch(window=3, factor=2.0, loss=loss, order=order,
                                 momentum=momentum)
    texts = [watch.update(g) for g in (0.9, 0.5, 0.45, 0.44, 0.43)]
    return texts[-1]

  for loss, order in (("multiclass_hinge_loss", "shrinking"),
                      ("hinge_loss", "shrinking"), ("hinge_loss", "adaptive")):
    assert "momentum='auto'" in said(loss, order, False), (loss, order)
    assert "momentum" not in said(loss, order, True), (loss, order)
  assert "visit_order='adaptive'" in said("hinge_loss", "shrinking", True)

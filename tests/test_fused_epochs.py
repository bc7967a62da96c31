"""Epochs fused into one op call (`engine.FUSED_EPOCHS`, TfSdca>PackedEpochs):
where nothing runs between the epochs, the engine runs several per call,
with the extrapolation, the exact gap and the `tol` stop inside the op. The
weights, duals, history and momentum state are those of one call per epoch,
bit for bit (momentum 'auto' choosing its beta, restarts, `tol` reached
inside a call, epochs whose gap nobody reads, the orders, progress
printed), and the hinge losses reach LIBLINEAR's optimum with the gap
certificate on real data."""
import warnings

import numpy as np
import pytest
import tensorflow as tf
from sklearn.datasets import load_digits, load_wine
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

from sdca_testutil import heart_scale
from tf_sdca import engine
from tf_sdca.ops import sdca_ops
from tf_sdca.trainer import InMemorySdca


def _wine():
  x, y = load_wine(return_X_y=True)
  return StandardScaler().fit_transform(x).astype(np.float32), y


def _digits(n=None):
  x, y = load_digits(return_X_y=True)
  return (x[:n] / 16.0).astype(np.float32), y[:n]


def _text(n=600, d=3000, k=8, seed=0):
  rng = np.random.default_rng(seed)
  ids = rng.integers(0, d, size=(n, k))
  w = rng.normal(size=d)
  return ids, (w[ids].sum(1) + rng.normal(size=n) > 0).astype(np.float32)


def _fit(monkeypatch, fused, model_options, data, fit_options, watch=None):
  # (Not training ahead, which the orders other than 'shrinking' take on 2
  # or more cores.)
  monkeypatch.setattr(engine, "TRAIN_AHEAD", False)
  monkeypatch.setattr(engine, "FUSED_EPOCHS", fused)
  calls = []
  if watch is not None:
    original = sdca_ops.packed_epochs

    def spy(*args, **kwargs):
      calls.append(len(args[4]))
      return original(*args, **kwargs)

    monkeypatch.setattr(sdca_ops, "packed_epochs", spy)
  model = InMemorySdca(**model_options)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    history = model.fit(**data, verbose=0, **fit_options)
  monkeypatch.undo()
  return model, history, calls


def _same(a, b):
  return a.view(np.uint64).tobytes() == b.view(np.uint64).tobytes()


CASES = {
    # name: (model options, data, fit options)
    "hinge heart_scale shrinking": (
        dict(loss="hinge", l2=1.0), "heart", dict(epochs=40)),
    "hinge heart_scale tol inside a call": (
        dict(loss="hinge", l2=1.0), "heart", dict(epochs=200, tol=1e-3)),
    "hinge heart_scale gap_every 3": (
        dict(loss="hinge", l2=1.0), "heart", dict(epochs=23, gap_every=3)),
    "hinge heart_scale momentum 0": (
        dict(loss="hinge", l2=1.0, momentum=0.0), "heart",
        dict(epochs=30, gap_every=0)),
    "hinge heart_scale permutation fixed beta": (
        dict(loss="hinge", l2=0.1, momentum=0.5,
             visit_order="permutation"), "heart", dict(epochs=30)),
    "smooth hinge text adaptive": (
        dict(loss="smooth_hinge", l2=0.01, visit_order="adaptive"), "text",
        dict(epochs=25)),
    "logistic text cyclic momentum 0.3": (
        dict(loss="logistic", l2=0.1, visit_order="cyclic", momentum=0.3),
        "text", dict(epochs=20, tol=1e-8)),
    "Crammer-Singer wine": (
        dict(loss="multiclass_hinge", l2=1.0, num_classes=3), "wine",
        dict(epochs=60)),
    "Crammer-Singer digits tol": (
        dict(loss="multiclass_hinge", l2=1.0, num_classes=10), "digits",
        dict(epochs=80, tol=0.05)),
    "softmax wine": (
        dict(loss="softmax", l2=0.1, num_classes=3), "wine",
        dict(epochs=30)),
}


def _data(name):
  if name == "heart":
    x, y = heart_scale()
    return dict(labels=(y > 0).astype(np.float32), dense=x)
  if name == "text":
    ids, y = _text()
    return dict(labels=y, ids=ids)
  if name == "wine":
    x, y = _wine()
    return dict(labels=y, dense=x)
  x, y = _digits(600)
  return dict(labels=y, dense=x)


def _assert_same_model(one, other):
  """The two models' weights and duals, bit for bit."""
  for part in ("sparse_weights", "dense_weights", "duals"):
    a, b = getattr(one, part), getattr(other, part)
    assert (a is None) == (b is None)
    if a is not None:
      assert _same(np.ascontiguousarray(a), np.ascontiguousarray(b)), part


@pytest.mark.parametrize("case", sorted(CASES))
def test_fused_epochs_are_the_epochs_one_by_one(monkeypatch, case):
  model_options, data, fit_options = CASES[case]
  data = _data(data)
  one, h1, _ = _fit(monkeypatch, False, model_options, data, fit_options)
  fused, h2, calls = _fit(monkeypatch, True, model_options, data,
                          fit_options, watch=True)
  assert calls and sum(calls) >= len(h2["loss"])  # it did run fused
  assert len(calls) < len(h2["loss"])  # several epochs per call
  assert len(h1["loss"]) == len(h2["loss"])
  for key in ("loss", "duality_gap"):
    assert _same(np.asarray(h1[key]), np.asarray(h2[key])), key
  _assert_same_model(one, fused)
  assert one.momentum_used == fused.momentum_used
  s1, s2 = one.momentum_state, fused.momentum_state
  assert (s1 is None) == (s2 is None)
  if s1 is not None:
    assert sorted(s1) == sorted(s2)
    for key in s1:
      assert np.asarray(s1[key]).shape == np.asarray(s2[key]).shape
      assert np.array_equal(s1[key], s2[key]), key


def test_auto_momentum_chooses_its_beta_inside_the_call(monkeypatch):
  """momentum 'auto' reads its plain epochs' gaps and chooses its beta in
  the op: a short fit is one call, the same bits as epochs one by one (and
  as the engine's choose_auto_momentum, which the engine checks)."""
  data = _data("heart")
  opts = dict(loss="hinge", l2=1.0)
  one, h1, _ = _fit(monkeypatch, False, opts, data, dict(epochs=16))
  fused, h2, calls = _fit(monkeypatch, True, opts, data, dict(epochs=16),
                          watch=True)
  assert calls == [16]
  assert fused.momentum_used == one.momentum_used > 0.0
  _assert_same_model(one, fused)
  assert _same(np.asarray(h1["loss"]), np.asarray(h2["loss"]))
  # Where the op's choice and the engine's differ, the fit says so.
  chosen = engine.choose_auto_momentum
  monkeypatch.setattr(engine, "choose_auto_momentum",
                      lambda gaps, lock_free=False: chosen(gaps) * 0.5)
  monkeypatch.setattr(engine, "TRAIN_AHEAD", False)
  with pytest.raises(RuntimeError, match="chose momentum 'auto''s beta"):
    InMemorySdca(**opts).fit(**data, epochs=16, verbose=0)


@pytest.mark.parametrize("seen", [0, 2, 3])
def test_packed_epochs_auto_momentum_is_choose_auto_momentum(seen):
  """The op's beta from its plain epochs' gaps (after `seen` gaps of
  earlier calls) is choose_auto_momentum's of the same gaps, and the
  epochs after it start with it: the state equals a call given that beta
  from the chosen epoch on."""
  x, y = heart_scale()
  rows = engine.Problem(
      engine.RowChunks([(None, x, (y > 0).astype(np.float32),
                         np.ones(len(y), np.float32))],
                       len(y), 0, 13, None, False),
      "hinge_loss", 1.0, 1).rows
  rule = [engine.AUTO_MOMENTUM_EPOCHS, engine.AUTO_MOMENTUM_FLOOR,
          engine.AUTO_MOMENTUM_FULL, engine.AUTO_MOMENTUM_BETA]
  prior = [0.9, 0.6, 0.45][:seen]
  plain = engine.AUTO_MOMENTUM_EPOCHS - seen
  args = (rows, np.zeros(13), np.zeros(len(y)), 3, np.ones(10, bool), -1.0,
          "hinge_loss", 0.0, 1.0)
  out = sdca_ops.packed_epochs(*args, visit_order="permutation", beta=0.0,
                               auto_momentum=rule + prior,
                               train_ahead="always")
  parts = out[2].numpy()
  gaps = list(prior)
  for k in range(plain):
    primal, gap = engine.objective_and_gap(parts[k], "hinge_loss", 0.0, 1.0)
    gaps.append(gap / max(abs(primal), 1e-300))
  beta = engine.choose_auto_momentum(gaps)
  assert 0.0 < beta and float(out[6]) == beta
  # The plain epochs, then the chosen beta, in two calls.
  first = sdca_ops.packed_epochs(
      rows, np.zeros(13), np.zeros(len(y)), 3, np.ones(plain, bool), -1.0,
      "hinge_loss", 0.0, 1.0, visit_order="permutation", beta=0.0)
  duals = [-np.inf] + [engine.dual_objective(p, 1.0)
                       for p in first[2].numpy()]
  second = sdca_ops.packed_epochs(
      rows, first[0].numpy(), first[1].numpy(), 3 + plain,
      np.ones(10 - plain, bool), -1.0, "hinge_loss", 0.0, 1.0,
      visit_order="permutation", beta=beta,
      previous=(first[4].numpy(), first[5].numpy()), last_dual=duals[-1],
      restart=bool(duals[-1] < duals[-2]))
  for k in (0, 1, 4, 5):
    assert _same(out[k].numpy(), second[k].numpy()), k
  with pytest.raises(tf.errors.InvalidArgumentError, match="auto_momentum"):
    sdca_ops.packed_epochs(*args, beta=0.0, auto_momentum=rule[:3])


def test_fused_epochs_resume_as_epochs_one_by_one(monkeypatch):
  """A fit resumed at epoch 13 from a checkpoint (momentum's point, last
  dual objective and restart restored) runs the same fused as one by
  one."""
  data = _data("wine")
  opts = dict(loss="multiclass_hinge", l2=1.0, num_classes=3)
  first, _, _ = _fit(monkeypatch, True, opts, data, dict(epochs=13))
  state = first.state_dict()
  ends = []
  for fused in (False, True):
    monkeypatch.setattr(engine, "FUSED_EPOCHS", fused)
    model = InMemorySdca(**opts)
    model.load_state_dict(state, len(data["labels"]), None, 13)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      history = model.fit(**data, epochs=40, initial_epoch=13, verbose=0)
    ends.append((np.asarray(history["loss"]), model.dense_weights,
                 model.momentum_state["previous_table"]))
  assert len(ends[0][0]) == 27
  for a, b in zip(*ends):
    assert _same(np.ascontiguousarray(a), np.ascontiguousarray(b))


def _objective(w, x, y, k, l2):
  z = x.astype(np.float64) @ np.asarray(w, np.float64)
  if k == 1:
    phi = np.maximum(0.0, 1.0 - y * z.ravel()).sum()
  else:
    rows = np.arange(len(y))
    phi = ((1.0 - np.eye(k)[y] + z).max(axis=1) - z[rows, y]).sum()
  return phi + 0.5 * l2 * np.sum(np.asarray(w, np.float64) ** 2)


@pytest.mark.parametrize("name,l2", [("heart_scale", 1.0), ("wine", 1.0),
                                     ("digits", 1.0), ("wine", 0.1),
                                     ("digits", 10.0)])
def test_hinge_reaches_liblinear_with_the_gap_certificate(name, l2):
  """Fused fits in the default order ('shrinking': rows, and the classes
  of a Crammer-Singer row): the objective within its certified gap of
  LIBLINEAR's (LinearSVC, C = 1 / l2, loss='hinge', dual, no intercept, tol
  1e-6; Crammer-Singer for wine and digits), and below LIBLINEAR's at its
  default tol (at l2 = 1, C = 1: bench/bench_hinge.py's target)."""
  if name == "heart_scale":
    x, y = heart_scale()
    y = np.where(y > 0, 1, -1)
    k, labels, extra = 1, (y > 0).astype(np.float32), {}
  elif name == "wine":
    (x, y), k = _wine(), 3
    labels, extra = y, dict(multi_class="crammer_singer")
  else:
    (x, y), k = _digits(), 10
    labels, extra = y, dict(multi_class="crammer_singer")
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    tight = LinearSVC(C=1.0 / l2, loss="hinge", dual=True,
                      fit_intercept=False, tol=1e-6, max_iter=100000,
                      **extra).fit(x, y)
    loose = LinearSVC(C=1.0 / l2, loss="hinge", dual=True,
                      fit_intercept=False, **extra).fit(x, y)
  coef = lambda m: m.coef_.T if k > 1 else m.coef_.ravel()
  p_tight = _objective(coef(tight), x, y, k, l2)
  p_loose = _objective(coef(loose), x, y, k, l2)
  model = InMemorySdca(loss="hinge" if k == 1 else "multiclass_hinge",
                       l2=l2, num_classes=None if k == 1 else k)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    history = model.fit(labels, dense=x, epochs=3000, tol=1e-6, verbose=0)
  assert history["duality_gap"][-1] < 1e-6
  ours = _objective(model.dense_weights, x, y, k, l2)
  primal = history["loss"][-1]  # total weight n: the objective / n
  # (The ops' l2 is float32(l2): 0.1 moves the objective by ~1e-8.)
  assert ours == pytest.approx(primal * len(y), rel=1e-7)
  gap = history["duality_gap"][-1] * ours
  # Weak duality: P* is in [ours - gap, ours]; LIBLINEAR's tight objective
  # is above P* and within its own tolerance of it.
  assert ours - gap <= p_tight * (1 + 1e-12)
  assert ours <= p_tight * (1 + 1e-6)
  assert ours <= p_loose


def test_packed_epochs_validates_its_inputs():
  x, y = heart_scale()
  rows = engine.Problem(
      engine.RowChunks([(None, x, np.abs(y), np.ones(len(y), np.float32))],
                       len(y), 0, 13, None, False),
      "poisson_loss", 1.0, 1).rows
  w, d = np.zeros(13), np.zeros(len(y))
  with pytest.raises(tf.errors.InvalidArgumentError, match="poisson_loss"):
    sdca_ops.packed_epochs(rows, w, d, 0, np.ones(3, bool), -1.0,
                           "poisson_loss", 0.0, 1.0, beta=0.5)
  with pytest.raises(tf.errors.InvalidArgumentError, match="previous"):
    sdca_ops.packed_epochs(rows, w, d, 0, np.ones(3, bool), -1.0,
                           "poisson_loss", 0.0, 1.0,
                           previous=(np.zeros(3), np.zeros(2)))
  with pytest.raises((tf.errors.InvalidArgumentError, ValueError),
                     match="evaluate"):
    sdca_ops.packed_epochs(rows, w, d, 0, np.ones((2, 2), bool), -1.0,
                           "poisson_loss", 0.0, 1.0)
  # No epochs: the state back, nothing evaluated.
  out = sdca_ops.packed_epochs(rows, w, d, 0, np.zeros(0, bool), -1.0,
                               "poisson_loss", 0.0, 1.0)
  assert out[2].shape == (0, 4) and np.array_equal(out[0].numpy(), w)


def test_progress_is_printed_per_epoch_when_fused(monkeypatch, capsys):
  """verbose=1 runs fused too: every epoch's progress line, its loss and gap
  those of the epochs one by one (the rates aside), and the same bits."""
  data = _data("wine")
  opts = dict(loss="multiclass_hinge", l2=1.0, num_classes=3)
  printed = []
  for fused in (False, True):
    monkeypatch.setattr(engine, "FUSED_EPOCHS", fused)
    calls = []
    original = sdca_ops.packed_epochs

    def spy(*args, original=original, calls=calls, **kwargs):
      calls.append(1)
      return original(*args, **kwargs)

    monkeypatch.setattr(sdca_ops, "packed_epochs", spy)
    model = InMemorySdca(**opts)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      model.fit(**data, epochs=20, tol=1e-4, verbose=1)
    monkeypatch.undo()
    assert bool(calls) == fused
    out = capsys.readouterr().out
    printed.append(([line for line in out.splitlines()
                     if line.startswith("Epoch ")],
                    [line.split("rows/s")[0].rsplit(None, 1)[0]
                     for line in out.splitlines()
                     if line.startswith("  loss ")],
                    model.dense_weights))
  (epochs1, losses1, w1), (epochs2, losses2, w2) = printed
  assert epochs1 == epochs2 and len(epochs1) > 5
  assert losses1 == losses2 and len(losses1) == len(epochs1)
  assert _same(w1, w2)


# Epochs trained ahead inside TfSdca>PackedEpochs (train_ahead='always'):
# each epoch's objective evaluated on a second thread beside the next
# epoch's training, that epoch undone where the verdict stops the call
# (tol inside a call, with 'shrinking''s active rows put back) or restarts
# the extrapolation (and run again).
AHEAD_CASES = {
    "hinge heart_scale shrinking, tol inside a call": (
        dict(loss="hinge", l2=1.0), "heart", dict(epochs=200, tol=1e-3)),
    "hinge text shrinking, beta 0.5 restarts, tol": (
        dict(loss="hinge", l2=0.1, momentum=0.5), "text",
        dict(epochs=100, tol=1e-5)),
    "logistic text capped beta 0.8 restarts": (
        dict(loss="logistic", l2=0.001, momentum=0.8), "text",
        dict(epochs=100, tol=1e-12)),
    "Crammer-Singer wine shrinking, beta 0.5 restarts, tol": (
        dict(loss="multiclass_hinge", l2=1.0, num_classes=3, momentum=0.5),
        "wine", dict(epochs=100, tol=1e-6)),
    "Crammer-Singer digits shrinking, momentum auto, tol": (
        dict(loss="multiclass_hinge", l2=1.0, num_classes=10), "digits",
        dict(epochs=80, tol=0.01)),
}


@pytest.mark.parametrize("case", sorted(AHEAD_CASES))
def test_epochs_trained_ahead_in_the_call_are_the_epochs_in_turn(
    monkeypatch, case):
  model_options, data, fit_options = AHEAD_CASES[case]
  data = _data(data)
  runs = []
  for mode in ("never", "always"):
    monkeypatch.setattr(engine, "FUSED_EPOCHS", True)
    # Calls as long as the fit allows, not FUSED_SECONDS of epochs timed on
    # a loaded machine: where timing ended a call exactly at the epoch tol
    # is reached, nothing was left to undo and the case tested nothing.
    monkeypatch.setattr(engine, "FUSED_SECONDS", 1e6)
    original = sdca_ops.packed_epochs
    calls, restarts = [], []

    def spy(*args, original=original, mode=mode, calls=calls, **kwargs):
      calls.append(len(args[4]))
      return original(*args, **dict(kwargs, train_ahead=mode))

    end_epoch = engine.Extrapolation.end_epoch

    def watch(self, *args, end_epoch=end_epoch, restarts=restarts):
      end_epoch(self, *args)
      restarts.append(self._restart)  # pylint: disable=protected-access

    monkeypatch.setattr(sdca_ops, "packed_epochs", spy)
    monkeypatch.setattr(engine.Extrapolation, "end_epoch", watch)
    model = InMemorySdca(**model_options)
    with warnings.catch_warnings():
      warnings.simplefilter("ignore")
      history = model.fit(**data, verbose=0, **fit_options)
    monkeypatch.undo()
    runs.append((model, history, calls, restarts))
  (serial, h1, _, restarts), (ahead, h2, calls, _) = runs
  epochs = len(h1["loss"])
  # Stopped at tol inside a call (not at its last epoch), several epochs
  # per call; the momentum cases restarted inside calls.
  assert len(calls) < epochs < fit_options["epochs"]
  assert sum(calls) > epochs, (calls, epochs)
  if model_options.get("momentum"):
    assert any(restarts[:-1])
  assert len(h2["loss"]) == epochs
  for key in ("loss", "duality_gap"):
    assert _same(np.asarray(h1[key]), np.asarray(h2[key])), key
  _assert_same_model(serial, ahead)
  s1, s2 = serial.momentum_state, ahead.momentum_state
  assert sorted(s1) == sorted(s2)
  for key in s1:
    assert np.array_equal(s1[key], s2[key]), key


def test_packed_epochs_trained_ahead_resume_the_shrinking_marks():
  """Two calls on the same packed rows ('shrinking' keeps its active rows in
  them from call to call): the second starts from the marks the first left
  at its stop, the epoch trained past it undone, as in turn."""
  x, y = heart_scale()
  outs = []
  for mode in ("never", "always"):
    rows = engine.Problem(
        engine.RowChunks([(None, x, (y > 0).astype(np.float32),
                           np.ones(len(y), np.float32))],
                         len(y), 0, 13, None, False),
        "hinge_loss", 1.0, 1).rows
    w, d = np.zeros(13), np.zeros(len(y))
    run = []
    for call in range(2):
      w, d, parts, _, _, _, _ = sdca_ops.packed_epochs(
          rows, w, d, 10 * call, np.ones(30, bool), 1e-2, "hinge_loss", 0.0,
          1.0, visit_order="shrinking", train_ahead=mode)
      w, d = w.numpy(), d.numpy()
      run.append((w, d, parts.numpy()))
    outs.append(run)
  assert outs[0][0][2].shape[0] < 30  # stopped at tol inside the call
  for (w1, d1, p1), (w2, d2, p2) in zip(*outs):
    assert _same(w1, w2) and _same(d1, d2) and _same(p1, p2)
  with pytest.raises(ValueError, match="train_ahead"):
    sdca_ops.packed_epochs(rows, w, d, 0, np.ones(2, bool), -1.0,
                           "hinge_loss", 0.0, 1.0, train_ahead="sometimes")


def test_lazy_tol_with_any_listed_epochs_is_every_epoch_evaluated():
  """tol > 0 with some epochs listed in `evaluate` (evaluated, beside the
  next epoch or in turn) and the rest tested lazily from the next epoch's
  dual objective: the stop, weights, duals and next x_prev of every epoch
  evaluated in turn, for random lists, tols, betas and orders."""
  x, y = heart_scale()
  labels = (y > 0).astype(np.float32)
  rng = np.random.default_rng(1)
  stopped = 0
  for _ in range(12):
    epochs = int(rng.integers(5, 60))
    tol = float(10 ** rng.uniform(-7, -2))
    beta = float(rng.choice([-1.0, 0.0, 0.5]))
    order = str(rng.choice(["shrinking", "permutation"]))
    listed = rng.random(epochs) < rng.uniform(0, 0.6)
    runs = []
    for flags, mode in ((np.ones(epochs, bool), "never"), (listed, "never"),
                        (listed, "always")):
      rows = engine.Problem(
          engine.RowChunks([(None, x, labels, np.ones(len(y), np.float32))],
                           len(y), 0, 13, None, False),
          "hinge_loss", 1.0, 1).rows
      out = sdca_ops.packed_epochs(rows, np.zeros(13), np.zeros(len(y)), 5,
                                   flags, tol, "hinge_loss", 0.0, 1.0,
                                   visit_order=order, beta=beta,
                                   train_ahead=mode)
      runs.append([np.asarray(out[k]) for k in (0, 1, 4, 5)] +
                  [np.asarray(out[2]).shape[0]])
    stopped += runs[0][4] < epochs
    for run in runs[1:]:
      assert run[4] == runs[0][4]
      for got, want in zip(run[:4], runs[0][:4]):
        assert _same(got, want)
  assert stopped >= 3  # (tol reached inside the call: 4 of 12)

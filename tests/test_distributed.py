"""Training across processes (tf_sdca.distributed): the shard's local solve
is the op's solve over the whole table, the in-process CoCoA+ simulation
reaches the single-process optimum, and real worker processes on loopback
do too."""
import argparse
import contextlib
import glob
import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import uuid

import numpy as np
import pytest

import interruptions
from tf_sdca import files
from tf_sdca import packed_solve, pack_rows
from tf_sdca.data import generate_criteo_arrays
from tf_sdca.distributed import shard as shard_lib
from tf_sdca.distributed import simulation
from tf_sdca.trainer import InMemorySdca


def _criteo(n, bits, seed=3):
  """Criteo-shaped rows: 26 hashed ids, 13 scaled log-counts + intercept."""
  g = generate_criteo_arrays(n, num_buckets=1 << bits, seed=seed)
  dense = np.hstack([g["dense"] / g["dense"].max(0).clip(1e-6),
                     np.ones((n, 1))]).astype(np.float32)
  return dict(labels=g["labels"], dense=dense, ids=g["cat_ids"])


def _single_process_optimum(data, num_features, l2, tol=1e-12, **kwargs):
  model = InMemorySdca("logistic", l2=l2, **kwargs)
  history = model.fit(data["labels"], dense=data["dense"], ids=data.get(
      "ids"), num_features=num_features, epochs=500, tol=tol, verbose=0)
  objective = history["loss"][-1] * float(len(data["labels"]))
  return model, objective, history["duality_gap"][-1] * objective


@pytest.mark.parametrize("combine", ["add", "average"])
def test_shard_solve_on_local_ids_is_the_whole_table_solve(combine):
  data = _criteo(600, 9)
  block = shard_lib.split(data, 3)[1]
  shard = shard_lib.Shard(**block, num_features=512, l2=2.0, num_shards=3,
                          combine=combine, num_passes=2, seed=5, index=1)
  table = np.random.default_rng(0).normal(size=512 + 14) * 0.1
  positions = shard.positions(np.arange(512))
  delta = shard.solve(table[positions], round_index=7)
  # The same rows packed with their global ids, solved over the whole table.
  n = block["labels"].shape[0]
  rows = pack_rows(np.arange(0, 26 * n + 1, 26), block["ids"].ravel(),
                   np.zeros(0, np.float32), block["dense"], np.ones(n),
                   block["labels"], num_sparse_features=512,
                   loss_type="logistic_loss")
  sigma = 3 if combine == "add" else 1
  w, duals, _ = packed_solve(rows, table, np.zeros(n), seed=shard.call_seed(7),
                             loss_type="logistic_loss", l1=0.0, l2=2.0,
                             num_loss_partitions=sigma, num_passes=2)
  change = w.numpy() - table
  untouched = np.setdiff1d(np.arange(512), shard.touched)
  assert not change[untouched].any()  # only touched rows are sent
  parts = 1 if combine == "add" else 3  # averaging keeps 1/K
  np.testing.assert_array_equal(delta, change[positions] / parts)
  np.testing.assert_array_equal(shard.duals, duals.numpy() / parts)


def test_simulated_cocoa_plus_with_four_shards_reaches_the_optimum():
  data = _criteo(3000, 10)
  l2 = 30.0
  model, objective, gap = _single_process_optimum(data, 1024, l2)
  sim = simulation.Simulation(data, 4, num_features=1024, combine="add",
                              l2=l2)
  history = sim.run(tol=1e-11, max_rounds=3000)
  assert history["rounds"] is not None
  sim_objective, sim_gap = sim.objective_and_gap()
  assert sim_gap <= 1e-11 * sim_objective
  # Each run's primal is above the other's dual (P >= D for any pair):
  # the two certificates agree on where the optimum lies.
  assert sim_objective >= objective - gap - 1e-9 * objective
  assert objective >= sim_objective - sim_gap - 1e-9 * objective
  assert sim_objective == pytest.approx(objective, rel=1e-6)
  sparse, dense = sim.full_weights()
  # gap <= 1e-11 P ~ 2e-8 and strong convexity l2 bound |w - w*| by
  # sqrt(2 gap / l2) ~ 4e-5.
  np.testing.assert_allclose(sparse, model.sparse_weights, atol=1e-4)
  np.testing.assert_allclose(dense, model.dense_weights, atol=1e-4)


def _dense_design(data, num_features):
  """The rows as one float64 matrix [n, num_features + d]."""
  n = len(data["labels"])
  x = np.zeros((n, num_features + data["dense"].shape[1]))
  np.add.at(x, (np.repeat(np.arange(n), data["ids"].shape[1]),
                data["ids"].ravel()), 1.0)
  x[:, num_features:] = data["dense"]
  return x


@pytest.mark.parametrize("num_shards", [1, 2, 3])
def test_round_with_exact_local_solves_is_the_cocoa_plus_subproblem(
    num_shards):
  # A numpy CoCoA+ round from the math (the local subproblem with
  # sigma = K): with the squared loss shard k's maximiser is the solution
  # of (I + sigma X_k X_k^T / l2) d_k = y_k - a_k - X_k w, and the round
  # adds w += sum_k X_k^T d_k / l2. Enough local passes solve the
  # subproblem exactly, so the simulation's round (the op's sigma in q,
  # the 1/sigma of the returned change, the adding) must match it.
  data = _criteo(120, 6)
  data["labels"] = (2.0 * data["labels"] - 1.0).astype(np.float32)
  x, y, l2 = _dense_design(data, 64), data["labels"].astype(np.float64), 5.0
  sim = simulation.Simulation(data, num_shards, num_features=64,
                              loss="squared", l2=l2, num_passes=400,
                              momentum=False, exchanges_per_pass=1)
  duals, weights = np.zeros(len(y)), np.zeros(x.shape[1])
  bounds = np.linspace(0, len(y), num_shards + 1).round().astype(int)
  for _ in range(3):
    sim.step()
    change = np.zeros_like(duals)
    for start, stop in zip(bounds[:-1], bounds[1:]):
      xk = x[start:stop]
      change[start:stop] = np.linalg.solve(
          np.eye(stop - start) + num_shards * xk @ xk.T / l2,
          y[start:stop] - duals[start:stop] - xk @ weights)
    duals += change
    weights += x.T @ change / l2
    sparse, dense = sim.full_weights()
    np.testing.assert_allclose(np.concatenate([sparse, dense]), weights,
                               rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        np.concatenate([s.duals for s in sim.shards]), duals, rtol=1e-9,
        atol=1e-12)


def test_momentum_cuts_the_rounds_of_weak_regularisation():
  # Weak regularisation (l2 = 1 on 2,000 rows): plain CoCoA+ with K = 2 is
  # slow (the cross-shard modes of Momentum's docstring); extrapolating the
  # rounds reaches 1e-4 in a fraction of them, at the same optimum.
  data = _criteo(2000, 10)
  runs = {}
  for momentum in (False, True):
    sim = simulation.Simulation(data, 2, num_features=1024, l2=1.0,
                                momentum=momentum, exchanges_per_pass=1)
    runs[momentum] = (sim, sim.run(tol=1e-4, max_rounds=400))
  plain, fast = runs[False][1], runs[True][1]
  assert fast["rounds"] is not None
  assert plain["rounds"] is None or plain["rounds"] > 2 * fast["rounds"]
  assert max(runs[True][0].betas) > 0.5  # the domain cap did not bind
  _, objective, gap = _single_process_optimum(data, 1024, 1.0)
  sim_objective, sim_gap = runs[True][0].objective_and_gap()
  assert sim_objective - sim_gap <= objective + 1e-9 * objective
  assert sim_objective == pytest.approx(objective, rel=2e-4)


def test_parts_of_a_pass_on_one_shard_are_the_whole_pass():
  # K = 1 (sigma = 1): four exchanges per pass chain the parts of the same
  # visiting order, so three rounds make the steps of three whole passes
  # (up to the rounding of adding each part's change w' - w back to w).
  data = _criteo(500, 9)
  sims = [simulation.Simulation(data, 1, num_features=512, l2=2.0,
                                momentum=False, exchanges_per_pass=s)
          for s in (1, 4)]
  for sim in sims:
    for _ in range(3):
      sim.step()
  np.testing.assert_allclose(sims[1].weights, sims[0].weights, rtol=1e-12,
                             atol=1e-15)
  np.testing.assert_allclose(sims[1].shards[0].duals,
                             sims[0].shards[0].duals, rtol=1e-11, atol=1e-15)
  assert not np.array_equal(sims[0].weights, 0 * sims[0].weights)


def test_exchanges_within_a_pass_cut_the_rounds_to_one_process_epochs():
  # Weak regularisation (l2 = 1 on 2,000 rows, K = 2, momentum on): one
  # exchange per round needs about twice one process's epochs; eight per
  # pass about as many rounds as the epochs, at the same optimum.
  data = _criteo(2000, 10)
  single, objective, _ = _single_process_optimum(data, 1024, 1.0)
  # One process's plain epochs (the default would extrapolate them too).
  epochs = len(InMemorySdca("logistic", l2=1.0, momentum=0).fit(
      data["labels"], dense=data["dense"], ids=data["ids"],
      num_features=1024, epochs=500, tol=1e-4, verbose=0)["duality_gap"])
  rounds = {}
  for parts in (1, 8):
    sim = simulation.Simulation(data, 2, num_features=1024, l2=1.0,
                                exchanges_per_pass=parts)
    rounds[parts] = sim.run(tol=1e-4, max_rounds=400)["rounds"]
  assert rounds[8] is not None and rounds[8] <= 1.25 * epochs
  assert rounds[1] is None or rounds[1] >= 1.5 * rounds[8]
  sim_objective, sim_gap = sim.objective_and_gap()
  assert sim_gap <= 1e-4 * sim_objective
  assert sim_objective - sim_gap <= objective + 1e-9 * objective
  assert sim_objective == pytest.approx(objective, rel=2e-4)
  del single


def test_resume_of_a_checkpoint_from_before_the_exchanges_option(tmp_path):
  # A checkpoint written before `exchanges_per_pass` existed ran one
  # exchange a round; resuming it with today's default 16 would change the
  # rounds, so it is refused with the saved value named.
  from tf_sdca.distributed import cluster as cluster_lib  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  old = dict(loss="logistic_loss", l2=10.0, local_passes=1)
  with open(tmp_path / "state.json", "w") as f:
    json.dump(dict(round=3, options=old, history=[]), f)
  now = dict(old, exchanges_per_pass=16)
  with pytest.raises(cluster_lib.ClusterError,
                     match=r"'exchanges_per_pass': \(None, 16\).*"
                           r"exchanges_per_pass 1"):
    training._restore(str(tmp_path), None, now, None, None, None)  # pylint: disable=protected-access
  # The command line's default (kept without importing TensorFlow) is it.
  from tf_sdca.distributed import command  # pylint: disable=import-outside-toplevel
  assert command.EXCHANGES_PER_PASS == training.EXCHANGES_PER_PASS == 16


def test_a_change_is_sent_as_pairs_when_they_are_shorter():
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  rng = np.random.default_rng(4)
  positions = [np.array([7, 2, 9, 4, 0, 5]), np.array([3, 1, 8, 6, 2])]
  sparse = np.array([0.0, 0.5, 0.0, 0.0, 0.0, -1.25])  # 2 of 6 changed
  dense = rng.normal(size=5)
  pieces = [training.pack_change(sparse), training.pack_change(dense)]
  np.testing.assert_array_equal(pieces[0], [1, 5, 0.5, -1.25])
  assert pieces[1] is not None and np.array_equal(pieces[1], dense)
  # Three of six is not shorter as pairs: sent as it is.
  assert training.pack_change(np.r_[0.5, 0.0, 2.0, 1.0, 0, 0]).size == 6
  weights = rng.normal(size=10)
  expected = weights.copy()
  expected[positions[0]] += sparse
  expected[positions[1]] += dense
  got = training.add_changes(weights.copy(), positions, pieces)
  np.testing.assert_array_equal(got, expected)


def test_simulated_rounds_and_bytes_per_round():
  data = _criteo(2000, 10)
  # l2 = 300: strong enough regularisation for adding to pay (with l2 = 30
  # both need ~93 rounds here; g3doc/distributed.md has the measurements).
  # CoCoA+ and CoCoA as published: one exchange a round.
  one, plus, average = (
      simulation.Simulation(data, k, num_features=1024, l2=300.0,
                            combine=combine, exchanges_per_pass=1)
      for k, combine in ((1, "add"), (8, "add"), (8, "average")))
  rounds = [s.run(tol=1e-4, max_rounds=400)["rounds"]
            for s in (one, plus, average)]
  # One shard is plain SDCA (one epoch a round); adding beats averaging.
  assert rounds[0] < rounds[1] < rounds[2]
  assert one.bytes_per_round() == dict(dense=0.0, union=0.0, gather=0.0)
  sent = plus.bytes_per_round()
  assert sent["dense"] == pytest.approx(2 * 7 / 8 * (1024 + 14) * 8)
  assert sent["union"] == pytest.approx(2 * 7 / 8 * plus.weights.size * 8)
  most = max(s.touched.size for s in plus.shards) + 14
  assert sent["gather"] == pytest.approx(7 * most * 8)
  # By default every pass has 16 exchanges: 16 times each, and a part's
  # changes gathered as (position, value) pairs send less than the dense
  # gather (2,000 rows, 8 shards: ~16 rows a part; measured 0.55x).
  default = simulation.Simulation(data, 8, num_features=1024, l2=300.0)
  assert default.bytes_per_round() == pytest.approx(
      {key: 16 * value for key, value in sent.items()})
  default.step()
  assert 0 < default.gathered_bytes[0] < 0.8 * 16 * sent["gather"]


# ------------------------------------------------- real processes, loopback
# Every test below starts worker processes (each ~8 s of TensorFlow start-up
# on a loaded 2-core machine) and tags them with a unique environment
# variable, then checks that no process carrying the tag is left.

def _tagged_env(**extra):
  tag = uuid.uuid4().hex
  env = dict(os.environ, TF_SDCA_TEST_TAG=tag, TF_CPP_MIN_LOG_LEVEL="3",
             PYTHONPATH=os.pathsep.join(
                 [_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(
                     os.pathsep) if p]), **extra)
  return env, tag


def _processes_with_tag(tag):
  """Pids of live processes whose environment carries the tag."""
  found = []
  needle = f"TF_SDCA_TEST_TAG={tag}".encode()
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/environ", "rb") as f:
        if needle in f.read().split(b"\0"):
          with open(f"/proc/{entry}/stat") as stat:
            if stat.read().split(") ")[-1][0] != "Z":
              found.append(int(entry))
    except OSError:
      continue
  return found


def _assert_nothing_left(tag, addresses=()):
  assert _processes_with_tag(tag) == []
  for address in addresses:  # nobody listens on the cluster's ports
    host, port = address.rsplit(":", 1)
    with socket.socket() as s:
      s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
      s.bind((host, int(port)))


def _addresses(text):
  return re.findall(r"127\.0\.0\.1:\d+", text)


def _cli_here(args):
  """`tf-sdca ARGS` in this process (TensorFlow already imported: a child
  process's start is ~5-8 s of a 2-core machine): (status, stdout)."""
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  out = io.StringIO()
  with contextlib.redirect_stdout(out):
    status = cli.main(args)
  return status, out.getvalue()


def _cluster_here(args, killed_at=None):
  """`tf-sdca train ARGS --local-cluster K` with the launcher in this
  process (its workers are processes as always): the launcher's own
  TensorFlow start, ~5-8 s before any worker starts, is saved; the
  launcher as a process of its own runs in the README's and
  g3doc/distributed.md's examples (tests/test_docs_examples.py).
  `killed_at`: the workers SIGKILL themselves at that
  `files.kill_point` (tests/interruptions.py). The workers carry a new
  tag (this process's environment, /proc/PID/environ, does not).
  Returns (status, stdout, stderr, tag)."""
  from tf_sdca import cli  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  env, tag = _tagged_env()
  out, err = io.StringIO(), io.StringIO()
  # The tag goes to the workers' environment only: set in this process's,
  # it also tagged what other threads started meanwhile (tests/core_build's
  # background g++, then counted as left over).
  tagged = {name: env[name]
            for name in ("TF_SDCA_TEST_TAG", "TF_CPP_MIN_LOG_LEVEL",
                         "PYTHONPATH")}
  with pytest.MonkeyPatch.context() as patch:
    run_workers = launch.run_workers

    def run_workers_here(*positional, **keywords):
      keywords["env"] = dict(keywords.get("env") or {}, **tagged)
      keywords.setdefault("timeout", 240)  # (the child launcher's limit)
      if killed_at is not None:
        keywords.setdefault("worker_command",
                            interruptions.killed_at(killed_at, "worker"))
      return run_workers(*positional, **keywords)

    patch.setattr(launch, "run_workers", run_workers_here)
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
      status = cli.main(args)
  return status, out.getvalue(), err.getvalue(), tag


_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_CLI_OPTIONS = ["--bucket-bits", "12", "--l2", "100", "--tol", "1e-10",
                "--epochs", "500"]


@pytest.fixture(scope="module")
def criteo_files(tmp_path_factory):
  from tf_sdca import commands  # pylint: disable=import-outside-toplevel
  out = str(tmp_path_factory.mktemp("criteo"))
  commands.generate(argparse.Namespace(rows=4000, out=out, files=4, seed=0))
  return sorted(glob.glob(os.path.join(out, "part-*.tsv")))


@pytest.fixture(scope="module")
def two_workers_model(criteo_files, tmp_path_factory):
  """`tf-sdca train --local-cluster 2`, uninterrupted."""
  model_dir = str(tmp_path_factory.mktemp("two_workers"))
  status, out, err, tag = _cluster_here(
      ["train", *criteo_files, "--model-dir", model_dir, "--local-cluster",
       "2", *_CLI_OPTIONS])
  assert status == 0, err[-3000:]
  _assert_nothing_left(tag, _addresses(out))
  return model_dir


def _model(model_dir):
  from tf_sdca import model_files  # pylint: disable=import-outside-toplevel
  return model_files.load_model(model_dir)


def test_local_cluster_of_two_reaches_the_single_process_optimum(
    criteo_files, two_workers_model, tmp_path):
  from tf_sdca import commands  # pylint: disable=import-outside-toplevel
  single_dir = str(tmp_path / "single")
  parser = argparse.ArgumentParser()
  commands.add_parsers(parser.add_subparsers(dest="command"))
  args = parser.parse_args(["train", *criteo_files, "--model-dir", single_dir,
                            *_CLI_OPTIONS, "--tol", "1e-13", "--quiet"])
  assert commands.train(args) == 0
  meta1, ckpt1 = _model(single_dir)
  meta2, ckpt2 = _model(two_workers_model)
  assert meta2["distributed"]["workers"] == 2 and meta2["rows"] == 4000
  assert meta2["scale"] == meta1["scale"]  # one feature layout
  objective1 = meta1["history"][-1]["loss"] * 4000
  gap1 = meta1["history"][-1]["duality_gap"] * objective1
  objective2 = meta2["history"][-1]["loss"] * 4000
  gap2 = meta2["history"][-1]["duality_gap"] * objective2
  assert gap2 <= 1e-10 * objective2
  assert objective2 == pytest.approx(objective1, rel=1e-6)
  # Each primal is above the other's dual: the certificates agree.
  assert objective2 >= objective1 - gap1 - 1e-12 * objective1
  assert objective1 >= objective2 - gap2 - 1e-12 * objective1
  np.testing.assert_allclose(ckpt2["sparse_weights"], ckpt1["sparse_weights"],
                             atol=1e-4)
  np.testing.assert_allclose(ckpt2["dense_weights"], ckpt1["dense_weights"],
                             atol=1e-4)
  # Bytes per round (K = 2): the exchange sending fewer bytes was chosen,
  # and each round sent it once per part of its pass (16 by default), plus
  # the gap's two numbers and the K workers' extrapolation limits (the
  # lengths of the gathered changes are known from the start).
  dist = meta2["distributed"]
  choices = dict(allreduce=dist["table_size"] * 8,  # 2 (K-1)/K = 1
                 allgather=dist["largest_shard"] * 8)
  assert dist["exchange"] == min(choices, key=choices.get)
  exchanges = dist["exchanges_per_round"]
  assert exchanges == 16
  assert dist["bytes_per_round"] == exchanges * choices[dist["exchange"]]
  overhead = (2 + 2) * 8
  if dist["exchange"] == "allreduce":
    assert all(h["bytes_sent"] == dist["bytes_per_round"] + overhead
               for h in meta2["history"])
  else:  # at most the dense changes, plus the lengths' all-reduce each time
    lengths = exchanges * 2 * 8
    assert all(h["bytes_sent"] <= dist["bytes_per_round"] + overhead +
               lengths for h in meta2["history"])


def test_killed_worker_stops_the_cluster_and_resume_gives_the_same_model(
    criteo_files, two_workers_model, tmp_path):
  model_dir = str(tmp_path / "killed")
  status, _, killed, tag = _cluster_here(
      ["train", *criteo_files, "--model-dir", model_dir, "--local-cluster",
       "2", *_CLI_OPTIONS, "--quiet"], killed_at="worker-1-round-5-solved")
  assert status == 1, killed
  assert "worker 1 of 2 failed (killed by SIGKILL)" in killed
  # The survivor saw its collective fail and stopped by itself.
  assert "a collective with the other workers failed" in killed, killed
  _assert_nothing_left(tag, _addresses(killed))
  # Round 4's checkpoint is complete unless the kill (right after worker
  # 1's part of round 4's barrier) failed that barrier on the chief: then
  # state.json still names round 3, and the message says so.
  done = int(re.search(r"checkpoint after round (\d+); continue with the "
                       r"same command and --resume", killed).group(1))
  assert done in (3, 4)
  with open(os.path.join(model_dir, "cocoa", "state.json")) as f:
    assert json.load(f)["round"] == done

  status, resumed, err, tag = _cluster_here(
      ["train", *criteo_files, "--model-dir", model_dir, "--local-cluster",
       "2", *_CLI_OPTIONS, "--resume"])
  assert status == 0, err[-3000:]
  assert f"resumed after round {done}" in resumed
  _assert_nothing_left(tag, _addresses(resumed))
  meta_r, ckpt_r = _model(model_dir)
  meta_u, ckpt_u = _model(two_workers_model)
  # The same rounds from the same state with the same seeds: bit for bit.
  assert meta_r["epochs_done"] == meta_u["epochs_done"]
  np.testing.assert_array_equal(ckpt_r["sparse_weights"],
                                ckpt_u["sparse_weights"])
  np.testing.assert_array_equal(ckpt_r["dense_weights"],
                                ckpt_u["dense_weights"])
  assert [h["duality_gap"] for h in meta_r["history"]] == [
      h["duality_gap"] for h in meta_u["history"]]


def test_a_model_trains_further_across_processes_with_more_epochs(
    criteo_files, two_workers_model, tmp_path):
  # The rounds' checkpoint kept max_rounds and tol among the options a
  # resume must match: training further (a larger --epochs) was refused,
  # so a distributed model could never be trained further.
  model_dir = str(tmp_path / "further")
  short = list(_CLI_OPTIONS)
  short[short.index("--epochs") + 1] = "3"
  status, _, err, _ = _cluster_here(
      ["train", *criteo_files, "--model-dir", model_dir, "--local-cluster",
       "2", *short, "--quiet"])
  assert status == 0, err[-3000:]
  assert _model(model_dir)[0]["epochs_done"] == 3
  status, out, err, tag = _cluster_here(
      ["train", *criteo_files, "--model-dir", model_dir, "--local-cluster",
       "2", *_CLI_OPTIONS, "--resume"])
  assert status == 0, err[-3000:]
  assert "resumed after round 3" in out
  _assert_nothing_left(tag, _addresses(out))
  meta_r, ckpt_r = _model(model_dir)
  meta_u, ckpt_u = _model(two_workers_model)
  # Rounds 4 on, to the same certified optimum as the uninterrupted run
  # (which went on with the extrapolation of round 3, where the resume
  # starts it again: not the same rounds).
  assert meta_r["epochs_done"] > 3
  assert 0.0 <= meta_r["history"][-1]["duality_gap"] < 1e-10
  np.testing.assert_allclose(ckpt_r["sparse_weights"],
                             ckpt_u["sparse_weights"], rtol=0, atol=1e-5)


def _sparse_dense_weighted(n=3000, vocab=400, seed=1):
  rng = np.random.default_rng(seed)
  lengths = rng.integers(1, 9, size=n)
  indptr = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
  indices = rng.zipf(1.3, size=indptr[-1]) % vocab
  values = rng.uniform(0.2, 1.5, size=indptr[-1]).astype(np.float32)
  dense = np.hstack([rng.normal(size=(n, 4)) / 2, np.ones((n, 1))]).astype(
      np.float32)
  weights = rng.choice([0.0, 0.5, 1.0, 2.0], size=n,
                       p=[0.05, 0.2, 0.55, 0.2]).astype(np.float32)
  margin = dense[:, 0] - dense[:, 1] + rng.normal(size=n)
  labels = (margin > 0).astype(np.float32)
  return dict(labels=labels, dense=dense, indptr=indptr, indices=indices,
              values=values, example_weights=weights), vocab


def test_python_entry_point_with_sparse_dense_and_example_weights(tmp_path):
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  data, vocab = _sparse_dense_weighted()
  l2 = 20.0
  model = InMemorySdca("logistic", l2=l2)
  history = model.fit(data["labels"], dense=data["dense"],
                      indptr=data["indptr"], indices=data["indices"],
                      values=data["values"], num_features=vocab,
                      example_weights=data["example_weights"], epochs=500,
                      tol=1e-13, verbose=0)
  total = float(data["example_weights"].sum())
  objective = history["loss"][-1] * total
  gap = history["duality_gap"][-1] * objective
  env, tag = _tagged_env()
  result = launch.train_local_cluster(
      2, **data, num_features=vocab, model_dir=str(tmp_path), l2=l2,
      tol=1e-11, max_rounds=3000, checkpoint_every=50, env=env,
      timeout=240, exchanges_per_pass=1)  # (the CLI tests run the default)
  _assert_nothing_left(tag, result["addresses"])
  assert result["exchanges_per_round"] == 1
  last = result["history"][-1]
  dist_objective = last["loss"] * total
  dist_gap = last["duality_gap"] * dist_objective
  assert dist_gap <= 1e-11 * dist_objective
  assert dist_objective == pytest.approx(objective, rel=1e-6)
  assert dist_objective >= objective - gap - 1e-12 * objective
  assert objective >= dist_objective - dist_gap - 1e-12 * objective
  np.testing.assert_allclose(result["sparse_weights"], model.sparse_weights,
                             atol=1e-4)
  np.testing.assert_allclose(result["dense_weights"], model.dense_weights,
                             atol=1e-4)


def test_worker_without_the_op_library_is_a_clear_error_on_every_worker(
    tmp_path):
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  # Worker 1 imports a copy of tf_sdca without _sdca_ops.so.
  copy = tmp_path / "no_op" / "tf_sdca"
  shutil.copytree(os.path.join(_ROOT, "tf_sdca"), copy,
                  ignore=shutil.ignore_patterns("*.so", "__pycache__"))
  data = _criteo(400, 8)
  env, tag = _tagged_env()
  with pytest.raises(launch.LocalClusterError) as error:
    launch.train_local_cluster(
        2, **data, num_features=256, model_dir=str(tmp_path / "model"),
        l2=10.0, env=env, startup_timeout=60, timeout=120,
        worker_envs=[None, {"PYTHONPATH": str(copy.parent)}])
  message = str(error.value)
  assert "op library did not load on worker 1 (127.0.0.1:" in message
  assert "_sdca_ops.so is missing" in message  # worker 1's own reason
  # Both stopped by themselves (the launcher's timeout would have killed
  # them: no wall-clock bound needed).
  assert error.value.returncodes == [3, 3]
  _assert_nothing_left(tag, _addresses(message))


@pytest.mark.slow  # ~15 s of waiting: pytest --run-slow runs it
def test_worker_whose_peer_never_starts_stops_after_the_startup_timeout(
    tmp_path):
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  addresses = [f"127.0.0.1:{p}" for p in launch.free_ports(2)]
  env, tag = _tagged_env(TF_CONFIG=launch.tf_config(addresses, 0))
  code = ("import numpy as np\n"
          "from tf_sdca.distributed import training\n"
          "training.train(np.ones(8, np.float32), dense=np.ones((8, 1)),"
          " startup_timeout=5)\n")
  result = subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=120)
  assert result.returncode == -9  # the watchdog's SIGKILL
  assert (f"not every worker of {addresses!r} joined within 5 s"
          in result.stderr)
  time.sleep(0.5)  # the watchdog exits once its parent is gone
  _assert_nothing_left(tag, addresses)


class _OneWorker:
  """The parts of a Cluster that checkpointing uses, for one worker."""
  index, size, is_chief = 0, 1, True

  def barrier(self):
    pass


class _Duals:
  def __init__(self, n):
    self.n = n
    self.duals = np.zeros(n)


def test_checkpoints_keep_a_complete_round_whatever_fails(tmp_path,
                                                          monkeypatch):
  from tf_sdca.distributed import training  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import shard as shard_lib  # pylint: disable=import-outside-toplevel
  state_dir = str(tmp_path)
  accelerate = shard_lib.Momentum()

  def write(r):
    # Round r's own point and the next round's extrapolated start.
    accelerate.t, accelerate.last_dual = r, -1.0 / r
    training._checkpoint(  # pylint: disable=protected-access
        state_dir, cluster, options, layout, table_ids,
        (np.full(5, float(r)), np.full(4, float(r))),
        (np.full(5, r + 0.5), np.full(4, r + 0.5)), accelerate, history)

  cluster = _OneWorker()
  options, layout = dict(l2=1.0), dict(exchange="allreduce")
  table_ids = np.arange(3)
  history = []
  for r in range(1, 6):
    history.append(dict(round=r, duality_gap=1.0 / r))
    write(r)
  # Only the last two rounds' files are kept.
  assert sorted(os.listdir(state_dir)) == [
      "state.json", "weights-000004.npz", "weights-000005.npz",
      "worker-0000-000004.npz", "worker-0000-000005.npz"]
  # Round 6 dies before state.json moves: a half-written file stays
  # behind, round 6's duals are written, state.json still names round 5.
  with open(os.path.join(state_dir, "weights-000006.npz.tmp.npz"), "wb") as f:
    f.write(b"half")

  def die(*args):
    raise KeyboardInterrupt

  monkeypatch.setattr(files, "save_json_atomically", die)
  history.append(dict(round=6, duality_gap=1.0 / 6))
  with pytest.raises(KeyboardInterrupt):
    write(6)
  monkeypatch.undo()
  fresh, restored_momentum = _Duals(5), shard_lib.Momentum()
  weights, restored, (duals5, weights5) = training._restore(  # pylint: disable=protected-access
      state_dir, cluster, options, table_ids, fresh, restored_momentum)
  assert restored[-1]["round"] == 5
  # The next round starts from round 5's extrapolation; round 5's own
  # point is what momentum extrapolates from (and the model if it ends).
  np.testing.assert_array_equal(weights, np.full(4, 5.5))
  np.testing.assert_array_equal(fresh.duals, np.full(5, 5.5))
  np.testing.assert_array_equal(weights5, np.full(4, 5.0))
  np.testing.assert_array_equal(duals5, np.full(5, 5.0))
  assert restored_momentum.state() == dict(t=5, last_dual=-0.2)
  # Other options or other rows are refused, not silently mixed.
  from tf_sdca.distributed.cluster import ClusterError  # pylint: disable=import-outside-toplevel
  with pytest.raises(ClusterError, match="other options"):
    training._restore(state_dir, cluster, dict(l2=2.0), table_ids, fresh,  # pylint: disable=protected-access
                      None)
  with pytest.raises(ClusterError, match="ids differ"):
    training._restore(state_dir, cluster, options, np.arange(4), fresh,  # pylint: disable=protected-access
                      None)
  with pytest.raises(ClusterError, match="has 4 rows"):
    training._restore(state_dir, cluster, options, table_ids, _Duals(4),  # pylint: disable=protected-access
                      None)


# Digits' 900-row shards need hundreds of rounds to these gaps, and with
# S = 16 each of them is 16 loopback collectives (28-33 s a case against
# 10-17 s with S = 1, g3doc/distributed.md): one case cuts its passes.
# Each case takes ~20 s on 2 cores; the default run keeps the hinge's
# projection step (the cluster's default step, through launch's door). The
# softmax blocks and weights on a cluster are checked by
# test_cli_local_cluster_trains_softmax_on_libsvm_class_labels (iris), and
# the near-maximal-gain step with several exchanges per pass by
# test_cli_local_cluster_passes_the_hinge_step_to_every_worker (iris, 3
# parts): on digits they run with --run-slow.
@pytest.mark.parametrize("loss,l2,step,parts", [
    pytest.param("softmax", 5.0, "projection", 1, marks=pytest.mark.slow),
    # l2 = 3000 (test_multiclass's hinge on Digits): 1,169 rounds to 1e-5
    # against 1,884 with l2 = 1000 (11 s of rounds against 24-34 s).
    ("multiclass_hinge", 3000.0, "projection", 1),
    pytest.param("multiclass_hinge", 1000.0, "near_max_gain", 4,
                 marks=pytest.mark.slow)])
def test_multiclass_on_a_local_cluster_reaches_the_single_process_optimum(
    tmp_path, loss, l2, step, parts):
  """Digits (pixel intensities 0..16 as they come, the pixels as CSR ids
  plus an intercept column) with 10 classes on two worker processes: each
  table row's 10 class weights are exchanged together, the extrapolated
  blocks stay on the simplex, and the rounds end at the objective and
  weights one process reaches, both certified by their gaps; the hinge also
  with the reference's near-maximal-gain step in the local solves, and
  with 4 exchanges per pass (each a part's changed class rows)."""
  from sklearn.datasets import load_digits  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import launch  # pylint: disable=import-outside-toplevel
  x, y = load_digits(return_X_y=True)
  rows, cols = np.nonzero(x)
  data = dict(labels=y.astype(np.float32),
              indptr=np.searchsorted(rows, np.arange(len(y) + 1)).astype(
                  np.int64),
              indices=cols.astype(np.int64),
              values=x[rows, cols].astype(np.float32),
              dense=np.ones((len(y), 1), np.float32))
  tol = 1e-9 if loss == "softmax" else 1e-5
  model = InMemorySdca(loss, l2=l2, num_classes=10, hinge_step=step)
  history = model.fit(data["labels"], dense=data["dense"],
                      indptr=data["indptr"], indices=data["indices"],
                      values=data["values"], num_features=64, epochs=20000,
                      tol=tol, verbose=0)
  objective = history["loss"][-1] * len(y)
  env, tag = _tagged_env()
  result = launch.train_local_cluster(
      2, **data, num_features=64, model_dir=str(tmp_path), loss=loss, l2=l2,
      num_classes=10, tol=tol, max_rounds=20000, checkpoint_every=500,
      env=env, timeout=400, exchanges_per_pass=parts,
      **({} if step == "projection" else dict(hinge_step=step)))
  _assert_nothing_left(tag, result["addresses"])
  last = result["history"][-1]
  assert last["duality_gap"] <= tol
  assert last["loss"] * len(y) == pytest.approx(objective, rel=2 * tol)
  assert result["sparse_weights"].shape == (64, 10)
  assert result["dense_weights"].shape == (1, 10)
  with open(tmp_path / "cocoa" / "state.json") as f:  # what the workers ran
    options = json.load(f)["options"]
  assert options.get("hinge_step", "projection") == step
  assert options.get("exchanges_per_pass", 1) == parts
  if loss == "softmax":  # (the hinge's optimum need not be unique)
    np.testing.assert_allclose(result["sparse_weights"], model.sparse_weights,
                               atol=1e-3 * np.abs(model.sparse_weights).max())


def _iris_files(tmp_path):
  """Iris (cm) shuffled, as two LIBSVM files with labels 1, 2, 3."""
  from sklearn.datasets import load_iris  # pylint: disable=import-outside-toplevel
  x, y = load_iris(return_X_y=True)
  perm = np.random.default_rng(0).permutation(len(y))
  x, y = x[perm], y[perm] + 1
  paths = []
  for part, rows in enumerate(np.array_split(np.arange(len(y)), 2)):
    path = str(tmp_path / f"iris-{part}.svm")
    with open(path, "w") as f:
      for i in rows:
        f.write(f"{y[i]} " + " ".join(f"{j + 1}:{v:g}"
                                      for j, v in enumerate(x[i])) + "\n")
    paths.append(path)
  return paths


def test_cli_local_cluster_trains_softmax_on_libsvm_class_labels(tmp_path):
  """`tf-sdca train --loss softmax --num-classes 3 --local-cluster 2` on
  iris (cm) as two LIBSVM files with labels 1, 2, 3: the workers agree on
  the classes from both files, and the model equals the one-process one
  (objective, weights, classes in model.json); `evaluate` scores it."""
  paths = _iris_files(tmp_path)
  # 4 exchanges per pass, not the default 16: the ~200 rounds to 1e-10 took
  # 10-12 s of 16 loopback collectives each, 237 rounds of 4 take ~3 s; the
  # default's rounds are test_local_cluster_of_two_reaches_the_single_
  # process_optimum's, a multiclass table's parts the hinge test's below.
  options = ["--format", "libsvm", "--loss", "softmax", "--num-classes", "3",
             "--l2", "1", "--epochs", "20000", "--tol", "1e-10", "--quiet",
             "--exchanges-per-pass", "4"]
  two = str(tmp_path / "two")
  status, _, err, tag = _cluster_here(
      ["train", *paths, "--model-dir", two, "--local-cluster", "2", *options])
  assert status == 0, err[-2000:]
  assert _processes_with_tag(tag) == []
  one = str(tmp_path / "one")
  # (One process takes no --exchanges-per-pass: refused since 2026-11-29,
  # ignored before.)
  assert _cli_here(["train", *paths, "--model-dir", one,
                    *options[:-2]])[0] == 0
  meta1, ckpt1 = _model(one)
  meta2, ckpt2 = _model(two)
  assert meta2["classes"] == meta1["classes"] == [1.0, 2.0, 3.0]
  assert meta2["distributed"]["workers"] == 2
  assert meta2["history"][-1]["duality_gap"] <= 1e-10
  assert meta2["history"][-1]["loss"] == pytest.approx(
      meta1["history"][-1]["loss"], rel=1e-8)
  assert ckpt2["sparse_weights"].shape == ckpt1["sparse_weights"].shape
  np.testing.assert_allclose(ckpt2["sparse_weights"], ckpt1["sparse_weights"],
                             atol=1e-4)
  status, out = _cli_here(["evaluate", *paths, "--model-dir", two,
                            "--format", "libsvm"])
  assert status == 0 and "accuracy" in out, out


def test_cli_local_cluster_passes_the_hinge_step_to_every_worker(tmp_path):
  """`--hinge-step near_max_gain --exchanges-per-pass 3 --local-cluster 2`:
  the workers' local solves take the step and the parts (both are in the
  rounds' options) and end at the one-process objective of the same
  loss."""
  paths = _iris_files(tmp_path)
  options = ["--format", "libsvm", "--loss", "multiclass_hinge",
             "--num-classes", "3", "--l2", "1000", "--epochs", "20000",
             "--tol", "1e-5", "--quiet", "--hinge-step", "near_max_gain",
             "--exchanges-per-pass", "3"]
  two, one = str(tmp_path / "two"), str(tmp_path / "one")
  status, _, err, tag = _cluster_here(
      ["train", *paths, "--model-dir", two, "--local-cluster", "2", *options])
  assert status == 0, err[-2000:]
  assert _processes_with_tag(tag) == []
  with open(os.path.join(two, "cocoa", "state.json")) as f:
    state = json.load(f)
  assert state["options"]["hinge_step"] == "near_max_gain"
  assert state["options"]["exchanges_per_pass"] == 3
  assert state["layout"]["exchanges_per_round"] == 3
  assert _cli_here(["train", *paths, "--model-dir", one,
                    *options[:-2]])[0] == 0
  meta1, _ = _model(one)
  meta2, _ = _model(two)
  assert meta1["hinge_step"] == "near_max_gain"
  assert meta2["history"][-1]["duality_gap"] <= 1e-5
  assert meta2["history"][-1]["loss"] == pytest.approx(
      meta1["history"][-1]["loss"], rel=2e-5)


def test_workers_compare_the_hinge_step_at_the_join():
  # --hinge-step was left out of what the workers compare: workers started
  # under TF_CONFIG with different steps trained without a word.
  from tf_sdca import commands  # pylint: disable=import-outside-toplevel
  from tf_sdca.distributed import command  # pylint: disable=import-outside-toplevel
  parser = argparse.ArgumentParser()
  commands.add_parsers(parser.add_subparsers(dest="command"))
  base = ["train", "a.svm", "b.svm", "--format", "libsvm", "--loss",
          "multiclass_hinge", "--num-classes", "3", "--model-dir", "m"]
  options = [command.training_options(parser.parse_args(base + extra))
             for extra in ([], ["--hinge-step", "projection"],
                           ["--hinge-step", "near_max_gain"])]
  assert options[0] == options[1] and "hinge_step" not in options[0]
  assert options[2] != options[0]
  assert options[2]["hinge_step"] == "near_max_gain"

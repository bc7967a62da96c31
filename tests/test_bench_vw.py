"""bench/bench_vw.py: the conversion to Vowpal Wabbit's text format, and the
benchmark end to end on tiny data (where vowpalwabbit is installed: CI does
not install it, it is a benchmark's peer, bench/requirements.txt)."""
import argparse
import importlib.util
import math
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "bench"))

import bench_vw  # pylint: disable=g-import-not-at-top,wrong-import-position


def test_tsv_to_vw_keeps_ours_features(tmp_path):
  counts = ["3", "", "0", "-2", "12"] + ["1"] * 8
  tokens = ["68fd1e64", ""] + [f"{j:08x}" for j in range(24)]
  lines = ["1\t" + "\t".join(counts + tokens),
           "0\t" + "\t".join([""] * 13 + [""] * 26)]
  tsv = tmp_path / "part.tsv"
  tsv.write_text("\n".join(lines) + "\n", encoding="ascii")
  out = tmp_path / "rows.vw"
  assert bench_vw.tsv_to_vw([str(tsv)], str(out)) == 2
  first, second = out.read_text(encoding="ascii").splitlines()
  label, numeric, categorical = first.split("|")
  assert label == "1 "
  # log1p of the positive counts only: ours has a 0 for 0, missing and
  # negative counts.
  pairs = dict(f.split(":") for f in numeric.split()[1:])
  assert sorted(pairs) == sorted(["I1", "I5"] + [f"I{j}" for j in
                                                 range(6, 14)])
  assert float(pairs["I1"]) == pytest.approx(math.log1p(3), rel=1e-6)
  assert float(pairs["I5"]) == pytest.approx(math.log1p(12), rel=1e-6)
  assert float(pairs["I9"]) == pytest.approx(math.log(2), rel=1e-6)
  # Every field's token, prefixed by its field; a missing one is C2=.
  cats = categorical.split()
  assert cats[0] == "c" and len(cats) == 27
  assert cats[1:3] == ["C1=68fd1e64", "C2="]
  assert cats[26] == "C26=00000017"
  assert second == "-1 |n  |c " + " ".join(f"C{j}=" for j in range(1, 27))


@pytest.mark.skipif(importlib.util.find_spec("vowpalwabbit") is None,
                    reason="vowpalwabbit is not installed (a benchmark peer: "
                    "pip install -r bench/requirements.txt)")
def test_benchmark_runs_end_to_end_on_tiny_data(tmp_path):
  from tf_sdca import commands  # pylint: disable=import-outside-toplevel
  rows = 5000
  commands.generate(argparse.Namespace(
      rows=rows, out=str(tmp_path / f"data-{rows}"), files=10, seed=0))
  summary = bench_vw.main([
      "--rows", str(rows), "--passes", "1,3", "--learning-rates", "0.5",
      "--epochs", "3", "--l2", "10", "--startup-repeats", "0", "--dir",
      str(tmp_path), "--keep"])
  # The held-out rows are the last file's: 500 rows.
  labels = np.array([line[0] == "1" for line in open(
      tmp_path / f"data-{rows}" / "part-00009.tsv", encoding="ascii")],
                    np.float64)
  assert labels.shape == (rows // 10,)
  base = bench_vw.log_loss(labels, np.full_like(labels, labels.mean()))
  for target in ("vw", "ours"):
    # Both tools learn something on 4,500 rows: below the base rate.
    assert summary[target]["target"] < base - 0.02
  # Each tool reaches its own best (its best run), and a ratio is only
  # given where both reach the target.
  for name in ("vw", "ours"):
    run = summary[name][name]
    assert run["log_loss"] == summary[name]["target"]
  ratio = summary["vw"]["ratio"]
  if summary["vw"]["ours"] is not None:
    assert ratio == pytest.approx(summary["vw"]["ours"]["seconds"] /
                                  summary["vw"]["vw"]["seconds"])
  else:
    assert ratio is None

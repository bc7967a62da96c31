"""The Criteo-shaped generator and the `tf-sdca demo` command."""
import os
import subprocess
import sys

import numpy as np

from tf_sdca.data import generate_criteo_arrays, hash_category


def test_generator_shapes_rate_range_and_determinism():
  a = generate_criteo_arrays(50_000, num_buckets=2**16, seed=3)
  b = generate_criteo_arrays(50_000, num_buckets=2**16, seed=3)
  assert a["cat_ids"].shape == (50_000, 26) and a["dense"].shape == (50_000, 13)
  assert a["cat_ids"].min() >= 0 and a["cat_ids"].max() < 2**16
  assert 0.22 < a["labels"].mean() < 0.28
  for key in ("labels", "cat_ids", "counts"):
    np.testing.assert_array_equal(a[key], b[key])
  c = generate_criteo_arrays(50_000, num_buckets=2**16, seed=4)
  assert not np.array_equal(a["cat_ids"], c["cat_ids"])
  # Zipf: a field's most frequent value is far above its median frequency.
  values = a["cat_values"][:, 0]
  counts = np.bincount(values[values >= 0])
  assert counts.max() > 50 * np.median(counts[counts > 0])
  # Labels follow the ground truth: its log loss beats the base rate's.
  p, y = a["true_probabilities"], a["labels"]
  base = y.mean()
  truth_ll = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
  base_ll = -(base * np.log(base) + (1 - base) * np.log(1 - base))
  assert truth_ll < 0.9 * base_ll


def test_category_hash_is_stable_across_processes():
  code = ("from tf_sdca.data.synthetic import hash_category;"
          "print(hash_category(3, [0, 1, 12345, -1], 2**20).tolist())")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, check=True,
                       env={**os.environ, "PYTHONHASHSEED": "123"}).stdout
  assert out.strip() == str(hash_category(3, [0, 1, 12345, -1],
                                          2**20).tolist())


def test_demo_command_trains_and_reports():
  exe = os.path.join(os.path.dirname(sys.executable), "tf-sdca")
  cmd = ([exe] if os.path.exists(exe) else
         [sys.executable, "-m", "tf_sdca.cli"])
  result = subprocess.run(cmd + ["demo", "--rows", "30000", "--epochs", "3",
                                 "--bucket-bits", "14", "--quiet"],
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-2000:]
  lines = {l.split()[0] + " " + l.split()[1]: l.split()
           for l in result.stdout.splitlines() if l.startswith(("tf_sdca model",
                                                               "ground truth"))}
  model_auc = float(lines["tf_sdca model"][3])
  truth_auc = float(lines["ground truth"][3])
  assert 0.7 < model_auc <= truth_auc + 0.02

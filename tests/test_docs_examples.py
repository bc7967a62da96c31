"""The documentation stays true: every example in README.md and g3doc/*.md
runs, every relative link resolves, and the pages carry no issue numbers.

Examples are the fenced blocks tagged ```python, ```sh, ```bash or ```shell
(untagged fences hold signatures and output, and are not run). Python blocks
run in this process (no TensorFlow start per block), each as a script of
its own with an empty temporary directory as the working directory; shell blocks run under `bash -e` in an
empty temporary directory, with `tf-sdca` and `python` meaning this
interpreter and this checkout. Examples are written with small data so that
they run as they stand: nothing is substituted.

A block that cannot run here (the set-up commands, a multi-machine cluster's
per-process commands, a benchmark of minutes) is preceded by the line

    <!-- docs-test: skip (why) -->

which the extractor honours only with a reason. Keep such blocks rare.
A block that goes on from the one before it on its page (prose between
two steps of one example) is preceded by

    <!-- docs-test: continues -->

and runs after that block's code, in the same script or shell.
"""
import glob
import os
import re
import runpy
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PAGES = ["README.md"] + sorted(
    os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "g3doc",
                                                            "*.md")))
RUN_LANGS = {"python": "python", "sh": "sh", "bash": "sh", "shell": "sh"}
SKIP = re.compile(r"^<!-- docs-test: skip \((.+)\) -->$")
CONTINUES = "<!-- docs-test: continues -->"
FENCE = re.compile(r"^```(\S*)\s*$")


def _blocks(page):
  """Yields (first line number, language, code, skip reason or None) for
  each fenced block of `page` in a language that runs."""
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    lines = f.read().splitlines()
  i = 0
  previous = None  # the last runnable block: (language, code)
  while i < len(lines):
    opening = FENCE.match(lines[i])
    if not opening:
      i += 1
      continue
    start = i
    i += 1
    while i < len(lines) and lines[i].strip() != "```":
      i += 1
    body = "\n".join(lines[start + 1:i]) + "\n"
    i += 1
    lang = RUN_LANGS.get(opening.group(1))
    if lang is None:
      continue
    before = start - 1
    while before >= 0 and not lines[before].strip():
      before -= 1
    marker = lines[before].strip() if before >= 0 else ""
    skip = SKIP.match(marker)
    if marker == CONTINUES:
      assert previous is not None and previous[0] == lang, (
          f"{page}:{start + 1}: {CONTINUES} follows no {lang} block")
      body = previous[1] + body
    previous = None if skip else (lang, body)
    yield start + 1, lang, body, skip.group(1) if skip else None


EXAMPLES = [pytest.param(page, line, lang, code, reason,
                         id=f"{page}:{line}")
            for page in PAGES for line, lang, code, reason in _blocks(page)]


def test_the_extractor_finds_the_readme_examples():
  readme = [e for e in EXAMPLES if e.values[0] == "README.md"]
  assert sum(1 for e in readme if e.values[2] == "python") >= 4
  assert sum(1 for e in readme if e.values[2] == "sh") >= 2


def _command_dir(tmp_path):
  """A directory holding `tf-sdca` and `python` for this interpreter."""
  bin_dir = tmp_path / "_bin"
  bin_dir.mkdir()
  for name, command in (("python", f'"{sys.executable}"'),
                        ("tf-sdca", f'"{sys.executable}" -m tf_sdca.cli')):
    script = bin_dir / name
    script.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
    script.chmod(0o755)
  return bin_dir


@pytest.mark.parametrize("page,line,lang,code,reason", EXAMPLES)
def test_example_runs(page, line, lang, code, reason, tmp_path, monkeypatch):
  if reason is not None:
    pytest.skip(reason)
  work = tmp_path / "work"
  work.mkdir()
  if lang == "python":
    # From a file, so that AutoGraph can read a tf.function's source, and
    # a traceback names the page and line in the file's name.
    script = tmp_path / (re.sub(r"\W", "_", f"{page}_{line}") + ".py")
    script.write_text(code)
    monkeypatch.chdir(work)
    runpy.run_path(str(script), run_name="__main__")
    return
  env = dict(os.environ,
             PATH=f"{_command_dir(tmp_path)}{os.pathsep}{os.environ['PATH']}",
             PYTHONPATH=os.pathsep.join(
                 p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
             TF_CPP_MIN_LOG_LEVEL="3")
  result = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", code],
                          cwd=work, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
  assert result.returncode == 0, (
      f"{page}:{line} failed:\n{code}\nstdout:\n{result.stdout[-3000:]}"
      f"\nstderr:\n{result.stderr[-3000:]}")


LINK = re.compile(r"\]\(([^)\s]+)\)")
@pytest.mark.parametrize("page", PAGES + ["bench/README.md"])
def test_relative_links_resolve(page):
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    text = f.read()
  text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
  text = re.sub(r"`[^`\n]*`", "", text)  # code, not links
  missing = []
  for target in LINK.findall(text):
    if re.match(r"^[a-z]+:", target) or target.startswith("#"):
      continue
    path = os.path.normpath(os.path.join(os.path.dirname(page),
                                         target.split("#")[0]))
    if not os.path.exists(os.path.join(ROOT, path)):
      missing.append(target)
  assert not missing, f"{page} links to missing files: {missing}"


@pytest.mark.parametrize("page", PAGES + ["bench/README.md"])
def test_pages_describe_the_software_not_its_history(page):
  """Issue numbers and their targets belong in commit messages and the
  tracker: a reader of the docs cannot look them up, and they say what was
  wanted, not what the code does."""
  with open(os.path.join(ROOT, page), encoding="utf-8") as f:
    text = f.read()
  found = re.findall(r".{0,30}\b(?:issues?\s+\d+|the issue's).{0,30}",
                     text, flags=re.IGNORECASE)
  assert not found, f"{page} mentions issues: {found}"

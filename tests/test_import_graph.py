"""The package's import graph: no cycle between tf_sdca's modules (function-
local imports included: a cycle hidden in a function is still two modules
that cannot be understood, tested or moved one without the other), and no
module reading another module's private (underscore) name.

The graph is read from the source with `ast`, without importing anything.
"""
import ast
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGE = "tf_sdca"

# Private names still read across modules, as "reader -> module.name". The
# list only shrinks: each entry is a helper that one module lends another
# and that belongs in a shared public module (STYLE.md 15); remove an entry
# when its read goes, never add one.
# Reads of another module's private names that remain (none: the option
# checks went to tf_sdca.options, the engine's pieces to tf_sdca.engine).
ALLOWED_PRIVATE_READS = frozenset()


def _modules():
  """{dotted module name: path} of every module of the package."""
  found = {}
  for directory, _, names in os.walk(os.path.join(ROOT, PACKAGE)):
    for name in names:
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        dotted = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
        if dotted.endswith(".__init__"):
          dotted = dotted[:-len(".__init__")]
        found[dotted] = path
  return found


def _graph():
  """({module: set of package modules it imports}, [(reader, 'module.name')
  private reads])."""
  modules = _modules()
  edges = {name: set() for name in modules}
  private = []
  for reader, path in modules.items():
    with open(path, encoding="utf-8") as f:
      tree = ast.parse(f.read(), path)
    package = reader if path.endswith("__init__.py") else \
        reader.rpartition(".")[0]
    bound = {}  # local name -> what of the package it names, dotted

    def add(target, alias, reader=reader, bound=bound):
      edges[reader].add(target)
      bound[alias] = target
      name = target.rpartition(".")[2]
      # A private module is its package's own: readable inside it.
      if name.startswith("_") and not name.startswith("__") and \
          not reader.startswith(target.rpartition(".")[0] + "."):
        private.append((reader, target))

    for node in ast.walk(tree):
      if isinstance(node, ast.Import):
        for alias in node.names:
          if alias.name in modules:
            if alias.asname:
              add(alias.name, alias.asname)
            else:
              edges[reader].add(alias.name)
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
          parts = package.split(".")
          parts = parts[:len(parts) - (node.level - 1)]
          base = ".".join(parts + ([base] if base else []))
        for alias in node.names:
          full = f"{base}.{alias.name}"
          if full in modules:
            add(full, alias.asname or alias.name)
          elif base in modules:
            edges[reader].add(base)
            bound[alias.asname or alias.name] = full  # a class, a function
            if alias.name.startswith("_") and base != reader:
              private.append((reader, full))
    for node in ast.walk(tree):
      if (isinstance(node, ast.Attribute) and
          isinstance(node.value, ast.Name) and node.value.id in bound and
          node.attr.startswith("_") and not node.attr.startswith("__") and
          not (bound[node.value.id] + ".").startswith(reader + ".")):
        private.append((reader, f"{bound[node.value.id]}.{node.attr}"))
  for name in edges:  # importing a package's own parents is no cycle
    edges[name] = {t for t in edges[name]
                   if t != name and not name.startswith(t + ".")}
  return edges, private


def _cycles(edges):
  """The strongly connected components of more than one module (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(node):
    index[node] = low[node] = len(index)
    stack.append(node)
    on_stack.add(node)
    for target in sorted(edges[node]):
      if target not in index:
        visit(target)
        low[node] = min(low[node], low[target])
      elif target in on_stack:
        low[node] = min(low[node], index[target])
    if low[node] == index[node]:
      component = []
      while True:
        member = stack.pop()
        on_stack.discard(member)
        component.append(member)
        if member == node:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for node in sorted(edges):
    if node not in index:
      visit(node)
  return found


def test_the_package_has_no_import_cycle():
  edges, _ = _graph()
  assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
  # The check above is only as good as the finder: a two-module loop and a
  # three-module loop beside an acyclic tail.
  assert _cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
  assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
      ["a", "b", "c"]]


def test_the_graph_sees_function_local_imports():
  edges, _ = _graph()
  # tf_sdca/cli.py imports tf_sdca.metrics inside a function only.
  assert "tf_sdca.metrics" in edges["tf_sdca.cli"]


def test_no_module_reads_another_modules_private_name():
  _, private = _graph()
  reads = {f"{reader} -> {name}" for reader, name in private}
  assert sorted(reads - ALLOWED_PRIVATE_READS) == []


@pytest.mark.parametrize("entry", sorted(ALLOWED_PRIVATE_READS))
def test_the_allow_list_holds_only_reads_that_remain(entry):
  _, private = _graph()
  assert entry in {f"{reader} -> {name}" for reader, name in private}, (
      f"{entry} no longer happens: remove it from ALLOWED_PRIVATE_READS")

"""The import graph of the jax_fa4 package is a DAG, layered from the public calls down.

The graph is read from the source with ``ast`` (nothing is imported): one node per module of
jax_fa4/*.py, one edge per ``import`` / ``from ... import`` of a jax_fa4 module, wherever it
stands (module level, inside a function, under ``if TYPE_CHECKING``). An import inside a
function does not break a cycle, it only hides it until the function runs, so it counts.
"""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import pytest

PACKAGE = "jax_fa4"
PACKAGE_DIR = Path(__file__).resolve().parent.parent / PACKAGE

# The modules from the top (the public calls) down: each may import only modules after it. The
# package (__init__, which imports the public names and registers the lowerings) and the demo
# script stand above them all.
LAYERS = [
    "jax_fa4.flax",
    "jax_fa4.ring",
    "jax_fa4.attention",
    "jax_fa4.lowering",
    "jax_fa4.sharding",
    "jax_fa4.ring_engine",
    "jax_fa4.primitives",
    "jax_fa4._ffi",
    "jax_fa4._compat",
    "jax_fa4.validation",
    "jax_fa4.reference",
]
TOP = {"jax_fa4", "jax_fa4.demo"}


def _module_name(path: Path, package: str) -> str:
    return package if path.stem == "__init__" else f"{package}.{path.stem}"


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str | None:
    """The absolute module an ``ImportFrom`` names (relative imports resolved), or None."""
    if node.level == 0:
        return node.module
    parts = current.split(".")
    base = parts if is_package else parts[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _bound_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its top level (assignments, defs, classes, imports)."""
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            out |= {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        elif isinstance(node, ast.Import | ast.ImportFrom):
            out |= {(a.asname or a.name).split(".")[0] for a in node.names}
    return out


def import_graph(package_dir: Path, package: str = PACKAGE) -> dict[str, set[str]]:
    """{module: the package's modules it imports}, for every ``*.py`` directly in package_dir.

    ``from pkg import x`` is an edge to ``pkg.x`` when x is a module of the package (a file
    ``x.py`` there), to ``pkg`` itself when x is a name its ``__init__`` binds, and no edge
    otherwise (a compiled extension: a leaf, not in the graph); ``import pkg.x`` and ``from
    pkg.x import y`` are edges to ``pkg.x``.
    """
    files = {_module_name(p, package): p for p in sorted(package_dir.glob("*.py"))}
    trees = {name: ast.parse(p.read_text(), filename=str(p)) for name, p in files.items()}
    init_names = _bound_names(trees[package]) if package in trees else set()
    graph: dict[str, set[str]] = {name: set() for name in files}

    def edge(src: str, dst: str) -> None:
        if dst in files and dst != src:
            graph[src].add(dst)

    for name, tree in trees.items():
        is_package = name == package
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.name == package or alias.name.startswith(package + "."):
                        edge(name, ".".join(alias.name.split(".")[:2]))
            elif isinstance(node, ast.ImportFrom):
                module = _resolve(node, name, is_package)
                if module is None or not (module == package or module.startswith(package + ".")):
                    continue
                if module == package:
                    for alias in node.names:
                        sub = f"{package}.{alias.name}"
                        if sub in files:
                            edge(name, sub)
                        elif alias.name in init_names or alias.name == "*":
                            edge(name, package)
                else:
                    edge(name, ".".join(module.split(".")[:2]))
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of `graph` as [a, b, ..., a], or None when it is a DAG."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def _format(graph: dict[str, set[str]]) -> str:
    return "\n".join(f"  {m} -> {', '.join(sorted(d)) or '-'}" for m, d in sorted(graph.items()))


def test_the_package_import_graph_has_no_cycle():
    graph = import_graph(PACKAGE_DIR)
    assert {"jax_fa4", "jax_fa4.attention", "jax_fa4.primitives", "jax_fa4.lowering"} <= set(
        graph
    ), sorted(graph)
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle {' -> '.join(cycle)}; the graph:\n{_format(graph)}"


def test_every_module_imports_only_the_layers_below_it():
    graph = import_graph(PACKAGE_DIR)
    unplaced = set(graph) - set(LAYERS) - TOP
    assert not unplaced, f"place {sorted(unplaced)} in LAYERS (or TOP):\n{_format(graph)}"
    for i, module in enumerate(LAYERS):
        up = graph.get(module, set()) - set(LAYERS[i + 1 :])
        assert not up, f"{module} imports {sorted(up)}, not below it:\n{_format(graph)}"
    assert "jax_fa4.lowering" in graph["jax_fa4"]  # the package registers the lowerings


def _write(pkg: Path, files: dict[str, str]) -> Path:
    pkg.mkdir()
    for name, text in files.items():
        (pkg / name).write_text(textwrap.dedent(text))
    return pkg


@pytest.mark.parametrize(
    "b_text",
    [
        "from jax_fa4 import a\n",
        "import jax_fa4.a\n",
        "from . import a\n",
        "from .a import thing\n",
        # Hidden inside a function: still a cycle.
        "def f():\n    from jax_fa4.a import thing\n    return thing\n",
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from jax_fa4 import a\n",
    ],
)
def test_a_cycle_is_found_however_it_is_spelled(tmp_path, b_text):
    pkg = _write(
        tmp_path / "jax_fa4",
        {
            "__init__.py": "from jax_fa4 import a\n",
            "a.py": "from jax_fa4 import b\n",
            "b.py": b_text,
        },
    )
    cycle = find_cycle(import_graph(pkg))
    assert cycle is not None and cycle[0] == cycle[-1], cycle
    assert {"jax_fa4.a", "jax_fa4.b"} <= set(cycle), cycle


def test_names_of_the_init_and_other_packages_are_not_cycles(tmp_path):
    pkg = _write(
        tmp_path / "jax_fa4",
        {
            "__init__.py": "from jax_fa4.a import f\nVERSION = 1\n",
            # A submodule of the package: an edge to a, not to __init__.
            "a.py": "import jax\nfrom jax_fa4 import b\n\ndef f():\n    return b\n",
            "b.py": "import numpy as np\nfrom jax_fa4 import _ext\n",  # _ext: compiled, no .py
        },
    )
    graph = import_graph(pkg)
    assert graph == {
        "jax_fa4": {"jax_fa4.a"},
        "jax_fa4.a": {"jax_fa4.b"},
        "jax_fa4.b": set(),
    }
    assert find_cycle(graph) is None
    # A name of __init__ imported by a module __init__ imports: a real cycle.
    (pkg / "b.py").write_text("from jax_fa4 import VERSION\n")
    assert find_cycle(import_graph(pkg)) == ["jax_fa4", "jax_fa4.a", "jax_fa4.b", "jax_fa4"]

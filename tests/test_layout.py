"""The shape of the code: no import cycle among the project's modules, no module over 600 lines.

The import graph is read from the source with `ast`: every import counts, at module level or inside a
function (a lazy import is still a dependency, and hiding a cycle inside a function is how cycles are
usually made). An import names the module it reaches: `from harness.backends.ssh import node` the
submodule `harness.backends.ssh.node`, `from harness.clean import Ledger` the module `harness.clean`.
Importing a submodule also runs its package's `__init__`; that implicit edge is not counted (a package
may re-export its submodules), so a submodule must not import its own package's `__init__`.
"""

from __future__ import annotations

import ast
import itertools
from pathlib import Path

import networkx as nx

from tests.support.env import REPO

PACKAGES = ("harness", "analysis")
MAX_LINES = 600


def module_names(root: Path, packages=PACKAGES) -> dict[str, Path]:
    """Dotted module name -> source file, for every .py file of the packages under root."""
    out = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules that module `name` (at `path`) imports, anywhere in its source."""
    is_package = path.name == "__init__.py"
    found = set()

    def longest_known(dotted: str) -> str | None:
        parts = dotted.split(".")
        for k in range(len(parts), 0, -1):
            if ".".join(parts[:k]) in modules:
                return ".".join(parts[:k])
        return None

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [longest_known(a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - (node.level - 1)]
                base = ".".join(package + ([node.module] if node.module else []))
            else:
                base = node.module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else longest_known(base)
                       for a in node.names]
        else:
            continue
        found |= {t for t in targets if t is not None}
    return found


def import_graph(root: Path, packages=PACKAGES) -> nx.DiGraph:
    modules = module_names(root, packages)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, target) for target in imported_modules(name, path, modules))
    return graph


def cycles(graph: nx.DiGraph, limit: int = 10) -> list[list[str]]:
    return list(itertools.islice(nx.simple_cycles(graph), limit))


def test_the_import_graph_sees_lazy_relative_and_submodule_imports(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found, and so is one
    through a relative import of a submodule; a package re-exporting its submodules is no cycle."""
    def write(rel: str, text: str) -> None:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)

    write("pkg/__init__.py", "from pkg.sub.a import A\n")
    write("pkg/sub/__init__.py", "from .a import A\n")
    write("pkg/sub/a.py", "import os\nfrom pkg.b import B\nA = 1\n")
    write("pkg/b.py", "B = 2\n\ndef f():\n    from pkg.sub import a\n    return a\n")
    write("pkg/c.py", "from . import b\nimport pkg.sub.a as x\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert set(graph.edges) == {("pkg", "pkg.sub.a"), ("pkg.sub", "pkg.sub.a"), ("pkg.sub.a", "pkg.b"),
                                ("pkg.b", "pkg.sub.a"), ("pkg.c", "pkg.b"), ("pkg.c", "pkg.sub.a")}
    assert [sorted(c) for c in cycles(graph)] == [["pkg.b", "pkg.sub.a"]]


def test_no_import_cycle_among_the_projects_modules():
    graph = import_graph(REPO)
    assert graph.number_of_edges() > 50   # the source was read
    found = cycles(graph)
    assert not found, "import cycles:\n" + "\n".join(" -> ".join([*c, c[0]]) for c in found)


def test_no_module_is_over_600_lines():
    sizes = {name: len(path.read_text().splitlines()) for name, path in module_names(REPO).items()}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_what_runs_on_testbed_nodes_needs_only_the_standard_library_and_pyroute2():
    """The SSH backend ships this package and pyroute2 to the monitored node, whose python3 has
    nothing else: the collector and the agent (run.db, pause, connections) must import there. (The
    command server, harness/backends/ssh/nodeserver.py, is sent as a standalone script.)"""
    import subprocess
    import sys

    code = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        top = name.split('.')[0]\n"
        "        if top in {'pydantic', 'yaml', 'numpy', 'pandas', 'matplotlib', 'networkx', 'rich', 'paramiko'}:\n"
        "            raise ImportError(f'{name} is not on a testbed node')\n"
        "sys.meta_path.insert(0, Block())\n"
        "import harness.agent, harness.store, harness.collector.main, harness.interceptor.pause\n"
        "harness.agent._count  # the agent's run.db calls resolve their imports lazily: call one\n"
        "import tempfile, os\n"
        "d = tempfile.mkdtemp(); db = os.path.join(d, 'run.db')\n"
        "harness.agent._initdb(db); assert harness.agent._count(db) == 0\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]

"""The shape of the code: the lab (harness/) and the analysis (analysis/) never import each other and
meet only in the run directory's package (rundir/, which imports neither) and the composition layer
on top (nestlab/, which nothing imports); SQL only under rundir/; the run directory's paths built
only by rundir/ (rundir.layout.RunDir); no import cycle among the project's modules; no module over
600 lines (nor C or Java file of the lab).

The import graph is read from the source with `ast`: every import counts, at module level or inside a
function (a lazy import is still a dependency, and hiding a cycle inside a function is how cycles are
usually made). An import names the module it reaches: `from harness.backends.ssh import node` the
submodule `harness.backends.ssh.node`, `from harness.clean import Ledger` the module `harness.clean`.
Importing a submodule also runs its package's `__init__`; that implicit edge is not counted (a package
may re-export its submodules), so a submodule must not import its own package's `__init__`.
"""

from __future__ import annotations

import ast
import functools
import itertools
import re
from pathlib import Path

import networkx as nx

from tests.support.env import REPO

PACKAGES = ("rundir", "harness", "analysis", "nestlab")
# package -> the project packages it must not import (strings for importlib included)
FORBIDDEN = {"harness": ("analysis", "nestlab"), "analysis": ("harness", "nestlab"),
             "rundir": ("harness", "analysis", "nestlab")}
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


def _write(root: Path, rel: str, text: str) -> None:
    (root / rel).parent.mkdir(parents=True, exist_ok=True)
    (root / rel).write_text(text)


def test_the_import_graph_sees_lazy_relative_and_submodule_imports(tmp_path):
    """The checker itself: a cycle closed by an import inside a function is found, and so is one
    through a relative import of a submodule; a package re-exporting its submodules is no cycle."""
    write = functools.partial(_write, tmp_path)
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


SQL = re.compile(r"\b(SELECT|INSERT|UPDATE|DELETE|CREATE TABLE|PRAGMA|ATTACH)\b[^\n]*\b(FROM|INTO|SET|TABLE|"
                 r"wal_checkpoint|table_info|journal_mode|DATABASE)\b|\bsqlite3\.connect\b|\.execute(many)?\(\s*f?[\"']")


def wall_crossings(root: Path, packages=PACKAGES) -> list[str]:
    """Imports (and module names in strings, for importlib or `python -m`) across FORBIDDEN's walls."""
    graph = import_graph(root, packages)
    found = [f"{a} -> {b}" for a, b in sorted(graph.edges) if b.split(".")[0] in FORBIDDEN.get(a.split(".")[0], ())]
    for name, path in module_names(root, packages).items():
        for other in FORBIDDEN.get(name.split(".")[0], ()):
            if re.search(rf"[\"']{other}\.\w", path.read_text()):
                found.append(f"{name} -> '{other}...' (a module name in a string)")
    return found


def sql_outside_rundir(root: Path, packages=PACKAGES) -> list[str]:
    """Lines outside rundir/ with an SQL statement or a sqlite3 call (a connection may be passed
    around, and rundir's functions called on it)."""
    found = []
    for name, path in module_names(root, packages).items():
        if name.split(".")[0] != "rundir":
            found += [f"{path.relative_to(root)}:{k}: {line.strip()}"
                      for k, line in enumerate(path.read_text().splitlines(), 1) if SQL.search(line)]
    return found


def test_the_lab_and_the_analysis_meet_only_in_rundir_and_nestlab():
    found = wall_crossings(REPO)
    assert not found, "imports across the architecture's walls:\n" + "\n".join(found)


def test_sql_is_written_only_under_rundir():
    found = sql_outside_rundir(REPO)
    assert not found, "SQL outside rundir/:\n" + "\n".join(found)


def test_the_layout_checks_can_fail(tmp_path):
    """The two checks above see what they look for, and leave alone what they allow."""
    write = functools.partial(_write, tmp_path)
    write("analysis/x.py", "def f():\n    from harness import y\n")
    write("analysis/z.py", "import importlib\nimportlib.import_module('nestlab.cli')\n")
    write("harness/y.py", "from rundir import db\ndb.conn.execute('SELECT count(*) FROM snapshots')\n")
    write("harness/w.py", "def g(conn):\n    return db.snapshot_count(conn)  # SELECT nothing here\n")
    write("rundir/db.py", "import sqlite3\nsqlite3.connect('x').execute('SELECT 1 FROM t')\n")
    write("nestlab/cli.py", "from analysis import x\nfrom harness import y\n")
    packages = ("rundir", "harness", "analysis", "nestlab")
    assert wall_crossings(tmp_path, packages) == ["analysis.x -> harness.y",
                                                  "analysis.z -> 'nestlab...' (a module name in a string)"]
    assert sql_outside_rundir(tmp_path, packages) == [
        "harness/y.py:2: db.conn.execute('SELECT count(*) FROM snapshots')"]


def test_no_module_is_over_600_lines():
    sizes = {name: len(path.read_text().splitlines()) for name, path in module_names(REPO).items()}
    long = {name: n for name, n in sizes.items() if n > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


# The same rule for the lab's other languages: the interceptor (C) and the streams job (Java).
OTHER_SOURCES = ("harness/**/*.c", "harness/**/*.h", "harness/streams/job/**/*.java")


def long_sources(root: Path, patterns=OTHER_SOURCES) -> dict[str, int]:
    """Source files matching the patterns (relative to root) with more than MAX_LINES lines."""
    sizes = {str(path.relative_to(root)): len(path.read_text().splitlines())
             for pattern in patterns for path in root.glob(pattern)}
    return {name: n for name, n in sorted(sizes.items()) if n > MAX_LINES}


def test_no_c_or_java_file_is_over_600_lines():
    assert list(REPO.glob("harness/**/*.c")) and list(REPO.glob("harness/streams/job/**/*.java"))  # files seen
    long = long_sources(REPO)
    assert not long, f"C and Java files over {MAX_LINES} lines: {long}"


def test_the_size_rule_sees_c_headers_and_java(tmp_path):
    write = functools.partial(_write, tmp_path)
    write("harness/interceptor/big.c", "int x;\n" * (MAX_LINES + 1))
    write("harness/interceptor/small.c", "int y;\n" * MAX_LINES)
    write("harness/interceptor/big.h", "/* */\n" * (MAX_LINES + 1))
    write("harness/streams/job/src/main/java/Big.java", "//\n" * (MAX_LINES + 1))
    write("tests/interceptor/probe.c", "int z;\n" * (MAX_LINES + 1))   # a test's helper: not the lab's
    assert long_sources(tmp_path) == {"harness/interceptor/big.c": MAX_LINES + 1,
                                      "harness/interceptor/big.h": MAX_LINES + 1,
                                      "harness/streams/job/src/main/java/Big.java": MAX_LINES + 1}


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
        "import harness.agent, rundir.db, harness.collector.main, harness.interceptor.pause\n"
        "harness.agent._count  # the agent's run.db calls resolve their imports lazily: call one\n"
        "import tempfile, os\n"
        "d = tempfile.mkdtemp(); db = os.path.join(d, 'run.db')\n"
        "harness.agent._initdb(db); assert harness.agent._count(db) == 0\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert r.returncode == 0, r.stderr[-2000:]


def run_paths_outside_rundir(root: Path, packages=(*PACKAGES, "bench")) -> list[str]:
    """`file:line: 'name'` for each string constant that is one of the run directory's names
    (rundir.layout.NAMES: run.db, manifest.json, logs/, analysis/, columnar/) in a module outside
    rundir/: those paths come from rundir.layout.RunDir. A dict key or a subscript (`x["logs"]`) is
    a field's name, not a path, and is left alone."""
    from rundir.layout import NAMES

    found = []
    for path in sorted(p for package in packages for p in (root / package).rglob("*.py")):
        if path.relative_to(root).parts[0] == "rundir":
            continue
        tree = ast.parse(path.read_text(), str(path))
        fields = {id(k) for n in ast.walk(tree) if isinstance(n, ast.Dict) for k in n.keys if k is not None}
        fields |= {id(n.slice) for n in ast.walk(tree) if isinstance(n, ast.Subscript)}
        found += [f"{path.relative_to(root)}:{n.lineno}: {n.value!r}" for n in ast.walk(tree)
                  if isinstance(n, ast.Constant) and n.value in NAMES and id(n) not in fields]
    return sorted(found, key=lambda s: (s.split(":")[0], int(s.split(":")[1])))


def test_only_rundir_spells_the_run_directorys_names():
    found = run_paths_outside_rundir(REPO)
    assert not found, ("run directory names outside rundir/ (take the path from rundir.layout.RunDir):\n"
                       + "\n".join(found))


def test_the_run_path_check_can_fail(tmp_path):
    write = functools.partial(_write, tmp_path)
    write("harness/a.py", 'from pathlib import Path\n\n\ndef f(run):\n    return Path(run) / "run.db"\n')
    write("nestlab/b.py", 'OUT = ("x", "analysis")\nsalvage = {"logs": 1}\nsalvage["logs"]\n')
    write("bench/c.py", 'open("manifest.json")\nprint("logs are kept")\n')
    write("rundir/layout.py", 'DB = "run.db"\n')
    assert run_paths_outside_rundir(tmp_path) == ["bench/c.py:1: 'manifest.json'", "harness/a.py:5: 'run.db'",
                                                  "nestlab/b.py:1: 'analysis'"]

"""No import runs back up in harness/: the lab's units (its top modules and subpackages) stand in
layers, and a module imports only from its own layer or those below it (DESIGN.md's layering inside
the lab). Every import counts, lazy or under TYPE_CHECKING (tests.test_layout.import_graph). Within
a layer the units' graph has no circle either. A unit the list does not place fails the test: a new
one is placed deliberately."""

from __future__ import annotations

import functools
from pathlib import Path

import networkx as nx

from tests.support.env import REPO
from tests.test_layout import _write, import_graph

# bottom first
LAYERS = (
    # parts that import nothing of the lab
    ("harness", "harness.units", "harness.window", "harness.yamlload", "harness.outline", "harness.observers",
     "harness.ledger", "harness.interceptor"),
    # the machine: the collector and agent, the lock, topologies and routes (a fat-tree's too, its probes
    # and its mesh's pairs), export
    ("harness.agent", "harness.collector", "harness.lock", "harness.topology", "harness.routing", "harness.export",
     "harness.fabric", "harness.fabric_probe", "harness.mesh"),
    # where a run's nodes live
    ("harness.backends",),
    # what acts on the nodes: fault kinds, the service's tiers
    ("harness.faults", "harness.service"),
    # the network spec language; cleanup of what a run left
    ("harness.spec", "harness.clean"),
    # the network lab's workloads
    ("harness.workloads",),
    # the labs
    ("harness.lab", "harness.streams"),
    # the study kinds (each names its spec, lab and fault kinds)
    ("harness.studies",),
    # the run loop and suites
    ("harness.runner", "harness.suite", "harness.suiterun"),
)


def unit(module: str) -> str:
    return ".".join(module.split(".")[:2])


def upward_imports(root: Path, layers=LAYERS) -> list[str]:
    """`a -> b` for every import of a module of a higher layer, and every unit no layer places."""
    rank = {u: k for k, names in enumerate(layers) for u in names}
    graph = import_graph(root, ("harness",))
    found = sorted({f"unplaced unit {unit(m)}" for m in graph.nodes if unit(m) not in rank})
    units = nx.DiGraph()
    for a, b in sorted(graph.edges):
        ua, ub = unit(a), unit(b)
        if ua in rank and ub in rank and rank[ub] > rank[ua]:
            found.append(f"{a} -> {b}")
        if ua != ub:
            units.add_edge(ua, ub)
    for c in nx.simple_cycles(units):
        k = c.index(min(c))   # each circle from its first unit by name: the same text every time
        c = c[k:] + c[:k]
        found.append(" -> ".join([*c, c[0]]))
    return found


def test_no_import_runs_back_up_in_the_lab():
    found = upward_imports(REPO)
    assert not found, "imports running back up in harness/:\n" + "\n".join(found)


def test_the_layer_check_can_fail(tmp_path):
    write = functools.partial(_write, tmp_path)
    write("harness/__init__.py", "")
    write("harness/units.py", "")
    write("harness/backends/__init__.py", "def f():\n    from harness.faults import KINDS\n")
    write("harness/faults/__init__.py", "from harness.backends import x\nfrom harness import units\n")
    write("harness/spec.py", "from harness.faults import KINDS\n")
    write("harness/newthing.py", "")
    assert upward_imports(tmp_path) == [
        "unplaced unit harness.newthing",
        "harness.backends -> harness.faults",
        "harness.backends -> harness.faults -> harness.backends"]

"""The interceptor's C files form no circle (issue 41 item 4): a counting core plus parts (pause,
deferral, tracing), each owning its state, every file using only files below it.

The graph is computed from the sources as built: each .c compiled alone (the Makefile's flags), an
edge A -> B when A's object uses a symbol B's object defines (`nm`), or when A.c or A.h includes B.h.
A file and its header are one node. Before the split of issue 41 the 11 files call, defer, hints,
init, pause, seqlock, shm, slots, trace, waits and usermem formed one circle, and internal.h declared
26 `extern` globals of seven files."""

from __future__ import annotations

import collections
import graphlib
import re
import shutil
import subprocess
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "harness" / "interceptor"
CFLAGS = ["-O2", "-std=gnu11", "-fPIC", "-pthread", "-fvisibility=hidden", "-fexceptions", "-fno-strict-aliasing",
          "-U_FORTIFY_SOURCE"]
CORE = {"reals", "env", "text", "usermem", "seqlock", "shm", "hints", "late", "slots"}
PARTS = {"pause", "defer", "trace"}

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("nm") is None,
                                reason="needs gcc and nm")


def symbols(tmp: Path) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Each global symbol -> the file defining it; each file -> the symbols it uses."""
    defs: dict[str, str] = {}
    uses: dict[str, set[str]] = collections.defaultdict(set)
    for c in sorted(SRC.glob("*.c")):
        obj = tmp / f"{c.stem}.o"
        subprocess.run(["gcc", *CFLAGS, "-c", str(c), "-o", str(obj)], check=True)
        for line in subprocess.run(["nm", str(obj)], capture_output=True, text=True, check=True).stdout.splitlines():
            f = line.split()
            if len(f) == 3 and f[1] in "TDBRVWCGS":
                defs[f[2]] = c.stem
            elif len(f) == 2 and f[0] == "U":
                uses[c.stem].add(f[1])
    return defs, uses


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> tuple[dict[str, str], dict[str, set[str]]]:
    return symbols(tmp_path_factory.mktemp("objs"))


def graph(built) -> dict[str, set[str]]:
    defs, uses = built
    edges: dict[str, set[str]] = collections.defaultdict(set)
    for node, used in uses.items():
        edges[node] |= {defs[u] for u in used if u in defs and defs[u] != node}
    for f in list(SRC.glob("*.c")) + list(SRC.glob("*.h")):
        for inc in re.findall(r'#include "([^"]+)\.h"', f.read_text()):
            if inc != f.stem:
                edges[f.stem].add(inc)
    return edges


def test_no_circle_between_the_c_files(built):
    edges = graph(built)
    try:
        order = list(graphlib.TopologicalSorter(edges).static_order())
    except graphlib.CycleError as e:
        pytest.fail(f"a circle between the interceptor's files: {' -> '.join(e.args[1])}")
    assert {p.stem for p in SRC.glob("*.c")} <= set(order)


def test_the_core_uses_no_part_and_the_parts_only_the_core(built):
    edges = graph(built)
    for core in CORE:
        assert not edges[core] & PARTS, f"core file {core} uses a part: {sorted(edges[core] & PARTS)}"
    for part in PARTS:
        # the deferral traces the sends it writes (defer -> trace); no part uses the wrappers or init
        allowed = CORE | {"internal", "nestintercept"} | ({"trace"} if part == "defer" else set())
        assert edges[part] <= allowed, f"part {part} uses {sorted(edges[part] - allowed)}"


def test_each_file_owns_its_state(built):
    """No shared block of globals: a header declares state only of its own file (extern ... in x.h is
    defined by x.c), and the headers every file includes declare none."""
    defs, _ = built
    for shared in ("internal.h", "nestintercept.h"):
        assert not re.search(r"^\s*extern\s", (SRC / shared).read_text(), re.M), f"{shared} declares state"
    for h in SRC.glob("*.h"):
        text = h.read_text()
        for name in re.findall(r"^\s*extern\s+(?:TLS\s+)?(?:volatile\s+)?[\w ]+?\**\s*\b(\w+)\s*;", text, re.M):
            assert defs.get(name) == h.stem, f"{h.name} declares {name}, defined in {defs.get(name)}.c"

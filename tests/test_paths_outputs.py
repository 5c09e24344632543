"""Every black-box algorithm's output on a fixed span export, against the outputs recorded in
tests/expected/paths-outputs.json (issue 43: the speed-ups must change no algorithm's output).

The export is made here from a seeded generator: 400 requests of a small microservice application,
arrivals close enough that requests overlap at every service, with a fan-out (the frontend calls
two services at once), a fan-in (both call `store`, twice per request), in-process spans and
client spans. A digest per algorithm covers its parent links, its patterns (text, count, node
delays, edge latencies, to 9 significant digits: last-bit differences of another CPU's libm are not
a change), its node-delay table and its warnings.

After a deliberate change of an algorithm's output: `python tests/test_paths_outputs.py --record`
rewrites the expected file; say why in the commit.
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths.algorithms import ALGORITHMS, algorithm  # noqa: E402
from analysis.paths.spans import read_jaeger  # noqa: E402

EXPECTED = REPO / "tests" / "expected" / "paths-outputs.json"


def export(n: int = 400, seed: int = 43) -> dict:
    """A Jaeger export: frontend -> (cart, catalog in parallel); each -> store twice; catalog's
    handling has an in-process span; times in whole µs."""
    rng = np.random.default_rng(seed)
    procs = {f"p{i}": {"serviceName": s} for i, s in enumerate(["frontend", "cart", "catalog", "store"])}
    traces = []
    t = 1_700_000_000_000_000
    for r in range(n):
        t += int(rng.exponential(900))
        spans = []

        def add(sid, proc, start, dur, parent=None, kind="server", op="op", r=r, spans=spans):
            refs = [{"refType": "CHILD_OF", "traceID": f"t{r}", "spanID": parent}] if parent else []
            spans.append({"traceID": f"t{r}", "spanID": f"{r}-{sid}", "operationName": op,
                          "references": [dict(x, spanID=f"{r}-{x['spanID']}") for x in refs],
                          "startTime": int(start), "duration": int(dur), "processID": proc,
                          "tags": [{"key": "span.kind", "value": kind}]})

        def store_calls(prefix, proc, parent, start):
            at = start + int(rng.integers(50, 400))
            for i in range(2):
                d = int(rng.gamma(4, 150))
                add(f"{prefix}c{i}", proc, at, d + 60, parent, "client")
                add(f"{prefix}s{i}", "p3", at + 30, d, f"{prefix}c{i}")
                at += d + 60 + int(rng.integers(20, 200))
            return at

        add("root", "p0", t, 1, op="GET /")          # duration set below
        a0 = t + int(rng.integers(100, 300))
        end_cart = store_calls("ca", "p1", "cartS", a0 + 40)
        add("cartC", "p0", a0, end_cart + 80 - a0, "root", "client")
        add("cartS", "p1", a0 + 40, end_cart - a0, "cartC")
        b0 = a0 + int(rng.integers(5, 60))
        work = int(rng.integers(100, 500))
        add("catW", "p2", b0 + 50, work, "catS", "internal")
        end_cat = store_calls("cb", "p2", "catS", b0 + 50 + work)
        add("catC", "p0", b0, end_cat + 80 - b0, "root", "client")
        add("catS", "p2", b0 + 40, end_cat - b0, "catC")
        spans[0]["duration"] = max(end_cart, end_cat) + 200 - t
        traces.append({"traceID": f"t{r}", "spans": spans, "processes": procs})
    return {"data": traces}


def digests(folder: Path) -> dict[str, str]:
    trace = read_jaeger(folder)
    out = {}
    for name in ALGORITHMS:
        r = algorithm(name)[0](trace.messages)
        doc = {"parent": None if r.parent is None else np.asarray(r.parent).tolist(),
               "patterns": [(p.pattern, f"{p.count:.9g}", {k: f"{v:.9g}" for k, v in p.node_delays.items()},
                             {k: f"{v:.9g}" for k, v in p.edge_latencies.items()}) for p in r.patterns],
               "node_delays": r.node_delays.to_csv(float_format="%.9g"), "warnings": list(r.warnings),
               "total": None if r.total is None else f"{r.total:.9g}"}
        out[name] = hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    return out


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("outputs")
    (d / "export.json").write_text(json.dumps(export()))
    return d


def test_every_algorithm_gives_the_recorded_output(folder):
    want = json.loads(EXPECTED.read_text())
    got = digests(folder)
    assert set(got) == set(want), "an algorithm added or removed: record the outputs again"
    changed = sorted(n for n in got if got[n] != want[n])
    assert not changed, f"outputs changed: {changed}"


if __name__ == "__main__" and sys.argv[1:] == ["--record"]:
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        (Path(d) / "export.json").write_text(json.dumps(export()))
        EXPECTED.write_text(json.dumps(digests(Path(d)), indent=1, sort_keys=True) + "\n")
    print(f"wrote {EXPECTED}")

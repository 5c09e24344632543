"""End to end on the ECMP topology: the faults of issue 21 in one real run. The routers' route
lookups that name a path_blackhole's targets agree with where the packets really go (its targets
stall, the other connections do not), a server_pause stalls exactly the connections to that
server, loss rows are recorded with their share, probes are recorded and answered or not as the
faults say, and nothing is left behind."""

from __future__ import annotations

import json
import sqlite3
import subprocess

import pytest

from tests.support.env import REPO, VENV_BIN, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: e2e_beyond
topology: {REPO / "topologies" / "ecmp.yaml"}
duration: 30s
seed: 4
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 500MB, instances: 2}}
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 4}}
faults:
  - {{kind: path_blackhole, at: x1, path: 0, schedule: {{at: [5s], duration: 3s}}}}
  - {{kind: server_pause, target: {{workload: 0}}, schedule: {{at: [12s], duration: 3s}}}}
  - {{kind: loss, at: x1, rate: 20%, target: {{workload: 1}}, schedule: {{at: [19s], duration: 2s}}}}
  - {{kind: ip_drop, at: x1, schedule: {{at: [24s], duration: 2s}}}}
"""


def _progress(db: sqlite3.Connection, t0: float, t1: float) -> dict[int, int]:
    """Per TCP module alive at t0: data segments moved (both directions) from t0 to t1."""
    (a,) = db.execute("SELECT max(seq) FROM snapshots WHERE mono <= ?", (t0,)).fetchone()
    (b,) = db.execute("SELECT max(seq) FROM snapshots WHERE mono <= ?", (t1,)).fetchone()
    out = {}
    for (mid,) in db.execute("SELECT id FROM modules WHERE kind = 'tcp' AND born < ? AND (died IS NULL OR died > ?)",
                             (t0, t1)):
        moved = 0
        for d in ("in", "out"):
            at = [db.execute("SELECT total_msgs FROM counters WHERE module = ? AND dir = ? AND seq <= ? "
                             "ORDER BY seq DESC LIMIT 1", (mid, d, s)).fetchone() for s in (a, b)]
            moved += (at[1][0] or 0) - (at[0][0] or 0) if at[0] and at[1] else 0
        out[mid] = moved
    return out


def test_ecmp_faults_hit_what_they_say(tmp_path, no_leftovers):
    results = tmp_path / "results"
    r = subprocess.run([VENV_BIN / "run-experiment", str(write(tmp_path, "beyond.yaml", SPEC)), "--results",
                        str(results)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    (run,) = results.glob("e2e_beyond/*")
    manifest = json.loads((run / "manifest.json").read_text())
    routing = manifest["routing"]
    assert set(routing) == {"x1", "x2"}
    assert all(sorted(r["interfaces_used"]) == r["interfaces_used"] and len(r["interfaces_used"]) == 2
               for x in routing.values() for r in x["multipath_routes"])
    db = sqlite3.connect(run / "run.db")
    faults = db.execute("SELECT kind, target_module, start, end, target FROM faults ORDER BY id").fetchall()
    by_kind: dict[str, list] = {}
    for kind, module, start, end, target in faults:
        by_kind.setdefault(kind, []).append((module, start, end, json.loads(target)))
    assert set(by_kind) == {"path_blackhole", "server_pause", "loss", "ip_drop"}

    # path_blackhole: its targets make no progress during the window (a retransmission or two at
    # most), every other connection alive through the window does.
    holes = by_kind["path_blackhole"]
    start, end = holes[0][1], holes[0][2]
    targets = {m for m, *_ in holes if m is not None}
    moved = _progress(db, start + 0.3, end)
    assert moved, "no connection lived through the blackhole"
    for mid, n in moved.items():
        if mid in targets:
            assert n <= 5, (mid, n, "a path_blackhole target kept moving data")
        else:
            assert n > 100, (mid, n, "a connection on the other path stalled")
    assert all(t["interface"] == "x1-eth3" and t["path"] == 0 for *_, t in holes)

    # server_pause: the connections to the web server (workload 0's two wgets) stall, the uploads go on.
    pauses = by_kind["server_pause"]
    start, end = pauses[0][1], pauses[0][2]
    paused = {m for m, *_ in pauses}
    assert len(paused) == 2 and all(t["dport"] == 80 for *_, t in pauses)
    moved = _progress(db, start + 0.3, end)
    assert all(moved[m] <= 2 for m in paused if m in moved), moved
    assert any(n > 100 for m, n in moved.items() if m not in paused)

    (loss,) = by_kind["loss"]
    assert loss[3]["description"].startswith("20% of tcp ") and loss[0] is not None
    rules = [r for (r,) in db.execute("SELECT rule FROM faults WHERE kind = 'loss'")]
    assert "--mode random --probability 0.200000" in rules[0]

    # probes: inside the ip_drop window none is answered; inside the blackhole every burst is
    # (a fresh source port may take either path: a burst of two reaches the remote over the live one
    # unless both probes hash onto the dead path)
    (ip,) = by_kind["ip_drop"]
    outcomes = db.execute("SELECT outcome FROM probes WHERE sent >= ? AND sent < ?", (ip[1], ip[2])).fetchall()
    assert outcomes and {o for (o,) in outcomes} == {"timeout"}
    assert db.execute("SELECT count(*) FROM probes").fetchone()[0] > 0
    db.close()
    assert manifest["spec"]["probe"]["count"] == 2

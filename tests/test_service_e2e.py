"""A real service run on Mininet (issue 33): the tiers start in their hosts, requests flow through
nginx to both app servers, memcached and MariaDB, the requests table holds each request's hops with
its true path, a 200 ms delay at app2 shows in app2's hops inside its window only, the service health
has every tier, and nothing is left behind."""

from __future__ import annotations

import json
import sqlite3
import statistics

import pytest

from analysis.load import load_run_data
from analysis.service_health import service_health, service_markdown
from harness.runner import run_experiment
from tests.support.env import REPO, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: service-e2e
topology: {REPO / "topologies" / "service.yaml"}
duration: 20s
seed: 5
monitor: web
workloads:
  - {{kind: service, rate: 40/s, concurrency: 16}}
faults:
  - {{kind: delay, host: app2, by: 200ms, schedule: {{at: [8s], duration: 6s}}}}
"""


def test_a_service_run_records_every_requests_path(tmp_path, no_leftovers):
    code, runs = run_experiment(write(tmp_path, "service.yaml", SPEC), tmp_path / "results")
    assert code == 0
    run = runs[0]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["format_version"] >= 7
    load = manifest["service"]["0"]
    assert load["offered_rate"] == 40 and load["errors"] == 0
    assert 30 <= load["achieved_rate"] <= 50      # Poisson at 40/s over ~19 s
    db = sqlite3.connect(run / "run.db")
    hops = db.execute('SELECT request, type, tier, host, pid, start, "end", outcome FROM requests').fetchall()
    by_request: dict[str, list[tuple]] = {}
    for h in hops:
        by_request.setdefault(h[0], []).append(h)
    assert len(by_request) == load["done"] > 500
    types = {}
    for rid, rows in by_request.items():
        tiers = sorted(r[2] for r in rows)
        kind = rows[0][1]
        types[kind] = types.get(kind, 0) + 1
        # Every path: client -> web -> one app -> cache calls, and the database on a miss or a write.
        expected = {"hit": ["app", "cache", "cache", "client", "web"],
                    "miss": ["app", "cache", "cache", "cache", "client", "db", "web"],
                    "write": ["app", "cache", "cache", "client", "db", "web"]}[kind]
        assert tiers == expected, (rid, rows)
        assert all(r[7] == "ok" and r[5] <= r[6] and r[4] for r in rows)
        client = next(r for r in rows if r[2] == "client")
        app = next(r for r in rows if r[2] == "app")
        # Nested in time: the app's hop inside the client's (nginx stamps to the millisecond).
        assert client[5] <= app[5] and app[6] <= client[6]
    n = len(by_request)
    assert 0.7 * n < types["hit"] < 0.9 * n and types["miss"] > 0.08 * n and types.get("write", 0) > 0
    apps = {r[3] for r in hops if r[2] == "app"}
    assert apps == {"app1", "app2"}                 # nginx balanced over both
    assert {r[3] for r in hops if r[2] in ("cache", "db")} == {"cache", "db"}
    # The delay: app2's hops up by 200 ms (+-10%) inside the window, not outside it; app1's unchanged.
    (a, b), = db.execute('SELECT start, "end" FROM faults WHERE kind = \'delay\'').fetchall()
    assert b - a == pytest.approx(6, abs=0.2)

    def app_ms(host, inside):
        rows = [r for r in hops if r[2] == "app" and r[3] == host]
        rows = [r for r in rows if (a <= r[5] and r[6] <= b) == inside and (inside or r[6] < a or r[5] > b)]
        return statistics.median((r[6] - r[5]) * 1000 for r in rows)

    assert app_ms("app2", True) == pytest.approx(200, rel=0.1) and app_ms("app2", False) < 20
    assert app_ms("app1", True) < 20 and app_ms("app1", False) < 20
    health = service_health(run, load_run_data(run))
    assert list(health.tiers["tier"]) == ["client", "web", "app", "cache", "db"]
    assert (health.tiers["errors"] == 0).all() and not health.warnings
    assert "| db |" in service_markdown(health)


TRACED = f"""\
name: service-trace-e2e
topology: {REPO / "topologies" / "service.yaml"}
duration: 20s
seed: 6
monitor: web
trace: messages
workloads:
  - {{kind: service, rate: 40/s, concurrency: 16}}
faults:
  - {{kind: delay, host: app2, by: 200ms, schedule: {{at: [8s], duration: 6s}}}}
"""


def test_a_traced_service_run_records_every_tiers_messages(tmp_path, no_leftovers, capsys):
    """`trace: messages` (issue 33 item 3): every tier host's and the load generator's sends and
    receives in the messages table, none dropped, each connection's bytes the same at both ends, and
    the black-box nesting analysis runs on the run."""
    from analysis.paths.reconcile import RECV_CALLS, SEND_CALLS
    from nestlab.cli import nestlab_main

    code, runs = run_experiment(write(tmp_path, "traced.yaml", TRACED), tmp_path / "results")
    assert code == 0
    run = runs[0]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    tiers = {"client", "web", "app1", "app2", "cache", "db"}
    trace = manifest["trace"]
    assert trace["dropped"] == 0 and trace["lost"] == 0
    assert set(trace["hosts"]) >= tiers and all(trace["hosts"][h] > 0 for h in tiers)
    assert not [w for w in manifest.get("warnings", []) if w.startswith("message trace")]
    db = sqlite3.connect(run / "run.db")
    rows = db.execute("SELECT mono, host, pid, tid, fd, call, bytes, local, remote FROM messages").fetchall()
    assert len(rows) == trace["events"] > 1000
    assert db.execute("SELECT coalesce(sum(dropped), 0), coalesce(sum(lost), 0) FROM traced").fetchone() == (0, 0)
    calls: dict[str, set[str]] = {}
    for r in rows:
        calls.setdefault(r[1], set()).add(r[5])
    assert set(calls) >= tiers
    for host in tiers:   # every tier both receives and sends (docs/service.md: the calls strace found)
        assert calls[host] & SEND_CALLS and calls[host] & RECV_CALLS, (host, calls[host])
    assert "writev" in calls["web"] and {"read", "sendmsg"} <= calls["cache"]
    # times on the run's clock, inside the run
    assert manifest["start_mono"] <= min(r[0] for r in rows) and max(r[0] for r in rows) <= manifest["end_mono"]
    # TCP endpoints only between the topology's addresses (no loopback, none unknown)
    addresses = {i["address"] for intfs in manifest["topology"]["addresses"].values() for i in intfs}
    tcp = [r for r in rows if not r[7].startswith("unix/")]
    assert tcp and all(r[7].rsplit(":", 1)[0] in addresses and r[8].rsplit(":", 1)[0] in addresses for r in tcp)
    # each connection traced at both ends: what one end sent, the other received
    owner = {r[7]: r[1] for r in tcp}
    sent: dict[tuple[str, str], int] = {}
    received: dict[tuple[str, str], int] = {}
    for r in tcp:
        flow = (r[7], r[8]) if r[5] in SEND_CALLS else (r[8], r[7])
        (sent if r[5] in SEND_CALLS else received)[flow] = (sent if r[5] in SEND_CALLS else received).get(flow, 0) + r[6]
    both = [f for f in set(sent) | set(received) if f[0] in owner and f[1] in owner]
    assert len(both) > 10
    equal = [f for f in both if sent.get(f, 0) == received.get(f, 0)]
    assert len(equal) >= 0.99 * len(both), [(f, sent.get(f), received.get(f)) for f in both if f not in equal][:5]
    assert {owner[f[0]] for f in both} >= tiers            # every tier's connections are among them
    # the service health says what was traced, and warns of nothing dropped
    health = service_health(run, load_run_data(run))
    assert f"Message trace: {trace['events']:,} events" in service_markdown(health)
    assert not [w for w in health.warnings if w.startswith("message trace")]
    # the black-box analysis reads it
    out = tmp_path / "paths"
    assert nestlab_main(["paths", str(run), "-a", "nesting", "--out", str(out)]) == 0
    paths = (out / "paths.csv").read_text().splitlines()
    assert len(paths) > 1 and "nesting" in paths[1]

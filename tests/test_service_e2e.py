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

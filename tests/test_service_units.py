"""The service workload without root (issue 33): the load generator's schedule and its sending
against a local HTTP server, the WSGI app's paths against stand-in tiers, the request paths parsed
from the tiers' logs, and the spec's service rules."""

from __future__ import annotations

import http.server
import statistics
import threading
import time
from pathlib import Path

import pytest

from harness.service import app, loadgen
from harness.service.paths import PathSources, loadgen_summary, request_rows
from harness.spec import load_spec
from harness.yamlload import SpecError
from tests.support.env import REPO, write

MIX = {"hit": 0.8, "miss": 0.15, "write": 0.05}


def test_arrivals_are_poisson_at_the_rate_with_the_mix_and_the_seed():
    a = list(loadgen.arrivals(100, 100_000, 60, 7, MIX))
    assert a == list(loadgen.arrivals(100, 100_000, 60, 7, MIX))          # the seed decides
    assert a != list(loadgen.arrivals(100, 100_000, 60, 8, MIX))
    gaps = [y.at - x.at for x, y in zip(a, a[1:], strict=False)]
    assert len(a) == pytest.approx(6000, rel=0.05)
    assert statistics.mean(gaps) == pytest.approx(0.01, rel=0.05)
    assert statistics.stdev(gaps) == pytest.approx(0.01, rel=0.1)         # exponential: sd = mean
    share = {k: sum(x.type == k for x in a) / len(a) for k in MIX}
    assert share == pytest.approx(MIX, abs=0.02)
    misses = [x.key for x in a if x.type == "miss"]
    assert len(set(misses)) == len(misses) and min(misses) >= loadgen.MISS_BASE
    assert all(x.key < loadgen.HOT_KEYS for x in a if x.type != "miss")
    assert len(list(loadgen.arrivals(100, 50, 60, 7, MIX))) == 50         # bounded in count
    assert max(x.at for x in loadgen.arrivals(100, 10**6, 2, 7, MIX)) < 2  # and in time


def test_parse_mix():
    assert loadgen.parse_mix("hit=80,miss=15,write=5") == pytest.approx(MIX)
    with pytest.raises(ValueError, match="unknown request type"):
        loadgen.parse_mix("hit=1,browse=1")


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: list[str] = []
    delay = 0.0

    def _answer(self):
        self.seen.append(self.headers.get("X-Request-ID"))
        time.sleep(self.delay)
        self.send_response(200)
        self.send_header("X-Request-Type", "hit")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    do_GET = do_POST = _answer

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    _Handler.seen, _Handler.delay = [], 0.0
    yield srv
    srv.shutdown()
    srv.server_close()


def test_loadgen_sends_at_the_rate_with_ids_and_records_each_answer(server, tmp_path):
    out = tmp_path / "out.tsv"
    s = loadgen.run(f"http://127.0.0.1:{server.server_port}", 100, 64, 10_000, 1.5, 3, MIX, str(out))
    lines = [line.split("\t") for line in out.read_text().splitlines()]
    assert s["errors"] == 0 and s["done"] == len(lines) == s["sent"] and s["refused"] < 0.1 * s["sent"]
    assert s["sent"] + s["refused"] == pytest.approx(150, rel=0.3)           # what the rate offers
    assert s["achieved_rate"] == pytest.approx(100, rel=0.3)
    assert sorted(_Handler.seen) == sorted(p[0] for p in lines)              # X-Request-ID sent
    assert all(p[3] == "200" and p[2] == "hit" and float(p[4]) <= float(p[5]) for p in lines)


def test_loadgen_is_open_loop_it_refuses_what_the_cap_cannot_take(server, tmp_path):
    _Handler.delay = 0.2                    # a slow service: 1 in flight serves 5/s of the 50/s offered
    s = loadgen.run(f"http://127.0.0.1:{server.server_port}", 50, 1, 10_000, 1.0, 3, MIX, str(tmp_path / "o"))
    assert s["refused"] > s["sent"] > 0 and s["done"] == s["sent"]


def test_loadgen_counts_a_dead_server_as_errors(tmp_path):
    s = loadgen.run("http://127.0.0.1:9", 20, 4, 10, 1.0, 1, MIX, str(tmp_path / "o"))
    assert s["errors"] == s["done"] > 0
    assert all(line.split("\t")[3] == "0" for line in (tmp_path / "o").read_text().splitlines())


class _Cache:
    def __init__(self):
        self.data = {"session:1": b"u", "item:1": b"v"}

    def get(self, k):
        return self.data.get(k)

    def set(self, k, v):
        self.data[k] = v


def test_app_takes_the_path_the_tiers_decide_and_logs_each_hop(tmp_path, monkeypatch):
    cache, queries = _Cache(), []
    monkeypatch.setattr(app, "_cache", lambda: cache)
    monkeypatch.setattr(app, "_query", lambda sql, args: queries.append((sql, args)) or ("from-db",))
    monkeypatch.setattr(app, "HOPS", str(tmp_path))
    monkeypatch.setattr(app, "HOST", "app9")

    def call(method, path, rid):
        got = {}
        body = app.application({"PATH_INFO": path, "REQUEST_METHOD": method, "HTTP_X_REQUEST_ID": rid},
                               lambda status, headers: got.update(status=status, headers=dict(headers)))
        return got["status"], got["headers"].get("X-Request-Type"), b"".join(body)

    assert call("GET", "/item/1", "a") == ("200 OK", "hit", b"v")
    assert call("GET", "/item/1000007", "b") == ("200 OK", "miss", b"from-db")
    assert queries[-1] == (app.SQL["read_item"], (1000007 % app.ROWS,))
    assert call("GET", "/item/1000007", "c")[1] == "hit"                    # stored after the miss
    assert call("POST", "/item/1", "d")[:2] == ("200 OK", "write")
    assert queries[-1][0] == app.SQL["write_item"] and cache.data["item:1"].startswith(b"v1-")
    assert call("GET", "/nothing", "e")[0].startswith("404")
    monkeypatch.setattr(app, "_query", lambda sql, args: (_ for _ in ()).throw(OSError("db down")))
    assert call("GET", "/item/1000008", "f")[:2] == ("502 Bad Gateway", "miss")
    lines = [p.split("\t") for f in tmp_path.glob("hops-app9-*.tsv") for p in f.read_text().splitlines()]
    tiers = {rid: [p[2] for p in lines if p[0] == rid] for rid in "abcdf"}
    assert tiers == {"a": ["app", "cache", "cache"], "b": ["app", "cache", "cache", "db", "cache"],
                     "c": ["app", "cache", "cache"], "d": ["app", "cache", "db", "cache"], "f": ["app", "cache", "cache", "db"]}
    assert [p[7] for p in lines if p[0] == "f"] == ["error", "ok", "ok", "error"]


def test_request_rows_join_the_tiers_logs(tmp_path):
    hops = tmp_path / "hops"
    hops.mkdir()
    (hops / "hops-app1-40.tsv").write_text("q1\tmiss\tapp\tapp1\t40\t10.002\t10.020\tok\n"
                                           "q1\tmiss\tcache\t-\t-\t10.003\t10.004\tok\n"
                                           "q1\tmiss\tdb\t-\t-\t10.005\t10.015\tok\n"
                                           "-\thit\tapp\tapp1\t40\t9.0\t9.1\tok\n"          # warm-up: no id
                                           "q2\thit\tapp\tapp1\t40\t11.0")                   # cut short
    (tmp_path / "lg.tsv").write_text("q1\thit\tmiss\t200\t10.000\t10.025\t\nq2\thit\t\t0\t11.0\t11.5\tTimeout\n")
    (tmp_path / "access.tsv").write_text("q1\t77\t1010.022\t0.021\t200\t10.0.4.1:8000\n")
    rows = request_rows(PathSources("client", 5, tmp_path / "lg.tsv", "web", tmp_path / "access.tsv", hops,
                                    {"cache": ("cache", 8), "db": ("db", 9)}, wall_minus_mono=1000.0))
    by = {(r[0], r[2]): r for r in rows}
    assert set(by) == {("q1", "client"), ("q1", "web"), ("q1", "app"), ("q1", "cache"), ("q1", "db"), ("q2", "client")}
    assert by[("q1", "client")][1] == "miss"                                 # the app's type wins
    assert by[("q2", "client")][1:3] == ("hit", "client") and by[("q2", "client")][7] == "error"
    assert by[("q1", "web")][4:7] == pytest.approx((77, 10.001, 10.022))
    assert by[("q1", "db")][3:5] == ("db", 9)


def test_loadgen_summary_is_its_last_json_line(tmp_path):
    log = tmp_path / "l.log"
    log.write_text('noise\n{"offered_rate": 5, "done": 3}\n')
    assert loadgen_summary(log) == {"offered_rate": 5, "done": 3}
    assert loadgen_summary(tmp_path / "none.log") is None


SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service.yaml"}
duration: 20s
monitor: web
workloads:
  - {{kind: service, {{fields}}}}
"""


@pytest.mark.parametrize("fields, message", [
    ("rate: 0/s", "rate: expected a rate greater than 0"),
    ("rate: -5", "rate: expected a non-negative rate"),
    ("concurrency: 4", "needs 'rate'"),
    ("rate: 5, web: nowhere", "web: unknown node 'nowhere'"),
    ("rate: 5, db: x3", "db: 'x3' is a router"),
    ("rate: 5, apps: [app1, app1]", "apps[1]: 'app1' already runs the app1 tier"),
    ("rate: 5, host: web", "not host and server"),
    ("rate: 5, mix: {browse: 5%}", "mix.browse"),
    ("rate: 5, db_work: -1", "db_work"),
])
def test_bad_service_specs_are_one_line_naming_the_field(tmp_path, fields, message):
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", fields)))
    assert message in str(e.value) and ":6: workloads[0]" in str(e.value) and "\n" not in str(e.value)


def test_a_service_spec_defaults_its_tiers_and_mix(tmp_path):
    w = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", "rate: 600/min"))).spec.workloads[0]
    assert (w.rate, w.host, w.server) == (10, "client", "web")
    assert w.tier_hosts == {"client": "client", "web": "web", "app1": "app1", "app2": "app2", "cache": "cache", "db": "db"}
    assert w.mix == {"hit": 80, "miss": 15, "write": 5}


def test_db_work_makes_the_miss_query_cost_the_database_cpu_and_keeps_old_digests(tmp_path, monkeypatch):
    """db_work: N MD5s in MariaDB per miss (BENCHMARK), so that a `slow` database shows; 0 (the
    default) is the plain lookup, and a spec without it keeps the digest it had before the field."""
    from harness.suite import load_suite

    queries = []
    monkeypatch.setattr(app, "_cache", lambda: _Cache())
    monkeypatch.setattr(app, "_query", lambda sql, args: queries.append((sql, args)) or ("v",))
    monkeypatch.setattr(app, "HOPS", "")
    for work in (0, 50000):
        monkeypatch.setattr(app, "DB_WORK", work)
        app.application({"PATH_INFO": "/item/1000009", "REQUEST_METHOD": "GET", "HTTP_X_REQUEST_ID": "w"},
                        lambda *_: None)
    assert queries == [(app.SQL["read_item"], (1000009 % app.ROWS,)),
                       (app.SQL["read_item_work"], (50000, 1000009 % app.ROWS))]
    assert "BENCHMARK(%s, MD5(value))" in app.SQL["read_item_work"]
    w = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", "rate: 5, db_work: 50000"))).spec.workloads[0]
    assert w.db_work == 50000
    with pytest.raises(SpecError, match="db_work applies to kind service only"):
        load_spec(write(tmp_path, "w.yaml", SPEC.replace("{fields}", "rate: 5").replace(
            "kind: service, rate: 5", "kind: wget, host: client, server: web, db_work: 5")))
    exp = load_suite(REPO / "experiments" / "service.yaml").experiments[0]
    before = exp.digest(0)
    exp.spec.workloads[0].db_work = 7
    assert exp.digest(0) != before
    exp.spec.workloads[0].db_work = 0
    assert exp.digest(0) == before and "db_work" not in str(before)


def test_the_service_experiment_loads():
    from harness.suite import load_suite

    exps = load_suite(REPO / "experiments" / "service.yaml").experiments
    assert [e.spec.workloads[0].kind for e in exps] == ["service", "service"] and not exps[0].spec.faults
    assert Path(REPO / "harness" / "service" / "mariadb.sql").is_file()


def test_the_blackbox_suite_plans(tmp_path):
    from harness.suite import describe_plan, load_suite

    suite = load_suite(REPO / "experiments" / "blackbox.yaml")
    _, rows = describe_plan(suite)
    assert len(rows) == 32 and {r[6] for r in rows} == {"service 20/s", "service 80/s"}
    assert sum(r[7] == "none (control)" for r in rows) == 2
    # a delay at each tier (web and cache: the interceptor's deferral)
    delayed = {f.host for e in suite.experiments for f in e.spec.faults if f.kind == "delay"}
    assert delayed == {"web", "app1", "app2", "cache", "db"}
    slowed = [(e.spec.workloads[0].db_work, f.host) for e in suite.experiments for f in e.spec.faults if f.kind == "slow"]
    assert slowed == [(50000, "db"), (50000, "db")]   # a database with work to slow down


def test_a_missing_tier_package_is_one_line_naming_it_and_setup(monkeypatch):
    from harness.service import tiers
    from rundir.errors import UserError

    real = tiers.shutil.which
    monkeypatch.setattr(tiers.shutil, "which", lambda p: None if p == "memcached" else real(p))
    monkeypatch.setattr(tiers, "SYSTEM_PYTHON", "/nonexistent/python3")
    with pytest.raises(UserError) as e:
        tiers.check_installed()
    text = str(e.value)
    assert "memcached (memcached)" in text and "module pymysql (python3-pymysql)" in text
    assert "scripts/setup.sh" in text and "\n" not in text and "nginx (nginx)" not in text


def test_service_health_per_tier_in_quiet_time_and_its_bottleneck_warnings():
    import pandas as pd

    from analysis.service_health import health_from, service_markdown

    rows = []
    for n in range(200):
        t = float(n)
        rows += [(f"q{n}", "hit", "client", "client", 1, t, t + 0.010, "ok"),
                 (f"q{n}", "hit", "app", "app1", 2, t + 0.002, t + 0.004, "ok" if n % 20 else "error")]
    rows.append(("q999", "miss", "client", "client", 1, 50.0, 55.0, "ok"))   # inside the fault span: left out
    req = pd.DataFrame(rows, columns=["request", "type", "tier", "host", "pid", "start", "end", "outcome"])
    h = health_from(req, [(49.5, 60.0)], {"offered_rate": 50, "achieved_rate": 40, "sent": 90, "refused": 10,
                                          "concurrency": 8})
    t = h.tiers.set_index("tier")
    assert list(h.tiers["tier"]) == ["client", "app"] and t.loc["client", "hops"] == 190
    assert t.loc["client", "p50_ms"] == pytest.approx(10) and t.loc["client", "max_ms"] == pytest.approx(10)
    assert t.loc["app", "errors"] == 10 and h.types == {"hit": 200, "miss": 1}
    assert len(h.warnings) == 3 and "app hops failed" in h.warnings[0] and "10 of 100 arrivals" in h.warnings[1] and "fault windows included" in h.warnings[1]
    assert "40 requests/s answered of 50/s" in h.warnings[2] and "| app | 190 | 10 |" in service_markdown(h)
    quiet = health_from(req[req["outcome"] == "ok"], [], {"offered_rate": 50, "achieved_rate": 49, "refused": 0})
    assert quiet.warnings == []
    assert "Message trace" not in service_markdown(quiet)
    quiet.trace = {"processes": 9, "events": 12345, "dropped": 2, "lost": 0, "hosts": {}}
    assert "Message trace: 12,345 events from 9 processes, 2 dropped, 0 lost." in service_markdown(quiet)

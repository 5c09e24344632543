"""Births and deaths instead of every live module: a source that reports only the modules born or
changed and the keys of those that died (Report, ModuleTracker.record_reports) must record exactly
what the same snapshots record given as every live module (ModuleTracker.record): modules, their
birth and death times, edges, counters and tcp_info rows. Checked on hand-made sock_diag dumps
through the TCP source (a connection dying and one born in the same snapshot, so the count of live
sockets stays the same), and on hand-made modules with children (an app losing one socket and
gaining another in one snapshot); and a report that misses a death shows in the comparison."""

from __future__ import annotations

from harness.collector.main import ModuleTracker
from harness.collector.sockdiag import TcpSource
from harness.collector.source import Observation, Report
from rundir.db import create_db
from tests.test_sockdiag_changes import INTERVAL, Replay, Sock, done


def dumps_with_turnover(per_chunk: int = 5) -> list[list[bytes]]:
    """Seven dumps of 20 connections: at 2 one dies and another is born (as many live as before); at
    4 two die and one is born, one sends; at 5 one is born at the end; the rest idle."""
    socks = [Sock(1000 + k, 40000 + k) for k in range(20)]
    out = []
    for k in range(7):
        for s in socks:
            s.sent, s.recv, s.ack = s.sent + 50, s.recv + 50, s.ack + 50
        if k == 2:
            del socks[7]
            socks.insert(12, Sock(3000, 41000))
        if k == 4:
            del socks[15]
            del socks[2]
            socks.insert(0, Sock(3001, 41001))
            socks[9].ti = {**socks[9].ti, "acked": 9, "segs_out": 4}
            socks[9].sent = socks[9].ack = 2
        if k == 5:
            socks.append(Sock(3002, 41002))
        messages = [s.message(k) for s in socks] + [done(k)]
        out.append([b"".join(messages[i:i + per_chunk]) for i in range(0, len(messages), per_chunk)])
    return out


def tables(db) -> dict[str, list]:
    key = "JOIN modules m ON m.id = t.module"
    return {"modules": db.execute("SELECT id, key, kind, name, attrs, born, died FROM modules ORDER BY id").fetchall(),
            "edges": db.execute("SELECT p.key, c.key, e.born, e.died FROM edges e JOIN modules p ON p.id = e.parent "
                                "JOIN modules c ON c.id = e.child ORDER BY p.key, c.key, e.born").fetchall(),
            "counters": db.execute(f"SELECT seq, key, dir, total_msgs, wait_ms, queued, errors, bytes FROM counters t "
                                   f"{key} ORDER BY seq, key, dir").fetchall(),
            "tcp_info": db.execute(f"SELECT t.*, key FROM tcp_info t {key} ORDER BY seq, key").fetchall()}


def record_tcp(dumps, births_and_deaths: bool, path, tamper=None) -> dict[str, list]:
    db = create_db(path)
    db.isolation_level = None
    src = TcpSource(lambda a: "ipeth:nlb-c", None, skip_unchanged=births_and_deaths)
    src.diag.sock.close()
    src.diag.sock = Replay(dumps)
    tracker = ModuleTracker(db)
    sizes = []
    for k in range(len(dumps)):
        if births_and_deaths:
            rep = src.report()
            if tamper is not None:
                tamper(k, rep)
            sizes.append((len(rep.changed), len(rep.gone), len(rep.unchanged())))
            tracker.record_reports(k * INTERVAL, 0.0, [rep])
        else:
            tracker.record(k * INTERVAL, 0.0, src.poll())
    tracker.close(len(dumps) * INTERVAL)
    out = tables(db)
    out["sizes"] = sizes
    db.close()
    return out


def test_births_and_deaths_record_what_every_live_connection_records(tmp_path):
    dumps = dumps_with_turnover()
    full = record_tcp(dumps, False, tmp_path / "full.db")
    reported = record_tcp(dumps, True, tmp_path / "reports.db")
    for table in ("modules", "edges", "counters", "tcp_info"):
        assert reported[table] == full[table], table
    # not vacuous: idle connections were left out; deaths and births came in the same snapshot
    changed, gone, unchanged = zip(*reported["sizes"], strict=True)
    assert changed[0] == 20 and gone == (0, 0, 1, 0, 2, 0, 0)
    assert changed[2] == 1 and unchanged[2] == 19           # one born, one dead: 20 live as before
    assert changed[3] == 0 and unchanged[3] == 20
    died = {key: d for _, key, _, _, _, _, d in full["modules"]}
    assert died["tcp:1007"] == 2 * INTERVAL and died["tcp:3000"] == 7 * INTERVAL
    assert {k for k, d in died.items() if d == 4 * INTERVAL} == {"tcp:1002", "tcp:1015"}
    born = {key: b for _, key, _, _, _, b, _ in full["modules"]}
    assert born["tcp:3000"] == 2 * INTERVAL and born["tcp:3001"] == 4 * INTERVAL and len(born) == 23


def test_a_report_that_misses_a_death_shows_in_the_comparison(tmp_path):
    """The comparison above can fail: a report that leaves out the connection dying at 2 (as a count
    of live sockets would, one being born in the same snapshot) keeps it alive to the end."""
    dumps = dumps_with_turnover()

    def drop_the_death(k, rep):
        if k == 2:
            rep.gone = []
    full = record_tcp(dumps, False, tmp_path / "full.db")
    missed = record_tcp(dumps, True, tmp_path / "missed.db", tamper=drop_the_death)
    assert missed["counters"] == full["counters"]
    assert missed["modules"] != full["modules"]
    (lost,) = set(full["modules"]) - set(missed["modules"])
    assert lost[1] == "tcp:1007" and lost[-1] == 2 * INTERVAL


def counters(n: int) -> dict:
    return {"in": {"total_msgs": n, "bytes": 10 * n}, "out": {"total_msgs": n, "bytes": 10 * n, "queued": 0}}


def snapshots() -> list[list[Observation]]:
    """An app with sockets as children (as the interceptor reports them) and an interface: at 1 a
    socket is born; at 2 one dies and another is born, the app moving with them; at 3 all idle; at
    4 the app dies with its sockets."""
    def app(kids, n):
        return Observation("app:1", "app", "app 1", counters(n), {"pid": 1}, list(kids))

    def sock(i, n):
        return Observation(f"sock:{i}", "socket", f"sock {i}", counters(n), {"fd": i}, ["ipeth:e0"])

    iface = Observation("ipeth:e0", "ipeth", "ip+eth e0", counters(5))
    return [[app(["sock:1", "sock:2"], 3), sock(1, 1), sock(2, 2), iface],
            [app(["sock:1", "sock:2", "sock:3"], 4), sock(1, 1), sock(2, 2), sock(3, 1), iface],
            [app(["sock:1", "sock:3", "sock:4"], 6), sock(1, 1), sock(3, 4), sock(4, 1), iface],
            [app(["sock:1", "sock:3", "sock:4"], 6), sock(1, 1), sock(3, 4), sock(4, 1), iface],
            [iface]]


def as_reports(snaps: list[list[Observation]]) -> list[Report]:
    """Each snapshot as a births-and-deaths source would give it: only the modules born or whose
    counters moved, and the keys gone since the last."""
    out, last = [], {}
    for obs in snaps:
        now = {ob.key: ob for ob in obs}
        changed = [ob for ob in obs if ob.key not in last or last[ob.key].counters != ob.counters
                   or last[ob.key].children != ob.children]
        out.append(Report(changed, [k for k in last if k not in now]))
        last = now
    return out


def test_modules_with_children_record_alike_as_reports(tmp_path):
    results = []
    for name in ("full", "reports"):
        db = create_db(tmp_path / f"{name}.db")
        db.isolation_level = None
        tracker = ModuleTracker(db)
        snaps = snapshots()
        for k, (obs, rep) in enumerate(zip(snaps, as_reports(snapshots()), strict=True)):
            if name == "full":
                tracker.record(k * 0.1, 0.0, obs)
            else:
                tracker.record_reports(k * 0.1, 0.0, [rep])
        tracker.close(0.5)
        results.append(tables(db))
        db.close()
    full, reported = results
    assert reported == full
    # not vacuous: the app's edge to sock:2 died with it at 2, the one to sock:4 was born then
    edges = {(p, c): (b, d) for p, c, b, d in full["edges"]}
    assert edges[("app:1", "sock:2")] == (0.0, 0.2) and edges[("app:1", "sock:4")] == (0.2, 0.4)
    assert edges[("sock:3", "ipeth:e0")] == (0.1, 0.4) and len(edges) == 8
    assert [r[0] for r in as_reports(snapshots())[3].changed] == []   # the idle snapshot names no module

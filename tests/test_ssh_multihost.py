"""Several monitored hosts and message traces on testbed nodes, without root or sshd: each node's
recording merged onto the reference node's timeline (rundir/nodemerge.py), the collector's own host
label, the clock checks that end a run naming a node, and the bookkeeping that brings every node's
recording back (also after a SIGKILL, through `nestlab cleanup`)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from rundir.db import TRACE_SCHEMA, create_db
from rundir.nodemerge import NodeRecording, grid_map, merge_nodes, merge_trace


def _node_db(path, monos, modules, counters, tcp_info=(), probes=()):
    """A collector's run.db: snapshots at `monos` (node clock), modules (id, key, born, died),
    counters (seq, module, dir, total_msgs)."""
    db = create_db(path)
    db.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", [(k, m, 1e9 + m) for k, m in enumerate(monos)])
    db.executemany("INSERT INTO modules VALUES (?, 'tcp', ?, ?, '{}', ?, ?)",
                   [(i, f"n: {key}", key, born, died) for i, key, born, died in modules])
    db.executemany("INSERT INTO counters VALUES (?, ?, ?, ?, NULL, 0, 0, ?)",
                   [(s, m, d, v, v * 10) for s, m, d, v in counters])
    for seq, module, sent in tcp_info:
        db.execute("INSERT INTO tcp_info (seq, module, rtt_us, data_sent_at) VALUES (?, ?, 100, ?)", (seq, module, sent))
    for row in probes:
        db.execute("INSERT INTO probes VALUES (?, ?, ?, '10.0.0.1:80', 40000, 'syn', ?, ?, ?, 'answered', 1.0)", row)
    db.commit()
    db.close()
    return path


def test_grid_map_puts_each_node_snapshot_on_the_nearest_reference_snapshot():
    ref = [10.0, 10.1, 10.2, 10.3]
    # node clock 100 s behind: 110.03 -> 10.03 -> seq 0; 110.18 -> 10.18 -> seq 2; outside: clamped
    assert grid_map([109.0, 110.03, 110.18, 110.26, 200.0], -100.0, ref) == [0, 0, 2, 3, 3]


def test_a_second_node_lands_on_the_reference_timeline(tmp_path):
    ref = _node_db(tmp_path / "web.db", [10.0, 10.1, 10.2, 10.3],
                   [(1, "tcp:1", 10.0, None)], [(0, 1, "in", 1), (2, 1, "in", 5)])
    # app1's clock reads 100 s more than web's (offset -100): its snapshots at 110.04, 110.13, 110.16
    # (two land on seq 1 and 2: 10.13 -> 1, 10.16 -> 2), 110.31 -> 3.
    other = _node_db(tmp_path / "app1.db", [110.04, 110.13, 110.16, 110.31],
                     [(1, "tcp:1", 110.04, 110.31), (2, "app:7", 110.13, None)],
                     [(0, 1, "in", 3), (1, 1, "in", 4), (2, 1, "in", 6), (1, 2, "out", 9), (2, 2, "out", 11)],
                     tcp_info=[(1, 2, 110.12)], probes=[(1, 1, 2, 1, 110.14, 110.15)])
    run = create_db(tmp_path / "run.db")
    n = merge_nodes(run, NodeRecording("web", ref), [NodeRecording("app1", other, -100.0)])
    assert n == 4
    assert run.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 4   # the reference's only
    mods = run.execute("SELECT id, key, born, died FROM modules ORDER BY id").fetchall()
    # the reference's as they are; app1's after them, born and died on the grid's snapshots, a key the
    # reference has already named with its node (another machine's inode 1 is another socket)
    assert mods == [(1, "tcp:1", 10.0, None), (2, "tcp:1%app1", 10.0, 10.3), (3, "app:7", 10.1, None)]
    rows = run.execute("SELECT seq, module, dir, total_msgs FROM counters WHERE module > 1 ORDER BY module, seq").fetchall()
    # node seq 1 and 2 landed on 1 and 2; seq 0 on 0; nothing lands twice here but the values carried
    assert rows == [(0, 2, "in", 3), (1, 2, "in", 4), (2, 2, "in", 6), (1, 3, "out", 9), (2, 3, "out", 11)]
    sent = run.execute("SELECT seq, module, data_sent_at FROM tcp_info").fetchone()
    assert sent[0] == 1 and sent[1] == 3 and sent[2] == pytest.approx(10.12)
    probe = run.execute("SELECT id, module, seq, sent, done FROM probes").fetchone()
    assert probe[:3] == (1, 3, 1) and probe[3] == pytest.approx(10.14)


def test_two_node_snapshots_on_one_reference_snapshot_keep_the_later_values(tmp_path):
    ref = _node_db(tmp_path / "web.db", [0.0, 1.0], [], [])
    other = _node_db(tmp_path / "db.db", [0.9, 1.05, 1.1], [(1, "tcp:5", 0.9, None)],
                     [(0, 1, "in", 1), (1, 1, "in", 2), (2, 1, "in", 7)])
    run = create_db(tmp_path / "run.db")
    merge_nodes(run, NodeRecording("web", ref), [NodeRecording("db", other, 0.0)])
    assert run.execute("SELECT seq, total_msgs FROM counters ORDER BY seq").fetchall() == [(1, 7)]
    assert run.execute("SELECT count(*) FROM counters GROUP BY seq, module, dir HAVING count(*) > 1").fetchall() == []


def test_a_nodes_message_trace_comes_back_on_the_reference_clock(tmp_path):
    node = sqlite3.connect(tmp_path / "trace.db")
    node.executescript(TRACE_SCHEMA)
    node.execute("INSERT INTO messages VALUES (50.25, 'app2', 7, 7, 3, 'send', 10, '10.0.6.1:8000', '10.0.3.1:4000')")
    node.execute("INSERT INTO traced VALUES ('app2', 7, 99, 'gunicorn', 65536, 1, 0, 0)")
    node.commit()
    node.close()
    run = create_db(tmp_path / "run.db")
    assert merge_trace(run, NodeRecording("app2", tmp_path / "trace.db", -40.0)) == 1
    (mono, host), = run.execute("SELECT mono, host FROM messages").fetchall()
    assert mono == pytest.approx(10.25) and host == "app2"
    assert run.execute("SELECT events FROM traced").fetchall() == [(1,)]
    empty = create_db(tmp_path / "none.db")
    empty.close()
    assert merge_trace(run, NodeRecording("x", tmp_path / "none.db")) == 0


def test_the_collector_labels_its_one_hosts_modules_as_the_multihost_collector_does():
    from harness.collector.main import _Labelled, command
    from harness.collector.source import Observation, Report

    class Tracker:
        ids: dict = {}

    class Src:
        name = "tcp"

        def __init__(self):
            self.ob = Observation("tcp:1", "tcp", "tcp 10.0.1.1:1>10.0.2.1:80", {"in": {}, "out": {}})

        def report(self):
            return Report([self.ob], [], lambda: [])

        def refresh_addresses(self):
            return "refreshed"

    src = Src()
    wrapped = _Labelled(src, "app1", Tracker())
    (ob,) = wrapped.report().changed
    assert ob.name == "app1: tcp 10.0.1.1:1>10.0.2.1:80" and ob.attrs["host"] == "app1"
    wrapped.report()
    assert ob.name.count("app1: ") == 1                 # once
    assert wrapped.refresh_addresses() == "refreshed"    # the rest is the source's own
    argv = command(["python3"], "/tmp/x/run.db", 0.1, "/dev/shm/d", ["eth0"], None, (), label_host="app1")
    assert argv[argv.index("--label-host") + 1] == "app1" and "--host" not in argv
    assert json.dumps(argv)


# ---- the lab's collectors and drainers on testbed nodes ------------------------------------------

def _lab_parts(tmp_path, separate=True, remote=True):
    from types import SimpleNamespace as NS

    started = []

    class Proc:
        def __init__(self, host, argv):
            self.node, self.argv, self.pid, self.started, self.code = host, argv, 100 + len(started), 0.0, None

        def poll(self):
            return self.code

    class Node:
        def __init__(self, name):
            self.name, self.pid = name, 7

        def start(self, argv, log, env=None):
            started.append((self.name, argv, log))
            return Proc(self.name, argv)

        def stop(self, proc, timeout=3.0):
            return 0

    counts = {}
    backend = NS(node=Node, remote=remote, separate_collectors=lambda: separate,
                 collector_db=lambda host, record: f"/tmp/nestlab-r-{host}/run.db",
                 trace_db=lambda host: f"/tmp/nestlab-r-{host}/trace.db" if separate else None,
                 python=lambda host: ["env", f"PYTHONPATH=/tmp/nestlab-r-{host}/pkg", "python3"],
                 ignored_interfaces=lambda host: [f"ctl-{host}"], snapshots=lambda host, record: 1,
                 start_progress=lambda host: counts.setdefault(host, 1),
                 progress_snapshots=lambda host, record: counts.get(host, 0))
    spec = NS(monitor=["web", "app1", "db"], probe=None, snapshot_interval=0.1, interceptor=True, trace="messages",
              workloads=[])
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    rd = NS(collector_log=logs / "collector.log", logs=logs)
    return spec, backend, rd, started, counts


def test_each_monitored_node_gets_its_own_collector_labelled_with_its_host(tmp_path):
    from harness.lab.collectors import Collectors

    spec, backend, rd, started, _ = _lab_parts(tmp_path)
    roles = []
    c = Collectors(spec, backend, rd, None, {"web": "/dev/shm/w", "app1": "/dev/shm/a", "db": "/dev/shm/d"},
                   lambda proc, w, role, host: roles.append((role, host)))
    assert c.start() == "/tmp/nestlab-r-web/run.db"
    assert [s[0] for s in started] == ["web", "app1", "db"] and roles == [("collector", h) for h in ("web", "app1", "db")]
    for host, argv, log in started:
        assert argv[argv.index("--label-host") + 1] == host and "--host" not in argv
        assert argv[argv.index("--db") + 1] == f"/tmp/nestlab-r-{host}/run.db"
        assert argv[argv.index("--interceptor-dir") + 1] == {"web": "/dev/shm/w", "app1": "/dev/shm/a", "db": "/dev/shm/d"}[host]
        assert argv[argv.index("--ignore-interface") + 1] == f"ctl-{host}"
        assert log.name == ("collector.log" if host == "web" else f"collector-{host}.log")
    c.stop()
    assert c.procs == {}


def test_a_node_whose_collector_dies_or_goes_quiet_ends_the_run_naming_it(tmp_path):
    from harness.lab.collectors import Collectors, NodeFailed
    from rundir.errors import UserError

    spec, backend, rd, started, counts = _lab_parts(tmp_path)
    c = Collectors(spec, backend, rd, None, {}, lambda *a: None)
    c.start()
    c.check(5.0, 50, 0.0, 10.0)                       # all recording: nothing
    c.procs["app1"].code = -1                         # its command server is gone: the node
    with pytest.raises(NodeFailed) as e:
        c.check(6.0, 60, 0.0, 10.0)
    assert isinstance(e.value, UserError) and str(e.value).startswith("app1: it stopped answering at t = 6.0 s")
    assert "\n" not in str(e.value) and "kept" in str(e.value)
    c.procs["app1"].code = None
    c.seen["db"] = (counts["db"], c.seen["db"][1] - 11.0)   # db's count has not moved for 11 s
    with pytest.raises(NodeFailed, match=r"^db: its collector recorded no snapshot for 1\d\.\d s"):
        c.check(20.0, 200, 0.0, 10.0)


def test_on_mininet_a_dead_collector_is_still_a_stopped_recording(tmp_path):
    from harness.lab.collectors import Collectors
    from harness.outline import RecordingStopped

    spec, backend, rd, started, _ = _lab_parts(tmp_path, separate=False, remote=False)
    c = Collectors(spec, backend, rd, None, {}, lambda *a: None)
    c.start()
    assert len(started) == 1 and "--host" in started[0][1]
    c.procs["web"].code = 1
    with pytest.raises(RecordingStopped, match="the collector exited with status 1 at t = 3.0 s, after 30 snapshots"):
        c.check(3.0, 30, 0.0, 10.0)


def test_each_traced_node_gets_its_own_drainer_writing_on_the_node(tmp_path):
    from harness.lab.tracing import MessageTracing

    spec, backend, rd, started, _ = _lab_parts(tmp_path)
    tracing = MessageTracing(spec, backend)
    tracing.dirs = {"client": "/dev/shm/c", "web": "/dev/shm/w"}
    assert tracing.separate
    roles = []
    tracing.start("/results/run.db", rd.logs / "tracedrain.log", lambda proc, w, role, host: roles.append((role, host)))
    assert roles == [("tracedrain", "client"), ("tracedrain", "web")]
    for host, argv, log in started:
        assert argv[argv.index("--db") + 1] == f"/tmp/nestlab-r-{host}/trace.db"
        assert argv[argv.index("--dir") + 1] == f"{host}={tracing.dirs[host]}" and argv.count("--dir") == 1
        assert log.name == f"tracedrain-{host}.log"
    tracing.stop(lambda *a: roles.append(a[2]))
    assert roles[-2:] == ["ended", "ended"] and tracing.procs == {}


# ---- clocks ------------------------------------------------------------------------------------

class ClockNode:
    def __init__(self, name, delta=0.0, rtt=0.001, fail=None):
        from types import SimpleNamespace as NS

        self.name, self.delta, self.rtt, self.fail = name, delta, rtt, fail
        self.p = NS(where=f"{name} (root@{name}.example:22)")

    def measure_clock(self):
        if self.fail:
            raise RuntimeError(self.fail)
        return self.delta, self.rtt


def test_clocks_that_cannot_be_measured_are_one_line_naming_the_node():
    from harness.backends.ssh.provision import measure_clocks
    from harness.backends.ssh.transport import SshError

    nodes = {"web": ClockNode("web", 5.0), "db": ClockNode("db", 7.0, 0.002)}
    clocks = measure_clocks(nodes, "web")
    assert clocks.nodes["db"].offset == pytest.approx(-2.0) and clocks.nodes["db"].rtt == pytest.approx(0.003)
    assert clocks.nodes["web"].offset == 0.0
    for bad, words in ((ClockNode("db", rtt=0.4), "the best of 15 round trips took 400 ms"),
                       (ClockNode("db", rtt=float("nan")), "round trips took nan ms"),
                       (ClockNode("db", fail="command server stopped"), "command server stopped")):
        with pytest.raises(SshError) as e:
            measure_clocks({"web": nodes["web"], "db": bad}, "web")
        msg = str(e.value)
        assert msg.startswith("db (root@db.example:22): its clock offset cannot be measured") and words in msg, msg
        assert "\n" not in msg


def test_a_node_that_loses_clock_sync_is_named():
    from harness.backends.ssh.provision import clock_drift, measure_clocks
    from harness.backends.ssh.transport import SshError

    nodes = {"web": ClockNode("web", 5.0), "db": ClockNode("db", 7.0)}
    start = measure_clocks(nodes, "web")
    nodes["db"].delta = 7.003                      # 3 ms: within 5 ms + the round trips
    clock_drift(start, measure_clocks(nodes, "web"), nodes)
    nodes["db"].delta = 7.5                        # stepped by half a second
    with pytest.raises(SshError, match=r"^db \(root@db.example:22\): lost clock sync: its offset to web's clock "
                                       r"moved by 500.0 ms"):
        clock_drift(start, measure_clocks(nodes, "web"), nodes)


def test_a_lost_reference_recording_leaves_the_others_merged_on_the_next_nodes_snapshots(tmp_path):
    """bring_back_recordings when the reference node's run.db cannot be fetched (the node died): the
    other nodes' come back all the same, on the reference clock, and the error names the lost one."""
    from harness.backends.ssh.retrieve import bring_back_recordings

    src = {"app1": _node_db(tmp_path / "app1-src.db", [110.0, 110.1], [(1, "tcp:1", 110.0, None)], [(0, 1, "in", 1)]),
           "db": _node_db(tmp_path / "db-src.db", [210.02, 210.12], [(1, "tcp:9", 210.02, None)], [(1, 1, "in", 4)])}

    class Node:
        def __init__(self, name):
            self.name = name

        def exists(self, remote):
            return False

        def get(self, remote, local):
            if self.name == "web":
                raise OSError("connection lost")
            local.write_bytes(src[self.name].read_bytes())

    nodes = {n: Node(n) for n in ("web", "app1", "db")}
    run = create_db(tmp_path / "run.db")
    errors = bring_back_recordings(nodes, {"web": "/w/run.db", "app1": "/a/run.db", "db": "/d/run.db"}, {}, "web",
                                   {"app1": -100.0, "db": -200.0}, tmp_path, run)
    assert len(errors) == 2 and "run.db from web: connection lost" in errors[0] and "on app1's snapshots" in errors[1]
    assert [round(m, 6) for (m,) in run.execute("SELECT mono FROM snapshots ORDER BY seq")] == [10.0, 10.1]
    assert [(k, round(b, 6)) for k, b in run.execute("SELECT key, born FROM modules ORDER BY id")] == \
        [("tcp:1", 10.0), ("tcp:9", 10.0)]
    assert not list(tmp_path.glob("collector-*.db"))      # the copies are removed


def test_a_node_that_hangs_holds_up_no_other_nodes_snapshot_count(monkeypatch):
    import threading
    import time
    from types import SimpleNamespace as NS

    from harness.backends.ssh import backend as ssh_backend
    from harness.backends.ssh.backend import SshBackend

    monkeypatch.setattr(ssh_backend, "PROGRESS_S", 0.02)
    release = threading.Event()
    b = SshBackend.__new__(SshBackend)
    b._progress, b._pollers, b._poller_stop = {}, [], threading.Event()
    b.nodes = {n: NS(check_alive=lambda: True) for n in ("web", "db")}   # both answer their keepalives
    counts = {"web": 0}

    def snapshots(name, run_db=None, server=True):
        if name == "db":
            release.wait(5)           # a node gone away: its poll hangs until its timeout
            raise RuntimeError("timed out")
        counts["web"] += 1
        return counts["web"]

    b.snapshots = snapshots
    b.start_progress("db")
    b.start_progress("web")
    deadline = time.monotonic() + 5
    while b.progress_snapshots("web") < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert b.progress_snapshots("web") >= 3 and b.progress_snapshots("db") == 0
    release.set()
    b.stop_progress()
    assert not any(t.is_alive() for t in b._pollers)


def test_cleanup_brings_back_every_nodes_recording_with_the_offsets_the_manifest_recorded(tmp_path, monkeypatch):
    """`nestlab cleanup` after a SIGKILLed runner: every collector's run.db and every drainer's trace
    the ledger lists (`salvages`), merged with the manifest's offsets, and each salvaged node's logs."""
    from types import SimpleNamespace

    import harness.backends.ssh.cleanup as cleanup_mod
    from harness.backends.ssh.cleanup import bring_back
    from rundir.layout import RunDir

    trace = sqlite3.connect(tmp_path / "trace-src.db")
    trace.executescript(TRACE_SCHEMA)
    trace.execute("INSERT INTO messages VALUES (110.5, 'app1', 7, 7, 3, 'send', 10, 'a:1', 'b:2')")
    trace.commit()
    trace.close()
    src = {("web", "/w/run.db"): _node_db(tmp_path / "web-src.db", [10.0, 10.1], [(1, "tcp:1", 10.0, None)], []),
           ("app1", "/a/run.db"): _node_db(tmp_path / "app1-src.db", [110.0, 110.1], [(1, "tcp:2", 110.1, None)], []),
           ("app1", "/a/trace.db"): tmp_path / "trace-src.db"}
    said = []

    class Node:
        def __init__(self, name):
            self.name = name
            self.p = SimpleNamespace(python="python3")

        def run(self, argv, check=True, timeout=30.0):
            return None

        def exists(self, remote):
            return (self.name, remote) in src

        def get(self, remote, local):
            local.write_bytes(src[(self.name, remote)].read_bytes())

    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    create_db(run_dir / "run.db").close()
    (run_dir / "manifest.json").write_text(json.dumps({"clock_offsets": {"nodes": {"web": {"offset": 0.0},
                                                                                  "app1": {"offset": -100.0}}}}))
    fetched_logs = []
    monkeypatch.setattr(cleanup_mod, "fetch_logs", lambda node, remote, local: fetched_logs.append((node.name, remote)))
    salvages = [{"node": "web", "db": "/w/run.db", "logs": "/w/logs", "kind": "collector"},
                {"node": "app1", "db": "/a/run.db", "logs": "/a/logs", "kind": "collector"},
                {"node": "app1", "db": "/a/trace.db", "logs": "/a/logs", "kind": "trace"}]
    bring_back({"web": Node("web"), "app1": Node("app1")}, salvages, RunDir(run_dir), said.append)
    assert said == ["cleanup: brought back 2 snapshot(s) from web, app1 and the message traces of app1"]
    db = sqlite3.connect(run_dir / "run.db")
    assert [(k, round(b, 6)) for k, b in db.execute("SELECT key, born FROM modules ORDER BY id")] == \
        [("tcp:1", 10.0), ("tcp:2", 10.1)]
    assert [round(m, 6) for (m,) in db.execute("SELECT mono FROM messages")] == [10.5]
    assert fetched_logs == [("web", "/w/logs"), ("app1", "/a/logs")]


def test_the_ledger_lists_every_nodes_recording_for_cleanup(tmp_path, monkeypatch):
    from harness import ledger as ledger_mod

    monkeypatch.setattr(ledger_mod, "LEDGER_DIR", tmp_path / "ledgers")
    lg = ledger_mod.Ledger("r1", tmp_path / "run")
    lg.set_salvage("web", "/w/run.db", "/w/logs")
    lg.set_salvage("app1", "/a/run.db", "/a/logs")
    lg.set_salvage("app1", "/a/trace.db", "/a/logs", kind="trace")
    lg.set_salvage("app1", "/a/run.db", "/a/logs")          # once per node and kind
    remote = json.loads(lg.path.read_text())["remote"]
    assert [(e["node"], e["kind"]) for e in remote["salvages"]] == [("web", "collector"), ("app1", "trace"),
                                                                     ("app1", "collector")]
    assert remote["salvage"] == {"node": "web", "db": "/w/run.db", "logs": "/w/logs"}   # what older readers read

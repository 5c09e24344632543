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
    # the reference's as they are; app1's after them, born and died on the grid's snapshots
    assert mods == [(1, "tcp:1", 10.0, None), (2, "tcp:1", 10.0, 10.3), (3, "app:7", 10.1, None)]
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

"""The live diagnosis (analysis.live, docs/live.md): hand-made runs grown snapshot by snapshot the way the
collector writes them (tests/support/grow.py), the online engine refreshed as they grow, and what it
settled compared with the offline diagnosis of the finished run, cell by cell."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.live import LiveEngine
from analysis.model.stretches import DIRS, load_stretches
from nestlab.cli import nestlab_main
from nestlab.commands.top import frame
from nestlab.live_line import LiveProgress
from tests.support.grow import Grower
from tests.support.live import differences, grow_and_watch, lag_exceptions, offline, outside_the_rule
from tests.support.runs import T0, RunBuilder, edit_db, make_run
from tests.support.synthetic import synthetic_run


@pytest.mark.parametrize("step", [1, 3, 10])
@pytest.mark.parametrize("variant", ["flowdiagnoser:theta=2", "flowdiagnoser:confirm=2", "nest-cf", "peer",
                                     "flowdiagnoser:shared=on"])
def test_online_equals_offline_while_a_run_grows(tmp_path, step, variant):
    src, _, _ = make_run(tmp_path / "src", n=60)
    engine = grow_and_watch(src, tmp_path / "live", step, variant)
    off = offline(src, variant)
    assert len(off) == 60
    assert differences(engine.history, off) == []


def glitchy_run(path, n=70):
    """Counters that go backwards (thesis 3.4: one low value, two in a row, a falling chain) and wait_ms
    read a little low (the interceptor's jitter, absorbed) or a lot low (a decrease)."""
    b = RunBuilder(path, n)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    app = b.module("app", "app:1", {"pid": 1})
    sock = b.module("socket", "sock:1:3:9", {"pid": 1})
    tcp = b.module("tcp", "tcp:9", {"inode": 9})
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    tm = np.where(np.arange(n) % 9 < 4, 0.0, 5.0)    # bursts and silences
    wait = np.where(tm == 0, 100.0, 3.0)
    for k in (15, 40, 41, 42):
        wait[k] = -0.02                               # jitter: absorbed
    wait[50] = -0.3                                   # a real decrease
    b.counters(app, "in", tm, wait=wait)
    b.counters(sock, "in", tm, wait=wait)
    b.counters(tcp, "in", tm * 4, queued=0)
    b.counters(ip, "in", tm * 4 + 1)
    b.counters(ip, "out", 1.0)
    total = np.cumsum(tm * 4)
    for s, v in {10: total[10] - 30, 20: total[20] - 40, 21: total[21] - 50, 30: total[30] - 5, 31: total[31] - 9,
                 32: total[32] - 13, 33: total[33] - 14}.items():
        b.raw[(tcp, "in", s)] = int(v)
    return b.write()


@pytest.mark.parametrize("step", [1, 2, 5, 7])
def test_counter_decreases_and_wait_jitter_give_the_offline_deltas(tmp_path, step):
    """The deltas the engine diagnoses are the offline ones after every refresh, wherever a decrease or
    a jitter chain falls relative to the refreshes; and so are the results."""
    src = glitchy_run(tmp_path / "src")
    full = load_stretches(src)
    by_seq = {}
    for st in full.stretches:
        for c, seq in enumerate(st.seqs.tolist()):
            by_seq[seq] = (st, c)
    assert any(st.counters["in"].invalid[:, 1:].any() for st in full.stretches)   # the glitches are there
    checked = []

    def same_deltas(engine):
        if not engine.buf["in"]:
            return
        w0 = int(min(c["pos"].min() for c in engine.buf["in"] if len(c["pos"])))
        for st in engine._window(w0, len(engine.seqs)):
            for c, seq in enumerate(st.seqs.tolist()):
                ost, oc = by_seq[seq]
                rows = [ost.modules.index(m) for m in st.modules]
                for d in DIRS:
                    for f in ("tm", "wait", "has_wait", "queued", "has_queue", "errors", "has_errors"):
                        np.testing.assert_array_equal(getattr(st.counters[d], f)[:, c],
                                                      getattr(ost.counters[d], f)[rows, oc], err_msg=f"{seq} {d} {f}")
                checked.append(seq)

    engine = grow_and_watch(src, tmp_path / "live", step, check=same_deltas)
    assert set(checked) >= set(range(1, 70 - 10))
    assert differences(engine.history, offline(src)) == []


def test_a_synthetic_run_with_churn_and_glitches(tmp_path):
    src = synthetic_run(tmp_path / "src", seconds=60, churn_s=8, conns=4, seed=5)
    engine = grow_and_watch(src, tmp_path / "live", 10)
    off = offline(src)
    assert len(off) == 600
    assert differences(engine.history, off) == []


def test_tcp_state_variant(tmp_path):
    src, mods, _ = make_run(tmp_path / "src", n=60)
    conn = sqlite3.connect(src / "run.db")
    # Every third snapshot a row: TCP stuck (backoff 1) or at ease (nothing to say, recent ACKs, 1 s RTO).
    rows = [(s, m, s % 2, 0, 0, 0, 1_000_000, T0 + s * 0.1 - 0.01, None, T0 + s * 0.1 - 0.01)
            for s in range(0, 60, 3) for m in (mods["wget"][2], mods["iperf"][2])]
    conn.executemany("INSERT INTO tcp_info (seq, module, backoff, ca_state, retransmits, probes, rto_us, "
                     "data_sent_at, data_recv_at, ack_recv_at) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    conn.commit()
    conn.close()
    engine = grow_and_watch(src, tmp_path / "live", 4, "flowdiagnoser:tcpstate=on")
    off = offline(src, "flowdiagnoser:tcpstate=on")
    assert off != offline(src)   # the state changes results, so the comparison below means something
    assert differences(engine.history, off) == []


def late_socket_run(path, n=40):
    """A TCP connection seen from seq 5, its socket (its upper layer) only from seq 12: detached before."""
    b = RunBuilder(path, n)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    tcp = b.module("tcp", "tcp:9", {"inode": 9}, born=5)
    app = b.module("app", "app:1", {"pid": 1}, born=12)
    sock = b.module("socket", "sock:1:3:9", {"pid": 1}, born=12)
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    b.counters(ip, "in", 10.0)
    b.counters(tcp, "in", np.where(np.arange(n - 5) < 10, 0.0, 8.0), queued=0)
    for m in (app, sock):
        b.counters(m, "in", 2.0, wait=5.0)
    return b.write(), tcp


def test_the_lag_covers_a_late_upper_layer_and_a_short_one_does_not(tmp_path):
    """Offline, the connection is detached (DONTCARE) until its socket appears; online it is a root with
    work (STALLED) until the engine has seen the socket. With a 1 s lag (10 snapshots) the engine sees it
    before it settles seq 5; with 0.2 s the snapshots the socket came more than 2 snapshots after differ,
    and only those: the exception docs/live.md states."""
    src, tcp = late_socket_run(tmp_path / "src")
    off = offline(src)
    assert off[5][(tcp, "in")] == ("DONTCARE", False)
    assert differences(grow_and_watch(src, tmp_path / "a", 1, lag_s=1.0).history, off) == []
    short = differences(grow_and_watch(src, tmp_path / "b", 1, lag_s=0.2).history, off)
    assert outside_the_rule(short, lag_exceptions(src, 2)) == []
    late = [seq for seq, cells in short if (tcp, "in") in cells]
    assert late == [5, 6, 7, 8, 9]
    assert all(cells[(tcp, "in")] == (("DONTCARE", False), ("STALLED", True)) for seq, cells in short if seq in late)
    # The interface below it follows (the connection's assumed work passes the blame down), and before
    # the connection exists the interface is the same case itself: its first parent comes at seq 5.
    assert {seq for seq, cells in short if seq not in late} == {1, 2}


def test_a_connection_that_outlives_its_socket_stays_detached(tmp_path):
    """After close() the connection lingers without its socket: detached (it had a parent) however long
    ago the engine saw that parent, not a root with work."""
    b = RunBuilder(tmp_path / "src", 60)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    tcp = b.module("tcp", "tcp:9", {"inode": 9})
    app = b.module("app", "app:1", {"pid": 1}, died=15)
    sock = b.module("socket", "sock:1:3:9", {"pid": 1}, died=15)
    for p, c in ((app, sock), (sock, tcp), (tcp, ip)):
        b.edge(p, c)
    b.counters(ip, "in", 10.0)
    b.counters(tcp, "in", np.where(np.arange(60) < 15, 8.0, 0.0), queued=0)
    for m in (app, sock):
        b.counters(m, "in", 2.0, wait=5.0)
    src = b.write()
    off = offline(src)
    assert off[50][(tcp, "in")] == ("DONTCARE", False)
    assert differences(grow_and_watch(src, tmp_path / "live", 1).history, off) == []


def _digest(path):
    """run.db and its WAL (run.db-shm is SQLite's shared-memory index, which every WAL reader maps)."""
    return {n: hashlib.sha256((path / n).read_bytes()).hexdigest() for n in ("run.db", "run.db-wal")}


def test_reading_is_incremental_and_never_writes(tmp_path):
    src, _, _ = make_run(tmp_path / "src", n=60)
    grower = Grower(src, tmp_path / "live")
    grower.grow(29)
    with LiveEngine(tmp_path / "live") as engine:
        engine.refresh()
        reads = []
        real = engine.reader._fetch

        def counting(sql, args):
            a = real(sql, args)
            reads.append(len(a))
            return a

        engine.reader._fetch = counting
        before = _digest(tmp_path / "live")
        engine.refresh()
        assert reads == [] and _digest(tmp_path / "live") == before   # nothing new: no counters query at all
        grower.grow(34)
        engine.refresh()
        (n,) = sqlite3.connect(tmp_path / "live" / "run.db").execute(
            "SELECT count(*) FROM counters WHERE seq BETWEEN 30 AND 34").fetchone()
        assert reads[-1] == n > 0
        with pytest.raises(sqlite3.OperationalError, match="readonly"):
            engine.reader.conn.execute("INSERT INTO events (mono, kind) VALUES (1, 'x')")
    grower.close()


def test_a_finished_run_shows_its_last_snapshot_and_agrees(tmp_path):
    """A finished run is settled to its end at once; RunBuilder writes counters module by module (not in
    seq order), which the reader notices and reads by seq."""
    src, _, _ = make_run(tmp_path / "run", n=60)
    with LiveEngine(src, history=True) as engine:
        view = engine.refresh()
        assert not engine.reader.ordered
    assert view.final and view.seq == 59 and view.status == "complete"
    assert differences(engine.history, offline(src)) == []


def test_top_batch_frames_at_a_time(tmp_path, capsys):
    """`--at 2.5`: the connection fault (2.05 s to 2.8 s) is in force and its connection STALLED for 0.5 s
    (since seq 21); STALLED lines first, the longest first."""
    src, mods, _ = make_run(tmp_path / "run", n=60)
    assert nestlab_main(["top", str(src), "-b", "-n", "2", "-d", "0.05", "--at", "2.5"]) == 0
    out = capsys.readouterr().out
    assert out.count("nestlab top - ") == 2
    lines = out.split("\n\nnestlab top - ")[0].splitlines()
    assert lines[0].startswith("nestlab top - run (hand)  complete  t 2.5 s")
    assert "diagnosed to seq 25 (t 2.5 s)" in lines[1]
    assert lines[3] == "Faults: 1 active, 1 begun" and lines[4].startswith("  tcp_drop tcp:100")
    assert f"(module {mods['wget'][2]})" in lines[4]
    table = [x.split() for x in lines[lines.index(next(x for x in lines if x.startswith("KIND"))) + 1:]]
    assert ["tcp", "in", "STALLED", "0.5s"] == next(x for x in table if x[-1] == "tcp:100")[:4]
    stalled = [x for x in table if x[2] == "STALLED"]
    assert table[:len(stalled)] == stalled
    assert [float(x[3][:-1]) for x in stalled] == sorted((float(x[3][:-1]) for x in stalled), reverse=True)


def test_top_batch_on_a_finished_run_ends_after_its_one_frame(tmp_path, capsys):
    src, _, _ = make_run(tmp_path / "run", n=60)
    for at in ([], ["--at", "2.5"]):
        assert nestlab_main(["top", str(src), "-b", "-d", "0.05", *at]) == 0
        assert capsys.readouterr().out.count("nestlab top - ") == 1


def test_top_refuses_bad_options(tmp_path, capsys):
    src, _, _ = make_run(tmp_path / "run", n=20)
    assert nestlab_main(["top", str(src), "-d", "0"]) == 2
    assert nestlab_main(["top", str(tmp_path / "nothing")]) == 2
    assert "no run.db here" in capsys.readouterr().err


def test_frame_fits_the_screen(tmp_path):
    src, _, _ = make_run(tmp_path / "run", n=60)
    with LiveEngine(src) as engine:
        lines = frame(engine.refresh(), 50, 9)
    assert len(lines) == 9 and max(map(len, lines)) <= 50


def test_progress_line_and_its_failure(tmp_path):
    src, mods, _ = make_run(tmp_path / "src", n=60)
    grower = Grower(src, tmp_path / "live")
    events = []
    with LiveProgress(tmp_path / "live", lambda message: events.append(("warning", message))) as progress:
        for upto in range(0, 38, 2):
            grower.grow(upto)
            progress.refresh()
        line = progress.line(200)
        assert line.startswith(f"  STALLED at t {progress.view.mono - T0:.1f} s: ")
        assert "tcp:100 (in" in line
        assert progress.line(40) == line[:40]
        grower.grow(40)
        progress.engine.reader.conn.close()    # anything going wrong: off, one warning, the run goes on
        progress.refresh()
        progress.refresh()
        assert progress.off and progress.line() == "" and len(events) == 1 and "live diagnosis" in events[0][1]
    grower.close()


def test_stalls_by_design_are_hidden_unless_asked_for(tmp_path, capsys):
    """The wget (download-only) app is STALLED outbound and the iperf (upload-only) one inbound by
    design (their workloads never use that direction): top lists the fault's target first and hides
    them unless --all; the progress line counts them apart."""
    src, mods, _ = make_run(tmp_path / "run", n=60)
    with LiveEngine(src, at_seq=25) as engine:
        view = engine.refresh()
    expected = {(r.module, r.dir) for r in view.by_design}
    assert {(mods["wget"][0], "out"), (mods["iperf"][0], "in")} <= expected
    assert not expected & {(r.module, r.dir) for r in view.stalled}
    assert view.stalled[0].name == "tcp:100"                        # the fault's target comes first
    assert nestlab_main(["top", str(src), "-b", "-n", "1", "--at", "2.5"]) == 0
    hidden = capsys.readouterr().out
    assert f"; {len(expected)} stalled by design hidden (--all shows them)" in hidden
    assert nestlab_main(["top", str(src), "-b", "-n", "1", "--at", "2.5", "--all"]) == 0
    shown = capsys.readouterr().out
    assert len(shown.splitlines()) == len(hidden.splitlines()) + len(expected)
    with LiveProgress(src, lambda message: None) as progress:
        progress.engine = LiveEngine(src, at_seq=25)
        progress.refresh()
        assert progress.line(500).endswith(f"(+{len(expected)} by design)")


# ----------------------------------------------------------------------------- reading a long run, damaged runs, hostile names

class _Counting:
    """A connection that counts the tcp_info rows it hands over."""

    def __init__(self, conn):
        self.conn, self.tcp_rows = conn, 0

    def execute(self, sql, args=()):
        cur = self.conn.execute(sql, args)
        if "FROM tcp_info" in sql:
            rows = cur.fetchall()
            self.tcp_rows += len(rows)
            return SimpleNamespace(fetchall=lambda: rows, fetchone=lambda: rows[0] if rows else None)
        return cur

    def close(self):
        self.conn.close()


def test_the_live_reader_reads_tcp_info_incrementally(tmp_path):
    """Catching up on a long run in many reads hands over each tcp_info row about once, not every
    later row on every read (quadratic on long runs)."""
    from rundir.db import TCP_STATE_COLUMNS, create_db
    from rundir.live_reader import RunReader

    n = 2000
    conn = create_db(tmp_path / "run.db")
    conn.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", [(s, 100 + s / 10, 0) for s in range(n)])
    conn.execute("INSERT INTO modules (id, kind, name, key, born) VALUES (1, 'tcp', 'tcp', 'tcp:1', 100)")
    conn.executemany("INSERT INTO counters VALUES (?, 1, 'out', ?, NULL, 0, 0, NULL)", [(s, s) for s in range(n)])
    cols = ", ".join(TCP_STATE_COLUMNS)
    conn.executemany(f"INSERT INTO tcp_info (seq, module, {cols}) VALUES (?, 1{', ?' * len(TCP_STATE_COLUMNS)})",
                     [(s, *([s % 5] * len(TCP_STATE_COLUMNS))) for s in range(n)])
    conn.commit()
    conn.close()
    reader = RunReader(tmp_path / "run.db", tcp_state=True)
    reader.tcp_step = 64
    reader.conn = _Counting(reader.conn)
    got = []
    for upto in range(9, n, 10):                         # 200 reads of 10 snapshots each
        got.append(reader.read(upto).tcp_rows)
    reader.close()
    rows = np.concatenate(got)
    assert rows[:, 0].tolist() == list(range(n))         # every row once, in order
    assert reader.conn.tcp_rows < 2 * n + 200 * 64, reader.conn.tcp_rows


def test_top_on_a_damaged_run_is_one_line_never_a_traceback(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    edit_db(run, "UPDATE counters SET total_msgs = 'lots' WHERE rowid = 40")
    assert nestlab_main(["top", str(run), "-b", "-n", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {run}: cannot be analysed: ValueError: ")


def test_top_and_the_progress_line_neutralise_escape_sequences(tmp_path, capsys):
    from analysis.live import LiveEngine
    from nestlab.commands.top import frame
    from nestlab.live_line import LiveProgress

    run, *_ = make_run(tmp_path / "exp" / "r0")
    edit_db(run, "UPDATE modules SET name = 'conn \x1b[2J\x1b]0;pwned\x07 1' WHERE kind IN ('app', 'tcp')")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "run_id": "r0\x1b[31m", "experiment": "e\nx"}))
    with LiveEngine(run) as engine:
        lines = frame(engine.refresh(), 500)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text and len(lines) == len(text.splitlines())
    assert "conn \\x1b[2J\\x1b]0;pwned\\x07 1" in text and "r0\\x1b[31m (e\\x0ax)" in text
    with LiveProgress(run, lambda message: None) as progress:
        progress.engine = LiveEngine(run, at_seq=25)    # during the connection fault: its TCP STALLED
        progress.refresh()
        line = progress.line(500)
    assert "\x1b" not in line and "\\x1b[2J" in line

"""Message tracing (issue 33 item 3): the interceptor's message ring, with real processes under the
built library (tests/interceptor/trace_peer.py over loopback TCP and a Unix socketpair), drained by
harness/collector/tracedrain.py into a run.db, read back by rundir.traces and paired into logical
messages by analysis/paths/reconcile.py. No root, no network namespaces."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from analysis.paths.reconcile import reconcile
from harness.collector.tracedrain import TraceDrainer
from harness.interceptor import create_shm_dir, preload_env, remove_shm_dir
from harness.interceptor import ring as ringmod
from harness.interceptor.shm import HEADER_SIZE, SLOT_SIZE, shm_file
from harness.lab.tracing import traced_hosts
from rundir.db import connect, create_db
from rundir.messages import MessageWriter, drop_warnings, trace_totals
from rundir.traces import read_trace_tables
from tests.support.env import REPO
from tests.support.interceptor_kit import LIB_DIR, NEEDS_GCC

PEER = REPO / "tests" / "interceptor" / "trace_peer.py"

pytestmark = NEEDS_GCC   # the library is the `lib` fixture of tests/support/interceptor_kit.py


@pytest.fixture
def dirs():
    made = {h: create_shm_dir("nestlab-trace-test-") for h in ("alpha", "beta")}
    yield {h: str(d) for h, d in made.items()}
    for d in made.values():
        remove_shm_dir(d)


def env_for(shm_dir: str, events: int | None) -> dict[str, str]:
    return preload_env(shm_dir, env=dict(os.environ), trace_events=events)


def peer(env, *args, wait=True):
    p = subprocess.Popen([sys.executable, str(PEER), *map(str, args)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    if wait:
        out, err = p.communicate(timeout=60)
        assert p.returncode == 0, err
        assert out.strip() == "done"
    return p


def drain_into(tmp_path: Path, dirs: dict[str, str]) -> tuple[TraceDrainer, object]:
    conn = create_db(tmp_path / "run.db")
    conn.isolation_level = None
    drainer = TraceDrainer(dirs, MessageWriter(conn))
    drainer.drain(final=True)
    return drainer, conn


def tcp_exchange(dirs, events=4096):
    """The server traced on host alpha, the client on beta; returns their pids."""
    portfile = Path(dirs["alpha"]).parent / f"trace-port-{os.getpid()}-{time.monotonic_ns()}"
    server = peer(env_for(dirs["alpha"], events), "tcp-server", portfile, wait=False)
    try:
        deadline = time.monotonic() + 30
        while not portfile.exists():
            assert server.poll() is None, server.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.01)
        client = peer(env_for(dirs["beta"], events), "tcp-client", portfile.read_text())
        out, err = server.communicate(timeout=60)
        assert server.returncode == 0, err
    finally:
        portfile.unlink(missing_ok=True)
        if server.poll() is None:
            server.kill()
    return server.pid, client.pid


# ---- format ---------------------------------------------------------------------------------------

def test_ring_layout_matches_python_reader(tmp_path):
    src = tmp_path / "layout.c"
    src.write_text("""
#include <stdio.h>
#include <stddef.h>
#include "nestintercept.h"
#define F(t, m) printf("%s.%s %zu\\n", #t, #m, offsetof(struct t, m));
int main(void) {
    F(nest_header, trace_cap) F(nest_header, trace_event_size) F(nest_header, trace_off)
    F(nest_ring, head) F(nest_ring, tail) F(nest_ring, drops)
    F(nest_event, stamp) F(nest_event, tid) F(nest_event, mono_ns) F(nest_event, fd) F(nest_event, bytes)
    F(nest_event, call) F(nest_event, family) F(nest_event, lport) F(nest_event, rport)
    F(nest_event, laddr) F(nest_event, raddr)
    printf("ring %zu\\nevent %zu\\n", sizeof(struct nest_ring), sizeof(struct nest_event));
    printf("calls %d %d %d %d %d %d %d %d %d %d %d %d %d %d\\n", NEST_C_READ, NEST_C_READV, NEST_C_RECV,
           NEST_C_RECVFROM, NEST_C_RECVMSG, NEST_C_RECVMMSG, NEST_C_WRITE, NEST_C_WRITEV, NEST_C_SEND,
           NEST_C_SENDTO, NEST_C_SENDMSG, NEST_C_SENDMMSG, NEST_C_SENDFILE, NEST_C_SENDFILE64);
    return 0;
}
""")
    exe = tmp_path / "layout"
    subprocess.run(["gcc", "-I", str(LIB_DIR), "-o", str(exe), str(src)], check=True)
    lines = subprocess.run([exe], capture_output=True, text=True, check=True).stdout.splitlines()
    calls = [int(x) for x in lines[-1].split()[1:]]
    got = dict(line.split() for line in lines[:-1])
    # the Python reader's struct, field by field
    fields = ["stamp", "tid", "mono_ns", "fd", "bytes", "call", "family", "lport", "rport", "pad", "laddr", "raddr"]
    offsets, at = {}, 0
    for f, code in zip(fields, ringmod.EVENT.format[1:].replace("16s", "S"), strict=True):
        offsets[f] = at
        at += {"I": 4, "Q": 8, "i": 4, "B": 1, "H": 2, "S": 16}[code]
    assert {k: int(v) for k, v in got.items()} == {
        "nest_header.trace_cap": ringmod.TRACE_OFF, "nest_header.trace_event_size": ringmod.TRACE_OFF + 4,
        "nest_header.trace_off": ringmod.TRACE_OFF + 8,
        "nest_ring.head": ringmod.HEAD_OFF, "nest_ring.tail": ringmod.TAIL_OFF, "nest_ring.drops": ringmod.DROPS_OFF,
        **{f"nest_event.{f}": offsets[f] for f in fields if f != "pad"},
        "ring": ringmod.RING_SIZE, "event": ringmod.EVENT_SIZE}
    assert sorted(ringmod.CALLS) == sorted(calls)


# ---- every call recorded, with its bytes and endpoints ---------------------------------------------

def test_tcp_and_unix_calls_are_recorded_with_bytes_and_endpoints(lib, dirs, tmp_path):
    spid, cpid = tcp_exchange(dirs)
    peer(env_for(dirs["beta"], 4096), "unix-pair")
    drainer, conn = drain_into(tmp_path, dirs)
    conn.close()
    warnings: list[str] = []
    messages, _, _ = read_trace_tables(tmp_path, warnings)
    assert warnings == []
    by_pid = {pid: g.sort_values("mono") for pid, g in messages.groupby("pid")}

    server, client = by_pid[spid], by_pid[cpid]
    assert set(server["host"]) == {"alpha"} and set(client["host"]) == {"beta"}
    assert list(zip(server["call"], server["bytes"], strict=True)) == [
        ("recv", 100), ("send", 300), ("recv", 50), ("send", 20), ("recv", 0)]
    # the client's receives may come in pieces: their bytes add up between its sends
    sends = client[client["call"] == "send"]
    assert list(sends["bytes"]) == [100, 50]
    recv_bytes = client[client["call"] == "recv"]["bytes"]
    assert recv_bytes.sum() == 320 and (recv_bytes > 0).all()
    # one connection, its ends mirrored; the server's port is the one it listened on
    (s_local, s_remote), = set(zip(server["local"], server["remote"], strict=True))
    assert set(zip(client["local"], client["remote"], strict=True)) == {(s_remote, s_local)}
    assert s_local.startswith("127.0.0.1:") and s_remote.startswith("127.0.0.1:") and s_local != s_remote
    assert server["tid"].eq(spid).all() and server["fd"].nunique() == 1
    assert messages["mono"].between(time.clock_gettime(time.CLOCK_MONOTONIC) - 120,
                                    time.clock_gettime(time.CLOCK_MONOTONIC)).all()

    # the socketpair: parent and forked child, each its own process and ring; ends named by inode
    unix = messages[messages["local"].str.startswith("unix/")]
    assert unix["pid"].nunique() == 2 and set(unix["host"]) == {"beta"}
    ends = set(zip(unix["local"], unix["remote"], strict=True))
    assert len(ends) == 2
    (a_local, a_remote), (b_local, b_remote) = sorted(ends)
    assert (a_local, a_remote) == (b_remote, b_local) and a_local != a_remote
    assert sorted(zip(unix["call"], unix["bytes"], strict=True)) == [("recv", 7), ("recv", 10), ("send", 7),
                                                                    ("send", 10)]
    assert drainer.totals() == (4, len(messages), 0, 0)
    totals = trace_totals(tmp_path / "run.db")
    assert totals["events"] == len(messages) and totals["dropped"] == 0 and totals["processes"] == 4
    assert totals["hosts"] == {"alpha": 5, "beta": len(messages) - 5}
    assert drop_warnings(totals) == []

    # reconciliation pairs them into the exchange's logical messages
    logical, rwarn = reconcile(messages, nodes={"alpha": "server", "beta": "client"})
    tcp = logical[logical["src_endpoint"].str.startswith("127.")].reset_index(drop=True)
    assert list(zip(tcp["src"], tcp["dst"], tcp["bytes"], tcp["kind"], strict=True)) == [
        ("client", "server", 100, "call"), ("server", "client", 300, "return"),
        ("client", "server", 50, "call"), ("server", "client", 20, "return")]
    assert tcp.loc[0, "msg"] == tcp.loc[1, "msg"] != tcp.loc[2, "msg"] == tcp.loc[3, "msg"]
    assert (tcp["t_recv"] >= tcp["t_send"]).all()
    pair = logical[logical["src_endpoint"].str.startswith("unix/")]
    assert sorted(pair["bytes"]) == [7, 10] and set(pair["kind"]) == {"call", "return"}
    assert not [w for w in rwarn if "no receive seen" in w or "unpaired" in w]


# ---- a full ring: events dropped and counted exactly -----------------------------------------------

def test_a_full_ring_drops_and_counts_every_event_it_could_not_hold(lib, dirs, tmp_path):
    p = peer(env_for(dirs["alpha"], 16), "flood", 40)     # 40 sends, nobody drains: 16 fit
    drainer, conn = drain_into(tmp_path, dirs)
    rows = conn.execute("SELECT call, bytes FROM messages WHERE pid = ?", (p.pid,)).fetchall()
    traced = conn.execute("SELECT ring, events, dropped, lost FROM traced WHERE pid = ?", (p.pid,)).fetchone()
    conn.close()
    assert rows == [("send", 1)] * 16
    assert traced == (16, 16, 24, 0)
    totals = trace_totals(tmp_path / "run.db")
    assert totals["dropped"] == 24
    assert "24 event(s) dropped" in drop_warnings(totals)[0]


def test_drained_while_running_every_event_is_recorded_or_counted_dropped(lib, dirs, tmp_path):
    """A small ring drained as the process writes: recorded + dropped is exactly what it sent."""
    conn = create_db(tmp_path / "run.db")
    conn.isolation_level = None
    drainer = TraceDrainer(dirs, MessageWriter(conn))
    n = 20000
    sink = socket.create_server(("127.0.0.1", 0))     # this process is not traced: it only reads
    got = []

    def read_all():
        c, _ = sink.accept()
        got.append(sum(len(b) for b in iter(lambda: c.recv(65536), b"")))
        c.close()

    reader = threading.Thread(target=read_all, daemon=True)
    reader.start()
    p = peer(env_for(dirs["alpha"], 64), "flood", n, sink.getsockname()[1], wait=False)
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:
        drainer.drain()
        time.sleep(0.001)
    if p.poll() is None:
        p.kill()
    assert p.wait() == 0
    reader.join(30)
    sink.close()
    assert got == [n]
    drainer.drain()
    recorded, dropped = conn.execute("SELECT events, dropped FROM traced WHERE pid = ?", (p.pid,)).fetchone()
    stamps = conn.execute("SELECT count(*), sum(bytes) FROM messages WHERE pid = ? AND call = 'send'",
                          (p.pid,)).fetchone()
    monos = [m for (m,) in conn.execute("SELECT mono FROM messages WHERE pid = ? ORDER BY rowid", (p.pid,))]
    conn.close()
    assert recorded + dropped == n
    assert stamps == (recorded, recorded)
    assert recorded > 64                 # the drains freed the ring while it ran
    assert monos == sorted(monos)        # one thread: events in the order of the calls


def test_events_drained_while_run_db_is_locked_are_written_by_the_next_drain(lib, dirs, tmp_path):
    """Another writer holding run.db's lock past the busy timeout: the drained events (their ring's
    tail has moved) are kept and written by the next drain, none lost."""
    p = peer(env_for(dirs["alpha"], 64), "flood", 10)
    conn = create_db(tmp_path / "run.db")
    conn.isolation_level = None
    drainer = TraceDrainer(dirs, MessageWriter(conn))
    conn.execute("PRAGMA busy_timeout=50")
    other = create_db(tmp_path / "run.db")
    other.isolation_level = None
    other.execute("BEGIN IMMEDIATE")            # e.g. the runner's open transaction
    assert drainer.drain() == 0
    other.execute("ROLLBACK")
    other.close()
    assert drainer.drain() == 10
    rows = conn.execute("SELECT call, bytes FROM messages WHERE pid = ?", (p.pid,)).fetchall()
    traced = conn.execute("SELECT events, dropped, lost FROM traced WHERE pid = ?", (p.pid,)).fetchone()
    conn.close()
    assert rows == [("send", 1)] * 10
    assert traced == (10, 0, 0)


@pytest.mark.timeout(30)
def test_a_scribbled_ring_head_does_not_hold_the_final_drain(lib, dirs):
    """A process that wrote over its ring's head (far past what any writer reserves) costs the final
    drain at most one ring of lost places, not a walk to that head."""
    p = peer(env_for(dirs["alpha"], 16), "flood", 10)
    ring = ringmod.TraceRing(shm_file(dirs["alpha"], p.pid))
    try:
        os.pwrite(ring.fd, ringmod.U64.pack(ring.tail + 10**15), ring.ring + ringmod.HEAD_OFF)
        events = ring.drain(final=True)
        assert [(e.call, e.bytes) for e in events] == [(18, 1)] * 10
        assert (ring.read, ring.lost, ring.tail) == (10, 6, 16)
    finally:
        ring.close()


# ---- tracing off ------------------------------------------------------------------------------------

def test_tracing_off_gives_no_ring_and_no_rows(lib, dirs, tmp_path):
    p = peer(env_for(dirs["alpha"], None), "flood", 10)
    path = shm_file(dirs["alpha"], p.pid)
    assert ringmod.trace_capacity(path) == 0
    assert path.stat().st_size == HEADER_SIZE + 4096 * SLOT_SIZE      # header and slots, no ring
    drainer, conn = drain_into(tmp_path, dirs)
    assert conn.execute("SELECT count(*) FROM messages").fetchone() == (0,)
    assert conn.execute("SELECT count(*) FROM traced").fetchone() == (0,)
    conn.close()
    assert drainer.totals() == (0, 0, 0, 0)


def test_drainer_process_drains_until_stopped_and_exits_cleanly(lib, dirs, tmp_path):
    db = tmp_path / "run.db"
    create_db(db).close()
    from harness.collector.tracedrain import command

    argv = command([sys.executable], str(db), 0.05, dirs)
    d = subprocess.Popen(argv, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert d.stdout.readline().strip() == "tracedrain: ready"
        p = peer(env_for(dirs["beta"], 4096), "unix-pair")
        d.send_signal(signal.SIGTERM)
        out, err = d.communicate(timeout=60)
    finally:
        if d.poll() is None:
            d.kill()
    assert d.returncode == 0, err
    assert "4 events from 2 processes, 0 dropped, 0 lost" in out
    conn = connect(db, readonly=True, live=True)
    assert conn.execute("SELECT count(*) FROM messages WHERE pid = ?", (p.pid,)).fetchone() == (2,)
    conn.close()


# ---- the lab's choice of traced hosts; the spec ---------------------------------------------------------

def test_traced_hosts_are_the_service_tiers_and_the_monitored_host():
    from types import SimpleNamespace as NS

    svc = NS(kind="service", hosts=("client", "web", "app1", "app2", "cache", "db"))
    wget = NS(kind="wget", hosts=("site1n1", "site2n1"))
    assert traced_hosts(NS(interceptor=True, monitor="app2", workloads=[svc])) == [
        "app2", "client", "web", "app1", "cache", "db"]
    assert traced_hosts(NS(interceptor=True, monitor="site1n1", workloads=[wget])) == ["site1n1"]
    assert traced_hosts(NS(interceptor=False, monitor="site1n1", workloads=[wget])) == []


def test_spec_trace_is_off_by_default_and_bad_values_are_one_line(tmp_path, capsys):
    from harness.spec import load_spec
    from nestlab.cli import nestlab_main
    from tests.support.env import write

    base = (f"name: t\ntopology: {REPO / 'topologies' / 'dumbbell.yaml'}\nduration: 10s\nmonitor: site1n1\n"
            "workloads:\n  - {kind: wget, host: site1n1, server: site2n1}\n")
    plain = load_spec(write(tmp_path, "plain.yaml", base))
    assert plain.spec.trace is None
    on = load_spec(write(tmp_path, "on.yaml", base + "trace: messages\n"))
    assert on.spec.trace == "messages"
    assert load_spec(write(tmp_path, "off.yaml", base + "trace: off\n")).spec.trace is None
    # tracing is part of what makes a run the same run (--resume)
    assert on.digest(0) != plain.digest(0)
    # testbed nodes trace too: a drainer per traced node (harness/lab/tracing.py)
    assert load_spec(write(tmp_path, "ssh.yaml", base.replace("dumbbell.yaml", "dumbbell-ssh.yaml")
                           + "trace: messages\n")).spec.trace == "messages"
    for text, line, words in ((base + "trace: packets\n", 7, "trace: "),):
        path = write(tmp_path, "bad.yaml", text)
        assert nestlab_main(["run", str(path), "--results", str(tmp_path / "res")]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and err.startswith(f"error: {path}:{line}:"), err
        assert words in err, err
        assert not (tmp_path / "res").exists()


# ---- the delay fault's hold, by the interceptor ---------------------------------------------------------

def test_reply_delay_holds_each_reply_once_until_cleared(lib, dirs, tmp_path):
    from harness.interceptor.delay import live_files, replies_delayed, set_host_delay

    portfile = tmp_path / "port"
    server = peer(env_for(dirs["alpha"], 4096), "echo-server", portfile, wait=False)
    try:
        deadline = time.monotonic() + 30
        while not portfile.exists():
            assert server.poll() is None and time.monotonic() < deadline, server.stderr.read()
            time.sleep(0.01)
        c = socket.create_connection(("127.0.0.1", int(portfile.read_text())))

        def ask() -> float:
            t = time.monotonic()
            c.sendall(b"?")
            got = b""
            while len(got) < 3:
                got += c.recv(3 - len(got))
            assert got == b"abc"
            return time.monotonic() - t

        fast = [ask() for _ in range(3)]
        assert set_host_delay(dirs["alpha"], 0.2) == [server.pid]
        held = [ask() for _ in range(3)]
        assert set_host_delay(dirs["alpha"], 0) == [server.pid]
        after = [ask() for _ in range(3)]
        path = live_files(dirs["alpha"])[server.pid]
        assert replies_delayed(path) == 3            # one hold per reply, not per send
        c.close()
        server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
    assert max(fast) < 0.1 and max(after) < 0.1
    assert all(0.2 <= h < 0.4 for h in held), held
    drainer, conn = drain_into(tmp_path, dirs)
    ev = conn.execute("SELECT mono, call, bytes FROM messages WHERE pid = ? ORDER BY mono", (server.pid,)).fetchall()
    conn.close()
    # in the trace: each held reply's first send leaves 200 ms after its request came in
    gaps = [b[0] - a[0] for a, b in zip(ev, ev[1:], strict=False) if a[1] == "recv" and a[2] == 1 and b[1] == "send"]
    assert len(gaps) == 9
    assert [g >= 0.2 for g in gaps] == [False] * 3 + [True] * 3 + [False] * 3, gaps


def test_the_lab_traces_its_hosts_and_its_drainer_records_them_until_stopped(lib, tmp_path):
    """harness/lab/tracing.py with a stand-in backend whose nodes are this machine: every traced host
    gets an interceptor environment with the ring on, the drainer runs as its own process, and its
    totals (the manifest's `trace`) count every host's events, none dropped."""
    from types import SimpleNamespace as NS

    from harness.backends.base import Proc
    from harness.interceptor import ENV_SHM_DIR, ENV_TRACE_EVENTS
    from harness.lab.tracing import RING_EVENTS, MessageTracing
    from harness.ledger import HELD_SIGNALS

    made = []

    class Node:
        def start(self, argv, log, env=None):
            # started with the held signals blocked (as signals_held() holds them outside the main
            # thread) and not unblocked here: the drainer unblocks its own SIGTERM once it handles it
            old = signal.pthread_sigmask(signal.SIG_BLOCK, HELD_SIGNALS)
            try:
                with open(log, "ab") as out:
                    p = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                         env={**os.environ, "PYTHONPATH": str(REPO)})
            finally:
                signal.pthread_sigmask(signal.SIG_SETMASK, old)
            return Proc("web", p.pid, argv, log, time.monotonic(), p)

        def stop(self, proc, timeout):
            proc.handle.send_signal(signal.SIGTERM)
            return proc.handle.wait(timeout)

    class Backend:
        def interceptor(self, host):
            d = create_shm_dir("nestlab-trace-test-")
            made.append(d)
            return str(d), preload_env(d, env={})

        def node(self, name):
            return Node()

        def python(self, name):
            return [sys.executable]

        def separate_collectors(self):
            return False   # one drainer, in the monitored host, reads every host's directory

    spec = NS(interceptor=True, monitor="web", snapshot_interval=0.05,
              workloads=[NS(kind="service", hosts=("client", "web", "app1", "cache", "db"))])
    backend = Backend()
    client_env = {}
    _, client_env["web"] = backend.interceptor("web")           # the monitored host's, as the lab makes it
    tracing = MessageTracing(spec, backend, "mininet")
    processes = []
    try:
        tracing.add_env(client_env)
        assert sorted(client_env) == ["app1", "cache", "client", "db", "web"]
        assert {e[ENV_TRACE_EVENTS] for e in client_env.values()} == {str(RING_EVENTS)}
        assert tracing.dirs == {h: e[ENV_SHM_DIR] for h, e in client_env.items()} and len(made) == 5
        db = tmp_path / "run.db"
        create_db(db).close()
        tracing.start(str(db), tmp_path / "tracedrain.log", lambda *a: processes.append(a[2]))
        dirs = {"alpha": client_env["web"][ENV_SHM_DIR], "beta": client_env["client"][ENV_SHM_DIR]}
        spid, cpid = tcp_exchange(dirs, events=RING_EVENTS)
        tracing.stop(lambda *a: processes.append(a[2]))
        totals, warnings = tracing.outcome(db)
    finally:
        for proc in tracing.procs.values():
            proc.handle.kill()
        for d in made:
            remove_shm_dir(d)
    assert processes == ["tracedrain", "ended"] and warnings == []
    assert totals["processes"] == 2 and totals["dropped"] == 0 and totals["lost"] == 0
    assert totals["hosts"]["web"] == 5 and totals["hosts"]["client"] >= 4
    assert "tracedrain: " in (tmp_path / "tracedrain.log").read_text()

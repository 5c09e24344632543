"""The collector's probes (harness.collector.probe) on real loopback sockets: when a probe goes, what
its outcome is (answered, refused, timeout), the budget, the rows written, that probe sockets never
become modules and the remote application never sees a probe, and the spec's `probe:` switch.
Probes use raw sockets: those tests need root."""

from __future__ import annotations

import os
import select
import socket
import time

import pytest

from harness.collector.main import ModuleTracker, ProbeFeed
from harness.collector.probe import Prober, ProbeSettings, plain_remote
from harness.collector.sockdiag import TcpSource
from harness.collector.source import Observation, Report
from harness.collector.synprobe import SynProbe, syn_segment
from harness.spec import load_spec
from harness.yamlload import SpecError
from rundir.db import PROBE_COLUMNS, create_db, monotonic
from tests.support.env import REPO, write


@pytest.fixture
def listener():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    yield srv
    srv.close()


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _silent_sender(prober: Prober, port: int, seconds: float, mid: int = 1, step: float = 0.05, **kw):
    """A connection with data queued that makes no progress for `seconds`, observed every `step`."""
    q = dict(rqueue=0, wqueue=5000, rto_us=None)
    q.update(kw)
    end = monotonic() + seconds
    seq = 0
    while monotonic() < end:
        prober.observe(monotonic(), seq, [(mid, (socket.AF_INET, "127.0.0.1", port), 10, 20, q["rqueue"],
                                           q["wqueue"], q["rto_us"])])
        prober.wait(monotonic() + step)
        seq += 1
    prober.close()
    return prober.take()


def _bursts(rows):
    out = {}
    for r in rows:
        out.setdefault(r[1], []).append(dict(zip(PROBE_COLUMNS, r, strict=True)))
    return out


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_a_silent_sender_is_probed_after_the_silence_and_again_every_period(listener):
    s = ProbeSettings(after=0.2, every=0.5, timeout=1.0, count=2, remote_rate=10)
    prober = Prober(s)
    t0 = monotonic()
    rows = _silent_sender(prober, listener.getsockname()[1], 1.3)
    bursts = _bursts(rows)
    # first seen at t0, silent from then: bursts at ~0.2, ~0.7, ~1.2 s
    assert len(bursts) == 3, rows
    firsts = [b[0]["sent"] - t0 for b in bursts.values()]
    assert firsts[0] == pytest.approx(0.2, abs=0.08)
    assert firsts[1] - firsts[0] == pytest.approx(0.5, abs=0.08)
    for b in bursts.values():
        assert len(b) == 2 and {p["outcome"] for p in b} == {"answered"}
        assert len({p["sport"] for p in b}) == 2                 # two fresh source ports
        assert all(0 <= p["rtt_ms"] < 50 and p["done"] >= p["sent"] for p in b)
        assert {p["remote"] for p in b} == {f"127.0.0.1:{listener.getsockname()[1]}"}
    assert [r[0] for r in rows] == sorted(r[0] for r in rows) and len({r[0] for r in rows}) == len(rows)
    assert prober.inflight == []                                 # every probe finished and closed


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_a_closed_port_is_refused_and_still_counts_as_an_answer():
    rows = _silent_sender(Prober(ProbeSettings(after=0.1, every=5, count=1)), _closed_port(), 0.3)
    assert [r[9] for r in rows] == ["refused"] and rows[0][10] is not None


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_no_answer_is_a_timeout(listener):
    """A listener whose accept queue is full drops SYNs: the probe is not answered."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    port = full.getsockname()[1]
    held = []
    try:
        for _ in range(3):   # fill the accept queue (backlog 0 holds one; the rest wait in SYN_SENT)
            c = socket.socket()
            c.setblocking(False)
            c.connect_ex(("127.0.0.1", port))
            held.append(c)
        time.sleep(0.1)
        t0 = monotonic()
        rows = _silent_sender(Prober(ProbeSettings(after=0.1, every=5, count=1, timeout=0.4)), port, 0.2)
        assert [r[9] for r in rows] == ["timeout"] and rows[0][10] is None
        assert rows[0][8] - rows[0][7] == pytest.approx(0.4, abs=0.06)     # done - sent: the timeout
        assert monotonic() - t0 < 1.0
    finally:
        for c in (*held, full):
            c.close()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_no_probe_without_work_or_while_the_application_holds_data(listener):
    port = listener.getsockname()[1]
    assert _silent_sender(Prober(ProbeSettings(after=0.1)), port, 0.4, wqueue=0) == []    # idle, never received
    # a receiver that stopped receiving is busy unless data waits for the application to read it
    p = Prober(ProbeSettings(after=0.1, every=5, count=1, hold=10))
    remote = (socket.AF_INET, "127.0.0.1", port)
    p.observe(monotonic(), 0, [(1, remote, 10, 1, 0, 0, None)])
    p.observe(monotonic(), 1, [(1, remote, 11, 1, 0, 0, None)])         # progress, then silence
    time.sleep(0.15)
    p.observe(monotonic(), 2, [(1, remote, 11, 1, 4096, 0, None)])      # the app is not reading
    p.wait(monotonic() + 0.05)
    assert p.take() == []
    p.observe(monotonic(), 3, [(1, remote, 11, 1, 0, 0, None)])         # the app read it: now the network
    p.close()
    assert [r[9] for r in p.take()] == ["answered"]


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_rto_caps_the_wait(listener):
    """A connection whose RTO (here 120 ms) is shorter than `after` is probed after its RTO."""
    t0 = monotonic()
    rows = _silent_sender(Prober(ProbeSettings(after=5.0, every=5, count=1)), listener.getsockname()[1], 0.3,
                          rto_us=120_000)
    assert len(rows) == 1 and rows[0][7] - t0 == pytest.approx(0.12, abs=0.06)


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_budget_per_host_and_per_remote(listener):
    port = listener.getsockname()[1]
    # 6 silent connections to 6 remotes (ports), every snapshot wants a burst of 1: the host's
    # budget (4/s) lets through its bucket (4) and then 4 per second
    servers = [socket.socket() for _ in range(6)]
    try:
        for s in servers:
            s.bind(("127.0.0.1", 0))
            s.listen(8)
        p = Prober(ProbeSettings(after=0.05, every=0.05, count=1, host_rate=4, remote_rate=100))
        end = monotonic() + 1.0
        while monotonic() < end:
            p.observe(monotonic(), 0, [(k, (socket.AF_INET, "127.0.0.1", s.getsockname()[1]), 1, 1, 0, 10, None)
                                       for k, s in enumerate(servers)])
            p.wait(monotonic() + 0.05)
        p.close()
        n = len(p.take())
        assert n == 4, n        # 4 at once, and no more within the second (not a bucket's 4 + 4/s)
    finally:
        for s in servers:
            s.close()
    # one remote, two silent connections to it: they share its budget (2/s, bursts of 2 -> one a second)
    p = Prober(ProbeSettings(after=0.05, every=0.05, count=2, host_rate=100, remote_rate=2))
    end = monotonic() + 1.2
    remote = (socket.AF_INET, "127.0.0.1", port)
    while monotonic() < end:
        p.observe(monotonic(), 0, [(1, remote, 1, 1, 0, 10, None), (2, remote, 1, 1, 0, 10, None)])
        p.wait(monotonic() + 0.05)
    p.close()
    assert len(_bursts(p.take())) == 2       # one at once, one a second later


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_probe_sockets_are_never_modules():
    """A probe in flight holds its port with a bound, unconnected TCP socket; neither it nor the
    probe's half-open exchange becomes a TCP module (the dump lists live connections only)."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    held = [socket.socket() for _ in range(3)]
    try:
        for c in held:
            c.setblocking(False)
            c.connect_ex(full.getsockname())
        time.sleep(0.05)
        p = Prober(ProbeSettings(after=0.01, every=5, count=1, timeout=2))
        remote = (socket.AF_INET, "127.0.0.1", full.getsockname()[1])
        p.observe(monotonic(), 0, [(1, remote, 1, 1, 0, 10, None)])
        time.sleep(0.02)
        p.observe(monotonic(), 1, [(1, remote, 1, 1, 0, 10, None)])
        (probe,) = p.inflight
        obs = TcpSource(lambda a: None, None).poll()
        assert os.fstat(probe.syn.hold.fileno()).st_ino not in {ob.attrs.get("inode") for ob in obs}
        assert not any(f":{probe.syn.sport}>" in ob.name for ob in obs)
        assert {os.fstat(c.fileno()).st_ino for c in held} <= {ob.attrs.get("inode") for ob in obs}
        p.close()
        assert p.inflight == [] and probe.syn.sock.fileno() == -1 and probe.syn.hold.fileno() == -1
    finally:
        for c in (*held, full):
            c.close()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_remote_application_never_sees_a_probe(listener):
    """Half-open: the SYN-ACK is answered with our kernel's RST, so nothing reaches accept()."""
    rows = _silent_sender(Prober(ProbeSettings(after=0.05, every=0.1, count=2, remote_rate=100)),
                          listener.getsockname()[1], 0.5)
    assert len(rows) >= 6 and {r[9] for r in rows} == {"answered"}
    listener.settimeout(0.3)
    with pytest.raises(TimeoutError):
        listener.accept()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_ipv6():
    srv = socket.socket(socket.AF_INET6)
    try:
        srv.bind(("::1", 0))
    except OSError:
        pytest.skip("no IPv6 loopback")
    srv.listen(4)
    try:
        p = Prober(ProbeSettings(after=0.05, every=5, count=1))
        remote = (socket.AF_INET6, "::1", srv.getsockname()[1])
        p.observe(monotonic(), 0, [(1, remote, 1, 1, 0, 10, None)])
        p.wait(monotonic() + 0.1)
        p.observe(monotonic(), 1, [(1, remote, 1, 1, 0, 10, None)])
        p.close()
        (row,) = p.take()
        assert row[3] == f"[::1]:{srv.getsockname()[1]}" and row[9] == "answered"
    finally:
        srv.close()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_tracker_writes_the_probes_with_the_snapshot(tmp_path, listener):
    db = create_db(tmp_path / "run.db")
    db.isolation_level = None
    tr = ModuleTracker(db)
    prober = Prober(ProbeSettings(after=0.05, every=5, count=2), *tr.writer.next_probe_ids())
    feed = ProbeFeed(prober)
    port = listener.getsockname()[1]
    ob = Observation("tcp:7", "tcp", f"tcp 127.0.0.1:1>127.0.0.1:{port}",
                     {"in": (3, None, 0, None, 100), "out": (9, None, 5000, 0, 900)},
                     {"inode": 7, "dst": "127.0.0.1", "dport": port}, [], (0, 0, 0, 0, 200_000) + (0,) * 6)
    for _ in range(4):
        tr.record(monotonic(), time.time(), [ob], prober.take())
        feed.feed(monotonic(), tr.seq - 1, [Report([ob])], tr.ids)
        prober.wait(monotonic() + 0.05)
    prober.close()
    tr.close(monotonic(), prober.take())
    rows = db.execute("SELECT burst, module, remote, kind, seq, outcome FROM probes ORDER BY id").fetchall()
    assert rows == [(1, 1, f"127.0.0.1:{port}", "syn", 1, "answered")] * 2
    # a collector started again on the same run.db goes on with the next ids
    assert tr.writer.next_probe_ids() == (3, 2)


SPEC = """\
name: t
topology: {topo}
duration: 30s
monitor: site1n1
{probe}
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}
"""


@pytest.mark.parametrize("text, expected", [
    ("", ProbeSettings()),
    ("probe: on", ProbeSettings()),
    ("probe: off", None),
    ("probe: {after: 200ms, count: 3}", ProbeSettings(after=0.2, count=3)),
])
def test_the_spec_switch(tmp_path, text, expected):
    path = write(tmp_path, "s.yaml", SPEC.format(topo=REPO / "topologies" / "dumbbell.yaml", probe=text))
    probe = load_spec(path).spec.probe
    assert (None if probe is None else ProbeSettings(**probe.model_dump())) == expected


def test_a_bad_probe_setting_is_one_line_naming_the_field(tmp_path):
    path = write(tmp_path, "s.yaml", SPEC.format(topo=REPO / "topologies" / "dumbbell.yaml",
                                                   probe="probe: {count: 0}"))
    with pytest.raises(SpecError) as e:
        load_spec(path)
    assert "s.yaml:5" in str(e.value) and "probe.count" in str(e.value) and "\n" not in str(e.value)


def test_the_interface_counters_leave_the_probes_packets_out():
    """The probes' SYNs, answers and our kernel's RSTs are taken out of their interface's counters,
    and a cumulative counter never goes backwards for it."""
    p = Prober(ProbeSettings())
    p.traffic = {"10.0.1.1": [3, 162, 2, 148]}
    feed = ProbeFeed(p, {"10.0.1.1": "ipeth:h1-eth0"}.get)

    def iface(out, inn):
        return Observation("ipeth:h1-eth0", "ipeth", "ip+eth h1-eth0",
                           {"in": {"total_msgs": inn, "bytes": inn * 100, "errors": 0},
                            "out": {"total_msgs": out, "bytes": out * 100, "errors": 0}})

    ob, other = iface(100, 50), Observation("ipeth:lo", "ipeth", "ip+eth lo",
                                             {"in": {"total_msgs": 5, "bytes": 9, "errors": 0},
                                              "out": {"total_msgs": 5, "bytes": 9, "errors": 0}})
    feed.discount([Report([ob, other])])
    assert ob.counters["out"]["total_msgs"] == 97 and ob.counters["out"]["bytes"] == 10_000 - 162
    assert ob.counters["in"]["total_msgs"] == 48 and ob.counters["in"]["bytes"] == 5_000 - 148
    assert other.counters["in"]["total_msgs"] == 5                       # another interface: untouched
    p.traffic["10.0.1.1"][2] += 1        # an answer read a moment before the interface counted it
    ob = iface(100, 50)
    feed.discount([Report([ob])])
    assert ob.counters["in"]["total_msgs"] == 48                          # held, not 47


def _max_in_window(times, span=1.0):
    times = sorted(times)
    return max(sum(1 for u in times[i:] if u < t + span) for i, t in enumerate(times))


def _silent_many(p: Prober, remotes, seconds: float, step: float = 0.02):
    """One silent sending connection to each of `remotes`, observed every `step` for `seconds`."""
    end = monotonic() + seconds
    seq = 0
    while monotonic() < end:
        p.observe(monotonic(), seq, [(k, r, 1, 1, 0, 10, None) for k, r in enumerate(remotes)])
        p.wait(monotonic() + step)
        seq += 1
    p.close()
    return p.take()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_host_budget_holds_in_every_second_from_the_first():
    """30 silent connections to 30 remotes, bursts of 2, 10 probes/s for the host: never more than 10
    probes within one second (a token bucket let 18-20 through in the first), and the budget is used."""
    port = _closed_port()   # refused: answered at once, over loopback's whole 127/8
    remotes = [(socket.AF_INET, f"127.0.0.{k}", port) for k in range(1, 31)]
    p = Prober(ProbeSettings(after=0.02, every=0.02, count=2, host_rate=10, remote_rate=100, timeout=0.5))
    rows = _silent_many(p, remotes, 2.5)
    sent = [r[7] for r in rows]
    assert _max_in_window(sent) <= 10, _max_in_window(sent)
    assert len(rows) >= 24, len(rows)             # 10 at once, 10 a second later, 10 at 2 s
    assert {r[9] for r in rows} == {"refused"}


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_remote_budget_is_per_address_whatever_the_port():
    """Two silent connections to two ports of one address share its budget (2/s, bursts of 2)."""
    ports = [_closed_port(), _closed_port()]
    p = Prober(ProbeSettings(after=0.02, every=0.02, count=2, host_rate=100, remote_rate=2, timeout=0.5))
    rows = _silent_many(p, [(socket.AF_INET, "127.0.0.1", port) for port in ports], 1.3)
    assert len(_bursts(rows)) == 2, rows              # one at once, one a second later: not two each
    assert _max_in_window([r[7] for r in rows]) <= 2


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_windows_of_remotes_gone_quiet_are_forgotten():
    port = _closed_port()
    remotes = [(socket.AF_INET, f"127.0.1.{k}", port) for k in range(1, 101)]
    p = Prober(ProbeSettings(after=0.01, every=5, count=1, host_rate=1000, remote_rate=10, timeout=0.5))
    p.observe(monotonic(), 0, [(k, r, 1, 1, 0, 10, None) for k, r in enumerate(remotes)])
    time.sleep(0.02)
    p.observe(monotonic(), 1, [(k, r, 1, 1, 0, 10, None) for k, r in enumerate(remotes)])
    p.close()
    assert len(p.take()) == 100 and len(p.remotes) == 100
    time.sleep(1.05)
    p.observe(monotonic(), 2, [])
    assert len(p.remotes) == 0


def test_an_ipv4_mapped_remote_is_the_ipv4_remote():
    assert plain_remote((socket.AF_INET6, "::ffff:10.0.1.2", 80)) == (socket.AF_INET, "10.0.1.2", 80)
    assert plain_remote((socket.AF_INET6, "::FFFF:10.0.1.2", 80)) == (socket.AF_INET, "10.0.1.2", 80)
    assert plain_remote((socket.AF_INET6, "2001:db8::1", 80)) == (socket.AF_INET6, "2001:db8::1", 80)
    assert plain_remote((socket.AF_INET, "10.0.1.2", 80)) == (socket.AF_INET, "10.0.1.2", 80)


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_an_ipv4_mapped_remote_is_answered():
    """A dual-stack server sees its IPv4 peers as ::ffff:a.b.c.d (family AF_INET6 in the dump): the
    probe must go over IPv4, as the connection's packets do, not time out."""
    srv = socket.socket(socket.AF_INET6)
    srv.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    try:
        srv.bind(("::", 0))
    except OSError:
        pytest.skip("no IPv6")
    srv.listen(4)
    try:
        port = srv.getsockname()[1]
        p = Prober(ProbeSettings(after=0.02, every=5, count=1, timeout=0.5))
        remote = (socket.AF_INET6, "::ffff:127.0.0.1", port)
        p.observe(monotonic(), 0, [(1, remote, 1, 1, 0, 10, None)])
        time.sleep(0.03)
        p.observe(monotonic(), 1, [(1, remote, 1, 1, 0, 10, None)])
        p.close()
        (row,) = p.take()
        assert row[9] == "answered" and row[3] == f"127.0.0.1:{port}"
    finally:
        srv.close()


def _segment(src_port: int, dst_port: int) -> bytes:
    """A bare TCP ACK (no SYN: nothing answers it) from 127.0.0.1:src_port to 127.0.0.1:dst_port."""
    seg = bytearray(syn_segment(socket.AF_INET, "127.0.0.1", "127.0.0.1", src_port, dst_port, 12345))
    seg[13] = 0x10
    return bytes(seg)


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_the_kernel_filter_passes_only_the_remotes_port():
    """Packets to the probe's port from another port never reach (nor wake) the collector."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    held = [socket.socket() for _ in range(3)]
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_TCP)
    try:
        for c in held:   # a full accept queue: the probe's SYN is dropped, nothing answers it
            c.setblocking(False)
            c.connect_ex(full.getsockname())
        time.sleep(0.05)
        port = full.getsockname()[1]
        syn = SynProbe(socket.AF_INET, "127.0.0.1", port)
        try:
            for _ in range(20):
                raw.sendto(_segment(port + 1 if port < 65535 else port - 1, syn.sport), ("127.0.0.1", 0))
            time.sleep(0.05)
            assert select.select([syn.sock], [], [], 0)[0] == []
            raw.sendto(_segment(port, syn.sport), ("127.0.0.1", 0))
            assert select.select([syn.sock], [], [], 0.5)[0] == [syn.sock]
            assert syn.answer() is None           # not an answer to our SYN (no ACK of its sequence)
        finally:
            syn.close()
    finally:
        for c in (*held, full, raw):
            c.close()


class _Flood:
    """A raw socket under a flood from the remote's own address and port: always a packet waiting
    (none of them an answer), for `seconds`."""

    def __init__(self, real: socket.socket, sport: int, dport: int, seconds: float):
        self.real, self.end = real, monotonic() + seconds
        self.packet = bytes(20) + _segment(dport, sport)
        self.packet = bytes([0x45]) + self.packet[1:]

    def fileno(self):
        return self.trigger.fileno()

    def recvfrom(self, size):
        if monotonic() > self.end:
            raise BlockingIOError
        return self.packet, ("127.0.0.1", 0)

    def recv(self, size):
        return self.recvfrom(size)[0]

    def close(self):
        self.real.close()
        self.trigger.close()
        self.other.close()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_a_flood_at_the_probes_port_does_not_hold_the_collector():
    """answer() reads a bounded number of packets per call and wait() keeps its deadline, whatever
    comes in: here a packet is always waiting for 3 s, and wait() must still return at 0.2 s."""
    full = socket.socket()
    full.bind(("127.0.0.1", 0))
    full.listen(0)
    held = [socket.socket() for _ in range(3)]
    try:
        for c in held:
            c.setblocking(False)
            c.connect_ex(full.getsockname())
        time.sleep(0.05)
        port = full.getsockname()[1]
        p = Prober(ProbeSettings(after=0.01, every=5, count=1, timeout=5.0))
        remote = (socket.AF_INET, "127.0.0.1", port)
        p.observe(monotonic(), 0, [(1, remote, 1, 1, 0, 10, None)])
        time.sleep(0.02)
        p.observe(monotonic(), 1, [(1, remote, 1, 1, 0, 10, None)])
        (probe,) = p.inflight
        flood = _Flood(probe.syn.sock, probe.syn.sport, port, 3.0)
        flood.trigger, flood.other = socket.socketpair()
        flood.other.send(b"x")             # always readable, as a flooded socket is
        probe.syn.sock = flood
        t0 = monotonic()
        p.wait(t0 + 0.2)
        assert monotonic() - t0 < 0.3
        assert p.take() == [] and len(p.inflight) == 1    # still waiting for its answer
        probe.syn.close()
    finally:
        for c in (*held, full):
            c.close()


@pytest.mark.root   # raw sockets (CAP_NET_RAW)
def test_connections_given_as_unchanged_are_probed_as_if_given_in_full(listener):
    """The collector gives the prober only the connections that changed, and the ids of the others:
    a silent sender given once and then as unchanged gets the bursts it gets when given in full
    every snapshot; an idle connection given as unchanged gets none; a connection gone is forgotten."""
    port = listener.getsockname()[1]
    remote = (socket.AF_INET, "127.0.0.1", port)
    runs = []
    for full in (True, False):
        # every 0.28 s, not a whole number of 50 ms snapshots: with 0.3 the next burst fell due at the
        # very snapshot 0.3 s on, and a wake-up a fraction of a millisecond early put it one snapshot
        # later in one run and not the other (seen once in CI, under load)
        p = Prober(ProbeSettings(after=0.1, every=0.28, count=1, remote_rate=100, timeout=0.5))
        t0 = monotonic()
        for k in range(20):   # module 1: silent with data queued; module 2: idle
            conns = [(1, remote, 5, 9, 0, 4000, None), (2, remote, 3, 3, 0, 0, None)]
            if full or k == 0:
                p.observe(monotonic(), k, conns)
            else:
                p.observe(monotonic(), k, [], [1, 2])
            p.wait(t0 + (k + 1) * 0.05)
        p.observe(monotonic(), 20, [], [2])   # module 1 ended
        assert set(p.watches) == {2} and p.armed == set()
        p.close()
        runs.append([(r[2], r[7] - t0) for r in p.take()])
    assert len(runs[0]) == len(runs[1]) == 3 and {m for run in runs for m, _ in run} == {1}, runs
    for (_, a), (_, b) in zip(*runs, strict=True):   # at the same snapshots, give or take one
        assert a == pytest.approx(b, abs=0.07), runs


def test_a_retransmission_is_no_progress_for_the_prober():
    """An upload whose RTO retransmits into a dead path moves its data segments out, not its bytes
    acknowledged: the prober is given bytes received and acknowledged, so the silence, and the burst
    due `after` into it, is not restarted by each retransmission (issue 35: an upload's first burst of an
    ip_drop went ~1 s late, past the analysis's look-ahead)."""
    seen = []

    class Recording(Prober):
        def observe(self, now, seq, connections, unchanged=()):
            seen.append([c[2:4] for c in connections])

    feed = ProbeFeed(Recording(ProbeSettings()))

    def ob(segs_out, retrans, acked):
        return Observation("tcp:7", "tcp", "tcp 10.0.1.1:1>10.0.6.1:5001",
                           {"in": (3, None, 0, None, 100), "out": (segs_out, None, 5000, retrans, acked)},
                           {"inode": 7, "dst": "10.0.6.1", "dport": 5001}, [], (0, 0, 0, 0, 200_000) + (0,) * 6)

    for k, o in enumerate([ob(9, 0, 900), ob(10, 1, 900), ob(11, 2, 900), ob(12, 2, 1800)]):
        feed.feed(float(k), k, [Report([o])], {"tcp:7": 1})
    assert seen == [[(100, 900)], [(100, 900)], [(100, 900)], [(100, 1800)]]

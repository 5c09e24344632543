"""One collector, several monitored hosts (harness.collector.hosts, issue 33 item 2), on two real
network namespaces of its own (multihost-<pid>-a and -b, a veth pair between them, a TCP connection
across): every module is recorded with its host, modules of the collector's own namespace are not,
and each host's connection is the child of that host's interface. Needs root (namespaces); no
Mininet. The namespaces and processes are removed on every exit path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from harness.collector.hosts import HostArg, label, netns_inode, netns_of
from harness.collector.main import command, run
from harness.collector.source import Observation
from rundir.db import connect, create_db

ROOT = os.geteuid() == 0


def test_host_arg_round_trip_and_errors():
    h = HostArg.parse("app2=1234=/dev/shm/x")
    assert (h.name, h.pid, h.shm_dir) == ("app2", 1234, "/dev/shm/x")
    assert HostArg.parse(h.argv()) == h
    assert HostArg.parse("web=7") == HostArg("web", 7, None)
    for bad in ("web", "web=", "=12", "web=x1"):
        with pytest.raises(ValueError, match="NAME=PID"):
            HostArg.parse(bad)


def test_command_names_every_host():
    argv = command(["py"], "run.db", 0.1, None, (), None, [HostArg("web", 5, "/s/w"), HostArg("db", 6)])
    assert argv[argv.index("--host") + 1] == "web=5=/s/w"
    assert argv.count("--host") == 2 and argv[-1] == "db=6"


def test_label_once():
    ob = Observation("tcp:1", "tcp", "tcp 1.2.3.4:5>6.7.8.9:10", {}, {"pid": 3})
    label(ob, "app1")
    label(ob, "app1")
    assert ob.name == "app1: tcp 1.2.3.4:5>6.7.8.9:10" and ob.attrs == {"pid": 3, "host": "app1"}


def sh(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True)


@pytest.fixture
def two_hosts():
    """Two namespaces joined by a veth pair, a listener in b, a client in a holding a connection to
    it, and a sleeper per namespace (the pid the collector enters by)."""
    tag = f"multihost-{os.getpid() % 100000}"
    a, b = f"{tag}-a", f"{tag}-b"
    procs: list[subprocess.Popen] = []
    made: list[str] = []
    try:
        for ns in (a, b):
            sh("ip", "netns", "add", ns)
            made.append(ns)
        sh("ip", "link", "add", "mhA0", "netns", a, "type", "veth", "peer", "name", "mhB0", "netns", b)
        for ns, dev, addr in ((a, "mhA0", "10.77.0.1/24"), (b, "mhB0", "10.77.0.2/24")):
            sh("ip", "-n", ns, "addr", "add", addr, "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        server = ("import socket,time; s=socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); "
                  "s.bind(('10.77.0.2', 7777)); s.listen(); c,_=s.accept(); time.sleep(60)")
        client = ("import socket,time\nfor _ in range(100):\n    try:\n        c=socket.create_connection(('10.77.0.2', 7777)); break\n"
                  "    except OSError: time.sleep(0.05)\nc.sendall(b'x'*1000); time.sleep(60)")
        for ns, code in ((b, server), (a, client), (a, "import time; time.sleep(60)"), (b, "import time; time.sleep(60)")):
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code]))
            time.sleep(0.2)
        yield (a, procs[2].pid), (b, procs[3].pid)
    finally:
        for p in procs:
            p.kill()
            p.wait()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)


@pytest.mark.skipif(not ROOT, reason="needs root (network namespaces)")
def test_one_collector_records_two_hosts(two_hosts, tmp_path):
    (a, pid_a), (b, pid_b) = two_hosts
    assert netns_inode(pid_a) != netns_inode(pid_b) != netns_inode("self")
    db_path = tmp_path / "run.db"
    create_db(db_path).close()
    run(str(db_path), 0.05, max_snapshots=6, hosts=[HostArg("hostA", pid_a), HostArg("hostB", pid_b)])
    db = connect(db_path, readonly=True)
    rows = db.execute("SELECT id, kind, name, key, attrs FROM modules").fetchall()
    edges = set(db.execute("SELECT parent, child FROM edges").fetchall())
    snaps = db.execute("SELECT count(*) FROM snapshots").fetchone()[0]
    db.close()
    assert snaps == 6
    mods = {key: (mid, kind, name, json.loads(attrs)) for mid, kind, name, key, attrs in rows}
    # every module belongs to one of the two hosts, none to the collector's own namespace
    assert {m[3].get("host") for m in mods.values()} == {"hostA", "hostB"}
    assert set(k for k in mods if k.startswith("ipeth:")) == {"ipeth:mhA0", "ipeth:mhB0"}
    assert mods["ipeth:mhA0"][3]["host"] == "hostA" and mods["ipeth:mhA0"][2] == "hostA: ip+eth mhA0"
    assert mods["ipeth:mhB0"][3]["host"] == "hostB"
    tcps = [m for m in mods.values() if m[1] == "tcp"]
    by_host = {m[3]["host"]: m for m in tcps}
    assert set(by_host) == {"hostA", "hostB"}, tcps   # the connection, seen from each end
    assert by_host["hostA"][3]["dport"] == 7777 and by_host["hostB"][3]["sport"] == 7777
    # each connection's lower layer is its own host's interface, never the other's (tcp -> ipeth)
    for host, own, other in (("hostA", "ipeth:mhA0", "ipeth:mhB0"), ("hostB", "ipeth:mhB0", "ipeth:mhA0")):
        tcp_id = by_host[host][0]
        assert (tcp_id, mods[own][0]) in edges and (tcp_id, mods[other][0]) not in edges, (host, edges)


@pytest.mark.skipif(not ROOT, reason="needs root (network namespaces)")
def test_netns_of_returns_home(two_hosts):
    (_, pid_a), _ = two_hosts
    home = os.stat("/proc/thread-self/ns/net").st_ino
    with netns_of(pid_a):
        assert os.stat("/proc/thread-self/ns/net").st_ino == netns_inode(pid_a)
    assert os.stat("/proc/thread-self/ns/net").st_ino == home
    with pytest.raises(RuntimeError), netns_of(pid_a):
        raise RuntimeError("inside")
    assert os.stat("/proc/thread-self/ns/net").st_ino == home


@pytest.mark.skipif(not ROOT, reason="needs root (network namespaces)")
def test_a_hosts_sources_stay_in_its_namespace_after_setup(two_hosts):
    """The interface source made inside a host's namespace refreshes its addresses (every few seconds
    of a run) from there, though the collector is back in its own namespace."""
    from harness.collector.hosts import host_sources

    (_, pid_a), _ = two_hosts
    h = host_sources(HostArg("hostA", pid_a))
    try:
        before = dict(h.iface.addresses)
        assert before.get("10.77.0.1") == "ipeth:mhA0" and set(before.values()) == {"ipeth:mhA0"}
        h.iface.refresh_addresses()
        assert h.iface.addresses == before
        assert [ob.key for ob in h.iface.poll()] == ["ipeth:mhA0"]
        tcp = [ob for ob in h.poll({}) if ob.kind == "tcp"]
        assert len(tcp) == 1 and tcp[0].attrs["host"] == "hostA" and tcp[0].children == ["ipeth:mhA0"]
    finally:
        h.close()

"""The fabric study on "testbed nodes" over SSH (issue 45): the k = 4 fat-tree placed on SSH nodes
(topologies/fattree-ssh.yaml), the SSH backend replacing the testbed's single-path static routes with
multipath routes hashed on the 5-tuple, giving every router its own hash seed, turning tail loss
probes off on the hosts, running NetBouncer's probers, and putting every route and sysctl back at the
end.

The first tests need neither root nor a testbed: the topology file, what each node is checked for.
The last builds tests/support/sshd_testbed.py's sshd testbed of the fat-tree (36 sshd servers in Mininet
nodes), first undoing what the Mininet backend set on it (multipath routes, seeds, hash policy) so
that the nodes look like a testbed's (one next hop per destination, the kernel's defaults), and runs
a fabric spec with a link down over SSH: root and slow, about 3 minutes here.

    sudo .venv/bin/pytest -q -m root tests/test_ssh_fabric.py
"""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess

import pytest

from harness.backends.ssh import multipath, provision
from harness.fabric import hash_seeds
from harness.routing import multipath_routers, multipath_routes
from harness.spec import load_spec
from harness.topology import load_topology
from tests.support.env import REPO, run_id, write
from tests.support.sshd_testbed import cleanup, e2e, nodes_left_as_found, run_traces, sshd_testbed

FATTREE = REPO / "topologies" / "fattree.yaml"
FATTREE_SSH = REPO / "topologies" / "fattree-ssh.yaml"
HOSTS = [f"h{k}" for k in range(1, 17)]
MONITORED = ["h1", "h2", "h5", "h6", "h9", "h10", "h13", "h14"]   # two per pod: a collector per node
# Without the interceptor (the fabric's diagnosers read TCP counters and retransmissions): built on 8
# stand-in nodes sharing this machine's two cores it took 25 s of each run; test_ssh_service_e2e
# builds it over SSH.
SPEC = f"""\
name: e2e_ssh_fabric
topology: {FATTREE}
duration: 30s
seed: 5
monitor: [{", ".join(MONITORED)}]
probe: off
interceptor: false
workloads: [{{kind: mesh, flows: 4, rate: 1Mbit}}]
faults:
  - {{kind: link_down, link: [a1, c1], schedule: {{at: [10s], duration: 10s}}}}
"""


def test_the_ssh_fat_tree_is_the_fat_tree_on_nodes():
    ssh, mininet = load_topology(FATTREE_SSH), load_topology(FATTREE)
    assert ssh.backend == "ssh"
    assert list(ssh.spec.nodes) == list(mininet.spec.nodes)
    assert [(lk.a, lk.b) for lk in ssh.spec.links] == [(lk.a, lk.b) for lk in mininet.spec.links]
    assert {n: v.site for n, v in ssh.spec.nodes.items()} == {n: v.site for n, v in mininet.spec.nodes.items()}
    assert hash_seeds(ssh) == hash_seeds(mininet) and len(hash_seeds(ssh)) == 20
    # the edge and aggregation routers have multipath routes; the cores reach each pod over one link
    assert sorted(multipath.routers(ssh)) == sorted(r for r in ssh.routers if not r.startswith("c"))


def test_the_fabric_suite_loads_on_the_ssh_fat_tree_and_each_node_is_checked_for_its_part(tmp_path):
    exp = load_spec(write(tmp_path, "f.yaml", SPEC), topology=FATTREE_SSH)
    spec, topo = exp.spec, exp.topology
    need = provision.needed_programs(topo, spec)
    for h in HOSTS:   # every host: iperf client and server, the prober (the package), its TLP sysctl
        assert {"iperf", "ss", "tar", "sysctl", "python3"} <= need[h] and "gcc" not in need[h], h
    for r in multipath_routers(topo):
        assert "sysctl" in need[r] and "iperf" not in need[r]
    assert provision.package_nodes(spec, topo) == {h: False for h in HOSTS}   # no interceptor to build
    with_interceptor = spec.model_copy(update={"interceptor": True})
    assert provision.package_nodes(with_interceptor, topo) == {h: h in MONITORED for h in HOSTS}
    pairs = provision.workload_pairs(spec, topo)   # every pair of hosts in different pods, both ways
    assert len(pairs) == 16 * 12 and ("h1", "h5") in pairs and ("h1", "h2") not in pairs


def test_the_ssh_fat_tree_exports_for_emulab_and_cloudlab_with_one_warning(tmp_path, capsys):
    from nestlab.cli import nestlab_main

    assert nestlab_main(["export", "--format", "emulab", str(FATTREE_SSH), "-o", str(tmp_path / "f.ns")]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == ("warning: link16 (e1-a1), link17 (e1-a2) and 30 more: Emulab may build a 100Mb link without "
                      "delay or loss with no delay node, and then their queues of 50 packets do not apply (the "
                      "CloudLab profile forces shaping)") and len(err) == 2
    ns = (tmp_path / "f.ns").read_text()
    assert ns.count("duplex-link") == 48 and "gives each router a hash seed of its own" in ns
    assert nestlab_main(["export", "--format", "cloudlab", str(FATTREE_SSH), "-o", str(tmp_path / "f.py")]) == 0
    profile = (tmp_path / "f.py").read_text()
    compile(profile, "f.py", "exec")
    assert profile.count("\nlink(\"") == 48 and "hash seed of its own" in profile


class SysctlNode:
    """A node's /proc/sys as `cat` and `sysctl -qw` see it, for set_sysctls."""

    def __init__(self, values: dict[str, str]):
        self.name, self.values, self.calls = "r1", dict(values), []
        self.p = type("P", (), {"where": "r1 (alice@r1.example:22)"})()

    def run(self, argv, check=True, timeout=30.0, input=None, sudo=True, server=True):
        self.calls.append(argv)
        if argv[0] == "cat":
            key = argv[1].removeprefix("/proc/sys/").replace("/", ".")
            ok = key in self.values
            return subprocess.CompletedProcess(argv, 0 if ok else 1, self.values.get(key, "") + "\n", "")
        for kv in argv[2:]:
            key, value = kv.split("=")
            self.values[key] = value
        return subprocess.CompletedProcess(argv, 0, "", "")


class Undo:
    def __init__(self):
        self.entries = []

    def add_undo(self, node, argv, what):
        self.entries.append(argv)


def test_a_routers_seed_is_set_with_its_undo_and_a_kernel_without_seeds_is_refused_in_one_line():
    node, ledger = SysctlNode({"net.ipv4.fib_multipath_hash_seed": "0"}), Undo()
    multipath.set_sysctls(node, {multipath.SEED_KEY: "7"}, ledger, missing="(Linux 6.11)")
    assert node.values[multipath.SEED_KEY] == "7"
    assert ledger.entries == [["sysctl", "-qw", "net.ipv4.fib_multipath_hash_seed=0"]]
    multipath.set_sysctls(node, {multipath.SEED_KEY: "7"}, ledger, missing="(Linux 6.11)")
    assert len(ledger.entries) == 1   # a value already right is neither set nor recorded
    old = SysctlNode({})
    with pytest.raises(Exception, match=r"^r1 \(alice@r1.example:22\): ECMP needs net.ipv4.fib_multipath_hash_seed "
                                        r"\(Linux 6.11\)$"):
        multipath.set_sysctls(old, {multipath.SEED_KEY: "7"}, Undo(), missing="(Linux 6.11)")
    assert [c[0] for c in old.calls] == ["cat"]   # nothing was changed


# ---- over SSH, root -----------------------------------------------------------------------------

def as_a_testbed_left_it(net) -> None:
    """What a testbed's static routing and kernel leave: one next hop per destination, the default
    hash policy and fields, no seed (the Mininet build set them all; the run must set them again)."""
    topo = net.topo
    for r in topo.routers:
        argv = ["sysctl", "-qw", "net.ipv4.fib_multipath_hash_seed=0"]
        if r in multipath_routers(topo):
            argv += ["net.ipv4.fib_multipath_hash_policy=0", "net.ipv4.fib_multipath_hash_fields=7"]
            for dst, hops in multipath_routes(topo, None, r):
                net.in_node(r, ["ip", "route", "replace", dst, "via", hops[0][0], "dev", hops[0][1]])
        assert net.in_node(r, argv).returncode == 0


@pytest.fixture(scope="module")
def net(tmp_path_factory):
    for net in sshd_testbed(FATTREE, tmp_path_factory):
        as_a_testbed_left_it(net)
        yield net


@pytest.fixture
def clean_nodes(net):
    """The test leaves the nodes as it found them: processes, routes, rules and sysctls."""
    yield from nodes_left_as_found(net, grace=10)


ENV = {**os.environ, "PYTHONPATH": str(REPO)}


@e2e
def test_the_fabric_spec_over_ssh_sets_the_fabric_up_names_the_downed_link_and_puts_the_nodes_back(net, tmp_path,
                                                                                                   clean_nodes):
    from analysis.fabric.inputs import load_run, windows
    from analysis.fabric.score import diagnose

    state = net.node_state()
    assert "nexthop" not in state["e1"] and "hash_seed = 0" in state["e1"]
    spec = write(tmp_path, "fabric.yaml", SPEC)
    topo = net.topology_file(tmp_path / "fattree-ssh.yaml")
    r = subprocess.run(net.runner_argv(str(spec), "--topology", str(topo), "--results", str(tmp_path / "ssh")),
                       capture_output=True, text=True, timeout=600, cwd=REPO, env=ENV)
    assert r.returncode == 0, r.stderr[-3000:]
    (run,) = (tmp_path / "ssh" / "e2e_ssh_fabric").iterdir()
    assert not run_traces(run_id(run)), "the run left files or its ledger behind"
    assert net.node_state() == state, "the run did not put the routes and sysctls back"

    m = json.loads((run / "manifest.json").read_text())
    assert m["status"] == "complete" and m["backend"] == "ssh", m.get("reason")
    fabric = m["routing"]["fabric"]
    assert fabric["hash_seeds"] == hash_seeds(net.topo) and fabric["crossings_per_link"]["min"] > 0
    assert m["fabric"]["uncovered"] == [] and m["fabric"]["host_sysctls"] == {"net.ipv4.tcp_early_retrans": "0"}
    # the connections with a monitored end (a collector on half the hosts sees about 3 in 4 of the 64)
    assert m["fabric"]["connections"] >= 40
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("SELECT COUNT(*) FROM processes WHERE role = 'client'").fetchone()[0] == 64
    hosts = {json.loads(a).get("host") for (a,) in db.execute("SELECT attrs FROM modules")}
    assert hosts == set(MONITORED)
    (start, end), = db.execute("SELECT MIN(mono), MAX(mono) FROM snapshots")
    assert db.execute("SELECT COUNT(*) FROM snapshots").fetchone()[0] >= 0.9 * 30 / 0.1   # 100 ms kept
    doc = json.loads((run / "fabric.json").read_text())
    sent = [p[0] for p in doc["probes"]]
    assert len(sent) > 16 * 40 * 20 and start - 5 < min(sent) and max(sent) < end + 5   # on the run's clock
    clean = [ok for t, _path, ok in doc["probes"] if t < start + 8]
    assert sum(clean) >= 0.98 * len(clean)   # before the fault, every path's probes come back
    for _, path in doc["connections"].items():
        assert path, "a connection the routers could not trace"

    loaded = load_run(run)
    down = next(lk["index"] for lk in loaded.links if lk["name"] == "a1-c1")
    w = next(w for w in windows(loaded) if w.truth == (down,))
    verdicts = {v.diagnoser: v for v in diagnose(loaded) if v.window.start == w.start}
    assert verdicts["007"].ranked[:1] == [down] and verdicts["netbouncer"].ranked[:1] == [down]


@e2e
def test_a_sigkilled_fabric_run_is_cleaned_up_routes_seeds_and_tlp_put_back(net, tmp_path, clean_nodes):
    """`nestlab cleanup` after a SIGKILL runs the ledger's undo entries: every router's one-path routes,
    hash settings and seed, every host's TLP setting (clean_nodes compares them all, and processes)."""
    import signal

    from tests.support.sshd_testbed import end_runner, running

    state = net.node_state()
    spec = write(tmp_path, "fabric.yaml", SPEC.replace("duration: 30s", "duration: 60s"))
    with running(net, spec, tmp_path, "h1", 10, timeout=120, env=ENV) as (proc, run):
        assert net.node_state() != state   # the fabric is in place: multipath routes, seeds, TLP off
        end_runner(proc, signal.SIGKILL, timeout=10)
    assert run_traces(run_id(run)), "a SIGKILLed runner cannot clean up; there should be something to clean"
    r = cleanup(net, env=ENV)
    assert r.returncode == 0, r.stderr
    assert not run_traces(run_id(run))
    assert json.loads((run / "manifest.json").read_text())["status"] == "interrupted"

"""Fault kinds (harness/faults/): the registry, what each kind does on fake nodes and a fake backend
(commands, iptables-restore input, pause/resume calls, the rows' target and rule text, clock
conversion), and the fault-target resolution the runner and the analysis share. No root needed."""

from __future__ import annotations

import json
import random
import sqlite3
import subprocess
import typing
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

import harness.faults.iptables as iptables
from harness.backends.base import ClockOffset, Clocks
from harness.faults import (
    KINDS,
    AppPause,
    Delay,
    FaultEnv,
    Faults,
    IpDrop,
    Loss,
    NoTarget,
    PathBlackhole,
    ServerPause,
    TcpDrop,
    TierPause,
    chain_teardown_argv,
    ip_drop_rule,
    tcp_drop_rule,
)
from harness.faults.link_down import LinkDown
from harness.faults.slow import Slow
from harness.spec import Fault, Window
from harness.streams.spec import StreamsFault
from rundir.db import FAULT_KINDS, SCHEMA
from rundir.targets import resolve_fault_targets

REPO = Path(__file__).resolve().parent.parent

# What the code before the fault kinds became objects wrote (harness/faults.py and the runner's
# _start_fault): rule text, iptables specs and target JSON, byte for byte; since then the target
# also names the module it targets (module_key).
IP_RULE = ('iptables -A NESTLAB -s 10.0.1.1/32 -m comment --comment "nestlab:RUN:f1" -j DROP ; '
           'iptables -A NESTLAB -d 10.0.1.1/32 -m comment --comment "nestlab:RUN:f1" -j DROP')
IP_SPECS = ['-s 10.0.1.1/32 -m comment --comment "nestlab:RUN:f1" -j DROP',
            '-d 10.0.1.1/32 -m comment --comment "nestlab:RUN:f1" -j DROP']
TCP_RULE = ('iptables -A NESTLAB -p tcp -s 10.0.1.1/32 --sport 40000 -d 10.0.2.2/32 --dport 5001 -m comment '
            '--comment "nestlab:RUN:f3" -j DROP ; iptables -A NESTLAB -p tcp -s 10.0.2.2/32 --sport 5001 '
            '-d 10.0.1.1/32 --dport 40000 -m comment --comment "nestlab:RUN:f3" -j DROP')
TCP_SPECS = ['-p tcp -s 10.0.1.1/32 --sport 40000 -d 10.0.2.2/32 --dport 5001 -m comment --comment '
             '"nestlab:RUN:f3" -j DROP',
             '-p tcp -s 10.0.2.2/32 --sport 5001 -d 10.0.1.1/32 --dport 40000 -m comment --comment '
             '"nestlab:RUN:f3" -j DROP']
IP_TARGET = ('{"address": "10.0.1.1", "description": "all IP traffic of site1n1 (10.0.1.1)", "host": "site1n1", '
             '"module_key": "ipeth:site1n1-eth0"}')
TCP_TARGET = ('{"description": "tcp 10.0.1.1:40000>10.0.2.2:5001", "dport": 5001, "dst": "10.0.2.2", "inode": 4242, '
              '"module_key": "tcp:4242", "pid": 77, "sport": 40000, "src": "10.0.1.1", "workload": 1}')
CONN = {"src": "10.0.1.1", "sport": 40000, "dst": "10.0.2.2", "dport": 5001, "inode": 4242}


# -- fakes --------------------------------------------------------------------------------------
class FakeNode:
    """A router that records every command and keeps an iptables chain the way the kernel would."""

    def __init__(self, name: str, clock: float = 1000.0):
        self.name, self.clock = name, clock
        self.calls: list[list[str]] = []
        self.inputs: list[str] = []
        self.chain: list[str] | None = None     # the NESTLAB rules; None: no chain
        self.hooks = 0                          # times FORWARD jumps to it
        self.ignore_restore = False             # a restore that "succeeds" and changes nothing

    def monotonic(self) -> float:
        self.clock += 1.0
        return self.clock

    def run(self, argv, check=True, timeout=30.0, input=None):
        self.calls.append(list(argv))
        ok = self._apply(argv, input)
        if check and not ok:
            raise subprocess.CalledProcessError(1, argv)
        out = "".join(f"-A NESTLAB {s}\n" for s in (self.chain or [])) if argv[:4] == ["iptables", "-w", "-S",
                                                                                       "NESTLAB"] else ""
        return subprocess.CompletedProcess(argv, 0 if ok else 1, stdout="-N NESTLAB\n" + out, stderr="")

    def _apply(self, argv, input) -> bool:
        if argv[0] == "iptables-restore":
            self.inputs.append(input)
            for line in [] if self.ignore_restore else input.splitlines()[1:-1]:
                op, _, spec = line.split(" ", 2)
                self.chain.append(spec) if op == "-A" else self.chain.remove(spec)
            return True
        op = argv[2:]
        if op == ["-S", "NESTLAB"]:
            return self.chain is not None
        if op == ["-N", "NESTLAB"]:
            self.chain = []
        elif op == ["-F", "NESTLAB"]:
            if self.chain is None:
                return False
            self.chain = []
        elif op == ["-X", "NESTLAB"]:
            if self.chain is None:
                return False
            self.chain = None
        elif op == ["-C", "FORWARD", "-j", "NESTLAB"]:
            return self.hooks > 0
        elif op == ["-I", "FORWARD", "1", "-j", "NESTLAB"]:
            self.hooks += 1
        elif op == ["-D", "FORWARD", "-j", "NESTLAB"]:
            if not self.hooks:
                return False
            self.hooks -= 1
        return True


class FakeBackend:
    def __init__(self, remote=False, connections=None):
        self.remote = remote
        self.nodes = {"x1": FakeNode("x1"), "x2": FakeNode("x2", 5000.0)}
        self.addresses = {"site1n1": "10.0.1.1", "site2n1": "10.0.2.1", "site2n2": "10.0.2.2"}
        self.connections = connections or {}     # pid -> the connections backend.tcp_connections gives
        self.calls: list[tuple] = []
        self.ack = 50.0

    def node(self, name):
        return self.nodes[name]

    def address(self, name):
        return self.addresses[name]

    def interfaces(self, name):
        return [SimpleNamespace(name=f"{name}-eth0", address=self.addresses[name])]

    def tcp_connections(self, node, pid):
        self.calls.append(("tcp_connections", node, pid))
        return self.connections.get(pid, [])

    def _state(self, what, node, shm_dir, pid):
        self.calls.append((what, node, shm_dir, pid))
        self.ack += 0.25
        return SimpleNamespace(pid=pid, ack_mono=self.ack, pause_signal=40, resume_signal=41)

    def pause(self, node, shm_dir, pid):
        return self._state("pause", node, shm_dir, pid)

    def resume(self, node, shm_dir, pid):
        return self._state("resume", node, shm_dir, pid)


class FakeWorkloads:
    def __init__(self, procs):
        self.procs = procs   # workload -> [(instance index, pid, argv)]

    def live(self, workload):
        return [(SimpleNamespace(index=i, workload=workload), SimpleNamespace(pid=pid, argv=argv))
                for i, pid, argv in self.procs.get(workload, [])]


class FakeLedger:
    def __init__(self):
        self.undo: list[dict] = []

    def add_undo(self, node, argv, what):
        self.undo.append({"node": node, "argv": list(argv), "what": what})

    def drop_undo(self, entry):
        self.undo = [u for u in self.undo if u != entry]


def make_env(faults, backend=None, procs=None, seed=7):
    spec = SimpleNamespace(
        monitor="site1n1", faults=[Fault(**f) for f in faults],
        workloads=[SimpleNamespace(host="site1n1", server="site2n1"),
                   SimpleNamespace(host="site1n1", server="site2n2")])
    clocks = Clocks("site1n1", nodes={"x1": ClockOffset(offset=-900.0), "x2": ClockOffset(offset=-4000.0),
                                      "site1n1": ClockOffset(offset=0.5)})
    return FaultEnv(spec, backend or FakeBackend(), clocks, FakeWorkloads(procs or {}), random.Random(seed),
                    "RUN", "/dev/shm/nestlab-x", FakeLedger())


SCHED = {"at": [10], "duration": 2}
SETUP = [["iptables", "-w", "-S", "NESTLAB"], ["iptables", "-w", "-N", "NESTLAB"],
         ["iptables", "-w", "-C", "FORWARD", "-j", "NESTLAB"], ["iptables", "-w", "-I", "FORWARD", "1", "-j", "NESTLAB"]]
TEARDOWN = [["iptables", "-w", "-D", "FORWARD", "-j", "NESTLAB"], ["iptables", "-w", "-D", "FORWARD", "-j", "NESTLAB"],
            ["iptables", "-w", "-F", "NESTLAB"], ["iptables", "-w", "-X", "NESTLAB"]]


# -- the registry -------------------------------------------------------------------------------
def test_the_registry_has_a_kind_for_every_kind_the_spec_accepts():
    assert set(KINDS) == set(typing.get_args(Fault.model_fields["kind"].annotation))
    assert KINDS == {"ip_drop": IpDrop, "tcp_drop": TcpDrop, "app_pause": AppPause, "path_blackhole": PathBlackhole,
                     "loss": Loss, "server_pause": ServerPause, "delay": Delay,
                     "tier_pause": TierPause, "slow": Slow, "link_down": LinkDown}
    # What run.db records and its readers accept: the network kinds, and a streams run's settings
    # (harness.streams.spec.StreamsFault, driven by the streams runner, not this registry).
    # (delay, tier_pause and slow came after the manifest recorded its kinds' infos: readers take it from there.)
    assert set(KINDS) | set(typing.get_args(StreamsFault.model_fields["kind"].annotation)) == \
        set(FAULT_KINDS) | {"delay", "tier_pause", "slow", "link_down"}
    for cls in KINDS.values():
        for method in ("setup", "inject", "heal", "describe", "teardown"):
            assert callable(getattr(cls, method, None)), (cls, method)


def test_the_runner_names_no_fault_kind():
    source = (REPO / "harness" / "runner.py").read_text()
    for name in KINDS:
        assert name not in source, name
    for name in ("Firewall", "_rule(", "pause(", "resume(", "tcp_connections", "NESTLAB"):
        assert name not in source, name


def test_faults_composes_one_object_per_kind_used():
    env = make_env([{"kind": "tcp_drop", "at": "x1", "target": {"workload": 1}, "schedule": SCHED},
                    {"kind": "ip_drop", "at": "x1", "schedule": SCHED},
                    {"kind": "tcp_drop", "at": "x1", "target": {"workload": 0}, "schedule": SCHED}])
    faults = Faults(env)
    assert list(faults.kinds) == ["tcp_drop", "ip_drop"]
    assert faults.of(Window(1, 10, 2)) is faults.kinds["ip_drop"]
    assert faults.of(Window(2, 10, 2)) is faults.kinds["tcp_drop"]


# -- iptables -----------------------------------------------------------------------------------
def test_rule_text_is_unchanged():
    ip = ip_drop_rule("x1", "nestlab:RUN:f1", "10.0.1.1")
    assert (ip.node, ip.tag, ip.specs, ip.describe()) == ("x1", "nestlab:RUN:f1", IP_SPECS, IP_RULE)
    tcp = tcp_drop_rule("x1", "nestlab:RUN:f3", CONN)
    assert (tcp.specs, tcp.describe()) == (TCP_SPECS, TCP_RULE)
    assert chain_teardown_argv() == ["sh", "-c", "while iptables -w -D FORWARD -j NESTLAB 2>/dev/null; do :; done; "
                                     "iptables -w -F NESTLAB 2>/dev/null; iptables -w -X NESTLAB 2>/dev/null; true"]


def test_ip_drop_injects_and_heals_through_iptables_restore():
    env = make_env([{"kind": "ip_drop", "at": "x1", "schedule": SCHED}])
    x1 = env.backend.nodes["x1"]
    faults = Faults(env)
    faults.setup()
    assert x1.calls == SETUP and x1.chain == [] and x1.hooks == 1
    kind = faults.of(Window(0, 10, 2))
    parts = kind.inject(Window(0, 10, 2), 1)
    assert len(parts) == 1
    (part,) = parts
    assert x1.inputs == ["*filter\n" + "".join(f"-A NESTLAB {s}\n" for s in IP_SPECS) + "COMMIT\n"]
    assert (part.target, part.rule) == (IP_TARGET, IP_RULE)
    assert kind.describe(part.action) == IP_RULE
    assert part.start == 1001.0 - 900.0        # verified on x1's clock, converted to the monitor's
    assert x1.chain == IP_SPECS
    assert kind.heal(part) == 1002.0 - 900.0
    assert x1.inputs[-1] == "*filter\n" + "".join(f"-D NESTLAB {s}\n" for s in IP_SPECS) + "COMMIT\n"
    assert x1.chain == []
    x1.calls.clear()
    faults.teardown()
    assert x1.calls == TEARDOWN and x1.chain is None and x1.hooks == 0
    faults.teardown()                          # idempotent
    assert x1.calls == TEARDOWN


def test_ip_drop_of_another_host_and_a_rule_that_does_not_take():
    env = make_env([{"kind": "ip_drop", "at": "x2", "host": "site2n2", "schedule": SCHED}])
    faults = Faults(env)
    faults.setup()
    kind = faults.of(Window(0, 10, 2))
    part = kind.inject(Window(0, 10, 2), 9)[0]
    assert json.loads(part.target) == {"address": "10.0.2.2", "host": "site2n2", "module_key": None,
                                       "description": "all IP traffic of site2n2 (10.0.2.2)"}
    assert '"nestlab:RUN:f9"' in part.rule and part.start == 5001.0 - 4000.0
    x2 = env.backend.nodes["x2"]
    x2.ignore_restore = True                   # the listing never shows what went in: not verified
    with pytest.raises(RuntimeError, match="still present after deletion"):
        kind.heal(part)
    with pytest.raises(RuntimeError, match="not found in place after insertion"):
        kind.inject(Window(0, 10, 2), 10)


def test_tcp_drop_takes_a_connection_of_its_workload_to_the_server_with_the_seed():
    other = {"src": "10.0.1.1", "sport": 40001, "dst": "10.0.9.9", "dport": 80}   # not to the server
    conns = {77: [other, CONN], 78: [dict(CONN, sport=40002)]}
    env = make_env([{"kind": "tcp_drop", "at": "x1", "target": {"workload": 1}, "schedule": SCHED}],
                   FakeBackend(connections=conns), {1: [(0, 77, ["iperf", "-c"]), (1, 78, ["iperf", "-c"])]})
    expected = random.Random(7).choice([(CONN, 77), (dict(CONN, sport=40002), 78)])
    faults = Faults(env)
    faults.setup()
    part = faults.of(Window(0, 10, 2)).inject(Window(0, 10, 2), 3)[0]
    target = json.loads(part.target)
    assert (target["sport"], target["pid"]) == (expected[0]["sport"], expected[1])
    assert env.backend.nodes["x1"].chain == part.action.specs


def test_tcp_drop_of_one_instance_and_with_no_connection(monkeypatch):
    conns = {77: [CONN], 78: [dict(CONN, sport=40002)]}
    env = make_env([{"kind": "tcp_drop", "at": "x1", "target": {"workload": 1, "instance": 0}, "schedule": SCHED}],
                   FakeBackend(connections=conns), {1: [(0, 77, ["iperf", "-c"]), (1, 78, ["iperf", "-c"])]})
    faults = Faults(env)
    faults.setup()
    part = faults.of(Window(0, 10, 2)).inject(Window(0, 10, 2), 3)[0]
    assert (part.target, part.rule) == (TCP_TARGET, TCP_RULE)
    monkeypatch.setattr(iptables, "TARGET_WAIT_S", 0.0)
    env.backend.connections = {}
    with pytest.raises(NoTarget, match="workload 1 had no established connection"):
        faults.of(Window(0, 10, 2)).inject(Window(0, 10, 2), 4)
    assert env.backend.nodes["x1"].chain == part.action.specs   # nothing more went in


def test_drops_on_one_router_share_its_chain_and_its_ledger_entry():
    env = make_env([{"kind": "ip_drop", "at": "x2", "schedule": SCHED},
                    {"kind": "tcp_drop", "at": "x1", "target": {"workload": 0}, "schedule": SCHED},
                    {"kind": "ip_drop", "at": "x1", "schedule": SCHED}], FakeBackend(remote=True))
    faults = Faults(env)
    faults.setup()
    x1, x2 = env.backend.nodes["x1"], env.backend.nodes["x2"]
    assert x1.calls == SETUP and x2.calls == SETUP        # once each, though two kinds use x1
    what = "remove the NESTLAB chain"
    assert env.ledger.undo == [{"node": "x1", "argv": chain_teardown_argv(), "what": what},
                               {"node": "x2", "argv": chain_teardown_argv(), "what": what}]
    x1.calls.clear()
    x2.calls.clear()
    faults.teardown()
    assert x1.calls == TEARDOWN and x2.calls == TEARDOWN and env.ledger.undo == []


def test_a_leftover_chain_is_emptied_not_made_again():
    env = make_env([{"kind": "ip_drop", "at": "x1", "schedule": SCHED}])
    x1 = env.backend.nodes["x1"]
    x1.chain, x1.hooks = ["-s 1.2.3.4/32 -j DROP"], 1
    Faults(env).setup()
    assert x1.calls == [SETUP[0], ["iptables", "-w", "-F", "NESTLAB"], SETUP[2]] and x1.chain == []


# -- app_pause ----------------------------------------------------------------------------------
def test_app_pause_pauses_every_live_process_then_resumes_each():
    procs = {1: [(0, 88, ["iperf", "-c", "10.0.2.2"]), (1, 89, ["iperf", "-c", "10.0.2.2"])]}
    env = make_env([{"kind": "app_pause", "target": {"workload": 1}, "schedule": SCHED}], procs=procs)
    faults = Faults(env)
    faults.setup()
    kind = faults.of(Window(0, 10, 2))
    parts = kind.inject(Window(0, 10, 2), 4)
    assert env.backend.calls == [("pause", "site1n1", "/dev/shm/nestlab-x", 88),
                                 ("pause", "site1n1", "/dev/shm/nestlab-x", 89)]
    assert [p.target for p in parts] == [
        '{"description": "pause pid 88 (iperf -c)", "module_key": "app:88", "pid": 88, "workload": 1}',
        '{"description": "pause pid 89 (iperf -c)", "module_key": "app:89", "pid": 89, "workload": 1}']
    assert [p.rule for p in parts] == ["signal 40 (pause) / 41 (resume) to pid 88",
                                       "signal 40 (pause) / 41 (resume) to pid 89"]
    assert [p.start for p in parts] == [50.75, 51.0]      # acknowledged on the host's clock, + its offset
    assert kind.heal(parts[1]) == 51.25
    assert env.backend.calls[-1] == ("resume", "site1n1", "/dev/shm/nestlab-x", 89)


def test_app_pause_of_one_instance_and_of_none():
    procs = {1: [(0, 88, ["iperf", "-c"]), (1, 89, ["iperf", "-c"])]}
    env = make_env([{"kind": "app_pause", "target": {"workload": 1, "instance": 1}, "schedule": SCHED},
                    {"kind": "app_pause", "target": {"workload": 0}, "schedule": SCHED}], procs=procs)
    kind = Faults(env).of(Window(0, 10, 2))
    assert [p.action.pid for p in kind.inject(Window(0, 10, 2), 1)] == [89]
    with pytest.raises(NoTarget, match="workload 0 had no live process"):
        kind.inject(Window(1, 10, 2), 2)


# -- which module a fault targets (runner and analysis) -----------------------------------------
MODULES = [(1, "app:88", 0.0), (2, "app:88@5", 6.0), (3, "tcp:555", 1.0), (4, "ipeth:site1n1-eth0", 0.0),
           (5, "app:880", 0.0)]
FAULT_ROWS = [  # id, kind, target, start
    (1, "tcp_drop", {"inode": 555, "pid": 77}, 2.0),
    (2, "app_pause", {"pid": 88}, 3.0),
    (3, "app_pause", {"pid": 88}, 7.0),           # the pid reused: the later process
    (4, "ip_drop", {"host": "site1n1"}, 4.0),
    (5, "ip_drop", {"host": "site2n2"}, 4.0),     # not observed
    (6, "tcp_drop", {"pid": 77}, 4.0),            # no inode recorded
    (7, "app_pause", {"pid": 88}, None),          # never took effect: looked up at the end
]
EXPECTED = [3, 1, 2, 4, None, None, 2]


def test_resolve_fault_targets():
    rows = [(k, t, s) for _, k, t, s in FAULT_ROWS]
    assert resolve_fault_targets(rows, MODULES, "site1n1", "site1n1-eth0", missing_start=9.0) == EXPECTED
    assert resolve_fault_targets(rows, MODULES, "site1n1", None, missing_start=9.0) == EXPECTED  # the only ipeth
    assert resolve_fault_targets(rows, MODULES + [(6, "ipeth:x", 0.0)], "site1n1", None, 9.0)[3] is None
    assert resolve_fault_targets(rows, MODULES, "site1n1", "site1n1-eth0")[6] == 2   # no end given: the latest
    assert resolve_fault_targets([("app_pause", {"pid": 88}, None)], MODULES, "site1n1", None, 3.0) == [1]
    # A kind records the key of the module it targets: resolution needs nothing else about the kind
    # (a new kind touches only its module and the spec), and the record wins over the old rules.
    assert resolve_fault_targets([("new_kind", {"module_key": "tcp:555"}, 0.5)], MODULES, "site1n1", None) == [3]
    assert resolve_fault_targets([("ip_drop", {"host": "site1n1", "module_key": None}, 4.0)], MODULES,
                                 "site1n1", "site1n1-eth0") == [None]
    assert resolve_fault_targets([("tcp_drop", {"inode": 555}, float("nan"))], MODULES, "site1n1", None, 0.5) == [3]


def _db(rows):
    db = sqlite3.connect(":memory:")
    db.executescript(SCHEMA)
    db.executemany("INSERT INTO modules (id, kind, name, key, born) VALUES (?,?,?,?,?)",
                   [(m, k.split(":")[0], k, k, b) for m, k, b in MODULES])
    db.executemany("INSERT INTO faults (id, spec_index, kind, at_node, target, start, rule) VALUES (?,0,?,'x1',?,?,'')",
                   [(i, k, json.dumps(t), s) for i, k, t, s in rows])
    return db


def test_runner_and_analysis_resolve_alike():
    from analysis.load import _resolve_faults
    from harness.lab.network import NetworkLab
    from rundir.manifest import Monitor

    db = _db(FAULT_ROWS)
    backend = SimpleNamespace(interfaces=lambda name: [SimpleNamespace(name=f"{name}-eth0")])
    run = SimpleNamespace(backend=backend, clocks=object(), db=db, spec=SimpleNamespace(monitor="site1n1"))
    NetworkLab._resolve_targets(run)
    by_runner = [m for (m,) in db.execute("SELECT target_module FROM faults ORDER BY id")]
    assert by_runner == EXPECTED

    mods = pd.DataFrame({"key": [k for _, k, _ in MODULES], "born": [b for *_, b in MODULES]},
                        index=[m for m, *_ in MODULES])
    faults = pd.DataFrame({"id": [r[0] for r in FAULT_ROWS], "kind": [r[1] for r in FAULT_ROWS],
                           "target": [r[2] for r in FAULT_ROWS], "target_module": [None] * len(FAULT_ROWS),
                           "start": [r[3] for r in FAULT_ROWS], "end": [10.0] * len(FAULT_ROWS)})
    monitor = Monitor(host="site1n1", interface="site1n1-eth0")   # the manifest's
    warnings: list[str] = []
    out = _resolve_faults(faults, mods, monitor, 9.0, warnings)
    assert [None if pd.isna(m) else int(m) for m in out["target_module"]] == EXPECTED
    # fault 5 knowingly targets another host (valid, no warning); fault 6's target lacks its inode
    assert [w.split(" ")[1] for w in warnings if "was not recorded" in w] == ["6"]
    # What the runner resolved, the analysis keeps (it only fills in the rest).
    faults["target_module"] = [5, None, None, None, None, None, None]
    out = _resolve_faults(faults, mods, monitor, 9.0, [])
    assert [None if pd.isna(m) else int(m) for m in out["target_module"]] == [5, *EXPECTED[1:]]



def test_a_chain_whose_setup_was_interrupted_is_removed_and_its_undo_kept_until_then():
    """A signal between making the chain and hooking it (or recording it ready): teardown still
    removes whatever exists on the router, and the ledger's undo entry goes only once it is gone."""
    backend = FakeBackend(remote=True)
    env = make_env([{"kind": "ip_drop", "at": "x1", "schedule": SCHED}], backend)
    chains = iptables.Chains.of(env)
    x1 = backend.node("x1")
    real_apply = x1._apply

    def interrupted(argv, input):
        if argv[2:4] == ["-I", "FORWARD"]:
            real_apply(argv, input)        # hooked, and then the signal arrives
            raise KeyboardInterrupt
        return real_apply(argv, input)

    x1._apply = interrupted
    with pytest.raises(KeyboardInterrupt):
        chains.setup(["x1"])
    assert x1.chain == [] and x1.hooks == 1 and len(env.ledger.undo) == 1   # made, hooked, recorded
    x1._apply = real_apply
    chains.teardown()
    assert x1.chain is None and x1.hooks == 0 and env.ledger.undo == []
    chains.teardown()                                   # the other kind's call: nothing left to do
    assert x1.calls[-1] == ["iptables", "-w", "-X", "NESTLAB"] and len(x1.calls) == 4 + 4


def test_loss_and_path_rules():
    from harness.faults.iptables import UnsafeValue, path_rule

    r = ip_drop_rule("x1", "nestlab:r:f1", "10.0.1.1", probability=0.05)
    assert all("-m statistic --mode random --probability 0.050000 " in s and s.endswith("-j DROP") for s in r.specs)
    conn = {"inode": 7, "src": "10.0.1.1", "sport": 4000, "dst": "10.0.6.1", "dport": 80}
    assert all("--probability 0.200000" in s for s in tcp_drop_rule("x1", "t", conn, probability=0.2).specs)
    assert all("statistic" not in s for s in tcp_drop_rule("x1", "t", conn).specs)   # a drop drops all
    r = path_rule("x1", "nestlab:r:f2", "x1-eth3")
    assert [s.split(" -m ")[0] for s in r.specs] == ["-o x1-eth3", "-i x1-eth3"]   # both directions
    with pytest.raises(UnsafeValue):
        path_rule("x1", "t", "x1-eth3 -j ACCEPT")


def test_footprints_of_the_new_kinds(tmp_path):
    """A path_blackhole may stall any workload; a server_pause every workload of its server; a
    connection's loss its workload; a host's loss, like an ip_drop, the host's workloads."""
    from harness.spec import footprint, load_spec
    from tests.support.env import REPO, write

    spec = load_spec(write(tmp_path, "s.yaml", f"""\
name: t
topology: {REPO / "topologies" / "ecmp.yaml"}
duration: 60s
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}
  - {{kind: iperf, host: site1n1, server: site2n2}}
  - {{kind: wget, host: site1n2, server: site2n1, file_size: 10MB, role: background}}
faults:
  - {{kind: path_blackhole, at: x1, path: 1, schedule: {{at: [5s], duration: 2s}}}}
  - {{kind: server_pause, target: {{workload: 0}}, schedule: {{at: [15s], duration: 2s}}}}
  - {{kind: loss, at: x1, rate: 5%, target: {{workload: 1}}, schedule: {{at: [25s], duration: 2s}}}}
  - {{kind: loss, at: x1, rate: 5%, schedule: {{at: [35s], duration: 2s}}}}
""")).spec
    prints = [footprint(spec, f) for f in spec.faults]
    assert prints[0].workloads == {(0, None), (1, None), (2, None)}
    assert prints[1].workloads == {(0, None), (2, None)}               # lighttpd serves both wgets
    assert prints[2].workloads == {(1, None)} and not prints[2].hosts
    assert prints[3].hosts == {"site1n1"} and prints[3].workloads == {(0, None), (1, None)}
    assert [f.node(spec) for f in spec.faults] == ["x1", "site2n1", "x1", "x1"]

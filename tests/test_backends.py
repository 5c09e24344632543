"""The backends' registry and protocol, and the runner's distance from their insides (no root needed).

The runner asks a backend (harness/backends/base.py: Backend), the collector (its command line) and
the recorder (run.db's rows), and branches neither on the backend's kind nor on `remote`, and holds no
SQL: the checks below read its source with `ast`, and are first shown to catch what they look for.
"""

from __future__ import annotations

import ast
import inspect
import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from harness.backends import BACKENDS, backend_class, check_runner, make_backend
from harness.backends.base import Backend, ClockOffset, Clocks, Proc
from harness.collector.main import command
from harness.collector.probe import ProbeSettings
from harness.spec import Probe, load_spec
from rundir.errors import UserError
from rundir.recorder import RunRecorder
from tests.support.env import REPO, write

# The run loop and the network lab it composes (the lab kind that uses backends).
RUNNER = REPO / "harness" / "runner.py"
NETWORK_LAB = REPO / "harness" / "lab" / "network.py"
DB_CALLS = ("execute", "executemany", "executescript", "commit", "close", "cursor")
SPEC = """\
name: reg
topology: dumbbell
duration: 5s
monitor: site1n1
workloads:
  - {kind: iperf, host: site1n1, server: site2n2, direction: upload}
"""


# -- the registry -------------------------------------------------------------------------------
def test_the_registry_names_every_backend_with_its_class():
    assert set(BACKENDS) == {"mininet", "ssh"}
    for kind in BACKENDS:
        cls = backend_class(kind)
        assert cls.kind == kind
        assert cls.__name__ == {"mininet": "MininetBackend", "ssh": "SshBackend"}[kind]


def test_an_unknown_backend_is_one_clear_error(tmp_path):
    with pytest.raises(UserError, match=r"unknown backend 'emulab' \(known: mininet, ssh\)"):
        make_backend("emulab", None, None, None, "r0")
    with pytest.raises(UserError, match="unknown backend 'Mininet'"):
        check_runner("Mininet")


def _imported_after(code: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", f"{code}\nimport json, sys\n"
                        "print(json.dumps(sorted(m for m in ('paramiko', 'mininet') if m in sys.modules)))"],
                       capture_output=True, text=True, cwd=REPO, check=True)
    return json.loads(r.stdout)


def test_importing_the_registry_or_the_runner_imports_neither_paramiko_nor_mininet():
    assert _imported_after("import harness.backends") == []
    assert _imported_after("import harness.runner") == []
    assert _imported_after("import harness.lab.network") == []
    # The check sees an import when there is one: asking for the SSH backend loads paramiko.
    assert _imported_after("import harness.backends as b\nb.backend_class('ssh')") == ["paramiko"]


def _methods(cls) -> dict[str, inspect.Signature]:
    return {n: inspect.signature(f) for n, f in vars(cls).items() if inspect.isfunction(f) and not n.startswith("_")}


def test_every_backend_has_the_whole_protocol_and_one_constructor():
    protocol = {**_methods(Backend), "check_runner": inspect.signature(Backend.check_runner)}
    assert {"collector_db", "snapshots", "bring_back", "python", "interceptor", "versions",
            "manifest_monitor", "manifest_extra", "clocks_end", "start_progress"} <= set(protocol)
    for kind in BACKENDS:
        cls = backend_class(kind)
        for name, sig in protocol.items():
            assert callable(getattr(cls, name, None)), (kind, name)
            have = list(inspect.signature(getattr(cls, name)).parameters)
            want = [p for p in sig.parameters if p not in ("self", "cls")]
            assert [p for p in have if p not in ("self", "cls")][:len(want)] == want, (kind, name, have)
        assert list(inspect.signature(cls.__init__).parameters) == ["self", "topology", "ledger", "spec", "run_id"]


# -- what each backend answers ------------------------------------------------------------------
@pytest.fixture
def recorder(tmp_path):
    rec = RunRecorder.create(tmp_path / "run.db")
    yield rec
    rec.db.close()


def test_mininet_answers_from_this_machine_and_the_runs_own_run_db(tmp_path, recorder):
    exp = load_spec(write(tmp_path, "reg.yaml", SPEC))
    b = make_backend("mininet", exp.topology, None, exp.spec, "r0")
    assert b.cc == "cubic" and b.spec is exp.spec
    assert b.announce("preflight") is None
    assert b.announce("build") == "building topology dumbbell (7 nodes, 6 links)"
    assert b.collector_db("site1n1", recorder) == str((tmp_path / "run.db").resolve())
    recorder.db.execute("INSERT INTO snapshots VALUES (0, 1.0, 2.0)")
    assert b.snapshots("site1n1", recorder) == b.progress_snapshots("site1n1", recorder) == 1
    assert b.ignored_interfaces("site1n1") == [] and b.manifest_monitor("site1n1") == {} and b.manifest_extra() == {}
    assert b.clocks_end() is None
    b.start_progress("site1n1")
    b.stop_progress()
    b.bring_back(recorder, tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("run.db")) == ["reg.yaml"]


def test_ssh_answers_from_the_nodes(tmp_path, recorder):
    exp = load_spec(write(tmp_path, "reg.yaml", SPEC), REPO / "topologies" / "dumbbell-ssh.yaml")
    b = make_backend(exp.topology.backend, exp.topology, None, exp.spec, "r0")
    assert b.kind == "ssh" and b.remote
    assert b.announce("preflight") == "connecting to 7 testbed nodes of dumbbell-ssh over SSH"
    assert b.announce("build") == "verifying the network, installing, measuring clocks"
    b.control["site1n1"] = "eth0"
    assert b.ignored_interfaces("site1n1") == ["eth0"] and b.ignored_interfaces("x1") == []
    assert b.manifest_monitor("site1n1") == {"control_interface": "eth0"}
    assert b.manifest_monitor("x1") == {"control_interface": None}
    assert list(b.manifest_extra()) == ["nodes"] and b.manifest_extra()["nodes"]["x1"]["control_interface"] is None
    # Before anything was reached: no progress, nothing to measure or bring back, stopping is harmless.
    assert b.progress_snapshots("site1n1", recorder) == 0
    assert b.clocks_end() is None
    b.bring_back(recorder, tmp_path)
    b.stop_progress()


# -- the collector's command line ---------------------------------------------------------------
def test_the_collectors_command_line():
    assert command(["py"], "/r/run.db", 0.1) == ["py", "-m", "harness.collector.main", "--db", "/r/run.db",
                                                 "--interval", "0.1"]
    assert command(["env", "P=1", "py"], "db", 0.25, "/dev/shm/x", ["eth0", "eth9"])[4:] == [
        "harness.collector.main", "--db", "db", "--interval", "0.25", "--interceptor-dir", "/dev/shm/x",
        "--ignore-interface", "eth0", "--ignore-interface", "eth9"]


def test_the_runner_starts_the_collector_the_backend_describes(tmp_path, recorder):
    """The network lab's _start_collector with a stand-in backend: the argv, and the progress asked
    for once the first snapshot is in."""
    from harness.lab.network import NetworkLab

    started, calls = [], []

    class FakeNode:
        def start(self, argv, log):
            started.append(argv)
            return Proc("site1n1", 42, argv, log, 0.0)

    class FakeBackend:
        def node(self, name):
            return FakeNode()

        def python(self, name):
            return ["python3"]

        def collector_db(self, name, run_db):
            calls.append(("collector_db", name, run_db))
            return "/node/run.db"

        def ignored_interfaces(self, name):
            return ["ctl0"]

        def snapshots(self, name, run_db):
            return 1

        def start_progress(self, name):
            calls.append(("start_progress", name))

        def separate_collectors(self):
            return False

    processes = []
    probe = Probe(after=0.2)
    run = SimpleNamespace(backend=FakeBackend(), spec=SimpleNamespace(monitor="site1n1", snapshot_interval=0.1,
                                                                      probe=probe),
                          record=recorder, shm_dir="/dev/shm/s", shm_dirs={"site1n1": "/dev/shm/s"}, rd=SimpleNamespace(collector_log=tmp_path / "c.log"),
                          _on_process=lambda *a: processes.append(a))
    NetworkLab._start_collector(run)
    assert started == [command(["python3"], "/node/run.db", 0.1, "/dev/shm/s", ["ctl0"],
                               ProbeSettings(**probe.model_dump()))]
    assert '"after": 0.2' in started[0][started[0].index("--probe") + 1]
    assert calls == [("collector_db", "site1n1", recorder), ("start_progress", "site1n1")]
    assert [(a[1], a[2], a[3]) for a in processes] == [(None, "collector", "site1n1")]


# -- the recorder -------------------------------------------------------------------------------
def test_the_recorder_writes_the_runners_rows(recorder):
    recorder.event(1.5, "warning", 2, "hm")
    recorder.process_started(7, 0, "client", "site1n1", "wget x", 1.0)
    recorder.process_ended(7, 1.0, 3.0, 0)
    recorder.faults_started([(1, 0, "ip_drop", "x1", '{"host": "site1n1"}', 2.0, 1.0, 2.1, "-s 10.0.1.1")])
    recorder.fault_ended(1, 3.1)
    recorder.commit()
    recorder.queue_stats([{"node": "x1", "interface": "x1-eth1", "sent_packets": 5, "sent_bytes": 500, "drops": 1,
                           "overlimits": 0, "requeues": 0, "backlog_packets": 2, "backlog_bytes": 3000}], lambda: 4.0)
    recorder.queue_stats([], lambda: 5.0)
    db = recorder.db
    assert db.execute("SELECT mono, kind, workload, detail FROM events").fetchall() == [(1.5, "warning", 2, "hm")]
    assert db.execute("SELECT pid, workload, role, host, cmdline, started, ended, exit_code FROM processes").fetchall() \
        == [(7, 0, "client", "site1n1", "wget x", 1.0, 3.0, 0)]
    assert db.execute("SELECT id, kind, at_node, start, end, rule FROM faults").fetchall() == [
        (1, "ip_drop", "x1", 2.1, 3.1, "-s 10.0.1.1")]
    assert db.execute("SELECT * FROM queue_stats").fetchall() == [(4.0, "x1", "x1-eth1", 5, 500, 1, 0, 0, 2, 3000)]
    assert recorder.counts() == {"snapshots": 0, "modules": 0, "faults": 1} and recorder.snapshot_count() == 0


# -- the runner's distance from the backends' insides ---------------------------------------------
def runner_reaches_inside(source: str) -> list[str]:
    """What in `source` shows a runner looking inside a backend or run.db: an attribute `remote`,
    a backend kind as a string, SQL in a string, a call on a database connection (`db.execute`)."""
    def is_db(node) -> bool:
        return (isinstance(node, ast.Name) and node.id in ("db", "conn")
                or isinstance(node, ast.Attribute) and node.attr in ("db", "conn"))

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "remote":
            found.append(f"line {node.lineno}: .remote")
        elif isinstance(node, ast.Attribute) and is_db(node.value) and node.attr in DB_CALLS:
            found.append(f"line {node.lineno}: db.{node.attr}")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = set(node.value.split())
            for sql in ("INSERT", "UPDATE", "SELECT", "DELETE"):
                if sql in words:
                    found.append(f"line {node.lineno}: {sql} in a string")
            if node.value in BACKENDS:
                found.append(f"line {node.lineno}: the backend kind {node.value!r}")
    return found


def test_the_check_finds_what_the_runner_used_to_do():
    old = """
if backend.remote:
    db = backend.create_db(mon)
self.db.execute("UPDATE faults SET end = ? WHERE id = ?", (end, fid))
self.db.executemany("INSERT INTO queue_stats VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
n = db.execute(f"SELECT count(*) FROM {k}").fetchone()[0]
if exp.topology.backend == "mininet":
    pass
"""
    found = runner_reaches_inside(old)
    assert len(found) == 8, found
    assert runner_reaches_inside("self.backend.snapshots(mon, self.record)\nrun.execute()\n'Insert a row'\n") == []


def test_the_runner_has_no_remote_branch_no_backend_kind_and_no_sql():
    for source in (RUNNER, NETWORK_LAB):
        assert runner_reaches_inside(source.read_text()) == [], source


def test_the_runner_takes_its_backend_from_the_registry():
    trees = [ast.parse(p.read_text()) for p in (RUNNER, NETWORK_LAB)]
    imported = [{a.name for n in ast.walk(t) if isinstance(n, ast.ImportFrom) for a in n.names} for t in trees]
    assert "check_runner" in imported[0] and "make_backend" in imported[1]
    assert not {"MininetBackend", "SshBackend"} & (imported[0] | imported[1])
    assert not [n for t in trees for n in ast.walk(t) if isinstance(n, ast.FunctionDef) and n.name == "make_backend"]


def test_clocks_of_a_shared_clock_leave_runner_times_as_read():
    """The runner converts start_mono with the runner's offset on every backend: on Mininet it is 0,
    and the manifest keeps the time as read."""
    clocks = Clocks("site1n1", {"site1n1": ClockOffset()}, ClockOffset())
    for t in (0.0, 1.0, 12345.678901234, 1e9 + 0.1):
        assert clocks.from_runner(t) == t

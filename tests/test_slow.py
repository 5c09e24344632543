"""The `slow` fault kind (a service tier under a cgroup v2 CPU quota, harness/faults/slow.py and
cgroup.py): the spec is refused in one line where the v2 cpu controller is missing (this machine),
and the v2 path runs against a directory standing in for the cgroup tree and /proc."""

from __future__ import annotations

import errno
import json
import shutil
import types
from pathlib import Path

import pytest

from harness.faults.cgroup import CpuCap, cpu_max, v2_cpu_problem
from harness.faults.slow import Slow
from harness.faults.spec import monitored_hosts
from harness.spec import load_spec
from harness.window import Window
from harness.yamlload import SpecError
from nestlab.cli import nestlab_main
from tests.support.env import REPO, write

SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service.yaml"}
duration: 30s
monitor: [web, db]
workloads:
  - {{kind: service, rate: 20/s}}
faults:
  - {{kind: slow, host: db, cpu: 20%, schedule: {{at: [10s], duration: 2s}}}}
"""


class FakeTree:
    """A cgroup v2 tree and /proc under tmp_path: cgroup.procs writes move the fake process."""

    def __init__(self, tmp: Path, controllers="cpuset cpu io memory pids", subtree=""):
        self.root, self.proc = tmp / "cgroup", tmp / "proc"
        self.root.mkdir()
        (self.root / "cgroup.controllers").write_text(controllers + "\n")
        (self.root / "cgroup.subtree_control").write_text(subtree + "\n")
        (self.root / "system.slice").mkdir()

    def process(self, pid: int, cgroup_path: str = "/system.slice") -> None:
        (self.proc / str(pid)).mkdir(parents=True)
        (self.proc / str(pid) / "cgroup").write_text(f"0::{cgroup_path}\n")

    def where(self, pid: int) -> str:
        return (self.proc / str(pid) / "cgroup").read_text().strip()[3:]

    def cap(self, name="nestlab-r-db") -> CpuCap:
        tree = self

        class Cap(CpuCap):
            def _move(self, pid, cgroup_dir):
                super()._move(pid, cgroup_dir)
                if not (tree.proc / str(pid)).exists():
                    raise OSError(errno.ESRCH, "No such process")
                rel = "/" + cgroup_dir.relative_to(tree.root).as_posix() if cgroup_dir != tree.root else "/"
                (tree.proc / str(pid) / "cgroup").write_text(f"0::{rel}\n")

            def _rmdir(self):
                shutil.rmtree(self.path)   # real cgroupfs removes its control files with the directory

        return Cap(name, self.root, self.proc)


def test_cpu_max():
    assert cpu_max(20) == "20000 100000"
    assert cpu_max(0.5) == "1000 100000"   # the kernel's smallest quota
    for bad in (0, -5, 150):
        with pytest.raises(ValueError):
            cpu_max(bad)


def test_what_is_missing(tmp_path):
    assert "does not exist" in v2_cpu_problem(tmp_path)
    (tmp_path / "cpu").mkdir()
    assert "mounted on cgroup v1" in v2_cpu_problem(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("memory pids\n")
    assert "cpu controller is not available" in v2_cpu_problem(tmp_path) and "memory pids" in v2_cpu_problem(tmp_path)
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu memory\n")
    assert v2_cpu_problem(tmp_path) is None


def test_apply_caps_every_process_and_release_puts_each_back(tmp_path):
    tree = FakeTree(tmp_path)
    tree.process(11, "/system.slice")
    tree.process(12, "/")
    cap = tree.cap()
    cap.apply([11, 12, 99], 20)   # 99: already gone, left out
    assert (cap.path / "cpu.max").read_text() == "20000 100000"
    assert tree.where(11) == tree.where(12) == "/nestlab-r-db"
    assert "+cpu" in (tree.root / "cgroup.subtree_control").read_text()
    assert cap.origin == {11: "/system.slice", 12: "/"}
    cap.release()
    assert (tree.where(11), tree.where(12)) == ("/system.slice", "/")
    assert not cap.path.exists()
    cap.release()   # idempotent


def test_release_tolerates_a_process_that_exited(tmp_path):
    tree = FakeTree(tmp_path)
    tree.process(11)
    tree.process(12)
    cap = tree.cap()
    cap.apply([11, 12], 50)
    shutil.rmtree(tree.proc / "12")
    cap.release()
    assert tree.where(11) == "/system.slice" and not cap.path.exists()


def test_release_moves_out_a_process_forked_inside_the_cgroup(tmp_path):
    """A capped daemon forked a process while capped (it inherits the cgroup, it was never moved
    in): release moves it out too, so the cgroup can be removed (the kernel refuses to remove a
    populated one) and nothing stays capped."""
    tree = FakeTree(tmp_path)
    tree.process(11)
    tree.process(12, "/")
    base = type(tree.cap())

    class Kernel(base):
        def _rmdir(self):
            if any(tree.where(int(p.name)) == "/nestlab-r-db" for p in tree.proc.iterdir()):
                raise OSError(errno.EBUSY, "Device or resource busy")
            super()._rmdir()

    cap = Kernel("nestlab-r-db", tree.root, tree.proc)
    cap.apply([11, 12], 20)
    tree.process(77, "/nestlab-r-db")                       # forked by 11 while capped
    (cap.path / "cgroup.procs").write_text("11\n12\n77\n")  # what the kernel lists
    cap.release()
    assert (tree.where(11), tree.where(12), tree.where(77)) == ("/system.slice", "/", "/system.slice")
    assert not cap.path.exists()


def test_a_failed_apply_undoes_itself(tmp_path):
    tree = FakeTree(tmp_path)
    tree.process(11)
    cap = tree.cap()
    with pytest.raises(ProcessLookupError):
        cap.apply([98, 99], 20)   # nothing to cap
    assert not cap.path.exists()

    class Stuck(type(cap)):
        def _move(self, pid, cgroup_dir):
            if cgroup_dir == self.path:
                (tree.proc / str(pid) / "cgroup").write_text("0::/elsewhere\n")
            else:
                super()._move(pid, cgroup_dir)

    stuck = Stuck(cap.path.name, tree.root, tree.proc)
    with pytest.raises(RuntimeError, match="not /nestlab-r-db"):
        stuck.apply([11], 20)
    assert not stuck.path.exists()


def test_the_kind_caps_the_tier_and_names_each_process_when_its_host_is_monitored(tmp_path, monkeypatch):
    tree = FakeTree(tmp_path)
    for pid in (41, 42):
        tree.process(pid)
    monkeypatch.setattr("harness.faults.slow.v2_cpu_problem", lambda: None)
    spec = load_spec(write(tmp_path, "s.yaml", SPEC)).spec
    monkeypatch.setattr("harness.faults.slow.tier_pids", lambda env, host: (0, "db", [41, 42]))
    # both processes are applications NeST sees, when their host is monitored
    monkeypatch.setattr("harness.faults.slow.observed_pids",
                        lambda env, host, pids: pids if host in monitored_hosts(env.spec) else [])
    ledger = types.SimpleNamespace(held=set())
    ledger.add_cgroup, ledger.drop_cgroup = (lambda p: ledger.held.add(str(p))), (lambda p: ledger.held.discard(str(p)))
    env = types.SimpleNamespace(spec=spec, run_id="r", clocks=types.SimpleNamespace(from_runner=lambda t: t),
                                ledger=ledger)
    kind = Slow(env)
    monkeypatch.setattr(kind, "cap_for", lambda host: tree.cap(f"nestlab-r-{host}"))
    parts = kind.inject(Window(0, 10.0, 2.0, 0.0), 1)
    assert [json.loads(p.target)["module_key"] for p in parts] == ["app:41", "app:42"]
    assert tree.where(41) == "/nestlab-r-db" and "20% of a CPU" in parts[0].rule
    assert ledger.held == {str(tree.root / "nestlab-r-db")}   # for `nestlab cleanup` after a kill
    end = kind.heal(parts[0])
    assert kind.heal(parts[1]) == end and tree.where(41) == "/system.slice" and not ledger.held
    # an interrupted run: teardown releases what is still capped
    kind.inject(Window(0, 20.0, 2.0, 0.0), 3)
    kind.teardown()
    assert tree.where(42) == "/system.slice" and not (tree.root / "nestlab-r-db").exists()
    # a host that is not monitored: one row, no module
    spec.monitor = "web"
    (part,) = kind.inject(Window(0, 20.0, 2.0, 0.0), 5)
    assert json.loads(part.target)["module_key"] is None and json.loads(part.target)["pids"] == [41, 42]
    kind.heal(part)


def test_slow_is_refused_in_one_line_where_v2_cpu_is_missing(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("harness.faults.slow.v2_cpu_problem", lambda: "no cgroup v2 hierarchy at /sys/fs/cgroup")
    path = write(tmp_path, "spec.yaml", SPEC)
    assert nestlab_main(["run", str(path), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {path}:8: faults[0].cpu: slow needs the cgroup v2 cpu controller"), err
    assert "no cgroup v2 hierarchy" in err and not (tmp_path / "res").exists()


@pytest.mark.skipif(v2_cpu_problem() is None, reason="this machine has the cgroup v2 cpu controller")
def test_this_machine_refuses_slow(tmp_path):
    with pytest.raises(SpecError, match=r":8: faults\[0\]\.cpu: slow needs the cgroup v2 cpu controller"):
        load_spec(write(tmp_path, "s.yaml", SPEC))


@pytest.mark.parametrize("fault, words", [
    ("{kind: slow, host: db, schedule: {at: [10s], duration: 2s}}", "slow needs 'cpu'"),
    ("{kind: slow, cpu: 20%, schedule: {at: [10s], duration: 2s}}", "slow needs 'host'"),
    ("{kind: slow, host: db, cpu: 100%, schedule: {at: [10s], duration: 2s}}", "below 100%"),
    ("{kind: slow, host: client, cpu: 20%, schedule: {at: [10s], duration: 2s}}", "'client' runs no tier"),
])
def test_bad_slow_faults(tmp_path, monkeypatch, fault, words):
    monkeypatch.setattr("harness.faults.slow.v2_cpu_problem", lambda: None)
    text = SPEC.replace("{kind: slow, host: db, cpu: 20%, schedule: {at: [10s], duration: 2s}}", fault)
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", text))
    assert ":8: faults[0]" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_the_issue_spelling_of_slow(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.faults.slow.v2_cpu_problem", lambda: None)
    text = SPEC.replace("host: db, cpu: 20%", "target: {host: db}, cpu: 20%")
    f = load_spec(write(tmp_path, "s.yaml", text)).spec.faults[0]
    assert (f.kind, f.host, f.cpu, f.target) == ("slow", "db", 20.0, None)


def test_cleanup_removes_only_the_runs_cgroups(tmp_path):
    from harness.clean import remove_cgroup

    root = tmp_path / "cg"
    (root / "nestlab-x-db").mkdir(parents=True)
    (root / "system.slice").mkdir()
    (root / "cgroup.procs").write_text("")
    assert not remove_cgroup(str(root / "system.slice"), root)            # not the run's
    assert not remove_cgroup(str(tmp_path / "nestlab-x-db"), root)        # not under the root
    assert remove_cgroup(str(root / "nestlab-x-db"), root) and not (root / "nestlab-x-db").exists()
    assert (root / "system.slice").exists()

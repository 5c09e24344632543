"""The `slow` fault kind (a service tier under a cgroup CPU quota, harness/faults/slow.py and
cgroup.py): the hierarchy found from mountinfo (v2 with cpu, else v1's cpu), the spec refused in one
line where neither exists, and both paths run against a directory standing in for the cgroup tree
and /proc (tests/support/fake_cgroup.py). tests/test_slow_root.py caps a real process on this
machine's cgroup v1 hierarchy."""

from __future__ import annotations

import json
import shutil
import types
from pathlib import Path

import pytest

from harness.faults.base import NoTarget
from harness.faults.cgroup import (
    Hierarchy,
    NoCpuController,
    cpu_hierarchy,
    cpu_max,
    cpu_mounts,
    cpu_problem,
    quota_us,
)
from harness.faults.slow import Slow
from harness.faults.spec import monitored_hosts
from harness.spec import load_spec
from harness.window import Window
from harness.yamlload import SpecError
from nestlab.cli import nestlab_main
from tests.support.env import REPO, write
from tests.support.fake_cgroup import FakeTree, mountinfo

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



def test_quota():
    assert cpu_max(20) == "20000 100000"
    assert cpu_max(0.5) == "1000 100000"   # the kernel's smallest quota
    assert quota_us(20, 50_000) == 10_000 and quota_us(37.5) == 37_500
    for bad in (0, -5, 150):
        with pytest.raises(ValueError):
            cpu_max(bad)


THIS_MACHINE = (("cgroup", "/sys/fs/cgroup/cpuacct", "rw,cpuacct"), ("cgroup", "/sys/fs/cgroup/cpuset", "rw,cpuset"),
                ("cgroup", "/x/my cpu", "rw,cpu"), ("cgroup", "/sys/fs/cgroup/systemd", "rw,name=systemd"))


def test_the_hierarchy_is_found_from_mountinfo(tmp_path):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("hugetlb\n")   # a hybrid machine's v2: no cpu there
    info = mountinfo(tmp_path, *THIS_MACHINE, ("cgroup2", str(unified), "rw"))
    assert cpu_hierarchy(info) == Hierarchy(1, Path("/x/my cpu"))   # the mount point unescaped
    assert cpu_problem(info) is None and cpu_mounts(info) == [Path("/x/my cpu"), unified]
    # v1 with cpu and cpuacct co-mounted
    info = mountinfo(tmp_path, ("cgroup", "/sys/fs/cgroup/cpu,cpuacct", "rw,cpu,cpuacct"))
    assert cpu_hierarchy(info) == Hierarchy(1, Path("/sys/fs/cgroup/cpu,cpuacct"))
    # v2 preferred once it has the cpu controller
    (unified / "cgroup.controllers").write_text("cpuset cpu io memory\n")
    info = mountinfo(tmp_path, *THIS_MACHINE, ("cgroup2", str(unified), "rw"))
    assert cpu_hierarchy(info) == Hierarchy(2, unified)


def test_what_is_missing(tmp_path):
    unified = tmp_path / "unified"
    unified.mkdir()
    (unified / "cgroup.controllers").write_text("memory pids\n")
    info = mountinfo(tmp_path, *THIS_MACHINE[:2], ("cgroup2", str(unified), "rw"))   # cpuacct and cpuset: not cpu
    with pytest.raises(NoCpuController) as e:
        cpu_hierarchy(info)
    assert f"cgroup2 at {unified} lists memory pids" in str(e.value)
    assert "cgroup v1 mounts carry cpuacct, cpuset" in str(e.value) and str(info) in str(e.value)
    assert "no cgroup mounted at all" in cpu_problem(mountinfo(tmp_path))
    assert "no cgroup v1 mount" in cpu_problem(mountinfo(tmp_path, ("cgroup2", str(unified), "rw")))


def test_a_mount_showing_a_subtree(tmp_path):
    h = Hierarchy(1, tmp_path, root="/docker/abc")   # a container's view of the hierarchy
    assert h.dir_of("/docker/abc/db") == tmp_path / "db" and h.dir_of("/docker/abc") == tmp_path
    assert h.dir_of("/elsewhere") == tmp_path and h.path_of(tmp_path / "nestlab-x") == "/docker/abc/nestlab-x"
    assert h.cgroup_in("5:memory:/m\n3:cpu,cpuacct:/docker/abc/db\n0::/\n") == "/docker/abc/db"
    assert Hierarchy(2, tmp_path).cgroup_in("3:cpu,cpuacct:/a\n0::/b\n") == "/b"
    assert h.cgroup_in("3:cpuacct:/a\n4:cpuset:/b\n") is None


@pytest.mark.parametrize("version", [1, 2])
def test_apply_caps_every_process_and_release_puts_each_back(tmp_path, version):
    tree = FakeTree(tmp_path, version)
    tree.process(11, "/system.slice", threads=(21, 22))
    tree.process(12, "/")
    cap = tree.cap()
    cap.apply([11, 12, 99], 20)   # 99: already gone, left out
    if version == 2:
        assert (cap.path / "cpu.max").read_text().split() == ["20000", "100000"]
        assert "cpu" in (tree.root / "cgroup.subtree_control").read_text().split()
        assert cap.limit == "cpu.max 20000 100000"
    else:
        assert (cap.path / "cpu.cfs_quota_us").read_text().strip() == "20000"
        assert cap.limit == "cpu.cfs_quota_us 20000 of cpu.cfs_period_us 100000"
    assert {tree.where(t) for t in (11, 21, 22, 12)} == {"/nestlab-r-db"}   # every thread
    assert cap.origin == {11: "/system.slice", 12: "/"}
    cap.release()
    assert [tree.where(t) for t in (11, 21, 22, 12)] == ["/system.slice"] * 3 + ["/"]
    assert not cap.path.exists()
    cap.release()   # idempotent


def test_v1_quota_follows_the_cgroups_period(tmp_path):
    tree = FakeTree(tmp_path, 1, period_us=50_000)
    tree.process(11)
    cap = tree.cap()
    cap.apply([11], 20)
    assert (cap.path / "cpu.cfs_quota_us").read_text().strip() == "10000"
    cap.release()


def test_v1_threads_are_verified_one_by_one_and_put_back_where_each_was(tmp_path):
    tree = FakeTree(tmp_path, 1)
    (tree.root / "other").mkdir()
    tree.process(11, "/system.slice", threads=(21, 22))
    tree.at[22] = "/other"             # a thread that lived elsewhere than its leader
    tree.procs_skips = {21}            # and one that cgroup.procs left behind: moved by its tid
    cap = tree.cap()
    cap.apply([11], 20)
    assert {tree.where(t) for t in (11, 21, 22)} == {"/nestlab-r-db"}
    tree.procs_skips = set()
    cap.release()
    assert (tree.where(11), tree.where(21), tree.where(22)) == ("/system.slice", "/system.slice", "/other")
    assert not cap.path.exists()


def test_a_thread_that_stays_out_fails_the_apply_and_undoes_it(tmp_path):
    tree = FakeTree(tmp_path, 1)
    tree.process(11, threads=(21,))
    tree.procs_skips = tree.refuse_tasks = {21}
    cap = tree.cap()
    with pytest.raises(RuntimeError, match="thread 21 of process 11 is in /system.slice, not /nestlab-r-db"):
        cap.apply([11], 20)
    assert tree.where(11) == "/system.slice" and not cap.path.exists()


@pytest.mark.parametrize("version", [1, 2])
def test_release_tolerates_exits_forks_and_a_vanished_origin(tmp_path, version):
    tree = FakeTree(tmp_path, version)
    (tree.root / "gone.slice").mkdir()
    tree.process(11)
    tree.process(12)
    tree.process(13, "/gone.slice")
    cap = tree.cap()
    cap.apply([11, 12, 13], 50)
    tree.exit(12)
    tree.fork(11, 14)                   # a worker respawned inside the cgroup
    shutil.rmtree(tree.root / "gone.slice")
    cap.release()
    assert tree.where(11) == tree.where(14) == "/system.slice" and tree.where(13) == "/"
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
                tree.at[pid] = "/system.slice/elsewhere"
                tree._sync()
            else:
                super()._move(pid, cgroup_dir)

    stuck = Stuck(cap.path.name, tree.hierarchy, tree.proc)
    with pytest.raises(RuntimeError, match="not /nestlab-r-db"):
        stuck.apply([11], 20)
    assert not stuck.path.exists()


@pytest.mark.parametrize("version", [1, 2])
def test_the_kind_caps_the_tier_and_names_each_process_when_its_host_is_monitored(tmp_path, monkeypatch, version):
    tree = FakeTree(tmp_path, version)
    for pid in (41, 42):
        tree.process(pid)
    monkeypatch.setattr("harness.faults.slow.cpu_problem", lambda: None)
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
    targets = [json.loads(p.target) for p in parts]
    assert [t["module_key"] for t in targets] == ["app:41", "app:42"]
    # the row says which hierarchy, where, and what was written
    assert {(t["hierarchy"], t["cgroup"]) for t in targets} == {(f"cgroup v{version}", str(tree.root / "nestlab-r-db"))}
    assert targets[0]["limit"] == ("cpu.max 20000 100000" if version == 2 else
                                   "cpu.cfs_quota_us 20000 of cpu.cfs_period_us 100000")
    assert parts[0].rule.startswith(f"cgroup v{version} ") and "(20% of a CPU)" in parts[0].rule
    assert tree.where(41) == "/nestlab-r-db"
    assert ledger.held == {str(tree.root / "nestlab-r-db")}   # for `nestlab cleanup` after a kill
    end = kind.heal(parts[0])
    assert kind.heal(parts[1]) == end and tree.where(41) == "/system.slice" and not ledger.held
    # an interrupted run: teardown releases what is still capped
    kind.inject(Window(0, 20.0, 2.0, 0.0), 3)
    kind.teardown()
    assert tree.where(42) == "/system.slice" and not (tree.root / "nestlab-r-db").exists() and not ledger.held
    # a host that is not monitored: one row, no module
    spec.monitor = "web"
    (part,) = kind.inject(Window(0, 20.0, 2.0, 0.0), 5)
    assert json.loads(part.target)["module_key"] is None and json.loads(part.target)["pids"] == [41, 42]
    kind.heal(part)
    # the tier gone by the time the window comes: the window is skipped, nothing held
    monkeypatch.setattr("harness.faults.slow.tier_pids", lambda env, host: (0, "db", [98]))
    with pytest.raises(NoTarget, match="no process left to cap"):
        kind.inject(Window(0, 25.0, 2.0, 0.0), 6)
    assert not kind.capped and not ledger.held and not (tree.root / "nestlab-r-db").exists()


def test_slow_is_refused_in_one_line_where_no_cpu_controller_exists(tmp_path, capsys, monkeypatch):
    problem = cpu_problem(mountinfo(tmp_path, ("cgroup", "/sys/fs/cgroup/cpuacct", "rw,cpuacct")))
    monkeypatch.setattr("harness.faults.slow.cpu_problem", lambda: problem)
    path = write(tmp_path, "spec.yaml", SPEC)
    assert nestlab_main(["run", str(path), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {path}:8: faults[0].cpu: slow needs the cgroup cpu controller (v2 or v1)"), err
    assert "cgroup v1 mounts carry cpuacct" in err and not (tmp_path / "res").exists()


def test_this_machine_takes_or_refuses_slow_as_its_mounts_say(tmp_path):
    if cpu_problem() is None:   # here: v1's cpu hierarchy
        assert load_spec(write(tmp_path, "s.yaml", SPEC)).spec.faults[0].cpu == 20
    else:
        with pytest.raises(SpecError, match=r":8: faults\[0\]\.cpu: slow needs the cgroup cpu controller"):
            load_spec(write(tmp_path, "s.yaml", SPEC))


@pytest.mark.parametrize("fault, words", [
    ("{kind: slow, host: db, schedule: {at: [10s], duration: 2s}}", "slow needs 'cpu'"),
    ("{kind: slow, cpu: 20%, schedule: {at: [10s], duration: 2s}}", "slow needs 'host'"),
    ("{kind: slow, host: db, cpu: 100%, schedule: {at: [10s], duration: 2s}}", "below 100%"),
    ("{kind: slow, host: client, cpu: 20%, schedule: {at: [10s], duration: 2s}}", "'client' runs no tier"),
])
def test_bad_slow_faults(tmp_path, monkeypatch, fault, words):
    monkeypatch.setattr("harness.faults.slow.cpu_problem", lambda: None)
    text = SPEC.replace("{kind: slow, host: db, cpu: 20%, schedule: {at: [10s], duration: 2s}}", fault)
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", text))
    assert ":8: faults[0]" in str(e.value) and words in str(e.value) and "\n" not in str(e.value)


def test_the_issue_spelling_of_slow(tmp_path, monkeypatch):
    monkeypatch.setattr("harness.faults.slow.cpu_problem", lambda: None)
    text = SPEC.replace("host: db, cpu: 20%", "target: {host: db}, cpu: 20%")
    f = load_spec(write(tmp_path, "s.yaml", text)).spec.faults[0]
    assert (f.kind, f.host, f.cpu, f.target) == ("slow", "db", 20.0, None)


def test_cleanup_removes_only_the_runs_cgroups(tmp_path):
    from harness.clean import remove_cgroup

    v2, v1 = tmp_path / "cg", tmp_path / "cpu"
    for root in (v2, v1):
        (root / "nestlab-x-db").mkdir(parents=True)
        (root / "system.slice").mkdir()
        (root / "cgroup.procs").write_text("")
    roots = [v2, v1]
    assert not remove_cgroup(str(v2 / "system.slice"), roots)            # not the run's
    assert not remove_cgroup(str(tmp_path / "nestlab-x-db"), roots)      # not at a hierarchy's top
    assert remove_cgroup(str(v2 / "nestlab-x-db"), roots) and not (v2 / "nestlab-x-db").exists()
    assert remove_cgroup(str(v1 / "nestlab-x-db"), roots) and not (v1 / "nestlab-x-db").exists()   # v1's too
    assert (v2 / "system.slice").exists() and (v1 / "system.slice").exists()
    assert not remove_cgroup(str(tmp_path / "other" / "nestlab-x-db"), roots)


def test_the_cpu_controller_this_process_enabled_is_disabled_again_by_the_last_release(tmp_path):
    """Issue 40 item 15: `+cpu` at the hierarchy's top was never reverted."""
    tree = FakeTree(tmp_path, 2, subtree="memory")
    tree.process(11)
    tree.process(12)
    control = tree.root / "cgroup.subtree_control"
    a, b = tree.cap("nestlab-r-a"), tree.cap("nestlab-r-b")
    a.apply([11], 20)
    b.apply([12], 30)
    a.release()
    assert "cpu" in control.read_text().split()      # b still relies on it
    b.release()
    b.release()
    assert control.read_text().split() == ["memory"]
    with pytest.raises(ProcessLookupError):           # a failed apply reverts it too
        tree.cap("nestlab-r-c").apply([99], 20)
    assert control.read_text().split() == ["memory"]


def test_a_cpu_controller_enabled_before_is_left_enabled(tmp_path):
    tree = FakeTree(tmp_path, 2, subtree="cpu memory")
    tree.process(11)
    cap = tree.cap()
    cap.apply([11], 20)
    cap.release()
    assert sorted((tree.root / "cgroup.subtree_control").read_text().split()) == ["cpu", "memory"]

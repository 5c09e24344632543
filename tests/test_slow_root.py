"""`slow`'s CPU quota on this machine's real cgroup hierarchy (harness/faults/cgroup.py): a busy child
process (a Python loop, with a second thread) capped at 20% of a CPU uses at most 30% of a core
over 2 s, the kernel reports throttling, and after the release every thread is back where it was
and the cgroup is gone. Needs root (marked root; no network is made); skipped where the machine
mounts no such hierarchy (the v1 case is this machine's: /sys/fs/cgroup/cpu)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.faults.cgroup import CpuCap, Hierarchy, cgroup_mounts, cpu_hierarchy, cpu_problem

pytestmark = pytest.mark.root

BUSY = """\
import threading, time
threading.Thread(target=lambda: time.sleep(600), daemon=True).start()
print("ready", flush=True)
while True:
    pass
"""


def hierarchy(version: int) -> Hierarchy | None:
    if version == 2:
        return cpu_hierarchy() if cpu_problem() is None and cpu_hierarchy().version == 2 else None
    return next((Hierarchy(1, m, r) for v, m, r, opts in cgroup_mounts() if v == 1 and "cpu" in opts), None)


def cpu_seconds(pid: int) -> float:
    """utime + stime of the whole process (all its threads), in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def share(pid: int, seconds: float) -> float:
    """The share of one core the process used over `seconds`."""
    c0, t0 = cpu_seconds(pid), time.monotonic()
    time.sleep(seconds)
    return (cpu_seconds(pid) - c0) / (time.monotonic() - t0)


@pytest.mark.parametrize("version", [1, 2])
def test_a_busy_process_is_held_to_its_quota_and_released(version):
    h = hierarchy(version)
    if h is None:
        pytest.skip(f"no cgroup v{version} hierarchy with the cpu controller here")
    child = subprocess.Popen([sys.executable, "-c", BUSY], stdout=subprocess.PIPE, text=True)
    cap = CpuCap(f"nestlab-test-{os.getpid()}", h)
    try:
        assert child.stdout.readline().strip() == "ready"
        tids = cap.threads(child.pid)
        assert len(tids) == 2
        before = {t: cap.cgroup_of(child.pid, t) for t in tids}
        free = share(child.pid, 1.0)   # for the message: what the loop gets uncapped on this (busy) machine
        cap.apply([child.pid], 20)
        mine = h.path_of(cap.path)
        assert {cap.cgroup_of(child.pid, t) for t in tids} == {mine}   # every thread, as the kernel says
        used = share(child.pid, 2.0)
        stat = dict(line.split() for line in (cap.path / "cpu.stat").read_text().splitlines())
        assert used <= 0.30, f"capped at 20%, used {used:.0%} of a core (uncapped: {free:.0%})"
        assert int(stat["nr_throttled"]) > 0, stat   # the quota, not a busy machine, held it back
        cap.release()
        assert {t: cap.cgroup_of(child.pid, t) for t in tids} == before
        assert not cap.path.exists()
        print(f"cgroup v{version}: uncapped {free:.0%}, capped at 20%: {used:.0%} of a core, "
              f"{stat['nr_throttled']} throttled periods")
    finally:
        child.kill()
        child.wait()
        cap.release()
        assert not cap.path.exists()

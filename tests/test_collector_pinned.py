"""A monitored host's process is held by a descriptor (harness.collector.hosts.PinnedProcess, issue 40
item 15): once it ends, a new process given its pid is never read in its place. The reuse is made for
real in a pid namespace of the test's own (`unshare --pid --fork --mount-proc`, gone with its last
process; ns_last_pid set there), the new process in a network namespace of its own. Needs root."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.collector.hosts import PinnedProcess, netns_inode

REPO = Path(__file__).resolve().parent.parent
ROOT = os.geteuid() == 0

REUSE = """
import os, subprocess, sys, time
from harness.collector.hosts import HostArg, host_sources
a = subprocess.Popen(["sleep", "60"])
h = host_sources(HostArg("h", a.pid))
print("before", len(h.iface.poll()) > 0)
a.kill(); a.wait()
with open("/proc/sys/kernel/ns_last_pid", "w") as f:   # the next process gets a's pid
    f.write(str(a.pid - 1))
b = subprocess.Popen(["unshare", "-n", "sleep", "60"])
time.sleep(0.3)
print("reused", b.pid == a.pid)
try:
    print("after", sorted(ob.key for ob in h.iface.poll()))
except OSError as e:
    print("after error", e.errno)
finally:
    b.kill(); b.wait(); h.close()
"""


def test_a_pinned_process_reads_its_own_namespace_and_fails_once_gone():
    p = subprocess.Popen(["sleep", "60"])
    try:
        with PinnedProcess(p.pid) as pinned:
            assert pinned.netns == netns_inode(p.pid)
            assert "Inter-|" in Path(pinned.proc_net, "dev").read_text()
            p.kill()
            p.wait()
            with pytest.raises(OSError):
                Path(pinned.proc_net, "dev").read_text()
    finally:
        p.kill()
        p.wait()


@pytest.mark.skipif(not ROOT or shutil.which("unshare") is None, reason="needs root and unshare")
def test_a_reused_pid_is_not_read_as_the_host():
    r = subprocess.run(["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", REUSE],
                       capture_output=True, text=True, timeout=60, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert r.returncode == 0, r.stderr[-800:]
    lines = r.stdout.splitlines()
    assert lines[:2] == ["before True", "reused True"], r.stdout
    assert lines[2].startswith("after error"), f"the new process's namespace was read: {lines[2]}"

"""`nestlab cleanup`'s sweep on a testbed node (harness/backends/ssh/cleanup.py): what a runner SIGKILLed
between starting a process and writing it into the ledger left running is found by the run's mark in
its environment (SshNode.start) and ended with its process group; nothing else is touched. Runs the
sweep script itself on this machine, as a node runs it."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from harness.backends.ssh.cleanup import SWEEP_SCRIPT
from harness.backends.ssh.node import SCRATCH_MARK


def _start(mark: str | None) -> subprocess.Popen:
    """A session of its own (as the command server spawns) whose leader has a child: `sh` and a sleep."""
    env = {**os.environ, **({SCRATCH_MARK: mark} if mark else {})}
    return subprocess.Popen(["sh", "-c", "sleep 60 & wait"], env=env, start_new_session=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _children(pid: int) -> list[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def test_the_sweep_ends_the_marked_groups_and_nothing_else(tmp_path):
    ours, other, unmarked = _start(str(tmp_path / "run-a")), _start(str(tmp_path / "run-b")), _start(None)
    try:
        deadline = time.monotonic() + 5
        while not all(_children(p.pid) for p in (ours, other, unmarked)) and time.monotonic() < deadline:
            time.sleep(0.02)
        child = _children(ours.pid)[0]
        r = subprocess.run([sys.executable, "-c", SWEEP_SCRIPT, str(tmp_path / "run-a")],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, r.stderr
        assert r.stdout.strip() == "2"          # the shell and its sleep
        ours.wait(5)
        assert not _alive(child)
        assert other.poll() is None and unmarked.poll() is None   # another run's, and no run's
    finally:
        for p in (ours, other, unmarked):
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()

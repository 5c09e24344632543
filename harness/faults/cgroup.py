"""A cgroup v2 CPU quota over a set of processes (the `slow` fault kind, docs/faults.md).

`CpuCap(name).apply(pids, percent)` makes `<root>/<name>`, writes its `cpu.max` (`QUOTA PERIOD`, read
back), and moves each process into it (writing its pid into `cgroup.procs`, which moves all its
threads), each move verified in `/proc/PID/cgroup`; `release()` moves every process back into the
cgroup it came from (one a capped process forked meanwhile into the first one's) and removes the cgroup; it is idempotent, and tolerates processes that exited.
Needs the v2 `cpu` controller (`v2_cpu_problem` says what is missing): the root's
`cgroup.controllers` lists `cpu`; `apply` enables it in the root's `cgroup.subtree_control` when it
is not. Mininet hosts share the machine's cgroup tree and pids, so the runner does all of it.
"""

from __future__ import annotations

import errno
import os
import time
from collections.abc import Sequence
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000      # the kernel's smallest quota
RMDIR_S = 2.0             # how long a cgroup just emptied may take to be removable


def v2_cpu_problem(root: Path = ROOT) -> str | None:
    """What is missing for a cgroup v2 CPU quota on this machine (None: nothing)."""
    controllers = root / "cgroup.controllers"
    if not controllers.is_file():
        v1 = " (the cpu controller is mounted on cgroup v1: " + str(root / "cpu") + ")" if (root / "cpu").is_dir() else ""
        return f"no cgroup v2 hierarchy at {root}: {controllers} does not exist{v1}"
    try:
        have = controllers.read_text().split()
    except OSError as e:
        return f"{controllers} cannot be read: {e.strerror or e}"
    if "cpu" not in have:
        return f"the cgroup v2 cpu controller is not available ({controllers} lists: {' '.join(have) or 'nothing'})"
    return None


def cpu_max(percent: float, period_us: int = PERIOD_US) -> str:
    """cpu.max for `percent` of one CPU: 'QUOTA PERIOD' in microseconds."""
    if not 0 < percent <= 100:
        raise ValueError(f"a CPU share above 0% and at most 100%, not {percent:g}%")
    return f"{max(MIN_QUOTA_US, round(period_us * percent / 100.0))} {period_us}"


class CpuCap:
    """One cgroup under `root` holding capped processes (module docstring)."""

    def __init__(self, name: str, root: Path = ROOT, proc: Path = Path("/proc")):
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"not a cgroup name: {name!r}")
        self.root, self.proc = Path(root), Path(proc)
        self.path = self.root / name
        self.origin: dict[int, str] = {}     # pid -> the cgroup it came from ('/...', relative to root)
        self.home: str | None = None         # the first capped process's cgroup: where strays go back
        self.made = False

    def cgroup_of(self, pid: int) -> str | None:
        """The v2 cgroup of a process ('0::/path' in /proc/PID/cgroup), None when it is gone."""
        try:
            text = (self.proc / str(pid) / "cgroup").read_text()
        except OSError:
            return None
        for line in text.splitlines():
            if line.startswith("0::"):
                return line[3:].strip() or "/"
        return None

    def _write(self, path: Path, text: str) -> None:
        with open(path, "w") as f:
            f.write(text)

    def _move(self, pid: int, cgroup_dir: Path) -> None:
        self._write(cgroup_dir / "cgroup.procs", str(pid))

    def _rmdir(self) -> None:
        os.rmdir(self.path)

    def apply(self, pids: Sequence[int], percent: float) -> None:
        """The processes capped at `percent` of a CPU, verified. On a failure what was done is undone."""
        want = cpu_max(percent)
        control = self.root / "cgroup.subtree_control"
        try:
            if "cpu" not in control.read_text().split():
                self._write(control, "+cpu")
            self.path.mkdir(exist_ok=True)
            self.made = True
            self._write(self.path / "cpu.max", want)
            got = (self.path / "cpu.max").read_text().split()
            if got != want.split():
                raise RuntimeError(f"{self.path}/cpu.max reads {' '.join(got)!r}, not {want!r}")
            mine = "/" + self.path.relative_to(self.root).as_posix()
            for pid in pids:
                origin = self.cgroup_of(pid)
                if origin is None:
                    continue   # gone meanwhile
                self.origin.setdefault(pid, origin)
                self.home = self.home or origin
                self._move(pid, self.path)
                now = self.cgroup_of(pid)
                if now is not None and now != mine:
                    raise RuntimeError(f"process {pid} is in {now}, not {mine}, after the move")
            if not self.origin:
                raise ProcessLookupError("no process left to cap")
        except BaseException:
            self.release()
            raise

    def _strays_home(self) -> None:
        """Processes in the cgroup that were not moved in (a capped daemon forked them, e.g. a
        worker respawned) back into the first capped process's cgroup: else the cgroup stays
        populated, cannot be removed, and they stay capped after the run."""
        try:
            listed = (self.path / "cgroup.procs").read_text().split()
        except OSError:
            return
        mine = "/" + self.path.relative_to(self.root).as_posix()
        for pid in map(int, listed):
            if self.cgroup_of(pid) != mine:
                continue
            try:
                self._move(pid, self.root / (self.home or "/").lstrip("/"))
            except OSError as e:
                if e.errno not in (errno.ESRCH, errno.ENOENT):
                    raise

    def release(self) -> None:
        """Every process back where it came from, the cgroup removed. Idempotent."""
        for pid, origin in list(self.origin.items()):
            dest = self.root / origin.lstrip("/")
            try:
                if self.cgroup_of(pid) is not None:
                    self._move(pid, dest)
            except OSError as e:
                if e.errno not in (errno.ESRCH, errno.ENOENT):   # exited meanwhile: nothing to move
                    raise
            del self.origin[pid]
        if self.made:
            self._strays_home()
            deadline = time.monotonic() + RMDIR_S
            while True:
                try:
                    self._rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            self.made = False

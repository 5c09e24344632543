"""A stand-in for a cgroup hierarchy (v1's cpu or v2) and /proc under a test's directory, for the
`slow` kind's tests: the tree keeps which cgroup every thread is in and writes what the kernel shows
(/proc/PID/cgroup, /proc/PID/task/TID/cgroup, each cgroup's cgroup.procs and tasks), and its CpuCap
moves threads as the kernel does (a pid into cgroup.procs: the whole thread group; a tid into tasks:
that thread, v1 only; a missing process: ESRCH; a missing cgroup: ENOENT; rmdir of a cgroup with
members: EBUSY)."""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from harness.faults.cgroup import CpuCap, Hierarchy


class FakeTree:
    def __init__(self, tmp: Path, version: int = 2, controllers: str = "cpuset cpu io memory pids",
                 subtree: str = "", period_us: int = 100_000):
        self.version, self.period_us = version, period_us
        self.root, self.proc = tmp / "cgroup", tmp / "proc"
        self.root.mkdir()
        self.proc.mkdir()
        if version == 2:
            (self.root / "cgroup.controllers").write_text(controllers + "\n")
            (self.root / "cgroup.subtree_control").write_text(subtree + "\n")
        (self.root / "system.slice").mkdir()
        self.hierarchy = Hierarchy(version, self.root)
        self.threads: dict[int, list[int]] = {}   # pid -> its tids (the pid first)
        self.at: dict[int, str] = {}              # tid -> cgroup path
        self.refuse_tasks: set[int] = set()       # tids a write to `tasks` does not move
        self.procs_skips: set[int] = set()        # tids a write to cgroup.procs leaves behind
        self._sync()

    def process(self, pid: int, cgroup_path: str = "/system.slice", threads: tuple[int, ...] = ()) -> None:
        self.threads[pid] = [pid, *threads]
        for tid in self.threads[pid]:
            (self.proc / str(pid) / "task" / str(tid)).mkdir(parents=True)
            self.at[tid] = cgroup_path
        self._sync()

    def exit(self, pid: int) -> None:
        for tid in self.threads.pop(pid):
            del self.at[tid]
        shutil.rmtree(self.proc / str(pid))
        self._sync()

    def where(self, pid: int, tid: int | None = None) -> str:
        return self.at[pid if tid is None else tid]

    def line(self, path: str) -> str:
        if self.version == 2:
            return f"0::{path}\n"
        return f"5:memory:/user.slice\n3:cpu,cpuacct:{path}\n1:name=systemd:/init.scope\n0::/\n"

    def _dir(self, path: str) -> Path:
        return self.root / path.lstrip("/")

    def _path(self, directory: Path) -> str:
        rel = directory.relative_to(self.root).as_posix()
        return "/" if rel == "." else "/" + rel

    def _sync(self) -> None:
        for pid, tids in self.threads.items():
            (self.proc / str(pid) / "cgroup").write_text(self.line(self.at[pid]))
            for tid in tids:
                (self.proc / str(pid) / "task" / str(tid) / "cgroup").write_text(self.line(self.at[tid]))
        for d in [self.root, *(p for p in self.root.rglob("*") if p.is_dir())]:
            here = self._path(d)
            tids = [t for t, c in self.at.items() if c == here]
            pids = sorted({p for p, ts in self.threads.items() if any(t in tids for t in ts)})
            (d / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
            if self.version == 1:
                (d / "tasks").write_text("".join(f"{t}\n" for t in sorted(tids)))

    def fork(self, parent: int, child: int) -> None:
        """A new process in its parent's cgroup (a respawned worker)."""
        self.process(child, self.at[parent])

    def cap(self, name: str = "nestlab-r-db") -> CpuCap:
        tree = self

        class Cap(CpuCap):
            def _mkdir(self):
                self.path.mkdir(exist_ok=True)
                if tree.version == 1:
                    (self.path / "cpu.cfs_period_us").write_text(f"{tree.period_us}\n")
                    (self.path / "cpu.cfs_quota_us").write_text("-1\n")
                else:
                    (self.path / "cpu.max").write_text(f"max {tree.period_us}\n")
                tree._sync()

            def _write(self, path, text):
                if path.name == "cgroup.subtree_control":   # +ctrl enables, -ctrl disables
                    have = path.read_text().split()
                    have = [c for c in have if c != text[1:]] + ([text[1:]] if text[0] == "+" else [])
                    path.write_text(" ".join(have) + "\n")
                    return
                if path.name in ("cpu.cfs_quota_us", "cpu.max"):
                    path.write_text(text + "\n")
                    return
                if not path.parent.is_dir():
                    raise FileNotFoundError(errno.ENOENT, "No such file or directory", str(path))
                ident, to = int(text), tree._path(path.parent)
                if path.name == "cgroup.procs":
                    if ident not in tree.threads:
                        raise OSError(errno.ESRCH, "No such process")
                    for tid in tree.threads[ident]:
                        if tid not in tree.procs_skips:
                            tree.at[tid] = to
                elif path.name == "tasks" and tree.version == 1:
                    if ident not in tree.at:
                        raise OSError(errno.ESRCH, "No such process")
                    if ident not in tree.refuse_tasks:
                        tree.at[ident] = to
                else:
                    raise AssertionError(f"unexpected write to {path}")
                tree._sync()

            def _rmdir(self):
                if tree._path(self.path) in tree.at.values():
                    raise OSError(errno.EBUSY, "Device or resource busy")
                shutil.rmtree(self.path)   # real cgroupfs removes its control files with the directory

        return Cap(name, self.hierarchy, self.proc)


def mountinfo(tmp: Path, *mounts: tuple[str, str, str]) -> Path:
    """A mountinfo file of cgroup mounts, each (fstype, mount point, super options)."""
    lines = ["22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw"]
    for i, (fstype, point, opts) in enumerate(mounts):
        lines.append(f"{30 + i} 23 0:{40 + i} / {point.replace(' ', chr(92) + '040')} rw,nosuid shared:{i} - "
                     f"{fstype} {fstype} {opts}")
    path = tmp / "mountinfo"
    path.write_text("\n".join(lines) + "\n")
    return path

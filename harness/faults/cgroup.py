"""A CPU quota over a set of processes, on cgroup v2 or cgroup v1 (the `slow` fault kind, docs/faults.md).

Both are the kernel's CFS bandwidth control: a quota of CPU time per period. `cpu_hierarchy()` finds
where it is, from /proc/self/mountinfo (no path is assumed): a cgroup2 mount whose
`cgroup.controllers` lists `cpu`, else a cgroup v1 mount carrying the `cpu` controller (a machine
whose controllers are bound to v1, like this one: `/sys/fs/cgroup/cpu`); `NoCpuController` says what
is missing when neither exists.

`CpuCap(name, hierarchy).apply(pids, percent)` makes `<mount>/<name>`, writes the quota and reads it
back (v2: `cpu.max` = `QUOTA PERIOD`, the `cpu` controller enabled in the mount's
`cgroup.subtree_control` when it is not, and disabled again by the release of the last cap relying on
it; v1: `cpu.cfs_quota_us` = percent x the cgroup's
`cpu.cfs_period_us`), and moves each process in by writing its pid to `cgroup.procs` (the whole
thread group), verified on every thread in `/proc/PID/task/TID/cgroup` (on v1 a stray thread is
moved by writing its tid to `tasks`). `release()` moves every process (and, on v1, each thread that
was elsewhere than its leader) back into the cgroup it came from, moves processes forked into the
cgroup meanwhile to where the first process came from, and removes the cgroup; it is idempotent and
tolerates processes that exited. Mininet hosts share the machine's cgroup tree and pids, so the
runner does all of it.
"""

from __future__ import annotations

import errno
import os
import re
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

MOUNTINFO = Path("/proc/self/mountinfo")
PERIOD_US = 100_000
MIN_QUOTA_US = 1_000      # the kernel's smallest quota
RMDIR_S = 2.0             # how long a cgroup just emptied may take to be removable
# v2 mounts where this process enabled the cpu controller (cgroup.subtree_control) -> the caps relying on
# it: disabled again when the last of them is released, on every path (issue 40 item 15)
_ENABLED: dict[Path, int] = {}


class NoCpuController(LookupError):  # noqa: N818 - reads as what the machine lacks
    """Neither cgroup v2 nor cgroup v1 offers the cpu controller here (the message says what was found)."""


@dataclass(frozen=True)
class Hierarchy:
    """A mounted cgroup hierarchy with the cpu controller: `version` 1 or 2, where it is mounted, and
    `root`, the cgroup path of the mount's top (mountinfo's root field: '/' unless the mount shows
    a subtree, as in some containers)."""

    version: int
    mount: Path
    root: str = "/"

    @property
    def name(self) -> str:
        return f"cgroup v{self.version}"

    def cgroup_in(self, text: str) -> str | None:
        """This hierarchy's cgroup path in a /proc/PID/cgroup text ('0::/p' on v2; 'N:cpu,cpuacct:/p' on
        v1), None when it has no line for it."""
        for line in text.splitlines():
            parts = line.split(":", 2)
            if len(parts) != 3:
                continue
            if (self.version == 2 and parts[0] == "0" and parts[1] == "") or \
                    (self.version == 1 and "cpu" in parts[1].split(",")):
                return parts[2].strip() or "/"
        return None

    def dir_of(self, cgroup: str) -> Path:
        """The directory of a cgroup path (the mount's top when the path lies outside the mount)."""
        path, top = PurePosixPath(cgroup), PurePosixPath(self.root)
        try:
            rel = path.relative_to(top)
        except ValueError:
            return self.mount
        return self.mount / rel if str(rel) != "." else self.mount

    def path_of(self, directory: Path) -> str:
        """The cgroup path of a directory under the mount."""
        rel = Path(directory).relative_to(self.mount).as_posix()
        return str(PurePosixPath(self.root) / rel) if rel != "." else self.root


def _unescape(field: str) -> str:
    """A mountinfo path field ('\\040' is a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def cgroup_mounts(mountinfo: Path = MOUNTINFO) -> list[tuple[int, Path, str, list[str]]]:
    """(version, mount point, root, super options) of every cgroup mount in a mountinfo file."""
    out = []
    try:
        lines = Path(mountinfo).read_text().splitlines()
    except OSError:
        return out
    for line in lines:
        fields = line.split()
        if " - " not in line or len(fields) < 5:
            continue
        fstype, _source, *opts = line.split(" - ", 1)[1].split()
        if fstype in ("cgroup", "cgroup2"):
            out.append((2 if fstype == "cgroup2" else 1, Path(_unescape(fields[4])), _unescape(fields[3]),
                        (opts[0] if opts else "").split(",")))
    return out


def cpu_mounts(mountinfo: Path = MOUNTINFO) -> list[Path]:
    """Where a run's cgroup could be: every cgroup2 mount and every v1 mount with the cpu controller."""
    return [m for v, m, _r, opts in cgroup_mounts(mountinfo) if v == 2 or "cpu" in opts]


def cpu_hierarchy(mountinfo: Path = MOUNTINFO) -> Hierarchy:
    """The hierarchy a CPU quota goes in: v2 when its cpu controller is available, else v1's cpu
    hierarchy; NoCpuController saying what was found when neither is."""
    mounts = cgroup_mounts(mountinfo)
    seen = []
    for version, mount, root, _opts in mounts:
        if version != 2:
            continue
        try:
            have = (mount / "cgroup.controllers").read_text().split()
        except OSError as e:
            seen.append(f"{mount}/cgroup.controllers cannot be read: {e.strerror or e}")
            continue
        if "cpu" in have:
            return Hierarchy(2, mount, root)
        seen.append(f"cgroup2 at {mount} lists {' '.join(have) or 'no controller'}")
    for version, mount, root, opts in mounts:
        if version == 1 and "cpu" in opts:
            return Hierarchy(1, mount, root)
    v1 = sorted({o for v, _m, _r, opts in mounts if v == 1 for o in opts if o not in ("rw", "ro")})
    seen.append(f"cgroup v1 mounts carry {', '.join(v1)}" if v1 else "no cgroup v1 mount")
    raise NoCpuController(f"no cgroup v2 or v1 hierarchy with the cpu controller in {mountinfo} "
                          f"({'; '.join(seen) if mounts else 'no cgroup mounted at all'})")


def cpu_problem(mountinfo: Path = MOUNTINFO) -> str | None:
    """What is missing for a CPU quota on this machine (None: nothing)."""
    try:
        cpu_hierarchy(mountinfo)
    except NoCpuController as e:
        return str(e)
    return None


def quota_us(percent: float, period_us: int = PERIOD_US) -> int:
    """The CPU time per period, in microseconds, for `percent` of one CPU."""
    if not 0 < percent <= 100:
        raise ValueError(f"a CPU share above 0% and at most 100%, not {percent:g}%")
    return max(MIN_QUOTA_US, round(period_us * percent / 100.0))


def cpu_max(percent: float, period_us: int = PERIOD_US) -> str:
    """v2's cpu.max for `percent` of one CPU: 'QUOTA PERIOD' in microseconds."""
    return f"{quota_us(percent, period_us)} {period_us}"


class CpuCap:
    """One cgroup at the top of `hierarchy` holding capped processes (module docstring)."""

    def __init__(self, name: str, hierarchy: Hierarchy, proc: Path = Path("/proc")):
        if not name or "/" in name or name.startswith("."):
            raise ValueError(f"not a cgroup name: {name!r}")
        self.hierarchy, self.proc = hierarchy, Path(proc)
        self.path = hierarchy.mount / name
        self.origin: dict[int, str] = {}     # pid -> the cgroup its leader came from
        self.thread_origin: dict[int, dict[int, str]] = {}   # v1: pid -> {tid: cgroup} of threads elsewhere
        self.home: str | None = None         # where processes forked into the cgroup meanwhile go back to
        self.limit = ""                      # what was written, e.g. 'cpu.max 20000 100000'
        self.made = False
        self.holds_cpu = False               # counted in _ENABLED (the controller is ours to disable)

    def cgroup_of(self, pid: int, tid: int | None = None) -> str | None:
        """The cgroup of a process (or one of its threads) in this hierarchy, None when it is gone."""
        where = self.proc / str(pid) if tid is None else self.proc / str(pid) / "task" / str(tid)
        try:
            return self.hierarchy.cgroup_in((where / "cgroup").read_text())
        except OSError:
            return None

    def threads(self, pid: int) -> list[int]:
        try:
            return sorted(int(t) for t in os.listdir(self.proc / str(pid) / "task") if t.isdigit())
        except OSError:
            return []

    def _write(self, path: Path, text: str) -> None:
        with open(path, "w") as f:
            f.write(text)

    def _move(self, pid: int, cgroup_dir: Path) -> None:
        self._write(cgroup_dir / "cgroup.procs", str(pid))

    def _move_thread(self, tid: int, cgroup_dir: Path) -> None:
        self._write(cgroup_dir / "tasks", str(tid))

    def _mkdir(self) -> None:
        self.path.mkdir(exist_ok=True)   # the kernel fills it with the control files

    def _rmdir(self) -> None:
        os.rmdir(self.path)

    def _set_quota(self, percent: float) -> None:
        if self.hierarchy.version == 2:
            mount = self.hierarchy.mount
            control = mount / "cgroup.subtree_control"
            if "cpu" not in control.read_text().split():
                self._write(control, "+cpu")
                _ENABLED[mount] = _ENABLED.get(mount, 0)
            if mount in _ENABLED and not self.holds_cpu:
                _ENABLED[mount] += 1
                self.holds_cpu = True
            file, want, of = "cpu.max", cpu_max(percent), ""
        else:   # the period the kernel gave the new cgroup (100 ms unless changed)
            period = int((self.path / "cpu.cfs_period_us").read_text())
            file, want, of = "cpu.cfs_quota_us", str(quota_us(percent, period)), f" of cpu.cfs_period_us {period}"
        self._write(self.path / file, want)
        got = (self.path / file).read_text().split()
        if got != want.split():
            raise RuntimeError(f"{self.path / file} reads {' '.join(got)!r}, not {want!r}")
        self.limit = f"{file} {want}{of}"

    def _verify(self, pid: int, mine: str) -> None:
        """Every thread of `pid` in `mine` (v1: a stray thread moved by its tid, once)."""
        for tid in [None, *self.threads(pid)]:
            now = self.cgroup_of(pid, tid)
            if now is not None and now != mine and tid is not None and self.hierarchy.version == 1:
                self._move_thread(tid, self.path)
                now = self.cgroup_of(pid, tid)
            if now is not None and now != mine:
                who = f"process {pid}" if tid is None else f"thread {tid} of process {pid}"
                raise RuntimeError(f"{who} is in {now}, not {mine}, after the move")

    def apply(self, pids: Sequence[int], percent: float) -> None:
        """The processes capped at `percent` of a CPU, verified. On a failure what was done is undone."""
        try:
            self._mkdir()
            self.made = True
            self._set_quota(percent)
            mine = self.hierarchy.path_of(self.path)
            for pid in pids:
                threads = {tid: self.cgroup_of(pid, tid) for tid in self.threads(pid)}
                origin = self.cgroup_of(pid)
                if origin is None:
                    continue   # gone meanwhile
                self.origin.setdefault(pid, origin)
                self.home = self.home or origin
                stray = {t: c for t, c in threads.items() if c is not None and c != origin}
                if stray and self.hierarchy.version == 1:
                    self.thread_origin[pid] = stray
                self._move(pid, self.path)
                self._verify(pid, mine)
            if not self.origin:
                raise ProcessLookupError("no process left to cap")
        except BaseException:
            self.release()
            raise

    def _back(self, move, ident: int, cgroup: str) -> None:
        """One process or thread into `cgroup` (the mount's top when that cgroup is gone); nothing when
        it exited."""
        dest = self.hierarchy.dir_of(cgroup)
        if not dest.is_dir():
            dest = self.hierarchy.mount
        try:
            move(ident, dest)
        except OSError as e:
            if e.errno not in (errno.ESRCH, errno.ENOENT):   # exited meanwhile: nothing to move
                raise

    def release(self) -> None:
        """Every process back where it came from, the cgroup removed, the cpu controller disabled again
        if this process enabled it and no other cap of it still relies on it. Idempotent."""
        try:
            self._release()
        finally:
            self._release_cpu()

    def _release_cpu(self) -> None:
        if not self.holds_cpu:
            return
        self.holds_cpu = False
        mount = self.hierarchy.mount
        _ENABLED[mount] -= 1
        if _ENABLED[mount] > 0:
            return
        del _ENABLED[mount]
        try:
            self._write(mount / "cgroup.subtree_control", "-cpu")
        except OSError as e:
            # EBUSY: a cgroup below enabled it for its own children since; theirs now
            if e.errno not in (errno.EBUSY, errno.ENOENT):
                raise

    def _release(self) -> None:
        for pid, origin in list(self.origin.items()):
            if self.cgroup_of(pid) is not None:
                self._back(self._move, pid, origin)
                for tid, cgroup in self.thread_origin.get(pid, {}).items():
                    self._back(self._move_thread, tid, cgroup)
            del self.origin[pid]
            self.thread_origin.pop(pid, None)
        if not self.made:
            return
        deadline = time.monotonic() + RMDIR_S
        while True:
            try:
                for pid in (self.path / "cgroup.procs").read_text().split():   # forked in meanwhile
                    self._back(self._move, int(pid), self.home or self.hierarchy.root)
                self._rmdir()
                break
            except FileNotFoundError:
                break
            except OSError as e:
                if e.errno != errno.EBUSY or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
        self.made = False


# -- on a testbed node: `python3 -c <this file's source> OP ARGS` (harness.faults.onnode) ----------
# Standard library only: a node running a tier may have nothing of nestlab installed. Each OP prints
# one JSON document; an error prints {"error": "..."} ("gone": the processes exited) and exits 1.

def _state(cap: CpuCap) -> dict:
    """What the runner keeps of a cap made on a node, to release it there later (from_state)."""
    h = cap.hierarchy
    return {"version": h.version, "mount": str(h.mount), "root": h.root, "path": str(cap.path),
            "limit": cap.limit, "home": cap.home, "enabled": cap.holds_cpu,
            "origin": {str(p): c for p, c in cap.origin.items()},
            "threads": {str(p): {str(t): c for t, c in m.items()} for p, m in cap.thread_origin.items()}}


def from_state(state: dict) -> CpuCap:
    """The cap a `cap` OP made, as its state describes it (made, its processes' origins)."""
    h = Hierarchy(int(state["version"]), Path(state["mount"]), state["root"])
    cap = CpuCap(Path(state["path"]).name, h)
    cap.origin = {int(p): c for p, c in state["origin"].items()}
    cap.thread_origin = {int(p): {int(t): c for t, c in m.items()} for p, m in state.get("threads", {}).items()}
    cap.home, cap.limit, cap.made = state.get("home"), state.get("limit", ""), True
    if state.get("enabled") and h.version == 2:   # this run enabled the cpu controller: disabled again
        cap.holds_cpu = True
        _ENABLED[h.mount] = _ENABLED.get(h.mount, 0) + 1
    return cap


def remove(path: str, disable_cpu: bool = False) -> bool:
    """A run's cgroup left behind (a killed runner): what is in it moved to the mount's top, the
    cgroup removed (and v2's cpu controller disabled again when the run had enabled it). Only
    `<cpu mount>/nestlab-*`. The undo entry of the run's ledger on a testbed node."""
    p = Path(path)
    h = next((Hierarchy(v, m, r) for v, m, r, opts in cgroup_mounts() if m == p.parent and (v == 2 or "cpu" in opts)),
             None)
    if h is None or not p.name.startswith("nestlab-"):
        return False
    cap = from_state({"version": h.version, "mount": str(h.mount), "root": h.root, "path": path, "origin": {},
                      "enabled": disable_cpu})
    cap.made = p.is_dir()
    cap.release()
    return True


def reachable_hierarchy() -> Hierarchy:
    """cpu_hierarchy(), if this process can reach it: mountinfo also lists a mount hidden under a
    later one (a fresh sysfs mounted on /sys in a container's mount namespace hides /sys/fs/cgroup)."""
    h = cpu_hierarchy()
    if not (h.mount / "cgroup.procs").is_file():
        raise NoCpuController(f"{MOUNTINFO} lists the {h.name} hierarchy with the cpu controller at {h.mount}, but "
                              "it is not reachable there (hidden under another mount)")
    return h


def main(argv: Sequence[str]) -> int:
    import json

    op, args = (argv[0], list(argv[1:])) if argv else ("", [])
    try:
        if op == "check":      # the hierarchy a cap would go in
            h = reachable_hierarchy()
            out: object = {"version": h.version, "mount": str(h.mount), "root": h.root}
        elif op == "cap":      # NAME PERCENT PID...
            cap = CpuCap(args[0], reachable_hierarchy())
            cap.apply([int(p) for p in args[2:]], float(args[1]))
            out = _state(cap)
        elif op == "release":  # STATE (the cap's JSON)
            from_state(json.loads(args[0])).release()
            out = True
        elif op == "remove":   # PATH [disable-cpu]
            out = remove(args[0], args[1:] == ["disable-cpu"])
        else:
            raise ValueError(f"unknown operation {op!r} (check, cap, release, remove)")
    except ProcessLookupError as e:
        print(json.dumps({"error": str(e), "gone": True}))
        return 1
    except Exception as e:  # noqa: BLE001 - one JSON line for the runner
        print(json.dumps({"error": f"{type(e).__name__}: {e}"}))
        return 1
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    import sys

    raise SystemExit(main(sys.argv[1:]))

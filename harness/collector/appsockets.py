"""Collector source for application and socket modules, from the interceptor's counter files.

The LD_PRELOAD interceptor (harness/interceptor/) keeps one counter file per process in the run's
shared memory directory; harness.interceptor.shm reads them. Every poll this source reads all the
files and reports:

- one 'socket' module per open, connected (or accepted) AF_INET/AF_INET6 stream socket, key
  'sock:<pid>:<fd>:<inode>', counters in/out total_msgs (completed receive/send calls), wait_ms (time
  blocked in them and in poll/select/epoll on the socket, including calls still in progress), errors
  (failed calls), bytes; child 'tcp:<inode>' (the TCP source keys its modules by socket inode);
- one 'app' module per process that has had such a socket, key 'app:<pid>', counters the sum over
  its sockets, the closed ones included (thesis 3.2.1: an application is the sum of its sockets), so
  they never go down when a connection ends; children its live socket keys.

A process is gone when /proc/<pid>/stat is missing, shows a zombie or another start time, or the
library saw exit(): from then on its modules are no longer reported (they die). Counters are
reported raw, as read: a counter that goes backwards is left for the analysis, which applies the
thesis 3.4 rule (analysis/model/stretches.py).

What the library could not count (calls whose counters were locked, sockets beyond its slots, a
process whose file got no space, call ends never recorded, locks taken over) is a warning: one line
on stderr (the collector's log) starting with WARNING_PREFIX, when it first appears, at most every
WARN_INTERVAL_S while it grows, and a last one when the process ends or the source closes;
`warnings()` returns them, `warnings_from_log(path)` reads them back from a log (the last line per
process) for the run's warnings.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path

from harness.collector.source import Observation
from harness.interceptor.shm import (
    HF_HAD_GRAPH,
    SF_ACCEPTED,
    SF_INHERITED,
    SUFFIX,
    InterceptorStateError,
    ProcessSnapshot,
    ShmFile,
    SparseFileError,
    process_alive,
)

WARNING_PREFIX = "interceptor warning: "
WARN_INTERVAL_S = 10.0


@dataclass
class _Proc:
    file: ShmFile
    pidtag: str
    dead: bool = False
    foreign: bool = False                       # seen alive in another network namespace
    warned: tuple = ()                          # ProcessSnapshot.loss_key() last warned about
    warned_at: float = float("-inf")
    unwarned: ProcessSnapshot | None = None     # a reading with more loss than warned, held back


def warnings_from_log(path: str | os.PathLike) -> list[str]:
    """The interceptor warnings in a collector log (without the prefix): the last line of each
    process, which has its final tallies, in the order the processes first warned."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return []
    last: dict[str, str] = {}
    for line in text.splitlines():
        i = line.find(WARNING_PREFIX)
        if i < 0:
            continue
        msg = line[i + len(WARNING_PREFIX):].strip()
        last[msg.split("]", 1)[0]] = msg
    return list(last.values())


def netns_of(pid: int | str, proc_root: str = "/proc") -> int | None:
    try:
        return os.stat(f"{proc_root}/{pid}/ns/net").st_ino
    except OSError:
        return None


class InterceptorSource:
    """Application and socket modules from the interceptor's files in shm_dir.

    notify_path: if given, bind a Unix datagram socket there ('@name': abstract) and collect the
    library's notifications (new processes and sockets, warnings, pause/resume); `messages()` returns
    them. The files alone are enough for the modules; the datagrams are hints and a log.
    same_netns: report only processes in the reader's own network namespace (the collector runs in
    the monitored host's; Mininet hosts share /proc, so another host's processes are visible).
    """

    name = "interceptor"

    def __init__(self, shm_dir: str | os.PathLike, notify_path: str | os.PathLike | None = None,
                 proc_root: str = "/proc", same_netns: bool = True):
        self.shm_dir = str(shm_dir)
        self.proc_root = proc_root
        self.netns = netns_of("self", proc_root) if same_netns else None
        self.procs: dict[str, _Proc] = {}
        self.dead: dict[str, int] = {}            # file name -> inode of a file whose process is gone
        self.used_pids: dict[int, int] = {}       # pid -> starttime that owns the plain 'app:<pid>' key
        self.live: set[str] = set()               # keys reported by the last poll
        self.gone: set[str] = set()               # keys reported once and then not: never reused
        self.renamed: dict[str, str] = {}         # key that came back -> the fresh key it uses now
        self._messages: deque[dict] = deque(maxlen=10000)
        self._warnings: list[str] = []
        self.unreadable: set[str] = set()        # file names warned about as unreadable
        self.sock: socket.socket | None = None
        self.notify_path = str(notify_path) if notify_path is not None else None
        if self.notify_path:
            self._bind(self.notify_path)

    # -- notifications ---------------------------------------------------------------------------

    def _bind(self, path: str) -> None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        s.setblocking(False)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        if path.startswith("@"):
            s.bind("\0" + path[1:])
        else:
            try:
                if stat.S_ISSOCK(os.lstat(path).st_mode):
                    os.unlink(path)
            except FileNotFoundError:
                pass
            s.bind(path)
            os.chmod(path, 0o600)
        self.sock = s

    def fileno(self) -> int:
        return self.sock.fileno() if self.sock else -1

    def _drain(self) -> bool:
        got = False
        while self.sock is not None:
            try:
                data = self.sock.recv(65536)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                break
            try:
                self._messages.append(json.loads(data.decode(errors="replace")))
                got = True
            except ValueError:
                self._messages.append({"ev": "garbled", "raw": data[:200].decode(errors="replace")})
        return got

    def messages(self) -> list[dict]:
        """Notifications received so far (and not returned before)."""
        self._drain()
        out = list(self._messages)
        self._messages.clear()
        return out

    # -- polling ---------------------------------------------------------------------------------

    def _pidtag(self, pid: int, starttime: int) -> str:
        owner = self.used_pids.setdefault(pid, starttime)
        return str(pid) if owner == starttime else f"{pid}@{starttime}"

    def _open(self, name: str, ino: int) -> _Proc | None:
        try:
            f = ShmFile(os.path.join(self.shm_dir, name))
        except SparseFileError as e:      # not readable without risking SIGBUS: say so, once
            if name not in self.unreadable:
                self.unreadable.add(name)
                self._say(f"[{name}] {e}")
            return None
        except (OSError, InterceptorStateError, ValueError):
            return None   # being replaced, foreign, or not ours to read: try again next poll
        if f.ino != ino:
            f.close()
            return None
        p = _Proc(file=f, pidtag=self._pidtag(f.pid, f.starttime))
        self.procs[name] = p
        return p

    def _bury(self, name: str, p: _Proc) -> None:
        if p.unwarned is not None:
            self._warn(p, p.unwarned)
        p.file.close()
        self.dead[name] = p.file.ino
        del self.procs[name]

    # -- what could not be counted ---------------------------------------------------------------

    def _check_losses(self, p: _Proc, snap: ProcessSnapshot, final: bool) -> None:
        key = snap.loss_key()
        if p.foreign or not any(key) or key == p.warned:
            return
        if not final and time.monotonic() - p.warned_at < WARN_INTERVAL_S:
            p.unwarned = snap                            # said recently: the rest later
            return
        self._warn(p, snap)

    def _warn(self, p: _Proc, snap: ProcessSnapshot) -> None:
        argv = snap.cmdline
        comm = os.path.basename(argv[0]) if argv else "?"
        self._say(f"[app:{p.pidtag}] {comm} (pid {snap.pid}): " + "; ".join(snap.problems()))
        p.warned = snap.loss_key()
        p.warned_at = time.monotonic()
        p.unwarned = None

    def _say(self, line: str) -> None:
        self._warnings.append(line)
        print(WARNING_PREFIX + line, file=sys.stderr, flush=True)

    def warnings(self) -> list[str]:
        """Every warning line so far (without the prefix), in order."""
        return list(self._warnings)

    def poll(self) -> list[Observation]:
        self._drain()
        obs: list[Observation] = []
        try:
            entries = list(os.scandir(self.shm_dir))
        except FileNotFoundError:
            entries = []
        present = set()
        for e in entries:
            name = e.name
            if not name.endswith(SUFFIX) or name.startswith("."):
                continue
            try:
                ino = e.inode()
            except OSError:
                continue
            present.add(name)
            if self.dead.get(name) == ino:
                continue
            p = self.procs.get(name)
            if p is not None and p.file.ino != ino:       # the pid was reused: a new file
                self._bury(name, p)
                self.dead.pop(name, None)
                p = None
            if p is None:
                p = self._open(name, ino)
                if p is None:
                    continue
            snap = p.file.snapshot()
            gone = snap.exited or not process_alive(snap.pid, snap.starttime, self.proc_root)
            if not gone and self.netns is not None and netns_of(snap.pid, self.proc_root) != self.netns:
                p.foreign = True
                continue                                  # another host's process
            self._check_losses(p, snap, final=gone)
            if gone:
                self._bury(name, p)
                continue
            obs.extend(self._observe(p, snap))
        for name in list(self.procs):
            if name not in present:                       # file removed: the run is being torn down
                self._bury(name, self.procs[name])
        obs = self._unique(obs)
        live = {o.key for o in obs}
        self.gone |= self.live - live
        self.live = live
        return obs

    def _unique(self, obs: list[Observation]) -> list[Observation]:
        """The run store keys modules uniquely for the whole run: a key that was reported, then
        missed a snapshot and now is back (it should not happen) gets a fresh name, not a rebirth."""
        def fresh(key: str) -> str:
            if key not in self.gone:
                return key
            new = self.renamed.get(key)
            if new is None or new in self.gone:
                n = 2
                while f"{key}#{n}" in self.gone or f"{key}#{n}" in self.live:
                    n += 1
                new = self.renamed[key] = f"{key}#{n}"
            return new
        if not any(o.key in self.gone for o in obs):
            return obs
        for o in obs:
            o.key = fresh(o.key)
            o.children = [fresh(c) if not c.startswith("tcp:") else c for c in o.children]
        return obs

    def _observe(self, p: _Proc, snap: ProcessSnapshot) -> list[Observation]:
        if not (snap.flags & HF_HAD_GRAPH) and not any(s.is_module for s in snap.sockets):
            return []
        argv = snap.cmdline
        comm = os.path.basename(argv[0]) if argv else str(snap.pid)
        cmdline = " ".join(argv)
        app_key = f"app:{p.pidtag}"
        out: list[Observation] = []
        children = []
        live = self.live
        for s in snap.sockets:
            if not s.is_module:
                continue
            key = f"sock:{p.pidtag}:{s.fd}:{s.inode}"
            children.append(key)
            src, sport = s.local or ("", 0)
            dst, dport = s.remote or ("", 0)
            attrs = {}  # the collector reads them only when the module is born
            if key not in live or key in self.renamed:
                attrs = {"pid": snap.pid, "fd": s.fd, "inode": s.inode,
                         "family": "inet6" if s.family == socket.AF_INET6 else "inet",
                         "src": src, "sport": sport, "dst": dst, "dport": dport,
                         "accepted": bool(s.flags & SF_ACCEPTED), "inherited": bool(s.flags & SF_INHERITED),
                         "cmdline": cmdline}
            out.append(Observation(
                key=key, kind="socket", name=f"{comm} {snap.pid} fd{s.fd} {src}:{sport}>{dst}:{dport}",
                counters={"in": s.inp.as_counters(), "out": s.out.as_counters()},
                attrs=attrs, children=[f"tcp:{s.inode}"]))
        i, o = snap.app_counters()
        attrs = {}
        if app_key not in live or app_key in self.renamed:
            attrs = {"pid": snap.pid, "ppid": snap.ppid, "cmdline": cmdline, "argv": argv,
                     "starttime": snap.starttime, "exec_count": snap.exec_count, "shm": snap.path}
        out.insert(0, Observation(
            key=app_key, kind="app", name=f"{comm} {snap.pid}",
            counters={"in": i.as_counters(), "out": o.as_counters()},
            attrs=attrs, children=children))
        return out

    def close(self) -> None:
        for name, p in list(self.procs.items()):
            try:                                     # the last tallies, said now
                self._check_losses(p, p.file.snapshot(), final=True)
            except (OSError, ValueError, InterceptorStateError):
                pass
            self._bury(name, p)
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            if self.notify_path and not self.notify_path.startswith("@"):
                try:
                    os.unlink(self.notify_path)
                except OSError:
                    pass

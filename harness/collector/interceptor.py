"""Collector source for the LD_PRELOAD interceptor: application and socket modules.

The interceptor (harness/interceptor/nestintercept.c) keeps one file per process in the run's shared
memory directory, `<dir>/<pid>.nest`: a header and one 256-byte slot per file descriptor, laid out as
in harness/interceptor/nestintercept.h (keep the two in step). Every poll this source reads all the
files and reports:

- one 'socket' module per open, connected (or accepted) AF_INET/AF_INET6 stream socket, key
  'sock:<pid>:<fd>:<inode>', counters in/out total_msgs (completed receive/send calls), wait_ms (time
  blocked in them and in poll/select/epoll on the socket, including calls still in progress), errors
  (failed calls), bytes; child 'tcp:<inode>' (the TCP source keys its modules by socket inode);
- one 'app' module per process that has had such a socket, key 'app:<pid>', counters the sum over
  its sockets, the closed ones included (thesis 3.2.1: an application is the sum of its sockets), so
  they never go down when a connection ends; children its live socket keys.

A process is gone when /proc/<pid>/stat is missing, shows a zombie or another start time, or the
library saw exit(): from then on its modules are no longer reported (they die). Counters that go
backwards are handled as thesis 3.4 says: the snapshot is discarded (the previous value is reported
again) and, if the next one is also lower, the earlier value is taken as a spurious increase and the
series continues from the new value (re-based, so what is reported never decreases).

The same files carry the application-fault handshake: `pause_process(dir, pid)` sends the pause
signal and returns once the process's handler has run, with the CLOCK_MONOTONIC time it ran
(`resume_process` likewise); `pause_state(dir, pid)` reads it without signalling.
"""

from __future__ import annotations

import json
import mmap
import operator
import os
import socket
import stat
import struct
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from harness.collector.source import Counters, Observation

# ---- format (nestintercept.h) -------------------------------------------------------------------

MAGIC = b"NESTSHM\0"
VERSION = 1
HEADER_SIZE = 4096
SLOT_SIZE = 256
CMDLINE_OFF = 520
CMDLINE_MAX = 2048
SUFFIX = ".nest"

FREE, OPEN, CLOSED = 0, 1, 2
SF_LISTEN, SF_PEER, SF_ACCEPTED, SF_CONNECT, SF_INHERITED, SF_GRAPH = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
HF_EXITED, HF_HAD_GRAPH, HF_FD_OVERFLOW, HF_HANDLER_KEPT, HF_MASK_KEPT, HF_PAUSE_OFF = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20)

# header @0: magic version header_size slot_size nslots pid ppid starttime created_ns exec_count flags
#            exited_ns max_fd pause_sig resume_sig paused ack_seq ack_ns pause_count resume_count
#            pause_ns resume_ns paused_threads refused lost
HDR = struct.Struct("<8sIIIIiiQQIIQIiiIQQQQQQIIQ")
HDR_SEQ_OFF = 256
# @256: seq retired_n retired[in](msgs bytes errors wait_ns) retired[out](...)
RETIRED = struct.Struct("<QQ8Q")
ACK_SEQ_OFF = 80
# slot @0: seq gen inode fd state flags family type lport rport pad laddr raddr open_ns close_ns
SLOT = struct.Struct("<QQQiIIHHHHI16s16sQQ")
DIR_OFF = (128, 192)
# dir: seq msgs bytes errors wait_ns pend_n pend_sum last_ns
DIR = struct.Struct("<8Q")
# a whole slot at once: identity, 32 bytes of padding, dir[0], dir[1]
FULL_SLOT = struct.Struct("<QQQiIIHHHHI16s16sQQ32x8Q8Q")
U64 = struct.Struct("<Q")
U32 = struct.Struct("<I")

assert HDR.size == 144 and SLOT.size == 96 and DIR.size == 64 and RETIRED.size == 80
assert FULL_SLOT.size == SLOT_SIZE

MAX_RETRIES = 50
WAIT_JITTER_MS = 0.05   # decreases this small are read/complete races in the in-progress term


def mono_ns() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class InterceptorStateError(RuntimeError):
    """No usable interceptor file for a process, or the process did not acknowledge a signal."""


# ---- snapshots ----------------------------------------------------------------------------------

@dataclass(slots=True)
class DirCounters:
    msgs: int = 0
    bytes: int = 0
    errors: int = 0
    wait_ns: int = 0        # finished calls plus calls in progress up to the time of reading
    pending: int = 0        # calls or waits in progress

    @property
    def wait_ms(self) -> float:
        return self.wait_ns / 1e6

    def add(self, o: DirCounters) -> None:
        self.msgs += o.msgs
        self.bytes += o.bytes
        self.errors += o.errors
        self.wait_ns += o.wait_ns
        self.pending += o.pending

    def as_counters(self) -> dict[str, int | float]:
        return {"total_msgs": self.msgs, "wait_ms": self.wait_ms, "errors": self.errors, "bytes": self.bytes}


@dataclass(slots=True)
class SocketSnapshot:
    fd: int
    gen: int
    inode: int
    state: int
    flags: int
    family: int
    type: int
    local: tuple[str, int] | None
    remote: tuple[str, int] | None
    open_ns: int
    close_ns: int
    inp: DirCounters
    out: DirCounters

    @property
    def is_graph(self) -> bool:
        return bool(self.flags & SF_GRAPH)

    @property
    def is_listening(self) -> bool:
        return bool(self.flags & SF_LISTEN)

    @property
    def is_data(self) -> bool:
        """Counted in its application: an open AF_INET/AF_INET6 stream socket that is not listening."""
        return self.state == OPEN and self.is_graph and not self.is_listening

    @property
    def is_module(self) -> bool:
        """Reported as a socket module: a data socket with a known peer (it has a TCP connection)."""
        return self.is_data and bool(self.flags & SF_PEER)


@dataclass(frozen=True, slots=True)
class PauseState:
    pid: int
    paused: bool
    ack_seq: int            # +1 for every pause/resume signal the process handled
    ack_mono: float | None  # CLOCK_MONOTONIC seconds when the handler ran for the last one
    pause_count: int
    resume_count: int
    pause_mono: float | None
    resume_mono: float | None
    paused_threads: int     # threads parked in the pause loop right now
    pause_signal: int       # 0: pause/resume disabled in that process
    resume_signal: int
    handler_kept: bool      # the program tried to install its own handler for one of the signals


@dataclass(slots=True)
class ProcessSnapshot:
    path: str
    pid: int
    ppid: int
    starttime: int
    exec_count: int
    flags: int
    nslots: int
    max_fd: int
    lost: int
    refused: int
    cmdline: list[str]
    retired_n: int
    retired_in: DirCounters
    retired_out: DirCounters
    pause: PauseState
    sockets: list[SocketSnapshot] = field(default_factory=list)

    @property
    def exited(self) -> bool:
        return bool(self.flags & HF_EXITED)

    def app_counters(self) -> tuple[DirCounters, DirCounters]:
        """(in, out) of the application: closed data sockets plus the open ones."""
        i = DirCounters()
        o = DirCounters()
        i.add(self.retired_in)
        o.add(self.retired_out)
        for s in self.sockets:
            if s.is_data:
                i.add(s.inp)
                o.add(s.out)
        return i, o


def _ns_to_s(ns: int) -> float | None:
    return ns / 1e9 if ns else None


def _addr(family: int, raw: bytes, port: int) -> tuple[str, int]:
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4]), port
    return socket.inet_ntop(socket.AF_INET6, raw), port


class ShmFile:
    """One process's counter file, mapped read-only."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        try:
            st = os.fstat(fd)
            self.ino = st.st_ino
            head = os.pread(fd, HDR.size, 0)
            if len(head) < HDR.size:
                raise InterceptorStateError(f"{self.path}: truncated header")
            h = HDR.unpack(head)
            if h[0] != MAGIC or h[1] != VERSION or h[2] != HEADER_SIZE or h[3] != SLOT_SIZE:
                raise InterceptorStateError(f"{self.path}: not an interceptor file of format version {VERSION}")
            self.nslots = h[4]
            self.pid = h[5]
            self.starttime = h[7]
            size = HEADER_SIZE + self.nslots * SLOT_SIZE
            if st.st_size < size:
                raise InterceptorStateError(f"{self.path}: {st.st_size} bytes, expected {size}")
            self.mm = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ)
        finally:
            os.close(fd)
        self.last: dict[int, SocketSnapshot] = {}   # fd -> last consistent reading of its slot

    def close(self) -> None:
        self.mm.close()

    # -- pieces --------------------------------------------------------------------------------

    def pause_state(self) -> PauseState:
        mm = self.mm
        for _ in range(MAX_RETRIES):
            s1 = U64.unpack_from(mm, ACK_SEQ_OFF)[0]
            h = HDR.unpack_from(mm, 0)
            if U64.unpack_from(mm, ACK_SEQ_OFF)[0] == s1:
                break
        (_, _, _, _, _, pid, _, _, _, _, flags, _, _, psig, rsig, paused, ack_seq, ack_ns,
         pcount, rcount, pause_ns, resume_ns, pthreads, _, _) = h
        return PauseState(pid=pid, paused=bool(paused), ack_seq=ack_seq, ack_mono=_ns_to_s(ack_ns),
                          pause_count=pcount, resume_count=rcount, pause_mono=_ns_to_s(pause_ns),
                          resume_mono=_ns_to_s(resume_ns), paused_threads=pthreads, pause_signal=psig,
                          resume_signal=rsig, handler_kept=bool(flags & HF_HANDLER_KEPT))

    def _slot(self, fd: int) -> SocketSnapshot | None:
        """The slot of fd, read consistently (its three seqlocks even and unchanged around one
        read); if writers kept it busy through every retry, the last consistent reading (a module
        must not vanish for one snapshot and come back)."""
        mm = self.mm
        off = HEADER_SIZE + fd * SLOT_SIZE
        for _ in range(MAX_RETRIES):
            v = FULL_SLOT.unpack_from(mm, off)
            if v[4] == FREE:
                self.last.pop(fd, None)
                return None
            seq, seq_in, seq_out = v[0], v[15], v[23]
            if (seq | seq_in | seq_out) & 1:
                continue
            if (U64.unpack_from(mm, off)[0] != seq or U64.unpack_from(mm, off + DIR_OFF[0])[0] != seq_in
                    or U64.unpack_from(mm, off + DIR_OFF[1])[0] != seq_out):
                continue
            t = mono_ns()  # after the read: every call in progress started before it
            (_, gen, inode, sfd, state, flags, family, typ, lport, rport, _, laddr, raddr,
             open_ns, close_ns) = v[:15]
            prev = self.last.get(fd)
            if prev is not None and prev.gen == gen and prev.flags == flags and prev.local is not None \
                    and prev.local[1] == lport and (prev.remote or (None, 0))[1] == rport:
                local, remote = prev.local, prev.remote       # endpoints change only with seq
            else:
                local = remote = None
                if family in (socket.AF_INET, socket.AF_INET6):
                    local = _addr(family, laddr, lport)
                    if flags & SF_PEER:
                        remote = _addr(family, raddr, rport)
            ins = []
            for b in (16, 24):
                msgs, nbytes, errors, wait, pend_n, pend_sum = v[b:b + 6]
                ins.append(DirCounters(msgs=msgs, bytes=nbytes, errors=errors,
                                       wait_ns=max(wait + pend_n * t - pend_sum, wait), pending=pend_n))
            snap = SocketSnapshot(fd=sfd, gen=gen, inode=inode, state=state, flags=flags, family=family,
                                  type=typ, local=local, remote=remote, open_ns=open_ns,
                                  close_ns=close_ns, inp=ins[0], out=ins[1])
            self.last[fd] = snap
            return snap
        return self.last.get(fd)

    def cmdline(self) -> list[str]:
        n = min(U32.unpack_from(self.mm, 512)[0], CMDLINE_MAX)
        raw = self.mm[CMDLINE_OFF:CMDLINE_OFF + n]
        parts = raw.split(b"\0")
        if parts and parts[-1] == b"":
            parts.pop()
        return [p.decode(errors="replace") for p in parts]

    def snapshot(self, with_closed: bool = False) -> ProcessSnapshot:
        """A consistent reading: no socket closed between the slots and the retired totals."""
        mm = self.mm
        for attempt in range(MAX_RETRIES):
            s1 = U64.unpack_from(mm, HDR_SEQ_OFF)[0]
            if s1 & 1 and attempt < MAX_RETRIES - 1:
                continue
            h = HDR.unpack_from(mm, 0)
            max_fd = min(h[12], self.nslots)
            socks = []
            for fd in range(max_fd):
                sk = self._slot(fd)
                if sk is not None and (with_closed or sk.state == OPEN):
                    socks.append(sk)
            r = RETIRED.unpack_from(mm, HDR_SEQ_OFF)
            cmd = self.cmdline()
            if U64.unpack_from(mm, HDR_SEQ_OFF)[0] == s1 and not s1 & 1:
                break
        retired_in = DirCounters(msgs=r[2], bytes=r[3], errors=r[4], wait_ns=r[5])
        retired_out = DirCounters(msgs=r[6], bytes=r[7], errors=r[8], wait_ns=r[9])
        return ProcessSnapshot(path=self.path, pid=h[5], ppid=h[6], starttime=h[7], exec_count=h[9],
                               flags=h[10], nslots=self.nslots, max_fd=max_fd, lost=h[24], refused=h[23],
                               cmdline=cmd, retired_n=r[1], retired_in=retired_in, retired_out=retired_out,
                               pause=self.pause_state(), sockets=socks)


def read_process(path: str | os.PathLike, with_closed: bool = False) -> ProcessSnapshot:
    """Read one counter file (also after the process has exited)."""
    f = ShmFile(path)
    try:
        return f.snapshot(with_closed=with_closed)
    finally:
        f.close()


def shm_file(shm_dir: str | os.PathLike, pid: int) -> Path:
    return Path(shm_dir) / f"{pid}{SUFFIX}"


def process_alive(pid: int, starttime: int, proc_root: str = "/proc") -> bool:
    """True while pid is the same process (not gone, not a zombie, same start time)."""
    try:
        with open(f"{proc_root}/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return False
    rest = data[data.rfind(b")") + 2:].split()
    if len(rest) < 20 or rest[0] in (b"Z", b"X", b"x"):
        return False
    return starttime == 0 or int(rest[19]) == starttime


# ---- the application fault handshake -----------------------------------------------------------

def pause_state(shm_dir: str | os.PathLike, pid: int) -> PauseState:
    """The pause/resume state of pid as its interceptor last acknowledged it."""
    path = shm_file(shm_dir, pid)
    try:
        f = ShmFile(path)
    except FileNotFoundError:
        raise InterceptorStateError(f"process {pid} has no interceptor file {path} "
                                    "(not started under the interceptor, or NESTLAB_SHM_DIR differs)") from None
    try:
        return f.pause_state()
    finally:
        f.close()


def wait_for_ack(shm_dir: str | os.PathLike, pid: int, after_seq: int, timeout: float = 2.0,
                 interval: float = 0.001) -> PauseState:
    """Wait until pid's ack_seq passes after_seq; InterceptorStateError on timeout."""
    path = shm_file(shm_dir, pid)
    f = ShmFile(path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            st = f.pause_state()
            if st.ack_seq > after_seq:
                return st
            if time.monotonic() >= deadline:
                raise InterceptorStateError(f"process {pid} did not acknowledge the signal within {timeout:g} s "
                                            f"(ack_seq still {st.ack_seq})")
            time.sleep(interval)
    finally:
        f.close()


def _signal_and_wait(shm_dir, pid: int, pause: bool, timeout: float) -> PauseState:
    before = pause_state(shm_dir, pid)
    sig = before.pause_signal if pause else before.resume_signal
    if not sig:
        raise InterceptorStateError(f"process {pid} runs with pause/resume disabled (NESTLAB_PAUSE_SIGNAL=none)")
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise InterceptorStateError(f"process {pid} is gone") from None
    st = wait_for_ack(shm_dir, pid, before.ack_seq, timeout)
    if st.paused != pause:
        raise InterceptorStateError(f"process {pid} acknowledged the signal but is {'not ' if pause else ''}paused")
    return st


def pause_process(shm_dir: str | os.PathLike, pid: int, timeout: float = 2.0) -> PauseState:
    """Send pid its pause signal and wait for the handler to run; .ack_mono is when it did."""
    return _signal_and_wait(shm_dir, pid, True, timeout)


def resume_process(shm_dir: str | os.PathLike, pid: int, timeout: float = 2.0) -> PauseState:
    """Send pid its resume signal and wait for the handler to run; .ack_mono is when it did."""
    return _signal_and_wait(shm_dir, pid, False, timeout)


# ---- thesis 3.4: counters that go backwards -----------------------------------------------------

class _Monotonic:
    """One counter series: discard a decrease once; on a second one in a row, re-base and go on."""

    __slots__ = ("last", "offset", "held")

    def __init__(self):
        self.last = None
        self.offset = 0
        self.held = False

    def feed(self, raw, jitter=0):
        if self.last is None or raw >= self.last:
            self.last = raw
            self.held = False
            return raw + self.offset
        if self.last - raw <= jitter:          # in-progress wait read a hair late: not an event
            return self.last + self.offset
        if not self.held:                      # discard this snapshot: report the previous value
            self.held = True
            return self.last + self.offset
        self.offset += self.last - raw         # again lower: the earlier value was spurious
        self.last = raw
        self.held = False
        return raw + self.offset


FIELDS = ("total_msgs", "wait_ms", "errors", "bytes")


class _Series:
    """The counters of one module: (in, out) x FIELDS, each series filtered by _Monotonic."""

    __slots__ = ("last", "m")

    def __init__(self):
        self.last: tuple | None = None        # last raw vector, while no series ever went back
        self.m: list[_Monotonic] | None = None

    def filter(self, counters: Counters) -> Counters:
        i, o = counters["in"], counters["out"]
        raw = (i["total_msgs"], i["wait_ms"], i["errors"], i["bytes"],
               o["total_msgs"], o["wait_ms"], o["errors"], o["bytes"])
        if self.m is None:
            last = self.last
            if last is None or all(map(operator.ge, raw, last)):
                self.last = raw                # the usual case: nothing went back, report as is
                return counters
            self.m = [_Monotonic() for _ in raw]
            for m, v in zip(self.m, last, strict=True):
                m.feed(v)
        vals = [m.feed(v, WAIT_JITTER_MS if i % 4 == 1 else 0)
                for i, (m, v) in enumerate(zip(self.m, raw, strict=True))]
        return {"in": dict(zip(FIELDS, vals[:4], strict=True)), "out": dict(zip(FIELDS, vals[4:], strict=True))}


# ---- the collector source -----------------------------------------------------------------------

@dataclass
class _Proc:
    file: ShmFile
    pidtag: str
    dead: bool = False


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
        self.series: dict[str, _Series] = {}
        self.live: set[str] = set()               # keys reported by the last poll
        self.gone: set[str] = set()               # keys reported once and then not: never reused
        self.renamed: dict[str, str] = {}         # key that came back -> the fresh key it uses now
        self._messages: deque[dict] = deque(maxlen=10000)
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
        except (OSError, InterceptorStateError, ValueError):
            return None   # being replaced, foreign, or not ours to read: try again next poll
        if f.ino != ino:
            f.close()
            return None
        p = _Proc(file=f, pidtag=self._pidtag(f.pid, f.starttime))
        self.procs[name] = p
        return p

    def _bury(self, name: str, p: _Proc) -> None:
        p.file.close()
        self.dead[name] = p.file.ino
        del self.procs[name]

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
            if snap.exited or not process_alive(snap.pid, snap.starttime, self.proc_root):
                self._bury(name, p)
                continue
            if self.netns is not None and netns_of(snap.pid, self.proc_root) != self.netns:
                continue                                  # another host's process
            obs.extend(self._observe(p, snap))
        for name in list(self.procs):
            if name not in present:                       # file removed: the run is being torn down
                self._bury(name, self.procs[name])
        obs = self._unique(obs)
        live = {o.key for o in obs}
        self.gone |= self.live - live
        self.live = live
        for key in list(self.series):
            if key not in live:
                del self.series[key]
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

    def _filtered(self, key: str, counters: Counters) -> Counters:
        s = self.series.get(key)
        if s is None:
            s = self.series[key] = _Series()
        return s.filter(counters)

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
                counters=self._filtered(key, {"in": s.inp.as_counters(), "out": s.out.as_counters()}),
                attrs=attrs, children=[f"tcp:{s.inode}"]))
        i, o = snap.app_counters()
        attrs = {}
        if app_key not in live or app_key in self.renamed:
            attrs = {"pid": snap.pid, "ppid": snap.ppid, "cmdline": cmdline, "argv": argv,
                     "starttime": snap.starttime, "exec_count": snap.exec_count, "shm": snap.path}
        out.insert(0, Observation(
            key=app_key, kind="app", name=f"{comm} {snap.pid}",
            counters=self._filtered(app_key, {"in": i.as_counters(), "out": o.as_counters()}),
            attrs=attrs, children=children))
        return out

    def close(self) -> None:
        for name in list(self.procs):
            self._bury(name, self.procs[name])
        if self.sock is not None:
            self.sock.close()
            self.sock = None
            if self.notify_path and not self.notify_path.startswith("@"):
                try:
                    os.unlink(self.notify_path)
                except OSError:
                    pass

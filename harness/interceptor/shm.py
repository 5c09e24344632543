"""The reader of the interceptor's shared memory: the per-process counter files the library writes.

The LD_PRELOAD library (the C files next to this file) keeps one file per process in the run's
shared memory directory, `<dir>/<pid>.nest`: a header and one 256-byte slot per file descriptor,
laid out as in nestintercept.h (keep the two in step; tests/test_interceptor.py compiles the header
and compares the offsets). This module mirrors that layout and reads the files consistently through
their seqlocks: `ShmFile` (one file, read with pread: the collector runs as root over files the traced
processes own, so a file cut short is one warning, never SIGBUS), `read_process(path)` (one reading, also after
the process has exited), `process_alive(pid, starttime)`. Values are reported as read: cumulative
counters, with the wait of calls in progress counted up to the time of reading; nothing is smoothed
here (a counter that goes backwards is the analysis's business, thesis 3.4). What the library could
not count (calls, sockets, a file without space) is in the header: `ProcessSnapshot.problems()`.

The header's pause/resume fields are read as a `PauseState`; the handshake that signals a process
and waits for its acknowledgement is harness.interceptor.pause. The collector source that turns
these readings into app and socket modules is harness.collector.appsockets. docs/interceptor.md
describes the whole thing.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import socket
import stat
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

# ---- format (nestintercept.h) -------------------------------------------------------------------

MAGIC = b"NESTSHM\0"
VERSION = 1
HEADER_SIZE = 4096
SLOT_SIZE = 256
CMDLINE_OFF = 520
CMDLINE_MAX = 2048
SUFFIX = ".nest"
MAX_SLOTS = 65536         # the most slots the library makes (init.c's bound on NESTLAB_MAX_FDS)

FREE, OPEN, CLOSED = 0, 1, 2
SF_LISTEN, SF_PEER, SF_ACCEPTED, SF_CONNECT, SF_INHERITED, SF_GRAPH = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
HF_EXITED, HF_HAD_GRAPH, HF_FD_OVERFLOW, HF_HANDLER_KEPT, HF_MASK_KEPT, HF_PAUSE_OFF, HF_NO_SPACE = (
    0x01, 0x02, 0x04, 0x08, 0x10, 0x20, 0x40)

# header @0: magic version header_size slot_size nslots pid ppid starttime created_ns exec_count flags
#            exited_ns max_fd pause_sig resume_sig paused ack_seq ack_ns pause_count resume_count
#            pause_ns resume_ns paused_threads refused lost
HDR = struct.Struct("<8sIIIIiiQQIIQIiiIQQQQQQIIQ")
# @144 (added in what was padding; zero in files of earlier builds): untracked deferred unended forced
#      eintr_retried want_slots space_errno
EXTRA_OFF = 144
EXTRA = struct.Struct("<QQQQQIi")
HDR_SEQ_OFF = 256
# @256: seq retired_n retired[in](msgs bytes errors wait_ns) retired[out](...)
RETIRED = struct.Struct("<QQ8Q")
ACK_SEQ_OFF = 80
RETIRED_SPAN = slice(HDR_SEQ_OFF, HDR_SEQ_OFF + RETIRED.size)
PAUSE_SPAN = slice(52, 132)      # flags .. paused_threads: what PauseState is made of
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
assert FULL_SLOT.size == SLOT_SIZE and EXTRA_OFF + EXTRA.size <= HDR_SEQ_OFF

MAX_RETRIES = 50
# A slot whose writer holds its seqlock (a writer thread preempted inside its few instructions, on a
# busy machine for milliseconds) is waited for this long before the reading falls back to the last
# consistent one; a seqlock found held with the same value at the next reading is not waited for again.
SLOT_PATIENCE_S = 0.05


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
    """The header's pause/resume fields (the handshake itself: harness.interceptor.pause)."""

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
    untracked: int = 0       # sockets not counted: fd beyond the slots (or no space: every one)
    deferred: int = 0        # call ends applied late (their seqlock was busy): counted all the same
    unended: int = 0         # call ends never applied: the socket shows a call in progress until it closes
    forced: int = 0          # seqlocks taken from a dead or stuck thread: counters may be off
    eintr_retried: int = 0   # calls our pause/resume signal interrupted, restarted unseen by the program
    want_slots: int = 0
    space_errno: int = 0
    unreadable: str = ""     # why the file can no longer be read (cut short): the values are the last read

    @property
    def exited(self) -> bool:
        """The process has exited, or its file can no longer be read: nothing more will come of it."""
        return bool(self.flags & HF_EXITED) or bool(self.unreadable)

    @property
    def no_space(self) -> bool:
        """The file could not get its space: header only, nothing of the process is counted."""
        return bool(self.flags & HF_NO_SPACE)

    def loss_key(self) -> tuple[int, ...]:
        """What could not be counted, as numbers that only grow (all zero: nothing)."""
        return (int(self.no_space), self.untracked, self.lost, self.unended, self.forced, int(bool(self.unreadable)))

    def problems(self) -> list[str]:
        """What the library could not count in this process, one phrase each (empty: nothing)."""
        out = [f"its counter file can no longer be read ({self.unreadable})"] if self.unreadable else []
        if self.no_space:
            why = errno.errorcode.get(self.space_errno, str(self.space_errno))
            out.append(f"no space in the shared memory for its {self.want_slots} socket slots ({why}): "
                       "none of its sockets is counted (pause/resume work)")
        if self.untracked:
            where = "no slots" if self.no_space else f"fd beyond its {self.nslots} slots, NESTLAB_MAX_FDS"
            out.append(f"{self.untracked} socket(s) not tracked ({where})")
        if self.lost:
            out.append(f"{self.lost} call(s) not counted (their counters were locked)")
        if self.unended:
            out.append(f"{self.unended} call end(s) not recorded (the socket shows a call in progress "
                       "until it closes)")
        if self.forced:
            out.append(f"{self.forced} counter lock(s) taken over from a dead or stuck thread "
                       "(counters may be off)")
        return out

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


class SparseFileError(InterceptorStateError):
    """A counter file without its space (made by an earlier build) that cannot be given it."""


def open_regular(path: str | os.PathLike, flags: int = os.O_RDONLY) -> tuple[int, os.stat_result]:
    """(fd, its stat) of the regular file at `path`. The collector runs as root over files any traced
    process can replace: a link is not followed, a FIFO or device is refused before it is opened (and
    the open never blocks: O_NONBLOCK), and the file opened must be the one looked at."""
    path = os.fspath(path)
    st = os.lstat(path)
    if not stat.S_ISREG(st.st_mode):
        raise InterceptorStateError(f"{path}: not a regular file")
    fd = os.open(path, flags | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        got = os.fstat(fd)
        if not stat.S_ISREG(got.st_mode) or (got.st_dev, got.st_ino) != (st.st_dev, st.st_ino):
            raise InterceptorStateError(f"{path}: replaced while being opened")
    except BaseException:
        os.close(fd)
        raise
    return fd, got


def _allocate(path: str, ino: int, size: int) -> None:
    """Give a sparse file its space (files of earlier builds may be sparse; the library allocates its
    files up front since). Reads are preads and never allocate; the library's own writes to a hole
    in a full /dev/shm would be SIGBUS in the program, so such a file is refused rather than read."""
    try:
        fd, st = open_regular(path, os.O_RDWR)
        try:
            if st.st_ino != ino:
                raise InterceptorStateError(f"{path}: replaced while being read")
            os.posix_fallocate(fd, 0, size)
        finally:
            os.close(fd)
    except OSError as e:
        raise SparseFileError(f"{path}: a sparse counter file that cannot be given its space "
                              f"({e.strerror}): not read") from None


class TruncatedError(InterceptorStateError):
    """The counter file is shorter than its header says: cut short under its reader."""


class ShmFile:
    """One process's counter file, read with pread (never mapped: the file belongs to the traced
    process, and a file truncated under a mapping would kill the reader, root, with SIGBUS)."""

    def __init__(self, path: str | os.PathLike):
        self.path = str(path)
        fd, st = open_regular(self.path, os.O_RDONLY)
        try:
            self.ino = st.st_ino
            head = os.pread(fd, HEADER_SIZE, 0)
            if len(head) < HDR.size:
                raise InterceptorStateError(f"{self.path}: truncated header")
            h = HDR.unpack_from(head, 0)
            if h[0] != MAGIC or h[1] != VERSION or h[2] != HEADER_SIZE or h[3] != SLOT_SIZE:
                raise InterceptorStateError(f"{self.path}: not an interceptor file of format version {VERSION}")
            self.nslots = h[4]
            self.pid = h[5]
            self.starttime = h[7]
            if self.nslots > MAX_SLOTS:
                raise InterceptorStateError(f"{self.path}: {self.nslots} slots, more than the library "
                                            f"makes ({MAX_SLOTS})")
            self.size = HEADER_SIZE + self.nslots * SLOT_SIZE
            if st.st_size < self.size:
                raise InterceptorStateError(f"{self.path}: {st.st_size} bytes, expected {self.size}")
            if st.st_blocks * 512 < self.size:
                _allocate(self.path, self.ino, self.size)
        except BaseException:
            os.close(fd)
            raise
        self.fd = fd
        self.used = 0                     # slots read by the last snapshot (max_fd then)
        self.first = ProcessSnapshot(     # what is known before any reading: the header at open
            path=self.path, pid=h[5], ppid=h[6], starttime=h[7], exec_count=h[9], flags=h[10],
            nslots=self.nslots, max_fd=0, lost=h[24], refused=h[23], cmdline=_cmdline(head),
            retired_n=0, retired_in=DirCounters(), retired_out=DirCounters(), pause=_pause(h))
        self.prev: ProcessSnapshot | None = None
        self.last: dict[int, SocketSnapshot] = {}   # fd -> last consistent reading of its slot
        self.stuck: dict[int, tuple[int, int, int]] = {}   # fd -> seqlocks that outlasted the patience

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    def _read(self, n: int, off: int = 0) -> bytes:
        """n bytes at off, all of them (TruncatedError: the file was cut short)."""
        got = os.pread(self.fd, n, off)
        if len(got) < n:
            raise TruncatedError(f"{self.path}: the file was truncated under its reader "
                                 f"({off + len(got)} bytes, {self.size} expected): not read further")
        return got

    # -- pieces --------------------------------------------------------------------------------

    def pause_state(self) -> PauseState:
        """The header's pause fields, read twice until both copies agree (TruncatedError if cut short)."""
        a = self._read(HDR.size)
        for _ in range(MAX_RETRIES):
            b = self._read(HDR.size)
            if a[PAUSE_SPAN] == b[PAUSE_SPAN]:
                break
            a = b
        return _pause(HDR.unpack_from(a, 0))

    def _slot(self, fd: int) -> SocketSnapshot | None:
        """The slot of fd, read consistently: two copies byte for byte the same, their three seqlocks
        even (a writer changes a seqlock before and after its update, and the counters only grow, so
        equal copies are a state some moment held). A writer holding one of them is waited for (up to
        SLOT_PATIENCE_S: it was preempted inside its update); then the last consistent reading of the
        same socket is kept, or the slot is reported as read with the wait of calls in progress left
        out (a module must not vanish for one snapshot and come back)."""
        off = HEADER_SIZE + fd * SLOT_SIZE
        deadline = None
        a = self._read(SLOT_SIZE, off)
        while True:
            for _ in range(MAX_RETRIES):
                b = self._read(SLOT_SIZE, off)
                v = FULL_SLOT.unpack(b)
                if v[4] == FREE:
                    self.last.pop(fd, None)
                    return None
                seqs = (v[0], v[15], v[23])
                if a != b or (seqs[0] | seqs[1] | seqs[2]) & 1:
                    a = b
                    continue
                return self._consistent(fd, v)
            if self.stuck.get(fd) == seqs:          # held as when we last gave up: do not wait again
                break
            now = time.monotonic()
            if deadline is None:
                deadline = now + SLOT_PATIENCE_S
            elif now >= deadline:
                self.stuck[fd] = seqs
                break
            time.sleep(0.0005)
        prev = self.last.get(fd)
        if prev is not None and prev.gen == v[1]:
            return prev
        return self._make(fd, v, consistent=False)

    def _consistent(self, fd: int, v: tuple) -> SocketSnapshot:
        self.stuck.pop(fd, None)
        snap = self._make(fd, v, consistent=True)
        self.last[fd] = snap
        return snap

    def _make(self, fd: int, v: tuple, consistent: bool) -> SocketSnapshot:
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
            if consistent:
                wait = max(wait + pend_n * t - pend_sum, wait)
            ins.append(DirCounters(msgs=msgs, bytes=nbytes, errors=errors, wait_ns=wait, pending=pend_n))
        return SocketSnapshot(fd=sfd, gen=gen, inode=inode, state=state, flags=flags, family=family,
                              type=typ, local=local, remote=remote, open_ns=open_ns,
                              close_ns=close_ns, inp=ins[0], out=ins[1])

    def cmdline(self) -> list[str]:
        return _cmdline(self._read(CMDLINE_OFF + CMDLINE_MAX))

    def snapshot(self, with_closed: bool = False) -> ProcessSnapshot:
        """A consistent reading: no socket closed between the slots and the retired totals. The
        header and the slots in use are read twice (two preads); a slot whose copies differ or whose
        seqlock is held is read again on its own. A file cut short under the reader is not an error
        here: the last reading comes back with `unreadable` saying so (and `exited` true), so the
        collector says it once and stops reading that process."""
        try:
            return self._snapshot(with_closed)
        except TruncatedError as e:
            return dataclasses.replace(self.prev or self.first, unreadable=str(e))

    def _snapshot(self, with_closed: bool) -> ProcessSnapshot:
        n = self.used
        for attempt in range(MAX_RETRIES):
            size = HEADER_SIZE + n * SLOT_SIZE
            a = self._read(size)
            b = self._read(size)
            s1 = U64.unpack_from(a, HDR_SEQ_OFF)[0]
            if (s1 & 1 or a[RETIRED_SPAN] != b[RETIRED_SPAN]) and attempt < MAX_RETRIES - 1:
                continue
            h = HDR.unpack_from(a, 0)
            max_fd = min(h[12], self.nslots)
            if max_fd > n and attempt < MAX_RETRIES - 1:
                n = max_fd                                # more slots in use: read them too
                continue
            max_fd = min(max_fd, n)
            socks = []
            alone = False                                 # a slot read again after b
            same = a == b                                 # the usual case: one memcmp, no slot compared
            for fd in range(max_fd):
                off = HEADER_SIZE + fd * SLOT_SIZE
                v = FULL_SLOT.unpack_from(a, off)
                if v[4] == FREE:
                    self.last.pop(fd, None)
                    continue
                if (v[0] | v[15] | v[23]) & 1 or not same and a[off:off + SLOT_SIZE] != b[off:off + SLOT_SIZE]:
                    alone = True
                    sk = self._slot(fd)
                else:
                    sk = self._consistent(fd, v)
                if sk is not None and (with_closed or sk.state == OPEN):
                    socks.append(sk)
            if not alone or self._read(8, HDR_SEQ_OFF) == a[HDR_SEQ_OFF:HDR_SEQ_OFF + 8]:
                break
        self.used = max_fd
        r = RETIRED.unpack_from(a, HDR_SEQ_OFF)
        retired_in = DirCounters(msgs=r[2], bytes=r[3], errors=r[4], wait_ns=r[5])
        retired_out = DirCounters(msgs=r[6], bytes=r[7], errors=r[8], wait_ns=r[9])
        untracked, deferred, unended, forced, eintr_retried, want_slots, space_errno = EXTRA.unpack_from(a, EXTRA_OFF)
        pause = _pause(h) if a[PAUSE_SPAN] == b[PAUSE_SPAN] else self.pause_state()
        self.prev = ProcessSnapshot(
            path=self.path, pid=h[5], ppid=h[6], starttime=h[7], exec_count=h[9], flags=h[10],
            nslots=self.nslots, max_fd=max_fd, lost=h[24], refused=h[23], cmdline=_cmdline(a),
            retired_n=r[1], retired_in=retired_in, retired_out=retired_out, pause=pause, sockets=socks,
            untracked=untracked, deferred=deferred, unended=unended, forced=forced,
            eintr_retried=eintr_retried, want_slots=want_slots, space_errno=space_errno)
        return self.prev


def _cmdline(head: bytes) -> list[str]:
    n = min(U32.unpack_from(head, 512)[0], CMDLINE_MAX)
    parts = head[CMDLINE_OFF:CMDLINE_OFF + n].split(b"\0")
    if parts and parts[-1] == b"":
        parts.pop()
    return [p.decode(errors="replace") for p in parts]


def _pause(h: tuple) -> PauseState:
    (_, _, _, _, _, pid, _, _, _, _, flags, _, _, psig, rsig, paused, ack_seq, ack_ns,
     pcount, rcount, pause_ns, resume_ns, pthreads, _, _) = h
    return PauseState(pid=pid, paused=bool(paused), ack_seq=ack_seq, ack_mono=_ns_to_s(ack_ns),
                      pause_count=pcount, resume_count=rcount, pause_mono=_ns_to_s(pause_ns),
                      resume_mono=_ns_to_s(resume_ns), paused_threads=pthreads, pause_signal=psig,
                      resume_signal=rsig, handler_kept=bool(flags & HF_HANDLER_KEPT))


def read_process(path: str | os.PathLike, with_closed: bool = False) -> ProcessSnapshot:
    """Read one counter file (also after the process has exited)."""
    f = ShmFile(path)
    try:
        snap = f.snapshot(with_closed=with_closed)
    finally:
        f.close()
    if snap.unreadable:
        raise InterceptorStateError(snap.unreadable)
    return snap


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

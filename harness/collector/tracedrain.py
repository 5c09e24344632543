"""The message drainer: empties the interceptor's message rings (harness.interceptor.ring) of every
traced process into run.db's messages table, at every snapshot interval, with the host added.

    python -m harness.collector.tracedrain --db RUN/run.db --interval 0.1 --dir HOST=SHM_DIR [--dir ...]

Each --dir is one host's interceptor directory (on Mininet every host's /dev/shm is this machine's,
so one drainer reads them all). A process's file is taken up when it appears with a ring; its events
are drained until the process is gone and once more after (the files stay until the run's
directory is removed). Each drain is one transaction: the new message rows and the traced rows of the
processes whose counts moved (events recorded, dropped because the ring was full, lost); when run.db
stays locked past the busy timeout, its rows are kept for the next drain. SIGTERM or
SIGINT: a last drain of every ring, then exit 0 (--once: that last drain at once). The rows' writer is rundir.messages.
"""

from __future__ import annotations

import argparse
import functools
import os
import signal
import sqlite3
import sys
import time
from dataclasses import dataclass

from harness.interceptor.ring import CALLS, TraceRing, endpoint, trace_capacity
from harness.interceptor.shm import CMDLINE_MAX, CMDLINE_OFF, SUFFIX, InterceptorStateError, process_alive
from rundir.db import connect, monotonic
from rundir.messages import MessageWriter

NAMES_MAX = 4096      # endpoints' texts kept (about 1.3 MiB: ~330 bytes each)


@dataclass
class _Traced:
    host: str
    ring: TraceRing
    cmdline: str
    gone: bool = False
    last: tuple = ()


def _cmdline(ring: TraceRing) -> str:
    """The process's command line from its header (read through the ring's own descriptor)."""
    n = int.from_bytes(ring.pread(4, 512), "little")
    raw = ring.pread(min(n, CMDLINE_MAX), CMDLINE_OFF)
    return " ".join(p.decode(errors="replace") for p in raw.split(b"\0") if p)


class TraceDrainer:
    """The rings of the processes in some hosts' interceptor directories, drained into a MessageWriter."""

    def __init__(self, dirs: dict[str, str], writer: MessageWriter):
        self.dirs = dirs
        self.writer = writer
        self.traced: dict[tuple[str, int], _Traced] = {}     # (path, inode) -> its ring
        self.skip: set[tuple[str, int]] = set()               # files without a ring
        # (family, raw, port) -> endpoint text, for the NAMES_MAX endpoints last seen: bounded, as a
        # run (or a process writing its own ring) can show millions of distinct endpoints
        self._name = functools.lru_cache(maxsize=NAMES_MAX)(endpoint)
        # rows taken out of the rings and not yet committed (run.db was locked): written with the next drain
        self.pending: tuple[list[tuple], list[tuple]] = ([], [])

    def _scan(self) -> None:
        for host, d in self.dirs.items():
            try:
                entries = list(os.scandir(d))
            except OSError:
                continue
            for e in entries:
                if not e.name.endswith(SUFFIX):
                    continue
                try:
                    key = (e.path, e.inode())
                except OSError:
                    continue
                if key in self.traced or key in self.skip:
                    continue
                ring = None
                try:
                    if not trace_capacity(e.path):
                        self.skip.add(key)
                        continue
                    ring = TraceRing(e.path)
                    self.traced[key] = _Traced(host, ring, _cmdline(ring))
                except (OSError, InterceptorStateError) as err:
                    if ring is not None:
                        ring.close()
                    print(f"tracedrain: {e.path}: {err}", file=sys.stderr, flush=True)
                    self.skip.add(key)

    def drain(self, final: bool = False) -> int:
        """One drain of every ring; returns the message rows written."""
        self._scan()
        rows, traced_rows = [], []
        name = self._name
        for t in self.traced.values():
            if t.gone:
                continue
            ring = t.ring
            gone = final or not process_alive(ring.pid, ring.starttime)
            host, pid = t.host, ring.pid
            try:
                events = ring.drain(final=gone)
                drops = ring.drops()
            except (OSError, InterceptorStateError) as err:   # truncated by its process: read no more
                print(f"tracedrain: {err}; its events from now on are not recorded", file=sys.stderr, flush=True)
                events, drops, gone = [], t.last[6] if t.last else 0, True
            for e in events:
                rows.append((e.mono_ns / 1e9, host, pid, e.tid, e.fd, CALLS.get(e.call, str(e.call)), e.bytes,
                             name(e.family, e.laddr, e.lport), name(e.family, e.raddr, e.rport)))
            row = (host, pid, ring.starttime, t.cmdline, ring.cap, ring.read, drops, ring.lost)
            if row != t.last:
                traced_rows.append(row)
                t.last = row
            if gone:
                t.gone = True
                ring.close()
        return self._write(rows, traced_rows, final)

    def _write(self, rows: list[tuple], traced_rows: list[tuple], final: bool) -> int:
        """Write this drain's rows after any a locked run.db kept back; returns the message rows written.
        The rings' tails have moved past them already: a failed write keeps them for the next drain
        (another writer holding run.db's lock longer than the busy timeout must not lose events)."""
        rows = self.pending[0] + rows
        traced_rows = self.pending[1] + traced_rows
        if not rows and not traced_rows:
            return 0
        try:
            self.writer.write(rows, traced_rows)
        except sqlite3.OperationalError as err:
            self.pending = (rows, traced_rows)
            if final:
                raise
            print(f"tracedrain: run.db not written ({err}); {len(rows)} message rows kept for the next drain",
                  file=sys.stderr, flush=True)
            return 0
        self.pending = ([], [])
        return len(rows)

    def totals(self) -> tuple[int, int, int, int]:
        """(processes, events, dropped, lost) so far."""
        lasts = [t.last for t in self.traced.values() if t.last]
        return len(lasts), sum(r[5] for r in lasts), sum(r[6] for r in lasts), sum(r[7] for r in lasts)

    def close(self) -> None:
        for t in self.traced.values():
            if not t.gone:
                t.ring.close()
                t.gone = True


def run(db_path: str, interval: float, dirs: dict[str, str], once: bool = False) -> int:
    conn = connect(db_path)
    conn.isolation_level = None
    drainer = TraceDrainer(dirs, MessageWriter(conn))
    stop = False

    def on_signal(signum, frame):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    # a starter that held its signals while starting us (harness.ledger.signals_held) and did not
    # unblock them in the child would leave SIGTERM pending forever: its last drain would never run
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGINT})
    print("tracedrain: ready", flush=True)
    start, k = monotonic(), 0
    try:
        while not stop and not once:
            drainer.drain()
            k += 1
            deadline = start + k * interval
            now = monotonic()
            if now > deadline:   # overran: skip the deadlines already missed
                k = int((now - start) / interval) + 1
                deadline = start + k * interval
            while not stop and monotonic() < deadline:
                time.sleep(min(0.05, max(0.0, deadline - monotonic())))
        drainer.drain(final=True)
    finally:
        n, events, dropped, lost = drainer.totals()
        print(f"tracedrain: {events} events from {n} processes, {dropped} dropped, {lost} lost", flush=True)
        drainer.close()
        conn.close()
    return 0


def command(python: list[str], db: str, interval: float, dirs: dict[str, str]) -> list[str]:
    """The drainer's command line (`python`: the argv prefix that runs this package's modules)."""
    argv = [*python, "-m", "harness.collector.tracedrain", "--db", db, "--interval", str(interval)]
    for host, d in dirs.items():
        argv += ["--dir", f"{host}={d}"]
    return argv


def _host_dir(text: str) -> tuple[str, str]:
    host, sep, d = text.partition("=")
    if not sep or not host or not d:
        raise argparse.ArgumentTypeError(f"{text!r}: expected HOST=DIR")
    return host, d


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--db", required=True)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--dir", type=_host_dir, action="append", default=[], required=True,
                   help="HOST=DIR: a host's interceptor directory")
    p.add_argument("--once", action="store_true", help="one last drain of every ring, then exit (rings "
                                                        "looked at after a run, or crafted ones)")
    a = p.parse_args(argv)
    return run(a.db, a.interval, dict(a.dir), once=a.once)


if __name__ == "__main__":
    sys.exit(main())

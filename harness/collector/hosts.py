"""Several monitored hosts, one collector (issue 33 item 2; docs/run-format.md, "Several monitored hosts").

With `monitor: [web, app1, ...]` one collector records every host into one snapshot sequence: it runs
in the first host's namespace and reaches each other host's through a process of it (`--host
NAME=PID[=SHM_DIR]`, Mininet's host shell): every netlink socket of that host's sources (interfaces,
sock_diag) is made inside that host's network namespace (setns, then back), which the socket keeps
for its life; the interface counters are read from /proc/PID/net/dev; the sockets' owners and the
interceptor's processes are those of that namespace. Mininet hosts share one clock and one pid
namespace, so one reading of every host is one snapshot on the run's reference clock.

Each module a host's sources report is recorded with its host: `host` in its attrs and its name
prefixed `<host>: ` (`web: tcp 10.0.2.1:80>...`). Module keys stay those the sources give: on
Mininet they are unique across hosts (socket inodes and pids are the machine's, interface names carry
the host's name), and fault kinds name their targets by them.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from harness.collector.iface import InterfaceSource
from harness.collector.procs import socket_owners
from harness.collector.source import Observation, Report, Source, reporter

CLONE_NEWNET = 0x40000000


@dataclass(frozen=True)
class HostArg:
    """A monitored host as the collector's command line gives it: --host NAME=PID[=SHM_DIR]."""

    name: str
    pid: int
    shm_dir: str | None = None

    @classmethod
    def parse(cls, text: str) -> HostArg:
        name, _, rest = text.partition("=")
        pid, _, shm = rest.partition("=")
        if not name or not pid.isdigit():
            raise ValueError(f"--host {text!r}: expected NAME=PID[=SHM_DIR]")
        return cls(name, int(pid), shm or None)

    def argv(self) -> str:
        return f"{self.name}={self.pid}" + (f"={self.shm_dir}" if self.shm_dir else "")


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns: {os.strerror(err)}")


@contextmanager
def in_netns(fd: int) -> Iterator[None]:
    """This thread inside the network namespace of descriptor `fd` for the block, then back in its own.
    Sockets made inside stay in that namespace."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
    try:
        _setns(fd)
        try:
            yield
        finally:
            _setns(own)
    finally:
        os.close(own)


@contextmanager
def netns_of(pid: int) -> Iterator[None]:
    """This thread inside process `pid`'s network namespace for the block (in_netns)."""
    with PinnedProcess(pid) as proc, in_netns(proc.nsfd):
        yield


def netns_inode(pid: int | str) -> int | None:
    try:
        return os.stat(f"/proc/{pid}/ns/net").st_ino
    except OSError:
        return None


class PinnedProcess:
    """A monitored host's process held by a descriptor of its /proc directory (issue 40 item 15): its
    namespace (`nsfd`, `netns`) and its /proc/PID/net (`proc_net`) are read through it, so a pid
    reused after the process ends never makes them another process's: they fail instead."""

    def __init__(self, pid: int):
        self.pid = pid
        self.dirfd = os.open(f"/proc/{pid}", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self.nsfd = os.open("ns/net", os.O_RDONLY | os.O_CLOEXEC, dir_fd=self.dirfd)
        except BaseException:
            os.close(self.dirfd)
            raise
        self.netns = os.fstat(self.nsfd).st_ino

    @property
    def proc_net(self) -> str:
        """Its /proc/PID/net, through the held directory (this process's /proc/self/fd)."""
        return f"/proc/self/fd/{self.dirfd}/net"

    def close(self) -> None:
        for fd in (self.nsfd, self.dirfd):
            if fd >= 0:
                os.close(fd)
        self.nsfd = self.dirfd = -1

    def __enter__(self) -> PinnedProcess:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass
class HostSources:
    """One monitored host's sources and what labels its modules."""

    name: str
    sources: list[Source]
    iface: InterfaceSource
    born: set[str] = field(default_factory=set)   # keys already labelled with the host

    reporters: list = field(default_factory=list)   # each source's report (source.reporter)
    pinned: PinnedProcess | None = None              # the process its sources read through

    def reports(self, known: dict[str, int]) -> list[Report]:
        """Every source's report; a module new to the collector (not in `known`, its live keys)
        gets its host in attrs and name (label)."""
        if not self.reporters:
            self.reporters = [reporter(src) for src in self.sources]
        out = [report() for report in self.reporters]
        for rep in out:
            for ob in rep.changed:
                if ob.key not in known:
                    label(ob, self.name)
        return out

    def poll(self, known: dict[str, int]) -> list[Observation]:
        """Every source's observations, every live module (its sources' poll())."""
        out: list[Observation] = []
        for src in self.sources:
            out.extend(src.poll())
        for ob in out:
            if ob.key not in known:
                label(ob, self.name)
        return out

    def close(self) -> None:
        for src in self.sources:
            src.close()
        if self.pinned is not None:
            self.pinned.close()


def label(ob: Observation, host: str) -> None:
    """The module's host: `host` in its attrs, its name prefixed `<host>: ` (once)."""
    if ob.attrs.get("host") != host:
        ob.attrs = {**ob.attrs, "host": host}
        ob.name = f"{host}: {ob.name}"


def host_sources(host: HostArg, ignore_interfaces=()) -> HostSources:
    """The sources of one monitored host, made inside its network namespace."""
    from harness.collector.sockdiag import TcpSource

    proc = PinnedProcess(host.pid)   # one open of the process: its namespace and /proc are the same one's
    try:
        with in_netns(proc.nsfd):
            iface = InterfaceSource(set(ignore_interfaces), proc_net=proc.proc_net)
            owners = functools.partial(socket_owners, netns=proc.netns)
            sources: list[Source] = [iface, TcpSource(iface.ifkey_of, owners, iface.ignored, skip_unchanged=True)]
        if host.shm_dir:
            from harness.collector.appsockets import InterceptorSource

            src = InterceptorSource(host.shm_dir)
            src.netns = proc.netns   # that host's processes (Mininet hosts share /proc)
            sources.insert(0, src)
    except BaseException:
        proc.close()
        raise
    return HostSources(host.name, sources, iface, pinned=proc)

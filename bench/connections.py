"""A network of two namespaces holding N established TCP connections, and the real collector in the
client's namespace: the setting of bench_collector.py, bench_probes.py and bench_live.py.

    with Connections(n=100, private_hash=True) as net:
        coll = net.start_collector(db_path, interval=0.05)
        ... cpu_seconds(coll.pid) ...

Two kinds of load:
- a trickle (the default): `size` bytes on every connection every `period` seconds, so counters move
  (a twentieth of the connections every twentieth of the period, so every snapshot sees some move);
- silent (`silent=True`): every connection fills its (small) send buffer once, and the server never
  reads: each is busy (data queued) and makes no progress, what the prober probes.
The server answers on `remotes` addresses (10.99.0.2, 10.99.0.3, ...), connections spread over them.

The namespaces are made as the Mininet backend makes its hosts when `private_hash` is set (a TCP
hash of their own, harness.backends.mininet.private_tcp_hash), named after this process so two
benches never meet. Both ends raise RLIMIT_NOFILE to its hard limit (10,000 connections need
10,000 descriptors on each side). Everything is removed on the way out, on every exit path.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
from pathlib import Path

from harness.backends.mininet import private_tcp_hash

REPO = Path(__file__).resolve().parent.parent
CLIENT_ADDRESS, SERVER_NET, PORT = "10.99.0.1", ipaddress.ip_network("10.99.0.0/16"), 7000

_NOFILE = """
import resource
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
"""
# Server: accept and hold every connection, never read (the trickle waits in the receive queues);
# exits when stdin closes.
SERVER = _NOFILE + """
import os, socket, sys, threading
small = int(sys.argv[1])
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
if small:   # inherited by accepted sockets: a small window, so a silent sender stalls at once
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, small)
s.bind(("0.0.0.0", 7000)); s.listen(4096)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
print("up", flush=True)
conns = []
while True:
    conns.append(s.accept()[0])
"""
# Client: open N connections over the server's addresses; trickle, or fill each send buffer once.
CLIENT = _NOFILE + """
import socket, sys, select
n, size, period, silent = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
servers = sys.argv[5:]
socks = []
for k in range(n):
    c = socket.socket()
    if silent:
        c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, silent)
    c.connect((servers[k % len(servers)], 7000))
    socks.append(c)
if silent:
    for c in socks:
        c.setblocking(False)
        try:
            while True:
                c.send(b"x" * 4096)
        except BlockingIOError:
            pass
print("up", flush=True)
slices = 20   # a twentieth of the connections every period / 20: the trickle is even, not a burst a period
k = 0
while not select.select([sys.stdin], [], [], period / slices)[0]:
    if not silent:
        for c in socks[k::slices]: c.send(b"x" * size)
        k = (k + 1) % slices
"""


def sh(cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, check=check, capture_output=True, text=True)


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (os.sysconf('SC_CLK_TCK') a second)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


def cpu_seconds(pid: int) -> float:
    """CPU time of a process's threads so far, in seconds, to the ns (/proc/PID/schedstat), where
    clock ticks (10 ms) would be too coarse for a collector using 1% of a core."""
    return sched(pid)[0]


def sched(pid: int) -> tuple[float, float]:
    """(seconds on a CPU, seconds runnable but waiting for one) of a process so far (schedstat):
    the second tells a machine too busy to run it from a process that has too much to do."""
    run, wait = Path(f"/proc/{pid}/schedstat").read_text().split()[:2]
    return int(run) / 1e9, int(wait) / 1e9


class Connections:
    def __init__(self, n: int, private_hash: bool = True, size: int = 1, period: float = 1.0,
                 silent: bool = False, remotes: int = 1):
        self.n, self.private_hash, self.size, self.period = n, private_hash, size, period
        self.silent, self.remotes = silent, remotes
        tag = os.getpid()
        self.ns_client, self.ns_server = f"nestlab-bench-c{tag}", f"nestlab-bench-s{tag}"
        self.servers = [str(SERVER_NET[2 + k]) for k in range(remotes)]
        self.procs: list[subprocess.Popen] = []
        self.made = False

    def __enter__(self) -> Connections:
        try:
            self._build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _build(self) -> None:
        self.made = True
        if self.private_hash:
            with private_tcp_hash(None):
                sh(f"ip netns add {self.ns_client} && ip netns add {self.ns_server}")
        else:
            sh(f"ip netns add {self.ns_client} && ip netns add {self.ns_server}")
        sh(f"ip link add nlb-c netns {self.ns_client} type veth peer name nlb-s netns {self.ns_server}")
        sh(f"ip -n {self.ns_client} addr add {CLIENT_ADDRESS}/16 dev nlb-c")
        batch = "".join(f"address add {a}/16 dev nlb-s\n" for a in self.servers)
        subprocess.run(["ip", "-n", self.ns_server, "-batch", "-"], input=batch, text=True, check=True)
        for ns, dev in ((self.ns_client, "nlb-c"), (self.ns_server, "nlb-s")):
            sh(f"ip -n {ns} link set {dev} up && ip -n {ns} link set lo up")
        small = "4096" if self.silent else "0"
        for ns, code, args in ((self.ns_server, SERVER, [small]),
                               (self.ns_client, CLIENT, [str(self.n), str(self.size), str(self.period), small,
                                                         *self.servers])):
            p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, *args],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.procs.append(p)
            if p.stdout.readline().strip() != "up":
                raise RuntimeError(f"bench endpoint in {ns} did not come up (exit {p.poll()})")

    def start_collector(self, db: Path, interval: float, probe: str | None = None, nice: int = 0) -> subprocess.Popen:
        """The real collector writing `db` (made with rundir.db.create_db), once it is ready; `probe`:
        its --probe settings (JSON), None for none; `nice`: its scheduling niceness (exec'd by nice)."""
        extra = ["--probe", probe] if probe is not None else []
        prefix = ["nice", "-n", str(nice)] if nice else []
        coll = subprocess.Popen(["ip", "netns", "exec", self.ns_client, *prefix, sys.executable, "-m", "harness.collector.main",
                                 "--db", str(db), "--interval", str(interval), *extra], stdout=subprocess.PIPE,
                                text=True, env={**os.environ, "PYTHONPATH": str(REPO)})
        self.procs.append(coll)
        coll.stdout.readline()
        return coll

    def popen(self, side: str, argv: list[str], **kw) -> subprocess.Popen:
        """A process in the client's or the server's namespace, ended (by its pid) on the way out."""
        ns = self.ns_client if side == "client" else self.ns_server
        p = subprocess.Popen(["ip", "netns", "exec", ns, *argv], **kw)
        self.procs.append(p)
        return p

    def run_in_client(self, code: str) -> str:
        """Python `code` run in the client's namespace; its stdout."""
        return subprocess.run(["ip", "netns", "exec", self.ns_client, sys.executable, "-c", code], check=True,
                              capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):   # collector and helpers, client, server
            if p.stdin:
                p.stdin.close()
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        self.procs = []
        if self.made:   # only namespaces this object made
            sh(f"ip netns del {self.ns_client}", check=False)
            sh(f"ip netns del {self.ns_server}", check=False)
            self.made = False

"""A network of two namespaces holding N established TCP connections with a trickle of traffic, and
the real collector in the client's namespace: the setting of bench_collector.py and bench_live.py.

    with Connections(n=100, private_hash=True) as net:
        coll = net.start_collector(db_path, interval=0.05)
        ... cpu_ticks(coll.pid) ...

The namespaces are made as the Mininet backend makes its hosts when `private_hash` is set (a TCP
hash of their own, harness.backends.mininet.private_tcp_hash). Everything is removed on the way out.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.backends.mininet import private_tcp_hash

NS_C, NS_S = "nestlab-bench-c", "nestlab-bench-s"
REPO = Path(__file__).resolve().parent.parent

# Server: accept and hold every connection; client: open N connections, send `size` bytes on each
# every `period` seconds so counters move. Both exit when stdin closes.
SERVER = """
import os, socket, sys, threading
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("10.99.0.2", 7000)); s.listen(4096)
threading.Thread(target=lambda: (sys.stdin.read(), os._exit(0)), daemon=True).start()
print("up", flush=True)
conns = []
while True:  # accept and hold; the trickle of client bytes waits in the receive queues
    conns.append(s.accept()[0])
"""
CLIENT = """
import socket, sys, select
n, size, period = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
socks = [socket.create_connection(("10.99.0.2", 7000)) for _ in range(n)]
print("up", flush=True)
while not select.select([sys.stdin], [], [], period)[0]:
    for c in socks: c.send(b"x" * size)
"""


def sh(cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, shell=True, check=check, capture_output=True, text=True)


def cpu_ticks(pid: int) -> int:
    """utime + stime of a process, in clock ticks (os.sysconf('SC_CLK_TCK') a second)."""
    f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(f[11]) + int(f[12])


class Connections:
    def __init__(self, n: int, private_hash: bool = True, size: int = 1, period: float = 1.0):
        self.n, self.private_hash, self.size, self.period = n, private_hash, size, period
        self.procs: list[subprocess.Popen] = []

    def __enter__(self) -> Connections:
        self.remove()
        try:
            self._build()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _build(self) -> None:
        if self.private_hash:
            with private_tcp_hash(None):
                sh(f"ip netns add {NS_C} && ip netns add {NS_S}")
        else:
            sh(f"ip netns add {NS_C} && ip netns add {NS_S}")
        sh(f"ip link add nlb-c netns {NS_C} type veth peer name nlb-s netns {NS_S}")
        for ns, dev, addr in ((NS_C, "nlb-c", "10.99.0.1"), (NS_S, "nlb-s", "10.99.0.2")):
            sh(f"ip -n {ns} addr add {addr}/24 dev {dev} && ip -n {ns} link set {dev} up && ip -n {ns} link set lo up")
        for ns, code, args in ((NS_S, SERVER, []), (NS_C, CLIENT, [str(self.n), str(self.size), str(self.period)])):
            p = subprocess.Popen(["ip", "netns", "exec", ns, sys.executable, "-c", code, *args],
                                 stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
            self.procs.append(p)
            p.stdout.readline()

    def start_collector(self, db: Path, interval: float, probe: str | None = None) -> subprocess.Popen:
        """The real collector writing `db` (made with rundir.db.create_db), once it is ready; `probe`:
        its --probe settings (JSON), None for none."""
        extra = ["--probe", probe] if probe is not None else []
        coll = subprocess.Popen(["ip", "netns", "exec", NS_C, sys.executable, "-m", "harness.collector.main", "--db",
                                 str(db), "--interval", str(interval), *extra], stdout=subprocess.PIPE, text=True,
                                env={**os.environ, "PYTHONPATH": str(REPO)})
        self.procs.append(coll)
        coll.stdout.readline()
        return coll

    def run_in_client(self, code: str) -> str:
        """Python `code` run in the client's namespace; its stdout."""
        return sh(f"ip netns exec {NS_C} {sys.executable} -c '{code}'").stdout

    def __exit__(self, *exc) -> None:
        for p in reversed(self.procs):   # collector, client, server
            if p.stdin:
                p.stdin.close()
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
        self.procs = []
        self.remove()

    @staticmethod
    def remove() -> None:
        sh(f"ip netns del {NS_C}", check=False)
        sh(f"ip netns del {NS_S}", check=False)

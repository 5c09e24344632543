"""Collector cost at 10, 100 and 1,000 open TCP connections: CPU % of one core at a 50 ms
interval and the p99 deviation of the actual interval, with the real collector process in a
network namespace holding N established connections (with a trickle of traffic).

The namespaces are made as the Mininet backend makes its hosts: with a private TCP hash
(harness.backends.mininet.private_tcp_hash). Baselines in the same run: the same collector in
namespaces that share the machine's TCP hash (as runs did before), and one sock_diag dump of the
same N sockets decoded by pyroute2's DiagSocket.get_sock_stats versus the collector's lean decoder.
Targets: <= 2% of a core at 100 connections, <= 10% at 1,000, p99 deviation <= 5 ms.
With --probe, each point is measured once more with the prober on (its default settings): what its
look at every connection each snapshot costs (the bench's connections are not silent and busy, so
it sends nothing), beside the same collector without it.

    .venv/bin/python bench/bench_collector.py [--seconds 10] [--interval 0.05] [--counts 10,100,1000]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path

from connections import Connections, cpu_ticks

from harness.collector.probe import ProbeSettings
from rundir.db import create_db
from rundir.layout import RunDir


def measure(net: Connections, seconds: float, interval: float, probe: str | None = None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-"))
    try:
        db_path = RunDir(tmp).db
        create_db(db_path).close()
        coll = net.start_collector(db_path, interval, probe)
        time.sleep(2.0)  # past the first snapshot's births and owner scan: measure the steady state
        t0, c0 = time.monotonic(), cpu_ticks(coll.pid)
        time.sleep(seconds)
        t1, c1 = time.monotonic(), cpu_ticks(coll.pid)
        coll.terminate()
        coll.wait(10)
        db = sqlite3.connect(db_path)
        monos = [m for (m,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")]
        tcp = db.execute("SELECT count(*) FROM modules WHERE kind = 'tcp'").fetchone()[0]
        db.close()
        # Deviation of each snapshot from its deadline (start + k * interval).
        start = monos[0]
        devs = sorted(abs(m - (start + round((m - start) / interval) * interval)) for m in monos)
        p99 = devs[int(0.99 * (len(devs) - 1))]
        slow, lean, dumped = decoder_baseline(net)
        return {"tcp_modules": tcp, "slow": slow, "lean": lean, "dumped": dumped,
                "cpu": 100 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0), "p99_ms": p99 * 1000}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def decoder_baseline(net: Connections) -> tuple[float, float, int]:
    """ms per dump: pyroute2 DiagSocket vs the lean decoder, for the sockets of the client's
    namespace; and how many sockets the dump held."""
    code = """
import time, socket
from pyroute2 import DiagSocket
from harness.collector.sockdiag import SockDiag, STATE_MASK, INET_DIAG_INFO
lean = SockDiag()

def slow():  # the same work with pyroute2: dump with tcp_info and read the fields the collector uses
    out = []
    for m in ds.get_sock_stats(family=socket.AF_INET, states=STATE_MASK, extensions=1 << (INET_DIAG_INFO - 1)):
        ti = m.get_attr("INET_DIAG_INFO")
        out.append((m["idiag_inode"], m["idiag_rqueue"], m["idiag_wqueue"], ti.get("tcpi_data_segs_in"),
                    ti.get("tcpi_data_segs_out"), ti.get("tcpi_bytes_acked"), ti.get("tcpi_total_retrans")))
    return out

with DiagSocket() as ds:
    ds.bind()
    best = {}
    for name, f in (("pyroute2", slow), ("lean", lambda: lean.dump((socket.AF_INET,)))):
        times = []
        for _ in range(5):
            t = time.perf_counter(); r = f(); times.append(time.perf_counter() - t)
        best[name] = (min(times) * 1000, len(r))
print(best["pyroute2"][0], best["lean"][0], best["lean"][1])
"""
    a, b, n = net.run_in_client(code).split()
    return float(a), float(b), int(n)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--interval", type=float, default=0.05)
    p.add_argument("--counts", default="10,100,1000")
    p.add_argument("--probe", action="store_true", help="also measure with the prober on")
    a = p.parse_args()
    probe = json.dumps(dataclasses.asdict(ProbeSettings()))
    print(f"collector at {a.interval * 1000:g} ms, {a.seconds:g} s steady state per point")
    print(f"{'conns':>6} {'tcp hash':>8} {'tcp mods':>8} {'CPU %':>7} {'vs shared':>9} {'p99 dev':>9} {'sockets':>8} "
          f"{'pyroute2 dump':>14} {'lean dump':>10} {'ratio':>6}")
    for n in (int(x) for x in a.counts.split(",")):
        cpu = {}
        for private in (False, True):   # the baseline first
            with Connections(n, private_hash=private) as net:
                m = measure(net, a.seconds, a.interval)
                if private and a.probe:
                    pm = measure(net, a.seconds, a.interval, probe)
                    print(f"{n:6d} {'private':>8} {pm['tcp_modules']:8d} {pm['cpu']:6.2f}% with probes on: "
                          f"{pm['cpu'] / m['cpu']:.2f}x the same collector without, p99 dev {pm['p99_ms']:.2f} ms")
            cpu[private] = m["cpu"]
            ratio = f"{cpu[False] / m['cpu']:8.1f}x" if private else f"{'':9}"
            print(f"{n:6d} {'private' if private else 'shared':>8} {m['tcp_modules']:8d} {m['cpu']:6.2f}% {ratio} "
                  f"{m['p99_ms']:7.2f}ms {m['dumped']:8d} {m['slow']:11.2f} ms {m['lean']:7.2f} ms "
                  f"{m['slow'] / m['lean']:5.1f}x")
    print("targets (private hash, as runs have it): <= 2% CPU at 100 connections, <= 10% at 1,000, "
          "p99 deviation <= 5 ms")


if __name__ == "__main__":
    main()

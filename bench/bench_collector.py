"""The collector under load: 100, 1,000 and 10,000 open TCP connections at 50 and 100 ms snapshots.

The real collector process runs in a network namespace holding N established connections (a
trickle of traffic: one byte on each every `--period` seconds, 1 by default, so about 1/20 of them
send between two 50 ms snapshots, and each byte changes its connection twice: sent, then acked), made as the Mininet backend makes its hosts (a private TCP hash). Per point it reports:

- CPU: % of one core over the steady state, and ms of CPU per snapshot (/proc/PID/schedstat);
- lateness of each snapshot behind its deadline (start + k * interval): p50, p99, max;
- lost snapshots: deadlines with no snapshot (the collector skips deadlines it overran);
- no CPU: the share of the time the collector was runnable but waiting for a CPU (schedstat): how
  much of its lateness is the machine's other work rather than its own.

Baselines measured in the same run, over the same sockets: `ss -tin` (what an operator would run;
its CPU per dump, from the children's rusage), and, where the collector's time goes, its stages in
the same namespace (stages()): the kernel's share of a sock_diag dump, then per snapshot the dump,
the rest of the TCP source's poll, the module tracker's record, its SQL writes (a run.db as the
collector's) and the cyclic GC, with every connection decoded and with only the changed ones.
Targets: <= 2% of a core at 100 connections and <= 10% at 1,000 at 50 ms; at 10,000, no snapshot
lost and p99 lateness under one interval. The machine is shared: each point is measured `--rounds`
times and the round the machine's other work held up least (the least time waiting for a CPU) is
shown, with the worst round's p99 and lost beside it.
With --nice -10 the collector runs at a higher priority than the machine's other work, which shows its
own cadence apart from its neighbours' (on a shared machine the default mostly shows theirs).
Load stays between the bench's own namespaces and ends with them.

    .venv/bin/python bench/bench_collector.py [--seconds 10] [--rounds 3] [--counts 100,1000,10000]
                                               [--intervals 0.05,0.1] [--probe]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import resource
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from connections import Connections, sched

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from harness.collector.probe import ProbeSettings  # noqa: E402
from rundir.db import create_db  # noqa: E402
from rundir.layout import RunDir  # noqa: E402

TARGETS_50MS = {100: 2.0, 1000: 10.0}


def cadence(monos: list[float], start: float, interval: float) -> dict:
    """Lateness of each snapshot behind its deadline (start + k * interval) and the deadlines lost
    between the first and the last of `monos` (snapshot times on the reference clock)."""
    ks, late = [], []
    slack = 0.001 / interval   # `start` (the first snapshot) is a few µs past the collector's own start
    for m in monos:
        k = math.floor((m - start) / interval + slack)
        ks.append(k)
        late.append(max(0.0, m - (start + k * interval)))
    late.sort()
    kept = len(set(ks))
    return {"snapshots": len(monos), "lost": (ks[-1] - ks[0] + 1) - kept if ks else 0,
            "p50_ms": 1000 * late[len(late) // 2], "p99_ms": 1000 * late[int(0.99 * (len(late) - 1))],
            "max_ms": 1000 * late[-1]}


def measure(net: Connections, seconds: float, interval: float, probe: str | None = None,
            warmup: float = 3.0, nice: int = 0) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-"))
    try:
        db_path = RunDir(tmp).db
        create_db(db_path).close()
        coll = net.start_collector(db_path, interval, probe, nice)
        try:
            time.sleep(warmup)   # past the first snapshot's births and owner scan: the steady state
            t0, (c0, w0) = time.monotonic(), sched(coll.pid)
            time.sleep(seconds)
            t1, (c1, w1) = time.monotonic(), sched(coll.pid)
        finally:
            coll.terminate()
            coll.wait(30)
        db = sqlite3.connect(db_path)
        monos = [m for (m,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")]
        tcp = db.execute("SELECT count(*) FROM modules WHERE kind = 'tcp'").fetchone()[0]
        probes = db.execute("SELECT sent, outcome FROM probes ORDER BY sent").fetchall()
        db.close()
        window = [m for m in monos if t0 <= m <= t1]
        out = cadence(window, monos[0], interval)
        out.update(tcp_modules=tcp, cpu=100 * (c1 - c0) / (t1 - t0), runnable=100 * (w1 - w0) / (t1 - t0),
                   seconds=t1 - t0, cpu_s=c1 - c0,
                   cpu_ms=1000 * (c1 - c0) / max(1, len(window)), probes=probes, t0=t0, t1=t1)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def ss_baseline(net: Connections, dumps: int) -> tuple[float, int]:
    """CPU ms of one `ss -tin` over the client's sockets (its children's rusage), and its lines."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    lines = 0
    for _ in range(dumps):
        r = subprocess.run(["ip", "netns", "exec", net.ns_client, "ss", "-tinH"], capture_output=True, text=True,
                           check=True)
        lines = r.stdout.count("\n")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return 1000 * cpu / dumps, lines // 2   # ss prints two lines a socket with -i


STAGES = """
import gc, os, sys, tempfile, time
from harness.collector.iface import InterfaceSource
from harness.collector.main import GC_THRESHOLD, ModuleTracker
from harness.collector.sockdiag import SockDiag, TcpSource
from harness.collector.source import reporter
from rundir.db import connect, create_db
reps, gap = int(sys.argv[1]), float(sys.argv[2])

import struct
from harness.collector.sockdiag import _NLMSGHDR, _REQ_COMPAT, TCPDIAG_GETSOCK, INET_DIAG_INFO, STATE_MASK
req = _REQ_COMPAT.pack(0, 0, 0, 1 << (INET_DIAG_INFO - 1), bytes(48), STATE_MASK, 0)
REQUEST = _NLMSGHDR.pack(_NLMSGHDR.size + len(req), TCPDIAG_GETSOCK, 0x301, 0, 0) + req
HDR = struct.Struct("=IH").unpack_from

def kernel(diag):   # the dump read, messages walked but not decoded: the kernel's share and a floor
    diag.sock.send(REQUEST)
    buf = diag.buf
    while True:
        n, off = diag.sock.recv_into(buf, 1 << 20), 0
        while off < n:
            length, mtype = HDR(buf, off)
            if mtype == 3:
                return
            off += (length + 3) & ~3

def median(v):
    return sorted(v)[len(v) // 2] * 1000

walker = SockDiag()
kernel_ms = []
for _ in range(reps):
    time.sleep(gap)
    t = time.thread_time(); kernel(walker); kernel_ms.append(time.thread_time() - t)
walker.close()
out = [len(SockDiag().dump()), median(kernel_ms)]
gc.set_threshold(GC_THRESHOLD)   # as the collector runs
for skip in (False, True):   # False: every connection decoded and recorded (the collector before change-skipping)
    iface = InterfaceSource()
    iface_report = reporter(iface)
    src = TcpSource(iface.ifkey_of, None, iface.ignored, skip_unchanged=skip)
    path = os.path.join(tempfile.mkdtemp(prefix="nestlab-bench-"), "run.db")   # a run.db as the collector's (WAL)
    create_db(path).close()
    db = connect(path)
    db.isolation_level = None
    tracker = ModuleTracker(db)
    T = {k: [] for k in ("dump", "poll", "record", "sql", "gc", "total", "changed")}
    dump, write = src.diag.dump, tracker.writer.snapshot
    def timed_dump(families=None, same=None):
        t = time.thread_time(); r = dump(families, same); T["dump"].append(time.thread_time() - t)
        T["changed"].append(len(r) / 1000)
        return r
    def timed_write(*a, **k):
        t = time.thread_time(); write(*a, **k); T["sql"].append(time.thread_time() - t)
    gc_at = [0.0, 0.0]
    def on_gc(phase, info):
        if phase == "start":
            gc_at[0] = time.thread_time()
        else:
            gc_at[1] += time.thread_time() - gc_at[0]
    src.diag.dump, tracker.writer.snapshot = timed_dump, timed_write
    gc.callbacks.append(on_gc)
    def snapshot():
        gc_at[1] = 0.0
        t0 = time.thread_time()
        reports = [iface_report(), src.report()]
        t1 = time.thread_time()
        tracker.record_reports(time.monotonic(), time.time(), reports)
        t2 = time.thread_time()
        T["poll"].append(t1 - t0 - T["dump"][-1]); T["record"].append(t2 - t1 - T["sql"][-1])
        T["total"].append(t2 - t0); T["gc"].append(gc_at[1])
    for _ in range(3):   # births, owners and the first rows out of the way
        time.sleep(gap); snapshot()
    for v in T.values():
        v.clear()
    for _ in range(reps):
        time.sleep(gap); snapshot()
    gc.callbacks.remove(on_gc)
    out += [median(T[k]) for k in ("dump", "poll", "record", "sql", "gc", "total", "changed")]
    src.close()
    db.close()
    for f in os.listdir(os.path.dirname(path)):
        os.remove(os.path.join(os.path.dirname(path), f))
    os.rmdir(os.path.dirname(path))
print(*out)
"""

STAGE_NAMES = ("dump", "poll", "record", "sql", "gc", "total", "changed")


def stages(net: Connections, reps: int, interval: float) -> dict:
    """Where a snapshot's CPU goes over the client's sockets, ms, the median of `reps` snapshots
    `interval` apart (thread CPU time): the kernel's dump (walked, not decoded: a floor for any
    reader), and for the TCP source with every connection decoded ("all": the collector before
    change-skipping) and with only the changed ("changed"): the dump, the rest of the poll, the
    tracker's record but its SQL, the SQL writes, the cyclic GC's share of all those, the whole
    snapshot, and the connections decoded (the changed)."""
    code = STAGES.replace("sys.argv[1]", str(reps)).replace("sys.argv[2]", str(interval))
    vals = [float(x) for x in net.run_in_client(code).split()]
    k = len(STAGE_NAMES)
    return {"sockets": int(vals[0]), "kernel": vals[1],
            "all": dict(zip(STAGE_NAMES, vals[2:2 + k], strict=True)),
            "changed": dict(zip(STAGE_NAMES, vals[2 + k:2 + 2 * k], strict=True))}


def stage_line(name: str, st: dict) -> str:
    return (f"  {name:<22} dump {st['dump']:6.2f} | poll {st['poll']:5.2f} | record {st['record']:5.2f} | "
            f"SQL {st['sql']:5.2f} | GC {st['gc']:5.2f} | snapshot {st['total']:6.2f} ms "
            f"({st['changed']:.0f} decoded)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--intervals", default="0.05,0.1")
    p.add_argument("--counts", default="100,1000,10000")
    p.add_argument("--probe", action="store_true", help="also measure each point with the prober on")
    p.add_argument("--verbose", action="store_true", help="print every round")
    p.add_argument("--period", type=float, default=1.0,
                   help="seconds between two bytes on one connection (the trickle; 1: every connection moves every second)")
    p.add_argument("--nice", type=int, default=0,
                   help="run the collector at this niceness (e.g. -10: its own cadence, apart from the neighbours')")
    a = p.parse_args()
    intervals = [float(x) for x in a.intervals.split(",")]
    probe = json.dumps(dataclasses.asdict(ProbeSettings()))
    print(f"collector under load: {a.seconds:g} s steady state per round, best of {a.rounds} rounds (least time waiting for a CPU); "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; collector niceness {a.nice}; "
          f"a byte on every connection every {a.period:g} s")
    head = (f"{'conns':>6} {'ms':>4} {'tcp mods':>8} {'CPU %':>7} {'CPU/snap':>9} {'late p50':>9} {'p99':>7} "
            f"{'max':>7} {'lost':>5} {'snaps':>6} {'no CPU':>7} | {'worst p99':>9} {'lost':>5} | {'ss -tin':>8} {'ss/coll':>7}")
    results = []
    for n in (int(x) for x in a.counts.split(",")):
        with Connections(n, private_hash=True, period=a.period) as net:
            time.sleep(1.0)
            ss_ms, ss_n = ss_baseline(net, 5 if n > 1000 else 20)
            st = stages(net, 15, intervals[0])
            print(f"\n{n} connections: ss -tin {ss_ms:.1f} ms CPU a dump ({ss_n} sockets). Collector stages, CPU ms, "
                  f"median of 15 snapshots {intervals[0] * 1000:g} ms apart ({st['sockets']} sockets): kernel's dump "
                  f"{st['kernel']:.2f}")
            print(stage_line("every connection", st["all"]))
            print(stage_line("only the changed", st["changed"]))
            print(head)
            for interval in intervals:
                variants = [("off", None)] + ([("probe", probe)] if a.probe else [])
                for name, settings in variants:
                    rounds = [measure(net, a.seconds, interval, settings, nice=a.nice) for _ in range(a.rounds)]
                    # the round the machine's other work held up least (the least time waiting for a CPU)
                    best = min(rounds, key=lambda r: r["runnable"])
                    if a.verbose:
                        for r in rounds:
                            print(f"   round: {r['seconds']:.2f} s, CPU {r['cpu_s']:.3f} s, {r['snapshots']} snapshots, "
                                  f"waiting for a CPU {r['runnable']:.1f}%, lost {r['lost']}, p99 {r['p99_ms']:.2f} ms")
                    worst_p99 = max(r["p99_ms"] for r in rounds)
                    worst_lost = max(r["lost"] for r in rounds)
                    # what ss -tin at every snapshot would cost, against the collector's CPU per snapshot
                    label = f"{n:6d}" if name == "off" else f"{'+probe':>6}"
                    print(f"{label} {interval * 1000:4.0f} {best['tcp_modules']:8d} {best['cpu']:6.2f}% "
                          f"{best['cpu_ms']:6.2f} ms {best['p50_ms']:6.2f} ms {best['p99_ms']:6.2f} {best['max_ms']:7.2f} "
                          f"{best['lost']:5d} {best['snapshots']:6d} {best['runnable']:6.1f}% | {worst_p99:6.2f} ms {worst_lost:5d} | "
                          f"{ss_ms:5.1f} ms {ss_ms / best['cpu_ms']:6.1f}x", flush=True)
                    results.append((n, interval, name, best, worst_p99, worst_lost))
    print("\ntargets: <= 2% of a core at 100 connections and <= 10% at 1,000 (50 ms); at 10,000 no snapshot "
          "lost and p99 lateness under one interval")
    for n, interval, name, best, _worst_p99, _worst_lost in results:
        if name != "off":
            continue
        verdicts = []
        if interval == 0.05 and n in TARGETS_50MS:
            verdicts.append(f"CPU {best['cpu']:.2f}% vs {TARGETS_50MS[n]:g}%: "
                            f"{'ok' if best['cpu'] <= TARGETS_50MS[n] else 'OVER'}")
        if n >= 10000:
            ok = best["lost"] == 0 and best["p99_ms"] < interval * 1000
            verdicts.append(f"lost {best['lost']}, p99 {best['p99_ms']:.1f} ms vs {interval * 1000:g} ms: "
                            f"{'ok' if ok else 'MISSED'}")
        if verdicts:
            print(f"  {n:6d} at {interval * 1000:g} ms: " + "; ".join(verdicts))


if __name__ == "__main__":
    main()

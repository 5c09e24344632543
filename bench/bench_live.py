"""Live diagnosis cost (analysis.live, docs/live.md).

    .venv/bin/python bench/bench_live.py [--minutes 15] [--refreshes 20]
    .venv/bin/python bench/bench_live.py --collector 10 [--connections 100]     # root

Refresh: a synthetic 15-minute run (9,000 snapshots at 100 ms, ~100 modules, connection churn and
counter glitches, a counters row for every module every snapshot: more rows than the collector writes)
is grown into a run directory the way the collector writes it (tests/support/grow.py). A live engine
attaches at 1,000 snapshots, then is refreshed after every 10 new snapshots (one second), near the
start and again near 9,000 snapshots: the per-refresh cost must not grow with the run. Baseline in the
same run: the offline analysis of the whole run (load_stretches + diagnose), which a live view that is not
incremental would redo every second.

Collector (root): the real collector in a network namespace holding N TCP connections (as
bench_collector.py makes them), its CPU and interval deviation measured in alternating phases without
a reader and with a live engine refreshing every second and every 100 ms.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np  # noqa: E402

from analysis.diagnose import diagnose_stretches  # noqa: E402
from analysis.live import LiveEngine  # noqa: E402
from analysis.model.stretches import load_stretches  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from tests.support.grow import Grower  # noqa: E402
from tests.support.synthetic import synthetic_run  # noqa: E402


def refreshes(engine: LiveEngine, grower: Grower, count: int) -> list[float]:
    costs = []
    for _ in range(count):
        grower.grow(grower.seq + 10)
        t = time.perf_counter()
        engine.refresh()
        costs.append(time.perf_counter() - t)
    return costs


def describe(costs: list[float]) -> str:
    ms = np.array(costs) * 1000
    return f"median {np.median(ms):.1f} ms, p90 {np.percentile(ms, 90):.1f} ms, max {ms.max():.1f} ms"


def bench_refresh(minutes: float, count: int) -> int:
    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-live-"))
    try:
        t = time.perf_counter()
        src = synthetic_run(tmp / "src", seconds=minutes * 60)
        RunDir(src).manifest_path.write_text('{"format_version": 1, "status": "complete", "snapshot_interval": 0.1}\n')
        print(f"synthetic run: {minutes:g} min, made in {time.perf_counter() - t:.1f} s")
        grower = Grower(src, tmp / "live")
        grower.grow(999)
        engine = LiveEngine(tmp / "live")
        t = time.perf_counter()
        engine.refresh()
        print(f"attach at 1,000 snapshots: {(time.perf_counter() - t) * 1000:.0f} ms")
        early = refreshes(engine, grower, count)
        print(f"refresh at {1000 + 10:,}..{grower.seq + 1:,} snapshots: {describe(early)}")
        grower.grow(grower.last - 10 * count)
        t = time.perf_counter()
        engine.refresh()
        print(f"catch-up to {grower.seq + 1:,} snapshots (one refresh reading the rest): "
              f"{time.perf_counter() - t:.1f} s")
        late = refreshes(engine, grower, count)
        rows = engine.reader.rowid
        print(f"refresh at {grower.seq + 1 - 10 * count:,}..{grower.seq + 1:,} snapshots: {describe(late)} "
              f"({rows:,} counters rows in run.db; each refresh reads the ~{rows // (grower.seq + 1) * 10:,} new ones)")
        grower.finish()
        t = time.perf_counter()
        diagnose_stretches(load_stretches(tmp / "live"), ["flowdiagnoser"])
        offline = time.perf_counter() - t
        print(f"baseline, the offline analysis of the whole run: {offline:.2f} s")
        print(f"ratio baseline / live refresh at the end: {offline / np.median(late):.0f}x; "
              f"late / early refresh: {np.median(late) / np.median(early):.2f}")
        engine.close()
        grower.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


# ---------------------------------------------------------------- the collector with and without a reader


def bench_collector(seconds: float, n: int) -> int:
    from connections import Connections, cpu_ticks

    from rundir.db import connect, create_db

    tmp = Path(tempfile.mkdtemp(prefix="nestlab-bench-live-"))
    try:
        # 100 bytes on every connection every 50 ms: counters move every snapshot
        with Connections(n, private_hash=True, size=100, period=0.05) as net:
            rd = RunDir(tmp)
            rd.manifest_path.write_text('{"format_version": 4, "status": "running", "snapshot_interval": 0.1}\n')
            create_db(rd.db).close()
            coll = net.start_collector(rd.db, 0.1)
            time.sleep(2.0)
            engine = LiveEngine(tmp)
            engine.refresh()
            results: dict[str, list] = {"no reader": [], "live engine every 1 s": [], "live engine every 0.1 s": []}
            for phase in [*results, *results]:
                every = {"no reader": None, "live engine every 1 s": 1.0, "live engine every 0.1 s": 0.1}[phase]
                t0, c0 = time.monotonic(), cpu_ticks(coll.pid)
                s0 = engine.reader.seq
                costs = []
                while time.monotonic() - t0 < seconds:
                    if every is None:
                        time.sleep(0.05)
                        continue
                    t = time.perf_counter()
                    engine.refresh()
                    costs.append(time.perf_counter() - t)
                    time.sleep(max(0.0, every - (time.perf_counter() - t)))
                t1, c1 = time.monotonic(), cpu_ticks(coll.pid)
                engine.refresh()
                results[phase].append((100 * (c1 - c0) / os.sysconf("SC_CLK_TCK") / (t1 - t0), s0, engine.reader.seq,
                                       costs))
            engine.close()
            db = connect(rd.db, readonly=True)
            mono = np.array([m for (m,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")])
            tcp = db.execute("SELECT count(*) FROM modules WHERE kind = 'tcp'").fetchone()[0]
            db.close()
            dev = np.abs(mono - (mono[0] + np.round((mono - mono[0]) / 0.1) * 0.1)) * 1000
            print(f"collector at 100 ms, {tcp} TCP modules, {seconds:g} s per phase, phases interleaved twice:")
            for phase, runs in results.items():
                cpu = [r[0] for r in runs]
                p99 = [np.percentile(dev[r[1] + 1:r[2] + 1], 99) for r in runs]
                costs = [c for r in runs for c in r[3]]
                extra = f"; refresh median {np.median(costs) * 1000:.1f} ms" if costs else ""
                print(f"  {phase:<24} collector CPU {np.mean(cpu):5.2f}% of a core ({', '.join(f'{c:.2f}' for c in cpu)}), "
                      f"interval p99 deviation {max(p99):.2f} ms{extra}")
            base = np.mean([r[0] for r in results["no reader"]])
            live = np.mean([r[0] for r in results["live engine every 1 s"]])
            print(f"ratio collector CPU with / without the live engine (1 s): {live / base:.2f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=15)
    p.add_argument("--refreshes", type=int, default=20)
    p.add_argument("--collector", type=float, metavar="SECONDS", help="collector phases of this length (root)")
    p.add_argument("--connections", type=int, default=100)
    a = p.parse_args(argv)
    if a.collector:
        return bench_collector(a.collector, a.connections)
    return bench_refresh(a.minutes, a.refreshes)


if __name__ == "__main__":
    sys.exit(main())

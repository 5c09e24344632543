"""The trace side of the black-box path analysis (docs/blackbox.md): Maketrace generating the slides'
multi-tier traces of 20k, 200k and 2M messages, reconciliation of the per-process events a tracer
would record of them, and reading them back from CSV and Parquet. Each figure is printed with its
rate and a ratio against a baseline measured in the same run: sorting the same number of float64
times with numpy (what any trace pipeline must at least do). Peak memory: the process's peak RSS
growth over the step (each size runs in a fresh process).

    .venv/bin/python bench/bench_trace.py [--sizes 20000,200000,2000000] [--no-reconcile]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
# web_service() at parallelism 4 makes ~1,010 messages a second of trace
MSGS_PER_S = 1010


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(size: int, reconcile_too: bool) -> dict:
    from analysis.paths.maketrace import maketrace, socket_events, web_service
    from analysis.paths.readers import read_trace_file, write_trace

    out: dict[str, float] = {"size": size}
    base = np.random.default_rng(0).random(size)
    t0 = time.perf_counter()
    np.argsort(base, kind="stable")
    out["baseline_s"] = time.perf_counter() - t0
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    tr = maketrace(web_service(), duration=size / MSGS_PER_S, parallelism=4, seed=1)
    out["maketrace_s"] = time.perf_counter() - t0
    out["maketrace_mb"] = _rss_mb() - rss0
    out["messages"] = len(tr.messages)
    with tempfile.TemporaryDirectory() as d:
        for suffix in (".csv", ".parquet"):
            path = Path(d) / f"t{suffix}"
            write_trace(tr, path)
            t0 = time.perf_counter()
            read_trace_file(path)
            out[f"read{suffix}_s"] = time.perf_counter() - t0
    if reconcile_too:
        from analysis.paths.reconcile import reconcile
        ev = socket_events(tr, chunk=400)
        out["events"] = len(ev)
        t0 = time.perf_counter()
        reconcile(ev)
        out["reconcile_s"] = time.perf_counter() - t0
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="20000,200000,2000000")
    ap.add_argument("--no-reconcile", action="store_true")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(args.one, not args.no_reconcile)))
        return
    print(f"{'messages':>10} {'maketrace s':>12} {'msg/s':>10} {'MB':>7} {'csv s':>7} {'parquet s':>10} "
          f"{'events':>10} {'reconcile s':>12} {'ev/s':>9} {'sort s':>8} {'make/sort':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(size)] + (["--no-reconcile"] if args.no_reconcile else [])
        r = json.loads(subprocess.run(cmd, check=True, capture_output=True, text=True, cwd=REPO).stdout)
        n = r["messages"]
        rec = r.get("reconcile_s", float("nan"))
        ev = r.get("events", 0)
        print(f"{n:>10,} {r['maketrace_s']:>12.2f} {n / r['maketrace_s']:>10,.0f} {r['maketrace_mb']:>7.0f} "
              f"{r['read.csv_s']:>7.2f} {r['read.parquet_s']:>10.2f} {ev:>10,} {rec:>12.2f} "
              f"{ev / rec if ev else float('nan'):>9,.0f} {r['baseline_s']:>8.3f} "
              f"{r['maketrace_s'] / r['baseline_s']:>10.1f}")


if __name__ == "__main__":
    main()

"""The message drainer's memory and speed on a ring of distinct endpoints (issue 40 item 5): one crafted
ring (tests/support/rings.py) of N events, each to another far end (address and port), drained into a
run.db. Printed for the drainer as it is (its endpoint-name cache bounded at NAMES_MAX) and for the
baseline measured in the same run, the same drainer with the cache unbounded (what it was before):
the cache's entries after the drain, Python memory kept after it and at its peak (tracemalloc), the
drain's time and events a second (in a drain without tracemalloc), and the ratios.

    .venv/bin/python bench/bench_tracedrain.py [--events 1000000]
"""

from __future__ import annotations

import argparse
import ipaddress
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness.collector import tracedrain  # noqa: E402
from rundir.db import create_db  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from rundir.messages import MessageWriter  # noqa: E402
from tests.support.rings import event, write_ring  # noqa: E402

PID = 4_000_000     # no live process: the drain is the final one


def one(ring_dir: Path, db: Path, names_max: int | None, memory: bool) -> dict:
    """One drain of the whole ring; memory: under tracemalloc (slower: timed in a run without it)."""
    tracedrain.NAMES_MAX = names_max
    db.unlink(missing_ok=True)
    conn = create_db(db)
    conn.isolation_level = None
    dr = tracedrain.TraceDrainer({"h": str(ring_dir)}, MessageWriter(conn))
    dr._scan()
    for t in dr.traced.values():     # every run reads the same ring from its start
        t.ring.tail = 0
    if memory:
        tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    t0 = time.perf_counter()
    rows = dr.drain(final=True)
    took = time.perf_counter() - t0
    kept, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    entries = dr._name.cache_info().currsize
    dr.close()
    conn.close()
    return {"rows": rows, "s": took, "kept_mb": (kept - before) / 2**20, "peak_mb": (peak - before) / 2**20,
            "entries": entries}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000)
    a = ap.parse_args(argv)
    cap = 1 << max(4, (a.events - 1).bit_length())
    work = Path(tempfile.mkdtemp(prefix="nestlab-bench-drain-"))
    try:
        ring_dir = work / "shm"
        ring_dir.mkdir()
        base = int(ipaddress.IPv4Address("10.0.0.0"))
        t0 = time.perf_counter()
        write_ring(ring_dir / f"{PID}.nest", PID, cap,
                   [event(k, raddr=str(ipaddress.IPv4Address(base + k)), rport=1 + k % 60000) for k in range(a.events)])
        print(f"ring of {a.events:,} events (capacity {cap:,}), each to a distinct far end: "
              f"written in {time.perf_counter() - t0:.1f} s")
        bounded = tracedrain.NAMES_MAX
        now = one(ring_dir, RunDir(work).db, bounded, memory=True)
        was = one(ring_dir, RunDir(work).db, None, memory=True)
        now["s"] = one(ring_dir, RunDir(work).db, bounded, memory=False)["s"]
        was["s"] = one(ring_dir, RunDir(work).db, None, memory=False)["s"]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{'cache':>22} {'entries':>10} {'kept MiB':>9} {'peak MiB':>9} {'drain s':>8} {'events/s':>10}")
    for label, r in ((f"bounded ({bounded:,})", now), ("unbounded (baseline)", was)):
        print(f"{label:>22} {r['entries']:>10,} {r['kept_mb']:>9.1f} {r['peak_mb']:>9.1f} {r['s']:>8.2f} "
              f"{r['rows'] / r['s']:>10,.0f}")
    print(f"kept after the drain: {now['kept_mb']:.1f} vs {was['kept_mb']:.1f} MiB "
          f"(ratio {now['kept_mb'] / max(was['kept_mb'], 1e-9):.3f}); peak ratio "
          f"{now['peak_mb'] / max(was['peak_mb'], 1e-9):.2f}; time ratio {now['s'] / was['s']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

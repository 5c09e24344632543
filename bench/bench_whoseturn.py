"""The whoseturn variant's speed (issue 42: at least 5,000,000 module-diagnoses/s), against
`flowdiagnoser:theta=2` (its baseline, which it runs first) measured in the same run on the same
batch.

The batch is a service run as the lab records one: `--hosts` monitored hosts, each a stretch of
`--snapshots` snapshots with one application, `--conns` connections (a socket over a TCP connection
each, request/response traffic: a few segments each way, then quiet) and its interface; every TCP
connection has its TCP state and turn (run format 8) drawn at random, so that every rule is taken.
A module-diagnosis is one module, one direction, one snapshot (bench/bench_diagnose.py). Best of
`--rounds` rounds, a fresh batch each (the turns are made once per batch and shared by variants).
The target and the ratio are on the wall clock; the CPU time beside it (time.process_time, best of
the rounds too) leaves out the time a shared machine gives to others.

With `--run RUN` (a stored service run, read-only) it times the real shape instead: the run's own
stretches, one batch per monitored host as analysis.diagnose makes them (a real run's graph changes at
almost every snapshot: many short stretches; the turns, and flowdiagnoser's analysis graphs, are
built over all of a host's stretches at once).

    .venv/bin/python bench/bench_whoseturn.py [--hosts 5] [--conns 200] [--snapshots 600] [--rounds 5]
    .venv/bin/python bench/bench_whoseturn.py --run results/blackbox/cache-pause-moderate/<stamp>-r0
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from analysis.model.batch import Batch  # noqa: E402
from analysis.model.stretches import DIRS, Counters, Stretch  # noqa: E402
from analysis.model.tcpstate import TcpState  # noqa: E402
from analysis.model.turnstate import TurnState  # noqa: E402
from analysis.variants import parse_variant  # noqa: E402

TARGET = 5_000_000


def host(rng: np.random.Generator, first_id: int, conns: int, t: int) -> Stretch:
    n = 2 + 2 * conns
    kinds = ["app", "ipeth"] + ["socket", "tcp"] * conns
    edges = []
    for c in range(conns):
        s, k = 2 + 2 * c, 3 + 2 * c
        edges += [(0, s), (s, k), (k, 1)]
    counters = {}
    for d in DIRS:
        c = Counters.empty(n, t)
        c.tm[:] = rng.choice([0.0, 0.0, 0.0, 1.0, 2.0], size=(n, t))
        c.tm[1] = 50
        sock = np.array([k == "socket" for k in kinds])
        c.has_wait[sock | (np.arange(n) == 0)] = True
        c.wait[:] = rng.choice([0.0, 3.0], size=(n, t))
        tcp = np.array([k == "tcp" for k in kinds])
        c.has_queue[tcp] = True
        c.queued[tcp] = rng.choice([0.0, 0.0, 0.0, 0.0, 100.0], size=(int(tcp.sum()), t))
        counters[d] = c
    st = Stretch(list(range(first_id, first_id + n)), kinds, edges, np.arange(t), counters)
    mono = np.arange(1, t + 1) * 0.1
    ts = TcpState.unknown(n, t, mono)
    ts.known[:] = True
    ts.data_sent_at = mono[None, :] - rng.choice([0.0, 0.01, 0.2, 1.0], size=(n, t))
    ts.data_recv_at = mono[None, :] - rng.choice([0.0, 0.01, 0.2, 1.0], size=(n, t))
    st.tcpstate = ts
    st.turn = TurnState(np.ones((n, t), dtype=bool), rng.choice([0.0, 0.0, 0.0, 1.0], size=(n, t)),
                        rng.choice([0.0, 0.0, 0.0, 0.0, 500.0], size=(n, t)), rng.random(n) < 0.5)
    return st


def batch(args, seed: int) -> Batch:
    rng = np.random.default_rng(seed)
    n = 2 + 2 * args.conns
    return Batch([host(rng, k * n, args.conns, args.snapshots) for k in range(args.hosts)])


def run_batches(run: str):
    """A maker of the run's batches, one per host, fresh at each call (the turns are shared per batch)."""
    from analysis.load import load_run_data

    groups: dict = {}
    for st in load_run_data(run).counter_stretches() or []:
        groups.setdefault(st.host, []).append(st)
    return lambda: [Batch(sts) for sts in groups.values()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hosts", type=int, default=5)
    ap.add_argument("--conns", type=int, default=200)
    ap.add_argument("--snapshots", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--run", metavar="RUN", help="time a stored service run's own stretches instead")
    args = ap.parse_args()
    base, mine = parse_variant("flowdiagnoser:theta=2"), parse_variant("whoseturn")
    best = {base.name: np.inf, mine.name: np.inf}
    cpu = dict(best)   # CPU time too: on a shared machine the wall clock counts others' time as ours
    cells = 0
    make = run_batches(args.run) if args.run else None
    if make is not None:
        print(f"{args.run}: {sum(len(b.stretches) for b in make())} stretches in {len(make())} host batches")
    for r in range(args.rounds):
        for v in (base, mine):   # each on a fresh batch: no structure shared between the two
            bs = make() if make is not None else [batch(args, r)]
            cells = sum(b.n_cells for b in bs)
            t0, c0 = time.perf_counter(), time.process_time()
            for b in bs:
                v.diagnose(b)
            best[v.name] = min(best[v.name], time.perf_counter() - t0)
            cpu[v.name] = min(cpu[v.name], time.process_time() - c0)
    rates = {k: 2 * cells / s for k, s in best.items()}
    for k, s in best.items():
        print(f"{k:24s} {rates[k]:>13,.0f} module-diagnoses/s ({2 * cells:,} in {s:.3f} s; "
              f"CPU {cpu[k]:.3f} s: {2 * cells / cpu[k]:,.0f}/s)")
    ratio = rates[mine.name] / rates[base.name]
    ok = rates[mine.name] >= TARGET
    print(f"whoseturn / flowdiagnoser:theta=2: {ratio:.2f}; target {TARGET:,}: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

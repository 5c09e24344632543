"""A synthetic run.db for the diagnosis tests and bench/bench_diagnose.py: `synthetic_run`.

Apps with download or upload connections (socket -> tcp -> one ipeth), connections replaced every
`churn_s` seconds (the graph changes), network-wide faults, per-connection faults, application
pauses, and rare counter glitches (a cumulative value read low once, thesis 3.4).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from analysis.model.stretches import DIRS
from rundir.db import create_db


def _periods(rng, s, every, length):
    """Bool (s,) with a period of `length` snapshots starting at random points, about one per `every`."""
    out = np.zeros(s, dtype=bool)
    for start in rng.integers(0, s, size=max(1, s // every)):
        out[start:start + length] = True
    return out


def synthetic_run(path: Path, seconds: float = 900, interval: float = 0.1, apps: int = 4, conns: int = 12,
                  churn_s: float = 60, seed: int = 0) -> Path:
    """Write run.db (and a minimal manifest) into `path`; returns the path."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "manifest.json").write_text('{"format_version": 1, "status": "complete", "synthetic": true}\n')
    rng = np.random.default_rng(seed)
    s = int(round(seconds / interval))
    mono = 1000.0 + np.arange(s) * interval
    net_fault = _periods(rng, s, every=int(45 / interval), length=int(2 / interval))
    churn = max(1, int(churn_s / interval))

    modules, edges = [], []     # (id, kind, name, key, born_pos, died_pos), (parent, child, born, died)
    series = []                 # (module, dir, born, died, tm, wait|None, queued|None, errors)
    next_id = [1]

    def new(kind, name, born, died):
        mid = next_id[0]
        next_id[0] += 1
        modules.append((mid, kind, name, f"{kind}:{mid}", born, died))
        return mid

    ipeth = new("ipeth", "ipeth eth0", 0, s)
    ip_tm = {d: np.zeros(s) for d in DIRS}
    for a in range(apps):
        app = new("app", f"app{a}", 0, s)
        app_tm = {d: np.zeros(s) for d in DIRS}
        app_wait = {d: np.zeros(s) for d in DIRS}
        pause = _periods(rng, s, every=int(120 / interval), length=int(3 / interval))
        for k in range(conns):
            born = 0
            while born < s:
                died = min(s, born + churn + int(rng.integers(0, churn)))
                up = bool(rng.integers(0, 2))
                sock = new("socket", f"app{a} fd{k}", born, died)
                tcp = new("tcp", f"tcp {a}.{k}", born, died)
                edges += [(app, sock, born, died), (sock, tcp, born, died), (tcp, ipeth, born, died)]
                life = slice(born, died)
                n = died - born
                fault = net_fault[life] | _periods(rng, n, every=int(90 / interval), length=int(1.5 / interval))
                paused = pause[life]
                busy, quiet = ("out", "in") if up else ("in", "out")
                st_tm = np.where(paused | fault, 0, rng.poisson(15, n)) * (rng.random(n) > 0.03)
                st_wait = np.where(paused, 0, np.where(fault | (st_tm == 0), interval * 1000, rng.integers(0, 40, n)))
                tcp_tm = np.where(fault, 0, np.where(paused, rng.poisson(2, n) * (rng.random(n) > 0.6),
                                                     rng.poisson(40, n)))
                queued = np.where(tcp_tm > 0, rng.integers(0, 50000, n), np.where(paused, 65536, 0))
                errors = rng.poisson(0.05, n)
                series += [
                    (sock, busy, born, died, st_tm, st_wait, None, np.zeros(n)),
                    (sock, quiet, born, died, np.zeros(n), np.zeros(n), None, np.zeros(n)),
                    (tcp, busy, born, died, tcp_tm, None, queued, errors),
                    (tcp, quiet, born, died, np.zeros(n), None, np.zeros(n), np.zeros(n)),
                ]
                app_tm[busy][life] += st_tm
                app_wait[busy][life] += st_wait
                ip_tm[busy][life] += tcp_tm
                born = died
        for d in DIRS:
            series.append((app, d, 0, s, app_tm[d], app_wait[d], None, np.zeros(s)))
    for d in DIRS:
        series.append((ipeth, d, 0, s, ip_tm[d] + rng.poisson(1, s), None, None, rng.poisson(0.01, s)))

    db = path / "run.db"
    if db.exists():
        db.unlink()
    conn = create_db(db)
    conn.executemany("INSERT INTO snapshots VALUES (?, ?, ?)",
                     [(i, float(mono[i]), 1.7e9 + float(mono[i])) for i in range(s)])
    conn.executemany("INSERT INTO modules (id, kind, name, key, attrs, born, died) VALUES (?,?,?,?,'{}',?,?)",
                     [(m, k, nm, key, float(mono[b]), None if e >= s else float(mono[e]))
                      for m, k, nm, key, b, e in modules])
    conn.executemany("INSERT INTO edges VALUES (?,?,?,?)",
                     [(p, c, float(mono[b]), None if e >= s else float(mono[e])) for p, c, b, e in edges])
    for mid, d, born, died, tm, wait, queued, errors in series:
        start = 10**9 if mid == ipeth else 0  # interface counters predate the run
        cum_tm = start + np.cumsum(tm)
        glitch = rng.random(len(cum_tm)) < 2e-4  # a value read low once (thesis 3.4)
        cum_tm = np.where(glitch, cum_tm - 1000, cum_tm)
        cols = [np.arange(born, died).tolist(), [mid] * len(tm), [d] * len(tm), cum_tm.astype(np.int64).tolist(),
                (np.cumsum(wait).tolist() if wait is not None else [None] * len(tm)),
                (np.asarray(queued, dtype=np.int64).tolist() if queued is not None else [None] * len(tm)),
                np.cumsum(errors).astype(np.int64).tolist()]
        conn.executemany("INSERT INTO counters (seq, module, dir, total_msgs, wait_ms, queued, errors) "
                         "VALUES (?,?,?,?,?,?,?)", zip(*cols, strict=True))
    conn.commit()
    conn.close()
    return path

"""Hand-made run directories in the run format (docs/run-format.md), small enough to reason about
cell by cell: for the lab's tests and a plug-in author's (nestlab.testing).

`RunBuilder` writes a small run.db with rundir.db.create_db (modules with per-snapshot counter
deltas, edges, processes, faults, events) and a small manifest, written by the runner's writer
(rundir.layout.RunDir.write_manifest, which checks it against rundir.manifest); `make_run` is a
ready one with two workloads and two faults. Streams runs: rundir.handmade_streams.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from rundir.db import FORMAT_VERSION, create_db
from rundir.layout import RunDir

T0 = 1000.0
DT = 0.1


class RunBuilder:
    """A hand-made run: n snapshots at T0 + seq * DT; counters given as per-snapshot deltas."""

    def __init__(self, path: Path, n: int, workloads=None, monitor_if: str = "h1-eth0", manifest: bool = True,
                 status: str = "complete", experiment: str = "hand"):
        self.path = Path(path)
        self.n = n
        self.workloads = workloads if workloads is not None else []
        self.monitor_if = monitor_if
        self.write_manifest = manifest
        self.status = status
        self.experiment = experiment
        self.modules: list[tuple] = []
        self.edges: list[tuple] = []
        self.series: dict[tuple[int, str], dict] = {}
        self.procs: list[tuple] = []
        self.faults: list[tuple] = []
        self.raw: dict[tuple[int, str, int], int] = {}
        self.events: list[tuple[float, str]] = []
        self.manifest_extra: dict = {}   # more manifest keys (over the defaults), e.g. monitor, fault_kinds

    @staticmethod
    def t(seq: float) -> float:
        return T0 + seq * DT

    def module(self, kind: str, key: str, attrs: dict | None = None, born: int = 0, died: int | None = None,
               name: str | None = None) -> int:
        mid = len(self.modules) + 1
        self.modules.append((mid, kind, name or key, key, json.dumps(attrs or {}), born, died))
        return mid

    def edge(self, parent: int, child: int) -> None:
        self.edges.append((parent, child))

    def counters(self, module: int, d: str, tm, wait=None, queued=None, nbytes=None) -> None:
        """Per-snapshot deltas over the module's life (a scalar repeats); bytes NULL unless given."""
        self.series[(module, d)] = {"tm": tm, "wait": wait, "queued": queued, "bytes": nbytes}

    def process(self, pid: int, workload: int | None, cmdline: str, role: str = "client", host: str = "h1") -> None:
        self.procs.append((pid, workload, role, host, cmdline, self.t(0) - 0.05, None, None))

    def fault(self, kind: str, target_module: int | None, start: float, end: float | None, target: dict | None = None):
        fid = len(self.faults) + 1
        self.faults.append((fid, 0, kind, "x1", target_module, json.dumps(target or {}), None, None,
                            None if start is None else T0 + start, None if end is None else T0 + end, "rule"))
        return fid

    def event(self, kind: str, at: float) -> None:
        self.events.append((T0 + at, kind))

    def write(self) -> Path:
        self.path.mkdir(parents=True, exist_ok=True)
        conn = create_db(self.path / "run.db")
        conn.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", [(s, self.t(s), 1e9 + s) for s in range(self.n)])
        for mid, kind, name, key, attrs, born, died in self.modules:
            died_t = None if died is None else self.t(died)
            conn.execute("INSERT INTO modules VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (mid, kind, name, key, attrs, self.t(born), died_t if died_t is not None else self.t(self.n)))
        life = {m[0]: (m[5], m[6] if m[6] is not None else self.n) for m in self.modules}
        for p, c in self.edges:
            a = max(life[p][0], life[c][0])
            b = min(life[p][1], life[c][1])
            conn.execute("INSERT INTO edges VALUES (?, ?, ?, ?)", (p, c, self.t(a), self.t(b)))
        rows = []
        kinds = {m[0]: m[1] for m in self.modules}
        for mid, (born, died) in life.items():
            for d in ("in", "out"):
                spec = self.series.get((mid, d), {"tm": 0, "wait": None, "queued": None})
                k = died - born
                tm = np.broadcast_to(np.asarray(spec["tm"], dtype=float), (k,))
                has_wait = spec["wait"] is not None or kinds[mid] in ("app", "socket")
                wait = np.broadcast_to(np.asarray(spec["wait"] if spec["wait"] is not None else 0, dtype=float), (k,))
                queued = spec["queued"]
                base = 1000 if kinds[mid] == "ipeth" else 0  # an interface's counters predate the run
                ctm, cw = base + np.cumsum(tm), np.cumsum(wait)
                nbytes = spec.get("bytes")
                cb = None if nbytes is None else np.cumsum(np.broadcast_to(np.asarray(nbytes, dtype=float), (k,)))
                for i, s in enumerate(range(born, died)):
                    total = self.raw.get((mid, d, s), int(ctm[i]))
                    rows.append((s, mid, d, total, float(cw[i]) if has_wait else None,
                                 None if queued is None else int(np.broadcast_to(queued, (k,))[i]),
                                 0 if kinds[mid] in ("tcp", "ipeth") else None, None if cb is None else int(cb[i])))
        conn.executemany("INSERT INTO counters VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
        conn.executemany("INSERT INTO processes VALUES (?, ?, ?, ?, ?, ?, ?, ?)", self.procs)
        conn.executemany("INSERT INTO faults VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", self.faults)
        conn.executemany("INSERT INTO events (mono, kind) VALUES (?, ?)", self.events)
        conn.commit()
        conn.close()
        if self.write_manifest:   # through the runner's writer, which checks it against the schema
            RunDir(self.path, {
                "format_version": FORMAT_VERSION, "experiment": self.experiment, "status": self.status, "t0": T0,
                "monitor": {"host": "h1", "address": "10.0.1.1", "interface": self.monitor_if},
                "spec": {"workloads": self.workloads}, **self.manifest_extra}).write_manifest()
        return self.path


WGET = {"kind": "wget", "direction": "download", "role": "foreground"}
IPERF_UP = {"kind": "iperf", "direction": "upload", "role": "foreground"}
IPERF_DOWN = {"kind": "iperf", "direction": "download", "role": "foreground"}
IPERF_DUAL = {"kind": "iperf", "direction": "dual", "role": "foreground"}



def make_run(path, n: int = 50, status: str = "complete", manifest: bool = True):
    """wget (download) and iperf (upload) on one interface; a connection fault and an IP fault."""
    b = RunBuilder(path, n, workloads=[WGET, IPERF_UP], status=status, manifest=manifest)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    mods = {}
    for pid, prog, wl, d in ((100, "wget http://x/f", 0, "in"), (200, "iperf -c 10.0.2.1", 1, "out")):
        app = b.module("app", f"app:{pid}", {"pid": pid}, name=f"{prog.split()[0]} {pid}")
        sock = b.module("socket", f"sock:{pid}:3:{pid}", {"pid": pid, "fd": 3, "inode": pid,
                                                         "dport": 80 if wl == 0 else 5001})
        tcp = b.module("tcp", f"tcp:{pid}", {"inode": pid, "pid": pid, "dport": 80 if wl == 0 else 5001})
        b.edge(app, sock)
        b.edge(sock, tcp)
        b.edge(tcp, ip)
        b.process(pid, wl, prog)
        tm = np.full(n, 20.0)
        if wl == 0:
            tm[21:30] = 0  # the connection fault
        tm[35:40] = 0      # the IP fault
        for m in (app, sock):
            b.counters(m, d, tm / 4, wait=60.0)
        b.counters(tcp, d, tm, queued=np.where(tm > 0, 500, 0))
        mods[prog.split()[0]] = (app, sock, tcp)
    ip_tm = np.full(n, 45.0)
    ip_tm[35:40] = 0
    b.counters(ip, "in", ip_tm)
    b.counters(ip, "out", ip_tm)
    b.fault("tcp_drop", mods["wget"][2], start=2.05, end=2.8, target={"inode": 100})
    b.fault("ip_drop", ip, start=3.45, end=3.9, target={"host": "h1"})
    return b.write(), mods, ip

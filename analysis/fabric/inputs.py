"""A fabric run as the diagnosers see it (docs/fabric.md): the paths and probes of fabric.json, each
TCP connection's retransmissions from run.db, the link faults, and the 10 s windows they are scored in.

Windows: a fault's are the whole WIDTH-long windows from its start (verified in force) to its end;
the others tile the run after WARMUP where no fault is in force or healed less than RECOVERY ago.
A fault window's truth is the fault's link; every other window's truth is empty (no link at fault).
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path

from rundir.errors import UserError
from rundir.fabric import read_connections, read_fabric, read_fault_rows, read_manifest_json

WIDTH = 10.0
WARMUP = 5.0
RECOVERY = 5.0


@dataclass
class Fault:
    link: int
    link_kind: str
    label: str            # 'loss 1%', 'link_down'
    start: float
    end: float


@dataclass
class Window:
    run: str
    start: float
    end: float
    truth: tuple[int, ...] = ()
    label: str = "control"     # the fault's label, or 'control' for a window with no fault
    link_kind: str = ""


@dataclass
class Connection:
    key: str
    born: float
    died: float | None
    times: list[float] = field(default_factory=list)     # snapshot times of its counter rows
    retrans: list[int] = field(default_factory=list)     # cumulative retransmissions at those times

    def at(self, t: float) -> int:
        """Cumulative retransmissions as of time t (0 before its first row)."""
        value = 0
        for when, v in zip(self.times, self.retrans, strict=True):
            if when > t:
                break
            value = v
        return value


@dataclass
class FabricRun:
    path: Path
    links: list[dict]
    conn_paths: dict[str, list[int]]
    probe_paths: list[dict]
    probes: list[list]                 # [sent, path index, ok]
    connections: list[Connection]
    faults: list[Fault]
    first: float
    last: float

    @property
    def name(self) -> str:
        return self.path.name


def load_run(path: Path) -> FabricRun:
    path = Path(path)
    try:
        doc = read_fabric(path)
        manifest = read_manifest_json(path)
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: not a fabric run (fabric.json and the manifest unreadable: {e})") from None
    spec_faults = (manifest.get("spec") or {}).get("faults") or []
    try:
        (first, last), mods, rows = read_connections(path)
        fault_rows = read_fault_rows(path)
    except sqlite3.Error as e:
        raise UserError(f"{path}: run.db unreadable: {e}") from None
    conns: dict[int, Connection] = {}
    for mid, (a, born, died) in mods.items():
        if all(a.get(k) is not None for k in ("src", "sport", "dst", "dport")):
            conns[mid] = Connection(f"{a['src']}:{a['sport']}>{a['dst']}:{a['dport']}", born, died)
    for mid, mono, errors in rows:
        c = conns.get(mid)
        if c is not None:
            c.times.append(mono)
            c.retrans.append(int(errors))
    faults = []
    for kind, target, start, end, index in fault_rows:
        t = json.loads(target or "{}")
        if t.get("link_index") is None:
            continue
        rate = spec_faults[index].get("rate") if index < len(spec_faults) else None
        label = f"{kind} {rate:g}%" if kind == "loss" and rate is not None else kind
        faults.append(Fault(int(t["link_index"]), t.get("link_kind", ""), label, start, end if end is not None else last))
    return FabricRun(path, doc["links"], doc["connections"], doc["probe_paths"], doc["probes"],
                     list(conns.values()), faults, first, last)


def windows(run: FabricRun, width: float = WIDTH, warmup: float = WARMUP, recovery: float = RECOVERY) -> list[Window]:
    out = []
    for f in run.faults:
        t = f.start
        while t + width <= f.end + 1e-6:
            out.append(Window(run.name, t, t + width, (f.link,), f.label, f.link_kind))
            t += width
    t = run.first + warmup
    while t + width <= run.last:
        if not any(t < f.end + recovery and f.start < t + width for f in run.faults):
            out.append(Window(run.name, t, t + width))
        t += width
    return sorted(out, key=lambda w: w.start)


def retransmitting(run: FabricRun, w: Window) -> tuple[list[str], list[str]]:
    """(connections alive in the window, those that retransmitted in it), by key."""
    active, bad = [], []
    for c in run.connections:
        if c.born >= w.end or (c.died is not None and c.died <= w.start):
            continue
        active.append(c.key)
        if c.at(w.end) > c.at(w.start):
            bad.append(c.key)
    return active, bad


def both_ways(conn_paths: dict[str, list[int]]) -> dict[str, list[int]]:
    """Each connection's links in both directions (its data's and its ACKs'), by its key as either
    end recorded it: a link that drops a connection's ACKs stalls its sender as surely."""
    out = {}
    for key, path in conn_paths.items():
        src, dst = key.split(">", 1)
        out[key] = list(dict.fromkeys([*path, *conn_paths.get(f"{dst}>{src}", [])]))
    return out


def probe_counts(run: FabricRun, w: Window) -> tuple[list[list[int]], list[int], list[int]]:
    """Each probe path's links (forward and back) and its probes sent and answered in the window."""
    n = len(run.probe_paths)
    sent, ok = [0] * n, [0] * n
    for t, path, good in run.probes:
        if w.start <= t < w.end and 0 <= path < n:
            sent[path] += 1
            ok[path] += int(good)
    links = [list(p["forward"]) + list(p["reverse"]) for p in run.probe_paths]
    return links, sent, ok

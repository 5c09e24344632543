"""Hand-made service runs (docs/service.md, docs/blackbox.md): a multi-tier service's run directory
with a message trace (`messages`, rundir.traces.MESSAGE_COLUMNS), its true request paths
(`requests`), its fault windows (`faults`) and NeST's counters on every monitored tier host, for
the tests of the black-box comparison (`nestlab compare` and `nestlab report` of service runs).

The message trace and the requests come in as frames (a test makes them with Maketrace:
analysis.paths.maketrace.socket_events and requests_table; rundir imports no analysis), in the
trace's seconds; the run's clock is T0 + those seconds. NeST's side is modelled, not derived from
the trace: every monitored host has an interface, an application with one socket and one connection
to each peer it talks to, with steady counters; in each fault window the application and socket of
the host named by `stalled` (default: the fault's own host; another host, or None, to make NeST
wrong) stop with nothing to wait for, which the rules diagnose STALLED. Modules record their host
in attrs (`host`), as runs monitoring several hosts do.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rundir.handmade import DT, T0, RunBuilder
from rundir.traces import MESSAGE_COLUMNS

MESSAGES_TABLE = ("CREATE TABLE IF NOT EXISTS messages (mono REAL, host TEXT, pid INTEGER, tid INTEGER, "
                  "fd INTEGER, call TEXT, bytes INTEGER, local TEXT, remote TEXT)")
SERVICE = {"kind": "service", "role": "foreground"}
# harness/faults/delay.py's kind as a run's manifest records it (rundir.faultkinds.FaultKindInfo)
DELAY_KIND = {"name": "delay", "colour": "#8c6bb1", "label": "", "order": None, "subgraph": "above",
              "children": None, "stalls": {}, "key": None, "key_host": False}


def _address(host: str, hosts: Sequence[str]) -> str:
    return f"10.0.{list(hosts).index(host) + 1}.1"


def make_service_run(path: Path, events: pd.DataFrame, requests: pd.DataFrame, windows: pd.DataFrame,
                     hosts: Sequence[str], stalled: Callable[[str], str | None] | Mapping[str, str | None]
                     | None = None, experiment: str = "blackbox", messages: bool = True) -> Path:
    """A service run at `path`. events: socket events (mono, host, pid, call, bytes, local, remote; tid
    and fd optional), requests: one row per hop (request, type, tier, host, pid, start, end), windows:
    fault windows (node, start, stop) of kind `delay`, all in the trace's seconds. hosts: the
    monitored hosts (NeST's modules). stalled: per fault node, the host whose application NeST sees
    stalled in its windows (a mapping or a function; default the node itself; None: no host).
    messages=False writes no messages table (an older run)."""
    path = Path(path)
    hosts = list(hosts)
    t_end = max(float(events["mono"].max()) if len(events) else 0.0,
                float(windows["stop"].max()) if len(windows) else 0.0) + 1.0
    n = int(np.ceil(t_end / DT)) + 1
    b = RunBuilder(path, n, workloads=[SERVICE], monitor_if=f"{hosts[0]}-eth0", experiment=experiment)
    peers = _peers(events, hosts)
    blame = stalled if callable(stalled) else (lambda node: (stalled or {}).get(node, node))
    stop_at = {h: np.zeros(n, dtype=bool) for h in hosts}
    apps: dict[str, tuple[int, str]] = {}
    for w in windows.itertuples(index=False):
        who = blame(str(w.node))
        if who in stop_at:
            stop_at[who][int(np.ceil(w.start / DT)):int(np.ceil(w.stop / DT))] = True
    for pid, h in enumerate(hosts, start=100):
        ip = b.module("ipeth", f"ipeth:{h}-eth0", {"host": h, "ifname": f"{h}-eth0"})
        app = b.module("app", f"app:{h}:{pid}", {"pid": pid, "host": h}, name=f"{h} {pid}")
        apps[h] = (app, f"app:{h}:{pid}")
        b.process(pid, 0, f"{h}-daemon", role="server", host=h)
        tm = np.where(stop_at[h], 0.0, 20.0)
        wait = np.where(stop_at[h], 0.0, 30.0)
        b.counters(app, "in", tm, wait=wait)
        b.counters(app, "out", tm, wait=wait)
        for fd, peer in enumerate(peers.get(h, []), start=3):
            inode = pid * 100 + fd
            attrs = {"pid": pid, "fd": fd, "inode": inode, "host": h, "src": _address(h, hosts), "sport": 40000 + fd,
                     "dst": _address(peer, hosts) if peer in hosts else "10.9.9.9", "dport": 80}
            sock = b.module("socket", f"sock:{h}:{pid}:{fd}:{inode}", attrs)
            tcp = b.module("tcp", f"tcp:{h}:{inode}", attrs)
            b.edge(app, sock)
            b.edge(sock, tcp)
            b.edge(tcp, ip)
            for d in ("in", "out"):
                b.counters(sock, d, tm / 4, wait=wait)
                b.counters(tcp, d, 20.0, queued=0)
        b.counters(ip, "in", 45.0)
        b.counters(ip, "out", 45.0)
    b.manifest_extra = {"monitor": {"host": hosts[0], "address": _address(hosts[0], hosts),
                                    "interface": f"{hosts[0]}-eth0"},
                        "fault_kinds": {"delay": DELAY_KIND}}
    for w in windows.itertuples(index=False):   # as delay.py records it: the tier's application, where monitored
        mid, key = apps.get(str(w.node), (None, None))
        target = {"host": str(w.node), **({"module_key": key} if key else {})}
        b.fault("delay", mid, start=float(w.start), end=float(w.stop), target=target)
    b.write()
    _write_trace_tables(path, events, requests, messages)
    return path


def _peers(events: pd.DataFrame, hosts: list[str]) -> dict[str, list[str]]:
    """Per monitored host, the hosts it exchanged messages with (from the endpoints' host names)."""
    out: dict[str, list[str]] = {}
    if events.empty:
        return out
    remote_host = events["remote"].astype(str).str.rsplit(":", n=1).str[0]
    pairs = pd.DataFrame({"h": events["host"].astype(str), "p": remote_host}).drop_duplicates()
    for h, p in pairs.itertuples(index=False):
        if h in hosts and p != h:
            out.setdefault(h, []).append(p)
    return {h: sorted(ps) for h, ps in out.items()}


def _write_trace_tables(path: Path, events: pd.DataFrame, requests: pd.DataFrame, messages: bool) -> None:
    import sqlite3

    conn = sqlite3.connect(path / "run.db")
    try:
        if messages:
            ev = events.copy()
            ev["mono"] = ev["mono"].astype(float) + T0
            for c, default in (("tid", 0), ("fd", 3), ("pid", 1)):
                if c not in ev:
                    ev[c] = default
            conn.execute(MESSAGES_TABLE)
            conn.executemany(f"INSERT INTO messages ({', '.join(MESSAGE_COLUMNS)}) VALUES "
                             f"({', '.join('?' * len(MESSAGE_COLUMNS))})",
                             ev[MESSAGE_COLUMNS].astype(object).itertuples(index=False))
        rq = requests.copy()
        rq["start"] = rq["start"].astype(float) + T0
        rq["end"] = rq["end"].astype(float) + T0
        if "outcome" not in rq:
            rq["outcome"] = "ok"
        cols = ["request", "type", "tier", "host", "pid", "start", "end", "outcome"]
        rq["request"] = rq["request"].astype(str)
        conn.executemany('INSERT INTO requests (request, type, tier, host, pid, start, "end", outcome) '
                         "VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rq[cols].astype(object).itertuples(index=False))
        conn.commit()
    finally:
        conn.close()


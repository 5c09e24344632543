"""The run directory: manifest.json, run.db (SQLite, WAL) and logs/.

This module and harness/manifest.py (the schema of manifest.json) are the single definition of the
on-disk format shared by the harness (writer) and the analysis (reader). docs/run-format.md
documents it for humans; bump FORMAT_VERSION on any change.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# 2: counter rows only when values change (1: a row every snapshot).
# 3: tcp_info (each connection's smoothed RTT) and queue_stats (the shaped links' queues); the
#    manifest's link_model, isolation and health. Version 2 runs read as before, without health data.
# 4: tcp_info gains TCP's own state: backoff, ca_state, retransmits, probes, rto and the times of the
#    last data sent/received and ACK received (issue 13's tcpstate variant). Version 3 reads as before.
FORMAT_VERSION = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS modules (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,              -- app | socket | tcp | ipeth (room for more)
    name TEXT NOT NULL,              -- human label, e.g. 'tcp 10.0.1.1:40000>10.0.2.1:80'
    key TEXT NOT NULL,               -- collector identity, e.g. 'tcp:123456' (inode); reused keys get new ids
    attrs TEXT NOT NULL DEFAULT '{}',-- JSON: pid, fd, inode, src, sport, dst, dport, ifname, cmdline, workload
    born REAL NOT NULL,              -- monotonic seconds of the first snapshot it appeared in
    died REAL                        -- monotonic seconds of the first snapshot it was gone from
);
CREATE TABLE IF NOT EXISTS edges (
    parent INTEGER NOT NULL REFERENCES modules(id),
    child INTEGER NOT NULL REFERENCES modules(id),
    born REAL NOT NULL,
    died REAL,
    PRIMARY KEY (parent, child, born)
);
CREATE TABLE IF NOT EXISTS snapshots (
    seq INTEGER PRIMARY KEY,
    mono REAL NOT NULL,              -- CLOCK_MONOTONIC seconds when the snapshot was taken
    wall REAL NOT NULL               -- time.time() at the same moment
);
-- Raw cumulative values; the analysis computes deltas. NULL = unsupported for that module kind.
-- A row for (seq, module, dir) when the values differ from that module/direction's previous row
-- (and at the module's first snapshot); between rows, and until the module dies, the values are
-- those of the last row (see dense_counter_rows in analysis/stretches.py). A plain rowid table: appends are ~35% cheaper than a keyed
-- table; the (module, seq) index is built when the recording ends (see INDEXES).
CREATE TABLE IF NOT EXISTS counters (
    seq INTEGER NOT NULL,
    module INTEGER NOT NULL,
    dir TEXT NOT NULL CHECK (dir IN ('in', 'out')),
    total_msgs INTEGER,
    wait_ms REAL,
    queued INTEGER,                  -- current value (not cumulative)
    errors INTEGER,
    bytes INTEGER
);
CREATE TABLE IF NOT EXISTS processes (
    pid INTEGER NOT NULL,
    workload INTEGER,                -- index into the spec's workloads (NULL for servers/helpers)
    role TEXT NOT NULL,              -- client | server | collector
    host TEXT NOT NULL,
    cmdline TEXT NOT NULL,
    started REAL NOT NULL,
    ended REAL,
    exit_code INTEGER,
    PRIMARY KEY (pid, started)
);
CREATE TABLE IF NOT EXISTS faults (
    id INTEGER PRIMARY KEY,
    spec_index INTEGER NOT NULL,     -- index into the spec's faults
    kind TEXT NOT NULL,              -- ip_drop | tcp_drop | app_pause
    at_node TEXT NOT NULL,           -- where it was injected (router or host)
    target_module INTEGER,           -- module id (resolved after the run where possible)
    target TEXT NOT NULL,            -- JSON: human description and identifiers (inode, 5-tuple, pid)
    planned_start REAL,              -- schedule, run-relative seconds
    planned_duration REAL,
    start REAL,                      -- monotonic: rule verified in place / signal acknowledged
    end REAL,                        -- monotonic: rule verified gone / resume acknowledged
    rule TEXT NOT NULL               -- the exact iptables rule or signal used
);
CREATE TABLE IF NOT EXISTS events (
    id INTEGER PRIMARY KEY,
    mono REAL NOT NULL,
    kind TEXT NOT NULL,              -- workload_start | workload_end | warning | info | ...
    workload INTEGER,
    detail TEXT NOT NULL DEFAULT ''
);
-- Per TCP module, tcp_info fields beyond the counters, a row when they change (carried forward like
-- counters). Written by the collector.
CREATE TABLE IF NOT EXISTS tcp_info (
    seq INTEGER NOT NULL,
    module INTEGER NOT NULL,
    rtt_us INTEGER,                  -- tcpi_rtt: smoothed round-trip time, microseconds
    rttvar_us INTEGER,               -- tcpi_rttvar
    backoff INTEGER,                 -- tcpi_backoff: RTO doublings (format 4 on)
    ca_state INTEGER,                -- tcpi_ca_state: 0 Open, 1 Disorder, 2 CWR, 3 Recovery, 4 Loss
    retransmits INTEGER,             -- tcpi_retransmits: RTO retransmissions of the head segment in a row
    probes INTEGER,                  -- tcpi_probes: unanswered zero-window probes
    rto_us INTEGER,                  -- tcpi_rto
    data_sent_at REAL,               -- reference-clock time of the last data sent (snapshot - tcpi_last_data_sent)
    data_recv_at REAL,               -- ... of the last data received (tcpi_last_data_recv)
    ack_recv_at REAL                 -- ... of the last ACK received (tcpi_last_ack_recv)
);
-- The queue of each shaped link end (the leaf qdisc under HTB), sampled by the runner about once a
-- second. Counters are cumulative since the qdisc was made; backlog is the current value.
CREATE TABLE IF NOT EXISTS queue_stats (
    mono REAL NOT NULL,              -- reference clock (the monitored host's CLOCK_MONOTONIC)
    node TEXT NOT NULL,
    interface TEXT NOT NULL,
    sent_packets INTEGER,
    sent_bytes INTEGER,
    drops INTEGER,
    overlimits INTEGER,
    requeues INTEGER,
    backlog_packets INTEGER,
    backlog_bytes INTEGER
);
CREATE INDEX IF NOT EXISTS modules_key ON modules (key);
"""

# Built when a recording ends (not maintained on every insert: it would double the collector's
# write cost); readers call ensure_indexes() on runs that ended without it (killed collector).
INDEXES = "CREATE INDEX IF NOT EXISTS counters_module ON counters (module, seq);"

COUNTER_FIELDS = ("total_msgs", "wait_ms", "queued", "errors", "bytes")


def monotonic() -> float:
    """The run clock: CLOCK_MONOTONIC seconds (shared by every Mininet namespace)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def connect(db_path: Path | str, readonly: bool = False) -> sqlite3.Connection:
    """Open run.db. Writers get WAL and a busy timeout (runner and collector write concurrently)."""
    if readonly:
        conn = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True, timeout=10)
    else:
        conn = sqlite3.connect(str(db_path), timeout=10)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def fault_target_key(kind: str, target: dict, monitor: str | None, monitor_if: str | None) -> str | None:
    """The collector key of the module a fault targets, None when the target is not observed (e.g. an
    ip_drop of another host). The fault kind records it in the target (`module_key`); for runs
    recorded before it did, the key is derived as those kinds did: tcp_drop -> its connection,
    app_pause -> the paused process, ip_drop of the monitored host -> the monitored interface."""
    if "module_key" in target:
        return target["module_key"]
    if kind == "tcp_drop" and target.get("inode") is not None:
        return f"tcp:{target['inode']}"
    if kind == "app_pause" and target.get("pid") is not None:
        return f"app:{target['pid']}"
    if kind == "ip_drop" and monitor_if and target.get("host", monitor) == monitor:
        return f"ipeth:{monitor_if}"
    return None


def choose_target(modules, key: str, start: float | None) -> int | None:
    """Among modules (id, key, born), the one a fault at `start` targets: the key itself or a reborn
    key of the same identity ('app:<pid>@<start time>', '...#<n>'), the latest born by `start`."""
    cands = sorted((born, mid) for mid, k, born in modules if k == key or k.startswith((key + "@", key + "#")))
    before = [mid for born, mid in cands if start is None or born <= start]
    return before[-1] if before else (cands[0][1] if cands else None)


def resolve_fault_targets(faults: Iterable[tuple[str, dict, float | None]], modules: Sequence[tuple[int, str, float]],
                          monitor: str | None, monitor_if: str | None,
                          missing_start: float | None = None) -> list[int | None]:
    """The module id each fault (kind, target JSON as a dict, start) targets, or None where it is not
    observed, among modules (id, key, born); the runner and the analysis both resolve with this.
    Without a monitored interface (runs that did not record it) the only ipeth module's is taken, if
    there is one. A fault without a start (never took effect) is looked up at `missing_start`."""
    if not monitor_if:
        ipeths = {k.split(":", 1)[1] for _, k, _ in modules if k.startswith("ipeth:")}
        monitor_if = next(iter(ipeths)) if len(ipeths) == 1 else None
    out: list[int | None] = []
    for kind, target, start in faults:
        key = fault_target_key(kind, target, monitor, monitor_if)
        if start is None or start != start:   # None, or NaN from a data frame
            start = missing_start
        out.append(choose_target(modules, key, start) if key else None)
    return out


def ensure_indexes(conn: sqlite3.Connection) -> None:
    conn.executescript(INDEXES)


def create_db(db_path: Path | str) -> sqlite3.Connection:
    conn = connect(db_path)
    conn.executescript(SCHEMA)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
    conn.commit()
    return conn


@dataclass
class RunDir:
    """Paths of one run directory."""

    path: Path
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def db(self) -> Path:
        return self.path / "run.db"

    @property
    def logs(self) -> Path:
        return self.path / "logs"

    @property
    def manifest_path(self) -> Path:
        return self.path / "manifest.json"

    def write_manifest(self) -> None:
        """Write `manifest` (a dict) as manifest.json, after checking it against the schema
        (harness.manifest.Manifest; ManifestError, one line, when it does not fit: nothing is written)."""
        # Imported here: run.db's functions run on testbed nodes too (harness.agent), where only the
        # standard library is installed; the manifest is written on the runner's machine.
        from harness.manifest import validate_manifest

        validate_manifest(self.manifest, self.manifest_path)
        # Write-then-rename so a crash never leaves a half-written manifest.
        tmp = self.manifest_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(self.manifest, indent=2, sort_keys=False, default=str) + "\n")
        os.replace(tmp, self.manifest_path)

    @classmethod
    def create(cls, results_root: Path, experiment: str, repetition: int) -> RunDir:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        base = Path(results_root) / experiment
        path = base / f"{stamp}-r{repetition}"
        n = 1
        while path.exists():  # two runs in the same second (tests): add a suffix
            n += 1
            path = base / f"{stamp}-{n}-r{repetition}"
        path.mkdir(parents=True)
        (path / "logs").mkdir()
        return cls(path)

    @classmethod
    def open(cls, path: Path | str) -> RunDir:
        path = Path(path)
        manifest = json.loads((path / "manifest.json").read_text())
        return cls(path, manifest)

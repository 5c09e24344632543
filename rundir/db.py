"""run.db: its schema, its format version, and opening it (SQLite, WAL).

Standard library only: the collector and the agent import this on testbed nodes, where nothing else
is installed. docs/run-format.md documents the format for humans; bump FORMAT_VERSION on any change.
"""

from __future__ import annotations

import os
import re
import sqlite3
import time
from pathlib import Path

from rundir.errors import UserError
from rundir.faultkinds import LEGACY

# 2: counter rows only when values change (1: a row every snapshot).
# 3: tcp_info (each connection's smoothed RTT) and queue_stats (the shaped links' queues); the
#    manifest's link_model, isolation and health. Version 2 runs read as before, without health data.
# 4: tcp_info gains TCP's own state: backoff, ca_state, retransmits, probes, rto and the times of the
#    last data sent/received and ACK received (issue 13's tcpstate variant). Version 3 reads as before.
# 5: tcp_info gains rcv_rtt_us (tcpi_rcv_rtt), the receiver's RTT estimate: a pure receiver's
#    tcpi_rtt times only its own few segments (a GET), so health reads receivers' RTT from it; and
#    the probes table: the collector's probes of silent connections' remotes (issue 21). Version 4
#    reads as before: its receivers have no loaded-direction RTT, and it has no probes.
# 6: streams runs (issue 22, docs/streams.md): modules of kind 'sconn' (stream connections), faults
#    of kind throttle and dropper, and the stream_tasks table (the engine's own per-task metrics).
#    Network runs are unchanged; version 5 reads as before.
# 7: the requests table: a service workload's true request paths, one row per hop (issue 33,
#    docs/service.md), and the manifest's `service` (the load generator's summary). Runs without a
#    service workload are unchanged; version 6 reads as before. With `trace: messages` also the
#    messages table (every completed send and receive of the traced processes) and the traced table
#    (each traced process's events recorded and dropped): TRACE_SCHEMA, made by the drainer only, so
#    a run without traces has no messages table.
# 8: tcp_info gains whose turn it is (issue 42, the whoseturn variant): unacked, notsent_bytes and the
#    chrono stats busy_us, rwnd_limited_us, sndbuf_limited_us (TURN_COLUMNS). Version 7 reads as
#    before; its connections' turns are unknown (the variant acts as flowdiagnoser:theta=2 there).
FORMAT_VERSION = 8

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS modules (
    id INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,              -- app | socket | tcp | ipeth; sconn (streams runs)
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
-- those of the last row (see dense_counter_rows in analysis/model/dense.py). A plain rowid table: appends are ~35% cheaper than a keyed
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
    role TEXT NOT NULL,              -- client | server | collector | engine (a streams run's Flink JVMs)
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
    kind TEXT NOT NULL,              -- a fault kind (docs/registries.md: ip_drop, tcp_drop, ..., delay, tier_pause, slow; throttle, dropper)
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
    ack_recv_at REAL,                -- ... of the last ACK received (tcpi_last_ack_recv)
    rcv_rtt_us INTEGER,              -- tcpi_rcv_rtt: the receiver's RTT estimate, 0 until measured (format 5 on)
    unacked INTEGER,                 -- tcpi_unacked: segments sent, not yet acknowledged (format 8 on)
    notsent_bytes INTEGER,           -- tcpi_notsent_bytes: written by the application, not yet sent
    busy_us INTEGER,                 -- tcpi_busy_time: µs with data to send (NULL: a kernel before 4.10)
    rwnd_limited_us INTEGER,         -- tcpi_rwnd_limited: of it, held by the receiver's window
    sndbuf_limited_us INTEGER        -- tcpi_sndbuf_limited: of it, held by the send buffer
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
-- The collector's probes (format 5 on; harness/collector/probe.py, docs/probes.md): when a busy TCP
-- connection makes no progress, a burst of half-open probes (a SYN from a fresh source port, reset
-- by the host when answered) to its remote address and port. A row per probe, written when its
-- outcome is known.
CREATE TABLE IF NOT EXISTS probes (
    id INTEGER PRIMARY KEY,
    burst INTEGER NOT NULL,          -- probes sent together for one silence share it (one outcome)
    module INTEGER NOT NULL,         -- the TCP module whose silence triggered the burst (modules.id)
    remote TEXT NOT NULL,            -- the address and port probed, 'ADDR:PORT' (the connection's remote)
    sport INTEGER,                   -- the probe's own source port (fresh: another 5-tuple, maybe another path)
    kind TEXT NOT NULL,              -- 'syn': a half-open TCP probe (harness/collector/synprobe.py)
    seq INTEGER NOT NULL,            -- the last snapshot taken before it was sent (snapshots.seq)
    sent REAL NOT NULL,              -- reference clock: the SYN sent
    done REAL NOT NULL,              -- reference clock: the outcome known (answer, error or timeout)
    outcome TEXT NOT NULL,           -- answered (SYN-ACK) | refused (RST) | timeout | unreachable | error
    rtt_ms REAL                      -- done - sent for answered and refused, else NULL
);
-- Streams runs (format 6 on, docs/streams.md): the engine's own view of each task (operator) per
-- snapshot, for the engine's back-pressure baseline. Gauges as Flink samples them; acc_* are Flink's
-- cumulative times (NULL where the engine has none); records_* its task counters.
CREATE TABLE IF NOT EXISTS stream_tasks (
    seq INTEGER NOT NULL,            -- snapshots.seq
    operator TEXT NOT NULL,          -- the PE (operator) name of the streams graph
    busy_ms_per_s REAL,
    backpressured_ms_per_s REAL,
    idle_ms_per_s REAL,
    acc_busy_ms REAL,
    acc_backpressured_ms REAL,
    acc_idle_ms REAL,
    records_in INTEGER,
    records_out INTEGER
);
-- A service workload's true request paths (format 7 on, docs/service.md): a row per hop of every
-- request, from the request id each tier logged (harness/service/paths.py).
CREATE TABLE IF NOT EXISTS requests (
    request TEXT NOT NULL,           -- the X-Request-ID the load generator gave it
    type TEXT NOT NULL,              -- the path it took, as the app reported it: hit | miss | write
    tier TEXT NOT NULL,              -- client | web | app | cache | db
    host TEXT NOT NULL,
    pid INTEGER,                     -- the process that served the hop (cache, db: the daemon)
    start REAL NOT NULL,             -- reference clock (the monitored host's CLOCK_MONOTONIC)
    "end" REAL NOT NULL,
    outcome TEXT NOT NULL            -- ok | error
);
CREATE INDEX IF NOT EXISTS modules_key ON modules (key);
"""

# Message traces (format 7, `trace: messages`; docs/run-format.md, docs/service.md): written by the
# drainer (harness/collector/tracedrain.py through rundir.messages) in runs that trace, absent in others.
TRACE_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    mono REAL NOT NULL,              -- the host's CLOCK_MONOTONIC seconds: a receive's return, a send's call
    host TEXT NOT NULL,              -- the host the process runs on (added by the drainer)
    pid INTEGER NOT NULL,
    tid INTEGER NOT NULL,
    fd INTEGER NOT NULL,
    call TEXT NOT NULL,              -- read readv recv recvfrom recvmsg recvmmsg | write writev send sendto sendmsg sendmmsg sendfile
    bytes INTEGER NOT NULL,          -- what the call moved (a receive of 0: end of stream)
    local TEXT NOT NULL,             -- 'ADDR:PORT', '[ADDR6]:PORT', 'unix/<inode>'; '' unknown
    remote TEXT NOT NULL             -- the peer's ('unix/<peer inode>')
);
CREATE TABLE IF NOT EXISTS traced (
    host TEXT NOT NULL,
    pid INTEGER NOT NULL,
    starttime INTEGER NOT NULL,      -- /proc/<pid>/stat field 22 (a reused pid is another process)
    cmdline TEXT NOT NULL,
    ring INTEGER NOT NULL,           -- events its ring holds
    events INTEGER NOT NULL,         -- events recorded in messages
    dropped INTEGER NOT NULL,        -- events dropped: its ring was full when the call returned
    lost INTEGER NOT NULL,           -- events reserved and never written (the process ended in between)
    PRIMARY KEY (host, pid, starttime)
);
"""

# Built when a recording ends (not maintained on every insert: it would double the collector's
# write cost); readers call ensure_indexes() on runs that ended without it (killed collector).
INDEXES = "CREATE INDEX IF NOT EXISTS counters_module ON counters (module, seq);"

COUNTER_FIELDS = ("total_msgs", "wait_ms", "queued", "errors", "bytes")
# tcp_info's TCP state columns, format 4 on (older runs have rtt_us and rttvar_us only).
TCP_STATE_COLUMNS = ("backoff", "ca_state", "retransmits", "probes", "rto_us",
                     "data_sent_at", "data_recv_at", "ack_recv_at")
# tcp_info's whose-turn columns, format 8 on (older runs lack them: NULL, unknown).
TURN_COLUMNS = ("unacked", "notsent_bytes", "busy_us", "rwnd_limited_us", "sndbuf_limited_us")
# The fault kinds of runs recorded before the manifest named its kinds (rundir.faultkinds.LEGACY); a
# reader knows these and those the run's manifest records (`fault_kinds`), and leaves a fault of
# another kind out.
FAULT_KINDS = tuple(LEGACY)
STREAM_TASK_COLUMNS = ["seq", "operator", "busy_ms_per_s", "backpressured_ms_per_s", "idle_ms_per_s",
                       "acc_busy_ms", "acc_backpressured_ms", "acc_idle_ms", "records_in", "records_out"]
# A probe's outcomes (probes.outcome): the first two mean the remote answered over the network.
PROBE_ANSWERED = ("answered", "refused")
PROBE_OUTCOMES = (*PROBE_ANSWERED, "timeout", "unreachable", "error")
PROBE_COLUMNS = ["id", "burst", "module", "remote", "sport", "kind", "seq", "sent", "done", "outcome", "rtt_ms"]
FAULT_COLUMNS = ["id", "spec_index", "kind", "at_node", "target", "target_module", "planned_start",
                 "planned_duration", "start", "end"]
QUEUE_COLUMNS = ["mono", "node", "interface", "sent_packets", "sent_bytes", "drops", "overlimits", "requeues",
                 "backlog_packets", "backlog_bytes"]
REQUEST_COLUMNS = ["request", "type", "tier", "host", "pid", "start", "end", "outcome"]
PROCESS_COLUMNS = ["pid", "workload", "role", "host", "cmdline", "started", "ended", "exit_code"]


def monotonic() -> float:
    """The run clock: CLOCK_MONOTONIC seconds (shared by every Mininet namespace)."""
    return time.clock_gettime(time.CLOCK_MONOTONIC)


TABLES = tuple(re.findall(r"CREATE TABLE IF NOT EXISTS (\w+)", SCHEMA + TRACE_SCHEMA))


def settled(db_path: Path | str) -> bool:
    """Nothing is being written to run.db, nor left to recover: no -wal holding pages (a live run's
    writers commit into it; only a checkpoint that truncates empties it, and they never ask for one)
    and no rollback -journal beside it. A leftover -shm of an earlier reader says nothing."""
    db = str(db_path)
    try:
        if os.stat(db + "-wal").st_size:
            return False
    except OSError:
        pass
    return not os.path.lexists(db + "-journal")


def connect(db_path: Path | str, readonly: bool = False, live: bool = False) -> sqlite3.Connection:
    """Open run.db. Writers get WAL and a busy timeout (runner and collector write concurrently).

    A reader of a settled run.db (`settled`; not `live`) opens it immutable: SQLite then makes no side
    files (-wal, -shm) in the run directory and takes no locks, so reading a run writes nothing into
    it (docs/run-format.md, "Reading writes nothing"). A reader of a run still being written (`live`,
    or side files present) opens it mode=ro, with SQLite's own side files. UserError when one of the
    schema's tables is a view (a crafted run.db: a recursive view would never finish)."""
    if readonly:
        mode = "ro&immutable=1" if not live and settled(db_path) else "ro"
        conn = sqlite3.connect(f"{Path(db_path).absolute().as_uri()}?mode={mode}", uri=True, timeout=10)
        try:
            views = [n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'view'")
                     if str(n).lower() in TABLES]
        except sqlite3.Error:
            views = []   # not a database: the caller's first query says so
        if views:
            conn.close()
            raise UserError(f"{db_path}: {', '.join(views)} {'is a view' if len(views) == 1 else 'are views'}, not "
                            "the table nestlab writes (a crafted run.db); nothing analysed")
    else:
        conn = sqlite3.connect(str(db_path), timeout=10)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
    conn.execute("PRAGMA busy_timeout=10000")
    return conn


def ensure_indexes(conn: sqlite3.Connection) -> None:
    conn.executescript(INDEXES)


def create_db(db_path: Path | str) -> sqlite3.Connection:
    conn = connect(db_path)
    conn.executescript(SCHEMA)
    conn.execute("INSERT OR REPLACE INTO meta VALUES ('format_version', ?)", (str(FORMAT_VERSION),))
    conn.commit()
    return conn




def snapshot_count(db_path: Path | str) -> int:
    """Snapshots recorded so far in the run.db at `db_path` (read-only)."""
    conn = connect(db_path, readonly=True, live=True)
    try:
        return conn.execute("SELECT count(*) FROM snapshots").fetchone()[0]
    finally:
        conn.close()


# The same as a standalone script (`python3 -c CHECKPOINT_SCRIPT DB`), for a testbed node whose copy of
# this package may be gone when `nestlab cleanup` salvages its run.db; mode=rw: never creates a file.
CHECKPOINT_SCRIPT = ("import pathlib, sqlite3, sys; "
                     "c = sqlite3.connect(pathlib.Path(sys.argv[1]).as_uri() + '?mode=rw', uri=True, timeout=10); "
                     "c.execute('PRAGMA wal_checkpoint(TRUNCATE)').fetchall(); c.close()")


def checkpoint(db_path: Path | str) -> None:
    """Fold the WAL into run.db, so that copying run.db alone copies everything (testbed nodes)."""
    conn = sqlite3.connect(str(db_path), timeout=10)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()

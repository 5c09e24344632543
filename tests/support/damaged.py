"""Damaged run directories, made from a good one, for tests/test_damaged_runs.py.

`stored_run()` is a finished run recorded on this machine (results/net_fault/, or any experiment
under results/), None when there is none (CI has no results/); `copy_run(src, dst)` copies one run
directory's manifest and a consistent snapshot of its run.db (SQLite's backup API: WAL pages
included). `synthetic_base(dst)` is the stand-in: tests.support.runs.make_run, with the counts a
finished run's manifest holds.

`DAMAGES` maps a case name to a function that damages a copy in place and returns what the analysis
must say about it (`Damage`): either `fatal` (one line, exit status 2; skipped with a warning in a
set of runs) or the words one of its warnings must contain (and `also`, words of other warnings). Each function picks its victim (a busy module,
a fault with a target, a snapshot in the middle) from the copy itself, so one corpus serves a real
run and the synthetic one.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tests.support.env import REPO
from tests.support.runs import make_run

EXPERIMENTS = ("net_fault", "tcp_fault", "app_fault")   # in order of preference: ip_drop and tcp_drop faults


def stored_run(results: Path = REPO / "results") -> Path | None:
    """A finished run under results/ with faults and counts in its manifest, else None."""
    for exp in EXPERIMENTS:
        for run in sorted((results / exp).glob("*-r*"), reverse=True):
            try:
                m = json.loads((run / "manifest.json").read_text())
            except (OSError, ValueError):
                continue
            if (isinstance(m, dict) and m.get("status") == "complete" and (m.get("counts") or {}).get("faults")
                    and (run / "run.db").is_file()):
                return run
    return None


def copy_run(src: Path, dst: Path) -> Path:
    """manifest.json and a consistent copy of run.db (in WAL mode, as the runner leaves it)."""
    dst.mkdir(parents=True)
    shutil.copy2(src / "manifest.json", dst / "manifest.json")
    source = sqlite3.connect(f"file:{src / 'run.db'}?mode=ro", uri=True)
    target = sqlite3.connect(dst / "run.db")
    try:
        source.backup(target)
        target.execute("PRAGMA journal_mode=WAL")
    finally:
        target.close()
        source.close()
    return dst


def synthetic_base(dst: Path) -> Path:
    """make_run's two-workload run, its manifest completed with the counts the runner writes."""
    path, _, _ = make_run(dst)
    conn = sqlite3.connect(path / "run.db")
    counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("snapshots", "modules", "faults")}
    conn.close()
    m = json.loads((path / "manifest.json").read_text())
    m["counts"] = counts
    (path / "manifest.json").write_text(json.dumps(m, indent=2) + "\n")
    return path


# ----------------------------------------------------------------------------- damages


@dataclass
class Damage:
    """What the analysis must say: `fatal` runs end in one line and exit 2; the others are analysed
    with a warning holding every string of `says`."""

    says: tuple[str, ...]
    fatal: bool = False
    also: tuple[str, ...] = ()   # said too, in other warnings


def _db(run: Path) -> sqlite3.Connection:
    return sqlite3.connect(run / "run.db")


def _busy_series(conn) -> tuple[int, str, list[int]]:
    """(module, dir, seqs of its rows) of the module/direction with the most counter rows."""
    module, d = conn.execute("SELECT module, dir FROM counters GROUP BY module, dir "
                             "ORDER BY count(*) DESC, module LIMIT 1").fetchone()
    seqs = [s for (s,) in conn.execute("SELECT seq FROM counters WHERE module = ? AND dir = ? ORDER BY seq",
                                       (module, d))]
    return module, d, seqs


def _middle_seq(conn) -> int:
    (n,) = conn.execute("SELECT count(*) FROM snapshots").fetchone()
    return conn.execute("SELECT seq FROM snapshots ORDER BY seq LIMIT 1 OFFSET ?", (n // 2,)).fetchone()[0]


def _targeted_fault(conn, kind: str | None = None) -> tuple[int, str, int]:
    """(id, kind, target_module) of the first fault with a start, an end and a target module."""
    sql = ("SELECT id, kind, target_module FROM faults WHERE start IS NOT NULL AND end IS NOT NULL "
           "AND target_module IS NOT NULL" + (" AND kind = ?" if kind else "") + " ORDER BY id LIMIT 1")
    return conn.execute(sql, (kind,) if kind else ()).fetchone()


def _manifest(run: Path) -> dict:
    return json.loads((run / "manifest.json").read_text())


def manifest_not_an_object(run: Path) -> Damage:
    (run / "manifest.json").write_text(json.dumps([_manifest(run)]))
    return Damage(("manifest.json malformed", "the top level: Input should be a valid dictionary"))


def manifest_wrong_types(run: Path) -> Damage:
    m = _manifest(run)
    m["counts"] = {"snapshots": "many"}
    m["spec"] = {**m.get("spec", {}), "workloads": "wget and iperf"}
    (run / "manifest.json").write_text(json.dumps(m))
    return Damage(("manifest.json malformed", "spec.workloads", "workloads and fault plan unknown"))


def manifest_too_deep(run: Path) -> Damage:
    """JSON, but nested deeper than a parser recurses."""
    (run / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    return Damage(("manifest.json unreadable (RecursionError)", "workloads and fault plan unknown"))


def manifest_nan_t0(run: Path) -> Damage:
    """Fits the schema (JSON NaN is a float) but is no time."""
    m = _manifest(run)
    m["t0"] = float("nan")
    (run / "manifest.json").write_text(json.dumps(m))
    return Damage(("manifest.json: t0 nan is not a time",))


def counter_text(run: Path) -> Damage:
    conn = _db(run)
    module, d, seqs = _busy_series(conn)
    seq = seqs[len(seqs) // 2]
    conn.execute("UPDATE counters SET total_msgs = 'lots' WHERE module = ? AND dir = ? AND seq = ?", (module, d, seq))
    conn.commit()
    conn.close()
    return Damage(("counters: 1 row", "'lots'", f"module {module}", f"seq {seq}"))


def counter_text_in_a_target(run: Path) -> Damage:
    """Text in total_msgs of a fault's target, in a row with bytes: the labeller reads those rows
    again (whether the direction carried data), and must leave the row out there too."""
    conn = _db(run)
    _, _, target = _targeted_fault(conn, "tcp_drop") or _targeted_fault(conn)
    (rowid, seq) = conn.execute("SELECT rowid, seq FROM counters WHERE module = ? ORDER BY seq LIMIT 1 OFFSET 3",
                                (target,)).fetchone()
    conn.execute("UPDATE counters SET total_msgs = 'lots', bytes = coalesce(bytes, 4096) WHERE rowid = ?", (rowid,))
    conn.commit()
    conn.close()
    return Damage(("counters: 1 row", "'lots'", f"module {target}", f"seq {seq}"))


def counter_blob_and_inf(run: Path) -> Damage:
    conn = _db(run)
    module, d, seqs = _busy_series(conn)
    conn.execute("UPDATE counters SET wait_ms = X'00ff' WHERE module = ? AND dir = ? AND seq = ?", (module, d, seqs[3]))
    conn.execute("UPDATE counters SET errors = 9e999 WHERE module = ? AND dir = ? AND seq = ?", (module, d, seqs[-3]))
    conn.commit()
    conn.close()
    return Damage(("counters: 2 rows with a value that is not a count", f"seq {seqs[3]}"))


def counter_keys_not_numbers(run: Path) -> Damage:
    """A row whose seq is text (its module and direction are known) and one whose module is text."""
    conn = _db(run)
    module, d, seqs = _busy_series(conn)
    conn.execute("UPDATE counters SET seq = 'late' WHERE module = ? AND dir = ? AND seq = ?", (module, d, seqs[5]))
    seq = seqs[-len(seqs) // 4]
    rowid = conn.execute("SELECT rowid FROM counters WHERE seq = ? AND module != ? ORDER BY rowid LIMIT 1",
                         (seq, module)).fetchone()[0]
    conn.execute("UPDATE counters SET module = 'tcp' WHERE rowid = ?", (rowid,))
    conn.commit()
    conn.close()
    return Damage(("whose seq is not a snapshot number", f"module {module} {d}", "not scored at all"),
                  also=("whose module is not a module id", f"from seq {seq} on"))


def snapshot_row_missing(run: Path) -> Damage:
    conn = _db(run)
    seq = _middle_seq(conn)
    conn.execute("DELETE FROM snapshots WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    return Damage(("rows of snapshots missing from the snapshots table", "carried to the next snapshot"),
                  also=("missing from within the recording",))


def text_in_other_tables(run: Path) -> Damage:
    """Text where the modules, edges, processes, events, faults, meta, tcp_info and queue_stats tables
    hold numbers."""
    conn = _db(run)
    module, _, _ = _busy_series(conn)
    fid, _, _ = _targeted_fault(conn)
    conn.execute("UPDATE modules SET born = 'early' WHERE id = ?", (module,))
    conn.execute("UPDATE edges SET died = 'late' WHERE rowid = (SELECT min(rowid) FROM edges WHERE ? IN (parent, child))",
                 (module,))
    for sql in ("UPDATE processes SET exit_code = 'ok' WHERE rowid = (SELECT min(rowid) FROM processes)",
                "UPDATE meta SET value = 'three' WHERE key = 'format_version'",
                f"UPDATE faults SET target_module = 'x' WHERE id = {fid}",
                "UPDATE tcp_info SET rtt_us = 'fast' WHERE rowid IN (SELECT rowid FROM tcp_info LIMIT 3)",
                "UPDATE queue_stats SET drops = 'some' WHERE rowid IN (SELECT rowid FROM queue_stats LIMIT 2)"):
        conn.execute(sql)
    conn.commit()
    conn.close()
    return Damage((f"module {module}", "born at a time that is not a number", "'early'"),
                  also=("edges: 1 time that is not a number", "processes: 1 value of exit_code",
                        "format_version 'three' is not a number", f"fault {fid}", "target module 'x' is not a module id"))


def no_usable_time(run: Path) -> Damage:
    conn = _db(run)
    conn.execute("UPDATE snapshots SET mono = 'when'")
    conn.commit()
    conn.close()
    return Damage(("no snapshot has a usable time",), fatal=True)


def snapshot_time_text(run: Path) -> Damage:
    conn = _db(run)
    seq = _middle_seq(conn)
    conn.execute("UPDATE snapshots SET mono = 'noon' WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    return Damage(("snapshots:", "'noon'", f"seq {seq}"))


def snapshot_time_backwards(run: Path) -> Damage:
    conn = _db(run)
    seq = _middle_seq(conn)
    conn.execute("UPDATE snapshots SET mono = mono - 5 WHERE seq = ?", (seq,))
    conn.commit()
    conn.close()
    return Damage(("snapshots:", "goes back", f"seq {seq}"))


def fault_kind_unknown(run: Path) -> Damage:
    """A fault of a kind this nestlab does not know (a newer run, or a hand edit): it labels nothing,
    and says so."""
    conn = _db(run)
    fid, kind, _ = _targeted_fault(conn)
    conn.execute("UPDATE faults SET kind = 'meteor_strike' WHERE id = ?", (fid,))
    conn.commit()
    conn.close()
    return Damage((f"fault {fid} (meteor_strike): its kind 'meteor_strike' is not one this nestlab knows",
                   "the fault is left out, and its target and the"))


def fault_target_missing(run: Path) -> Damage:
    conn = _db(run)
    fid, kind, target = _targeted_fault(conn, "tcp_drop") or _targeted_fault(conn)
    conn.execute("UPDATE faults SET target_module = 9999 WHERE id = ?", (fid,))
    conn.commit()
    conn.close()
    return Damage((f"fault {fid} ({kind})", "target module 9999 is not in the modules table",
                   f"resolved from its target: module {target}"))


def fault_target_unresolvable(run: Path) -> Damage:
    conn = _db(run)
    fid, kind, _ = _targeted_fault(conn, "tcp_drop") or _targeted_fault(conn)
    conn.execute("UPDATE faults SET target_module = 9999, target = '{\"description\": \"gone\"}' WHERE id = ?",
                 (fid,))
    conn.commit()
    conn.close()
    return Damage((f"fault {fid} ({kind})", "target module 9999 is not in the modules table", "labels nothing",
                   "no module is scored"))


def fault_ends_before_start(run: Path) -> Damage:
    conn = _db(run)
    fid, kind, _ = _targeted_fault(conn)
    conn.execute("UPDATE faults SET end = start - 1.5 WHERE id = ?", (fid,))
    conn.commit()
    conn.close()
    return Damage((f"fault {fid} ({kind})", "ends", "before it starts", "not scored"))


def module_dies_before_born(run: Path) -> Damage:
    conn = _db(run)
    module, _, _ = _busy_series(conn)
    conn.execute("UPDATE modules SET died = born - 2 WHERE id = ?", (module,))
    conn.commit()
    conn.close()
    return Damage((f"module {module}", "died", "before it was born"))


def wal_lost(run: Path) -> Damage:
    """The last third of the recording was still in run.db-wal when that file was lost: run.db holds
    the snapshots, modules and faults of the first two thirds, the manifest counts them all."""
    conn = _db(run)
    conn.execute("PRAGMA wal_autocheckpoint = 0")
    (n,) = conn.execute("SELECT count(*) FROM snapshots").fetchone()
    cut = conn.execute("SELECT seq, mono FROM snapshots ORDER BY seq LIMIT 1 OFFSET ?", (2 * n // 3,)).fetchone()
    tail = {}
    for table, where in (("snapshots", "seq >= :seq"), ("counters", "seq >= :seq"), ("tcp_info", "seq >= :seq"),
                         ("modules", "born >= :mono"), ("faults", "start >= :mono OR start IS NULL"),
                         ("events", "mono >= :mono"), ("queue_stats", "mono >= :mono")):
        args = {"seq": cut[0], "mono": cut[1]}
        tail[table] = conn.execute(f"SELECT * FROM {table} WHERE {where}", args).fetchall()
        conn.execute(f"DELETE FROM {table} WHERE {where}", args)
    conn.execute("UPDATE modules SET died = NULL WHERE died >= ?", (cut[1],))
    conn.commit()
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # run.db now holds the first two thirds
    for table, rows in tail.items():                  # the rest goes to the WAL only
        if rows:
            marks = ",".join("?" * len(rows[0]))
            conn.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
    conn.commit()
    lost = run.parent / (run.name + ".lost")
    lost.mkdir()
    shutil.copy2(run / "run.db", lost / "run.db")      # the main file while the WAL holds the tail
    conn.close()
    for f in ("run.db", "run.db-wal", "run.db-shm"):
        (run / f).unlink(missing_ok=True)
    shutil.move(lost / "run.db", run / "run.db")
    lost.rmdir()
    return Damage(("run.db holds", "snapshots", "the runner counted at the end", "run.db-wal"))


def db_truncated(run: Path) -> Damage:
    db = run / "run.db"
    size = db.stat().st_size
    with db.open("r+b") as f:
        f.truncate(size // 2)
    return Damage(("run.db", "truncated"), fatal=True)


def db_corrupt(run: Path) -> Damage:
    """Garbage over pages in the middle of run.db (the header intact)."""
    db = run / "run.db"
    size = db.stat().st_size
    page = 4096
    with db.open("r+b") as f:
        for p in range(2, max(3, size // page - 1), 3):
            f.seek(p * page)
            f.write(bytes((p * 37 + k) % 251 for k in range(page)))
    return Damage(("run.db", "damaged"), fatal=True)


def db_not_sqlite(run: Path) -> Damage:
    (run / "run.db").write_bytes(b"this is not a database\n" * 100)
    return Damage(("run.db cannot be read",), fatal=True)


def empty_directory(run: Path) -> Damage:
    shutil.rmtree(run)
    run.mkdir()
    return Damage(("no run",), fatal=True)   # accuracy: "no runs here"; diagnose: "no run.db"


def db_recursive_views(run: Path) -> Damage:
    """The counters and snapshots tables replaced by views that recurse without end: reading them would
    never finish."""
    conn = _db(run)
    conn.executescript("""
        DROP TABLE counters; DROP TABLE snapshots;
        CREATE VIEW snapshots AS WITH RECURSIVE n(seq) AS (SELECT 0 UNION ALL SELECT seq + 1 FROM n)
            SELECT seq, seq * 0.1 AS mono, 0.0 AS wall FROM n;
        CREATE VIEW counters AS WITH RECURSIVE n(seq) AS (SELECT 0 UNION ALL SELECT seq + 1 FROM n)
            SELECT seq, 1 AS module, 'in' AS dir, seq AS total_msgs, NULL AS wait_ms, NULL AS queued,
                   0 AS errors FROM n;""")
    conn.close()
    return Damage(("views, not the table", "crafted run.db"), fatal=True)


# ----------------------------------------------------------------------------- damaged derived copies

def _copies(run: Path, stretches: bool) -> None:
    """The run's own copies, as run-experiment leaves them: the counters' (and the stretches')."""
    from rundir import columnar, copies

    (run / "run.db-wal").unlink(missing_ok=True)
    (run / "run.db-shm").unlink(missing_ok=True)
    assert columnar.write_after_run(run)
    if stretches:
        from analysis.model.stretches import load_stretches

        copies.claim(run)   # as the runner does: its report writes the stretches' copy into the run
        load_stretches(run)
        assert (run / "columnar" / columnar.STRETCHES).is_file()


def _rewrite(path: Path, edit, keep_sum: bool = True) -> None:
    """Rewrite an Arrow copy: `edit(columns, head) -> (columns, head)` on its columns (numpy) and its
    head (JSON); its checksum kept as it was (keep_sum: an edit the checksum catches) or made anew
    (a forged copy: only the checks of what it says catch it)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.ipc as ipc

    from rundir import columnar, copies

    table = ipc.open_file(pa.py_buffer(path.read_bytes())).read_all()
    meta = dict(table.schema.metadata)
    cols = {n: table.column(n).combine_chunks() for n in table.column_names}
    cols, head = edit(cols, json.loads(meta[columnar._KEY]))
    meta[columnar._KEY] = json.dumps(head).encode()
    if not keep_sum:
        plain = [np.asarray(c.flatten() if isinstance(c, pa.FixedSizeListArray) else c) for c in cols.values()]
        meta[columnar._SUM] = copies.digest([meta[columnar._KEY], *plain]).encode()
    out = pa.Table.from_arrays(list(cols.values()), names=list(cols), metadata=meta)
    with path.open("wb") as f, ipc.new_file(f, out.schema) as w:
        w.write_table(out)


def _zero_total_msgs(cols, head):
    import numpy as np
    import pyarrow as pa

    vals = np.asarray(cols["vals"].flatten()).reshape(-1, 4).copy()
    vals[:, 0] = 0
    cols["vals"] = pa.FixedSizeListArray.from_arrays(pa.array(vals.reshape(-1)), 4)
    return cols, head


def copy_counters_zeroed(run: Path) -> Damage:
    """The counters copy's total_msgs zeroed under its valid key (its checksum left as it was)."""
    _copies(run, stretches=False)
    _rewrite(run / "columnar" / "counters.arrow", _zero_total_msgs)
    return Damage(("counters.arrow", "does not match its checksum", "read from run.db"))


def copy_stretch_bounds_shifted(run: Path) -> Damage:
    """Two stretch bounds of the stretches copy shifted under its valid key."""
    def shift(cols, head):
        b = head["meta"]["bounds"]
        b[0][0] += 1    # the first stretch starts a snapshot later, the last ends one earlier
        b[-1][1] -= 1
        return cols, head
    _copies(run, stretches=True)
    _rewrite(run / "columnar" / "stretches.arrow", shift)
    return Damage(("stretches.arrow", "does not match its checksum", "read from run.db"))


def copy_stretch_ids_forged(run: Path) -> Damage:
    """A stretches copy whose members are ids the run does not have, its checksum made anew."""
    def forge(cols, head):
        head["meta"]["members"] = [m + 10**6 for m in head["meta"]["members"]]
        return cols, head
    _copies(run, stretches=True)
    _rewrite(run / "columnar" / "stretches.arrow", forge, keep_sum=False)
    return Damage(("stretches.arrow", "not a module of the run", "made again from run.db"))


def lengthen_batch(path: Path, rows: int) -> None:
    """Make the Arrow IPC file's record batch claim `rows` rows more than its buffers hold (its
    metadata's length and field-node lengths patched in place): a reader that does not validate reads
    past the buffers (garbage rows, or SIGSEGV)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    data = bytearray(path.read_bytes())
    n = ipc.open_file(pa.py_buffer(bytes(data))).read_all().num_rows
    at = 8                                     # after the magic: the schema message, then the batch's
    for _ in range(2):
        assert data[at:at + 4] == b"\xff\xff\xff\xff"
        size = int.from_bytes(data[at + 4:at + 8], "little")
        start, at = at + 8, at + 8 + size
    meta = bytes(data[start:at])
    # The field nodes (length, null count 0) of the rows and of the fixed-size lists' values, then the
    # batch's own length: the first other place the row count is written.
    for count, more in ((n, rows), (4 * n, 4 * rows)):
        meta = meta.replace(count.to_bytes(8, "little") + bytes(8), (count + more).to_bytes(8, "little") + bytes(8))
    i = meta.find(n.to_bytes(8, "little"))
    assert i >= 0
    meta = meta[:i] + (n + rows).to_bytes(8, "little") + meta[i + 8:]
    data[start:at] = meta
    path.write_bytes(bytes(data))


def copy_counters_batch_too_long(run: Path) -> Damage:
    """The counters copy's record batch says 300 rows more than its buffers hold."""
    _copies(run, stretches=False)
    lengthen_batch(run / "columnar" / "counters.arrow", 300)
    return Damage(("counters.arrow", "not a valid Arrow table", "read from run.db"))


def copy_counters_batch_far_too_long(run: Path) -> Damage:
    """The counters copy's record batch says 5 M rows more than its buffers hold (read unchecked: SIGSEGV)."""
    _copies(run, stretches=False)
    lengthen_batch(run / "columnar" / "counters.arrow", 5_000_000)
    return Damage(("counters.arrow", "not a valid Arrow table", "read from run.db"))


DAMAGES: dict[str, Callable[[Path], Damage]] = {f.__name__: f for f in (
    copy_counters_zeroed, copy_stretch_bounds_shifted, copy_stretch_ids_forged, copy_counters_batch_too_long,
    copy_counters_batch_far_too_long, db_recursive_views,
    manifest_not_an_object, manifest_wrong_types, manifest_too_deep, manifest_nan_t0, counter_text, counter_blob_and_inf,
    counter_keys_not_numbers, snapshot_time_text, snapshot_time_backwards, snapshot_row_missing,
    text_in_other_tables, counter_text_in_a_target, fault_kind_unknown, fault_target_missing, fault_target_unresolvable, fault_ends_before_start,
    module_dies_before_born, wal_lost, db_truncated, db_corrupt, db_not_sqlite, no_usable_time, empty_directory)}
FATAL = tuple(name for name in DAMAGES if name.startswith(("db_", "empty_", "no_")))
COPIES = tuple(name for name in DAMAGES if name.startswith("copy_"))   # run.db sound, its derived copies not

"""Reading a damaged run.db: values that are not what the schema says, times that go back, a file
cut short. Every check here says what it found in one line (a warning) and what it left out; what
cannot be read at all is a rundir.errors.UserError. docs/analysis.md ("Reading awkward runs").

SQLite stores any value in any column, so a damaged or hand-edited run.db can hold text where a
number belongs. The readers here fetch every table a reader of a run needs (the
value checks that need no SQL are in rundir.repair):

- `read_snapshots`: a snapshot whose time is not a number, or is not after every earlier snapshot's
  (the clock went back), has no usable interval; it and the snapshot after it (whose interval starts
  there) are *unscored*. Their times are replaced by the last good time, so times never decrease.
- `read_modules`: a `born` that is not a number is taken from the module's first counters row; a
  `died` that is not a number, or comes before `born`, is unknown (the module's life ends after its
  last counters row: `unknown_death`).
- `read_edges`: an edge whose times are not numbers, or that ends before it begins, is left out.
- `numeric_frame`: rows of other tables (processes, events, tcp_info, queue_stats) whose numeric
  columns hold something else are left out.
- `read_probes` / `clean_probes`: a probe whose burst, module, seq, sent or done is not a number, whose
  done comes before its sent, whose remote is not text or whose outcome is not one of PROBE_OUTCOMES
  is left out; a sport or rtt_ms that is not a number is unknown.

`run_db` opens a run directory's run.db read-only, every failure one line; `check_file` finds a run.db shorter than its header says (a truncated copy); `counts_warning`
compares what run.db holds with the manifest's counts (a lost run.db-wal: the last snapshots were
never written to run.db).
"""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rundir.db import (
    FAULT_COLUMNS,
    PROBE_COLUMNS,
    PROBE_OUTCOMES,
    PROCESS_COLUMNS,
    QUEUE_COLUMNS,
    TCP_STATE_COLUMNS,
    connect,
)
from rundir.errors import UserError
from rundir.repair import is_number, plural, shown


def db_error(path: Path, e: Exception) -> UserError:
    """One line for an SQLite error while reading run.db."""
    text = str(e)
    damaged = "malformed" in text or "corrupt" in text
    more = " (the file is damaged: cut short or overwritten); nothing analysed" if damaged else ""
    return UserError(f"{path}: run.db cannot be read: {text}{more}")


@contextmanager
def run_db(path: Path) -> Iterator[sqlite3.Connection]:
    """A read-only connection to the run directory `path`'s run.db, closed on leaving; no run.db, one
    cut short (check_file) and any SQLite error inside the block are each one UserError line."""
    db = path / "run.db"
    if not db.is_file():
        raise UserError(f"{path}: no run.db (the run never started recording, or this is not a run directory)")
    check_file(db)
    try:
        conn = connect(db, readonly=True)
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    try:
        yield conn
    except sqlite3.Error as e:
        raise db_error(path, e) from None
    finally:
        conn.close()


def check_file(db: Path) -> None:
    """UserError when run.db is shorter than the size its header records (a copy cut short)."""
    try:
        with db.open("rb") as f:
            head = f.read(100)
        size = db.stat().st_size
    except OSError as e:
        raise UserError(f"{db.parent}: run.db cannot be read: {e.strerror or e}") from None
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return   # empty (a database with no tables) or not SQLite: sqlite3 says which
    page = int.from_bytes(head[16:18], "big")
    page = 65536 if page == 1 else page
    pages = int.from_bytes(head[28:32], "big")
    valid = head[24:28] == head[92:96] and pages > 0   # the header's size is valid (SQLite file format 1.3)
    if valid and size < page * pages:
        raise UserError(f"{db.parent}: run.db is truncated: {size} bytes of the {page * pages} its header "
                        "records (a copy cut short?); nothing analysed")


def counts_warning(conn: sqlite3.Connection, counts: Any) -> str | None:
    """A warning when run.db holds fewer snapshots, modules or faults than the manifest counts: the
    tail of the recording lost (a lost run.db-wal), or snapshots missing from within (gaps in seq)."""
    if counts is None:
        return None
    short = []
    for table in ("snapshots", "modules", "faults"):
        want = getattr(counts, table, None)
        if not is_number(want):
            continue
        try:
            (have,) = conn.execute(f"SELECT count(*) FROM {table}").fetchone()
        except sqlite3.OperationalError:
            continue
        if have < want:
            short.append((table, have, int(want)))
    if not short:
        return None
    parts = [f"{have} of the {want} {table}" for table, have, want in short]
    what = parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + f" and {parts[-1]}"
    why = ("the rest of the recording was lost (a run.db-wal file that was not copied, or was deleted?); "
           "analysing what run.db holds")
    if short[0][0] == "snapshots":
        (last,) = conn.execute("SELECT max(seq) FROM snapshots WHERE typeof(seq) = 'integer'").fetchone()
        gaps = (last + 1 - short[0][1]) if isinstance(last, int) else 0
        if gaps > 0:
            why = (f"{gaps} missing from within the recording (gaps in seq: rows deleted?)"
                   + (f", the last {short[0][2] - last - 1} lost after it (a run.db-wal file that was not "
                      "copied, or was deleted?)" if short[0][2] > last + 1 else "") + "; analysing what run.db holds")
    return f"run.db holds {what} the runner counted at the end (counts): {why}"


# ----------------------------------------------------------------------------- snapshots


def read_snapshots(conn: sqlite3.Connection, where: Path | str = "run.db") -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                                  list[str]]:
    """(seqs, times, unscored, warnings): every snapshot by seq, its time (made non-decreasing, see the
    module docstring) and whether it is left out of the scores."""
    rows = conn.execute("SELECT seq, mono FROM snapshots ORDER BY seq").fetchall()
    seqs = np.array([r[0] for r in rows], dtype=np.int64)
    try:
        mono = np.array([r[1] for r in rows], dtype=np.float64)
        raw = None
    except (TypeError, ValueError):
        raw = [r[1] for r in rows]
        mono = np.array([float(v) if is_number(v) else np.nan for v in raw], dtype=np.float64)
    warnings: list[str] = []
    ok = np.isfinite(mono)
    if len(mono) and not ok.any():
        raise UserError(f"{where}: no snapshot has a usable time (snapshots.mono holds no numbers); nothing to "
                        "analyse")
    before = np.maximum.accumulate(np.where(ok, mono, -np.inf))
    before = np.concatenate([[-np.inf], before[:-1]]) if len(before) else before
    back = ok & (mono <= before)
    bad = ~ok | back
    if (~ok).any():
        i = np.flatnonzero(~ok)
        value = raw[i[0]] if raw is not None else mono[i[0]]
        warnings.append(f"snapshots: {plural(len(i), 'time')} that {'is' if len(i) == 1 else 'are'} not a number "
                        f"(seq {seqs[i[0]]}: {shown(value)}){_more(seqs[i])}; "
                        + ("that snapshot and the next are" if len(i) == 1 else "those snapshots and the next of "
                           "each are") + " not scored")
    if back.any():
        i = np.flatnonzero(back)
        warnings.append(f"snapshots: the time goes back at {plural(len(i), 'snapshot')} (seq {seqs[i[0]]}: "
                        f"{mono[i[0]]:.3f}, after {before[i[0]]:.3f}){_more(seqs[i])}; "
                        + ("that snapshot and the next are" if len(i) == 1 else "those snapshots and the next of "
                           "each are") + " not scored")
    if bad.any():
        good = np.where(bad, -np.inf, mono)
        fixed = np.maximum.accumulate(good)
        first = mono[np.flatnonzero(~bad)[0]]
        mono = np.where(np.isfinite(fixed), fixed, first)
    unscored = bad.copy()
    unscored[1:] |= bad[:-1]
    return seqs, mono, unscored, warnings


def _more(seqs: np.ndarray) -> str:
    return f", through seq {seqs[-1]}" if len(seqs) > 1 else ""


# ----------------------------------------------------------------------------- modules and edges


def read_modules(conn: sqlite3.Connection) -> tuple[list[tuple], set[int], list[str]]:
    """(rows, unknown_death, warnings): modules as (id, kind, name, key, attrs, born, died) with born
    a float or None (not a number: the reader takes the first counters row) and died a float or None
    (alive at the end); `unknown_death`: ids whose died was not a number or came before born."""
    rows, unknown, warnings = [], set(), []
    bad_born, bad_died, early = [], [], []
    for mid, kind, name, key, attrs, born, died in conn.execute(
            "SELECT id, kind, name, key, attrs, born, died FROM modules ORDER BY id"):
        if not is_number(born):
            bad_born.append((mid, key, born))
            born = None
        if died is not None and not is_number(died):
            bad_died.append((mid, key, died))
            unknown.add(mid)
            died = None
        elif died is not None and born is not None and died < born:
            early.append((mid, key, born, died))
            unknown.add(mid)
            died = None
        rows.append((int(mid), str(kind), str(name), str(key), attrs, None if born is None else float(born),
                     None if died is None else float(died)))
    if bad_born:
        mid, key, v = bad_born[0]
        warnings.append(f"modules: {plural(len(bad_born), 'module')} born at a time that is not a number "
                        f"(module {mid} ({key}): {shown(v)}); taken as born at its first counters row")
    for what, items in (("died at a time that is not a number", bad_died), ("died before it was born", early)):
        if not items:
            continue
        mid, key, *vals = items[0]
        detail = shown(vals[0]) if len(vals) == 1 else f"died {vals[1]:.3f}, born {vals[0]:.3f}"
        others = f" ({len(items) - 1} more modules alike)" if len(items) > 1 else ""
        warnings.append(f"module {mid} ({key}) {what} ({detail}){others}: its death time is ignored; it is taken "
                        "as alive until its last counters row, and not scored after it")
    return rows, unknown, warnings


def read_edges(conn: sqlite3.Connection, modules: list[tuple] = ()) -> tuple[list[tuple], list[str]]:
    """(rows, warnings): edges (parent, child, born, died). An edge between ids that are not integers
    is left out. A born that is not a number is taken as the later birth of its two modules; a died
    that is not a number, or before born, as unknown (the edge lasts while both modules are there,
    as one alive at the end does). One warning for each."""
    born_of = {m[0]: m[5] for m in modules}
    rows, dropped, fixed = [], [], []
    for parent, child, born, died in conn.execute("SELECT parent, child, born, died FROM edges"):
        if not (isinstance(parent, int) and isinstance(child, int)):
            dropped.append((parent, child))
            continue
        if not is_number(born):
            fixed.append((parent, child, "born", born))
            born = max((b for b in (born_of.get(parent), born_of.get(child)) if b is not None), default=-math.inf)
        if died is not None and not (is_number(died) and died >= born):
            fixed.append((parent, child, "died", died))
            died = None
        rows.append((parent, child, float(born), None if died is None else float(died)))
    warnings = []
    if dropped:
        p, c = dropped[0]
        warnings.append(f"edges: {plural(len(dropped), 'edge')} between ids that are not module ids (first: "
                        f"{shown(p)} -> {shown(c)}); left out of the graph")
    if fixed:
        p, c, what, v = fixed[0]
        warnings.append(f"edges: {plural(len(fixed), 'time')} that {'is' if len(fixed) == 1 else 'are'} not a number "
                        f"or ends before the edge begins (first: {p} -> {c} {what} {shown(v)}); such an edge is "
                        "taken as lasting while both its modules are there")
    return rows, warnings


# ----------------------------------------------------------------------------- other tables


def numeric_frame(conn: sqlite3.Connection, table: str, sql: str, columns: list[str], numeric: tuple[str, ...],
                  warnings: list[str], optional: tuple[str, ...] = ()) -> pd.DataFrame:
    """The rows of `sql` whose `numeric` columns hold numbers or NULL; the others are left out, and in
    the `optional` ones (also numeric) a value that is not a number is taken as NULL (unknown). One
    warning each. A table that does not exist gives no rows."""
    try:
        rows = conn.execute(sql).fetchall()
    except sqlite3.OperationalError:
        rows = []
    frame = pd.DataFrame(rows, columns=columns)
    bad = np.zeros(len(frame), dtype=bool)
    first: dict[bool, tuple] = {}
    for c in (*numeric, *optional):
        values = frame[c].to_numpy()
        if values.dtype == object:
            wrong = np.array([v is not None and not is_number(v) and not (isinstance(v, float) and v != v)
                              for v in values], dtype=bool)
        elif np.issubdtype(values.dtype, np.floating):
            wrong = np.isinf(values)
        else:
            continue
        if not wrong.any():
            continue
        first.setdefault(c in optional, (c, values[np.flatnonzero(wrong)[0]], int(wrong.sum())))
        if c in optional:
            frame[c] = pd.to_numeric(frame[c].where(~wrong, None), errors="coerce")
        else:
            bad |= wrong
    if True in first:
        c, v, n = first[True]
        warnings.append(f"{table}: {plural(n, 'value')} of {c} that {'is' if n == 1 else 'are'} not a number "
                        f"(first: {shown(v)}); taken as unknown")
    if bad.any():
        c, v, _ = first[False]
        warnings.append(f"{table}: {plural(int(bad.sum()), 'row')} with {c} {shown(v)} or another value that is not "
                        "a number; left out")
        frame = frame[~bad].reset_index(drop=True)
        for c in numeric:
            frame[c] = pd.to_numeric(frame[c])
    return frame


# ----------------------------------------------------------------------------- counters


_NULL = -1e308  # stands for SQL NULL while reading (counters are never negative)
_VALUES = ("total_msgs", "wait_ms", "queued", "errors")
_SEQ_OK = "(typeof(seq) = 'integer' AND seq >= 0)"
_MOD_OK = "(typeof(module) = 'integer' AND module >= 0)"
_KEYS_OK = f"{_SEQ_OK} AND {_MOD_OK}"


@dataclass
class Unplaced:
    """What counters rows that cannot be placed leave unknown: a row is written only when values
    change, so a missing one makes the values carried after it wrong until its series' next row."""

    series: set[tuple[int, bool]] = field(default_factory=set)  # (module, out): a row of unknown seq
    from_seq: int | None = None   # a row of unknown module at this seq: every module from there on


def read_counters(conn, warnings: list[str] | None = None) -> tuple[dict[str, np.ndarray], Unplaced]:
    """All counter rows as numeric arrays plus supported flags (NULL = unsupported), and `bad`: rows
    holding a value that is no count (text, a blob, an infinite number; docs/analysis.md).
    Rows whose seq or module is not a non-negative integer cannot be placed: they are left out, and
    what they leave unknown is returned (Unplaced) for the reader to leave out of the scores.

    Row fetching dominates (about 2 us a row), so seq, module and direction travel packed in one
    integer (exact in a float64) and NULLs as a sentinel: five columns instead of eleven. A damaged
    table (found by the extremes SQLite orders text and blobs after numbers) is read the careful way.
    """
    warnings = warnings if warnings is not None else []
    hi_mod, hi_seq, lo_mod, lo_seq = conn.execute(
        "SELECT max(module), max(seq), min(module), min(seq) FROM counters").fetchone()
    where, unplaced = "", Unplaced()
    if any(not isinstance(v, int | None) for v in (hi_mod, hi_seq, lo_mod, lo_seq)) or \
            (lo_mod is not None and lo_mod < 0) or (lo_seq is not None and lo_seq < 0):
        where = f" WHERE {_KEYS_OK}"
        unplaced = _unplaced(conn, warnings)
        hi_mod, hi_seq = conn.execute(f"SELECT max(module), max(seq) FROM counters{where}").fetchone()
    bits = max(1, int(hi_mod or 0).bit_length()) + 1
    if int(hi_seq or 0).bit_length() + bits > 52:  # pragma: no cover - absurdly long runs
        raise UserError("run.db: too many snapshots or modules to read")
    key = f"(seq << {bits}) | (module << 1) | (dir = 'out')"
    plain = ", ".join(f"coalesce({c}, {_NULL})" for c in _VALUES)
    # The careful way: anything that is not a number becomes +inf (SQLite's 9e999), a bad value below.
    careful = ", ".join(f"CASE WHEN {c} IS NULL THEN {_NULL} WHEN typeof({c}) IN ('integer', 'real') THEN {c} "
                        "ELSE 9e999 END" for c in _VALUES)
    try:
        a = _fetch(conn, f"SELECT {key}, {plain} FROM counters{where}")
    except (TypeError, ValueError):   # text or a blob in a value column
        a = _fetch(conn, f"SELECT {key}, {careful} FROM counters{where}")
    key = a[:, 0].astype(np.int64)
    has = a[:, 1:] > _NULL / 2
    bad_cell = has & ~np.isfinite(a[:, 1:])   # a negative value is a decrease (thesis 3.4), not bad
    has &= ~bad_cell
    bad = bad_cell.any(1)
    out = {"seq": key >> bits, "module": (key >> 1) & ((1 << (bits - 1)) - 1), "out": (key & 1).astype(bool),
           "vals": np.where(has, a[:, 1:], 0.0), "has": has, "bad": bad}
    if bad.any():
        warnings.append(_bad_rows_warning(conn, int(bad.sum()), where))
    return out, unplaced


def _unplaced(conn, warnings: list[str]) -> Unplaced:
    (neither,) = conn.execute(f"SELECT count(*) FROM counters WHERE NOT {_SEQ_OK} AND NOT {_MOD_OK}").fetchone()
    if neither:
        raise UserError(f"counters: {plural(neither, 'row')} with neither a seq nor a module that is a number: "
                        "no module's counters can be trusted; nothing analysed")
    series = {(m, bool(o)) for m, o in conn.execute(
        f"SELECT DISTINCT module, dir = 'out' FROM counters WHERE NOT {_SEQ_OK} AND {_MOD_OK}")}
    (n_seq,) = conn.execute(f"SELECT count(*) FROM counters WHERE NOT {_SEQ_OK}").fetchone()
    from_seq, n_mod = conn.execute(f"SELECT min(seq), count(*) FROM counters WHERE NOT {_MOD_OK}").fetchone()
    if n_seq:
        shown_series = ", ".join(f"{m} {'out' if o else 'in'}" for m, o in sorted(series)[:5])
        warnings.append(f"counters: {plural(n_seq, 'row')} whose seq is not a snapshot number (module "
                        f"{shown_series}{' ...' if len(series) > 5 else ''}); left out, and "
                        f"{'that module and direction is' if len(series) == 1 else 'those are'} not scored at all "
                        "(the values carried after such a row are unknown)")
    if n_mod:
        warnings.append(f"counters: {plural(n_mod, 'row')} whose module is not a module id (first at seq "
                        f"{from_seq}); left out, and no module is scored from seq {from_seq} on (whose values "
                        "it was is unknown)")
    return Unplaced(series, from_seq if n_mod else None)


def _fetch(conn, sql: str) -> np.ndarray:
    cur = conn.execute(sql)
    chunks = []
    while True:
        rows = cur.fetchmany(200_000)
        if not rows:
            break
        chunks.append(np.array(rows, dtype=np.float64))
    return np.concatenate(chunks) if chunks else np.zeros((0, 5))


def _bad_rows_warning(conn, n: int, where: str) -> str:
    wrong = " OR ".join(f"({c} IS NOT NULL AND (typeof({c}) NOT IN ('integer', 'real') OR abs({c}) > 1e308))"
                        for c in _VALUES)
    first = conn.execute(f"SELECT seq, module, dir, {', '.join(_VALUES)} FROM counters "
                         f"{where + ' AND' if where else 'WHERE'} ({wrong}) ORDER BY seq LIMIT 1").fetchone()
    detail = ""
    if first is not None:
        seq, module, d, *vals = first
        col, v = next(((c, v) for c, v in zip(_VALUES, vals, strict=True)
                       if v is not None and (not isinstance(v, int | float) or abs(v) > 1e308)),
                      (_VALUES[0], vals[0]))
        detail = f" (first: {col} {shown(v)} at seq {seq}, module {module} {d})"
    return (f"counters: {n} row{'s' if n != 1 else ''} with a value that is not a count{detail}; that module and "
            "direction is not scored there, nor at the next row (its delta would span the bad value)")




# ----------------------------------------------------------------------------- the other tables


def tables(conn: sqlite3.Connection) -> set[str]:
    """The tables run.db holds."""
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def has_rows(conn: sqlite3.Connection, table: str) -> bool:
    """Whether run.db's `table` (one of tables()) holds a row."""
    if table not in tables(conn):
        return False
    return conn.execute(f'SELECT 1 FROM "{table}" LIMIT 1').fetchone() is not None


def request_hops(conn: sqlite3.Connection):
    """request, tier, host, start, end of run.db's requests table (a DataFrame; the caller checks the
    table is there)."""
    import pandas as pd

    return pd.read_sql_query('SELECT request, tier, host, start, "end" FROM requests', conn)


def turn_rows(conn: sqlite3.Connection) -> list[tuple] | None:
    """(seq, module, unacked, notsent_bytes) rows of run.db's tcp_info with either field; None when the
    table has no such columns (format <= 7)."""
    have = {r[1] for r in conn.execute("PRAGMA table_info(tcp_info)")}
    if not {"unacked", "notsent_bytes"} <= have:
        return None
    return conn.execute("SELECT seq, module, unacked, notsent_bytes FROM tcp_info "
                        "WHERE unacked IS NOT NULL OR notsent_bytes IS NOT NULL").fetchall()


def meta_value(conn: sqlite3.Connection, key: str) -> tuple | None:
    """(value,) of a key of run.db's meta table, as stored; None when the key is not there."""
    return conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()


def has_state_columns(conn: sqlite3.Connection) -> bool:
    """run.db's tcp_info table has the format-4 state columns."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(tcp_info)")}
    return set(TCP_STATE_COLUMNS) <= have


def read_tcp_state(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame | None:
    """The tcp_info state rows (seq, module, *TCP_STATE_COLUMNS), or None when the run does not record
    them (format <= 3). Rows whose seq or module is not a number are left out and a field that is not
    a number is unknown (numeric_frame, one warning each)."""
    if not has_state_columns(conn):
        return None
    cols = ["seq", "module", *TCP_STATE_COLUMNS]
    return numeric_frame(conn, "tcp_info", f"SELECT {', '.join(cols)} FROM tcp_info", cols,
                         ("seq", "module"), warnings, optional=TCP_STATE_COLUMNS)


def probe_columns_missing(conn: sqlite3.Connection) -> list[str] | None:
    """None when run.db has no probes table (a run recorded before format 5); else the columns of
    PROBE_COLUMNS it lacks (none on a sound run.db)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(probes)")}
    return None if not have else [c for c in PROBE_COLUMNS if c not in have]


def read_probes(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    """The probes table (PROBE_COLUMNS, by id) with its damaged rows left out (clean_probes); no rows on a
    run recorded before format 5, or when the table lacks a column (a warning)."""
    missing = probe_columns_missing(conn)
    if missing:
        warnings.append(f"probes: the table has no column {', '.join(missing)}; no probe is read")
    if missing is None or missing:
        return clean_probes([], warnings)
    rows = conn.execute(f"SELECT {', '.join(PROBE_COLUMNS)} FROM probes ORDER BY id").fetchall()
    return clean_probes(rows, warnings)


_PROBE_NEEDED = ("burst", "module", "seq", "sent", "done")
_PROBE_OPTIONAL = ("sport", "rtt_ms")


def clean_probes(rows: list[tuple], warnings: list[str]) -> pd.DataFrame:
    """Probe rows (PROBE_COLUMNS' values) as a frame, the damaged ones left out, one warning per kind of
    damage: a burst, module, seq, sent or done that is not a number, a remote that is not text (or is
    empty), an outcome not in PROBE_OUTCOMES, a done before its sent. A sport or rtt_ms that is not a
    number is taken as unknown (NaN). Row by row, so a live reader may clean its new rows alone."""
    at = {c: i for i, c in enumerate(PROBE_COLUMNS)}
    keep, bad, unknown = [], {}, {}
    for row in rows:
        v = {c: row[i] for c, i in at.items()}
        wrong = next((c for c in _PROBE_NEEDED if not is_number(v[c])), None)
        if wrong is not None:
            what = f"a {wrong} that is not a number ({shown(v[wrong])})"
        elif not (isinstance(v["remote"], str) and v["remote"]):
            what = f"a remote that is not an address ({shown(v['remote'])})"
        elif v["outcome"] not in PROBE_OUTCOMES:
            what = f"an outcome that is not one of {', '.join(PROBE_OUTCOMES)} ({shown(v['outcome'])})"
        elif v["done"] < v["sent"]:
            what = f"its outcome before it was sent (done {v['done']:.3f}, sent {v['sent']:.3f})"
        else:
            row = list(row)
            for c in _PROBE_OPTIONAL:
                if row[at[c]] is not None and not is_number(row[at[c]]):
                    unknown.setdefault(c, [0, row[at[c]]])[0] += 1
                    row[at[c]] = None
            keep.append(row)
            continue
        kind = what.split(" (")[0]
        bad.setdefault(kind, [0, what, v["id"]])[0] += 1
    for n, what, pid in bad.values():
        warnings.append(f"probes: {plural(n, 'row')} with {what.split(' (')[0]} (first: id {shown(pid)}, "
                        f"{what.split(' (', 1)[1][:-1]}); left out")
    for c, (n, first) in unknown.items():
        warnings.append(f"probes: {plural(n, 'value')} of {c} that {'is' if n == 1 else 'are'} not a number "
                        f"(first: {shown(first)}); taken as unknown")
    frame = pd.DataFrame(keep, columns=PROBE_COLUMNS)
    for c in (*_PROBE_NEEDED, *_PROBE_OPTIONAL):
        frame[c] = pd.to_numeric(frame[c]).astype(float)
    frame["remote"] = frame["remote"].astype(object)
    return frame


def read_tcp_info(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    """Every tcp_info row: seq, module, rtt_us, rttvar_us, format 4 on the state columns and, format 5
    on, rcv_rtt_us (a frame without that column: a run recorded before it)."""
    have = {row[1] for row in conn.execute("PRAGMA table_info(tcp_info)")}
    optional = ("rtt_us", "rttvar_us", *(TCP_STATE_COLUMNS if has_state_columns(conn) else ()),
                *(("rcv_rtt_us",) if "rcv_rtt_us" in have else ()))
    cols = ["seq", "module", *optional]
    seen: list[str] = []   # the state columns' warnings were given by read_tcp_state already
    frame = numeric_frame(conn, "tcp_info", f"SELECT {', '.join(cols)} FROM tcp_info", cols, ("seq", "module"),
                          seen, optional=optional)
    warnings += [w for w in seen if w not in warnings]
    return frame


def read_processes(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    return numeric_frame(conn, "processes", f"SELECT {', '.join(PROCESS_COLUMNS)} FROM processes ORDER BY started",
                         PROCESS_COLUMNS, ("pid", "started"), warnings, optional=("workload", "ended", "exit_code"))


def read_run_ends(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    """The times of the run_end events (when the runner stopped the workloads), in order."""
    return numeric_frame(conn, "events", "SELECT mono FROM events WHERE kind = 'run_end'", ["mono"], ("mono",),
                         warnings).sort_values("mono")


def read_fault_rows(conn: sqlite3.Connection) -> pd.DataFrame:
    """The faults table as stored (rundir.repair.fault_rows checks its values); no rows without one."""
    try:
        rows = conn.execute(f"SELECT {', '.join(FAULT_COLUMNS)} FROM faults ORDER BY id").fetchall()
    except sqlite3.OperationalError:
        rows = []
    return pd.DataFrame(rows, columns=FAULT_COLUMNS)


def read_queue_stats(conn: sqlite3.Connection, warnings: list[str]) -> pd.DataFrame:
    frame = numeric_frame(conn, "queue_stats", f"SELECT {', '.join(QUEUE_COLUMNS)} FROM queue_stats ORDER BY mono",
                          QUEUE_COLUMNS, tuple(c for c in QUEUE_COLUMNS if c not in ("node", "interface")), warnings)
    return frame.sort_values("mono", ignore_index=True)


def counter_history(conn: sqlite3.Connection, module: int, out: bool) -> list[tuple]:
    """(seq, total_msgs, bytes) of one module direction's counters rows, in order: the cumulative
    values as recorded (a row when they change). Rows holding something other than numbers there
    are left out (read_counters has said so: a warning, and the row not scored)."""
    rows = conn.execute("SELECT seq, total_msgs, bytes FROM counters WHERE module = ? AND dir = ? ORDER BY seq",
                        (module, "out" if out else "in")).fetchall()
    return [r for r in rows if isinstance(r[0], int) and all(v is None or is_number(v) for v in r[1:])]


def seq_at(db: Path, t0: float | None, seconds: float) -> int | None:
    """The last snapshot at most `seconds` after `t0` (None: the first snapshot's time), None if none."""
    conn = connect(db, readonly=True, live=True)   # nestlab top --at: the run may go on
    try:
        if not isinstance(t0, int | float) or isinstance(t0, bool):
            (t0,) = conn.execute("SELECT min(mono) FROM snapshots").fetchone()
        row = conn.execute("SELECT max(seq) FROM snapshots WHERE mono <= ?", ((t0 or 0) + seconds,)).fetchone()
    finally:
        conn.close()
    return None if row[0] is None else int(row[0])

"""A columnar copy of run.db's counters for the analysis: `<run>/columnar/counters.arrow`.

Fetching a run's counters rows through Python's sqlite3 costs about 1 us a row (a 15-minute run at
100 ms with ~100 modules: 1.8 M rows, about 2 s), more than every other step of the analysis put
together. The copy holds what `rundir.read.read_counters` makes of those rows (seq, module,
direction, the four values, which are supported, which hold no count; its warnings and the rows it
could not place) as an Arrow IPC file, uncompressed, which pyarrow maps into memory and hands over
as numpy arrays without copying (measured on that run: 7 ms; IPC with lz4 36 ms, zstd 43 ms,
Parquet 190-225 ms, each a copy; docs/run-format.md). Its rows are ordered by direction, module and
seq, the order load_stretches wants (analysis.model.dense takes them as they are); run.db gives them in
the order they were written. Nothing the analysis makes of them depends on that order, so every
result is the same either way.

run.db stays the record. The copy carries a stamp of the run.db it was made from: the size and
modification time (ns) of run.db and of run.db-wal (when it holds anything), run.db's file change
counter, the counters table's max(rowid) and the snapshots' count and max(seq) (a count(*) of the
counters would cost 0.1 s on that run; any write changes the modification time anyway).
`read_counters` uses the copy only when the stamp matches run.db as it is now and the copy proves to
hold what it was made with (Arrow's full validation, then a checksum of its head and columns:
rundir.copies.digest); otherwise it reads run.db (a copy that failed a check is one warning) and
writes the copy again for the next reader (`write_copy`). Where copies live (rundir.copies): the
runner writes the run's own into `<run>/columnar/` when a run ends (harness/lab/network.py), so a fresh
run is analysed from it; a reader writes its own into a private per-user cache, never into the run.
Never a failure: a copy that cannot be read or written leaves run.db to the reader (the copy is only
ever a shortcut). docs/run-format.md, "Where copies live" and "How a copy proves it matches run.db".

pyarrow is imported lazily: this module is controller-side (the collector and the agent never import
it), and a reader whose run has no copy pays nothing for it.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np

from rundir import copies, read
from rundir.db import connect
from rundir.layout import COLUMNAR as DIR
from rundir.read import Unplaced

COUNTERS = "counters.arrow"
VERSION = 2   # 2: rows by direction, module and seq
_KEY = b"nestlab"
_SUM = b"checksum"   # of the head and every column's values (rundir.copies.digest)
_BOOLS = ("out", "bad")
_COUNTER_TYPES = {"seq": "int64", "module": "int64", "out": "uint8", "bad": "uint8",
                  "vals": "fixed_size_list<item: double>[4]", "has": "fixed_size_list<item: uint8>[4]"}


def copy_path(run_dir: Path) -> Path:
    """Where run-experiment leaves the copy: the run's own columnar/ (a reader's is in its cache)."""
    return Path(run_dir) / DIR / COUNTERS


def stamp(db: Path, conn: sqlite3.Connection) -> dict:
    """What identifies run.db's present contents, cheaply (module docstring)."""
    out: dict = {"version": VERSION}
    try:
        with db.open("rb") as f:
            out["header"] = f.read(100)[24:28].hex()   # SQLite's file change counter
    except OSError:
        return {}
    for name, p in (("db", db), ("wal", db.with_name(db.name + "-wal"))):
        try:
            st = p.stat()
        except OSError:
            st = None
        # An empty WAL holds nothing, and opening run.db may touch it: its time says nothing.
        out[name] = [st.st_size, st.st_mtime_ns] if st is not None and st.st_size else None
    try:
        out["counters"] = list(conn.execute("SELECT max(rowid) FROM counters").fetchone())
        out["snapshots"] = list(conn.execute("SELECT count(*), max(seq) FROM snapshots").fetchone())
    except sqlite3.Error:
        return {}
    return out


def read_counters(db: Path, conn: sqlite3.Connection, warnings: list[str],
                  now: dict | None = None, notes: list[str] | None = None) -> tuple[dict[str, np.ndarray], Unplaced]:
    """`rundir.read.read_counters(conn, warnings)`, from the copy when it is current (the same rows,
    warnings and unplaced rows; the rows by direction, module and seq, the order in which
    analysis.model.dense takes them, where run.db gives them in the order they were written), else from
    run.db, writing the copy for the next reader. `now`: stamp(db, conn), when the caller has it.
    `notes` (default `warnings`) gets a line for a copy that failed its checks and was not used."""
    now = stamp(db, conn) if now is None else now
    got = _load(db.parent, now, warnings if notes is None else notes) if now else None
    if got is not None:
        rows, unplaced, said = got
        warnings += said
        return rows, unplaced
    said: list[str] = []
    rows, unplaced = read.read_counters(conn, said)
    warnings += said
    if now:
        write_copy(db.parent, rows, unplaced, said, now)
    return rows, unplaced


def write_after_run(run_dir: str | Path) -> Path | None:
    """Write the copy of a finished run into the run's own columnar/ (the runner calls this when the
    run ends, having claimed the run: rundir.copies.claim, so that its report, in the same process,
    writes the stretches' copy there too); None when run.db cannot be read here or the copy cannot be
    written."""
    db = Path(run_dir) / "run.db"
    try:
        read.check_file(db)
        conn = connect(db, readonly=True)
    except Exception:  # noqa: BLE001 - the copy is a shortcut; the analysis says what is wrong with run.db
        return None
    try:
        now = stamp(db, conn)
        if not now:
            return None
        said: list[str] = []
        rows, unplaced = read.read_counters(conn, said)
    except Exception:  # noqa: BLE001
        return None
    finally:
        conn.close()
    return write_copy(Path(run_dir), rows, unplaced, said, now, into_run=True)


def write_copy(run_dir: Path, rows: dict[str, np.ndarray], unplaced: Unplaced, warnings: list[str],
               now: dict, into_run: bool = False) -> Path | None:
    """Write read_counters' result as the copy (rundir.copies: atomically, never through a link, into
    the per-user cache unless this process made the run); None when it cannot be written."""
    try:
        import pyarrow as pa
    except ImportError:   # pragma: no cover - pinned; a bare install reads run.db
        return None
    # By direction, module and seq (stably: of two rows at one seq the later stays later), the order
    # load_stretches wants them in: it takes them from the map as they are, with no sort and no copy.
    order = np.lexsort((rows["seq"], rows["module"], rows["out"]))
    rows = {k: v[order] for k, v in rows.items()}
    meta = {"stamp": now, "warnings": warnings,
            "unplaced": {"series": sorted([int(m), bool(o)] for m, o in unplaced.series),
                         "from_seq": None if unplaced.from_seq is None else int(unplaced.from_seq)}}
    n = len(rows["seq"])
    cols = {"seq": np.ascontiguousarray(rows["seq"], dtype=np.int64),
            "module": np.ascontiguousarray(rows["module"], dtype=np.int64),
            **{k: np.ascontiguousarray(rows[k], dtype=bool).view(np.uint8) for k in _BOOLS},
            # (R, 4) row-major as one column of R * 4 values: read back with a reshape, no copy
            "vals": np.ascontiguousarray(rows["vals"], dtype=np.float64).reshape(-1),
            "has": np.ascontiguousarray(rows["has"], dtype=bool).reshape(-1).view(np.uint8)}
    # Columns of different lengths: each its own record batch of one column would complicate the
    # reader; instead the (R, 4) ones are fixed-size lists of 4.
    arrays = [pa.array(cols["seq"]), pa.array(cols["module"]), pa.array(cols["out"]), pa.array(cols["bad"]),
              pa.FixedSizeListArray.from_arrays(pa.array(cols["vals"]), 4),
              pa.FixedSizeListArray.from_arrays(pa.array(cols["has"]), 4)]
    head = json.dumps(meta).encode()
    table = pa.Table.from_arrays(arrays, names=list(_COUNTER_TYPES), metadata={
        _KEY: head, _SUM: copies.digest([head, *(cols[k] for k in _COUNTER_TYPES)]).encode()})
    assert table.num_rows == n
    return _write_table(run_dir, COUNTERS, table, into_run)


def _write_table(run_dir: Path, name: str, table, into_run: bool = False) -> Path | None:
    """Write an Arrow table as the IPC file `name` of the run's copies (rundir.copies.write_file)."""
    import pyarrow.ipc as ipc

    def write(f) -> None:
        with ipc.new_file(f, table.schema) as w:
            w.write_table(table)
    return copies.write_file(run_dir, name, write, into_run)


def _tables(run_dir: Path, name: str):
    """(path, head, sum, table-reader) of each trusted copy `name` (rundir.copies.mapped_files)."""
    import pyarrow as pa
    import pyarrow.ipc as ipc

    for where, mm in copies.mapped_files(run_dir, name):
        try:
            reader = ipc.open_file(pa.BufferReader(pa.py_buffer(mm)))
            meta = reader.schema.metadata or {}
            yield where, meta.get(_KEY, b"{}"), meta.get(_SUM, b"").decode("ascii", "replace"), reader
        except Exception:  # noqa: BLE001 - not an Arrow file (damaged, foreign): run.db is the record
            continue


def _checked(table, types: dict | None) -> str | None:
    """What is wrong with a copy's table before a value of it is touched, or None: Arrow's full
    validation (a record batch longer than its buffers would be read past their end: garbage rows or
    SIGSEGV), no nulls, and the columns and types the reader expects (`types`; None: primitive
    numbers, all of one length)."""
    import pyarrow as pa

    try:
        table.validate(full=True)
    except (pa.ArrowException, ValueError) as e:
        return f"not a valid Arrow table ({' '.join(str(e).split())[:120]})"
    if types is not None and [(f.name, str(f.type)) for f in table.schema] != list(types.items()):
        return "not the columns of a counters copy"
    for name in table.column_names:
        col = table.column(name)
        if col.null_count:
            return f"column {name} has nulls"
        if types is None and not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type)):
            return f"column {name} is not of numbers"
    return None


def _mismatch(where: str, why: str) -> str:
    return f"{where}: {why}; not used: read from run.db and made again (delete it if this repeats)"


def _column(table, name: str) -> np.ndarray:
    """A counters copy's column as one numpy array (a fixed-size list flattened)."""
    import pyarrow as pa

    chunks = table.column(name).chunks
    arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
    if isinstance(arr, pa.FixedSizeListArray):
        arr = arr.flatten()
    return arr.to_numpy(zero_copy_only=False)


def _load(run_dir: Path, now: dict, warnings: list[str]
          ) -> tuple[dict[str, np.ndarray], Unplaced, list[str]] | None:
    """The copy's arrays when its stamp is `now` and it proves to hold what it was made with (checked,
    checksum); None when there is none or it is stale (silently), or it fails a check (a warning)."""
    for where, head, digest, reader in _tables(run_dir, COUNTERS):
        try:
            meta = json.loads(head)
            if not isinstance(meta, dict) or meta.get("stamp") != now:
                continue
            table = reader.read_all()
        except Exception:  # noqa: BLE001 - a damaged or foreign copy: run.db is the record
            continue
        why = _checked(table, _COUNTER_TYPES)
        n = table.num_rows
        if why is None:
            try:
                cols = {k: _column(table, k) for k in _COUNTER_TYPES}
            except Exception as e:  # noqa: BLE001 - checked above; anything else: made again
                why = f"not a counters copy ({type(e).__name__})"
        if why is None and copies.digest([head, *cols.values()]) != digest:
            why = "does not match its checksum (edited or damaged)"
        if why is not None:
            warnings.append(_mismatch(where, why))
            continue
        try:
            rows = {"seq": cols["seq"], "module": cols["module"], **{k: cols[k].view(bool) for k in _BOOLS},
                    "vals": cols["vals"].reshape(n, 4), "has": cols["has"].view(bool).reshape(n, 4)}
            u = meta.get("unplaced") or {}
            frm = u.get("from_seq")
            unplaced = Unplaced({(int(m), bool(o)) for m, o in u.get("series", [])}, None if frm is None else int(frm))
            return rows, unplaced, [str(w) for w in meta.get("warnings", [])]
        except Exception as e:  # noqa: BLE001 - a copy of another shape
            warnings.append(_mismatch(where, f"not a counters copy ({type(e).__name__})"))
    return None


# ----------------------------------------------------------------------------- the analysis's own copies

STRETCHES = "stretches.arrow"


def write_arrays(run_dir: str | Path, name: str, key: dict, columns: dict[str, np.ndarray], meta: dict) -> Path | None:
    """Keep equal-length 1-D arrays (numbers or bools) and a JSON-able `meta` as the copy `name` of the
    run (rundir.copies), under `key` (read_arrays hands them back only for the same key) and with a
    checksum of both. For the analysis's copies of what it makes of a run (analysis.model.stretches:
    STRETCHES), which it keys by run.db's stamp and by its own code. None when it cannot be written."""
    try:
        import pyarrow as pa
    except ImportError:   # pragma: no cover - pinned
        return None
    plain = [np.ascontiguousarray(a).view(np.uint8) if a.dtype == bool else np.ascontiguousarray(a)
             for a in columns.values()]
    bools = [k for k, a in columns.items() if a.dtype == bool]
    head = json.dumps({"key": key, "bools": bools, "meta": meta}).encode()
    table = pa.Table.from_arrays([pa.array(a) for a in plain], names=list(columns),
                                 metadata={_KEY: head, _SUM: copies.digest([head, *plain]).encode()})
    return _write_table(Path(run_dir), name, table)


def _columns(table, bools) -> dict[str, np.ndarray]:
    """The table's columns as numpy arrays on its buffers (those named in `bools` as bools)."""
    import pyarrow as pa

    bools = set(bools or [])
    columns = {}
    for col in table.column_names:
        chunks = table.column(col).chunks
        arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
        dtype = np.dtype(arr.type.to_pandas_dtype())
        dtype = np.dtype(bool) if col in bools and dtype == np.uint8 else dtype
        # Straight on the mapped buffer: an array whose own views (a stretch's slice) have it as their
        # base, as arrays made in memory do (analysis.model.batch checks views by their base).
        columns[col] = np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr), offset=arr.offset * dtype.itemsize)
    return columns


def read_arrays(run_dir: str | Path, name: str, key: dict, warnings: list[str] | None = None
                ) -> tuple[dict[str, np.ndarray], dict] | None:
    """(columns, meta) that write_arrays kept under `key`, the arrays read-only views of the file mapped
    into memory (no copy); None when there is none or it was kept under another key, and (a line in
    `warnings`) when it fails its checks or its checksum."""

    said = warnings if warnings is not None else []
    for where, raw, digest, reader in _tables(Path(run_dir), name):
        try:
            head = json.loads(raw)
            if not isinstance(head, dict) or head.get("key") != key:
                continue
            table = reader.read_all()
        except Exception:  # noqa: BLE001 - a damaged or foreign copy: the caller makes it again
            continue
        why = _checked(table, None)
        try:
            columns = _columns(table, head.get("bools")) if why is None else {}
        except Exception as e:  # noqa: BLE001 - a crafted head: the copy is made again
            why = f"not a copy of this kind ({type(e).__name__})"
        if why is None:
            if len({len(a) for a in columns.values()}) > 1:
                why = "columns of different lengths"
            elif copies.digest([raw, *columns.values()]) != digest:
                why = "does not match its checksum (edited or damaged)"
        if why is not None:
            said.append(_mismatch(where, why))
            continue
        return columns, head.get("meta", {})
    return None

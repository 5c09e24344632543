"""A columnar copy of run.db's counters for the analysis: `<run>/columnar/counters.arrow`.

Fetching a run's counters rows through Python's sqlite3 costs about 1 us a row (a 15-minute run at
100 ms with ~100 modules: 1.8 M rows, about 2 s), more than every other step of the analysis put
together. The copy holds what `rundir.read.read_counters` makes of those rows (seq, module,
direction, the four values, which are supported, which hold no count; its warnings and the rows it
could not place) as an Arrow IPC file, uncompressed, which pyarrow maps into memory and hands over
as numpy arrays without copying (measured on that run: 7 ms; IPC with lz4 36 ms, zstd 43 ms,
Parquet 190-225 ms, each a copy; docs/run-format.md). Its rows are ordered by direction, module and
seq, the order load_stretches wants (analysis.dense takes them as they are); run.db gives them in
the order they were written. Nothing the analysis makes of them depends on that order, so every
result is the same either way.

run.db stays the record. The copy carries a stamp of the run.db it was made from: the size and
modification time (ns) of run.db and of run.db-wal (when it holds anything), run.db's file change
counter, the counters table's max(rowid) and the snapshots' count and max(seq) (a count(*) of the
counters would cost 0.1 s on that run; any write changes the modification time anyway).
`read_counters` uses the copy only when the stamp matches run.db as it is now; otherwise it reads
run.db and writes the copy again for the next reader (`write_copy`), when the directory can be
written. The network lab writes it when a run ends (harness/lab/network.py), so a fresh run is analysed from
the copy; an older run gets one the first time it is analysed. Never a failure: a copy that cannot
be read or written leaves run.db to the reader (the copy is only ever a shortcut).

pyarrow is imported lazily: this module is controller-side (the collector and the agent never import
it), and a reader whose run has no copy pays nothing for it.
"""

from __future__ import annotations

import json
import os
import sqlite3
from pathlib import Path

import numpy as np

from rundir import read
from rundir.layout import COLUMNAR as DIR
from rundir.read import Unplaced

COUNTERS = "counters.arrow"
VERSION = 2   # 2: rows by direction, module and seq
_KEY = b"nestlab"
_BOOLS = ("out", "bad")


def copy_path(run_dir: Path) -> Path:
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
                  now: dict | None = None) -> tuple[dict[str, np.ndarray], Unplaced]:
    """`rundir.read.read_counters(conn, warnings)`, from the copy when it is current (the same rows,
    warnings and unplaced rows; the rows by direction, module and seq, the order in which
    analysis.dense takes them, where run.db gives them in the order they were written), else from
    run.db, writing the copy for the next reader. `now`: stamp(db, conn), when the caller has it."""
    now = stamp(db, conn) if now is None else now
    got = _load(db.parent, now) if now else None
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
    """Write the copy of a finished run (the runner calls this when the run ends); None when run.db
    cannot be read here or the copy cannot be written."""
    db = Path(run_dir) / "run.db"
    try:
        read.check_file(db)
        conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
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
    return write_copy(Path(run_dir), rows, unplaced, said, now)


def write_copy(run_dir: Path, rows: dict[str, np.ndarray], unplaced: Unplaced, warnings: list[str],
               now: dict) -> Path | None:
    """Write read_counters' result as the copy (atomically: a temporary file renamed); None when the
    directory cannot be written."""
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
    table = pa.Table.from_arrays(arrays, names=["seq", "module", "out", "bad", "vals", "has"],
                                 metadata={_KEY: json.dumps(meta).encode()})
    assert table.num_rows == n
    return _write_table(copy_path(run_dir), table)


def _write_table(target: Path, table) -> Path | None:
    """Write an Arrow table as an IPC file atomically (a temporary file renamed); None when the
    directory cannot be written."""
    import pyarrow.ipc as ipc

    tmp = None
    try:
        target.parent.mkdir(exist_ok=True)
        tmp = target.parent / f".{target.name}.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)   # the umask's mode, as run.db's
        with os.fdopen(fd, "wb") as f, ipc.new_file(f, table.schema) as w:
            w.write_table(table)
        os.replace(tmp, target)
        tmp = None
        return target
    except OSError:
        return None
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _load(run_dir: Path, now: dict) -> tuple[dict[str, np.ndarray], Unplaced, list[str]] | None:
    """The copy's arrays when its stamp is `now`; None when there is none, it is stale or unreadable."""
    path = copy_path(run_dir)
    if not path.is_file():
        return None
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        source = pa.memory_map(str(path), "r")
        reader = ipc.open_file(source)
        meta = json.loads((reader.schema.metadata or {}).get(_KEY, b"{}"))
        if meta.get("stamp") != now:
            return None
        table = reader.read_all()
        n = table.num_rows

        def column(name: str) -> np.ndarray:
            chunks = table.column(name).chunks
            arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
            if isinstance(arr, pa.FixedSizeListArray):
                arr = arr.flatten()
            return arr.to_numpy(zero_copy_only=False)

        rows = {"seq": column("seq"), "module": column("module"),
                **{k: column(k).view(bool) for k in _BOOLS},
                "vals": column("vals").reshape(n, 4), "has": column("has").view(bool).reshape(n, 4)}
        u = meta.get("unplaced") or {}
        unplaced = Unplaced({(int(m), bool(o)) for m, o in u.get("series", [])}, u.get("from_seq"))
        return rows, unplaced, list(meta.get("warnings", []))
    except Exception:  # noqa: BLE001 - a damaged or foreign copy: run.db is the record
        return None


# ----------------------------------------------------------------------------- the analysis's own copies

STRETCHES = "stretches.arrow"


def write_arrays(run_dir: str | Path, name: str, key: dict, columns: dict[str, np.ndarray], meta: dict) -> Path | None:
    """Keep equal-length 1-D arrays (numbers or bools) and a JSON-able `meta` as `<run>/columnar/<name>`,
    under `key` (read_arrays hands them back only for the same key). For the analysis's copies of
    what it makes of a run (analysis.stretches: STRETCHES), which it keys by run.db's stamp and by its
    own code. None when it cannot be written (no pyarrow, a read-only directory)."""
    try:
        import pyarrow as pa
    except ImportError:   # pragma: no cover - pinned
        return None
    arrays = [pa.array(np.ascontiguousarray(a).view(np.uint8) if a.dtype == bool else np.ascontiguousarray(a))
              for a in columns.values()]
    bools = [k for k, a in columns.items() if a.dtype == bool]
    head = json.dumps({"key": key, "bools": bools, "meta": meta}).encode()
    table = pa.Table.from_arrays(arrays, names=list(columns), metadata={_KEY: head})
    return _write_table(Path(run_dir) / DIR / name, table)


def read_arrays(run_dir: str | Path, name: str, key: dict) -> tuple[dict[str, np.ndarray], dict] | None:
    """(columns, meta) that write_arrays kept under `key`, the arrays read-only views of the file mapped
    into memory (no copy); None when there is none, it was kept under another key, or it cannot be read."""
    path = Path(run_dir) / DIR / name
    if not path.is_file():
        return None
    try:
        import pyarrow as pa
        import pyarrow.ipc as ipc

        reader = ipc.open_file(pa.memory_map(str(path), "r"))
        head = json.loads((reader.schema.metadata or {}).get(_KEY, b"{}"))
        if head.get("key") != key:
            return None
        table = reader.read_all()
        bools = set(head.get("bools", []))
        columns = {}
        for col in table.column_names:
            chunks = table.column(col).chunks
            arr = chunks[0] if len(chunks) == 1 else pa.concat_arrays(chunks)
            dtype = np.dtype(bool) if col in bools else arr.type.to_pandas_dtype()
            if arr.null_count == 0 and np.dtype(dtype).kind in "biuf":
                # Straight on the mapped buffer: an array whose own views (a stretch's slice) have it as
                # their base, as arrays made in memory do (analysis.cells checks views by their base).
                columns[col] = np.frombuffer(arr.buffers()[1], dtype=dtype, count=len(arr),
                                             offset=arr.offset * np.dtype(dtype).itemsize)
            else:
                a = arr.to_numpy(zero_copy_only=False)
                columns[col] = a.view(bool) if col in bools else a
        return columns, head.get("meta", {})
    except Exception:  # noqa: BLE001 - a damaged or foreign copy: the caller makes it again from run.db
        return None

"""Reading span exports (Jaeger, OpenTelemetry JSON) from a file or a directory without trusting
what is there: only regular files are opened (a FIFO planted in the directory would block a plain
open; it is opened non-blocking and left out), a file over `MAX_BYTES` is left out unread, and each
file is read in one bounded read. Whatever is left out is a warning with counts, the rest is read."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from rundir.errors import UserError

MAX_BYTES = 512 * 2**20     # per file: the artifact's largest export is a few MB


def _plural(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def export_files(path: Path, what: str) -> list[Path]:
    """The files of a span export: `path` itself, or the *.json directly in a directory (sorted)."""
    if not path.exists():
        raise UserError(f"{path}: no such file or directory")
    # by name, as sorted(path.glob("*.json")) orders them, without comparing thousands of Paths
    files = [path / n for n in sorted(n for n in os.listdir(path) if n.endswith(".json"))] if path.is_dir() \
        else [path]
    if not files:
        # a folder of sets (the artifact's data/hotel_reservation): say so, and how to give them
        try:
            sets = sorted(d.name for d in path.iterdir() if d.is_dir() and any(d.glob("*.json"))) if path.is_dir() else []
        except OSError:                               # an unreadable subdirectory: no hint, the message stands
            sets = []
        named = ", ".join(sets[:3]) + (", ..." if len(sets) > 3 else "")
        which = f"subdirectory {named} holds" if len(sets) == 1 else f"{len(sets)} subdirectories {named} hold"
        hint = f"; its {which} some: give each as a set, e.g. {path}/*" if sets else ""
        raise UserError(f"{path}: no *.json files ({what}){hint}")
    return files


def read_bounded(file: Path, limit: int) -> bytes | str:
    """The bytes of a regular file of at most `limit` bytes, else a short reason (str) it was left out."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        return f"cannot be opened ({e.strerror})"
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file (a FIFO, device or socket)"
        if st.st_size > limit:
            return f"over the size limit ({st.st_size:,} > {limit:,} bytes)"
        chunks, left = [], limit + 1
        size = st.st_size + 1           # the whole file and the end in one read, as a rule
        while left > 0:
            want = min(left, size if not chunks else 1 << 24)
            chunk = os.read(fd, want)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
            if len(chunk) < want:       # a regular file's short read: its end
                break
        data = chunks[0] if len(chunks) == 1 else b"".join(chunks)
        if len(data) > limit:
            return f"over the size limit (grew past {limit:,} bytes while read)"
        return data
    finally:
        os.close(fd)


def export_bytes(path: Path, what: str, warnings: list[str],
                 limit: int | None = None) -> Iterator[tuple[Path, bytes]]:
    """(file, its bytes) of each readable file of an export; files left out are counted in
    `warnings` by reason (not a regular file, too large)."""
    limit = MAX_BYTES if limit is None else limit
    skipped: dict[str, list[str]] = {}
    for file in export_files(path, what):
        data = read_bounded(file, limit)
        if isinstance(data, str):
            skipped.setdefault(data, []).append(file.name)
            continue
        yield file, data
    for reason, names in skipped.items():
        warnings.append(f"{_plural(len(names), 'file')} {reason}; skipped (first: {names[0]})")


def loads(file: Path, data: bytes, warnings: list[str]) -> object | None:
    """The JSON document in `data` (Python's own parser: any depth error, bad UTF-8, an int over 4300
    digits is a warning and None)."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as e:   # ValueError: bad UTF-8, bad JSON, an int over 4300 digits
        where = f" (line {e.lineno}, column {e.colno})" if isinstance(e, json.JSONDecodeError) else ""
        warnings.append(f"{file.name}: not readable JSON{where}: {type(e).__name__}; skipped")
        return None

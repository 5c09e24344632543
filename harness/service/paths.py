"""The true request paths (the ground truth a black-box diagnoser never sees): the requests table's
rows, one per hop, from what each tier logged under the request's X-Request-ID.

    client  the load generator's line: from sending the request to reading the whole answer
    web     nginx's access log: $msec (the wall clock when the answer was sent) less $request_time;
            put on CLOCK_MONOTONIC with the host's wall-to-monotonic offset read at the end of the run
            (millisecond resolution, nginx's own)
    app     the gunicorn worker's own hop, around the handler
    cache, db   each call the app made, timed at the app (from the call sent to its answer read); the
            host and pid are the called tier's daemon

A request's type is the one the app reported (the path it really took: `hit`, `miss`, `write`), else
the type the load generator intended. Warm-up requests (no id) are left out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

# A row of the requests table (rundir.db.REQUEST_COLUMNS): request, type, tier, host, pid, start, end, outcome
Row = tuple[str, str, str, str, int | None, float, float, str]


@dataclass
class PathSources:
    client_host: str
    client_pid: int | None
    loadgen_out: Path
    web_host: str
    access_log: Path
    hops_dir: Path
    daemons: dict[str, tuple[str, int]]     # tier (cache, db) -> (host, pid)
    wall_minus_mono: float                  # time.time() - CLOCK_MONOTONIC on the web host


def _lines(path: Path) -> Iterator[list[str]]:
    if not path.exists():
        return
    with open(path, errors="replace") as f:
        for line in f:
            if line.endswith("\n"):            # a line cut by a killed writer is left out
                yield line[:-1].split("\t")


def request_rows(src: PathSources) -> list[Row]:
    app_lines = [p for f in sorted(src.hops_dir.glob("hops-*.tsv")) for p in _lines(f) if len(p) == 8]
    real_type = {p[0]: p[1] for p in app_lines if p[2] == "app"}
    rows: list[Row] = []
    for p in _lines(src.loadgen_out):
        if len(p) < 6:
            continue
        rid, intended, reported, status = p[0], p[1], p[2], p[3]
        kind = real_type.get(rid) or reported or intended
        rows.append((rid, kind, "client", src.client_host, src.client_pid, float(p[4]), float(p[5]),
                     "ok" if status == "200" else "error"))
    for p in _lines(src.access_log):
        if len(p) < 5 or p[0] in ("", "-"):
            continue
        try:
            end = float(p[2]) - src.wall_minus_mono
            start = end - float(p[3])
            pid = int(p[1])
        except ValueError:
            continue
        rows.append((p[0], real_type.get(p[0], ""), "web", src.web_host, pid, start, end,
                     "ok" if p[4] == "200" else "error"))
    for rid, kind, tier, host, pid, start, end, outcome in app_lines:
        if rid in ("", "-"):
            continue
        if tier == "app":
            rows.append((rid, kind, tier, host, int(pid), float(start), float(end), outcome))
        else:
            d_host, d_pid = src.daemons.get(tier, ("", None))
            rows.append((rid, kind, tier, d_host, d_pid, float(start), float(end), outcome))
    # The web rows' types: known only once every app line is read (an app's reported type).
    return [(r[0], r[1] or real_type.get(r[0], "") or "unknown", *r[2:]) for r in rows]


def loadgen_summary(log: Path) -> dict | None:
    """The load generator's last line: its JSON summary (None when it did not finish)."""
    try:
        lines = log.read_text(errors="replace").strip().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "offered_rate" in data:
            return data
    return None

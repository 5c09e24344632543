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

On testbed nodes each of those clocks is its node's: every row is put on the reference clock with the
offset of the node whose clock stamped it (`offsets`): the client's for its lines, the web host's for
nginx's, the app host's for the app's hop and the cache and db calls it timed (the app host is in the
hop file's name, hops-<host>-<pid>.tsv). On Mininet every offset is 0.
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
    offsets: dict[str, float] | None = None  # host -> seconds to add to its clock's readings (testbed nodes)


def _lines(path: Path) -> Iterator[list[str]]:
    if not path.exists():
        return
    with open(path, errors="replace") as f:
        for line in f:
            if line.endswith("\n"):            # a line cut by a killed writer is left out
                yield line[:-1].split("\t")


def _hop_host(path: Path) -> str:
    """The app host of a hop file, hops-<host>-<pid>.tsv."""
    return path.name[len("hops-"):-len(".tsv")].rsplit("-", 1)[0]


def request_rows(src: PathSources) -> list[Row]:
    offsets = src.offsets or {}
    app_lines = [[*p, _hop_host(f)] for f in sorted(src.hops_dir.glob("hops-*.tsv")) for p in _lines(f) if len(p) == 8]
    real_type = {p[0]: p[1] for p in app_lines if p[2] == "app"}
    rows: list[Row] = []
    c_off, w_off = offsets.get(src.client_host, 0.0), offsets.get(src.web_host, 0.0)
    for p in _lines(src.loadgen_out):
        if len(p) < 6:
            continue
        rid, intended, reported, status = p[0], p[1], p[2], p[3]
        kind = real_type.get(rid) or reported or intended
        rows.append((rid, kind, "client", src.client_host, src.client_pid, float(p[4]) + c_off, float(p[5]) + c_off,
                     "ok" if status == "200" else "error"))
    for p in _lines(src.access_log):
        if len(p) < 5 or p[0] in ("", "-"):
            continue
        try:
            end = float(p[2]) - src.wall_minus_mono + w_off
            start = end - float(p[3])
            pid = int(p[1])
        except ValueError:
            continue
        rows.append((p[0], real_type.get(p[0], ""), "web", src.web_host, pid, start, end,
                     "ok" if p[4] == "200" else "error"))
    for rid, kind, tier, host, pid, start, end, outcome, stamped_on in app_lines:
        if rid in ("", "-"):
            continue
        off = offsets.get(stamped_on, 0.0)
        if tier == "app":
            rows.append((rid, kind, tier, host, int(pid), float(start) + off, float(end) + off, outcome))
        else:
            d_host, d_pid = src.daemons.get(tier, ("", None))
            rows.append((rid, kind, tier, d_host, d_pid, float(start) + off, float(end) + off, outcome))
    # The web rows' types: known only once every app line is read (an app's reported type).
    return [(r[0], r[1] or real_type.get(r[0], "") or "unknown", *r[2:]) for r in rows]


def loadgen_summary(log: Path | None = None, text: str | None = None) -> dict | None:
    """The load generator's last line: its JSON summary (None when it did not finish), from its log
    file or its text (a testbed node's log, read there)."""
    if text is None:
        try:
            text = log.read_text(errors="replace")
        except OSError:
            return None
    lines = text.strip().splitlines()
    for line in reversed(lines):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and "offered_rate" in data:
            return data
    return None

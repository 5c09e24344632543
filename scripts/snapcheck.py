#!/usr/bin/env python3
"""Behaviour check for refactors: hash what the analysis makes of stored runs, before and after.

    snapcheck.py record OUT.json RUN...     # on the code before the change
    snapcheck.py compare OUT.json RUN...    # on the code after it: lists every run and item that differs

For each run it hashes, through the public API only (so that modules may move underneath): the counter
deltas (the stretches as frames), the diagnosis of every notable variant of the run's system, the
labels of every policy, and the accuracy rows. Exit 1 when anything differs, 0 when all is equal.
Runs are read-only for the hashing (the columnar copies an open may write are the same either way).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import pandas as pd

NETWORK = ["flowdiagnoser:theta=2", "flowdiagnoser:theta=1", "flowdiagnoser:queues=on",
           "flowdiagnoser:confirm=2", "flowdiagnoser:shared=on", "flowdiagnoser:tcpstate=on",
           "flowdiagnoser:probe=on", "flowdiagnoser:probe=on,tcpstate=on", "nest-cf", "nest-cf:anw=off",
           "nest-cf:queues=off", "peer"]
STREAMS = ["streamsdiagnoser", "flink-backpressure", "flink-backpressure:bp=100,busy=100"]
POLICIES = [None, "impact:collateral=exclude", "window:tail=1"]


def digest(frame: pd.DataFrame) -> str:
    """A hash of a frame's values, index, column names and dtypes (row order counts)."""
    h = hashlib.sha256()
    h.update(repr(list(frame.columns)).encode())
    h.update(repr([str(t) for t in frame.dtypes]).encode())
    flat = frame.reset_index(drop=False)
    for c in flat.columns:
        col = flat[c]
        if col.dtype == object:
            col = col.map(repr)
        h.update(pd.util.hash_pandas_object(col, index=False).to_numpy().tobytes())
    return h.hexdigest()[:16]


def hash_run(path: Path) -> dict[str, str]:
    import nestlab

    out: dict[str, str] = {}
    run = nestlab.open_run(path)
    streams = getattr(run.manifest, "backend", None) == "flink"
    out["counters"] = digest(run.counters)
    out["modules"] = digest(run.modules.drop(columns=[c for c in ("attrs",) if c in run.modules.columns]))
    out["faults"] = digest(run.faults.astype(str))
    variants = STREAMS if streams else NETWORK
    for v in variants:
        try:
            out[f"diagnose {v}"] = digest(run.diagnose(v))
        except Exception as e:   # a variant that does not apply to this run: record the error text
            out[f"diagnose {v}"] = f"error: {str(e)[:120]}"
    for p in POLICIES:
        try:
            out[f"labels {p}"] = digest(run.labels(p))
        except Exception as e:
            out[f"labels {p}"] = f"error: {str(e)[:120]}"
    for p in POLICIES[:2]:
        try:
            out[f"accuracy {p}"] = digest(run.accuracy(variants[:3] + (["nest-cf"] if not streams else []), p))
        except Exception as e:
            out[f"accuracy {p}"] = f"error: {str(e)[:120]}"
    return out


def hash_outputs(path: Path) -> dict[str, str]:
    """The files `nestlab accuracy` and `nestlab report` write for the run (the report's line that
    says when it was generated left out), each hashed."""
    import re
    import subprocess
    import tempfile

    out = {}
    nestlab = str(Path(sys.executable).with_name("nestlab"))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([nestlab, "accuracy", str(path), "--variant", "flowdiagnoser:theta=2", "--variant", "nest-cf",
                        "--out", tmp], capture_output=True, check=False)
        subprocess.run([nestlab, "report", str(path), "-o", f"{tmp}/report.html"], capture_output=True, check=False)
        for f in sorted(Path(tmp).rglob("*")):
            if f.is_file() and f.suffix in (".md", ".csv", ".tex", ".html"):
                text = f.read_bytes()
                if f.suffix == ".html":
                    text = b"\n".join(ln for ln in text.split(b"\n") if not re.search(rb"[Gg]enerated", ln[:400]))
                out[f"file {f.relative_to(tmp)}"] = hashlib.sha256(text).hexdigest()[:16]
    return out


def runs_of(args: list[str]) -> list[Path]:
    paths = []
    for a in args:
        p = Path(a)
        if (p / "manifest.json").is_file() or (p / "run.db").is_file():
            paths.append(p)
        else:
            paths += sorted(q.parent for q in p.rglob("run.db") if "analysis" not in q.parts)
    return paths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["record", "compare"])
    ap.add_argument("file")
    ap.add_argument("runs", nargs="+", help="run directories or directories holding runs")
    ap.add_argument("--files", action="store_true", help="also hash the files `nestlab accuracy` and `report` write")
    a = ap.parse_args()
    got = {}
    for p in runs_of(a.runs):
        # keyed by <experiment>/<run> so that a copy of the runs elsewhere compares with the baseline
        key = "/".join(p.resolve().parts[-2:])
        got[key] = hash_run(p) | (hash_outputs(p) if a.files else {})
        print(f"hashed {p} ({len(got[key])} items)", file=sys.stderr)
    if a.mode == "record":
        Path(a.file).write_text(json.dumps(got, indent=1, sort_keys=True) + "\n")
        print(f"{len(got)} runs recorded in {a.file}")
        return 0
    want = json.loads(Path(a.file).read_text())
    differ = 0
    for run, items in want.items():
        now = got.get(run)
        if now is None:
            print(f"MISSING {run}")
            differ += 1
            continue
        for k, v in items.items():
            if now.get(k) != v:
                print(f"DIFFER {run}: {k}: {v} -> {now.get(k)}")
                differ += 1
    print(f"{len(want)} runs compared, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

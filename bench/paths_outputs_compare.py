"""Every black-box algorithm's whole output and request accuracy on the TraceWeaver artifact's sets,
recorded to compare two versions of the code (issue 43: a speed-up must change no output):

    .venv/bin/python bench/paths_outputs_compare.py --data DIR --record before.json   # old code
    .venv/bin/python bench/paths_outputs_compare.py --data DIR --record after.json    # new code
    .venv/bin/python bench/paths_outputs_compare.py --compare before.json after.json

Per set: a digest of the imported trace (messages, their dtypes and categories, times to the last
bit, the truth, warnings) and per algorithm a digest of its output (parents, patterns with counts,
node delays and edge latencies to the last bit, the node-delay and edge-latency frames, warnings,
parameters, total) beside its request_scores (request and mapping accuracy, exactly). The
comparison prints each difference and the request accuracy of every algorithm on every set; exit
status 1 if anything differs. (tests/test_paths_outputs.py keeps a smaller check on a seeded export.)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from analysis.paths.accuracy import request_scores  # noqa: E402
from analysis.paths.algorithms import ALGORITHMS, algorithm  # noqa: E402
from analysis.paths.spans import read_jaeger  # noqa: E402


def _h(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def record(data: Path) -> dict:
    out = {}
    for folder in sorted(p for p in data.glob("*/*") if p.is_dir()):
        tr = read_jaeger(folder)
        m = tr.messages
        cats = {c: [list(map(str, m[c].cat.categories)), str(m[c].cat.categories.dtype)]
                for c in m if str(m[c].dtype) == "category"}
        row = {"trace": _h({"values": m.astype(str).to_csv(), "dtypes": str(m.dtypes.to_dict()), "cats": cats,
                            "t": [x.hex() for x in m["t_send"].tolist() + m["t_recv"].tolist()],
                            "request": tr.truth.request.tolist(), "cause": tr.truth.cause.tolist(),
                            "types": sorted(map(list, tr.truth.request_type.items())), "base": tr.time_base}),
               "warnings": tr.warnings}
        for name in ALGORITHMS:
            r = algorithm(name)[0](m)
            doc = {"parent": None if r.parent is None else np.asarray(r.parent).tolist(),
                   "patterns": [(p.pattern, repr(p.count), {k: repr(v) for k, v in p.node_delays.items()},
                                 {k: repr(v) for k, v in p.edge_latencies.items()}, repr(p.raw_count))
                                for p in r.patterns],
                   "node_delays": r.node_delays.to_csv(float_format="%r"),
                   "edges": r.edge_latencies.to_csv(float_format="%r"),
                   "dtypes": [str(r.node_delays.dtypes.to_dict()), str(r.edge_latencies.dtypes.to_dict())],
                   "warnings": list(r.warnings), "params": repr(r.params), "total": repr(r.total)}
            row[name] = {"output": _h(doc), "scores": {k: repr(v) for k, v in request_scores(r, tr).items()}}
        out[folder.name] = row
        print(folder.name, flush=True)
    return out


def compare(a: dict, b: dict) -> int:
    diffs = 0
    for s in sorted(set(a) | set(b)):
        for k in sorted(set(a.get(s, {})) | set(b.get(s, {}))):
            if a.get(s, {}).get(k) != b.get(s, {}).get(k):
                diffs += 1
                print(f"DIFFERS {s} {k}: {str(a.get(s, {}).get(k))[:160]} | {str(b.get(s, {}).get(k))[:160]}")
    names = [n for n in next(iter(b.values())) if n not in ("trace", "warnings")]
    print("request accuracy (%), before = after unless marked:")
    print("set " + " ".join(names))
    for s in sorted(b):
        cells = []
        for n in names:
            x, y = (d.get(s, {}).get(n, {}).get("scores", {}).get("request_accuracy", "nan") for d in (a, b))
            cell = "-" if y == "nan" else f"{100 * float(y):.1f}"
            cells.append(cell if x == y else f"{cell} (was {x})")
        print(s, " ".join(cells))
    print(f"{diffs} differences over {len(b)} sets")
    return 1 if diffs else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, help="the artifact's data/ folder")
    ap.add_argument("--record", type=Path, help="write this version's outputs here")
    ap.add_argument("--compare", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    a = ap.parse_args(argv)
    if a.record:
        if not a.data or not a.data.is_dir():
            print("--record needs --data DIR (the artifact's data/ folder)", file=sys.stderr)
            return 2
        a.record.write_text(json.dumps(record(a.data), indent=1, sort_keys=True))
        return 0
    if a.compare:
        try:
            before, after = (json.loads(p.read_text()) for p in a.compare)
        except (OSError, ValueError) as e:
            print(f"cannot read the recorded outputs: {e}", file=sys.stderr)
            return 2
        return compare(before, after)
    print("give --record FILE (with --data DIR) or --compare BEFORE AFTER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())

"""Does the engine move tuples in batches, as thesis 4.6.3.2 saw at full rate? Per streams run: the
false-positive rate of a variant (default streamsdiagnoser) over the negative connection-snapshots, and
what the thesis's explanation predicts about them (issue 34, item 2: run it on streams-fullrate and
streams-4.3 and compare):

- idle with tuples: the share of negative connection-snapshots in which the connection's downstream PE
  processed nothing while tuples were queued (Δtotal_msgs = 0, queued > 0): a batch waiting a whole
  snapshot. At a fixed rate below capacity it should be near 0; if the engine batches, it is not.
- burstiness: the median over connections of the coefficient of variation of Δtotal_msgs over the
  negative snapshots that moved tuples (a steady flow: near 0; batches: large).
- flips/min: per connection and minute, how often the variant's positive changes over consecutive
  negative snapshots (the thesis's "blame oscillates").

    PYTHONPATH=. .venv/bin/python scripts/streams_batching.py streams-fullrate [streams-4.3] [--variant V]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pandas as pd  # noqa: E402

import nestlab  # noqa: E402


def run_figures(run, variant: str) -> dict:
    lab = run.labels()
    lab = lab[(lab["dir"] == "out") & ~lab["exclude"]]
    diag = run.diagnose(variant)
    diag = diag[diag["dir"] == "out"][["module", "seq", "positive"]]
    f = lab.merge(diag, on=["module", "seq"])
    neg = f[~f["actual"]].sort_values(["module", "seq"])
    idle = (neg["tm"] == 0) & (neg["queued"] > 0)
    moved = neg[neg["tm"] > 0].groupby("module")["tm"]
    cv = (moved.std() / moved.mean()).median()
    step = neg.groupby("module")["positive"].apply(lambda s: int((s.astype(int).diff().abs() == 1).sum()))
    minutes = max(1e-9, neg["seq"].nunique() * float(run.manifest.snapshot_interval or 1.0) / 60.0)
    rate = run.manifest.spec.rate
    return {"run": str(run.path), "experiment": run.manifest.experiment, "rate": "full" if rate == 0 else rate,
            "negatives": len(neg), "FP": int(neg["positive"].sum()),
            "FPR %": round(100 * neg["positive"].mean(), 2) if len(neg) else None,
            "idle with tuples %": round(100 * idle.mean(), 2) if len(neg) else None,
            "burstiness (CV)": round(float(cv), 2) if cv == cv else None,
            "flips/min": round(float(step.sum()) / max(1, len(step)) / minutes, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="runs, experiments or suites (as nestlab accuracy takes them)")
    ap.add_argument("--variant", default="streamsdiagnoser")
    ap.add_argument("--results", default="results")
    a = ap.parse_args(argv)
    rows = [run_figures(r, a.variant) for spec in a.runs for r in nestlab.open_runs(spec, a.results)]
    print(pd.DataFrame(rows).to_string(index=False))
    return 0


if __name__ == "__main__":
    sys.exit(main())

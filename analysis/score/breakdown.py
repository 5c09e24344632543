"""The comparison's figures split two ways (issue 35): across runs (each variant's pooled rate beside
its 95% interval across runs, analysis.score.accuracy.across_runs) and by the runs' fault kinds (the
runs grouped by the kinds of fault they hold, e.g. beyond's partial-loss runs apart from the rest).

Only the Total section's rows that carry the network's verdict are shown (TCP, ip+eth, all modules):
the application and socket rows do not depend on the network variants. A study kind may show other
rows (analysis.studies: a streams evaluation its stream connections' row alone).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from analysis.score.accuracy import accuracy_table, across_runs
from rundir.db import connect
from rundir.layout import RunDir
from rundir.read import read_fault_rows

SHOWN = [("Total", "TCP", "TCP"), ("Total", "ip+eth", "ip+eth"), ("Total", "all modules", "all modules")]
COLUMNS = ["group", "runs", "variant", "row", "TP", "FP", "FN", "TPR", "PPV", "TPR_xlo", "TPR_xhi", "PPV_xlo",
           "PPV_xhi"]


def fault_kinds_of(run: str | Path) -> str:
    """A run's fault kinds, sorted and joined by '+' ('no faults' when it has none; 'unknown' when its
    faults cannot be read)."""
    try:
        conn = connect(RunDir(Path(run)).db, readonly=True)
        try:
            kinds = sorted({str(k) for k in read_fault_rows(conn)["kind"]})
        finally:
            conn.close()
    except Exception:   # noqa: BLE001 - a run the accuracy read is grouped, not refused, here
        return "unknown"
    return "+".join(kinds) if kinds else "no faults"


def _rows(counts: pd.DataFrame, variants, runs: list[str], group: str, shown) -> list[dict]:
    out = []
    sub = counts[counts["run"].isin(runs)]
    for v in variants:
        t = accuracy_table(sub, v)
        x = across_runs(sub, v, runs) if len(runs) >= 2 else None
        for section, row, label in shown:
            r = t.loc[(section, row)]
            rec = {"group": group, "runs": len(runs), "variant": v, "row": label, "TP": int(r["TP"]),
                   "FP": int(r["FP"]), "FN": int(r["FN"]), "TPR": r["TPR"], "PPV": r["PPV"]}
            for rate in ("TPR", "PPV"):
                rec[f"{rate}_xlo"] = x.loc[(section, row), f"{rate}_xlo"] if x is not None else np.nan
                rec[f"{rate}_xhi"] = x.loc[(section, row), f"{rate}_xhi"] if x is not None else np.nan
            out.append(rec)
    return out


def breakdown(counts: pd.DataFrame, variants, runs: list[str], kinds: dict[str, str] | None = None,
              shown=SHOWN) -> pd.DataFrame:
    """Rows (COLUMNS) for all runs ('all runs'), then, when the runs hold more than one set of fault
    kinds, for each set (`kinds`: run -> its set, default fault_kinds_of). `shown`: the (section, row,
    shown as) of the study kind's breakdown."""
    runs = [str(r) for r in runs]
    recs = _rows(counts, variants, runs, "all runs", shown)
    kinds = kinds if kinds is not None else {r: fault_kinds_of(r) for r in runs}
    groups = sorted(set(kinds[r] for r in runs))
    if len(groups) > 1:
        for g in groups:
            recs += _rows(counts, variants, [r for r in runs if kinds[r] == g], g, shown)
    return pd.DataFrame.from_records(recs, columns=COLUMNS)

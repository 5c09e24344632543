"""The fabric diagnosers scored per link (issue 44): each diagnoser's ranked links and blamed links
per window, then AC@1 and AC@3 (the fault's link ranked first, or in the first three) per fault kind
and link type, per-window link precision and recall of the blamed links, and false link alarms per
hour in the control runs, beside a random guess (AC@k = k / links).

compare-fabric.csv has the columns of the service study's compare-culprit.csv (diagnoser, inputs,
fault_kind, windows, ac1, ac3; here in percent, culprits are links) so the lead can join them;
fabric-alarms.csv and fabric-windows.csv hold the rest.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from analysis.fabric import netbouncer, vote007
from analysis.fabric.inputs import FabricRun, Window, both_ways, probe_counts, retransmitting, windows
from analysis.score.accuracy import wilson
from rundir.layout import fresh  # a planted link is replaced, never written through

INPUTS = {"007": "hosts", "netbouncer": "probes", "random": "-"}
CULPRIT_COLUMNS = ["diagnoser", "inputs", "fault_kind", "windows", "ac1", "ac3"]


@dataclass
class Verdict:
    window: Window
    diagnoser: str
    ranked: list[int]
    blamed: list[int]
    control_run: bool = False


def diagnose(run: FabricRun, control_run: bool = False) -> list[Verdict]:
    out = []
    paths = both_ways(run.conn_paths)
    for w in windows(run):
        active, bad = retransmitting(run, w)
        tally, clean = vote007.votes(bad, paths), vote007.healthy(active, bad, paths)
        out.append(Verdict(w, "007", vote007.ranked(tally, clean), vote007.blamed(bad, paths, clean), control_run))
        links, sent, ok = probe_counts(run, w)
        rates = netbouncer.solve(links, sent, ok)
        out.append(Verdict(w, "netbouncer", netbouncer.ranked(rates), netbouncer.blamed(rates, links, sent, ok),
                           control_run))
    return out


def _pct(x: tuple[float, float, float] | None) -> str:
    return "" if x is None else f"{100 * x[0]:.1f}"


@dataclass
class Accuracy:
    diagnoser: str
    fault_kind: str
    windows: int
    ac1: tuple[float, float, float] | None
    ac3: tuple[float, float, float] | None


def accuracy(verdicts: Iterable[Verdict], n_links: int) -> list[Accuracy]:
    """AC@1 and AC@3 with Wilson intervals per diagnoser and fault kind ('loss 1%' and 'loss 1%
    edge-aggregation'), over fault windows; a random guess beside each kind."""
    groups: dict[tuple[str, str], list[Verdict]] = {}
    for v in verdicts:
        if not v.window.truth:
            continue
        for kind in (v.window.label, f"{v.window.label} {v.window.link_kind}".strip()):
            groups.setdefault((v.diagnoser, kind), []).append(v)
    out = []
    kinds = sorted({k for _, k in groups})
    for (diagnoser, kind), vs in sorted(groups.items()):
        n = len(vs)
        top1 = sum(v.ranked[:1] == [v.window.truth[0]] for v in vs)
        top3 = sum(v.window.truth[0] in v.ranked[:3] for v in vs)
        out.append(Accuracy(diagnoser, kind, n, wilson(top1, n), wilson(top3, n)))
    for kind in kinds:
        n = max(len(vs) for (d, k), vs in groups.items() if k == kind)
        out.append(Accuracy("random", kind, n, (1 / n_links, 1 / n_links, 1 / n_links),
                            (min(1.0, 3 / n_links),) * 3))
    return out


@dataclass
class Alarms:
    diagnoser: str
    windows: int
    precision: tuple[float, float, float] | None
    recall: tuple[float, float, float] | None
    control_hours: float
    false_alarms: int
    clean_hours: float = 0.0      # every window with no fault in force, fault runs' included
    clean_alarms: int = 0

    @property
    def per_hour(self) -> float | None:
        return self.false_alarms / self.control_hours if self.control_hours > 0 else None

    @property
    def clean_per_hour(self) -> float | None:
        return self.clean_alarms / self.clean_hours if self.clean_hours > 0 else None


def alarms(verdicts: Iterable[Verdict]) -> list[Alarms]:
    """Per diagnoser: link precision and recall of the blamed links over every window, and the
    links blamed in the control runs' windows per hour."""
    by: dict[str, list[Verdict]] = {}
    for v in verdicts:
        by.setdefault(v.diagnoser, []).append(v)
    out = []
    for d, vs in sorted(by.items()):
        tp = sum(len(set(v.blamed) & set(v.window.truth)) for v in vs)
        fp = sum(len(set(v.blamed) - set(v.window.truth)) for v in vs)
        fn = sum(len(set(v.window.truth) - set(v.blamed)) for v in vs)
        controls = [v for v in vs if v.control_run]
        hours = sum(v.window.end - v.window.start for v in controls) / 3600
        clean = [v for v in vs if not v.window.truth]   # the control runs' and the fault runs' quiet windows
        out.append(Alarms(d, len(vs), wilson(tp, tp + fp), wilson(tp, tp + fn), hours,
                          sum(len(v.blamed) for v in controls), sum(v.window.end - v.window.start for v in clean) / 3600,
                          sum(len(v.blamed) for v in clean)))
    return out


def write(out: Path, verdicts: list[Verdict], acc: list[Accuracy], alarm: list[Alarms],
          names: dict[int, str]) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    culprit, al, win = out / "compare-fabric.csv", out / "fabric-alarms.csv", out / "fabric-windows.csv"
    with fresh(culprit).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(CULPRIT_COLUMNS)
        for a in acc:
            w.writerow([a.diagnoser, INPUTS.get(a.diagnoser, ""), a.fault_kind, a.windows, _pct(a.ac1), _pct(a.ac3)])
    with fresh(al).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["diagnoser", "inputs", "windows", "precision", "precision_low", "precision_high", "recall",
                    "recall_low", "recall_high", "control_hours", "false_alarms", "false_alarms_per_hour",
                    "clean_hours", "clean_alarms", "clean_alarms_per_hour"])
        for a in alarm:
            p, r = a.precision or ("", "", ""), a.recall or ("", "", "")
            w.writerow([a.diagnoser, INPUTS.get(a.diagnoser, ""), a.windows, *(f"{100 * x:.1f}" if x != "" else ""
                        for x in (*p, *r)), f"{a.control_hours:.3f}", a.false_alarms,
                        "" if a.per_hour is None else f"{a.per_hour:.2f}", f"{a.clean_hours:.3f}", a.clean_alarms,
                        "" if a.clean_per_hour is None else f"{a.clean_per_hour:.2f}"])
    with fresh(win).open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "start", "fault_kind", "link_kind", "truth", "diagnoser", "top3", "blamed"])
        for v in verdicts:
            w.writerow([v.window.run, f"{v.window.start:.3f}", v.window.label, v.window.link_kind,
                        " ".join(names.get(k, str(k)) for k in v.window.truth), v.diagnoser,
                        " ".join(names.get(k, str(k)) for k in v.ranked[:3]),
                        " ".join(names.get(k, str(k)) for k in v.blamed)])
    return [culprit, al, win]

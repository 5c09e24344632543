"""The fabric view (issue 44; docs/fabric.md): 007 and NetBouncer on every fabric run given, scored per
link, as `nestlab accuracy`/`compare` of fabric runs, the report's lead section and
`python -m analysis.fabric` show it: AC@1/AC@3 per fault kind beside a random guess, link precision
and recall, false link alarms per hour in the control runs, and (asked for) NeST's host view beside.
Files: compare-fabric.csv (the culprit table's columns), fabric-alarms.csv, fabric-windows.csv.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from analysis.fabric.inputs import load_run, windows
from analysis.fabric.nest import host_views
from analysis.fabric.score import accuracy, alarms, diagnose, write
from rundir.errors import UserError
from rundir.fabric import FABRIC_FILE, read_manifest_json


def fabric_runs(paths) -> list[Path]:
    """Every fabric run (a directory holding fabric.json) at or under the paths; UserError if none."""
    out = []
    for p in map(Path, paths):
        if not p.exists():
            raise UserError(f"{p}: no such run or directory")
        out += sorted(f.parent for f in ([p / FABRIC_FILE] if (p / FABRIC_FILE).is_file() else p.rglob(FABRIC_FILE)))
    if not out:
        raise UserError(f"no fabric run (a directory with {FABRIC_FILE}) under {', '.join(map(str, paths))}")
    return out


@dataclass
class FabricView:
    runs: list[Path]
    verdicts: list = field(default_factory=list)
    names: dict[int, str] = field(default_factory=dict)
    views: list = field(default_factory=list)       # NeST's host view per window (nest=True)
    no_nest: list[str] = field(default_factory=list)

    @cached_property   # once verdicts are in: the tables, the report and the CSVs read it
    def accuracy(self):
        return accuracy(self.verdicts, len(self.names))

    @cached_property
    def alarms(self):
        return alarms(self.verdicts)


def fabric_view(paths, nest: bool = False) -> FabricView:
    """Diagnose every window of every fabric run under `paths` (a run with no faults in its spec is a
    control run); with `nest`, NeST's host view beside (its diagnosis of every run)."""
    view = FabricView(fabric_runs(paths))
    for path in view.runs:
        run = load_run(path)
        spec = read_manifest_json(path).get("spec") or {}
        mine = diagnose(run, control_run=not spec.get("faults"))
        view.verdicts += mine
        view.names = {lk["index"]: lk["name"] for lk in run.links}
        if nest:
            blamed = {v.window.start: v.blamed for v in mine if v.diagnoser == "007"}
            got = host_views(run, windows(run), blamed)
            view.views += got or []
            if got is None:
                view.no_nest.append(path.name)
    return view


def _interval(x) -> str:
    return "-" if x is None else f"{100 * x[0]:.1f} [{100 * x[1]:.1f}, {100 * x[2]:.1f}]"


ACCURACY_HEADER = ["diagnoser", "fault kind", "windows", "AC@1 % [95%]", "AC@3 % [95%]"]
ALARMS_HEADER = ["diagnoser", "link precision % [95%]", "link recall % [95%]", "control hours", "false alarms/h",
                 "fault-free hours", "alarms/h there"]


def title(view: FabricView) -> str:
    n_windows = len({(v.window.run, v.window.start) for v in view.verdicts})
    return f"Which link? {len(view.runs)} fabric run(s), {n_windows} windows of 10 s"


def accuracy_rows(view: FabricView) -> list[list[str]]:
    return [[x.diagnoser, x.fault_kind, str(x.windows), _interval(x.ac1), _interval(x.ac3)] for x in view.accuracy]


def alarm_rows(view: FabricView) -> list[list[str]]:
    return [[x.diagnoser, _interval(x.precision), _interval(x.recall), f"{x.control_hours:.3f}",
             "-" if x.per_hour is None else f"{x.per_hour:.2f} ({x.false_alarms})", f"{x.clean_hours:.3f}",
             "-" if x.clean_per_hour is None else f"{x.clean_per_hour:.2f} ({x.clean_alarms})"] for x in view.alarms]


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(r) + " |" for r in rows)]


def markdown(view: FabricView) -> str:
    """The link tables as Markdown: AC@1/AC@3 per diagnoser and fault kind, then precision, recall and
    false alarms per diagnoser, then NeST's host view where it was made."""
    lines = [f"{title(view)} (docs/fabric.md)", "", *_md(ACCURACY_HEADER, accuracy_rows(view)), "",
             *_md(ALARMS_HEADER, alarm_rows(view))]
    if view.views or view.no_nest:
        lines += ["", _nest_markdown(view)]
    return "\n".join(lines)


def _nest_markdown(view: FabricView) -> str:
    """Per fault kind: windows, the first host NeST blames on the faulty link's connections, windows
    with any STALLED TCP module, retransmitting connections and those LOSSY by 007's blamed links."""
    lines = ["NeST (flowdiagnoser:theta=2) host view:", "",
             "| fault kind | windows | first host on link % | any STALLED % | retransmitting | LOSSY by votes |",
             "|---|---:|---:|---:|---:|---:|"]
    groups: dict[str, list] = {}
    for v in view.views:
        groups.setdefault(v.window.label, []).append(v)
    for label, vs in sorted(groups.items()):
        faulty = [v for v in vs if v.window.truth]
        first = f"{100 * sum(v.first_on_link for v in faulty) / len(faulty):.1f}" if faulty else "-"
        lines.append(f"| {label} | {len(vs)} | {first} | {100 * sum(bool(v.hosts) for v in vs) / len(vs):.1f} | "
                     f"{sum(v.retransmitting for v in vs)} | {sum(v.lossy for v in vs)} |")
    if view.no_nest:
        lines.append(f"\n(NeST's diagnosis could not be made of {len(view.no_nest)} run(s): {', '.join(view.no_nest[:3])})")
    return "\n".join(lines)


def write_view(view: FabricView, out: Path) -> list[Path]:
    return write(Path(out), view.verdicts, view.accuracy, view.alarms, view.names)

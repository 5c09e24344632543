"""NeST's host view beside the fabric diagnosers (issue 44): NeST runs on every host and diagnoses
modules, not links. Per window: the hosts ranked by their TCP modules' STALLED snapshots (the
variant's positives, both directions), whether the first is an end of a connection crossing the
faulty link, and how many retransmitting connections a LOSSY state derived from the fabric votes
would mark (those crossing a link 007 blamed in the window).
"""

from __future__ import annotations

from dataclasses import dataclass

from analysis.fabric.inputs import FabricRun, Window, retransmitting
from rundir.errors import UserError
from rundir.fabric import read_connections, snapshot_times

VARIANT = "flowdiagnoser:theta=2"


@dataclass
class HostView:
    window: Window
    hosts: list[tuple[str, int]]     # (host, STALLED TCP module-snapshots), most first
    on_link: set[str]                # hosts with a connection crossing the window's faulty link
    retransmitting: int
    lossy: int                       # of those, crossing a link 007 blamed

    @property
    def first_on_link(self) -> bool:
        return bool(self.hosts) and self.hosts[0][0] in self.on_link


def host_views(run: FabricRun, windows: list[Window], blamed_007: dict[float, list[int]],
               variant: str = VARIANT) -> list[HostView] | None:
    """None when NeST's diagnosis cannot be made of the run (a note, not a failure of the fabric's)."""
    from analysis.diagnose import diagnose_run

    try:
        frame = diagnose_run(run.path, [variant])
    except (UserError, KeyError, ValueError):
        return None
    mono = snapshot_times(run.path)
    host_of, addr_host = {}, {}
    for mid, (a, _born, _died) in read_connections(run.path)[1].items():
        host_of[mid] = a.get("host")
        if a.get("host") and a.get("src"):
            addr_host[a["src"]] = a["host"]
    stalled = frame[(frame["positive"]) & (frame["module"].isin(list(host_of)))]
    times = stalled["seq"].map(mono)
    hosts = stalled["module"].map(host_of)
    out = []
    for w in windows:
        inside = (times >= w.start) & (times < w.end)
        counts = hosts[inside].value_counts()
        active, bad = retransmitting(run, w)
        on_link = set()
        for key in active:
            if w.truth and w.truth[0] in run.conn_paths.get(key, ()):
                src, dst = key.split(">")
                on_link |= {addr_host.get(src.rsplit(":", 1)[0]), addr_host.get(dst.rsplit(":", 1)[0])}
        blamed = set(blamed_007.get(w.start, ()))
        lossy = sum(bool(blamed & set(run.conn_paths.get(k, ()))) for k in bad)
        out.append(HostView(w, [(h, int(n)) for h, n in counts.items() if h], on_link - {None}, len(bad), lossy))
    return out

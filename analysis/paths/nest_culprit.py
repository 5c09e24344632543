"""NeST's answer to the black-box diagnosis question: in each fault window of a service run, which
tier host is the culprit (issue 31 item 4; docs/blackbox.md, "NeST's culprit").

NeST names modules, not tiers. A STALLED module (a variant's positive, per module, direction and
snapshot) blames hosts:

- an application or socket module blames its own host (the application there holds the work up);
- an interface (ip+eth) module blames its own host;
- a TCP connection blames both of its ends' hosts (NeST says the connection, i.e. the network
  between them or the far end, holds the work up; a host at one end of many blamed connections is
  what they share). The far end's host is found from the connection's remote address (`dst`)
  through the run's topology addresses and the local addresses of the monitored hosts' connections;
  an address of no known host blames nobody.

Each (module, direction, snapshot) STALLED is one vote. Per window, a host's *rise* is its votes per
snapshot in the window (snapshots whose interval overlaps it) less its votes per snapshot outside
every window (a request/response service's idle keep-alive sockets look stalled all the time:
docs/service.md); the hosts whose rise is above 0 are ranked by it (ties by name), and scored with
the black-box algorithms' top-1 and top-3 (analysis.paths.score.culprit_scores). A window where no
host's blame rose names nobody: a miss. A module's host is its `host` (a column, or in attrs, as runs
monitoring several hosts record it), else the run's monitored host.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.diagnose import diagnose_run
from analysis.load import RunData

COLUMNS = ["window", "node", "start", "stop", "ranking", "rise_s"]


def module_hosts(data: RunData) -> pd.Series:
    """Per module id, its host (module docstring)."""
    mods = data.modules
    monitor = data.info.monitor.host if data.info.manifest is not None else None
    if "host" in mods.columns:
        hosts = mods["host"]
    else:
        hosts = pd.Series([a.get("host") if isinstance(a, dict) else None for a in mods["attrs"]], index=mods.index)
    return hosts.where(hosts.notna() & (hosts.astype(str) != ""), monitor).astype(object)


def address_hosts(data: RunData, hosts: pd.Series) -> dict[str, str]:
    """Address -> host: the topology's interface addresses, the monitored hosts' own (manifest
    `monitored`), then each monitored host's connections' local addresses (`src`)."""
    out: dict[str, str] = {}
    manifest = data.info.manifest
    topo = getattr(manifest, "topology", None) if manifest is not None else None
    for node, ifaces in (getattr(topo, "addresses", None) or {}).items():
        for iface in ifaces:
            if iface.address:
                out[str(iface.address)] = str(iface.node or node)
    # runs monitoring several hosts list each one's address (manifest `monitored`)
    for rec in (getattr(manifest, "monitored", None) or []) if manifest is not None else []:
        host, address = ((rec.get("host"), rec.get("address")) if isinstance(rec, dict)
                         else (getattr(rec, "host", None), getattr(rec, "address", None)))
        if host and address:
            out.setdefault(str(address), str(host))
    for mid, attrs in data.modules["attrs"].items():
        if isinstance(attrs, dict) and attrs.get("src") and hosts.get(mid):
            out.setdefault(str(attrs["src"]), str(hosts[mid]))
    return out


def blame(data: RunData, diagnosis: pd.DataFrame) -> pd.DataFrame:
    """Votes per (variant, seq, host) from a diagnose_run frame (module docstring)."""
    pos = diagnosis[diagnosis["positive"].to_numpy(bool)]
    hosts = module_hosts(data)
    addr = address_hosts(data, hosts)
    kinds = data.modules["kind"]
    far = {mid: addr.get(str(a.get("dst"))) for mid, a in data.modules["attrs"].items()
           if kinds[mid] == "tcp" and isinstance(a, dict)}
    mods = pos["module"].to_numpy()
    own = pd.Series(mods).map(hosts).to_numpy(object)
    parts = [pd.DataFrame({"variant": pos["variant"].astype(str).to_numpy(), "seq": pos["seq"].to_numpy(),
                           "host": own})]
    tcp = (pos["kind"].astype(str) == "tcp").to_numpy()
    if tcp.any():
        other = pd.Series(mods[tcp]).map(far).to_numpy(object)
        parts.append(pd.DataFrame({"variant": pos["variant"].astype(str).to_numpy()[tcp],
                                   "seq": pos["seq"].to_numpy()[tcp], "host": other}))
    votes = pd.concat(parts, ignore_index=True).dropna(subset=["host"])
    return votes.groupby(["variant", "seq", "host"]).size().rename("votes").reset_index()


def rankings(data: RunData, windows: pd.DataFrame | None, variants: list[str],
             diagnosis: pd.DataFrame | None = None) -> dict[str, pd.DataFrame]:
    """Per variant, the culprit ranking of each window (COLUMNS, as score.culprit_ranking's; rise_s
    is the first host's rise in votes per snapshot). windows: node, start, stop on the run's clock
    (readers.faults_of_run)."""
    if windows is None or windows.empty:
        return {v: pd.DataFrame(columns=COLUMNS) for v in variants}
    if diagnosis is None:
        diagnosis = diagnose_run(data.run, variants)
    votes = blame(data, diagnosis)
    snaps = data.snapshots
    if snaps.empty:   # no snapshot recorded: nothing seen, every window a miss (an empty ranking)
        rows = [(i, str(w.node), w.start, w.stop, [], float("nan"))
                for i, w in enumerate(windows.itertuples(index=False))]
        return {v: pd.DataFrame(rows, columns=COLUMNS) for v in variants}
    mono = snaps["mono"].to_numpy(float)
    first = mono[0] - (mono[1] - mono[0] if len(mono) > 1 else 0.1)
    begin = snaps["start"].fillna(first).to_numpy(float)
    seqs = snaps.index.to_numpy()
    inside_any = np.zeros(len(seqs), dtype=bool)
    masks = []
    for w in windows.itertuples(index=False):
        m = (mono > w.start) & (begin < w.stop)
        masks.append(m)
        inside_any |= m
    outside = seqs[~inside_any]
    out = {}
    for v in variants:
        mine = votes[votes["variant"] == v]
        table = mine.pivot_table(index="seq", columns="host", values="votes", aggfunc="sum", fill_value=0)
        table = table.reindex(seqs, fill_value=0)
        base = table.loc[outside].mean() if len(outside) else table.iloc[:0].sum()
        rows = []
        for i, (w, m) in enumerate(zip(windows.itertuples(index=False), masks, strict=True)):
            if not m.any() or table.empty:
                rows.append((i, str(w.node), w.start, w.stop, [], float("nan")))
                continue
            rise = (table.loc[seqs[m]].mean() - base).sort_index()
            rise = rise[rise > 0].sort_values(ascending=False, kind="stable")
            rows.append((i, str(w.node), w.start, w.stop, [str(h) for h in rise.index],
                         float(rise.iloc[0]) if len(rise) else float("nan")))
        out[v] = pd.DataFrame(rows, columns=COLUMNS)
    return out

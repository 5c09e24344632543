"""Runs of several monitored hosts (run format 7, no bump; docs/run-format.md "Several monitored hosts"): every
module records its host (attrs `host`), and the analysis keeps the hosts apart.

A stretch of such a run holds one host's modules (`Stretch.host`): `split_by_host` cuts each stretch
of the run's one snapshot sequence into a stretch per host, and analysis.diagnose runs every variant
on each host's stretches alone (one Batch per host), so that no rule relates modules of different
hosts (an interface on web with a connection on db; two hosts' connections to one remote in
flowdiagnoser:shared=on; one host's probes for another's connections). Labels follow: a fault's
targets and collateral are modules and their graph neighbours, which never cross hosts.

A run whose modules have one host, or none recorded (every run older than several monitored
hosts, and every run of one monitored host), is left as it is: the same stretches, the same results.
"""

from __future__ import annotations

from dataclasses import fields

import numpy as np

from rundir import repair


def module_hosts(mods) -> dict[int, str | None]:
    """Per module (rows (id, kind, name, key, attrs, ...)), the host its attrs record, else None."""
    out = {}
    for i, _k, _name, _key, attrs, *_ in mods:
        host = repair.as_dict(attrs).get("host")
        out[i] = host if isinstance(host, str) and host else None
    return out


def several(hosts: dict[int, str | None]) -> bool:
    return len(set(hosts.values())) > 1


def split_by_host(stretches: list, hosts: dict[int, str | None]) -> list:
    """Each stretch cut into one stretch per host of its modules (in the order hosts first appear in
    it), each with `host` set; the list itself when the modules have fewer than two hosts."""
    if not several(hosts):
        return stretches
    out = []
    for st in stretches:
        groups: dict[str | None, list[int]] = {}
        for i, m in enumerate(st.modules):
            groups.setdefault(hosts.get(m), []).append(i)
        for host, rows in groups.items():
            out.append(subset(st, np.asarray(rows, dtype=np.intp), host))
    return out


def subset(st, rows: np.ndarray, host: str | None):
    """The stretch's modules at `rows` (indices, ascending), over the same snapshots, with the edges
    among them (an edge to a module left out is dropped: it would cross hosts)."""
    pos = {int(r): i for i, r in enumerate(rows.tolist())}
    edges = [(pos[p], pos[c]) for p, c in st.edges if p in pos and c in pos]
    counters = {d: type(c)(*(getattr(c, f.name)[rows] for f in fields(c))) for d, c in st.counters.items()}
    tcpstate = None
    if st.tcpstate is not None:
        ts = st.tcpstate
        tcpstate = type(ts)(*(getattr(ts, f.name) if f.name == "mono" else getattr(ts, f.name)[rows]
                              for f in fields(ts)))
    probes = None
    if st.probes is not None:
        p = st.probes
        probes = type(p)(p.bursts, p.mono, p.prev, p.remote[rows], {d: a[rows] for d, a in p.since.items()},
                         {d: a[rows] for d, a in p.until.items()})
    remote = None if st.remote is None else [st.remote[i] for i in rows.tolist()]
    detached = None if st.detached is None else st.detached[rows]
    return type(st)([st.modules[i] for i in rows.tolist()], [st.kinds[i] for i in rows.tolist()], edges, st.seqs,
                   counters, detached, remote, tcpstate, probes, None, host)

"""Plain per-snapshot reference for `flowdiagnoser:probe=on` (issue 21), written from docs/diagnosis.md
one module and one snapshot at a time, with lists and dicts; it shares no code with analysis.model.probes or
analysis.variants (it reads a stretch's probe data: the per-burst table `Stretch.probes.bursts.table`,
the snapshot times, each module's remote and the snapshots' counters, and finds the silences itself).

Importing this module wraps tests.support.reference.REFERENCE["flowdiagnoser"] (the tcpstate wrapper)
so that `reference(stretch, variant)` takes the probe parameters; with probe off the wrapped reference
runs unchanged. `ref_evidence(stretches, ahead)` is the evidence over a whole run (silences run
across stretches), `ref_run(stretches, variant)` the results of a whole run (confirm left out).
"""

from __future__ import annotations

import numpy as np

import tests.support.reference_tcpstate as _tcpstate
from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, STALLED
from tests.support import reference as _reference
from tests.support.reference_shared_peer import ref_flowdiagnoser_shared

NONE, ANSWERED, UNANSWERED, RECOVERING, AFTERMATH = 0, 1, 2, 3, 4
LOOKBACK = 2.0   # s before a silence in which an unanswered burst makes a later answer AFTERMATH
LOWER = ("ipeth", "ip", "eth")
_inner = _reference.REFERENCE["flowdiagnoser"]


def _bursts_of(sp) -> list[dict]:
    t = sp.bursts.table
    if t is None or not len(t):
        return []
    return [{"remote": r, "sent": float(s), "done": float(dn), "answer": float(a)}
            for r, s, dn, a in zip(t["remote"], t["sent"], t["done"], t["answer"], strict=True) if r is not None]


def ref_evidence(stretches: list[Stretch], ahead: float) -> list[dict[str, np.ndarray]]:
    """Per stretch, per direction, (modules, snapshots) evidence: 0 none, 1 answered, 2 unanswered."""
    out = [{d: np.zeros((st.n, st.t), dtype=np.int8) for d in DIRS} for st in stretches]
    series: dict = {}   # (bursts object, module) -> its cells
    for k, st in enumerate(stretches):
        sp = st.probes
        if sp is None:
            continue
        for i, m in enumerate(st.modules):
            if st.kinds[i] != "tcp" or sp.remote[i] < 0:
                continue
            for c in range(st.t):
                series.setdefault((id(sp.bursts), m), []).append({
                    "seq": int(st.seqs[c]), "mono": float(sp.mono[c]), "prev": float(sp.prev[c]), "k": k, "i": i, "c": c,
                    "remote": sp.bursts.keys[sp.remote[i]], "bursts": sp.bursts,
                    "backoff": float(st.tcpstate.backoff[i, c]) if st.tcpstate is not None else np.nan,
                    "sent_at": float(st.tcpstate.data_sent_at[i, c]) if st.tcpstate is not None else np.nan,
                    "tm": {d: float(st.counters[d].tm[i, c]) for d in DIRS},
                    "err": {d: float(st.counters[d].errors[i, c]) for d in DIRS}})
    for cells in series.values():
        cells.sort(key=lambda x: x["seq"])
        bursts = [b for b in _bursts_of(stretches[cells[0]["k"]].probes) if b["remote"] == cells[0]["remote"]]
        for d in DIRS:
            i = 0
            def silent(x, d=d):   # no data moved; outbound, nothing but retransmissions
                return x["tm"][d] == 0 or (d == "out" and x["tm"][d] <= x["err"][d])

            while i < len(cells):
                if not silent(cells[i]):
                    i += 1
                    continue
                j = i
                while j + 1 < len(cells) and cells[j + 1]["seq"] == cells[j]["seq"] + 1 and silent(cells[j + 1]):
                    j += 1
                a = cells[i]["prev"]   # the time of the run's snapshot before the silence's first
                b = cells[j]["mono"]
                for x in cells[i:j + 1]:
                    out[x["k"]][d][x["i"], x["c"]] = _one(bursts, a, b, x["prev"], x["mono"], ahead, x["backoff"], x["sent_at"])
                i = j + 1
    return out


def _one(bursts: list[dict], a: float, b: float, p: float, m: float, ahead: float, backoff: float = np.nan,
         sent_at: float = np.nan) -> int:
    """Snapshot (p, m] of a silence (a, b]: of the bursts sent in (a, min(b, m + ahead)] and known by
    m + ahead (bursts sent at one instant are one, answered if one of them is), the one whose scope
    [sent, done] covers the snapshot (the last sent by m, if done after p), else the first sent after m,
    else the last sent by m. Answered after an unanswered one of the silence, with the time since the
    path was seen working (w: the answer of the first answered one after the last unanswered one) no
    longer than the silence had lasted then (m - w <= w - a): RECOVERING; where tcp_info says the
    connection is backed off (backoff >= 1), RECOVERING while it sent nothing after w instead. The
    unanswered one sent within LOOKBACK before the silence (at s_u <= a): AFTERMATH while m - a <= w - s_u."""
    horizon = m + ahead
    known = [x for x in bursts if x["done"] <= horizon and a < x["sent"] <= min(b, horizon)]
    groups: dict[float, bool] = {}
    done: dict[float, float] = {}
    first_answer: dict[float, float] = {}
    for x in known:
        s = x["sent"]
        groups[s] = groups.get(s, False) or x["answer"] <= horizon
        done[s] = min(done.get(s, np.inf), x["done"])
        if x["answer"] <= horizon:
            first_answer[s] = min(first_answer.get(s, np.inf), x["answer"])
    order = sorted(groups)
    if not order:
        return NONE
    by_m = [s for s in order if s <= m]
    after = [s for s in order if s > m]
    if by_m and done[by_m[-1]] > p:
        speak = by_m[-1]
    elif after:
        speak = after[0]
    else:
        speak = by_m[-1]
    if not groups[speak]:
        return UNANSWERED
    # The bursts sent within LOOKBACK before the silence, known by then, join the walk back.
    for x in bursts:
        if x["done"] <= horizon and a - LOOKBACK < x["sent"] <= a:
            s = x["sent"]
            groups[s] = groups.get(s, False) or x["answer"] <= horizon
            if x["answer"] <= horizon:
                first_answer[s] = min(first_answer.get(s, np.inf), x["answer"])
    every = sorted(groups)
    unanswered = [s for s in every if s < speak and not groups[s]]
    if not unanswered:
        return ANSWERED
    w = first_answer[min(s for s in every if s > unanswered[-1] and groups[s])]
    if unanswered[-1] <= a:   # the path was dead just before the silence: AFTERMATH, outage-long
        return AFTERMATH if m - a <= w - unanswered[-1] else ANSWERED
    if backoff >= 1:   # tcp_info: its own backed-off timer, nothing sent since the path worked again
        return RECOVERING if sent_at <= w else ANSWERED
    return RECOVERING if m - w <= w - a else ANSWERED


def apply_probe_rule(stretch: Stretch, base: dict, evidence: dict) -> dict:
    """The probe rule (docs/diagnosis.md) on one stretch's results (dir -> modules x snapshots)."""
    out = {}
    children = {m: [c for p, c in stretch.edges if p == m] for m in range(stretch.n)}
    for d in DIRS:
        c = stretch.counters[d]
        res = base[d].copy()
        other = stretch.counters["in" if d == "out" else "out"]
        for t in range(stretch.t):
            def silent_lower(m, t=t, c=c):
                return [ch for ch in children[m] if stretch.kinds[ch] in LOWER and c.tm[ch, t] == 0]

            def deaf_lower(m, t=t, other=other):
                return [ch for ch in children[m] if stretch.kinds[ch] in LOWER and other.tm[ch, t] == 0]
            cleared = set()

            def clear_below(m, silent_lower=silent_lower, cleared=cleared):
                todo = silent_lower(m)
                while todo:
                    low = todo.pop()
                    if low not in cleared:
                        cleared.add(low)
                        todo += silent_lower(low)
            for m in range(stretch.n):
                waits = (stretch.kinds[m] == "tcp" and c.tm[m, t] == 0 and not c.has_wait[m, t]
                         and base[d][m, t] in (BLOCKED, STALLED))
                ev = evidence[d][m, t]
                lowers = [ch for ch in children[m] if stretch.kinds[ch] in LOWER]
                if waits and ev == RECOVERING and lowers:   # over any lower layer: blocked by the past outage
                    res[m, t] = BLOCKED
                    continue
                if waits and ev == AFTERMATH and lowers:    # the same, and the answer clears the silent stack
                    res[m, t] = BLOCKED
                    clear_below(m)
                    continue
                if not waits or ev == NONE or not (silent_lower(m) or deaf_lower(m)):
                    continue
                if ev == UNANSWERED:       # over a lower layer silent this way, or the other
                    res[m, t] = BLOCKED
                    continue
                if not silent_lower(m):    # an answer changes only the silent stack
                    continue
                res[m, t] = STALLED
                clear_below(m)
            for low in cleared:
                if res[low, t] == STALLED:
                    res[low, t] = BLOCKED
        out[d] = res
    return out


def _finish(stretch: Stretch, res: dict, confirm: int, tcpstate: bool, confirm_tcp: int) -> dict:
    ts = stretch.tcpstate
    per_module = [(confirm_tcp or confirm) if k == "tcp" else confirm for k in stretch.kinds]
    out = {}
    for d in DIRS:
        r = res[d].copy()
        if tcpstate and ts is not None:
            for m in range(stretch.n):
                for t in range(stretch.t):
                    if (stretch.kinds[m] == "tcp" and r[m, t] == STALLED and ts.known[m, t]
                            and not _tcpstate.tcp_is_stuck(ts, m, t)):
                        r[m, t] = BLOCKED
        pos = np.zeros(r.shape, dtype=bool)
        for m in range(stretch.n):
            streak = 0
            for t in range(stretch.t):
                streak = streak + 1 if r[m, t] == STALLED else 0
                pos[m, t] = streak >= per_module[m]
        out[d] = (r, pos)
    return out


def ref_flowdiagnoser_probe(stretch: Stretch, theta=2, queues=False, confirm=1, shared=False, tcpstate=False,
                            confirm_tcp=0, probe=False, probe_ahead=1.0, evidence=None):
    if not probe:
        return _inner(stretch, theta=theta, queues=queues, confirm=confirm, shared=shared, tcpstate=tcpstate,
                      confirm_tcp=confirm_tcp)
    base = ref_flowdiagnoser_shared(stretch, theta=theta, queues=queues, confirm=1, shared=shared)
    if evidence is None:
        evidence = ref_evidence([stretch], probe_ahead)[0]
    res = apply_probe_rule(stretch, {d: base[d][0] for d in DIRS}, evidence)
    return _finish(stretch, res, confirm, tcpstate, confirm_tcp)


def ref_run(stretches: list[Stretch], variant) -> list[dict]:
    """A whole run's results by the reference (silences across stretches); the variant's confirm must be 1."""
    p = variant.params
    assert p.get("confirm", 1) == 1 and p.get("confirm_tcp", 0) in (0, 1)
    evidence = ref_evidence(stretches, p.get("probe_ahead", 1.0))
    return [ref_flowdiagnoser_probe(st, **p, evidence=ev) for st, ev in zip(stretches, evidence, strict=True)]


_reference.REFERENCE["flowdiagnoser"] = ref_flowdiagnoser_probe

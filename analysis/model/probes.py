"""Probe evidence (run format 5's `probes` table): for each TCP connection, direction and snapshot,
whether the burst of the collector's probes to the connection's remote that speaks for the snapshot
was answered (ANSWERED), was not (UNANSWERED), was answered after an unanswered one while the
connection still backs off from that outage (RECOVERING, or AFTERMATH when that outage ended just
before the silence began), or no burst speaks for it (NONE).
`flowdiagnoser:probe=on` (analysis.variants.flowdiagnoser_probe) reads it; docs/diagnosis.md has the
rule with a worked example.

The collector (harness/collector/probe.py, docs/probes.md) sends a *burst* of probes (half-open TCP
connects from fresh source ports) to a busy connection's remote address and port once it has been
silent for about 0.3 s, and again about once a second while it stays silent. A row per probe:
`burst`, `remote` ('ADDR:PORT', '[ADDR]:PORT' for IPv6), `sent`, `done` (reference clock, as
snapshots.mono) and `outcome`; `answered` and `refused` mean the remote answered over the network.

**Bursts.** The probes sharing (`burst`, `remote`) are one burst. It was *sent* when its first probe
was; at time T it is *known* when one of its probes is done by T, and *answered* when one of its
answered or refused probes is done by T (else, known, it is unanswered). Two bursts to one remote
sent at the same instant count as one. A burst is evidence for every connection whose remote (its
module's attrs `dst` and `dport`, else its name `tcp SRC:SPORT>DST:DPORT`) is the burst's remote:
connections to one remote address and port share a burst. Addresses compare as addresses
(`ipaddress`: an IPv4-mapped IPv6 address is the IPv4 one).

**Evidence of a snapshot: the burst that speaks for its time.** A *silence* of connection C in
direction d is a maximal run of snapshots of C with consecutive seq numbers in which C moved no data
in d (Δtotal_msgs = 0; outbound, also a snapshot whose data segments were all retransmissions,
Δtotal_msgs <= Δerrors: a retransmission timeout's resend is no progress). Its window begins at `a`,
the time of the run's snapshot before its first one (the interval in which C last moved, or was not
there yet; -inf at the run's start), and ends at `b`, the time of its last snapshot. For snapshot t
of a silence, interval (p, m], with T = m + ahead, the candidates are the bursts to C's remote sent
in (a, min(b, T)] and known at T. A burst speaks for its scope, [sent, done] (issue 35): the last
candidate sent by m if done > p; else the first candidate sent after m (a later burst takes over
where the earlier one's scope ended; the silence's first snapshots take its first burst); else the
last one sent by m. ANSWERED if that burst is answered at T, UNANSWERED if not; NONE when there is no
candidate (a burst goes about 0.3 s into a silence and a timeout is known 1 s later, so the first
snapshots of a silence may have none yet), and in every snapshot in which C moved data in d.

**RECOVERING** replaces ANSWERED where an earlier candidate of the silence is unanswered (the path
was dead during this silence and works now) and C may still be waiting for the retransmission timer
the outage backed off: with w the answer of the first answered candidate after the last unanswered
one, where C's tcp_info (Stretch.tcpstate) says it is backed off (backoff >= 1), while it has sent
no data since (data_sent_at <= w); elsewhere (a receiver cannot see its sender's timer; no tcp_info)
while m - w <= w - a (a backed-off RTO doubles: the next retransmission comes within about as long
as the connection has already waited). Once the path works again, a connection that lost packets
waits for its next retransmission, still silent; the bursts then are answered, and taken as they
come would blame the connection for the path's outage (on the stored net_fault runs with probes, 222
TCP false positives in the tails of ip_drops; on thesis-3.3, 46 of the 52 left).

**AFTERMATH** replaces ANSWERED where the unanswered burst came *before* the silence, sent at s_u
within LOOKBACK_S (2 s) before it began: the path was dead, the connection moved a little once it
returned (an RTO's retransmission and what it released) and is silent again, while the remote's timer,
backed off by the outage, may still hold the next retransmission. It lasts while the silence is no
longer than the outage the probes saw: m - a <= w - s_u (a backed-off RTO is at most about as long as
the outage that backed it off). A receiver cannot see its sender's timer, and these silences are a
download's: thesis-3.3's three repetitions had 55 TCP false positives of this kind 0.4-2 s after an
ip_drop (docs/probes.md).

Everything a snapshot's evidence depends on is known `ahead` seconds after it (the burst's probes
done by T, the silence's snapshots up to T), and its silence's start: the live engine settles a
snapshot once it has read that far and carries the start of each silence from one window to the
next (docs/live.md), and gives the offline result.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from rundir.db import PROBE_ANSWERED
from rundir.repair import as_dict

NONE, ANSWERED, UNANSWERED, RECOVERING, AFTERMATH = 0, 1, 2, 3, 4
# AFTERMATH's look-back: an unanswered burst sent this long before a silence began still speaks for
# it. TCP's loss recovery after an outage of 1-3 s moves a segment or two and goes silent again within
# about 2 s of the path's return (thesis-3.3: the downloads' silences 0.4-1.2 s after an ip_drop
# ended); 3 s took 5 snapshots of tcp_drop runs whose bursts timed out in a congested queue.
LOOKBACK_S = 2.0
# Look-ahead: a silence's first burst goes `after` (0.3 s) into it and a timeout is known `timeout`
# (1 s) later, so its outcome is known about 1.3 s after the silence's first snapshot, plus a snapshot
# or two of the collector's timing: 1.5 s lets the silence's first snapshots have it. With 1.0 the
# first three snapshots of every ip_drop had none and fell back to Θ (thesis-3.3: 32 TCP FPs of the
# 108 left with probe=on were those). The live engine settles a snapshot this much later.
AHEAD_S = 1.5
TABLE = ["burst", "remote", "sent", "done", "answer"]


def remote_key(text) -> str | None:
    """'ADDR:PORT' or '[ADDR]:PORT' in one spelling per address (None for anything that is no text)."""
    if not isinstance(text, str) or not text.strip():
        return None
    t = text.strip()
    addr, sep, port = t[1:].partition("]:") if t.startswith("[") else t.rpartition(":")
    try:
        ip = ipaddress.ip_address(addr)
        number = int(port)
    except ValueError:
        return t
    if sep == "" or number < 0:
        return t
    if ip.version == 6 and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return f"[{ip}]:{number}" if ip.version == 6 else f"{ip}:{number}"


def module_remotes(mods: list[tuple]) -> dict[int, str | None]:
    """Per TCP module (rows (id, kind, name, key, attrs, ...)), its remote as remote_key spells it: attrs
    `dst` and `dport`, else the name's 'DST:DPORT' (as the collector's prober takes it)."""
    out = {}
    for mid, kind, name, _key, attrs, *_ in mods:
        if kind != "tcp":
            continue
        a = as_dict(attrs)
        dst, dport = a.get("dst"), a.get("dport")
        if isinstance(dst, str) and dst and dport is not None:
            text = f"[{dst}]:{dport}" if ":" in dst else f"{dst}:{dport}"
        else:
            text = str(name).rsplit(">", 1)[1] if ">" in str(name) else None
        out[mid] = remote_key(text)
    return out


def burst_table(probes: pd.DataFrame | None) -> pd.DataFrame:
    """Clean probe rows (rundir.read.clean_probes) -> one row per burst (`burst`, `remote`): its first
    `sent`, first `done`, and `answer`, the first done of its answered or refused probes (inf if none).
    Minima only, so the tables of parts of the rows merge into the table of all (merge_tables)."""
    if probes is None or not len(probes):
        return pd.DataFrame({c: pd.Series(dtype=object if c == "remote" else float) for c in TABLE})
    done = probes["done"].to_numpy(dtype=float)
    frame = pd.DataFrame({"burst": probes["burst"].to_numpy(dtype=float),
                          "remote": [remote_key(r) for r in probes["remote"]],
                          "sent": probes["sent"].to_numpy(dtype=float), "done": done,
                          "answer": np.where(probes["outcome"].isin(PROBE_ANSWERED).to_numpy(), done, np.inf)})
    return merge_tables(frame)


def merge_tables(*tables: pd.DataFrame) -> pd.DataFrame:
    """Burst tables of parts of a run's probes -> the table of them all (per burst the minima)."""
    frame = pd.concat([t for t in tables if len(t)] or [tables[0]], ignore_index=True)
    frame = frame[frame["remote"].notna()]
    return frame.groupby(["burst", "remote"], as_index=False, sort=True)[["sent", "done", "answer"]].min()


@dataclass
class Bursts:
    """A run's bursts as arrays sorted by (remote, sent); bursts to one remote sent at one instant merged."""

    keys: list[str]            # the remotes; `key` indexes them
    key: np.ndarray            # int64 per burst
    sent: np.ndarray
    done: np.ndarray           # its first probe done
    answer: np.ndarray         # its first answered probe done (inf: none)
    table: pd.DataFrame = field(repr=False, default=None)   # burst_table's rows, as given

    @classmethod
    def from_table(cls, table: pd.DataFrame) -> Bursts:
        t = table[table["remote"].notna()] if len(table) else table
        g = t.groupby(["remote", "sent"], as_index=False, sort=True)[["done", "answer"]].min() if len(t) else t
        keys = sorted(set(g["remote"])) if len(g) else []
        code = {k: i for i, k in enumerate(keys)}
        key = np.array([code[r] for r in g["remote"]], dtype=np.int64) if len(g) else np.zeros(0, np.int64)
        sent = g["sent"].to_numpy(dtype=float) if len(g) else np.zeros(0)
        order = np.lexsort((sent, key))
        return cls(keys, key[order], sent[order], (g["done"].to_numpy(dtype=float) if len(g) else np.zeros(0))[order],
                   (g["answer"].to_numpy(dtype=float) if len(g) else np.zeros(0))[order], table)


@dataclass
class StretchProbes:
    """One stretch's view of the run's bursts (Stretch.probes): the times, each TCP module's remote, and
    per direction the window of the silence each cell is in (NaN where the module moved data in that
    direction, or is no TCP module with a known remote). Silences run across stretches: `attach` finds
    them over every stretch it is given."""

    bursts: Bursts
    mono: np.ndarray                 # (snapshots,) their times
    prev: np.ndarray                 # (snapshots,) the time of the run's snapshot before each (-inf: none)
    remote: np.ndarray               # (modules,) int64: index into bursts.keys of a TCP module's remote, -1 none
    since: dict[str, np.ndarray]     # per direction (modules, snapshots): a, the silence's window start
    until: dict[str, np.ndarray]     # per direction (modules, snapshots): b, its last snapshot's time

    def take(self, cols) -> StretchProbes:
        return StretchProbes(self.bursts, self.mono[cols], self.prev[cols], self.remote, {d: a[:, cols] for d, a in self.since.items()},
                             {d: a[:, cols] for d, a in self.until.items()})


def attach(stretches, table: pd.DataFrame, seqs: np.ndarray, mono: np.ndarray, remotes: dict,
           before: float = -np.inf, carry: dict | None = None) -> None:
    """Set `Stretch.probes` of every stretch: the bursts of `table` (burst_table), each TCP module's
    remote (`remotes`: module_remotes), and the silences of the TCP modules with a known remote, found
    over all the stretches given (they must have their counters). `seqs`, `mono`: every snapshot the
    stretches may hold, ascending; `before`: the time of the snapshot before the first (the live
    engine's window; -inf for a whole run); `carry`: (module, direction) -> (seq, a) of the silences
    going on at the snapshot before the first (`ongoing`), which a silence continues when its first
    snapshot is that seq + 1."""
    bursts = Bursts.from_table(table)
    code = {k: i for i, k in enumerate(bursts.keys)}
    prev_all = np.concatenate([[before], mono[:-1]]).astype(float)
    dirs = list(stretches[0].counters) if stretches else []
    sizes = [st.n * st.t for st in stretches]
    offsets = np.concatenate([[0], np.cumsum(sizes, dtype=np.int64)])
    if any(code.get(r, -1) >= 0 for r in remotes.values()):
        flat = {w: {d: np.full(int(offsets[-1]), np.nan) for d in dirs} for w in ("since", "until")}
    else:   # no connection has a remote with bursts: no silence is written, one read-only NaN serves all
        nan = np.broadcast_to(np.nan, int(offsets[-1]))
        flat = {w: dict.fromkeys(dirs, nan) for w in ("since", "until")}
    parts, ids = [], {}
    for k, st in enumerate(stretches):
        at = np.searchsorted(seqs, st.seqs)
        rem = np.array([code.get(remotes.get(m), -1) if kind == "tcp" else -1
                        for m, kind in zip(st.modules, st.kinds, strict=True)], dtype=np.int64) if code else \
            np.full(st.n, -1, dtype=np.int64)   # no bursts: no module has a remote with any
        a, b = offsets[k], offsets[k + 1]
        st.probes = StretchProbes(bursts, mono[at].astype(float), prev_all[at], rem,
                                  {d: flat["since"][d][a:b].reshape(st.n, st.t) for d in dirs},
                                  {d: flat["until"][d][a:b].reshape(st.n, st.t) for d in dirs})
        rows = np.flatnonzero(rem >= 0)
        if len(rows):
            mids = np.array([ids.setdefault(st.modules[r], len(ids)) for r in rows], dtype=np.int64)
            parts.append(((a + rows[:, None] * st.t + np.arange(st.t)).ravel(), np.repeat(mids, st.t),
                          np.tile(st.seqs, len(rows)), np.tile(mono[at], len(rows)), np.tile(prev_all[at], len(rows)),
                          *(st.counters[d].tm[rows].ravel() for d in dirs),
                          *(st.counters[d].errors[rows].ravel().astype(float) for d in dirs)))
    if not parts:
        return
    cell, mod, seq, cell_mono, prev, *rest = (np.concatenate(x) for x in zip(*parts, strict=True))
    tms, errs = rest[:len(dirs)], rest[len(dirs):]
    order = np.lexsort((seq, mod))
    cell, mod, seq, cell_mono, prev = (x[order] for x in (cell, mod, seq, cell_mono, prev))
    mod_id = np.array(list(ids), dtype=object)[mod] if carry else None
    n = len(order)
    cont = np.zeros(n, dtype=bool)       # the same module's snapshot before comes just before
    cont[1:] = (mod[1:] == mod[:-1]) & (seq[1:] == seq[:-1] + 1)
    idx = np.arange(n)
    for d, tm, err in zip(dirs, tms, errs, strict=True):
        # A connection silent outbound but for retransmissions (data segments out no more than the
        # retransmitted ones) makes no progress: its silence goes on. An RTO's retransmission would
        # otherwise start a new silence, whose first burst, sent once the fault is over, is answered.
        silent = (tm[order] == 0) | ((tm[order] <= err[order]) if d == "out" else False)
        joined = np.zeros(n, dtype=bool)   # silent, and so was the snapshot before
        joined[1:] = cont[1:] & silent[1:] & silent[:-1]
        first = np.maximum.accumulate(np.where(silent & ~joined, idx, 0))
        goes_on = np.zeros(n, dtype=bool)
        goes_on[:-1] = joined[1:]
        last = np.minimum.accumulate(np.where(silent & ~goes_on, idx, n)[::-1])[::-1]
        start = prev[first]
        if carry:
            heads = np.flatnonzero(silent & ~joined)
            old = [carry.get((m, d)) for m in mod_id[heads].tolist()]
            go_on = np.array([c is not None and c[0] + 1 == q for c, q in zip(old, seq[heads].tolist(), strict=True)],
                             dtype=bool)
            if go_on.any():
                start = start.copy()
                start[heads[go_on]] = [c[1] for c, g in zip(old, go_on.tolist(), strict=True) if g]
        flat["since"][d][cell[silent]] = start[first[silent]]
        flat["until"][d][cell[silent]] = cell_mono[last[silent]]


def ongoing(stretches, seq: int) -> dict:
    """(module, direction) -> (seq, a) of every silence that snapshot `seq` is in (attach's `carry`)."""
    out = {}
    for st in stretches:
        sp = st.probes
        col = np.flatnonzero(st.seqs == seq)
        if sp is None or not len(col):
            continue
        for d, since in sp.since.items():
            for row in np.flatnonzero(~np.isnan(since[:, col[0]])).tolist():
                out[(st.modules[row], d)] = (int(seq), float(since[row, col[0]]))
    return out


# ---------------------------------------------------------------- evidence over a batch of cells


def cell_evidence(batch, d: str, cells: np.ndarray, ahead: float = AHEAD_S) -> np.ndarray:
    """NONE, ANSWERED, UNANSWERED, RECOVERING or AFTERMATH (int8) of direction d at the given cells of the batch (ascending flat
    indices); the rule is in the module docstring."""
    out = np.zeros(len(cells), dtype=np.int8)
    k_of = np.searchsorted(batch.offsets, cells, side="right") - 1
    at = np.flatnonzero(np.append(True, k_of[1:] != k_of[:-1])) if len(cells) else np.zeros(0, np.int64)
    parts: dict[int, list] = {}
    for a, b in zip(at.tolist(), [*at[1:].tolist(), len(cells)], strict=True):
        k = int(k_of[a])
        st = batch.stretches[k]
        sp = getattr(st, "probes", None)
        if sp is None or not len(sp.bursts.key):
            continue
        local = cells[a:b] - batch.offsets[k]
        row, col = local // st.t, local % st.t
        ts = st.tcpstate
        if ts is None:
            backoff = sent_at = np.full(len(row), np.nan)
        else:   # unknown (no tcp_info row yet): NaN, which no comparison holds for
            backoff, sent_at = ts.backoff[row, col], ts.data_sent_at[row, col]
        parts.setdefault(id(sp.bursts), [sp.bursts, []])[1].append(
            (np.arange(a, b), sp.remote[row], sp.mono[col], sp.since[d][row, col], sp.until[d][row, col],
             sp.prev[col], backoff, sent_at))
    for bursts, chunks in parts.values():
        where, key, mono, since, until, prev, backoff, sent_at = (np.concatenate(x) for x in zip(*chunks, strict=True))
        keep = (key >= 0) & ~np.isnan(since)
        out[where[keep]] = _evidence(bursts, key[keep], mono[keep], since[keep], until[keep], ahead, prev[keep],
                                     backoff[keep], sent_at[keep])
    return out


def _evidence(b: Bursts, k: np.ndarray, m: np.ndarray, since: np.ndarray, until: np.ndarray,
              ahead: float, prev: np.ndarray | None = None, backoff: np.ndarray | None = None,
              sent_at: np.ndarray | None = None) -> np.ndarray:
    """Evidence of silent cells with remotes k, times m, intervals (prev, m] and silence windows
    (since, until]: the module docstring's rule (the burst whose scope covers the snapshot, else the
    next one known, else the last one; RECOVERING for an answer that follows an unanswered burst of the
    silence within the back-off bound, AFTERMATH for one that follows an unanswered burst sent within
    LOOKBACK_S before the silence)."""
    n = len(k)
    horizon = m + ahead
    hi = np.minimum(until, horizon)
    p = m if prev is None else prev
    j0 = _count_le(b.key, b.sent, k, since)       # the first burst sent after the silence began (if of key k)
    jm = _count_le(b.key, b.sent, k, m)            # ... after the last one sent by the snapshot (m <= hi)
    jh = _count_le(b.key, b.sent, k, hi)           # ... after the last one sent within the silence and look-ahead

    def known(j, rows):
        return b.done[j] <= horizon[rows]

    # cur: the last burst known by T sent in (since, min(m, hi)]
    cur = np.full(n, -1, dtype=np.int64)
    rows, j = np.arange(n), jm - 1
    while len(rows):
        ok = j >= j0[rows]
        rows, j = rows[ok], j[ok]
        hit = known(j, rows)
        cur[rows[hit]] = j[hit]
        rows, j = rows[~hit], j[~hit] - 1
    # nxt: the first burst known by T sent in (m, hi]
    nxt = np.full(n, -1, dtype=np.int64)
    rows, j = np.arange(n), jm.copy()
    while len(rows):
        ok = j < jh[rows]
        rows, j = rows[ok], j[ok]
        hit = known(j, rows)
        nxt[rows[hit]] = j[hit]
        rows, j = rows[~hit], j[~hit] + 1
    covers = cur >= 0
    covers[covers] = b.done[cur[covers]] > p[covers]
    speak = np.where(covers | (nxt < 0), cur, nxt)
    has = speak >= 0
    ev = np.zeros(n, dtype=np.int8)
    ans = np.zeros(n, dtype=bool)
    ans[has] = b.answer[speak[has]] <= horizon[has]
    ev[has] = np.where(ans[has], ANSWERED, UNANSWERED)
    # RECOVERING: walk back from an answered speaking burst over the known bursts of the silence (and
    # of the LOOKBACK_S before it: AFTERMATH); an unanswered one found -> w, the answer of the first
    # answered one after it, and s_u, when it was sent.
    jb = _count_le(b.key, b.sent, k, since - LOOKBACK_S)   # ... and of the LOOKBACK_S before it
    rows = np.flatnonzero(ans)
    w = b.answer[speak[rows]].copy() if len(rows) else np.zeros(0)
    j = speak[rows] - 1
    found = np.zeros(n, dtype=bool)
    wall = np.full(n, np.nan)
    s_u = np.full(n, np.inf)
    while len(rows):
        ok = j >= jb[rows]
        rows, j, w = rows[ok], j[ok], w[ok]
        kn = known(j, rows)
        una = kn & (b.answer[j] > horizon[rows])
        found[rows[una]] = True
        wall[rows[una]] = w[una]
        s_u[rows[una]] = b.sent[j[una]]
        go = ~una
        upd = go & kn
        w = np.where(upd, b.answer[j], w)
        rows, j, w = rows[go], j[go] - 1, w[go]
    # The connection's own timer where tcp_info says it is backed off (backoff >= 1): recovering while it
    # has sent nothing since the path was seen working; else the doubling bound (a receiver cannot see
    # the sender's timer; a run without tcp_info). AFTERMATH (the unanswered burst before the silence):
    # the silence no longer than the outage the probes saw (from s_u to w), timer or not.
    late = s_u <= since
    bound = m - wall <= wall - since
    if backoff is not None:
        bound = np.where(backoff >= 1, sent_at <= wall, bound)
    bound = np.where(late, m - since <= wall - s_u, bound)
    rec = found & bound
    ev[rec] = np.where(late[rec], AFTERMATH, RECOVERING)
    return ev


def _count_le(bkey: np.ndarray, bsent: np.ndarray, qkey: np.ndarray, qt: np.ndarray) -> np.ndarray:
    """Per query, how many bursts (sorted by key, sent) come before it: key < qkey, or key == qkey and
    sent <= qt. Exact (no arithmetic on the times)."""
    nb = len(bkey)
    keys = np.concatenate([bkey, qkey])
    times = np.concatenate([bsent, qt])
    tie = np.concatenate([np.zeros(nb, np.int8), np.ones(len(qkey), np.int8)])
    order = np.lexsort((tie, times, keys))
    is_b = order < nb
    cum = np.cumsum(is_b)
    out = np.empty(len(qkey), dtype=np.int64)
    out[order[~is_b] - nb] = cum[~is_b]
    return out

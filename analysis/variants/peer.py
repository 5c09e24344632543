"""Peer comparison, a baseline after the PVFS diagnosis paper (seeds/pvfs-diagnosis-paper.txt).

The paper's hypothesis: fault-free peers that do similar work behave alike, and the faulty one
deviates from them ("we statistically compare the same metrics across servers to discover the faulty
server"; a server is anomalous when its distance to the others exceeds a threshold, the majority
assumed fault-free). Here, one snapshot and one direction at a time, with the same counters NeST has:

- **Peers** of a TCP connection are the *busy* TCP connections above the same lower-layer module
  (a child of kind ipeth, ip or eth): the connections sharing that interface. Busy = the connection
  has demand in this direction: it moved data segments, or a parent (its socket) moved messages or
  waited, or it is a root of the run (no upper layer ever known: work assumed, thesis 3.6.2, as in
  FlowDiagnoser). A detached connection (its socket not reported yet, or closed already) is busy
  only if it moved. A connection nobody uses is no peer: the paper compares servers under the same
  workload, and an idle connection's silence says nothing.
- **TCP, STALLED**: a busy connection whose progress (Δtotal_msgs, data segments) is an outlier
  below its peers: it has at least `min_peers` busy peers on some lower-layer module, their median
  progress M is above zero, and it moved less than M / k (no progress at all always counts when
  M > 0). With peers {0, 100} the median is 50: a silent connection beside one silent and one moving
  peer is blamed. A busy connection that is not an outlier is BLOCKED if it did not move (waiting on
  something its peers share), HEALTHY if it moved; an inactive idle one is DONTCARE.
- **The interface (ipeth, ip, eth), STALLED** when it moved nothing while at least one busy
  connection is above it and none of them moved: all its busy connections are silent together. The
  monitored host has one interface, so it has no peer to be compared with; a fault that every peer
  shows at once is in what they share (the PVFS reading: peer comparison localises a fault to the
  one that deviates; when none deviates, the common part is the only candidate). A single busy
  connection cannot be compared with anything: its silence is the interface's, never the
  connection's (min_peers). An interface below another one (eth under ip) sees the connections above
  that one. Otherwise an interface is HEALTHY if it moved, else DONTCARE.
- **Applications and sockets** (and any other kind): FlowDiagnoser's result (`flowdiagnoser:theta=2`,
  thesis 3.3.1 and Table 2.2), which their wait counter decides directly. Peer comparison among the
  sockets of an application would miss an application pause (all its sockets stop together) and
  applications do different work (wget vs iperf), against the paper's premise; so the app and
  socket rows stay the baseline's and a comparison of variants isolates the TCP and ip+eth rules.

Positive = STALLED. Parameters: `k` (outlier ratio, default 10: an order of magnitude below the
median peer; `k=inf` blames only connections that moved nothing) and `min_peers` (busy peers needed
for a comparison, default 2: with the connection itself at least three, so that a majority exists,
as the paper assumes). Neither is fitted to data (the paper trained its thresholds on fault-free
runs; a baseline here should not).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS
from analysis.variants import flowdiagnoser
from analysis.variants.base import (
    BLOCKED,
    DONTCARE,
    HEALTHY,
    STALLED,
    Param,
    RuleSystem,
    positive_int,
    stalled_positive,
)

TCP = KINDS.index("tcp")
LOWER = tuple(KINDS.index(k) for k in ("ipeth", "ip", "eth"))


def ratio(text: str) -> float:
    v = float(text)
    if not v >= 1:
        raise ValueError("expected a number >= 1 (inf allowed)")
    return v


@dataclass
class _Cells:
    """Per-batch structure shared by every peer variant run on the batch."""

    is_tcp: np.ndarray
    is_lower: np.ndarray
    root_work: np.ndarray    # per cell: a TCP connection that is a root of the run (work assumed)
    ep: np.ndarray           # every cell edge: parents, children
    ec: np.ndarray
    mp: np.ndarray           # memberships: TCP cell -> lower-layer cell (its child)
    ml: np.ndarray
    lp: np.ndarray           # lower-layer -> lower-layer cell edges (ip -> eth)
    lc: np.ndarray


def _cells(batch: Batch) -> _Cells:
    def make() -> _Cells:
        kind = batch.kind_codes
        is_tcp = kind == TCP
        is_lower = np.isin(kind, LOWER)
        ep, ec = batch.edges
        member = is_tcp[ep] & is_lower[ec]
        lower = is_lower[ep] & is_lower[ec]
        root_work = is_tcp & ~batch.has_parent & ~batch.detached
        return _Cells(is_tcp, is_lower, root_work, ep, ec, ep[member], ec[member], ep[lower], ec[lower])
    return batch.shared("peer", make)


def outliers(tm: np.ndarray, busy: np.ndarray, mp: np.ndarray, ml: np.ndarray, k: float,
             min_peers: int) -> np.ndarray:
    """Per cell: a busy TCP cell that moved less than 1/k of the median of its busy peers on one of
    its lower-layer cells (memberships mp -> ml), with at least min_peers (and one) such peers."""
    out = np.zeros(len(tm), dtype=bool)
    sel = busy[mp]
    bp, bl = mp[sel], ml[sel]
    if not len(bp):
        return out
    x = tm[bp]
    order = np.lexsort((x, bl))
    xs = x[order]
    count = np.bincount(bl, minlength=len(tm))
    start = np.cumsum(count) - count
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order)) - start[bl[order]]
    m = count[bl] - 1                      # peers: the other busy members
    ok = m >= max(min_peers, 1)

    def other(i):                          # the i-th smallest of the others (0-based)
        i = np.where(ok, i, 0)
        return xs[np.where(ok, start[bl] + i + (i >= rank), 0)]

    median = (other((m - 1) // 2) + other(m // 2)) / 2
    with np.errstate(invalid="ignore"):    # 0 * inf: x == 0 decides there
        slow = x * k < median
    low = ok & (median > 0) & ((x == 0) | slow)
    out[bp[low]] = True
    return out


def _direction(batch: Batch, d: str, base: np.ndarray, k: float, min_peers: int) -> np.ndarray:
    s = _cells(batch)
    c = batch.counters(d)
    n = batch.n_cells
    moved = c.tm > 0
    demand = moved | (c.has_wait & (c.wait > 0))     # a module using the layer below it
    parent_demand = np.zeros(n, dtype=bool)
    parent_demand[s.ec[demand[s.ep]]] = True
    busy = s.is_tcp & (moved | parent_demand | s.root_work)
    stalled_tcp = outliers(c.tm, busy, s.mp, s.ml, k, min_peers)
    # Interfaces: any busy connection above, any that moved; through ip -> eth as well.
    any_busy = np.zeros(n, dtype=bool)
    any_busy[s.ml[busy[s.mp]]] = True
    any_moved = np.zeros(n, dtype=bool)
    any_moved[s.ml[(busy & moved)[s.mp]]] = True
    while len(s.lp):
        grow_b = any_busy[s.lp] & ~any_busy[s.lc]
        grow_m = any_moved[s.lp] & ~any_moved[s.lc]
        if not (grow_b.any() or grow_m.any()):
            break
        any_busy[s.lc[grow_b]] = True
        any_moved[s.lc[grow_m]] = True
    tcp = np.where(stalled_tcp, STALLED, np.where(moved, HEALTHY, np.where(busy, BLOCKED, DONTCARE)))
    lower = np.where(moved, HEALTHY, np.where(any_busy & ~any_moved, STALLED, DONTCARE))
    res = np.where(s.is_tcp, tcp, np.where(s.is_lower, lower, base))
    return res.astype(np.int8)


def diagnose(batch: Batch, k: float = 10.0, min_peers: int = 2):
    base = flowdiagnoser.diagnose(batch, theta=2)   # applications and sockets: the baseline's rows
    return stalled_positive({d: _direction(batch, d, base[d][0], k, min_peers) for d in DIRS})


SYSTEM = RuleSystem(
    name="peer",
    kind="label",
    summary="peer comparison after the PVFS paper: a TCP connection far behind its busy peers on the same "
            "interface is STALLED; the interface when all its busy connections are silent together; "
            "apps and sockets as flowdiagnoser:theta=2; positive = STALLED",
    params=(
        Param("k", 10.0, ratio, "outlier ratio: STALLED below 1/k of the median progress of its busy "
              "peers (inf = only connections that moved nothing)"),
        Param("min_peers", 2, positive_int, "busy peers on the same interface needed to compare a "
              "connection (fewer: never blamed)"),
    ),
    diagnose=diagnose,
    presets=("peer", "peer:k=inf", "peer:min_peers=1"),
)

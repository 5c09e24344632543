"""`flowdiagnoser:probe=on`: where the silent-stack rule (thesis 3.3.2) has to guess, the collector's
probes decide (issue 21). Used by analysis.variants.flowdiagnoser; defines no rule system of its own.

When a connection waits and the interface below it is silent, NeST cannot tell whether the path is
dead or the connection is (thesis 3.3.2, 3.5.2.3: "hard (if not impossible)"). The Θ rule guesses:
fewer than Θ waiting connections -> connection and interface both STALLED; at least Θ -> the
interface alone. A burst of probes to the connection's remote from fresh source ports (another
5-tuple) tells them apart: answered, the path through this host's stack works and the connection is
at fault; not answered, the path (or the interface) is dead. analysis.model.probes turns bursts into
evidence per connection, direction and snapshot (ANSWERED, UNANSWERED, RECOVERING, AFTERMATH, NONE). The rule, per
direction and snapshot, on the results of the rule it extends (Θ, then shared=on):

- **Where it applies**: a TCP connection without a wait counter that *waits* (inactive, BLOCKED or
  STALLED: it has work). An answer changes the result only in the silent stack (an inactive
  lower-layer child: ipeth, ip or eth), in both of the Θ rule's cases; a connection whose lower
  layer moved packets is the thesis's clear case (Figure 3.2: the connection is STALLED) and an
  answered probe agrees with it. No answer also applies over a lower layer that moved in this
  direction but heard nothing in the other: an interface that only sends may only be sending this
  host's retransmissions into a dead path (an ip_drop on the router passes nothing, while the host's
  outbound counters keep moving), and a fresh 5-tuple that dies too says the path is at fault, not
  the connection. An interface that moves both ways carries live traffic: the clear case stands.
- **ANSWERED** (silent stack): the connection is STALLED, and every lower-layer module below it
  reached through inactive lower-layer modules (ipeth; ip, then eth) that is STALLED becomes BLOCKED:
  it has work (a connection above it waits) but is not at fault, Table 2.2's BLOCKED (criterion (c)
  with the blame passed elsewhere). A probe of one connection clears the interface for every
  connection above it: the interface carried that probe.
- **UNANSWERED**: the connection is BLOCKED. The lower layer keeps the Θ rule's result, which in the
  silent stack already blames it (the lowest silent lower-layer module is STALLED: it has work and
  cannot pass the blame on), and over a moving interface blames nothing on this host: the path to
  the remote, which has no row, is at fault. Where another connection's burst was answered at the
  same snapshot, that clears the interface, and this connection's BLOCKED stands for "the path to
  its remote" (as with shared=on).
- **RECOVERING** (an answer after an unanswered burst of the silence while TCP backs off: an
  after-effect of an outage that has ended, issue 35): the connection is BLOCKED, by the past outage,
  over any lower layer (over an interface that moves both ways too: the other connections recovered
  first); the lower layer keeps the extended rule's result, as for UNANSWERED. Not STALLED: it has
  work and no fault of its own (Table 2.2 (c)); the interface, silent, is still the outage's target.
- **AFTERMATH** (an answer after an unanswered burst sent just before this silence began: the
  connection moved a little after the outage and waits again on a timer the outage backed off, issue
  35): the connection is BLOCKED by the past outage, over any lower layer, and the answer clears the
  silent lower layers below it as ANSWERED does: the outage is over (the connection moved data since
  the path was seen dead, and the probe got through), so no module of this host is at fault.
- **NONE**: the connection keeps its result; a lower-layer module keeps it unless an answered
  connection above it clears it. So with no probe in a snapshot, every result is the extended rule's.
- Applications and sockets never change. With tcpstate=on, the tcpstate rule runs after this one
  (a connection the probe blames stays STALLED only when TCP says it is stuck: an answered probe
  and a TCP that is not stuck is a peer that does not send, Table 2.2's BLOCKED).
"""

from __future__ import annotations

import numpy as np

from analysis.model.batch import Batch
from analysis.model.probes import AFTERMATH, ANSWERED, RECOVERING, UNANSWERED, cell_evidence
from analysis.model.stretches import KINDS
from analysis.variants.base import BLOCKED, STALLED

_TCP = KINDS.index("tcp")
_LOWER = [KINDS.index(k) for k in ("ipeth", "ip", "eth")]


def _edges(batch: Batch, edges: tuple[np.ndarray, np.ndarray]):
    """(connection -> lower layer, lower layer -> lower layer) cell edges, each a (parents, children) pair."""
    def make():
        ep, ec = edges
        kind = batch.kind_codes
        lower = np.isin(kind, _LOWER)
        into = lower[ec]
        tcp = into & (kind[ep] == _TCP)
        down = into & lower[ep]
        return (ep[tcp], ec[tcp]), (ep[down], ec[down])
    return batch.shared("probe_edges", make)


def probe_rule(batch: Batch, d: str, res: np.ndarray, ahead: float,
               edges: tuple[np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """One direction's results with the rule of the module docstring applied. `edges`: the cell edges of
    the analysis graph (every edge but those out of an application; default the batch's)."""
    if all(getattr(st, "probes", None) is None for st in batch.stretches):
        return res
    (tp, tc), (lp, lc) = _edges(batch, edges if edges is not None else batch.edges)
    if not len(tp):
        return res
    c = batch.counters(d)
    inactive = c.tm == 0
    deaf = batch.counters("in" if d == "out" else "out").tm == 0   # nothing moved the other way
    r = res[tp]
    wait = inactive[tp] & ~c.has_wait[tp] & ((r == BLOCKED) | (r == STALLED))
    waiting = np.unique(tp[wait])        # waiting connections (over any lower layer: RECOVERING speaks there)
    if not len(waiting):
        return res
    # Marked in cell-long masks and read at `waiting` (np.isin would sort on every call).
    unclear = np.zeros(batch.n_cells, dtype=bool)
    unclear[tp[wait & (inactive[tc] | deaf[tc])]] = True   # over a lower layer silent one way or both
    stack = np.zeros(batch.n_cells, dtype=bool)
    stack[tp[wait & inactive[tc]]] = True                   # ... silent this way
    unclear, stack = unclear[waiting], stack[waiting]
    ev = cell_evidence(batch, d, waiting, ahead)
    res = res.copy()
    res[waiting[((ev == UNANSWERED) & unclear) | (ev == RECOVERING)]] = BLOCKED   # RECOVERING: by the past outage
    res[waiting[ev == AFTERMATH]] = BLOCKED                             # ... and AFTERMATH
    res[waiting[(ev == ANSWERED) & stack]] = STALLED
    answered = waiting[((ev == ANSWERED) | (ev == AFTERMATH)) & stack]  # these clear the path below
    if len(answered):
        flag = np.zeros(batch.n_cells, dtype=bool)
        flag[answered] = True
        clear = np.zeros(batch.n_cells, dtype=bool)
        clear[tc[flag[tp] & inactive[tc]]] = True
        down = np.flatnonzero(inactive[lc])            # lower -> inactive lower layer
        while len(down):
            new = down[clear[lp[down]] & ~clear[lc[down]]]
            if not len(new):
                break
            clear[lc[new]] = True
        res[clear & (res == STALLED)] = BLOCKED
    return res

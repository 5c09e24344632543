"""`flowdiagnoser:tcpstate=on`: a silent TCP connection is STALLED only when TCP itself says it is
stuck (issue 13). Used by analysis.variants.flowdiagnoser; defines no rule system of its own.

FlowDiagnoser sees only counters: a TCP connection that moved no data while its socket waits is
STALLED (when it cannot pass the blame to a lower layer), whether the network lost its packets or
the peer simply has nothing to send. Run format 4 records each connection's tcp_info state
(analysis.model.tcpstate.TcpState, carried forward from its last tcp_info row); with tcpstate=on that
state decides. The rules, per TCP cell (module, snapshot) and direction:

- **Only STALLED TCP connections change.** Every other result, every other kind (the ip+eth Θ
  rule included: a silent connection still counts as waiting above its interface) and every cell
  whose connection has no tcp_info row yet (state unknown: no evidence either way) keep the
  baseline's result. Both directions read the same state: tcp_info describes the connection, not
  one direction of it.
- **TCP is stuck** when at least one of these holds (NULL fields never hold):
  1. `backoff > 0`: the retransmission timer fired and is backed off: sent data has gone without
     an ACK for at least one RTO;
  2. `retransmits > 0`: the head segment was retransmitted by RTO and is still unacknowledged;
  3. `probes > 0`: zero-window probes go unanswered: the peer's window is closed and the peer does
     not answer (persist-timer stall);
  4. `ca_state == Loss (4)`: TCP is in RTO recovery (the kernel's own "this connection lost
     everything in flight");
  5. **silence beyond its own RTO**: snapshot time - max(data_recv_at, ack_recv_at) > rto (a
     missing time leaves the other to decide; both missing: no). Nothing, neither data nor ACK,
     has come from the peer for longer than the connection itself waits before retransmitting.
     This is the rule for the receiving side: a pure receiver (wget's download, iperf's server
     side) sends no data, so rules 1-4 never hold for it when the network drops the sender's
     packets, and it covers a sender between its last ACK and its first RTO.
- **Not stuck: ca_state Recovery (3)**, and Disorder (1), CWR (2), alone. Fast recovery runs on
  duplicate ACKs, so the peer's ACKs arrive and the path works; a connection that stays silent in
  Recovery is caught by rule 5 (or its RTO fires: Loss, backoff). `data_sent_at` is not used: that
  we sent something says nothing about whether the peer answers.
- **A STALLED connection that TCP says is not stuck is BLOCKED**, not DONTCARE: it has work
  (HasWork: its socket waits on it, or it is a root), so Table 2.2 (b) does not apply; TCP reports
  that it is waiting for the peer (e.g. a paused server application), not failing itself, which is
  Table 2.2's "blocked waiting on something else" -- the same move as shared=on. Positive stays
  STALLED, so such a connection is no longer positive.
- **No state recorded** (a run of format <= 3, or JSON input): the variant stops with a UserError
  naming the source, rather than acting like the baseline. Stretches made in memory (no source)
  without `Stretch.tcpstate` count as unknown everywhere (the tests' property generators).
"""

from __future__ import annotations

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import KINDS
from analysis.model.tcpstate import CA_LOSS
from analysis.variants.base import BLOCKED, STALLED
from rundir.errors import UserError

_TCP = KINDS.index("tcp")


def require(batch: Batch) -> None:
    """UserError when the batch comes from a run (or file) that recorded no TCP state."""
    if batch.source is not None and any(st.tcpstate is None for st in batch.stretches):
        raise UserError(f"{batch.source}: tcpstate needs run format 4 (tcp_info state fields); "
                        "this run has none (use a variant without tcpstate=on)")


def stuck(state: dict[str, np.ndarray]) -> np.ndarray:
    """Per cell: TCP says the connection is stuck (rules 1-5 of the module docstring)."""
    heard = np.fmax(state["data_recv_at"], state["ack_recv_at"])
    with np.errstate(invalid="ignore"):
        return ((state["backoff"] > 0) | (state["retransmits"] > 0) | (state["probes"] > 0)
                | (state["ca_state"] == CA_LOSS) | (state["mono"] - heard > state["rto_us"] / 1e6))


def tcp_state_rule(batch: Batch, res: np.ndarray) -> np.ndarray:
    """One direction's results with the rule applied: STALLED TCP cells whose known state is not
    stuck become BLOCKED."""
    state = batch.tcpstate
    if state is None:
        return res
    move = (res == STALLED) & (batch.kind_codes == _TCP) & state["known"]
    if not move.any():
        return res
    move &= ~stuck(state)
    res = res.copy()
    res[move] = BLOCKED
    return res

"""`streamsdiagnoser`: StreamsDiagnoser (thesis chapter 4, 4.4 and 4.4.2), FlowDiagnoser on stream
connections.

The modules are stream connections (kind `sconn`), PEs the edges, the graph push-oriented (data flows
parent -> child); a connection's counters are `total_msgs` = tuples processed out of it and
`queued` = tuples submitted into it and not yet processed (docs/streams.md). Per connection and
snapshot, 4.4 reduces Table 2.2 to:

- HEALTHY when Δtotal_msgs > 0 (the downstream PE read from it);
- else DONTCARE when queued <= 0 (nothing to read: the upstream PE supplied nothing);
- else BLOCKED when it can pass the blame to a child (Table 2.2 (e), CanPassBlame: a downstream
  connection that is itself inactive with queued > 0: backpressure from further down);
- else STALLED (h): the downstream PE did not read tuples waiting for it, and nothing below it is
  stuck. A positive is STALLED, and it blames the connection's downstream PE (4.4.2).

That is exactly FlowDiagnoser (analysis.variants.flowdiagnoser) with Θ = 1 (the plain CanPassBlame of
Algorithm 5) and queue counters as HasWork (queues=on), on the `out` direction, which is the only one a
stream connection has: HasWork(M) = queued > 0 for a module with a queue counter, so neither roots nor
parents decide it, and a child with queued > 0 under an inactive parent with work takes the blame.
So this system calls that machinery with theta=1, queues=on rather than restating it; the plain
per-snapshot rule above is tests/support/reference_streams.py, and the tests require the two to agree.

The `in` direction of a stream connection has no counters (the collector writes none): its cells
are DONTCARE and never positive (they are invalid, so no table scores them anyway). Modules of other
kinds, if any, get FlowDiagnoser Θ = 1, queues=on in both directions.

The 4.3.2 carry of negative queues into the next Δtotal_msgs and the Appendix A per-connection
recovery are the collector's (the counters arrive corrected); a negative queue recorded here is simply
not work (DONTCARE when inactive).
"""

from __future__ import annotations

import numpy as np

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS
from analysis.variants.base import DONTCARE, RuleSystem
from analysis.variants.flowdiagnoser import diagnose as flowdiagnoser

_SCONN = KINDS.index("sconn")


def diagnose(batch: Batch) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = flowdiagnoser(batch, theta=1, queues=True)
    sconn = batch.kind_codes == _SCONN
    if sconn.any():
        res, pos = out["in"]
        res, pos = res.copy(), pos.copy()
        res[sconn], pos[sconn] = DONTCARE, False
        out["in"] = (res, pos)
    return {d: out[d] for d in DIRS}


SYSTEM = RuleSystem(
    name="streamsdiagnoser",
    kind="label",
    summary="StreamsDiagnoser (thesis ch. 4, 4.4/4.4.2): stream connections, HEALTHY if tuples were processed, "
            "DONTCARE if none queued, BLOCKED if a downstream connection is also inactive with tuples queued, "
            "else STALLED (= FlowDiagnoser with Θ = 1, queues=on, direction out); positive = STALLED",
    params=(),
    diagnose=diagnose,
    presets=("streamsdiagnoser",),
)

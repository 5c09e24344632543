"""Plain per-snapshot reference for `flowdiagnoser:tcpstate=on` and `confirm_tcp` (issue 13), written
from the rules in docs/diagnosis.md one module and one snapshot at a time; it shares no code with
analysis.variants.

Importing this module wraps tests.support.reference.REFERENCE["flowdiagnoser"] (the shared=on
wrapper of reference_shared_peer) so that `reference(stretch, variant)` takes both parameters; with
tcpstate off and confirm_tcp 0 the wrapped reference runs unchanged.
"""

from __future__ import annotations

import math

import numpy as np

import tests.support.reference_shared_peer  # noqa: F401 - the shared wrapper is the one to wrap
from analysis.model.stretches import DIRS, Stretch
from analysis.variants import BLOCKED, STALLED
from tests.support import reference as _reference

_inner = _reference.REFERENCE["flowdiagnoser"]


def tcp_is_stuck(ts, m: int, t: int) -> bool:
    """TCP says connection m is stuck at snapshot t (docs/diagnosis.md, tcpstate=on, rules 1-5)."""
    def val(name):
        v = float(getattr(ts, name)[m, t])
        return None if math.isnan(v) else v

    if any(val(f) is not None and val(f) > 0 for f in ("backoff", "retransmits", "probes")):
        return True
    if val("ca_state") == 4:   # Loss; Recovery (3) is not stuck
        return True
    heard = [x for x in (val("data_recv_at"), val("ack_recv_at")) if x is not None]
    rto = val("rto_us")
    return bool(heard) and rto is not None and float(ts.mono[t]) - max(heard) > rto / 1e6


def ref_flowdiagnoser_tcpstate(stretch: Stretch, theta=2, queues=False, confirm=1, shared=False,
                               tcpstate=False, confirm_tcp=0):
    base = _inner(stretch, theta=theta, queues=queues, confirm=1, shared=shared)
    ts = stretch.tcpstate
    per_module = [(confirm_tcp or confirm) if k == "tcp" else confirm for k in stretch.kinds]
    out = {}
    for d in DIRS:
        res = base[d][0].copy()
        if tcpstate and ts is not None:
            for m in range(stretch.n):
                for t in range(stretch.t):
                    if (stretch.kinds[m] == "tcp" and res[m, t] == STALLED and ts.known[m, t]
                            and not tcp_is_stuck(ts, m, t)):
                        res[m, t] = BLOCKED
        pos = np.zeros(res.shape, dtype=bool)
        for m in range(stretch.n):
            streak = 0
            for t in range(stretch.t):
                streak = streak + 1 if res[m, t] == STALLED else 0
                pos[m, t] = streak >= per_module[m]
        out[d] = (res, pos)
    return out


_reference.REFERENCE["flowdiagnoser"] = ref_flowdiagnoser_tcpstate

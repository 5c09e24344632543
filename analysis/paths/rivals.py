"""Two of TraceWeaver's baselines (SIGCOMM'24, section 6), our own implementations from their papers'
descriptions, as `infer(messages, **params)` over call pairs (callpairs.py):

- **FCFS** (`fcfs`): a service serves its requests first come, first served: an outgoing call belongs
  to the earliest-arrived incoming call still open at the service (enclosing it) when it leaves.
- **vPath** (`vpath`, Tak et al., USENIX ATC'09): a request is served by one thread from its arrival
  to its reply, so an outgoing call belongs to the incoming call the same thread received (the
  latest-started such enclosing one). Where the trace has no thread ids (span exports) or a pair's
  thread is unknown, the latest-started enclosing incoming call is taken (nesting's tie rule), as
  the warning says.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.callpairs import call_pairs, candidates, pick, result, threads
from analysis.paths.model import PathsResult

DEFAULTS: dict[str, object] = {"max_parents": 64}   # candidate incoming calls looked at per call


def _check(name: str, params: dict) -> dict:
    unknown = set(params) - set(DEFAULTS)
    if unknown:
        raise ValueError(f"{name}: unknown parameters {sorted(unknown)} (known: {sorted(DEFAULTS)})")
    return {**DEFAULTS, **params}


def fcfs(messages: pd.DataFrame, **params) -> PathsResult:
    p = _check("fcfs", params)
    cp = call_pairs(messages)
    child, parent, _ = candidates(cp, int(p["max_parents"]))
    return result("fcfs", cp, pick(child, parent, cp.in_start[parent], cp.n), p)


def vpath(messages: pd.DataFrame, **params) -> PathsResult:
    p = _check("vpath", params)
    cp = call_pairs(messages)
    child, parent, rank = candidates(cp, int(p["max_parents"]))
    warnings = []
    th = threads(cp)
    if th is None:
        warnings.append("no thread ids in the trace: each call taken by the latest-started enclosing "
                        "incoming call (vPath needs threads)")
        key = rank.astype(np.float64)
    else:
        got, sent = th
        known = sent[child] >= 0
        same = known & (got[parent] == sent[child])
        # the same thread first; a call whose thread is unknown falls back to the latest-started
        key = np.where(same | ~known, 0.0, 1e6) + rank
        hopeless = np.bincount(child[known & ~same], minlength=cp.n) == np.bincount(child, minlength=cp.n)
        hopeless &= np.bincount(child, minlength=cp.n) > 0
        if hopeless.any():
            warnings.append(f"{int(hopeless.sum())} calls sent by a thread that received no enclosing call "
                            "(work handed between threads): taken by the latest-started enclosing call")
    return result("vpath", cp, pick(child, parent, key, cp.n), p, warnings)


fcfs.DEFAULTS = DEFAULTS
vpath.DEFAULTS = DEFAULTS

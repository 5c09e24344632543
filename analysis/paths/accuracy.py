"""Per-request and per-service accuracy of an algorithm's message links (issue 43, item 2), beside the
pattern scores of score.py, for the algorithms that link messages (PathsResult.parent; not
convolution, which infers patterns from edge signals only: NaN there).

- **request_accuracy**: the share of the truth's requests whose whole inferred tree is the true one:
  every message of the request has the inferred cause its true cause is (a root: none), and no
  message of another request (or of none) is linked under it. TraceWeaver's end-to-end accuracy.
- **mapping_accuracy**: the share of caused messages (true cause >= 0) whose inferred cause is the
  true one: every incoming-to-outgoing mapping at every service, pooled; `service_mapping` gives it
  per sending service.
- **call_accuracy**: request accuracy as TraceWeaver's artifact scores it (its AccuracyEndToEnd, read
  from its source, issue 43): only calls, never returns, and only the calls made by services that
  are called from one service alone (the artifact skips a service whose incoming calls come from
  several: media's compose-review-service, the join); a request is right when each of those calls
  has its true incoming call, and no other request's call was given one of its incoming calls. The
  artifact keeps only the first call per incoming call and callee in its truth; here every call
  counts.

The truth's causes follow the span being served (readers, spans.py): a message a service sends
inside the handling of one incoming call is caused by the latest message it received inside that
same handling (the call, or a return of a call it made there); the algorithms that link messages
(nesting's call trees made message trees, linking, FCFS, vPath, TraceWeaver-class) report theirs
by the same convention.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.callpairs import call_pairs, true_parents
from analysis.paths.model import PathsResult, Trace

NAN = float("nan")


def _ratio(num: float, den: float) -> float:
    return float(num) / den if den else NAN


def request_scores(result: PathsResult, trace: Trace) -> dict[str, float]:
    """request_accuracy and mapping_accuracy, with their numerators and denominators (n_requests_right,
    n_requests, n_mapped_right, n_mapped) for pooling over runs."""
    empty = {"request_accuracy": NAN, "mapping_accuracy": NAN, "call_accuracy": NAN, "n_requests_right": 0,
             "n_requests": 0, "n_mapped_right": 0, "n_mapped": 0, "n_call_requests_right": 0}
    truth, parent = trace.truth, result.parent
    if truth is None or parent is None or len(parent) != len(truth.cause):
        return empty
    req = np.asarray(truth.request, dtype=np.int64)
    cause = np.asarray(truth.cause, dtype=np.int64)
    parent = np.asarray(parent, dtype=np.int64)
    in_req = req >= 0
    if not in_req.any():
        return empty
    codes, uniq = pd.factorize(req[in_req])
    code = np.full(len(req), -1, dtype=np.int64)
    code[in_req] = codes
    bad = np.zeros(len(uniq), dtype=bool)
    wrong = in_req & (parent != cause)
    bad[code[wrong]] = True
    # a message of another request (or of none) linked under one of this request's messages
    linked = np.flatnonzero(parent >= 0)
    owner = code[parent[linked]]
    stray = (owner >= 0) & (code[linked] != owner)
    bad[owner[stray]] = True
    caused = in_req & (cause >= 0)
    right = int((caused & (parent == cause)).sum())
    calls_right = _calls_right(trace, parent, code, len(uniq))
    return {"request_accuracy": _ratio(len(bad) - bad.sum(), len(bad)),
            "mapping_accuracy": _ratio(right, int(caused.sum())),
            "call_accuracy": _ratio(calls_right, len(bad)) if calls_right >= 0 else NAN,
            "n_requests_right": int(len(bad) - bad.sum()), "n_requests": int(len(bad)),
            "n_mapped_right": right, "n_mapped": int(caused.sum()),
            "n_call_requests_right": max(calls_right, 0)}


def _calls_right(trace: Trace, parent: np.ndarray, code: np.ndarray, n_requests: int) -> int:
    """How many requests are right in call_accuracy's scope (-1: the trace has no call pairs)."""
    cp = call_pairs(trace.messages)
    if not cp.n:
        return -1
    true, got = true_parents(cp, trace.truth.cause), true_parents(cp, parent)
    # services called from one service alone (`client` included as a caller; nothing calls it)
    pairs = np.unique(cp.callee * cp.nodes.n + cp.caller)
    callers = np.bincount(pairs // cp.nodes.n, minlength=cp.nodes.n)
    wrong = np.flatnonzero((callers[cp.caller] == 1) & (true != got))
    req = code[cp.calls]
    bad = np.zeros(n_requests + 1, dtype=bool)              # the last: no request
    bad[req[wrong]] = True                                  # -1 (noise) lands on the last
    stray = got[wrong]
    bad[req[stray[stray >= 0]]] = True                      # the request whose incoming call took it
    return int(n_requests - bad[:n_requests].sum())


def service_mapping(result: PathsResult, trace: Trace) -> pd.DataFrame:
    """Per sending service: service, messages (caused ones, in requests), mapping_accuracy."""
    cols = ["service", "messages", "mapping_accuracy"]
    truth, parent = trace.truth, result.parent
    if truth is None or parent is None or len(parent) != len(truth.cause):
        return pd.DataFrame(columns=cols)
    caused = (np.asarray(truth.request) >= 0) & (np.asarray(truth.cause) >= 0)
    frame = pd.DataFrame({"service": trace.messages["src"].astype(str).to_numpy()[caused],
                          "right": (np.asarray(parent) == np.asarray(truth.cause))[caused]})
    out = frame.groupby("service", sort=True)["right"].agg(["count", "mean"]).reset_index()
    out.columns = cols
    return out

"""Counter deltas of run.db's raw cumulative counters (thesis 3.4), one direction's rows at a time:
load_stretches and analysis.live take them here (see analysis.model.stretches for the rules).

The common case is vectorised column by column on the rows as they are (no copies of the value
columns); the thesis-3.4 rebaseline after a decrease and the wait_ms jitter run row by row only where
they apply.
"""

from __future__ import annotations

import numpy as np

# Cumulative counters (deltas taken) in the order of the value columns read below; queued is current.
_CUM = (0, 1, 3)  # total_msgs, wait_ms, errors
_WAIT = 1
# The interceptor's wait_ms counts calls in progress up to the reader's clock; a call that ends
# between the reader's look at its slot and that clock reads a few microseconds high once.
WAIT_JITTER_MS = 0.05
_QUEUED = 2


def _rebaseline(vals: np.ndarray, has: np.ndarray, bad: np.ndarray, a: int, end: int,
                delta: np.ndarray, invalid: np.ndarray) -> int:
    """Thesis 3.4 row by row, from row `a` (a good value) of one series, in place.

    A decrease is discarded (invalid) and the next value compared with the last good one; when
    that one is lower too, the last good value was a spurious increase: it is discarded as well and
    the series re-baselines on the lower values. Stops once the series is back in step (the plain
    differences are right again) and returns the row where it stopped.
    """
    cum = list(_CUM)
    # The rows as lists, a few at a time (it mostly stops after two or three rows).
    v_rows: list = []
    h_rows: list = []

    def fetch(i: int) -> None:
        b = min(end, max(i + 1, a + len(v_rows) + 8))
        v_rows.extend(vals[a + len(v_rows):b][:, cum].tolist())
        h_rows.extend(has[a + len(h_rows):b][:, cum].tolist())

    fetch(a)
    base, base_row, pending = v_rows[0], a, None
    i = a + 1
    while i < end:
        if pending is None and i > a + 1 and not bad[i]:
            break
        if i - a >= len(v_rows):
            fetch(i)
        v = v_rows[i - a]
        ok = [x and y for x, y in zip(h_rows[i - a], h_rows[i - a - 1], strict=True)]
        lower = any(o and x < b for x, b, o in zip(v, base, ok, strict=True))
        if lower and pending is not None:  # the third is lower than the first too
            invalid[base_row] = True
            base = pending
            lower = any(o and x < b for x, b, o in zip(v, base, ok, strict=True))
        if lower:
            invalid[i] = True
            delta[i] = 0.0
            pending = v
        else:
            delta[i] = [x - b if o else 0.0 for x, b, o in zip(v, base, ok, strict=True)]
            invalid[i] = False
            base, base_row, pending = v, i, None
        i += 1
    return i


def absorb_wait_jitter(vals: np.ndarray, has: np.ndarray, start: np.ndarray) -> np.ndarray:
    """vals with every wait_ms that is lower than the one before by at most WAIT_JITTER_MS raised
    to it (the carried value, so a run of such readings compares with the same one)."""
    w, hw = vals[:, _WAIT], has[:, _WAIT]
    cont = np.zeros(len(w), dtype=bool)   # comparable with the row before: same module, both known
    cont[1:] = hw[1:] & hw[:-1] & ~start[1:]
    drop = np.zeros(len(w))
    drop[1:] = w[:-1] - w[1:]
    small = cont & (drop > 0) & (drop <= WAIT_JITTER_MS)
    if not small.any():
        return vals
    return _absorb(vals, cont, small)


def _absorb(vals: np.ndarray, cont: np.ndarray, small: np.ndarray) -> np.ndarray:
    vals = vals.copy()
    w = vals[:, _WAIT]
    stop = 0
    for i in np.flatnonzero(small):
        if i < stop:
            continue
        carried = w[i - 1]
        j = i
        while j < len(w) and cont[j] and carried - WAIT_JITTER_MS <= w[j] < carried:
            w[j] = carried
            j += 1
        stop = j
    return vals


def _column_delta(x: np.ndarray, h: np.ndarray, out: np.ndarray) -> np.ndarray | None:
    """out[i] = x[i] - x[i-1] where both rows have the counter, else 0 (out[0] = 0); returns those
    `ok` rows, None when every row is ok (the counter is always there)."""
    out[0] = 0.0
    np.subtract(x[1:], x[:-1], out=out[1:])
    if h.all():
        return None
    ok = h.copy()
    ok[1:] &= h[:-1]
    np.copyto(out, 0.0, where=~ok)
    return ok


def series_deltas(mod: np.ndarray, vals: np.ndarray, has: np.ndarray, kinds_zero: np.ndarray,
                  first_of_run: np.ndarray, buf: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Deltas for rows already sorted by (module, seq) in one direction.

    mod: (R,) module id; vals/has: (R, 4) raw values and supported flags; kinds_zero: (R,) whether
    the module's counters start at zero; first_of_run: (R,) row is from the run's first snapshot.
    Returns (delta (R, 3) of total_msgs, wait_ms, errors, each column contiguous; invalid (R,)).
    buf: a (3, R or more) float array for the deltas (then a view of it), else a new one.
    """
    r = len(mod)
    if r == 0:
        return np.zeros((0, len(_CUM))), np.zeros(0, dtype=bool)
    start = np.ones(r, dtype=bool)
    start[1:] = mod[1:] != mod[:-1]
    heads = np.flatnonzero(start)
    # One contiguous row per counter: the difference with the previous row of the same module.
    delta = np.empty((len(_CUM), r)) if buf is None else buf[:, :r]
    bad = np.zeros(r, dtype=bool)   # a decrease (thesis 3.4)
    for j in (_CUM.index(_WAIT), *(j for j, c in enumerate(_CUM) if c != _WAIT)):  # wait_ms first
        c = _CUM[j]
        d = delta[j]
        ok = _column_delta(vals[:, c], has[:, c], d)
        neg = d < 0
        if ok is not None:
            neg &= ok
        neg[heads] = False
        if c == _WAIT:   # a small decrease of wait_ms: absorb_wait_jitter (d = -drop, exactly)
            small = neg & (d >= -WAIT_JITTER_MS)
            if small.any():
                cont = np.ones(r, dtype=bool) if ok is None else ok.copy()
                cont[heads] = False
                vals = _absorb(vals, cont, small)
                ok = _column_delta(vals[:, c], has[:, c], d)
                neg = d < 0
                if ok is not None:
                    neg &= ok
                neg[heads] = False
        bad |= neg
        d[heads] = np.where(has[heads, c], vals[heads, c], 0.0)   # first appearance: from zero
    delta = delta.T
    invalid = start & ~kinds_zero
    if bad.any():
        ends = np.append(heads[1:], r)
        at = np.flatnonzero(bad)
        resume = 0
        for b, end in zip(at.tolist(), ends[np.searchsorted(ends, at, side="right")].tolist(), strict=True):
            if b >= resume:
                resume = _rebaseline(vals, has, bad, b - 1, end, delta, invalid)
    invalid |= first_of_run
    return delta, invalid

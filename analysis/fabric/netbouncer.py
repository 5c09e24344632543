"""NetBouncer's link inference (Tan et al., NSDI'19, section 4): a probe path succeeds with the
product of its links' success rates; given each path's measured success rate y_p, find the link
rates x_l in [0, 1] minimising

    sum_p n_p (y_p - prod_{l in p} x_l)^2  +  lam * sum_l x_l (1 - x_l)

by coordinate descent from x = 1 (the regulariser pulls each rate towards 0 or 1: links are mostly
perfect, a few bad). Each path's term is weighted by its probes n_p (the paper's paths carry equal
numbers of probes; here a window's paths may differ by one or two). As in the paper, every link of
a path that lost nothing is taken as good (x_l = 1), but only when the path carried enough probes
for a loss at the threshold to have shown (3 / LOSS_THRESHOLD: 95% sure): a 10 s window's path
carries a few dozen, and 0.5% loss leaves most of them clean. A link on no probed path keeps
x_l = 1 (no evidence). A link is blamed when its estimated loss reaches a threshold and the probes
need it (blamed(): a likelihood-ratio test of the refit with it free): the paper's threshold alone
blamed, at our probe counts, the links that share the lossy link's paths.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

LAMBDA = 2.0            # against a link's ~500 probes a window: pulls a few-probe estimate to 0 or 1
ROUNDS = 50
LOSS_THRESHOLD = 0.002   # a link is a candidate when its estimated loss reaches this
EVIDENCE = 10.83         # and blamed when the probes need it: chi-square(1) at p = 0.001


def solve(paths: Sequence[Sequence[int]], sent: Sequence[int], ok: Sequence[int], lam: float = LAMBDA,
          rounds: int = ROUNDS, free: set[int] | None = None) -> dict[int, float]:
    """Success rate per link from each path's probes (`sent`, `ok`); paths with no probe are left out.
    `free`: only these links are estimated, every other is taken as perfect."""
    rows = [(list(dict.fromkeys(p)), o / n, n) for p, n, o in zip(paths, sent, ok, strict=True) if n > 0 and p]
    x: dict[int, float] = {k: 1.0 for p, _, _ in rows for k in p}
    clean = 3.0 / LOSS_THRESHOLD
    good = {k for p, y, n in rows if y >= 1.0 and n >= clean for k in p}
    if free is not None:
        good = set(x) - set(free)
    through = {k: [row for row in rows if k in row[0]] for k in set(x) - good}
    # Visit first the links that more lost probes crossed, (ties) fewer probes in all: the descent
    # is not convex, and the link visited first explains a lost probe for every other on its path.
    lost = {k: sum(n * (1 - y) for _, y, n in through[k]) for k in through}
    total = {k: sum(n for _, _, n in through[k]) for k in through}
    unknown = sorted(through, key=lambda k: (-lost[k], total[k], k))
    if not unknown:
        return x
    for _ in range(rounds):
        moved = 0.0
        for k in unknown:
            num = den = 0.0
            for p, y, n in through[k]:
                r = 1.0
                for j in p:
                    if j != k:
                        r *= x[j]
                num += n * r * y
                den += n * r * r
            # d/dx: -2 sum n r (y - x r) + lam (1 - 2x) = 0  =>  x = (2 sum n r y - lam) / (2 sum n r^2 - 2 lam)
            denom = 2 * den - 2 * lam
            if denom > 1e-12:
                new = (2 * num - lam) / denom
            else:   # the regulariser dominates (a concave objective in x): take the better end
                new = 1.0 if _cost(through[k], x, k, 1.0, lam) <= _cost(through[k], x, k, 0.0, lam) else 0.0
            new = min(1.0, max(0.0, new))
            moved = max(moved, abs(new - x[k]))
            x[k] = new
        if moved < 1e-7:
            break
    return x


def _cost(rows, x: Mapping[int, float], k: int, value: float, lam: float) -> float:
    total = lam * value * (1 - value)
    for p, y, n in rows:
        r = value
        for j in p:
            if j != k:
                r *= x[j]
        total += n * (y - r) ** 2
    return total


def ranked(rates: Mapping[int, float]) -> list[int]:
    """Links by estimated loss (1 - x), most first; links estimated perfect are left out."""
    return [k for k, v in sorted(rates.items(), key=lambda kv: (kv[1], kv[0])) if v < 1.0 - 1e-9]


def log_likelihood(paths: Sequence[Sequence[int]], sent: Sequence[int], ok: Sequence[int],
                   rates: Mapping[int, float]) -> float:
    """The probes' binomial log-likelihood under link rates (a path succeeds with their product)."""
    total = 0.0
    for p, n, o in zip(paths, sent, ok, strict=True):
        if n <= 0:
            continue
        q = 1.0
        for k in dict.fromkeys(p):
            q *= rates.get(k, 1.0)
        q = min(max(q, 1e-9), 1 - 1e-9)
        total += o * math.log(q) + (n - o) * math.log(1 - q)
    return total


def blamed(rates: Mapping[int, float], paths: Sequence[Sequence[int]] = (), sent: Sequence[int] = (),
           ok: Sequence[int] = (), threshold: float = LOSS_THRESHOLD, evidence: float = EVIDENCE) -> list[int]:
    """The links blamed: of those whose estimated loss reaches `threshold`, most first, each that the
    probes need: refitting with it free (beside those already blamed) raises the log-likelihood by
    `evidence` / 2 at least (a likelihood-ratio test, chi-square with one degree of freedom). A link
    that only shares the lossy link's paths explains noise and is left out. Without the probes,
    the threshold alone."""
    candidates = [k for k in ranked(rates) if 1.0 - rates[k] >= threshold]
    if not sent:
        return candidates
    chosen: list[int] = []
    base = log_likelihood(paths, sent, ok, {})
    for k in candidates:
        fit = solve(paths, sent, ok, free={*chosen, k})
        gain = log_likelihood(paths, sent, ok, fit)
        if 2 * (gain - base) >= evidence:
            chosen.append(k)
            base = gain
    return chosen

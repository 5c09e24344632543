"""007's voting (Arzani et al., NSDI'18, section 4): every connection that retransmitted in a window
casts one vote, spread evenly over the h links of its path (1/h each); links are ranked by their
votes. The blame step is the paper's Algorithm 1: blame the most-voted link while its votes clear a
noise floor, taking away the votes of the connections it explains before looking for the next.
A connection's path here is every link its packets cross, data and ACKs (inputs.both_ways): a
downed link on the ACK path stalls the sender as surely (on the model of the fat-tree, votes over the
data path alone ranked a downed link first in 70-87% of windows, over both in 100%; a 0.5-1% loss
97.5-100% either way).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

MIN_VOTES = 0.5      # at least this many votes (three connections' shares on a six-link path)


def votes(retransmitting: Iterable[str], paths: Mapping[str, Sequence[int]]) -> dict[int, float]:
    """Votes per link: each connection (a key of `paths`) with 1/len(path) for each link it crossed.
    A connection whose path is unknown casts none."""
    out: dict[int, float] = {}
    for conn in retransmitting:
        path = paths.get(conn) or ()
        links = list(dict.fromkeys(path))
        for k in links:
            out[k] = out.get(k, 0.0) + 1.0 / len(links)
    return out


def healthy(active: Iterable[str], retransmitting: Iterable[str], paths: Mapping[str, Sequence[int]]) -> dict[int, int]:
    """Per link, the connections active in the window that crossed it without retransmitting."""
    bad = set(retransmitting)
    out: dict[int, int] = {}
    for conn in active:
        if conn not in bad:
            for k in set(paths.get(conn) or ()):
                out[k] = out.get(k, 0) + 1
    return out


def ranked(tally: Mapping[int, float], clean: Mapping[int, int] | None = None) -> list[int]:
    """Links by votes, most first. Ties (links every voting connection crossed alike: a downed link
    and the other links of its few connections' paths) go to the link fewer healthy connections
    crossed (`clean`, from healthy()): our tie-break, the paper does not give one; then the lower index."""
    clean = clean or {}
    return [k for k, v in sorted(tally.items(), key=lambda kv: (-round(kv[1], 9), clean.get(kv[0], 0), kv[0]))
            if v > 0]


def blamed(retransmitting: Iterable[str], paths: Mapping[str, Sequence[int]],
           clean: Mapping[int, int] | None = None, min_votes: float = MIN_VOTES) -> list[int]:
    """The links 007 blames (its Algorithm 1): the most-voted link while its votes reach the noise
    floor; each blamed link takes away the votes of the connections that crossed it, so a link that
    merely shares their paths (the next hop of most of them) is not blamed after it."""
    left = [c for c in dict.fromkeys(retransmitting) if paths.get(c)]
    out: list[int] = []
    while left:
        tally = votes(left, paths)
        order = ranked(tally, clean)
        if not order or tally[order[0]] < min_votes:
            break
        out.append(order[0])
        left = [c for c in left if order[0] not in paths[c]]
    return out

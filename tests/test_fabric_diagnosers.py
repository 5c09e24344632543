"""007's votes and NetBouncer's solve (analysis/fabric/) on the fat-tree model: a lossy or downed
link among 48 is ranked first from what the hosts see, and a clean fabric raises no alarm."""

from __future__ import annotations

import random

import pytest

from analysis.fabric import netbouncer, vote007
from harness.fabric import find_link
from tests.support.fabric_model import fattree, mesh_connections, probe_paths

PROBES_PER_PATH = 33        # a host's 12 paths at 40 probes/s over a 10 s window
PACKETS = 1700              # a 2 Mbit/s connection's data packets in 10 s
BACKGROUND = 0.02           # a connection retransmits in a window for no link's fault


@pytest.fixture(scope="module")
def topo():
    return fattree()


def probe_window(paths, loss, rng):
    """Each path's probes; a probe is lost on each crossing of a lossy link (forward and back)."""
    sent, ok = [], []
    for fwd, rev in paths:
        through = 1.0
        for k in fwd + rev:
            through *= 1.0 - loss.get(k, 0.0)
        sent.append(PROBES_PER_PATH)
        ok.append(sum(rng.random() < through for _ in range(PROBES_PER_PATH)))
    return [f + r for f, r in paths], sent, ok


def retransmitting(conns, loss, rng):
    """conns: key -> (forward, reverse). Data lost on the forward path makes the sender retransmit;
    ACKs lost on the reverse path only when all are (a downed link): cumulative ACKs cover the rest."""
    out = []
    for key, (fwd, rev) in conns.items():
        clean = 1.0
        for k in fwd:
            clean *= (1.0 - loss.get(k, 0.0)) ** PACKETS
        if any(loss.get(k, 0.0) >= 1.0 for k in rev):
            clean = 0.0
        if rng.random() > clean * (1 - BACKGROUND):
            out.append(key)
    return out


def both(conns):
    return {key: list(dict.fromkeys(fwd + rev)) for key, (fwd, rev) in conns.items()}


CASES = [(("e1", "a1"), 0.01), (("a3", "c2"), 0.01), (("a6", "c4"), 0.005), (("e7", "a8"), 0.005),
         (("a1", "c1"), 1.0), (("e3", "a3"), 1.0)]


@pytest.mark.parametrize("ends,rate", CASES, ids=[f"{a}-{b}-{r:g}" for (a, b), r in CASES])
def test_netbouncer_ranks_the_lossy_link_first(topo, ends, rate):
    k = find_link(topo, ends)
    rng = random.Random(7)
    paths = probe_paths(topo)
    first = blamed = others = 0
    windows = 40
    for _ in range(windows):
        links, sent, ok = probe_window(paths, {k: rate}, rng)
        rates = netbouncer.solve(links, sent, ok)
        first += netbouncer.ranked(rates)[:1] == [k]
        got = netbouncer.blamed(rates, links, sent, ok)
        blamed += k in got
        others += len(set(got) - {k})
    assert others <= windows // 4, others   # the threshold alone blamed about one other link a window
    # what the solve reaches on this model (the targets are measured on real runs, docs/fabric.md)
    want = 0.95 if rate >= 1 else 0.8 if rate >= 0.01 else 0.6
    assert first / windows >= want and blamed / windows >= want, (first, blamed)


def test_netbouncer_on_a_clean_fabric_blames_nothing(topo):
    rng = random.Random(8)
    paths = probe_paths(topo)
    for _ in range(20):
        links, sent, ok = probe_window(paths, {}, rng)
        assert netbouncer.blamed(netbouncer.solve(links, sent, ok), links, sent, ok) == []


def test_netbouncer_solve_recovers_rates_on_a_small_system():
    """Three links, paths {0,1}, {1,2}, {0,2}, {0}, {2}: link 1 loses 10%, the others nothing."""
    paths = [[0, 1], [1, 2], [0, 2], [0], [2]]
    sent = [1000] * 5
    ok = [900, 900, 1000, 1000, 1000]
    rates = netbouncer.solve(paths, sent, ok)
    assert rates[0] == rates[2] == 1.0 and abs(rates[1] - 0.9) < 0.01
    assert netbouncer.ranked(rates) == [1] and netbouncer.blamed(rates, paths, sent, ok) == [1]


@pytest.mark.parametrize("ends,rate", CASES, ids=[f"{a}-{b}-{r:g}" for (a, b), r in CASES])
def test_007_ranks_the_lossy_link_first(topo, ends, rate):
    k = find_link(topo, ends)
    rng = random.Random(11)
    conns = mesh_connections(topo, 4, rng, reverse=True)
    paths = both(conns)
    if not any(k in p for p in paths.values()):
        pytest.skip("no connection of this draw crosses the link")
    first = blamed = 0
    windows = 40
    for _ in range(windows):
        bad = retransmitting(conns, {k: rate}, rng)
        tally, clean = vote007.votes(bad, paths), vote007.healthy(paths, bad, paths)
        first += vote007.ranked(tally, clean)[:1] == [k]
        blamed += vote007.blamed(bad, paths, clean)[:1] == [k]
    assert first / windows >= 0.9 and blamed / windows >= 0.7, (first, blamed)


def test_007_votes_spread_one_vote_per_connection_over_its_links():
    paths = {"a": [1, 2, 3], "b": [3, 4], "c": [5]}
    tally = vote007.votes(["a", "b", "x"], paths)
    assert tally == pytest.approx({1: 1 / 3, 2: 1 / 3, 3: 1 / 3 + 1 / 2, 4: 1 / 2})
    assert vote007.ranked(tally) == [3, 4, 1, 2]
    # link 3 explains a and b; nothing is left to blame after it
    assert vote007.blamed(["a", "b", "x"], paths) == [3]
    # two connections through 3 and one each through 6 and 7 (1/4 a vote each): 3 alone clears the floor
    paths = {"a": [3, 1], "b": [3, 2], "c": [6, 8, 10, 11], "d": [7, 9, 12, 13], "e": [6, 14]}
    assert vote007.blamed(["a", "b", "c", "d"], paths) == [3]
    assert vote007.blamed(["c", "e"], paths) == [6]   # 1/4 + 1/2 on link 6
    assert vote007.blamed([], paths) == []


def test_007_on_a_clean_fabric_rarely_blames(topo):
    rng = random.Random(12)
    conns = mesh_connections(topo, 4, rng, reverse=True)
    paths = both(conns)
    alarms = 0
    for _ in range(100):
        bad = retransmitting(conns, {}, rng)
        alarms += bool(vote007.blamed(bad, paths, vote007.healthy(paths, bad, paths)))
    assert alarms <= 5

"""forest_depth cuts parent-link cycles by squaring the parent map (assemble._power) rather than
climbing max_depth steps one by one: the same cut as the climb, on cycles, chains under cycles and
chains deeper than max_depth. (The climb it replaces recursed without end on a chain of exactly
max_depth + 1 links: that chain is kept whole now.)"""

import numpy as np

from analysis.paths.assemble import forest_depth


def _climb(parent, max_depth):
    """The plain climb: what is still climbing after max_depth steps is cut, then again."""
    parent = parent.copy()
    while True:
        depth = np.zeros(len(parent), dtype=np.int64)
        anc, active, steps = parent.copy(), np.flatnonzero(parent >= 0), 0
        while active.size:
            depth[active] += 1
            anc[active] = parent[anc[active]]
            active = active[anc[active] >= 0]
            steps += 1
            if steps > max_depth and active.size:     # (a chain of exactly max_depth + 1 ends here)
                parent[active] = -1
                break
        else:
            return depth, parent


def test_a_cycle_and_what_hangs_under_it_are_cut():
    depth, parent = forest_depth(np.array([1, 2, 0, 0, -1, 4]))
    assert parent.tolist() == [-1, -1, -1, -1, -1, 4]
    assert depth.tolist() == [0, 0, 0, 0, 0, 1]


def test_deep_chains_and_random_cycles_match_the_climb():
    chain = np.r_[-1, np.arange(199)]
    for max_depth in (10_000, 50, 70):
        got, want = forest_depth(chain, max_depth), _climb(chain, max_depth)
        assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
    rng = np.random.default_rng(7)
    for _ in range(50):
        n = int(rng.integers(2, 300))
        parent = np.where(rng.random(n) < 0.1, -1, rng.integers(0, n, n))
        for max_depth in (10_000, 3):
            got, want = forest_depth(parent, max_depth), _climb(parent, max_depth)
            assert all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))


def test_a_chain_of_exactly_max_depth_plus_one_is_kept():
    """The old climb recursed without end here (RecursionError)."""
    depth, parent = forest_depth(np.array([-1, 0, 1, 2, 3]), 3)
    assert parent.tolist() == [-1, 0, 1, 2, 3] and depth.tolist() == [0, 1, 2, 3, 4]


def test_adopted_sums_read_as_added_ones():
    # PatternTable.adopt keeps the sums it is given (add_forest's fresh dicts) where add_bulk copies
    # them: the table reads the same, a pattern met twice summed alike
    from analysis.paths.assemble import PatternTable

    def sums():
        return {"a": 0.5, "b": 1.25}, {"a>b": [0.75, 2.0], "b>a": [0.25, 1.0]}

    copied, adopted = PatternTable(np.array(["a", "b"], dtype=object)), PatternTable(np.array(["a", "b"], dtype=object))
    for table, add in ((copied, copied.add_bulk), (adopted, adopted.adopt)):
        d, lat = sums()
        add("a>b", 2.0, 2, d, lat, key=7)
        d2, lat2 = sums()
        add("a>b", 1.0, 1, d2, {**lat2, "a>c": [1.0, 1.0]})
        add("b>a", 3.0, 3, *sums())
        assert table.by_hash == {7: "a>b"}
    assert copied.patterns() == adopted.patterns()
    assert copied.count == adopted.count and copied.raw == adopted.raw
    assert copied.delay == adopted.delay and copied.lat == adopted.lat

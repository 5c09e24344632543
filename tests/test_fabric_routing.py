"""The fat-tree's routes and the hop-by-hop walk of a 5-tuple (harness/fabric.py), on a model of the
routers' lookups: each router hashes the 5-tuple with its own seed onto its route's next hops."""

import pytest

from harness.fabric import Flow, find_link, hash_seeds, is_fabric, link_kind, link_name, pods, walk
from harness.topology import load_topology
from tests.support.fabric_model import TOPOLOGIES, model_lookup


@pytest.fixture(scope="module")
def fattree():
    return load_topology(TOPOLOGIES / "fattree.yaml")


def test_the_fattree_has_its_pods_tiers_and_equal_cost_uplinks(fattree):
    t = fattree
    assert len(t.hosts) == 16 and len(t.routers) == 20 and len(t.spec.links) == 48
    assert pods(t)["h5"] == 2 and pods(t)["h16"] == 4
    assert is_fabric(t) and not is_fabric(load_topology(TOPOLOGIES / "ecmp.yaml"))
    # e1 reaches pod 2 over both its aggregation routers, a1 over both its cores, c1 by one path down
    h5 = f"10.0.{next(i.link for i in t.interfaces['h5']) + 1}.0/24"
    peers = {r: {next(i.peer for i in t.interfaces[r] if i.peer_address == v) for v in dict(t.routes(r))[h5]}
             for r in ("e1", "a1", "c1", "a3")}
    assert peers == {"e1": {"a1", "a2"}, "a1": {"c1", "c2"}, "c1": {"a3"}, "a3": {"e3"}}
    kinds = [link_kind(t, k) for k in range(48)]
    assert kinds.count("host-edge") == 16 and kinds.count("edge-aggregation") == 16 \
        and kinds.count("aggregation-core") == 16
    assert link_name(t, find_link(t, ["c1", "a1"])) == "a1-c1" and find_link(t, ["h1", "c1"]) is None
    assert sorted(hash_seeds(t).values()) == list(range(1, 21))


def test_a_walk_follows_the_routers_answers_hop_by_hop_to_the_destination(fattree):
    t = fattree
    lookup = model_lookup(t, hash_seeds(t))
    for src, dst, hops in (("h1", "h2", 2), ("h1", "h3", 4), ("h1", "h16", 6)):
        flow = Flow(t.address(src), 40000, t.address(dst), 5001)
        path = walk(t, flow, lookup)
        assert len(path) == hops
        ends = [(t.spec.links[k].a, t.spec.links[k].b) for k in path]
        assert src in ends[0] and dst in ends[-1]
        for (a1, b1), (a2, b2) in zip(ends, ends[1:], strict=False):
            assert {a1, b1} & {a2, b2}   # consecutive links meet at a router
        assert len(set(path)) == len(path)


def test_seeded_routers_spread_connections_over_every_link_and_one_seed_polarises(fattree):
    t = fattree
    fabric = {k for k, lk in enumerate(t.spec.links) if t.is_router(lk.a) and t.is_router(lk.b)}
    flows = [Flow(t.address(h), 20000 + j, t.address(d), 5001) for h in t.hosts for d in t.hosts
             if pods(t)[h] != pods(t)[d] for j in range(2)]

    def used(seeds):
        lookup = model_lookup(t, seeds)
        return {k for f in flows for k in walk(t, f, lookup)} & fabric

    assert used(hash_seeds(t)) == fabric
    # every router hashing alike: an aggregation router repeats its edge's choice; half the
    # aggregation-core links never carry a connection upward (nor, by symmetry, back)
    polarised = used({})
    assert len(fabric - polarised) >= 4


def test_a_walk_that_finds_no_route_stops_where_it_got(fattree):
    t = fattree
    path = walk(t, Flow(t.address("h1"), 1, "192.0.2.1", 2), lambda r, f, i: "")
    assert path == [next(i.link for i in t.interfaces["h1"])]


class ModelRouter:
    """A router answering `ip -j -batch -` route lookups as the model does (one JSON array a line)."""

    def __init__(self, name, lookup):
        self.name, self.lookup, self.calls = name, lookup, 0

    def run(self, argv, check=True, timeout=30.0, input=None):
        import json
        import subprocess

        assert argv == ["ip", "-j", "-batch", "-"]
        self.calls += 1
        out = []
        for line in input.splitlines():
            w = line.split()
            flow = Flow(w[w.index("from") + 1], int(w[w.index("sport") + 1]), w[2], int(w[w.index("dport") + 1]))
            dev = self.lookup(self.name, flow, w[w.index("iif") + 1] if "iif" in w else None)
            out.append(json.dumps([{"dst": flow.dst, "dev": dev}] if dev else []))
        return subprocess.CompletedProcess(argv, 0, "\n".join(out) + "\n", "")


def test_trace_asks_each_router_once_a_hop_and_agrees_with_the_walk(fattree):
    from harness.fabric import trace

    t = fattree
    lookup = model_lookup(t, hash_seeds(t))
    nodes = {r: ModelRouter(r, lookup) for r in t.routers}
    flows = [Flow(t.address(h), 30000 + j, t.address(d), 5001) for h in t.hosts for d in ("h1", "h16") if d != h
             for j in range(3)]
    paths = trace(t, nodes, flows + [f.reverse() for f in flows])
    assert all(paths[f] == walk(t, f, lookup) for f in paths)
    assert sum(n.calls for n in nodes.values()) <= 5 * len(t.routers)   # batched: a call per router and hop

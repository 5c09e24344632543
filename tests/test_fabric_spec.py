"""The fabric's spec parts (issue 44): the mesh workload and the link faults, what they load as,
and every mistake one line naming the field, exit 2."""

from __future__ import annotations

import pytest

from harness.mesh import pairs
from harness.spec import load_spec
from nestlab.cli import nestlab_main
from tests.support.env import REPO, write

TOPO = REPO / "topologies" / "fattree.yaml"

GOOD = f"""\
name: f
topology: {TOPO}
duration: 50s
monitor: [h1, h5]
probe: off
workloads:
  - {{kind: mesh, flows: 2, rate: 2Mbit}}
faults:
  - {{kind: loss, link: [a1, c1], rate: 1%, schedule: {{at: [5s], duration: 10s}}}}
  - {{kind: link_down, link: [e3, a3], schedule: {{at: [30s], duration: 5s}}}}
"""


def test_a_mesh_and_link_faults_load_with_their_router_end_and_pairs_across_pods(tmp_path):
    exp = load_spec(write(tmp_path, "f.yaml", GOOD))
    w = exp.spec.workloads[0]
    assert w.kind == "mesh" and w.rate == 2e6 and w.flows == 2 and len(w.members) == 16
    loss, down = exp.spec.faults
    assert (loss.at, down.at) == ("a1", "e3")   # the link's first router end drops
    pod = {h: exp.topology.spec.nodes[h].site for h in exp.topology.hosts}
    ps = pairs(w.members, pod, w.flows, seed=7)
    assert len(ps) == 32 and all(pod[a] != pod[b] for a, b in ps)
    assert ps == pairs(w.members, pod, w.flows, seed=7) != pairs(w.members, pod, w.flows, seed=8)
    assert [w.start for w in exp.plan(0)] == [5.0, 30.0]


def test_other_specs_keep_their_digests():
    """Fields a mesh or a link fault adds are left out of a spec that has none (--resume): the
    digest main computed before them."""
    assert load_spec(REPO / "experiments" / "net_fault.yaml").digest(0) == "8f60a1aab63eed30"


BAD = [
    ("link not in the topology", GOOD.replace("link: [a1, c1]", "link: [a1, c3]"), 9,
     "faults[0].link: [a1, c3] is not a link of topology fattree"),
    ("unknown node in link", GOOD.replace("link: [a1, c1]", "link: [a1, zz]"), 9, "faults[0].link[1]: unknown node 'zz'"),
    ("loss with link and host", GOOD.replace("link: [a1, c1]", "link: [a1, c1], host: h1"), 9,
     "'link') or of a host's ('host')"),
    ("mesh with one pod", GOOD.replace("flows: 2,", "flows: 2, members: [h1, h2, h3],"), 7,
     "workloads[0].members: a mesh needs hosts in at least two pods"),
    ("mesh member a router", GOOD.replace("flows: 2,", "flows: 2, members: [h1, e1],"), 7,
     "workloads[0].members[1]: 'e1' is not a host"),
    ("mesh without rate", GOOD.replace(", rate: 2Mbit", ""), 7, "a mesh needs 'rate'"),
    ("mesh with a host", GOOD.replace("flows: 2,", "flows: 2, host: h1,"), 7, "host does not apply to a mesh"),
    ("link_down without link", GOOD.replace("link: [e3, a3], ", ""), 10, "link_down needs 'link'"),
    ("at not an end", GOOD.replace("link: [e3, a3]", "link: [e3, a3], at: a1"), 10,
     "'a1' is not a router end of the link"),
]


@pytest.mark.parametrize("what,text,line,words", BAD, ids=[b[0] for b in BAD])
def test_bad_fabric_spec_is_one_line_naming_the_field_exit_2(tmp_path, capsys, what, text, line, words):
    path = write(tmp_path, "f.yaml", text)
    assert nestlab_main(["run", str(path), "--check", "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {path}:{line}:"), err
    assert words in err, err

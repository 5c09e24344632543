"""Specs and topologies: what loads, and that every mistake is one line naming file, line, field."""

from __future__ import annotations

import subprocess
import textwrap
from itertools import pairwise

import pytest

from harness.spec import load_spec
from harness.topology import load_topology
from harness.units import parse_duration, parse_rate, parse_size
from nestlab.cli import nestlab_main
from tests.support.env import REPO, VENV_BIN, write

TOPO = REPO / "topologies" / "dumbbell.yaml"

GOOD = f"""\
name: t
topology: {TOPO}
duration: 30s
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 10MB}}
  - {{kind: iperf, host: site1n1, server: site2n2, parallel: 2}}
faults:
  - kind: tcp_drop
    at: x1
    target: {{workload: 0}}
    schedule: {{at: [5s, 15s], duration: 2s}}
"""


def test_units():
    assert parse_duration("100ms") == pytest.approx(0.1)
    assert parse_duration("2m") == 120
    assert parse_duration(3) == 3
    assert parse_size("100MB") == 100e6
    assert parse_size("1MiB") == 2**20
    assert parse_rate("100Mbit") == 100e6 == parse_rate("100mbit")
    assert parse_rate("512kbit") == 512e3
    for bad in ("10 parsecs", "-1s", "", "s"):
        with pytest.raises(ValueError):
            parse_duration(bad)
    # Ambiguous bits/bytes spellings are refused rather than guessed (8x apart).
    for bad in ("100MBps", "100Mbps", "100MB"):
        with pytest.raises(ValueError, match="Mbit"):
            parse_rate(bad)
    for bad in ("100Mb", "100mb", "1gb"):
        with pytest.raises(ValueError, match="MB"):
            parse_size(bad)


def test_shipped_experiment_loads_and_plans_deterministically():
    exp = load_spec(REPO / "experiments" / "net_fault.yaml")
    plan = exp.plan(0)
    assert plan == exp.plan(0)
    assert plan != exp.plan(1)  # the next repetition draws other windows
    kinds = [exp.spec.faults[w.spec_index].kind for w in plan]
    assert kinds.count("ip_drop") == 5 and kinds.count("tcp_drop") == 2
    assert all(2 <= w.start and w.end <= exp.spec.duration - 2 for w in plan)
    ip = [w for w in plan if w.spec_index == 0]
    assert all(1 <= w.duration <= 3 for w in ip)
    # gaps within [3s, 6s], and never shorter than the recovery margin (duration + 1 s)
    assert all(b.start - a.end >= max(3, a.duration + 1) - 1e-9 for a, b in pairwise(ip))
    # the ip_drop of the monitored host never covers the tcp_drop's window or its recovery
    for t in (w for w in plan if w.spec_index == 1):
        assert all(w.reserved_until <= t.start or t.reserved_until <= w.start for w in ip)


def test_dumbbell_addresses_and_routes():
    t = load_topology(TOPO)
    assert t.routers == ["x1", "x2"]
    assert t.gateway("site1n1") == t.interfaces["x1"][0].address
    # x1 reaches the site-2 subnets through x2, and x2 reaches site 1 through x1.
    x2_addr = next(i.address for i in t.interfaces["x2"] if i.peer == "x1")
    site2 = {f"10.0.{i.link + 1}.0/24" for n in ("site2n1", "site2n2") for i in t.interfaces[n]}
    assert {d for d, vias in t.routes("x1") if vias == [x2_addr]} == site2


BLACKHOLE = """\
  - kind: path_blackhole
    at: x1
    path: 0
    schedule: {at: [22s], duration: 2s}
"""
LOSS = "  - {kind: loss, at: x1, rate: 5%, schedule: {at: [22s], duration: 2s}}\n"
PAUSE = "  - {kind: server_pause, target: {workload: 1}, schedule: {at: [22s], duration: 2s}}\n"
ECMP = REPO / "topologies" / "ecmp.yaml"


BAD = [
    # (what is wrong, spec text, expected line, expected words in the message)
    ("bad yaml", GOOD.replace("duration: 30s", "duration: [30s"), None, "invalid YAML"),
    ("unknown field", GOOD.replace("duration: 30s", "duration: 30s\ndurration: 30s"), 4, "durration: unknown field"),
    ("wrong unit", GOOD.replace("duration: 30s", "duration: 30 parsecs"), 3, "duration: expected a duration"),
    ("unknown host", GOOD.replace("server: site2n1", "server: site9n9"), 6, "workloads[0].server: unknown node 'site9n9'"),
    ("router as host", GOOD.replace("monitor: site1n1", "monitor: x1"), 4, "monitor: 'x1' is a router"),
    ("fault on a host", GOOD.replace("at: x1", "at: site2n1"), 10, "faults[0].at: 'site2n1' is not a router"),
    ("missing target", GOOD.replace("    target: {workload: 0}\n", ""), 9, "tcp_drop needs 'target"),
    ("no such workload", GOOD.replace("workload: 0", "workload: 5"), 11, "faults[0].target.workload: no workload 5"),
    ("overlap", GOOD.replace("at: [5s, 15s]", "at: [5s, 6s]"), 12, "act on the same target"),
    ("within recovery", GOOD.replace("at: [5s, 15s]", "at: [5s, 9s]"), 12, "its recovery until 10s"),
    ("outside the run", GOOD.replace("at: [5s, 15s]", "at: [5s, 29s]"), 12, "must lie within"),
    ("same target overlaps", GOOD + """\
  - kind: tcp_drop
    at: x1
    target: {workload: 0}
    schedule: {at: [6s], duration: 2s}
""", 16, "clashes with fault 0 (tcp_drop) at 5s+2s"),
    ("random does not fit", GOOD.replace("schedule: {at: [5s, 15s], duration: 2s}",
                                         "schedule: {random: {count: 20, duration: [1s, 2s], gap: [2s, 3s]}}"),
     12, "only"),
    ("bad count", GOOD.replace("parallel: 2", "parallel: 0"), 7, "workloads[1].parallel"),
    ("wget parallel", GOOD.replace("file_size: 10MB", "file_size: 10MB, parallel: 3"), 6, "parallel applies to iperf"),
    ("no topology", GOOD.replace(str(TOPO), "nowhere"), 2, "topology: no topology file 'nowhere'"),
    ("bits for bytes", GOOD.replace("file_size: 10MB", "file_size: 10Mb"), 6, "workloads[0].file_size: expected a size"),
    ("blackhole without bundle", GOOD + BLACKHOLE, 14, "faults[1].at: 'x1' has no parallel links"),
    ("blackhole path too far", (GOOD + BLACKHOLE.replace("path: 0", "path: 2")).replace(str(TOPO), str(ECMP)), 15,
     "faults[1].path: 'x1' has 2 parallel links: path is 0 to 1"),
    ("blackhole without path", GOOD + BLACKHOLE.replace("    path: 0\n", ""), 13, "path_blackhole needs 'path: K'"),
    ("loss without rate", GOOD + LOSS.replace("rate: 5%, ", ""), 13, "loss needs 'rate'"),
    ("loss of 100%", GOOD + LOSS.replace("5%", "100%"), 13, "below 100%"),
    ("loss over 100%", GOOD + LOSS.replace("5%", "120%"), 13, "percentage from 0 to 100"),
    ("loss of host and target", GOOD + LOSS.replace("rate: 5%", "rate: 5%, host: site1n1, target: {workload: 0}"),
     13, "either a host's traffic"),
    ("server_pause with at", GOOD + PAUSE.replace("kind: server_pause", "kind: server_pause, at: x1"), 13,
     "server_pause stops the target workload's server"),
    ("rate on tcp_drop", GOOD.replace("at: x1\n", "at: x1\n    rate: 5%\n", 1), 9, "'rate' applies to loss only"),
]


@pytest.mark.parametrize("what,text,line,words", BAD, ids=[b[0] for b in BAD])
def test_bad_spec_is_one_line_with_file_line_field(tmp_path, capsys, what, text, line, words):
    path = write(tmp_path, "spec.yaml", text)
    assert nestlab_main(["run", str(path), "--results", str(tmp_path / "res")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {path}:{line}:" if line else f"error: {path}"), err
    assert words in err, err
    assert not (tmp_path / "res").exists()  # nothing was started


# Refused by load_spec before anything could start (checked with load_spec, not `nestlab run`: code
# that accepted them would start the run).
SHARP = [
    ("name .", GOOD.replace("name: t", "name: ."), 1, "name: '.' is not an experiment name"),
    ("name ..", GOOD.replace("name: t", "name: '..'"), 1, "name: '..' is not an experiment name"),
    ("too many repetitions", GOOD.replace("duration: 30s", "duration: 30s\nrepetitions: 1001"), 4,
     "repetitions: at most 1000"),
]


@pytest.mark.parametrize("what,text,line,words", SHARP, ids=[s[0] for s in SHARP])
def test_sharp_edges_are_one_line_with_file_line_field(tmp_path, what, text, line, words):
    from harness.yamlload import SpecError

    # What is near them still loads: names with dots in them, a thousand repetitions.
    for name in ("a.b", "..a", "v1.2"):
        ok = write(tmp_path, "ok.yaml", GOOD.replace("name: t", f"name: '{name}'"))
        assert load_spec(ok).spec.name == name
    ok = write(tmp_path, "ok.yaml", GOOD.replace("duration: 30s", "duration: 30s\nrepetitions: 1000"))
    assert load_spec(ok).spec.repetitions == 1000
    path = write(tmp_path, "spec.yaml", text)
    with pytest.raises(SpecError) as e:
        load_spec(path)
    err = str(e.value)
    assert "\n" not in err and err.startswith(f"{path}:{line}: "), err
    assert words in err, err


def test_bad_topology_names_the_topology_file(tmp_path, capsys):
    topo = write(tmp_path, "t.yaml", textwrap.dedent("""\
        name: t
        nodes: {a: {}, b: {}, r: {router: true}}
        links:
          - {a: a, b: r}
          - {a: b, b: rr}
        """))
    spec = write(tmp_path, "spec.yaml", GOOD.replace(str(TOPO), str(topo)))
    assert nestlab_main(["run", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {topo}:5: links[1].b: unknown node 'rr'"), err


def test_node_names_must_make_interface_names(tmp_path, capsys):
    topo = write(tmp_path, "t.yaml", textwrap.dedent("""\
        name: t
        nodes: {a: {}, averyverylongname: {}, r: {router: true}}
        links:
          - {a: a, b: r}
          - {a: averyverylongname, b: r}
        """))
    spec = write(tmp_path, "spec.yaml", GOOD.replace(str(TOPO), str(topo)))
    assert nestlab_main(["run", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {topo}:2: nodes.averyverylongname: node name"), err
    assert "'averyverylongname-eth0' fits in 15 characters" in err


def test_cli_prints_no_traceback(tmp_path):
    path = write(tmp_path, "spec.yaml", GOOD.replace("seed", "sead").replace("monitor:", "monitr:"))
    r = subprocess.run([VENV_BIN / "run-experiment", str(path)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "Traceback" not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr


def test_link_queue_defaults_to_emulab_and_needs_a_rate(tmp_path, capsys):
    t = load_topology(TOPO)
    assert [lk.queue_packets for lk in t.spec.links] == [None, None, None, 50, None, None]
    topo = write(tmp_path, "t.yaml", textwrap.dedent("""\
        name: t
        nodes: {a: {}, b: {}, r: {router: true}}
        links:
          - {a: a, b: r, bw: 10Mbit, queue: 20}
          - {a: b, b: r, queue: 20}
        """))
    spec = write(tmp_path, "spec.yaml", GOOD.replace(str(TOPO), str(topo)))
    assert nestlab_main(["run", str(spec)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {topo}:5: links[1]"), err
    assert "queue applies to a bandwidth-limited link" in err


def test_a_signal_is_not_swallowed_by_error_handling():
    """SIGTERM raises Interrupted wherever the runner is; `except Exception` (ending a fault) must
    not catch it (it did: a SIGTERM while a fault ended was logged as a warning and ignored)."""
    from harness.runner import Interrupted

    with pytest.raises(Interrupted):
        try:
            raise Interrupted("received SIGTERM", 143)
        except Exception:  # noqa: BLE001 - what _end_fault does around a failing undo
            pass


def test_ecmp_bundle_addresses_and_multipath_routes():
    t = load_topology(REPO / "topologies" / "ecmp.yaml")
    paths = [(lk.a, lk.b, lk.path) for lk in t.spec.links if lk.path is not None]
    assert paths == [("x1", "x2", 0), ("x1", "x2", 1)]                 # written out in place: links 3, 4
    assert [i.name for i in t.bundle("x1")] == ["x1-eth3", "x1-eth4"]
    assert [i.name for i in t.bundle("x2")] == ["x2-eth0", "x2-eth1"]
    assert t.bundle("site1n1") == []
    # every destination behind the bundle has one next hop per link, on both sides
    assert dict(t.routes("x1")) == {"10.0.6.0/24": ["10.0.4.2", "10.0.5.2"], "10.0.7.0/24": ["10.0.4.2", "10.0.5.2"]}
    assert {d: v for d, v in t.routes("x2")} == {f"10.0.{k}.0/24": ["10.0.4.1", "10.0.5.1"] for k in (1, 2, 3)}
    # the dumbbell is unchanged: one next hop each
    assert all(len(v) == 1 for _, v in load_topology(TOPO).routes("x1"))


def test_parallel_links_join_two_routers(tmp_path):
    from harness.yamlload import SpecError

    text = (REPO / "topologies" / "ecmp.yaml").read_text().replace("  - {a: site1n1, b: x1}",
                                                                    "  - {a: site1n1, b: x1, paths: 2}")
    path = write(tmp_path, "t.yaml", text)
    with pytest.raises(SpecError) as e:
        load_topology(path)
    line = next(k for k, s in enumerate(text.splitlines(), 1) if "paths: 2}" in s and "site1n1" in s)
    assert f"t.yaml:{line}" in str(e.value) and "links[0].paths" in str(e.value) and "join two routers" in str(e.value)

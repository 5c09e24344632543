"""Fault schedules: isolated faults never mask each other (property test over many specs and seeds),
the recovery margin, and overlap when a spec allows it."""

from __future__ import annotations

import tempfile
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.spec import footprint, load_spec, plan_faults
from harness.yamlload import SpecError
from rundir.facts import recovery_after
from tests.support.env import REPO, write

TOPO = REPO / "topologies" / "dumbbell.yaml"
HEAD = f"""\
name: s
topology: {TOPO}
duration: {{duration}}s
seed: {{seed}}
monitor: site1n1
{{isolation}}workloads:
  - {{{{kind: wget, host: site1n1, server: site2n1, file_size: 10MB, instances: 2}}}}
  - {{{{kind: iperf, host: site1n1, server: site2n2, parallel: 2, instances: 2}}}}
  - {{{{kind: wget, host: site1n2, server: site2n1, file_size: 10MB}}}}
faults:
"""

fault = st.one_of(
    st.builds(lambda h: f"  - {{kind: ip_drop, at: x1, host: {h}, ", st.sampled_from(["site1n1", "site1n2", "site2n1"])),
    st.builds(lambda w: f"  - {{kind: tcp_drop, at: x1, target: {{workload: {w}}}, ", st.sampled_from([0, 1])),
    st.builds(lambda w, i: f"  - {{kind: app_pause, target: {{workload: {w}{i}}}, ",
              st.sampled_from([0, 1]), st.sampled_from(["", ", instance: 0", ", instance: 1"])),
)
schedule = st.one_of(
    st.builds(lambda c, d, g: f"schedule: {{random: {{count: {c}, duration: [{d[0]}s, {d[1]}s], gap: [{g[0]}s, {g[1]}s]}}}}}}",
              st.integers(1, 4), st.sampled_from([(0.5, 1), (1, 3), (2, 2)]), st.sampled_from([(0, 1), (2, 5), (4, 8)])),
    st.builds(lambda at, d: f"schedule: {{at: [{', '.join(f'{a}s' for a in sorted(set(at)))}], duration: {d}s}}}}",
              st.lists(st.integers(2, 80), min_size=1, max_size=3), st.sampled_from([1, 2, 3])),
)


def _load(text: str):
    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "s.yaml"
        path.write_text(text)
        return load_spec(path)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(fault, schedule), min_size=1, max_size=4), st.integers(0, 10_000),
       st.sampled_from([60, 120]))
def test_isolated_schedules_never_let_a_fault_cover_another(faults, seed, duration):
    text = HEAD.format(duration=duration, seed=seed, isolation="") + "".join(f + s + "\n" for f, s in faults)
    try:
        exp = _load(text)
    except SpecError as e:  # a schedule that cannot be honoured: one line, naming a fault's schedule
        assert "faults[" in str(e) and "schedule" in str(e) and "\n" not in str(e)
        return
    spec = exp.spec
    plan = exp.plan(0)
    prints = [footprint(spec, f) for f in spec.faults]
    for i, f in enumerate(spec.faults):   # every window asked for is planned
        mine = [w for w in plan if w.spec_index == i]
        assert len(mine) == (f.schedule.random.count if f.schedule.random else len(set(f.schedule.at)))
    for w in plan:
        assert 2 <= w.start and w.end <= duration - 2
        assert w.recovery == pytest.approx(recovery_after(w.duration))
    for a, b in combinations(plan, 2):
        if prints[a.spec_index].touches(prints[b.spec_index]):
            assert a.reserved_until <= b.start + 1e-9 or b.reserved_until <= a.start + 1e-9, (a, b)


def test_footprints():
    exp = _load(HEAD.format(duration=60, seed=1, isolation="") + """\
  - {kind: ip_drop, at: x1, schedule: {at: [5s], duration: 1s}}
  - {kind: ip_drop, at: x1, host: site2n1, schedule: {at: [5s], duration: 1s}}
  - {kind: tcp_drop, at: x1, target: {workload: 1}, schedule: {at: [20s], duration: 1s}}
  - {kind: app_pause, target: {workload: 0, instance: 1}, schedule: {at: [20s], duration: 1s}}
  - {kind: app_pause, target: {workload: 0, instance: 0}, schedule: {at: [30s], duration: 1s}}
  - {kind: ip_drop, at: x1, host: site1n2, schedule: {at: [20s], duration: 1s}}
""".replace("{at: [5s], duration: 1s}}\n  - {kind: ip_drop, at: x1, host: site2n1, schedule: {at: [5s]",
            "{at: [5s], duration: 1s}}\n  - {kind: ip_drop, at: x1, host: site2n1, schedule: {at: [40s]"))
    p = [footprint(exp.spec, f) for f in exp.spec.faults]
    assert p[0].touches(p[2]) and p[0].touches(p[3])         # the monitor's ip_drop covers its workloads
    assert p[1].touches(p[0])                                 # both stall the monitor's downloads
    assert not p[2].touches(p[3])                             # different workloads
    assert not p[3].touches(p[4])                             # different instances of one workload
    assert p[5].touches(p[1]) and not p[5].touches(p[2])      # site1n2's download is served by site2n1


def test_random_windows_move_past_a_fixed_fault_and_its_recovery():
    text = HEAD.format(duration=60, seed=3, isolation="") + """\
  - {kind: ip_drop, at: x1, schedule: {random: {count: 4, duration: [2s, 3s], gap: [0s, 1s]}}}
  - {kind: tcp_drop, at: x1, target: {workload: 0}, schedule: {at: [10s], duration: 2s}}
"""
    plan = _load(text).plan(0)
    tcp = next(w for w in plan if w.spec_index == 1)
    ips = [w for w in plan if w.spec_index == 0]
    assert tcp.reserved_until == pytest.approx(15.0)          # 10 + 2 + (2 + 1)
    assert all(w.reserved_until <= 10 or w.start >= 15 for w in ips)
    assert any(w.start == pytest.approx(15.0) for w in ips)   # moved to the end of the reservation


def test_overlap_allowed_and_recovery_set(tmp_path):
    body = """\
  - {kind: ip_drop, at: x1, schedule: {at: [10s], duration: 3s}}
  - {kind: tcp_drop, at: x1, target: {workload: 0}, schedule: {at: [11s], duration: 1s}}
"""
    with pytest.raises(SpecError, match=r"faults\[1\]\.schedule\.at\[0\].*one would mask the other"):
        load_spec(write(tmp_path, "a.yaml", HEAD.format(duration=60, seed=1, isolation="") + body))
    exp = load_spec(write(tmp_path, "b.yaml", HEAD.format(duration=60, seed=1,
                                                           isolation="isolation: {overlap: true}\n") + body))
    assert [w.start for w in exp.plan(0)] == [10, 11] and all(w.recovery == 0 for w in exp.plan(0))
    # A set recovery margin replaces the automatic one.
    back_to_back = body.replace("at: [11s], duration: 1s", "at: [13.5s], duration: 1s")
    exp = load_spec(write(tmp_path, "c.yaml", HEAD.format(duration=60, seed=1,
                                                           isolation="isolation: {recovery: 0.5s}\n") + back_to_back))
    assert [w.recovery for w in exp.plan(0)] == [0.5, 0.5]
    with pytest.raises(SpecError, match="recovery until 17s"):   # auto: 13 + 3 + 1
        load_spec(write(tmp_path, "d.yaml", HEAD.format(duration=60, seed=1, isolation="") + back_to_back))
    with pytest.raises(SpecError, match="isolation.recovery"):
        load_spec(write(tmp_path, "e.yaml", HEAD.format(duration=60, seed=1,
                                                         isolation="isolation: {recovery: soon}\n") + body))


def test_shipped_experiments_plan_for_many_seeds():
    """The ready specs fit for most seeds; a seed whose draws do not fit is one spec error."""
    for name in ("net_fault", "tcp_fault", "app_fault"):
        exp = load_spec(REPO / "experiments" / f"{name}.yaml")
        fits = 0
        for seed in range(100):
            try:
                plan_faults(exp.spec, exp.doc, seed)
                fits += 1
            except SpecError as e:
                assert f"{name}.yaml:" in str(e) and "only" in str(e)
        assert fits >= 95, (name, fits)

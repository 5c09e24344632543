"""`flowdiagnoser:probe=on` live (docs/live.md): runs with probes grown snapshot by snapshot as the
collector writes them (tests/support/grow.py writes a probe's row with the first snapshot after its
outcome), and what analysis.live settled compared with the offline diagnosis cell by cell; `nestlab
top` with the variant."""

from __future__ import annotations

import sqlite3

import pytest

from analysis.live import LiveEngine
from nestlab.cli import nestlab_main
from tests.support.grow import Grower
from tests.support.live import differences, grow_and_watch, offline
from tests.support.probes import REMOTE, add_probes, burst, single_flow_run, synthetic_probe_run
from tests.support.runs import RunBuilder
from tests.test_probe_variant import tcp_state_rows

VARIANTS = ["flowdiagnoser:probe=on", "flowdiagnoser:probe=on,confirm=2", "flowdiagnoser:probe=on,tcpstate=on",
            "flowdiagnoser:probe=on,probe_ahead=1.5", "flowdiagnoser:probe=on,probe_ahead=0.3,theta=1"]


@pytest.mark.parametrize("step", [1, 3, 10])
@pytest.mark.parametrize("variant", VARIANTS)
def test_online_equals_offline(tmp_path, step, variant):
    src, m = single_flow_run(tmp_path / "src")
    tcp_state_rows(src, [m["tcp"]], 60)
    off = offline(src, variant)
    assert off != offline(src, variant.replace("probe=on", "probe=off"))   # the probes change results
    engine = grow_and_watch(src, tmp_path / "live", step, variant)
    assert differences(engine.history, off) == []


def test_a_synthetic_run_with_probes(tmp_path):
    src = synthetic_probe_run(tmp_path / "src", seconds=40)
    variant = "flowdiagnoser:probe=on"
    off = offline(src, variant)
    assert off != offline(src)
    assert differences(grow_and_watch(src, tmp_path / "live", 7, variant).history, off) == []


def test_damaged_and_late_probe_rows(tmp_path):
    """Damaged rows are left out online as offline; a row added below the last rowid read (a hand-made
    run.db) is still read."""
    src, m = single_flow_run(tmp_path / "src")
    add_probes(src, [(20, 7, m["tcp"], REMOTE, 1, "syn", 42, "soon", 1004.3, "answered", 1.0),
                     (21, 8, m["tcp"], REMOTE, 1, "syn", 42, 1004.25, 1004.2, "answered", 1.0),
                     (22, 9, m["tcp"], b"\x00", 1, "syn", 42, 1004.25, 1004.26, "answered", 1.0)])
    variant = "flowdiagnoser:probe=on"
    assert differences(grow_and_watch(src, tmp_path / "live", 2, variant).history, offline(src, variant)) == []

    late, _ = single_flow_run(tmp_path / "late", probes=False)
    grower = Grower(late, tmp_path / "live2")
    with LiveEngine(tmp_path / "live2", variant, history=True) as engine:
        grower.grow(35)
        add_probes(tmp_path / "live2", burst(50, 2, m["tcp"], REMOTE, 42, RunBuilder.t(42) + 0.05,
                                             [("timeout", 1.0)]))
        add_probes(tmp_path / "live2", burst(10, 1, m["tcp"], REMOTE, 22, RunBuilder.t(22) + 0.05,
                                             [("answered", 0.002)]))
        engine.refresh()
        grower.finish()
        engine.refresh()
        assert engine.reader.probe_rowid == 50
    grower.close()
    add_probes(late, burst(50, 2, m["tcp"], REMOTE, 42, RunBuilder.t(42) + 0.05, [("timeout", 1.0)])
               + burst(10, 1, m["tcp"], REMOTE, 22, RunBuilder.t(22) + 0.05, [("answered", 0.002)]))
    off = offline(late, variant)
    assert off != offline(late)
    assert differences(engine.history, off) == []


def test_probes_are_read_incrementally(tmp_path):
    src, _ = single_flow_run(tmp_path / "src")
    grower = Grower(src, tmp_path / "live")
    with LiveEngine(tmp_path / "live", "flowdiagnoser:probe=on") as engine:
        grower.grow(22)
        engine.refresh()
        assert engine.reader.probe_rowid == 0 and len(engine.bursts) == 0
        grower.grow(30)
        engine.refresh()
        assert engine.reader.probe_rowid == 2 and len(engine.bursts) == 1
        grower.finish()
        engine.refresh()
        assert engine.reader.probe_rowid == 6 and len(engine.bursts) == 3
    grower.close()


def test_a_run_without_probes_table(tmp_path):
    src, _ = single_flow_run(tmp_path / "src")
    db = sqlite3.connect(src / "run.db")
    db.execute("DROP TABLE probes")
    db.commit()
    db.close()
    with LiveEngine(src, "flowdiagnoser:probe=on", history=True) as engine:
        engine.refresh()
    assert differences(engine.history, offline(src)) == []


def test_top_with_the_probe_variant(tmp_path, capsys):
    """At seq 25 (2.5 s) the connection's 5-tuple is dropped and its probe answered: top shows the
    connection STALLED and ip+eth BLOCKED; at 4.5 s (host dropped, probe unanswered) the reverse."""
    src, m = single_flow_run(tmp_path / "run")
    for at, tcp, ip in (("2.5", "STALLED", "BLOCKED"), ("4.5", "BLOCKED", "STALLED")):
        assert nestlab_main(["top", str(src), "-b", "-n", "1", "--at", at, "--variant", "flowdiagnoser:probe=on"]) == 0
        out = capsys.readouterr().out
        assert "flowdiagnoser:theta=2,probe=on" in out and f"diagnosed to seq {int(float(at) * 10)}" in out
        rows = [x.split() for x in out.splitlines() if x.strip()]
        assert ["tcp", "in", tcp] == next(r for r in rows if r[-1] == "10.0.1.1:41000>10.0.2.1:80" and r[1] == "in")[:3]
        assert ["ipeth", "in", ip] == next(r for r in rows if r[-1] == "ipeth:h1-eth0" and r[1] == "in")[:3]

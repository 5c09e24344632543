"""Culprit accuracy per fault kind (issue 42 item 3): `nestlab compare` of hand-made service runs
writes compare-culprit.csv with a row per diagnoser and fault kind, misses counted, `random` as the
uniform guess; a network run beside them is left out in one line, no traceback."""

from __future__ import annotations

import pandas as pd
import pytest

from analysis.score.culprit import COLUMNS, borda, windows_of
from nestlab.cli import nestlab_main
from rundir.handmade import make_run
from tests.test_paths_versus import HOSTS, service_run


@pytest.fixture(scope="module")
def suite(tmp_path_factory):
    """Run 0: NeST sees each faulted tier stalled; run 1: app2 where app1 is delayed; run 2: nothing
    (every window a miss for NeST); and a network run."""
    root = tmp_path_factory.mktemp("cul") / "mixed"
    service_run(root / "r0", seed=3)
    service_run(root / "r1", seed=4, stalled={"app1": "app2"})
    service_run(root / "r2", seed=5, stalled=lambda node: None)
    make_run(root / "net")
    return root


def test_compare_writes_the_culprit_table_per_fault_kind(suite, capsys):
    assert nestlab_main(["compare", str(suite), "-j", "1", "--blackbox", "nesting"]) == 0
    out = capsys.readouterr()
    assert "### Which tier? Culprit accuracy per fault kind" in out.out
    assert "1 run without a service workload left out of the culprit table" in out.out
    assert "Traceback" not in out.err
    table = pd.read_csv(suite / "analysis" / "compare-culprit.csv")
    assert list(table.columns) == COLUMNS
    t = table.set_index("diagnoser")
    assert list(t.index) == ["flowdiagnoser:theta=2", "nest-cf", "whoseturn", "nesting", "hybrid", "random"]
    assert set(table["fault_kind"]) == {"delay"} and (table["windows"] == 6).all()
    assert t.loc["flowdiagnoser:theta=2", "inputs"] == "host" and t.loc["nesting", "inputs"] == "trace"
    assert t.loc["hybrid", "inputs"] == "both" and t.loc["random", "inputs"] == "none"
    # NeST: right in run 0's two windows and run 1's web2 window; run 2's two windows are misses
    assert t.loc["flowdiagnoser:theta=2", "ac1"] == pytest.approx(100 * 3 / 6)
    assert t.loc["flowdiagnoser:theta=2", "misses"] == 2 and t.loc["nesting", "misses"] == 0
    assert t.loc["flowdiagnoser:theta=2", "ac1_xlo"] <= 50 <= t.loc["flowdiagnoser:theta=2", "ac1_xhi"]
    assert t.loc["nesting", "ac1"] == 100
    assert t.loc["random", "ac1"] == pytest.approx(100 / len(HOSTS), abs=0.01)
    assert t.loc["random", "ac3"] == pytest.approx(300 / len(HOSTS), abs=0.01)
    windows = pd.read_csv(suite / "analysis" / "compare-culprit-windows.csv")
    assert len(windows) == 6 * 6


def test_only_network_runs_give_one_line_and_no_rows(tmp_path, capsys):
    make_run(tmp_path / "a")
    make_run(tmp_path / "b")
    from analysis.score.culprit import compare_culprit

    per, table, notes = compare_culprit([tmp_path / "a", tmp_path / "b"], [])
    assert per.empty and table.empty and len(notes) == 1 and notes[0].startswith("2 runs without a service workload")


def test_borda_sums_ranks_and_breaks_ties_by_the_first():
    assert borda(["db", "app1", "web"], ["app1", "db"]) == ["db", "app1", "web"]
    assert borda(["web"], ["db", "web"]) == ["web", "db"]
    assert borda([], ["db"]) == ["db"]
    assert borda([], []) == []


def test_a_connection_fault_with_a_tier_host_is_a_window():
    """tcp_drop of one of app2's connections (target {host: app2} and its 4-tuple): app2's window,
    which the path comparison leaves out; a tcp_drop naming no host is none."""
    faults = pd.DataFrame({"kind": ["tcp_drop", "tcp_drop"], "at_node": ["x3", "x3"], "start": [1.0, 5.0],
                           "end": [2.0, 6.0],
                           "target": ['{"host": "app2", "sport": 40000, "dport": 11211}', '{"inode": 7}']})
    w = windows_of(faults)
    assert w.values.tolist() == [["app2", 1.0, 2.0, "tcp_drop"]]

"""The service view (issue 42 item 4): `nestlab accuracy` and `nestlab compare` of service runs lead
with the tiers' latency and the culprit table, before the accuracy table or the variant comparison;
the report of a service run has the culprit table after the tiers' latency; a network run's views
keep their order (no tiers, no culprit table)."""

from __future__ import annotations

import pandas as pd

from nestlab.cli import nestlab_main
from rundir.handmade import make_run
from tests.test_paths_versus import service_run


def _order(text: str, *marks: str) -> list[int]:
    at = [text.find(m) for m in marks]
    assert all(a >= 0 for a in at), [m for m, a in zip(marks, at, strict=True) if a < 0]
    return at


def test_accuracy_of_service_runs_leads_with_tiers_and_culprits(tmp_path, capsys):
    service_run(tmp_path / "s" / "r0", seed=3)
    service_run(tmp_path / "s" / "r1", seed=4, stalled={"app1": "app2"})
    assert nestlab_main(["accuracy", str(tmp_path / "s"), "-j", "1"]) == 0
    out = capsys.readouterr().out
    tiers, culprit, table = _order(out, "### Service tiers: latency (2 runs)", "### Which tier?", "| Total")
    assert tiers < culprit < table
    assert "| cache |" in out and "| whoseturn | host |" in out and "| random | none |" in out
    rows = pd.read_csv(tmp_path / "s" / "analysis" / "compare-culprit.csv")
    assert set(rows["diagnoser"]) >= {"whoseturn", "flowdiagnoser:theta=2", "nest-cf", "nesting", "random"}


def test_compare_of_a_service_run_leads_with_tiers_and_culprits(tmp_path, capsys):
    service_run(tmp_path / "r0", seed=3)
    assert nestlab_main(["compare", str(tmp_path / "r0"), "-j", "1", "--blackbox", "nesting"]) == 0
    out = capsys.readouterr().out
    tiers, culprit, comp, versus = _order(out, "### Service tiers: latency", "### Which tier?", "| Total",
                                          "NeST beside the black-box algorithms")
    assert tiers < culprit < comp < versus
    assert out.count("### Which tier?") == 1
    assert "Service load:" in out   # one run: as the end-of-run summary prints it


def test_compare_without_black_box_algorithms_still_ranks_hosts(tmp_path, capsys):
    service_run(tmp_path / "r0", seed=3)
    assert nestlab_main(["compare", str(tmp_path / "r0"), "-j", "1", "--blackbox", "none",
                         "--variant", "whoseturn", "--variant", "flowdiagnoser:theta=2"]) == 0
    out = capsys.readouterr().out
    assert out.find("### Which tier?") < out.find("| Total")
    rows = pd.read_csv(tmp_path / "r0" / "analysis" / "compare-culprit.csv")
    assert "nesting" not in set(rows["diagnoser"]) and "whoseturn" in set(rows["diagnoser"])


def test_a_network_run_keeps_its_view(tmp_path, capsys):
    make_run(tmp_path / "net")
    assert nestlab_main(["accuracy", str(tmp_path / "net"), "-j", "1"]) == 0
    out = capsys.readouterr().out
    assert "Service tiers" not in out and "Which tier?" not in out
    assert not (tmp_path / "net" / "analysis" / "compare-culprit.csv").exists()


def test_the_report_of_a_service_run_has_the_culprit_table_after_the_tiers(tmp_path, capsys):
    service_run(tmp_path / "r0", seed=3)
    out = tmp_path / "r.html"
    assert nestlab_main(["report", str(tmp_path / "r0"), "-o", str(out)]) == 0
    html = out.read_text()
    tiers, culprit, acc = _order(html, 'id="service"', 'id="culprit"', 'id="accuracy"')
    assert tiers < culprit < acc
    assert "whoseturn" in html[culprit:acc] and "random" in html[culprit:acc]


def test_compare_ranks_each_run_once_per_algorithm(tmp_path, capsys, monkeypatch):
    """The culprit table reuses compare_blackbox's rankings (same windows): one ranking per run and
    algorithm, and the same rows as the culprit table made alone."""
    import analysis.paths.score as score
    import analysis.paths.versus as versus
    from analysis.score.culprit import compare_culprit

    service_run(tmp_path / "r0", seed=3)
    alone, _, _ = compare_culprit([tmp_path / "r0"], ["whoseturn", "flowdiagnoser:theta=2"], ["nesting"])
    calls = []
    real = score.culprit_ranking

    def counted(*a, **k):
        calls.append(1)
        return real(*a, **k)

    monkeypatch.setattr(score, "culprit_ranking", counted)
    monkeypatch.setattr(versus, "culprit_ranking", counted)
    assert nestlab_main(["compare", str(tmp_path / "r0"), "-j", "1", "--blackbox", "nesting"]) == 0
    capsys.readouterr()
    assert len(calls) == 1
    rows = pd.read_csv(tmp_path / "r0" / "analysis" / "compare-culprit-windows.csv")
    for name in ("nesting", "hybrid"):
        got = rows[rows["diagnoser"] == name]["ranking"].fillna("").tolist()
        assert got == alone[alone["diagnoser"] == name]["ranking"].tolist()

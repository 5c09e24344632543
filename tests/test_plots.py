"""Figures are produced (PNG files that decode, of a sensible size) for ordinary and awkward runs."""

from __future__ import annotations

import matplotlib.image as mpimg
import numpy as np
import pytest

from analysis.pipeline import evaluate
from analysis.render.plots import (
    default_subgraphs,
    diagnosis_overview,
    module_timeline,
    plot_run,
    row_top,
    subgraph,
    subgraph_figure,
)
from nestlab.cli import nestlab_main
from tests.support.runs import RunBuilder, make_run


def _png_ok(path, min_w=600, min_h=200):
    img = mpimg.imread(path)
    h, w = img.shape[:2]
    assert w >= min_w and h >= min_h, (path, img.shape)
    assert img[..., :3].std() > 0.01, f"{path} is blank"
    return img


@pytest.fixture
def evaluated(tmp_path):
    path, mods, ip = make_run(tmp_path / "r")
    ev = evaluate([path], ["flowdiagnoser:theta=2", "nest-cf"], keep=True)
    return path, mods, ip, ev.data[path], ev.scored[path]


def test_plot_run_writes_every_figure(evaluated, tmp_path):
    path, mods, ip, data, scored = evaluated
    files = plot_run(data, scored, "flowdiagnoser:theta=2", tmp_path / "out")
    names = sorted(f.name for f in files)
    assert "diagnosis-overview.png" in names and "module-timeline.png" in names
    # the faults target the wget connection and the interface: the wget application's subgraph
    assert f"subgraph-{mods['wget'][0]}.png" in names
    for f in files:
        _png_ok(f)


def test_certainty_factor_variant_and_chosen_module(evaluated, tmp_path):
    path, mods, ip, data, scored = evaluated
    f = subgraph_figure(data, scored, "nest-cf", mods["iperf"][2], tmp_path / "cf.png")
    _png_ok(f)
    _png_ok(diagnosis_overview(data, scored, "nest-cf", tmp_path / "cf-overview.png"))
    # the subgraph of a TCP connection: its socket and application above, the interface below
    assert subgraph(data, mods["iperf"][2]) == [mods["iperf"][0], mods["iperf"][1], mods["iperf"][2], ip]


def test_plots_command(tmp_path, capsys):
    path, mods, _ = make_run(tmp_path / "r")
    assert nestlab_main(["plots", str(path), "--module", f"tcp:{200}", "--variant", "nest-cf"]) == 0
    out = capsys.readouterr().out
    assert "Stalled modules (nest-cf)" in out
    assert (path / "analysis" / f"subgraph-{mods['iperf'][2]}.png").is_file()
    assert (path / "analysis" / "stalled.csv").is_file()


def test_run_without_applications_or_processes(tmp_path):
    """A run recorded before the interceptor: TCP and ip+eth modules only, no processes table rows."""
    b = RunBuilder(tmp_path / "old", 30)
    ip = b.module("ipeth", "ipeth:h1-eth0")
    tcps = [b.module("tcp", f"tcp:{k}", {"inode": k, "pid": 10 + k}, born=k * 5) for k in range(3)]
    for t in tcps:
        b.edge(t, ip)
        b.counters(t, "in", np.where(np.arange(30 - (t - 2) * 5) % 7 == 0, 0, 12.0)[: 30 - (t - 2) * 5])
    b.counters(ip, "in", 30)
    b.fault("ip_drop", ip, start=1.05, end=1.5)
    path = b.write()
    ev = evaluate([path], keep=True)
    data, scored = ev.data[path], ev.scored[path]
    assert default_subgraphs(data) == [ip]
    for f in plot_run(data, scored, ev.variants[0], tmp_path / "out"):
        _png_ok(f, min_h=150)
    _png_ok(module_timeline(data, tmp_path / "t.png"), min_h=150)


def test_heatmap_black_level_ignores_one_outlier():
    v = np.array([0, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 100, 300, np.nan], dtype=float)
    assert 100 <= row_top(v) < 300
    assert row_top(np.zeros(5)) == 0.0

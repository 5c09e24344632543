"""Call trees and paths.csv rows from inferred patterns (analysis/paths/render.py)."""

from __future__ import annotations

import pandas as pd
import pytest
from rich.console import Console

from analysis.paths.model import PathPattern, PathsResult, pattern_of
from analysis.paths.render import call_tree, parse_pattern, paths_frame


def back(m) -> str:
    kids = sorted(back(c) for c in m.children)
    return f"{m.src}>{m.dst}" + (f"({','.join(kids)})" if kids else "")


def test_parse_pattern_inverts_pattern_of():
    src = ["c", "w", "a", "d", "a", "w", "w"]
    dst = ["w", "a", "d", "a", "w", "c", "x"]
    parent = [-1, 0, 1, 2, 3, 4, 0]
    text = pattern_of(src, dst, parent, 0)
    assert text == "c>w(w>a(a>d(d>a(a>w(w>c)))),w>x)"
    assert back(parse_pattern(text)) == text


@pytest.mark.parametrize("bad", ["", "a", "a>b(", "a>b(c>d", "a>b)x", "a>b(,)"])
def test_not_a_pattern(bad):
    with pytest.raises(ValueError, match="not a path pattern"):
        parse_pattern(bad)


def test_call_tree_shows_latencies_and_each_nodes_delay_once():
    p = PathPattern("c>w(w>a(a>w(w>c)))", 30, {"w": 0.005, "a": 0.0101}, {"c>w": 0.0005})
    console = Console(width=120, record=True)
    console.print(call_tree(p, 60))
    text = console.export_text()
    assert "30.0 paths (50.0%)" in text and "c → w 0.5 ms" in text
    assert text.count("w 5.0 ms") == 1 and "a 10.1 ms" in text


def test_paths_frame_rows():
    r = PathsResult("x", [PathPattern("c>w(w>c)", 3, {"w": 0.002}, raw_count=4),
                          PathPattern("c>v(v>c)", 1, {"v": 0.001})], pd.DataFrame(), pd.DataFrame())
    f = paths_frame(r, "src")
    assert f["rank"].tolist() == [1, 2] and f["share"].tolist() == [0.75, 0.25]
    assert f["w_ms"].iloc[0] == 2 and pd.isna(f["w_ms"].iloc[1]) and f["raw_count"].iloc[0] == 4
    assert paths_frame(PathsResult("x", [], pd.DataFrame(), pd.DataFrame())).empty

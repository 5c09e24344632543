"""`nestlab paths` against hostile input and outputs (issue 40, items 1, 11-14): links planted where it
writes, formulas and terminal escapes in node names, the pattern syntax's characters in names, and
span exports holding a FIFO, an oversize file or a 400-digit time."""

from __future__ import annotations

import dataclasses
import json
import os

import pandas as pd
import pytest

from analysis.paths import inputs
from analysis.paths.algorithms import algorithm
from analysis.paths.maketrace import maketrace, web_service
from analysis.paths.model import Trace, patterns_of, token, true_patterns
from analysis.paths.readers import read_jaeger, write_trace
from analysis.paths.render import parse_pattern
from tests.test_paths_cli import nestlab
from tests.test_paths_readers import jaeger_doc, make_run, span

ODD = {"web1": "w>(1)", "app1": "a,1\\", "cache": "c)(>"}


def renamed(trace: Trace, names: dict[str, str]) -> Trace:
    m = trace.messages.copy()
    for c in ("src", "dst"):
        m[c] = m[c].astype(str).replace(names).astype("category")
    truth = dataclasses.replace(trace.truth, patterns=None)   # rebuilt from the causes, renamed
    return Trace(m, truth, source=trace.source)


@pytest.fixture(scope="module")
def web():
    return maketrace(web_service(), duration=400, parallelism=0.004, seed=3)


def test_names_with_the_pattern_syntax_read_back(web):
    odd = renamed(web, ODD)
    pats = true_patterns(odd)["pattern"]
    for text in pats.unique():
        root = parse_pattern(text)                       # raised ValueError before
        assert root.src == "client" and root.dst in ("w>(1)", "web2")
    plain = true_patterns(web)["pattern"]
    assert pats.nunique() == plain.nunique()


@pytest.mark.parametrize("name", ["nesting", "linking"])
def test_algorithms_keep_odd_names_apart(web, name):
    infer, _ = algorithm(name)
    plain = infer(web.messages)
    odd = infer(renamed(web, ODD).messages)
    assert [p.count for p in odd.patterns] == [p.count for p in plain.patterns]
    for p in odd.patterns:
        nodes = set()

        def walk(m, nodes=nodes):
            nodes.update((m.src, m.dst))
            for c in m.children:
                walk(c)

        walk(parse_pattern(p.pattern))
        assert nodes <= {"client", "w>(1)", "web2", "a,1\\", "app2", "c)(>", "db"}
        for k in p.edge_latencies:                       # an edge key is a one-message pattern
            e = parse_pattern(k)
            assert {e.src, e.dst} <= nodes and not e.children


def test_token_escapes_only_the_syntax():
    assert token("web1") == "web1"
    assert token("a>b(c),d\\") == "a\\>b\\(c\\)\\,d\\\\"
    assert patterns_of(["x>y", "b"], ["b", "x>y"], [-1, 0], [0]) == ["x\\>y>b(b>x\\>y)"]


def test_paths_writes_through_no_link(web, tmp_path):
    write_trace(web, tmp_path / "t.csv")
    out = tmp_path / "out"
    out.mkdir()
    victim = tmp_path / "victim"
    victim.write_text("keep me\n")
    (out / "paths.csv").symlink_to(victim)
    (out / "paths-score.csv").symlink_to(victim)
    r = nestlab("paths", "--trace", str(tmp_path / "t.csv"), "-a", "oracle", "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert victim.read_text() == "keep me\n"
    assert not (out / "paths.csv").is_symlink() and len(pd.read_csv(out / "paths.csv")) > 0


def test_paths_refuses_a_linked_analysis_directory(tmp_path):
    run = make_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "analysis").symlink_to(elsewhere, target_is_directory=True)
    r = nestlab("paths", str(run), "-a", "oracle")
    assert r.returncode == 2 and "symbolic link" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert list(elsewhere.iterdir()) == []


HOSTILE = {"web1": "+cmd|' /C calc'!A0", "app1": "[bold red]x[/]", "cache": "\x1b[2J\x1b]0;owned\x07"}


def test_formulas_and_escapes_in_node_names(web, tmp_path):
    write_trace(renamed(web, HOSTILE), tmp_path / "t.csv")
    r = nestlab("paths", "--trace", str(tmp_path / "t.csv"), "-a", "oracle", "--out", str(tmp_path), "--top", "9")
    assert r.returncode == 0, r.stderr
    assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\x1b" not in r.stderr
    assert "[bold red]x[/]" in r.stdout and "\\x1b[2J" in r.stdout
    text = (tmp_path / "paths.csv").read_text()
    header = text.splitlines()[0].split(",")
    assert not [c for c in header if c.lstrip('"').startswith(("=", "+", "-", "@"))], header
    cells = pd.read_csv(tmp_path / "paths.csv", dtype=str).fillna("").to_numpy().ravel()
    assert not [c for c in cells if c.startswith(("=", "+", "@"))]


def _export(tmp_path, n=2):
    d = tmp_path / "export"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(jaeger_doc(n)))
    return d


def test_a_fifo_in_the_export_directory_is_left_out(tmp_path):
    d = _export(tmp_path)
    os.mkfifo(d / "b.json")
    r = nestlab("paths", "--jaeger", str(d), "-a", "oracle", "--out", str(tmp_path))   # hung before
    assert r.returncode == 0, r.stderr
    assert "1 file not a regular file" in r.stderr


def test_an_oversize_file_is_left_out_unread(tmp_path, monkeypatch):
    d = _export(tmp_path)
    with open(d / "big.json", "wb") as f:
        f.truncate(inputs.MAX_BYTES + 1)                 # sparse: no disk, no read
    t = read_jaeger(d)
    assert any("1 file over the size limit" in w for w in t.warnings), t.warnings
    assert len(t.messages) == 12
    monkeypatch.setattr(inputs, "MAX_BYTES", 100)
    with pytest.raises(Exception, match="no readable"):
        read_jaeger(d / "a.json")


def test_a_400_digit_time_is_one_span_left_out(tmp_path):
    doc = jaeger_doc(2)
    doc["data"][0]["spans"].append(span("z", "p3", int("9" * 400), 10, "c"))
    doc["data"][1]["spans"][4]["duration"] = 10**300                  # the db span of the second trace
    (tmp_path / "e.json").write_text(json.dumps(doc))
    t = read_jaeger(tmp_path / "e.json")                 # OverflowError before
    assert any("2 spans" in w and "out of range" in w for w in t.warnings), t.warnings
    assert len(t.messages) == 6 + 4                    # the db call and return of one trace gone

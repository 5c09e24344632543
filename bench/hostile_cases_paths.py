"""The hostile-campaign cases of `nestlab paths` (issues 40 and 43): links planted where it writes,
formulas, terminal escapes and the pattern syntax's characters in node names, and span exports (Jaeger,
OpenTelemetry) holding a FIFO, an oversize file, a 400-digit time, missing parents or cycles. Imported
by bench/hostile_cases.py, whose CASES they join."""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path

from hostile_cases import CASES, Case, Workspace

from analysis.paths.maketrace import maketrace, web_service
from analysis.paths.readers import write_trace
from rundir.layout import RunDir


def _case(what: str, expect: str, *words: str, check=None):
    def register(fn):
        CASES.append(Case(fn.__name__, what, fn, expect, words, "nestlab", check))
        return fn
    return register


def _trace(where: Path, names: dict[str, str] | None = None) -> Path:
    """A small web-service trace with its truth, nodes renamed by `names`, as CSV."""
    tr = maketrace(web_service(), duration=300, parallelism=0.004, seed=3)
    if names:
        for c in ("src", "dst"):
            tr.messages[c] = tr.messages[c].astype(str).replace(names).astype("category")
        tr.truth.patterns = None
    write_trace(tr, where / "t.csv")
    return where / "t.csv"


def _paths_trace(where: Path, *more: str) -> list[str]:
    return ["paths", "--trace", str(where / "t.csv"), "-a", "nesting", "--out", str(where / "out"), *more]


def _victim_kept(ws: Workspace, where: Path) -> str | None:
    return None if (ws.outside / "victim").read_text() == "keep me\n" else "the victim changed"


@_case("paths: OUT/paths.csv and paths-score.csv planted links (replaced)", "ok", check=_victim_kept)
def paths_out_file_symlinks(ws, where):
    _trace(where)
    (where / "out").mkdir()
    for name in ("paths.csv", "paths-score.csv"):
        (where / "out" / name).symlink_to(ws.outside / "victim")
    return _paths_trace(where), (where / "out",)


@_case("paths: --out a link to outside", "exit2", "symbolic link")
def paths_out_dir_symlink(ws, where):
    _trace(where)
    (where / "out").symlink_to(ws.outside, target_is_directory=True)
    return _paths_trace(where), ()


@_case("paths: a run whose analysis/ links outside", "exit2", "symbolic link")
def paths_run_analysis_symlink(ws, where):
    run = ws.run(where)
    RunDir(run).analysis.symlink_to(ws.outside, target_is_directory=True)
    return ["paths", str(run), "-a", "nesting"], ()


def _no_formula(ws: Workspace, where: Path) -> str | None:
    with open(where / "out" / "paths.csv", newline="") as f:
        cells = [c for row in csv.reader(f) for c in row]
    bad = [c for c in cells if c.startswith(("=", "+", "@", "-"))]
    return f"a formula cell: {bad[0][:40]}" if bad else None


@_case("paths: node names that are formulas (header and cells)", "ok", check=_no_formula)
def paths_formula_names(ws, where):
    _trace(where, {"web1": "+cmd|' /C calc'!A0", "app1": '=HYPERLINK("http://x.invalid")', "db": "@SUM(1)"})
    return _paths_trace(where), (where / "out",)


@_case("paths: node names with rich markup and terminal escapes", "ok")
def paths_escape_names(ws, where):
    _trace(where, {"web1": "[bold red]x[/]", "cache": "\x1b[2J\x1b]0;owned\x07", "db": "[link=file:///etc]y"})
    return _paths_trace(where, "-a", "linking"), (where / "out",)


def _patterns_parse(ws: Workspace, where: Path) -> str | None:
    import pandas as pd

    from analysis.paths.render import parse_pattern
    for text in pd.read_csv(where / "out" / "paths.csv")["pattern"]:
        try:
            parse_pattern(text)
        except ValueError as e:
            return str(e)[:60]
    return None


@_case("paths: node names holding >, (, ) and ,", "ok", check=_patterns_parse)
def paths_syntax_names(ws, where):
    _trace(where, {"web1": "w>(1)", "app1": "a,(1", "cache": "c)>"})
    return _paths_trace(where, "-a", "linking"), (where / "out",)


@_case("paths: --trace a FIFO", "exit2", "not a regular file")
def paths_trace_fifo(ws, where):
    os.mkfifo(where / "t.csv")
    return _paths_trace(where), (where / "out",)


def _export(where: Path, n: int = 3) -> Path:
    from tests.test_paths_readers import jaeger_doc
    d = where / "export"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(jaeger_doc(n)))
    return d


def _paths_jaeger(where: Path, what: str = "export") -> list[str]:
    return ["paths", "--jaeger", str(where / what), "-a", "nesting", "--out", str(where / "out")]


@_case("jaeger: a FIFO among the export's files", "warn", "not a regular file")
def paths_jaeger_fifo(ws, where):
    os.mkfifo(_export(where) / "b.json")
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: a link to /dev/zero among the files", "warn", "not a regular file")
def paths_jaeger_dev_zero(ws, where):
    (_export(where) / "z.json").symlink_to("/dev/zero")
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: a 1 TiB (sparse) file among the files", "warn", "over the size limit")
def paths_jaeger_oversize(ws, where):
    with open(_export(where) / "big.json", "wb") as f:
        f.truncate(2**40)
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: a span with a 400-digit start time", "warn", "out of range")
def paths_jaeger_huge_time(ws, where):
    from tests.test_paths_readers import jaeger_doc, span
    doc = jaeger_doc(3)
    doc["data"][0]["spans"].append(span("z", "p3", int("9" * 400), 10, "c"))
    d = where / "export"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(doc))
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: a span whose parent is not exported", "warn", "parent is not in the export")
def paths_jaeger_missing_parent(ws, where):
    from tests.test_paths_readers import jaeger_doc, span
    doc = jaeger_doc(3)
    doc["data"][1]["spans"].append(span("y", "p3", 2_200_000, 10, "nowhere"))
    d = where / "export"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(doc))
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: the only file nested 100,000 deep", "exit2", "no readable Jaeger export")
def paths_jaeger_too_deep(ws, where):
    d = where / "export"
    d.mkdir()
    (d / "a.json").write_text("[" * 100_000 + "]" * 100_000)
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: a time of 5,000 digits (over Python's int limit)", "warn", "not readable JSON")
def paths_jaeger_int_limit(ws, where):
    d = _export(where)
    (d / "b.json").write_text('{"data": [{"spans": [{"spanID": "a", "startTime": ' + "9" * 5000 + "}]}]}")
    return _paths_jaeger(where), (where / "out",)


@_case("jaeger: parent links in a cycle", "warn", "cycle in the parent links")
def paths_jaeger_cycle(ws, where):
    from tests.test_paths_readers import jaeger_doc, span
    doc = jaeger_doc(3)
    doc["data"][2]["spans"] += [span("x", "p2", 3_100_000, 10, "y"), span("y", "p3", 3_100_002, 5, "x")]
    d = where / "export"
    d.mkdir()
    (d / "a.json").write_text(json.dumps(doc))
    return _paths_jaeger(where), (where / "out",)


def _otlp(where: Path, start: str = "1000000000000") -> Path:
    d = where / "export"
    d.mkdir()
    spans = [{"traceId": "01", "spanId": "a", "name": "GET", "kind": 2, "startTimeUnixNano": "1000000000000",
              "endTimeUnixNano": "1000005000000"},
             {"traceId": "01", "spanId": "b", "parentSpanId": "a", "kind": 2, "startTimeUnixNano": start,
              "endTimeUnixNano": "1000004000000"}]
    doc = {"resourceSpans": [{"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": s}}]},
                              "scopeSpans": [{"spans": [sp]}]} for s, sp in zip(("front", "back"), spans, strict=True)]}
    (d / "a.json").write_text(json.dumps(doc))
    return d


@_case("otlp: a span with a 400-digit start time", "warn", "out of range")
def paths_otlp_huge_time(ws, where):
    _otlp(where, "9" * 400)
    return ["paths", "--otlp", str(where / "export"), "-a", "nesting", "--out", str(where / "out")], (where / "out",)


@_case("otlp: only a FIFO in the directory", "exit2", "no readable OTLP JSON export")
def paths_otlp_fifo_only(ws, where):
    (where / "export").mkdir()
    os.mkfifo(where / "export" / "a.json")
    return ["paths", "--otlp", str(where / "export"), "-a", "nesting", "--out", str(where / "out")], (where / "out",)


@_case("paths --export with links planted at its files (replaced)", "ok", check=_victim_kept)
def paths_export_file_symlinks(ws, where):
    _trace(where)
    (where / "x").mkdir()
    for name in ("paths-truth.json", "paths-nesting.json"):
        (where / "x" / name).symlink_to(ws.outside / "victim")
    return _paths_trace(where, "--export", str(where / "x")), (where / "out", where / "x")


@_case("paths --export a link to outside", "exit2", "symbolic link")
def paths_export_dir_symlink(ws, where):
    _trace(where)
    (where / "x").symlink_to(ws.outside, target_is_directory=True)
    return _paths_trace(where, "--export", str(where / "x")), (where / "out",)

"""The collector is paused while an algorithm or an import runs (analysis/paths/nogc.py, issue 43
throughput) and back on afterwards, an error raised inside or not; a paused collector stays paused."""

from __future__ import annotations

import gc
import json

import pytest

from analysis.paths import algorithms
from analysis.paths.nogc import paused
from analysis.paths.spans import read_jaeger
from tests.test_paths_readers import jaeger_doc


def test_an_algorithm_runs_with_the_collector_paused(monkeypatch):
    seen = []

    def probe(messages, **params):
        seen.append(gc.isenabled())
        if params.get("fail"):
            raise ValueError("inside")
        return "result"

    probe.DEFAULTS = {"fail": False}
    monkeypatch.setitem(algorithms.ALGORITHMS, "probe", probe)
    infer, defaults = algorithms.algorithm("probe")
    assert defaults == {"fail": False} and infer.DEFAULTS == {"fail": False}
    assert gc.isenabled()
    assert infer(None) == "result" and seen == [False] and gc.isenabled()
    with pytest.raises(ValueError):
        infer(None, fail=True)
    assert gc.isenabled()
    gc.disable()
    try:
        infer(None)
        assert not gc.isenabled()          # left as the caller had it
    finally:
        gc.enable()
    # the registry's modules too
    nesting, _ = algorithms.algorithm("nesting")
    assert nesting.__wrapped__.__module__ == "analysis.paths.nesting"


def test_an_import_restores_the_collector(tmp_path):
    (tmp_path / "e.json").write_text(json.dumps(jaeger_doc(2)))
    assert gc.isenabled()
    read_jaeger(tmp_path)
    assert gc.isenabled()
    (tmp_path / "e.json").write_text("{}")
    with pytest.raises(Exception):     # noqa: B017 - a UserError: nothing readable
        read_jaeger(tmp_path)
    assert gc.isenabled()
    with paused():
        with paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()

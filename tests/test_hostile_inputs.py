"""What bench/hostile_campaign.py found beyond the issue's findings, each one line and exit 2 (or a
result) now: inputs nested deeper than Python recurses (a spec, a suite index, `diagnose --json`), a
FIFO planted where a copy is read (an open that would block), a wget file_size no server can hold."""

from __future__ import annotations

import os

import pytest

from harness.yamlload import YamlDoc
from nestlab.cli import nestlab_main
from rundir import columnar, copies
from rundir.errors import UserError
from rundir.suite_index import read_index
from tests.support.damaged import synthetic_base
from tests.support.env import REPO

DEEP = "[" * 100_000 + "]" * 100_000


def test_a_spec_nested_too_deep_is_one_line(tmp_path):
    (tmp_path / "s.yaml").write_text(DEEP)
    with pytest.raises(UserError, match="nested deeper than"):
        YamlDoc(tmp_path / "s.yaml")


def test_a_suite_index_nested_too_deep_is_one_line(tmp_path):
    (tmp_path / "suite.json").write_text(DEEP)
    with pytest.raises(UserError, match="unreadable suite index .nested deeper"):
        read_index(tmp_path)


def test_diagnose_json_nested_too_deep_is_one_line(tmp_path, capsys):
    (tmp_path / "s.json").write_text(DEEP)
    assert nestlab_main(["diagnose", "--json", str(tmp_path / "s.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "nested deeper" in err


def test_a_fifo_at_a_copys_name_does_not_block(tmp_path):
    run = synthetic_base(tmp_path / "run")
    (run / columnar.DIR).mkdir()
    os.mkfifo(run / columnar.DIR / columnar.COUNTERS)
    assert list(copies.mapped_files(run, columnar.COUNTERS)) == []   # returns (before: blocked for ever)


def test_a_file_size_no_server_holds_is_refused(tmp_path, capsys):
    spec = tmp_path / "x.yaml"
    spec.write_text(f"name: x\ntopology: {REPO / 'topologies' / 'dumbbell.yaml'}\nduration: 10s\nmonitor: site1n1\n"
                    "workloads:\n  - {kind: wget, host: site1n1, server: site2n1, file_size: 1000000000000000B}\n")
    from nestlab.cli import run_experiment_main

    assert run_experiment_main([str(spec), "--check"]) == 2
    err = capsys.readouterr().err
    assert "file_size" in err and err.count("\n") == 1

"""A run that cannot lie (issue 20): what a run reports, and what it leaves, when parts of it fail."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from analysis.load import load_run_data
from harness import ledger
from harness.clean import refuse_on_leftovers
from harness.lock import machine_lock
from harness.runner import RecordingStopped, Repetition
from harness.spec import load_spec
from harness.suite import load_suite
from nestlab.cli import nestlab_main
from nestlab.observers import report
from rundir.db import FORMAT_VERSION
from rundir.errors import UserError
from rundir.runs import open_run
from rundir.suite_index import INDEX, resumable_runs
from tests.support.env import REPO
from tests.support.runs import WGET, RunBuilder, make_run

NET_FAULT = REPO / "experiments" / "net_fault.yaml"


def _edit_db(run: Path, *statements: str) -> list[int]:
    """Run SQL statements on a run's run.db (a test's damage); the rows each changed."""
    db = sqlite3.connect(run / "run.db")
    try:
        changed = [db.execute(sql).rowcount for sql in statements]
        db.commit()
    finally:
        db.close()
    return changed
MARKUP = "ssh: x1: [/bold] closing tag [red]that was never opened[/]"


def test_teardown_finishes_when_an_error_text_looks_like_markup(tmp_path, capsys):
    """A node's stderr is printed as text: an error message that rich would parse as markup neither
    raises inside teardown nor stops the steps after it."""
    done = []

    class Backend:
        def stop_progress(self):
            raise RuntimeError(MARKUP)

        def teardown(self):
            done.append("topology")

    class Workloads:
        def stop_clients(self):
            raise OSError(MARKUP)

        def stop_servers(self):
            done.append("servers")

        def remove_files(self):
            done.append("files")

    run = Repetition(load_spec(NET_FAULT), 0, tmp_path)
    run.rd.update_manifest(format_version=FORMAT_VERSION, status="running")
    run.backend, run.workloads = Backend(), Workloads()
    run.faults = SimpleNamespace(teardown=lambda: done.append("chains"))
    run._teardown_safely()
    run._finish("failed", MARKUP)
    assert done == ["servers", "chains", "topology", "files"]
    err = capsys.readouterr().err
    assert f"warning: teardown: stop progress: RuntimeError: {MARKUP}" in err
    assert f"warning: teardown: stop workloads: OSError: {MARKUP}" in err
    assert f"failed: {MARKUP} -> {run.rd.path}" in err
    assert run.rd.status == "failed" and run.rd.manifest["reason"] == MARKUP


# ----------------------------------------------------------------------------- a collector that dies


def _collector_stub(tmp_path, code):
    run = Repetition(load_spec(NET_FAULT), 0, tmp_path)
    run.collector = SimpleNamespace(poll=lambda: code)
    (run.rd.logs / "collector.log").write_text("Traceback ...\nsqlite3.OperationalError: database or disk is full\n")
    return run


def test_the_runner_sees_a_collector_that_exits_or_stops_recording(tmp_path):
    run = _collector_stub(tmp_path / "a", 1)
    with pytest.raises(RecordingStopped, match=r"the collector exited with status 1 at t = 12.5 s, after 124 "
                                               r"snapshots: sqlite3.OperationalError: database or disk is full"):
        run._check_recording(12.5, 124, 0.0, 10.0)
    run = _collector_stub(tmp_path / "b", None)
    run._check_recording(12.5, 124, 9.9, 10.0)          # alive and recording: nothing
    with pytest.raises(RecordingStopped, match=r"no snapshot for 10.5 s \(since t = 2.0 s, after 20 snapshots\)"):
        run._check_recording(12.5, 20, 10.5, 10.0)


def test_a_recording_that_stopped_early_is_a_warning_of_the_analysis(tmp_path):
    b = RunBuilder(tmp_path / "r0", 50, workloads=[WGET])
    b.counters(b.module("app", "app:100", {"pid": 100}), "in", 10)
    b.event("run_end", 30.0)      # the workloads ran 30 s; the 50 snapshots cover 5 s of them
    info = open_run(b.write())
    data = load_run_data(info)
    (warning,) = [w for w in data.warnings if "snapshots stop" in w]
    assert warning.startswith("snapshots stop 25.1 s before the workloads did")
    assert "the recording ended early (did the collector die?)" in warning
    b2 = RunBuilder(tmp_path / "r1", 50, workloads=[WGET])
    b2.counters(b2.module("app", "app:100", {"pid": 100}), "in", 10)
    b2.event("run_end", 4.9)      # the collector outlives the workloads, as it should
    assert not [w for w in load_run_data(open_run(b2.write())).warnings if "snapshots stop" in w]


# ----------------------------------------------------------------------------- one run at a time


def test_a_second_run_is_refused_in_one_line_naming_the_first(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    with machine_lock("experiments/net_fault.yaml"):
        with pytest.raises(UserError) as e, machine_lock("experiments/tcp_fault.yaml"):
            pass
        text = str(e.value)
        assert text.startswith(f"another run is going on on this machine: experiments/net_fault.yaml (pid {os.getpid()}, "
                               "since ") and "\n" not in text
    with machine_lock("experiments/tcp_fault.yaml"):   # released when the first ended
        pass


def test_run_ids_are_unique_across_experiments_started_in_the_same_second(tmp_path, monkeypatch):
    monkeypatch.setattr(time, "strftime", lambda fmt, *a: "20260101-120000")
    a = Repetition(load_spec(NET_FAULT), 0, tmp_path)
    b = Repetition(load_spec(REPO / "experiments" / "tcp_fault.yaml"), 0, tmp_path)
    assert a.rd.path.name == b.rd.path.name == "20260101-120000-r0"
    assert a.run_id != b.run_id and a.run_id == "net_fault-20260101-120000-r0"


# ----------------------------------------------------------------------------- hostile run directories and suites


def test_analysis_output_never_follows_a_symlink_out_of_the_run(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = run / "analysis"
    out.mkdir()
    for name in ("accuracy.md", "accuracy.csv", "stalled.md", "health.json", "report.html.part",
                 "diagnosis-overview.png"):
        (out / name).symlink_to(victim)
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "analysis.log").symlink_to(victim)
    assert report(run, quiet=True) is not None
    assert victim.read_text() == "precious\n"
    assert not any(p.is_symlink() for p in [*out.iterdir(), run / "logs" / "analysis.log"])
    assert (out / "report.html").is_file() and (out / "accuracy.md").read_text().startswith("### Accuracy")


def test_a_symlinked_analysis_directory_is_refused_in_one_line(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "analysis").symlink_to(elsewhere)
    assert nestlab_main(["accuracy", str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {run / 'analysis'}: is a symbolic link (to {elsewhere}); refusing to write through it"
    assert list(elsewhere.iterdir()) == []


def _suite_dir(tmp_path, runs) -> Path:
    root = tmp_path / "suite"
    root.mkdir(parents=True)
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "complete", "created": 0, "runs": runs}))
    return root


def test_a_suite_index_naming_runs_outside_the_suite_is_refused(tmp_path, capsys):
    outside, *_ = make_run(tmp_path / "other" / "r0")
    for k, (runs, says) in enumerate((([{"run": "../other/r0"}], "runs[0]: '../other/r0' is outside the suite; refused"),
                       ([{"run": str(outside)}], f"runs[0]: '{outside}' is outside the suite; refused"),
                       (["e/r0"], "runs[0] is not an object; not a suite index nestlab wrote"),
                       ([{"run": 7}], "runs[0] is a run that is not a path; not a suite index nestlab wrote"),
                       ({"run": "e/r0"}, "not a suite index (no list of runs)"))):
        root = _suite_dir(tmp_path / str(k), runs)
        assert nestlab_main(["accuracy", str(root)]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert line == f"error: {root / INDEX}: {says}"


def test_a_suite_named_dot_or_dotdot_is_refused_like_a_spec(tmp_path):
    for name in (".", ".."):
        path = tmp_path / f"s{len(name)}.yaml"
        path.write_text(f"suite: '{name}'\nexperiments:\n  - file: {NET_FAULT}\n")
        with pytest.raises(UserError, match=rf"suite: {re.escape(repr(name))} is not a suite name"):
            load_suite(path)


def _complete_run(root: Path, rel: str, digest: str = "d1") -> None:
    (root / rel).mkdir(parents=True)
    (root / rel / "manifest.json").write_text(json.dumps({"format_version": 4, "status": "complete",
                                                          "experiment": "e", "repetition": 0, "spec_digest": digest}))


def test_resume_after_restart_does_not_bring_the_old_runs_back(tmp_path):
    root = tmp_path / "suite"
    _complete_run(root, "e/20260101-100000-r0")          # the run of the suite before --restart
    (root / "suite-20260101-100000.json").write_text("{}")   # its index, set aside by --restart
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "interrupted", "created": 1,
                                          "runs": [{"experiment": "e", "repetition": 0, "run": None}]}))
    assert resumable_runs(root) == {}                   # the restarted suite has made no run yet
    _complete_run(root, "e/20260101-110000-r0")
    (root / INDEX).write_text(json.dumps({"suite": "s", "state": "interrupted", "created": 1,
                                          "runs": [{"experiment": "e", "repetition": 0, "run": "e/20260101-110000-r0"}]}))
    assert resumable_runs(root) == {("e", 0, "d1"): root / "e/20260101-110000-r0"}
    (root / INDEX).unlink()                              # no index at all: what is on disk
    assert resumable_runs(root) == {("e", 0, "d1"): root / "e/20260101-110000-r0"}


def test_a_huge_module_id_costs_no_memory_and_changes_no_score(tmp_path):
    """Module ids are the collector's, but a crafted (or very long) run may hold any: memory follows
    the number of modules, not the largest id (an id of 10^8 took 1.6 GB), and the tables are those
    of the same run with small ids."""
    import tracemalloc

    from analysis.pipeline import evaluate

    small, *_ = make_run(tmp_path / "small" / "r0")
    big, *_ = make_run(tmp_path / "big" / "r0")
    last = "(SELECT max(id) FROM modules WHERE id < 100000000)"   # the last module gets id 10^8
    _edit_db(big, *(f"UPDATE {table} SET {col} = 100000000 WHERE {col} = {last}"
                    for table, col in (("counters", "module"), ("edges", "parent"), ("edges", "child"),
                                       ("faults", "target_module"), ("modules", "id"))))
    tracemalloc.start()
    try:
        table = evaluate([big], ["flowdiagnoser:theta=2", "nest-cf"]).table()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 200e6, f"{peak / 1e6:.0f} MB"
    assert table.equals(evaluate([small], ["flowdiagnoser:theta=2", "nest-cf"]).table())


# ----------------------------------------------------------------------------- odd data in the report


def test_the_report_draws_a_window_of_hours_and_dollar_signs_in_names(tmp_path, capsys):
    """A fault window longer than two hours (the counters figure's ticks) and a `$...$` in a name
    (matplotlib would read TeX) are data like any other: the figures and the report are made."""
    from analysis.render.summary import summarize_run

    run, *_ = make_run(tmp_path / "exp" / "r0")
    assert _edit_db(run, "UPDATE faults SET end = start + 3 * 3600 WHERE id = 1",
                    "UPDATE modules SET name = 'wget $\\alpha^{2$ 100' WHERE kind = 'app'") == [1, 2]
    out = summarize_run(run)
    err = capsys.readouterr().err
    assert "not drawn" not in err and "not written" not in err, err
    html = (out / "report.html").read_text()
    assert '<section id="faults"' in html and html.count("data:image/svg+xml") == 2   # each fault's counters
    assert (out / "diagnosis-overview.png").is_file() and (out / "module-timeline.png").is_file()
    assert "$\\alpha^{2$" in (out / "stalled.md").read_text()   # the name as it is


# ----------------------------------------------------------------------------- nothing left behind


def test_the_ledger_is_kept_while_a_sysctl_is_still_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    book = ledger.Ledger("net_fault-20260101-120000-r0", tmp_path / "run")
    book.add_sysctl("net.ipv4.tcp_child_ehash_entries", "0")
    book.close()
    assert book.path.is_file()                         # put back by `nestlab cleanup`, which reads it
    book.drop_sysctl("net.ipv4.tcp_child_ehash_entries")
    book.close()
    assert not book.path.exists()


def test_a_new_run_says_a_killed_one_left_things_behind(tmp_path, monkeypatch):
    """After a SIGKILL in the build window the ledger lists links and processes of a dead runner: the
    next run refuses, in one line, before building on top of them."""
    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    refuse_on_leftovers()                               # nothing there: nothing said
    book = ledger.Ledger("net_fault-20260101-120000-r0", tmp_path / "run")
    book.add_links(["site1n1-eth0"])
    refuse_on_leftovers()                               # its runner (this process) is alive
    data = json.loads(book.path.read_text())
    book.path.write_text(json.dumps({**data, "runner_pid": -1}))
    with pytest.raises(UserError) as e:
        refuse_on_leftovers()
    assert str(e.value) == (f"a killed run left things behind (net_fault-20260101-120000-r0; ledgers in "
                            f"{tmp_path / 'ledgers'}): run `nestlab cleanup` first")


# ----------------------------------------------------------------------------- nestlab top


class _Counting:
    """A connection that counts the tcp_info rows it hands over."""

    def __init__(self, conn):
        self.conn, self.tcp_rows = conn, 0

    def execute(self, sql, args=()):
        cur = self.conn.execute(sql, args)
        if "FROM tcp_info" in sql:
            rows = cur.fetchall()
            self.tcp_rows += len(rows)
            return SimpleNamespace(fetchall=lambda: rows, fetchone=lambda: rows[0] if rows else None)
        return cur

    def close(self):
        self.conn.close()


def test_the_live_reader_reads_tcp_info_incrementally(tmp_path):
    """Catching up on a long run in many reads hands over each tcp_info row about once, not every
    later row on every read (quadratic on long runs)."""
    from rundir.db import TCP_STATE_COLUMNS, create_db
    from rundir.live_reader import RunReader

    n = 2000
    conn = create_db(tmp_path / "run.db")
    conn.executemany("INSERT INTO snapshots VALUES (?, ?, ?)", [(s, 100 + s / 10, 0) for s in range(n)])
    conn.execute("INSERT INTO modules (id, kind, name, key, born) VALUES (1, 'tcp', 'tcp', 'tcp:1', 100)")
    conn.executemany("INSERT INTO counters VALUES (?, 1, 'out', ?, NULL, 0, 0, NULL)", [(s, s) for s in range(n)])
    cols = ", ".join(TCP_STATE_COLUMNS)
    conn.executemany(f"INSERT INTO tcp_info (seq, module, {cols}) VALUES (?, 1{', ?' * len(TCP_STATE_COLUMNS)})",
                     [(s, *([s % 5] * len(TCP_STATE_COLUMNS))) for s in range(n)])
    conn.commit()
    conn.close()
    reader = RunReader(tmp_path / "run.db", tcp_state=True)
    reader.tcp_step = 64
    reader.conn = _Counting(reader.conn)
    got = []
    for upto in range(9, n, 10):                         # 200 reads of 10 snapshots each
        got.append(reader.read(upto).tcp_rows)
    reader.close()
    rows = np.concatenate(got)
    assert rows[:, 0].tolist() == list(range(n))         # every row once, in order
    assert reader.conn.tcp_rows < 2 * n + 200 * 64, reader.conn.tcp_rows


def test_top_on_a_damaged_run_is_one_line_never_a_traceback(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    _edit_db(run, "UPDATE counters SET total_msgs = 'lots' WHERE rowid = 40")
    assert nestlab_main(["top", str(run), "-b", "-n", "1"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {run}: cannot be analysed: ValueError: ")


def test_top_and_the_progress_line_neutralise_escape_sequences(tmp_path, capsys):
    from analysis.live import LiveEngine
    from nestlab.commands.top import frame
    from nestlab.live_line import LiveProgress

    run, *_ = make_run(tmp_path / "exp" / "r0")
    _edit_db(run, "UPDATE modules SET name = 'conn \x1b[2J\x1b]0;pwned\x07 1' WHERE kind IN ('app', 'tcp')")
    manifest = json.loads((run / "manifest.json").read_text())
    (run / "manifest.json").write_text(json.dumps({**manifest, "run_id": "r0\x1b[31m", "experiment": "e\nx"}))
    with LiveEngine(run) as engine:
        lines = frame(engine.refresh(), 500)
    text = "\n".join(lines)
    assert "\x1b" not in text and "\x07" not in text and len(lines) == len(text.splitlines())
    assert "conn \\x1b[2J\\x1b]0;pwned\\x07 1" in text and "r0\\x1b[31m (e\\x0ax)" in text
    with LiveProgress(run, lambda message: None) as progress:
        progress.engine = LiveEngine(run, at_seq=25)    # during the connection fault: its TCP STALLED
        progress.refresh()
        line = progress.line(500)
    assert "\x1b" not in line and "\\x1b[2J" in line

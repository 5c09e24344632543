"""The run loop (harness.runner.Repetition) without a network: a lab kind of its own run by its
registry line alone, teardown that always finishes, a collector that dies, run ids, one run at a
time, signals held while a process starts."""

from __future__ import annotations

import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness import ledger
from harness.lab.base import FaultRow, Injection, Lab
from harness.lock import machine_lock
from harness.runner import RecordingStopped, Repetition
from harness.spec import load_spec
from harness.window import Window
from rundir.db import FORMAT_VERSION
from rundir.errors import UserError
from rundir.layout import RunDir
from tests.support.env import REPO

NET_FAULT = REPO / "experiments" / "net_fault.yaml"


# ----------------------------------------------------------------------------- teardown

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
    run.lab.backend, run.lab.workloads = Backend(), Workloads()
    run.lab.faults = SimpleNamespace(teardown=lambda: done.append("chains"))
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
    from harness.lab.collectors import Collectors

    run = Repetition(load_spec(NET_FAULT), 0, tmp_path)
    backend = SimpleNamespace(separate_collectors=lambda: False, remote=False)
    run.lab.collectors = Collectors(run.lab.spec, backend, run.rd, None, {}, None)
    run.lab.collectors.procs = {"site1n1": SimpleNamespace(poll=lambda: code)}
    run.rd.collector_log.write_text("Traceback ...\nsqlite3.OperationalError: database or disk is full\n")
    return run.lab


def test_the_runner_sees_a_collector_that_exits_or_stops_recording(tmp_path):
    run = _collector_stub(tmp_path / "a", 1)
    with pytest.raises(RecordingStopped, match=r"the collector exited with status 1 at t = 12.5 s, after 124 "
                                               r"snapshots: sqlite3.OperationalError: database or disk is full"):
        run._check_recording(12.5, 124, 0.0, 10.0)
    run = _collector_stub(tmp_path / "b", None)
    run._check_recording(12.5, 124, 9.9, 10.0)          # alive and recording: nothing
    with pytest.raises(RecordingStopped, match=r"no snapshot for 10.5 s \(since t = 2.0 s, after 20 snapshots\)"):
        run._check_recording(12.5, 20, 10.5, 10.0)


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


# ----------------------------------------------------------------------------- signal mask

@pytest.mark.root
def test_a_program_started_with_signals_held_still_obeys_sigterm(tmp_path):
    """The runner starts workloads and the collector with SIGTERM blocked (signals_held), and a
    blocked mask survives exec: the program must get an unblocked one, or teardown's SIGTERM is
    ignored and every stop waits out its timeout before a SIGKILL (the collector's last write lost)."""
    import re
    import signal

    from harness.backends.mininet import MininetNode
    from harness.ledger import signals_held

    node = MininetNode("h", SimpleNamespace(pid=os.getpid()), None)   # mnexec -a: our own namespaces
    with signals_held():
        proc = node.start(["sleep", "30"], tmp_path / "sleep.log")
    status = Path(f"/proc/{proc.pid}/status").read_text()
    blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)
    assert not blocked & (1 << (signal.SIGTERM - 1)), status
    node.stop(proc, timeout=10.0)
    assert proc.handle.returncode == -signal.SIGTERM   # ended by the SIGTERM, not the SIGKILL after it


# ----------------------------------------------------------------------------- a lab kind of its own


@dataclass
class ToySpec:
    name: str = "toy"
    duration: float = 1.0
    snapshot_interval: float = 0.05
    faults: tuple = ("poke",)

    def model_dump(self, mode="json"):
        return {"name": self.name, "duration": self.duration}


@dataclass
class ToyExperiment:
    """An experiment of a lab kind the loop has never heard of."""

    spec: ToySpec = field(default_factory=ToySpec)
    path: Path = Path("toy.yaml")
    study: str = "toy"

    def plan(self, repetition: int) -> list[Window]:
        return [Window(0, 0.1, 0.1), Window(0, 0.7, 5.0)]   # the second outlasts the run

    def seed_for(self, repetition: int) -> int:
        return 7 + repetition

    def digest(self, repetition: int) -> str:
        return "toydigest"


class ToyLab(Lab):
    """Counts snapshots itself; a fault is a row per part; records what the loop asked, in order."""

    fail_at: float | None = None     # check() raises RecordingStopped from this run time on
    calls: list[str] = []

    def manifest_start(self) -> dict:
        return {"backend": "toy", "clock": "the toy's"}

    def setup(self) -> None:
        self.calls.append("setup")
        assert self.run.ledger is not None and self.run.rd.manifest["status"] == "running"

    def now(self) -> float:
        return time.monotonic()

    def begin(self, t0: float) -> None:
        self.calls.append("begin")

    def snapshots(self) -> int:
        return int((self.now() - self.run.t0) / self.spec.snapshot_interval)

    def check(self, t: float, snaps: int, quiet_s: float) -> None:
        if self.fail_at is not None and t >= self.fail_at:
            raise RecordingStopped("the toy stopped")

    def inject(self, w: Window, first_id: int) -> Injection:
        self.calls.append(f"inject {first_id}")
        now = self.now()
        rows = [FaultRow("poke", "toybox", f'{{"part": {k}}}', w.start, now, f"poke {k}") for k in range(2)]
        return Injection(w, rows, now + w.duration)

    def heal(self, injection: Injection) -> list[float]:
        self.calls.append(f"heal {injection.ids}")
        return [self.now()] * len(injection.rows)

    def progress_line(self, t: float, snaps: int, active: list[Injection]) -> str:
        return f"toy t={t:.1f} active={len(active)}"

    def teardown_steps(self):
        return [("first", lambda: self.calls.append("first")), ("broken", lambda: 1 / 0),
                ("last", lambda: self.calls.append("last"))]

    def finished(self, path: Path) -> None:
        self.calls.append("finished")

    def summary(self, counts: dict[str, int]) -> str:
        return f"toy faults {counts['faults']}"


@pytest.fixture
def toy(monkeypatch, tmp_path):
    import harness.studies
    from harness.studies.base import LabStudy

    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    study = LabStudy("toy", "a stand-in", claims=lambda doc: False, experiment=lambda *a: ToyExperiment(),
                     lab=lambda: ToyLab, fault_kinds=dict, check_runner=lambda exp: None)
    monkeypatch.setitem(harness.studies.STUDIES, "toy", lambda: study)
    ToyLab.calls, ToyLab.fail_at = [], None
    return ToyLab


def _rows(run: Repetition, sql: str) -> list[tuple]:
    db = sqlite3.connect(run.rd.db)
    try:
        return db.execute(sql).fetchall()
    finally:
        db.close()


def test_a_new_lab_kind_runs_in_the_loop_by_its_registry_line_alone(toy, tmp_path, capsys):
    """The loop knows a lab only through its study kind (harness.studies.STUDIES): a stand-in kind registered there gets
    the manifest, t0, its faults in and out on time (the one outlasting the run ended at the end),
    every teardown step (a failing one is a warning), and the status and summary lines."""
    run = Repetition(ToyExperiment(), 0, tmp_path / "results")
    assert run.execute() == 0
    m = RunDir.open(run.rd.path).manifest
    assert list(m)[:5] == ["format_version", "run_id", "experiment", "study", "spec_file"] and m["backend"] == "toy"
    assert m["study"] == "toy"
    assert m["status"] == "complete" and m["t0"] > 0 and m["counts"]["faults"] == 4
    assert m["warnings"] == ["teardown: broken: ZeroDivisionError: division by zero"]
    assert toy.calls == ["setup", "begin", "inject 1", "heal [1, 2]", "inject 3", "heal [3, 4]", "first", "last",
                         "finished"]
    faults = _rows(run, "SELECT id, kind, at_node, rule, start <= end, planned_duration FROM faults ORDER BY id")
    assert faults == [(1, "poke", "toybox", "poke 0", 1, 0.1), (2, "poke", "toybox", "poke 1", 1, 0.1),
                      (3, "poke", "toybox", "poke 0", 1, 5.0), (4, "poke", "toybox", "poke 1", 1, 5.0)]
    assert [k for (k,) in _rows(run, "SELECT kind FROM events ORDER BY mono")] == ["run_start", "run_end", "warning"]
    err = capsys.readouterr().err
    assert "toy r0: toy t=0.0 active=0" in err and f"complete -> {run.rd.path}" in err and "toy faults 4" in err
    assert not list((tmp_path / "ledgers").glob("*.json"))   # the ledger went with the run


def test_a_lab_that_stops_recording_fails_the_run_and_is_torn_down(toy, tmp_path):
    toy.fail_at = 0.2
    run = Repetition(ToyExperiment(), 0, tmp_path / "results")
    assert run.execute() == 1
    m = RunDir.open(run.rd.path).manifest
    assert m["status"] == "failed" and m["reason"] == "recording stopped: the toy stopped"
    assert toy.calls == ["setup", "begin", "inject 1", "heal [1, 2]", "first", "last", "finished"]
    assert _rows(run, "SELECT count(*) FROM faults WHERE end IS NULL") == [(0,)]   # healed by teardown


def test_teardown_goes_on_when_a_fault_is_out_but_its_end_cannot_be_recorded(toy, tmp_path):
    """The second fault is in force when the run fails; teardown takes it out, recording its end fails:
    a warning, and every later teardown step still runs (the fault is off the active list once)."""
    toy.fail_at = 0.8
    run = Repetition(ToyExperiment(), 0, tmp_path / "results")
    ended, real = [], run.record.fault_ended

    def fault_ended(fid, end):
        ended.append(fid)
        if fid >= 3:
            raise sqlite3.OperationalError("disk I/O error")
        real(fid, end)

    run.record.fault_ended = fault_ended
    assert run.execute() == 1
    assert toy.calls == ["setup", "begin", "inject 1", "heal [1, 2]", "inject 3", "heal [3, 4]", "first", "last",
                         "finished"]
    assert ended == [1, 2, 3] and not run.active
    warnings = RunDir.open(run.rd.path).manifest["warnings"]
    assert warnings[0] == "teardown: end fault 3, 4: OperationalError: disk I/O error"

"""Real runs on Mininet: faults take effect in the recorded counters, and nothing is left behind,
whether the run ends normally, is SIGTERMed midway, or is SIGKILLed and cleaned up afterwards."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from itertools import pairwise

import pytest

from harness.runner import run_experiment
from rundir.db import FORMAT_VERSION
from tests.support.env import REPO, VENV_BIN, leftovers, write

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: e2e
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: {{duration}}
seed: 11
monitor: site1n1
workloads:
  - {{{{kind: wget, host: site1n1, server: site2n1, file_size: 200MB, instances: 2}}}}
  - {{{{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 2}}}}
faults:
  - {{{{kind: tcp_drop, at: x1, target: {{{{workload: 0}}}}, schedule: {{{{at: [6s], duration: 2s}}}}}}}}
  - {{{{kind: ip_drop, at: x1, schedule: {{{{at: [14s], duration: 2s}}}}}}}}
"""


def spec(tmp_path, duration="24s"):
    return write(tmp_path, "e2e.yaml", SPEC.format(duration=duration))


def counter(db, module, direction, column, t):
    """A counter's value at the last snapshot at or before t (rows are stored only on change)."""
    row = db.execute(f"SELECT c.{column} FROM counters c JOIN snapshots s USING (seq) WHERE c.module = ? "
                     "AND c.dir = ? AND s.mono <= ? ORDER BY seq DESC LIMIT 1", (module, direction, t)).fetchone()
    return row[0] if row else None


def advance(db, module, direction, t_from, t_to):
    a, b = counter(db, module, direction, "total_msgs", t_from), counter(db, module, direction, "total_msgs", t_to)
    return None if a is None or b is None else b - a


def test_faults_show_in_the_recorded_counters(tmp_path, no_leftovers):
    code, runs = run_experiment(spec(tmp_path), tmp_path / "results")
    assert code == 0
    run = runs[0]
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["format_version"] == FORMAT_VERSION
    assert manifest["versions"]["iperf"].startswith("iperf version 2")
    db = sqlite3.connect(run / "run.db")
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"

    # Snapshots every 100 ms for the whole run.
    monos = [m for (m,) in db.execute("SELECT mono FROM snapshots ORDER BY seq")]
    gaps = [b - a for a, b in pairwise(monos)]
    assert len(monos) >= 200 and sorted(gaps)[len(gaps) // 2] == pytest.approx(0.1, abs=0.005)

    # Workload processes and their connections are recorded and attributed.
    clients = db.execute("SELECT pid, workload FROM processes WHERE role = 'client'").fetchall()
    assert {w for _, w in clients} == {0, 1}
    tcp = {mid: json.loads(a) for mid, a in db.execute("SELECT id, attrs FROM modules WHERE kind = 'tcp'")}
    client_pids = {p for p, _ in clients}
    assert sum(a.get("pid") in client_pids for a in tcp.values()) >= 4  # 2 wget + 2 iperf connections
    (ipeth,) = db.execute("SELECT id FROM modules WHERE kind = 'ipeth' AND name LIKE '%site1n1-eth0'").fetchone()
    assert db.execute("SELECT count(*) FROM edges WHERE child = ?", (ipeth,)).fetchone()[0] >= 4

    faults = {k: (start, end, target, mod) for k, start, end, target, mod in
              db.execute("SELECT kind, start, end, target, target_module FROM faults")}
    assert set(faults) == {"tcp_drop", "ip_drop"}

    # tcp_drop: the targeted wget connection receives nothing; the other connections go on.
    start, end, target, mod = faults["tcp_drop"]
    assert end - start == pytest.approx(2.0, abs=0.1)
    assert json.loads(target)["workload"] == 0 and mod in tcp
    assert advance(db, mod, "in", start + 0.2, end) == 0
    others = [m for m, a in tcp.items() if m != mod and a.get("pid") in client_pids]
    moving = [m for m in others if (advance(db, m, "in", start + 0.2, end) or 0)
              + (advance(db, m, "out", start + 0.2, end) or 0) > 0]
    assert len(moving) >= 2, "other connections should keep moving during a single-connection drop"
    assert (advance(db, ipeth, "in", start + 0.2, end) or 0) > 100

    # ip_drop: the monitored host's interface receives nothing while the rule is in place.
    start, end, target, mod = faults["ip_drop"]
    assert mod == ipeth
    assert advance(db, ipeth, "in", start + 0.2, end) == 0
    assert advance(db, ipeth, "in", start - 2, start) > 100


def _wait_for_snapshots(run_root, n, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for db_path in run_root.glob("*/*/run.db"):
            try:
                db = sqlite3.connect(f"file:{db_path}?mode=ro", uri=True)
                if db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= n:
                    return db_path.parent
            except sqlite3.Error:
                pass
        time.sleep(0.2)
    raise AssertionError(f"no run under {run_root} recorded {n} snapshots in {timeout}s")


def _start(tmp_path):
    return subprocess.Popen([VENV_BIN / "run-experiment", str(spec(tmp_path, "60s")), "--results",
                             str(tmp_path / "results")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, cwd=REPO)


def test_sigterm_midway_leaves_nothing_and_an_interrupted_readable_run(tmp_path, no_leftovers):
    proc = _start(tmp_path)
    try:
        run = _wait_for_snapshots(tmp_path / "results", 80)  # past the tcp_drop at 6 s
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + signal.SIGTERM, out
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "SIGTERM" in manifest["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 80
    # The fault that was in force (or done) has both ends stamped.
    assert db.execute("SELECT count(*) FROM faults WHERE start IS NOT NULL AND end IS NULL").fetchone()[0] == 0


def test_sigkill_then_cleanup_removes_everything(tmp_path, no_leftovers):
    before = set(leftovers())
    proc = _start(tmp_path)
    try:
        run = _wait_for_snapshots(tmp_path / "results", 20)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
        time.sleep(0.5)
        assert set(leftovers()) - before, "a SIGKILLed runner cannot clean up; there should be something to clean"
    finally:
        r = subprocess.run([VENV_BIN / "nestlab", "cleanup"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "killed" in r.stdout
    time.sleep(0.5)
    assert not set(leftovers()) - before
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and "cleanup" in manifest["reason"]
    db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
    assert db.execute("SELECT count(*) FROM snapshots").fetchone()[0] >= 20


def test_a_collector_that_dies_fails_the_run_and_the_analysis_says_so(tmp_path, no_leftovers):
    """The collector killed mid-run (as a full disk would end it): the run stops at once, ends
    `failed` naming the recording's end, leaves nothing behind, and its analysis warns of the gap."""
    proc = _start(tmp_path)
    try:
        run = _wait_for_snapshots(tmp_path / "results", 30)
        db = sqlite3.connect(f"file:{run / 'run.db'}?mode=ro", uri=True)
        (pid,) = db.execute("SELECT pid FROM processes WHERE role = 'collector'").fetchone()
        db.close()
        os.kill(pid, signal.SIGKILL)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, out
    manifest = json.loads((run / "manifest.json").read_text())
    assert manifest["status"] == "failed", out
    assert manifest["reason"].startswith("recording stopped: the collector exited with status -9 at t = ")
    assert "snapshots stop" in out and "the recording ended early (did the collector die?)" in out


def test_a_second_run_at_the_same_time_is_refused(tmp_path, no_leftovers):
    """One Mininet network at a time: a run started while another goes on is refused in one line
    naming the first, makes no run directory, and leaves the first alone."""
    proc = _start(tmp_path)
    try:
        _wait_for_snapshots(tmp_path / "results", 10)
        second = subprocess.run([VENV_BIN / "run-experiment", str(spec(tmp_path, "60s")), "--results",
                                 str(tmp_path / "second")], capture_output=True, text=True, cwd=REPO, timeout=60)
        assert proc.poll() is None                       # the first goes on
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert second.returncode == 2, second.stderr
    (line,) = second.stderr.strip().splitlines()
    assert line.startswith(f"error: another run is going on on this machine: {tmp_path / 'e2e.yaml'} (pid {proc.pid}")
    assert not (tmp_path / "second").exists()
    assert proc.returncode == 128 + signal.SIGTERM, out


APP_SPEC = f"""\
name: e2e_app
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: 16s
seed: 5
monitor: site1n1
workloads:
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 2}}
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 300MB}}
faults:
  - {{kind: app_pause, target: {{workload: 0}}, schedule: {{at: [5s], duration: 2s}}}}
  - {{kind: ip_drop, at: x1, schedule: {{at: [10s], duration: 2s}}}}
"""


def test_interceptor_modules_and_app_pause(tmp_path, no_leftovers):
    code, runs = run_experiment(write(tmp_path, "app.yaml", APP_SPEC), tmp_path / "results")
    assert code == 0
    db = sqlite3.connect(runs[0] / "run.db")
    pids = dict(db.execute("SELECT workload, pid FROM processes WHERE role = 'client'").fetchall())
    mods = {key: mid for mid, key in db.execute("SELECT id, key FROM modules")}
    iperf_app, wget_app = mods[f"app:{pids[0]}"], mods[f"app:{pids[1]}"]
    edges = db.execute("SELECT parent, child FROM edges").fetchall()
    iperf_socks = [c for p, c in edges if p == iperf_app]
    (wget_sock,) = [c for p, c in edges if p == wget_app]
    assert len(iperf_socks) == 2
    # The whole NS graph: app -> socket -> tcp -> ipeth.
    tcp_of = {p: c for p, c in edges if p in iperf_socks}
    assert len(tcp_of) == 2 and all(any(p == t for p, _ in edges) for t in tcp_of.values())

    (start, end, target) = db.execute("SELECT start, end, target_module FROM faults WHERE kind = 'app_pause'").fetchone()
    assert target == iperf_app and end - start == pytest.approx(2.0, abs=0.1)
    # Paused: no new send starts (a write already blocked in the kernel may still complete, as
    # thesis 3.5.4.3 observes), and the paused time is not wait time...
    a, b = start + 0.15, end - 0.05
    for sock in iperf_socks:
        assert counter(db, sock, "out", "total_msgs", b) - counter(db, sock, "out", "total_msgs", a) <= 1
        assert counter(db, sock, "out", "wait_ms", b) - counter(db, sock, "out", "wait_ms", a) < 0.5 * (b - a) * 1000
        # ...while before and after the pause the same counters advance.
        assert counter(db, sock, "out", "total_msgs", start) > counter(db, sock, "out", "total_msgs", start - 1.5)
        assert counter(db, sock, "out", "total_msgs", end + 2.5) > counter(db, sock, "out", "total_msgs", end + 0.5)
    assert counter(db, wget_sock, "in", "total_msgs", b) > counter(db, wget_sock, "in", "total_msgs", a)

    # ip_drop: wget waits for data the network does not deliver.
    (start, end) = db.execute("SELECT start, end FROM faults WHERE kind = 'ip_drop'").fetchone()
    a, b = start + 0.2, end
    assert counter(db, wget_sock, "in", "wait_ms", b) - counter(db, wget_sock, "in", "wait_ms", a) > 0.8 * (b - a) * 1000
    assert counter(db, wget_sock, "in", "total_msgs", b) - counter(db, wget_sock, "in", "total_msgs", a) <= 1

"""End to end: `nestlab top` under tmux on a real run while it goes on, and the online diagnosis of that
run against the offline one (docs/live.md)."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time

import pytest

from analysis.live import LiveEngine
from tests.support.env import REPO, VENV_BIN, run_id, write
from tests.support.live import differences, lag_exceptions, offline, outside_the_rule, stalled_sets

pytestmark = [pytest.mark.root, pytest.mark.slow]

SPEC = f"""\
name: live_top
topology: {REPO / "topologies" / "dumbbell.yaml"}
duration: 20s
seed: 3
monitor: site1n1
workloads:
  - {{kind: wget, host: site1n1, server: site2n1, file_size: 500MB}}
  - {{kind: iperf, host: site1n1, server: site2n2, direction: upload, parallel: 1}}
faults:
  - {{kind: tcp_drop, at: x1, target: {{workload: 0}}, schedule: {{at: [6s], duration: 5s}}}}
"""
FAULT = re.compile(r"^  tcp_drop (tcp \S+) \(module (\d+)\) at x1: ([\d.]+) s left$", re.M)


def tmux(*args: str, check: bool = True) -> str:
    return subprocess.run(["tmux", *args], capture_output=True, text=True, check=check).stdout


def alive(session: str) -> bool:
    return subprocess.run(["tmux", "has-session", "-t", session], capture_output=True).returncode == 0


def fault_screen(screen: str) -> bool:
    """The screen shows the run's fault in force and its connection STALLED (inbound: wget's download)."""
    m = FAULT.search(screen)
    if not m or "Faults: 1 active" not in screen:
        return False
    target = m.group(1)
    return any(line.split()[:3] == ["tcp", "in", "STALLED"] and line.endswith(f"  {target}")
               for line in screen.splitlines())


def test_top_under_tmux_during_a_real_run_and_online_equals_offline(tmp_path, no_leftovers):
    results = tmp_path / "results"
    session = f"nestlab-top-test-{tmp_path.name}"
    out_f, err_f = (tmp_path / "stdout").open("w"), (tmp_path / "stderr").open("w")
    runner = subprocess.Popen([VENV_BIN / "run-experiment", str(write(tmp_path, "live.yaml", SPEC)), "--results",
                               str(results)], stdout=out_f, stderr=err_f, text=True, cwd=REPO)
    screens: list[tuple[float, str]] = []
    engine = None
    try:
        deadline = time.monotonic() + 60
        run = None
        while run is None or "t0" not in json.loads((run / "manifest.json").read_text()):
            assert time.monotonic() < deadline and runner.poll() is None, "the run did not start"
            time.sleep(0.2)
            run = next(iter(results.glob("live_top/*")), None) if results.exists() else None
            run = run if run is not None and (run / "manifest.json").is_file() else None
        t0 = json.loads((run / "manifest.json").read_text())["t0"]
        tmux("new-session", "-d", "-s", session, "-x", "160", "-y", "50", f"{VENV_BIN / 'nestlab'} top {run}")
        engine = LiveEngine(run, history=True)   # the online engine of the agreement check, live as well
        while runner.poll() is None:
            engine.refresh()
            screens.append((time.clock_gettime(time.CLOCK_MONOTONIC) - t0, tmux("capture-pane", "-p", "-t", session)))
            time.sleep(0.5)
        assert runner.wait(timeout=120) == 0, (tmp_path / "stderr").read_text()[-2000:]
        err = (tmp_path / "stderr").read_text()

        # The screen while the run went on: the run, its time, and during the fault (6 s to 11 s, and the
        # 1 s the diagnosis lags) the fault with its time left and its connection STALLED.
        during = [s for t, s in screens if 8.0 <= t <= 11.0]
        assert during and all(s.startswith(f"nestlab top - {run_id(run)} (live_top)  running  t ") for s in during)
        assert sum(fault_screen(s) for s in during) >= 3, during[-1]
        assert not any(fault_screen(s) for t, s in screens if t < 5.5)
        assert "KIND   DIR STATE" in during[0] and "Snapshots: " in during[0]
        assert "STALLED at t " in err   # the progress view's live line (not a terminal: every 10 s)

        # The finished run's last snapshot, then q quits (the session ends with its command).
        assert alive(session) and f"{run_id(run)} (live_top)  complete" in tmux("capture-pane", "-p", "-t", session)
        tmux("send-keys", "-t", session, "q")
        end = time.monotonic() + 5
        while alive(session) and time.monotonic() < end:
            time.sleep(0.1)
        assert not alive(session)

        # What the engine settled while the run went on (and at its end) is the offline diagnosis.
        engine.refresh()
        off = offline(run)
        assert set(engine.history) == set(off) and len(off) > 150
        diffs = differences(engine.history, off)
        assert outside_the_rule(diffs, lag_exceptions(run, engine.lag)) == []
        assert diffs == []   # and here nothing needed the exception
        online, offline_sets = stalled_sets(engine.history), stalled_sets(off)
        assert online == offline_sets and any(online.values())
    finally:
        (tmp_path / "screens.txt").write_text("".join(f"--- t {t:.1f} s\n{s}" for t, s in screens))  # to look at
        if engine is not None:
            engine.close()
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        if runner.poll() is None:   # a failure above: let the runner clean up as on Ctrl-C
            runner.send_signal(signal.SIGINT)
            try:
                runner.wait(timeout=60)
            except subprocess.TimeoutExpired:
                runner.kill()
                runner.wait()
        out_f.close()
        err_f.close()

"""The service tiers' interceptor environment (harness/service/tiers.py): app_pause at a tier host
pauses a daemon through real-time signals, since nginx and gunicorn use SIGUSR1 and SIGUSR2."""

from __future__ import annotations

import shutil
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest

from harness.service.tiers import TIER_PAUSE_SIGNALS, ServiceTiers


def test_the_tiers_run_with_real_time_pause_signals(tmp_path):
    tiers = ServiceTiers(None, {}, {}, tmp_path, tmp_path, None, {"app2": {"LD_PRELOAD": "lib.so"}, "web": {}})
    env = tiers.host_env["app2"]
    assert (env["NESTLAB_PAUSE_SIGNAL"], env["NESTLAB_RESUME_SIGNAL"]) == TIER_PAUSE_SIGNALS == ("RTMIN+8", "RTMIN+9")
    assert env["LD_PRELOAD"] == "lib.so" and "web" not in tiers.host_env   # a host without the interceptor


@pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None, reason="needs gcc and make")
@pytest.mark.timeout(60)
def test_a_process_with_the_tiers_environment_pauses_and_resumes_on_them(tmp_path):
    from harness.faults.tier_hosts import observed_pids
    from harness.interceptor import build, create_shm_dir, preload_env, remove_shm_dir
    from harness.interceptor.pause import pause_process, resume_process
    from harness.interceptor.shm import shm_file

    lib = build()
    assert lib.is_file()
    shm = create_shm_dir(prefix="multihost-")
    env = preload_env(shm, env={"PATH": "/usr/bin:/bin"})
    env.update(NESTLAB_PAUSE_SIGNAL=TIER_PAUSE_SIGNALS[0], NESTLAB_RESUME_SIGNAL=TIER_PAUSE_SIGNALS[1])
    listener = socket.create_server(("127.0.0.1", 0))
    code = ("import socket, sys, time\nc = socket.create_connection(('127.0.0.1', int(sys.argv[1])))\n"
            "while True:\n    c.send(b'x'); time.sleep(0.01)\n")
    p = subprocess.Popen([sys.executable, "-c", code, str(listener.getsockname()[1])], env=env)
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], env=env)   # no socket at all
    try:
        deadline = time.monotonic() + 10
        while not Path(shm_file(shm, p.pid)).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        peer, _ = listener.accept()
        # NeST sees the one with a TCP connection as an application, not the idle one
        while not Path(shm_file(shm, idle.pid)).exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        fake = types.SimpleNamespace(spec=types.SimpleNamespace(monitor=["web", "app2"]), shm_dirs={"app2": str(shm)})
        assert wait_for(lambda: observed_pids(fake, "app2", [p.pid, idle.pid]) == [p.pid])
        assert observed_pids(fake, "web", [p.pid]) == []          # no interceptor directory there
        fake.spec.monitor = ["web"]
        assert observed_pids(fake, "app2", [p.pid]) == []         # app2 not monitored
        st = pause_process(shm, p.pid)
        assert st.paused and st.pause_signal == signal.SIGRTMIN + 8 and st.resume_signal == signal.SIGRTMIN + 9
        st = resume_process(shm, p.pid)
        assert not st.paused and p.poll() is None   # the signals did not end the process
    finally:
        for q in (p, idle):
            q.kill()
            q.wait()
        listener.close()
        remove_shm_dir(shm)


def wait_for(check, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.mark.parametrize("error", [KeyboardInterrupt, TimeoutError])
def test_a_tier_pause_interrupted_midway_resumes_what_it_paused(monkeypatch, error):
    """app_pause at a tier host pauses its processes one by one; an error other than the
    interceptor's (Ctrl-C, a timeout) after the first leaves no process paused: none is a part yet,
    so nothing else would resume it."""
    from harness.faults import app_pause
    from harness.interceptor.shm import InterceptorStateError

    calls = []

    class Backend:
        def pause(self, host, shm, pid):
            if pid == 12:
                raise error()
            calls.append(("pause", pid))
            return types.SimpleNamespace(pause_signal=42, resume_signal=43, ack_mono=1.0)

        def resume(self, host, shm, pid):
            calls.append(("resume", pid))
            if pid == 10:
                raise InterceptorStateError("process 10 is gone")

    monkeypatch.setattr(app_pause, "tier_pids", lambda env, host: (0, "cache", [10, 11, 12]))
    monkeypatch.setattr(app_pause, "observed_pids", lambda env, host, pids: pids)
    env = types.SimpleNamespace(backend=Backend(), shm_dirs={"cache": "/dev/shm/x"}, shm_dir=None)
    with pytest.raises(error):
        app_pause.AppPause(env)._pause_tier("cache")
    assert calls == [("pause", 10), ("pause", 11), ("resume", 10), ("resume", 11)]

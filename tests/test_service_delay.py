"""The delay fault on a service's app tier (issue 33 item 5, app tiers only): the app holds each
reply while its host's switch is set, the kind sets and clears the switch with stamps, the spec's
rules; tier_pause on a real process group."""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.backends.base import ClockOffset, Clocks
from harness.faults import KINDS
from harness.faults.base import FaultEnv, NoTarget
from harness.service import app
from harness.spec import load_spec
from harness.window import Window
from harness.yamlload import SpecError
from tests.support.env import REPO, write

SPEC = f"""\
name: svc
topology: {REPO / "topologies" / "service.yaml"}
duration: 30s
monitor: web
workloads:
  - {{kind: service, rate: 10/s}}
faults:
  - {{kind: delay, {{fields}}, schedule: {{at: [5s], duration: 5s}}}}
"""


def test_the_app_holds_its_replies_while_its_switch_is_set(tmp_path, monkeypatch):
    monkeypatch.setattr(app, "CONTROL", str(tmp_path))
    monkeypatch.setattr(app, "HOST", "app2")
    assert app.added_delay() == 0.0
    (tmp_path / "delay-app2").write_text("0.05\n")
    assert app.added_delay() == 0.05
    (tmp_path / "delay-app1").write_text("9\n")          # another host's switch
    assert app.added_delay() == 0.05
    monkeypatch.setattr(app, "_cache", lambda: SimpleNamespace(get=lambda k: b"v", set=lambda k, v: None))
    t = time.monotonic()
    app.application({"PATH_INFO": "/item/1", "REQUEST_METHOD": "GET"}, lambda *a: None)
    assert 0.05 <= time.monotonic() - t < 5   # its own 50 ms, never app1's 9 s (loose: a loaded CI machine)
    os.unlink(tmp_path / "delay-app2")
    assert app.added_delay() == 0.0


class _Tiers:
    def __init__(self, d):
        self.d = d

    def pids(self):
        return {"app": [("app1", 11), ("app2", 22)]}

    def delay_file(self, host):
        return str(self.d / f"delay-{host}")

    def set_delay(self, host, seconds):   # ServiceTiers.set_delay on one machine
        path = self.delay_file(host)
        with open(path, "w") as f:
            f.write(f"{seconds:.6f}\n")
        return path

    def clear_delay(self, host):
        Path(self.delay_file(host)).unlink(missing_ok=True)

    def read(self, host, path):
        return Path(path).read_text() if Path(path).exists() else None

    def children(self, host, pids):   # ServiceTiers.children on one machine: /proc here
        return sorted(int(c) for p in pids for c in Path(f"/proc/{p}/task/{p}/children").read_text().split())


def test_the_kind_sets_and_clears_the_switch_with_stamps(tmp_path):
    exp = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", "host: app2, by: 200ms")))
    env = FaultEnv(exp.spec, None, Clocks("web", {}, ClockOffset()), SimpleNamespace(services={0: _Tiers(tmp_path)}),
                   random.Random(1), "r")
    kind = KINDS["delay"](env)
    (part,) = kind.inject(Window(0, 5.0, 5.0), 1)
    assert (tmp_path / "delay-app2").read_text().strip() == "0.200000"
    assert '"host": "app2"' in part.target and '"pids": [22]' in part.target and "200 ms" in part.rule
    end = kind.heal(part)
    assert not (tmp_path / "delay-app2").exists() and end >= part.start
    kind.inject(Window(0, 5.0, 5.0), 2)
    kind.teardown()                                       # a stopped run: no switch stays set
    assert not (tmp_path / "delay-app2").exists()


@pytest.mark.parametrize("fields, message", [
    ("host: app2, by: 0ms", "'by' must be above 0"),
    ("host: app2, by: -200ms", "faults[0].by: expected a duration"),
    ("host: db, by: 200ms", "faults[0].host: delay at the db tier on 'db' acts through the interceptor"),
    ("host: cache, by: 200ms", "faults[0].host: delay at the cache tier on 'cache' acts through the interceptor"),
    ("host: client, by: 200ms", "faults[0].host: 'client' runs no tier"),
    ("host: nowhere, by: 200ms", "faults[0].host: 'nowhere' runs no tier"),
    ("by: 200ms", "delay needs 'host'"),
    ("host: app2", "delay needs 'by'"),
    ("host: app2, by: 200ms, at: x3", "'at' applies to"),
])
def test_bad_delay_specs_are_one_line(tmp_path, fields, message):
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", fields)))
    assert message in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("host, extra", [("web", ""), ("cache", "trace: messages\n"), ("db", "trace: messages\n")])
def test_delay_at_an_event_loop_tier_is_accepted_when_intercepted(tmp_path, host, extra):
    """web (monitored, so under the interceptor) and cache (traced): deferred, no longer refused."""
    exp = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", f"host: {host}, by: 150ms")
                          .replace("monitor: web\n", "monitor: web\n" + extra)))
    assert (exp.spec.faults[0].host, exp.spec.faults[0].by) == (host, 0.15)


def test_the_service_suite_has_projects5_delay():
    from harness.suite import load_suite

    suite = load_suite(REPO / "experiments" / "service.yaml")
    delay = [f for e in suite.experiments for f in e.spec.faults]
    assert [(f.kind, f.host, f.by) for f in delay] == [("delay", "app2", 0.2)]


def test_on_the_monitored_host_each_worker_is_a_target(tmp_path):
    import subprocess

    exp = load_spec(write(tmp_path, "s.yaml", SPEC.replace("{fields}", "host: app2, by: 200ms")
                          .replace("monitor: web", "monitor: app2")))
    worker = subprocess.Popen(["sleep", "30"])   # a child of ours, as a gunicorn worker of its master
    try:
        tiers = _Tiers(tmp_path)
        tiers.pids = lambda: {"app": [("app2", os.getpid())]}
        env = FaultEnv(exp.spec, None, Clocks("app2", {}, ClockOffset()), SimpleNamespace(services={0: tiers}),
                       random.Random(1), "r")
        parts = KINDS["delay"](env).inject(Window(0, 5.0, 5.0), 1)
        assert f'"module_key": "app:{worker.pid}"' in next(p.target for p in parts if str(worker.pid) in p.target)
        assert len({p.action.path for p in parts}) == 1
    finally:
        worker.kill()
        worker.wait()


@pytest.mark.parametrize("fields, message", [
    ("host: client", "faults[0].host: 'client' runs no tier"),
    ("host: x3", "faults[0].host: 'x3' runs no tier"),
    ("at: x3", "tier_pause needs 'host'"),
])
def test_bad_tier_pause_specs_are_one_line(tmp_path, fields, message):
    spec = SPEC.replace("kind: delay", "kind: tier_pause").replace("{fields}", fields)
    with pytest.raises(SpecError) as e:
        load_spec(write(tmp_path, "s.yaml", spec))
    assert message in str(e.value) and "\n" not in str(e.value)


def test_tier_pause_stops_and_continues_the_tiers_whole_group(tmp_path):
    import signal
    import subprocess

    from harness.backends.base import Proc

    exp = load_spec(write(tmp_path, "s.yaml", SPEC.replace("kind: delay", "kind: tier_pause")
                          .replace("{fields}", "host: cache")))
    # a daemon with a child in its own process group, as memcached or gunicorn and its workers
    daemon = subprocess.Popen(["sh", "-c", "sleep 30 & wait"], start_new_session=True)
    proc = Proc("cache", daemon.pid, ["memcached"], None, 0.0, daemon)
    node = SimpleNamespace(name="cache", monotonic=time.monotonic, signal=lambda p, sig: os.killpg(p.pid, sig),
                           run=lambda argv, check=False: subprocess.run(argv, capture_output=True, text=True))
    env = FaultEnv(exp.spec, SimpleNamespace(node=lambda n: node), Clocks("web", {"cache": ClockOffset()}, ClockOffset()),
                   SimpleNamespace(services={0: SimpleNamespace(procs=[("cache", proc)])}), random.Random(1), "r")
    kind = KINDS["tier_pause"](env)
    try:
        time.sleep(0.2)
        (part,) = kind.inject(Window(0, 5.0, 5.0), 1)      # web is monitored: one row, no module
        from harness.faults.tier_pause import group_pids

        def _states(pids):   # every thread's state letter, read as the kind reads it
            out = subprocess.run(["sh", "-c", " ".join(["grep -h '^State:'"] + [f"/proc/{p}/task/*/status" for p in pids])],
                                 capture_output=True, text=True).stdout
            return [ln.split()[1] for ln in out.splitlines()]

        pids = group_pids(daemon.pid)
        assert len(pids) == 2 and set(_states(pids)) == {"T"} and '"module_key": null' in part.target
        assert kind.heal(part) >= part.start and "T" not in _states(pids)
    finally:
        os.killpg(daemon.pid, signal.SIGKILL)
        daemon.wait()


@pytest.mark.parametrize("tier, mode", [("db", 0), ("cache", 1), ("web", 1)])
def test_delay_at_another_tier_is_the_interceptors_hold_in_its_processes(tmp_path, tier, mode):
    """db, cache, web: the kind sets reply_delay_ns in the header of every live process of the host's
    interceptor directory (a real process under the library here), stamps, and clears it; the db's
    replies are held (mode 0), an event loop's deferred (mode 1)."""
    import struct
    import subprocess
    import sys

    from harness.interceptor import ENV_SHM_DIR, build, create_shm_dir, preload_env, remove_shm_dir
    from harness.interceptor.delay import DELAY, DELAY_OFF, MODE_OFF

    build()
    text = SPEC.replace("{fields}", f"host: {tier}, by: 200ms").replace("monitor: web", "monitor: web\ntrace: messages")
    exp = load_spec(write(tmp_path, "s.yaml", text))
    shm = create_shm_dir("nestlab-delay-test-")
    proc = subprocess.Popen([sys.executable, str(REPO / "tests" / "interceptor" / "trace_peer.py"), "echo-server",
                             str(tmp_path / "port")], env=preload_env(shm, env=dict(os.environ)))
    try:
        deadline = time.monotonic() + 30
        while not (tmp_path / "port").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.01)
        workloads = SimpleNamespace(services={}, client_env={tier: {ENV_SHM_DIR: str(shm)}})
        env = FaultEnv(exp.spec, None, Clocks("web", {}, ClockOffset()), workloads, random.Random(1), "r")
        kind = KINDS["delay"](env)

        def held_ns() -> int:
            with open(shm / f"{proc.pid}.nest", "rb") as f:
                f.seek(DELAY_OFF)
                return DELAY.unpack(f.read(DELAY.size))[0]

        (part,) = kind.inject(Window(0, 5.0, 5.0), 1)
        assert held_ns() == 200_000_000
        with open(shm / f"{proc.pid}.nest", "rb") as f:
            f.seek(MODE_OFF)
            assert struct.unpack("<I", f.read(4))[0] == mode
        assert ("deferred" in part.rule) == bool(mode)
        assert f'"tier": "{tier}"' in part.target and f'"pids": [{proc.pid}]' in part.target and "reply_delay_ns" in part.rule
        end = kind.heal(part)
        assert held_ns() == 0 and end >= part.start
        kind.inject(Window(0, 5.0, 5.0), 2)
        kind.teardown()                                   # a stopped run: no hold stays set
        assert held_ns() == 0
        # a host whose processes are not under the interceptor: nothing to act on
        env.workloads = SimpleNamespace(services={}, client_env={})
        with pytest.raises(NoTarget):
            KINDS["delay"](env).inject(Window(0, 5.0, 5.0), 3)
    finally:
        proc.kill()
        proc.wait()
        remove_shm_dir(shm)


def test_a_hold_interrupted_midway_is_cleared_by_teardown(tmp_path, monkeypatch):
    """Ctrl-C while the delay is set process by process: the processes already held are cleared by
    the kind's teardown (the hold is registered before the first header is written)."""
    from harness.faults import delay as delay_kind
    from harness.interceptor import ENV_SHM_DIR

    held = {}

    def set_host_delay(env, host, shm, seconds, mode=0):
        if seconds:
            held[101] = seconds          # the first process held, then the interrupt
            raise KeyboardInterrupt
        held.clear()
        return []

    monkeypatch.setattr(delay_kind.onnode, "set_host_delay", set_host_delay)
    text = SPEC.replace("{fields}", "host: db, by: 200ms").replace("monitor: web", "monitor: web\ntrace: messages")
    exp = load_spec(write(tmp_path, "s.yaml", text))
    workloads = SimpleNamespace(services={}, client_env={"db": {ENV_SHM_DIR: "/dev/shm/none"}})
    env = FaultEnv(exp.spec, None, Clocks("web", {}, ClockOffset()), workloads, random.Random(1), "r")
    kind = KINDS["delay"](env)
    with pytest.raises(KeyboardInterrupt):
        kind.inject(Window(0, 5.0, 5.0), 1)
    assert held == {101: 0.2}
    kind.teardown()
    assert held == {}


def test_sends_a_deferral_had_no_room_for_are_warned_once(tmp_path, monkeypatch):
    """The host's replies_undeferred grew while the window was in force: one warning, with the count."""
    from harness.faults import delay as delay_kind
    from harness.interceptor import ENV_SHM_DIR

    counts = iter([5, 12])                  # at inject, at heal
    monkeypatch.setattr(delay_kind.onnode, "host_undeferred", lambda env, host, shm: next(counts))
    monkeypatch.setattr(delay_kind.onnode, "set_host_delay", lambda env, host, shm, seconds, mode=0: [4242])
    monkeypatch.setattr(delay_kind, "observed_pids", lambda env, host, pids: [])
    text = SPEC.replace("{fields}", "host: cache, by: 150ms").replace("monitor: web", "monitor: web\ntrace: messages")
    exp = load_spec(write(tmp_path, "s.yaml", text))
    workloads = SimpleNamespace(services={}, client_env={"cache": {ENV_SHM_DIR: "/dev/shm/none"}})
    env = FaultEnv(exp.spec, None, Clocks("web", {}, ClockOffset()), workloads, random.Random(1), "r")
    kind = KINDS["delay"](env)
    (part,) = kind.inject(Window(0, 5.0, 5.0), 1)
    assert kind.take_warnings() == []
    kind.heal(part)
    (w,) = kind.take_warnings()
    assert "cache tier on cache: 7 send(s) not deferred" in w and "150 ms" in w
    assert kind.take_warnings() == []


# ---- the interceptor's delay fields, on header files made here (no library) ----------------------------

def _header_file(d, pid: int) -> str:
    """A file with an interceptor header for `pid` (its real start time: a live process)."""
    import mmap

    from harness.interceptor.shm import HDR, HEADER_SIZE, MAGIC, SUFFIX, VERSION

    stat = open(f"/proc/{pid}/stat", "rb").read()
    start = int(stat[stat.rfind(b")") + 2:].split()[19])
    head = bytearray(max(HEADER_SIZE, mmap.PAGESIZE))
    fields = [0] * len(HDR.unpack(bytes(HDR.size)))
    fields[0], fields[1], fields[2], fields[5], fields[7] = MAGIC, VERSION, HEADER_SIZE, pid, start
    HDR.pack_into(head, 0, *fields)
    path = d / f"{pid}{SUFFIX}"
    path.write_bytes(bytes(head))
    return str(path)


def test_the_delay_and_its_mode_are_written_and_read_back(tmp_path):
    import struct

    from harness.interceptor.delay import DEFER, DELAY, DELAY_OFF, HOLD, MODE_OFF, set_reply_delay
    from harness.interceptor.shm import InterceptorStateError

    path = _header_file(tmp_path, os.getpid())

    def fields():
        raw = open(path, "rb").read()
        return DELAY.unpack_from(raw, DELAY_OFF)[0], struct.unpack_from("<I", raw, MODE_OFF)[0]

    assert set_reply_delay(path, 0.15, DEFER) == 150_000_000 and fields() == (150_000_000, DEFER)
    assert set_reply_delay(path, 0) == 0 and fields() == (0, DEFER)     # cleared: the mode is left
    assert set_reply_delay(path, 0.2, HOLD) == 200_000_000 and fields() == (200_000_000, HOLD)
    with pytest.raises(ValueError):
        set_reply_delay(path, 0.2, 7)
    other = tmp_path / "x.nest"
    other.write_bytes(b"\0" * 4096)
    with pytest.raises(InterceptorStateError):
        set_reply_delay(other, 0.2, DEFER)


def test_undeferred_sends_are_summed_over_the_live_processes_of_a_host(tmp_path):
    import struct
    import subprocess

    from harness.interceptor.delay import DEFER, MODE_OFF, defer_counts, host_undeferred, set_host_delay

    mine = _header_file(tmp_path, os.getpid())
    gone = subprocess.Popen(["sleep", "30"])
    dead = _header_file(tmp_path, gone.pid)
    gone.kill()
    gone.wait()
    for path, counts in ((mine, (3, 512)), (dead, (40, 0))):
        raw = bytearray(open(path, "rb").read())
        struct.pack_into("<QQ", raw, MODE_OFF + 8, *counts)
        open(path, "wb").write(raw)
    assert defer_counts(mine) == (3, 512) and defer_counts(dead) == (40, 0)
    assert host_undeferred(tmp_path) == 3                # the dead process is not the host's any more
    assert set_host_delay(tmp_path, 0.1, DEFER) == [os.getpid()]

"""The queue sampler (harness/lab/queues.py): rounds read in a thread, each stamped when read,
drained by the lab; a slow read never holds up its caller; a failing read stops it, kept."""

from __future__ import annotations

import threading
import time

from harness.lab.queues import QueueSampler


def test_rounds_are_read_in_the_background_and_drained_in_order():
    calls = iter(range(1000))
    s = QueueSampler(lambda: [{"n": next(calls)}], time.monotonic, 0.01)
    s.start()
    time.sleep(0.1)
    first = s.drain()
    rest = s.stop()
    rounds = first + rest
    assert len(rounds) >= 3
    assert [r[1][0]["n"] for r in rounds] == list(range(len(rounds)))
    assert all(a[0] < b[0] for a, b in zip(rounds, rounds[1:], strict=False))
    assert s.drain() == []


def test_a_slow_read_does_not_hold_up_the_caller():
    release = threading.Event()
    s = QueueSampler(lambda: [{"ok": release.wait(5)}], time.monotonic, 0.01)
    s.start()
    begun = time.monotonic()
    assert s.drain() == []
    assert time.monotonic() - begun < 0.5
    release.set()
    assert s.stop()[0][1] == [{"ok": True}]


def test_a_failing_read_stops_the_sampler_and_keeps_the_error():
    def read():
        raise OSError("node gone")

    s = QueueSampler(read, time.monotonic, 0.01)
    s.start()
    time.sleep(0.05)
    assert s.stop() == [] and isinstance(s.error, OSError)

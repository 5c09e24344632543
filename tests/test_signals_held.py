"""signals_held (harness/ledger.py): SIGINT/SIGTERM/SIGHUP held off while a process is started and
recorded, delivered on exit; in the main thread deferred by a handler, not blocked, so a program
started inside keeps an unblocked mask without preexec_fn (Popen may vfork)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import threading
from pathlib import Path

import pytest

from harness.ledger import held_mask_preexec, signals_held, unblock_held_signals


@pytest.fixture
def term_seen():
    seen: list[int] = []
    previous = signal.signal(signal.SIGTERM, lambda s, _f: seen.append(s))
    yield seen
    signal.signal(signal.SIGTERM, previous)


def test_a_signal_inside_is_delivered_once_on_exit(term_seen):
    with signals_held():
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))   # a few bytecodes: a handler would have run here
        assert term_seen == []
    assert term_seen == [signal.SIGTERM]
    assert signal.getsignal(signal.SIGTERM) is not None


def test_nested_holds_deliver_at_the_outer_exit(term_seen):
    with signals_held():
        with signals_held():
            os.kill(os.getpid(), signal.SIGTERM)
        sum(range(1000))
        assert term_seen == []
    assert term_seen == [signal.SIGTERM]


def test_an_exception_inside_still_restores_the_handler(term_seen):
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(ZeroDivisionError), signals_held():
        1 / 0   # noqa: B018
    assert signal.getsignal(signal.SIGTERM) is handler


def test_a_program_started_inside_the_main_threads_hold_has_no_blocked_signal(tmp_path):
    with signals_held():
        assert held_mask_preexec() is None
        proc = subprocess.Popen(["sleep", "5"], preexec_fn=held_mask_preexec())
    try:
        status = Path(f"/proc/{proc.pid}/status").read_text()
        blocked = int(re.search(r"^SigBlk:\s*([0-9a-f]+)", status, re.M).group(1), 16)
        assert not blocked & (1 << (signal.SIGTERM - 1)), status
    finally:
        proc.kill()
        proc.wait()


def test_another_thread_blocks_them_and_its_children_unblock():
    got = {}

    def work():
        with signals_held():
            got["inside"] = held_mask_preexec()
            got["mask"] = signal.pthread_sigmask(signal.SIG_BLOCK, ())
        got["after"] = signal.pthread_sigmask(signal.SIG_BLOCK, ())

    t = threading.Thread(target=work)
    t.start()
    t.join()
    assert got["inside"] is unblock_held_signals
    assert signal.SIGTERM in got["mask"] and signal.SIGTERM not in got["after"]

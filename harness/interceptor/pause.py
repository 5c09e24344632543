"""The application-fault handshake: pause and resume a process running under the interceptor.

The library installs handlers for a pause and a resume signal (NESTLAB_PAUSE_SIGNAL /
NESTLAB_RESUME_SIGNAL, default SIGUSR1 / SIGUSR2). A handler stamps CLOCK_MONOTONIC into the header
of the process's counter file and then increments `ack_seq`. `pause_process(dir, pid)` sends the
pause signal and returns once the handler has run, with the time it ran (`resume_process` likewise);
`pause_state(dir, pid)` reads the state without signalling. Used where the process runs: the Mininet
backend directly, the SSH backend through `python3 -m harness.agent pause|resume`.
"""

from __future__ import annotations

import os
import time

from harness.interceptor.shm import InterceptorStateError, PauseState, ShmFile, shm_file

__all__ = ["InterceptorStateError", "PauseState", "pause_process", "pause_state", "resume_process",
           "wait_for_ack"]


def pause_state(shm_dir: str | os.PathLike, pid: int) -> PauseState:
    """The pause/resume state of pid as its interceptor last acknowledged it."""
    path = shm_file(shm_dir, pid)
    try:
        f = ShmFile(path)
    except FileNotFoundError:
        raise InterceptorStateError(f"process {pid} has no interceptor file {path} "
                                    "(not started under the interceptor, or NESTLAB_SHM_DIR differs)") from None
    try:
        return f.pause_state()
    finally:
        f.close()


def wait_for_ack(shm_dir: str | os.PathLike, pid: int, after_seq: int, timeout: float = 2.0,
                 interval: float = 0.001) -> PauseState:
    """Wait until pid's ack_seq passes after_seq; InterceptorStateError on timeout."""
    path = shm_file(shm_dir, pid)
    f = ShmFile(path)
    try:
        deadline = time.monotonic() + timeout
        while True:
            st = f.pause_state()
            if st.ack_seq > after_seq:
                return st
            if time.monotonic() >= deadline:
                raise InterceptorStateError(f"process {pid} did not acknowledge the signal within {timeout:g} s "
                                            f"(ack_seq still {st.ack_seq})")
            time.sleep(interval)
    finally:
        f.close()


def _signal_and_wait(shm_dir, pid: int, pause: bool, timeout: float) -> PauseState:
    before = pause_state(shm_dir, pid)
    sig = before.pause_signal if pause else before.resume_signal
    if not sig:
        raise InterceptorStateError(f"process {pid} runs with pause/resume disabled (NESTLAB_PAUSE_SIGNAL=none)")
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        raise InterceptorStateError(f"process {pid} is gone") from None
    st = wait_for_ack(shm_dir, pid, before.ack_seq, timeout)
    if st.paused != pause:
        raise InterceptorStateError(f"process {pid} acknowledged the signal but is {'not ' if pause else ''}paused")
    return st


def pause_process(shm_dir: str | os.PathLike, pid: int, timeout: float = 2.0) -> PauseState:
    """Send pid its pause signal and wait for the handler to run; .ack_mono is when it did."""
    return _signal_and_wait(shm_dir, pid, True, timeout)


def resume_process(shm_dir: str | os.PathLike, pid: int, timeout: float = 2.0) -> PauseState:
    """Send pid its resume signal and wait for the handler to run; .ack_mono is when it did."""
    return _signal_and_wait(shm_dir, pid, False, timeout)

"""Running several black-box algorithms on one imported trace at once, in forked processes (issue 43,
throughput: `nestlab paths --jobs N`, bench/paths_artifact.py --jobs N).

The trace is imported once, in this process; the workers are forked after it, so each reads the
trace's frames as the parent left them (copy-on-write pages, nothing pickled on the way in). A task
is a callable taking no argument (the algorithm with its parameters, its scoring too); only its
result travels back, pickled. Tasks are started longest first (the caller's `cost` hint), so the
longest ones do not start last; results come back in the tasks' order, so what is printed and
written is the same as a run one algorithm after another. This is a wall-clock gain only: the CPU
time is the same or a little more (fork, pickling the results back)."""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rundir.errors import UserError

# relative CPU time per span on the TraceWeaver artifact's traces (docs/blackbox.md, throughput): the
# longest are started first, so that none of them starts last (1 for an algorithm not named)
COST = {"traceweaver": 4.0, "linking": 3.0}

_TASKS: Sequence[Callable[[], Any]] = ()      # set before the fork; the workers read it from there


def default_jobs() -> int:
    """The cores this process may run on (its affinity; the machine's count where that is unknown)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def _run(i: int) -> tuple[bool, Any, float]:
    """(ok, result or the exception, CPU seconds of the task) of task i, in a worker."""
    cpu = time.process_time()
    try:
        out: Any = _TASKS[i]()
        ok = True
    except Exception as e:  # noqa: BLE001 - carried back to the parent, raised there as it was
        out, ok = e, False
    took = time.process_time() - cpu
    if not ok:
        try:
            pickle.dumps(out)
        except Exception as e:  # noqa: BLE001 - an exception that cannot be sent back: said in one line
            out = RuntimeError(f"{type(out).__name__}: {out} (could not be sent back from a worker: {e})")
    return ok, out, took     # a result that cannot be pickled fails its future (raised in the parent)


def run_tasks(tasks: Sequence[Callable[[], Any]], jobs: int,
              cost: Sequence[float] | None = None) -> tuple[list[Any], list[float]]:
    """(results, CPU seconds per task) of every task, in the tasks' order. jobs <= 1 or a single
    task: run here, one after another. Else in min(jobs, tasks) forked workers, the tasks of the
    highest `cost` first. The first failed task's exception is raised (after all have run)."""
    global _TASKS
    if jobs <= 1 or len(tasks) <= 1:
        results, cpu = [], []
        for task in tasks:
            c = time.process_time()
            results.append(task())
            cpu.append(time.process_time() - c)
        return results, cpu
    order = sorted(range(len(tasks)), key=lambda i: -(cost[i] if cost else 0.0))
    _TASKS = tasks
    try:
        with ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=multiprocessing.get_context("fork")) as pool:
            pending = {i: pool.submit(_run, i) for i in order}      # started in this order
            done = {i: f.result() for i, f in pending.items()}
    except BrokenProcessPool:
        raise UserError("a worker process ended before its algorithm did (killed, or out of memory?); "
                           "--jobs 1 runs them here, one after another") from None
    finally:
        _TASKS = ()
    for i in range(len(tasks)):
        if not done[i][0]:
            raise done[i][1]
    return [done[i][1] for i in range(len(tasks))], [done[i][2] for i in range(len(tasks))]

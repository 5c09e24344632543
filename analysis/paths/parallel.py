"""Running several black-box algorithms on one imported trace at once, in forked processes (issue 43,
throughput: `nestlab paths --jobs N`, bench/paths_artifact.py --jobs N).

The trace is imported once, in this process; the workers are forked after it, so each reads the
trace's frames as the parent left them (copy-on-write pages, nothing pickled on the way in). A task
is a callable taking no argument (the algorithm with its parameters, its scoring too); only its
result travels back, pickled. Tasks are started longest first (the caller's `cost` hint), so the
longest ones do not start last; results come back in the tasks' order, each as soon as it and those
before it are done, so what is printed and written is the same as a run one algorithm after another.
A wall-clock gain only, where cores are free: the CPU time grows (the forks, the results pickled
back: about 0.1 s a trace for six algorithms; docs/blackbox.md, throughput)."""

from __future__ import annotations

import multiprocessing
import pickle
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from rundir.errors import UserError

# relative CPU time per span on the TraceWeaver artifact's traces (docs/blackbox.md, throughput): the
# longest are started first, so that none of them starts last (1 for an algorithm not named)
COST = {"traceweaver": 4.0, "linking": 3.0}

_TASKS: Sequence[Callable[[], Any]] = ()      # set before the fork; the workers read it from there


class WorkerTraceback(Exception):
    """Where a task failed in its worker (the cause of the exception raised in the parent: shown
    with the traceback, e.g. under NESTLAB_DEBUG=1)."""


def _run(i: int) -> tuple[bool, Any, float, str]:
    """(ok, result or the exception, CPU seconds of the task, the failure's traceback) of task i,
    in a worker."""
    cpu = time.process_time()
    tb = ""
    try:
        out: Any = _TASKS[i]()
        ok = True
    except Exception as e:  # noqa: BLE001 - carried back to the parent, raised there as it was
        out, ok, tb = e, False, traceback.format_exc()
    took = time.process_time() - cpu
    if not ok:
        try:
            pickle.dumps(out)
        except Exception as e:  # noqa: BLE001 - an exception that cannot be sent back: said in one line
            out = RuntimeError(f"{type(out).__name__}: {out} (could not be sent back from a worker: {e})")
    return ok, out, took, tb     # a result that cannot be pickled fails its future (raised in the parent)


def iter_tasks(tasks: Sequence[Callable[[], Any]], jobs: int,
               cost: Sequence[float] | None = None) -> Iterator[tuple[Any, float]]:
    """(result, CPU seconds) of each task, in the tasks' order, each as soon as it and those before
    it are done (a caller prints as they come, as one after another would). jobs <= 1 or a single
    task: run here, one after another. Else in min(jobs, tasks) forked workers, the tasks of the
    highest `cost` started first. A failed task's exception is raised where its result would come;
    the tasks not yet started are then cancelled."""
    global _TASKS
    if jobs <= 1 or len(tasks) <= 1:
        for task in tasks:
            c = time.process_time()
            out = task()
            yield out, time.process_time() - c
        return
    order = sorted(range(len(tasks)), key=lambda i: -(cost[i] if cost else 0.0))
    pool = ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=multiprocessing.get_context("fork"))
    try:
        _TASKS = tasks
        try:
            # every worker is forked at the first submit (the fork start method), reading _TASKS
            pending = {i: pool.submit(_run, i) for i in order}      # started in this order
        finally:
            _TASKS = ()
        for i in range(len(tasks)):
            try:
                ok, out, took, tb = pending[i].result()
            except BrokenProcessPool:
                raise UserError("a worker process ended before its algorithm did (killed, or out of "
                                "memory?); --jobs 1 runs them here, one after another") from None
            if not ok:
                raise out from WorkerTraceback(f"in a worker:\n{tb}")
            yield out, took
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_tasks(tasks: Sequence[Callable[[], Any]], jobs: int,
              cost: Sequence[float] | None = None) -> tuple[list[Any], list[float]]:
    """iter_tasks, all of them: (results, CPU seconds per task), in the tasks' order."""
    done = list(iter_tasks(tasks, jobs, cost))
    return [r for r, _ in done], [c for _, c in done]

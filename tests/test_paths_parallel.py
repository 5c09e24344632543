"""Several algorithms on one trace at once (analysis/paths/parallel.py; `nestlab paths --jobs N`):
the same results in the same order as one after another, the longest started first, a failure
raised as it was, a worker that dies is one line (UserError), not a hang."""

from __future__ import annotations

import os
import pickle
import time
from functools import partial

import numpy as np
import pytest

from analysis.paths import parallel
from analysis.paths.algorithms import ALGORITHMS, algorithm
from analysis.paths.maketrace import maketrace, web_service
from nestlab.commands.jobs import cores
from rundir.errors import UserError


def test_every_algorithm_forked_gives_what_it_gives_here():
    tr = maketrace(web_service(), duration=20, parallelism=4, seed=5, tags=True)
    names = [n for n in ALGORITHMS if n != "oracle"]
    tasks = [partial(algorithm(n)[0], tr.messages) for n in names]
    here, _ = parallel.run_tasks(tasks, 1)
    forked, cpu = parallel.run_tasks(tasks, 2, cost=[float(i) for i in range(len(tasks))])
    assert len(cpu) == len(tasks) and all(c >= 0 for c in cpu)
    for a, b in zip(here, forked, strict=True):
        assert a.algorithm == b.algorithm
        assert pickle.dumps(a.patterns) == pickle.dumps(b.patterns)
        assert (a.parent is None and b.parent is None) or np.array_equal(a.parent, b.parent)
        assert a.node_delays.equals(b.node_delays) and a.edge_latencies.equals(b.edge_latencies)
        assert a.warnings == b.warnings and a.params == b.params


def test_results_in_task_order():
    started = []
    order, _ = parallel.run_tasks([lambda i=i: (i, os.getpid()) for i in range(5)], 2,
                                  cost=[0, 0, 5, 0, 9])
    assert [i for i, _ in order] == [0, 1, 2, 3, 4]
    assert all(pid != os.getpid() for _, pid in order)     # run in the workers
    # here (jobs=1): in order, in this process
    got, _ = parallel.run_tasks([lambda i=i: started.append(i) or os.getpid() for i in range(3)], 1)
    assert started == [0, 1, 2] and set(got) == {os.getpid()}


def test_the_costliest_task_is_started_first(tmp_path):
    marks = tmp_path / "order"

    def logged(i):
        def run():
            with open(marks, "a") as f:
                f.write(f"{i}\n")
            time.sleep(0.3)             # both workers busy: the first two lines are the first two started
            return i
        return run
    out, _ = parallel.run_tasks([logged(i) for i in range(4)], 2, cost=[1, 1, 1, 7])
    assert out == [0, 1, 2, 3]
    assert "3" in marks.read_text().split()[:2]


def test_a_failure_is_raised_as_it_was():
    def bad():
        raise ValueError("no such thing")
    with pytest.raises(ValueError, match="no such thing") as got:
        parallel.run_tasks([lambda: 1, bad], 2)
    assert isinstance(got.value.__cause__, parallel.WorkerTraceback)
    assert "in bad" in str(got.value.__cause__)          # where it failed, in the worker


def test_a_worker_that_dies_is_one_line():
    with pytest.raises(UserError, match="worker process ended"):
        parallel.run_tasks([lambda: 1, lambda: os._exit(3)], 2)


def test_default_jobs_is_the_cores_this_process_may_use():
    assert cores() == len(os.sched_getaffinity(0))


def test_a_result_that_cannot_be_sent_back_is_an_error_not_a_hang():
    with pytest.raises(Exception, match="pickle|lambda"):
        parallel.run_tasks([lambda: 1, lambda: (lambda: 2)], 2)


def test_an_exception_that_cannot_be_sent_back_is_said_in_one_line():
    class Local(Exception):          # a local class: pickle cannot name it
        pass

    def bad():
        raise Local("the algorithm's own words")
    with pytest.raises(RuntimeError, match="Local: the algorithm's own words"):
        parallel.run_tasks([lambda: 1, bad], 2)

"""Running a suite (harness.suite): the plan, --check, --resume, the suite's progress line and ETA,
its index file, and one summary at the end (docs/suites.md).

results/<suite>/suite.json is the suite's index: every planned run (experiment, repetition, seed,
spec digest) and the run directory that holds it, rewritten after each run. The analysis reads a
suite's runs from it (rundir.runs.find_runs), so a run that --resume replaced stays on disk and
out of the tables. --resume keeps a complete run whose experiment, repetition and spec digest
(Experiment.digest: spec, topology, seed, planned faults) are unchanged, and runs the rest.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table
from rich.text import Text

from harness.clean import refuse_on_leftovers
from harness.lock import machine_lock
from harness.observers import NONE, Headline, Observers
from harness.suite import RUN_OVERHEAD_S, Suite, describe_plan, load_suite
from rundir.errors import UserError
from rundir.manifest import read_manifest_quietly
from rundir.suite_index import read_index, resumable_runs, set_aside, write_index

console = Console(stderr=True, highlight=False, soft_wrap=True)


@dataclass
class Member:
    experiment: str
    repetition: int
    seed: int
    digest: str
    run: str | None = None      # relative to the suite directory
    status: str = "planned"     # planned | complete | interrupted | failed
    wall_s: float | None = None

    def key(self) -> tuple[str, int]:
        return self.experiment, self.repetition


def _members(suite: Suite) -> list[Member]:
    return [Member(exp.spec.name, r, exp.seed_for(r), exp.digest(r)) for exp, r in suite.planned()]


class SuiteRun:
    def __init__(self, suite: Suite, results_root: Path, resume: bool = False, restart: bool = False,
                 observers: Observers = NONE):
        self.suite = suite
        self.observers = observers
        self.headlines: dict[tuple[str, int], Headline | None] = {}
        self.root = Path(results_root) / suite.dir_name
        self.members = _members(suite)
        self.experiments = {e.spec.name: e for e in suite.experiments}
        self.durations = {name: e.spec.duration for name, e in self.experiments.items()}
        self.resume, self.restart = resume, restart
        self.created = time.time()
        self.kept: set[tuple[str, int]] = set()
        self.overheads: list[float] = []   # measured wall time beyond `duration`, per run
        self.state = "running"

    # -- what to run ---------------------------------------------------------------------------
    def decide(self) -> None:
        """Which runs --resume keeps; without it, refuse to bury an unfinished suite silently."""
        index = read_index(self.root)
        if index is not None and not self.resume:
            done = sum(r.get("status") == "complete" for r in index.get("runs", []))
            if index.get("state") != "complete" and not self.restart:
                raise UserError(f"{self.root}: an unfinished run of suite {self.suite.name} is there "
                                f"({done} of {len(index.get('runs', []))} runs complete, {index.get('state')}): "
                                f"add --resume to continue it, or --restart to start it over (its runs stay "
                                f"on disk, out of the new suite's tables)")
        if self.resume:
            found = resumable_runs(self.root)
            for m in self.members:
                run = found.get((m.experiment, m.repetition, m.digest))
                if run is not None:
                    m.run, m.status = str(run.relative_to(self.root)), "complete"
                    self.kept.add(m.key())
            if index is not None:
                self.created = index.get("created", self.created)
        if index is not None and not self.resume:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(index.get("created", time.time())))
            kept = set_aside(self.root, stamp)
            console.print(f"previous run of the suite kept: {kept} "
                          "(its runs are not in the new suite's tables)", markup=False)

    def write_index(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_index(self.root, {"suite": self.suite.name, "file": str(self.suite.path), "scale": self.suite.scale,
                                "created": self.created, "updated": time.time(), "state": self.state,
                                "runs": [m.__dict__ for m in self.members]})

    # -- progress ------------------------------------------------------------------------------
    def _overhead(self) -> float:
        return sum(self.overheads) / len(self.overheads) if self.overheads else RUN_OVERHEAD_S

    def eta_s(self, current: int, t: float) -> float:
        """Seconds left: the current run's rest and every later run (duration + mean overhead)."""
        oh = self._overhead()
        duration = self.durations
        left = sum(duration[m.experiment] + oh for m in self.members if m.status == "planned")
        if current >= 0:
            left += max(0.0, duration[self.members[current].experiment] - t) + oh
        return left

    def _prefix(self, k: int, n: int, current: int):
        def prefix(t: float) -> str:
            eta = self.eta_s(current, t)
            return f"[{k}/{n} · ETA {time.strftime('%H:%M', time.localtime(time.time() + eta))}, {_dur(eta)} left] "
        return prefix

    # -- the suite ----------------------------------------------------------------------------
    def execute(self) -> int:
        from harness.backends import check_runner

        suite = self.suite
        for exp in suite.experiments:
            check_runner(exp.topology.backend)
        with machine_lock(str(suite.path)):
            refuse_on_leftovers()
            return self._execute()

    def _execute(self) -> int:
        from harness.runner import repetition_class

        suite = self.suite
        self.decide()
        todo = [i for i, m in enumerate(self.members) if m.status == "planned"]
        kept = len(self.members) - len(todo)
        console.print(Text.assemble((f"suite {suite.name}", "bold"), f" -> {self.root}: {len(self.members)} runs"
                                    + (f", {kept} kept from before (--resume)" if kept else "")
                                    + f"; about {_dur(self.eta_s(-1, 0))}"))
        self.write_index()
        code = 0
        old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            for k, i in enumerate(todo, 1):
                m = self.members[i]
                exp = self.experiments[m.experiment]
                console.print(Text.assemble((f"[{k}/{len(todo)}]", "bold"), f" {m.experiment} r{m.repetition} (seed {m.seed})"))
                run = repetition_class(exp)(exp, m.repetition, self.root, suite=suite.name,
                                 status_prefix=self._prefix(k, len(todo), i), observers=self.observers)
                m.run, m.status = str(run.rd.path.relative_to(self.root)), "running"
                self.write_index()
                started = time.monotonic()
                run_code = run.execute()
                m.wall_s = round(time.monotonic() - started, 1)
                m.status = run.rd.status or "failed"
                if m.status == "complete":
                    self.overheads.append(m.wall_s - exp.spec.duration)
                    if self.observers.report is not None:
                        self.headlines[m.key()] = self.observers.report(run.rd.path, True)
                    fig = self._figures(m)
                    console.print(f"  TCP TPR {fig.get('TCP TPR') or '-'} FPR {fig.get('TCP FPR') or '-'} "
                                  f"PPV {fig.get('TCP PPV') or '-'}, silence {fig.get('silence') or '-'} "
                                  f"(analysis: {run.rd.path / 'analysis'})", markup=False)
                self.write_index()
                if m.status == "interrupted":
                    code = run_code
                    break
                if run_code != 0:
                    code = code or run_code   # a failed run: record it and go on with the next
        except (_SuiteInterrupted, KeyboardInterrupt) as e:   # between runs: a run ends itself
            code = getattr(e, "code", 130)
        except UserError:
            self.state = "failed"
            self.write_index()
            raise
        finally:
            for s, h in old.items():
                signal.signal(s, h)
        for m in self.members:
            if m.status == "running":   # stopped before the run could record its end
                m.status = "interrupted"
        done = sum(m.status == "complete" for m in self.members)
        self.state = "complete" if done == len(self.members) else ("interrupted" if code >= 128 else "failed")
        self.write_index()
        self.summary()
        if self.state != "complete":
            console.print(Text.assemble((f"suite {self.state}", "yellow"), f": {done} of {len(self.members)} runs "
                                        f"complete; `run-experiment {suite.path} --resume` runs the rest"))
        return code

    def summary(self) -> None:
        """One table: every run with its status and headline figures, then the pooled accuracy."""
        table = Table(title=Text(f"suite {self.suite.name}"), title_justify="left")
        for col in ("experiment", "r", "seed", "status", "wall", "faults", "TCP TPR", "TCP FPR", "TCP PPV",
                    "app TPR", "silence"):
            table.add_column(col, justify="left" if col in ("experiment", "status") else "right")
        for m in self.members:
            fig = self._figures(m) if m.run and m.status == "complete" else {}
            wall = m.wall_s or fig.get("wall")
            table.add_row(*map(Text, (m.experiment, str(m.repetition), str(m.seed), m.status,
                                      f"{wall:.0f}s" if wall else "", fig.get("faults", ""), fig.get("TCP TPR", ""),
                                      fig.get("TCP FPR", ""), fig.get("TCP PPV", ""), fig.get("app TPR", ""),
                                      fig.get("silence", ""))))
        Console(highlight=False, width=None if console.is_terminal else 160).print(table)
        if any(m.status == "complete" for m in self.members):
            self.pooled()

    def _figures(self, m: Member) -> dict[str, str]:
        """A complete run's figures for the summary: its headline scores (from the report of this
        suite, or computed for a run --resume kept) and, from its manifest, faults, wall time and
        silence rate; as text, blank where unknown."""
        key = m.key()
        if key not in self.headlines and self.observers.scores is not None:
            self.headlines[key] = self.observers.scores(self.root / m.run)
        return headline_figures(self.headlines.get(key), self.root / m.run)

    def pooled(self) -> None:
        """The suite's tables over its complete runs (the default variant), written to
        results/<suite>/analysis/ like `nestlab accuracy <suite>`."""
        if self.observers.pooled is not None:
            self.observers.pooled([self.root / m.run for m in self.members if m.status == "complete"], self.root)


class _SuiteInterrupted(BaseException):
    def __init__(self, code: int):
        self.code = code


def _interrupt(signum, frame):
    raise _SuiteInterrupted(128 + signum)


def headline_figures(head: Headline | None, run: Path) -> dict[str, str]:
    """The summary's cells of one run: its headline scores (rates in %, one decimal) and, from its
    manifest, faults, wall time and silence rate."""
    out: dict[str, str] = {}
    m = read_manifest_quietly(run)
    if m is not None:
        if m.counts is not None and m.counts.faults is not None:
            out["faults"] = str(m.counts.faults)
        if m.end_wall and m.start_wall:
            out["wall"] = m.end_wall - m.start_wall
        if m.health is not None and m.health.silence_rate is not None:
            out["silence"] = f"{100 * m.health.silence_rate:.2f}%"
    if head is not None:
        for key, v in (("TCP TPR", head.tcp_tpr), ("TCP FPR", head.tcp_fpr), ("TCP PPV", head.tcp_ppv)):
            if v is not None:
                out[key] = f"{v:.1f}"
        if head.app_tpr:
            out["app TPR"] = "/".join(f"{v:.1f}" for v in head.app_tpr)
    return out


def _dur(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s"


def check_spec(path: str, results_root: str, topology: str | None) -> int:
    """--check of a single spec: the same plan table, for its repetitions."""
    from harness.spec import load_spec

    exp = load_spec(path, topology)
    return _print_plan(Suite(exp.spec.name, Path(path), 1, exp.spec.description, [exp], [str(path)]),
                       results_root, None)


def check_suite(path: str, results_root: str, scale: int | None, resume: bool, topology: str | None) -> int:
    """--check: validate every experiment, print the plan and its time; nothing runs, no root needed."""
    suite = load_suite(path, scale, topology)
    kept = None
    if resume:
        sr = SuiteRun(suite, Path(results_root))
        found = resumable_runs(sr.root)
        kept = {m.key() for m in sr.members if (m.experiment, m.repetition, m.digest) in found}
    return _print_plan(suite, results_root, kept)


def _print_plan(suite: Suite, results_root: str, kept: set | None) -> int:
    header, rows = describe_plan(suite, kept)
    what = "suite" if suite.sources != [str(suite.path)] else "experiment"
    table = Table(title=Text(f"{what} {suite.name} (scale {suite.scale}) -> {Path(results_root) / suite.dir_name}"),
                  title_justify="left")
    for h in header:
        table.add_column(h, justify="right" if h in ("#", "runs", "duration") else "left")
    for r in rows:
        table.add_row(*map(Text, r))
    Console(highlight=False, width=160).print(table)
    planned = suite.planned()
    left = [(e, r) for e, r in planned if not kept or (e.spec.name, r) not in kept]
    est = sum(e.spec.duration + RUN_OVERHEAD_S for e, _ in left)
    print(f"{len(planned)} runs" + (f", {len(planned) - len(left)} complete and kept (--resume)" if kept else "")
          + f"; {len(left)} to run, about {_dur(est)} (duration + {RUN_OVERHEAD_S:g} s of setup, teardown "
          f"and analysis per run). Every spec is valid; nothing was run.", flush=True)
    return 0


def run_suite_file(path: str, results_root: str = "results", scale: int | None = None, resume: bool = False,
                   restart: bool = False, topology: str | None = None, observers: Observers = NONE) -> int:
    suite = load_suite(path, scale, topology)   # every mistake before anything runs
    return SuiteRun(suite, Path(results_root), resume, restart, observers).execute()

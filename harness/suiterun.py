"""Running a suite (harness.suite): the plan, --check, --resume, the suite's progress line and ETA,
its index file, and one summary at the end (docs/suites.md).

results/<suite>/suite.json is the suite's index: every planned run (experiment, repetition, seed,
spec digest) and the run directory that holds it, rewritten after each run. The analysis reads a
suite's runs from it (rundir.runs.find_runs), so a run that --resume replaced stays on disk and
out of the tables. --resume keeps a complete run whose experiment, repetition and spec digest
(Experiment.digest: spec, topology, seed, planned faults) are unchanged, and runs the rest.

--shard K/N runs the runs at positions K-1, K-1+N, ... of the plan (harness.suite.in_shard) and keeps
its own index, results/<suite>/suite-shard-K-of-N.json (rundir.suite_index), so that shards run on
different machines, or one after the other into one directory, never write each other's index; the
analysis reads the union. --only NAME runs just those experiments: the index still lists the whole
plan (or shard), the other experiments' entries carried over from the index as it was, and a suite
whose named experiments all completed while others have not is `partial`.
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
from harness.suite import (
    RUN_OVERHEAD_S,
    Suite,
    check_shard,
    describe_plan,
    in_shard,
    load_suite,
    plan_digest,
    select_only,
)
from rundir.errors import UserError
from rundir.manifest import read_manifest_quietly
from rundir.suite_index import (
    INDEX,
    index_name,
    member_runs,
    read_index,
    resumable_runs,
    set_aside,
    shard_indexes,
    union_entries,
    write_index,
)

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
    position: int = -1          # in the whole plan (Suite.planned), whatever shard runs it

    def key(self) -> tuple[str, int]:
        return self.experiment, self.repetition


def _members(suite: Suite, shard: tuple[int, int] | None = None) -> list[Member]:
    return [Member(exp.spec.name, r, exp.seed_for(r), exp.digest(r), position=i)
            for i, (exp, r) in enumerate(suite.planned()) if in_shard(i, shard)]


class SuiteRun:
    def __init__(self, suite: Suite, results_root: Path, resume: bool = False, restart: bool = False,
                 observers: Observers = NONE, shard: tuple[int, int] | None = None, only: set[str] | None = None):
        check_shard(suite, shard)
        self.suite = suite
        self.observers = observers
        self.headlines: dict[tuple[str, int], Headline | None] = {}
        self.root = Path(results_root) / suite.dir_name
        self.results_root = Path(results_root)
        self.shard, self.only = shard, only
        self.index = index_name(shard)
        self.members = _members(suite, shard)
        self.todo: set[int] = set()   # the members this invocation runs (decide)
        self.experiments = {e.spec.name: e for e in suite.experiments}
        self.durations = {name: e.spec.duration for name, e in self.experiments.items()}
        self.resume, self.restart = resume, restart
        self.created = time.time()
        self.kept: set[tuple[str, int]] = set()
        self.overheads: list[float] = []   # measured wall time beyond `duration`, per run
        self.state = "running"

    # -- what to run ---------------------------------------------------------------------------
    def selected(self, m: Member) -> bool:
        return self.only is None or m.experiment in self.only

    def _others(self) -> list[str]:
        """Indexes in the suite directory this run must not be mixed with: shard indexes for the whole
        suite; the whole suite's index, or shard indexes of another split, for a shard."""
        shards = shard_indexes(self.root)
        if self.shard is None:
            return [p.name for p in shards.values()]
        out = [INDEX] if (self.root / INDEX).is_file() else []
        return out + [p.name for (_, n), p in shards.items() if n != self.shard[1]]

    def decide(self) -> None:
        """Which runs --resume keeps (and, with --only, which entries stay as they were); without
        either, refuse to bury an unfinished suite silently."""
        others = self._others()
        if others and not self.restart:
            what = f"shard {self.shard[0]}/{self.shard[1]} of suite" if self.shard else "the whole suite"
            raise UserError(f"{self.root}: holds {', '.join(others)}, and {what} {self.suite.name} would mix its "
                            f"runs with theirs: give another --results directory, or --restart to set "
                            f"{'them' if len(others) > 1 else 'it'} aside (the runs stay on disk)")
        index = read_index(self.root, self.index)
        merge = self.only is not None and not self.restart   # --only: the other entries stay as they are
        if index is not None and not self.resume and not merge:
            done = sum(r.get("status") == "complete" for r in index.get("runs", []))
            if index.get("state") != "complete" and not self.restart:
                raise UserError(f"{self.root / self.index}: an unfinished run of suite {self.suite.name} is there "
                                f"({done} of {len(index.get('runs', []))} runs complete, {index.get('state')}): "
                                f"add --resume to continue it, or --restart to start it over (its runs stay "
                                f"on disk, out of the new suite's tables)")
        if merge and index is not None:
            self._carry(index)
        if self.resume:
            found = resumable_runs(self.root, self.index)
            for m in self.members:
                run = found.get((m.experiment, m.repetition, m.digest))
                if run is not None and self.selected(m):
                    m.run, m.status = str(run.relative_to(self.root)), "complete"
                    self.kept.add(m.key())
        if index is not None and (self.resume or merge):
            self.created = index.get("created", self.created)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time()))
        if index is not None and not self.resume and not merge:
            stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(index.get("created", time.time())))
            kept = set_aside(self.root, stamp, self.index)
            console.print(f"previous run of the suite kept: {kept} "
                          "(its runs are not in the new suite's tables)", markup=False)
        for name in others:   # --restart over a mix
            console.print(f"set aside: {set_aside(self.root, stamp, name)} (its runs stay on disk, out of the "
                          "tables)", markup=False)
        self.todo = {i for i, m in enumerate(self.members) if m.status == "planned" and self.selected(m)}

    def _carry(self, index: dict) -> None:
        """--only: every entry of an experiment not named keeps its run and status from the index, if
        it is the same run (experiment, repetition, spec digest)."""
        runs = member_runs(self.root / self.index, index)
        old = {(e.get("experiment"), e.get("repetition"), e.get("digest")): (e, run)
               for e, run in zip(index.get("runs", []), runs, strict=True)}
        for m in self.members:
            if self.selected(m):
                continue
            e, run = old.get((m.experiment, m.repetition, m.digest), (None, None))
            if e is not None and run:
                status = e.get("status")
                m.run, m.status = run, status if status in ("complete", "interrupted", "failed") else "interrupted"
                m.wall_s = e.get("wall_s")
                if m.status == "complete":
                    self.kept.add(m.key())

    def write_index(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        write_index(self.root, {"suite": self.suite.name, "file": str(self.suite.path), "scale": self.suite.scale,
                                "shard": list(self.shard) if self.shard else None, "plan": plan_digest(self.suite),
                                "planned": len(self.suite.planned()),
                                "created": self.created, "updated": time.time(), "state": self.state,
                                "runs": [m.__dict__ for m in self.members]}, self.index)

    def again(self, *flags: str) -> str:
        """The command that continues this suite (with its scale, shard and results directory)."""
        parts = ["run-experiment", str(self.suite.path)]
        if self.suite.scale != 1:
            parts += ["--scale", str(self.suite.scale)]
        if self.shard:
            parts += ["--shard", f"{self.shard[0]}/{self.shard[1]}"]
        if self.results_root != Path("results"):
            parts += ["--results", str(self.results_root)]
        return " ".join(parts + list(flags))

    # -- progress ------------------------------------------------------------------------------
    def _overhead(self) -> float:
        return sum(self.overheads) / len(self.overheads) if self.overheads else RUN_OVERHEAD_S

    def eta_s(self, current: int, t: float) -> float:
        """Seconds left: the current run's rest and every later run (duration + mean overhead)."""
        oh = self._overhead()
        duration = self.durations
        left = sum(duration[m.experiment] + oh for i, m in enumerate(self.members)
                   if m.status == "planned" and i in self.todo)
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
        from harness.studies import check_runner

        suite = self.suite
        for exp in suite.experiments:
            check_runner(exp)
        with machine_lock(str(suite.path)):
            refuse_on_leftovers()
            return self._execute()

    def _execute(self) -> int:
        from harness.runner import Repetition

        suite = self.suite
        self.decide()
        todo = sorted(self.todo)
        kept = len(self.kept)
        part = f", shard {self.shard[0]}/{self.shard[1]}" if self.shard else ""
        of = f" of its {len(suite.planned())}" if self.shard else ""
        only = f", {len(todo)} to run (--only {', '.join(sorted(self.only))})" if self.only is not None else ""
        console.print(Text.assemble((f"suite {suite.name}{part}", "bold"), f" -> {self.root / self.index}: "
                                    f"{len(self.members)}{of} runs" + only
                                    + (f", {kept} kept from before" + (" (--resume)" if self.resume else "")
                                       if kept else "")
                                    + f"; about {_dur(self.eta_s(-1, 0))}"))
        self.write_index()
        code = 0
        old = {s: signal.signal(s, _interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
        try:
            for k, i in enumerate(todo, 1):
                m = self.members[i]
                exp = self.experiments[m.experiment]
                console.print(Text.assemble((f"[{k}/{len(todo)}]", "bold"), f" {m.experiment} r{m.repetition} (seed {m.seed})"))
                run = Repetition(exp, m.repetition, self.root, suite=suite.name,
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
                    sc = self._scope()
                    silence = "" if sc == "conn" else f", silence {fig.get('silence') or '-'}"
                    console.print(f"  {sc} TPR {fig.get(f'{sc} TPR') or '-'} FPR {fig.get(f'{sc} FPR') or '-'} "
                                  f"PPV {fig.get(f'{sc} PPV') or '-'}{silence} "
                                  f"(analysis: {run.rd.analysis})", markup=False)
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
        if self.state == "failed" and code == 0 and all(self.members[i].status == "complete" for i in self.todo):
            self.state = "partial"   # --only: what was named is complete, other experiments are not
        self.write_index()
        self.summary()
        if self.state != "complete":
            console.print(Text.assemble((f"suite {self.state}", "yellow"), f": {done} of {len(self.members)} runs "
                                        f"complete; `{self.again('--resume')}` runs the rest"))
        return code

    def summary(self) -> None:
        """One table: every run with its status and headline figures, then the pooled accuracy."""
        part = f" (shard {self.shard[0]}/{self.shard[1]})" if self.shard else ""
        table = Table(title=Text(f"suite {self.suite.name}{part}"), title_justify="left")
        sc = self._scope()
        # a streams suite has no TCP connections, applications or network silences: no columns for them
        scores = (f"{sc} TPR", f"{sc} FPR", f"{sc} PPV") + (() if sc == "conn" else ("app TPR", "silence"))
        for col in ("experiment", "r", "seed", "status", "wall", "faults", *scores):
            table.add_column(col, justify="left" if col in ("experiment", "status") else "right")
        for m in self.members:
            fig = self._figures(m) if m.run and m.status == "complete" else {}
            wall = m.wall_s or fig.get("wall")
            table.add_row(*map(Text, (m.experiment, str(m.repetition), str(m.seed), m.status,
                                      f"{wall:.0f}s" if wall else "", fig.get("faults", ""),
                                      *(fig.get(c, "") for c in scores))))
        Console(highlight=False, width=None if console.is_terminal else 160).print(table)
        if any(m.status == "complete" for m in self.members):
            self.pooled()

    def _scope(self) -> str:
        """Whose rates the summary shows: the experiments' study kind's scope when they share one
        ("conn": stream connections), else "TCP"."""
        from harness.studies import lab_study

        scopes = {lab_study(getattr(e, "study", "network")).scope for e in self.experiments.values()}
        return scopes.pop() if len(scopes) == 1 else "TCP"

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
        results/<suite>/analysis/ like `nestlab accuracy <suite>`: a shard's, over the complete runs
        of every shard whose index is in the directory (the whole suite once the last shard is in)."""
        if self.observers.pooled is None:
            return
        runs = [self.root / m.run for m in self.members if m.status == "complete"]
        if self.shard is not None:
            notes: list[str] = []
            try:
                entries = union_entries(self.root, notes) or []
            except UserError as e:
                console.print(f"suite tables not made: {e}", markup=False)
                return
            runs = [self.root / e["run"] for e in entries if e.get("run") and e.get("status") == "complete"]
            for note in notes:
                console.print(f"note: {note}", markup=False)
        self.observers.pooled(runs, self.root)


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
        sc = head.scope
        for key, v in ((f"{sc} TPR", head.tcp_tpr), (f"{sc} FPR", head.tcp_fpr), (f"{sc} PPV", head.tcp_ppv)):
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
    from harness.studies import load_spec

    exp = load_spec(path, topology)
    return _print_plan(Suite(exp.spec.name, Path(path), 1, exp.spec.description, [exp], [str(path)]),
                       results_root, None)


def check_suite(path: str, results_root: str, scale: int | None, resume: bool, topology: str | None,
                shard: tuple[int, int] | None = None, only: list[str] | None = None) -> int:
    """--check: validate every experiment, print the plan and its time (with --shard, the split: which
    shard runs each run, and each shard's time); nothing runs, no root needed."""
    suite = load_suite(path, scale, topology)
    check_shard(suite, shard)
    names = select_only(suite, only)
    kept = None
    if resume:
        sr = SuiteRun(suite, Path(results_root), shard=shard)
        found = resumable_runs(sr.root, sr.index)
        kept = {m.key() for m in sr.members if (m.experiment, m.repetition, m.digest) in found}
    return _print_plan(suite, results_root, kept, names, shard)


def _print_plan(suite: Suite, results_root: str, kept: set | None, only: set[str] | None = None,
                shard: tuple[int, int] | None = None) -> int:
    header, rows = describe_plan(suite, kept, only, shard)
    what = "suite" if suite.sources != [str(suite.path)] else "experiment"
    table = Table(title=Text(f"{what} {suite.name} (scale {suite.scale}) -> {Path(results_root) / suite.dir_name}"),
                  title_justify="left")
    for h in header:
        table.add_column(h, justify="right" if h in ("#", "runs", "duration") else "left")
    for r in rows:
        table.add_row(*map(Text, r))
    Console(highlight=False, width=160).print(table)
    planned = [(i, e, r) for i, (e, r) in enumerate(suite.planned()) if only is None or e.spec.name in only]
    if shard is not None:
        _print_split(suite, [(i, e) for i, e, _ in planned], shard, results_root)
    mine = [(e, r) for i, e, r in planned if in_shard(i, shard)]
    left = [(e, r) for e, r in mine if not kept or (e.spec.name, r) not in kept]
    est = sum(e.spec.duration + RUN_OVERHEAD_S for e, _ in left)
    whose = f" in shard {shard[0]}/{shard[1]}" if shard else ""
    print(f"{len(mine)} runs{whose}" + (f", {len(mine) - len(left)} complete and kept (--resume)" if kept else "")
          + f"; {len(left)} to run, about {_dur(est)} (duration + {RUN_OVERHEAD_S:g} s of setup, teardown "
          f"and analysis per run). Every spec is valid; nothing was run.", flush=True)
    return 0


def _print_split(suite: Suite, planned: list[tuple[int, object]], shard: tuple[int, int], results_root: str) -> None:
    """Every shard of the split: its runs (position in the plan: experiment/repetition) and its time."""
    k, n = shard
    root = Path(results_root) / suite.dir_name
    print(f"split into {n} shards: run i of the plan (from 0) goes to shard i % {n} + 1; each shard writes "
          f"{root}/{index_name((k, n)).replace(str(k), 'K', 1)}", flush=True)
    for j in range(1, n + 1):
        runs = [(i, e) for i, e in planned if in_shard(i, (j, n))]
        est = sum(e.spec.duration + RUN_OVERHEAD_S for _, e in runs)
        names = ", ".join(f"{i}:{e.spec.name}" for i, e in runs[:12]) + (", ..." if len(runs) > 12 else "")
        mark = "  <- this one" if j == k else ""
        print(f"  shard {j}/{n}: {len(runs)} runs, about {_dur(est)}: {names}{mark}", flush=True)


def run_suite_file(path: str, results_root: str = "results", scale: int | None = None, resume: bool = False,
                   restart: bool = False, topology: str | None = None, observers: Observers = NONE,
                   shard: tuple[int, int] | None = None, only: list[str] | None = None) -> int:
    suite = load_suite(path, scale, topology)   # every mistake before anything runs
    names = select_only(suite, only)
    sr = SuiteRun(suite, Path(results_root), resume, restart, observers, shard=shard, only=names)
    if names is not None and not any(sr.selected(m) for m in sr.members):
        where = sorted({m.position % shard[1] + 1 for m in _members(suite) if m.experiment in names}) if shard else []
        raise UserError(f"--only {', '.join(only)}: no run of {'it' if len(names) == 1 else 'them'} is in shard "
                        f"{shard[0]}/{shard[1]} (shard{'s' if len(where) > 1 else ''} {', '.join(map(str, where))})")
    return sr.execute()

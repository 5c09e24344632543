"""Experiment suites: several experiments, each with its repetitions and seeds, run as one
(docs/suites.md). `run-experiment` takes a suite file where it takes a spec.

    suite: thesis-3.3            # the name: runs go to results/<name>/<experiment>/<run>/
    scale: 1                     # N: every duration and random fault count times N (scaled())
    seed: 100                    # entry i's default seed: seed + 100 * i
    repetitions: 1               # each entry's default
    defaults: {topology: dumbbell, duration: 60s, monitor: site1n1}   # spec fields every entry lacks
    anchors: ...                 # free: a place for YAML anchors the entries reuse
    experiments:
      - file: control.yaml       # a spec file (relative to the suite) ...
        name: control-b          # ... with any of its fields replaced
        seeds: [7, 17]           # one repetition per seed
      - name: tcp-upload         # or a whole spec written inline
        workloads: [...]
        faults: [...]

An entry's fields come from the entry, else its spec file, else `defaults`; a mistake is reported at
the file and line where the field was written. `load_suite` resolves every entry and plans every
repetition before anything runs, so one bad entry stops the suite before its first run.

Parts of a suite: `--only NAME` (select_only) runs just the named experiments; `--shard K/N`
(parse_shard, in_shard) runs the runs whose position in the plan (Suite.planned: entry by entry,
repetition by repetition, from 0) is K-1 modulo N, so N machines given 1/N ... N/N run every run once
and the split never depends on what ran before (docs/suites.md).
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from harness.spec import MAX_REPETITIONS, Experiment, Spec, _Strict
from harness.studies import experiment_from
from harness.yamlload import MergedDoc, YamlDoc
from rundir.errors import UserError

# The setup, teardown and per-run analysis around each run's `duration`, measured here for the
# dumbbell on Mininet (about 5 s); the ETA replaces it with what the suite's own runs took.
RUN_OVERHEAD_S = 6.0
MAX_SCALE = 60
SEED_STRIDE = 100   # entry i's default seed: the suite's seed + SEED_STRIDE * i
ENTRY_ONLY = ("file", "seeds")   # entry fields that are not spec fields


class SuiteModel(_Strict):
    suite: str = Field(pattern=r"^[A-Za-z0-9_.-]+$")
    description: str = ""
    scale: int = Field(default=1, ge=1, le=MAX_SCALE)
    seed: int = 0
    repetitions: int = Field(default=1, ge=1, le=MAX_REPETITIONS)
    defaults: dict[str, Any] = {}
    anchors: Any = None
    experiments: list[dict[str, Any]] = Field(min_length=1)

    @field_validator("suite")
    @classmethod
    def _name(cls, name: str) -> str:
        if name in (".", ".."):   # the name is a directory: results/<name>/<experiment>/<run>/
            raise ValueError(f"{name!r} is not a suite name: its runs go to results/<name>/, and {name!r} is "
                             "not a directory of its own there")
        return name


@dataclass
class Suite:
    name: str
    path: Path
    scale: int
    description: str
    experiments: list[Experiment]
    sources: list[str] = field(default_factory=list)   # per experiment: its spec file, or "inline"

    @property
    def dir_name(self) -> str:
        """results/<dir_name>/: the name, marked with the scale when it is not 1 (a scaled suite's
        runs are other runs and must not mix with the default's)."""
        return self.name if self.scale == 1 else f"{self.name}-x{self.scale}"

    def planned(self) -> list[tuple[Experiment, int]]:
        """Every run of the suite, in the order they run: entry by entry, repetition by repetition."""
        return [(exp, r) for exp in self.experiments for r in range(exp.spec.repetitions)]


def parse_shard(text: str) -> tuple[int, int]:
    """'K/N' -> (K, N), 1 <= K <= N; UserError (one line) otherwise."""
    m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", text or "")
    if not m:
        raise UserError(f"--shard {text}: expected K/N, shard K of N with 1 <= K <= N (e.g. --shard 1/2)")
    k, n = int(m.group(1)), int(m.group(2))
    if not 1 <= k <= n:
        raise UserError(f"--shard {text}: K must be between 1 and N ({'N must be at least 1' if n < 1 else f'1..{n}'})")
    return k, n


def in_shard(position: int, shard: tuple[int, int] | None) -> bool:
    """Does the run at `position` of the plan belong to shard (K, N)? Every run without a shard."""
    return shard is None or position % shard[1] == shard[0] - 1


def check_shard(suite: Suite, shard: tuple[int, int] | None) -> None:
    """A split into more shards than the suite has runs leaves a shard without any: refused."""
    if shard is not None and shard[1] > len(suite.planned()):
        raise UserError(f"--shard {shard[0]}/{shard[1]}: suite {suite.name} has {len(suite.planned())} runs, "
                        f"so at most {len(suite.planned())} shards")


def select_only(suite: Suite, names: list[str] | None) -> set[str] | None:
    """The experiments --only names (None: every one); an unknown name is refused in one line that
    lists the suite's experiments."""
    if not names:
        return None
    known = [e.spec.name for e in suite.experiments]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise UserError(f"--only {unknown[0]}: suite {suite.name} has no experiment of that name; its "
                        f"experiments: {', '.join(known)}")
    return set(names)


def plan_digest(suite: Suite) -> str:
    """What the shards of one split must agree on: every run of the plan in order (experiment,
    repetition, seed, spec as resolved, but not the topology placing it on machines, which may differ
    between the machines of a split) and the scale."""
    blob = [suite.scale] + [[exp.spec.name, r, exp.seed_for(r),
                             exp.spec.model_dump(mode="json", exclude={"repetitions", "seed", "description", "topology"})]
                            for exp, r in suite.planned()]
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:16]


def is_suite_file(path: Path | str) -> bool:
    """A suite has a top-level `suite:` (a spec has `name:`); unreadable files are left to the loader."""
    try:
        doc = YamlDoc(path)
    except Exception:  # noqa: BLE001 - the spec loader reports the problem with its file and line
        return False
    return "suite" in doc.data


def load_suite(path: Path | str, scale: int | None = None, topology: Path | str | None = None) -> Suite:
    """Load, resolve and plan every experiment of a suite; `scale` replaces the file's."""
    path = Path(path)
    doc = YamlDoc(path)
    model = doc.parse(SuiteModel)
    factor = model.scale if scale is None else scale
    if not 1 <= factor <= MAX_SCALE:
        raise doc.error(("scale",), f"scale must be between 1 and {MAX_SCALE} (got {factor})")
    if not isinstance(doc.at(("defaults",)) or {}, dict):
        raise doc.error(("defaults",), "expected a mapping of spec fields")
    experiments, sources, names = [], [], {}
    for i, entry in enumerate(model.experiments):
        exp, source = _entry(doc, path, model, i, entry, factor, topology)
        if exp.spec.name in names:
            loc = ("experiments", i, "name") if "name" in entry else ("experiments", i)
            raise doc.error(loc, f"experiment name {exp.spec.name!r} is also entry {names[exp.spec.name]}'s; "
                                 f"each experiment of a suite needs its own name (its runs' directory)")
        names[exp.spec.name] = i
        experiments.append(exp)
        sources.append(source)
    return Suite(model.suite, path, factor, model.description, experiments, sources)


def _entry(doc: YamlDoc, path: Path, model: SuiteModel, i: int, entry: dict, factor: int,
           topology) -> tuple[Experiment, str]:
    loc = ("experiments", i)
    parts: list[tuple[YamlDoc, tuple]] = [(doc, loc)]
    spec_path, source = path, "inline"
    if "file" in entry:
        name = entry["file"]
        if not isinstance(name, str) or not name:
            raise doc.error(loc + ("file",), "expected the path of a spec file, relative to the suite")
        spec_path = path.parent / name
        if not spec_path.is_file():
            raise doc.error(loc + ("file",), f"no spec file {spec_path}")
        file_doc = YamlDoc(spec_path)
        if "suite" in file_doc.data:
            raise doc.error(loc + ("file",), f"{spec_path} is a suite; a suite lists spec files, not suites")
        parts.append((file_doc, ()))
        source = str(spec_path)
    parts.append((doc, ("defaults",)))
    merged = MergedDoc(parts, drop=ENTRY_ONLY)
    seeds = _seeds(doc, loc, entry)
    if seeds:
        if "repetitions" in entry and entry["repetitions"] != len(seeds):
            raise doc.error(loc + ("repetitions",), f"{entry['repetitions']} repetitions but {len(seeds)} seeds: "
                                                    "give one or the other (one repetition per seed)")
        merged.data["repetitions"] = len(seeds)
    merged.data.setdefault("repetitions", model.repetitions)
    merged.data.setdefault("seed", model.seed + SEED_STRIDE * i)
    return experiment_from(merged, spec_path, topology, scale=factor, seeds=seeds), source


def _seeds(doc: YamlDoc, loc: tuple, entry: dict) -> tuple[int, ...]:
    if "seeds" not in entry:
        return ()
    seeds = entry["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(s, int) and not isinstance(s, bool)
                                                          for s in seeds):
        raise doc.error(loc + ("seeds",), "expected a non-empty list of integers, one per repetition")
    if len(set(seeds)) != len(seeds):
        raise doc.error(loc + ("seeds",), "a seed is listed twice: the two repetitions would be the same run")
    if len(seeds) > MAX_REPETITIONS:
        raise doc.error(loc + ("seeds",), f"at most {MAX_REPETITIONS} seeds")
    if "seed" in entry:
        raise doc.error(loc + ("seed",), "give either seed (repetition k uses seed + k) or seeds, not both")
    return tuple(seeds)


def describe_plan(suite: Suite, kept: set[tuple[str, int]] | None = None, only: set[str] | None = None,
                  shard: tuple[int, int] | None = None) -> tuple[list[str], list[list[str]]]:
    """The plan as a table (header, rows): one row per experiment; `kept` marks the runs --resume keeps;
    `only` leaves out the experiments --only does not name; with `shard`, a column says which shard
    of the split runs each of the experiment's repetitions."""
    header = ["#", "experiment", "from", "runs", "seeds", "duration", "workloads", "faults per run"]
    if shard is not None:
        header.insert(4, f"shard (of {shard[1]})")
    positions: dict[tuple[str, int], int] = {(e.spec.name, r): i for i, (e, r) in enumerate(suite.planned())}
    rows = []
    for k, (exp, source) in enumerate(zip(suite.experiments, suite.sources, strict=True)):
        spec = exp.spec
        if only is not None and spec.name not in only:
            continue
        reps = spec.repetitions
        seeds = [exp.seed_for(r) for r in range(reps)]
        seed_text = ", ".join(map(str, seeds)) if reps <= 4 else f"{seeds[0]}, ..., {seeds[-1]}"
        runs = str(reps)
        if kept is not None:
            done = sum((spec.name, r) in kept for r in range(reps))
            runs = f"{reps - done} of {reps}" if done else runs
        windows = exp.plan(0)
        kinds: dict[str, int] = {}
        for w in windows:
            kinds[spec.faults[w.spec_index].kind] = kinds.get(spec.faults[w.spec_index].kind, 0) + 1
        faults = ", ".join(f"{n} {kind}" for kind, n in kinds.items()) or "none (control)"
        row = [str(k), spec.name, Path(source).name if source != "inline" else "inline", runs, seed_text,
               f"{spec.duration:g}s", _workloads_text(spec), faults]
        if shard is not None:
            row.insert(4, _shards_text([positions[(spec.name, r)] % shard[1] + 1 for r in range(reps)]))
        rows.append(row)
    return header, rows


def _shards_text(shards: list[int]) -> str:
    """Each repetition's shard, in order; more than four: the first three and how many shards in all."""
    if len(shards) <= 4:
        return ", ".join(map(str, shards))
    return f"{', '.join(map(str, shards[:3]))}, ... ({len(set(shards))} shards)"


def _workloads_text(spec: Spec) -> str:
    parts = []
    for w in spec.workloads:
        if w.kind == "service":
            parts.append(f"service {w.rate:g}/s")
            continue
        n = w.instances * (w.parallel if w.kind == "iperf" else 1)
        what = f"{w.kind} {w.direction}" + (f" x{n}" if n > 1 else "")
        parts.append(what + (" (bg)" if w.role == "background" else ""))
    return ", ".join(parts)

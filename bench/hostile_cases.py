"""The cases of bench/hostile_campaign.py: each builds its hostile input in its own directory and says
the command that reads it, where that command may write, and the outcome it must have."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from rundir.layout import RunDir  # noqa: E402
from tests.support import damaged  # noqa: E402
from tests.support.damaged import synthetic_base  # noqa: E402

TOPOLOGY = REPO / "topologies" / "dumbbell.yaml"


@dataclass
class Workspace:
    root: Path
    base: Path        # a good run, never given to a command: copied per case
    cache: Path       # NESTLAB_CACHE of every case (a reader's copies go there)
    home: Path
    outside: Path     # what a crafted link points at: must not change

    @classmethod
    def make(cls, root: Path) -> Workspace:
        ws = cls(root, root / "base" / "exp" / "20260101-000000-r0", root / "cache", root / "home", root / "outside")
        synthetic_base(ws.base)
        for side in ("run.db-wal", "run.db-shm"):
            (ws.base / side).unlink(missing_ok=True)
        ws.home.mkdir()
        ws.outside.mkdir()
        (ws.outside / "victim").write_text("keep me\n")
        return ws

    def run(self, where: Path, name: str = "20260101-000000-r0") -> Path:
        """A copy of the good run under `where`/exp/."""
        dst = where / "exp" / name
        shutil.copytree(self.base, dst)
        return dst


# (argv, where the command may write[, environment to add])
Build = Callable[[Workspace, Path], tuple]


@dataclass
class Case:
    name: str
    what: str
    build: Build
    expect: str                      # "warn" | "exit2" | "ok"
    words: tuple[str, ...] = ()
    program: str = "nestlab"         # or "run-experiment"
    check: Callable[[Workspace, Path], str | None] | None = None


CASES: list[Case] = []


def case(what: str, expect: str, *words: str, program: str = "nestlab", check=None):
    def register(fn: Build) -> Build:
        CASES.append(Case(fn.__name__, what, fn, expect, words, program, check))
        return fn
    return register


def accuracy(run: Path, where: Path) -> tuple[list[str], tuple[Path, ...]]:
    """`nestlab accuracy RUN --out OUT`: may write only OUT (and the reader's cache)."""
    return ["accuracy", str(run), "--out", str(where / "out")], (where / "out",)


def damage(name: str) -> Build:
    def build(ws: Workspace, where: Path):
        run = ws.run(where)
        getattr(damaged, name)(run)
        return accuracy(run, where)
    return build


# ----------------------------------------------------------------------------- run directories

for _name, _what, _expect, _words in (
        ("db_recursive_views", "tables replaced by recursive views", "exit2", ("views, not the table",)),
        ("db_truncated", "run.db cut in half", "exit2", ("truncated",)),
        ("db_corrupt", "garbage over run.db's pages", "exit2", ("damaged",)),
        ("db_not_sqlite", "run.db is text", "exit2", ("cannot be read",)),
        ("empty_directory", "an empty run directory", "exit2", ("no run",)),
        ("counter_text", "text in the counters", "warn", ("counters",)),
        ("snapshot_time_backwards", "the clock goes back", "warn", ("goes back",)),
        ("wal_lost", "the WAL's tail lost", "warn", ("run.db holds",)),
        ("manifest_too_deep", "manifest nested 100,000 deep", "warn", ("manifest.json unreadable",)),
        ("manifest_not_an_object", "manifest a list", "warn", ("manifest.json malformed",)),
        ("copy_counters_zeroed", "counters copy: total_msgs zeroed", "warn", ("does not match its checksum",)),
        ("copy_stretch_bounds_shifted", "stretches copy: bounds shifted", "warn", ("does not match its checksum",)),
        ("copy_stretch_ids_forged", "stretches copy: forged ids, fresh checksum", "warn", ("not a module of the run",)),
        ("copy_counters_batch_too_long", "counters copy: batch 300 rows long", "warn", ("not a valid Arrow table",)),
        ("copy_counters_batch_far_too_long", "counters copy: batch 5 M rows long", "warn", ("not a valid Arrow table",))):
    CASES.append(Case(f"run_{_name}", _what, damage(_name), _expect, _words))


@case("run.db a link to a file outside", "exit2", "cannot be read")
def run_db_symlink_outside(ws, where):
    run = ws.run(where)
    RunDir(run).db.unlink()
    RunDir(run).db.symlink_to(ws.outside / "victim")
    return accuracy(run, where)


@case("run.db a FIFO (a read would block)", "exit2", "no run")
def run_db_fifo(ws, where):
    run = ws.run(where)
    RunDir(run).db.unlink()
    os.mkfifo(RunDir(run).db)
    return accuracy(run, where)


@case("run.db's header claims 2^31 pages", "exit2", "truncated")
def run_db_header_lies(ws, where):
    run = ws.run(where)
    with RunDir(run).db.open("r+b") as f:
        head = bytearray(f.read(100))
        head[28:32] = (2**31 - 1).to_bytes(4, "big")   # the page count ...
        head[92:96] = head[24:28]                       # ... made valid (version-valid-for = change counter)
        f.seek(0)
        f.write(head)
    return accuracy(run, where)


@case("a view named like no table of ours (kept)", "ok")
def run_db_extra_view(ws, where):
    run = ws.run(where)
    conn = sqlite3.connect(RunDir(run).db)
    conn.execute("CREATE VIEW mine AS WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n) SELECT x FROM n")
    conn.commit()
    conn.close()
    return accuracy(run, where)


@case("manifest.json a link to outside", "warn", "manifest.json unreadable")
def run_manifest_symlink(ws, where):
    run = ws.run(where)
    RunDir(run).manifest_path.unlink()
    RunDir(run).manifest_path.symlink_to(ws.outside / "victim")
    return accuracy(run, where)


@case("analysis/ a link to outside (plots write there)", "exit2", "symbolic link")
def run_analysis_symlink(ws, where):
    run = ws.run(where)
    RunDir(run).analysis.symlink_to(ws.outside, target_is_directory=True)
    return ["plots", str(run)], (run,)


@case("analysis/stalled.csv a planted link (replaced)", "ok", check=lambda ws, where: None
      if (ws.outside / "victim").read_text() == "keep me\n" else "the victim changed")
def run_analysis_file_symlink(ws, where):
    run = ws.run(where)
    RunDir(run).analysis.mkdir()
    (RunDir(run).analysis / "stalled.csv").symlink_to(ws.outside / "victim")
    return ["plots", str(run)], (RunDir(run).analysis,)


# ----------------------------------------------------------------------------- derived copies

def _made_copies(ws: Workspace, run: Path) -> None:
    from rundir import columnar
    assert columnar.write_after_run(run)


@case("columnar/ a link to outside (reader)", "ok")
def copy_dir_symlink(ws, where):
    run = ws.run(where)
    RunDir(run).columnar.symlink_to(ws.outside, target_is_directory=True)
    return accuracy(run, where)


@case("planted links at the copy's temporary names", "ok")
def copy_tmp_names_planted(ws, where):
    run = ws.run(where)
    RunDir(run).columnar.mkdir()
    for pid in range(1, 400):
        (RunDir(run).columnar / f".counters.arrow.{pid}.tmp").symlink_to(ws.outside / "victim")
    return accuracy(run, where)


@case("counters.arrow garbage bytes", "ok")
def copy_garbage(ws, where):
    run = ws.run(where)
    RunDir(run).columnar.mkdir()
    (RunDir(run).columnar / "counters.arrow").write_bytes(os.urandom(4096))
    return accuracy(run, where)


@case("counters.arrow a FIFO (an open would block)", "ok")
def copy_fifo(ws, where):
    run = ws.run(where)
    RunDir(run).columnar.mkdir()
    os.mkfifo(RunDir(run).columnar / "counters.arrow")
    os.mkfifo(RunDir(run).columnar / "stretches.arrow")
    return accuracy(run, where)


@case("counters.arrow a link to a copy elsewhere", "ok")
def copy_symlink(ws, where):
    run = ws.run(where)
    _made_copies(ws, run)
    shutil.move(RunDir(run).columnar / "counters.arrow", ws.root / "cases" / where.name / "elsewhere.arrow")
    (RunDir(run).columnar / "counters.arrow").symlink_to(where / "elsewhere.arrow")
    return accuracy(run, where)


@case("counters.arrow truncated to its first half", "ok")
def copy_truncated(ws, where):
    run = ws.run(where)
    _made_copies(ws, run)
    p = RunDir(run).columnar / "counters.arrow"
    p.write_bytes(p.read_bytes()[: p.stat().st_size // 2])
    return accuracy(run, where)


@case("counters.arrow open to everyone (0666: not trusted)", "ok")
def copy_world_writable(ws, where):
    run = ws.run(where)
    _made_copies(ws, run)
    (RunDir(run).columnar / "counters.arrow").chmod(0o666)
    return accuracy(run, where)


@case("the cache directory a link (not used)", "ok", check=lambda ws, where: None
      if not any((where / "linked-target").iterdir()) else "written through the link")
def copy_cache_symlink(ws, where):
    run = ws.run(where)
    (where / "linked-target").mkdir(mode=0o700)
    (where / "linked-cache").symlink_to(where / "linked-target", target_is_directory=True)
    return ["accuracy", str(run), "--out", str(where / "out")], (where / "out",), {
        "NESTLAB_CACHE": str(where / "linked-cache")}


# ----------------------------------------------------------------------------- suite and shard indexes

def _shard(root: Path, k: int, n: int, runs: list[tuple[int, str]], planned: int | None = 4) -> None:
    root.mkdir(parents=True, exist_ok=True)
    data = {"suite": "s", "scale": 1, "shard": [k, n], "plan": "p", "state": "complete",
            "runs": [{"experiment": "exp", "repetition": pos, "seed": pos, "position": pos, "run": run,
                      "status": "complete"} for pos, run in runs]}
    if planned is not None:
        data["planned"] = planned
    (root / f"suite-shard-{k}-of-{n}.json").write_text(json.dumps(data))


def _suite(ws: Workspace, where: Path) -> Path:
    root = where / "suite"
    ws.run(root, "r0")
    ws.run(root, "r1")
    return root


@case("a shard index named 1-of-10^11", "warn", "of 100000000000 not here")
def suite_shard_huge_n(ws, where):
    root = _suite(ws, where)
    _shard(root, 1, 10**11, [(0, "exp/r0")], planned=None)
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("a split into more shards than the plan's runs", "exit2", "shards of a plan of 4 runs")
def suite_shard_n_beyond_plan(ws, where):
    root = _suite(ws, where)
    _shard(root, 1, 10**11, [(0, "exp/r0")])
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("shard 3 of 2", "exit2", "K must be between 1 and N")
def suite_shard_k_over_n(ws, where):
    root = _suite(ws, where)
    _shard(root, 1, 2, [(0, "exp/r0")])
    _shard(root, 3, 2, [(2, "exp/r1")])
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("one run in two shards (counted twice)", "exit2", "count it twice")
def suite_shard_duplicate(ws, where):
    root = _suite(ws, where)
    _shard(root, 1, 2, [(0, "exp/r0")])
    _shard(root, 2, 2, [(1, "exp/r0")])
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("a position of another shard", "exit2", "is not one of shard 1 of 2")
def suite_shard_wrong_position(ws, where):
    root = _suite(ws, where)
    _shard(root, 1, 2, [(1, "exp/r0")])
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("a run through a symlinked subdirectory", "exit2", "outside the suite")
def suite_symlinked_subdir(ws, where):
    root = where / "suite"
    root.mkdir()
    ws.run(where / "far", "r0")
    (root / "exp").symlink_to(where / "far" / "exp", target_is_directory=True)
    (root / "suite.json").write_text(json.dumps({"suite": "s", "runs": [{"experiment": "exp", "run": "exp/r0"}]}))
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("a run named ../../outside", "exit2", "outside the suite")
def suite_dotdot(ws, where):
    root = _suite(ws, where)
    (root / "suite.json").write_text(json.dumps({"suite": "s", "runs": [{"run": "../../outside"}]}))
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("suite.json not JSON", "exit2", "unreadable suite index")
def suite_not_json(ws, where):
    root = _suite(ws, where)
    (root / "suite.json").write_text("{runs: [")
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("suite.json nested 100,000 deep", "exit2", "unreadable suite index")
def suite_too_deep(ws, where):
    root = _suite(ws, where)
    (root / "suite.json").write_text("[" * 100_000 + "]" * 100_000)
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("suite.json whose runs are not a list", "exit2", "not a suite index")
def suite_runs_not_list(ws, where):
    root = _suite(ws, where)
    (root / "suite.json").write_text(json.dumps({"suite": "s", "runs": "all of them"}))
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


@case("suite.json beside shard indexes", "exit2", "holds both")
def suite_mixed(ws, where):
    root = _suite(ws, where)
    (root / "suite.json").write_text(json.dumps({"suite": "s", "runs": [{"run": "exp/r0"}]}))
    _shard(root, 1, 2, [(0, "exp/r1")])
    return ["accuracy", str(root), "--out", str(where / "out")], (where / "out",)


# ----------------------------------------------------------------------------- spec files

def _spec(where: Path, text: str, name: str = "spec.yaml") -> list[str]:
    (where / name).write_text(text)
    return ["run-experiment", str(where / name), "--check"]


GOOD = (f"name: x\ntopology: {TOPOLOGY}\nduration: 10s\nmonitor: site1n1\n"
        "workloads:\n  - {kind: wget, host: site1n1, server: site2n1, file_size: 10MB}\n")


def spec_case(what: str, text: str | Callable[[Path], str], *words: str):
    def build(ws, where):
        body = text(where) if callable(text) else text
        return _spec(where, body)[1:], (where,)
    name = "spec_" + what.split(":")[0].replace(" ", "_").replace("-", "_").lower()
    CASES.append(Case(name, what, build, "exit2", words, program="run-experiment"))


spec_case("billion laughs: YAML aliases nested 9 deep",
          "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
              f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
              for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + GOOD, "spec.yaml")
spec_case("nested 100,000 deep", "[" * 100_000 + "]" * 100_000, "spec.yaml")
spec_case("binary garbage", "\x00\x01\x02\xff" * 1000, "spec.yaml")
spec_case("duration 1e400s", GOOD.replace("duration: 10s", "duration: 1e400s"), "duration")
spec_case("repetitions 10^9", GOOD + "repetitions: 1000000000\n", "repetitions")
spec_case("topology /dev/zero", GOOD.replace(f"topology: {TOPOLOGY}", "topology: /dev/zero"), "topology")
spec_case("topology a FIFO", lambda where: (os.mkfifo(where / "topo.yaml"), GOOD.replace(
    f"topology: {TOPOLOGY}", f"topology: {where / 'topo.yaml'}"))[1], "topology")
spec_case("a workload host with a shell command", GOOD.replace("host: site1n1,", "host: 'site1n1; touch /tmp/x',"),
          "host")
spec_case("file_size 10^30 bytes", GOOD.replace("file_size: 10MB", "file_size: 1000000000000000000000000000000B"),
          "file_size")


# ----------------------------------------------------------------------------- exports

@case("dump -o whose experiment level is a link", "exit2", "symbolic link")
def export_dump_symlink(ws, where):
    run = ws.run(where)
    (where / "out").mkdir()
    (where / "out" / "exp").symlink_to(ws.outside, target_is_directory=True)
    return ["dump", str(run), "-o", str(where / "out"), "--format", "csv"], (where / "out",)


def _escaped(ws: Workspace, where: Path) -> str | None:
    text = (where / "out" / "exp" / "20260101-000000-r0" / "modules.csv").read_text()
    cells = [c for line in text.splitlines() for c in line.split(",")]
    bad = [c for c in cells if c.lstrip('"').startswith(("=", "+", "@"))]
    return f"a formula cell: {bad[0][:40]}" if bad else None


@case("dump CSV of a module named =HYPERLINK(...)", "ok", check=_escaped)
def export_dump_formula(ws, where):
    run = ws.run(where)
    conn = sqlite3.connect(RunDir(run).db)
    conn.execute("UPDATE modules SET name = ? WHERE id = (SELECT min(id) FROM modules)",
                 ('=HYPERLINK("http://example.invalid","x")',))
    conn.execute("UPDATE modules SET name = '@SUM(1)' WHERE id = (SELECT max(id) FROM modules)")
    conn.commit()
    conn.close()
    return ["dump", str(run), "-o", str(where / "out"), "--format", "csv"], (where / "out",)


@case("accuracy --out with planted links at its files (replaced)", "ok", check=lambda ws, where: None
      if (ws.outside / "victim").read_text() == "keep me\n" else "the victim changed")
def export_accuracy_file_symlinks(ws, where):
    run = ws.run(where)
    (where / "out").mkdir()
    for name in ("accuracy.md", "accuracy.csv", "accuracy.tex"):
        (where / "out" / name).symlink_to(ws.outside / "victim")
    return ["accuracy", str(run), "--out", str(where / "out")], (where / "out",)


@case("export a topology whose node name is Tcl", "exit2", "name")
def export_tcl_name(ws, where):
    text = TOPOLOGY.read_text().replace("site1n1", "site1n1[exec touch x]")
    (where / "topo.yaml").write_text(text)
    return ["export", "--format", "emulab", str(where / "topo.yaml"), "-o", str(where / "out.ns")], (where,)


@case("diagnose --json nested 100,000 deep", "exit2", "diagnose")
def export_diagnose_json_deep(ws, where):
    (where / "snaps.json").write_text("[" * 100_000 + "]" * 100_000)
    return ["diagnose", "--json", str(where / "snaps.json")], (where,)


@case("diagnose --json with NaN and 1e400", "exit2", "diagnose")
def export_diagnose_json_nan(ws, where):
    (where / "snaps.json").write_text('{"snapshots": [{"modules": [{"id": NaN, "total_msgs": 1e400}]}]}')
    return ["diagnose", "--json", str(where / "snaps.json")], (where,)


# ----------------------------------------------------------------------------- issue 40's surfaces

from hostile_cases_surfaces import SURFACE_CASES  # noqa: E402 - rings for the drainer, plug-in files for root

CASES.extend(Case(*c) for c in SURFACE_CASES)
import hostile_cases_paths  # noqa: E402, F401 - registers the cases of `nestlab paths` (issues 40, 43)

"""Crafted suite and shard indexes (rundir.suite_index): a shard index named with a huge N is read in
bounded memory and refused when the plan is smaller, K > N is refused, a position or run that two
entries share is refused (the pooled tables would count it twice), and a run reached through a
symlinked subdirectory is outside the suite (issue 30, finding 6)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rundir.errors import UserError
from rundir.suite_index import suite_members, union_entries
from tests.support.env import REPO


def shard(root: Path, k: int, n: int, runs: list[tuple[int, str]], planned: int | None = 4) -> Path:
    """A shard index K of N listing (position, run) entries, each run a directory with a manifest."""
    root.mkdir(parents=True, exist_ok=True)
    for _, run in runs:
        (root / run).mkdir(parents=True, exist_ok=True)
        (root / run / "manifest.json").write_text("{}")
    data = {"suite": "s", "scale": 1, "shard": [k, n], "plan": "p", "state": "complete",
            "runs": [{"experiment": "a", "repetition": pos, "seed": pos, "position": pos, "run": run,
                      "status": "complete"} for pos, run in runs]}
    if planned is not None:
        data["planned"] = planned
    path = root / f"suite-shard-{k}-of-{n}.json"
    path.write_text(json.dumps(data))
    return path


def test_a_huge_n_is_read_in_bounded_memory_and_time(tmp_path):
    """N = 10^11 in a file name: once 14 GB before it was killed. In a child with 1 GB of address
    space and 20 s: one line, no MemoryError, no hang."""
    root = tmp_path / "s"
    shard(root, 1, 10**11, [(0, "a/r0")], planned=None)
    code = ("import sys, resource; resource.setrlimit(resource.RLIMIT_AS, (2**30, 2**30)); "
            "from pathlib import Path; from rundir.suite_index import union_entries; notes = []; "
            "print(len(union_entries(Path(sys.argv[1]), notes)), notes[0])")
    out = subprocess.run([sys.executable, "-c", code, str(root)], capture_output=True, text=True, timeout=20,
                         cwd=REPO, env={"PYTHONPATH": str(REPO)})
    assert out.returncode == 0, out.stderr[-500:]
    assert out.stdout.startswith("1 ") and "of 100000000000 not here" in out.stdout


def test_more_shards_than_the_plan_has_runs_is_refused(tmp_path):
    root = tmp_path / "s"
    shard(root, 1, 1000, [(0, "a/r0")], planned=4)
    with pytest.raises(UserError, match="a split into 1000 shards of a plan of 4 runs"):
        union_entries(root)


def test_k_greater_than_n_is_refused(tmp_path):
    root = tmp_path / "s"
    shard(root, 1, 2, [(0, "a/r0")])
    shard(root, 3, 2, [(2, "a/r2")])
    with pytest.raises(UserError, match="shard 3 of 2: K must be between 1 and N"):
        union_entries(root)


def test_a_position_in_two_shards_is_refused(tmp_path):
    root = tmp_path / "s"
    shard(root, 1, 2, [(0, "a/r0"), (2, "a/r2")])
    shard(root, 2, 2, [(1, "a/r1"), (3, "a/r2")])          # a/r2 again: counted twice by pooled()
    with pytest.raises(UserError, match="run 'a/r2' is in shard 1's index and shard 2's"):
        union_entries(root)
    shard(root, 2, 2, [(1, "a/r1"), (1, "a/r3")])          # one position twice
    with pytest.raises(UserError, match="position 1 is in shard 2's index and shard 2's"):
        union_entries(root)


def test_a_position_of_another_shard_is_refused(tmp_path):
    root = tmp_path / "s"
    shard(root, 1, 2, [(1, "a/r1")])                        # position 1 is shard 2's of 2
    with pytest.raises(UserError, match="position 1 is not one of shard 1 of 2's"):
        union_entries(root)


def test_a_symlinked_subdirectory_is_outside_the_suite(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "r0").mkdir(parents=True)
    (elsewhere / "r0" / "manifest.json").write_text("{}")
    root = tmp_path / "s"
    root.mkdir()
    (root / "a").symlink_to(elsewhere, target_is_directory=True)
    (root / "suite.json").write_text(json.dumps({"suite": "s", "runs": [{"experiment": "a", "run": "a/r0"}]}))
    with pytest.raises(UserError, match="'a/r0' is outside the suite; refused"):
        suite_members(root)
    (root / "a").unlink()
    (root / "a").mkdir()
    (root / "a" / "r0").symlink_to(elsewhere / "r0", target_is_directory=True)   # the run itself a link
    with pytest.raises(UserError, match="outside the suite"):
        suite_members(root)

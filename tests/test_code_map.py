"""The README's code map names every module: each source file of the packages (and the interceptor's
C files) appears in README.md by its file name or its stem in backticks (`slow.py`, `peer`), or by
its path (`html/paths.py`, `harness/faults/slow.py`). A module nobody can find from the map is a
module a newcomer does not know exists."""

from __future__ import annotations

import functools
from pathlib import Path

from tests.support.env import REPO

PACKAGES = ("rundir", "harness", "analysis", "nestlab")


def unmapped(root: Path) -> list[str]:
    """The source files under root's packages that root/README.md does not name."""
    readme = (root / "README.md").read_text()
    found = []
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*")):
            if path.suffix not in (".py", ".c") or path.name == "__init__.py":
                continue
            rel = path.relative_to(root)
            suffixes = ["/".join(rel.parts[k:]) for k in range(len(rel.parts) - 1)]
            if (f"`{path.name}`" in readme or f"`{path.stem}`" in readme
                    or any(s in readme for s in suffixes)):
                continue
            found.append(rel.as_posix())
    return found


def test_every_module_is_in_the_readme_code_map():
    missing = unmapped(REPO)
    assert not missing, "modules the README's code map does not name:\n" + "\n".join(missing)


def _write(root: Path, rel: str, text: str = "") -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_the_code_map_check_can_fail(tmp_path):
    write = functools.partial(_write, tmp_path)
    write("README.md", "| `harness/faults/` | `slow.py`, `peer` |\nsee html/paths.py\n")
    for rel in ("harness/faults/slow.py", "harness/faults/cgroup.py", "analysis/variants/peer.py",
                "analysis/render/html/paths.py", "harness/interceptor/trace.c", "harness/__init__.py"):
        write(rel)
    assert unmapped(tmp_path) == ["harness/faults/cgroup.py", "harness/interceptor/trace.c"]

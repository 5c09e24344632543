"""`nestlab new-variant NAME [--out DIR]`: a pip-installable package of a new rule system, ready to
edit (docs/plugins.md): its pyproject.toml declares the entry point (group nestlab.variants), its
rule is written on the simple interface, and its test runs the rule on the lab's small hand-made
runs (nestlab.testing). `pip install -e DIR` then makes `--variant NAME` work everywhere.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from analysis.plugins import CONTRACT, NAME
from rundir.errors import UserError

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "nestlab-{name}"
version = "0.1.0"
description = "{name}: a stall-diagnosis rule system for nestlab"
requires-python = ">=3.11"
# nestlab itself is not on a package index: install the lab first (its scripts/setup.sh), then this
# package into the same environment with `pip install -e .`
dependencies = []

[project.optional-dependencies]
test = ["pytest"]

# How the lab finds the rule system (docs/plugins.md): name = "module:object".
[project.entry-points."nestlab.variants"]
{name} = "{module}.rule:SYSTEM"

[tool.setuptools]
packages = ["{module}"]
"""

RULE = '''\
"""{name}: a rule system for nestlab on the simple interface (nestlab docs/plugins.md).

The lab calls rule(cell, **params) once per module, direction and snapshot; `cell` holds the
module's counters (cell.counters: tm, wait, queued, errors, invalid) and its neighbours at that
snapshot (cell.parents, cell.children, each with .kind and .counters). Return HEALTHY, DONTCARE,
BLOCKED or STALLED (a positive diagnosis is STALLED).
"""

from nestlab.plugin import Param, on_off, simple_rule


def stuck(c) -> bool:
    """No progress while there was work: it waited, or something sat in its queue."""
    return not c.tm > 0 and ((c.wait or 0) > 0 or (c.queued or 0) > 0)


def rule(cell, passdown=True):
    """stalled when a module had work and moved nothing, unless a child is stuck too"""
    if cell.counters.tm > 0:
        return "HEALTHY"
    if not stuck(cell.counters):
        return "DONTCARE"
    if passdown and any(stuck(child.counters) for child in cell.children):
        return "BLOCKED"
    return "STALLED"


SYSTEM = simple_rule(
    "{name}", rule,
    params=(Param("passdown", True, on_off, "BLOCKED when a child is stuck too (off: STALLED)"),),
    contract={contract},   # the plug-in contract this rule is written for (docs/plugins.md)
)
'''

TEST = '''\
"""{name} on the lab's own small hand-made runs (nestlab.testing), through the lab's own path."""

from nestlab.testing import check_variant


def test_{module}_diagnoses_and_is_scored(tmp_path):
    table = check_variant("{name}", tmp_path)
    assert set(table["variant"]) == {{"{name}"}}
    assert table["Total"].sum() > 0                       # every run scored
    assert (table["TP"] + table["FP"]).sum() > 0          # it diagnoses something positive


def test_{module}_passdown_off_is_a_variant(tmp_path):
    table = check_variant("{name}:passdown=off", tmp_path)
    assert set(table["variant"]) == {{"{name}:passdown=off"}}
'''

README = """\
# nestlab-{name}

A rule system for nestlab's stall diagnosis, made by `nestlab new-variant {name}`.

    pip install -e .                       # into the lab's environment; then:
    nestlab variants                       # lists {name}, "entry point ... of nestlab-{name}"
    nestlab accuracy RUN --variant {name}  # and compare, report, dump, top
    pytest                                 # its test: the rule on the lab's small hand-made runs

Edit `{module}/rule.py`; nestlab's docs/plugins.md says what a rule receives and returns.
"""


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("new-variant", help="write a pip-installable package of a new rule system (docs/plugins.md)",
                       description="Writes a package with a pyproject.toml declaring the entry point "
                                   "(nestlab.variants), a rule on the simple interface and a test that runs it on "
                                   "the lab's small hand-made runs. `pip install -e DIR` then makes --variant NAME "
                                   "work in accuracy, compare, report, dump and top.")
    p.add_argument("name", metavar="NAME", help="the rule system's name: lower-case letters, digits, '_', '.', '-'")
    p.add_argument("--out", metavar="DIR", help="the package's directory (default: ./nestlab-NAME); must not exist "
                                                "or be empty")
    p.set_defaults(func=_new_variant)


def _new_variant(args: argparse.Namespace) -> int:
    from analysis.variants import SYSTEMS

    name = args.name
    if not NAME.match(name):
        raise UserError(f"new-variant {name!r}: a name is lower-case letters, digits, '_', '.', '-'")
    if name in SYSTEMS and SYSTEMS.is_builtin(name):
        raise UserError(f"new-variant {name!r}: the name is a built-in rule system's; choose another")
    out = Path(args.out or f"nestlab-{name}")
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise UserError(f"new-variant: {out} exists and is not an empty directory")
    module = "nestlab_" + re.sub(r"\W", "_", name)
    values = {"name": name, "module": module, "contract": CONTRACT}
    files = {"pyproject.toml": PYPROJECT, "README.md": README, f"{module}/__init__.py": '"""{name}: a nestlab rule system."""\n',
             f"{module}/rule.py": RULE, f"tests/test_{module}.py": TEST}
    for rel, text in files.items():
        path = out / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.format(**values))
    print(f"{name}: a package in {out}/ ({module}/rule.py is the rule); next: pip install -e {out}")
    return 0

"""Docs that cannot drift silently: docs/registries.md names every fault kind, rule system, labelling
policy, study kind and command the code registers, and nothing else; and every fault kind, variant,
policy and command that an example in the other pages or the README names exists (a plug-in an
example defines itself aside)."""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.env import REPO

SECTIONS = {"Fault kinds": "fault kind", "Rule systems": "rule system", "Labelling policies": "policy",
            "Study kinds": "study kind", "Commands": "command"}


def registered() -> dict[str, set[str]]:
    """What the code registers, by the section of docs/registries.md that lists it."""
    import analysis.studies
    import harness.studies
    from analysis.labels import BUILTINS as POLICIES
    from analysis.variants import BUILTINS
    from nestlab.cli import _build_parser

    kinds: set[str] = set()
    for name in harness.studies.STUDIES:
        kinds |= set(harness.studies.lab_study(name).fault_kinds())
    sub = next(a for a in _build_parser()._actions if a.__class__.__name__ == "_SubParsersAction")
    assert set(harness.studies.STUDIES) == set(analysis.studies.STUDIES)   # the two halves, one name
    return {"Fault kinds": kinds, "Rule systems": {name for name, _ in BUILTINS},
            "Labelling policies": {name for name, _ in POLICIES},
            "Study kinds": set(harness.studies.STUDIES), "Commands": set(sub.choices)}


def listed(text: str) -> dict[str, set[str]]:
    """The names in the first column of each section's table of a registries page."""
    out: dict[str, set[str]] = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        title, _, body = part.partition("\n")
        out[title.strip()] = set(re.findall(r"^\| `([^`]+)` \|", body, re.M))
    return out


def mismatches(docs: dict[str, set[str]], code: dict[str, set[str]]) -> list[str]:
    found = []
    for section, what in SECTIONS.items():
        have, want = docs.get(section, set()), code[section]
        found += [f"{what} {n!r}: registered, not in docs/registries.md" for n in sorted(want - have)]
        found += [f"{what} {n!r}: in docs/registries.md, not registered" for n in sorted(have - want)]
    return found


def test_the_registries_page_names_every_registered_name_and_no_other():
    found = mismatches(listed((REPO / "docs" / "registries.md").read_text()), registered())
    assert not found, "\n".join(found)


def _code(text: str) -> list[str]:
    """The code of a Markdown page: its fenced blocks and inline code spans."""
    blocks = re.findall(r"```.*?```", text, re.S)
    return blocks + re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))


WORKLOAD_KINDS = {"wget", "iperf", "service"}


def named_in_examples(text: str) -> dict[str, set[str]]:
    """The commands (`nestlab X`), rule systems (`--variant X`), policies (`--policy X`) and fault
    kinds (`kind: X` beside a `schedule`) a page's examples name; rule systems made in the page itself
    (`nestlab new-variant X`, a line loading a `--plugin`) left out."""
    made = set(re.findall(r"new-variant ([a-z][a-z0-9_-]*)", text))
    out: dict[str, set[str]] = {"Commands": set(), "Rule systems": set(), "Labelling policies": set(),
                                "Fault kinds": set()}
    for code in _code(text):
        for line in code.splitlines():
            out["Commands"] |= set(re.findall(r"(?:^|[\s(])nestlab ([a-z][a-z-]+)", line))
            if "--plugin" not in line:
                out["Rule systems"] |= set(re.findall(r"--variant[ =]'?([a-z][a-z0-9_-]*)", line)) - made
            out["Labelling policies"] |= set(re.findall(r"--policy[ =]'?([a-z][a-z0-9_-]*)", line))
            if "schedule" in line:
                out["Fault kinds"] |= set(re.findall(r"\bkind: *([a-z_]+)", line)) - WORKLOAD_KINDS
    return out


def unknown_names(pages: list[Path], code: dict[str, set[str]]) -> list[str]:
    found = []
    for page in pages:
        for section, names in named_in_examples(page.read_text()).items():
            found += [f"{page.name}: {SECTIONS[section]} {n!r} does not exist" for n in sorted(names - code[section])]
    return found


def test_every_name_the_docs_examples_use_exists():
    pages = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
    found = unknown_names(pages, registered())
    assert not found, "\n".join(found)


def test_the_docs_checks_can_fail(tmp_path):
    page = ("## Fault kinds\n\n| kind |\n| --- |\n| `ip_drop` | x |\n| `gone` | y |\n\n"
            "## Commands\n\n| `report` | z |\n")
    code = {"Fault kinds": {"ip_drop", "new_kind"}, "Rule systems": {"nest-cf"}, "Labelling policies": {"impact"},
            "Study kinds": set(), "Commands": {"report"}}
    assert mismatches(listed(page), code) == [
        "fault kind 'new_kind': registered, not in docs/registries.md",
        "fault kind 'gone': in docs/registries.md, not registered",
        "rule system 'nest-cf': registered, not in docs/registries.md",
        "policy 'impact': registered, not in docs/registries.md"]
    doc = tmp_path / "x.md"
    doc.write_text("```\nnestlab reprot RUN --variant nest-cf --variant old-rule --policy impact\n"
                   "nestlab new-variant mine && nestlab accuracy RUN --variant mine\n```\n"
                   "`{kind: wget, host: h}` and `{kind: ip_dorp, schedule: {every: 5s}}`\n")
    assert unknown_names([doc], code) == ["x.md: command 'accuracy' does not exist",
                                          "x.md: command 'new-variant' does not exist",
                                          "x.md: command 'reprot' does not exist",
                                          "x.md: rule system 'old-rule' does not exist",
                                          "x.md: fault kind 'ip_dorp' does not exist"]


def outside_refs(root: Path) -> list[str]:
    """Lines of the docs, the README and the packages' sources that point at a file outside the
    repository (`../shared/...`): a reader of the repository cannot follow them."""
    files = [*sorted((root / "docs").glob("*.md")), root / "README.md",
             *(p for pkg in ("rundir", "harness", "analysis", "nestlab") for p in sorted((root / pkg).rglob("*.py")))]
    return [f"{f.relative_to(root)}:{k}" for f in files if f.is_file()
            for k, line in enumerate(f.read_text().splitlines(), 1) if "../shared" in line]


def test_no_doc_or_source_points_outside_the_repository(tmp_path):
    assert outside_refs(REPO) == []
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("see ../shared/notes/x.md\n")
    assert outside_refs(tmp_path) == ["docs/a.md:1"]

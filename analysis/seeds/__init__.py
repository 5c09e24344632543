"""The seeds' accuracy tables as data files (thesis Table 3.3, NeST paper Tables 6 and 8), with their
provenance and what the text extraction lost: docs/seeds-tables.md. analysis.render.against reads them.

This module needs only the standard library, so the command line can list the names cheaply.
"""

from __future__ import annotations

from importlib import resources


def names() -> list[str]:
    """The names of the bundled tables: the data files' names without .yaml."""
    return sorted(p.name.removesuffix(".yaml") for p in resources.files(__name__).iterdir()
                  if p.name.endswith(".yaml"))


def text(name: str) -> str:
    """The YAML text of a bundled table (FileNotFoundError for an unknown name)."""
    return (resources.files(__name__) / f"{name}.yaml").read_text(encoding="utf-8")

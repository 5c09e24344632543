"""Errors meant for the user, raised by the lab and the analysis alike: printed as one line, exit
status 2, never a traceback; and the one way a registry says a name is unknown."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypeVar


class UserError(Exception):
    """Bad input: spec, topology, host name, missing binary. The message is the whole story."""


T = TypeVar("T")


def named(registry: Mapping[str, T], name: str, what: str) -> T:
    """The entry `name` of a registry (backends, fault kinds, rule systems, labelling policies: each
    a dict by name); UserError naming the known ones when there is none."""
    try:
        return registry[name]
    except KeyError:
        problem = getattr(registry, "problem_of", lambda _: None)(name)   # a plug-in left out
        if problem:
            raise UserError(f"unknown {what} {name!r}: {problem}") from None
        raise UserError(f"unknown {what} {name!r} (known: {', '.join(registry)})") from None

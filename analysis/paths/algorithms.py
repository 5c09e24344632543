"""The black-box algorithms by name, for the command line and the benches: each entry is a module
path (imported when first asked for, so one not yet built does not break the others), `module:function`,
or a callable `infer(messages, **params) -> PathsResult`. A module provides `infer` and `DEFAULTS`
(parameter -> default, the names the seeds use); a function may carry its own `DEFAULTS`. The infer
`algorithm` returns runs with the garbage collector paused (nogc.py)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from analysis.paths.model import PathsResult
from analysis.paths.nogc import without_gc
from rundir.errors import UserError, named

Infer = Callable[..., PathsResult]

ALGORITHMS: dict[str, str | Infer] = {
    "nesting": "analysis.paths.nesting",
    "convolution": "analysis.paths.convolution",
    "linking": "analysis.paths.linking",
    "fcfs": "analysis.paths.rivals:fcfs",
    "vpath": "analysis.paths.rivals:vpath",
    "traceweaver": "analysis.paths.weaver",
}


def algorithm(name: str) -> tuple[Infer, dict[str, Any]]:
    """(infer, its parameters' defaults) of the algorithm `name`; UserError if unknown or absent."""
    entry = named(ALGORITHMS, name, "algorithm")
    if callable(entry):
        return without_gc(entry), dict(getattr(entry, "DEFAULTS", {}))
    path, _, attr = entry.partition(":")     # "module" (its infer) or "module:function"
    try:
        module = importlib.import_module(path)
    except ModuleNotFoundError as e:
        if e.name != path:
            raise
        raise UserError(f"algorithm {name!r} is not available in this nestlab ({path} is missing)") from None
    infer = getattr(module, attr or "infer")
    return without_gc(infer), dict(getattr(infer, "DEFAULTS", None) or getattr(module, "DEFAULTS", {}))


def parse_params(items: list[str] | None, defaults: dict[str, Any], name: str) -> dict[str, Any]:
    """`--param k=v` values, each converted to the type of its default (numbers, booleans, text)."""
    out: dict[str, Any] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise UserError(f"--param {item!r}: give NAME=VALUE")
        if defaults and key not in defaults:
            continue   # another algorithm's parameter (several may be given at once)
        d = defaults.get(key)
        try:
            if isinstance(d, bool):
                if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
                    raise ValueError(value)
                out[key] = value.lower() in ("1", "true", "yes")
            elif isinstance(d, int):
                out[key] = int(value)
            elif isinstance(d, float):
                out[key] = float(value)
            else:
                try:
                    out[key] = float(value) if "." in value or "e" in value.lower() else int(value)
                except ValueError:
                    out[key] = value
        except ValueError:
            raise UserError(f"--param {key}={value}: {name} wants a {type(d).__name__} for {key}") from None
    return out

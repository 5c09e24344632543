"""Quantities written in specs: durations ('100ms', '2s', '1m'), sizes ('100MB'), rates ('100Mbit').

Each parser takes a string or a bare number and returns a float in base units (seconds, bytes,
bits per second). A bare number is taken in the base unit. Errors say what was expected.
"""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import BeforeValidator

_NUM = r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z/]*)\s*"

_DURATION = {"": 1.0, "s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "m": 60.0, "min": 60.0, "h": 3600.0}
# Decimal units as iperf/wget users write them (100MB = 10^8 bytes); binary ones spelled KiB/MiB/GiB.
_SIZE = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
_RATE = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bps": 1, "kbps": 1e3, "mbps": 1e6, "gbps": 1e9}


def _parse(value: object, table: dict, what: str, example: str, casefold: bool) -> float:
    if isinstance(value, bool):
        raise ValueError(f"expected a {what} such as {example}")
    if isinstance(value, int | float):
        if value < 0:
            raise ValueError(f"expected a non-negative {what}, got {value}")
        return float(value)
    if not isinstance(value, str):
        raise ValueError(f"expected a {what} such as {example}")
    m = re.fullmatch(_NUM, value)
    unit = m.group(2).lower() if m and casefold else (m.group(2) if m else None)
    if not m or unit not in table:
        units = ", ".join(u for u in table if u)
        raise ValueError(f"expected a {what} such as {example} (units: {units}), got {value!r}")
    return float(m.group(1)) * table[unit]


def parse_duration(value: object) -> float:
    return _parse(value, _DURATION, "duration", "'100ms' or '2s'", casefold=False)


def parse_size(value: object) -> float:
    return _parse(value, _SIZE, "size", "'100MB'", casefold=True)


def parse_rate(value: object) -> float:
    return _parse(value, _RATE, "rate", "'100Mbit'", casefold=True)


Duration = Annotated[float, BeforeValidator(parse_duration)]
Size = Annotated[float, BeforeValidator(parse_size)]
Rate = Annotated[float, BeforeValidator(parse_rate)]

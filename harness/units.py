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
# Sizes in bytes: decimal as iperf/wget users write them (100MB = 10^8 bytes), binary spelled
# KiB/MiB/GiB. Case matters for the B: 'Mb' (megabits) is refused rather than guessed.
_SIZE = {"": 1, "B": 1, "kB": 10**3, "KB": 10**3, "MB": 10**6, "GB": 10**9,
         "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
# Rates in bits per second, spelled as tc spells them (any case). 'Mbps'/'MBps' are refused: tc reads
# 'mbps' as megabytes per second, most people as megabits.
_RATE = {"": 1, "bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


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
    return _parse(value, _SIZE, "size", "'100MB'", casefold=False)


def parse_rate(value: object) -> float:
    return _parse(value, _RATE, "rate", "'100Mbit'", casefold=True)


_PER_SECOND = {"": 1.0, "/s": 1.0, "/min": 1 / 60}


def parse_per_second(value: object) -> float:
    """Events per second: '50/s', '600/min' or a bare number (per second); greater than 0."""
    v = _parse(value, _PER_SECOND, "rate", "'50/s'", casefold=False)
    if v <= 0:
        raise ValueError(f"expected a rate greater than 0 such as '50/s', got {value!r}")
    return v


def parse_percent(value: object) -> float:
    """'5%' or a bare number, in percent (0-100)."""
    text = value.strip()[:-1] if isinstance(value, str) and value.strip().endswith("%") else value
    v = _parse(text, {"": 1.0}, "percentage", "'5%'", casefold=False)
    if v > 100:
        raise ValueError(f"expected a percentage from 0 to 100, got {value!r}")
    return v


Duration = Annotated[float, BeforeValidator(parse_duration)]
Percent = Annotated[float, BeforeValidator(parse_percent)]
Size = Annotated[float, BeforeValidator(parse_size)]
Rate = Annotated[float, BeforeValidator(parse_rate)]
PerSecond = Annotated[float, BeforeValidator(parse_per_second)]

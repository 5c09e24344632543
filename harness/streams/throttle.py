"""throttle: a PE that reads at most `rate` tuples/s while its setting holds (0: it stops reading),
then returns to full rate (thesis 4.6.2). A fault row per connection into it; the culprit is each of
those connections while the rate is 0 (analysis.labels_streams): a throttle at another rate limits a
rate, it does not stop it.
"""

from __future__ import annotations

from typing import Any

from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("throttle", order=None, stalls={"rate": 0})


def rate_text(rate: float | None) -> str:
    return "inf" if rate is None else f"{rate:g}"


class Throttle:
    info = INFO
    off = "inf"   # the control file's value that undoes it: full rate

    @staticmethod
    def check(f) -> tuple[tuple[str, ...], str] | None:
        """A mistake of the fault's fields: (field path under the fault, message), or None."""
        if f.rate is None:
            return (), "a throttle fault needs `rate` (tuples/s; 0 stops the PE reading)"
        return None

    @staticmethod
    def on(f) -> str:
        """The control file's value that puts it in force."""
        return rate_text(f.rate)

    @staticmethod
    def target(f) -> dict[str, Any]:
        """Its faults rows' target JSON (before the connection's name)."""
        return {"operator": f.operator, "rate": f.rate}

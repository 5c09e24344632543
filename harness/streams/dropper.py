"""dropper: a PE that drops every tuple it reads while its setting holds, then forwards again
(thesis 4.6.2). Filtering is normal behaviour (4.2.1): a dropper is never a culprit.
"""

from __future__ import annotations

from typing import Any

from rundir.faultkinds import FaultKindInfo

INFO = FaultKindInfo("dropper", order=None, stalls=None)


class Dropper:
    info = INFO
    off = "off"

    @staticmethod
    def check(f) -> tuple[tuple[str, ...], str] | None:
        if f.rate is not None:
            return ("rate",), "a dropper drops every tuple while on: it takes no rate"
        return None

    @staticmethod
    def on(f) -> str:
        return "on"

    @staticmethod
    def target(f) -> dict[str, Any]:
        return {"operator": f.operator, "on": True}

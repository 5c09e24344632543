"""Fault targets: which module a fault acted on, one rule for the runner (which links faults to
modules when the run ends) and every reader (which resolves what the runner could not). Standard
library only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

from rundir.faultkinds import LEGACY, FaultKindInfo


def fault_target_key(kind: str, target: dict, monitor: str | None, monitor_if: str | None,
                     kinds: Mapping[str, FaultKindInfo] = LEGACY) -> str | None:
    """The collector key of the module a fault targets, None when the target is not observed (e.g. an
    ip_drop of another host). The fault kind records it in the target (`module_key`); for runs
    recorded before it did, the key is derived by the kind's `key` rule (rundir.faultkinds: tcp_drop
    -> its connection, app_pause -> the paused process, ip_drop of the monitored host -> the monitored
    interface)."""
    if "module_key" in target:
        return target["module_key"]
    info = kinds.get(kind)
    return info.module_key(target, monitor, monitor_if) if info is not None else None


def choose_target(modules, key: str, start: float | None) -> int | None:
    """Among modules (id, key, born), the one a fault at `start` targets: the key itself or a reborn
    key of the same identity ('app:<pid>@<start time>', '...#<n>'), the latest born by `start`."""
    cands = sorted((born, mid) for mid, k, born in modules if k == key or k.startswith((key + "@", key + "#")))
    before = [mid for born, mid in cands if start is None or born <= start]
    return before[-1] if before else (cands[0][1] if cands else None)


def resolve_fault_targets(faults: Iterable[tuple[str, dict, float | None]], modules: Sequence[tuple[int, str, float]],
                          monitor: str | None, monitor_if: str | None,
                          missing_start: float | None = None,
                          kinds: Mapping[str, FaultKindInfo] = LEGACY) -> list[int | None]:
    """The module id each fault (kind, target JSON as a dict, start) targets, or None where it is not
    observed, among modules (id, key, born); the runner and the analysis both resolve with this.
    Without a monitored interface (runs that did not record it) the only ipeth module's is taken, if
    there is one. A fault without a start (never took effect) is looked up at `missing_start`. `kinds`:
the run's fault kinds (rundir.faultkinds.kinds_of), for the key rules of runs without module_key."""
    if not monitor_if:
        ipeths = {k.split(":", 1)[1] for _, k, _ in modules if k.startswith("ipeth:")}
        monitor_if = next(iter(ipeths)) if len(ipeths) == 1 else None
    out: list[int | None] = []
    for kind, target, start in faults:
        key = fault_target_key(kind, target, monitor, monitor_if, kinds)
        if start is None or start != start:   # None, or NaN from a data frame
            start = missing_start
        out.append(choose_target(modules, key, start) if key else None)
    return out

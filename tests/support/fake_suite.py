"""Running a suite without a network: `fake_lab(monkeypatch)` puts a stand-in for the runner's
repetition (harness.runner.Repetition, the run loop) under harness.suiterun, which writes a hand-made run
(tests.support.runs.make_run, its length set by the run's seed so that every run differs) with the
manifest fields a real run has (experiment, repetition, spec digest, status), and takes neither the
machine's run lock nor the backend's checks. Everything else of the suite runner is the real one:
the plan, the shard, --only, --resume, the index, the summary and the suite's tables.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

from rundir.layout import RunDir
from tests.support.runs import make_run


class FakeRepetition:
    made: list[tuple[str, int]] = []      # (experiment, repetition) of every run made, in order
    fail: set[tuple[str, int]] = set()    # these end `failed`

    def __init__(self, exp, repetition, root, suite=None, status_prefix=None, observers=None):
        self.exp, self.repetition = exp, repetition
        # named by the seed, so the same run has the same name whichever shard made it; made again: -2, -3, ...
        base = Path(root) / exp.spec.name / f"20260101-{exp.seed_for(repetition):06d}-r{repetition}"
        path, k = base, 1
        while path.exists():
            k += 1
            path = base.with_name(f"{base.name}-{k}")
        self.rd = type("Rd", (), {"path": path, "analysis": RunDir(path).analysis, "status": None})()

    def execute(self) -> int:
        key = (self.exp.spec.name, self.repetition)
        FakeRepetition.made.append(key)
        status = "failed" if key in FakeRepetition.fail else "complete"
        path, _, _ = make_run(self.rd.path, n=40 + self.exp.seed_for(self.repetition) % 37, status=status)
        manifest = json.loads((path / "manifest.json").read_text())
        manifest.update(experiment=self.exp.spec.name, repetition=self.repetition,
                        spec_digest=self.exp.digest(self.repetition), seed=self.exp.seed_for(self.repetition))
        (path / "manifest.json").write_text(json.dumps(manifest, indent=2) + "\n")
        self.rd.status = status
        return 0 if status == "complete" else 1


def fake_lab(monkeypatch, reports: bool = False) -> type[FakeRepetition]:
    """reports=False leaves out each run's own report (figures, HTML: seconds a run); the suite's
    summary and tables stay."""
    import harness.backends
    import harness.runner
    import harness.suiterun
    import nestlab.commands.run
    from harness.observers import Observers
    from nestlab import observers

    FakeRepetition.made, FakeRepetition.fail = [], set()
    monkeypatch.setattr(harness.runner, "Repetition", FakeRepetition)
    monkeypatch.setattr(harness.backends, "check_runner", lambda kind: None)
    monkeypatch.setattr(harness.suiterun, "machine_lock", lambda what: contextlib.nullcontext())
    monkeypatch.setattr(harness.suiterun, "refuse_on_leftovers", lambda: None)
    if not reports:
        monkeypatch.setattr(nestlab.commands.run, "_observers",
                            lambda: Observers(scores=observers.scores, pooled=observers.pooled))
    return FakeRepetition

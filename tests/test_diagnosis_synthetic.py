"""The vectorised variants on a synthetic run (tests/support/synthetic.py) equal the per-snapshot
references."""

from __future__ import annotations

import numpy as np

from analysis.diagnose import diagnose_stretches
from analysis.model.stretches import DIRS, load_stretches
from analysis.variants import parse_variant
from tests.support.reference import assert_same, reference
from tests.support.synthetic import synthetic_run


def test_synthetic_run_fast_path_equals_reference(tmp_path):
    run = load_stretches(synthetic_run(tmp_path / "run", seconds=40, apps=2, conns=3, churn_s=8, seed=3))
    assert len(run.stretches) > 3  # the graph changes
    assert sum(st.t for st in run.stretches) == len(run.seqs)
    assert any(st.counters["in"].invalid[:, 1:].any() for st in run.stretches)  # glitches were found
    variants = [parse_variant(v) for v in ("flowdiagnoser", "flowdiagnoser:theta=1,queues=on", "nest-cf",
                                           "nest-cf:anw=off,ign=off,queues=off")]
    diags = diagnose_stretches(run, variants)
    labels_seen = set()
    for sd in diags:
        for v in variants:
            ref = reference(sd.stretch, v)
            assert_same(sd.results[v.name], ref, v.name)
            for d in DIRS:
                if v.kind == "label":
                    labels_seen |= set(np.unique(ref[d][0]).tolist())
    assert labels_seen == {0, 1, 2, 3}  # every result occurs, so the comparison means something

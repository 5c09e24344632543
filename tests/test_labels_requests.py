"""`--policy requests` (issue 42 item 1) on hand-made service runs (rundir.handmade_service: Maketrace's
web service with its requests table and delay windows): positives are the faulted tier's
applications and sockets and its callers' connections to it while it holds a request past its
hop's quiet-time p99, nothing outside; a run without request paths is labelled by `impact` with one
warning naming the run."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.labels import label_run
from analysis.labels_requests import held_snapshots
from analysis.load import load_run_data
from rundir.handmade import make_run
from tests.test_paths_versus import service_run


def labelled(run, policy):
    data = load_run_data(run)
    c = label_run(data, policy)
    mods = data.modules
    c["kind"] = c["module"].map(mods["kind"].astype(str))
    c["host"] = c["module"].map({m: a.get("host") for m, a in mods["attrs"].items() if isinstance(a, dict)})
    c["t"] = c["seq"].map(data.snapshots["mono"])
    return c


def test_the_faulted_tier_and_its_callers_connections_while_it_holds_requests(tmp_path):
    run = service_run(tmp_path / "r0", seed=3)   # 200 ms delays at web2 (10-14 s) and app1 (20-24 s)
    c = labelled(run, "requests")
    pos = c[c.actual]
    assert len(pos) > 0
    # only the delayed tiers' apps and sockets, and their callers' connections: app1's callers are
    # the web servers (web2's caller, the client, is not monitored)
    assert set(pos[pos.kind.isin(["app", "socket"])].host) == {"web2", "app1"}
    assert set(pos.kind) <= {"app", "socket", "tcp"}
    tcp = pos[pos.kind == "tcp"]
    t0 = c.t.min() - 0.1
    assert len(tcp) and set(tcp.host) == {"web1", "web2"}
    assert ((tcp.t > t0 + 20) & (tcp.t <= t0 + 26)).all()
    inside = ((pos.t > t0 + 10) & (pos.t <= t0 + 16)) | ((pos.t > t0 + 20) & (pos.t <= t0 + 26))
    assert inside.all()
    assert (pos.cause == "fault").all() and pos["fault"].notna().all()


def test_a_run_without_request_paths_is_labelled_by_impact_with_one_warning(tmp_path, capsys):
    run, _, _ = make_run(tmp_path / "net")
    a, b = labelled(run, "requests"), labelled(run, "impact")
    pd.testing.assert_frame_equal(a, b)
    err = capsys.readouterr().err
    assert err.count("warning:") == 1 and str(tmp_path / "net") in err and "impact" in err


def test_held_snapshots_marks_the_intervals_an_overdue_span_overlaps():
    t_start, t_end = np.array([0.0, 0.1, 0.2, 0.3]), np.array([0.1, 0.2, 0.3, 0.4])
    assert held_snapshots(np.array([[0.15, 0.25]]), t_start, t_end).tolist() == [False, True, True, False]
    assert held_snapshots(np.array([[0.45, 0.5]]), t_start, t_end).tolist() == [False] * 4
    assert held_snapshots(np.zeros((0, 2)), t_start, t_end).tolist() == [False] * 4

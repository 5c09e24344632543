"""Maketrace's truth is consistent with its templates and recipe, and its perturbations do what
they say (analysis/paths/maketrace.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from analysis.paths.maketrace import Fault, Template, call, maketrace, template_pattern, web_service
from analysis.paths.model import COLUMNS, pattern_of, true_patterns

TWO = [Template("a", "client", call("web", 5, call("db", 10)), weight=3),
       Template("b", "client", call("web", 2), weight=1)]


def test_messages_have_the_models_columns_sorted_and_paired():
    tr = maketrace(TWO, duration=20, rate=50, seed=1)
    m = tr.messages
    assert list(m.columns) == list(COLUMNS)
    assert [str(t) for t in m.dtypes] == list(COLUMNS.values())
    assert (np.diff(m["t_send"]) >= 0).all()
    assert (m["t_recv"] >= m["t_send"]).all()
    # every call has exactly one return with the same id, going back
    calls, rets = m[m["kind"] == "call"], m[m["kind"] == "return"]
    assert len(calls) == len(rets) and calls["msg"].is_unique
    joined = calls.merge(rets, on="msg", suffixes=("_c", "_r"))
    assert (joined["src_c"].astype(str) == joined["dst_r"].astype(str)).all()
    assert (joined["t_send_r"] >= joined["t_recv_c"]).all()


def test_truth_patterns_match_the_templates_and_the_causes():
    tr = maketrace(TWO, duration=20, rate=50, seed=2)
    pats = true_patterns(tr)
    assert set(pats["pattern"]) == {template_pattern(t) for t in TWO}
    assert template_pattern(TWO[0]) == "client>web(web>db(db>web(web>client)))"
    # rebuilding each request's pattern from the row causes gives the same strings
    t, m = tr.truth, tr.messages
    src, dst = m["src"].astype(str).to_numpy(), m["dst"].astype(str).to_numpy()
    roots = np.flatnonzero(t.cause < 0)
    rebuilt = {int(t.request[r]): pattern_of(src, dst, t.cause, int(r)) for r in roots}
    assert rebuilt == dict(zip(pats["request"], pats["pattern"], strict=True))
    has = t.cause >= 0
    assert (src[has] == dst[t.cause[has]]).all()             # a node sends what it received caused
    assert (t.cause[has] < np.flatnonzero(has)).all()        # causes come first
    assert np.allclose(t.node_delay[has], m["t_send"].to_numpy()[has] - m["t_recv"].to_numpy()[t.cause[has]])


def test_rates_follow_the_recipe():
    tr = maketrace(TWO, duration=200, rate=100, seed=3)
    counts = true_patterns(tr)["type"].value_counts()
    n = counts.sum()
    assert abs(n - 20_000) < 5 * np.sqrt(20_000)
    assert abs(counts["a"] / n - 0.75) < 0.02
    starts = tr.messages[tr.truth.cause < 0]["t_send"]
    assert starts.min() >= 0 and starts.max() < 200


def test_start_stop_windows_and_parallelism():
    t = [Template("early", "client", call("web", 5), stop=10), Template("late", "client", call("web", 5), start=10)]
    tr = maketrace(t, duration=20, rate=100, seed=4)
    roots = tr.truth.cause < 0
    req_type = pd.Series(tr.truth.request[roots]).map(tr.truth.request_type).to_numpy()
    times = tr.messages["t_send"].to_numpy()[roots]
    assert (times[req_type == "early"] < 10).all() and (times[req_type == "late"] >= 10).all()
    # parallelism: mean paths in flight = rate x mean duration (Little's law)
    tr = maketrace(TWO, duration=100, parallelism=3, seed=5)
    m = tr.messages
    per_req = pd.DataFrame({"r": tr.truth.request, "a": m["t_send"], "b": m["t_recv"]}).groupby("r")
    busy = (per_req["b"].max() - per_req["a"].min()).sum() / 100
    assert 2.5 < busy < 3.5


def test_delay_variance_and_means():
    tpl = [Template("a", "client", call("web", 10))]
    for sd in (0.0, 0.3):
        tr = maketrace(tpl, duration=50, rate=100, seed=6, delay_sd=sd, net_sd=0)
        d = tr.truth.node_delay[~np.isnan(tr.truth.node_delay)]
        assert abs(d.mean() - 0.010) < 0.0005
        assert abs(d.std() - sd * 0.010) < 0.0005


def test_fault_adds_delay_to_the_nodes_returns_in_the_window():
    tpl = [Template("a", "client", call("web", 5, call("app", 10)))]
    tr = maketrace(tpl, duration=100, rate=20, seed=7, faults=[Fault("app", 0.2, 40, 60)], delay_sd=0)
    m, t = tr.messages, tr.truth
    app_returns = (m["src"] == "app").to_numpy()
    got = m["t_recv"].to_numpy()[t.cause[app_returns]]
    d = t.node_delay[app_returns]
    inside = (got >= 40) & (got < 60)
    assert np.allclose(d[inside], 0.210) and np.allclose(d[~inside], 0.010)
    assert inside.sum() > 0.15 * len(d)
    assert tr.faults.to_dict("records")[0]["node"] == "app"


def test_clock_skew_shifts_each_nodes_clock_by_a_constant():
    tpl = [Template("a", "client", call("web", 5))]
    base = maketrace(tpl, duration=10, rate=10, seed=8, net_sd=0)
    skew = maketrace(tpl, duration=10, rate=10, seed=8, net_sd=0, clock_skew=0.05)
    lat = lambda tr: (tr.messages["t_recv"] - tr.messages["t_send"]).groupby(tr.messages["src"], observed=True).agg(["min", "max"])  # noqa: E731
    b, s = lat(base), lat(skew)
    assert np.allclose(b["min"], 0.0005) and np.allclose(s["min"], s["max"])   # a constant offset per pair
    assert not np.allclose(s["min"], 0.0005)
    # node delays (one clock) are unchanged by skew
    assert np.allclose(np.sort(base.truth.node_delay[~np.isnan(base.truth.node_delay)]),
                       np.sort(skew.truth.node_delay[~np.isnan(skew.truth.node_delay)]))


def test_drops_and_noise():
    full = maketrace(web_service(), duration=100, parallelism=2, seed=9)
    dropped = maketrace(web_service(), duration=100, parallelism=2, seed=9, drop_rate=0.05)
    assert abs(len(dropped.messages) / len(full.messages) - 0.95) < 0.01
    assert true_patterns(dropped).equals(true_patterns(full))         # what really happened
    t = dropped.truth
    assert ((t.cause >= -1) & (t.cause < len(t.cause))).all()
    noisy = maketrace(web_service(), duration=100, parallelism=2, seed=9, noise=0.15)
    share = (noisy.truth.request < 0).mean()
    assert abs(share - 0.15 / 1.15) < 0.01
    noise = noisy.messages[noisy.truth.request < 0]
    edges = set(zip(full.messages["src"].astype(str), full.messages["dst"].astype(str), strict=True))
    assert set(zip(noise["src"].astype(str), noise["dst"].astype(str), strict=True)) <= edges


def test_untagged_and_seeded():
    a = maketrace(TWO, duration=10, rate=20, seed=10, tags=False)
    assert set(a.messages["kind"]) == {""} and (a.messages["msg"] == -1).all()
    b = maketrace(TWO, duration=10, rate=20, seed=10, tags=False)
    pd.testing.assert_frame_equal(a.messages, b.messages)
    c = maketrace(TWO, duration=10, rate=20, seed=11, tags=False)
    assert not a.messages["t_send"].equals(c.messages["t_send"])


def test_web_service_preset_has_common_and_rare_patterns():
    tr = maketrace(web_service(), duration=300, parallelism=2, seed=12)
    share = true_patterns(tr)["pattern"].value_counts(normalize=True)
    assert (share >= 0.01).sum() >= 8 and ((share < 0.01) & (share > 0)).sum() == 2
    assert {"client", "web1", "web2", "app1", "app2", "cache", "db"} == set(tr.messages["src"].astype(str))


def test_bad_recipes():
    with pytest.raises(ValueError, match="no templates"):
        maketrace([], duration=1)
    with pytest.raises(ValueError, match="weights"):
        maketrace([Template("a", "c", call("w", 1), weight=0)], duration=1)

"""The diagnosis tables: complete, provenance for every cell, the certain cells exactly, and the
signs the paper's seven principles state (paper 3.1), with the exceptions the paper itself makes."""

from __future__ import annotations

import numpy as np
import pytest

from analysis.variants.nest_cf_tables import ABSENT, DT_IN, DT_OUT, OBS, TABLES, arrays, cell, markdown

ACTIVITY = ("ACT", "NONE", "IDLE", "WAIT", "ANW", "IGN")
TABLE4 = {0.4, 0.6, 0.8, 1.0}

# Cells the paper fixes (Table 5 arithmetic, worked example, section 5.4): (table, row, col) -> (P, C)
CERTAIN = {
    ("in", "ACT", "ACT"): (-0.6, -0.6),
    ("in", "ACT", "ANW"): (+0.4, +0.6),
    ("in", "ACT", "IGN"): (None, -1.0),
    ("in", "ACT", "QZ"): (None, None),
    ("in", "IDLE", "ACT"): (+1.0, None),
    ("in", "WAIT", "ACT"): (-1.0, None),
    ("in", "ANW", "WAIT"): (+0.6, -1.0),
    ("in", "IGN", "IDLE"): (-1.0, None),
    ("in", "QZ", "WAIT"): (+0.6, None),
    ("in", "NONE", "NONE"): (+0.4, +0.4),
    ("out", "NONE", "NONE"): (+0.4, +0.4),
}


def cells(table=None):
    for t in ("out", "in") if table is None else (table,):
        for r in OBS:
            for c in OBS:
                p, q, prov, why = cell(t, r, c)
                yield t, r, c, p, q, prov, why


def test_every_cell_is_well_formed():
    for t, table in TABLES.items():
        for (r, c), value in table.items():
            assert r in OBS and c in OBS, (t, r, c)
            assert len(value) == 4
    for t, r, c, p, q, prov, why in cells():
        assert prov in "CTGLE" and why, (t, r, c)
        for v in (p, q):
            assert v is None or abs(v) in TABLE4, (t, r, c, v)  # only Table 4's factors
        if prov == "E":
            assert p is None and q is None, (t, r, c)


def test_certain_cells_exactly():
    for (t, r, c), (p, q) in CERTAIN.items():
        assert cell(t, r, c)[:2] == (p, q), (t, r, c)
        assert cell(t, r, c)[2] == "C", (t, r, c)
    # P2's stated exception: DT_IN[ACT][WAIT, ANW]#P = +0.4
    assert cell("in", "ACT", "WAIT")[0] == 0.4 and cell("in", "ACT", "ANW")[0] == 0.4
    # Only those are marked certain.
    marked = {(t, r, c) for t, r, c, *_, prov, _ in cells() if prov == "C"}
    assert marked == set(CERTAIN)


def test_arrays_match_the_cells():
    for t in ("out", "in"):
        sp, sc = arrays(t)
        assert sp.shape == sc.shape == (ABSENT + 1, ABSENT + 1)
        assert np.isnan(sp[ABSENT]).all() and np.isnan(sp[:, ABSENT]).all()
        for _, r, c, p, q, *_ in cells(t):
            i, j = OBS.index(r), OBS.index(c)
            assert (np.isnan(sp[i, j]) if p is None else sp[i, j] == p)
            assert (np.isnan(sc[i, j]) if q is None else sc[i, j] == q)


def _sign(table, rows, cols, which, sign, exceptions=()):
    for t in table:
        for r in rows:
            for c in cols:
                if (t, r, c) in exceptions:
                    continue
                v = cell(t, r, c)[0 if which == "P" else 1]
                if v is not None:
                    assert (v > 0) if sign > 0 else (v < 0), f"DT_{t.upper()}[{r}][{c}]#{which} = {v}"


BOTH = ("out", "in")


def test_principle_2_producers_must_produce():
    # Inactive producers are blamed, active ones absolved -- except where P5 (an idle consumer
    # needs nothing) absolves the producer of an idle consumer, and P2's own exception.
    _sign(BOTH, ("IDLE", "NONE"), OBS, "P", +1, exceptions={("in", "NONE", "IDLE")})
    _sign(BOTH, ("ACT",), OBS, "P", -1, exceptions={("in", "ACT", "WAIT"), ("in", "ACT", "ANW")})


def test_principle_3_consumers_must_consume():
    _sign(BOTH, [r for r in OBS if r not in ("WAIT", "ANW")], ("ACT",), "C", -1)
    assert cell("in", "IDLE", "ACT")[1] is None and cell("in", "WAIT", "ACT")[1] is None
    _sign(BOTH, [r for r in OBS if r != "IDLE"], ("IDLE", "NONE"), "C", +1)
    assert cell("out", "IDLE", "NONE")[1] < 0 and cell("in", "IDLE", "NONE")[1] < 0  # partial absolution


def test_principle_4_waiting_implicates_lower_layers():
    # The waiting upper module is absolved (inbound: the consumer; outbound: the producer) ...
    _sign(("in",), OBS, ("WAIT", "ANW"), "C", -1, exceptions={("in", "ACT", "ANW")})
    _sign(("out",), ("WAIT", "ANW"), OBS, "P", -1, exceptions={("out", "ANW", "ACT")})
    _sign(("in",), ("WAIT",), OBS, "P", -1)   # a waiting socket is never blamed by its application
    _sign(("out",), OBS, ("WAIT",), "C", -1)
    # ... and the blame passes to the quiet lower layer.
    assert cell("in", "ANW", "WAIT")[0] > 0 and cell("in", "ANW", "ANW")[0] > 0
    assert cell("out", "WAIT", "ANW")[1] > 0 and cell("out", "WAIT", "NONE")[1] > 0
    assert cell("out", "ANW", "ANW")[1] > 0
    # The example's exception: an ANW module above an active one is blamed (both directions).
    assert cell("in", "ACT", "ANW")[1] > 0 and cell("out", "ANW", "ACT")[0] > 0


def test_principle_5_idle_modules_are_blamed_outright():
    for t in BOTH:
        for c in ACTIVITY:  # queue cells use P6's weaker factors
            p = cell(t, "IDLE", c)[0]
            assert p is None or p == 1.0, (t, c)
        for r in ACTIVITY:
            q = cell(t, r, "IDLE")[1]
            assert q == 1.0 or (t, r) == ("in", "IGN"), (t, r, q)
    assert cell("in", "IGN", "IDLE")[1] is None  # the stated exception
    # Dependents of idle modules absolved: outbound the child, inbound the producer child.
    _sign(("out",), ("IDLE",), [c for c in OBS if c not in ("IDLE", "ERR")], "C", -1)
    _sign(("in",), [r for r in OBS if r != "IDLE"], ("IDLE",), "P", -1)


def test_principle_6_queues():
    for r in ACTIVITY:
        q = cell("out", r, "QZ")[1]
        if r in ("WAIT", "ANW"):
            assert q is not None and q > 0, r  # a waiting parent keeps the child blamed
        elif q is not None:
            assert q < 0, r  # an empty child queue partially absolves the child
    _sign(("out",), [r for r in OBS if r != "IDLE"], ("QNZ",), "C", +1)
    _sign(("out",), ("QNZ",), OBS, "P", +1)
    # Inbound, the consumer's queue counts only in DT_IN[NONE, IDLE][QZ].
    for r in ACTIVITY:
        for c in ("QZ", "QNZ"):
            if (r, c) not in (("NONE", "QZ"), ("IDLE", "QZ")):
                assert cell("in", r, c)[:2] == (None, None), (r, c)
    _sign(("in",), ("QNZ",), ("NONE", "IDLE"), "C", +1)


def test_principle_7_errors():
    _sign(BOTH, ("ERR",), OBS, "P", +1)
    _sign(BOTH, OBS, ("ERR",), "C", +1)
    # Stronger for the lower layer: the child's errors weigh more than the parent's.
    assert cell("in", "ERR", "ACT")[0] > cell("out", "ERR", "ACT")[0]
    assert cell("out", "ERR", "ERR")[1] > cell("out", "ERR", "ERR")[0]


@pytest.mark.parametrize("t", ["out", "in"])
def test_markdown_lists_every_cell(t):
    text = markdown(t)
    assert len(text.splitlines()) == 2 + len(OBS)
    assert text.count("|") == (len(OBS) + 2) * (2 + len(OBS))


def test_reconstruction_was_not_silently_dropped():
    # The note's cells with a readable glyph all have a value here (spot checks across both tables).
    assert cell("out", "ACT", "ACT")[:2] == (-0.8, -0.6)
    assert cell("out", "ACT", "IDLE")[:2] == (-0.8, 1.0)
    assert cell("out", "WAIT", "QZ")[1] == 0.8 and cell("out", "WAIT", "QNZ")[1] == 0.6
    assert cell("in", "NONE", "WAIT")[0] == 0.8 and cell("in", "IDLE", "QZ")[0] == 0.6
    assert len(DT_IN) > 40 and len(DT_OUT) > 40


def test_docs_show_the_tables_as_they_are():
    from pathlib import Path

    doc = (Path(__file__).resolve().parent.parent / "docs" / "diagnosis.md").read_text()
    assert markdown("out") in doc and markdown("in") in doc, \
        "regenerate the tables in docs/diagnosis.md: python -m analysis.variants.nest_cf_tables"

"""The NeST diagnosis tables DT_OUT and DT_IN (paper Table 3) as data, with each cell's provenance.

The paper's tables are garbled in the text extraction. docs/nest-cf-tables.md
separates what the paper fixes from what is inferred; this file follows it, resolves its open cells
from the seven principles (paper 3.1), and says for every cell where its values come from.

A cell is DT[producer observation][consumer observation] = (sigma_P, sigma_C); None = no update.
DT_OUT: producer = parent (upper layer), consumer = child.  DT_IN: producer = child, consumer = parent.

Provenance:
  C  certain: fixed by the paper (Table 5 arithmetic, the worked example, explicit text)
  T  sign stated by a principle (P1-P7), magnitude inferred
  G  glyph readable in the extraction and consistent with the principles
  L  low confidence: inferred from semantics or duality with a certain cell
  E  empty: blank in the extraction and named by no principle

Run `python -m analysis.variants.nest_cf_tables` to print both tables (docs/diagnosis.md has them).
"""

from __future__ import annotations

import numpy as np

OBS = ("ACT", "NONE", "IDLE", "WAIT", "ANW", "IGN", "QZ", "QNZ", "ERR")
ACT, NONE, IDLE, WAIT, ANW, IGN, QZ, QNZ, ERR = range(9)
ABSENT = len(OBS)  # index of "no observation in this slot": always an empty cell

ABSOLVE_CO_PARENT = -0.6  # phase two, paper 3.2 pseudocode: diag ⊕ ◀ (certain)

_ = None
# (row, col): (sigma_P, sigma_C, provenance, why)
DT_IN = {
    ("ACT", "ACT"): (-0.6, -0.6, "C", "Table 5: fd 5/fd 7 vs webkit, TCPx vs 10.0.1.43"),
    ("ACT", "NONE"): (-0.6, +0.6, "T", "P2 absolves an active producer, P3 blames an inactive consumer; "
                                       "magnitudes as DT_OUT[ACT][NONE]"),
    ("ACT", "IDLE"): (-0.6, +1.0, "T", "P5: an idle consumer is blamed outright, its producer strongly absolved"),
    ("ACT", "WAIT"): (+0.4, -0.6, "T", "sigma_P certain (P2's stated exception); sigma_C: P4 absolves a waiting consumer"),
    ("ACT", "ANW"): (+0.4, +0.6, "C", "Table 5: 10.0.1.43 vs TCPw"),
    ("ACT", "IGN"): (_, -1.0, "C", "Table 5: TCPz -1.0 from 10.0.1.43"),
    ("ACT", "QZ"): (_, _, "C", "Table 5: 0.0 from TCPw's Qz; caption: consumer queue ignored inbound"),
    ("ACT", "QNZ"): (_, _, "T", "caption: the consumer's queue is ignored for inbound flows"),
    ("ACT", "ERR"): (_, +0.4, "G", "glyph 0; P7: errors are weak evidence (sigma_C in the ERR column)"),
    ("NONE", "ACT"): (+0.4, -0.4, "T", "P2 blames a non-producing producer (glyph 0, weak: NONE is ambiguous); "
                                       "P3 absolves an active consumer"),
    ("NONE", "NONE"): (+0.4, +0.4, "C", "paper 5.4: DT_*[NONE][NONE] blames both a small amount"),
    ("NONE", "IDLE"): (-0.6, +1.0, "T", "P5 (dependents of an idle consumer strongly absolved) over P2; "
                                       "the idle consumer is blamed"),
    ("NONE", "WAIT"): (+0.8, -1.0, "G", "glyph ▷ for sigma_P; sigma_C: P4, as certain DT_IN[ANW][WAIT]"),
    ("NONE", "ANW"): (+0.6, -0.6, "G", "glyph ⊲ for sigma_P; sigma_C: P4 absolves a waiting consumer"),
    ("NONE", "IGN"): (_, -1.0, "G", "glyph • read as sigma_C, as in certain DT_IN[ACT][IGN]"),
    ("NONE", "QZ"): (+0.4, _, "T", "P6 names DT_IN[NONE,IDLE][QZ]: the consumer emptied its queue, "
                                   "the producer did not refill it (glyph 0, weak)"),
    ("NONE", "QNZ"): (_, _, "T", "caption: consumer queue ignored inbound"),
    ("IDLE", "ACT"): (+1.0, _, "C", "Table 5: fd 24 +1.0 from webkit; P3: DT_IN[IDLE,WAIT][ACT]#C empty"),
    ("IDLE", "NONE"): (+1.0, -0.4, "T", "P5; P3's exception: DT_*[IDLE][NONE]#C partially absolves"),
    ("IDLE", "IDLE"): (+1.0, +1.0, "T", "glyph 0; P5 blames every idle module"),
    ("IDLE", "WAIT"): (+1.0, -0.4, "T", "glyph 0; P5; P4 absolves the waiting consumer (weak: it waits "
                                       "on another producer)"),
    ("IDLE", "ANW"): (+1.0, -0.6, "T", "glyph •; P5; P4"),
    ("IDLE", "IGN"): (+1.0, -1.0, "T", "glyph •; P5; the IGN column as certain DT_IN[ACT][IGN]"),
    ("IDLE", "QZ"): (+0.6, _, "G", "glyph ⊲; P6 names DT_IN[IDLE][QZ]"),
    ("IDLE", "QNZ"): (_, _, "T", "caption: consumer queue ignored inbound"),
    ("WAIT", "ACT"): (-1.0, _, "C", "Table 5: fd 2 -1.0 from webkit; P3: sigma_C empty"),
    ("WAIT", "NONE"): (-1.0, +0.4, "T", "glyph •; P4 absolves the waiting producer, P3 blames an inactive consumer"),
    ("WAIT", "IDLE"): (-1.0, +1.0, "T", "glyph 0; P4; P5"),
    ("WAIT", "WAIT"): (-1.0, -1.0, "T", "glyph •; P4 absolves both, as certain DT_IN[WAIT][ACT]"),
    ("WAIT", "ANW"): (-1.0, -0.6, "T", "glyph •; P4"),
    ("WAIT", "IGN"): (-1.0, -1.0, "T", "glyph •; P4; IGN column"),
    ("ANW", "ACT"): (+0.4, _, "L", "glyph ▲ unreadable; P3 does not absolve the consumer of a waiting "
                                   "producer; a weaker form of certain DT_IN[ANW][WAIT]#P"),
    ("ANW", "NONE"): (-0.6, _, "G", "glyph ◄ = -0.6 read as sigma_P (P4); as sigma_C it would contradict P3"),
    ("ANW", "IDLE"): (-1.0, +1.0, "T", "glyphs ▽ ● (sigma_C above, sigma_P below); P5"),
    ("ANW", "WAIT"): (+0.6, -1.0, "C", "Table 5: TCPw vs fd 2"),
    ("ANW", "ANW"): (+0.6, -0.8, "L", "glyphs ▼ ▽; P4 passes the blame down and partially absolves the "
                                      "upper module; -0.8 keeps a lone waiting connection with an empty "
                                      "queue blamed, and lets two waiting co-parents absolve each other "
                                      "(paper 5.2, Figure 7a)"),
    ("ANW", "IGN"): (_, -1.0, "G", "glyph •; IGN column"),
    ("IGN", "ACT"): (-1.0, _, "G", "glyph • read as sigma_P, as in certain DT_IN[IGN][IDLE]"),
    ("IGN", "NONE"): (-1.0, _, "G", "glyph •; IGN row"),
    ("IGN", "IDLE"): (-1.0, _, "C", "Table 5: TCPz -1.0 from fd 24; P5's stated exception: sigma_C empty"),
    ("IGN", "WAIT"): (-1.0, _, "G", "glyph •; IGN row"),
    ("IGN", "ANW"): (-1.0, _, "L", "unreadable; IGN row"),
    ("IGN", "IGN"): (-1.0, -1.0, "G", "glyph •; IGN row and column"),
    ("QZ", "NONE"): (+0.4, _, "L", "glyph 0: the producer's queue is empty and its consumer is quiet"),
    ("QZ", "IDLE"): (-0.4, _, "L", "glyph •: an idle consumer asks for nothing (P5's direction)"),
    ("QZ", "WAIT"): (+0.6, _, "C", "Table 5: TCPw +0.6 (Qz) from fd 2"),
    ("QZ", "ANW"): (+0.4, _, "L", "glyph 0"),
    ("QZ", "QZ"): (-0.4, _, "L", "glyph •"),
    ("QNZ", "ACT"): (_, _, "T", "P3: no credit to a consumer reading buffered data"),
    ("QNZ", "NONE"): (-0.4, +0.6, "T", "glyph •; P6 names DT_IN[QNZ][NONE,IDLE]: the consumer has not done its job"),
    ("QNZ", "IDLE"): (-0.4, +0.6, "T", "glyph •; P6"),
    ("QNZ", "QZ"): (-0.4, _, "L", "glyph •"),
    ("ERR", "ACT"): (+0.6, _, "G", "glyph ◁; P7: stronger for the lower layer (the child)"),
    ("ERR", "NONE"): (+0.6, _, "G", "glyph ⊲ (the second glyph • dropped: P3 makes sigma_C positive)"),
    ("ERR", "WAIT"): (+0.6, _, "G", "glyph ⊲; P7"),
    ("ERR", "ANW"): (+0.4, _, "L", "glyph 0; P7"),
    ("ERR", "ERR"): (+0.6, +0.4, "L", "glyph 0; P7: stronger for the lower layer (the producer inbound)"),
}

DT_OUT = {
    ("ACT", "ACT"): (-0.8, -0.6, "G", "glyphs ▶ ◀, order assumed sigma_P then sigma_C"),
    ("ACT", "NONE"): (-0.6, +0.6, "G", "glyph ⊲ for sigma_C; sigma_P (∢, unreadable) by P2"),
    ("ACT", "IDLE"): (-0.8, +1.0, "G", "glyphs ▶ ○; P5"),
    ("ACT", "WAIT"): (-0.8, -1.0, "T", "glyph •; P2 as DT_OUT[ACT][IDLE]#P; P4 absolves the waiting "
                                      "consumer outright, dual of certain DT_IN[WAIT][ACT]"),
    ("ACT", "ANW"): (-0.6, +0.6, "T", "glyph • (sigma_P, P2); P3: the consumer must pass on what was produced"),
    ("ACT", "IGN"): (-0.6, -1.0, "T", "glyph •; P2; IGN column"),
    ("ACT", "QZ"): (_, -0.4, "T", "glyph •; P6: an empty child queue partially absolves the child"),
    ("ACT", "QNZ"): (_, +0.6, "T", "blank in the extraction; P6: DT_OUT[*][QNZ]#C blames the child more strongly"),
    ("ACT", "ERR"): (_, +0.4, "G", "glyph 0; P7"),
    ("NONE", "ACT"): (+0.6, -0.6, "G", "glyph ⊲ (sigma_P, P2); P3 absolves the active consumer"),
    ("NONE", "NONE"): (+0.4, +0.4, "C", "paper 5.4: DT_*[NONE][NONE] blames both a small amount"),
    ("NONE", "IDLE"): (+0.4, +1.0, "T", "glyph 0; P2 (weak), P5"),
    ("NONE", "WAIT"): (+0.6, -1.0, "G", "glyph ⊲; P4"),
    ("NONE", "ANW"): (+0.4, -0.4, "T", "P2 (NONE row blames the producer); glyph • read as sigma_C (P4)"),
    ("NONE", "IGN"): (+0.4, -1.0, "T", "glyph •; P2; IGN column"),
    ("NONE", "QZ"): (+0.4, -0.4, "T", "glyph 0 (sigma_P, P2); P6 partial absolution of the child"),
    ("NONE", "QNZ"): (_, +0.6, "T", "blank in the extraction; P6"),
    ("NONE", "ERR"): (_, +0.4, "G", "glyph 0; P7"),
    ("IDLE", "ACT"): (+1.0, -0.8, "T", "blank in the extraction; P5: the idle producer is blamed, its "
                                      "dependents strongly absolved"),
    ("IDLE", "NONE"): (+1.0, -0.4, "T", "blank in the extraction; P5; P3's exception: partial absolution"),
    ("IDLE", "IDLE"): (+1.0, +1.0, "T", "glyph 0; P5 blames every idle module"),
    ("IDLE", "WAIT"): (+1.0, -0.8, "T", "glyph 0; P5; P4"),
    ("IDLE", "ANW"): (+1.0, -0.8, "T", "unreadable; P5 strongly absolves dependents"),
    ("IDLE", "IGN"): (+1.0, -1.0, "T", "glyph 0 (sigma_P); IGN column"),
    ("IDLE", "QZ"): (+1.0, -0.4, "G", "glyph • (sigma_C); P6 partial absolution"),
    ("IDLE", "QNZ"): (+1.0, -0.4, "G", "glyph •: P5's absolution of an idle module's dependents wins over P6"),
    ("WAIT", "ACT"): (-1.0, _, "T", "glyph •; P4 absolves the waiting producer; P3 does not absolve a "
                                   "consumer whose producer waits"),
    ("WAIT", "NONE"): (-1.0, +0.6, "T", "blank in the extraction; P4 absolves the waiting producer and "
                                       "blames the quiet lower layer"),
    ("WAIT", "IDLE"): (-0.4, +1.0, "T", "glyph •; P5 blames the idle consumer; the producer waits on another"),
    ("WAIT", "WAIT"): (-1.0, -1.0, "T", "glyphs ••; P4"),
    ("WAIT", "ANW"): (-1.0, +0.6, "T", "blank in the extraction; P4; dual of certain DT_IN[ANW][WAIT] = (+0.6, -1.0)"),
    ("WAIT", "IGN"): (-1.0, -1.0, "T", "glyph •; P4; IGN column"),
    ("WAIT", "QZ"): (_, +0.8, "G", "glyph ▷: a waiting producer keeps the child blamed (P6's exception)"),
    ("WAIT", "QNZ"): (_, +0.6, "G", "glyph ◁"),
    ("WAIT", "ERR"): (-0.4, _, "G", "glyph • read as sigma_P (P4); as sigma_C it would contradict P7"),
    ("ANW", "ACT"): (+0.6, +0.4, "L", "glyph 0; dual of certain DT_IN[ACT][ANW] = (+0.4, +0.6)"),
    ("ANW", "NONE"): (-0.6, +0.6, "L", "glyph •; dual of DT_IN[NONE][ANW]"),
    ("ANW", "IDLE"): (-0.6, +1.0, "L", "glyph ▼; P5"),
    ("ANW", "WAIT"): (-0.6, -1.0, "L", "glyphs . •; P4"),
    ("ANW", "ANW"): (-0.8, +0.6, "L", "glyph •; dual of DT_IN[ANW][ANW]"),
    ("ANW", "IGN"): (_, -1.0, "L", "glyph •; IGN column"),
    ("ANW", "QZ"): (_, +0.6, "G", "glyph ⊲ (P6's exception: the parent waits)"),
    ("ANW", "QNZ"): (_, +0.4, "G", "glyph 0"),
    ("IGN", "ACT"): (-1.0, _, "G", "glyph • read as sigma_P, as in certain DT_IN[IGN][IDLE]"),
    ("IGN", "NONE"): (-1.0, _, "G", "glyph •; IGN row"),
    ("IGN", "IDLE"): (-1.0, +1.0, "T", "glyph • (sigma_P, IGN row); P5 blames an idle child outright "
                                      "(its only stated exception is DT_IN[IGN][IDLE])"),
    ("IGN", "WAIT"): (-1.0, _, "G", "glyph •; IGN row"),
    ("IGN", "ANW"): (-1.0, _, "G", "glyph •; IGN row"),
    ("IGN", "IGN"): (-1.0, -1.0, "G", "glyph •; IGN row and column"),
    ("QZ", "ACT"): (+0.4, _, "L", "glyph 0"),
    ("QZ", "NONE"): (+0.4, _, "L", "glyph 0"),
    ("QZ", "QZ"): (+0.4, -0.4, "L", "glyph 0 (sigma_P); P6 partial absolution of the child"),
    ("QZ", "QNZ"): (-0.4, +0.6, "L", "glyph • (sigma_P); P6 blames the child"),
    ("QNZ", "ACT"): (+0.6, _, "G", "glyph ⊲; P6: DT_OUT[QNZ][*]#P blames a producer with messages left"),
    ("QNZ", "NONE"): (+0.4, _, "G", "glyph 0; P6"),
    ("QNZ", "ERR"): (_, _, "E", "glyph • contradicts P6 (as sigma_P) and P7 (as sigma_C): left empty"),
    ("ERR", "ACT"): (+0.4, _, "G", "glyph 0; P7: weak for the upper layer (the producer outbound)"),
    ("ERR", "NONE"): (+0.4, _, "G", "glyph 0; P7"),
    ("ERR", "ERR"): (+0.4, +0.6, "G", "glyph ◁ (sigma_C): P7, stronger for the lower layer"),
}

TABLES = {"out": DT_OUT, "in": DT_IN}
EMPTY = (None, None, "E", "blank in the extraction and named by no principle")


def cell(table: str, row: str, col: str) -> tuple[float | None, float | None, str, str]:
    """(sigma_P, sigma_C, provenance, why) of one cell; `table` is 'out' or 'in'."""
    return TABLES[table].get((row, col), EMPTY)


def arrays(table: str) -> tuple[np.ndarray, np.ndarray]:
    """(sigma_P, sigma_C) as (10, 10) arrays indexed [producer obs, consumer obs]; NaN = no update.

    Index ABSENT (9) stands for "no observation in this slot" and is always NaN.
    """
    sp = np.full((ABSENT + 1, ABSENT + 1), np.nan)
    sc = np.full((ABSENT + 1, ABSENT + 1), np.nan)
    for (r, c), (p, q, _prov, _why) in TABLES[table].items():
        i, j = OBS.index(r), OBS.index(c)
        sp[i, j] = np.nan if p is None else p
        sc[i, j] = np.nan if q is None else q
    return sp, sc


def markdown(table: str) -> str:
    """One table as markdown: each cell 'sigma_P, sigma_C provenance' ('–' = no update)."""
    def f(v):
        return "–" if v is None else f"{v:+.1f}"

    head = "| producer \\ consumer | " + " | ".join(OBS) + " |\n|---" + "|---" * len(OBS) + "|\n"
    lines = []
    for r in OBS:
        cells = []
        for c in OBS:
            p, q, prov, _ = cell(table, r, c)
            cells.append(f"{f(p)}, {f(q)} {prov}")
        lines.append(f"| **{r}** | " + " | ".join(cells) + " |")
    return head + "\n".join(lines)


if __name__ == "__main__":
    for name, t in (("DT_OUT (outbound: producer = parent)", "out"), ("DT_IN (inbound: producer = child)", "in")):
        print(f"### {name}\n\n{markdown(t)}\n")

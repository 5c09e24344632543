"""Showing inferred paths: a pattern as a call tree with its delays (WAP5 figure 9: nodes with the
delay they add, messages with their one-way latency), and the rows of paths.csv."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import pandas as pd
from rich.markup import escape
from rich.tree import Tree

from analysis.paths.model import PathPattern, PathsResult, edge_key

_PLAIN = re.compile(r"[^>(),\\]*")      # a name's run without syntax or escapes


@dataclass
class Msg:
    src: str
    dst: str
    children: list[Msg] = field(default_factory=list)


def parse_pattern(text: str) -> Msg:
    """The tree of a canonical pattern `a>b(b>c,...)` (model.pattern_of's form, names escaped as
    model.token writes them: read back unescaped); ValueError if it is not one."""
    pos = 0

    def name(stop: str) -> str:         # stop: always the syntax's ">(),"
        nonlocal pos
        out = []
        while True:                      # plain runs at once (a regex), escapes one by one
            m = _PLAIN.match(text, pos)
            out.append(m.group())
            pos = m.end()
            if pos < len(text) and text[pos] == "\\":
                out.append(text[pos + 1] if pos + 1 < len(text) else "\\")
                pos += 2 if pos + 1 < len(text) else 1
                continue
            return "".join(out)

    def message() -> Msg:
        nonlocal pos
        start = pos
        src = name(">(),")
        if pos >= len(text) or text[pos] != ">":
            raise ValueError(f"not a path pattern at {start}: {text[start:start + 30]!r}")
        pos += 1
        dst = name(">(),")
        if not src or not dst or (pos < len(text) and text[pos] == ">"):
            raise ValueError(f"not a path pattern at {start}: {text[start:start + 30]!r}")
        m = Msg(src, dst)
        if pos < len(text) and text[pos] == "(":
            pos += 1
            m.children.append(message())
            while pos < len(text) and text[pos] == ",":
                pos += 1
                m.children.append(message())
            if pos >= len(text) or text[pos] != ")":
                raise ValueError(f"not a path pattern: unclosed '(' in {text[:40]!r}")
            pos += 1
        return m

    root = message()
    if pos != len(text):
        raise ValueError(f"not a path pattern: {text[pos:pos + 30]!r} after the end")
    return root


def plain_text(text: object) -> str:
    """Text safe for a terminal: control characters (escape sequences, carriage returns, bells)
    written as \\xNN escapes."""
    text = str(text)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def shown_text(text: object) -> str:
    """plain_text, and rich markup in it escaped (a name `[bold]x` is shown as written)."""
    return escape(plain_text(text))


def _ms(s: float | None) -> str:
    return "" if s is None or s != s else f"{s * 1000:.1f} ms"


def call_tree(p: PathPattern, total: float) -> Tree:
    """A rich Tree of one pattern: each message `src → dst` with its latency; a node's delay (summed
    over its visits in the path) beside its first appearance as a receiver."""
    share = f" ({100 * p.count / total:.1f}%)" if total > 0 else ""
    tree = Tree(f"[bold]{p.count:,.1f}[/] paths{share}")
    shown: set[str] = set()

    def add(parent: Tree, m: Msg) -> None:
        lat = p.edge_latencies.get(edge_key(m.src, m.dst))
        label = f"{shown_text(m.src)} → [cyan]{shown_text(m.dst)}[/]" + (f" [dim]{_ms(lat)}[/]" if lat is not None else "")
        if m.dst not in shown and m.dst in p.node_delays:
            shown.add(m.dst)
            label += f"  [yellow]{shown_text(m.dst)} {_ms(p.node_delays[m.dst])}[/]"
        branch = parent.add(label)
        for c in m.children:
            add(branch, c)

    try:
        add(tree, parse_pattern(p.pattern))
    except ValueError:
        tree.add(shown_text(p.pattern))
    return tree


def paths_frame(result: PathsResult, source: str = "") -> pd.DataFrame:
    """paths.csv rows: source, algorithm, rank, pattern, count, share (raw_count where the algorithm
    gives expected counts), then one column per node: <node>_ms, its delay in the pattern (empty
    where the node is not in it)."""
    total = sum(p.count for p in result.patterns) or 1.0
    rows = []
    for rank, p in enumerate(result.patterns, 1):
        row = {"source": source, "algorithm": result.algorithm, "rank": rank, "pattern": p.pattern,
               "count": p.count, "share": p.count / total}
        if p.raw_count is not None:
            row["raw_count"] = p.raw_count
        row.update({f"{n}_ms": 1000 * d for n, d in sorted(p.node_delays.items())})
        rows.append(row)
    return pd.DataFrame(rows, columns=["source", "algorithm", "rank", "pattern", "count", "share"]
                        if not rows else None)

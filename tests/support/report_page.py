"""Reading the HTML report's page in tests: its tables (cells and data- attributes), every URL it
refers to, and its accuracy tables against accuracy.csv."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import numpy as np
import pandas as pd

from analysis.score.table_layout import COUNTS, RATES, ROWS, SECTIONS


class _Tables(HTMLParser):
    """Every <table>: its attributes and rows (each row's attributes and cell texts)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tables: list[dict] = []
        self.row: dict | None = None
        self.cell: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "table":
            self.tables.append({"attrs": dict(attrs), "rows": []})
        elif tag == "tr" and self.tables:
            self.row = {"attrs": dict(attrs), "cells": []}
            self.tables[-1]["rows"].append(self.row)
        elif tag in ("td", "th") and self.row is not None:
            self.cell = []

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self.cell is not None and self.row is not None:
            self.row["cells"].append("".join(self.cell).strip())
            self.cell = None
        elif tag == "tr":
            self.row = None

    def handle_data(self, data):
        if self.cell is not None:
            self.cell.append(data)


def tables(html: str) -> list[dict]:
    p = _Tables()
    p.feed(html)
    return p.tables


class _Refs(HTMLParser):
    """Every URL the page refers to: src, href, srcset, poster, data, action attributes, url(...) in
    style attributes and <style> elements; and the tags that load things (script, link, iframe...)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.urls: list[str] = []
        self.tags: list[str] = []
        self.in_style = False

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "link", "iframe", "object", "embed", "base", "frame"):
            self.tags.append(tag)
        self.in_style = tag == "style"
        for k, v in attrs:
            if k in ("src", "href", "srcset", "poster", "data", "action", "formaction", "background") and v:
                self.urls.append(v)
            if k == "style" and v:
                self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", v)

    def handle_data(self, data):
        if self.in_style:
            self.urls += re.findall(r"url\(\s*['\"]?([^'\")]+)", data)
            self.urls += re.findall(r"@import\s+['\"]?([^'\";\s]+)", data)

    def handle_endtag(self, tag):
        if tag == "style":
            self.in_style = False


def outside_refs(html: str) -> list[str]:
    """What the page would fetch or load from anywhere but itself: any URL other than data: and
    in-page #anchors, and any script, link, frame or object element."""
    p = _Refs()
    p.feed(html)
    bad = [u[:80] for u in p.urls if not (u.startswith("data:") or u.startswith("#"))]
    return bad + [f"<{t}>" for t in p.tags]


def _number(text: str) -> float:
    return float(text) if text else float("nan")


def _same(a: float, b: float, tol: float) -> bool:
    return (np.isnan(a) and np.isnan(b)) or abs(a - b) <= tol


def accuracy_cells_compared(dom: str, csv: pd.DataFrame, variants: list[str]) -> int:
    """Assert that the page's accuracy tables (one per variant) hold accuracy.csv's numbers, cell by
    cell (counts exact, rates within the page's one decimal); returns how many cells were compared."""
    found = {t["attrs"]["data-variant"]: t for t in tables(dom) if t["attrs"].get("class") == "accuracy"}
    assert set(found) == set(variants) == set(csv["variant"]), (sorted(found), variants, sorted(set(csv["variant"])))
    compared = 0
    for variant, t in found.items():
        header = t["rows"][0]["cells"]
        assert header == ["", "Module", *COUNTS, *RATES, "±"]
        body = t["rows"][1:]
        assert [(r["attrs"]["data-section"], r["attrs"]["data-row"]) for r in body] == \
            [(s, r) for s in SECTIONS for r in ROWS]
        for r in body:
            want = csv[(csv["variant"] == variant) & (csv["section"] == r["attrs"]["data-section"])
                       & (csv["row"] == r["attrs"]["data-row"])]
            assert len(want) == 1
            want = want.iloc[0]
            cells = dict(zip(header, r["cells"], strict=True))
            for c in COUNTS:
                assert int(cells[c]) == int(want[c]), (variant, r["attrs"], c)
                compared += 1
            for c in RATES:   # one decimal in the page, four in the CSV
                assert _same(_number(cells[c]), float(want[c]), 0.05 + 1e-9), (variant, r["attrs"], c)
                compared += 1
            assert _same(_number(cells["±"]), float(want["pm"]), 0.05 + 1e-9), (variant, r["attrs"])
    return compared

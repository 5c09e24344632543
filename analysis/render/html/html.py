"""HTML building blocks of the report: escaping, tables (capped), embedded images, the page.

Everything the page needs is inside it: CSS in a <style> element, figures as data: URIs (PNG from
matplotlib, SVG drawn here), system fonts only, no script, no link to anything outside. A table
longer than its cap shows its first rows and says how many it left out and where the rest is.
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

MAX_ROWS = 200   # a table shows at most this many rows unless told otherwise

CSS = """
:root { --fg: #1a1a1a; --muted: #5f6368; --line: #d0d4d9; --head: #f1f3f5; --accent: #1f5fa8; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "DejaVu Sans", sans-serif;
       color: var(--fg); margin: 0 auto; padding: 16px 28px 60px; max-width: 1500px; background: #fff; }
h1 { font-size: 22px; margin: 8px 0 4px; }
h2 { font-size: 18px; margin: 30px 0 8px; padding-top: 8px; border-top: 2px solid var(--line); }
h3 { font-size: 15px; margin: 20px 0 6px; }
h4 { font-size: 14px; margin: 14px 0 4px; }
p, li { max-width: 1100px; }
.meta, .note { color: var(--muted); font-size: 12.5px; }
.note { margin: 4px 0 10px; }
nav { font-size: 13px; margin: 8px 0 4px; }
nav a { margin-right: 14px; }
a { color: var(--accent); text-decoration: none; }
a:hover { text-decoration: underline; }
code { font-family: ui-monospace, "DejaVu Sans Mono", monospace; font-size: 12.5px; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; font-size: 12.5px; margin: 4px 0 6px; }
th, td { border: 1px solid var(--line); padding: 2px 7px; vertical-align: top; }
th { background: var(--head); font-weight: 600; text-align: left; white-space: nowrap; }
td.r, th.r { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
tr.sep td { border-top: 2px solid #8a9099; }
td.sec { font-weight: 600; }
table.said td { white-space: nowrap; }
.warn { color: #a0410d; }
.bad { background: #fde2dd; }
.ok { background: #e3f4e1; }
.lab { display: inline-block; padding: 0 4px; border-radius: 3px; font-size: 11.5px; white-space: nowrap; }
.STALLED { background: #f7b4ae; } .BLOCKED { background: #fde9a6; }
.DONTCARE { background: #d6e6f5; } .HEALTHY { background: #cdebc8; }
figure { margin: 10px 0 18px; }
figure img { max-width: 100%; height: auto; border: 1px solid #eceef0; }
figcaption { color: var(--muted); font-size: 12.5px; max-width: 1100px; }
details { margin: 6px 0; border: 1px solid var(--line); border-radius: 4px; padding: 4px 10px; }
details[open] { padding-bottom: 10px; }
summary { cursor: pointer; font-weight: 600; }
summary .meta { font-weight: normal; }
.fault { margin: 10px 0 20px; padding-left: 10px; border-left: 4px solid var(--line); }
{fault_kinds}ul.warnings { font-size: 12.5px; margin: 4px 0; }
"""


def esc(v) -> str:
    return html.escape("" if v is None else str(v), quote=True)


_BOLD = re.compile(r"\*\*(.+?)\*\*")
_ITALIC = re.compile(r"\*(.+?)\*")


def inline(text: str) -> str:
    """A cell of the Markdown tables (analysis.render.tables) as HTML: **bold** and *italic* kept."""
    return _ITALIC.sub(r"<i>\1</i>", _BOLD.sub(r"<b>\1</b>", esc(text)))


def _numeric(text: str) -> bool:
    return bool(re.fullmatch(r"[-+]?[\d.,]+%?( \[.*\])?( \(\d+\))?|[·]|<[bi]>.*</[bi]>", text))


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, cls: str = "", cap: int | None = MAX_ROWS,
          rest: str = "", row_attrs: Sequence[dict] | None = None, raw: bool = False, sep_col: int | None = 0,
          attrs: dict | None = None, total: int | None = None) -> str:
    """A table of strings. Numbers are right-aligned. `raw`: cells are HTML already (else Markdown
    cells, see inline). `sep_col`: a non-empty cell in that column starts a group (a thicker line).
    More rows than `cap`: the first `cap`, then a line saying how many more and `rest` (where they are).
    `total`: how many rows the table has when `rows` holds only its first ones."""
    rows = list(rows)
    shown = rows if cap is None else rows[:cap]
    total = len(rows) if total is None else total
    a = "".join(f' {k}="{esc(v)}"' for k, v in ({"class": cls} if cls else {}).items())
    a += "".join(f' {k}="{esc(v)}"' for k, v in (attrs or {}).items())
    out = [f'<div class="scroll"><table{a}>',
           "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>", "<tbody>"]
    for i, r in enumerate(shown):
        extra = "".join(f' {k}="{esc(v)}"' for k, v in (row_attrs[i] if row_attrs else {}).items())
        sep = ' class="sep"' if i and sep_col is not None and r[sep_col] else ""
        cells = []
        for c in r:
            body = c if raw else inline(c)
            cls_c = ' class="r"' if _numeric(re.sub(r"<[^>]+>", "", body) if raw else c) else ""
            cells.append(f"<td{cls_c}>{body}</td>")
        out.append(f"<tr{sep}{extra}>" + "".join(cells) + "</tr>")
    out.append("</tbody></table></div>")
    if len(shown) < total:
        out.append(f'<p class="note">{total - len(shown)} more rows not shown (first {len(shown)} of '
                   f"{total}){': ' + esc(rest) if rest else ''}.</p>")
    return "\n".join(out)


def data_uri(data: bytes, mime: str) -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def png(source: bytes | Path, alt: str, caption: str = "") -> str:
    """A PNG (bytes or a file) embedded as a figure."""
    data = source.read_bytes() if isinstance(source, Path) else source
    cap = f"<figcaption>{esc(caption)}</figcaption>" if caption else ""
    return f'<figure><img alt="{esc(alt)}" src="{data_uri(data, "image/png")}">{cap}</figure>'


def svg_img(svg: str, alt: str) -> str:
    """An SVG document embedded as an image (data: URI), so it loads like any other figure."""
    return f'<img alt="{esc(alt)}" src="{data_uri(svg.encode("utf-8"), "image/svg+xml")}">'


def section(anchor: str, title: str, body: str) -> str:
    return f'<section id="{esc(anchor)}">\n<h2>{esc(title)}</h2>\n{body}\n</section>'


def note(text: str) -> str:
    return f'<p class="note">{esc(text)}</p>' if text else ""


def bullets(items: Sequence[str], cap: int = 50, cls: str = "warnings") -> str:
    """A list of plain-text lines, at most `cap` of them (then how many more)."""
    if not items:
        return ""
    lis = "".join(f"<li>{esc(x)}</li>" for x in items[:cap])
    more = f"<li>... and {len(items) - cap} more</li>" if len(items) > cap else ""
    return f'<ul class="{esc(cls)}">{lis}{more}</ul>'


def details(summary: str, body: str, open_: bool = False, attrs: dict | None = None) -> str:
    """A collapsible block; `summary` is HTML."""
    a = "".join(f' {k}="{esc(v)}"' for k, v in (attrs or {}).items())
    return f"<details{' open' if open_ else ''}{a}><summary>{summary}</summary>\n{body}\n</details>"


def fault_css(kinds: Mapping[str, Any]) -> str:
    """Each fault kind's section border in its colour, as the kinds' infos give it (rundir.faultkinds:
    a run's own, LEGACY for older runs); two kinds a line, kinds without a colour left grey."""
    rules = [f".fault.{re.sub(r'[^A-Za-z0-9_-]', '_', name)} {{ border-left-color: {info.colour}; }}"
             for name, info in kinds.items() if info.colour and _COLOUR.fullmatch(info.colour)]
    return "".join(" ".join(rules[k:k + 2]) + "\n" for k in range(0, len(rules), 2))


_COLOUR = re.compile(r"#[0-9A-Fa-f]{3,8}|[A-Za-z]{3,20}")   # a colour from a manifest goes into the page's CSS


def page(title: str, meta: str, toc: Sequence[tuple[str, str]], sections: Sequence[str],
         kinds: Mapping[str, Any] | None = None) -> str:
    """The whole document. `meta` is HTML; toc: (anchor, title) of each section; `kinds`: the fault
    kinds' infos, by name, whose colours the fault sections take (fault_css; None: LEGACY's)."""
    from rundir.faultkinds import LEGACY

    css = CSS.replace("{fault_kinds}", fault_css(LEGACY if kinds is None else kinds))
    nav = " ".join(f'<a href="#{esc(a)}">{esc(t)}</a>' for a, t in toc)
    return "\n".join([
        "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>", f"<style>{css}</style>", "</head>", "<body>",
        f"<header><h1>{esc(title)}</h1>\n<p class=\"meta\">{meta}</p>\n<nav>{nav}</nav></header>",
        *sections, "</body>", "</html>", ""])

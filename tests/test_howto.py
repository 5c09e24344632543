"""docs/howto.md: every block runs, in order, on a run, and does what its heading says."""

from __future__ import annotations

import contextlib
import io
import re

from tests.support.env import REPO
from tests.support.runs import make_run


def test_every_recipe_runs(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", (REPO / "docs" / "howto.md").read_text(), re.S)
    assert len(blocks) == 4
    run, *_ = make_run(tmp_path / "exp" / "r0")
    monkeypatch.chdir(tmp_path)
    names = {"RUN": str(run)}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for k, block in enumerate(blocks):
            exec(compile(block, f"docs/howto.md block {k + 1}", "exec"), names)   # noqa: S102
    printed = out.getvalue()
    assert "hand/r0 complete 50 snapshots" in printed and "tcp_drop" in printed
    assert (tmp_path / "fault-counters.png").stat().st_size > 10_000
    assert list(names["tcp"].index) == ["flowdiagnoser:theta=2", "flowdiagnoser:theta=3"]
    mine = names["mine"]
    assert set(mine["variant"]) == {"queue-stall"} and mine["positive"].dtype == bool
    c = names["run"].counters.set_index(["module", "dir", "seq"])
    expected = (c["tm"] == 0) & c["has_queue"] & (c["queued"] >= 1) & ~c["invalid"]
    got = mine.assign(dir=mine["dir"].astype(str)).set_index(["module", "dir", "seq"])["positive"]
    assert len(got) == len(expected) and (got == expected.reindex(got.index)).all()


def test_the_plugin_pages_examples_run(tmp_path, monkeypatch):
    """docs/plugins.md: the same rule on both interfaces gives the same table; score() gives accuracy's;
    nestlab.testing scores it on both small runs; the plug-in file holds the page's rule."""
    text = (REPO / "docs" / "plugins.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", text, re.S)
    assert len(blocks) == 4
    run, *_ = make_run(tmp_path / "exp" / "r0")
    monkeypatch.chdir(tmp_path)
    import nestlab

    names = {"run": nestlab.open_run(run)}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        for k, block in enumerate(blocks):
            exec(compile(block, f"docs/plugins.md block {k + 1}", "exec"), names)   # noqa: S102
    printed = out.getvalue()
    assert printed.count("same table: True") == 1 and printed.count("same as accuracy: True") == 1
    assert set(names["simple"]["variant"]) == {"waiting", "flowdiagnoser:theta=2"}
    assert sorted(names["per_run"]["run"].map(lambda p: p.rsplit("/", 1)[-1]).unique()) == ["network", "streams"]
    assert names["per_run"]["Total"].sum() > 0
    # the page's rule is the example plug-in file's, word for word
    example = (REPO / "docs" / "examples" / "waiting_plugin.py").read_text()

    def body(src: str, fn: str) -> list[str]:
        return [ln.split("#")[0].rstrip() for ln in src[src.index(fn):].split("\n\n\n")[0].splitlines()[1:]]

    for fn in ("def stuck(c)", "def waiting(cell, passdown=True)", "def waiting_array(batch, passdown=True)"):
        assert body(text, fn) == body(example, fn)

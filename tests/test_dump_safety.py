"""`nestlab dump` on hostile input (issue 30, finding 6): a symbolic link at any directory it makes
below -o is refused (not only the last one), and in CSV a text cell a spreadsheet would evaluate (a
module named `=HYPERLINK(...)`) is escaped as OWASP's advice on CSV injection says."""

from __future__ import annotations

import sqlite3

import pandas as pd
import pytest

from nestlab.cli import nestlab_main
from tests.support.runs import make_run

FORMULA = '=HYPERLINK("http://example.invalid/x","click")'


@pytest.fixture
def run(tmp_path):
    path, *_ = make_run(tmp_path / "exp" / "r0")
    return path


def test_a_symlink_at_any_directory_below_out_is_refused(run, tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "dump"
    out.mkdir()
    (out / "exp").symlink_to(elsewhere, target_is_directory=True)   # the experiment's level, not the run's
    assert nestlab_main(["dump", str(run), "-o", str(out), "--format", "csv"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "symbolic link" in err and "Traceback" not in err
    assert list(elsewhere.iterdir()) == []


def test_formulas_are_escaped_in_csv_and_kept_in_parquet(run, tmp_path):
    conn = sqlite3.connect(run / "run.db")
    (module,) = conn.execute("SELECT id FROM modules ORDER BY id LIMIT 1").fetchone()
    conn.execute("UPDATE modules SET name = ? WHERE id = ?", (FORMULA, module))
    conn.execute("UPDATE processes SET cmdline = '@SUM(1+1)*cmd|/c calc' WHERE rowid = 1")
    conn.commit()
    conn.close()
    for fmt in ("csv", "parquet"):
        assert nestlab_main(["dump", str(run), "-o", str(tmp_path / fmt), "--format", fmt]) == 0
    csv = pd.read_csv(tmp_path / "csv" / "exp" / "r0" / "modules.csv").set_index("id")
    assert csv.loc[module, "name"] == "'" + FORMULA
    text = (tmp_path / "csv" / "exp" / "r0" / "modules.csv").read_text()
    assert not any(cell.startswith(("=", "+", "@")) for line in text.splitlines() for cell in line.split(","))
    procs = pd.read_csv(tmp_path / "csv" / "exp" / "r0" / "processes.csv")
    assert procs["cmdline"].str.startswith("'@").any()
    assert (pd.read_csv(tmp_path / "csv" / "exp" / "r0" / "counters.csv")["tm"] >= 0).all()   # numbers untouched
    parquet = pd.read_parquet(tmp_path / "parquet" / "exp" / "r0" / "modules.parquet").set_index("id")
    assert parquet.loc[module, "name"] == FORMULA                                        # data kept as it is

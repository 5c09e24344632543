"""Where the analysis writes its files (rundir.layout.output_dir and fresh): never through a symbolic
link planted in the run directory; a symlinked directory is refused in one line."""

from __future__ import annotations

from nestlab.cli import nestlab_main
from nestlab.observers import report
from tests.support.runs import make_run


def test_analysis_output_never_follows_a_symlink_out_of_the_run(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    out = run / "analysis"
    out.mkdir()
    for name in ("accuracy.md", "accuracy.csv", "stalled.md", "health.json", "report.html.part",
                 "diagnosis-overview.png"):
        (out / name).symlink_to(victim)
    (run / "logs").mkdir(exist_ok=True)
    (run / "logs" / "analysis.log").symlink_to(victim)
    assert report(run, quiet=True) is not None
    assert victim.read_text() == "precious\n"
    assert not any(p.is_symlink() for p in [*out.iterdir(), run / "logs" / "analysis.log"])
    assert (out / "report.html").is_file() and (out / "accuracy.md").read_text().startswith("### Accuracy")


def test_a_symlinked_analysis_directory_is_refused_in_one_line(tmp_path, capsys):
    run, *_ = make_run(tmp_path / "exp" / "r0")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "analysis").symlink_to(elsewhere)
    assert nestlab_main(["accuracy", str(run)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == f"error: {run / 'analysis'}: is a symbolic link (to {elsewhere}); refusing to write through it"
    assert list(elsewhere.iterdir()) == []

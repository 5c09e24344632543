"""A run that cannot lie (issue 20): what a run reports, and what it leaves, when parts of it fail."""

from __future__ import annotations

from types import SimpleNamespace

from harness.runner import Repetition
from harness.spec import load_spec
from rundir.db import FORMAT_VERSION
from tests.support.env import REPO

NET_FAULT = REPO / "experiments" / "net_fault.yaml"
MARKUP = "ssh: x1: [/bold] closing tag [red]that was never opened[/]"


def test_teardown_finishes_when_an_error_text_looks_like_markup(tmp_path, capsys):
    """A node's stderr is printed as text: an error message that rich would parse as markup neither
    raises inside teardown nor stops the steps after it."""
    done = []

    class Backend:
        def stop_progress(self):
            raise RuntimeError(MARKUP)

        def teardown(self):
            done.append("topology")

    class Workloads:
        def stop_clients(self):
            raise OSError(MARKUP)

        def stop_servers(self):
            done.append("servers")

        def remove_files(self):
            done.append("files")

    run = Repetition(load_spec(NET_FAULT), 0, tmp_path)
    run.rd.update_manifest(format_version=FORMAT_VERSION, status="running")
    run.backend, run.workloads = Backend(), Workloads()
    run.faults = SimpleNamespace(teardown=lambda: done.append("chains"))
    run._teardown_safely()
    run._finish("failed", MARKUP)
    assert done == ["servers", "chains", "topology", "files"]
    err = capsys.readouterr().err
    assert f"warning: teardown: stop progress: RuntimeError: {MARKUP}" in err
    assert f"warning: teardown: stop workloads: OSError: {MARKUP}" in err
    assert f"failed: {MARKUP} -> {run.rd.path}" in err
    assert run.rd.status == "failed" and run.rd.manifest["reason"] == MARKUP

"""Where a run's ledger lives: /run/nestlab for root, a per-user directory otherwise."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from tests.support.env import REPO

CODE = ("from harness.ledger import Ledger, LEDGER_DIR; print(LEDGER_DIR); "
        "l = Ledger('t-run', '/nonexistent'); print(l.path.exists()); l.close(); print(l.path.exists())")


def as_nobody(tmp_path, env):
    return subprocess.run(["runuser", "-u", "nobody", "--", sys.executable, "-c", CODE], capture_output=True,
                          text=True, cwd=REPO, env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO), **env})


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to the user nobody")
def test_a_user_keeps_ledgers_in_a_runtime_directory(tmp_path):
    runtime = Path(tempfile.mkdtemp(prefix="xdg-test-"))  # pytest's tmp_path is root-only
    try:
        os.chown(runtime, 65534, 65534)
        r = as_nobody(tmp_path, {"XDG_RUNTIME_DIR": str(runtime)})
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == [str(runtime / "nestlab"), "True", "False"]
    finally:
        shutil.rmtree(runtime)


@pytest.mark.skipif(os.geteuid() != 0, reason="switches to the user nobody")
def test_an_unwritable_ledger_directory_is_one_clear_error(tmp_path):
    r = as_nobody(tmp_path, {"HOME": "/nonexistent"})
    assert r.returncode == 1 and "cannot keep the run's ledger in /nonexistent/.local/state/nestlab" in r.stderr
    assert "NESTLAB_LEDGER_DIR" in r.stderr


def test_root_uses_run_nestlab():
    if os.geteuid() != 0:
        pytest.skip("root only")
    env = {k: v for k, v in os.environ.items() if k != "NESTLAB_LEDGER_DIR"}
    out = subprocess.run([sys.executable, "-c", "from harness.ledger import LEDGER_DIR; print(LEDGER_DIR)"],
                         capture_output=True, text=True, env=env, cwd=REPO).stdout.strip()
    assert out == "/run/nestlab"

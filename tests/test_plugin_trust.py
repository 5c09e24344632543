"""Root runs no plug-in file another user could have written (issue 40 item 6, docs/plugins.md "Plug-in
files under root"): the file and every directory above it owned by root or the invoking user and
writable by no one else, else one line and exit status 2 from `nestlab variants` and `run-experiment`;
the file's source read through one descriptor, never a __pycache__ beside it."""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap
import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from analysis import plugins
from rundir.errors import UserError
from tests.support.env import REPO

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the checks apply under euid 0")
NOBODY = 65534

PLUGIN = '''
import pathlib
pathlib.Path({marker!r}).write_text("ran")
from nestlab.plugin import simple_rule
SYSTEM = simple_rule("trusttest", lambda cell: "HEALTHY", summary="x", contract=1)
variants = [SYSTEM]
'''


def plugin(d: Path, mode: int = 0o644, name: str = "p.py") -> tuple[Path, Path]:
    d.mkdir(parents=True, exist_ok=True)
    marker = d / "ran"
    p = d / name
    p.write_text(PLUGIN.format(marker=str(marker)))
    p.chmod(mode)
    return p, marker


def cli(args: list[str], env: dict[str, str], program: str = "nestlab") -> subprocess.CompletedProcess:
    main = "run_experiment_main" if program == "run-experiment" else "nestlab_main"
    code = f"import sys; from nestlab.cli import {main}; sys.exit({main}(sys.argv[1:]))"
    e = {**os.environ, "PYTHONPATH": str(REPO), **env}
    e.pop("SUDO_UID", None)
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=e, timeout=300,
                          cwd=REPO)


def test_nestlab_variants_refuses_a_world_writable_plugin_file(tmp_path):
    p, marker = plugin(tmp_path / "d", 0o666)
    r = cli(["variants"], {plugins.ENV: str(p)})
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-800:]
    assert len(lines) == 1 and lines[0].startswith(f"error: plug-in file {p}: the file is writable by others "
                                                   "(mode 666); root loads only")
    assert not marker.exists()


def test_run_experiment_refuses_a_plugin_file_in_a_group_writable_directory(tmp_path):
    d = tmp_path / "shared"
    p, marker = plugin(d)
    d.chmod(0o775)
    r = cli([str(REPO / "topologies" / "dumbbell.yaml"), "--check"], {plugins.ENV: str(p)}, program="run-experiment")
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2, r.stderr[-800:]
    assert len(lines) == 1 and f"its directory {d} is writable by others (mode 775)" in lines[0]
    assert not marker.exists()


def test_a_trusted_plugin_file_still_loads(tmp_path):
    p, marker = plugin(tmp_path / "d")
    r = cli(["variants"], {plugins.ENV: str(p)})
    assert r.returncode == 0, r.stderr[-800:]
    assert "trusttest" in r.stdout and marker.read_text() == "ran"


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_plugin_file_owned_by_another_user_is_refused(tmp_path, monkeypatch, where):
    monkeypatch.delenv("SUDO_UID", raising=False)
    p, _ = plugin(tmp_path / "d")
    os.chown(p if where == "file" else p.parent, NOBODY, -1)
    with pytest.raises(plugins.Untrusted, match=f"owned by uid {NOBODY}"):
        plugins.read_source(p)
    monkeypatch.setenv("SUDO_UID", str(NOBODY))    # the user sudo ran us for may own it
    assert b"trusttest" in plugins.read_source(p)


def test_a_sticky_directory_is_allowed_a_link_is_not(tmp_path):
    sticky = tmp_path / "tmp"
    p, _ = plugin(sticky)
    sticky.chmod(0o1777)
    assert b"trusttest" in plugins.read_source(p)
    link = tmp_path / "link.py"
    link.symlink_to(p)
    with pytest.raises(OSError):
        plugins.read_source(link)


def test_check_trusted_names_the_file_in_one_line(tmp_path, monkeypatch):
    p, _ = plugin(tmp_path / "d", 0o646)
    monkeypatch.setattr(plugins, "_files", [])
    monkeypatch.setenv(plugins.ENV, str(p))
    with pytest.raises(UserError) as e:
        plugins.check_trusted()
    assert str(e.value).startswith(f"plug-in file {p}: the file is writable by others (mode 646)")
    assert "\n" not in str(e.value)


def test_a_planted_pycache_is_never_run(tmp_path):
    """A .pyc beside the file that matches its time and size (what the import system checks): the
    lab compiles the source it checked, so the planted code does not run."""
    p, marker = plugin(tmp_path / "d")
    planted = tmp_path / "d" / "planted"
    st = p.stat()
    code = compile(f"import pathlib; pathlib.Path({str(planted)!r}).write_text('pwned')", str(p), "exec")
    pyc = Path(importlib.util.cache_from_source(str(p)))
    pyc.parent.mkdir()
    pyc.write_bytes(bootstrap._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
    module = plugins._load_file(p.resolve())
    assert not isinstance(module, str), module
    assert marker.read_text() == "ran" and not planted.exists()

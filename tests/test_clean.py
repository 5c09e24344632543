"""The run's ledger and `nestlab cleanup`: where the ledger lives (/run/nestlab for root, a per-user
directory otherwise), that it is private whatever the umask, that cleanup acts only on ledgers (and a
ledger directory) that belong to the user running it and that nobody else may write, and that a run
refuses to start on what a killed one left behind."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from harness import ledger
from harness.clean import refuse_on_leftovers
from rundir.errors import UserError
from tests.support.env import REPO, one_line

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


# ----------------------------------------------------------------------------- the ledger

@pytest.fixture
def ledger_dir(tmp_path, monkeypatch):
    import harness.ledger

    d = tmp_path / "ledgers"
    monkeypatch.setattr(harness.ledger, "LEDGER_DIR", d)
    return d


def _mode(p: Path) -> int:
    return stat.S_IMODE(os.lstat(p).st_mode)


@pytest.mark.parametrize("mask", [0o000, 0o022])
def test_the_ledger_is_private_whatever_the_umask(ledger_dir, mask):
    from harness.ledger import Ledger

    old = os.umask(mask)
    try:
        ledger = Ledger("t-run", Path("/nonexistent"))
        ledger.add_process(os.getpid(), "me")   # written again
        assert _mode(ledger_dir) == 0o700
        assert _mode(ledger.path) == 0o600
        assert [p.name for p in ledger_dir.iterdir()] == ["t-run.json"]   # no temporary file is left
        ledger.close()
    finally:
        os.umask(old)


def test_a_ledger_directory_others_may_write_or_do_not_own_is_refused(ledger_dir, monkeypatch):
    from harness.ledger import Ledger

    ledger_dir.mkdir(mode=0o700)
    ledger_dir.chmod(0o777)
    with pytest.raises(UserError) as e:
        Ledger("t-run", Path("/nonexistent"))
    assert str(ledger_dir) in one_line(str(e.value)) and "777" in str(e.value)
    assert not list(ledger_dir.iterdir())
    ledger_dir.chmod(0o700)
    monkeypatch.setattr(os, "geteuid", lambda: 4242)   # as if another user ran it
    with pytest.raises(UserError) as e:
        Ledger("t-run", Path("/nonexistent"))
    assert str(ledger_dir) in one_line(str(e.value)) and "4242" in str(e.value)
    assert not list(ledger_dir.iterdir())


def _cleanup(ledger_dir: Path, euid: int | None = None) -> subprocess.CompletedProcess:
    """`nestlab cleanup` on ledger_dir, in a process of its own (as uid `euid`, as far as the
    harness can tell)."""
    code = ("import os, sys\n" + (f"os.geteuid = lambda: {euid}\n" if euid is not None else "")
            + "from nestlab.cli import nestlab_main\nsys.exit(nestlab_main(['cleanup']))\n")
    env = {**os.environ, "NESTLAB_LEDGER_DIR": str(ledger_dir), "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, env=env,
                          timeout=60)


def _leftover_ledger(ledger_dir: Path, tmp_path: Path, run_id: str) -> tuple[Path, Path]:
    """A ledger of a dead runner that lists a scratch directory; returns (ledger, directory)."""
    scratch = tmp_path / f"scratch-{run_id}"
    scratch.mkdir()
    path = ledger_dir / f"{run_id}.json"
    path.write_text(json.dumps({"run_id": run_id, "run_dir": str(tmp_path / "no-run"), "runner_pid": -1,
                                "runner_start": None, "processes": [], "links": [], "paths": [str(scratch)]}))
    path.chmod(0o600)
    return path, scratch


CLEANUP_CASES = ["group-writable ledger", "world-writable ledger", "symlinked ledger", "ledger of another user"]


@pytest.mark.parametrize("case", CLEANUP_CASES)
def test_cleanup_refuses_a_ledger_it_cannot_trust_and_leaves_it_alone(tmp_path, case):
    ledger_dir = tmp_path / "ledgers"
    ledger_dir.mkdir(mode=0o700)
    good, good_scratch = _leftover_ledger(ledger_dir, tmp_path, "good")
    bad, bad_scratch = _leftover_ledger(ledger_dir, tmp_path, "bad")
    if case == "group-writable ledger":
        bad.chmod(0o620)
    elif case == "world-writable ledger":
        bad.chmod(0o666)
    elif case == "symlinked ledger":
        real = tmp_path / "elsewhere.json"
        bad.rename(real)
        bad.symlink_to(real)
    else:
        if os.geteuid() != 0:
            pytest.skip("giving a file to another user needs root")
        os.chown(bad, 65534, 65534)
    r = _cleanup(ledger_dir)
    refusals = [line for line in r.stderr.splitlines() if str(bad) in line]
    assert len(refusals) == 1, r.stderr
    assert r.returncode != 0
    assert os.path.lexists(bad) and bad_scratch.is_dir()         # left alone
    assert not good.exists() and not good_scratch.exists()       # the trusted one is cleaned up


@pytest.mark.parametrize("case", ["group-writable directory", "world-writable directory", "symlinked directory",
                                  "directory of another user"])
def test_cleanup_refuses_a_ledger_directory_it_cannot_trust(tmp_path, case):
    ledger_dir = tmp_path / "ledgers"
    ledger_dir.mkdir(mode=0o700)
    ledger, scratch = _leftover_ledger(ledger_dir, tmp_path, "r1")
    euid = None
    where = ledger_dir
    if case == "group-writable directory":
        ledger_dir.chmod(0o770)
    elif case == "world-writable directory":
        ledger_dir.chmod(0o1777)
    elif case == "symlinked directory":
        where = tmp_path / "link"
        where.symlink_to(ledger_dir)
    else:
        euid = 4242
    r = _cleanup(where, euid)
    assert r.returncode == 2, r
    assert len(r.stderr.strip().splitlines()) == 1 and str(where) in r.stderr, r.stderr
    assert ledger.exists() and scratch.is_dir()


# ----------------------------------------------------------------------------- nothing left behind

def test_the_ledger_is_kept_while_a_sysctl_is_still_changed(tmp_path, monkeypatch):
    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    book = ledger.Ledger("net_fault-20260101-120000-r0", tmp_path / "run")
    book.add_sysctl("net.ipv4.tcp_child_ehash_entries", "0")
    book.close()
    assert book.path.is_file()                         # put back by `nestlab cleanup`, which reads it
    book.drop_sysctl("net.ipv4.tcp_child_ehash_entries")
    book.close()
    assert not book.path.exists()


def test_a_new_run_says_a_killed_one_left_things_behind(tmp_path, monkeypatch):
    """After a SIGKILL in the build window the ledger lists links and processes of a dead runner: the
    next run refuses, in one line, before building on top of them."""
    monkeypatch.setattr(ledger, "LEDGER_DIR", tmp_path / "ledgers")
    refuse_on_leftovers()                               # nothing there: nothing said
    book = ledger.Ledger("net_fault-20260101-120000-r0", tmp_path / "run")
    book.add_links(["site1n1-eth0"])
    refuse_on_leftovers()                               # its runner (this process) is alive
    data = json.loads(book.path.read_text())
    book.path.write_text(json.dumps({**data, "runner_pid": -1}))
    with pytest.raises(UserError) as e:
        refuse_on_leftovers()
    assert str(e.value) == (f"a killed run left things behind (net_fault-20260101-120000-r0; ledgers in "
                            f"{tmp_path / 'ledgers'}): run `nestlab cleanup` first")

"""The hostile campaign's cases for the surfaces of issue 40 (bench/hostile_campaign.py): message rings
given to the drainer (`python -m harness.collector.tracedrain --once`, as root) and plug-in files given
to root's commands (NESTLAB_PLUGINS). Each is (name, what, build, expect, words, program, check), made
a Case by bench/hostile_cases.py (kept apart from it: no import cycle). The plug-in cases are judged
under euid 0 only (as another user nothing is refused): they are left out otherwise."""

from __future__ import annotations

import importlib._bootstrap_external as bootstrap
import importlib.util
import ipaddress
import os
import sqlite3
import stat
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from harness.interceptor import ring as R  # noqa: E402
from harness.interceptor.shm import HEADER_SIZE  # noqa: E402
from rundir.db import create_db  # noqa: E402
from rundir.layout import RunDir  # noqa: E402
from tests.support.rings import event, header, write_ring  # noqa: E402

SURFACE_CASES: list[tuple] = []
DEAD = 4_000_000          # a pid no process has: the drain is the final one
NOBODY = 65534


def case(what: str, expect: str, *words: str, program: str = "nestlab", check=None):
    def register(fn):
        SURFACE_CASES.append((fn.__name__, what, fn, expect, words, program, check))
        return fn
    return register


# ----------------------------------------------------------------------------- rings (the drainer, root)

def drain(where: Path) -> tuple[list[str], tuple[Path, ...]]:
    """The drainer's one last drain of where/shm into where/run.db: it may write only there."""
    (where / "shm").mkdir(exist_ok=True)
    create_db(RunDir(where).db).close()
    return ["--db", str(RunDir(where).db), "--dir", f"h={where / 'shm'}", "--once"], (where,)


def rows(where: Path, sql: str) -> list[tuple]:
    conn = sqlite3.connect(RunDir(where).db)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def _ring(where: Path, name: str | None = None, pid: int = DEAD, cap: int = 64, n: int = 3, **kw) -> Path:
    (where / "shm").mkdir(exist_ok=True)
    return write_ring(where / "shm" / (name or f"{pid}.nest"), pid, cap, [event(k) for k in range(n)], **kw)


def _has(sql: str, want: list[tuple]):
    def check(ws, where):
        got = rows(where, sql)
        return None if got == want else f"{sql}: {got[:3]} not {want}"
    return check


@case("ring file a FIFO named 123.nest (an open would block)", "warn", "123.nest: not a regular file",
      program="tracedrain", check=_has("SELECT count(*) FROM messages", [(3,)]))
def ring_fifo(ws, where):
    argv = drain(where)
    os.mkfifo(where / "shm" / "123.nest")
    _ring(where)
    return argv


@case("ring file a directory named 7.nest", "warn", "7.nest: not a regular file", program="tracedrain")
def ring_directory(ws, where):
    argv = drain(where)
    (where / "shm" / "7.nest").mkdir()
    return argv


@case("ring file a character device named 8.nest", "warn", "8.nest: not a regular file", program="tracedrain")
def ring_device(ws, where):
    argv = drain(where)
    os.mknod(where / "shm" / "8.nest", 0o600 | stat.S_IFCHR, os.makedev(1, 3))   # /dev/null's numbers
    return argv


@case("ring file a link to a ring outside (its tail must not move)", "warn", "not a regular file",
      program="tracedrain")
def ring_symlink_outside(ws, where):
    argv = drain(where)
    target = ws.outside / f"{DEAD}.nest"
    if not target.exists():
        write_ring(target, DEAD, 64, [event(k) for k in range(2)])
    (where / "shm" / f"{DEAD}.nest").symlink_to(target)
    return argv


@case("ring 31337.nest whose header claims pid 1", "warn", "claims pid 1", program="tracedrain",
      check=_has("SELECT count(*) FROM messages WHERE pid = 1", [(0,)]))
def ring_pid_forged(ws, where):
    argv = drain(where)
    _ring(where, "31337.nest", pid=1)
    return argv


@case("ring of 2^31 events on a sparse file (128 GiB)", "warn", "does not know", program="tracedrain")
def ring_capacity_2_31(ws, where):
    argv = drain(where)
    cap = 1 << 31
    _ring(where, cap=cap, size=HEADER_SIZE + R.RING_SIZE + cap * R.EVENT_SIZE)
    return argv


@case("ring larger than its file", "warn", "does not know", program="tracedrain")
def ring_beyond_file(ws, where):
    argv = drain(where)
    _ring(where, cap=1 << 16, size=HEADER_SIZE + 4096)
    return argv


@case("ring of 32-byte events", "warn", "does not know", program="tracedrain")
def ring_event_size(ws, where):
    argv = drain(where)
    path = _ring(where)
    with open(path, "r+b") as f:
        f.seek(R.TRACE_OFF + 4)
        f.write((32).to_bytes(4, "little"))
    return argv


@case("ring of another format version", "warn", "not an interceptor file", program="tracedrain")
def ring_version(ws, where):
    argv = drain(where)
    path = _ring(where)
    with open(path, "r+b") as f:
        f.seek(8)
        f.write((99).to_bytes(4, "little"))
    return argv


@case("ring whose head is 10^15 places ahead", "ok", program="tracedrain",
      check=_has(f"SELECT events, lost FROM traced WHERE pid = {DEAD}", [(3, 61)]))
def ring_head_scribbled(ws, where):
    argv = drain(where)
    _ring(where, head=10**15)
    return argv


@case("ring of 2^22 places, none published, a ring ahead", "ok", program="tracedrain",
      check=_has(f"SELECT events, lost FROM traced WHERE pid = {DEAD}", [(0, 1 << 22)]))
def ring_all_unpublished(ws, where):
    argv = drain(where)
    _ring(where, cap=1 << 22, n=0, head=1 << 22)
    return argv


@case("ring whose command line claims 4 GiB", "ok", program="tracedrain",
      check=_has("SELECT length(cmdline) <= 2048 FROM traced", [(1,)]))
def ring_cmdline_length(ws, where):
    argv = drain(where)
    path = _ring(where)
    with open(path, "r+b") as f:
        f.seek(512)
        f.write((2**32 - 1).to_bytes(4, "little"))
    return argv


@case("garbage named 5.nest, and a header cut at 100 bytes", "ok", program="tracedrain",
      check=_has("SELECT count(*) FROM traced", [(0,)]))
def ring_garbage(ws, where):
    argv = drain(where)
    (where / "shm" / "5.nest").write_bytes(os.urandom(8192))
    (where / "shm" / "6.nest").write_bytes(header(6, 64)[:100])
    return argv


@case("100,000 events to distinct far ends", "ok", program="tracedrain",
      check=_has("SELECT count(*), count(DISTINCT remote) FROM messages", [(100_000, 100_000)]))
def ring_distinct_endpoints(ws, where):
    argv = drain(where)
    base = int(ipaddress.IPv4Address("10.0.0.0"))
    (where / "shm").mkdir(exist_ok=True)
    write_ring(where / "shm" / f"{DEAD}.nest", DEAD, 1 << 17,
               [event(k, raddr=str(ipaddress.IPv4Address(base + k))) for k in range(100_000)])
    return argv


# ----------------------------------------------------------------------------- plug-in files (root)

PLUGIN = '''import pathlib
pathlib.Path({marker!r}).write_text("ran")
'''


def _plugin(where: Path, mode: int = 0o644, sub: str = "plugins") -> Path:
    d = where / sub
    d.mkdir(exist_ok=True)
    p = d / "p.py"
    p.write_text(PLUGIN.format(marker=str(where / "ran")))
    p.chmod(mode)
    return p


def _not_run(ws, where):
    return "the plug-in ran" if (where / "ran").exists() or (where / "planted").exists() else None


def variants(where: Path, plugin: Path) -> tuple:
    # where/ran: a trusted plug-in's mark (the checks say whether it should be there)
    return ["variants"], (where / "out", where / "ran", where / "planted"), {"NESTLAB_PLUGINS": str(plugin)}


def plugin_case(what: str, expect: str, *words: str, program: str = "nestlab", check=_not_run):
    return case(what, expect, *words, program=program, check=check) if os.geteuid() == 0 else (lambda fn: fn)


@plugin_case("plug-in file mode 0666", "exit2", "the file is writable by others (mode 666)")
def plugin_world_writable(ws, where):
    return variants(where, _plugin(where, 0o666))


@plugin_case("plug-in file in a group-writable directory", "exit2", "is writable by others (mode 775)")
def plugin_dir_group_writable(ws, where):
    p = _plugin(where)
    p.parent.chmod(0o775)
    return variants(where, p)


@plugin_case("plug-in file owned by nobody", "exit2", f"the file is owned by uid {NOBODY}")
def plugin_other_owner(ws, where):
    p = _plugin(where)
    os.chown(p, NOBODY, -1)
    return variants(where, p)


@plugin_case("plug-in file in a directory owned by nobody", "exit2", f"is owned by uid {NOBODY}")
def plugin_dir_other_owner(ws, where):
    p = _plugin(where)
    os.chown(p.parent, NOBODY, -1)
    return variants(where, p)


@plugin_case("plug-in file a link to a 0666 file", "exit2", "writable by others")
def plugin_link_to_writable(ws, where):
    p = _plugin(where, 0o666, sub="elsewhere")
    (where / "p.py").symlink_to(p)
    return variants(where, where / "p.py")


@plugin_case("plug-in file a FIFO", "exit2", "not a regular file")
def plugin_fifo(ws, where):
    os.mkfifo(where / "p.py")
    return variants(where, where / "p.py")


@plugin_case("plug-in file of 17 MiB", "exit2", "larger than 16 MiB")
def plugin_huge(ws, where):
    p = _plugin(where)
    with open(p, "a") as f:
        f.write("#" * (17 << 20))
    return variants(where, p)


@plugin_case("0666 plug-in file given to run-experiment", "exit2", "writable by others",
             program="run-experiment")
def plugin_run_experiment(ws, where):
    (where / "spec.yaml").write_text("name: x\n")
    return [str(where / "spec.yaml"), "--check"], (where / "out",), {"NESTLAB_PLUGINS": str(_plugin(where, 0o666))}


@plugin_case("a trusted plug-in with a planted __pycache__ in a sticky directory", "ok",
             check=lambda ws, where: "the planted bytecode ran" if (where / "planted").exists() else
             None if (where / "ran").read_text() == "ran" else "the plug-in did not run")
def plugin_planted_pycache(ws, where):
    p = _plugin(where, sub="tmp")
    p.parent.chmod(0o1777)
    st = p.stat()
    code = compile(f"import pathlib; pathlib.Path({str(where / 'planted')!r}).write_text('x')", str(p), "exec")
    pyc = Path(importlib.util.cache_from_source(str(p)))
    pyc.parent.mkdir()
    pyc.write_bytes(bootstrap._code_to_timestamp_pyc(code, st.st_mtime, st.st_size))
    os.chown(pyc.parent, NOBODY, -1)    # another user's, as it would be in /tmp
    os.chown(pyc, NOBODY, -1)
    return variants(where, p)

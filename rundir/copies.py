"""Where the analysis's derived copies of a run live (rundir.columnar's files), and writing and opening
them without following a symbolic link anywhere (docs/run-format.md, "Derived copies").

Two places, looked in in this order:

- the run's own `columnar/`, written only by the process that made the run (`claim`: run-experiment,
  when the run ends) and read by anyone, but used only when the file is the reader's own (same owner,
  not writable by group or others): a file another user controls could change under the mapping;
- a per-user cache outside every run, `$NESTLAB_CACHE`, else `$XDG_CACHE_HOME/nestlab`, else
  `~/.cache/nestlab`: a directory of mode 0700 owned by the user (refused otherwise), holding one
  directory per run, named by a digest of the run's identity (its resolved path, device and inode).
  Every reader (open_run, accuracy, report, dump) writes here: reading a run writes nothing into it.

Every operation is relative to a directory descriptor opened with O_NOFOLLOW: a symlinked
`columnar/` or cache directory is refused, a file is created under an unpredictable temporary name
with O_CREAT | O_EXCL | O_NOFOLLOW and renamed over the final name (a link planted there is replaced,
never followed). Nothing here ever fails a reader: a place that cannot be used is skipped.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import secrets
import stat
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rundir.layout import COLUMNAR

DIR = COLUMNAR
CACHE_ENV = "NESTLAB_CACHE"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_claimed: set[str] = set()


def claim(run_dir: str | Path) -> None:
    """This process made `run_dir` (run-experiment): its copies go into the run's own columnar/."""
    _claimed.add(os.path.realpath(run_dir))


def claimed(run_dir: str | Path) -> bool:
    return os.path.realpath(run_dir) in _claimed


def cache_root() -> Path | None:
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    if xdg and os.path.isabs(xdg):
        return Path(xdg) / "nestlab"
    home = os.path.expanduser("~")
    return Path(home) / ".cache" / "nestlab" if os.path.isabs(home) else None


def run_identity(run_dir: str | Path) -> str | None:
    """The cache's name for a run: a digest of its resolved path, device and inode."""
    try:
        real = os.path.realpath(run_dir)
        st = os.stat(real)
    except OSError:
        return None
    return hashlib.sha256(f"{real}\0{st.st_dev}\0{st.st_ino}".encode()).hexdigest()[:32]


def _own(st: os.stat_result, private: bool) -> bool:
    """Owned by this user and not writable by others (private: no access by others at all)."""
    return st.st_uid == os.geteuid() and not st.st_mode & (0o077 if private else 0o022)


def _open_dir(name: str, dir_fd: int | None, create: bool, mode: int) -> int:
    """A descriptor of directory `name` (relative to dir_fd), never through a symbolic link."""
    if create:
        try:
            os.mkdir(name, mode, dir_fd=dir_fd)
        except FileExistsError:
            pass
    return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)


def _cache_dir(run_dir: str | Path, create: bool) -> int | None:
    """A descriptor of the run's directory in the per-user cache (0700, this user's), or None."""
    root, ident = cache_root(), run_identity(run_dir)
    if root is None or ident is None:
        return None
    try:
        if create:
            os.makedirs(root.parent, exist_ok=True)
        fd = _open_dir(str(root), None, create, 0o700)
    except OSError:
        return None
    try:
        if not _own(os.fstat(fd), private=True):
            return None   # another user's, or open to others: not a place to trust or to write
        sub = _open_dir(ident, fd, create, 0o700)
    except OSError:
        return None
    finally:
        os.close(fd)
    if not _own(os.fstat(sub), private=True):
        os.close(sub)
        return None
    return sub


def _run_dir(run_dir: str | Path, create: bool) -> int | None:
    """A descriptor of the run's own columnar/ (not through a link), or None."""
    try:
        top = os.open(run_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return _open_dir(DIR, top, create, 0o755)
    except OSError:
        return None
    finally:
        os.close(top)


def cached_path(run_dir: str | Path, name: str) -> Path | None:
    """Where a reader's copy `name` of the run is (or would be) in the per-user cache."""
    root, ident = cache_root(), run_identity(run_dir)
    return None if root is None or ident is None else root / ident / name


@contextmanager
def _places(run_dir: str | Path, create: bool, into_run: bool = False) -> Iterator[list[tuple[str, int]]]:
    """(where, directory descriptor) of each place a copy of the run may be, in reading order; for
    writing (create), the one place this process writes (into_run: the run's own columnar/)."""
    fds = []
    into_run = into_run or claimed(run_dir)
    try:
        if not create or into_run:
            fd = _run_dir(run_dir, create)
            if fd is not None:
                fds.append((str(Path(run_dir) / DIR), fd))
        if not create or not into_run:
            fd = _cache_dir(run_dir, create)
            if fd is not None:
                fds.append((f"{cache_root()}/{run_identity(run_dir)}", fd))
        yield fds
    finally:
        for _, fd in fds:
            os.close(fd)


def write_file(run_dir: str | Path, name: str, write: Callable[[object], None], into_run: bool = False
               ) -> Path | None:
    """Make `name` in the run's place for copies (`write(file)` writes it; into_run: the run's own
    columnar/, else the cache unless this process claimed the run), atomically and without following
    any link; its path, or None when there is nowhere to write it."""
    with _places(run_dir, create=True, into_run=into_run) as places:
        if not places:
            return None
        where, d = places[0]
        tmp = f".{name}.{secrets.token_hex(8)}.tmp"
        mode = 0o644 if where.endswith("/" + DIR) else 0o600
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=d)
        except OSError:
            return None
        try:
            with os.fdopen(fd, "wb") as f:
                write(f)
            os.replace(tmp, name, src_dir_fd=d, dst_dir_fd=d)
            tmp = None
            return Path(where) / name
        except OSError:
            return None
        finally:
            if tmp is not None:
                try:
                    os.unlink(tmp, dir_fd=d)
                except OSError:
                    pass


def mapped_files(run_dir: str | Path, name: str) -> Iterator[tuple[str, mmap.mmap]]:
    """(path, read-only mapping) of each copy `name` of the run a reader may trust (module docstring),
    in reading order: regular files, the reader's own, opened without following a link."""
    with _places(run_dir, create=False) as places:
        for where, d in places:
            try:
                # O_NONBLOCK: a FIFO planted at the name must not block the open (it is not a regular file)
                fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=d)
            except OSError:
                continue
            try:
                st = os.fstat(fd)
                if not stat.S_ISREG(st.st_mode) or not _own(st, private=False) or st.st_size == 0:
                    continue
                mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
            except (OSError, ValueError):
                continue
            finally:
                os.close(fd)
            yield f"{where}/{name}", mm


def digest(parts: list) -> str:
    """The checksum a copy carries of what the analysis reads of it: CRC-32 over each array's bytes and
    each text in order, with their total length (zlib's: ~3 GB/s here, half SHA-256's time; a check
    against damage and edits, not a signature: a copy made to lie under a fresh checksum is what the
    readers' checks of what it says are for)."""
    crc, size = 0, 0
    for p in parts:
        view = p if isinstance(p, bytes | memoryview) else memoryview(p).cast("B")
        crc = zlib.crc32(view, crc)
        size += len(view)
    return f"crc32:{crc:08x}:{size}"

"""Plug-ins: rule systems and labelling policies from outside the package, found the way Python tools
find theirs (docs/plugins.md).

Where a registry's entries come from, in this order:

1. entry points of its group (`nestlab.variants`, `nestlab.policies`; importlib.metadata). The
   project's own, declared in its pyproject.toml, are the built-ins: the plug-in path is the one the
   built-ins take. An install older than those declarations (no entry point of the `nestlab`
   distribution) loads the built-ins directly from `builtins` and says so once.
2. plug-in files, for quick work (like Mininet's `--custom`): `nestlab --plugin FILE.py` and
   `NESTLAB_PLUGINS=FILE.py:FILE.py`. A file lists what it adds in module-level lists `variants = [...]`
   (RuleSystem objects) and `policies = [...]` (policy classes).

Under euid 0 a plug-in file runs only if it and every directory above it are owned by root or the
invoking user and writable by no one else (`read_source`; issue 40 item 6): the commands refuse
another with one line and exit status 2 (`check_trusted`), a worker leaves it out.

Every entry is checked (`check` of the registry: its type, its name, the contract version it states);
one that fails to import or is badly defined is left out with one line naming it and the problem (said
once per process, on stderr, and again if its name is asked for), and the others still work. A
plug-in whose name is a built-in's, or an earlier plug-in's, is refused.

The registries load lazily, at their first lookup, in every process that looks something up: the
analysis's worker processes too (analysis.pipeline passes them the plug-in files given here, and
find the entry points themselves).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import stat
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from rundir.errors import UserError

# The version of the contract between the lab and a plug-in (docs/plugins.md): what a rule system
# receives and returns. A plug-in states the version it was written for; the lab refuses another.
CONTRACT = 1
ENV = "NESTLAB_PLUGINS"
PROJECT = "nestlab"
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]*\Z")
MAX_SOURCE = 16 << 20                # a plug-in file's size at most (bytes)
TRUST = ("root loads only plug-in files owned by root or the invoking user, writable by no one else, "
         "in directories the same (docs/plugins.md)")

_files: list[Path] = []              # plug-in files, in the order given (the environment's first)
_modules: dict[Path, Any] = {}       # file -> its module, or the one-line problem when it did not load
_said: set[str] = set()
_quiet = False


def say(line: str) -> None:
    """A plug-in problem, once per process (not at all in a quiet worker: its parent said it)."""
    if line not in _said:
        _said.add(line)
        if not _quiet:
            print(f"warning: {line}", file=sys.stderr)


def quiet() -> None:
    """A worker process: its parent reports the plug-ins' problems."""
    global _quiet
    _quiet = True


def env_files() -> list[Path]:
    return [Path(p) for p in os.environ.get(ENV, "").split(os.pathsep) if p.strip()]


def add_files(paths) -> None:
    """Plug-in files to load (`--plugin`); also put into the environment for child processes."""
    files()   # the environment's first
    for p in paths:
        p = Path(p).expanduser().resolve()
        if p not in _files:
            _files.append(p)
    os.environ[ENV] = os.pathsep.join(str(p) for p in _files)


def files() -> list[Path]:
    for p in env_files():
        p = p.expanduser().resolve()
        if p not in _files:
            _files.append(p)
    return list(_files)


class Untrusted(Exception):  # noqa: N818 - reads as what the file is
    """A plug-in file root must not run (the message says why)."""


def _owners() -> set[int]:
    """Who may own a plug-in file root runs: root, the real user, and the user sudo ran us for."""
    owners = {0, os.getuid()}
    sudo = os.environ.get("SUDO_UID", "")
    if sudo.isdigit():
        owners.add(int(sudo))
    return owners


def _check_owner(what: str, st: os.stat_result, owners: set[int], sticky_ok: bool) -> None:
    if st.st_uid not in owners:
        raise Untrusted(f"{what} is owned by uid {st.st_uid}")
    # a sticky directory (/tmp) lets others add files but not replace ours: the file's own check decides
    if st.st_mode & 0o022 and not (sticky_ok and st.st_mode & stat.S_ISVTX):
        raise Untrusted(f"{what} is writable by others (mode {stat.S_IMODE(st.st_mode):o})")


def read_source(path: Path) -> bytes:
    """A plug-in file's source, read through one descriptor (no link followed, no FIFO waited on).
    Under euid 0 the file and every directory above it must be owned by root or the invoking user and
    writable by no one else (a sticky directory excepted): Untrusted otherwise."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Untrusted("not a regular file")
        if os.geteuid() == 0:
            owners = _owners()
            _check_owner("the file", st, owners, sticky_ok=False)
            for d in Path(path).parents:
                dst = os.lstat(d)
                if stat.S_ISLNK(dst.st_mode):
                    raise Untrusted(f"its directory {d} is a symbolic link")
                _check_owner(f"its directory {d}", dst, owners, sticky_ok=True)
        data = f.read(MAX_SOURCE + 1)
    if len(data) > MAX_SOURCE:
        raise Untrusted(f"larger than {MAX_SOURCE >> 20} MiB")
    return data


def check_trusted() -> None:
    """Under euid 0: UserError naming the first plug-in file given (--plugin, NESTLAB_PLUGINS) that
    root must not run (a missing file stays a warning at its loading: there is nothing to run)."""
    if os.geteuid() != 0:
        return
    for path in files():
        try:
            read_source(path)
        except Untrusted as e:
            raise UserError(f"plug-in file {path}: {e}; {TRUST}") from None
        except OSError:
            continue


def _load_file(path: Path) -> Any:
    """The module of a plug-in file (loaded once per process), or its problem as a str."""
    if path not in _modules:
        if not path.is_file():
            _modules[path] = f"plug-in file {path}: no such file"
        else:
            # A stable module name, so that its objects pickle by reference to a worker that loaded
            # the same file.
            digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]   # str hashes differ between processes
            name = "nestlab_plugin_" + re.sub(r"\W", "_", path.stem) + "_" + digest
            try:
                source = read_source(path)
            except Untrusted as e:
                _modules[path] = f"plug-in file {path}: {e}; not loaded: {TRUST}"
                return _modules[path]
            except OSError as e:
                _modules[path] = f"plug-in file {path}: cannot read: {e.strerror or e}"
                return _modules[path]
            try:
                # compiled from the source checked above: never from a __pycache__ someone else wrote
                spec = importlib.util.spec_from_file_location(name, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[name] = module
                exec(compile(source, str(path), "exec"), module.__dict__)  # noqa: S102 - a plug-in is code to run
                _modules[path] = module
            except Exception as e:  # noqa: BLE001 - a broken plug-in is one line, the built-ins go on
                sys.modules.pop(name, None)
                _modules[path] = f"plug-in file {path}: cannot load: {problem(e)}"
    return _modules[path]


def problem(e: BaseException) -> str:
    where = ""
    tb = e.__traceback__
    while tb is not None:   # the innermost frame in a plug-in's own code, not importlib's
        if "importlib" not in tb.tb_frame.f_code.co_filename:
            where = f" ({Path(tb.tb_frame.f_code.co_filename).name}:{tb.tb_lineno})"
        tb = tb.tb_next
    return f"{type(e).__name__}: {e}{where}"


class Registry(Mapping):
    """Entries by name, loaded at first use (module docstring). `origin(name)` says where one came
    from; `problems` lists what was left out."""

    def __init__(self, what: str, attr: str, check: Callable[[Any, bool], str | None],
                 name_of: Callable[[Any], str], builtins: Callable[[], list[tuple[str, str]]]):
        # attr: the list a plug-in file fills, and the entry-point group's last part (nestlab.<attr>)
        self.group, self.what, self.attr = f"{PROJECT}.{attr}", what, attr
        self._check, self._name_of, self._builtins = check, name_of, builtins
        self._entries: dict[str, Any] | None = None
        self._origins: dict[str, str] = {}
        self._builtin: set[str] = set()
        self._refused: dict[str, str] = {}
        self._files_done: set[Path] = set()
        self.problems: list[str] = []

    def reload(self) -> None:
        """Look again at the entry points and files (a package installed since; tests)."""
        self._entries = None
        self._origins, self._builtin, self._refused, self._files_done = {}, set(), {}, set()
        self.problems = []

    # ----------------------------------------------------------------------- Mapping
    def __getitem__(self, name: str) -> Any:
        return self._all()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())

    def origin(self, name: str) -> str:
        self._all()
        return self._origins[name]

    def is_builtin(self, name: str) -> bool:
        self._all()
        return name in self._builtin

    def problem_of(self, name: str) -> str | None:
        """Why a plug-in of this name was left out, if one was."""
        self._all()
        return self._refused.get(name)

    def is_registered(self, obj: Any) -> bool:
        """obj is the entry of its name here (a worker process finds it by name)."""
        try:
            return self._all().get(self._name_of(obj)) is obj
        except Exception:  # noqa: BLE001 - not an entry of this kind at all
            return False

    # ----------------------------------------------------------------------- loading
    def _all(self) -> dict[str, Any]:
        if self._entries is None:
            self._entries = {}
            self._load_entry_points()
        for path in files():
            if path not in self._files_done:
                self._files_done.add(path)
                self._load_file(path)
        return self._entries

    def _refuse(self, name: str | None, line: str) -> None:
        self.problems.append(line)
        if name:
            self._refused.setdefault(name, line)
        say(line)

    def _add(self, name: str, obj: Any, origin: str, builtin: bool) -> None:
        problem = self._check(obj, builtin)
        if problem is None and self._name_of(obj) != name:
            problem = f"its name is {self._name_of(obj)!r}, not {name!r}"
        if problem is not None:
            self._refuse(name, f"{self.what} plug-in {name!r} ({origin}): {problem}; left out")
            return
        if name in self._entries:
            whose = "a built-in's" if name in self._builtin else f"taken by {self._origins[name]}"
            self._refuse(None, f"{self.what} plug-in {name!r} ({origin}): the name is {whose}; refused")
            return
        self._entries[name] = obj
        self._origins[name] = origin
        if builtin:
            self._builtin.add(name)

    def _load_entry_points(self) -> None:
        try:
            eps = list(importlib.metadata.entry_points(group=self.group))
        except Exception as e:  # noqa: BLE001 - broken metadata elsewhere must not stop the built-ins
            say(f"cannot read the installed entry points of {self.group}: {problem(e)}")
            eps = []
        own = [ep for ep in eps if _dist(ep) == PROJECT]
        others = [ep for ep in eps if _dist(ep) != PROJECT]
        order = [name for name, _ in self._builtins()]
        own.sort(key=lambda ep: order.index(ep.name) if ep.name in order else len(order))
        if not own:   # an install older than the project's own entry points
            say(f"the installed {PROJECT} has no entry points for its built-in rule systems and policies "
                f"(installed before they were declared): built-ins loaded directly; `pip install -e .` again to fix")
            own = [importlib.metadata.EntryPoint(name, value, self.group) for name, value in self._builtins()]
        missing = [(name, value) for name, value in self._builtins() if name not in {ep.name for ep in own}]
        if missing:   # an install older than some built-ins (added since): those loaded directly, quietly
            # (the built-ins are this package's own modules, found whatever the metadata says)
            own = sorted(own + [importlib.metadata.EntryPoint(n, v, self.group) for n, v in missing],
                         key=lambda ep: order.index(ep.name) if ep.name in order else len(order))
        for ep, builtin in [(ep, True) for ep in own] + [(ep, False) for ep in others]:
            origin = "built-in" if builtin else f"entry point {ep.value} of {_dist(ep) or '?'} {_dist_version(ep)}"
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plug-in is one line, the others go on
                self._refuse(ep.name, f"{self.what} plug-in {ep.name!r} ({origin}): cannot import: {problem(e)}; left out")
                continue
            self._add(ep.name, obj, origin, builtin)

    def _load_file(self, path: Path) -> None:
        module = _load_file(path)
        if isinstance(module, str):
            if module not in self.problems:
                self._refuse(None, module)
            return
        items = getattr(module, self.attr, None)
        if items is None:
            return
        if not isinstance(items, list | tuple):
            self._refuse(None, f"plug-in file {path}: `{self.attr}` is not a list")
            return
        for obj in items:
            try:
                name = self._name_of(obj)
            except Exception:  # noqa: BLE001
                self._refuse(None, f"plug-in file {path}: an entry of `{self.attr}` is not a {self.what} "
                                   f"({type(obj).__name__})")
                continue
            self._add(name, obj, f"file {path}", False)


def _dist(ep) -> str | None:
    dist = getattr(ep, "dist", None)
    return None if dist is None else re.sub(r"[-_.]+", "-", dist.metadata["Name"] or "").lower()


def _dist_version(ep) -> str:
    dist = getattr(ep, "dist", None)
    return "" if dist is None else dist.version


def check_contract(obj: Any, builtin: bool) -> str | None:
    """The contract version a plug-in states (`contract=`), checked against the lab's."""
    stated = getattr(obj, "contract", None)
    if stated is None:
        return None if builtin else f"states no contract version (contract={CONTRACT}: docs/plugins.md)"
    if stated != CONTRACT:
        return f"written for contract {stated}, this lab has contract {CONTRACT} (docs/plugins.md)"
    return None


def check_name(name: Any) -> str | None:
    if not isinstance(name, str) or not NAME.match(name):
        return f"bad name {name!r} (lower-case letters, digits, '_', '.', '-')"
    return None

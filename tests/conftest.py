"""Fixtures and hooks: the root marker and a check that a run left nothing behind. Helpers shared by
test modules live in tests/support/."""

from __future__ import annotations

import os

import pytest

import tests.support.reference_probe  # noqa: F401 - registers the probe=on reference (imports the others first)
import tests.support.reference_shared_peer  # noqa: F401 - registers the shared and peer references
import tests.support.reference_streams  # noqa: F401 - registers the streamsdiagnoser and flink-backpressure references
import tests.support.reference_tcpstate  # noqa: F401 - registers the tcpstate and confirm_tcp reference
import tests.support.reference_whoseturn  # noqa: F401 - registers the whoseturn reference
from tests.support.env import leftovers

# Fixtures of the interceptor tests (lib, probe, shm_dir, procs, sink), shared by two test modules.
pytest_plugins = ["tests.support.interceptor_kit"]


@pytest.fixture(autouse=True, scope="session")
def private_copy_cache(tmp_path_factory):
    """The analysis's per-user cache of derived copies (rundir.copies) in a directory of the session's,
    not the user's ~/.cache."""
    from rundir.copies import CACHE_ENV

    old = os.environ.get(CACHE_ENV)
    os.environ[CACHE_ENV] = str(tmp_path_factory.mktemp("copy-cache") / "nestlab")
    yield
    if old is None:
        os.environ.pop(CACHE_ENV, None)
    else:
        os.environ[CACHE_ENV] = old


def pytest_collection_modifyitems(config, items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root (namespaces, iptables)")
    for item in items:
        if "root" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def no_leftovers():
    """Fail if the test leaves anything behind that was not there before it (in CI the machine
    starts clean, so this is exact; a developer may have other runs going)."""
    before = set(leftovers())
    yield
    after = [t for t in leftovers() if t not in before]
    assert not after, f"the run left traces behind: {after}"

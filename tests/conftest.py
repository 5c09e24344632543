"""Fixtures and hooks: the root marker and a check that a run left nothing behind. Helpers shared by
test modules live in tests/support/."""

from __future__ import annotations

import os

import pytest

import tests.support.reference_probe  # noqa: F401 - registers the probe=on reference (imports the others first)
import tests.support.reference_shared_peer  # noqa: F401 - registers the shared and peer references
import tests.support.reference_streams  # noqa: F401 - registers the streamsdiagnoser and flink-backpressure references
import tests.support.reference_tcpstate  # noqa: F401 - registers the tcpstate and confirm_tcp reference
from tests.support.env import leftovers


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

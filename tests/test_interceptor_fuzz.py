"""The library is never why a program dies (issue 40, deliver 2): a bounded run of the differential fuzz
(bench/fuzz_interceptor.py, bench/fuzz_calls.c) over the wrapped calls. Without the library, counting,
and with the delay fault's deferral armed, every case gives the same return value and errno, and none
crashes or hangs. Before the fix the deferral died of SIGSEGV on bad pointers and poll on a bad array."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "bench"))

import fuzz_interceptor  # noqa: E402

from harness.interceptor import build  # noqa: E402

pytestmark = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("make") is None,
                                reason="needs gcc and make")


@pytest.mark.timeout(300)
def test_the_wrapped_calls_answer_as_without_the_library(tmp_path):
    build()
    exe = fuzz_interceptor.compile_fuzzer(tmp_path)
    r = fuzz_interceptor.fuzz(exe, seed=7, cases=600)
    assert len(r["calls"]) >= 25                       # every kind of wrapped call drawn
    assert sum(r["failed"].values()) > 100             # many cases are bad calls (EFAULT, EINVAL, EBADF...)
    assert r["died"] == []
    assert r["diffs"] == []

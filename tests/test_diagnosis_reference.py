"""The per-snapshot reference implementations (tests/support/reference.py) against the papers'
worked numbers."""

from __future__ import annotations

from tests.support.reference import parallel_combine


def test_reference_parallel_combine_paper_examples():
    # Paper 3.1: +0.6 ⊕ +0.4 = +0.76; +0.6 ⊕ -0.4 = +0.33; definite factors overwhelm.
    assert abs(parallel_combine(0.6, 0.4) - 0.76) < 1e-12
    assert round(parallel_combine(0.6, -0.4), 2) == 0.33
    assert parallel_combine(1.0, -0.8) == 1.0
    assert parallel_combine(-0.3, -1.0) == -1.0
    assert parallel_combine(0.0, -0.6) == -0.6
    c = parallel_combine(1.0, -1.0)
    assert c != c and parallel_combine(c, 0.4) != parallel_combine(c, 0.4)  # conflict absorbs


def test_reference_table5_tcpw():
    # TCPw: +0.6 ⊕ +0.6 ⊕ +0.6 = +0.936 (paper 3.3)
    v = 0.0
    for s in (0.6, 0.6, 0.6):
        v = parallel_combine(v, s)
    assert abs(v - 0.936) < 1e-12

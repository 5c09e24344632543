"""`nestlab` with the test-only oracle registered as algorithm "oracle" (tests/support/paths_oracle.py),
for end-to-end tests of `nestlab paths` before (and beside) the real algorithms:
`python -m tests.support.paths_cli paths --trace FILE -a oracle`."""

from __future__ import annotations

import sys

from analysis.paths.algorithms import ALGORITHMS
from nestlab.cli import nestlab_main
from tests.support.paths_oracle import infer

infer.DEFAULTS = {"x": 0.05}
ALGORITHMS["oracle"] = infer

if __name__ == "__main__":
    sys.exit(nestlab_main(sys.argv[1:]))

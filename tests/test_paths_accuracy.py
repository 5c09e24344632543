"""request_accuracy and mapping_accuracy (analysis/paths/accuracy.py): whole trees, strays, no links."""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.paths.accuracy import request_scores, service_mapping
from analysis.paths.model import PathsResult, Trace, Truth, as_messages


def trace() -> Trace:
    # two requests of three messages each (a chain), and one noise message
    f = pd.DataFrame({"t_send": [0.0, 0.1, 0.2, 1.0, 1.1, 1.2, 2.0], "src": list("abcabcx"),
                      "dst": list("bcbbcby")})
    req = np.array([0, 0, 0, 1, 1, 1, -1])
    cause = np.array([-1, 0, 1, -1, 3, 4, -1])
    return Trace(as_messages(f), Truth(req, cause))


def result(parent) -> PathsResult:
    return PathsResult("x", [], pd.DataFrame(), pd.DataFrame(), parent=np.array(parent))


def test_whole_trees_only():
    t = trace()
    assert request_scores(result([-1, 0, 1, -1, 3, 4, -1]), t)["request_accuracy"] == 1.0
    got = request_scores(result([-1, 0, 0, -1, 3, 4, -1]), t)       # one wrong link in request 0
    assert got["request_accuracy"] == 0.5 and got["n_mapped_right"] == 3 and got["n_mapped"] == 4
    got = request_scores(result([-1, 0, 1, -1, 3, 4, 5]), t)        # noise linked under request 1
    assert got["request_accuracy"] == 0.5 and got["mapping_accuracy"] == 1.0


def test_no_links_no_figure():
    r = PathsResult("convolution", [], pd.DataFrame(), pd.DataFrame())
    assert np.isnan(request_scores(r, trace())["request_accuracy"])
    assert service_mapping(r, trace()).empty


def test_per_service():
    s = service_mapping(result([-1, 0, 0, -1, 3, 4, -1]), trace()).set_index("service")
    assert s.loc["b", "mapping_accuracy"] == 1.0 and s.loc["c", "mapping_accuracy"] == 0.5

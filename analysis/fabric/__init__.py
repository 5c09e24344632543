"""The fabric study's diagnosers and scores (issue 44, docs/fabric.md): which link of a fat-tree is
lossy or down, per 10 s window, from many hosts' views at once.

    vote007.py     007 (NSDI'18): each retransmitting connection votes for the links of its path
    netbouncer.py  NetBouncer (NSDI'19): link success rates from probe paths, regularised least squares
    inputs.py      a fabric run read: fabric.json (paths, probes), run.db (retransmissions, faults), windows
    score.py       AC@1/AC@3 per fault kind and link type, window precision and recall, false alarms per hour
    __main__.py    python -m analysis.fabric RUN_OR_SUITE_DIR ...: the tables and compare-fabric.csv

Culprits are links, named by their two nodes as the topology writes them (e.g. 'a1-c1').
"""

"""Streams experiments (thesis chapter 4, docs/streams.md): a processing graph run as an Apache Flink
job, its throttles and droppers driven on schedule, and its per-port counters recorded.

    graph.py      the graph file: PEs, ports, stream connections
    spec.py       the experiment spec (graph, beacon rate, settings over time)
    cluster.py    a local Flink cluster (JobManager, TaskManager) for one run
    job/          the Flink job (Java): PEs as tasks, per-port counters, control files
    recovery.py   per-connection counters from per-port ones (Appendix A, 4.3.2)
    collector.py  snapshots of the counters into run.db
    runner.py     one repetition, torn down on every exit path
"""

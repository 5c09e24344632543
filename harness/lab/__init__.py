"""The labs the run loop (harness.runner.Repetition) composes, one per study kind that needs its own
(harness.studies names which lab runs each kind).

    base.py      the interface: Lab (what the loop asks), Injection and FaultRow, FaultSkipped
    network.py   NetworkLab: a topology (Mininet or SSH testbed nodes), workloads, NeST's collector, faults
    tracing.py   the message trace of a network lab's run (`trace: messages`)
    harness/streams/lab.py   StreamsLab: a Flink cluster, the graph's job, the streams collector, throttles

Adding a lab: a Lab subclass in a module of its own, named by its study kind's LabStudy.
"""

"""nestlab harness: spec -> backend -> workloads/faults/collector -> run store."""

__version__ = "0.1.0"

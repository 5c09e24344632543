"""nestlab harness: spec -> backend -> workloads/faults/collector -> run directory (rundir/)."""

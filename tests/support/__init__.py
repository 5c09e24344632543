"""Builders and helpers shared by the test modules (fixtures stay in tests/conftest.py):

- env.py: REPO, VENV_BIN, `write`, `leftovers` (what a run could leave behind)
- runs.py: `RunBuilder` and `make_run`, hand-made run directories for the analysis; `labelled`,
  `positives`, `spans`
- rundb.py: `write_run`, a run.db of raw counters for the stretch reader
- synthetic.py: `synthetic_run`, a long synthetic run for the diagnosis tests and the benchmark
- reference.py: the per-snapshot reference implementations of the rule variants
- manifests.py: manifests as the runner writes them (format 3, ssh, format 2)
- damaged.py: damaged copies of a good run (a stored one or make_run's) for tests/test_damaged_runs.py
"""

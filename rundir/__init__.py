"""The run directory, the one contract between the lab (harness/) and the analysis (analysis/).

It alone knows a run's files: run.db's schema and format version (db), the manifest's model and its
writer (manifest, layout), what the collector and the runner write (db, recorder), the readers,
tolerant of damaged and older runs (read, repair, runs, live_reader), a suite's index (suite_index),
fault targets (targets) and the facts every reader derives the same way (facts). docs/run-format.md
documents the format. The write path (db, targets, recorder, layout without a manifest) needs only
the standard library: the collector runs on testbed nodes that have nothing else.
"""

__version__ = "0.1.0"   # nestlab's version, recorded in every manifest (versions.nestlab)

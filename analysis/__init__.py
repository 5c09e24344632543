"""nestlab analysis: load (through rundir/) -> diagnose -> label -> score -> render, as analysis.pipeline
reads. Pure: never needs root, never imports the lab (harness/)."""

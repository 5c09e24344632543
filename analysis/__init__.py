"""nestlab analysis: run store -> diagnose -> label -> score -> report. Pure; never needs root."""

"""Hand-made streams runs: rundir.handmade_streams (public through nestlab.testing)."""

from rundir.handmade_streams import MONO0, Graph, StreamsRun, chain

__all__ = ["MONO0", "Graph", "StreamsRun", "chain"]

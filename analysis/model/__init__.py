"""The array model of a run the rule variants and labelling policies read: stretches of constant
graph with their counter deltas (stretches, dense, deltas, stretch_copy), many stretches as one flat
batch of cells (batch), the counters' long frame and the rows a policy reads as arrays (long_frame,
label_input), and the per-snapshot TCP state and probe evidence aligned with a stretch (tcpstate,
probes)."""

"""Black-box causal path inference from message traces (the seeds' rivals of NeST): Project5's
nesting and convolution algorithms (blackbox-debugging-slides.txt) and WAP5's message linking
(wap5-paper.txt), with the trace model they share, a trace generator (Maketrace), trace readers, and
scoring against the true paths. `model.py` is the contract every part of this package reads and
writes; docs/blackbox.md describes the whole.
"""

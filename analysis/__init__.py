"""nestlab analysis: load (through rundir/) -> diagnose -> label -> score -> render, as analysis.pipeline
reads, laid out by step:

    load      load.py (RunData), unscored.py (a damaged run's rows left out), model/ (the array model:
              stretches, cells, the counters as arrays, TCP state, probes, engine metrics)
    diagnose  diagnose.py, variants/ (the rule systems; a variant reads only its model.batch.Batch)
    label     labels.py, labels_streams.py (ground truth), fault_reach.py (a fault's targets and
              collateral, which load uses too), health.py (the network's health)
    score     score/ (counting, the table's layout, rates and intervals), evaluation.py
    render    render/ (tables, files, figures, the HTML report, what a run ends with)

live.py applies the same steps to a run while it is recorded; paths/ is black-box causal path
inference from message traces (docs/blackbox.md), a pipeline of its own.
Pure: never needs root, never imports the lab (harness/)."""

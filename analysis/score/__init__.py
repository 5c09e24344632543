"""Scoring: the accuracy table's layout (table_layout) and the confusion matrices, rates and
tables made from the per-module counts (accuracy)."""

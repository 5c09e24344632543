"""What a plug-in author imports (docs/plugins.md): the contract version, the two interfaces a rule
system can be written on, and the pieces of a labelling policy.

    from nestlab.plugin import CONTRACT, RuleSystem, Param, simple_rule, LABELS, STALLED

The array interface: RuleSystem(name, kind, summary, params, diagnose, contract=CONTRACT), where
diagnose(batch, **params) gets an analysis.model.batch.Batch and returns per direction a (result,
positive) pair of flat arrays over its cells. The simple interface: simple_rule(name, rule, ...), where
rule(cell, **params) gets one Cell and returns a label.
"""

from analysis.model.batch import Batch
from analysis.model.stretches import DIRS, KINDS, Counters, Stretch
from analysis.plugins import CONTRACT
from analysis.variants.base import (
    BLOCKED,
    DONTCARE,
    HEALTHY,
    LABELS,
    STALLED,
    Param,
    RuleSystem,
    certainty,
    non_negative_int,
    on_off,
    positive_int,
    seconds,
)
from analysis.variants.simple import Cell, Counts, Neighbour, simple_rule

__all__ = ["BLOCKED", "CONTRACT", "DIRS", "DONTCARE", "HEALTHY", "KINDS", "LABELS", "STALLED", "Batch", "Cell",
           "Counters", "Counts", "Neighbour", "Param", "RuleSystem", "Stretch", "certainty", "non_negative_int",
           "on_off", "positive_int", "seconds", "simple_rule"]

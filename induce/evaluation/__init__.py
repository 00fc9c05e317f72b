"""Evaluation of induced trees against gold trees (see :mod:`induce.evaluation.metrics` for the conventions)."""
from .baselines import BASELINES, baseline_predictions, baseline_tree
from .metrics import (
    REPORTED_LABELS,
    BranchingStats,
    EvalConvention,
    EvalResult,
    evaluate,
    prepare_gold,
    require_sentences,
    sentence_prf,
)
from .trees import Node, constituents, from_nltk, prune, to_nltk

__all__ = [
    "BASELINES", "REPORTED_LABELS", "BranchingStats", "EvalConvention", "EvalResult", "Node",
    "baseline_predictions", "baseline_tree", "constituents", "evaluate", "from_nltk", "prepare_gold",
    "prune", "require_sentences", "sentence_prf", "to_nltk",
]

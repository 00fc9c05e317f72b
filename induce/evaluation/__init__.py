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

__all__ = [
    "BASELINES", "REPORTED_LABELS", "BranchingStats", "EvalConvention", "EvalResult",
    "baseline_predictions", "baseline_tree", "evaluate", "prepare_gold", "require_sentences", "sentence_prf",
]

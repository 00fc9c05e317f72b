"""The metric core: induced trees scored against gold trees (see :mod:`induce.evaluation.metrics` for the
conventions), the published conventions, EVALB, the bootstrap, baselines, agreement, ensembles and seeds.
It sits below :mod:`induce.inference`; what drives inference to evaluate a run is :mod:`induce.assess`."""
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

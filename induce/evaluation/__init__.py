"""The metric core: induced trees scored against gold trees by one engine (:func:`score`, in
:mod:`induce.evaluation.engine`) under one kind of :class:`Convention` (induce's own and the published ones:
:mod:`induce.evaluation.conventions`), the gold trees and the alignment of predictions onto them
(:mod:`induce.evaluation.gold`), EVALB, the bootstrap, baselines, agreement, ensembles and seeds.
It sits below :mod:`induce.inference`; what drives inference to evaluate a run is :mod:`induce.assess`."""
from .baselines import BASELINES, baseline_predictions, baseline_tree
from .conventions import CONVENTIONS, DEFAULT, Convention, get_convention, induce_convention
from .engine import REPORTED_LABELS, BranchingStats, Result, require_sentences, score, sentence_prf
from .gold import Gold, GoldSet, load_gold, prepare_gold

__all__ = [
    "BASELINES", "CONVENTIONS", "DEFAULT", "REPORTED_LABELS", "BranchingStats", "Convention", "Gold", "GoldSet",
    "Result", "baseline_predictions", "baseline_tree", "get_convention", "induce_convention", "load_gold",
    "prepare_gold", "require_sentences", "score", "sentence_prf",
]

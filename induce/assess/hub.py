"""The reports over sources of trees (:mod:`induce.assess.sources`) and the gold trees: the conventions table
(``induce eval --convention``), agreement (``induce agreement``), the paired comparison (``induce compare``)
and ensembles (``induce ensemble``, the leaderboard). Every figure is :func:`induce.evaluation.score`'s; each
convention keeps its own tokens and aligns each prediction to them
(:func:`~induce.evaluation.gold.align_prediction`).
"""
from __future__ import annotations

from collections.abc import Sequence

from induce.errors import InduceError
from induce.evaluation import bootstrap
from induce.evaluation.conventions import CONVENTIONS, get_convention
from induce.evaluation.engine import score
from induce.evaluation.gold import align_prediction, gold_view
from induce.evaluation.words import DEFAULT_WORD_MATCH, WordCheck

from .sources import Source

#: The convention of agreement, comparisons and ensemble reports when none is named: the default one.
DEFAULT_CONVENTION = "induce"


def convention_results(source: Source, golds: Sequence, names: Sequence[str], variants: Sequence[str] = ("nary",),
                       max_length: int | None = None, resamples: int = bootstrap.DEFAULT_RESAMPLES,
                       seed: int = 0, word_match: str = DEFAULT_WORD_MATCH) -> list:
    """One dict per (convention, gold variant): its figures, a 95% bootstrap interval for each, the
    numbers of sentences scored / skipped / in error and how the words matched the gold's under
    ``word_match`` (:meth:`~induce.evaluation.engine.Result.convention_entry`)."""
    out = []
    for name in names:
        convention = get_convention(name).limited(max_length)
        for variant in variants:
            result = score(golds, source.items or [], convention, variant, source.locations, baseline=source.baseline,
                           word_match=word_match)
            entry = result.convention_entry()
            entry["reported"] = [[f.key, f.label, f.digits] for f in convention.figures]
            if result.sentences:
                entry["ci"] = {f.key: bootstrap.confidence_interval(result.sentences, f.key, convention.corpus_f1,
                                                                    resamples, seed) for f in convention.figures}
            out.append(entry)
    return out


def aligned_trees(source: Source, golds: Sequence, convention_name: str = DEFAULT_CONVENTION,
                  max_length: int | None = None, words: WordCheck | None = None) -> dict:
    """``{sentence index: Node over the convention's kept words}`` of the sentences the convention scores
    (for agreement and ensembles: every source is brought onto the same words); ``max_length``: a further
    length limit (``--wsj10``, ``--max-length``), applied with the convention's own; ``words`` checks and
    counts the source's words against the gold's (normalized when None)."""
    from induce.evaluation.engine import _as_prediction
    from induce.trees.transforms import collapse_unary

    convention = get_convention(convention_name)
    out = {}
    for index, gold in enumerate(golds):
        node, keep = gold_view(gold, convention, "nary")
        length = sum(keep)
        too_long = any(limit is not None and length > limit for limit in (convention.max_length, max_length))
        if node is None or length < max(convention.min_length, 2) or too_long:
            continue
        if source.baseline is not None:
            out[index] = source.baseline(length)
            continue
        pred, pred_words = _as_prediction(source.items[index] if index < len(source.items) else None)
        if pred is None:
            continue
        kept_words = [w for w, k in zip(gold.words, keep) if k]
        where = source.locations[index] if source.locations else (None, None)
        tree, projected = align_prediction(pred, pred_words, kept_words, gold.words, keep, where, words)
        out[index] = collapse_unary(tree) if projected else tree
    return out


def _checked_trees(sources: Sequence[Source], golds: Sequence, convention_name: str, max_length: int | None,
                   word_match: str) -> tuple[list, list]:
    """``(trees, words)``: :func:`aligned_trees` of each source, and how its words matched the gold's
    (a :meth:`WordCheck.summary`, None for a source without words: a run or a baseline)."""
    trees, words = [], []
    for source in sources:
        check = WordCheck(word_match)
        trees.append(aligned_trees(source, golds, convention_name, max_length, check))
        words.append(check.summary() if check.sentences else None)
    return trees, words


def agreement_report(sources: Sequence[Source], golds: Sequence, convention_name: str = DEFAULT_CONVENTION,
                     max_length: int | None = None, word_match: str = DEFAULT_WORD_MATCH) -> dict:
    """The pairwise F1 matrix of the sources on the sentences all of them have (of at most ``max_length``
    words, when given, and within the convention's own limit), and the mean of its off-diagonal entries
    (self-F1 when the sources are seeds of one model); ``words``: how each source's words matched the
    gold's under ``word_match``."""
    from induce.evaluation.agreement import agreement_matrix, mean_off_diagonal

    trees, words = _checked_trees(sources, golds, convention_name, max_length, word_match)
    common = sorted(set.intersection(*(set(t) for t in trees)))
    if not common:
        within = "" if max_length is None else f" and at most {max_length}"
        raise InduceError(f"--agreement: no sentence of two words or more{within} that every source has a tree of")
    matrix = agreement_matrix([[t[i] for i in common] for t in trees])
    return {"sources": [s.label for s in sources], "matrix": matrix, "mean_pairwise_f1": mean_off_diagonal(matrix),
            "n_sentences": len(common), "convention": convention_name, "max_length": max_length, "words": words,
            "description": "corpus F1 between each pair (spans of 2+ words, not the whole sentence, as sets)"}


def compare_report(first: Source, second: Source, golds: Sequence, convention_name: str = DEFAULT_CONVENTION,
                   variant: str = "nary", max_length: int | None = None,
                   resamples: int = bootstrap.DEFAULT_RESAMPLES, seed: int = 0,
                   word_match: str = DEFAULT_WORD_MATCH) -> dict:
    """The paired bootstrap of ``first - second`` on the convention's first figure, on the sentences both
    were scored on against the gold ``variant`` (:func:`induce.evaluation.bootstrap.paired_bootstrap`: the
    p-value's direction is its ``alternative``)."""
    convention = get_convention(convention_name).limited(max_length)
    results = [score(golds, s.items or [], convention, variant, s.locations, baseline=s.baseline,
                     word_match=word_match) for s in (first, second)]
    by_index = [{s.index: s for s in result.sentences} for result in results]
    common = sorted(set(by_index[0]) & set(by_index[1]))
    key = convention.figures[0].key
    report = bootstrap.paired_bootstrap([by_index[0][i] for i in common], [by_index[1][i] for i in common], key,
                                        convention.corpus_f1, resamples, seed)
    report.update({"first": first.label, "second": second.label, "convention": convention_name,
                   "gold_variant": variant, "max_length": max_length, "figure_label": convention.figures[0].label,
                   "n_sentences": len(common), "seed": seed, "words": [r.words for r in results]})
    return report


def ensemble_report(members: Sequence[Source], golds: Sequence, weights: Sequence[float] | None = None,
                    convention_name: str = DEFAULT_CONVENTION, word_match: str = DEFAULT_WORD_MATCH):
    """``(trees, report)``: the ensemble's tree of every gold sentence (None where the convention scores
    none: under 2 words), and, on the gold, the F1 of each member, their mean and best, and the ensemble's.
    ``weights``: one per member, finite, ``>= 0``, not all 0 (:func:`induce.evaluation.ensemble.check_weights`);
    ``word_match``: how the members' words are compared with the gold's (counted in the report's ``words``)."""
    import statistics

    from induce.evaluation.ensemble import check_weights, ensemble_tree

    if weights is not None:
        weights = check_weights(weights, len(members))
    trees, words = _checked_trees(members, golds, convention_name, None, word_match)
    common = sorted(set.intersection(*(set(t) for t in trees)))
    out: list = [None] * len(golds)
    for index in common:
        out[index] = ensemble_tree([t[index] for t in trees], weights)
    convention = get_convention(convention_name)
    key = convention.figures[0].key

    def figure(source: Source) -> float:
        return score(golds, source.items or [], convention, baseline=source.baseline).figures[key]

    from induce.trees.nodes import from_index_tree

    ensemble_items = [None if tree is None else (from_index_tree(tree), None) for tree in out]
    member_f1 = [figure(Source(m.label, [None if i not in t else (t[i], None) for i in range(len(golds))]))
                 for m, t in zip(members, trees)]
    report = {"members": [m.label for m in members], "member_f1": member_f1, "mean": statistics.fmean(member_f1),
              "best": max(member_f1), "ensemble": figure(Source("ensemble", ensemble_items)),
              "weights": list(weights) if weights else None, "convention": convention_name,
              "figure_label": convention.figures[0].label, "n_sentences": len(common), "words": words}
    return out, report


__all__ = ["CONVENTIONS", "DEFAULT_CONVENTION", "agreement_report", "aligned_trees", "compare_report",
           "convention_results", "ensemble_report"]

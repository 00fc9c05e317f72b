"""The evaluation hub: what ``induce eval --convention / --agreement / --compare`` and ``induce ensemble``
do with their sources of trees (prediction files in any :mod:`induce.trees.formats` format, run folders,
baselines) and the gold trees.

The gold trees are read once with every non-trace token (:class:`~induce.evaluation.conventions.FullGold`);
each convention keeps its own tokens and aligns each prediction to them
(:func:`~induce.evaluation.conventions.align_prediction`). A run parses every token of each sentence (its
punctuation hidden from the model and attached afterwards, as for raw text).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from induce.errors import InduceError
from induce.evaluation import bootstrap
from induce.evaluation.conventions import (
    CONVENTIONS,
    FullGold,
    align_prediction,
    full_gold,
    get_convention,
    token_filter,
)
from induce.evaluation.words import DEFAULT_WORD_MATCH, WordCheck

#: The convention of --agreement, --compare and ensemble reports when none is named: the default one.
DEFAULT_CONVENTION = "induce"
Progress = Optional[Callable[[int, int], None]]


@dataclass
class Source:
    """Trees of one source: ``items[i]`` = ``(Node, words or None)`` of gold sentence ``i`` (None: none
    given), or ``baseline(n_words)``; ``label`` as printed; ``notes`` said to the user."""

    label: str
    items: list | None = None
    locations: list | None = None
    baseline: Callable | None = None
    notes: list = field(default_factory=list)


def load_full_gold(gold, corpus, split: str, reading: Progress = None, treebank: str | None = None):
    """``(GoldSet, [FullGold or None])`` of ``--gold`` or ``split`` of ``corpus``, every non-trace token kept;
    ``treebank``: the profile of its tags (:func:`induce.inference.scoring.load_gold`)."""
    from induce.evaluation.metrics import EvalConvention
    from induce.inference.scoring import load_gold

    gold_set = load_gold(gold, corpus, split, EvalConvention(keep_punct=True), reading=reading, treebank=treebank)
    return gold_set, [full_gold(sentence) for sentence in gold_set.sentences]


def word_tag_lengths(golds: Sequence[FullGold | None]) -> list:
    return [0 if g is None else sum(map(token_filter("word_tags", g.treebank), g.tags)) for g in golds]


def gold_fits(gold: FullGold | None, item) -> bool:
    """Whether a prediction (a :class:`~induce.trees.brackets.LocatedTree`) is over the words of ``gold``
    (all its tokens or some of them, as a convention keeps them); a gold of traces only (None) fits anything."""
    from induce.evaluation.conventions import prediction_fits
    from induce.trees.nodes import tagged_leaves

    return gold is None or prediction_fits([leaf for leaf, _, _ in tagged_leaves(item.tree)], gold.words)


def is_run(path: Path) -> bool:
    """A run folder or a checkpoint (``runs/x/last``), not a file of trees."""
    path = Path(path)
    return path.is_dir() or (not path.exists() and Path(f"{path}.safetensors").exists())


def file_source(path: Path, golds: Sequence | None, pred_format: str = "auto", progress: Progress = None) -> Source:
    """A predictions file read in ``pred_format``; with ``golds``, a Kim ``pred_tree`` file's missing
    one-word sentences are filled in (:func:`induce.trees.formats.fill_one_word_sentences`)."""
    from induce.evaluation.metrics import prediction_node
    from induce.trees.formats import fill_one_word_sentences, read_predictions

    located, fmt = read_predictions(path, pred_format, progress=progress)
    notes = []
    if golds is not None:
        located, note = fill_one_word_sentences(located, word_tag_lengths(golds), fmt, path,
                                                fits=lambda k, item: gold_fits(golds[k], item))
        notes = [note] if note else []
    items = [None if item is None else prediction_node(item.tree) for item in located]
    locations = [(str(path), None) if item is None else (item.path, item.line) for item in located]
    return Source(str(path), items, locations, notes=notes)


def run_source(run: Path, gold_set, batch_size: int = 64, decoder: str | None = None, device: str = "auto",
               progress: Progress = None) -> Source:
    """A trained run's trees of every gold sentence, over every non-trace token."""
    from induce.evaluation.metrics import EvalConvention, prediction_node
    from induce.inference.scoring import parse_gold

    convention = EvalConvention(keep_punct=True, min_length=1)
    trees = parse_gold(run, gold_set.sentences, convention, batch_size=batch_size, decoder=decoder, device=device,
                       progress=progress)
    return Source(f"run {run}", [None if tree is None else prediction_node(tree) for tree in trees])


def baseline_source(kind: str, seed: int = 0) -> Source:
    """A baseline built over each convention's own tokens (``random`` seeded once per convention)."""
    import random

    from induce.evaluation.baselines import baseline_tree

    rng = random.Random(seed)
    return Source(f"baseline {kind}" + (f" (seed {seed})" if kind == "random" else ""),
                  baseline=lambda n: baseline_tree(n, kind, rng))


def convention_results(source: Source, golds: Sequence, names: Sequence[str], variants: Sequence[str] = ("nary",),
                       max_length: int | None = None, resamples: int = bootstrap.DEFAULT_RESAMPLES,
                       seed: int = 0, word_match: str = DEFAULT_WORD_MATCH) -> list:
    """One dict per (convention, gold variant): its figures, a 95% bootstrap interval for each, the
    numbers of sentences scored / skipped / in error and how the words matched the gold's under
    ``word_match`` (:meth:`ConventionResult.to_dict`)."""
    from induce.evaluation.conventions import score_convention

    out = []
    for name in names:
        convention = get_convention(name)
        for variant in variants:
            result = score_convention(golds, source.items or [], convention, variant, source.locations,
                                      baseline=source.baseline, max_length=max_length, word_match=word_match)
            entry = result.to_dict()
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
    from induce.evaluation.conventions import gold_view
    from induce.trees.transforms import collapse_unary

    convention = get_convention(convention_name)
    out = {}
    for index, gold in enumerate(golds):
        if gold is None:
            continue
        node, keep = gold_view(gold, convention, "nary")
        length = sum(keep)
        too_long = any(limit is not None and length > limit for limit in (convention.max_length, max_length))
        if node is None or length < max(convention.min_length, 2) or too_long:
            continue
        if source.baseline is not None:
            out[index] = source.baseline(length)
            continue
        item = source.items[index] if index < len(source.items) else None
        if item is None:
            continue
        kept_words = [w for w, k in zip(gold.words, keep) if k]
        where = source.locations[index] if source.locations else (None, None)
        tree, projected = align_prediction(item[0], item[1], kept_words, gold.words, keep, where, words)
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
    from induce.evaluation.conventions import score_convention

    convention = get_convention(convention_name)
    results = [score_convention(golds, s.items or [], convention, variant, s.locations, baseline=s.baseline,
                                max_length=max_length, word_match=word_match) for s in (first, second)]
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

    from induce.evaluation.conventions import score_convention
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
        return score_convention(golds, source.items or [], convention, baseline=source.baseline).figures[key]

    from induce.trees.nodes import from_index_tree

    ensemble_items = [None if tree is None else (from_index_tree(tree), None) for tree in out]
    member_f1 = [figure(Source(m.label, [None if i not in t else (t[i], None) for i in range(len(golds))]))
                 for m, t in zip(members, trees)]
    report = {"members": [m.label for m in members], "member_f1": member_f1, "mean": statistics.fmean(member_f1),
              "best": max(member_f1), "ensemble": figure(Source("ensemble", ensemble_items)),
              "weights": list(weights) if weights else None, "convention": convention_name,
              "figure_label": convention.figures[0].label, "n_sentences": len(common), "words": words}
    return out, report


__all__ = ["CONVENTIONS", "DEFAULT_CONVENTION", "Source", "agreement_report", "baseline_source", "compare_report",
           "convention_results", "ensemble_report", "file_source", "is_run", "load_full_gold", "run_source"]


def source_key(path: Path):
    """The identity of a source (:func:`induce.files.file_key`): of the file or run folder, or of a checkpoint
    named without its suffix (``runs/x/last``: ``last.safetensors``)."""
    from induce.files import file_key

    return file_key(path) or file_key(f"{path}.safetensors")


def check_distinct_sources(paths: Sequence[Path], what: str, why: str) -> None:
    """Refuse two of ``paths`` that name one file, run folder or checkpoint (under any path or link), where
    each source counts in its own right (``what`` and ``why`` frame the message:
    :func:`induce.files.refuse_repeated`)."""
    from induce.files import refuse_repeated

    refuse_repeated(paths, what, why, key=source_key)


def sources_of(paths: Sequence[Path], golds, gold_set, pred_format: str, batch_size: int, decoder, device,
               steps) -> list:
    """A :class:`Source` per path: a run folder or checkpoint is parsed, a file read."""
    out = []
    for path in paths:
        if is_run(path):
            out.append(run_source(path, gold_set, batch_size, decoder, device, steps.bar(f"parsing with {path}")))
        else:
            out.append(file_source(path, golds, pred_format, steps.bar(f"reading {path}")))
    return out


def run_hub_eval(predicted: Sequence[Path], gold=None, corpus=None, data=None, split: str = "valid",
                 baseline: str | None = None, checkpoint: Path | None = None, seed: int = 0,
                 conventions: Sequence[str] = (), variants: Sequence[str] = (), pred_format: str = "auto",
                 agreement: bool = False, compare: bool = False, max_length: int | None = None,
                 resamples: int = bootstrap.DEFAULT_RESAMPLES, batch_size: int = 64, decoder=None,
                 device: str = "auto", console=None, steps=None, word_match: str = DEFAULT_WORD_MATCH,
                 treebank: str | None = None):
    """``induce eval`` with ``--convention``, ``--gold-variant``, ``--agreement`` or ``--compare``: an
    :class:`~induce.assess.run_eval.EvalOutcome` of kind ``conventions``, ``agreement`` or ``compare``.

    Long because it checks which options go together (each error names the flags) before any file is
    read, then dispatches to one of three reports."""
    from induce.assess.run_eval import EvalOutcome, NoProgress, _default_eval_corpus
    from induce.evaluation.words import check_mode

    steps = steps or NoProgress()
    check_mode(word_match)
    names = list(CONVENTIONS) if "all" in conventions else list(dict.fromkeys(conventions))
    for name in names:
        get_convention(name)
    if agreement and compare:
        raise InduceError("--agreement and --compare together: choose one")
    if (agreement or compare) and (baseline is not None or checkpoint is not None):
        raise InduceError(f"{'--agreement' if agreement else '--compare'}: give the runs or prediction files as "
                          "arguments (a run folder is parsed), not --baseline / --checkpoint")
    if compare and len(predicted) != 2:
        raise InduceError(f"--compare takes two sources (prediction files or run folders), {len(predicted)} given")
    if agreement and len(predicted) < 2:
        raise InduceError(f"--agreement takes two sources or more (prediction files or run folders), "
                          f"{len(predicted)} given")
    if not (agreement or compare) and len(predicted) > 1:
        raise InduceError(f"{len(predicted)} prediction files: evaluate one at a time, or use --agreement / --compare")
    if agreement:
        check_distinct_sources(predicted, "--agreement", "give each source once (a source agrees with itself "
                               "completely, which would raise the mean pairwise F1)")
    if compare:
        check_distinct_sources(predicted, "--compare", "give two different sources (a source compared with itself "
                               "differs by nothing)")
    if (agreement or compare) and len(names) > 1:
        raise InduceError(f"{'--agreement' if agreement else '--compare'}: one --convention at most")
    if agreement and variants:
        raise InduceError("--agreement compares sources with each other, not with gold: --gold-variant does not apply")
    if compare and len(set(variants)) > 1:
        raise InduceError(f"--compare: one --gold-variant at most ({', '.join(dict.fromkeys(variants))} given): "
                          "compare the two sources against each gold variant in turn")
    run_dir = None
    if not predicted and baseline is None:
        from induce.inference.runs import pick_run

        run_dir = pick_run(checkpoint, console, need_parser=True)
    if gold is None and corpus is None:
        corpus = _default_eval_corpus(run_dir, data, console)
    gold_set, golds = load_full_gold(gold, corpus, split, steps.bar("reading gold trees"), treebank)
    if baseline is not None and predicted:
        raise InduceError("give only one of: a predicted file, --baseline, --checkpoint")
    sources = ([baseline_source(baseline, seed)] if baseline is not None else
               sources_of(predicted or [run_dir], golds, gold_set, pred_format, batch_size, decoder, device, steps))
    notes = [note for source in sources for note in source.notes]
    convention = names[0] if names else DEFAULT_CONVENTION
    if agreement:
        return EvalOutcome("agreement", {**agreement_report(sources, golds, convention, max_length, word_match),
                                         "gold": gold_set.label, "notes": notes})
    if compare:
        report = compare_report(sources[0], sources[1], golds, convention, (list(variants) or ["nary"])[0],
                                max_length, resamples, seed, word_match)
        return EvalOutcome("compare", {**report, "gold": gold_set.label, "notes": notes})
    results = convention_results(sources[0], golds, names or [DEFAULT_CONVENTION], list(variants) or ["nary"],
                                 max_length, resamples, seed, word_match)
    return EvalOutcome("conventions", {"predicted": sources[0].label, "gold": gold_set.label, "results": results,
                                       "treebank": gold_set.treebank,
                                       "notes": notes, "bootstrap": {"resamples": resamples, "seed": seed,
                                                                     "interval": bootstrap.INTERVAL}})

"""The evaluation engine: predicted trees scored against gold trees under one :class:`~induce.evaluation.conventions.
Convention` (:func:`score`). Every figure of the toolkit comes from here: ``induce eval`` (induce's own
convention and the published ones), ``induce compare``, ``induce agreement``, ensembles, the leaderboard,
the reproduction's score sets and the trainer's dev F1.

Per sentence (:func:`score_sentence`): the gold tree in the convention's tokens (:func:`~induce.evaluation.gold.
gold_view`), sentences outside its length limits skipped, the prediction aligned onto the same words
(:func:`~induce.evaluation.gold.align_prediction`), the counted spans of both compared (or EVALB's brackets),
and precision, recall and F1 under the convention's sentence formula. Over the corpus (:class:`Result`): the
corpus figures from the summed counts and the means of the sentence figures (:func:`figures_of`), the recall
of the gold labels :data:`REPORTED_LABELS`, and branching statistics.

Branching statistics (PaLM, Peng et al. 2019, Table 4): among the nodes that split a span of more than 2 words,
the share of *left* splits ``[i, j] -> [i, j-1] + (j)``, of *right* splits ``[i, j] -> (i) + [i+1, j]``, of
other binary splits, and of n-ary nodes (more than two children: neither left nor right; they occur only in
gold trees). Unary nodes are not splits.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Optional

import nltk

from induce.errors import InduceError, InputError, InvalidValueError
from induce.trees.nodes import Node, branching_nodes, constituents, fold
from induce.trees.ptb import strip_function_tags
from induce.trees.transforms import collapse_unary, relabel_brackets, with_preterminals

from . import evalb
from .conventions import DEFAULT, GOLD_VARIANTS, Convention
from .gold import Gold, align_prediction, as_golds, gold_view, prediction_node
from .words import DEFAULT_WORD_MATCH, WordCheck

#: Gold labels whose recall is reported.
REPORTED_LABELS = ("NP", "VP", "PP", "SBAR", "ADJP", "ADVP")
Progress = Optional[Callable[[int, int], None]]
#: The kinds of split of :class:`BranchingStats`, as ``induce eval --json`` names them (``left_split_pct``, ...).
SPLIT_KINDS = ("left", "right", "other_binary", "nary")


@dataclass
class SentenceCounts:
    """One scored sentence: gold index, length (in the convention's tokens), matched / predicted / gold
    spans (brackets), and its precision, recall and F1 under the convention's sentence formula (0-1)."""

    index: int
    length: int
    match: int
    n_pred: int
    n_gold: int
    precision: float
    recall: float
    f1: float


@dataclass
class BranchingStats:
    n_splits: int = 0
    left: int = 0
    right: int = 0
    other_binary: int = 0
    nary: int = 0

    def add(self, node: Optional[Node]) -> None:
        for _length, children in branching_nodes(node) if node is not None else ():
            self.n_splits += 1
            if len(children) > 2:
                self.nary += 1
            elif children[1] == 1:
                self.left += 1
            elif children[0] == 1:
                self.right += 1
            else:
                self.other_binary += 1

    def pct(self, count: int) -> float:
        return 100.0 * count / self.n_splits if self.n_splits else 0.0


@dataclass
class Result:
    """A convention's figures (percent) on one gold variant, with the per-sentence counts they come from, the
    recall of :data:`REPORTED_LABELS`, the branching statistics of both tree sets, what was skipped (too short:
    fewer than ``min_length`` tokens, none kept included; too long; ``n_skipped`` also counts EVALB's skipped
    sentences) and how the predicted words matched the gold's (:meth:`WordCheck.summary`)."""

    convention: Convention
    gold_variant: str
    figures: dict
    sentences: list = field(default_factory=list)
    n_skipped: int = 0
    n_errors: int = 0
    words: Optional[dict] = None
    treebank: str = "ptb"
    n_too_short: int = 0
    n_too_long: int = 0
    label_recall: dict = field(default_factory=dict)
    label_counts: dict = field(default_factory=dict)
    pred_branching: BranchingStats = field(default_factory=BranchingStats)
    gold_branching: BranchingStats = field(default_factory=BranchingStats)

    @property
    def n_sentences(self) -> int:
        return len(self.sentences)

    @property
    def sentence_f1(self) -> float:
        return self.figures["sentence_f1"]

    @property
    def corpus_f1(self) -> float:
        return self.figures["corpus_f1"]

    @property
    def precision(self) -> float:
        return self.figures["corpus_precision"]

    @property
    def recall(self) -> float:
        return self.figures["corpus_recall"]

    def to_dict(self) -> dict:
        """The JSON shape of ``induce eval --json`` (F1 and percentages in 0-100)."""
        pred, gold = self.pred_branching, self.gold_branching
        return {
            "n_sentences": self.n_sentences, "n_skipped": self.n_skipped, "sentence_f1": self.sentence_f1,
            "corpus_f1": self.corpus_f1, "precision": self.precision, "recall": self.recall,
            "label_recall": self.label_recall, "label_counts": self.label_counts,
            **{f"{prefix}{kind}_split_pct": stats.pct(getattr(stats, kind))
               for prefix, stats in (("", pred), ("gold_", gold)) for kind in SPLIT_KINDS},
            "convention": self.convention.switches(),
            "words": self.words,
        }

    def convention_entry(self) -> dict:
        """The JSON shape of one row of ``induce eval --convention``."""
        return {"convention": self.convention.name, "gold_variant": self.gold_variant,
                "description": self.convention.describe(self.treebank), "figures": dict(self.figures),
                "n_sentences": self.n_sentences, "n_skipped": self.n_skipped, "n_errors": self.n_errors,
                "words": self.words}


# ---- per-sentence span counting ---------------------------------------------------------------------


def _spans(node: Optional[Node], rule: str, length: int) -> Counter:
    """The counted spans of one tree under a span rule (see :mod:`induce.evaluation.conventions`)."""
    if node is None:
        return Counter()
    listed = [(i, j) for _, i, j in constituents(node) if j - i >= 2]
    if rule == "kim":
        if node.length >= 2 and not node.is_word():
            listed.remove((node.start, node.end))  # only the outermost bracket (compare_trees L121-122)
        return Counter(set(listed))
    if rule in ("li_multiset", "multiset"):
        return Counter(span for span in listed if span != (0, length))
    if rule == "multiset_root":
        return Counter(listed)
    spans = set(listed)
    if rule == "no_root":
        spans.discard((0, length))
    elif rule != "with_root":
        raise ValueError(f"unknown span rule {rule!r}")
    return Counter(spans)


def sentence_prf(n_match: int, n_pred: int, n_gold: int) -> tuple[float, float, float]:
    """Per-sentence precision, recall, F1 in [0, 1] under the Kim et al. conventions for empty sets."""
    if n_gold == 0:
        recall = 1.0
        precision = 1.0 if n_pred == 0 else 0.0
    else:
        recall = n_match / n_gold
        precision = n_match / n_pred if n_pred else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall > 0 else 0.0
    return precision, recall, f1


def sentence_scores(match: int, n_pred: int, n_gold: int, formula: str) -> tuple[float, float, float]:
    """``(precision, recall, F1)`` in 0-1 of one sentence under a script's formula (conventions' docstring)."""
    if formula == "induce":  # Kim's empty-set rule, no 1e-8
        return sentence_prf(match, n_pred, n_gold)
    if formula == "epsilon":  # compare_trees L133-141, test_phrase_grammar L180-191
        precision, recall = match / (n_pred + 1e-8), match / (n_gold + 1e-8)
        if n_gold == 0:
            recall = 1.0
            precision = 1.0 if n_pred == 0 else precision
        return precision, recall, 2 * precision * recall / (precision + recall + 1e-8)
    if formula == "exact":  # eval_parsing L194-204
        if n_gold == 0 and n_pred == 0:
            return 1.0, 1.0, 1.0
        if match == 0:
            return 0.0, 0.0, 0.0
        precision, recall = match / n_pred, match / n_gold
        return precision, recall, 2 * precision * recall / (precision + recall)
    if formula == "li":  # evaluate.py L89-99
        if n_gold == 0:
            value = 1.0 if n_pred == 0 else 0.0
            return value, value, value
        if match == 0 or n_pred == 0:
            return 0.0, 0.0, 0.0
        precision, recall = match / n_pred, match / n_gold
        return precision, recall, 2 * precision * recall / (precision + recall)
    raise ValueError(f"unknown sentence formula {formula!r}")


def corpus_scores(match: int, n_pred: int, n_gold: int, formula: str) -> tuple[float, float, float]:
    """``(precision, recall, F1)`` in 0-1 of summed counts (``li``: Li et al.'s empty-set rule)."""
    if formula == "li":
        return sentence_scores(match, n_pred, n_gold, "li")
    precision = match / n_pred if n_pred else 0.0
    recall = match / n_gold if n_gold else 0.0
    return precision, recall, (2 * precision * recall / (precision + recall) if precision + recall else 0.0)


def figures_of(sentences: Sequence[SentenceCounts], convention: Convention) -> dict:
    """Every figure (percent) of scored sentences: corpus precision / recall / F1 from the summed counts
    (EVALB's percentages for EVALB conventions), and the means of the per-sentence figures."""
    precision, recall, f1 = corpus_scores(sum(s.match for s in sentences), sum(s.n_pred for s in sentences),
                                          sum(s.n_gold for s in sentences), convention.corpus_f1)
    n = len(sentences)

    def mean(values) -> float:
        return 100 * (sum(values) / n) if n else 0.0

    return {
        "corpus_precision": 100 * precision, "corpus_recall": 100 * recall, "corpus_f1": 100 * f1,
        "sentence_precision": mean(s.precision for s in sentences),
        "sentence_recall": mean(s.recall for s in sentences),
        "sentence_f1": mean(s.f1 for s in sentences),
    }


# ---- one sentence -----------------------------------------------------------------------------------


def _pred_view(aligned: Node, projected: bool, convention: Convention) -> Node:
    """The prediction as the script sees it: a projection's unary nodes collapsed (a prediction made over
    these words has none), except in DIORA's driver, which keeps them and relabels the tree, and under
    induce's ``--multiset``, which counts them."""
    if convention.evalb_prep == "diora":
        node = relabel_brackets(with_preterminals(aligned, "DT"), "S")
        if not node.children or node.label == "DT":  # one word: the driver writes (S (DT w))
            node = Node("S", node.start, node.end, [node])
        return node
    return collapse_unary(aligned) if projected and convention.spans not in ("multiset", "multiset_root") else aligned


def _diora_gold(node: Node) -> Node:
    """Gold labels with function tags cut (the driver's input has them stripped)."""
    return fold(node, lambda sub: sub.children, lambda sub, children: Node(
        strip_function_tags(sub.label) if sub.label else sub.label, sub.start, sub.end, children))


class _Tally:
    """What :func:`score` adds up besides the sentences: label recall and branching statistics."""

    def __init__(self) -> None:
        self.label_hits, self.label_totals = Counter(), Counter()
        self.pred_branching, self.gold_branching = BranchingStats(), BranchingStats()

    def add(self, gold_node: Node, aligned: Node, pred_spans: Counter, length: int, convention: Convention) -> None:
        """One sentence's gold constituents of :data:`REPORTED_LABELS` (spans of two words or more, the whole
        sentence only when the convention counts it, duplicates only in a multiset) and those the prediction
        has; the splits of both trees."""
        seen = set()
        for label, i, j in constituents(gold_node):
            label = strip_function_tags(label or "")
            if label in REPORTED_LABELS and j - i >= 2 and (convention.count_root or (i, j) != (0, length)):
                key = (label, i, j)
                if key in seen and not convention.multiset:
                    continue
                seen.add(key)
                self.label_totals[label] += 1
                self.label_hits[label] += (i, j) in pred_spans
        self.pred_branching.add(aligned)
        self.gold_branching.add(gold_node)

    def label_figures(self) -> tuple[dict, dict]:
        return ({label: 100 * self.label_hits[label] / self.label_totals[label] if self.label_totals[label] else None
                 for label in REPORTED_LABELS}, {label: self.label_totals[label] for label in REPORTED_LABELS})


def score_sentence(index: int, gold: Gold, pred: Optional[Node], pred_words, convention: Convention,
                   variant: str = "nary", where=(None, None), baseline: Optional[Callable[[int], Node]] = None,
                   words: Optional[WordCheck] = None, tally: Optional[_Tally] = None):
    """One sentence under ``convention``: a :class:`SentenceCounts`, ``"short"``, ``"long"`` (length limits; no
    token left is short), ``"skipped"`` (by EVALB) or ``"error"`` (an EVALB error sentence). ``baseline(n)``
    builds the prediction over the kept words instead of ``pred``; ``words`` checks and counts the predicted
    words (:func:`~induce.evaluation.gold.align_prediction`); ``tally`` adds its labels and splits."""
    gold_node, keep = gold_view(gold, convention, variant)
    length = sum(keep)
    if gold_node is None or length < convention.min_length:
        return "short"
    if convention.max_length and length > convention.max_length:
        return "long"
    if baseline is not None:
        aligned, projected = baseline(length), False
    else:
        kept_words = [w for w, k in zip(gold.words, keep) if k]
        aligned, projected = align_prediction(pred, pred_words, kept_words, gold.words, keep, where, words)
    pred_node = _pred_view(aligned, projected, convention)
    if convention.evalb is not None:
        counts = evalb.evalb_sentence(_diora_gold(gold_node) if convention.evalb_prep == "diora" else gold_node,
                                      pred_node, convention.evalb)
        if counts.status != evalb.VALID:
            return "error" if counts.status == evalb.ERROR else "skipped"
        match, n_pred, n_gold = counts.match, counts.n_pred, counts.n_gold
    else:
        gold_spans = _spans(gold_node, "no_root" if convention.spans == "li_multiset" else convention.spans, length)
        pred_spans = _spans(pred_node, convention.spans, length)
        match = sum((gold_spans & pred_spans).values())
        n_pred, n_gold = sum(pred_spans.values()), sum(gold_spans.values())
        if tally is not None:
            tally.add(gold_node, aligned, pred_spans, length, convention)
    precision, recall, f1 = sentence_scores(match, n_pred, n_gold, convention.sentence_f1)
    return SentenceCounts(index, length, match, n_pred, n_gold, precision, recall, f1)


# ---- a corpus ---------------------------------------------------------------------------------------


def _flat(n_words: int) -> Node:
    return Node("S", 0, n_words, [Node(None, k, k + 1) for k in range(n_words)])


def _as_prediction(item) -> tuple[Optional[Node], Optional[list]]:
    """``(Node, words or None)`` of a prediction given as an ``nltk.Tree``, a :class:`Node`, such a pair or None."""
    if item is None:
        return None, None
    if isinstance(item, nltk.Tree):
        return prediction_node(item)
    if isinstance(item, Node):
        return item, None
    return item[0], item[1]


def _check_counts(predictions: Sequence, golds: Sequence, locations: Optional[Sequence]) -> None:
    """One prediction per gold tree, or an :class:`InputError` naming the first unmatched sentence."""
    if len(predictions) == len(golds):
        return
    first = min(len(predictions), len(golds)) + 1
    where = tuple(locations[first - 1]) if locations and first <= len(locations) else (None, None)
    raise InputError(f"{len(predictions)} predicted trees but {len(golds)} gold trees "
                     f"(first unmatched sentence: {first})", *where)


def _check_variant(convention: Convention, variant: str) -> None:
    if variant not in GOLD_VARIANTS:
        raise InvalidValueError(f"--gold-variant {variant}: choose one of {', '.join(GOLD_VARIANTS)}")
    if variant != "nary" and not convention.binarisable:
        raise InduceError(f"--gold-variant {variant}: {convention.name} is labelled, and a binarised gold tree's new "
                          "nodes have no treebank label; use nary")


def score(golds: Sequence, predictions: Sequence, convention: Convention = DEFAULT, variant: str = "nary",
          locations: Optional[Sequence] = None, baseline: Optional[Callable[[int], Node]] = None,
          word_match: str = DEFAULT_WORD_MATCH, progress: Progress = None) -> Result:
    """Score one prediction per gold sentence under ``convention`` on the gold ``variant`` (``nary``, ``left``,
    ``right``: binarised after the token removal).

    golds: :class:`~induce.evaluation.gold.Gold` (:func:`~induce.evaluation.gold.load_gold`) or treebank
        trees with POS tags (prepared here, as read in ``convention.treebank``).
    predictions: per gold sentence an ``nltk.Tree`` (any labels; leaves bare words or under preterminals), a
        :class:`Node` (no words to check), a ``(Node, words or None)`` pair, or None (a sentence without a
        prediction: a one-word sentence, which gets its only tree); each over the words the convention keeps
        or over every non-trace gold token (the others are then projected away).
    baseline: ``baseline(n_words)`` builds each prediction over the kept words instead (``predictions``
        is then not read). locations: ``(path, line)`` of each prediction, for error messages.
    word_match: how the predicted words are compared with the gold's (:mod:`induce.evaluation.words`); the
        result's ``words`` counts what differed. progress: ``progress(done, total)`` every 1,000 sentences.
    """
    _check_variant(convention, variant)
    if baseline is None:
        _check_counts(predictions, golds, locations)
    golds = as_golds(golds, convention.treebank)
    treebank = convention.treebank or next((gold.treebank for gold in golds), "ptb")
    convention = convention if convention.treebank else replace(convention, treebank=treebank)  # as read
    scored, outcomes, words, tally = [], Counter(), WordCheck(word_match), _Tally()
    for index, gold in enumerate(golds):
        if progress is not None and index % 1000 == 0:
            progress(index, len(golds))
        pred, pred_words = (None, None) if baseline is not None else _as_prediction(predictions[index])
        where = tuple(locations[index]) if locations else (None, None)
        # No prediction (a one-word sentence Kim's pred_tree files skip): its only tree, flat.
        sentence_baseline = baseline or (_flat if pred is None else None)
        outcome = score_sentence(index, gold, pred, pred_words, convention, variant, where, sentence_baseline,
                                 words, tally)
        if isinstance(outcome, str):
            outcomes[outcome] += 1
        else:
            scored.append(outcome)
    if progress is not None:
        progress(len(golds), len(golds))
    label_recall, label_counts = tally.label_figures()
    return Result(convention, variant, figures_of(scored, convention), scored,
                  n_skipped=outcomes["short"] + outcomes["long"] + outcomes["skipped"], n_errors=outcomes["error"],
                  words=words.summary() if words.sentences else None, treebank=treebank,
                  n_too_short=outcomes["short"], n_too_long=outcomes["long"], label_recall=label_recall,
                  label_counts=label_counts, pred_branching=tally.pred_branching, gold_branching=tally.gold_branching)


def require_sentences(result: Result, length_option: str = "the maximum length") -> None:
    """Raise :class:`InduceError` when the length filters left no sentence: an F1 over none is undefined.

    The message says how many gold sentences were read and how many each filter removed;
    ``length_option`` names where the maximum length came from (e.g. ``--wsj10``).
    """
    if result.n_sentences:
        return
    convention = result.convention
    read = result.n_sentences + result.n_skipped
    removal = "trace removal" if convention.keep_punct else "punctuation and trace removal"
    parts = []
    if result.n_too_long:
        parts.append(f"{result.n_too_long} longer than {convention.max_length} words ({length_option})")
    if result.n_too_short:
        parts.append(f"{result.n_too_short} shorter than {convention.min_length} words (always skipped)")
    removed = f": {' and '.join(parts)}, counted after {removal}" if parts else ""
    raise InduceError(
        f"no sentence left to evaluate: {read} gold sentence{'s' if read != 1 else ''} read, "
        f"all removed by the length filters{removed}; an F1 over no sentences is undefined"
    )


def summary(result: Result, predicted: str, gold, resamples: int = 1000, seed: int = 0) -> dict:
    """The dict ``induce eval --json`` prints: :meth:`Result.to_dict` with ``predicted`` (what was scored, as
    printed), ``gold`` and ``treebank`` (of the :class:`~induce.evaluation.gold.GoldSet`) and ``ci``: 95%
    bootstrap intervals of the F1 figures (``resamples``, ``seed``:
    :func:`induce.evaluation.bootstrap.result_intervals`)."""
    from induce.trees.treebanks import get_profile

    from .bootstrap import result_intervals

    out = result.to_dict()
    out.update({"predicted": predicted, "gold": gold.label, "treebank": get_profile(gold.treebank).describe()})
    out["ci"] = result_intervals(result, resamples, seed)
    return out


def mean_std(values) -> dict:
    """``{"mean", "std", "n"}`` of the finite values (sample std, None for fewer than 2)."""
    finite = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not finite:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(finite), "std": statistics.stdev(finite) if len(finite) > 1 else None,
            "n": len(finite)}

"""Unlabeled bracketing F1, per-label recall and branching statistics.

The default :class:`EvalConvention` is the one of Kim et al. (2019), used by most work on
unsupervised constituency parsing:

* punctuation and traces removed by the word-tag filter: only leaves whose gold POS tag is in
  :data:`induce.trees.ptb.WORD_TAGS` are kept (``$`` and ``#`` go too);
* length filters apply to the sentence after that removal; sentences of length 1 are skipped;
* spans of length 1 and the whole-sentence span are not counted; spans are sets;
* per-sentence F1 when the gold tree has no span: recall 1, and precision 1 if the prediction
  has none either (so F1 = 1); a prediction with spans against such a gold tree has precision 0
  (F1 = 0). Sentence F1 is the mean of per-sentence F1; corpus F1 is computed from the counts
  summed over the corpus.

Branching statistics (PaLM, Peng et al. 2019, Table 4): among the nodes that split a span of
more than 2 words, the share of *left* splits ``[i, j] -> [i, j-1] + (j)``, of *right* splits
``[i, j] -> (i) + [i+1, j]``, of other binary splits, and of n-ary nodes (more than two
children: neither left nor right; they occur only in gold trees). Unary nodes are not splits.
"""
from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field, replace
from typing import Callable, Optional, Sequence

import nltk

from induce.errors import InduceError, InputError
from induce.trees.nodes import Node, branching_nodes, constituents, from_nltk, prune, tagged_leaves
from induce.trees.ptb import TRACE_TAG, WORD_TAGS, strip_function_tags

from .words import WordCheck

#: Gold labels whose recall is reported.
REPORTED_LABELS = ("NP", "VP", "PP", "SBAR", "ADJP", "ADVP")


@dataclass(frozen=True)
class EvalConvention:
    """Every switchable choice of the evaluation protocol (defaults: Kim et al. 2019)."""

    keep_punct: bool = False  # True: no word-tag filter (traces are still removed)
    count_root: bool = False  # True: the whole-sentence span counts
    multiset: bool = False  # True: duplicate spans (unary chains) count as often as they occur
    min_length: int = 2  # shorter sentences (after removal) are skipped
    max_length: Optional[int] = None  # longer sentences (after removal) are skipped (WSJ10: 10, WSJ40: 40)
    treebank: Optional[str] = None  # whose punctuation and words (induce.trees.treebanks); None: the gold's, else ptb

    def describe(self) -> str:
        if (self.treebank or "ptb") == "ptb":
            removal = "punctuation and traces removed by the word-tag filter (Kim et al. 2019)"
        else:
            from induce.trees.treebanks import get_profile

            profile = get_profile(self.treebank)
            removal = f"{profile.title}: punctuation ({' '.join(sorted(profile.punct_tags))}) removed"
        parts = [
            "punctuation kept (traces removed)" if self.keep_punct else removal,
            f"sentences of length < {self.min_length} skipped"
            + (f", length <= {self.max_length} after removal" if self.max_length else ", all lengths"),
            "length-1 spans not counted",
            "whole-sentence span counted" if self.count_root else "whole-sentence span not counted",
            "spans counted as a multiset" if self.multiset else "spans counted as sets",
        ]
        return "; ".join(parts)


@dataclass
class SentenceScore:
    index: int
    length: int
    f1: float
    precision: float
    recall: float
    n_pred: int
    n_gold: int
    n_match: int


@dataclass
class BranchingStats:
    n_splits: int = 0
    left: int = 0
    right: int = 0
    other_binary: int = 0
    nary: int = 0

    def add(self, node: Node) -> None:
        for _length, children in branching_nodes(node):
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
class EvalResult:
    convention: EvalConvention
    n_sentences: int
    n_skipped: int
    sentence_f1: float
    corpus_f1: float
    precision: float
    recall: float
    label_recall: dict
    label_counts: dict
    pred_branching: BranchingStats
    gold_branching: BranchingStats
    sentences: list = field(default_factory=list)
    n_too_short: int = 0  # skipped: fewer than convention.min_length words after removal
    n_too_long: int = 0  # skipped: more than convention.max_length words after removal
    words: Optional[dict] = None  # how the predicted words matched the gold's (WordCheck.summary)

    def to_dict(self) -> dict:
        """The JSON shape of ``induce eval --json`` (F1 and percentages in 0-100)."""
        pred, gold = self.pred_branching, self.gold_branching
        return {
            "n_sentences": self.n_sentences,
            "n_skipped": self.n_skipped,
            "sentence_f1": self.sentence_f1,
            "corpus_f1": self.corpus_f1,
            "precision": self.precision,
            "recall": self.recall,
            "label_recall": self.label_recall,
            "label_counts": self.label_counts,
            "left_split_pct": pred.pct(pred.left),
            "right_split_pct": pred.pct(pred.right),
            "other_binary_split_pct": pred.pct(pred.other_binary),
            "nary_split_pct": pred.pct(pred.nary),
            "gold_left_split_pct": gold.pct(gold.left),
            "gold_right_split_pct": gold.pct(gold.right),
            "gold_other_binary_split_pct": gold.pct(gold.other_binary),
            "gold_nary_split_pct": gold.pct(gold.nary),
            "convention": {**asdict(self.convention), "description": self.convention.describe()},
            "words": self.words,
        }


@dataclass(slots=True)  # slots: a 40,000-tree evaluation holds one per sentence
class GoldSentence:
    """A gold tree reduced to what the evaluator needs."""

    words: list  # words kept by the convention
    all_words: list  # every non-trace word (what a prediction with punctuation covers)
    keep: list  # per entry of all_words: kept by the convention?
    tree: Optional[Node]  # over `words`; None when no word is kept
    labelled: list  # [(label, start, end)] of the kept tree, function tags stripped
    treebank: str = "ptb"  # whose tags (induce.trees.treebanks): which tokens are words and punctuation


#: Labels of the outermost wrapper bracket that treebank files put around a sentence.
WRAPPER_LABELS = ("", "ROOT", "TOP")


def unwrap(tree: nltk.Tree) -> nltk.Tree:
    """Drop unary wrapper brackets (``( (S ...) )``, ``(ROOT (S ...))``, ``(TOP ...)``)."""
    while (isinstance(tree, nltk.Tree) and tree.label() in WRAPPER_LABELS and len(tree) == 1
           and isinstance(tree[0], nltk.Tree)):
        tree = tree[0]
    return tree


def prepare_gold(tree: nltk.Tree, convention: EvalConvention) -> GoldSentence:
    """Remove traces (always) and, unless ``keep_punct``, every non-word leaf, from a treebank tree; the words
    are those of the convention's treebank (:mod:`induce.trees.treebanks`: the PTB's word tags by default).
    A tree of another treebank is first reduced as its profile says (a raw Keyaki tree: its ``ID`` node, empty
    elements and unary chains go, as Li et al. do; a tree prepared so already is unchanged)."""
    treebank = convention.treebank or getattr(tree, "treebank", None) or "ptb"  # treebanks.mark
    is_word = _word_filter(treebank)
    if treebank != "ptb":
        from induce.trees.treebanks import get_profile

        tree = get_profile(treebank).gold_tree(tree) or nltk.Tree("", [])
    tree = unwrap(tree)
    tagged = tagged_leaves(tree)
    pos = [(word, tag) for word, tag, _ in tagged if tag != TRACE_TAG]
    all_words = [word for word, _ in pos]
    keep = [convention.keep_punct or is_word(tag) for _, tag in pos]
    # Index tree over the non-trace words: rebuild from the tree with traces pruned.
    full = from_nltk(tree)
    no_trace = _prune_unless_all(full, [tag != TRACE_TAG for _, tag, _ in tagged])
    kept = _prune_unless_all(no_trace, keep) if no_trace is not None else None
    words = [w for w, k in zip(all_words, keep) if k]
    labelled = []
    if kept is not None:
        # Preterminals are length-1 nodes; they are dropped with the other length-1 spans later.
        labelled = [(strip_function_tags(label or ""), i, j) for label, i, j in constituents(kept)]
    return GoldSentence(words, all_words, keep, kept, labelled, treebank)


def _word_filter(treebank: str) -> Callable[[Optional[str]], bool]:
    if treebank == "ptb":
        return WORD_TAGS.__contains__
    from induce.trees.treebanks import get_profile

    return get_profile(treebank).is_word


def _prune_unless_all(node: Node, keep: list) -> Optional[Node]:
    """:func:`prune`, skipped when every word is kept (``node`` has no empty constituent: it comes from
    :func:`from_nltk` or :func:`prune`, which drop them)."""
    return node if keep and all(keep) else prune(node, keep)


def _counted_spans(labelled_or_plain, length: int, convention: EvalConvention) -> Counter:
    spans = Counter()
    for item in labelled_or_plain:
        i, j = item[-2], item[-1]
        if j - i < 2:
            continue
        if not convention.count_root and (i, j) == (0, length):
            continue
        spans[(i, j)] += 1
    if not convention.multiset:
        spans = Counter(set(spans))
    return spans


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


def prediction_node(tree: nltk.Tree) -> tuple[Node, list]:
    """Index tree and words of a predicted tree; trace leaves (under ``-NONE-``) are dropped."""
    tree = unwrap(tree)
    tagged = tagged_leaves(tree)
    is_word = [depth < 2 or tag != TRACE_TAG for _, tag, depth in tagged]
    node, words = from_nltk(tree), [leaf for leaf, _, _ in tagged]
    if not all(is_word):
        node = prune(node, is_word)
        words = [w for w, keep in zip(words, is_word) if keep]
    return node, words


def _align_prediction(pred: Node, gold: GoldSentence, pred_words: Optional[Sequence[str]], where,
                      words: Optional[WordCheck] = None) -> Optional[Node]:
    """Bring a predicted tree onto the gold's kept words (projecting away punctuation if it covers it); its
    words are checked against the gold's by ``words`` (:mod:`induce.evaluation.words`)."""
    n_pred = pred.end - pred.start
    if n_pred == len(gold.words):
        aligned, compare_to = pred, gold.words
    elif n_pred == len(gold.all_words):
        aligned, compare_to = prune(pred, gold.keep), gold.all_words
    else:
        raise InputError(
            f"the predicted tree has {n_pred} leaves but the gold sentence has {len(gold.words)} words "
            f"({len(gold.all_words)} with punctuation): {' '.join(gold.all_words)[:200]}",
            *where,
        )
    if pred_words is not None and words is not None:
        words.check(pred_words, compare_to, where)
    return aligned


def _check_same_count(pred_trees: Sequence, gold_trees: Sequence, pred_locations: Optional[Sequence[tuple]]) -> None:
    """One prediction per gold tree, or an :class:`InputError` naming the first unmatched sentence."""
    if len(pred_trees) == len(gold_trees):
        return
    first = min(len(pred_trees), len(gold_trees)) + 1
    where = pred_locations[first - 1] if pred_locations and first <= len(pred_locations) else (None, None)
    raise InputError(
        f"{len(pred_trees)} predicted trees but {len(gold_trees)} gold trees "
        f"(first unmatched sentence: {first})",
        *where,
    )


def _count_label_recall(gold: GoldSentence, pred_spans: Counter, convention: EvalConvention,
                        label_hits: Counter, label_totals: Counter) -> None:
    """Add one sentence's gold constituents of :data:`REPORTED_LABELS` (spans of two words or more, the
    whole sentence only with ``count_root``, duplicates only with ``multiset``) to ``label_totals``, and
    those the prediction has to ``label_hits``."""
    length = len(gold.words)
    seen = set()
    for label, i, j in gold.labelled:
        if label in REPORTED_LABELS and j - i >= 2 and (convention.count_root or (i, j) != (0, length)):
            key = (label, i, j)
            if key in seen and not convention.multiset:
                continue
            seen.add(key)
            label_totals[label] += 1
            label_hits[label] += (i, j) in pred_spans


def evaluate(
    pred_trees: Sequence,
    gold_trees: Sequence[nltk.Tree],
    convention: EvalConvention = EvalConvention(),
    pred_locations: Optional[Sequence[tuple]] = None,
    check_words: bool = True,
    progress: Optional[Callable[[int, int], None]] = None,
    word_match: str = "normalized",
) -> EvalResult:
    """Score predicted trees against gold trees.

    pred_trees: ``nltk.Tree`` (any labels; leaves bare words or under preterminals) or
        :class:`Node` (no words to check), one per gold tree; covering either the words kept by
        the convention or every non-trace gold token (then punctuation is projected away).
    gold_trees: treebank trees with POS tags (traces and function tags are removed here), or the
        :class:`GoldSentence` of each made by :func:`prepare_gold` under the same convention.
    progress: called as ``progress(done, total)`` every 1,000 sentences and at the end.
    pred_locations: ``(path, line)`` of each prediction, for error messages.
    word_match: how a prediction's words are compared with the gold's (``exact``, ``normalized``, ``position``:
        :mod:`induce.evaluation.words`); what differed is counted in the result's ``words``.
    """
    _check_same_count(pred_trees, gold_trees, pred_locations)
    words = WordCheck(word_match) if check_words else None
    label_hits, label_totals = Counter(), Counter()
    tp = fp = fn = 0
    scores: list[SentenceScore] = []
    pred_branching, gold_branching = BranchingStats(), BranchingStats()
    too_short = too_long = 0
    for index, (pred, gold_tree) in enumerate(zip(pred_trees, gold_trees)):
        if progress is not None and index % 1000 == 0:
            progress(index, len(gold_trees))
        where = tuple(pred_locations[index]) if pred_locations else (None, None)
        gold = gold_tree if isinstance(gold_tree, GoldSentence) else prepare_gold(gold_tree, convention)
        convention = convention if convention.treebank else replace(convention, treebank=gold.treebank)  # as read
        length = len(gold.words)
        if length < convention.min_length:
            too_short += 1
            continue
        if convention.max_length and length > convention.max_length:
            too_long += 1
            continue
        if isinstance(pred, Node):
            pred_node, pred_words = pred, None
        else:
            pred_node, pred_words = prediction_node(pred)
        aligned = _align_prediction(pred_node, gold, pred_words, where, words)
        pred_spans = _counted_spans(constituents(aligned), length, convention)
        gold_spans = _counted_spans(gold.labelled, length, convention)
        match = sum((pred_spans & gold_spans).values())
        n_pred, n_gold = sum(pred_spans.values()), sum(gold_spans.values())
        tp, fp, fn = tp + match, fp + n_pred - match, fn + n_gold - match
        precision, recall, f1 = sentence_prf(match, n_pred, n_gold)
        scores.append(SentenceScore(index, length, f1, precision, recall, n_pred, n_gold, match))
        _count_label_recall(gold, pred_spans, convention, label_hits, label_totals)
        pred_branching.add(aligned)
        gold_branching.add(gold.tree)
    if progress is not None:
        progress(len(gold_trees), len(gold_trees))
    precision = tp / (tp + fp) if tp + fp else 0.0
    recall = tp / (tp + fn) if tp + fn else 0.0
    corpus_f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    sentence_f1 = sum(s.f1 for s in scores) / len(scores) if scores else 0.0
    return EvalResult(
        convention=convention,
        n_sentences=len(scores),
        n_skipped=too_short + too_long,
        sentence_f1=100 * sentence_f1,
        corpus_f1=100 * corpus_f1,
        precision=100 * precision,
        recall=100 * recall,
        label_recall={label: 100 * label_hits[label] / label_totals[label] if label_totals[label] else None
                      for label in REPORTED_LABELS},
        label_counts={label: label_totals[label] for label in REPORTED_LABELS},
        pred_branching=pred_branching,
        gold_branching=gold_branching,
        sentences=scores,
        n_too_short=too_short,
        n_too_long=too_long,
        words=words.summary() if words is not None and words.sentences else None,
    )


def mean_std(values) -> dict:
    """``{"mean", "std", "n"}`` of the finite values (sample std, None for fewer than 2)."""
    finite = [float(v) for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    if not finite:
        return {"mean": None, "std": None, "n": 0}
    return {"mean": statistics.fmean(finite), "std": statistics.stdev(finite) if len(finite) > 1 else None,
            "n": len(finite)}


def require_sentences(result: EvalResult, length_option: str = "the maximum length") -> None:
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

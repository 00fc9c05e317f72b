"""The published evaluation conventions of unsupervised constituency parsing, by name, each equal to its
authors' own scoring script (``induce eval --convention NAME``).

Each :class:`Convention` is data: which tokens it keeps (by the gold POS tag), how it reshapes the gold
and predicted trees, which spans it counts, which sentences it scores and how it averages. The originals
were read at these commits, and run on the test fixtures (``tests/data/conventions/README.md`` has the
commands and their printed figures, which the tests reproduce to the printed digit):

=================== ===============================================================================
``induce``          the default of ``induce eval`` (:mod:`induce.evaluation.metrics`): Kim et al.'s rules, but every
                    copy of the whole-sentence span dropped and no ``1e-8`` in sentence F1
``kim2019``         harvardnlp/compound-pcfg ``4af1eb0`` ``compare_trees.py`` (Kim et al. 2019)
``onlstm``          yikangshen/Ordered-Neurons ``46d63cd`` ``test_phrase_grammar.py``
``onlstm-evalb``    the EVALB figure the same script prints (``utils.evalb``: COLLINS.prm on relabelled trees)
``prpn``            yikangshen/PRPN ``42212fb`` ``test_phrase_grammar.py`` (WSJ10)
``palm``            Noahs-ARK/PaLM ``0888e06`` ``eval_parsing.py`` + ``utils.get_brackets`` (WSJ40)
``li2020``          i-lijun/UnsupConstParseEval ``afa5176`` ``evaluate.py``: micro and macro F1, ``ptb`` no-punct
``li2020-punct``    the same on their ``punct`` data (punctuation kept)
``li2020-evalb``    the EVALB figure of the same script (its ``evalb.prm``), no-punct / ``-punct``
``evalb-diora``     DIORA ``110b9b0`` ``scripts/evalb.py`` + EVALB with ``diora.prm``
``evalb-collins``   the same driver with ``COLLINS.prm`` (labelled; predicted brackets are labelled ``S``)
=================== ===============================================================================

What they differ in (each rule with the file and lines of the original in the comments below; summarised in
``bench/RESULTS.md``, "Evaluation conventions, agreement and ensembles"):

* **tokens** — ``word_tags``: leaves whose gold POS is a word tag (:data:`induce.trees.ptb.WORD_TAGS`);
  ``li_nopunct``: Li et al.'s PTB punctuation set removed (``$`` stays, ``SYM``/``LS`` go); ``li_punct``:
  only ``-NONE- ID META LS LST`` removed;
* **spans** — ``kim``: every bracket of 2+ words, a unary chain counting its span once per node, then
  only the *outermost* bracket dropped, as a set (a gold tree whose root is a unary chain keeps the
  whole-sentence span once: it can never be matched); ``no_root``: the distinct spans of 2+ words but
  the whole sentence; ``with_root``: the same with the whole sentence; ``li_multiset``: every bracket of
  2+ words, each whole-sentence copy dropped, duplicates counted (gold trees are unary-collapsed first,
  so only a prediction's duplicates count);
* **sentences** — ``min_length`` / ``max_length`` on the gold length in the convention's tokens (Kim: no
  sentence of length 1; ON-LSTM, PRPN, PaLM, Li: they are kept and score 100);
* **sentence F1** — ``epsilon``: Kim's/ON-LSTM's ``2pr / (p + r + 1e-8)`` with ``1e-8`` in ``p`` and ``r``
  (an empty gold set: recall 1, precision 1 if the prediction is empty too); ``exact``: PaLM's (both
  empty: 1; no overlap: 0); ``li``: Li et al.'s (empty gold: 100 if the prediction is empty else 0);
* **EVALB** (:mod:`induce.evaluation.evalb`) — the gold and predicted trees prepared as the script's
  driver does (``evalb_prep``): ``diora`` removes the word-tag filter's tokens from both trees without
  collapsing the unary nodes this leaves (so they count), labels every predicted bracket ``S`` and every
  preterminal ``DT``; ``li`` scores their unary-collapsed gold trees.

Where the originals evaluate on data we do not pick for the user (ON-LSTM's and PRPN's ``--wsj10`` read the
training sections 00-24), the convention scores the gold the user gives and says so in its ``notes``.
"""
from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from induce.errors import InduceError, InputError, InvalidValueError
from induce.trees.nodes import Node, constituents, fold, prune
from induce.trees.ptb import WORD_TAGS, strip_function_tags
from induce.trees.transforms import (
    binarise,
    collapse_unary,
    leaf_tags,
    relabel_brackets,
    with_preterminals,
)

from . import evalb
from .words import DEFAULT_WORD_MATCH, WordCheck, words_match

#: Li et al.'s removals: always, and with their ``ptb`` punctuation set (preprocess.py L86-89, L205-209).
LI_ALWAYS = frozenset({"-NONE-", "ID", "META", "LS", "LST"})
LI_PUNCT = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "#", "LS", "LST", "SYM"})

TOKEN_FILTERS: dict[str, Callable[[str | None], bool]] = {
    "word_tags": lambda tag: tag in WORD_TAGS,
    "li_nopunct": lambda tag: tag not in LI_ALWAYS and tag not in LI_PUNCT,
    "li_punct": lambda tag: tag not in LI_ALWAYS,
}
GOLD_VARIANTS = ("nary", "left", "right")


def token_filter(tokens: str, treebank: str = "ptb") -> Callable[[str | None], bool]:
    """Which gold tags a convention's ``tokens`` keep in a treebank (:mod:`induce.trees.treebanks`): for the
    PTB, :data:`TOKEN_FILTERS`; for another treebank, ``word_tags`` keeps its words (its profile's
    punctuation removed) and ``li_nopunct`` removes Li et al.'s punctuation table for that treebank (their
    ``ktb`` table for the Keyaki Treebank)."""
    if treebank == "ptb":
        return TOKEN_FILTERS[tokens]
    from induce.trees.treebanks import get_profile

    profile = get_profile(treebank)
    if tokens == "word_tags":
        return profile.is_word
    if tokens == "li_nopunct":
        return lambda tag: tag not in LI_ALWAYS and tag not in profile.li_punct
    return TOKEN_FILTERS[tokens]


@dataclass(frozen=True)
class Figure:
    """One number a script prints: ``key`` of :attr:`ConventionResult.figures`, its label, and the digits
    the script prints it with (as a percentage)."""

    key: str
    label: str
    digits: int = 2


@dataclass(frozen=True)
class Convention:
    """One published convention (see the module docstring for each switch)."""

    name: str
    title: str
    reference: str
    tokens: str
    figures: tuple
    spans: str = "no_root"
    min_length: int = 1
    max_length: int | None = None
    sentence_f1: str = "epsilon"
    corpus_f1: str = "plain"
    evalb: evalb.EvalbParams | None = None
    evalb_prep: str = ""
    notes: str = ""

    @property
    def binarisable(self) -> bool:
        """Gold trees can be binarised: the new nodes have no label, so not under labelled EVALB."""
        return not (self.evalb is not None and self.evalb.labelled)

    def describe(self, treebank: str = "ptb") -> str:
        """Title, source and limits; ``treebank`` names whose punctuation table Li et al.'s conventions use (the
        title says ``ptb``, which :func:`token_filter` replaces by the gold treebank's own)."""
        limits = f"sentences of {self.min_length}" + (f"-{self.max_length}" if self.max_length else "+") + " tokens"
        title = self.title.replace("(ptb,", f"({treebank},") if treebank != "ptb" else self.title
        return f"{title} ({self.reference}); {limits}" + (f"; {self.notes}" if self.notes else "")


def _li(name: str, tokens: str, extra: str, **switches) -> Convention:
    return Convention(name, "Li et al. 2020" + extra, "i-lijun/UnsupConstParseEval@afa5176 evaluate.py", tokens,
                      **switches)


CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    Convention("induce", "induce's default (Kim et al.'s rules, every whole-sentence copy dropped)",
               "induce.evaluation.metrics", "word_tags",
               (Figure("corpus_f1", "corpus F1"), Figure("sentence_f1", "sentence F1")),
               min_length=2, sentence_f1="induce"),
    Convention("kim2019", "Kim et al. 2019 compare_trees", "harvardnlp/compound-pcfg@4af1eb0 compare_trees.py",
               "word_tags", (Figure("corpus_f1", "corpus F1"), Figure("sentence_f1", "sentence F1")),
               spans="kim", min_length=2),
    Convention("onlstm", "ON-LSTM test_phrase_grammar", "yikangshen/Ordered-Neurons@46d63cd test_phrase_grammar.py",
               "word_tags", (Figure("sentence_f1", "mean F1"), Figure("sentence_precision", "mean prec"),
                             Figure("sentence_recall", "mean reca")),
               notes="its --wsj10 reads the training sections 00-24: here the gold you give"),
    Convention("onlstm-evalb", "ON-LSTM's EVALB figure", "yikangshen/Ordered-Neurons@46d63cd utils.evalb + COLLINS.prm",
               "word_tags", (Figure("corpus_f1", "EVALB F1"), Figure("corpus_precision", "EVALB prec"),
                             Figure("corpus_recall", "EVALB reca")),
               spans="with_root", notes="unary-collapsed trees all labelled <unk>: the whole sentence counts"),
    Convention("prpn", "PRPN test_phrase_grammar (WSJ10)", "yikangshen/PRPN@42212fb test_phrase_grammar.py",
               "word_tags", (Figure("sentence_f1", "mean F1", 4), Figure("sentence_precision", "mean prec", 4),
                             Figure("sentence_recall", "mean reca", 4)),
               max_length=10, notes="it reads WSJ10 from the training sections 00-24: here the gold you give"),
    Convention("palm", "PaLM eval_parsing (WSJ40)", "Noahs-ARK/PaLM@0888e06 eval_parsing.py, utils.get_brackets",
               "word_tags", (Figure("sentence_f1", "mean F1"), Figure("corpus_f1", "corpus F1"),
                             Figure("sentence_precision", "mean prec"), Figure("sentence_recall", "mean reca")),
               spans="with_root", max_length=40, sentence_f1="exact"),
    _li("li2020", "li_nopunct", " (ptb, no punctuation)",
        figures=(Figure("corpus_f1", "micro F1"), Figure("sentence_f1", "macro F1")),
        spans="li_multiset", sentence_f1="li", corpus_f1="li"),
    _li("li2020-punct", "li_punct", " (ptb, punctuation kept)",
        figures=(Figure("corpus_f1", "micro F1"), Figure("sentence_f1", "macro F1")),
        spans="li_multiset", sentence_f1="li", corpus_f1="li"),
    _li("li2020-evalb", "li_nopunct", " EVALB (ptb, no punctuation)", figures=(Figure("corpus_f1", "EVALB F1"),),
        evalb=evalb.LI2020, evalb_prep="li"),
    _li("li2020-evalb-punct", "li_punct", " EVALB (ptb, punctuation kept)", figures=(Figure("corpus_f1", "EVALB F1"),),
        evalb=evalb.LI2020, evalb_prep="li"),
    Convention("evalb-diora", "EVALB diora.prm via DIORA's driver", "mrdrozdov/diora@110b9b0 scripts/evalb.py",
               "word_tags", (Figure("corpus_f1", "F"), Figure("corpus_recall", "R"), Figure("corpus_precision", "P")),
               evalb=evalb.DIORA, evalb_prep="diora"),
    Convention("evalb-collins", "EVALB COLLINS.prm via DIORA's driver", "mrdrozdov/diora@110b9b0 scripts/evalb.py",
               "word_tags", (Figure("corpus_f1", "F"), Figure("corpus_recall", "R"), Figure("corpus_precision", "P")),
               evalb=evalb.COLLINS, evalb_prep="diora",
               notes="labelled: every predicted bracket is labelled S, as the driver writes it"),
)}


def get_convention(name: str, where: str = "--convention") -> Convention:
    if name not in CONVENTIONS:
        raise InvalidValueError(f"{where} {name}: unknown convention; choose one of {', '.join(CONVENTIONS)}")
    return CONVENTIONS[name]


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
class ConventionResult:
    """A convention's figures (percent) on one gold variant, with the per-sentence counts they come from."""

    convention: Convention
    gold_variant: str
    figures: dict
    sentences: list = field(default_factory=list)
    n_skipped: int = 0
    n_errors: int = 0
    words: dict | None = None  # how the predicted words matched the gold's (WordCheck.summary)
    treebank: str = "ptb"  # the gold's (induce.trees.treebanks)

    def to_dict(self) -> dict:
        return {"convention": self.convention.name, "gold_variant": self.gold_variant,
                "description": self.convention.describe(self.treebank), "figures": dict(self.figures),
                "n_sentences": len(self.sentences), "n_skipped": self.n_skipped, "n_errors": self.n_errors,
                "words": self.words}


# ---- per-sentence span counting ---------------------------------------------------------------------


def _spans(node: Node | None, rule: str, length: int) -> Counter:
    """The counted spans of one tree under a span rule (see the module docstring)."""
    if node is None:
        return Counter()
    listed = [(i, j) for _, i, j in constituents(node) if j - i >= 2]
    if rule == "kim":
        if node.length >= 2 and not node.is_word():
            listed.remove((node.start, node.end))  # only the outermost bracket (compare_trees L121-122)
        return Counter(set(listed))
    if rule == "li_multiset":
        return Counter(span for span in listed if span != (0, length))
    spans = set(listed)
    if rule == "no_root":
        spans.discard((0, length))
    elif rule != "with_root":
        raise ValueError(f"unknown span rule {rule!r}")
    return Counter(spans)


def sentence_scores(match: int, n_pred: int, n_gold: int, formula: str) -> tuple[float, float, float]:
    """``(precision, recall, F1)`` in 0-1 of one sentence under a script's formula (module docstring)."""
    if formula == "epsilon":  # compare_trees L133-141, test_phrase_grammar L180-191
        precision, recall = match / (n_pred + 1e-8), match / (n_gold + 1e-8)
        if n_gold == 0:
            recall = 1.0
            precision = 1.0 if n_pred == 0 else precision
        return precision, recall, 2 * precision * recall / (precision + recall + 1e-8)
    if formula == "induce":  # induce.evaluation.metrics.sentence_prf: Kim's empty-set rule, no 1e-8
        from .metrics import sentence_prf

        return sentence_prf(match, n_pred, n_gold)
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
    match = sum(s.match for s in sentences)
    n_pred = sum(s.n_pred for s in sentences)
    n_gold = sum(s.n_gold for s in sentences)
    precision, recall, f1 = corpus_scores(match, n_pred, n_gold, convention.corpus_f1)
    n = len(sentences)
    return {
        "corpus_precision": 100 * precision, "corpus_recall": 100 * recall, "corpus_f1": 100 * f1,
        "sentence_precision": 100 * sum(s.precision for s in sentences) / n if n else 0.0,
        "sentence_recall": 100 * sum(s.recall for s in sentences) / n if n else 0.0,
        "sentence_f1": 100 * sum(s.f1 for s in sentences) / n if n else 0.0,
    }


# ---- preparing the two trees ------------------------------------------------------------------------


@dataclass
class FullGold:
    """A gold tree over every non-trace token (raw labels, POS preterminals), and its words."""

    tree: Node
    words: list
    treebank: str = "ptb"  # whose tags (induce.trees.treebanks)

    @property
    def tags(self) -> list:
        return leaf_tags(self.tree)


def full_gold(sentence) -> FullGold | None:
    """:class:`FullGold` of a :class:`~induce.evaluation.metrics.GoldSentence` prepared with punctuation
    kept (``EvalConvention(keep_punct=True)``); None for a tree of traces only."""
    return None if sentence.tree is None else FullGold(sentence.tree, list(sentence.all_words),
                                                       getattr(sentence, "treebank", "ptb"))


def gold_view(gold: FullGold, convention: Convention, variant: str) -> tuple[Node | None, list]:
    """The gold tree in the convention's tokens, reshaped as its script does, and the keep mask."""
    keep_tag = token_filter(convention.tokens, gold.treebank)
    keep = [keep_tag(tag) for tag in gold.tags]
    node = prune(gold.tree, keep)
    if node is None:
        return None, keep
    if convention.evalb_prep == "li":
        node = collapse_unary(node, keep_root_child=True)
    if variant != "nary":
        node = binarise(node, variant)
    return node, keep


def prediction_fits(pred_words: Sequence[str], gold_tokens: Sequence[str]) -> bool:
    """Whether a prediction's words are the gold sentence's tokens or some of them, in order
    (:func:`induce.evaluation.words.words_match`, ``normalized``): whichever tokens a convention keeps, a
    prediction of this sentence passes, and a prediction of another sentence (a line repeated or left out)
    does not, but for sentences whose words are among each other's."""
    tokens = iter(gold_tokens)
    return all(any(words_match(word, token) for token in tokens) for word in pred_words)


def align_prediction(pred: Node, pred_words: Sequence[str] | None, kept_words: Sequence[str],
                     all_words: Sequence[str], keep: Sequence[bool], where=(None, None),
                     words: WordCheck | None = None) -> tuple[Node, bool]:
    """``(tree over the kept words, projected?)``: a prediction over the kept words is taken as it is; one
    over every token has the others removed. Any other length is an :class:`InputError` naming the line;
    the words are checked by ``words`` (a normalized :class:`~induce.evaluation.words.WordCheck` when None),
    which refuses a word its mode does not accept, naming the line and both words."""
    n_pred = pred.end - pred.start
    if n_pred == len(kept_words):
        aligned, compare_to, projected = pred, kept_words, False
    elif n_pred == len(all_words):
        aligned, compare_to, projected = prune(pred, keep), all_words, True
    else:
        raise InputError(
            f"the predicted tree has {n_pred} leaves but the gold sentence has {len(kept_words)} words under this "
            f"convention ({len(all_words)} tokens in all): {' '.join(all_words)[:200]}", *where)
    if pred_words is not None:
        (words if words is not None else WordCheck(DEFAULT_WORD_MATCH)).check(pred_words, compare_to, where)
    return aligned, projected


def _pred_view(aligned: Node, projected: bool, convention: Convention) -> Node:
    """The prediction as the script sees it: a projection's unary nodes collapsed (a prediction made over
    these words has none), except in DIORA's driver, which keeps them and relabels the tree."""
    if convention.evalb_prep == "diora":
        node = relabel_brackets(with_preterminals(aligned, "DT"), "S")
        if not node.children or node.label == "DT":  # one word: the driver writes (S (DT w))
            node = Node("S", node.start, node.end, [node])
        return node
    return collapse_unary(aligned) if projected else aligned


def _diora_gold(node: Node) -> Node:
    """Gold labels with function tags cut (the driver's input has them stripped)."""
    return fold(node, lambda sub: sub.children, lambda sub, children: Node(
        strip_function_tags(sub.label) if sub.label else sub.label, sub.start, sub.end, children))


def score_sentence(index: int, gold: FullGold, pred: Node | None, pred_words, convention: Convention,
                   variant: str = "nary", where=(None, None), baseline: Callable[[int], Node] | None = None,
                   max_length: int | None = None, words: WordCheck | None = None):
    """One sentence under ``convention``: a :class:`SentenceCounts`, ``"skipped"`` (length filter or no token
    left) or ``"error"`` (an EVALB error sentence). ``baseline(n)`` builds the prediction over the kept
    words instead of ``pred``; ``words`` checks and counts the predicted words (:func:`align_prediction`)."""
    gold_node, keep = gold_view(gold, convention, variant)
    length = sum(keep)
    limit = min(x for x in (convention.max_length, max_length, 10**9) if x is not None)
    if gold_node is None or length < convention.min_length or length > limit:
        return "skipped"
    kept_words = [w for w, k in zip(gold.words, keep) if k]
    if baseline is not None:
        aligned, projected = baseline(length), False
    else:
        aligned, projected = align_prediction(pred, pred_words, kept_words, gold.words, keep, where, words)
    pred_node = _pred_view(aligned, projected, convention)
    if convention.evalb is not None:
        if convention.evalb_prep == "diora":
            gold_node = _diora_gold(gold_node)
        counts = evalb.evalb_sentence(gold_node, pred_node, convention.evalb)
        if counts.status != evalb.VALID:
            return "error" if counts.status == evalb.ERROR else "skipped"
        match, n_pred, n_gold = counts.match, counts.n_pred, counts.n_gold
    else:
        gold_spans = _spans(gold_node, "no_root" if convention.spans == "li_multiset" else convention.spans, length)
        pred_spans = _spans(pred_node, convention.spans, length)
        match = sum((gold_spans & pred_spans).values())
        n_pred, n_gold = sum(pred_spans.values()), sum(gold_spans.values())
    precision, recall, f1 = sentence_scores(match, n_pred, n_gold, convention.sentence_f1)
    return SentenceCounts(index, length, match, n_pred, n_gold, precision, recall, f1)


def _flat(n_words: int) -> Node:
    return Node("S", 0, n_words, [Node(None, k, k + 1) for k in range(n_words)])


def score_convention(golds: Sequence[FullGold | None], predictions: Sequence, convention: Convention,
                     variant: str = "nary", locations: Sequence | None = None,
                     baseline: Callable[[int], Node] | None = None,
                     max_length: int | None = None, word_match: str = DEFAULT_WORD_MATCH) -> ConventionResult:
    """Score one prediction per gold sentence (``(Node, words or None)`` pairs, None for a sentence without a
    prediction: a one-word sentence, which gets its only tree) under ``convention`` on the gold ``variant``
    (``nary``, ``left``, ``right``).
    ``max_length``: a further length limit (``--wsj10``), applied with the convention's own.
    ``word_match``: how the predicted words are compared with the gold's (:mod:`induce.evaluation.words`);
    the result's ``words`` counts what differed."""
    if variant not in GOLD_VARIANTS:
        raise InvalidValueError(f"--gold-variant {variant}: choose one of {', '.join(GOLD_VARIANTS)}")
    if variant != "nary" and not convention.binarisable:
        raise InduceError(f"--gold-variant {variant}: {convention.name} is labelled, and a binarised gold tree's new "
                          "nodes have no treebank label; use nary")
    if baseline is None and len(predictions) != len(golds):
        extra = locations and len(predictions) > len(golds)
        where = locations[min(len(predictions), len(golds))] if extra else (None, None)
        raise InputError(f"{len(predictions)} predicted trees but {len(golds)} gold trees", *where)
    scored, skipped, errors = [], 0, 0
    words = WordCheck(word_match)
    for index, gold in enumerate(golds):
        if gold is None:
            skipped += 1
            continue
        pred, pred_words = (None, None) if baseline is not None else (predictions[index] or (None, None))
        where = tuple(locations[index]) if locations else (None, None)
        # No prediction (a one-word sentence Kim's pred_tree files skip): its only tree, flat.
        sentence_baseline = baseline or (_flat if pred is None else None)
        outcome = score_sentence(index, gold, pred, pred_words, convention, variant, where, sentence_baseline,
                                 max_length, words)
        if outcome == "skipped":
            skipped += 1
        elif outcome == "error":
            errors += 1
        else:
            scored.append(outcome)
    treebank = next((gold.treebank for gold in golds if gold is not None), "ptb")
    return ConventionResult(convention, variant, figures_of(scored, convention), scored, skipped, errors,
                            words.summary() if words.sentences else None, treebank)

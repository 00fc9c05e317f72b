"""The evaluation conventions: induce's own (``induce eval``, its switches ``--keep-punct``, ``--count-root``,
``--multiset``, ``--max-length``: :func:`induce_convention`) and the published ones of unsupervised
constituency parsing, by name, each equal to its authors' own scoring script (``induce eval --convention
NAME``). All of them are scored by the one engine, :func:`induce.evaluation.engine.score`.

Each :class:`Convention` is data: which tokens it keeps (by the gold POS tag), how it reshapes the gold
and predicted trees, which spans it counts, which sentences it scores and how it averages. The originals
were read at these commits, and run on the test fixtures (``tests/data/conventions/README.md`` has the
commands and their printed figures, which the tests reproduce to the printed digit):

=================== ===============================================================================
``induce``          the default of ``induce eval`` (:func:`induce_convention`): Kim et al.'s rules, but every
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
``bench/results/evaluation.md``, "Evaluation conventions, agreement and ensembles"):

* **tokens** — ``word_tags``: leaves whose gold POS is a word tag (:data:`induce.trees.ptb.WORD_TAGS`);
  ``all``: every token but traces (``--keep-punct``); ``li_nopunct``: Li et al.'s PTB punctuation set
  removed (``$`` stays, ``SYM``/``LS`` go); ``li_punct``: only ``-NONE- ID META LS LST`` removed;
* **spans** — ``kim``: every bracket of 2+ words, a unary chain counting its span once per node, then
  only the *outermost* bracket dropped, as a set (a gold tree whose root is a unary chain keeps the
  whole-sentence span once: it can never be matched); ``no_root``: the distinct spans of 2+ words but
  the whole sentence; ``with_root``: the same with the whole sentence (``--count-root``); ``multiset``
  and ``multiset_root``: every bracket of 2+ words of both trees, duplicates (unary chains) counted, every
  whole-sentence copy dropped or kept (``--multiset``; a prediction's projection is not unary-collapsed
  there, so the chains it leaves count); ``li_multiset``: every bracket of
  2+ words, each whole-sentence copy dropped, duplicates counted (gold trees are unary-collapsed first,
  so only a prediction's duplicates count);
* **sentences** — ``min_length`` / ``max_length`` on the gold length in the convention's tokens (Kim: no
  sentence of length 1; ON-LSTM, PRPN, PaLM, Li: they are kept and score 100);
* **sentence F1** — ``epsilon``: Kim's/ON-LSTM's ``2pr / (p + r + 1e-8)`` with ``1e-8`` in ``p`` and ``r``
  (an empty gold set: recall 1, precision 1 if the prediction is empty too); ``induce``: the same empty-set
  rule without ``1e-8``; ``exact``: PaLM's (both
  empty: 1; no overlap: 0); ``li``: Li et al.'s (empty gold: 100 if the prediction is empty else 0);
* **EVALB** (:mod:`induce.evaluation.evalb`) — the gold and predicted trees prepared as the script's
  driver does (``evalb_prep``): ``diora`` removes the word-tag filter's tokens from both trees without
  collapsing the unary nodes this leaves (so they count), labels every predicted bracket ``S`` and every
  preterminal ``DT``; ``li`` scores their unary-collapsed gold trees.

Where the originals evaluate on data we do not pick for the user (ON-LSTM's and PRPN's ``--wsj10`` read the
training sections 00-24), the convention scores the gold the user gives and says so in its ``notes``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from induce.errors import InvalidValueError
from induce.trees.ptb import WORD_TAGS

from . import evalb

#: Li et al.'s removals: always, and with their ``ptb`` punctuation set (preprocess.py L86-89, L205-209).
LI_ALWAYS = frozenset({"-NONE-", "ID", "META", "LS", "LST"})
LI_PUNCT = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "#", "LS", "LST", "SYM"})

TOKEN_FILTERS: dict[str, Callable[[str | None], bool]] = {
    "word_tags": lambda tag: tag in WORD_TAGS,
    "all": lambda tag: True,
    "li_nopunct": lambda tag: tag not in LI_ALWAYS and tag not in LI_PUNCT,
    "li_punct": lambda tag: tag not in LI_ALWAYS,
}
GOLD_VARIANTS = ("nary", "left", "right")
#: Span rules whose whole-sentence span counts, and those that count duplicates.
ROOT_SPANS = frozenset({"with_root", "multiset_root"})
MULTISET_SPANS = frozenset({"multiset", "multiset_root", "li_multiset"})


def token_filter(tokens: str, treebank: str = "ptb") -> Callable[[str | None], bool]:
    """Which gold tags a convention's ``tokens`` keep in a treebank (:mod:`induce.trees.treebanks`): for the
    PTB, :data:`TOKEN_FILTERS`; for another treebank, ``word_tags`` keeps its words (its profile's
    punctuation removed) and ``li_nopunct`` removes Li et al.'s punctuation table for that treebank (their
    ``ktb`` table for the Keyaki Treebank)."""
    if treebank == "ptb" or tokens in ("all", "li_punct"):
        return TOKEN_FILTERS[tokens]
    from induce.trees.treebanks import get_profile

    profile = get_profile(treebank)
    if tokens == "word_tags":
        return profile.is_word
    return lambda tag: tag not in LI_ALWAYS and tag not in profile.li_punct


@dataclass(frozen=True)
class Figure:
    """One number a script prints: ``key`` of :attr:`induce.evaluation.engine.Result.figures`, its label, and
    the digits the script prints it with (as a percentage)."""

    key: str
    label: str
    digits: int = 2


#: What induce's own conventions report first.
INDUCE_FIGURES = (Figure("corpus_f1", "corpus F1"), Figure("sentence_f1", "sentence F1"))


@dataclass(frozen=True)
class Convention:
    """One convention (see the module docstring for each switch). ``title`` empty: one of induce's own
    (:func:`induce_convention`), described by its switches. ``treebank``: whose tags the gold carries
    (None: the gold's own, as it was read)."""

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
    treebank: str | None = None

    @property
    def binarisable(self) -> bool:
        """Gold trees can be binarised: the new nodes have no label, so not under labelled EVALB."""
        return not (self.evalb is not None and self.evalb.labelled)

    @property
    def keep_punct(self) -> bool:
        return self.tokens == "all"

    @property
    def count_root(self) -> bool:
        return self.spans in ROOT_SPANS

    @property
    def multiset(self) -> bool:
        return self.spans in MULTISET_SPANS

    def limited(self, max_length: int | None) -> Convention:
        """This convention with a further length limit (``--wsj10``, ``--max-length``): the smaller one."""
        from dataclasses import replace

        if max_length is None or (self.max_length is not None and self.max_length <= max_length):
            return self
        return replace(self, max_length=max_length)

    def describe(self, treebank: str | None = None) -> str:
        """What the convention does, in words; ``treebank`` (default: the convention's, else ``ptb``) names
        whose punctuation it removes (Li et al.'s title says ``ptb``, which :func:`token_filter` replaces by
        the gold treebank's own)."""
        treebank = treebank or self.treebank or "ptb"
        if not self.title:
            return _describe_switches(self, treebank)
        limits = f"sentences of {self.min_length}" + (f"-{self.max_length}" if self.max_length else "+") + " tokens"
        title = self.title.replace("(ptb,", f"({treebank},") if treebank != "ptb" else self.title
        return f"{title} ({self.reference}); {limits}" + (f"; {self.notes}" if self.notes else "")

    def switches(self) -> dict:
        """The JSON shape of one of induce's own conventions (``induce eval --json``'s ``convention``): its
        switches and :meth:`describe`."""
        return {"keep_punct": self.keep_punct, "count_root": self.count_root, "multiset": self.multiset,
                "min_length": self.min_length, "max_length": self.max_length, "treebank": self.treebank,
                "description": self.describe()}


def _describe_switches(convention: Convention, treebank: str) -> str:
    if treebank == "ptb":
        removal = "punctuation and traces removed by the word-tag filter (Kim et al. 2019)"
    else:
        from induce.trees.treebanks import get_profile

        profile = get_profile(treebank)
        removal = f"{profile.title}: punctuation ({' '.join(sorted(profile.punct_tags))}) removed"
    max_length = convention.max_length
    parts = [
        "punctuation kept (traces removed)" if convention.keep_punct else removal,
        f"sentences of length < {convention.min_length} skipped"
        + (f", length <= {max_length} after removal" if max_length else ", all lengths"),
        "length-1 spans not counted",
        "whole-sentence span counted" if convention.count_root else "whole-sentence span not counted",
        "spans counted as a multiset" if convention.multiset else "spans counted as sets",
    ]
    return "; ".join(parts)


def induce_convention(keep_punct: bool = False, count_root: bool = False, multiset: bool = False,
                      min_length: int = 2, max_length: int | None = None, treebank: str | None = None) -> Convention:
    """induce's own convention with ``induce eval``'s switches (defaults: Kim et al. 2019's rules): punctuation
    and traces removed by the word-tag filter (``keep_punct``: traces only), sentences shorter than
    ``min_length`` or longer than ``max_length`` (after removal) skipped, length-1 spans not counted, the
    whole-sentence span not counted (``count_root``: counted), spans as sets (``multiset``: duplicates
    count); sentence F1 with Kim's empty-set rule; corpus F1 from the summed counts."""
    spans = {(False, False): "no_root", (True, False): "with_root", (False, True): "multiset",
             (True, True): "multiset_root"}[(bool(count_root), bool(multiset))]
    return Convention("induce", "", "", "all" if keep_punct else "word_tags", INDUCE_FIGURES, spans=spans,
                      min_length=min_length, max_length=max_length, sentence_f1="induce", treebank=treebank)


#: The default convention of every command.
DEFAULT = induce_convention()


def _li(name: str, tokens: str, extra: str, **switches) -> Convention:
    return Convention(name, "Li et al. 2020" + extra, "i-lijun/UnsupConstParseEval@afa5176 evaluate.py", tokens,
                      **switches)


CONVENTIONS: dict[str, Convention] = {c.name: c for c in (
    DEFAULT,
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

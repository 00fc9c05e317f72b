"""Matching a prediction's words with the gold's, as published prediction files write them.

Toolkits rewrite words before they parse (Mikolov's PTB text, ON-LSTM's and PRPN's data loaders, Kim et al.'s
and Li et al.'s preprocessing, DIORA's): lower case, numbers as ``N`` or ``[num]``, digits as ``N`` inside a
word (``N.N`` for ``99.8``), numbers without their thousands separators (``20000`` for ``20,000``), rare
words as ``<unk>``. A prediction written that way is still a prediction of the gold sentence: the words are
only checked so that a file of other sentences (a line repeated or left out) is caught.

``--word-match`` says how the words are compared (:data:`WORD_MATCH_MODES`):

* ``exact`` — each predicted word is the gold word, character for character;
* ``normalized`` (the default) — or one of the rewritings of :data:`REWRITINGS` of it (:func:`rewriting`);
* ``position`` — the words are aligned by position and never refused (the numbers of words must still
  agree); words that differ beyond the rewritings are counted as ``other``.

Every word that is not identical is counted by rewriting (:class:`WordCheck`), and what was counted is
reported with the figures, so that a user sees how a file was read.
"""
from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

from induce.errors import InputError, InvalidValueError

WORD_MATCH_MODES = ("exact", "normalized", "position")
DEFAULT_WORD_MATCH = "normalized"

#: Each rewriting a ``normalized`` match accepts: its key in the reports, and what it is.
REWRITINGS = {
    "case": "upper / lower case (When for when)",
    "unicode": "Unicode normal form (NFD for NFC: a combining accent for the precomposed letter)",
    "escape": "Penn Treebank escapes (-LRB- for (, \\/ for /)",
    "unknown": "unknown-word placeholder (<unk>, [unk]) for any word",
    "number": "number placeholder (N, <num>, [num]) for a word with a digit",
    "thousands": "thousands separators dropped (20000 for 20,000)",
    "digits": "digits written as N inside a word (N.N for 99.8, Ns for 1980s, NN for 20,000)",
}
#: A word that differs beyond the rewritings, accepted by ``position`` only.
OTHER = "other"

_UNKNOWN = frozenset({"<unk>", "[unk]", "<oov>"})
_NUMBER = frozenset({"n", "<num>", "[num]", "<number>"})
_ESCAPES = {"-lrb-": "(", "-rrb-": ")", "-lcb-": "{", "-rcb-": "}", "-lsb-": "[", "-rsb-": "]", "``": '"',
            "''": '"'}
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_DIGITS = re.compile(r"\d+")


def check_mode(mode: str, option: str = "--word-match") -> str:
    """``mode`` if it is one of :data:`WORD_MATCH_MODES`, else an :class:`InvalidValueError` naming ``option``."""
    if mode not in WORD_MATCH_MODES:
        raise InvalidValueError(f"{option} {mode}: choose one of {', '.join(WORD_MATCH_MODES)}")
    return mode


def _unescape(word: str) -> str:
    return _ESCAPES.get(word, word.replace("\\/", "/").replace("\\*", "*"))


def rewriting(predicted: str, gold: str) -> str | None:
    """The key of :data:`REWRITINGS` that turns ``gold`` into ``predicted``; ``""`` when they are the same
    string; None when they differ beyond the rewritings (``Cafe`` is not ``Café``: accents are letters)."""
    if predicted == gold:
        return ""
    nfc_p, nfc_g = unicodedata.normalize("NFC", predicted), unicodedata.normalize("NFC", gold)
    if nfc_p == nfc_g:
        return "unicode"
    low_p, low_g = nfc_p.lower(), nfc_g.lower()
    if low_p == low_g:
        return "case"
    if _unescape(low_p) == _unescape(low_g):
        return "escape"
    if low_p in _UNKNOWN:
        return "unknown"
    if any(ch.isdigit() for ch in low_g):
        if low_p in _NUMBER:
            return "number"
        if _THOUSANDS.sub("", low_p) == _THOUSANDS.sub("", low_g):
            return "thousands"
        shape = _DIGITS.sub("n", low_g)
        if low_p in (shape, _THOUSANDS.sub("", shape), shape.replace(",", "")):
            return "digits"
    return None


def words_match(predicted: str, gold: str, mode: str = DEFAULT_WORD_MATCH) -> bool:
    """Whether ``predicted`` may stand for ``gold`` under ``mode`` (``position``: always)."""
    if mode == "position" or predicted == gold:
        return True
    return mode == "normalized" and rewriting(predicted, gold) is not None


@dataclass
class WordCheck:
    """The words of the predictions against the gold's under one ``mode``: how many were compared, and how
    many differed by each rewriting (:data:`REWRITINGS`, :data:`OTHER`), with the first example of each."""

    mode: str = DEFAULT_WORD_MATCH
    compared: int = 0
    sentences: int = 0
    sentences_rewritten: int = 0
    counts: Counter = field(default_factory=Counter)
    examples: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_mode(self.mode)

    def check(self, predicted: Sequence[str], gold: Sequence[str], where=(None, None)) -> None:
        """Compare one sentence's words position by position (the caller has checked that they are as
        many); a word that ``mode`` does not accept is an :class:`InputError` at ``where`` naming both."""
        rewritten = False
        for k, (p, g) in enumerate(zip(predicted, gold)):
            if p == g:
                continue
            kind = rewriting(p, g) if self.mode != "exact" else None
            if kind is None:
                if self.mode != "position":
                    raise InputError(f"word {k + 1} differs: predicted {p!r}, gold {g!r} ({self._refusal()})", *where)
                kind = OTHER
            self.counts[kind] += 1
            self.examples.setdefault(kind, (p, g))
            rewritten = True
        self.compared += len(gold)
        self.sentences += 1
        self.sentences_rewritten += rewritten

    def _refusal(self) -> str:
        if self.mode == "exact":
            return "--word-match exact; normalized accepts case, number placeholders and the like"
        return ("not a rewriting --word-match normalized accepts: case, Unicode form, escapes, <unk>, number "
                "placeholders, digits as N, thousands separators; --word-match position aligns words by position")

    @property
    def rewritten(self) -> int:
        return sum(self.counts.values())

    def summary(self) -> dict:
        """The JSON shape of the check: ``mode``, ``words_compared``, ``words_rewritten``, ``sentences``,
        ``sentences_rewritten`` and ``rewritings`` (key -> ``count``, ``what`` and one ``example``)."""
        return {
            "mode": self.mode, "words_compared": self.compared, "words_rewritten": self.rewritten,
            "sentences": self.sentences, "sentences_rewritten": self.sentences_rewritten,
            "rewritings": {kind: {"count": count, "what": REWRITINGS.get(kind, "differs beyond the rewritings "
                                                                              "(aligned by position)"),
                                  "example": {"predicted": self.examples[kind][0], "gold": self.examples[kind][1]}}
                           for kind, count in self.counts.most_common()},
        }


def describe(summary: dict | None) -> str:
    """One line of a :meth:`WordCheck.summary`: ``words (normalized): 412 of 50,210 rewritten in 300 of 2,412
    sentences: case 300 (When -> when), digits 112 (99.8 -> N.N)``."""
    if not summary:
        return ""
    head = f"words (--word-match {summary['mode']}): "
    if not summary["words_compared"]:
        return head + "none compared (no words in the predictions)"
    if not summary["words_rewritten"]:
        return head + f"all {summary['words_compared']:,} as in the gold"
    parts = [f"{kind} {entry['count']:,} ({entry['example']['gold']} -> {entry['example']['predicted']})"
             for kind, entry in summary["rewritings"].items()]
    return (head + f"{summary['words_rewritten']:,} of {summary['words_compared']:,} rewritten, in "
            f"{summary['sentences_rewritten']:,} of {summary['sentences']:,} sentences: " + ", ".join(parts))

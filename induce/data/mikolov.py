"""Mikolov's PTB language-modelling conventions, applied to treebank trees.

Per leaf, in order (see :func:`lm_tokens`):

1. the word-tag filter: a leaf is kept iff its gold POS tag is in
   :data:`induce.trees.ptb.WORD_TAGS` (traces, punctuation, ``$`` and ``#`` go);
2. lower-casing;
3. numbers become ``N``: a token is a number iff it is groups of digits separated by
   ``.``, ``,``, ``:``, ``-`` or ``\\/`` with an optional sign (``3.5``, ``1,000``, ``.5``,
   ``1\\/2``, ``1987-88``, ``9:30``), and ``%`` is ``N`` too, as in Mikolov's file
   (``5 %`` -> ``N N``) (:data:`NUMBER`). Tokens that merely contain digits
   (``30-year``, ``1980s``, ``mid-1970s``) are kept, as in Mikolov's file;
4. outside the vocabulary, ``<unk>`` (:func:`build_vocab`, :func:`apply_vocab`).

Vocabulary size convention: ``max_vocab`` counts **everything** in the vocabulary,
``<eos>`` and ``<unk>`` included. Mikolov's ``ptb.train.txt`` has 9,999 types (``<unk>``
among them) and the LM adds ``<eos>``: ``max_vocab=10000`` reproduces that size.

Known, accepted differences from Mikolov's file (measured by :func:`agreement`):
Mikolov keeps ``$`` and ``#`` (the word-tag filter removes them); Mikolov splits a few
tokens differently; and Mikolov's vocabulary is built from sections 00-20 while ours is
built from the training split that is given.
"""
from __future__ import annotations

import difflib
import re
from collections import Counter
from pathlib import Path
from typing import Iterable, Sequence

import nltk

from induce.data.corpus import EOS, UNK, Vocab
from induce.errors import InputError
from induce.trees.ptb import WORD_TAGS

#: What counts as a number (matched against the lower-cased token).
NUMBER = re.compile(r"^(?:[+-]?(?:\d+|\d*\.\d+)(?:(?:[.,:-]|\\/)\d+)*|%)$")
NUMBER_TOKEN = "N"


def normalize_word(word: str) -> str:
    """Lower-case; numbers -> ``N`` (``"3.5"``, ``"1,000"``, ``"1\\/2"``, ``"%"`` -> ``N``; ``"30-year"`` unchanged)."""
    lowered = word.lower()
    return NUMBER_TOKEN if NUMBER.match(lowered) else lowered


def lm_tokens(tree: nltk.Tree) -> list[str]:
    """Normalised LM tokens of a tree (word-tag filter, lower case, numbers -> N; no ``<unk>``)."""
    return [normalize_word(word) for word, tag in tree.pos() if tag in WORD_TAGS]


def build_vocab(sentences: Iterable[Sequence[str]], max_vocab: int = 10000) -> Vocab:
    """The ``max_vocab`` most frequent types, ``<eos>`` and ``<unk>`` included.

    Order: ``<eos>``, ``<unk>``, then words by decreasing count, ties alphabetically
    (deterministic). ``<unk>`` tokens already in the text (Mikolov files) are counted
    as ``<unk>``, not as a word. ``max_vocab <= 0`` keeps every type.
    """
    counts = Counter(token for sentence in sentences for token in sentence)
    counts.pop(UNK, None)
    counts.pop(EOS, None)
    ranked = sorted(counts.items(), key=lambda item: (-item[1], item[0]))
    words = [word for word, _ in ranked]
    if max_vocab > 0:
        if max_vocab < 3:
            raise ValueError("max_vocab must be at least 3 (<eos>, <unk> and one word) or <= 0 for no limit")
        words = words[: max_vocab - 2]
    return Vocab([EOS, UNK, *words])


def apply_vocab(sentence: Sequence[str], vocab: Vocab) -> list[str]:
    """Replace out-of-vocabulary tokens by ``<unk>``."""
    return [token if token in vocab.stoi else UNK for token in sentence]


def read_lm_text(path: Path) -> list[list[str]]:
    """Tokens per line of a Mikolov-style text file (whitespace-separated, one sentence a line)."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError("not valid UTF-8", path, data.count(b"\n", 0, err.start) + 1) from None
    return [line.split() for line in text.splitlines()]


def agreement(ours: Sequence[Sequence[str]], reference: Sequence[Sequence[str]]) -> dict:
    """Token-level agreement between two LM texts whose sentences are (mostly) the same.

    Sentences are aligned with :class:`difflib.SequenceMatcher` (identical lines anchor
    the alignment; lines in a same-length replaced block are paired one to one), then
    tokens of each aligned pair are matched with a second SequenceMatcher.
    Returns counts and ``agreement = matched / reference tokens in aligned sentences``.
    """
    ours_lines = [" ".join(sentence) for sentence in ours]
    ref_lines = [" ".join(sentence) for sentence in reference]
    matcher = difflib.SequenceMatcher(None, ours_lines, ref_lines, autojunk=False)
    pairs: list[tuple[int, int]] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            pairs.extend(zip(range(i1, i2), range(j1, j2)))
    matched = ref_tokens = our_tokens = identical = 0
    differences: Counter = Counter()
    for i, j in pairs:
        a, b = ours[i], reference[j]
        our_tokens += len(a)
        ref_tokens += len(b)
        if list(a) == list(b):
            identical += 1
            matched += len(b)
            continue
        tokens = difflib.SequenceMatcher(None, list(a), list(b), autojunk=False)
        for op, a1, a2, b1, b2 in tokens.get_opcodes():
            if op == "equal":
                matched += a2 - a1
            else:
                differences[(" ".join(a[a1:a2]), " ".join(b[b1:b2]))] += 1
    return {
        "aligned_sentences": len(pairs),
        "identical_sentences": identical,
        "our_sentences": len(ours),
        "reference_sentences": len(reference),
        "reference_tokens": ref_tokens,
        "our_tokens": our_tokens,
        "matched_tokens": matched,
        "agreement": matched / ref_tokens if ref_tokens else 0.0,
        "top_differences": differences.most_common(25),
    }

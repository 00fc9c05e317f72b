"""EVALB's bracket scoring (Sekine & Collins 1997, ``evalb.c``), re-implemented for one sentence at a time.

Read from ``evalb.c`` as shipped with Ordered-Neurons (``46d63cd``) and DIORA (``110b9b0``, identical but
for one ``#include``); the parameter files :data:`COLLINS` (``COLLINS.prm``), :data:`DIORA` (DIORA's
``EVALB/diora.prm``) and :data:`LI2020` (i-lijun/UnsupConstParseEval ``afa5176`` ``evalb.prm``). The rules:

* a word whose preterminal label *in its own tree* is a ``DELETE_LABEL`` is removed from that tree
  (``read_line``); the sentence length used for ``CUTOFF_LEN`` counts every word but those whose
  label is a ``DELETE_LABEL_FOR_LENGTH`` (deleted words included);
* brackets are the non-terminal nodes (not the preterminals): the whole sentence's bracket counts, and so
  does a non-terminal over a single word (``(NP (PRP He))``); a bracket left over no word is dropped; labels
  are cut at the first ``-`` or ``=`` and brackets whose label is a ``DELETE_LABEL`` are not counted
  (``massage_data``);
* a prediction without words is skipped; one whose length (after its deletions) differs from the gold's
  is an *error sentence*, left out of the totals (``calc_result``; the quote repair ``fix_quote`` is not
  reproduced: the conventions that use EVALB here align the trees before they get here);
* brackets match one-to-one, as multisets over ``(start, end)`` — and the label, up to ``EQ_LABEL``,
  when ``LABELED 1``; totals are summed over sentences (micro), ``F = 2PR / (P + R)`` of the percentages.

``MAX_ERROR`` (the program stops after that many errors) is recorded, not enforced: error sentences are
counted and reported instead.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from induce.trees.nodes import Node
from induce.trees.transforms import brackets, leaf_tags


@dataclass(frozen=True)
class EvalbParams:
    """The parameter-file settings that change EVALB's figures."""

    name: str
    labelled: bool
    delete_labels: frozenset
    delete_labels_for_length: frozenset = frozenset({"-NONE-"})
    eq_labels: tuple = (("ADVP", "PRT"),)
    cutoff_len: int = 40
    max_error: int = 10

    def label_class(self, label: str) -> str:
        for group in self.eq_labels:
            if label in group:
                return group[0]
        return label


COLLINS = EvalbParams("COLLINS.prm", labelled=True,
                      delete_labels=frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."}), max_error=10)
DIORA = EvalbParams("diora.prm", labelled=False,
                    delete_labels=frozenset({"ROOT", "S1", "-NONE-", ",", ":", "``", "''", ".", "?", "!"}),
                    max_error=10000)
LI2020 = EvalbParams("evalb.prm (Li et al. 2020)", labelled=False, delete_labels=frozenset(), cutoff_len=10,
                     max_error=1)

#: Sentence status as EVALB prints it.
VALID, ERROR, SKIPPED = 0, 1, 2


@dataclass(frozen=True)
class EvalbSentence:
    """One sentence's EVALB counts: ``status`` (:data:`VALID`, :data:`ERROR`, :data:`SKIPPED`), the gold
    length for ``CUTOFF_LEN``, matched brackets, gold brackets and predicted brackets."""

    status: int
    length: int
    match: int
    n_gold: int
    n_pred: int


def modify_label(label: str | None) -> str:
    """EVALB's label trimming: everything from the first ``-`` or ``=`` goes (``NP-SBJ`` -> ``NP``,
    ``-NONE-`` -> ``''``)."""
    label = label or ""
    for index, char in enumerate(label):
        if char in "-=":
            return label[:index]
    return label


def _reduced(node: Node, params: EvalbParams) -> tuple[int, int, Counter]:
    """``(words kept, length for the cutoff, Counter of counted brackets)`` of one tree."""
    tags = leaf_tags(node)
    keep = [tag not in params.delete_labels for tag in tags]
    length = sum(tag not in params.delete_labels_for_length for tag in tags)
    new_position = [0]
    for flag in keep:
        new_position.append(new_position[-1] + flag)
    counted: Counter = Counter()
    for label, start, end in brackets(node):
        start, end = new_position[start], new_position[end]
        if start == end:
            continue
        label = modify_label(label)
        if any(params.label_class(label) == params.label_class(deleted) for deleted in params.delete_labels):
            continue
        counted[(start, end, params.label_class(label) if params.labelled else "")] += 1
    return sum(keep), length, counted


def evalb_sentence(gold: Node, pred: Node, params: EvalbParams) -> EvalbSentence:
    """EVALB's counts for one sentence. ``gold`` and ``pred`` carry their words' preterminal labels (a word
    with none counts as a word no label deletes) and must be over the same words (checked by the caller)."""
    gold_words, length, gold_brackets = _reduced(gold, params)
    pred_words, _, pred_brackets = _reduced(pred, params)
    if pred_words == 0:
        return EvalbSentence(SKIPPED, length, 0, 0, 0)
    if pred_words != gold_words:
        return EvalbSentence(ERROR, length, 0, 0, 0)
    match = sum((gold_brackets & pred_brackets).values())
    return EvalbSentence(VALID, length, match, sum(gold_brackets.values()), sum(pred_brackets.values()))


"""Penn Treebank conventions shared by preprocessing and evaluation.

The word-tag filter follows Kim et al. (2019) and most later work on unsupervised
parsing: a leaf is a *word* iff its gold POS tag is in :data:`WORD_TAGS`. Everything
else (punctuation, ``$``, ``#``, ``-NONE-`` traces) is removed before spans are counted.
"""
from __future__ import annotations

import re

import nltk

#: POS tags kept by the word-tag filter (Kim et al. 2019). ``$`` and ``#`` are not words.
WORD_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP "
    "SYM TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB".split()
)
#: The POS tag of empty elements (traces, null complementisers).
TRACE_TAG = "-NONE-"
#: Label given to the (usually empty) outermost bracket of a treebank tree.
ROOT_LABEL = "ROOT"

_FUNCTION_TAG = re.compile(r"^([^-=]+)[-=].*$")


def strip_function_tags(label: str) -> str:
    """``NP-SBJ-1`` -> ``NP``, ``PP-LOC=2`` -> ``PP``; ``-NONE-``, ``-LRB-`` unchanged."""
    if label.startswith("-"):
        return label
    match = _FUNCTION_TAG.match(label)
    return match.group(1) if match else label


def is_preterminal(tree) -> bool:
    return isinstance(tree, nltk.Tree) and len(tree) == 1 and isinstance(tree[0], str)


def clean_tree(tree: nltk.Tree, keep_punct: bool = True) -> nltk.Tree | None:
    """Return a copy without traces, empty constituents and function tags.

    With ``keep_punct=False`` every leaf whose POS tag is not in :data:`WORD_TAGS` goes too
    (the word-tag filter). An empty outermost label becomes :data:`ROOT_LABEL`. Returns
    ``None`` when nothing is left (a tree made only of traces / punctuation).
    """

    def keep(pos: str) -> bool:
        if pos == TRACE_TAG:
            return False
        return keep_punct or pos in WORD_TAGS

    def rec(node):
        if is_preterminal(node):
            return nltk.Tree(node.label(), [node[0]]) if keep(node.label()) else None
        children = [c for c in (rec(child) for child in node if isinstance(child, nltk.Tree)) if c is not None]
        if not children:
            return None
        return nltk.Tree(strip_function_tags(node.label()), children)

    cleaned = rec(tree)
    if cleaned is not None and cleaned.label() == "":
        cleaned.set_label(ROOT_LABEL)
    return cleaned

"""Penn Treebank conventions shared by preprocessing and evaluation.

The word-tag filter follows Kim et al. (2019) and most later work on unsupervised
parsing: a leaf is a *word* iff its gold POS tag is in :data:`WORD_TAGS`. Everything
else (punctuation, ``$``, ``#``, ``-NONE-`` traces) is removed before spans are counted.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import nltk

from induce.trees.nodes import fold, tagged_leaves

#: POS tags kept by the word-tag filter (Kim et al. 2019). ``$`` and ``#`` are not words.
WORD_TAGS = frozenset(
    "CC CD DT EX FW IN JJ JJR JJS LS MD NN NNS NNP NNPS PDT POS PRP PRP$ RB RBR RBS RP "
    "SYM TO UH VB VBD VBG VBN VBP VBZ WDT WP WP$ WRB".split()
)
#: The POS tag of empty elements (traces, null complementisers).
TRACE_TAG = "-NONE-"
#: Label given to the (usually empty) outermost bracket of a treebank tree.
ROOT_LABEL = "ROOT"
#: POS tags of punctuation in the Penn Treebank (``$`` and ``#`` are not words either).
PUNCT_TAGS = frozenset(["''", "``", ".", ":", ",", "-LRB-", "-RRB-", "#", "$"])
#: Every POS tag of the Penn Treebank: the words', the punctuation's and that of the empty elements.
PTB_TAGS = WORD_TAGS | PUNCT_TAGS | {TRACE_TAG}


@dataclass
class TagCensus:
    """The POS tags of some trees against the Penn Treebank's: ``tokens`` (leaves that are not empty elements
    ``-NONE-``), ``kept`` (those the word-tag filter keeps: tagged with a :data:`WORD_TAGS` tag, counted by tag
    in ``kept_tags``) and ``foreign`` (tag -> tokens, for tags outside :data:`PTB_TAGS`)."""

    tokens: int = 0
    kept: int = 0
    kept_tags: Counter = field(default_factory=Counter)
    foreign: Counter = field(default_factory=Counter)

    def add(self, tree: nltk.Tree) -> None:
        for _, tag, _ in tagged_leaves(tree):
            if tag == TRACE_TAG:
                continue
            self.tokens += 1
            if tag in WORD_TAGS:
                self.kept += 1
                self.kept_tags[tag] += 1
            elif tag not in PTB_TAGS:
                self.foreign[tag] += 1

    @property
    def foreign_tokens(self) -> int:
        return sum(self.foreign.values())

    def not_ptb(self) -> bool:
        """Whether these are not Penn Treebank tags: tags outside the PTB's on more than half the tokens, or on
        some tokens while the word-tag filter would drop more than half of them. (A PTB file has no foreign
        tag at all; its punctuation, which the filter drops, is some 12% of its tokens.)"""
        foreign = self.foreign_tokens
        return bool(foreign) and (2 * foreign > self.tokens or 2 * self.kept < self.tokens)

    def loss(self, reader: str = "preprocessing") -> str:
        """What the word-tag filter would do to these trees when ``reader`` reads them: why they are refused."""
        def share(count: int) -> str:
            return f"{100 * count / max(self.tokens, 1):.0f}%"

        shown = ", ".join(tag for tag, _ in self.foreign.most_common(6))
        kept = ", ".join(tag for tag, _ in self.kept_tags.most_common(4))
        return (f"its POS tags are not the Penn Treebank's: {share(self.foreign_tokens)} of its {self.tokens:,} tokens "
                f"carry other tags ({shown}{', ...' if len(self.foreign) > 6 else ''}); the word-tag filter keeps only "
                f"words with PTB word tags, so {reader} would drop {share(self.tokens - self.kept)} of the "
                f"tokens and keep {self.kept:,}" + (f" (tagged {kept})" if kept else ""))

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
    """Return a copy without traces, empty constituents and function tags (without recursion).

    With ``keep_punct=False`` every leaf whose POS tag is not in :data:`WORD_TAGS` goes too
    (the word-tag filter). An empty outermost label becomes :data:`ROOT_LABEL`. Returns
    ``None`` when nothing is left (a tree made only of traces / punctuation).
    """

    def keep(pos: str) -> bool:
        if pos == TRACE_TAG:
            return False
        return keep_punct or pos in WORD_TAGS

    def children_of(node) -> list:
        return [] if is_preterminal(node) else [child for child in node if isinstance(child, nltk.Tree)]

    def combine(node, children: list):
        if is_preterminal(node):
            return nltk.Tree(node.label(), [node[0]]) if keep(node.label()) else None
        children = [child for child in children if child is not None]
        if not children:
            return None
        return nltk.Tree(strip_function_tags(node.label()), children)

    cleaned = fold(tree, children_of, combine)
    if cleaned is not None and cleaned.label() == "":
        cleaned.set_label(ROOT_LABEL)
    return cleaned

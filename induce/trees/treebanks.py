"""Treebank profiles: what differs between treebanks for preprocessing and evaluation (``--treebank NAME``).

A :class:`TreebankProfile` says which tokens are punctuation and which are words, which nodes are not
syntax (empty elements, ``ID`` and other annotation nodes), how function tags are cut from labels,
whether unary chains are collapsed, and how the data is split. It is recorded in a prepared corpus's
``meta.json`` (``treebank``) and in ``induce eval``'s output, so that a figure says which rules made it.

* ``ptb`` — the Penn Treebank (WSJ), the default: the word-tag filter of Kim et al. (2019) (a leaf is a word
  iff its gold POS tag is in :data:`induce.trees.ptb.WORD_TAGS`), ``-NONE-`` empty elements, function tags
  cut by :func:`induce.trees.ptb.strip_function_tags`, no unary collapse, split by WSJ sections (02-21 /
  22 / 23). A file whose tags are not the PTB's is refused (:class:`induce.trees.ptb.TagCensus`).
* ``ktb`` — the Keyaki Treebank (Japanese, CorpusSearch format), exactly as Li et al. (2020) prepare it
  (i-lijun/UnsupConstParseEval ``afa5176`` ``preprocess.py``, ``Sentence`` and ``KTBHelper``), see
  :func:`keyaki_tree`: subtrees labelled ``-NONE- ID META LS LST`` and empty elements (one leaf written
  ``*...*`` or ``*...*-N``, such as ``*pro*``, ``*T*``, ``*``) removed, then (without punctuation) the
  subtrees labelled ``PU -LRB- -RRB- LS LST META CODE QUOT``, each in reverse pre-order with its parents of
  one child, step by step as their ``remove_nodes`` runs (:func:`_remove_in_order`: a sentence whose removals
  reach the root, 24 of Keyaki 1.1 through the way that function reads positions, is dropped, as their
  ``IndexError`` drops it); labels cut at the first ``-``, ``_`` or ``=`` (``-LRB-``/``-RRB-`` kept); unary
  chains collapsed into their top node, the root included. Their split: :mod:`induce.data.keyaki`. This is
  the repository as it stands. A file whose tags are not Keyaki's (:data:`KEYAKI_TAGS`) is refused
  (:class:`KeyakiTagCensus`), as a gold file of either treebank read under the other is (:func:`tag_refusal`).
* ``ktb-2020`` — the Keyaki Treebank as the same script prepared it at the paper's time (``6377b10``,
  2020-05-04): Keyaki's empty elements (``*pro*``, ``*T*``, ...) stay in the sentence as words, ``QUOT``
  is not in the punctuation table, and a removal that reaches the root's only child stops the removals, the
  tree kept as it is then (:func:`_remove_in_order`; 4 trees of Keyaki 1.1, such as an ``LST`` of brackets,
  which the later script drops); everything else as ``ktb``. Commits of 2021 (``bddaf5a``, ``7290779``,
  ``afa5176``) changed all three; which preparation the paper's tables used is the paper's to say
  (bench/results/reproduction.md, "The Keyaki Treebank end to end").

Another treebank (CTB, SPMRL, Negra, ...) becomes a profile here with a fixture test written from its
documented format; none is guessed.
"""
from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Union

import nltk

from induce.errors import InvalidValueError
from induce.trees.nodes import fold, tagged_leaves
from induce.trees.ptb import PTB_TAGS, WORD_TAGS, TagCensus

#: Bumped when the Keyaki Treebank's preparation changes: it enters a prepared Keyaki corpus's fingerprint, so
#: that a corpus prepared before is prepared again (2: the removals step by step as their script makes them).
KEYAKI_RECIPE = 2
#: Li et al.'s removals of every treebank: empty elements and annotation nodes (preprocess.py L205-207).
LI_ALWAYS = frozenset({"-NONE-", "ID", "META", "LS", "LST"})
#: Li et al.'s punctuation tables (preprocess.py L86-89), by treebank.
LI_PUNCT_PTB = frozenset({",", ".", ":", "``", "''", "-LRB-", "-RRB-", "#", "LS", "LST", "SYM"})
LI_PUNCT_KTB = frozenset({"PU", "-LRB-", "-RRB-", "LS", "LST", "META", "CODE", "QUOT"})
#: The KTB table at the paper's time (``6377b10``): without ``QUOT``.
LI_PUNCT_KTB_2020 = LI_PUNCT_KTB - {"QUOT"}


@dataclass(frozen=True)
class TreebankProfile:
    """The rules of one treebank. ``word_tags``: the tags of words (None: every tag not in ``punct_tags``);
    ``punct_tags``: the tags the no-punctuation filter removes; ``li_punct``: Li et al.'s punctuation table
    for this treebank (the ``li2020`` conventions); ``collapse_root``: whether Li et al. collapse a unary root;
    the rest describes the preprocessing for the manifest."""

    name: str
    title: str
    reference: str
    punct_tags: frozenset
    word_tags: frozenset | None
    li_punct: frozenset
    collapse_root: bool
    empty_elements: str
    non_syntactic: str
    function_tags: str
    unary: str
    split: str
    file_pattern: str
    #: Keyaki (CorpusSearch) trees, prepared by :func:`keyaki_tree` with this profile's rules.
    keyaki: bool = False
    #: Keyaki's empty elements (one leaf written ``*...*`` or ``*...*-N``) are removed (else kept as words).
    drop_null_words: bool = True
    #: A removal that reached the root (:func:`_remove_in_order`) keeps the tree as it is then (else it is dropped).
    keep_stopped: bool = False

    def is_word(self, tag: str | None) -> bool:
        """Whether a leaf with gold tag ``tag`` is a word (kept by the no-punctuation filter)."""
        if self.word_tags is not None:
            return tag in self.word_tags
        return tag not in self.punct_tags and tag not in LI_ALWAYS

    def gold_tree(self, tree: nltk.Tree) -> nltk.Tree | None:
        """A tree of this treebank, as read or as prepared, reduced to its syntax with punctuation and POS tags
        kept (None when no word is left), which is what the evaluator reads: the Keyaki Treebank's by
        :func:`keyaki_tree` without collapsing unary chains (a chain collapsed into its top node loses the POS
        tag that says what is punctuation; the conventions that count unary chains collapse them after
        removing punctuation, as Li et al. do); a PTB tree is returned as it is (its traces and function tags go
        where it is evaluated or prepared: :func:`induce.trees.ptb.clean_tree`). Idempotent."""
        return keyaki_tree(tree, keep_punct=True, collapse=False, profile=self) if self.keyaki else tree

    def describe(self) -> dict:
        """The profile as ``meta.json`` and ``induce eval --json`` record it."""
        return {"name": self.name, "title": self.title, "reference": self.reference,
                "punctuation": sorted(self.punct_tags),
                "words": "POS tag in " + " ".join(sorted(self.word_tags)) if self.word_tags is not None
                else "every token whose tag is not punctuation (nor " + " ".join(sorted(LI_ALWAYS)) + ")",
                "empty_elements": self.empty_elements, "non_syntactic": self.non_syntactic,
                "function_tags": self.function_tags, "unary": self.unary, "split": self.split}


PTB = TreebankProfile(
    name="ptb", title="Penn Treebank (WSJ)", reference="Marcus et al. 1993; word-tag filter of Kim et al. 2019",
    punct_tags=frozenset({"''", "``", ".", ":", ",", "-LRB-", "-RRB-", "#", "$"}), word_tags=WORD_TAGS,
    li_punct=LI_PUNCT_PTB, collapse_root=False,
    empty_elements="-NONE- leaves (traces, null elements) and the constituents they leave empty",
    non_syntactic="none", function_tags="cut after the first - or = (NP-SBJ-1 -> NP; -NONE-, -LRB- kept)",
    unary="kept", split="WSJ sections: train 02-21, valid 22, test 23", file_pattern="*.mrg")

KTB = TreebankProfile(
    name="ktb", title="Keyaki Treebank (Japanese)",
    reference="Butler et al. 2018, version 1.1; prepared as Li et al. 2020 do (i-lijun/UnsupConstParseEval@afa5176 "
              "preprocess.py)",
    punct_tags=LI_PUNCT_KTB, word_tags=None, li_punct=LI_PUNCT_KTB, collapse_root=True,
    empty_elements="subtrees of one leaf written *...* or *...*-N (*pro*, *T*, *speaker*, *), and -NONE-",
    non_syntactic="subtrees labelled ID, META, LS, LST (and, without punctuation, PU -LRB- -RRB- CODE QUOT), in "
                  "reverse pre-order with their parents of one child; a sentence whose removals reach the root is "
                  "dropped",
    function_tags="cut at the first -, _ or = (IP-MAT -> IP; -LRB-, -RRB- kept)",
    unary="unary chains collapsed into their top node, the root included",
    split="Li et al.: the sentences of the .psd files in name order, those with a word left after punctuation "
          "removal shuffled by Python's random.seed(0); test = the first 10%, valid = the next 10%, train = the "
          "rest", file_pattern="*.psd", keyaki=True)

KTB_2020 = TreebankProfile(
    name="ktb-2020", title="Keyaki Treebank (Japanese), the preparation of Li et al.'s paper time",
    reference="Butler et al. 2018, version 1.1; prepared as Li et al. 2020 did at the paper's time "
              "(i-lijun/UnsupConstParseEval@6377b10 preprocess.py)",
    punct_tags=LI_PUNCT_KTB_2020, word_tags=None, li_punct=LI_PUNCT_KTB_2020, collapse_root=True,
    empty_elements="-NONE- subtrees removed; Keyaki's empty elements (*pro*, *T*, *speaker*, *, *...*-N) kept as "
                   "words",
    non_syntactic="subtrees labelled ID, META, LS, LST (and, without punctuation, PU -LRB- -RRB- CODE), in reverse "
                  "pre-order with their parents of one child; a removal that reaches the root's only child stops "
                  "the removals (the tree kept as it is then)",
    function_tags=KTB.function_tags, unary=KTB.unary, split=KTB.split, file_pattern="*.psd", keyaki=True,
    drop_null_words=False, keep_stopped=True)

PROFILES = {profile.name: profile for profile in (PTB, KTB, KTB_2020)}
DEFAULT_TREEBANK = "ptb"


def get_profile(name: str | None, option: str = "--treebank") -> TreebankProfile:
    """The profile named ``name`` (None: ``ptb``); another name is an error naming ``option``."""
    name = name or DEFAULT_TREEBANK
    if name not in PROFILES:
        raise InvalidValueError(f"{option} {name}: unknown treebank; choose one of {', '.join(PROFILES)}")
    return PROFILES[name]


def mark(tree: nltk.Tree, treebank: str) -> nltk.Tree:
    """Record on ``tree`` (an attribute, lost by copies) which treebank's tags it carries; returned."""
    tree.treebank = treebank
    return tree


def treebank_of(tree: nltk.Tree) -> str | None:
    """The treebank :func:`mark` recorded on ``tree``, or None."""
    return getattr(tree, "treebank", None)


# ---- the Keyaki Treebank as Li et al. prepare it -----------------------------------------------------------

_INDEXED_NULL = re.compile(r"^\*(.*)\*-[0-9]+$")
_LABEL_CUT = re.compile(r"[-_=]")
_NUMBER = re.compile(r"^([0-9]{1,3})(,[0-9]{3})*$")
#: Li et al.'s number placeholder (preprocess.py ``Dictionary.NUM``).
LI_NUM = "[num]"


def is_null_word(word: str) -> bool:
    """A Keyaki empty element: ``*...*`` (``*pro*``, ``*T*``, and ``*`` itself) or ``*...*-N`` (preprocess.py
    ``is_ktb_null_element``)."""
    return (word.startswith("*") and word.endswith("*")) or _INDEXED_NULL.match(word) is not None


#: The part-of-speech tags of the Keyaki Treebank 1.1, written without the digit some carry (``VB0``, ``VB2``) and
#: without function tags (``MD-HIGH``): what the words and punctuation of its sentences are tagged with.
KEYAKI_TAGS = frozenset("ADJI ADJN ADV AX AXD CL CND CODE CONJ D FN FW INTJ MD N NEG NPR NUM P PASS PNL PRO PU Q QN "
                        "QUOT SCON SYM VB WADV WD WNUM WPRO -LRB- -RRB-".split())
_TAG_DIGITS = re.compile(r"[0-9]+$")


def is_keyaki_tag(tag: str) -> bool:
    """Whether ``tag`` is one of :data:`KEYAKI_TAGS` (``VB2``, ``NEG-scope`` included)."""
    return tag in KEYAKI_TAGS or _TAG_DIGITS.sub("", _LABEL_CUT.split(tag)[0]) in KEYAKI_TAGS


@dataclass
class KeyakiTagCensus:
    """The POS tags of some trees against the Keyaki Treebank's, as :class:`induce.trees.ptb.TagCensus` counts them
    against the Penn Treebank's: ``tokens`` (leaves other than Keyaki's empty elements and the ``-NONE- ID META LS
    LST`` nodes that :func:`keyaki_tree` removes), ``keyaki`` (those tagged with one of :data:`KEYAKI_TAGS`) and
    ``foreign`` (tag -> tokens, for the other tags)."""

    tokens: int = 0
    keyaki: int = 0
    foreign: Counter = field(default_factory=Counter)

    def add(self, tree: nltk.Tree) -> None:
        for word, tag, _ in tagged_leaves(tree):
            if tag in LI_ALWAYS or is_null_word(word):
                continue
            self.tokens += 1
            if is_keyaki_tag(tag):
                self.keyaki += 1
            else:
                self.foreign[tag] += 1

    @property
    def foreign_tokens(self) -> int:
        return sum(self.foreign.values())

    def not_keyaki(self) -> bool:
        """Whether these are not the Keyaki Treebank's tags: other tags on more than half the tokens (a Penn Treebank
        file shares only ``VB``, ``MD``, ``FW``, ``SYM`` and the brackets' tags with it, a few percent of its
        tokens; in the Keyaki Treebank itself, fewer than one token in a thousand carries another tag)."""
        return 2 * self.keyaki < self.tokens

    def loss(self) -> str:
        """Which tags these trees carry instead, for the error that refuses them."""
        shown = ", ".join(tag for tag, _ in self.foreign.most_common(6))
        return (f"its POS tags are not the Keyaki Treebank's: {100 * self.foreign_tokens / max(self.tokens, 1):.0f}% "
                f"of its {self.tokens:,} tokens carry other tags ({shown}{', ...' if len(self.foreign) > 6 else ''})")


def tag_census(profile: TreebankProfile) -> Union[TagCensus, KeyakiTagCensus]:
    """An empty census of POS tags against those of ``profile``'s treebank: fed tree by tree (``add``), then
    judged by :func:`tag_refusal`."""
    return KeyakiTagCensus() if profile.keyaki else TagCensus()


def tag_refusal(census: Union[TagCensus, KeyakiTagCensus], reader: str = "preprocessing") -> str | None:
    """Why the trees counted in ``census`` are not of its treebank (None when they are): the tags they carry
    instead, and the treebank whose tags those are when it is the other one (``--treebank ...``). ``reader``: who
    reads them, in the Penn Treebank's message (what its word-tag filter would drop)."""
    if isinstance(census, KeyakiTagCensus):
        if not census.not_keyaki():
            return None
        ptb = sum(count for tag, count in census.foreign.items() if tag in PTB_TAGS)
        other = ": the Penn Treebank's tags (--treebank ptb)" if 2 * ptb > census.foreign_tokens else ""
        return census.loss() + other
    if not census.not_ptb():
        return None
    keyaki = sum(count for tag, count in census.foreign.items() if is_keyaki_tag(tag))
    other = ("; those other tags are the Keyaki Treebank's (--treebank ktb)" if 2 * keyaki > census.foreign_tokens
             else "")
    return census.loss(reader) + other


def _remove_in_order(tree: nltk.Tree, labels: frozenset, null_words: bool) -> tuple[nltk.Tree, bool]:
    """``(tree, stopped)``: Li et al.'s ``remove_nodes`` (preprocess.py), step by step. Each subtree labelled in
    ``labels`` (with ``null_words``, also each subtree whose one leaf is an empty element, judged on the tree as it
    is at that step), in reverse pre-order, is deleted together with the parents of one child above it, up to
    (not including) a child of the root. Positions are read at each step, as theirs are, also for a subtree
    that an earlier deletion already took out of the tree: its position inside the removed part is looked up in
    the tree, so that such a subtree can reach the root. Deleting the root fails (their ``IndexError``):
    ``stopped``, the tree as it is at that moment. What their versions do then: ``afa5176`` drops the sentence
    (``ktb``), ``6377b10`` keeps the tree as it is and makes no further removal (``ktb-2020``)."""
    work = nltk.ParentedTree.convert(tree)

    def removable(sub) -> bool:
        if sub.label() in labels:
            return True
        if not null_words:
            return False
        leaves = sub.leaves()
        return len(leaves) == 1 and is_null_word(leaves[0])

    try:
        for sub in reversed(list(work.subtrees())):
            if not removable(sub):
                continue
            position = sub.treeposition()
            if not position:
                continue
            parent = work[position[:-1]]
            while parent and len(parent) == 1:
                sub = parent
                position = sub.treeposition()
                if not position[:-1]:
                    break
                parent = work[position[:-1]]
            del work[sub.treeposition()]
    except IndexError:
        return nltk.Tree.convert(work), True
    return nltk.Tree.convert(work), False


def _cut_labels(tree: nltk.Tree) -> nltk.Tree:
    """Labels cut at the first ``-``, ``_`` or ``=`` (``-LRB-``, ``-RRB-`` kept): preprocess.py ``clean_tree``."""

    def combine(node, children: list):
        label = node.label()
        if label not in ("-RRB-", "-LRB-"):
            label = _LABEL_CUT.split(label)[0]
        rebuilt, position = [], 0
        for child in node:
            if isinstance(child, nltk.Tree):
                rebuilt.append(children[position])
                position += 1
            else:
                rebuilt.append(child)
        return nltk.Tree(label, rebuilt)

    return fold(tree, lambda node: [c for c in node if isinstance(c, nltk.Tree)], combine)


def _unwrap_empty_root(tree: nltk.Tree) -> nltk.Tree:
    """nltk's ``remove_empty_top_bracketing``: a root labelled ``''`` with one child tree is that child."""
    if tree.label() == "" and len(tree) == 1 and isinstance(tree[0], nltk.Tree):
        return tree[0]
    return tree


def collapse_unary_chains(tree: nltk.Tree, collapse_root: bool = True) -> nltk.Tree:
    """Li et al.'s ``collapse_unary`` (in place, returned): a node whose only child is a tree takes that
    child's children, keeping its own label, until it has several children or a word; with
    ``collapse_root=False`` a root of one child is left as it is (its child is collapsed)."""
    stack = [tree[0]] if not collapse_root and len(tree) == 1 else [tree]
    while stack:
        node = stack.pop()
        if not isinstance(node, nltk.Tree):
            continue
        if len(node) == 1 and isinstance(node[0], nltk.Tree):
            node[0:] = list(node[0])
            stack.append(node)
        else:
            stack.extend(node)
    return tree


def keyaki_tree(tree: nltk.Tree, keep_punct: bool = True, collapse: bool = True,
                profile: TreebankProfile | None = None) -> nltk.Tree | None:
    """A Keyaki tree (as read, its ``( (IP-MAT ...) (ID ...))`` wrapper included) prepared as Li et al.'s
    ``Sentence(tree, "ktb", remove_punct=not keep_punct)`` prepares it under ``profile`` (``ktb``, the default,
    or ``ktb-2020``: its punctuation table, and whether empty elements go), but with the words as written (they
    lower-case them and write numbers ``[num]``: :func:`li_normalize_word`, for the LM text): None when no
    word is left. See the module docstring for the steps; ``collapse=False`` stops before the unary
    collapse (:meth:`TreebankProfile.gold_tree`)."""
    profile = profile or KTB
    tree = _unwrap_empty_root(tree)  # not changed: each removal pass works on its own copy (_remove_in_order)
    for labels in (LI_ALWAYS,) if keep_punct else (LI_ALWAYS, profile.li_punct):
        tree, stopped = _remove_in_order(tree, labels, profile.drop_null_words)
        if stopped:
            if not profile.keep_stopped:
                return None
            break
    if not tree.leaves():
        return None
    tree = _unwrap_empty_root(_cut_labels(tree))
    if collapse:
        tree = _unwrap_empty_root(collapse_unary_chains(tree, collapse_root=True))
    return tree if tree.leaves() else None


def li_normalize_word(word: str) -> str:
    """Li et al.'s word normalisation (preprocess.py ``normalize_a_word``): lower case; ``[num]`` for a number
    with thousands separators (``20,000``) or anything Python's ``float()`` reads (``3.5``, ``1e5``, full-width
    ``１２``)."""
    word = word.lower()
    if _NUMBER.match(word):
        return LI_NUM
    try:
        float(word)
    except ValueError:
        return word
    return LI_NUM

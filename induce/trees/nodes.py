"""Trees over word positions, and their spans: the one view of a tree that the decoders, the baselines,
the evaluator and the figures share.

A **span** is ``(start, end)`` with ``end`` exclusive: the words ``start .. end-1`` (see :mod:`induce.trees`).

* :class:`Node` — a labelled constituent over ``[start, end)`` (any arity; the evaluator's and the gold
  trees' form). Leaves of an ``nltk.Tree`` become word nodes (``label=None``); a preterminal ``(NN dog)``
  is a labelled node over one word. Spans of length 1 are never counted, so bare-word leaves and
  preterminals are equivalent for F1.
* :data:`IndexTree` — a binary tree as nested tuples (a word position, or a pair of subtrees): what the
  decoders return, compact and comparable with ``==``.
* :func:`build_binary` — *the* top-down binary-tree builder (decoders and baselines);
  :func:`to_nltk` — *the* conversion to :class:`nltk.Tree` (of a :class:`Node` or an :data:`IndexTree`);
  :func:`tree_spans` — *the* span extractor (of an :class:`nltk.Tree`, a :class:`Node` or an
  :data:`IndexTree`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence, Union

import nltk

#: A binary tree over word positions: a position (one word), or a pair ``(left, right)`` of subtrees.
IndexTree = Union[int, tuple]
#: Label of every internal node of a produced (decoded or baseline) tree.
NODE_LABEL = "S"


@dataclass(slots=True)
class Node:
    """A constituent over words ``[start, end)``; ``children`` empty for a word."""

    label: Optional[str]
    start: int
    end: int
    children: list = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.end - self.start

    def is_word(self) -> bool:
        # An empty constituent (``()`` in a file: no children, no words) is not a word.
        return not self.children and self.length == 1


def from_nltk(tree: nltk.Tree) -> Node:
    """Convert an ``nltk.Tree`` (leaves are strings) into a :class:`Node` over positions 0..n-1.

    Subtrees without any leaf are left out; a tree without leaves gives an empty node (length 0).
    """
    position = 0

    def rec(sub) -> Node:
        nonlocal position
        if not isinstance(sub, nltk.Tree):
            node = Node(None, position, position + 1)
            position += 1
            return node
        start = position
        # Constituents over no word (``(NP )``) cover no span: dropped, so they count nowhere.
        children = [node for node in (rec(child) for child in sub) if node.length > 0]
        return Node(sub.label(), start, position, children)

    return rec(tree)


def prune(node: Node, keep: Sequence[bool]) -> Optional[Node]:
    """Drop the words whose ``keep`` flag is False and renumber the rest from 0.

    Constituents left empty disappear; a constituent left with one child stays (as a unary
    node: it adds no new span, and branching statistics skip it). Returns None if nothing is kept.
    """
    new_index = []
    count = 0
    for flag in keep:
        new_index.append(count)
        count += bool(flag)

    def rec(sub: Node) -> Optional[Node]:
        if sub.is_word():
            return Node(None, new_index[sub.start], new_index[sub.start] + 1) if keep[sub.start] else None
        children = [c for c in (rec(child) for child in sub.children) if c is not None]
        if not children:
            return None
        return Node(sub.label, children[0].start, children[-1].end, children)

    return rec(node)


def constituents(node: Node) -> list:
    """Every non-word node, pre-order: ``[(label, start, end), ...]`` (duplicates from unary chains kept)."""
    out = []
    stack = [node]
    while stack:
        sub = stack.pop()
        if sub.is_word():
            continue
        out.append((sub.label, sub.start, sub.end))
        stack.extend(reversed(sub.children))
    return out


def branching_nodes(node: Node) -> list:
    """The splits of spans longer than 2: ``[(length, [child lengths]), ...]``.

    Unary nodes do not split (their single child, over the same words, is the split counted).
    """
    out = []
    stack = [node]
    while stack:
        sub = stack.pop()
        if sub.is_word():
            continue
        if len(sub.children) >= 2 and sub.length > 2:
            out.append((sub.length, [child.length for child in sub.children]))
        stack.extend(sub.children)
    return out


def right_branching(n: int) -> Node:
    """``(w0 (w1 (w2 ...)))`` over n >= 1 words."""
    node = Node(None, n - 1, n)
    for start in range(n - 2, -1, -1):
        node = Node("S", start, n, [Node(None, start, start + 1), node])
    return node if n > 1 else Node("S", 0, 1, [node])


def left_branching(n: int) -> Node:
    """``(((w0 w1) w2) ...)`` over n >= 1 words."""
    node = Node(None, 0, 1)
    for end in range(2, n + 1):
        node = Node("S", 0, end, [node, Node(None, end - 1, end)])
    return node if n > 1 else Node("S", 0, 1, [node])


def build_binary(start: int, end: int, split_of: Callable[[int, int], int]) -> IndexTree:
    """Top-down binary tree over the words ``[start, end)`` (``end > start``).

    ``split_of(a, b)`` (called only for spans of two or more words, ``b - a >= 2``) returns ``k`` with
    ``a < k < b``: the span ``[a, b)`` becomes ``([a, k), [k, b))``.
    """
    if end - start == 1:
        return start
    k = split_of(start, end)
    if not start < k < end:
        raise ValueError(f"split point {k} outside ({start}, {end})")
    return (build_binary(start, k, split_of), build_binary(k, end, split_of))


def from_index_tree(tree: IndexTree, label: str = NODE_LABEL) -> Node:
    """An :data:`IndexTree` as a :class:`Node` (internal nodes labelled ``label``, word nodes unlabelled)."""
    if isinstance(tree, int):
        return Node(None, tree, tree + 1)
    left, right = from_index_tree(tree[0], label), from_index_tree(tree[1], label)
    return Node(label, left.start, right.end, [left, right])


def index_tree_from_nltk(tree: nltk.Tree) -> IndexTree:
    """Inverse of :func:`to_nltk` for binary trees (leaves numbered left to right; unary nodes skipped)."""
    counter = iter(range(len(tree.leaves())))

    def rec(node):
        if not isinstance(node, nltk.Tree):
            return next(counter)
        if len(node) == 1:
            return rec(node[0])
        if len(node) != 2:
            raise ValueError("tree is not binary")
        return (rec(node[0]), rec(node[1]))

    return rec(tree)


def to_nltk(tree: Union[Node, IndexTree], words: Sequence[str], label: str = NODE_LABEL) -> nltk.Tree:
    """An ``nltk.Tree`` whose leaves are ``words`` (word nodes become bare leaves; unlabelled internal
    nodes get ``label``). A one-word tree becomes ``(S word)``; a decoded tree is binary."""
    node = tree if isinstance(tree, Node) else from_index_tree(tree, label)
    if node.is_word():
        return nltk.Tree(label, [words[node.start]])

    def rec(sub: Node):
        if sub.is_word():
            return words[sub.start]
        return nltk.Tree(sub.label or label, [rec(child) for child in sub.children])

    return rec(node)


def tree_spans(tree: Union[nltk.Tree, Node, IndexTree], min_length: int = 2) -> set[tuple[int, int]]:
    """The spans ``(start, end)`` of every constituent of at least ``min_length`` words (``min_length=1``:
    single words too; unary chains give one span)."""
    if isinstance(tree, nltk.Tree):
        tree = from_nltk(tree)
    elif not isinstance(tree, Node):
        tree = from_index_tree(tree)
    spans = {(start, end) for _, start, end in constituents(tree) if end - start >= min_length}
    if min_length <= 1:
        stack = [tree]
        while stack:
            sub = stack.pop()
            if sub.is_word():
                spans.add((sub.start, sub.end))
            stack.extend(sub.children)
    return spans

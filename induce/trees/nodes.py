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

No function here recurses: a right-branching tree of a long sentence is as deep as the sentence is long,
past Python's recursion limit (1,000 frames) at some hundreds of words. Each walks an explicit stack;
:func:`fold` is the post-order walk most of them share (and :mod:`.transforms`, :mod:`.ptb`). Of
``nltk.Tree``'s own methods, ``leaves()``, ``pos()``, ``treepositions()``, ``height()``, ``copy(deep=True)``,
``pformat()`` and ``fromstring()`` (a depth limit of 500) fail on such trees: :func:`tagged_leaves` and
:func:`induce.trees.brackets.tree_from_text` stand in for the ones a reader needs.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence, TypeVar, Union

import nltk

#: A binary tree over word positions: a position (one word), or a pair ``(left, right)`` of subtrees.
IndexTree = Union[int, tuple]
#: Label of every internal node of a produced (decoded or baseline) tree.
NODE_LABEL = "S"


Item = TypeVar("Item")


def fold(root: Item, children_of: Callable[[Item], Sequence[Item]], combine: Callable[[Item, list], Any]) -> Any:
    """``combine(item, [the results of its children])`` for every item of a tree, children first (post-order,
    left to right), without recursion; returns the root's result. ``children_of(item)`` lists an item's
    children (empty for a leaf)."""
    stack = [(root, children_of(root), [])]  # (item, its children, the results of those combined so far)
    while True:
        item, children, done = stack[-1]
        if len(done) < len(children):
            child = children[len(done)]
            grandchildren = children_of(child)
            if grandchildren:
                stack.append((child, grandchildren, []))
            else:
                done.append(combine(child, []))
            continue
        stack.pop()
        value = combine(item, done)
        if not stack:
            return value
        stack[-1][2].append(value)


def nltk_children(item) -> list:
    """The children of an ``nltk.Tree`` (a leaf has none)."""
    return list(item) if isinstance(item, nltk.Tree) else []


def tagged_leaves(tree: nltk.Tree) -> list:
    """``[(leaf, label of its parent, depth)]`` left to right (depth 1: a child of the root): ``nltk.Tree.pos()``
    with each leaf's depth, without recursion."""
    out = []
    stack = [(tree, None, 0)]
    while stack:
        item, parent_label, depth = stack.pop()
        if isinstance(item, nltk.Tree):
            label = item.label()
            stack.extend((child, label, depth + 1) for child in reversed(item))
        else:
            out.append((item, parent_label, depth))
    return out


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

    def combine(sub, children: list) -> Node:
        nonlocal position
        if not isinstance(sub, nltk.Tree):
            position += 1
            return Node(None, position - 1, position)
        # Constituents over no word (``(NP )``) cover no span: dropped, so they count nowhere.
        children = [node for node in children if node.length > 0]
        return Node(sub.label(), children[0].start if children else position, position, children)

    return fold(tree, nltk_children, combine)


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

    def combine(sub: Node, children: list) -> Optional[Node]:
        if sub.is_word():
            return Node(None, new_index[sub.start], new_index[sub.start] + 1) if keep[sub.start] else None
        children = [child for child in children if child is not None]
        if not children:
            return None
        return Node(sub.label, children[0].start, children[-1].end, children)

    return fold(node, _node_children, combine)


def _node_children(node: Node) -> list:
    return node.children


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

    ``split_of(a, b)`` (called only for spans of two or more words, ``b - a >= 2``, in pre-order, left
    before right) returns ``k`` with ``a < k < b``: the span ``[a, b)`` becomes ``([a, k), [k, b))``.
    """

    def halves(span: tuple) -> list:
        a, b = span
        if b - a == 1:
            return []
        k = split_of(a, b)
        if not a < k < b:
            raise ValueError(f"split point {k} outside ({a}, {b})")
        return [(a, k), (k, b)]

    return fold((start, end), halves, lambda span, children: tuple(children) if children else span[0])


def _index_children(tree: IndexTree) -> Sequence:
    return () if isinstance(tree, int) else tree


def from_index_tree(tree: IndexTree, label: str = NODE_LABEL) -> Node:
    """An :data:`IndexTree` as a :class:`Node` (internal nodes labelled ``label``, word nodes unlabelled)."""

    def combine(sub: IndexTree, children: list) -> Node:
        if not children:
            return Node(None, sub, sub + 1)
        return Node(label, children[0].start, children[1].end, children)

    return fold(tree, _index_children, combine)


def index_tree_from_nltk(tree: nltk.Tree) -> IndexTree:
    """Inverse of :func:`to_nltk` for binary trees (leaves numbered left to right; unary nodes skipped)."""
    counter = iter(range(len(tagged_leaves(tree))))

    def combine(node, children: list) -> IndexTree:
        if not isinstance(node, nltk.Tree):
            return next(counter)
        if len(children) == 1:
            return children[0]
        if len(children) != 2:
            raise ValueError("tree is not binary")
        return (children[0], children[1])

    return fold(tree, nltk_children, combine)


def to_nltk(tree: Union[Node, IndexTree], words: Sequence[str], label: str = NODE_LABEL) -> nltk.Tree:
    """An ``nltk.Tree`` whose leaves are ``words`` (word nodes become bare leaves; unlabelled internal
    nodes get ``label``). A one-word tree becomes ``(S word)``; a decoded tree is binary."""
    node = tree if isinstance(tree, Node) else from_index_tree(tree, label)
    if node.is_word():
        return nltk.Tree(label, [words[node.start]])

    def combine(sub: Node, children: list):
        return words[sub.start] if sub.is_word() else nltk.Tree(sub.label or label, children)

    return fold(node, _node_children, combine)


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

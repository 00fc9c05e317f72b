"""Index trees: the evaluator's view of a tree (labels and word positions only).

An :class:`Node` covers the words ``[start, end)``. Leaves of an ``nltk.Tree`` become word
nodes (``label=None``); a preterminal ``(NN dog)`` is a labelled node over one word. Spans of
length 1 are never counted, so bare-word leaves and preterminals are equivalent for F1.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Sequence

import nltk


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


def split_tree(start: int, end: int, choose_split) -> Node:
    """Binary tree over ``[start, end)`` splitting each span at ``choose_split(start, end)``
    (a position k with start < k < end: children ``[start, k)`` and ``[k, end)``)."""
    if end - start == 1:
        return Node(None, start, end)
    k = choose_split(start, end)
    if not start < k < end:
        raise ValueError(f"split point {k} outside ({start}, {end})")
    return Node("S", start, end, [split_tree(start, k, choose_split), split_tree(k, end, choose_split)])


def to_nltk(node: Node, words: Sequence[str]) -> nltk.Tree:
    """Back to an ``nltk.Tree`` whose leaves are ``words`` (word nodes become bare leaves)."""
    if node.is_word():
        return nltk.Tree("S", [words[node.start]])

    def rec(sub: Node):
        if sub.is_word():
            return words[sub.start]
        return nltk.Tree(sub.label or "S", [rec(child) for child in sub.children])

    return rec(node)

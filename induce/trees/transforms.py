"""Reshaping a :class:`~induce.trees.nodes.Node` tree the way published evaluation scripts do before
they count spans: collapsing unary chains, binarising n-ary nodes, making every word sit under a
preterminal, and reading a tree's preterminal tags.

A *preterminal* is a non-word node whose only child is a word (``(NN dog)``); a *bracket* (EVALB's
word) is any other non-word node. Each function walks an explicit stack (:func:`~induce.trees.nodes.fold`),
however deep the tree.
"""
from __future__ import annotations

from induce.trees.nodes import Node, fold


def is_preterminal(node: Node) -> bool:
    """A non-word node whose only child is a word (``(NN dog)``, ``(X dog)``)."""
    return len(node.children) == 1 and node.children[0].is_word()


def leaf_tags(node: Node) -> list:
    """The preterminal label of each word, left to right (None for a word with no preterminal above it)."""
    tags: list = []
    stack = [(node, None)]
    while stack:
        sub, parent_tag = stack.pop()
        if sub.is_word():
            tags.append(parent_tag)
            continue
        tag = sub.label if is_preterminal(sub) else None
        stack.extend((child, tag) for child in reversed(sub.children))
    return tags


def collapse_unary(node: Node, keep_root_child: bool = False) -> Node:
    """A copy where every node with a single non-word child is merged with it: the upper node's label
    over the lower node's children. A chain ending on a word becomes one preterminal (``(NP (PRP he))``
    -> ``(NP he)``). ``keep_root_child``: the root is not merged with its only child (Li et al. 2020's
    preprocessing: ``(FRAG (NP john q. public))`` keeps both brackets); chains below it still collapse."""

    def combine(sub: Node, children: list) -> Node:
        if sub.is_word():
            return Node(None, sub.start, sub.end)
        if len(children) == 1 and not children[0].is_word() and not (sub is node and keep_root_child):
            return Node(sub.label, sub.start, sub.end, children[0].children)
        return Node(sub.label, sub.start, sub.end, children)

    return fold(node, _children, combine)


def _children(node: Node) -> list:
    return node.children


def binarise(node: Node, side: str) -> Node:
    """A copy where every node with more than two children becomes a chain of binary nodes: ``left``
    groups from the left (``((a b) c)``), ``right`` from the right (``(a (b c))``); the nodes it adds are
    labelled ``LABEL@`` (they are not treebank constituents). Unary nodes stay as they are."""
    if side not in ("left", "right"):
        raise ValueError(f"binarise: side must be 'left' or 'right', not {side!r}")

    def combine(sub: Node, children: list) -> Node:
        if sub.is_word():
            return Node(None, sub.start, sub.end)
        new_label = f"{sub.label or ''}@"
        if side == "left":
            while len(children) > 2:
                first, second = children[0], children[1]
                children = [Node(new_label, first.start, second.end, [first, second])] + children[2:]
        else:
            while len(children) > 2:
                before, last = children[-2], children[-1]
                children = children[:-2] + [Node(new_label, before.start, last.end, [before, last])]
        return Node(sub.label, sub.start, sub.end, children)

    return fold(node, _children, combine)


def with_preterminals(node: Node, tag: str) -> Node:
    """A copy where every word that has no preterminal above it gets one labelled ``tag``, and every
    preterminal is relabelled ``tag`` (what DIORA's EVALB driver writes for a prediction: ``(DT word)``)."""

    def children_of(sub: Node) -> list:
        return [] if is_preterminal(sub) else sub.children

    def combine(sub: Node, children: list) -> Node:
        if sub.is_word() or is_preterminal(sub):
            return Node(tag, sub.start, sub.end, [Node(None, sub.start, sub.end)])
        return Node(sub.label, sub.start, sub.end, children)

    return fold(node, children_of, combine)


def relabel_brackets(node: Node, label: str) -> Node:
    """A copy where every bracket (non-word, non-preterminal node) is labelled ``label``."""

    def children_of(sub: Node) -> list:
        return [] if is_preterminal(sub) else sub.children

    def combine(sub: Node, children: list) -> Node:
        if sub.is_word() or is_preterminal(sub):
            return sub
        return Node(label, sub.start, sub.end, children)

    return fold(node, children_of, combine)


def brackets(node: Node | None) -> list:
    """``[(label, start, end)]`` of every bracket (non-word, non-preterminal node), pre-order."""
    if node is None:
        return []
    out = []
    stack = [node]
    while stack:
        sub = stack.pop()
        if sub.is_word() or is_preterminal(sub):
            continue
        out.append((sub.label, sub.start, sub.end))
        stack.extend(reversed(sub.children))
    return out

"""Baseline trees: right-, left-branching, balanced and random binary trees.

``random``: at every span of two or more words the split point is drawn uniformly among the
``length - 1`` possible ones (top-down), with a seeded ``random.Random``; ``balanced``: the left
part gets ``ceil(length / 2)`` words.
"""
from __future__ import annotations

import random
from typing import Sequence

import nltk

from induce.errors import InvalidValueError
from induce.trees.nodes import Node, build_binary, from_index_tree, left_branching, right_branching

from .conventions import DEFAULT, Convention
from .gold import Gold, prepare_gold

BASELINES = ("right", "left", "balanced", "random")


def baseline_tree(n_words: int, kind: str, rng: random.Random | None = None) -> Node:
    """A baseline binary tree over ``n_words >= 1`` words."""
    if kind not in BASELINES:
        raise InvalidValueError(f"unknown baseline {kind!r}; choose one of {', '.join(BASELINES)}")
    if n_words < 1:
        raise ValueError("a tree needs at least one word")
    if kind == "right":
        return right_branching(n_words)
    if kind == "left":
        return left_branching(n_words)
    if n_words == 1:
        return Node("S", 0, 1, [Node(None, 0, 1)])
    if kind == "balanced":
        return from_index_tree(build_binary(0, n_words, lambda start, end: start + (end - start + 1) // 2))
    rng = rng or random.Random(0)
    return from_index_tree(build_binary(0, n_words, lambda start, end: rng.randint(start + 1, end - 1)))


def baseline_predictions(
    gold_trees: Sequence[nltk.Tree], kind: str, convention: Convention = DEFAULT, seed: int = 0
) -> list[Node]:
    """One baseline tree per gold tree (or :class:`~induce.evaluation.gold.Gold`), over the words the convention
    keeps (for :func:`induce.evaluation.engine.score`); ``random`` draws one for every sentence, in order."""
    rng = random.Random(seed)
    out = []
    for tree in gold_trees:
        gold = tree if isinstance(tree, Gold) else prepare_gold(tree, convention.treebank)
        n_words = sum(gold.keep(convention))
        out.append(baseline_tree(max(n_words, 1), kind, rng))
    return out

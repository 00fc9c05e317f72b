"""Tree ensembles (``induce ensemble``): per sentence, the binary tree whose spans collect the most
votes of the member trees (CKY over span counts). This follows the description of the ensemble of
Shayegh et al. (2024) as the tree maximising the summed span hits of its members; their code was not read,
so their exact weighting and tie-breaking may differ (ours are below).

``vote(i, j)`` = the sum of the weights of the members that have the span ``[i, j)`` (of two words or
more; an n-ary member gives its spans as they are). The whole sentence and single words are in every
binary tree, so counting them or not changes no choice. Ties are broken towards the **smallest split
point** at each span (the leftmost), so the result is deterministic.

Weights are votes: each finite and ``>= 0``, not all 0 (:func:`check_weights`). A negative weight would be an
anti-vote, and all-zero or infinite weights leave every span tied (``inf - inf`` is ``nan``), which the
tie rule turns into the right-branching tree whatever the members say.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from induce.errors import InvalidValueError
from induce.trees.nodes import IndexTree, Node, build_binary, tree_spans

#: Scores closer than this are a tie (float sums of weights).
_TIE = 1e-9


def check_weights(weights: Sequence[float], count: int, option: str = "weights", given: str | None = None) -> list:
    """``weights`` as a list of floats: one per member (``count``), each finite and ``>= 0``, not all 0; else
    an :class:`~induce.errors.InvalidValueError` naming ``option``, the weights as ``given`` and the weight."""
    weights = list(weights)
    shown = given or ",".join(f"{w:g}" if isinstance(w, (int, float)) else repr(w) for w in weights)
    if len(weights) != count:
        raise InvalidValueError(f"{option} {shown}: {len(weights)} weights for {count} sources")
    for number, weight in enumerate(weights, start=1):
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not math.isfinite(weight):
            raise InvalidValueError(f"{option} {shown}: weight {number} is {weight!r}; a weight is a finite number "
                                    ">= 0 (how much the source's spans count)")
        if weight < 0:
            raise InvalidValueError(f"{option} {shown}: weight {number} is {weight:g}; weights must be >= 0 (a "
                                    "weight is how much a source's spans count, not a vote against them)")
    if not any(weights):
        raise InvalidValueError(f"{option} {shown}: every weight is 0, so no span has a vote; give at least one "
                                "source a positive weight")
    return [float(w) for w in weights]


def parse_weights(text: str, count: int, option: str = "--weights") -> list:
    """``"1,1,2"`` as ``[1.0, 1.0, 2.0]`` for ``count`` sources (:func:`check_weights`); an empty item or
    one that is not a number is an :class:`~induce.errors.InvalidValueError` naming it."""
    weights = []
    for number, item in enumerate(text.split(","), start=1):
        if not item.strip():
            raise InvalidValueError(f"{option} {text}: weight {number} is empty; give one number per source, "
                                    "comma-separated (e.g. 1,1,2)")
        try:
            weights.append(float(item))
        except ValueError:
            raise InvalidValueError(f"{option} {text}: weight {number} ({item.strip()!r}) is not a number") from None
    return check_weights(weights, count, option, text)


def span_votes(members: Sequence[Node], weights: Sequence[float] | None = None) -> np.ndarray:
    """``[n + 1, n + 1]`` votes: ``votes[i, j]`` = summed weight of the members with span ``[i, j)``."""
    n = members[0].end - members[0].start
    weights = [1.0] * len(members) if weights is None else list(weights)
    votes = np.zeros((n + 1, n + 1))
    for member, weight in zip(members, weights, strict=True):
        if member.end - member.start != n:
            raise ValueError("ensemble members cover different numbers of words")
        for i, j in tree_spans(member):
            votes[i, j] += weight
    return votes


def cky_best_tree(votes: np.ndarray) -> tuple[IndexTree, float]:
    """``(tree, score)``: the binary tree over ``n = len(votes) - 1`` words maximising the summed votes of
    its spans of two words or more, ties to the smallest split point. ``O(n^3)`` work in ``n - 1`` numpy
    steps, one per span length (a 1,000-word sentence in seconds)."""
    n = votes.shape[0] - 1
    size = n + 1
    best = np.zeros((size, size))
    best_t = np.zeros((size, size))  # best transposed: the column best[:, j] as a contiguous row
    split = np.zeros((size, size), dtype=np.int64)
    flat, flat_t, step = best.reshape(-1), best_t.reshape(-1), best.itemsize
    for length in range(2, n + 1):  # every span of this length at once: [spans, split points]
        count = n - length + 1
        # left[i, k] = best[i, i + 1 + k], right[i, k] = best[i + 1 + k, i + length]: views, no copies
        left = as_strided(flat[1:], shape=(count, length - 1), strides=((size + 1) * step, step))
        right = as_strided(flat_t[length * size + 1:], shape=(count, length - 1), strides=((size + 1) * step, step))
        candidates = left + right
        top = candidates.max(axis=1, keepdims=True)
        k = np.argmax(candidates >= top - _TIE, axis=1)  # the smallest split among the ties
        starts = np.arange(count)
        split[starts, starts + length] = starts + 1 + k
        best[starts, starts + length] = best_t[starts + length, starts] = (
            votes[starts, starts + length] + candidates[starts, k])
    tree = build_binary(0, n, lambda start, end: int(split[start, end]))
    return tree, float(best[0, n])


def ensemble_tree(members: Sequence[Node], weights: Sequence[float] | None = None) -> IndexTree:
    """The ensemble tree of one sentence (module docstring)."""
    return cky_best_tree(span_votes(members, weights))[0]

"""Agreement between tree sets (``induce eval --agreement A B C``): the pairwise F1 matrix, e.g. the
self-F1 of one model trained with several seeds (Williams et al. 2018's consistency measure).

F1 between two tree sets over the same sentences is corpus F1 with either set as the reference; it is
symmetric (swapping the sets swaps precision and recall). Spans are counted as the evaluator counts them
by default: spans of two words or more, not the whole sentence, as sets.
"""
from __future__ import annotations

import statistics
from collections.abc import Sequence

from induce.trees.nodes import Node, tree_spans


def counted_spans(tree: Node) -> set:
    """The spans of two words or more but the whole sentence (``[start, end)``)."""
    return tree_spans(tree) - {(tree.start, tree.end)}


def pair_f1(first: Sequence[Node], second: Sequence[Node]) -> float:
    """Corpus F1 (percent) of ``second`` against ``first`` (the same sentences, the same words); 100 when
    neither has a counted span."""
    match = n_first = n_second = 0
    for a, b in zip(first, second, strict=True):
        spans_a, spans_b = counted_spans(a), counted_spans(b)
        match += len(spans_a & spans_b)
        n_first += len(spans_a)
        n_second += len(spans_b)
    if n_first + n_second == 0:
        return 100.0
    return 100.0 * 2 * match / (n_first + n_second)


def agreement_matrix(tree_sets: Sequence[Sequence[Node]]) -> list:
    """``[k][l]`` = F1 (percent) between tree sets ``k`` and ``l`` (diagonal 100)."""
    count = len(tree_sets)
    matrix = [[100.0] * count for _ in range(count)]
    for k in range(count):
        for other in range(k + 1, count):
            matrix[k][other] = matrix[other][k] = pair_f1(tree_sets[k], tree_sets[other])
    return matrix


def mean_off_diagonal(matrix: Sequence[Sequence[float]]) -> float | None:
    """The mean F1 over distinct pairs (self-F1); None for a single set."""
    values = [matrix[k][other] for k in range(len(matrix)) for other in range(k + 1, len(matrix))]
    return statistics.fmean(values) if values else None

"""Agreement, ensembles and the bootstrap against hand-worked examples (and the CKY against brute force)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from induce.evaluation.agreement import agreement_matrix, mean_off_diagonal
from induce.evaluation.bootstrap import (
    confidence_interval,
    paired_bootstrap,
    percentile_interval,
    resample_indices,
)
from induce.evaluation.ensemble import cky_best_tree, ensemble_tree, span_votes
from induce.trees.nodes import from_index_tree, tree_spans

# Four words a b c d; the spans counted: two words or more, not the whole sentence.
A = from_index_tree(((0, 1), (2, 3)))  # ((a b) (c d))   {(0,2), (2,4)}
B = from_index_tree((((0, 1), 2), 3))  # (((a b) c) d)   {(0,2), (0,3)}
C = from_index_tree((0, (1, (2, 3))))  # (a (b (c d)))   {(1,4), (2,4)}


def test_agreement_matrix_hand_worked():
    matrix = agreement_matrix([[A], [B], [C]])
    assert matrix == [[100.0, 50.0, 50.0], [50.0, 100.0, 0.0], [50.0, 0.0, 100.0]]
    assert mean_off_diagonal(matrix) == pytest.approx(100 / 3)
    assert mean_off_diagonal([[100.0]]) is None


def test_ensemble_hand_worked():
    """Votes (0,2)=2, (2,4)=2, (0,3)=1, (1,4)=1, (1,3)=0: ((a b)(c d)) scores 4, the best."""
    votes = span_votes([A, B, C])
    assert (votes[0, 2], votes[2, 4], votes[0, 3], votes[1, 4], votes[1, 3]) == (2, 2, 1, 1, 0)
    tree, score = cky_best_tree(votes)
    assert tree == ((0, 1), (2, 3))
    assert score == 4 + 3  # + the whole sentence, in every member


def test_ensemble_ties_go_to_the_smallest_split():
    """Weights (0, 1, 1): every tree but the two with (1,3) scores 2; the smallest top split is 1."""
    assert ensemble_tree([A, B, C], weights=[0, 1, 1]) == (0, (1, (2, 3)))
    assert ensemble_tree([A, A, C]) == ((0, 1), (2, 3))  # a majority wins


def all_binary_trees(start: int, end: int):
    if end - start == 1:
        yield start
        return
    for k in range(start + 1, end):
        for left in all_binary_trees(start, k):
            for right in all_binary_trees(k, end):
                yield (left, right)


@settings(max_examples=60, deadline=None)
@given(st.integers(min_value=1, max_value=7).flatmap(
    lambda n: st.tuples(st.just(n), st.lists(st.integers(0, 3), min_size=(n + 1) ** 2, max_size=(n + 1) ** 2))))
def test_cky_finds_the_best_tree_and_the_leftmost_among_ties(case):
    """Brute force over every binary tree: the CKY's score is the maximum, and its tree is the first of the
    best trees in the order 'smallest split at the top, then recursively' (= generation order here)."""
    n, flat = case
    votes = np.array(flat, dtype=float).reshape(n + 1, n + 1)
    tree, score = cky_best_tree(votes)

    def tree_score(t):
        return sum(votes[i, j] for i, j in tree_spans(from_index_tree(t)))

    scores = [(tree_score(t), t) for t in all_binary_trees(0, n)]
    best = max(s for s, _ in scores)
    assert score == pytest.approx(best)
    assert tree_score(tree) == pytest.approx(best)
    assert tree == next(t for s, t in scores if s == best)


@dataclass
class Counts:
    match: int
    n_pred: int
    n_gold: int
    precision: float = 0.0
    recall: float = 0.0
    f1: float = 0.0


def test_paired_bootstrap_exact_hand_worked():
    """Sentence 1: A 2/2/2, B 1/2/2; sentence 2: A 0/1/1, B 1/1/1. Both 66.67 on all, delta 0: equal figures
    are no evidence, p = 1 with no direction. The four resamples: {1,1} +50, {2,2} -100, {1,2} and {2,1} 0
    -> interval (-100, +50)."""
    a = [Counts(2, 2, 2), Counts(0, 1, 1)]
    b = [Counts(1, 2, 2), Counts(1, 1, 1)]
    result = paired_bootstrap(a, b, exhaustive=True)
    assert result["a"] == pytest.approx(200 / 3) and result["b"] == pytest.approx(200 / 3)
    assert result["delta"] == pytest.approx(0)
    assert result["p_value"] == 1.0 and result["alternative"] is None
    assert (result["low"], result["high"]) == (pytest.approx(-100), pytest.approx(50))
    assert result["resamples"] == 4


def test_paired_bootstrap_of_a_system_with_itself_is_p_1():
    a = [Counts(k % 3, 2, 2) for k in range(12)]
    result = paired_bootstrap(a, a, resamples=200, seed=1)
    assert (result["delta"], result["low"], result["high"]) == (0.0, 0.0, 0.0)
    assert result["p_value"] == 1.0 and result["alternative"] is None


def test_paired_bootstrap_p_counts_the_resamples_at_least_twice_the_difference():
    """Sentence 1: A 2/2/2, B 0/2/2; sentence 2: A 0/2/2, B 1/2/2. A 50, B 25, delta +25. The four
    resamples: {1,1} +100, {2,2} -50, {1,2} and {2,1} +25 -> one of four is >= 2 delta: p = 1/4 for A > B."""
    a = [Counts(2, 2, 2), Counts(0, 2, 2)]
    b = [Counts(0, 2, 2), Counts(1, 2, 2)]
    result = paired_bootstrap(a, b, exhaustive=True)
    assert result["delta"] == pytest.approx(25)
    assert result["p_value"] == pytest.approx(0.25) and result["alternative"] == "A > B"
    swapped = paired_bootstrap(b, a, exhaustive=True)
    assert swapped["p_value"] == pytest.approx(0.25) and swapped["alternative"] == "A < B"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4), st.integers(1, 4), st.integers(1, 4)),
                min_size=1, max_size=40),
       st.integers(1, 400), st.integers(0, 5))
def test_swapping_a_and_b_negates_the_difference_and_its_interval_exactly(rows, resamples, seed):
    a = [Counts(min(m, p, g), p, g) for m, _, p, g in rows]
    b = [Counts(min(m, p, g), p, g) for _, m, p, g in rows]
    forward = paired_bootstrap(a, b, resamples=resamples, seed=seed)
    backward = paired_bootstrap(b, a, resamples=resamples, seed=seed)
    assert backward["delta"] == -forward["delta"]
    assert (backward["low"], backward["high"]) == (-forward["high"], -forward["low"])
    assert backward["p_value"] == forward["p_value"]


def test_the_interval_of_a_known_spread_is_antisymmetric():
    """1000 resamples with many distinct differences: nearest ranks (25th, 975th) would not negate."""
    a = [Counts(k % 5, 4, 4) for k in range(60)]
    b = [Counts((k * 7) % 5, 4, 4) for k in range(60)]
    forward, backward = paired_bootstrap(a, b), paired_bootstrap(b, a)
    assert (backward["low"], backward["high"]) == (-forward["high"], -forward["low"])


def test_paired_bootstrap_of_a_clear_difference_is_significant_and_seeded():
    a = [Counts(2, 2, 2)] * 30
    b = [Counts(1, 2, 2)] * 20 + [Counts(2, 2, 2)] * 10
    first = paired_bootstrap(a, b, resamples=500, seed=3)
    assert first == paired_bootstrap(a, b, resamples=500, seed=3)
    assert first["delta"] == pytest.approx(100 - 100 * 40 / 60)
    assert first["p_value"] < 0.01 and first["low"] > 0


def test_percentile_interval_takes_symmetric_ranks():
    values = np.arange(1, 201, dtype=float)  # 200 values: the 5th smallest and the 5th largest
    assert percentile_interval(values) == (5.0, 196.0)
    assert percentile_interval(-values) == (-196.0, -5.0)
    assert percentile_interval(np.array([3.0])) == (3.0, 3.0)
    assert resample_indices(3, exhaustive=True).shape == (27, 3)


def test_confidence_interval_contains_the_figure():
    sentences = [Counts(k % 3, 2, 2, f1=(k % 3) / 2) for k in range(40)]
    low, high = confidence_interval(sentences, "corpus_f1", resamples=300, seed=1)
    assert low < 100 * sum(s.match for s in sentences) / 80 < high
    low, high = confidence_interval(sentences, "sentence_f1", resamples=300, seed=1)
    assert low < 50 < high

"""Decoders of induce.trees.decoders against brute force, hand-built examples and tree round trips."""
from __future__ import annotations

import nltk
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from induce.evaluation.baselines import baseline_tree
from induce.trees.decoders import gold_span_targets, peel_tree, span_tree, unbiased_tree
from induce.trees.nodes import build_binary, from_index_tree, from_nltk, index_tree_from_nltk, to_nltk, tree_spans


# ---------------------------------------------------------------- brute-force references
def shen_build_tree(depth, sen):
    """Literal transcription of ``build_tree`` from the ON-LSTM / PRPN code (lists of words)."""
    assert len(depth) == len(sen)
    if len(depth) == 1:
        return sen[0]
    idx_max = int(np.argmax(depth))
    parse_tree = []
    if len(sen[:idx_max]) > 0:
        parse_tree.append(shen_build_tree(depth[:idx_max], sen[:idx_max]))
    tree1 = sen[idx_max]
    if len(sen[idx_max + 1 :]) > 0:
        tree1 = [tree1, shen_build_tree(depth[idx_max + 1 :], sen[idx_max + 1 :])]
    if parse_tree == []:
        return tree1
    parse_tree.append(tree1)
    return parse_tree


def as_tuple(tree):
    return tuple(as_tuple(t) for t in tree) if isinstance(tree, list) else tree


@st.composite
def binary_trees(draw, max_leaves=12):
    """A random binary tree over positions 0..n-1 as nested tuples."""
    n = draw(st.integers(1, max_leaves))

    def build(i, j):
        if i == j:
            return i
        k = draw(st.integers(i + 1, j))
        return (build(i, k - 1), build(k, j))

    return build(0, n - 1)


def leaves(tree):
    return [tree] if isinstance(tree, int) else leaves(tree[0]) + leaves(tree[1])


def distances_encoding(tree):
    """Distances whose unbiased decoding is ``tree``: the split position of a node at depth D gets
    ``-D`` (higher nodes split at larger distances); position 0 gets the lowest value."""
    n = len(leaves(tree))
    d = np.full(n, -(10.0**6))

    def rec(node, depth):
        if isinstance(node, int):
            return
        d[leaves(node[1])[0]] = -depth
        rec(node[0], depth + 1)
        rec(node[1], depth + 1)

    rec(tree, 0)
    return d


def span_score_encoding(tree):
    """Scores ``[n, n]`` whose greedy PaLM decoding is ``tree``: a gold span of length L scores L,
    every other span 0 (at each node the right child is the longest gold span among the candidates)."""
    n = len(leaves(tree))
    s = np.zeros((n, n))
    for start, end in tree_spans(tree, min_length=1):
        s[end - 1, end - 1 - start] = end - start
    return s


# ---------------------------------------------------------------- distance decoders
@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=1, max_size=15))
def test_peel_matches_reference_build_tree(distances):
    words = list(range(len(distances)))
    assert peel_tree(distances) == as_tuple(shen_build_tree(distances, words))


def test_peel_hand_example():
    # d: largest at position 2 -> ((0 1) (2 (3 4))); inside [0, 1] the max is d[0] -> (0 1);
    # inside [3, 4] the max is d[4] -> left part (3), right (4) -> (3 4).
    assert peel_tree([0.3, 0.1, 0.9, 0.2, 0.5]) == ((0, 1), (2, (3, 4)))
    # the first word having the largest distance peels it off at the top: (0 (1 2))
    assert peel_tree([0.9, 0.1, 0.5]) == (0, (1, 2))


@settings(max_examples=200, deadline=None)
@given(binary_trees())
def test_unbiased_round_trip(tree):
    assert unbiased_tree(distances_encoding(tree)) == tree


def test_unbiased_hand_example_and_difference_from_peel():
    d = [0.0, 0.1, 0.9, 0.2, 0.5]
    # unbiased: split before 2 -> [0,1] [2,4]; [2,4]: max over positions 3,4 is d[4] -> ((2 3) 4)
    assert unbiased_tree(d) == ((0, 1), ((2, 3), 4))
    assert peel_tree(d) == ((0, 1), (2, (3, 4)))


# ---------------------------------------------------------------- span decoder
@settings(max_examples=200, deadline=None)
@given(binary_trees())
def test_span_round_trip(tree):
    n = len(leaves(tree))
    assert span_tree(span_score_encoding(tree), n) == tree


def test_increasing_span_scores_give_right_branching():
    n = 6
    scores = np.tile(np.arange(1, n + 1, dtype=float), (n, 1))  # s[t, k] = k + 1
    assert span_tree(scores, n) == (0, (1, (2, (3, (4, 5)))))
    # the opposite order gives left-branching trees
    assert span_tree(scores[:, ::-1].copy(), n) == (((((0, 1), 2), 3), 4), 5)


def test_span_decoder_against_brute_force_recursion():
    rng = np.random.default_rng(0)
    for n in range(1, 9):
        s = rng.normal(size=(n, n))

        def brute(i, j):
            if i == j:
                return i
            best = max(range(i + 1, j + 1), key=lambda k: (s[j, j - k], -k))
            return (brute(i, best - 1), brute(best, j))

        assert span_tree(s, n) == brute(0, n - 1)


# ---------------------------------------------------------------- helpers
def test_build_binary_rejects_bad_split():
    with pytest.raises(ValueError):
        build_binary(0, 4, lambda start, end: start)
    with pytest.raises(ValueError):
        build_binary(0, 4, lambda start, end: end)


def test_build_binary_hand_example_end_exclusive():
    # [0, 4) split at 1, then [1, 4) at 3, [1, 3) at 2: (0 ((1 2) 3))
    splits = {(0, 4): 1, (1, 4): 3, (1, 3): 2}
    assert build_binary(0, 4, lambda start, end: splits[(start, end)]) == (0, ((1, 2), 3))
    assert build_binary(2, 3, lambda start, end: 1 / 0) == 2  # one word: no split asked


@settings(max_examples=50, deadline=None)
@given(binary_trees())
def test_nltk_conversion_round_trip(tree):
    words = [f"w{i}" for i in range(len(leaves(tree)))]
    nltk_tree = to_nltk(tree, words)
    assert nltk_tree.leaves() == words
    assert index_tree_from_nltk(nltk_tree) == tree
    # one span convention (end exclusive) whichever form the tree takes
    spans = tree_spans(tree)
    assert tree_spans(nltk_tree) == tree_spans(from_index_tree(tree)) == spans
    assert tree_spans(tree, min_length=1) == spans | {(i, i + 1) for i in range(len(words))}
    assert all(end - start >= 2 for start, end in spans) and (len(words) < 2 or (0, len(words)) in spans)
    # one to_nltk: of the index tree or of the Node it converts to, the same tree
    assert to_nltk(from_index_tree(tree), words) == nltk_tree
    assert index_tree_from_nltk(to_nltk(from_nltk(nltk_tree), words)) == tree


def test_spans_hand_example():
    tree = nltk.Tree.fromstring("(S (NP (D a) (N b)) (VP (V c) (NP (D d) (N e))))")
    assert tree_spans(tree) == {(0, 2), (2, 5), (3, 5), (0, 5)}
    assert tree_spans(((0, 1), (2, (3, 4)))) == {(0, 2), (2, 5), (3, 5), (0, 5)}
    assert to_nltk(3, ["a", "b", "c", "d"]) == nltk.Tree("S", ["d"])


@pytest.mark.parametrize("kind", ["balanced", "random"])
def test_baselines_use_the_shared_builder(kind):
    # balanced: the left part gets ceil(length / 2) words, at every node
    node = baseline_tree(5, kind)
    assert tree_spans(node, min_length=1) >= {(0, 5)}
    if kind == "balanced":
        assert tree_spans(node) == {(0, 5), (0, 3), (3, 5), (0, 2)}


def test_gold_span_targets_alignment():
    # (S (NP a b) (VP c (NP d e))): non-trivial spans (0, 2), (2, 5), (3, 5); the whole (0, 5) is trivial.
    tree = nltk.Tree.fromstring("(S (NP (D a) (N b)) (VP (V c) (NP (D d) (N e))))")
    targets = gold_span_targets([tree, (2, [(0, 2)])], m=3)
    assert targets.shape == (5 + 1 + 2 + 1, 3)
    expected = torch.zeros(9, 3)
    expected[1, 1] = 1.0  # [0, 1] ends at word 1, length 2
    expected[4, 1] = 0.5  # [3, 4], length 2
    expected[4, 2] = 0.5  # [2, 4], length 3
    # second sentence: its only span is the whole sentence (trivial) -> zero rows
    assert torch.equal(targets, expected)
    # spans longer than m are dropped
    assert gold_span_targets([tree], m=2)[4].tolist() == [0.0, 1.0]

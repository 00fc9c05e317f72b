"""Dense-PCFG inside algorithm (``induce.kernels.inside``): brute force over every binary tree, finite
differences, the torch tier against the reference in values and every gradient.

The Triton tier is tested in ``tests/test_inside_triton.py`` (through Triton's interpreter).
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import induce.kernels as K
from induce.kernels.testing import compare_with_reference, pcfg_inputs
from induce.trees.grammar_decoders import mbr_trees, tree_of_spans
from induce.trees.nodes import tree_spans

TIER = "torch"


# ------------------------------------------------------------------------------------ brute force
def _trees(i, j, NT, P):
    """Every labelled binary tree over the words ``i .. j-1``: ``(label, spans, rules used, preterminals)``
    with ``label`` a symbol index of the rule tensor (``< NT`` nonterminal, ``>= NT`` preterminal) and
    ``spans`` its constituents as fenceposts, one-word spans included."""
    if j - i == 1:
        for p in range(P):
            yield NT + p, ((i, j),), (), ((i, p),)
        return
    for k in range(i + 1, j):
        for left, l_spans, l_rules, l_tags in _trees(i, k, NT, P):
            for right, r_spans, r_rules, r_tags in _trees(k, j, NT, P):
                for a in range(NT):
                    yield a, ((i, j),) + l_spans + r_spans, ((a, left, right),) + l_rules + r_rules, l_tags + r_tags


def brute_force(terms, rules, roots, span_scores, n):
    """``[(score, spans)]`` of every tree of the first ``n`` words (one sentence, float64)."""
    NT, P = rules.shape[0], terms.shape[1]
    out = []
    for label, spans, used, tags in _trees(0, n, NT, P):
        score = float(roots[label])
        score += sum(float(rules[a, lc, rc]) for a, lc, rc in used)
        score += sum(float(terms[t, p]) for t, p in tags)
        score += sum(float(span_scores[i, j]) for i, j in spans)
        out.append((score, frozenset(spans)))
    return out


@example(n=4, pad=1, NT=1, P=2, seed=15, scale=0.5)  # two best trees (same rules, other shapes)
@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(2, 4),
    pad=st.integers(0, 1),
    NT=st.integers(1, 2),
    P=st.integers(1, 2),
    seed=st.integers(0, 10_000),
    scale=st.sampled_from([0.5, 2.0]),
)
def test_log_partition_viterbi_and_marginals_match_brute_force(n, pad, NT, P, seed, scale):
    """log Z is the logsumexp over every tree, the max mode the best tree's score, viterbi its tree
    (or one with the same score), span_marginals the trees' posterior mass per fencepost span, one-word
    spans and the whole sentence included, and MBR the tree of largest expected span count (a padded
    batch: lengths n and n + pad)."""
    T = n + pad
    inp = pcfg_inputs(2, T, NT, P, lengths=[n, T], seed=seed, scale=scale, dtype=torch.float64)
    for b, length in enumerate([n, T]):
        trees = brute_force(inp["terms"][b], inp["rules"][b], inp["roots"][b], inp["span_scores"][b], length)
        scores = torch.tensor([s for s, _ in trees], dtype=torch.float64)
        log_z = torch.logsumexp(scores, 0)
        for tier in ("reference", TIER):
            got = K.inside(**inp, backend=tier)
            assert math.isclose(float(got[b]), float(log_z), rel_tol=1e-9, abs_tol=1e-9), tier
            best = K.inside(**inp, semiring="max", backend=tier)
            assert math.isclose(float(best[b]), float(scores.max()), rel_tol=1e-9, abs_tol=1e-9), tier
        post = (scores - log_z).exp()
        no_spans = {k: v for k, v in inp.items() if k != "span_scores"}
        # marginals and the Viterbi tree of the inputs without span scores: recompute the brute force
        plain = brute_force(inp["terms"][b], inp["rules"][b], inp["roots"][b], torch.zeros(T + 1, T + 1), length)
        p_scores = torch.tensor([s for s, _ in plain], dtype=torch.float64)
        p_post = (p_scores - torch.logsumexp(p_scores, 0)).exp()
        expected = torch.zeros(T + 1, T + 1, dtype=torch.float64)
        for weight, (_, spans) in zip(p_post, plain):
            for i, j in spans:
                expected[i, j] += weight
        for tier in ("reference", TIER):
            marginals = K.span_marginals(lambda s, tier=tier, kw=no_spans: K.inside(**kw, span_scores=s, backend=tier),
                                         inp["terms"])
            torch.testing.assert_close(marginals[b].double(), expected, rtol=1e-5, atol=1e-6)
            score, trees = K.viterbi(**no_spans, backend=tier)
            got = frozenset(tree_spans(trees[b], min_length=1))
            # the best tree, or one that ties with it (e.g. two shapes using the same rules)
            best_with_these_spans = max(s for s, spans in plain if spans == got)
            assert math.isclose(best_with_these_spans, float(p_scores.max()), rel_tol=1e-9, abs_tol=1e-9), got
            assert math.isclose(float(score[b]), float(p_scores.max()), rel_tol=1e-9, abs_tol=1e-9)
        (mbr,) = mbr_trees(marginals[b:b + 1], inp["lengths"][b:b + 1])
        expected_count = {spans: sum(float(expected[i, j]) for i, j in spans) for _, spans in plain}
        assert math.isclose(expected_count[frozenset(tree_spans(mbr, min_length=1))], max(expected_count.values()),
                            rel_tol=1e-6, abs_tol=1e-6)
        assert post.sum().item() == pytest.approx(1.0)


def test_hand_worked_two_words():
    """Two words, one nonterminal, one preterminal: a single tree, log Z = root + rule + both terms."""
    terms = torch.tensor([[[-1.0], [-2.0]]])
    rules = torch.full((1, 1, 2, 2), -9.0)
    rules[0, 0, 1, 1] = -0.5  # A -> p p (children: index 0 the nonterminal, 1 the preterminal)
    roots = torch.tensor([[-0.25]])
    for tier in ("reference", TIER):
        got = K.inside(terms, rules, roots, torch.tensor([2]), backend=tier)
        assert got.item() == pytest.approx(-0.25 - 0.5 - 1.0 - 2.0)
        marginals = K.span_marginals(lambda s, tier=tier: K.inside(terms, rules, roots, torch.tensor([2]),
                                                                   span_scores=s, backend=tier), terms)
        assert marginals[0].tolist() == [[0.0, 1.0, 1.0], [0.0, 0.0, 1.0], [0.0, 0.0, 0.0]]


def test_hand_worked_three_words_two_splits():
    """Three words: trees ((w0 w1) w2) and (w0 (w1 w2)); their weights follow the two rules."""
    NT, P = 1, 1
    terms = torch.zeros(1, 3, P)
    rules = torch.full((1, NT, 2, 2), -50.0)
    rules[0, 0, 1, 1] = math.log(0.2)  # A -> p p
    rules[0, 0, 0, 1] = math.log(0.3)  # A -> A p   (left-branching)
    rules[0, 0, 1, 0] = math.log(0.5)  # A -> p A   (right-branching)
    roots = torch.zeros(1, NT)
    left, right = 0.3 * 0.2, 0.5 * 0.2
    for tier in ("reference", TIER):
        got = K.inside(terms, rules, roots, torch.tensor([3]), backend=tier)
        assert got.item() == pytest.approx(math.log(left + right), abs=1e-6)
        m = K.span_marginals(lambda s, tier=tier: K.inside(terms, rules, roots, torch.tensor([3]), span_scores=s,
                                                           backend=tier), terms)[0]
        assert m[0, 2].item() == pytest.approx(left / (left + right), abs=1e-6)  # (w0 w1)
        assert m[1, 3].item() == pytest.approx(right / (left + right), abs=1e-6)  # (w1 w2)
        for i, j in [(0, 1), (1, 2), (2, 3), (0, 3)]:  # the words and the whole sentence
            assert m[i, j].item() == pytest.approx(1.0, abs=1e-6)
        score, trees = K.viterbi(terms, rules, roots, torch.tensor([3]), backend=tier)
        assert score.item() == pytest.approx(math.log(right), abs=1e-6)
        assert trees == [(0, (1, 2))]
        assert mbr_trees(m[None], torch.tensor([3])) == [(0, (1, 2))]


# ---------------------------------------------------------------------------- finite differences
@pytest.mark.parametrize("lengths", [[5, 3], [2, 4]])
def test_marginals_are_finite_differences_of_log_z(lengths):
    inp = pcfg_inputs(2, 5, 2, 3, lengths=lengths, seed=3, dtype=torch.float64, span_scores=False)
    marginals = K.span_marginals(lambda s: K.inside(**inp, span_scores=s, backend=TIER), inp["terms"]).double()
    eps = 1e-6
    for b, n in enumerate(lengths):
        for i in range(6):
            for j in range(6):
                bump = torch.zeros(2, 6, 6, dtype=torch.float64)
                bump[b, i, j] = eps
                up = K.inside(**inp, span_scores=bump, backend=TIER)[b]
                down = K.inside(**inp, span_scores=-bump, backend=TIER)[b]
                fd = float(up - down) / (2 * eps)
                assert marginals[b, i, j].item() == pytest.approx(fd, abs=1e-6), (b, i, j)
                if j <= i or j > n:
                    assert marginals[b, i, j].item() == 0.0
                elif j - i == 1 or (i, j) == (0, n):
                    assert marginals[b, i, j].item() == pytest.approx(1.0)


@pytest.mark.slow
def test_gradients_are_finite_differences_gradcheck():
    """gradcheck of every input of the torch tier in float64 (sum and max mode, chart output too)."""
    inp = pcfg_inputs(2, 4, 2, 2, lengths=[4, 3], seed=5, dtype=torch.float64)
    names = ["terms", "rules", "roots", "span_scores"]
    for semiring in ("sum", "max"):
        def fn(*args, semiring=semiring):
            log_z, chart = K.inside(*args[:3], inp["lengths"], span_scores=args[3], semiring=semiring,
                                    chart=True, backend=TIER)
            return log_z, torch.where(torch.isfinite(chart), chart, 0.0)
        args = [inp[n].clone().requires_grad_() for n in names]
        assert torch.autograd.gradcheck(fn, args, eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------------------- torch vs reference
SHAPES = [  # B, T, NT, P, lengths: awkward sizes, lengths 1 and 2, padded batches
    (1, 1, 2, 3, [1]),
    (2, 2, 3, 2, [2, 1]),
    (3, 5, 2, 5, [5, 1, 2]),
    (2, 7, 5, 3, [4, 7]),
    (1, 9, 3, 7, [9]),
]


@pytest.mark.parametrize("B,T,NT,P,lengths", SHAPES)
@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("chart", [False, True])
def test_torch_tier_matches_reference(B, T, NT, P, lengths, semiring, chart):
    inp = pcfg_inputs(B, T, NT, P, lengths=lengths, seed=B * 100 + T)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-4, semiring=semiring, chart=chart)


def test_max_mode_in_chunks_of_one_span(monkeypatch):
    """The max mode's sums in chunks of one span (forward) and of one cell (backward), more splits than
    nonterminals: the same values and gradients as the reference."""
    from induce.kernels.pcfg import dense_torch as inside_torch

    monkeypatch.setattr(inside_torch, "_MAX_SCRATCH", 1)
    inp = pcfg_inputs(2, 9, 2, 3, lengths=[9, 6], seed=12)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-4, semiring="max", chart=True)


def test_without_span_scores_and_bf16_inputs():
    inp = pcfg_inputs(2, 6, 3, 4, lengths=[6, 3], seed=7, span_scores=False)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-4)
    low = {k: (v.bfloat16() if v.is_floating_point() else v) for k, v in inp.items()}
    got = K.inside(**low, backend=TIER)
    assert got.dtype == torch.bfloat16
    want = K.inside(**{k: (v.float() if v.is_floating_point() else v) for k, v in low.items()}, backend="reference")
    torch.testing.assert_close(got.float(), want, rtol=1e-2, atol=1e-2)


def test_large_scores_stay_finite_and_match():
    """Scores far from 0 (rows differing by tens of nats) do not under- or overflow the scaled products."""
    inp = pcfg_inputs(2, 6, 3, 4, lengths=[6, 5], seed=11, scale=15.0)
    compare_with_reference("inside", TIER, inp, rtol=1e-4, atol=1e-3)


def test_padding_never_reaches_the_result():
    """Words past a sentence's length may hold anything (here NaN and inf)."""
    inp = pcfg_inputs(2, 5, 2, 3, lengths=[3, 5], seed=2)
    clean = K.inside(**inp, backend=TIER)
    dirty = dict(inp)
    dirty["terms"] = inp["terms"].clone()
    dirty["terms"][0, 3:] = float("nan")
    dirty["terms"][0, 4, 0] = float("inf")
    dirty["span_scores"] = inp["span_scores"].clone()
    dirty["span_scores"][0, :, 4:] = float("nan")
    terms = dirty["terms"].requires_grad_()
    got = K.inside(**dirty, backend=TIER)
    torch.testing.assert_close(got, clean)
    got.sum().backward()
    assert torch.isfinite(terms.grad).all() and (terms.grad[0, 3:] == 0).all()


def test_one_word_sentences_score_minus_inf_without_gradient():
    inp = pcfg_inputs(2, 3, 2, 2, lengths=[1, 3], seed=4)
    for tier in ("reference", TIER):
        leaves = {k: (v.clone().requires_grad_() if v.is_floating_point() else v) for k, v in inp.items()}
        out = K.inside(**leaves, backend=tier)
        assert out[0].item() == float("-inf") and torch.isfinite(out[1])
        out[1].backward()
        assert leaves["terms"].grad[0].abs().sum() == 0 and leaves["rules"].grad[0].abs().sum() == 0
    no_spans = {k: v for k, v in inp.items() if k != "span_scores"}
    score, trees = K.viterbi(**no_spans, backend=TIER)
    assert score[0].item() == float("-inf") and trees[0] == 0
    marginals = K.span_marginals(lambda s: K.inside(**no_spans, span_scores=s, backend=TIER), inp["terms"])
    assert marginals[0].abs().sum() == 0 and mbr_trees(marginals, inp["lengths"])[0] == 0


def test_marginals_sum_to_the_tree_size():
    """Every binary tree of n words has 2n - 1 spans: n words and n - 1 of two or more words."""
    inp = pcfg_inputs(3, 8, 4, 5, lengths=[8, 5, 2], seed=9, span_scores=False)
    marginals = K.span_marginals(lambda s: K.inside(**inp, span_scores=s, backend=TIER), inp["terms"])
    torch.testing.assert_close(marginals.sum((1, 2)), torch.tensor([15.0, 9.0, 3.0]), rtol=1e-4, atol=1e-4)
    _, trees = K.viterbi(**inp, backend=TIER)
    assert [len(tree_spans(t, min_length=1)) for t in trees] == [15, 9, 3]


@pytest.mark.parametrize("bad,message", [
    ({"semiring": "log"}, "semiring"),
    ({"rules": torch.zeros(2, 3, 4, 4)}, "rules must be"),
    ({"lengths": torch.tensor([0, 3])}, "lengths must lie in 1..5"),
    ({"lengths": torch.tensor([6, 3])}, "lengths must lie in 1..5"),
    ({"lengths": torch.tensor([2.0, 3.0])}, "integer tensor"),
    ({"span_scores": torch.zeros(2, 5, 5)}, r"span_scores must be \[B, T \+ 1, T \+ 1\] = \[2, 6, 6\]"),
])
def test_bad_inputs_are_named(bad, message):
    inp = pcfg_inputs(2, 5, 2, 3, seed=0)
    inp.update(bad)
    with pytest.raises(K.InsideInputError, match=message):
        K.inside(**inp, backend=TIER)


def test_enumerator_counts_trees():
    """The brute force enumerates Catalan(n - 1) shapes, each with NT^(n-1) labels and P^n tags."""
    catalan = [1, 1, 2, 5]
    for n, (NT, P) in itertools.product(range(1, 5), [(1, 1), (2, 3)]):
        count = sum(1 for _ in _trees(0, n, NT, P))
        want = catalan[n - 1] * NT ** (n - 1) * P ** n if n > 1 else P
        assert count == want


def test_tree_of_spans_reads_an_indicator_and_refuses_non_trees():
    marks = torch.zeros(5, 5)
    for i, j in [(0, 4), (1, 4), (1, 3)]:
        marks[i, j] = 1.0
    assert tree_of_spans(marks, 4) == (0, ((1, 2), 3))
    assert tree_of_spans(marks, 1) == 0
    marks[0, 2] = 1.0  # crosses (1, 3)
    with pytest.raises(ValueError, match="not a binary tree"):
        tree_of_spans(marks, 4)
    with pytest.raises(ValueError, match=r"span \(0, 3\) is not marked"):
        tree_of_spans(marks, 3)


def test_viterbi_names_a_sentence_without_a_derivation():
    """Before, the empty indicator of a -inf score reached tree_of_spans: "0 spans ... are marked"."""
    inp = pcfg_inputs(2, 4, 2, 2, lengths=[4, 3], seed=0, span_scores=False)
    inp["rules"][1] = float("-inf")  # sentence 1: no rule at all
    for tier in ("reference", TIER):
        with pytest.raises(K.InsideInputError, match=r"viterbi: sentence 1 \(3 words\) has no derivation"):
            K.viterbi(**inp, backend=tier)


def test_a_second_backward_pass_through_the_same_graph_gives_the_same_gradients():
    """The torch tier writes the rules' gradient over its kept rule blocks: a second backward pass
    (``retain_graph``) rebuilds them first, and gives what the first gave."""
    inp = pcfg_inputs(3, 6, 3, 4, lengths=[6, 4, 2], seed=21)
    leaves = {k: (v.clone().requires_grad_() if v.is_floating_point() else v) for k, v in inp.items()}
    out = K.inside(**leaves, backend=TIER)
    out.sum().backward(retain_graph=True)
    first = {k: v.grad.clone() for k, v in leaves.items() if v.is_floating_point()}
    for v in leaves.values():
        if v.is_floating_point():
            v.grad = None
    out.sum().backward()
    for k, grad in first.items():
        torch.testing.assert_close(leaves[k].grad, grad)

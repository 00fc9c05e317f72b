"""The simple PCFG's inside algorithm (:func:`induce.kernels.inside_simple`), both semirings.

Ground truths: the explicit rule tensor ``rules[a, b, c] = left[b, a] + right[c, a]`` (log space) run through
the dense op :func:`induce.kernels.inside` (one span convention for both ops), and TN-PCFG's low-rank op
with the identity as ``head``; brute-force enumeration of every binary tree and every labelling
(hypothesis); finite differences for the span marginals. The torch tier is checked against the reference
tier, values and every gradient, on awkward shapes (shared and per-sentence grammars, both semirings).
"""
from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import induce.kernels as K
from induce.errors import InduceError
from induce.kernels.pcfg import simple_torch
from induce.kernels.pcfg.marginals import score_and_span_gradient
from induce.kernels.testing import compare_with_reference
from induce.trees.grammar_decoders import mbr_trees, tree_of_spans
from induce.trees.nodes import tree_spans

pytestmark = pytest.mark.usefixtures("one_thread")


def grammar(B, N, NT, T, seed=0, dtype=torch.float64, scale=1.0, spans=False):
    """Normalised log-space inputs as the simple PCFGs make them (``scale`` sharpens the softmaxes)."""
    gen = torch.Generator().manual_seed(seed)
    S = NT + T

    def draw(*shape):
        return scale * torch.randn(*shape, generator=gen, dtype=dtype)

    out = {
        "terms": draw(B, N, T).log_softmax(-1),
        "roots": draw(B, NT).log_softmax(-1),
        "left": draw(B, S, NT).log_softmax(-2),
        "right": draw(B, S, NT).log_softmax(-2),
    }
    if spans:
        out["span_scores"] = draw(B, N + 1, N + 1)
    return out


def dense_rules(left, right):
    """``[B, NT, S, S]``: ``rules[b, a, c1, c2] = left[b, c1, a] + right[b, c2, a]``."""
    return (left[:, :, None, :] + right[:, None, :, :]).permute(0, 3, 1, 2)


def dense_inside(terms, roots, left, right, lengths, span_scores=None, semiring="sum", backend="reference"):
    return K.inside(terms, dense_rules(left, right), roots, lengths, span_scores=span_scores, semiring=semiring,
                    backend=backend)


def lens(*values):
    return torch.tensor(values)


def binary_trees(i, j):
    """Every binary bracketing of the words ``i .. j-1`` as a list of ``(i, k, j)`` splits."""
    if j - i == 1:
        yield []
        return
    for k in range(i + 1, j):
        for left_tree in binary_trees(i, k):
            for right_tree in binary_trees(k, j):
                yield [(i, k, j)] + left_tree + right_tree


def brute_force(g, n, b=0):
    """``{tree: (log of the summed weight, log of the best weight)}`` over every labelling of sentence ``b``."""
    left, right = g["left"][b].exp(), g["right"][b].exp()
    NT, T = g["roots"].shape[-1], g["terms"].shape[-1]
    emit, root = g["terms"][b].exp(), g["roots"][b].exp()
    out = {}
    for tree in binary_trees(0, n):
        total, best = 0.0, 0.0
        for labels in itertools.product(range(NT), repeat=len(tree)):  # one nonterminal per split
            label_of = {(i, j): a for (i, _, j), a in zip(tree, labels)}
            for tags in itertools.product(range(T), repeat=n):
                w = float(root[label_of[0, n]])
                for i, k, j in tree:
                    lsym = NT + tags[i] if k - i == 1 else label_of[i, k]
                    rsym = NT + tags[k] if j - k == 1 else label_of[k, j]
                    a = label_of[i, j]
                    w *= float(left[lsym, a] * right[rsym, a])
                for i, t in enumerate(tags):
                    w *= float(emit[i, t])
                total += w
                best = max(best, w)
        out[tuple(tree)] = (math.log(total), math.log(best))
    return out


# ----------------------------------------------------------------------------- against the rule tensor
@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("NT,T", [(3, 4), (4, 2), (1, 1), (2, 5)])
def test_matches_the_dense_rule_tensor(backend, semiring, NT, T):
    g = grammar(3, 5, NT, T, seed=NT * 10 + T, spans=True)
    lengths = lens(5, 2, 4)
    expected = dense_inside(**g, lengths=lengths, semiring=semiring)
    got = K.inside_simple(**g, lengths=lengths, semiring=semiring, backend=backend)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def test_is_the_low_rank_grammar_with_the_identity_as_head():
    g = grammar(2, 6, 3, 4, seed=7, spans=True)
    head = torch.full((2, 3, 3), float("-inf"), dtype=torch.float64)
    head[:, range(3), range(3)] = 0.0
    lengths = lens(6, 3)
    torch.testing.assert_close(K.inside_simple(**g, lengths=lengths, backend="torch"),
                               K.inside_lowrank(head=head, **g, lengths=lengths, backend="reference"),
                               rtol=1e-12, atol=1e-12)


def _grads(fn, g, lengths):
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    weights = torch.linspace(-1.0, 2.0, lengths.numel(), dtype=torch.float64)
    (fn(**leaves, lengths=lengths) * weights).sum().backward()
    return {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_gradients_match_the_dense_rule_tensor(backend, semiring):
    g = grammar(3, 5, 3, 4, seed=3, spans=True)
    lengths = lens(5, 3, 2)
    expected = _grads(lambda **kw: dense_inside(**kw, semiring=semiring), g, lengths)
    got = _grads(lambda **kw: K.inside_simple(**kw, semiring=semiring, backend=backend), g, lengths)
    for name in g:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-9, atol=1e-11,
                                   msg=lambda m, name=name: f"{name}: {m}")


def test_marginals_match_the_dense_rule_tensor_and_finite_differences():
    g = grammar(2, 5, 2, 3, seed=5)
    lengths = lens(5, 4)
    got = K.span_marginals(lambda s: K.inside_simple(**g, lengths=lengths, span_scores=s, backend="torch"),
                           g["terms"])
    dense = K.span_marginals(lambda s: dense_inside(**g, lengths=lengths, span_scores=s), g["terms"])
    torch.testing.assert_close(got, dense, rtol=1e-9, atol=1e-12)
    assert mbr_trees(got, lengths) == mbr_trees(dense, lengths)
    eps = 1e-6
    for b, i, j in [(0, 0, 2), (0, 1, 4), (0, 2, 5), (1, 0, 3), (1, 1, 3), (0, 0, 5), (0, 3, 4)]:
        bump = torch.zeros(2, 6, 6, dtype=torch.float64)
        bump[b, i, j] = eps
        up = K.inside_simple(**g, lengths=lengths, span_scores=bump, backend="torch")[b]
        down = K.inside_simple(**g, lengths=lengths, span_scores=-bump, backend="torch")[b]
        assert float(got[b, i, j]) == pytest.approx(float(up - down) / (2 * eps), abs=1e-7)
    # every tree has the one-word spans and the whole sentence; nothing outside the sentence
    assert torch.allclose(got[1].diagonal(1)[:4], torch.ones(4, dtype=torch.float64))
    assert float(got[1, 0, 4]) == pytest.approx(1.0)
    assert float(got[1, :, 5].abs().sum()) == 0.0


# ----------------------------------------------------------------------------- brute force
@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 4), NT=st.integers(1, 2), T=st.integers(1, 2), seed=st.integers(0, 10_000),
       scale=st.sampled_from([0.5, 2.0]))
def test_brute_force_every_tree_and_labelling(n, NT, T, seed, scale):
    g = grammar(1, n, NT, T, seed=seed, scale=scale)
    found = brute_force(g, n)
    log_z = torch.logsumexp(torch.tensor([total for total, _ in found.values()], dtype=torch.float64), 0)
    best = max(top for _, top in found.values())
    for backend in ("reference", "torch"):
        assert float(K.inside_simple(**g, lengths=lens(n), backend=backend)[0]) == pytest.approx(float(log_z), abs=1e-9)
        got = K.inside_simple(**g, lengths=lens(n), semiring="max", backend=backend)[0]
        assert float(got) == pytest.approx(best, abs=1e-9)
    # span marginals and the MBR tree from the enumerated trees
    marginals = K.span_marginals(lambda s: K.inside_simple(**g, lengths=lens(n), span_scores=s, backend="torch"),
                                 g["terms"])
    expected = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for tree, (total, _) in found.items():
        for i, _, j in tree:
            expected[i, j] += math.exp(total - log_z)
    for i in range(n):
        expected[i, i + 1] = 1.0
    torch.testing.assert_close(marginals[0], expected, rtol=1e-8, atol=1e-10)
    score = {tree: sum(float(marginals[0, i, j]) for i, _, j in tree) for tree in found}
    (decoded,) = mbr_trees(marginals, lens(n))
    decoded_tree = next(t for t in found if {(i, j) for i, _, j in t} == tree_spans(decoded))
    assert score[decoded_tree] == pytest.approx(max(score.values()), abs=1e-12)
    # the max mode's span gradient marks a best derivation's tree
    _, indicator = score_and_span_gradient(
        lambda s: K.inside_simple(**g, lengths=lens(n), span_scores=s, semiring="max", backend="torch"), g["terms"])
    viterbi = tree_of_spans(indicator[0], n)
    viterbi_tree = next(t for t in found if {(i, j) for i, _, j in t} == tree_spans(viterbi))
    assert found[viterbi_tree][1] == pytest.approx(best, abs=1e-9)


def test_hand_worked_two_word_sentence():
    # one nonterminal, two preterminals: p(A -> P1 P2) = pL(P1 | A) pR(P2 | A)
    log = math.log
    g = {
        "terms": torch.tensor([[[log(0.2), log(0.8)], [log(0.3), log(0.7)]]], dtype=torch.float64),
        "roots": torch.tensor([[0.0]], dtype=torch.float64),
        "left": torch.tensor([[[log(0.1)], [log(0.6)], [log(0.3)]]], dtype=torch.float64),  # rows: A, P1, P2
        "right": torch.tensor([[[log(0.5)], [log(0.25)], [log(0.25)]]], dtype=torch.float64),
    }
    total = (0.6 * 0.2 + 0.3 * 0.8) * (0.25 * 0.3 + 0.25 * 0.7)
    best = max(0.6 * 0.2, 0.3 * 0.8) * max(0.25 * 0.3, 0.25 * 0.7)
    for backend in ("reference", "torch"):
        assert float(K.inside_simple(**g, lengths=lens(2), backend=backend)[0]) == pytest.approx(log(total), abs=1e-12)
        got = K.inside_simple(**g, lengths=lens(2), semiring="max", backend=backend)[0]
        assert float(got) == pytest.approx(log(best), abs=1e-12)


# ----------------------------------------------------------------------------- torch tier
@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("B,N,NT,T,lengths", [
    (1, 2, 1, 1, (2,)),
    (3, 6, 3, 4, (6, 2, 4)),
    (2, 7, 5, 3, (3, 7)),
    (4, 5, 2, 9, (5, 5, 2, 3)),
    (2, 4, 17, 1, (4, 1)),
])
def test_torch_tier_against_reference(B, N, NT, T, lengths, semiring):
    g = grammar(B, N, NT, T, seed=B * N + NT, dtype=torch.float32, scale=2.0, spans=True)
    compare_with_reference("inside_simple", "torch", g, rtol=2e-5, atol=2e-5, lengths=torch.tensor(lengths),
                           semiring=semiring)


def test_torch_tier_float64_is_exact_and_keeps_dtype():
    g = grammar(2, 6, 3, 4, seed=11, spans=True)
    for semiring in ("sum", "max"):
        compare_with_reference("inside_simple", "torch", g, rtol=1e-11, atol=1e-11, lengths=lens(6, 3),
                               semiring=semiring)
    g32 = {k: v.float() for k, v in g.items()}
    assert K.inside_simple(**g32, lengths=lens(6, 3), backend="torch").dtype == torch.float32
    g16 = {k: v.bfloat16() for k, v in g.items()}
    assert K.inside_simple(**g16, lengths=lens(6, 3), backend="torch").dtype == torch.bfloat16


def test_max_plus_in_chunks_equals_one_step(monkeypatch):
    """A Viterbi pass whose max-plus products run in many chunks gives the values and gradients of one step."""
    g = grammar(3, 6, 4, 5, seed=2, spans=True)
    lengths = lens(6, 4, 2)
    whole = _grads(lambda **kw: K.inside_simple(**kw, semiring="max", backend="torch"), g, lengths)
    monkeypatch.setattr(simple_torch, "MAX_PLUS_CHUNK", 7)
    chunked = _grads(lambda **kw: K.inside_simple(**kw, semiring="max", backend="torch"), g, lengths)
    for name in whole:
        torch.testing.assert_close(chunked[name], whole[name], rtol=0, atol=0)


def test_shared_grammar_equals_per_sentence_copies():
    """The simple N-PCFG expands one grammar over the batch (stride 0): its products are formed once."""
    g = grammar(1, 5, 3, 4, seed=2)
    B = 3
    terms = grammar(B, 5, 3, 4, seed=9)["terms"]
    expanded = {k: v.expand(B, *v.shape[1:]) for k, v in g.items() if k != "terms"}
    copies = {k: v.contiguous() for k, v in expanded.items()}
    lengths = lens(5, 4, 2)
    for semiring in ("sum", "max"):
        def run(semiring=semiring, **kw):
            return K.inside_simple(**kw, semiring=semiring, backend="torch")

        a = _grads(run, {"terms": terms, **expanded}, lengths)
        b = _grads(run, {"terms": terms, **copies}, lengths)
        for name in a:
            torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-12)


def test_sharp_grammar_stays_finite():
    """Peaked factors (logits x 30): the per-span normalisers keep values and gradients finite."""
    g = grammar(2, 8, 4, 6, seed=4, dtype=torch.float32, scale=30.0)
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    log_z = K.inside_simple(**leaves, lengths=lens(8, 5), backend="torch")
    log_z.sum().backward()
    assert torch.isfinite(log_z).all()
    assert all(torch.isfinite(v.grad).all() for v in leaves.values())
    ref = K.inside_simple(**{k: v.double() for k, v in g.items()}, lengths=lens(8, 5), backend="reference")
    torch.testing.assert_close(log_z.double(), ref, rtol=1e-4, atol=1e-3)


def test_never_builds_a_tensor_of_parents_by_child_pairs():
    """No tensor of the torch tier's sum mode, forward or backward, has as many entries as ``[B, NT, S, S]`` / 8."""
    B, N, NT, T = 2, 6, 20, 30
    g = grammar(B, N, NT, T, seed=1, dtype=torch.float32)
    largest = []

    class Watch(torch.utils._python_dispatch.TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            for t in (out if isinstance(out, (tuple, list)) else (out,)):
                if isinstance(t, torch.Tensor):
                    largest.append(t.numel())
            return out

    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    with Watch():
        K.inside_simple(**leaves, lengths=lens(6, 4), backend="torch").sum().backward()
    assert max(largest) < B * NT * (NT + T) ** 2 // 8


@pytest.mark.parametrize("change,message", [
    (lambda g: g.update(left=g["left"][:, 1:]), "left must be"),
    (lambda g: g.update(right=g["right"][:, :, 1:]), "right must be"),
    (lambda g: g.update(roots=g["roots"][:1]), "roots must be"),
    (lambda g: g.update(terms=g["terms"][0]), "terms must be"),
    (lambda g: g.update(span_scores=torch.zeros(2, 4, 4)), "span_scores must be"),
])
def test_bad_shapes_name_the_argument(change, message):
    g = grammar(2, 4, 3, 4, seed=0)
    change(g)
    for backend in ("reference", "torch"):
        with pytest.raises(InduceError, match=message):
            K.inside_simple(**g, lengths=lens(4, 3), backend=backend)


def test_an_unknown_semiring_is_refused():
    g = grammar(1, 3, 2, 2, seed=0)
    with pytest.raises(InduceError, match="semiring must be 'sum' or 'max', got 'min'"):
        K.inside_simple(**g, lengths=lens(3), semiring="min", backend="torch")


@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_one_word_sentences_score_minus_inf_without_gradient(backend, semiring):
    """As the dense op: no binary derivation, -inf, no gradient, marginals 0; the padding never reaches a number."""
    g = grammar(2, 4, 3, 4, seed=0)
    g["terms"] = g["terms"].clone()
    g["terms"][1, 1:] = float("nan")  # the one-word sentence's padding
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    out = K.inside_simple(**leaves, lengths=lens(4, 1), semiring=semiring, backend=backend)
    assert out[1].item() == float("-inf") and torch.isfinite(out[0])
    out[0].backward()
    assert all(torch.isfinite(v.grad).all() for v in leaves.values())
    assert leaves["terms"].grad[1].abs().sum() == 0
    clean = {k: v for k, v in g.items() if k != "terms"}

    def log_partition(span_scores):
        return K.inside_simple(g["terms"].nan_to_num(), **clean, lengths=lens(4, 1), span_scores=span_scores,
                               semiring=semiring, backend=backend)

    marginals = K.span_marginals(log_partition, g["terms"])
    assert marginals[1].abs().sum() == 0 and marginals[0].abs().sum() > 0
    with pytest.raises(InduceError, match=r"lengths\[0\] = 5 is outside 1\.\.4"):
        K.inside_simple(**g, lengths=lens(5, 2), backend=backend)


@pytest.mark.parametrize("semiring", ["sum", "max"])
def test_one_word_batches_score_minus_inf(semiring):
    g = grammar(2, 1, 3, 4, seed=0)
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    out = K.inside_simple(**leaves, lengths=lens(1, 1), semiring=semiring, backend="torch")
    assert (out == float("-inf")).all()
    out.masked_fill(torch.isinf(out), 0.0).sum().backward()
    assert leaves["terms"].grad.abs().sum() == 0

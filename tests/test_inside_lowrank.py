"""TN-PCFG's low-rank inside algorithm (:func:`induce.kernels.inside_lowrank`) and the MBR decoder.

Ground truths: the explicit rule tensor ``rules[a, b, c] = sum_r U[a, r] V[b, r] W[c, r]`` (TN-PCFG's
normalisation: ``U`` over ranks, ``V`` and ``W`` over symbols) run through the dense op
:func:`induce.kernels.inside`, which takes the same span scores (one span convention for both ops);
brute-force enumeration of every binary tree and every labelling (hypothesis); finite differences for
the span marginals. The torch tier is checked against the reference tier, values and
every gradient, on awkward shapes (both of its routes, shared and per-sentence grammars).
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
from induce.kernels.pcfg.marginals import span_marginals
from induce.kernels.testing import compare_with_reference
from induce.trees.grammar_decoders import mbr_trees
from induce.trees.nodes import tree_spans


def grammar(B, N, NT, T, r, seed=0, dtype=torch.float64, scale=1.0, spans=False):
    """Normalised log-space inputs as TN-PCFG's model makes them (``scale`` sharpens the softmaxes)."""
    gen = torch.Generator().manual_seed(seed)
    S = NT + T

    def draw(*shape):
        return scale * torch.randn(*shape, generator=gen, dtype=dtype)

    out = {
        "terms": draw(B, N, T).log_softmax(-1),
        "roots": draw(B, NT).log_softmax(-1),
        "head": draw(B, NT, r).log_softmax(-1),
        "left": draw(B, S, r).log_softmax(-2),
        "right": draw(B, S, r).log_softmax(-2),
    }
    if spans:
        out["span_scores"] = draw(B, N + 1, N + 1)
    return out


def dense_inside(terms, roots, head, left, right, lengths, span_scores=None, backend="reference"):
    """The dense op :func:`induce.kernels.inside` over the explicit rule tensor ``[B, NT, S, S]``: the same
    grammar, the same span convention (fenceposts, every width), so the same numbers."""
    rules = torch.logsumexp(head[:, :, None, None, :] + left[:, None, :, None, :] + right[:, None, None, :, :], -1)
    return K.inside(terms, rules, roots, lengths, span_scores=span_scores, backend=backend)


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
    """``{tree (tuple of splits): log weight}`` of sentence ``b`` of length ``n``, summing every labelling."""
    U, V, W = g["head"][b].exp(), g["left"][b].exp(), g["right"][b].exp()
    NT, T = U.shape[0], g["terms"].shape[-1]
    rules = torch.einsum("ar,br,cr->abc", U, V, W)
    emit, root = g["terms"][b].exp(), g["roots"][b].exp()
    weights = {}
    for tree in binary_trees(0, n):
        total = 0.0
        for labels in itertools.product(range(NT), repeat=len(tree)):  # one nonterminal per split
            label_of = {(i, j): a for (i, _, j), a in zip(tree, labels)}
            for tags in itertools.product(range(T), repeat=n):
                w = root[label_of[0, n]]
                for i, k, j in tree:
                    lsym = NT + tags[i] if k - i == 1 else label_of[i, k]
                    rsym = NT + tags[k] if j - k == 1 else label_of[k, j]
                    w = w * rules[label_of[i, j], lsym, rsym]
                for i, t in enumerate(tags):
                    w = w * emit[i, t]
                total += float(w)
        weights[tuple(tree)] = math.log(total)
    return weights


def lens(*values):
    return torch.tensor(values)


# ----------------------------------------------------------------------------- against the rule tensor
@pytest.mark.parametrize("backend", ["reference", "torch"])
@pytest.mark.parametrize("NT,T,r", [(3, 4, 5), (4, 2, 2), (1, 1, 1), (2, 3, 7)])
def test_matches_the_dense_rule_tensor(backend, NT, T, r):
    g = grammar(3, 5, NT, T, r, seed=NT * 10 + r, spans=True)
    lengths = lens(5, 2, 4)
    expected = dense_inside(**g, lengths=lengths)
    got = K.inside_lowrank(**g, lengths=lengths, backend=backend)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)


def _grads(fn, g, lengths):
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    weights = torch.linspace(-1.0, 2.0, lengths.numel(), dtype=torch.float64)
    (fn(**leaves, lengths=lengths) * weights).sum().backward()
    return {k: v.grad for k, v in leaves.items()}


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_gradients_match_the_dense_rule_tensor(backend):
    g = grammar(3, 5, 3, 4, 5, seed=3, spans=True)
    lengths = lens(5, 3, 2)
    expected = _grads(dense_inside, g, lengths)
    got = _grads(lambda **kw: K.inside_lowrank(**kw, backend=backend), g, lengths)
    for name in g:
        torch.testing.assert_close(got[name], expected[name], rtol=1e-9, atol=1e-11,
                                   msg=lambda m, name=name: f"{name}: {m}")


@pytest.mark.parametrize("dense_backend", ["reference", "torch"])
def test_marginals_match_the_dense_rule_tensor_and_finite_differences(dense_backend):
    """Both ops' span marginals, one span convention: the same tensor for the same grammar."""
    g = grammar(2, 5, 2, 3, 4, seed=5)
    lengths = lens(5, 4)
    got = span_marginals(lambda s: K.inside_lowrank(**g, lengths=lengths, span_scores=s, backend="torch"),
                         g["terms"])
    dense = span_marginals(lambda s: dense_inside(**g, lengths=lengths, span_scores=s, backend=dense_backend),
                           g["terms"])
    torch.testing.assert_close(got, dense, rtol=1e-9, atol=1e-12)
    assert mbr_trees(got, lengths) == mbr_trees(dense, lengths)
    eps = 1e-6
    for b, i, j in [(0, 0, 2), (0, 1, 4), (0, 2, 5), (1, 0, 3), (1, 1, 3), (0, 0, 5), (0, 3, 4)]:
        bump = torch.zeros(2, 6, 6, dtype=torch.float64)
        bump[b, i, j] = eps
        up = K.inside_lowrank(**g, lengths=lengths, span_scores=bump, backend="torch")[b]
        down = K.inside_lowrank(**g, lengths=lengths, span_scores=-bump, backend="torch")[b]
        assert float(got[b, i, j]) == pytest.approx(float(up - down) / (2 * eps), abs=1e-7)
    # every tree has the one-word spans and the whole sentence; nothing outside the sentence
    assert torch.allclose(got[1].diagonal(1)[:4], torch.ones(4, dtype=torch.float64))
    assert float(got[1, 0, 4]) == pytest.approx(1.0)
    assert float(got[1, :, 5].abs().sum()) == 0.0


# ----------------------------------------------------------------------------- brute force
@settings(max_examples=25, deadline=None)
@given(n=st.integers(2, 4), NT=st.integers(1, 2), T=st.integers(1, 2), r=st.integers(1, 3),
       seed=st.integers(0, 10_000), scale=st.sampled_from([0.5, 2.0]))
def test_brute_force_every_tree_and_labelling(n, NT, T, r, seed, scale):
    g = grammar(1, n, NT, T, r, seed=seed, scale=scale)
    weights = brute_force(g, n)
    log_z = torch.logsumexp(torch.tensor(list(weights.values()), dtype=torch.float64), 0)
    for backend in ("reference", "torch"):
        got = K.inside_lowrank(**g, lengths=lens(n), backend=backend)
        assert float(got[0]) == pytest.approx(float(log_z), abs=1e-9)
    # span marginals and the MBR tree from the enumerated trees
    marginals = span_marginals(lambda s: K.inside_lowrank(**g, lengths=lens(n), span_scores=s, backend="torch"),
                               g["terms"])
    expected = torch.zeros(n + 1, n + 1, dtype=torch.float64)
    for tree, w in weights.items():
        for i, _, j in tree:
            expected[i, j] += math.exp(w - log_z)
    for i in range(n):
        expected[i, i + 1] = 1.0
    torch.testing.assert_close(marginals[0], expected, rtol=1e-8, atol=1e-10)
    score = {tree: sum(float(marginals[0, i, j]) for i, _, j in tree) for tree in weights}
    (decoded,) = mbr_trees(marginals, lens(n))
    best = max(score.values())
    decoded_tree = next(t for t in weights if {(i, j) for i, _, j in t} == tree_spans(decoded))
    assert score[decoded_tree] == pytest.approx(best, abs=1e-12)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 7), seed=st.integers(0, 10_000))
def test_mbr_trees_is_the_best_bracketing(n, seed):
    gen = torch.Generator().manual_seed(seed)
    marginals = torch.rand(1, n + 1, n + 1, generator=gen, dtype=torch.float64)
    (tree,) = mbr_trees(marginals, lens(n))
    spans = tree_spans(tree)
    assert (0, n) in spans and len(spans) == n - 1
    best = max(sum(float(marginals[0, i, j]) for i, _, j in tree) for tree in binary_trees(0, n))
    assert sum(float(marginals[0, i, j]) for i, j in spans) == pytest.approx(best, abs=1e-12)


def test_mbr_trees_hand_worked():
    # three words: ((0 1) 2) scores m[0,2] = 0.9, (0 (1 2)) scores m[1,3] = 0.4
    m = torch.zeros(1, 4, 4)
    m[0, 0, 2], m[0, 1, 3], m[0, 0, 3] = 0.9, 0.4, 1.0
    assert mbr_trees(m, lens(3)) == [((0, 1), 2)]
    m[0, 1, 3] = 0.95
    assert mbr_trees(m, lens(3)) == [(0, (1, 2))]
    # a shorter sentence in the same batch ignores the padding; one word is the tree 0
    m = torch.zeros(3, 5, 5)
    m[0, 0, 2] = m[0, 2, 4] = 1.0
    assert mbr_trees(m, lens(4, 2, 1)) == [((0, 1), (2, 3)), (0, 1), 0]


def test_hand_worked_two_word_sentence():
    # one nonterminal, one preterminal, rank 2: rules[0, 1, 1] = sum_r U V W = 0.5 * 0.25 * 0.5 + 0.5 * 0.75 * 0.5
    log = math.log
    g = {
        "terms": torch.tensor([[[log(0.2)], [log(0.3)]]], dtype=torch.float64),
        "roots": torch.tensor([[0.0]], dtype=torch.float64),
        "head": torch.tensor([[[log(0.5), log(0.5)]]], dtype=torch.float64),
        "left": torch.tensor([[[log(0.5), log(0.5)], [log(0.25), log(0.75)]]], dtype=torch.float64),
        "right": torch.tensor([[[log(0.5), log(0.5)], [log(0.5), log(0.5)]]], dtype=torch.float64),
    }
    expected = log((0.5 * 0.25 * 0.5 + 0.5 * 0.75 * 0.5) * 0.2 * 0.3)
    for backend in ("reference", "torch"):
        assert float(K.inside_lowrank(**g, lengths=lens(2), backend=backend)[0]) == pytest.approx(expected, abs=1e-12)


# ----------------------------------------------------------------------------- torch tier
@pytest.mark.parametrize("B,N,NT,T,r,lengths", [
    (1, 2, 1, 1, 1, (2,)),
    (3, 6, 3, 4, 5, (6, 2, 4)),  # 3 NT < 2 r: through the nonterminals
    (2, 7, 5, 3, 2, (7, 3)),     # rank space (H = U^T V)
    (4, 5, 2, 9, 17, (5, 5, 2, 3)),
])
def test_torch_tier_against_reference(B, N, NT, T, r, lengths):
    g = grammar(B, N, NT, T, r, seed=B * N + r, dtype=torch.float32, scale=2.0, spans=True)
    compare_with_reference("inside_lowrank", "torch", g, rtol=2e-5, atol=2e-5, lengths=torch.tensor(lengths))


def test_torch_tier_float64_is_exact_and_keeps_dtype():
    g = grammar(2, 6, 3, 4, 5, seed=11, spans=True)
    compare_with_reference("inside_lowrank", "torch", g, rtol=1e-11, atol=1e-11, lengths=lens(6, 3))
    g32 = {k: v.float() for k, v in g.items()}
    assert K.inside_lowrank(**g32, lengths=lens(6, 3), backend="torch").dtype == torch.float32


def test_shared_grammar_equals_per_sentence_copies():
    """TN-PCFG expands one grammar over the batch (stride 0): the product is formed once, same result."""
    g = grammar(1, 5, 3, 4, 5, seed=2)
    B = 3
    terms = grammar(B, 5, 3, 4, 5, seed=9)["terms"]
    expanded = {k: v.expand(B, *v.shape[1:]) for k, v in g.items() if k != "terms"}
    copies = {k: v.contiguous() for k, v in expanded.items()}
    lengths = lens(5, 4, 2)
    a = _grads(lambda **kw: K.inside_lowrank(**kw, backend="torch"), {"terms": terms, **expanded}, lengths)
    b = _grads(lambda **kw: K.inside_lowrank(**kw, backend="torch"), {"terms": terms, **copies}, lengths)
    for name in a:
        torch.testing.assert_close(a[name], b[name], rtol=1e-12, atol=1e-12)


def test_sharp_grammar_stays_finite():
    """Peaked factors (logits x 30): the per-span normalisers keep values and gradients finite."""
    g = grammar(2, 8, 4, 6, 9, seed=4, dtype=torch.float32, scale=30.0)
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    log_z = K.inside_lowrank(**leaves, lengths=lens(8, 5), backend="torch")
    log_z.sum().backward()
    assert torch.isfinite(log_z).all()
    assert all(torch.isfinite(v.grad).all() for v in leaves.values())
    ref = K.inside_lowrank(**{k: v.double() for k, v in g.items()}, lengths=lens(8, 5), backend="reference")
    torch.testing.assert_close(log_z.double(), ref, rtol=1e-4, atol=1e-3)


def test_never_builds_the_rule_tensor():
    """No tensor of the torch tier, forward or backward, has as many entries as ``[B, NT, S, S]`` / 8."""
    B, N, NT, T, r = 2, 6, 20, 30, 8
    g = grammar(B, N, NT, T, r, seed=1, dtype=torch.float32)
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
        K.inside_lowrank(**leaves, lengths=lens(6, 4), backend="torch").sum().backward()
    assert max(largest) < B * NT * (NT + T) ** 2 // 8


@pytest.mark.parametrize("change,message", [
    (lambda g: g.update(left=g["left"][:, 1:]), "left must be"),
    (lambda g: g.update(roots=g["roots"][:, :1]), "roots must be"),
    (lambda g: g.update(terms=g["terms"][0]), "terms must be"),
])
def test_bad_shapes_name_the_argument(change, message):
    g = grammar(2, 4, 3, 4, 5, seed=0)
    change(g)
    with pytest.raises(InduceError, match=message):
        K.inside_lowrank(**g, lengths=lens(4, 3), backend="torch")


@pytest.mark.parametrize("backend", ["reference", "torch"])
def test_one_word_sentences_score_minus_inf_without_gradient(backend):
    """As the dense op: no binary derivation, -inf, no gradient, marginals 0; the padding never reaches a number."""
    g = grammar(2, 4, 3, 4, 5, seed=0)
    g["terms"] = g["terms"].clone()
    g["terms"][1, 1:] = float("nan")  # the one-word sentence's padding
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    out = K.inside_lowrank(**leaves, lengths=lens(4, 1), backend=backend)
    assert out[1].item() == float("-inf") and torch.isfinite(out[0])
    out[0].backward()
    assert all(torch.isfinite(v.grad).all() for v in leaves.values())
    assert leaves["terms"].grad[1].abs().sum() == 0
    clean = {k: v for k, v in g.items() if k != "terms"}

    def log_partition(span_scores):
        return K.inside_lowrank(g["terms"].nan_to_num(), **clean, lengths=lens(4, 1), span_scores=span_scores,
                                backend=backend)

    marginals = K.span_marginals(log_partition, g["terms"])
    assert marginals[1].abs().sum() == 0 and marginals[0].abs().sum() > 0
    with pytest.raises(InduceError, match=r"lengths\[0\] = 5 is outside 1\.\.4"):
        K.inside_lowrank(**g, lengths=lens(5, 2), backend=backend)


def test_one_word_batches_score_minus_inf():
    g = grammar(2, 1, 3, 4, 5, seed=0)
    leaves = {k: v.clone().requires_grad_() for k, v in g.items()}
    out = K.inside_lowrank(**leaves, lengths=lens(1, 1), backend="torch")
    assert (out == float("-inf")).all()
    out.masked_fill(torch.isinf(out), 0.0).sum().backward()
    assert leaves["terms"].grad.abs().sum() == 0



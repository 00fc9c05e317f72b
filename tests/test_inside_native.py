"""The compiled paths of the torch tier (``induce.kernels.pcfg.native``) against their eager twins. Max mode: word
tables, chart and Viterbi trees equal bit for bit, gradients of the chart to float rounding, on shapes below and
above the vector width, with padding, ``-inf`` rules and two threads; exact ties broken the same way, a float32
brute force over every derivation, and a model's whole Viterbi parse (its word scores included) giving the same
trees on both paths. Sum mode (the training pass): ``log Z``, the chart and the gradient of every input to float
rounding, over the same range and with one grammar expanded over the batch; its vector ``exp`` and ``log`` against
the float64 functions. The eager fallback when no compiler works; a damaged cached library built again, never
loaded; a second source built through the same cache."""
from __future__ import annotations

import _ctypes
import ctypes
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import induce.kernels as K
from induce.kernels.pcfg import native as inside_native
from induce.kernels.pcfg.dense_torch import _max_forward
from induce.kernels.pcfg.words import max_tables, rule_blocks
from induce.kernels.testing import pcfg_inputs
from induce.models.registry import get_model_class
from induce.trees.grammar_decoders import viterbi_decoder
from induce.trees.nodes import build_binary, tree_spans

from helpers import internal_nodes, shapes

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler: the compiled path is off")


def _sparse(inp, seed):
    """Some rules ``-inf`` (a grammar that forbids them), as a trained model's masked rules are."""
    gen = torch.Generator().manual_seed(seed)
    rules = inp["rules"].clone()
    rules[torch.rand(rules.shape, generator=gen) < 0.2] = float("-inf")
    NT = rules.shape[1]
    rules[:, 0, 0, NT] = rules[:, 0, NT, NT] = 0.0  # A0 -> A0 p0 | p0 p0: every length keeps a derivation
    return dict(inp, rules=rules)


def _both(fn):
    """``fn()`` under the eager twin, then under the compiled path."""
    with inside_native.use_native(False):
        eager = fn()
    with inside_native.use_native(True):
        native = fn()
    return eager, native


def test_the_library_builds_where_a_compiler_is():
    assert inside_native.unavailable_reason() is None
    assert inside_native.library().induce_vector_width() in (8, 16)


# NT 1-3: the scalar rule step (NT * NT below a vector); 17, 30: the vector loops with an overlapping last
# vector; T below and above the four spans of a work item
@pytest.mark.parametrize("B,T,NT,P", [(2, 5, 1, 1), (3, 7, 3, 2), (2, 9, 17, 19), (2, 6, 30, 60), (1, 13, 5, 17)])
def test_tables_and_chart_equal_the_eager_twin_bit_for_bit(B, T, NT, P):
    inp = _sparse(pcfg_inputs(B, T, NT, P, seed=T), seed=NT)
    eager, native = _both(lambda: max_tables(inp["terms"], inp["rules"]))
    for want, got in zip(eager, native):
        assert torch.equal(want, got)
    y, z, w2 = eager
    spans = inp["span_scores"][:, :T, 1:].contiguous()
    want, got = _both(lambda: _max_forward(y, z, w2, rule_blocks(inp["rules"])[0], spans))
    assert torch.equal(want, got)


def _max_pass(inp, upstream):
    """Best score and chart of the max mode, and the gradients of every input for ``upstream`` on the chart."""
    leaves = {k: inp[k].clone().requires_grad_() for k in ("terms", "rules", "roots", "span_scores")}
    log_z, chart = K.inside(**leaves, lengths=inp["lengths"], semiring="max", chart=True, backend="torch")
    finite = torch.isfinite(chart)
    (log_z.sum() + (chart.where(finite, 0) * upstream.where(finite, 0)).sum()).backward()
    return log_z, chart, {k: v.grad for k, v in leaves.items()}


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(T=st.integers(2, 9), NT=st.integers(1, 18), P=st.integers(1, 20), seed=st.integers(0, 10_000),
       threads=st.sampled_from([1, 2]))
def test_values_trees_and_gradients_equal_the_eager_twin(T, NT, P, seed, threads):
    """Padded batches (lengths 1 .. T), some rules -inf, an upstream gradient on a third of the chart cells
    (the backward pass routes each through the cell's winning split, recomputed)."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [T, *torch.randint(1, T + 1, (2,), generator=gen).tolist()]
    inp = _sparse(pcfg_inputs(3, T, NT, P, lengths=lengths, seed=seed), seed=seed)
    upstream = torch.randn(3, T + 1, T + 1, NT, generator=gen) * (torch.rand(3, T + 1, T + 1, NT, generator=gen) < 0.3)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (z_e, chart_e, grads_e), (z_n, chart_n, grads_n) = _both(lambda: _max_pass(inp, upstream))
        no_spans = {k: v for k, v in inp.items() if k != "span_scores"}
        (score_e, trees_e), (score_n, trees_n) = _both(lambda: K.viterbi(**no_spans, backend="torch"))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(z_e, z_n) and torch.equal(chart_e, chart_n)
    assert torch.equal(score_e, score_n) and trees_e == trees_n
    for name in grads_e:  # sums of the same shares in another order
        torch.testing.assert_close(grads_n[name], grads_e[name], rtol=1e-5, atol=1e-5, msg=name)


def test_a_paper_size_batch_gives_the_eager_trees():
    inp = pcfg_inputs(4, 24, 30, 60, lengths=[24, 20, 11, 2], seed=3)
    no_spans = {k: v for k, v in inp.items() if k != "span_scores"}
    (score_e, trees_e), (score_n, trees_n) = _both(lambda: K.viterbi(**no_spans, backend="torch"))
    assert torch.equal(score_e, score_n) and trees_e == trees_n


@pytest.mark.parametrize("flags", [["-O3"], ["-O3", "-march=native"]])
def test_a_portable_build_gives_the_same_values(fresh_build, monkeypatch, flags):
    """Without ``-march=native`` (no AVX-512 here: 8-float vectors, the build most machines without it get)
    and without OpenMP, the same chart, trees and gradients."""
    monkeypatch.setattr(inside_native, "FLAG_SETS", (flags,))
    assert inside_native.unavailable_reason() is None
    width = inside_native.library().induce_vector_width()
    assert width == 8 or "-march=native" in flags
    for B, T, NT, P in [(2, 9, 17, 19), (3, 6, 30, 11), (2, 5, 3, 4)]:
        inp = _sparse(pcfg_inputs(B, T, NT, P, lengths=[T] + [T - 1] * (B - 1), seed=NT), seed=T)
        upstream = torch.randn(B, T + 1, T + 1, NT, generator=torch.Generator().manual_seed(0))
        (z_e, chart_e, grads_e), (z_n, chart_n, grads_n) = _both(lambda inp=inp, u=upstream: _max_pass(inp, u))
        assert torch.equal(z_e, z_n) and torch.equal(chart_e, chart_n)
        for name in grads_e:
            torch.testing.assert_close(grads_n[name], grads_e[name], rtol=1e-5, atol=1e-5, msg=name)


def test_float64_and_graphs_stay_on_the_eager_loops():
    x = torch.zeros(2, 3)
    with inside_native.use_native(True):
        assert inside_native.usable(x)
        assert not inside_native.usable(x.double())
        assert not inside_native.usable(x.requires_grad_())
        with torch.no_grad():
            assert inside_native.usable(x)
    with inside_native.use_native(False):
        assert not inside_native.usable(x.detach())


# --------------------------------------------------------------------------------- ties and a model's parse
@pytest.fixture
def counted(monkeypatch):
    """The names of the compiled max-mode functions called (the compiled path ran, not only the eager one)."""
    calls = []

    def counting(name):
        original = getattr(inside_native, name)

        def wrapper(*args):
            calls.append(name)
            return original(*args)
        return wrapper

    for name in ("max_chart", "max_backward"):
        monkeypatch.setattr(inside_native, name, counting(name))
    return calls


def _tied(kind, B, T, NT, P, lengths, seed):
    """Dense-PCFG inputs whose derivations tie exactly: ``zero`` every score 0 (every derivation ties in the
    float sums too), ``uniform`` every rule ``-log(S^2)``, root ``-log(NT)`` and word ``-log(P)`` (every tree ties
    in exact arithmetic, the float sums in another order round apart), ``levels`` random integers in ``-2 .. 0``
    (float sums exact: many exact ties between other derivations)."""
    inp = pcfg_inputs(B, T, NT, P, lengths=lengths, seed=seed, span_scores=False)
    S = NT + P
    for name, size in (("terms", P), ("rules", S * S), ("roots", NT)):
        if kind == "zero":
            inp[name] = torch.zeros_like(inp[name])
        elif kind == "uniform":
            inp[name] = torch.full_like(inp[name], -float(np.log(size)))
        else:
            gen = torch.Generator().manual_seed(seed + size)
            inp[name] = -torch.randint(0, 3, inp[name].shape, generator=gen).float()
    return inp


def _right_branching(n):
    return build_binary(0, n, lambda start, end: start + 1)


@pytest.mark.parametrize("kind", ["zero", "uniform", "levels"])
@pytest.mark.parametrize("B,T,NT,P,lengths", [(1, 2, 1, 1, [2]), (2, 5, 1, 1, [5, 3]), (3, 7, 3, 2, [7, 4, 1]),
                                             (2, 9, 17, 19, [9, 6]), (2, 13, 5, 17, [13, 12]),
                                             (1, 6, 30, 60, [6])])
def test_tied_scores_give_the_eager_trees_and_scores(counted, kind, B, T, NT, P, lengths):
    """Exact ties, broken the same way on both paths: NT below, at and above a vector (the scalar rule step, an
    overlapping last vector), one preterminal, a padded batch with a one-word sentence. Every score 0: every
    span's first split wins (a word on the left, then the lowest nonterminal), the right-branching tree."""
    inp = _tied(kind, B, T, NT, P, lengths, seed=T + NT)
    (score_e, trees_e), (score_n, trees_n) = _both(lambda: K.viterbi(**inp, backend="torch"))
    assert counted == ["max_chart", "max_backward"]  # once each, under use_native(True)
    assert torch.equal(score_e, score_n) and trees_e == trees_n
    if kind == "zero":
        assert trees_n == [_right_branching(n) if n > 1 else 0 for n in lengths]


def _brute_force_best(terms, rules, roots, n):
    """``(best score, the span sets of the trees scoring it)`` over every derivation of the first ``n`` words,
    in float64 (``terms [T, P]``, ``rules [NT, S, S]``, ``roots [NT]``)."""
    NT, P = rules.shape[0], terms.shape[1]
    terms, rules, roots = terms.double().tolist(), rules.double().tolist(), roots.double().tolist()
    scored = []
    for tree in shapes(0, n):
        nodes = internal_nodes(tree)
        spans = frozenset(node[2] for node in nodes)
        for labels in itertools.product(range(NT), repeat=len(nodes)):
            label = {node[2]: a for node, a in zip(nodes, labels)}
            for tags in itertools.product(range(P), repeat=n):
                def symbol(child, tags=tags, label=label):
                    return NT + tags[child] if isinstance(child, int) else label[child[2]]

                score = roots[label[(0, n)]] + sum(terms[i][tags[i]] for i in range(n))
                score += sum(rules[label[node[2]]][symbol(node[0])][symbol(node[1])] for node in nodes)
                scored.append((score, spans))
    best = max(score for score, _ in scored)
    return best, {spans for score, spans in scored if score >= best - 1e-4}


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 5), pad=st.integers(0, 2), NT=st.integers(1, 2), P=st.integers(1, 2),
       seed=st.integers(0, 10_000), kind=st.sampled_from(["normal", "levels", "zero"]))
def test_both_paths_give_one_brute_force_best_tree_in_float32(n, pad, NT, P, seed, kind):
    """Float32 inputs (the compiled path's; the brute-force tests of ``test_inside.py`` run float64, which stays
    eager): the score is the best derivation's, the tree is one of the trees scoring it (within float32 rounding;
    integer scores sum exactly, so there the ties are exact), and both paths give the same score and tree."""
    T = n + pad
    lengths = [n, T]
    inp = pcfg_inputs(2, T, NT, P, lengths=lengths, seed=seed, span_scores=False) if kind == "normal" else \
        _tied(kind, 2, T, NT, P, lengths, seed)
    with inside_native.use_native(True):
        assert inside_native.usable(inp["terms"])
    (score_e, trees_e), (score_n, trees_n) = _both(lambda: K.viterbi(**inp, backend="torch"))
    assert torch.equal(score_e, score_n) and trees_e == trees_n
    for b, length in enumerate(lengths):
        best, best_trees = _brute_force_best(inp["terms"][b], inp["rules"][b], inp["roots"][b], length)
        assert float(score_n[b]) == pytest.approx(best, abs=1e-4)
        assert tree_spans(trees_n[b]) in best_trees


def _parse_trees(model, tokens, lengths):
    """The Viterbi trees of ``model.parse_structure`` (channel 1), as span sets."""
    structure = model.parse_structure(tokens, lengths)["span_posteriors"]
    return [tree_spans(viterbi_decoder(structure[b].numpy(), int(n))) for b, n in enumerate(lengths)]


@pytest.mark.parametrize("name,z_dim", [("npcfg", 0), ("cpcfg", 4)])
def test_a_models_viterbi_parse_gives_the_same_trees_whether_the_compiled_loops_run_or_not(counted, name, z_dim):
    """The whole parse, the grammar's networks included: its word scores are the same bit for bit on both paths
    (the emission normaliser of a pass without a graph is torch's: the compiled one rounds differently), so a
    grammar whose trees tie in exact arithmetic (here: every rule the same score) gives the same trees. With the
    compiled normaliser the eager path's trees differed on some of these sentences."""
    torch.manual_seed(0)
    cls = get_model_class(name)
    model = cls(2000, cls.Config(nt_states=4, t_states=6, state_dim=16, z_dim=z_dim)).eval()
    with torch.no_grad():
        model.grammar.rule_mlp.weight.zero_()
        model.grammar.rule_mlp.bias.zero_()
    gen = torch.Generator().manual_seed(1)
    lengths = torch.tensor([18, 17, 16, 15, 14, 12, 10, 9])
    tokens = torch.randint(0, 2000, (len(lengths), int(lengths.max())), generator=gen)
    trees_e, trees_n = _both(lambda: _parse_trees(model, tokens, lengths))
    assert "max_chart" in counted
    assert trees_e == trees_n
    with torch.no_grad():
        terms_e, terms_n = _both(lambda: model.grammar(tokens, None if not z_dim else
                                                       model.latent(tokens, lengths, "mean")[0])[0])
    assert torch.equal(terms_e, terms_n)


def test_emission_scores_take_the_compiled_normaliser_only_with_a_graph(monkeypatch):
    """Training (a graph) takes the compiled normaliser; a pass without one (parsing, evaluation) gives the logits
    at the words less ``torch.logsumexp`` of their rows bit for bit, on both paths."""
    from induce.kernels.pcfg import emissions

    calls = []
    original = inside_native.row_logsumexp
    monkeypatch.setattr(inside_native, "row_logsumexp", lambda x: calls.append(x.shape) or original(x))
    gen = torch.Generator().manual_seed(0)
    hidden, weight, bias = torch.randn(2, 6, 8, generator=gen), torch.randn(5000, 8, generator=gen), \
        torch.randn(5000, generator=gen)
    tokens = torch.randint(0, 5000, (2, 7), generator=gen)
    logits = torch.nn.functional.linear(hidden, weight, bias)  # [G, P, V]
    want = (logits.gather(2, tokens[:, None, :].expand(2, 6, 7)) - logits.logsumexp(-1, keepdim=True)).transpose(1, 2)
    for on in (True, False):
        with inside_native.use_native(on):
            got = emissions.emission_scores(hidden, weight, bias, tokens)
        assert torch.equal(got, want), on
    assert calls == []
    with inside_native.use_native(True):
        emissions.emission_scores(hidden.requires_grad_(), weight, bias, tokens).sum().backward()
    assert calls == [(12, 5000)]


# ------------------------------------------------------------------------------------------------- sum mode
def _sum_pass(inp, upstream, shared=False):
    """``log Z``, the chart and the gradients of every input of the sum mode for ``upstream`` on the chart
    (plus ``log Z`` itself); ``shared``: one grammar (the first sentence's rules and roots) expanded over the
    batch, as the N-PCFG passes it."""
    leaves = {k: inp[k].clone().requires_grad_() for k in ("terms", "rules", "roots", "span_scores")}
    rules, roots = leaves["rules"], leaves["roots"]
    if shared:
        rules, roots = rules[:1].expand_as(rules), roots[:1].expand_as(roots)
    log_z, chart = K.inside(leaves["terms"], rules, roots, inp["lengths"], span_scores=leaves["span_scores"],
                            chart=True, backend="torch")
    finite = torch.isfinite(chart)
    loss = log_z.where(torch.isfinite(log_z), 0).sum() + (chart.where(finite, 0) * upstream.where(finite, 0)).sum()
    loss.backward()
    return log_z.detach(), chart.detach(), {k: v.grad for k, v in leaves.items()}


#: The compiled sum mode against its eager twin: relative to the largest entry of each tensor (sums of the same
#: float32 terms in another order, and its exp and log within a few ulp of the C library's).
SUM_TOLERANCE = 2e-5


def _assert_close_to_float_rounding(got, want, name):
    finite = want[torch.isfinite(want)]
    scale = float(finite.abs().max()) if finite.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=SUM_TOLERANCE, atol=SUM_TOLERANCE * max(scale, 1.0), msg=name,
                               equal_nan=True)


def _compare_sum(inp, upstream, threads=1, shared=False):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        (z_e, chart_e, grads_e), (z_n, chart_n, grads_n) = _both(lambda: _sum_pass(inp, upstream, shared))
    finally:
        torch.set_num_threads(before)
    assert torch.equal(torch.isinf(z_e), torch.isinf(z_n)) and torch.equal(torch.isinf(chart_e), torch.isinf(chart_n))
    _assert_close_to_float_rounding(z_n, z_e, "log Z")
    _assert_close_to_float_rounding(chart_n, chart_e, "chart")
    for name in grads_e:
        _assert_close_to_float_rounding(grads_n[name], grads_e[name], name)


@pytest.mark.parametrize("B,T,NT,P", [(2, 5, 1, 1), (3, 7, 3, 2), (2, 9, 17, 19), (2, 6, 30, 60), (1, 13, 5, 17)])
def test_the_sum_mode_equals_the_eager_twin_to_float_rounding(B, T, NT, P):
    inp = _sparse(pcfg_inputs(B, T, NT, P, seed=T), seed=NT)
    _compare_sum(inp, torch.randn(B, T + 1, T + 1, NT, generator=torch.Generator().manual_seed(B)))


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 4), T=st.integers(2, 11), NT=st.integers(1, 20), P=st.integers(1, 20),
       seed=st.integers(0, 10_000), threads=st.sampled_from([1, 2]), shared=st.booleans(),
       sparse=st.booleans(), upstream=st.booleans())
def test_sum_values_and_every_gradient_equal_the_eager_twin(B, T, NT, P, seed, threads, shared, sparse, upstream):
    """Padded batches (lengths 1 .. T), rules -inf or not, one grammar expanded over the batch or one per
    sentence, the gradient of ``log Z`` alone or with an upstream gradient on a third of the chart's cells."""
    gen = torch.Generator().manual_seed(seed)
    lengths = [T, *torch.randint(1, T + 1, (B - 1,), generator=gen).tolist()]
    inp = pcfg_inputs(B, T, NT, P, lengths=lengths, seed=seed)
    if sparse:
        inp = _sparse(inp, seed)
    cells = torch.randn(B, T + 1, T + 1, NT, generator=gen) * (torch.rand(B, T + 1, T + 1, NT, generator=gen) < 0.3)
    _compare_sum(inp, cells if upstream else torch.zeros_like(cells), threads, shared)


def test_a_paper_size_training_batch_equals_the_eager_twin():
    """30 nonterminals, 60 preterminals, sentences of 24 to 2 words: the N-PCFG's shared grammar and the
    compound PCFG's grammar per sentence, two threads."""
    inp = pcfg_inputs(4, 24, 30, 60, lengths=[24, 20, 11, 2], seed=3)
    upstream = torch.zeros(4, 25, 25, 30)
    _compare_sum(inp, upstream, threads=2, shared=True)
    _compare_sum(inp, upstream, threads=1, shared=False)


def test_the_sum_mode_takes_the_compiled_path_with_a_graph():
    x = torch.zeros(2, 3, requires_grad=True)
    with inside_native.use_native(True):
        assert inside_native.usable_for_sum(x) and not inside_native.usable(x)
        assert not inside_native.usable_for_sum(x.double())
    with inside_native.use_native(False):
        assert not inside_native.usable_for_sum(x)


def _vector_math(x: torch.Tensor, which: int) -> torch.Tensor:
    """The library's vector exp (0) or log (1) of ``x`` (1-D float32)."""
    lib = inside_native.library()
    width = lib.induce_vector_width()
    n = -(-x.numel() // width) * width
    padded, out = torch.ones(n), torch.empty(n)
    padded[: x.numel()] = x
    lib.induce_vector_math(padded.data_ptr(), out.data_ptr(), n, which)
    return out[: x.numel()]


def _ulps(got: torch.Tensor, want: torch.Tensor) -> np.ndarray:
    return np.abs(got.numpy().view(np.int32).astype(np.int64) - want.numpy().view(np.int32).astype(np.int64))


def test_the_vector_exp_and_log_are_within_two_ulp_of_the_float64_functions():
    x = torch.linspace(-110.0, 90.0, 400_001)
    want = x.double().exp().float()
    got = _vector_math(x, 0)
    assert torch.equal(got == 0, want == 0) and torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want) & (want > 0)  # subnormals included
    assert _ulps(got[finite], want[finite]).max() <= 2
    y = torch.cat([torch.logspace(-45, 38.5, 400_001).float(), torch.rand(100_000) * 4, torch.tensor([1e-45, 1.0])])
    y = y[y > 0]
    assert _ulps(_vector_math(y, 1), y.double().log().float()).max() <= 2
    specials = torch.tensor([float("-inf"), float("inf"), float("nan"), 0.0, -1.0])
    assert _vector_math(specials, 0)[:4].tolist()[:2] == [0.0, float("inf")]
    assert torch.isnan(_vector_math(specials, 0)[2]) and _vector_math(specials, 0)[3] == 1.0
    logs = _vector_math(specials, 1)
    assert torch.isnan(logs[0]) and logs[1] == float("inf") and torch.isnan(logs[2])
    assert logs[3] == float("-inf") and torch.isnan(logs[4])


def test_without_a_working_compiler_the_sum_mode_runs_on_the_eager_loops(fresh_build, monkeypatch):
    inp = pcfg_inputs(2, 6, 4, 5, seed=1, span_scores=False)
    with inside_native.use_native(False):
        want = K.inside(**inp, backend="torch")
    monkeypatch.setenv("CXX", "false")
    assert not inside_native.usable_for_sum(inp["terms"])
    assert torch.equal(K.inside(**inp, backend="torch"), want)


def test_a_second_source_is_built_through_the_same_cache(fresh_build, tmp_path):
    """``build`` serves another C++ source: its own library in the cache, its declared entry point; a source
    without the declared entry point is refused, saying why."""
    source = tmp_path / "second_kernels.cpp"
    source.write_text('extern "C" int induce_answer() { return 42; }\n')

    def declare(lib):
        lib.induce_answer.restype = ctypes.c_int
        return lib

    lib = inside_native.build(str(source), declare)
    assert lib is not None and lib.induce_answer() == 42 and inside_native.failure(str(source)) is None
    assert [p.name.split("-")[0] for p in fresh_build.rglob("*.so")] == ["second_kernels"]

    def declare_missing(lib):
        return lib.induce_no_such_function

    assert inside_native.build(str(source), declare_missing, name="other") is None
    assert "not a build of second_kernels.cpp" in inside_native.failure(str(source))


@pytest.fixture
def fresh_build(monkeypatch, tmp_path):
    """The library forgotten and built again into an empty cache (restored after the test)."""
    monkeypatch.setenv("INDUCE_CACHE_DIR", str(tmp_path))
    inside_native.library.cache_clear()
    yield tmp_path
    monkeypatch.undo()
    inside_native.library.cache_clear()


def test_without_a_working_compiler_viterbi_runs_on_the_eager_loops(fresh_build, monkeypatch):
    inp = pcfg_inputs(2, 6, 4, 5, seed=1, span_scores=False)
    with inside_native.use_native(False):
        want_score, want_trees = K.viterbi(**inp, backend="torch")
    monkeypatch.setenv("CXX", "false")  # a compiler that fails
    assert "failed" in inside_native.unavailable_reason()
    score, trees = K.viterbi(**inp, backend="torch")
    assert torch.equal(score, want_score) and trees == want_trees
    inside_native.library.cache_clear()
    monkeypatch.setenv("CXX", "no-such-compiler-here")
    assert "no C++ compiler found ('no-such-compiler-here'" in inside_native.unavailable_reason()
    assert not inside_native.usable(inp["terms"])
    assert list(fresh_build.rglob("*.so")) == []


def test_a_build_is_kept_in_the_cache_and_loaded_from_it(fresh_build):
    assert inside_native.unavailable_reason() is None
    (built,) = fresh_build.rglob("inside_native-*.so")
    assert built.stat().st_mode & 0o777 == 0o755  # readable by whoever shares the cache
    inside_native.library.cache_clear()
    stamp = built.stat().st_mtime_ns
    assert inside_native.library() is not None
    assert [p.stat().st_mtime_ns for p in fresh_build.rglob("*.so")] == [stamp]  # loaded, not rebuilt
    record = json.loads(inside_native.record_path(built).read_text())
    assert record["size"] == built.stat().st_size and len(record["sha256"]) == 64


def test_an_unwritable_cache_is_named_and_viterbi_still_runs(fresh_build, monkeypatch):
    blocker = fresh_build / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("INDUCE_CACHE_DIR", str(blocker / "cache"))  # under a file: not even root can create it
    assert f"cannot write the build cache {blocker / 'cache' / 'native'}" in inside_native.unavailable_reason()
    inp = pcfg_inputs(2, 5, 3, 4, seed=2, span_scores=False)
    score, trees = K.viterbi(**inp, backend="torch")
    assert torch.isfinite(score).all() and len(trees) == 2


#: Viterbi parses against the caches ``sys.argv[1]`` (JSON ``[[folder, may build], ...]``), in a process of
#: their own (loading a truncated library kills the process): what each parse gives, as JSON. Builds at
#: ``-O0`` (a second, where ``-O3`` takes ten).
PARSE = """
import json, os, sys
import induce.kernels as K
from induce.kernels.pcfg import native
from induce.kernels.testing import pcfg_inputs
native.FLAG_SETS = (["-O0"],)
build, results = native._compile, []
for cache, may_build in json.loads(sys.argv[1]):
    os.environ["INDUCE_CACHE_DIR"] = cache
    native._compile = build if may_build else (lambda *args: "the test forbids building")
    native.library.cache_clear()
    score, trees = K.viterbi(**pcfg_inputs(2, 6, 4, 5, seed=1, span_scores=False), backend="torch")
    results.append({"trees": trees, "native": native.library() is not None, "reason": native.unavailable_reason()})
print(json.dumps(results))
"""

#: How the cached library is damaged: cut to half its size, replaced by another shared library (without our
#: entry points), left without its build record; and cut in half where it cannot be built again.
DAMAGES = ("truncated", "foreign", "unrecorded", "truncated, cannot build")


@pytest.fixture(scope="module")
def damaged(tmp_path_factory) -> dict:
    """``{damage: (the library, its size as built, what the parse gave)}``: one cache built here at ``-O0``,
    copied and damaged once per :data:`DAMAGES`, the copies parsed in one subprocess."""
    root = tmp_path_factory.mktemp("native")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("INDUCE_CACHE_DIR", str(root / "built"))
        patch.setattr(inside_native, "FLAG_SETS", (["-O0"],))
        inside_native.library.cache_clear()
        assert inside_native.unavailable_reason() is None
    inside_native.library.cache_clear()
    (built,) = (root / "built").rglob("*.so")
    libraries = []
    for number, damage in enumerate(DAMAGES):
        shutil.copytree(root / "built", root / str(number))
        library = root / str(number) / built.relative_to(root / "built")
        if damage.startswith("truncated"):
            os.truncate(library, built.stat().st_size // 2)
        elif damage == "foreign":
            shutil.copyfile(_ctypes.__file__, library)
        else:
            inside_native.record_path(library).unlink()
        libraries.append(library)
    caches = [[str(root / str(number)), "cannot build" not in damage] for number, damage in enumerate(DAMAGES)]
    repo = str(Path(__file__).resolve().parents[1])
    env = {**os.environ, "INDUCE_NATIVE_KERNELS": "1",
           "PYTHONPATH": os.pathsep.join([repo, *filter(None, [os.environ.get("PYTHONPATH")])])}
    done = subprocess.run([sys.executable, "-c", PARSE, json.dumps(caches)], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"exit status {done.returncode} (-7: SIGBUS):\n{done.stderr[-3000:]}"
    return {damage: (library, built.stat().st_size, result)
            for damage, library, result in zip(DAMAGES, libraries, json.loads(done.stdout))}


def eager_trees() -> list:
    with inside_native.use_native(False):
        _, trees = K.viterbi(**pcfg_inputs(2, 6, 4, 5, seed=1, span_scores=False), backend="torch")
    return json.loads(json.dumps(trees))


@pytest.mark.parametrize("damage", ["truncated", "foreign", "unrecorded"])
def test_a_damaged_cached_library_is_built_again_not_loaded(damaged, damage):
    library, _, result = damaged[damage]
    assert result == {"trees": eager_trees(), "native": True, "reason": None}
    assert inside_native._mismatch(library) is None


def test_a_damaged_cached_library_that_cannot_be_built_again_leaves_the_eager_loops_saying_why(damaged):
    library, size, result = damaged["truncated, cannot build"]
    assert result["trees"] == eager_trees() and not result["native"]
    assert result["reason"] == (f"{library}: not loaded, it has {size // 2:,} bytes where its build wrote {size:,}; "
                                "building it again failed: the test forbids building")

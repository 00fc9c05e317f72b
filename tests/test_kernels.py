"""Kernels: dispatcher, torch tier against the reference loops, hand-derived values, gradcheck.

The Triton tier is tested in ``tests/test_kernels_triton.py`` (through Triton's interpreter).
"""
from __future__ import annotations

import math

import pytest
import torch

import induce.kernels as K
from induce.errors import InduceError
from induce.kernels.testing import (
    compare_with_reference,
    onlstm_cell_inputs,
    random_scan_inputs,
    span_attention_inputs,
)

TIER = "torch"


def _gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# ------------------------------------------------------------------------------------ dispatcher
def test_backend_switch_and_context_manager():
    assert K.get_backend() == "auto"
    x = torch.randn(2, 3)
    assert K.resolve("auto", x) == "torch"  # CPU tensors
    with K.use_backend("reference"):
        assert K.get_backend() == "reference"
        assert K.resolve("auto", x) == "reference"
        assert K.resolve("torch", x) == "torch"  # an explicit argument beats the global choice
    assert K.get_backend() == "auto"
    K.set_backend("torch")
    try:
        assert K.resolve("auto", x) == "torch"
    finally:
        K.set_backend("auto")


def test_unknown_backend_is_a_clear_error():
    with pytest.raises(K.KernelBackendError, match="unknown kernel backend 'cuda'"):
        K.cumax(torch.randn(3), backend="cuda")
    with pytest.raises(InduceError):
        K.set_backend("fast")


def test_triton_on_cpu_without_interpreter_is_a_clear_error(monkeypatch):
    # Import the Triton tier first, under the environment the other tests set up (Triton reads
    # TRITON_INTERPRET when it decorates the kernels), then pretend the interpreter is off.
    reason = K.triton_unavailable_reason()
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    if reason is not None:
        match = "unavailable"
    else:
        match = "needs CUDA tensors"
    with pytest.raises(K.KernelBackendError, match=match):
        K.cumax(torch.randn(3), backend="triton")


# ----------------------------------------------------------------------------------------- cumax
def test_cumax_by_hand():
    x = torch.tensor([0.0, math.log(2.0), math.log(5.0)])  # softmax = [1, 2, 5] / 8
    torch.testing.assert_close(K.cumax(x, backend=TIER), torch.tensor([1 / 8, 3 / 8, 1.0]))
    torch.testing.assert_close(K.cumax(x, reverse=True, backend=TIER), torch.tensor([1.0, 7 / 8, 5 / 8]))


@pytest.mark.parametrize("shape,dim", [((1, 1), -1), ((3, 7), -1), ((3, 7), 0), ((2, 5, 9), 1)])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumax_matches_reference(shape, dim, reverse):
    x = 3 * torch.randn(shape, generator=_gen())
    compare_with_reference("cumax", TIER, {"x": x}, dim=dim, reverse=reverse)


# ---------------------------------------------------------------------------- stick-breaking
def test_stick_breaking_by_hand():
    # tau = 20: alpha_j = clamp((q - d_j) * 20 + 1, -1, 1) / 2 + 1/2
    d = torch.tensor([[0.1, 0.8, 0.55, 0.5]])
    g = K.stick_breaking_gates(d, window=3, tau=20.0, backend=TIER)[0]
    # t=3, q=0.5, slots i=0,1,2: alpha_3 = 1, alpha_2 = (0.5-0.55)*20+1 = 0 -> 1/2, alpha_1 = -5 -> 0
    torch.testing.assert_close(g[3], torch.tensor([0.0, 0.5, 1.0]))
    # t=1, q=0.8: slots -2, -1 (before the start: 0) and 0: alpha_1 = 1
    torch.testing.assert_close(g[1], torch.tensor([0.0, 0.0, 1.0]))
    # t=0: only slots before the start
    torch.testing.assert_close(g[0], torch.zeros(3))
    # predicted query for t=3 (d_next[3] = 0.9): every alpha_j = 1, slots 0..2 open
    d_next = torch.tensor([[0.0, 0.0, 0.0, 0.9]])
    g_next = K.stick_breaking_gates(d, window=3, tau=20.0, d_next=d_next, backend=TIER)[0]
    torch.testing.assert_close(g_next[3], torch.ones(3))
    # d_next[2] = 0.0 < d_2: alpha_2 = (0 - 0.55)*20+1 -> 0: slot 1 (h_1) is closed, so is slot 0
    torch.testing.assert_close(g_next[2], torch.tensor([0.0, 0.0, 0.0]))


@pytest.mark.parametrize("B,T,W", [(1, 1, 3), (2, 7, 5), (3, 4, 9), (1, 33, 4)])
@pytest.mark.parametrize("tau", [20.0, 3.0])
@pytest.mark.parametrize("with_next", [False, True])
def test_stick_breaking_matches_reference(B, T, W, tau, with_next):
    gen = _gen(B * 100 + T)
    inputs = {"d": torch.rand(B, T, generator=gen)}
    if with_next:
        inputs["d_next"] = torch.rand(B, T, generator=gen)
    compare_with_reference("stick_breaking_gates", TIER, inputs, window=W, tau=tau)


def test_stick_breaking_exact_zeros_keep_gradients_finite():
    # Saturated alphas (exact 0 and exact 1) everywhere, plus ties: products of zeros.
    d = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5]])
    compare_with_reference("stick_breaking_gates", TIER, {"d": d}, window=5, tau=100.0)
    compare_with_reference("stick_breaking_gates", TIER, {"d": d, "d_next": d.flip(1)}, window=5, tau=100.0)


# ------------------------------------------------------------------------------- linear scan
def test_linear_scan_by_hand():
    u = torch.randn(2, 6, 3, generator=_gen())
    zeros = torch.zeros_like(u)
    torch.testing.assert_close(K.linear_scan(zeros, u, backend=TIER), u.cumsum(1))  # f = 1
    torch.testing.assert_close(K.linear_scan(zeros, u, reverse=True, backend=TIER), u.flip(1).cumsum(1).flip(1))
    minus_inf = torch.full_like(u, -math.inf)  # f = 0: no memory at all
    torch.testing.assert_close(K.linear_scan(minus_inf, u, backend=TIER), u)
    c0 = torch.ones(2, 3)
    half = torch.full_like(u, math.log(0.5))
    out = K.linear_scan(half, torch.zeros_like(u), c0=c0, backend=TIER)
    torch.testing.assert_close(out[:, -1], c0 * 0.5**6)


@pytest.mark.parametrize("B,T,D", [(1, 1, 1), (2, 7, 3), (1, 70, 5)])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("with_c0", [False, True])
def test_linear_scan_matches_reference(B, T, D, reverse, with_c0):
    gen = _gen(T)
    inputs = random_scan_inputs(B, T, D, generator=gen)
    if with_c0:
        inputs["c0"] = torch.randn(B, D, generator=gen)
    compare_with_reference("linear_scan", TIER, inputs, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("T", [40, 300])  # the torch tier's sequential and blocked paths
def test_linear_scan_hard_gates(reverse, T):
    gen = _gen(3)
    u = torch.randn(2, T, 4, generator=gen)
    choice = torch.randint(0, 4, u.shape, generator=gen)
    log_f = torch.stack([torch.zeros_like(u), torch.full_like(u, -math.inf), torch.full_like(u, -1e4),
                         -torch.rand(u.shape, generator=gen)])
    log_f = log_f.gather(0, choice[None])[0]
    compare_with_reference("linear_scan", TIER, {"log_f": log_f, "u": u, "c0": torch.randn(2, 4)}, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_long_strong_decay(reverse):
    # T = 2000: the global product of the gates underflows (exp(-2000 * 3) = 0), the scan must not care.
    gen = _gen(4)
    log_f = -3 * torch.rand(1, 2000, 3, generator=gen)
    u = torch.randn(1, 2000, 3, generator=gen)
    out = K.linear_scan(log_f, u, reverse=reverse, backend=TIER)
    exact = K.linear_scan(log_f.double(), u.double(), reverse=reverse, backend="reference")
    torch.testing.assert_close(out.double(), exact, rtol=1e-5, atol=1e-5)
    compare_with_reference("linear_scan", TIER, {"log_f": log_f, "u": u}, reverse=reverse)


# ----------------------------------------------------------------------- span representations
def _per_span_rnn(log_f: torch.Tensor, u: torch.Tensor, start: int, end: int, reverse: bool) -> torch.Tensor:
    """The rational RNN run over span [start, end] alone (PaLM's 'computationally daunting' way)."""
    c = torch.zeros_like(u[:, 0])
    order = range(end, start - 1, -1) if reverse else range(start, end + 1)
    for t in order:
        c = log_f[:, t].exp() * c + u[:, t]
    return c


@pytest.mark.parametrize("reverse", [False, True])
def test_span_representations_equal_per_span_rnn(reverse):
    B, T, D, m = 2, 9, 3, 4
    inputs = random_scan_inputs(B, T, D, dtype=torch.float64, generator=_gen(5))
    inputs["log_f"][0, 3] = -math.inf  # a hard reset inside some spans
    c = K.linear_scan(inputs["log_f"], inputs["u"], reverse=reverse, backend=TIER)
    spans = K.span_representations(c, inputs["log_f"], m, reverse=reverse, backend=TIER)
    for t in range(T):
        for k in range(m):
            if t - k < 0:
                assert torch.all(spans[:, t, k] == 0)
            else:
                expected = _per_span_rnn(inputs["log_f"], inputs["u"], t - k, t, reverse)
                torch.testing.assert_close(spans[:, t, k], expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("B,T,D,m", [(1, 1, 1, 3), (2, 7, 3, 4), (1, 5, 2, 8), (2, 19, 3, 5)])
@pytest.mark.parametrize("reverse", [False, True])
def test_span_representations_match_reference(B, T, D, m, reverse):
    inputs = random_scan_inputs(B, T, D, generator=_gen(T))
    c = K.linear_scan(inputs["log_f"], inputs["u"], reverse=reverse, backend=TIER)
    compare_with_reference("span_representations", TIER, {"c": c, "log_f": inputs["log_f"]},
                           max_len=m, reverse=reverse)


@pytest.mark.parametrize("reverse", [False, True])
def test_span_representations_hard_gates(reverse):
    gen = _gen(6)
    u = torch.randn(1, 12, 3, generator=gen)
    log_f = torch.where(torch.rand(u.shape, generator=gen) < 0.3, torch.tensor(-math.inf),
                        torch.where(torch.rand(u.shape, generator=gen) < 0.5, torch.tensor(0.0), -torch.rand(u.shape)))
    c = K.linear_scan(log_f, u, reverse=reverse, backend=TIER)
    compare_with_reference("span_representations", TIER, {"c": c, "log_f": log_f}, max_len=6, reverse=reverse)


def test_backward_spans_leak_future_tokens_only_at_rounding_level():
    # Changing the tokens after t must leave the backward representation of spans ending at t unchanged
    # up to float32 rounding (see the span_representations docstring).
    B, T, D, m, t = 1, 30, 4, 6, 12
    inputs = random_scan_inputs(B, T, D, generator=_gen(7))
    changed_u = inputs["u"].clone()
    changed_u[:, t + 1:] = torch.randn(B, T - t - 1, D, generator=_gen(8))
    reps = []
    for u in (inputs["u"], changed_u):
        c = K.linear_scan(inputs["log_f"], u, reverse=True, backend=TIER)
        reps.append(K.span_representations(c, inputs["log_f"], m, reverse=True, backend=TIER)[:, : t + 1])
    assert (reps[0] - reps[1]).abs().max() < 1e-5


# ------------------------------------------------------------------------------ span attention
SPAN_SHAPES = [(1, 1, 1, 2, 3), (2, 7, 3, 4, 4), (1, 5, 3, 5, 8), (2, 19, 3, 6, 5)]  # B, T, D, A, m


@pytest.mark.parametrize("B,T,D,A,m", SPAN_SHAPES)
def test_span_attention_matches_reference(B, T, D, A, m):
    compare_with_reference("span_attention", TIER, span_attention_inputs(B, T, D, A, seed=T), max_len=m)


@pytest.mark.parametrize("B,T,D,A,m", SPAN_SHAPES[1:3])
def test_span_attention_fixed_scores_match_reference(B, T, D, A, m):
    inputs = span_attention_inputs(B, T, D, A, seed=T)
    inputs.update(query=None, w_span=None, v=None)
    fixed = torch.arange(m, dtype=torch.float32) + 1.0
    compare_with_reference("span_attention", TIER, {k: v for k, v in inputs.items() if v is not None},
                           query=None, w_span=None, v=None, max_len=m, fixed_scores=fixed)


def test_span_attention_hard_gates():
    log_f = torch.zeros(2, 9, 3)
    log_f[0, 2] = -math.inf
    log_f[1, 5:] = -50.0
    compare_with_reference("span_attention", TIER, span_attention_inputs(2, 9, 3, 4, seed=9, log_f=log_f), max_len=4)


def test_span_attention_by_hand():
    # T = 1: one valid span [0, 0] whose forward and backward representations are both u_0.
    u = torch.randn(1, 1, 3, generator=_gen(10))
    log_f = torch.full_like(u, -0.3)
    c_fwd = K.linear_scan(log_f, u, backend=TIER)
    c_bwd = K.linear_scan(log_f, u, reverse=True, backend=TIER)
    context, scores = K.span_attention(torch.zeros(1, 1, 2), c_fwd, log_f, c_bwd, log_f,
                                       torch.zeros(6, 2), torch.zeros(2), 4, backend=TIER)
    torch.testing.assert_close(context, torch.cat([u, u], dim=-1))
    assert scores[0, 0, 0] == 0 and torch.all(torch.isinf(scores[0, 0, 1:]))
    # Fixed scores k+1 over the spans ending at t = 2 of a length-3 input: weights softmax([1, 2, 3]).
    u = torch.randn(1, 3, 2, generator=_gen(11))
    zeros = torch.zeros_like(u)  # f = 1: the forward span [t-k, t] is the plain sum of its u
    c_fwd = K.linear_scan(zeros, u, backend=TIER)
    context, scores = K.span_attention(None, c_fwd, zeros, c_fwd, zeros, None, None, 3,
                                       fixed_scores=torch.tensor([1.0, 2.0, 3.0]), backend=TIER)
    weights = torch.softmax(torch.tensor([1.0, 2.0, 3.0]), 0)
    sums = torch.stack([u[0, 2], u[0, 1:].sum(0), u[0].sum(0)])
    torch.testing.assert_close(context[0, 2, :2], weights @ sums)


# ------------------------------------------------------------------------------ ON-LSTM cell
#: (B, p chunks, C units per chunk, gate scale): one chunk, one unit per chunk, odd sizes, saturated gates
CELL_SHAPES = [(1, 1, 1, 2.0), (3, 5, 3, 2.0), (2, 7, 4, 8.0), (1, 13, 10, 1.0)]


@pytest.mark.parametrize("B,p,C,scale", CELL_SHAPES)
def test_onlstm_cell_matches_reference(B, p, C, scale):
    compare_with_reference("onlstm_cell", TIER, onlstm_cell_inputs(B, p, C, scale, seed=p), n_chunks=p)


def test_onlstm_cell_by_hand():
    """One chunk of one unit: cf = ci' = 1, so ci = 0, w = 0: c_t = c (forget all-on, input off)."""
    gates = torch.tensor([[0.3, -0.2, 0.1, 0.4, -0.5, 0.7]])
    c = torch.tensor([[0.25]])
    h, c_new, cf = K.onlstm_cell(gates, c, 1, backend=TIER)
    torch.testing.assert_close(cf, torch.tensor([[1.0]]))
    torch.testing.assert_close(c_new, c)
    torch.testing.assert_close(h, torch.sigmoid(torch.tensor([[-0.5]])) * torch.tanh(c))
    # two chunks of one unit, equal logits: cf = (1/2, 1), ci = (1/2, 0), w = (1/4, 0)
    gates = torch.zeros(1, 2 * 2 + 4 * 2)
    c = torch.tensor([[1.0, 2.0]])
    h, c_new, cf = K.onlstm_cell(gates, c, 2, backend=TIER)
    torch.testing.assert_close(cf, torch.tensor([[0.5, 1.0]]))
    f_hat = torch.tensor([0.5 * 0.25 + 0.5 - 0.25, 1.0])  # sigmoid(0) = 1/2, tanh(0) = 0
    torch.testing.assert_close(c_new[0], f_hat * c[0])


# ------------------------------------------------------------------------------------ gradcheck
def test_gradcheck_torch_tier_float64():
    gen = _gen(12)
    x = torch.randn(2, 5, dtype=torch.float64, generator=gen, requires_grad=True)
    assert torch.autograd.gradcheck(lambda x: K.cumax(x, reverse=True, backend=TIER), (x,))
    d = torch.rand(2, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    dn = torch.rand(2, 6, dtype=torch.float64, generator=gen, requires_grad=True)
    # tau small enough that no alpha saturates near a kink (hardtanh is not differentiable there)
    assert torch.autograd.gradcheck(
        lambda d, dn: K.stick_breaking_gates(d, 4, tau=0.5, d_next=dn, backend=TIER), (d, dn))
    scan = random_scan_inputs(2, 5, 3, dtype=torch.float64, generator=gen)
    log_f = scan["log_f"].requires_grad_()
    u = scan["u"].requires_grad_()
    c0 = torch.randn(2, 3, dtype=torch.float64, generator=gen, requires_grad=True)
    for reverse in (False, True):
        def scan(a, b, c, reverse=reverse):
            return K.linear_scan(a, b, c, reverse=reverse, backend=TIER)

        def spans(c, lf, reverse=reverse):
            return K.span_representations(c, lf, 3, reverse=reverse, backend=TIER)

        assert torch.autograd.gradcheck(scan, (log_f, u, c0))
        assert torch.autograd.gradcheck(spans, (u, log_f))
    cell = onlstm_cell_inputs(2, 3, 2, scale=1.0, seed=14, dtype=torch.float64)
    assert torch.autograd.gradcheck(lambda g, c: K.onlstm_cell(g, c, 3, backend=TIER),
                                    tuple(t.requires_grad_() for t in cell.values()))
    inputs = span_attention_inputs(1, 4, 2, 3, dtype=torch.float64, seed=13)
    leaves = [t.requires_grad_() for t in inputs.values()]
    assert torch.autograd.gradcheck(lambda *xs: K.span_attention(*xs, 3, backend=TIER)[0], leaves)

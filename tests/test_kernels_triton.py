"""Triton tier against the reference tier, through Triton's CPU interpreter (small shapes).

``TRITON_INTERPRET=1`` must be in the environment before Triton decorates the kernels, i.e. before
``induce.kernels.recurrent.triton_impl`` is imported. ``induce.kernels`` imports Triton lazily (only when the
Triton tier is first used), and pytest imports every test module before running any test, so setting
the variable here at module import is early enough as long as no other test module imports Triton
at import time. Run these alone with ``pytest -m triton``. On a machine with a GPU the compiled
kernels run on CUDA tensors instead (the reference still runs on the CPU).
"""
from __future__ import annotations

import os

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import math  # noqa: E402

import pytest  # noqa: E402
import torch.utils._python_dispatch  # noqa: E402

import induce.kernels as K  # noqa: E402
from induce.kernels.testing import (  # noqa: E402
    compare_with_reference,
    onlstm_cell_inputs,
    random_scan_inputs,
    span_attention_inputs,
)

from helpers import triton_tier_marks  # noqa: E402

TIER = "triton"
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = triton_tier_marks()


def check(*args, **kwargs) -> None:
    compare_with_reference(*args, device=DEVICE, **kwargs)


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def test_auto_uses_torch_on_cpu_even_with_triton():
    assert K.resolve("auto", torch.zeros(1)) == "torch"
    if torch.cuda.is_available():
        assert K.resolve("auto", torch.zeros(1, device="cuda")) == "triton"


@pytest.mark.parametrize("shape,dim,reverse", [((1, 1), -1, False), ((3, 7), -1, True), ((2, 5, 9), 1, False)])
def test_cumax(shape, dim, reverse):
    check("cumax", TIER, {"x": 3 * torch.randn(shape, generator=_gen(0))}, dim=dim, reverse=reverse)


@pytest.mark.parametrize("B,T,W,with_next", [(1, 1, 3, False), (2, 7, 5, True), (1, 19, 4, False), (2, 4, 9, True)])
def test_stick_breaking(B, T, W, with_next):
    gen = _gen(T)
    inputs = {"d": torch.rand(B, T, generator=gen)}
    if with_next:
        inputs["d_next"] = torch.rand(B, T, generator=gen)
    check("stick_breaking_gates", TIER, inputs, window=W, tau=3.0)


def test_stick_breaking_exact_zeros():
    d = torch.tensor([[0.0, 1.0, 0.0, 1.0, 1.0, 0.0, 0.5, 0.5]])
    check("stick_breaking_gates", TIER, {"d": d}, window=5, tau=100.0)
    check("stick_breaking_gates", TIER, {"d": d, "d_next": d.flip(1)}, window=5, tau=100.0)


@pytest.mark.parametrize("B,T,D", [(1, 1, 1), (2, 7, 3), (1, 45, 5)])  # 45: over one chunk of 32
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan(B, T, D, reverse):
    gen = _gen(T)
    inputs = random_scan_inputs(B, T, D, generator=gen)
    inputs["c0"] = torch.randn(B, D, generator=gen)
    check("linear_scan", TIER, inputs, reverse=reverse)


@pytest.mark.slow
@pytest.mark.parametrize("reverse", [False, True])
def test_linear_scan_hard_gates_and_long_decay(reverse):
    gen = _gen(3)
    u = torch.randn(1, 300, 2, generator=gen)
    log_f = -3 * torch.rand(u.shape, generator=gen)
    log_f[0, 10] = -math.inf
    log_f[0, 20:40] = 0.0
    log_f[0, 50] = -1e4
    check("linear_scan", TIER, {"log_f": log_f, "u": u}, reverse=reverse)


@pytest.mark.parametrize("B,T,D,m", [(1, 1, 1, 3), (2, 7, 3, 4), (1, 19, 33, 5)])  # T, D over one block
@pytest.mark.parametrize("reverse", [False, True])
def test_span_representations(B, T, D, m, reverse):
    inputs = random_scan_inputs(B, T, D, generator=_gen(T))
    inputs["log_f"][0, 0] = -math.inf
    c = K.linear_scan(inputs["log_f"], inputs["u"], reverse=reverse, backend="torch")
    check("span_representations", TIER, {"c": c, "log_f": inputs["log_f"]}, max_len=m,
                           reverse=reverse)


@pytest.mark.slow
@pytest.mark.parametrize("B,T,D,A,m", [(1, 1, 1, 2, 3), (2, 7, 3, 5, 4), (1, 18, 33, 6, 5)])
def test_span_attention(B, T, D, A, m):
    check("span_attention", TIER, span_attention_inputs(B, T, D, A, seed=T), max_len=m,
                           rtol=2e-5, atol=2e-5)


@pytest.mark.slow
def test_span_attention_hard_gates_and_fixed_scores():
    log_f = torch.zeros(2, 9, 3)
    log_f[0, 2] = -math.inf
    log_f[1, 5:] = -50.0
    inputs = span_attention_inputs(2, 9, 3, 4, seed=9, log_f=log_f)
    check("span_attention", TIER, inputs, max_len=4, rtol=2e-5, atol=2e-5)
    for name in ("query", "w_span", "v"):
        inputs.pop(name)
    check("span_attention", TIER, inputs, query=None, w_span=None, v=None, max_len=4,
                           fixed_scores=torch.tensor([1.0, 2.0, 3.0, 4.0]))


@pytest.mark.parametrize("shape,reverse", [((37, 9), False), ((5, 3, 40), True)])  # rows not a multiple of a tile
def test_cumax_many_rows(shape, reverse):
    check("cumax", TIER, {"x": 3 * torch.randn(shape, generator=_gen(1))}, reverse=reverse)


@pytest.mark.slow
def test_linear_scan_prefetch_many_chunks():
    gen = _gen(5)
    inputs = random_scan_inputs(2, 100, 40, generator=gen)  # 4 chunks of 32, two feature blocks
    inputs["c0"] = torch.randn(2, 40, generator=gen)
    check("linear_scan", TIER, inputs, reverse=True)
    check("linear_scan", TIER, inputs, reverse=False)


@pytest.mark.slow
@pytest.mark.parametrize("fixed,split_dw", [(False, True), (False, False), (True, True)])
def test_span_attention_small_tiles_and_chunks(monkeypatch, fixed, split_dw):
    """Many row tiles (positions of several sequences in one tile), a backward in several chunks,
    dW by the split-K kernel (several row tiles per program) or fused into the gradient kernel."""
    from induce.kernels.recurrent import triton_span

    monkeypatch.setattr(triton_span, "_MLP_R", 16)
    monkeypatch.setattr(triton_span, "_GRAD_R", 16)
    monkeypatch.setattr(triton_span, "_DW_R", 16)
    monkeypatch.setattr(triton_span, "_DW_PROGRAMS", 2)
    monkeypatch.setattr(triton_span, "_DW_SPLIT", split_dw)
    monkeypatch.setattr(triton_span, "_DH_CHUNK_BYTES", 7 * 5 * 6 * 4)  # 7 positions of m=5, A=6
    inputs = span_attention_inputs(3, 11, 35, 6, seed=4)
    kwargs = {}
    if fixed:
        for name in ("query", "w_span", "v"):
            inputs.pop(name)
        kwargs = dict(query=None, w_span=None, v=None, fixed_scores=torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0]))
    check("span_attention", TIER, inputs, max_len=5, rtol=2e-5, atol=2e-5, **kwargs)


@pytest.mark.slow
@pytest.mark.parametrize("over,split_dw,fixed", [(3, True, False), (2, False, False), (1, True, True)])
def test_span_attention_max_len_over_tile(monkeypatch, over, split_dw, fixed):
    """max_len above the row tile (a parse scores every span of a sentence): each position's spans are
    split over several tiles, the last one partly filled, in every kernel (scores, dh, gradient, dW);
    rows before the sequence start too (t < k), and a second sequence. Row tiles of 4 in the interpreter;
    16 on a GPU, the least ``tl.dot`` compiles for (the dW kernel's reduction runs over the rows)."""
    from induce.kernels.recurrent import triton_span

    tile = 16 if DEVICE == "cuda" else 4
    max_len = 2 * tile + over
    for name in ("_MLP_R", "_GRAD_R", "_DW_R"):
        monkeypatch.setattr(triton_span, name, tile)
    monkeypatch.setattr(triton_span, "_DW_SPLIT", split_dw)
    inputs = span_attention_inputs(2, max_len + 1, 3, 2, seed=max_len)
    kwargs = {}
    if fixed:
        for name in ("query", "w_span", "v"):
            inputs.pop(name)
        kwargs = dict(query=None, w_span=None, v=None, fixed_scores=torch.linspace(-1.0, 2.0, max_len))
    check("span_attention", TIER, inputs, max_len=max_len, rtol=2e-5, atol=2e-5, **kwargs)


# ------------------------------------------------------------------------------ ON-LSTM cell
@pytest.mark.parametrize("B,p,C,scale", [(1, 1, 1, 2.0), (3, 5, 3, 2.0), (2, 7, 4, 8.0), (2, 17, 10, 1.0)])
def test_onlstm_cell(B, p, C, scale):
    check("onlstm_cell", TIER, onlstm_cell_inputs(B, p, C, scale, seed=p), n_chunks=p)


@pytest.mark.parametrize("used", [("h",), ("c",), ("cf",), ("h", "cf")])
def test_onlstm_cell_unused_outputs(used):
    """Outputs that the loss does not use reach the backward as None (e.g. ``c`` of the last step)."""
    inputs = onlstm_cell_inputs(2, 5, 3, seed=1)
    grads = {}
    for tier in (TIER, "reference"):
        leaves = [t.clone().to(DEVICE if tier == TIER else "cpu").requires_grad_() for t in inputs.values()]
        h, c_new, cf = K.onlstm_cell(*leaves, 5, backend=tier)
        outs = {"h": h, "c": c_new, "cf": cf}
        loss = sum((outs[name] * torch.linspace(-1, 2, outs[name].numel(), device=outs[name].device)
                    .view_as(outs[name])).sum() for name in used)
        found = torch.autograd.grad(loss, leaves, allow_unused=True)  # cf alone does not depend on c
        grads[tier] = [torch.zeros_like(x).cpu() if g is None else g.cpu() for g, x in zip(found, leaves)]
    for got, want in zip(grads[TIER], grads["reference"]):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


class _ZeroFills(torch.utils._python_dispatch.TorchDispatchMode):
    """Shapes of the zero-filled tensors made while active (autograd materialises unused gradients so)."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.overloadpacket.__name__ in ("zeros", "zeros_like", "new_zeros", "zero_", "fill_", "full", "full_like"):
            self.shapes.append(tuple(out.shape))
        return out


def test_onlstm_cell_unused_gradients_are_not_materialised():
    """Only h in the loss: the backward gets None for c_t and cf, not zero tensors autograd made and
    filled (a launch each per step and layer on a GPU), and runs its HAS_GCN/HAS_GCF=False form."""
    inputs = onlstm_cell_inputs(3, 5, 2, seed=2)
    leaves = [t.clone().to(DEVICE).requires_grad_() for t in inputs.values()]
    h, c_new, cf = K.onlstm_cell(*leaves, 5, backend=TIER)
    loss = (h * torch.linspace(-1, 1, h.numel(), device=h.device).view_as(h)).sum()
    with _ZeroFills() as zeros:
        loss.backward()
    assert tuple(c_new.shape) not in zeros.shapes and tuple(cf.shape) not in zeros.shapes, zeros.shapes
    reference = [t.clone().requires_grad_() for t in inputs.values()]
    h_ref, _, _ = K.onlstm_cell(*reference, 5, backend="reference")
    (h_ref * torch.linspace(-1, 1, h_ref.numel()).view_as(h_ref)).sum().backward()
    for got, want in zip(leaves, reference):
        torch.testing.assert_close(got.grad.cpu(), want.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_span_attention_unused_score_gradient_is_not_materialised():
    """PaLM-U trains on the context only: the scores' gradient reaches the backward as None."""
    inputs = span_attention_inputs(1, 6, 3, 4, seed=6)
    leaves = {k: v.clone().to(DEVICE).requires_grad_() for k, v in inputs.items()}
    context, scores = K.span_attention(**leaves, max_len=5, backend=TIER)
    with _ZeroFills() as zeros:
        context.sum().backward()
    assert tuple(scores.shape) not in zeros.shapes, zeros.shapes
    reference = {k: v.clone().requires_grad_() for k, v in inputs.items()}
    K.span_attention(**reference, max_len=5, backend="reference")[0].sum().backward()
    for name, want in reference.items():
        torch.testing.assert_close(leaves[name].grad.cpu(), want.grad, rtol=2e-5, atol=2e-5,
                                   msg=lambda m, name=name: f"d/d{name}: {m}")


def _small_case(name):
    """Inputs and keyword arguments of a small call of kernel ``name``."""
    gen = _gen(7)
    scan = random_scan_inputs(2, 5, 3, generator=gen)
    if name == "cumax":
        return {"x": torch.randn(3, 6, generator=gen)}, {}
    if name == "stick_breaking_gates":
        return {"d": torch.rand(2, 6, generator=gen)}, {"window": 3}
    if name == "linear_scan":
        return scan, {}
    if name == "span_representations":
        return {"c": K.linear_scan(scan["log_f"], scan["u"], backend="torch"), "log_f": scan["log_f"]}, {"max_len": 3}
    if name == "span_attention":
        return span_attention_inputs(1, 5, 3, 2, seed=7), {"max_len": 3}
    return onlstm_cell_inputs(2, 3, 2, seed=7), {"n_chunks": 3}


@pytest.mark.parametrize("name", ["cumax", "stick_breaking_gates", "linear_scan", "span_representations",
                                  "span_attention", "onlstm_cell"])
def test_undefined_output_gradients_give_no_input_gradients(name):
    """An undefined upstream gradient (what gradcheck's check_undefined_grad sends; the Functions do
    not materialise zeros) reaches the backward as None: no input gets a nonzero gradient."""
    inputs, kwargs = _small_case(name)
    leaves = {k: v.clone().to(DEVICE).requires_grad_() for k, v in inputs.items()}
    outs = getattr(K, name)(**leaves, **kwargs, backend=TIER)
    outs = outs if isinstance(outs, tuple) else (outs,)
    undefined = [torch._C._functions.UndefinedGrad()(o) for o in outs]
    grads = torch.autograd.grad(undefined, list(leaves.values()), [torch.zeros_like(o) for o in undefined],
                                allow_unused=True)
    assert all(g is None or not g.any() for g in grads), name


# ---------------------------------------------------------------- no recompilation per length
_LENGTH_NAMES = {"T", "R", "NPOS", "pos0", "pos_end", "n_tiles", "n_chunks"}


def _unspecialised(kernel) -> set:
    """Names of the arguments ``kernel`` is not specialised on (interpreter or compiled JIT object)."""
    if hasattr(kernel, "kwargs"):  # Triton's interpreter keeps the decorator's arguments
        names = kernel.kwargs.get("do_not_specialize") or []
    else:
        names = kernel.do_not_specialize or []
    return {kernel.arg_names[n] if isinstance(n, int) else n for n in names}


def test_kernels_do_not_specialise_on_the_segment_length():
    """Every kernel argument that follows the BPTT length is exempt from Triton's integer
    specialisation, so that variable-length segments reuse one compiled kernel."""
    import inspect

    from induce.kernels.recurrent import triton_impl, triton_span

    kernels = {name: obj for module in (triton_impl, triton_span) for name, obj in vars(module).items()
               if name.endswith("_kernel")}
    assert len(kernels) >= 12
    for name, kernel in kernels.items():
        params = inspect.signature(kernel.fn).parameters.values()
        lengths = {p.name for p in params if p.name in _LENGTH_NAMES and "constexpr" not in str(p.annotation)}
        assert lengths <= _unspecialised(kernel), f"{name} is specialised on {lengths - _unspecialised(kernel)}"

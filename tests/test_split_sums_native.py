"""The rank-space split sums as compiled loops (``native.merge_forward`` / ``merge_backward``) against their eager
twins (``lowrank_torch.merge_forward`` / ``merge_backward``): each width of charts of awkward sizes (ranks below,
at and above the vector width, one split and many, one and two threads), then the whole low-rank (TN-PCFG) and
simple-PCFG sum passes with the compiled loops on and off, ``log Z`` and the gradient of every input, padded
batches, one grammar for the batch or one per sentence. The eager fallback for float64, when switched off and
when no compiler works."""
from __future__ import annotations

import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import induce.kernels as K
from induce.kernels.pcfg import lowrank_torch, native
from induce.kernels.testing import run_with_grads

pytestmark = pytest.mark.skipif(shutil.which("c++") is None, reason="no C++ compiler: the compiled path is off")

#: Sums of the same float32 terms in another order, and the vector exp / log within a few ulp of the C
#: library's: relative to the largest entry of each tensor.
TOLERANCE = 2e-5


def assert_close(got: torch.Tensor, want: torch.Tensor, name: str = "") -> None:
    scale = float(want.abs().max()) if want.numel() else 0.0
    torch.testing.assert_close(got, want, rtol=TOLERANCE, atol=TOLERANCE * max(scale, 1.0), msg=name)


def charts(B: int, N: int, r: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return 3 * torch.randn(B, N, N, r, generator=gen), 3 * torch.randn(B, N, N, r, generator=gen)


def compare_widths(B: int, N: int, r: int, seed: int, threads: int) -> None:
    left, right = charts(B, N, r, seed)
    gen = torch.Generator().manual_seed(seed + 1)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        for width in range(2, N + 1):
            want = lowrank_torch.merge_forward(left, right, width)
            got = native.merge_forward(left, right, width)
            assert got.shape == want.shape
            assert_close(got, want, f"z, width {width}")
            grad_z = torch.randn(want.shape, generator=gen)
            start_left, start_right = torch.randn(left.shape, generator=gen), torch.randn(right.shape, generator=gen)
            eager = start_left.clone(), start_right.clone()
            compiled = start_left.clone(), start_right.clone()
            lowrank_torch.merge_backward(left, right, want, grad_z, *eager, width)
            native.merge_backward(left, right, want, grad_z, *compiled, width)
            assert_close(compiled[0], eager[0], f"grad left, width {width}")
            assert_close(compiled[1], eager[1], f"grad right, width {width}")
    finally:
        torch.set_num_threads(before)


# r: one rank, below / at / above the vector width (8 or 16 floats), TN-PCFG's 500; N 2: a single split
@pytest.mark.parametrize("B,N,r", [(1, 2, 1), (2, 5, 7), (3, 6, 16), (2, 9, 17), (1, 4, 33), (2, 7, 500)])
@pytest.mark.parametrize("threads", [1, 2])
def test_every_width_equals_the_eager_twin(B, N, r, threads):
    compare_widths(B, N, r, seed=B * N + r, threads=threads)


@pytest.mark.slow
@settings(max_examples=25, deadline=None)
@given(B=st.integers(1, 4), N=st.integers(2, 12), r=st.integers(1, 70), seed=st.integers(0, 10_000),
       threads=st.sampled_from([1, 2]))
def test_every_width_equals_the_eager_twin_on_drawn_shapes(B, N, r, seed, threads):
    compare_widths(B, N, r, seed, threads)


def test_a_rank_without_a_finite_pair_stays_minus_infinity():
    """Where every pair of a rank is ``-inf`` the compiled sum is ``-inf`` (the eager twin's ``top`` subtraction
    gives NaN there; the passes never hold such charts, whose entries are clamped logs of products)."""
    left, right = charts(1, 4, 20, seed=0)
    left[..., 3] = float("-inf")
    z = native.merge_forward(left, right, 3)
    assert torch.isneginf(z[..., 3]).all() and torch.isfinite(z[..., :3]).all()


def lowrank_grammar(B, N, NT, T, r, seed, shared):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T

    def draw(*shape):
        return torch.randn(*shape, generator=gen)

    factors = {"head": draw(B, NT, r).log_softmax(-1), "left": draw(B, S, r).log_softmax(-2),
               "right": draw(B, S, r).log_softmax(-2)}
    if shared:
        factors = {k: v[:1].expand_as(v) for k, v in factors.items()}
    return {"terms": draw(B, N, T).log_softmax(-1), "roots": draw(B, NT).log_softmax(-1), **factors,
            "span_scores": draw(B, N + 1, N + 1)}


def simple_grammar(B, N, NT, T, seed, shared):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T

    def draw(*shape):
        return torch.randn(*shape, generator=gen)

    factors = {"left": draw(B, S, NT).log_softmax(-2), "right": draw(B, S, NT).log_softmax(-2)}
    if shared:
        factors = {k: v[:1].expand_as(v) for k, v in factors.items()}
    return {"terms": draw(B, N, T).log_softmax(-1), "roots": draw(B, NT).log_softmax(-1), **factors,
            "span_scores": draw(B, N + 1, N + 1)}


def compare_op(op, inputs: dict, lengths: list[int]) -> None:
    kwargs = {"lengths": torch.tensor(lengths), "backend": "torch"}
    with native.use_native(False):
        (want,), want_grads = run_with_grads(op, inputs, kwargs)
    with native.use_native(True):
        assert lowrank_torch.split_sums(inputs["terms"])[0] is native.merge_forward
        (got,), got_grads = run_with_grads(op, inputs, kwargs)
    assert torch.equal(torch.isinf(got), torch.isinf(want))
    finite = torch.isfinite(want)
    assert_close(got[finite], want[finite], "log Z")
    assert want_grads.keys() == got_grads.keys()
    for name in want_grads:
        assert_close(got_grads[name], want_grads[name], name)


# r 500 / NT 250 / T 500: TN-PCFG's paper grammar at a short length; NT 64: the simple PCFG's CPU sizes
@pytest.mark.parametrize("B,N,NT,T,r,lengths,shared", [
    (3, 6, 4, 5, 7, [6, 1, 3], False), (2, 9, 3, 6, 17, [9, 9], True), (2, 5, 250, 500, 500, [5, 2], True)])
def test_the_low_rank_pass_equals_the_eager_twin(B, N, NT, T, r, lengths, shared):
    compare_op(K.inside_lowrank, lowrank_grammar(B, N, NT, T, r, seed=N, shared=shared), lengths)


@pytest.mark.parametrize("B,N,NT,T,lengths,shared", [
    (3, 6, 5, 7, [6, 1, 3], False), (2, 8, 17, 9, [8, 5], True), (2, 10, 64, 128, [10, 7], True)])
def test_the_simple_pcfg_pass_equals_the_eager_twin(B, N, NT, T, lengths, shared):
    compare_op(K.inside_simple, simple_grammar(B, N, NT, T, seed=N, shared=shared), lengths)


def test_float64_and_a_switched_off_path_run_the_eager_twin():
    x = torch.zeros(2, 3)
    with native.use_native(True):
        assert lowrank_torch.split_sums(x, None) == (native.merge_forward, native.merge_backward)
        assert lowrank_torch.split_sums(x, x.double()) == (lowrank_torch.merge_forward, lowrank_torch.merge_backward)
    with native.use_native(False):
        assert lowrank_torch.split_sums(x) == (lowrank_torch.merge_forward, lowrank_torch.merge_backward)


def test_without_a_working_compiler_the_passes_run_the_eager_twin(monkeypatch, tmp_path):
    g = lowrank_grammar(2, 6, 3, 4, 5, seed=1, shared=False)
    lengths = torch.tensor([6, 4])
    with native.use_native(False):
        want = K.inside_lowrank(**g, lengths=lengths, backend="torch")
    monkeypatch.setenv("INDUCE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("CXX", "false")
    native.library.cache_clear()
    try:
        assert lowrank_torch.split_sums(g["terms"]) == (lowrank_torch.merge_forward, lowrank_torch.merge_backward)
        assert native.unavailable_reason() is not None
        assert torch.equal(K.inside_lowrank(**g, lengths=lengths, backend="torch"), want)
    finally:
        monkeypatch.undo()
        native.library.cache_clear()

"""Triton tier of :func:`induce.kernels.inside_lowrank` against the reference tier, values and every
gradient, through Triton's CPU interpreter on small awkward shapes (a GPU runs the compiled kernels).

``TRITON_INTERPRET=1`` is set at import, before anything imports Triton (see tests/test_kernels_triton.py).
"""
from __future__ import annotations

import os

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest  # noqa: E402

from induce.kernels.testing import compare_with_reference  # noqa: E402

from helpers import triton_tier_marks  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = triton_tier_marks()


def _inputs(B, N, NT, T, r, seed, spans):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    out = {
        "terms": (2 * torch.randn(B, N, T, generator=gen)).log_softmax(-1),
        "roots": torch.randn(B, NT, generator=gen).log_softmax(-1),
        "head": (2 * torch.randn(B, NT, r, generator=gen)).log_softmax(-1),
        "left": (2 * torch.randn(B, S, r, generator=gen)).log_softmax(-2),
        "right": (2 * torch.randn(B, S, r, generator=gen)).log_softmax(-2),
    }
    if spans:
        out["span_scores"] = torch.randn(B, N + 1, N + 1, generator=gen)
    return out


@pytest.mark.parametrize("B,N,NT,T,r,lengths,spans", [
    (1, 2, 1, 1, 1, (2,), False),
    (3, 6, 3, 4, 5, (6, 2, 4), True),        # through the nonterminals
    (2, 7, 5, 3, 2, (3, 7), True),           # rank space
    (2, 5, 2, 3, 130, (5, 4), False),        # two rank blocks, the second partial
])
def test_triton_tier_against_reference(B, N, NT, T, r, lengths, spans):
    compare_with_reference("inside_lowrank", "triton", _inputs(B, N, NT, T, r, B + N + r, spans),
                           rtol=5e-5, atol=5e-5, device=DEVICE, lengths=torch.tensor(lengths))


def test_triton_merges_equal_the_eager_twin():
    """The fused split sums against the torch tier's eager ones on random charts (forward and backward)."""
    from induce.kernels.pcfg import lowrank_torch as eager
    from induce.kernels.pcfg import lowrank_triton as fused

    gen = torch.Generator().manual_seed(0)
    B, N, r = 2, 6, 19
    left, right = (torch.randn(B, N, N, r, generator=gen).to(DEVICE) for _ in range(2))
    for width in range(2, N + 1):
        z = fused.merge_forward(left, right, width)
        torch.testing.assert_close(z, eager.merge_forward(left, right, width), rtol=1e-5, atol=1e-5)
        grad_z = torch.randn(z.shape, generator=gen).to(DEVICE)
        got = [torch.randn(B, N, N, r, generator=gen).to(DEVICE) for _ in range(2)]
        want = [g.clone() for g in got]
        fused.merge_backward(left, right, z, grad_z, *got, width)
        eager.merge_backward(left, right, z, grad_z, *want, width)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)

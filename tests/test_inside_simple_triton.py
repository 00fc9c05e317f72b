"""Triton tier of :func:`induce.kernels.inside_simple` against the reference tier, values and every gradient,
both semirings, through Triton's CPU interpreter on small awkward shapes (a GPU runs the compiled kernels).

``TRITON_INTERPRET=1`` is set at import, before anything imports Triton (see tests/test_kernels_triton.py).
"""
from __future__ import annotations

import os

import torch  # does not import triton

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import pytest  # noqa: E402

import induce.kernels as K  # noqa: E402
from induce.kernels.testing import compare_with_reference  # noqa: E402

from helpers import triton_tier_marks  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
pytestmark = triton_tier_marks()


def _inputs(B, N, NT, T, seed, spans, shared=False):
    gen = torch.Generator().manual_seed(seed)
    S = NT + T
    rows = 1 if shared else B
    out = {
        "terms": (2 * torch.randn(B, N, T, generator=gen)).log_softmax(-1),
        "roots": torch.randn(rows, NT, generator=gen).log_softmax(-1).expand(B, NT),
        "left": (2 * torch.randn(rows, S, NT, generator=gen)).log_softmax(-2).expand(B, S, NT),
        "right": (2 * torch.randn(rows, S, NT, generator=gen)).log_softmax(-2).expand(B, S, NT),
    }
    if spans:
        out["span_scores"] = torch.randn(B, N + 1, N + 1, generator=gen)
    return out


@pytest.mark.parametrize("semiring", ["sum", "max"])
@pytest.mark.parametrize("B,N,NT,T,lengths,spans,shared", [
    (1, 2, 1, 1, (2,), False, False),
    (3, 6, 3, 4, (6, 2, 4), True, False),
    (2, 7, 5, 3, (3, 7), True, True),        # one grammar expanded over the batch
    (2, 5, 130, 3, (5, 4), False, True),     # two blocks of parents, the second partial
    (2, 4, 2, 2, (4, 1), True, False),       # a one-word sentence
])
def test_triton_tier_against_reference(B, N, NT, T, lengths, spans, shared, semiring):
    compare_with_reference("inside_simple", "triton", _inputs(B, N, NT, T, B + N + NT, spans, shared),
                           rtol=5e-5, atol=5e-5, device=DEVICE, lengths=torch.tensor(lengths), semiring=semiring)


def test_triton_tier_keeps_the_dtype_and_computes_in_float32():
    g = {k: v.double() for k, v in _inputs(2, 5, 3, 4, 0, True).items()}
    lengths = torch.tensor([5, 3])
    got = K.inside_simple(**{k: v.to(DEVICE) for k, v in g.items()}, lengths=lengths, backend="triton")
    assert got.dtype == torch.float64
    torch.testing.assert_close(got.cpu(), K.inside_simple(**g, lengths=lengths, backend="reference"),
                               rtol=1e-5, atol=1e-5)

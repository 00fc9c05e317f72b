"""Triton tier of :func:`induce.kernels.inside_lowrank`: fused split sums, the rest as in the torch tier.

The torch tier (:mod:`induce.kernels.pcfg.lowrank_torch`, this tier's eager twin) materialises, for
every width ``w``, the ``[B, N - w + 1, w - 1, r]`` tensor of its children's pairs, twice (forward and
backward): at T = 30 that is most of its memory traffic. Here one program per span and block of ranks
walks the splits instead, with an online ``logsumexp`` forward (:func:`_merge_fwd_kernel`) and the
split gradients ``grad_z * exp(lv + rv - z)`` added straight into the two gradient charts backward
(:func:`_merge_bwd_kernel`; within one width no two programs touch the same chart entry, so no atomics).
The matrix products stay in torch (cuBLAS on a GPU), as in TN-PCFG's own Triton version. Kernels
compute in float32; the charts are float32 (float64 inputs are computed in float32 here).
"""
from __future__ import annotations

from typing import Optional

import torch
import triton
import triton.language as tl

from induce.kernels.pcfg.lowrank_torch import inside_lowrank_with
from induce.kernels.triton_base import _length_free_jit, _pow2

#: Public functions here that are not kernel ops: the fused split sums (the tests compare them with the torch
#: tier's).
TIER_HELPERS = ("merge_backward", "merge_forward")

#: Ranks per program: a power of two up to 128 (the rank axis is the only vector axis).
_MAX_BLOCK_R = 128


@_length_free_jit('N', 'n', 'width')
def _merge_fwd_kernel(left_ptr, right_ptr, z_ptr, N, n, width, R, BLOCK_R: tl.constexpr):
    span = tl.program_id(0)  # b * n + i
    b = (span // n).to(tl.int64)
    i = (span % n).to(tl.int64)
    ranks = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = ranks < R
    # left_chart[b, i, u], right_chart[b, i + width - 1, N - width + 1 + u], u = 0 .. width - 2
    left_row = left_ptr + ((b * N + i) * N) * R + ranks
    right_row = right_ptr + ((b * N + i + width - 1) * N + N - width + 1) * R + ranks
    top = tl.full([BLOCK_R], -float("inf"), tl.float32)
    total = tl.zeros([BLOCK_R], tl.float32)
    for u in range(0, width - 1):
        pair = tl.load(left_row + u * R, mask=ok, other=0.0) + tl.load(right_row + u * R, mask=ok, other=0.0)
        new_top = tl.maximum(top, pair)
        total = total * tl.exp(top - new_top) + tl.exp(pair - new_top)
        top = new_top
    tl.store(z_ptr + span.to(tl.int64) * R + ranks, tl.log(total) + top, mask=ok)


@_length_free_jit('N', 'n', 'width')
def _merge_bwd_kernel(left_ptr, right_ptr, z_ptr, gz_ptr, gleft_ptr, gright_ptr, N, n, width, R,
                      BLOCK_R: tl.constexpr):
    span = tl.program_id(0)
    b = (span // n).to(tl.int64)
    i = (span % n).to(tl.int64)
    ranks = tl.program_id(1) * BLOCK_R + tl.arange(0, BLOCK_R)
    ok = ranks < R
    z = tl.load(z_ptr + span.to(tl.int64) * R + ranks, mask=ok, other=0.0)
    gz = tl.load(gz_ptr + span.to(tl.int64) * R + ranks, mask=ok, other=0.0)
    left_at = ((b * N + i) * N) * R + ranks
    right_at = ((b * N + i + width - 1) * N + N - width + 1) * R + ranks
    for u in range(0, width - 1):
        pair = tl.load(left_ptr + left_at + u * R, mask=ok, other=0.0) + tl.load(right_ptr + right_at + u * R,
                                                                                   mask=ok, other=0.0)
        share = gz * tl.exp(pair - z)
        gl = tl.load(gleft_ptr + left_at + u * R, mask=ok, other=0.0)
        tl.store(gleft_ptr + left_at + u * R, gl + share, mask=ok)
        gr = tl.load(gright_ptr + right_at + u * R, mask=ok, other=0.0)
        tl.store(gright_ptr + right_at + u * R, gr + share, mask=ok)


def _launch(B: int, n: int, R: int):
    block = min(_MAX_BLOCK_R, _pow2(R))
    return (B * n, triton.cdiv(R, block)), block


def merge_forward(left_chart: torch.Tensor, right_chart: torch.Tensor, width: int) -> torch.Tensor:
    """:func:`induce.kernels.pcfg.lowrank_torch.merge_forward`, fused (float32 charts)."""
    B, N, _, R = left_chart.shape
    n = N - width + 1
    z = left_chart.new_empty(B, n, R)
    grid, block = _launch(B, n, R)
    _merge_fwd_kernel[grid](left_chart, right_chart, z, N, n, width, R, BLOCK_R=block, num_warps=4)
    return z


def merge_backward(left_chart: torch.Tensor, right_chart: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor,
                   grad_left: torch.Tensor, grad_right: torch.Tensor, width: int) -> None:
    """:func:`induce.kernels.pcfg.lowrank_torch.merge_backward`, fused (float32 charts)."""
    B, N, _, R = left_chart.shape
    n = N - width + 1
    grid, block = _launch(B, n, R)
    _merge_bwd_kernel[grid](left_chart, right_chart, z.contiguous(), grad_z.contiguous(), grad_left, grad_right,
                            N, n, width, R, BLOCK_R=block, num_warps=4)


def inside_lowrank(
    terms: torch.Tensor,
    roots: torch.Tensor,
    head: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Log partition ``[B]``; see :func:`induce.kernels.inside_lowrank`. Computes in float32."""
    out_dtype = terms.dtype
    terms, roots, head, left, right = (x.float() for x in (terms, roots, head, left, right))
    if span_scores is not None:
        span_scores = span_scores.float()
    return inside_lowrank_with(merge_forward, merge_backward, terms, roots, head, left, right, lengths,
                               span_scores).to(out_dtype)

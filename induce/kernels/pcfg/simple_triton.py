"""Triton tier of :func:`induce.kernels.inside_simple`: the split sums fused, the rest as in the torch tier.

The simple PCFG's sum mode is TN-PCFG's rank-space pass with the parents as the rank
(:mod:`induce.kernels.pcfg.simple_torch`), so its split sums are the low-rank tier's fused kernels
(:func:`induce.kernels.pcfg.lowrank_triton.merge_forward` / ``merge_backward``: one program per span and
block of 128 parents, an online ``logsumexp`` over the splits forward, the split gradients added straight
into the gradient charts backward), and the ``[spans, NT] @ [NT, 2 NT]`` products stay in torch (cuBLAS on
a GPU): the layout of the authors' "FlashInside" (``parser/triton/fn.py``: a fused merge, the products in
``torch.einsum``). The kernels hold one block of parents per program whatever ``NT``, so the paper's 4,096
to 8,192 nonterminals need neither more registers nor shared memory, only more programs. The max mode runs
the torch tier's max-plus products (torch ops, on the GPU there). Computes in float32.
"""
from __future__ import annotations

from typing import Optional

import torch

from induce.kernels.pcfg.lowrank_triton import merge_backward, merge_forward
from induce.kernels.pcfg.simple_torch import inside_simple_with


def inside_simple(
    terms: torch.Tensor,
    roots: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
) -> torch.Tensor:
    """Log partition (or best derivation's log score) ``[B]``; see :func:`induce.kernels.inside_simple`.
    Computes in float32."""
    out_dtype = terms.dtype
    terms, roots, left, right = (x.float() for x in (terms, roots, left, right))
    if span_scores is not None:
        span_scores = span_scores.float()
    return inside_simple_with(merge_forward, merge_backward, terms, roots, left, right, lengths, span_scores,
                              semiring).to(out_dtype)

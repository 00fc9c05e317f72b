"""Torch tier of :func:`induce.kernels.inside_simple`: the simple PCFG's inside pass, by span width.

Notation as in :mod:`induce.kernels.pcfg.simple_reference`. A span keeps two vectors over the parents,
``l[i, j] = log (exp(beta[i, j]) @ exp(left))`` and ``r[i, j]`` likewise with ``right``: what it gives as a
left and as a right child. A width then costs a sum over its splits, ``beta[i, j] = logsumexp_k (l[i, k] +
r[k, j])`` (``[B, n, w - 1, NT]`` additions), and one ``[spans, NT] @ [NT, 2 NT]`` product to the new spans'
child vectors: ``O(N^3 NT + N^2 NT^2)`` per sentence, where the dense grammar costs ``O(N^3 NT^3)``.

**Sum mode.** This is TN-PCFG's rank-space pass with the parents as the rank (the simple PCFG is the
low-rank grammar whose ``head`` is the identity), so it runs that pass, with its hand-written outside pass,
per-span normalisers and clamping (:func:`induce.kernels.pcfg.lowrank_torch.rank_space_inside`; read its
module docstring for the stability argument): the split sums in log space, the products in probability
space with each span's maximum and each column of ``[left_NT | right_NT]``'s maximum taken out. Nothing of
the rank route is built: the leaves are one product ``terms @ [left_T | right_T]`` and the roots are the
parents' scores as they are. The split sums are the low-rank tier's (:func:`~induce.kernels.pcfg.lowrank_torch.
split_sums`: compiled loops for float32 CPU tensors, else :func:`~induce.kernels.pcfg.lowrank_torch.merge_forward` /
:func:`~induce.kernels.pcfg.lowrank_torch.merge_backward`) here, fused kernels in the Triton tier (the tiers
differ only there, :func:`inside_simple_with`).

**Max mode.** Max-product factors the same way (a best left child does not depend on the right one), with
max-plus products in place of the matrix products: ``l[i, j, A] = max_B (beta[i, j, B] + left[B, A])``.
They have no BLAS form; they run in chunks of spans (:func:`max_plus`, ``[chunk, K, P]`` at a time, within
:data:`MAX_PLUS_CHUNK` entries) and autograd takes the gradient (``torch.max`` sends it to one argmax:
the gradient of the best score with respect to span scores marks one best tree). ``O(N^2 NT^2)``
comparisons per sentence that no matrix unit does: a Viterbi parse costs several times the sum mode's pass.

Padding: positions past a sentence's length get zero term scores, are computed with the rest and receive
exactly zero gradient; a one-word sentence has no derivation (``-inf``, no gradient), as in the other
inside ops.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch

from induce.kernels.pcfg.lowrank_torch import log_matmul, rank_space_inside, split_sums
from induce.kernels.pcfg.simple_reference import check_inputs

#: Public functions here that are not kernel ops: the pass with the split sums as arguments (the Triton tier
#: runs it with its fused ones) and the chunked max-plus product of the max mode.
TIER_HELPERS = ("inside_simple_with", "max_plus")

#: Entries of the ``[chunk, K, P]`` sums one step of :func:`max_plus` holds (16 MiB of float32).
MAX_PLUS_CHUNK = 1 << 22


def _compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def _shared(factor: torch.Tensor) -> bool:
    """A factor expanded over the batch (stride 0, one grammar for every sentence)."""
    return factor.shape[0] <= 1 or factor.stride(0) == 0


def max_plus(x: torch.Tensor, mat: torch.Tensor) -> torch.Tensor:
    """``out[b, m, p] = max_k (x[b, m, k] + mat[b, k, p])`` for ``x [B, M, K]``, ``mat [B or 1, K, P]``: the
    max-plus product, in chunks of rows so that no step holds more than :data:`MAX_PLUS_CHUNK` sums.
    Differentiable (the gradient goes to one argmax per output)."""
    B, M, K = x.shape
    P = mat.shape[-1]
    rows = max(1, MAX_PLUS_CHUNK // max(1, B * K * P))
    parts = [(x[:, m0:m0 + rows, :, None] + mat[:, None]).max(2).values for m0 in range(0, M, rows)]
    return torch.cat(parts, 1) if len(parts) != 1 else parts[0]


def _max_inside(terms: torch.Tensor, roots: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                span_scores: Optional[torch.Tensor], lengths: torch.Tensor) -> torch.Tensor:
    """The best derivation's log score ``[B]`` (lengths >= 2, padding and span scores masked). ``left``,
    ``right``: ``[B or 1, S, NT]``. Child vectors by width: ``lefts[u] [B, N - u + 1, NT]`` the spans
    ``(i, i + u)`` as left children, ``rights[u]`` as right children."""
    B, N, _ = terms.shape
    NT = roots.shape[1]
    leaves = max_plus(terms, torch.cat([left[:, NT:], right[:, NT:]], -1))  # [B, N, 2 NT]
    lefts, rights = {1: leaves[..., :NT]}, {1: leaves[..., NT:]}
    children = torch.cat([left[:, :NT], right[:, :NT]], -1)  # [B or 1, NT, 2 NT]
    best = []  # width -> [B]: the best derivation of the span (0, width)
    for width in range(2, N + 1):
        n = N - width + 1
        pairs = torch.stack([lefts[u][:, :n] + rights[width - u][:, u:u + n] for u in range(1, width)], 2)
        beta = pairs.max(2).values  # [B, n, NT]
        if span_scores is not None:
            beta = beta + span_scores.diagonal(width, 1, 2)[:, :n, None]
        best.append((roots + beta[:, 0]).max(-1).values)
        if width < N:
            both = max_plus(beta, children)
            lefts[width], rights[width] = both[..., :NT], both[..., NT:]
    scores = torch.stack(best, 1)  # [B, N - 1]
    return scores.gather(1, (lengths - 2)[:, None])[:, 0]


def _sum_inside(terms: torch.Tensor, roots: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                span_scores: Optional[torch.Tensor], lengths: torch.Tensor, merge_fwd: Callable,
                merge_bwd: Callable) -> torch.Tensor:
    """``log Z [B]`` through the rank-space pass with the parents as the rank (module docstring)."""
    NT = roots.shape[1]
    leaf = log_matmul(terms, torch.cat([left[:, NT:], right[:, NT:]], -1))  # [B, N, 2 NT]
    children = torch.cat([left[:, :NT], right[:, :NT]], -1)  # [B or 1, NT, 2 NT], log space
    column_max = children.amax(-2, keepdim=True).detach()  # [B or 1, 1, 2 NT]
    mat = torch.exp(children - column_max)
    return rank_space_inside(leaf[..., :NT].contiguous(), leaf[..., NT:].contiguous(), mat, None, column_max,
                             roots, span_scores, lengths, merge_fwd, merge_bwd)


def inside_simple_with(
    merge_fwd: Callable,
    merge_bwd: Callable,
    terms: torch.Tensor,
    roots: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
) -> torch.Tensor:
    """:func:`inside_simple` with the sum mode's split sums done by ``merge_fwd`` / ``merge_bwd`` (the tiers
    differ only there)."""
    B, N, NT, _ = check_inputs(terms, roots, left, right, lengths, span_scores, semiring)
    out_dtype = terms.dtype
    dtype = _compute_dtype(terms, roots, left, right, span_scores)
    terms, roots, left, right = (x.to(dtype) for x in (terms, roots, left, right))
    if B == 0:
        return terms.new_zeros((0,)).to(out_dtype)
    lengths = lengths.to(terms.device)
    one_word = lengths < 2  # no derivation: -inf and no gradient (run as two words, then masked)
    if N < 2:  # every sentence has one word
        anchor = 0.0 * sum(x.sum() for x in (terms, roots, left, right))  # keeps the graph: zero gradients
        return (terms.new_full((B,), float("-inf")) + anchor).to(out_dtype)
    inside = torch.arange(N, device=terms.device)[None, :] < lengths[:, None]  # [B, N]
    terms = terms.masked_fill(~inside[..., None], 0.0)  # padding: finite, and no gradient
    if span_scores is not None:
        span_scores = span_scores.to(dtype)
        fence = torch.arange(N + 1, device=terms.device)
        valid = (fence[None, :, None] < fence[None, None, :]) & (fence[None, None, :] <= lengths[:, None, None])
        span_scores = span_scores.masked_fill(~valid, 0.0)
        terms = terms + span_scores.diagonal(1, 1, 2)[..., None]  # width-1 spans: the preterminal scores
    lengths = lengths.clamp_min(2)  # after the masks: a one-word sentence's padding stays zero
    if _shared(left) and _shared(right):  # one grammar for the batch: its products are formed once
        left, right = left[:1], right[:1]
    if semiring == "sum":
        score = _sum_inside(terms, roots, left, right, span_scores, lengths, merge_fwd, merge_bwd)
    else:
        score = _max_inside(terms, roots, left, right, span_scores, lengths)
    return torch.where(one_word, torch.full_like(score, float("-inf")), score).to(out_dtype)


def inside_simple(
    terms: torch.Tensor,
    roots: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
) -> torch.Tensor:
    """Log partition (or best derivation's log score) ``[B]``; see :func:`induce.kernels.inside_simple`."""
    merge_fwd, merge_bwd = split_sums(terms, roots, left, right, span_scores)
    return inside_simple_with(merge_fwd, merge_bwd, terms, roots, left, right, lengths, span_scores, semiring)

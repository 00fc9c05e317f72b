"""Torch tier of :func:`induce.kernels.inside_lowrank`: the inside pass in rank space, with a hand-written outside pass.

Notation as in :mod:`induce.kernels.pcfg.lowrank_reference` (``U = exp(head)``, ``V = exp(left)``,
``W = exp(right)``). TN-PCFG's rank-space trick (Yang et al. 2021, sec. 4; ``Fastest_TDPCFG`` in their
``tdpcfg.py``): a span's nonterminal scores ``beta[a] = sum_r U[a, r] z[r]`` are needed only as a
child, through ``sum_a beta[a] V[a, r']`` = ``sum_r z[r] (U^T V_NT)[r, r']``. So every span keeps only
two rank vectors, the one it gives as a left child and as a right child, and one width costs a
``[spans, r] @ [r, 2r]`` product with ``H = [U^T V_NT | U^T W_NT]``; ``[NT, S, S]`` never exists::

    leaves:  lv[i, i+1] = log sum_p exp(terms[i, p]) V[NT + p, :]         (rv likewise with W)
    span:    z[i, j]    = logsumexp_k (lv[i, k] + rv[k, j]) + span_scores[i, j]       [r]
    child:   lv[i, j]   = log (exp(z[i, j]) @ U^T V_NT),  rv[i, j] = log (exp(z[i, j]) @ U^T W_NT)
    root:    log Z      = logsumexp_r (z[0, n] + log sum_a exp(roots[a]) U[a, r])

**Stability.** The sum over splits stays in log space (``logsumexp``; cheap next to the products).
The products run in probability space with a normaliser per span (``z - max_r z``, as TN-PCFG's
``merge`` does) and per column of ``H`` (``H`` is formed in log space from column-normalised
factors), so no ``exp`` overflows and only ranks ``e^-87`` below a span's best can underflow; the
logarithm of an underflowed product is clamped to that of the smallest normal float (TN-PCFG adds
``1e-9`` instead) and gets no gradient.

**Backward.** The outside pass walks the widths downwards: the gradient reaching a span's two rank
vectors goes back through the product (``p * ((g / q) @ H^T)``, ``dH += p^T (g / q)``) and then to the
children of every split in proportion to ``exp(lv + rv - z)``. It keeps the rank charts of the forward
pass (``2 x [B, N, N, r]`` floats) and their gradients: ~125 MiB at B = 16, N = 30, r = 500.
The split sums, forward and backward, are the two functions :func:`merge_forward` and
:func:`merge_backward`; the Triton tier reuses this autograd function with fused kernels for them.

Padding: positions past a sentence's length get zero term scores (any finite value would do), are
computed with the rest and receive exactly zero gradient.
"""
from __future__ import annotations

from typing import Callable, Optional

import torch
from torch.autograd.function import once_differentiable

from induce.kernels.pcfg import native
from induce.kernels.pcfg.lowrank_reference import check_inputs

#: Public functions here that are not kernel ops: :func:`inside_lowrank_with`, the autograd function the Triton
#: tier runs with its fused split sums, the eager split sums it takes here (:func:`merge_forward`,
#: :func:`merge_backward`) or their compiled twins (:func:`split_sums`), :func:`log_matmul`
#: (``bench/inside_lowrank.py`` times it) and :func:`rank_space_inside`, the pass on prepared inputs (the simple
#: PCFG's op runs it too).
TIER_HELPERS = ("inside_lowrank_with", "log_matmul", "merge_backward", "merge_forward", "rank_space_inside",
                "split_sums")

#: ``log`` of the smallest normal float32: products below it are clamped (see the module docstring).
_TINY = torch.finfo(torch.float32).tiny


def _compute_dtype(*tensors: Optional[torch.Tensor]) -> torch.dtype:
    return torch.float64 if any(t is not None and t.dtype == torch.float64 for t in tensors) else torch.float32


def _shared(factor: torch.Tensor) -> bool:
    """A factor expanded over the batch (stride 0, as TN-PCFG passes its one grammar)."""
    return factor.shape[0] <= 1 or factor.stride(0) == 0


def log_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``log(exp(x) @ exp(y))`` for ``x [..., M, K]``, ``y [..., K, P]``, through a normalised product."""
    x_max = x.amax(-1, keepdim=True).detach()
    y_max = y.amax(-2, keepdim=True).detach()
    product = torch.exp(x - x_max) @ torch.exp(y - y_max)
    return torch.log(product.clamp_min(_TINY)) + x_max + y_max


def merge_forward(left_chart: torch.Tensor, right_chart: torch.Tensor, width: int) -> torch.Tensor:
    """``z[b, i] = logsumexp_u (left_chart[b, i, u] + right_chart[b, i + width - 1, N - width + 1 + u])``.

    The sum over the ``width - 1`` splits of the spans ``(i, i + width)``, ``i = 0 .. N - width``;
    charts ``[B, N, N, r]`` (layout in :class:`_LowRankInside`); returns ``[B, N - width + 1, r]``.
    """
    N = left_chart.shape[1]
    n = N - width + 1
    pairs = left_chart[:, :n, : width - 1] + right_chart[:, width - 1:, N - width + 1:]
    top = pairs.amax(2, keepdim=True)  # by hand: torch.logsumexp over a middle dim is ~1.6x slower here
    return pairs.sub_(top).exp_().sum(2).log_().add_(top[:, :, 0])


def merge_backward(left_chart: torch.Tensor, right_chart: torch.Tensor, z: torch.Tensor, grad_z: torch.Tensor,
                   grad_left: torch.Tensor, grad_right: torch.Tensor, width: int) -> None:
    """Add the split gradients of :func:`merge_forward` (``grad_z * exp(pair - z)``) into the gradient charts."""
    N = left_chart.shape[1]
    n = N - width + 1
    pairs = left_chart[:, :n, : width - 1] + right_chart[:, width - 1:, N - width + 1:]
    share = torch.exp(pairs - z[:, :, None]).mul_(grad_z[:, :, None])
    grad_left[:, :n, : width - 1] += share
    grad_right[:, width - 1:, N - width + 1:] += share


def split_sums(*tensors: Optional[torch.Tensor]) -> tuple[Callable, Callable]:
    """The split sums this tier runs for these inputs: the compiled loops of :mod:`induce.kernels.pcfg.native`
    (``merge_forward`` / ``merge_backward`` there: one pass over a span's pairs, no ``[B, n, w - 1, r]``
    temporary; ~1.7x faster backward, ~1.1x forward at r = 500) for float32 CPU tensors where they are built
    and switched on, else the eager twins above (float64, other devices, no compiler:
    ``native.unavailable_reason()`` says why; ``INDUCE_NATIVE_KERNELS=0`` or ``native.use_native(False)``
    keeps them eager). The two differ by float rounding (sums in another order, the vector ``exp`` / ``log``)."""
    if native.usable_for_sum(*(t for t in tensors if t is not None)):
        return native.merge_forward, native.merge_backward
    return merge_forward, merge_backward


class _LowRankInside(torch.autograd.Function):
    """The rank-space inside pass and its outside pass (see the module docstring).

    Charts ``[B, N, N, r]``: ``left_chart[b, i, u - 1]`` is the left-child rank vector of the span
    ``(i, i + u)``; ``right_chart[b, j - 1, N - u]`` the right-child one of ``(j - u, j)``. For a span
    of width ``w`` the pairs of children of its ``w - 1`` splits are then two contiguous slices.

    A span's child vectors are ``log(exp(z - top) @ mats[0] (@ mats[1])) + top + offset``: ``mats`` are
    the column-normalised probability-space factors of :func:`_child_route` (``[B or 1, K, P]``).
    """

    @staticmethod
    def forward(ctx, leaf_left, leaf_right, mat1, mat2, offset, root_rank, span_scores, lengths,
                merge_fwd, merge_bwd):  # type: ignore[override]
        """``leaf_left/right [B, N, r]``, ``mat1 [B or 1, r, K]``, ``mat2 [B or 1, K, 2r]`` or None,
        ``offset [B or 1, 1, 2r]``, ``root_rank [B, r]``, ``span_scores [B, N + 1, N + 1]`` or None
        (used for widths >= 2), ``lengths [B]`` -> ``log_z [B]``."""
        B, N, r = leaf_left.shape
        mats = [m for m in (mat1, mat2) if m is not None]
        left_chart = leaf_left.new_empty(B, N, N, r)
        right_chart = leaf_left.new_empty(B, N, N, r)
        left_chart[:, :, 0] = leaf_left
        right_chart[:, :, N - 1] = leaf_right
        # per span of width 2 .. N-1 (the spans that are children), packed by width: ``starts[w]``
        starts = _span_starts(N)
        spans = starts[N]
        products = leaf_left.new_empty(B, spans, 2 * r)  # the (clamped) products: the backward divides by them
        middles = leaf_left.new_empty(B, spans, mat1.shape[-1]) if mat2 is not None else None
        log_z = leaf_left.new_empty(B)
        length_list = lengths.tolist()
        zs, maxima = {}, {}
        for width in range(2, N + 1):
            n = N - width + 1
            z = merge_fwd(left_chart, right_chart, width)  # [B, n, r], split sum without the span score
            zs[width] = z
            if span_scores is not None:
                z = z + span_scores.diagonal(width, 1, 2)[:, :n, None]
            ends = [b for b, length in enumerate(length_list) if length == width]
            if ends:
                log_z[ends] = torch.logsumexp(z[ends, 0] + root_rank[ends], dim=-1)
            if width < N:
                top = z.amax(-1, keepdim=True)
                maxima[width] = top
                here = slice(starts[width], starts[width + 1])
                product = torch.exp(z - top)
                if mat2 is not None:
                    middles[:, here] = product = _rank_product(product, mat1)
                product = products[:, here] = _rank_product(product, mats[-1]).clamp_min_(_TINY)
                children = torch.log(product).add_(top).add_(offset)  # [B, n, 2r]
                left_chart[:, :n, width - 1] = children[..., :r]
                right_chart[:, width - 1:, N - width] = children[..., r:]
        ctx.save_for_backward(left_chart, right_chart, products, middles, mat1, mat2, root_rank, span_scores, lengths)
        ctx.zs, ctx.maxima, ctx.merge_bwd = zs, maxima, merge_bwd
        return log_z

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_log_z):  # type: ignore[override]
        left_chart, right_chart, products, middles, mat1, mat2, root_rank, span_scores, lengths = ctx.saved_tensors
        zs, maxima, merge_bwd = ctx.zs, ctx.maxima, ctx.merge_bwd
        B, N, _, r = left_chart.shape
        starts = _span_starts(N)
        grad_left = torch.zeros_like(left_chart)
        grad_right = torch.zeros_like(right_chart)
        # the spans' p = exp(z - top) and the gradients reaching each product's output, for one
        # matrix product per factor at the end (per width, the products' inner sizes are too small)
        ps = products.new_empty(B, starts[N], r)
        grad_products = torch.empty_like(products)
        grad_middles = torch.empty_like(middles) if middles is not None else None
        grad_root = torch.zeros_like(root_rank)
        grad_spans = None if span_scores is None else torch.zeros_like(span_scores)
        length_list = lengths.tolist()
        for width in range(N, 1, -1):
            n = N - width + 1
            z = zs[width]
            if span_scores is not None:
                z = z + span_scores.diagonal(width, 1, 2)[:, :n, None]
            if width < N:
                here = slice(starts[width], starts[width + 1])
                product = products[:, here]
                grad = torch.cat([grad_left[:, :n, width - 1], grad_right[:, width - 1:, N - width]], -1)
                grad = grad_products[:, here] = torch.where(product > _TINY, grad.div_(product), 0.0)
                if mat2 is not None:
                    grad = grad_middles[:, here] = _rank_product(grad, mat2.transpose(-1, -2))
                p = ps[:, here] = torch.exp(z - maxima[width])
                grad_z = _rank_product(grad, mat1.transpose(-1, -2)).mul_(p)
            else:
                grad_z = z.new_zeros(B, n, r)
            ends = [b for b, length in enumerate(length_list) if length == width]
            if ends:
                weights = torch.softmax(z[ends, 0] + root_rank[ends], dim=-1) * grad_log_z[ends, None]
                grad_z[ends, 0] += weights
                grad_root[ends] = weights
            if grad_spans is not None:
                grad_spans.diagonal(width, 1, 2)[:, :n] = grad_z.sum(-1)
            merge_bwd(left_chart, right_chart, zs[width], grad_z, grad_left, grad_right, width)
        if mat2 is not None:
            grad_mat1 = _outer(mat1, ps, grad_middles)
            grad_mat2 = _outer(mat2, middles, grad_products)
        else:
            grad_mat1, grad_mat2 = _outer(mat1, ps, grad_products), None
        return (grad_left[:, :, 0], grad_right[:, :, N - 1], grad_mat1, grad_mat2, None, grad_root,
                grad_spans, None, None, None)


def rank_space_inside(leaf_left: torch.Tensor, leaf_right: torch.Tensor, mat1: torch.Tensor,
                      mat2: Optional[torch.Tensor], offset: torch.Tensor, root_rank: torch.Tensor,
                      span_scores: Optional[torch.Tensor], lengths: torch.Tensor, merge_fwd: Callable,
                      merge_bwd: Callable) -> torch.Tensor:
    """``log_z [B]`` of the rank-space pass (:class:`_LowRankInside`, arguments as its ``forward``) on prepared
    inputs: the leaves' child vectors, the probability-space factors from a span's scores to its child vectors
    and their log ``offset``, the root scores in rank space. Lengths >= 2; ``span_scores`` masked to the spans
    of each sentence. The simple PCFG's op runs it with its parents as the rank
    (:mod:`induce.kernels.pcfg.simple_torch`)."""
    return _LowRankInside.apply(leaf_left, leaf_right, mat1, mat2, offset, root_rank, span_scores, lengths,
                                merge_fwd, merge_bwd)


def _span_starts(N: int) -> dict:
    """``starts[w]``: where the spans of width ``w`` (``N - w + 1`` of them) begin in a list of the spans
    of widths ``2 .. N - 1`` packed by width; ``starts[N]`` is the list's length."""
    starts, at = {}, 0
    for width in range(2, N + 1):
        starts[width] = at
        at += N - width + 1
    starts[N + 1] = starts.get(N, 0)
    return starts


def _outer(mat: torch.Tensor, x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """The gradient of ``mat [B or 1, K, P]`` from ``x [B, spans, K] @ mat`` and ``grad [B, spans, P]``."""
    if mat.shape[0] == 1:
        return (x.reshape(-1, x.shape[-1]).T @ grad.reshape(-1, grad.shape[-1]))[None]
    return x.transpose(-1, -2) @ grad


def _rank_product(x: torch.Tensor, mat: torch.Tensor) -> torch.Tensor:
    """``x [B, n, K] @ mat [B or 1, K, P]``: one matrix product for a shared ``mat``, batched otherwise."""
    if mat.shape[0] == 1:
        return (x.reshape(-1, x.shape[-1]) @ mat[0]).reshape(*x.shape[:-1], mat.shape[-1])
    return torch.bmm(x, mat)


def _normalised_chain(*log_mats: torch.Tensor):
    """Probability-space factors for ``log(exp(x) @ exp(log_mats[0]) @ ...)`` that neither overflow nor
    underflow wholesale, and the log offset of the result: each factor's columns are scaled to a
    maximum of 1 and the scale is carried into the next factor's rows (maxima detached: they cancel)."""
    mats, carry = [], None
    for log_mat in log_mats:
        if carry is not None:
            log_mat = log_mat + carry.transpose(-1, -2)
        column_max = log_mat.amax(-2, keepdim=True).detach()  # [., 1, P]
        mats.append(torch.exp(log_mat - column_max))
        carry = column_max
    return mats, carry


def _child_route(head: torch.Tensor, children_nt: torch.Tensor):
    """``(mat1, mat2, offset)`` for the map from a span's rank scores to its child vectors.

    Through the nonterminals (``exp(z) @ U^T @ [V_NT | W_NT]``, ``3 r NT`` multiply-adds per span
    forward, ``6 r NT`` backward) when ``3 NT < 2 r``, else through ``H = U^T [V_NT | W_NT]`` formed
    once (``2 r^2`` and ``4 r^2``, TN-PCFG's rank-space form). ``head [B or 1, NT, r]``,
    ``children_nt [B or 1, NT, 2r]``, log space.
    """
    NT, r = head.shape[-2:]
    head_t = head.transpose(-1, -2)
    if 3 * NT < 2 * r:
        (mat1, mat2), offset = _normalised_chain(head_t, children_nt)
        return mat1, mat2, offset
    (mat1,), offset = _normalised_chain(log_matmul(head_t, children_nt))
    return mat1, None, offset


def _batch_factor(factor: torch.Tensor, shared: bool) -> torch.Tensor:
    return factor[:1] if shared else factor


def inside_lowrank_with(
    merge_fwd: Callable,
    merge_bwd: Callable,
    terms: torch.Tensor,
    roots: torch.Tensor,
    head: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """:func:`inside_lowrank` with the split sums done by ``merge_fwd`` / ``merge_bwd`` (the tiers differ only
    there)."""
    B, N, NT, T, r = check_inputs(terms, roots, head, left, right, lengths, span_scores)
    out_dtype = terms.dtype
    dtype = _compute_dtype(terms, roots, head, left, right, span_scores)
    terms, roots, head, left, right = (x.to(dtype) for x in (terms, roots, head, left, right))
    if B == 0:
        return terms.new_zeros((0,)).to(out_dtype)
    lengths = lengths.to(terms.device)
    one_word = lengths < 2  # no derivation: -inf and no gradient, as the dense op (run as two words, then masked)
    if N < 2:  # every sentence has one word
        anchor = 0.0 * sum(x.sum() for x in (terms, roots, head, left, right))  # keeps the graph: zero gradients
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
    shared = _shared(head) and _shared(left) and _shared(right)
    head_b, left_b, right_b = (_batch_factor(x, shared) for x in (head, left, right))
    # leaves: log sum_p exp(terms[i, p]) V[NT + p, :] (and W), one product for both
    leaf = log_matmul(terms, torch.cat([left_b[:, NT:], right_b[:, NT:]], dim=-1))  # [B, N, 2r]
    mat1, mat2, offset = _child_route(head_b, torch.cat([left_b[:, :NT], right_b[:, :NT]], dim=-1))
    root_rank = torch.logsumexp(roots[:, :, None] + head, dim=1)  # [B, r]
    log_z = rank_space_inside(leaf[..., :r].contiguous(), leaf[..., r:].contiguous(), mat1, mat2, offset,
                              root_rank, span_scores, lengths, merge_fwd, merge_bwd)
    return torch.where(one_word, torch.full_like(log_z, float("-inf")), log_z).to(out_dtype)


def inside_lowrank(
    terms: torch.Tensor,
    roots: torch.Tensor,
    head: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Log partition ``[B]``; see :func:`induce.kernels.inside_lowrank`."""
    merge_fwd, merge_bwd = split_sums(terms, roots, head, left, right, span_scores)
    return inside_lowrank_with(merge_fwd, merge_bwd, terms, roots, head, left, right, lengths, span_scores)

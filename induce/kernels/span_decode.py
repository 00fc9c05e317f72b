"""Span marginals from an inside pass, and the MBR tree over them (TN-PCFG's decoder).

Spans are fenceposts: ``(i, j)`` covers the words ``i .. j-1``, ``0 <= i < j <= length``; tensors over
spans are ``[B, N + 1, N + 1]``. :func:`span_marginals` differentiates a log partition with respect
to a zero score added to every span (``span_scores`` of :func:`induce.kernels.inside_lowrank`), so
entry ``(i, j)`` is the posterior probability that ``(i, j)`` is a constituent: 1 for the one-word
spans and the whole sentence, which every tree has (TN-PCFG's code reports 0 there, as it scores only
spans of two words or more; Kim et al.'s F1 drops both kinds as trivial). Entries outside a
sentence are 0.

:func:`mbr_spans` is CKY over the marginals of the spans of two words or more: the binary tree with
the largest sum of marginals (TN-PCFG's ``_cky_zero_order``; Yang et al. 2021 decode with it by
default). It returns, per sentence, the spans of two words or more, the whole sentence included,
parents before children (preorder), left child first.
"""
from __future__ import annotations

from typing import Callable, List, Tuple

import torch


def span_marginals(log_partition: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """``[B, N + 1, N + 1]`` marginals: the gradient of ``log_partition(span_scores).sum()`` at zero scores.

    ``like [B, N, ...]`` gives the batch, the padded length, the dtype and the device (e.g. ``terms``);
    ``log_partition`` maps ``span_scores [B, N + 1, N + 1]`` to ``log Z [B]``, e.g.
    ``lambda s: inside_lowrank(terms, roots, head, left, right, lengths, span_scores=s)``.
    """
    B, N = like.shape[:2]
    dtype = like.dtype if like.is_floating_point() else torch.float32
    with torch.enable_grad():
        scores = torch.zeros(B, N + 1, N + 1, dtype=dtype, device=like.device, requires_grad=True)
        (marginals,) = torch.autograd.grad(log_partition(scores).sum(), scores)
    return marginals


def mbr_spans(marginals: torch.Tensor, lengths: torch.Tensor) -> List[List[Tuple[int, int]]]:
    """The max-sum-of-marginals binary tree of each sentence (module docstring); ``marginals [B, N + 1, N + 1]``."""
    B, fence, _ = marginals.shape
    N = fence - 1
    scores = marginals.detach().double().cpu()
    best = torch.zeros(B, fence, fence, dtype=torch.float64)
    split = torch.zeros(B, fence, fence, dtype=torch.long)
    for width in range(2, N + 1):
        starts = torch.arange(N - width + 1)
        ends = starts + width
        mids = starts[:, None] + torch.arange(1, width)[None, :]  # [n, width - 1]
        candidates = best[:, starts[:, None], mids] + best[:, mids, ends[:, None]]  # [B, n, width - 1]
        value, arg = candidates.max(-1)
        best[:, starts, ends] = value + scores[:, starts, ends]
        split[:, starts, ends] = starts[None, :] + 1 + arg  # the split point k of the best (i, k), (k, j)
    trees = []
    for b, length in enumerate(lengths.tolist()):
        spans, todo = [], [(0, int(length))]
        while todo:
            i, j = todo.pop()
            if j - i < 2:
                continue
            spans.append((i, j))
            k = int(split[b, i, j])
            todo.append((k, j))  # popped after the left child: preorder, left first
            todo.append((i, k))
        trees.append(spans)
    return trees

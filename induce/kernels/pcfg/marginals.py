"""Span marginals of either inside op: the gradient of its log partition with respect to span scores.

Spans follow :mod:`induce.trees`: fenceposts ``(i, j)`` for the words ``i .. j-1``, tensors over spans
``[B, N + 1, N + 1]`` (the convention of :mod:`induce.kernels`). Both inside ops,
:func:`~induce.kernels.inside` and :func:`~induce.kernels.inside_lowrank`, take ``span_scores`` in that
layout, so one function serves both:

* :func:`span_marginals` differentiates a log partition with respect to a zero score added to every
  span: entry ``(i, j)`` is the posterior probability that ``(i, j)`` is a constituent. Every span of
  the sentence is there, one-word spans and the whole sentence included (1: every tree has them; Kim et
  al.'s and TN-PCFG's code report 0 for one word, as they score only the longer spans; F1 drops both
  kinds as trivial either way). Entries off the sentence are 0, and so is every entry of a sentence
  whose log partition is ``-inf`` (no derivation, e.g. one word under :func:`~induce.kernels.inside`).
  Of the max-product log partition the same gradient is the 0/1 indicator of the best tree's spans.

The trees decoded from either (MBR, the Viterbi tree) are built in :mod:`induce.trees.grammar_decoders`.
"""
from __future__ import annotations

from typing import Callable, Tuple

import torch


def score_and_span_gradient(log_partition: Callable[[torch.Tensor], torch.Tensor],
                            like: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(log_partition(0) [B], d log_partition / d span_scores [B, N + 1, N + 1])`` at zero span scores.

    ``like [B, N, ...]`` gives the batch, the padded length ``N``, the dtype (float32 at least) and the
    device (e.g. ``terms``). Sentences scored ``-inf`` get a zero gradient. Both detached."""
    B, N = like.shape[:2]
    dtype = like.dtype if like.dtype == torch.float64 else torch.float32
    with torch.enable_grad():
        scores = torch.zeros(B, N + 1, N + 1, dtype=dtype, device=like.device, requires_grad=True)
        value = log_partition(scores)
        finite = torch.isfinite(value)
        if not bool(finite.any()):
            return value.detach(), torch.zeros_like(scores.detach())
        (grad,) = torch.autograd.grad(value[finite].sum(), scores)
    return value.detach(), grad


def span_marginals(log_partition: Callable[[torch.Tensor], torch.Tensor], like: torch.Tensor) -> torch.Tensor:
    """``[B, N + 1, N + 1]`` span marginals (module docstring): the gradient of ``log_partition(span_scores)``
    at zero scores. ``log_partition`` maps ``span_scores [B, N + 1, N + 1]`` to ``log Z [B]``, e.g.
    ``lambda s: inside(terms, rules, roots, lengths, span_scores=s)`` or
    ``lambda s: inside_lowrank(terms, roots, head, left, right, lengths, span_scores=s)``; ``like`` as in
    :func:`score_and_span_gradient`. Inputs that need no gradient save work if passed detached."""
    return score_and_span_gradient(log_partition, like)[1]

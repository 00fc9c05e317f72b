"""Span marginals of either inside op, and the trees decoded from them (MBR) or from a max-product pass.

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
* :func:`mbr_trees` is CKY over the marginals: the binary tree with the largest sum of marginals
  (TN-PCFG's ``_cky_zero_order``; Yang et al. 2021 and Kim et al. 2019 decode with it by default).
* :func:`tree_of_spans` reads the tree of a 0/1 span indicator (the Viterbi tree).

Trees come back as :data:`induce.trees.nodes.IndexTree` (nested pairs of word positions, built by
:func:`induce.trees.nodes.build_binary`), what the other decoders of :mod:`induce.trees.decoders`
return: :func:`induce.trees.nodes.tree_spans` gives their spans, :func:`induce.trees.nodes.to_nltk`
an ``nltk.Tree`` over the words.
"""
from __future__ import annotations

from typing import Callable, List, Tuple

import torch

from induce.trees.nodes import IndexTree, build_binary


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


def mbr_trees(marginals: torch.Tensor, lengths: torch.Tensor) -> List[IndexTree]:
    """The max-sum-of-marginals binary tree of each sentence, ``marginals [B, N + 1, N + 1]``.

    Only the spans of two words or more up to the whole sentence take part (the one-word spans and the
    whole sentence are in every tree). Ties go to the leftmost split point. A one-word sentence gives
    the tree ``0``."""
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
    table = split.tolist()
    return [build_binary(0, int(length), lambda i, j, t=table[b]: t[i][j]) for b, length in enumerate(lengths.tolist())]


def tree_of_spans(indicator: torch.Tensor, length: int) -> IndexTree:
    """The binary tree whose spans of two words or more are the entries ``> 0.5`` of ``indicator [N + 1, N + 1]``
    (a 0/1 indicator such as the gradient of a max-product pass). Raises ``ValueError`` if they do not form
    a binary tree over the words ``0 .. length-1``."""
    marked = (indicator.detach()[: length + 1, : length + 1] > 0.5).cpu().triu(2)  # two words or more
    if length >= 2 and int(marked.sum()) != length - 1:
        raise ValueError(f"{int(marked.sum())} spans of two words or more are marked; a binary tree over "
                         f"{length} words has {length - 1}: the marked spans are not a binary tree")
    marked[torch.arange(length), torch.arange(length) + 1] = True  # one-word spans: in every tree
    rows = marked.tolist()  # Python lists: a split is found in a few element reads, a tensor op costs ~10 us

    def split_of(i: int, j: int) -> int:
        if not rows[i][j]:
            raise ValueError(f"span ({i}, {j}) is not marked: the marked spans are not a binary tree")
        ks = [k for k in range(i + 1, j) if rows[i][k] and rows[k][j]]
        if len(ks) != 1:
            raise ValueError(f"span ({i}, {j}) has {len(ks)} marked splits: the marked spans are not a binary tree")
        return ks[0]

    return build_binary(0, length, split_of)

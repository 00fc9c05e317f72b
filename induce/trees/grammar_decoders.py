"""Trees of the parser kind :data:`induce.trees.kinds.GRAMMAR` (the neural PCFGs), from span tables.

Spans are fenceposts, as everywhere in :mod:`induce.trees` and :mod:`induce.kernels`: ``[i, j]`` the words
``i .. j-1``, a table over the spans of sentences padded to ``N`` words ``[B, N + 1, N + 1]``.

* :func:`mbr_trees` is CKY over span marginals: the binary tree with the largest sum of marginals
  (TN-PCFG's ``_cky_zero_order``; Yang et al. 2021 and Kim et al. 2019 decode with it by default).
* :func:`tree_of_spans` reads the tree of a 0/1 span indicator (the Viterbi tree: the gradient of a
  max-product pass, :func:`induce.kernels.viterbi`).
* :func:`mbr_decoder` and :func:`viterbi_decoder` are the kind's registered decoders: they read one sentence's
  structure ``[n, >= n + 1, C]`` (the first ``n`` rows of the model's ``span_posteriors``
  ``[B, N + 1, N + 1, C]``): channel 0 holds the span marginals, channel 1, when present (dense grammars;
  simple grammars on request), the 0/1 indicator of the Viterbi tree's spans.

Trees come back as :data:`induce.trees.nodes.IndexTree` (nested pairs of word positions, built by
:func:`induce.trees.nodes.build_binary`), what the other decoders of :mod:`induce.trees.decoders` return:
:func:`induce.trees.nodes.tree_spans` gives their spans, :func:`induce.trees.nodes.to_nltk` an
``nltk.Tree`` over the words. The span tables come from the kernels (:func:`induce.kernels.span_marginals`);
building trees from them needs nothing of the kernels, so this module imports none.
"""
from __future__ import annotations

from typing import List

import numpy as np
import torch

from induce.errors import InvalidValueError
from induce.trees.nodes import IndexTree, build_binary


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


def _fence_table(structure, length: int, channel: int) -> torch.Tensor:
    """``[length + 1, length + 1]`` of one channel (the last fence row, spans starting after the last word, is 0)."""
    values = np.asarray(structure, dtype=np.float64)
    table = torch.zeros(length + 1, length + 1, dtype=torch.float64)
    table[:length] = torch.from_numpy(values[:length, : length + 1, channel])
    return table


def mbr_decoder(structure, length: int) -> IndexTree:
    """The binary tree with the largest sum of span marginals (:func:`mbr_trees`)."""
    return mbr_trees(_fence_table(structure, length, 0)[None], torch.tensor([length]))[0]


def viterbi_decoder(structure, length: int) -> IndexTree:
    """The most probable derivation's tree (:func:`tree_of_spans` of the indicator channel)."""
    if np.asarray(structure).shape[-1] < 2:
        raise InvalidValueError("decoder 'viterbi' needs the best derivation's spans, which this run does not "
                                "compute: a simple PCFG (snpcfg, scpcfg) computes them only when trained with "
                                "model.viterbi=true, and a low-rank grammar (tnpcfg) never builds the full rule "
                                "tensor its max-product needs; use --decoder mbr")
    return tree_of_spans(_fence_table(structure, length, 1), length)

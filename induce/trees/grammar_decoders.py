"""Decoders of the parser kind :data:`induce.trees.kinds.GRAMMAR` (the neural PCFGs).

A sentence's structure is ``[n, >= n + 1, C]`` (the first ``n`` rows of the model's ``span_posteriors``
``[B, N + 1, N + 1, C]``; spans are fenceposts as in :mod:`induce.kernels`: ``[i, j]`` the words
``i .. j-1``): channel 0 holds the span marginals, channel 1, when present (dense grammars), the 0/1
indicator of the Viterbi tree's spans.
"""
from __future__ import annotations

import numpy as np
import torch

from induce.errors import InvalidValueError
from induce.kernels.pcfg.marginals import mbr_trees, tree_of_spans
from induce.trees.nodes import IndexTree


def _fence_table(structure, length: int, channel: int) -> torch.Tensor:
    """``[length + 1, length + 1]`` of one channel (the last fence row, spans starting after the last word, is 0)."""
    values = np.asarray(structure, dtype=np.float64)
    table = torch.zeros(length + 1, length + 1, dtype=torch.float64)
    table[:length] = torch.from_numpy(values[:length, : length + 1, channel])
    return table


def mbr_decoder(structure, length: int) -> IndexTree:
    """The binary tree with the largest sum of span marginals (:func:`induce.kernels.mbr_trees`)."""
    return mbr_trees(_fence_table(structure, length, 0)[None], torch.tensor([length]))[0]


def viterbi_decoder(structure, length: int) -> IndexTree:
    """The most probable derivation's tree (:func:`induce.kernels.tree_of_spans` of the indicator channel)."""
    if np.asarray(structure).shape[-1] < 2:
        raise InvalidValueError("decoder 'viterbi' needs the full rule tensor, which a low-rank grammar never "
                                "builds (its max-product has no low-rank form); use --decoder mbr")
    return tree_of_spans(_fence_table(structure, length, 1), length)

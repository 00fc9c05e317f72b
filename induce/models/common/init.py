"""Weight initialisers in the form the authors' released code uses them (``torch.nn.init`` lacks both).

* :func:`xavier_uniform_`: Glorot uniform ``U(-a, a)``, ``a = gain * sqrt(6 / (fan_in + fan_out))``, with
  the fans given explicitly. ``torch.nn.init.xavier_uniform_`` reads them from the tensor's shape;
  PaLM's released span scorer passes its own (Noahs-ARK/PaLM ``utils.xavier_uniform(tensor, fan_in,
  fan_out, gain)`` in ``span_parser.py`` and ``rrnn.py``), e.g. the rational RNN's output size per
  direction as ``fan_out`` of a matrix that holds both gates.
* :func:`block_orthogonal_`: each of ``n_blocks`` row blocks of a matrix orthogonal on its own, so that
  every gate of an LSTM weight ``[4H, I]`` is an orthogonal ``[H, I]`` matrix (PaLM ``model.py``
  ``init_weights``: ``utils.block_orthogonal(v, [v.shape[0] // 4, v.shape[1]])``, which draws each
  block with ``torch.nn.init.orthogonal_``, as here).
"""
from __future__ import annotations

import math

import torch
from torch import nn


def xavier_bound(fan_in: int, fan_out: int, gain: float = 1.0) -> float:
    """``gain * sqrt(6 / (fan_in + fan_out))``: the half-width of the Glorot uniform distribution."""
    return gain * math.sqrt(6.0 / (fan_in + fan_out))


def xavier_uniform_(tensor: torch.Tensor, fan_in: int, fan_out: int, gain: float = 1.0) -> torch.Tensor:
    """Fill ``tensor`` (any shape) in place from ``U(-a, a)``, ``a = xavier_bound(fan_in, fan_out, gain)``."""
    bound = xavier_bound(fan_in, fan_out, gain)
    with torch.no_grad():
        return tensor.uniform_(-bound, bound)


def block_orthogonal_(tensor: torch.Tensor, n_blocks: int, gain: float = 1.0) -> torch.Tensor:
    """Fill the 2-d ``tensor [R, C]`` in place: rows ``k * R/n .. (k+1) * R/n`` (block ``k``) drawn by
    ``torch.nn.init.orthogonal_`` independently of the other blocks, times ``gain``. A block with
    fewer rows than columns has orthonormal rows, otherwise orthonormal columns."""
    rows = tensor.size(0)
    if tensor.dim() != 2 or rows % n_blocks:
        raise ValueError(f"block_orthogonal_: a 2-d tensor whose {rows} rows split into {n_blocks} blocks")
    size = rows // n_blocks
    with torch.no_grad():
        for start in range(0, rows, size):
            nn.init.orthogonal_(tensor[start : start + size], gain=gain)
    return tensor

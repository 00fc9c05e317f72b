"""Token streams, batch rows, BPTT segment lengths and per-process shards (AWD-LSTM conventions).

The corpus becomes one id stream (each sentence followed by ``<eos>``), cut into ``B`` equal
contiguous rows: ``data [B, L]`` (batch-first, the transpose of AWD-LSTM's ``[L, B]``). A training
step reads the segment ``data[:, i : i + T]`` and predicts ``data[:, i + 1 : i + 1 + T]``; the
recurrent state carries over from one segment to the next.

Under DistributedDataParallel every process takes the same segment positions (one shared
segment-length generator) and a contiguous block of ``B / world_size`` rows, so the processes
together compute exactly the global batch of a single-process run.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np
import torch


def stream_ids(sentences: Sequence[Sequence[str]], vocab) -> torch.Tensor:
    """``[N]`` ids of ``w_0 .. w_{n-1} <eos>`` for every sentence, concatenated."""
    ids: list[int] = []
    for sentence in sentences:
        ids.extend(vocab.encode(sentence, add_eos=True))
    return torch.tensor(ids, dtype=torch.long)


def batchify(stream: torch.Tensor, batch_size: int) -> torch.Tensor:
    """``stream [N, ...]`` -> ``[B, N // B, ...]`` (the tail that does not fill a row is dropped)."""
    length = stream.size(0) // batch_size
    if length < 2:
        raise ValueError(f"{stream.size(0)} tokens cannot fill {batch_size} rows of at least 2 tokens")
    return stream[: length * batch_size].reshape(batch_size, length, *stream.shape[1:]).contiguous()


def predicted_per_epoch(n_tokens: int, batch_size: int) -> int:
    """Tokens an epoch predicts of a stream of ``n_tokens`` (sentence ends included) cut into
    ``batch_size`` rows (:func:`batchify`): every token of a row but its first, the tail that does not
    fill the rows dropped. At most: the loop may stop one token short of a row's end (AWD-LSTM's
    ``i < length - 2``), when a segment ends there."""
    return max(0, n_tokens // batch_size - 1) * batch_size


def shard_rows(data: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rows ``[rank * B/W, (rank + 1) * B/W)`` of ``data [B, ...]`` (``B`` divisible by ``W``)."""
    if data.size(0) % world_size:
        raise ValueError(f"batch size {data.size(0)} is not divisible by {world_size} processes")
    per_rank = data.size(0) // world_size
    return data[rank * per_rank : (rank + 1) * per_rank]


def next_segment_length(
    rng: Optional[np.random.Generator],
    bptt: int,
    std: float = 5.0,
    min_length: int = 5,
    max_extra: int = 20,
    bucket: Optional[int] = 0,
) -> int:
    """AWD-LSTM's random BPTT length: ``bptt`` (p = 0.95) or ``bptt / 2``, plus ``N(0, std)`` noise.

    ``rng=None`` gives the fixed length ``bptt``. The result lies in ``[min_length, bptt + max_extra]``.
    ``bucket > 0`` rounds the drawn length with :func:`bucket_length` (same random draws, so a run
    with and without bucketing consumes the generator identically); 0 or None: no rounding.
    """
    if rng is None:
        length = bptt
    else:
        mean = bptt if rng.random() < 0.95 else bptt / 2.0
        length = min(max(min_length, int(rng.normal(mean, std))), bptt + max_extra)
    if bucket:
        length = bucket_length(length, bucket, min_length, bptt + max_extra)
    return length


def auto_bucket(bptt: int, std: float) -> int:
    """The bucket of ``data.bptt_bucket: null`` with CUDA graphs on: the largest divisor of ``bptt`` not
    above ``1.5 * std`` (1, i.e. no rounding, when there is none). A divisor keeps ``bptt`` and ``bptt /
    2`` on bucket values, so the two modes of the distribution stay centred; the limit keeps the rounding
    small beside the noise. The reasoning and its figures: :mod:`induce.training.graphs`."""
    return max(d for d in range(1, bptt + 1) if bptt % d == 0 and d <= max(1.0, 1.5 * std))


def segment_length_distribution(bptt: int, std: float = 5.0, min_length: int = 5, max_extra: int = 20,
                                bucket: Optional[int] = 0) -> dict[int, float]:
    """``{length: probability}`` of :func:`next_segment_length`'s draws (after bucketing), computed
    from the normal distribution (``int`` truncates the draw; the bounds collect the tails)."""
    def cdf(x: float, mean: float) -> float:
        return 0.5 * (1.0 + math.erf((x - mean) / (std * math.sqrt(2.0)))) if std > 0 else float(x >= mean)

    high = bptt + max_extra
    probabilities: dict[int, float] = {}
    for share, mean in ((0.95, float(bptt)), (0.05, bptt / 2.0)):
        for drawn in range(min_length, high + 1):
            # int(x) == drawn for x in [drawn, drawn + 1) (x > 0); the clamps take the tails
            lower = -math.inf if drawn == min_length else drawn
            upper = math.inf if drawn == high else drawn + 1
            below_upper = 1.0 if upper == math.inf else cdf(upper, mean)
            below_lower = 0.0 if lower == -math.inf else cdf(lower, mean)
            p = share * (below_upper - below_lower)
            length = bucket_length(drawn, bucket, min_length, high) if bucket else drawn
            probabilities[length] = probabilities.get(length, 0.0) + p
    return {length: p for length, p in sorted(probabilities.items()) if p > 0}


def bucket_length(length: int, bucket: int, min_length: int, max_length: int) -> int:
    """``length`` rounded to the nearest multiple of ``bucket`` (ties round up) inside the bounds.

    The bucketing: variable BPTT draws ~40 distinct lengths per epoch at ``bptt = 70``; every new
    length is a new static shape for CUDA graphs / compiled kernels. Rounded to multiples of
    ``bucket = 8`` (and kept in ``[min_length, max_length]``, widened to the nearest multiples
    inside) they take ~10 values: 24..48 for the ``bptt / 2`` draws, 56..88 for the others, plus the
    last, clipped segment of each epoch. Nothing is padded or masked: the stream is still read
    once, in order, in consecutive segments with the state carried over, so each step's loss is the
    eager step's loss on that segment; only where the segments end changes (the mean length moves
    by less than ``bucket / 2``). The learning-rate rescaling follows the actual length.
    Bounds with no multiple of ``bucket`` between them leave ``length`` unchanged.
    """
    low = -(-min_length // bucket) * bucket
    high = (max_length // bucket) * bucket
    if low > high:
        return length
    rounded = ((length + bucket // 2) // bucket) * bucket
    return min(max(rounded, low), high)


def segment(data: torch.Tensor, start: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs ``data[:, start : start + T]`` and targets shifted by one, ``T`` clipped to the row end."""
    length = min(length, data.size(1) - 1 - start)
    return data[:, start : start + length], data[:, start + 1 : start + 1 + length]

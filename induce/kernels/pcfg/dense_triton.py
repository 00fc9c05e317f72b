"""Triton tier of the dense-PCFG inside algorithm: one fused kernel per span width, forward and outside.

Same layout and arithmetic as :mod:`induce.kernels.pcfg.dense_torch` (read its docstring first): the
word tables ``y, z, w2`` are PyTorch's (:mod:`induce.kernels.pcfg.words`, small matrix products) and
the chart of spans of three or more words is filled by one launch per width, a program per span
``(b, i)`` holding every nonterminal of the span:

* sum mode, forward (:func:`_inside_sum_fwd_kernel`): the PN and NP splits against the word tables,
  the NN splits summed into a ``[NT, NT]`` tile of child pairs in registers and contracted with
  the span's rules (``exp(rules - max)``, read in blocks of ``BA`` parents), the logsumexp of the
  three and the span score; the kernel stores the chart entry in both layouts, scaled by its maximum;
* sum mode, outside (:func:`_inside_sum_bwd_kernel`): per span, the gradient of each kind of split,
  added to the children's gradient rows and the word tables' rows. No two programs of one launch
  write the same row: a parent starting at ``i`` writes only the ``start = i`` rows of the
  left-child accumulator (its left children, and the NP split's span ``i..j-1``) and a parent ending
  at ``j`` only the ``end = j`` rows of the right-child accumulator (its right children and the PN
  split's span ``i+1..j``), so no atomics. The rules' gradient, a sum over every span, is one
  batched matrix product per width in PyTorch (``h^T @ pairs``) from the ``[B, n, NT]`` and
  ``[B, n, NT, NT]`` buffers the kernel fills;
* max mode, forward (:func:`_inside_max_fwd_kernel`): the same with max, values only; the backward
  pass (:func:`induce.kernels.pcfg.dense_torch.max_backward`, shared with the torch tier) recomputes the
  argmax of the cells that get a gradient.

Nonterminals up to :data:`MAX_NONTERMINALS` (a ``[NT, NT]`` tile per program); computed in float32.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
import triton
import triton.language as tl

from induce.kernels._dispatch import KernelBackendError
from induce.kernels.pcfg.dense_torch import run_inside
from induce.kernels.pcfg.words import _max_out
from induce.kernels.triton_base import _length_free_jit, _pow2

#: Largest number of nonterminals the kernels take: a program holds a ``[NT, NT]`` tile of child pairs.
MAX_NONTERMINALS = 64
_TINY = tl.constexpr(1.1754943508222875e-38)  # smallest normal float32: sums clamp here before their log


@triton.jit
def _row(ptr, offset, rows, ok, other):
    return tl.load(ptr + offset + rows, mask=ok, other=other)


@_length_free_jit("T", "w", "n")
def _inside_sum_fwd_kernel(
    e_sw, e_ew, m_sw, m_ew, log_sw, ey, y_max, ez, z_max, e_nn, c_nn, spans,
    T, w, n, NT, NTP: tl.constexpr, BA: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // n).to(tl.int64)
    i = pid % n
    j = i + w - 1
    rows = tl.arange(0, NTP)
    ok = rows < NT
    tile = rows[:, None] * NT + rows[None, :]
    tile_ok = ok[:, None] & ok[None, :]
    # PN: A -> (word i) (span i+1..j)
    right_e = _row(e_sw, ((b * T + i + 1) * T + w - 2) * NT, rows, ok, 0.0)
    right_m = tl.load(m_sw + (b * T + i + 1) * T + w - 2)
    e_y = tl.load(ey + (b * T + i) * NT * NT + tile, mask=tile_ok, other=0.0)
    pn = tl.log(tl.maximum(tl.sum(e_y * right_e[None, :], axis=1), _TINY))
    pn = pn + _row(y_max, (b * T + i) * NT, rows, ok, 0.0) + right_m
    # NP: A -> (span i..j-1) (word j)
    left_e = _row(e_sw, ((b * T + i) * T + w - 2) * NT, rows, ok, 0.0)
    left_m = tl.load(m_sw + (b * T + i) * T + w - 2)
    e_z = tl.load(ez + (b * T + j) * NT * NT + tile, mask=tile_ok, other=0.0)
    np_ = tl.log(tl.maximum(tl.sum(e_z * left_e[None, :], axis=1), _TINY))
    np_ = np_ + _row(z_max, (b * T + j) * NT, rows, ok, 0.0) + left_m
    # NN: child pairs summed over the splits (left width lw = 2..w-2), then the rules
    big = -float("inf")
    for lw in range(2, w - 1):
        big = tl.maximum(big, tl.load(m_sw + (b * T + i) * T + lw - 1) + tl.load(m_ew + (b * T + j) * T + T - w + lw))
    pairs = tl.zeros([NTP, NTP], dtype=tl.float32)
    for lw in range(2, w - 1):
        weight = tl.exp(tl.load(m_sw + (b * T + i) * T + lw - 1) + tl.load(m_ew + (b * T + j) * T + T - w + lw) - big)
        le = _row(e_sw, ((b * T + i) * T + lw - 1) * NT, rows, ok, 0.0)
        re = _row(e_ew, ((b * T + j) * T + T - w + lw) * NT, rows, ok, 0.0)
        pairs += weight * le[:, None] * re[None, :]
    total = tl.zeros([NTP], dtype=tl.float32)
    for a0 in range(0, NT, BA):
        a = a0 + tl.arange(0, BA)
        offs = a[:, None, None] * NT * NT + tile[None, :, :]
        block = tl.load(e_nn + b * NT * NT * NT + offs, mask=(a < NT)[:, None, None] & tile_ok[None], other=0.0)
        s = tl.sum(tl.sum(block * pairs[None], axis=2), axis=1)  # [BA]
        total += tl.sum(tl.where(rows[None, :] == a[:, None], s[:, None], 0.0), axis=0)
    nn = tl.log(tl.maximum(total, _TINY)) + big + _row(c_nn, b * NT, rows, ok, 0.0)
    nn = tl.where(w >= 4, nn, -float("inf"))
    top = tl.maximum(tl.maximum(pn, np_), nn)
    beta = top + tl.log(tl.exp(pn - top) + tl.exp(np_ - top) + tl.exp(nn - top))
    beta = beta + tl.load(spans + (b * T + i) * T + j)
    m = tl.max(tl.where(ok, beta, -float("inf")), axis=0)
    e = tl.exp(beta - m)
    tl.store(log_sw + ((b * T + i) * T + w - 1) * NT + rows, beta, mask=ok)
    tl.store(e_sw + ((b * T + i) * T + w - 1) * NT + rows, e, mask=ok)
    tl.store(e_ew + ((b * T + j) * T + T - w) * NT + rows, e, mask=ok)
    tl.store(m_sw + (b * T + i) * T + w - 1, m)
    tl.store(m_ew + (b * T + j) * T + T - w, m)


@_length_free_jit("T", "w", "n")
def _inside_sum_bwd_kernel(
    e_sw, e_ew, m_sw, m_ew, log_sw, ey, y_max, ez, z_max, e_nn, c_nn, spans,
    g_sw, g_ew, d_y, d_z, d_spans, h_buf, pairs_buf,
    T, w, n, NT, NTP: tl.constexpr, BA: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // n).to(tl.int64)
    i = pid % n
    j = i + w - 1
    rows = tl.arange(0, NTP)
    ok = rows < NT
    tile = rows[:, None] * NT + rows[None, :]
    tile_ok = ok[:, None] & ok[None, :]
    g = (_row(g_sw, ((b * T + i) * T + w - 1) * NT, rows, ok, 0.0)
         + _row(g_ew, ((b * T + j) * T + T - w) * NT, rows, ok, 0.0))
    tl.store(d_spans + (b * T + i) * T + j, tl.sum(g, axis=0))
    base = _row(log_sw, ((b * T + i) * T + w - 1) * NT, rows, ok, 0.0) - tl.load(spans + (b * T + i) * T + j)
    # PN: the right child (span i+1..j) goes to the right-child rows (end j)
    right_e = _row(e_sw, ((b * T + i + 1) * T + w - 2) * NT, rows, ok, 0.0)
    right_m = tl.load(m_sw + (b * T + i + 1) * T + w - 2)
    h = tl.where(ok, g * tl.exp(_row(y_max, (b * T + i) * NT, rows, ok, 0.0) + right_m - base), 0.0)
    e_y = tl.load(ey + (b * T + i) * NT * NT + tile, mask=tile_ok, other=0.0)
    dy_ptr = d_y + (b * T + i) * NT * NT + tile
    tl.store(dy_ptr, tl.load(dy_ptr, mask=tile_ok, other=0.0) + h[:, None] * right_e[None, :], mask=tile_ok)
    child = g_ew + ((b * T + j) * T + T - w + 1) * NT + rows
    tl.store(child, tl.load(child, mask=ok, other=0.0) + right_e * tl.sum(h[:, None] * e_y, axis=0), mask=ok)
    # NP: the left child (span i..j-1) goes to the left-child rows (start i)
    left_e = _row(e_sw, ((b * T + i) * T + w - 2) * NT, rows, ok, 0.0)
    left_m = tl.load(m_sw + (b * T + i) * T + w - 2)
    h = tl.where(ok, g * tl.exp(_row(z_max, (b * T + j) * NT, rows, ok, 0.0) + left_m - base), 0.0)
    e_z = tl.load(ez + (b * T + j) * NT * NT + tile, mask=tile_ok, other=0.0)
    dz_ptr = d_z + (b * T + j) * NT * NT + tile
    tl.store(dz_ptr, tl.load(dz_ptr, mask=tile_ok, other=0.0) + h[:, None] * left_e[None, :], mask=tile_ok)
    child = g_sw + ((b * T + i) * T + w - 2) * NT + rows
    tl.store(child, tl.load(child, mask=ok, other=0.0) + left_e * tl.sum(h[:, None] * e_z, axis=0), mask=ok)
    # NN (w >= 4: the loops below are empty otherwise)
    if w >= 4:
        big = -float("inf")
        for lw in range(2, w - 1):
            big = tl.maximum(big, tl.load(m_sw + (b * T + i) * T + lw - 1)
                             + tl.load(m_ew + (b * T + j) * T + T - w + lw))
        h = tl.where(ok, g * tl.exp(_row(c_nn, b * NT, rows, ok, 0.0) + big - base), 0.0)
        tl.store(h_buf + (b * n + i) * NT + rows, h, mask=ok)
        q = tl.zeros([NTP, NTP], dtype=tl.float32)  # d/d pairs = sum_A h[A] e_nn[A]
        for a0 in range(0, NT, BA):
            a = a0 + tl.arange(0, BA)
            offs = a[:, None, None] * NT * NT + tile[None, :, :]
            block = tl.load(e_nn + b * NT * NT * NT + offs, mask=(a < NT)[:, None, None] & tile_ok[None], other=0.0)
            h_a = tl.sum(tl.where(rows[None, :] == a[:, None], h[None, :], 0.0), axis=1)  # [BA]
            q += tl.sum(block * h_a[:, None, None], axis=0)
        pairs = tl.zeros([NTP, NTP], dtype=tl.float32)
        for lw in range(2, w - 1):
            weight = tl.exp(tl.load(m_sw + (b * T + i) * T + lw - 1)
                            + tl.load(m_ew + (b * T + j) * T + T - w + lw) - big)
            left_ptr = g_sw + ((b * T + i) * T + lw - 1) * NT + rows
            right_ptr = g_ew + ((b * T + j) * T + T - w + lw) * NT + rows
            le = _row(e_sw, ((b * T + i) * T + lw - 1) * NT, rows, ok, 0.0)
            re = _row(e_ew, ((b * T + j) * T + T - w + lw) * NT, rows, ok, 0.0)
            pairs += weight * le[:, None] * re[None, :]
            tl.store(left_ptr, tl.load(left_ptr, mask=ok, other=0.0) + weight * le * tl.sum(q * re[None, :], axis=1),
                     mask=ok)
            tl.store(right_ptr, tl.load(right_ptr, mask=ok, other=0.0) + weight * re * tl.sum(q * le[:, None], axis=0),
                     mask=ok)
        tl.store(pairs_buf + (b * n + i) * NT * NT + tile, pairs, mask=tile_ok)


@_length_free_jit("T", "w", "n")
def _inside_max_fwd_kernel(
    chart_sw, chart_ew, y, z, r_nn, spans,
    T, w, n, NT, NTP: tl.constexpr, BA: tl.constexpr,
):
    pid = tl.program_id(0)
    b = (pid // n).to(tl.int64)
    i = pid % n
    j = i + w - 1
    rows = tl.arange(0, NTP)
    ok = rows < NT
    tile = rows[:, None] * NT + rows[None, :]
    tile_ok = ok[:, None] & ok[None, :]
    neg = -float("inf")
    right = _row(chart_sw, ((b * T + i + 1) * T + w - 2) * NT, rows, ok, neg)
    pn = tl.max(tl.load(y + (b * T + i) * NT * NT + tile, mask=tile_ok, other=neg) + right[None, :], axis=1)
    left = _row(chart_sw, ((b * T + i) * T + w - 2) * NT, rows, ok, neg)
    np_ = tl.max(tl.load(z + (b * T + j) * NT * NT + tile, mask=tile_ok, other=neg) + left[None, :], axis=1)
    best_pairs = tl.full([NTP, NTP], neg, dtype=tl.float32)
    for lw in range(2, w - 1):
        le = _row(chart_sw, ((b * T + i) * T + lw - 1) * NT, rows, ok, neg)
        re = _row(chart_ew, ((b * T + j) * T + T - w + lw) * NT, rows, ok, neg)
        best_pairs = tl.maximum(best_pairs, le[:, None] + re[None, :])
    flat_pairs = tl.reshape(best_pairs, [NTP * NTP])
    flat = tl.arange(0, NTP * NTP)
    flat_rule = (flat // NTP) * NT + flat % NTP  # padded tile index -> left * NT + right
    flat_ok = ((flat // NTP) < NT) & ((flat % NTP) < NT)
    nn = tl.full([NTP], neg, dtype=tl.float32)
    if w >= 4:
        for a0 in range(0, NT, BA):
            a = a0 + tl.arange(0, BA)
            block = tl.load(r_nn + b * NT * NT * NT + a[:, None] * NT * NT + flat_rule[None, :],
                            mask=(a < NT)[:, None] & flat_ok[None, :], other=neg)
            s = tl.max(flat_pairs[None, :] + block, axis=1)  # (pairs + rule), as the backward recomputes it
            hit = rows[None, :] == a[:, None]  # [BA, NTP]
            nn = tl.where(tl.sum(hit.to(tl.int32), axis=0) > 0, tl.max(tl.where(hit, s[:, None], neg), axis=0), nn)
    beta = tl.maximum(tl.maximum(pn, np_), nn) + tl.load(spans + (b * T + i) * T + j)
    tl.store(chart_sw + ((b * T + i) * T + w - 1) * NT + rows, beta, mask=ok)
    tl.store(chart_ew + ((b * T + j) * T + T - w) * NT + rows, beta, mask=ok)


class _Chart:
    """The sum-mode chart as the kernels read it, batch-major: ``*_sw [B, T(start), T(width - 1), NT]``,
    ``*_ew [B, T(end), T(T - width), NT]``, ``exp(beta - m)`` and the row maxima ``m`` (the torch tier's
    :class:`~induce.kernels.pcfg.dense_torch._Chart` in its own layout); ``log_sw`` keeps ``beta``."""

    def __init__(self, B: int, T: int, NT: int, like: torch.Tensor):
        self.log_sw = like.new_zeros(B, T, T, NT)
        self.e_sw = like.new_zeros(B, T, T, NT)
        self.e_ew = like.new_zeros(B, T, T, NT)
        self.m_sw = like.new_zeros(B, T, T)
        self.m_ew = like.new_zeros(B, T, T)

    def store_two_words(self, beta: torch.Tensor) -> None:
        """``beta [B, T - 1, NT]``: the spans of two words (the kernels fill the wider ones)."""
        e, m = _max_out(beta)
        self.log_sw[:, :-1, 1] = beta
        self.e_sw[:, :-1, 1] = e
        self.e_ew[:, 1:, -2] = e
        self.m_sw[:, :-1, 1] = m.squeeze(-1)
        self.m_ew[:, 1:, -2] = m.squeeze(-1)


def _launch_sizes(NT: int) -> Tuple[int, int, int]:
    """``(NTP, BA, num_warps)``: the padded tile, the parents per block of rules (``BA * NTP^2 <= 4096``)
    and warps enough to hold the ``[NTP, NTP]`` tiles without spilling on sm_90 (the compile check)."""
    ntp = _pow2(NT, minimum=2)
    return ntp, max(1, min(ntp, 4096 // (ntp * ntp))), 4 if ntp <= 8 else (8 if ntp <= 32 else 16)


def _contiguous(*tensors):
    return [t.contiguous() for t in tensors]


def _sum_chart_forward(ey, y_max, ez, z_max, w2, r_nn, spans):
    """Triton twin of the torch tier's chart forward (``TORCH_CHART[0]``): same inputs, chart and state."""
    B, T, NT, _ = ey.shape
    ntp, ba, warps = _launch_sizes(NT)
    chart = _Chart(B, T, NT, ey)
    flat = r_nn.reshape(B, NT, NT * NT)
    c_nn = flat.amax(-1)
    e_nn = (flat - c_nn[..., None]).exp()
    ey, y_max, ez, z_max, e_nn, c_nn, spans = _contiguous(ey, y_max, ez, z_max, e_nn, c_nn, spans)
    chart.store_two_words(w2 + spans.diagonal(offset=1, dim1=1, dim2=2)[..., None])
    for w in range(3, T + 1):
        n = T - w + 1
        _inside_sum_fwd_kernel[(B * n,)](
            chart.e_sw, chart.e_ew, chart.m_sw, chart.m_ew, chart.log_sw, ey, y_max, ez, z_max, e_nn, c_nn,
            spans, T, w, n, NT, NTP=ntp, BA=ba, num_warps=warps)
    return chart.log_sw, (chart, spans, (ey, y_max, ez, z_max, e_nn, c_nn))


def _sum_chart_backward(state, grad_chart):
    """Triton twin of the torch tier's outside pass (``TORCH_CHART[1]``)."""
    chart, spans, (ey, y_max, ez, z_max, e_nn, c_nn) = state
    B, T, _, NT = chart.log_sw.shape
    ntp, ba, warps = _launch_sizes(NT)
    g_sw = grad_chart.float().contiguous().clone()
    g_ew = torch.zeros_like(g_sw)
    d_y, d_z = torch.zeros_like(ey), torch.zeros_like(ez)
    d_enn = torch.zeros_like(e_nn)
    d_spans = torch.zeros_like(spans)
    h_buf = ey.new_empty(B, T, NT)
    pairs_buf = ey.new_empty(B, T, NT, NT)
    for w in range(T, 2, -1):
        n = T - w + 1
        _inside_sum_bwd_kernel[(B * n,)](
            chart.e_sw, chart.e_ew, chart.m_sw, chart.m_ew, chart.log_sw, ey, y_max, ez, z_max, e_nn, c_nn,
            spans, g_sw, g_ew, d_y, d_z, d_spans, h_buf, pairs_buf, T, w, n, NT, NTP=ntp, BA=ba, num_warps=warps)
        if w >= 4:
            h = h_buf.view(-1)[: B * n * NT].view(B, n, NT)  # the kernel wrote [B, n, ...] from the start
            pairs = pairs_buf.view(-1)[: B * n * NT * NT].view(B, n, NT * NT)
            d_enn += h.transpose(1, 2) @ pairs
    d_w2 = g_sw[:, : T - 1, 1] + g_ew[:, 1:, T - 2]
    d_spans.diagonal(offset=1, dim1=1, dim2=2).copy_(d_w2.sum(-1))
    return d_y, d_z, d_w2, (d_enn * e_nn).view(B, NT, NT, NT), d_spans


TRITON_CHART = (_sum_chart_forward, _sum_chart_backward)


def _max_chart_forward(y, z, w2, r_nn, spans):
    """Triton twin of the torch tier's max-mode chart (:func:`induce.kernels.pcfg.dense_torch._max_forward`):
    values only; :func:`~induce.kernels.pcfg.dense_torch.max_backward` recomputes the argmax backward."""
    B, T, NT, _ = y.shape
    ntp, ba, warps = _launch_sizes(NT)
    y, z, spans, flat = _contiguous(y, z, spans, r_nn)
    chart_sw = y.new_zeros(B, T, T, NT)
    chart_ew = y.new_zeros(B, T, T, NT)
    beta = w2 + spans.diagonal(offset=1, dim1=1, dim2=2)[..., None]
    chart_sw[:, : T - 1, 1] = beta
    chart_ew[:, 1:, T - 2] = beta
    for w in range(3, T + 1):
        n = T - w + 1
        _inside_max_fwd_kernel[(B * n,)](
            chart_sw, chart_ew, y, z, flat, spans, T, w, n, NT, NTP=ntp, BA=ba, num_warps=warps)
    return chart_sw


def inside(
    terms: torch.Tensor,
    rules: torch.Tensor,
    roots: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
    chart: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """See :func:`induce.kernels.inside`."""
    NT = rules.shape[1]
    if NT > MAX_NONTERMINALS:
        raise KernelBackendError(
            f"kernel backend 'triton': inside takes at most {MAX_NONTERMINALS} nonterminals, got {NT}; "
            "use --kernels torch")
    return run_inside(terms, rules, roots, lengths, span_scores, semiring, chart, TRITON_CHART, _max_chart_forward,
                      compute_dtype=lambda t: t.float())

"""Triton tier, PaLM's span kernels: span representations (Alg. 1) and the whole span-attention step.

The same conventions as :mod:`induce.kernels.recurrent.triton_impl` (the rest of the recurrent ops' Triton
tier): float32 compute, hand-written backward passes, float32 atomic adds where several positions contribute.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from induce.kernels.triton_base import _length_free_jit, _pow2, _tanh

# ====================================================================== span representations
# A span tile is ``[BT, BD]``: positions ``t`` (rows) x features ``d`` (columns) for one span length
# ``k``. Its forget-gate product ``prod_{j=t-k..t} f_j`` is summed in log space over the window, so
# a -inf gate or a long decaying prefix never gives -inf - -inf.
_DOT_PRECISION = tl.constexpr("ieee")  # full fp32 products, like the torch tier (TF32 would change the numbers)


@triton.jit
def _window_log_product(lf_ptr, b, t, k, d, T, D):
    """``sum_{j=t-k..t} log_f_j`` as a ``[BT, BD]`` tile (entries with ``j < 0`` count as 0)."""
    total = tl.zeros([t.shape[0], d.shape[1]], dtype=tl.float32)
    for back in range(0, k + 1):
        j = t - back
        ok = (j >= 0) & (j < T) & (d < D)
        total += tl.load(lf_ptr + (b * T + j) * D + d, mask=ok, other=0.0).to(tl.float32)
    return total


@triton.jit
def _span_tile(c_ptr, lf_ptr, b, t, k, d, T, D, REVERSE: tl.constexpr):
    """Span ``[t-k, t]`` of one direction: ``(repr, decay, other, valid)``, ``[BT, BD]`` each.

    forward: ``repr = c_t - c_{t-k-1} * decay`` (other = ``c_{t-k-1}``, 0 before the start);
    backward: ``repr = c_{t-k} - c_{t+1} * decay`` (other = ``c_{t+1}``, 0 after the end).
    ``repr`` is 0 where the span is invalid (``t - k < 0``, ``t >= T`` or ``d >= D``).
    """
    valid = (t - k >= 0) & (t < T) & (d < D)
    decay = tl.exp(_window_log_product(lf_ptr, b, t, k, d, T, D))
    if REVERSE:
        head = tl.load(c_ptr + (b * T + t - k) * D + d, mask=valid, other=0.0).to(tl.float32)
        other_ok = valid & (t + 1 < T)
        other = tl.load(c_ptr + (b * T + t + 1) * D + d, mask=other_ok, other=0.0).to(tl.float32)
    else:
        head = tl.load(c_ptr + (b * T + t) * D + d, mask=valid, other=0.0).to(tl.float32)
        other_ok = valid & (t - k - 1 >= 0)
        other = tl.load(c_ptr + (b * T + t - k - 1) * D + d, mask=other_ok, other=0.0).to(tl.float32)
    rep = tl.where(valid, head - other * decay, 0.0)
    return rep, decay, other, valid


@triton.jit
def _span_repr_scatter_grad(
    grad_span, decay, other, valid, gc_ptr, glf_ptr, b, t, k, d, T, D, acc_local, acc_suffix, REVERSE: tl.constexpr
):
    """Push ``dL/d repr`` of span ``[t-k, t]`` to ``c`` and ``log_f``; spans must come in decreasing ``k``.

    ``acc_local`` collects the gradient of the row the span shares with all spans of the tile
    (``c_t`` forward, ``c_{t+1}`` backward); ``acc_suffix`` is the running sum over ``k' >= k`` that
    ``log_f_{t-k}`` receives (every span ``[t-k', t]`` with ``k' >= k`` covers ``t - k``).
    """
    g = tl.where(valid, grad_span, 0.0)
    if REVERSE:
        tl.atomic_add(gc_ptr + (b * T + t - k) * D + d, g, mask=valid)
        acc_local += -g * decay
    else:
        acc_local += g
        tl.atomic_add(gc_ptr + (b * T + t - k - 1) * D + d, -g * decay, mask=valid & (t - k - 1 >= 0))
    acc_suffix += -g * other * decay
    tl.atomic_add(glf_ptr + (b * T + t - k) * D + d, acc_suffix, mask=valid)
    return acc_local, acc_suffix


@triton.jit
def _flush_local(gc_ptr, acc_local, b, t, d, T, D, REVERSE: tl.constexpr):
    if REVERSE:
        tl.atomic_add(gc_ptr + (b * T + t + 1) * D + d, acc_local, mask=(t + 1 < T) & (d < D))
    else:
        tl.atomic_add(gc_ptr + (b * T + t) * D + d, acc_local, mask=(t < T) & (d < D))


@_length_free_jit('T')
def _span_repr_fwd_kernel(c_ptr, lf_ptr, out_ptr, T, D, M, REVERSE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    d = (tl.program_id(2) * BD + tl.arange(0, BD))[None, :]
    for k in range(0, M):
        rep, _, _, _ = _span_tile(c_ptr, lf_ptr, b, t, k, d, T, D, REVERSE)
        tl.store(out_ptr + ((b * T + t) * M + k) * D + d, rep.to(out_ptr.dtype.element_ty), mask=(t < T) & (d < D))


@_length_free_jit('T')
def _span_repr_bwd_kernel(
    c_ptr, lf_ptr, gout_ptr, gc_ptr, glf_ptr, T, D, M, REVERSE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr
):
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    d = (tl.program_id(2) * BD + tl.arange(0, BD))[None, :]
    acc_local = tl.zeros([BT, BD], dtype=tl.float32)
    acc_suffix = tl.zeros([BT, BD], dtype=tl.float32)
    for step in range(0, M):
        k = M - 1 - step
        _, decay, other, valid = _span_tile(c_ptr, lf_ptr, b, t, k, d, T, D, REVERSE)
        g = tl.load(gout_ptr + ((b * T + t) * M + k) * D + d, mask=valid, other=0.0).to(tl.float32)
        acc_local, acc_suffix = _span_repr_scatter_grad(
            g, decay, other, valid, gc_ptr, glf_ptr, b, t, k, d, T, D, acc_local, acc_suffix, REVERSE
        )
    _flush_local(gc_ptr, acc_local, b, t, d, T, D, REVERSE)


_BT, _BD = 16, 32


class _SpanRepresentations(torch.autograd.Function):
    @staticmethod
    def forward(ctx, c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool):  # type: ignore[override]
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        B, T, D = c.shape
        out = torch.empty(B, T, max_len, D, dtype=c.dtype, device=c.device)
        if B * T * D * max_len:
            grid = (B, triton.cdiv(T, _BT), triton.cdiv(D, _BD))
            _span_repr_fwd_kernel[grid](c, log_f, out, T, D, max_len, REVERSE=reverse, BT=_BT, BD=_BD)
        ctx.save_for_backward(c, log_f)
        ctx.max_len, ctx.reverse = max_len, reverse
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out: Optional[torch.Tensor]):  # type: ignore[override]
        if grad_out is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None, None, None
        c, log_f = ctx.saved_tensors
        B, T, D = c.shape
        grad_c = torch.zeros(B, T, D, dtype=torch.float32, device=c.device)
        grad_lf = torch.zeros_like(grad_c)
        if B * T * D * ctx.max_len:
            grid = (B, triton.cdiv(T, _BT), triton.cdiv(D, _BD))
            _span_repr_bwd_kernel[grid](
                c, log_f, grad_out.contiguous(), grad_c, grad_lf, T, D, ctx.max_len, REVERSE=ctx.reverse, BT=_BT, BD=_BD
            )
        return grad_c.to(c.dtype), grad_lf.to(log_f.dtype), None, None


def span_representations(c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool = False) -> torch.Tensor:
    """PaLM Alg. 1 ``[B, T, D] -> [B, T, m, D]`` (convention on :func:`induce.kernels.span_representations`)."""
    c, log_f = torch.broadcast_tensors(c, log_f)
    return _SpanRepresentations.apply(c.contiguous(), log_f.contiguous(), max_len, reverse)


# ============================================================================= span attention
# Rows are spans: a row tile of ``R`` rows holds ``P = R // M`` whole positions (``P * M`` rows, the
# rest padding), row ``i`` being span ``k`` of position ``pos0 + tile * P + i // M`` (positions
# flattened over ``B * T``). Whole positions per tile keep every "over the spans of one position"
# operation (the forget-gate window products, the gradient sums of the backward) inside a program,
# as segmented scans along the rows. A position with more spans than a tile has rows (``M > R``, a
# parse of a long sentence) is split over several tiles (``CHUNKED``, see :func:`_row_tiling`), whose
# scans continue the earlier tiles' sums. The span representations ``g [R, 2D]`` are formed on chip,
# block of features by block of features, and never written to memory.
#
# forward:  scores (MLP kernel, grid rows x blocks of A: partial sums of ``v . tanh(q + g W)`` per
#           block of A, summed by torch), masked softmax (torch, [B, T, m]),
#           context (kernel over positions x features, spans walked in k);
# backward: dL/dp = gctx . g (same context kernel), softmax backward (torch),
#           dh = ds v (1 - h^2) (MLP kernel again, in chunks of positions so that dh [rows, A]
#           stays small), then per direction and block of features: dg = p gctx + dh W^T,
#           dW += g^T dh, and dg pushed onto c and log_f (Alg. 1 backwards).


@triton.jit
def _seg_add(f1, v1, f2, v2):
    """Segmented sum: ``f`` marks the first row of a segment (in scan order)."""
    return f1 | f2, tl.where(f2 != 0, v2, v1 + v2)


@triton.jit
def _seg_add2(f1, v1, w1, f2, v2, w2):
    """Two segmented sums sharing one segmentation."""
    return f1 | f2, tl.where(f2 != 0, v2, v1 + v2), tl.where(f2 != 0, w2, w1 + w2)


@triton.jit
def _span_rows(
    pos0, pos_end, tile, T, M, n_chunks, P, R: tl.constexpr, K_DESCENDING: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    """Rows ``[R, 1]`` of a span tile: ``(pos, k, t, row_ok, valid, first, last, k0, pos_first)``.

    Not ``CHUNKED``: the tile holds ``P`` whole positions (``P * M <= R`` rows, the rest padding).
    ``CHUNKED`` (``m > R``, ``P = 1``): a position's spans are split over ``n_chunks`` tiles of ``R``
    rows; this tile holds span number ``k0 .. k0 + R - 1`` of position ``pos_first`` (numbered in scan
    order: ``k`` ascending, or descending from ``m - 1`` with ``K_DESCENDING``). ``first`` / ``last``
    mark the first / last row of each segment (a position, or its part in this tile).
    """
    i = tl.arange(0, R)[:, None]
    if CHUNKED:
        k0 = (tile % n_chunks) * R
        pos_first = (pos0 + tile // n_chunks).to(tl.int64)
        within = k0 + i
        pos = pos_first + 0 * i
        row_ok = (within < M) & (pos < pos_end)
        first = i == 0
        last = row_ok & ((within == M - 1) | (i == R - 1))
    else:
        k0 = 0
        pos_first = pos0 + tile * P
        within = i % M
        pos = (pos0 + tile * P + i // M).to(tl.int64)
        row_ok = (i < P * M) & (pos < pos_end)
        first = within == 0
        last = row_ok & (within == M - 1)
    if K_DESCENDING:
        k = M - 1 - within
    else:
        k = within
    t = pos % T
    valid = row_ok & (t >= k)
    return pos, k, t, row_ok, valid, first, last, k0, pos_first


@triton.jit
def _span_block(
    c_ptr, lf_ptr, pos, k, t, valid, first, d, T, D, k0, pos_first, REVERSE: tl.constexpr, CHUNKED: tl.constexpr,
):
    """``g [R, BD]`` of one direction for span rows in ascending k (window products by a segmented scan).

    In a tile that starts at span ``k0 > 0`` of its position, the window sums start with the ``k0``
    gates ``log_f_{t-k0+1} .. log_f_t`` of the spans in earlier tiles.
    """
    ok = valid & (d < D)
    lf = tl.load(lf_ptr + (pos - k) * D + d, mask=ok, other=0.0).to(tl.float32)
    flags = (first & (d >= 0)).to(tl.int32)
    _, window = tl.associative_scan((flags, lf), 0, _seg_add)
    if CHUNKED:
        t_first = pos_first % T
        for back in range(0, k0):
            # (the scalar test is broadcast before the &: Triton's interpreter rejects a scalar & tensor mask)
            gate_ok = (t_first - back + 0 * d >= 0) & (d < D)
            window += tl.load(lf_ptr + (pos_first - back) * D + d, mask=gate_ok, other=0.0).to(tl.float32)
    decay = tl.exp(window)
    if REVERSE:
        head = tl.load(c_ptr + (pos - k) * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos + 1) * D + d, mask=ok & (t + 1 < T), other=0.0).to(tl.float32)
    else:
        head = tl.load(c_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos - k - 1) * D + d, mask=ok & (t - k - 1 >= 0), other=0.0).to(tl.float32)
    return tl.where(ok, head - other * decay, 0.0)


@_length_free_jit('pos0', 'pos_end', 'T', 'n_chunks', 'P')
def _span_mlp_kernel(
    q_ptr, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_ptr, ds_ptr, out_ptr, gv_ptr,
    pos0, pos_end, T, D, A, M, NA, n_chunks,
    BACKWARD: tl.constexpr, P, R: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    """``h = tanh(q + g W)`` for a tile of span rows and a block of A.

    forward: ``out [rows, NA]`` gets the partial score ``sum_{a in block} v_a h_a`` (row ``pos * M + k``);
    backward: ``out [chunk rows, A]`` gets ``dh = ds v (1 - h^2)`` (row ``(pos - pos0) * M + k``),
    ``gv`` the block's ``sum_rows ds h`` (atomically).
    """
    tile = tl.program_id(0)
    a_block = tl.program_id(1)
    pos, k, t, row_ok, valid, first, _, k0, pos_first = _span_rows(
        pos0, pos_end, tile, T, M, n_chunks, P, R, False, CHUNKED
    )
    a = a_block * BA + tl.arange(0, BA)[None, :]
    a_ok = a < A
    proj = tl.zeros([R, BA], dtype=tl.float32)
    for d0 in range(0, D, BD):
        d = d0 + tl.arange(0, BD)[None, :]
        w_rows = (d0 + tl.arange(0, BD))[:, None]
        w_ok = (w_rows < D) & a_ok
        gf = _span_block(cf_ptr, lff_ptr, pos, k, t, valid, first, d, T, D, k0, pos_first, False, CHUNKED)
        wf = tl.load(w_ptr + w_rows * A + a, mask=w_ok, other=0.0).to(tl.float32)
        proj += tl.dot(gf, wf, input_precision=_DOT_PRECISION)
        gb = _span_block(cb_ptr, lfb_ptr, pos, k, t, valid, first, d, T, D, k0, pos_first, True, CHUNKED)
        wb = tl.load(w_ptr + (D + w_rows) * A + a, mask=w_ok, other=0.0).to(tl.float32)
        proj += tl.dot(gb, wb, input_precision=_DOT_PRECISION)
    q = tl.load(q_ptr + pos * A + a, mask=row_ok & a_ok, other=0.0).to(tl.float32)
    v = tl.load(v_ptr + a, mask=a_ok, other=0.0).to(tl.float32)
    hidden = _tanh(q + proj)
    if BACKWARD:
        ds = tl.load(ds_ptr + pos * M + k, mask=valid, other=0.0).to(tl.float32)
        dh = ds * v * (1.0 - hidden * hidden)
        tl.store(out_ptr + ((pos - pos0) * M + k) * A + a, dh, mask=row_ok & a_ok)
        grad_v = tl.sum(ds * hidden, axis=0)
        a_vec = a_block * BA + tl.arange(0, BA)
        tl.atomic_add(gv_ptr + a_vec, grad_v, mask=a_vec < A, sem="relaxed")
    else:
        partial = tl.sum(hidden * v, axis=1)[:, None]
        tl.store(out_ptr + (pos * M + k) * NA + a_block, partial, mask=row_ok)


@_length_free_jit('NPOS', 'T')
def _span_context_kernel(
    cf_ptr, lff_ptr, cb_ptr, lfb_ptr, p_ptr, gctx_ptr, out_ptr, NPOS, T, D, M,
    BACKWARD: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr,
):
    """Spans walked in k for a block of positions x features (window products updated one gate a step).

    forward: ``out [NPOS, 2D]`` = ``sum_k p_k g_k``; backward: ``out [NPOS, M, ND]`` gets this feature
    block's part of ``gctx . g_k`` (summed over the blocks by the caller).
    """
    pos = (tl.program_id(0) * BT + tl.arange(0, BT)).to(tl.int64)[:, None]
    d_block = tl.program_id(1)
    d = d_block * BD + tl.arange(0, BD)[None, :]
    t = pos % T
    ok = (pos < NPOS) & (d < D)
    head_f = tl.load(cf_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
    other_b = tl.load(cb_ptr + (pos + 1) * D + d, mask=ok & (t + 1 < T), other=0.0).to(tl.float32)
    window_f = tl.zeros([BT, BD], dtype=tl.float32)
    window_b = tl.zeros([BT, BD], dtype=tl.float32)
    if BACKWARD:
        gctx_f = tl.load(gctx_ptr + pos * (2 * D) + d, mask=ok, other=0.0).to(tl.float32)
        gctx_b = tl.load(gctx_ptr + pos * (2 * D) + D + d, mask=ok, other=0.0).to(tl.float32)
    else:
        acc_f = tl.zeros([BT, BD], dtype=tl.float32)
        acc_b = tl.zeros([BT, BD], dtype=tl.float32)
    for k in range(0, M):
        span_ok = ok & (t - k >= 0)
        window_f += tl.load(lff_ptr + (pos - k) * D + d, mask=span_ok, other=0.0).to(tl.float32)
        window_b += tl.load(lfb_ptr + (pos - k) * D + d, mask=span_ok, other=0.0).to(tl.float32)
        other_f = tl.load(cf_ptr + (pos - k - 1) * D + d, mask=span_ok & (t - k - 1 >= 0), other=0.0).to(tl.float32)
        head_b = tl.load(cb_ptr + (pos - k) * D + d, mask=span_ok, other=0.0).to(tl.float32)
        gf = tl.where(span_ok, head_f - other_f * tl.exp(window_f), 0.0)
        gb = tl.where(span_ok, head_b - other_b * tl.exp(window_b), 0.0)
        if BACKWARD:
            part = tl.sum(gctx_f * gf + gctx_b * gb, axis=1)[:, None]
            ND = tl.num_programs(1)
            tl.store(out_ptr + (pos * M + k) * ND + d_block, part, mask=pos < NPOS)
        else:
            p_k = tl.load(p_ptr + pos * M + k, mask=(pos < NPOS) & (t - k >= 0), other=0.0).to(tl.float32)
            acc_f += p_k * gf
            acc_b += p_k * gb
    if not BACKWARD:
        tl.store(out_ptr + pos * (2 * D) + d, acc_f.to(out_ptr.dtype.element_ty), mask=ok)
        tl.store(out_ptr + pos * (2 * D) + D + d, acc_b.to(out_ptr.dtype.element_ty), mask=ok)


@_length_free_jit('pos0', 'pos_end', 'T', 'n_chunks', 'P')
def _span_grad_kernel(
    c_ptr, lf_ptr, w_ptr, dh_ptr, p_ptr, gctx_ptr, gc_ptr, glf_ptr, gw_ptr,
    pos0, pos_end, T, D, A, M, offset, n_chunks,
    REVERSE: tl.constexpr, HAS_MLP: tl.constexpr, FUSED_DW: tl.constexpr, P, R: tl.constexpr,
    BD: tl.constexpr, BA: tl.constexpr, CHUNKED: tl.constexpr,
):
    """One direction's backward for a tile of span rows (k descending) x a block of features.

    ``dg = p gctx + dh W^T`` (this direction's rows ``offset + d`` of ``w_span``), ``dW += g^T dh``
    (atomically), then Alg. 1 backwards: forward ``g = c_t - c_{t-k-1} e``, backward
    ``g = c_{t-k} - c_{t+1} e`` with ``e = exp(sum_{j=t-k..t} log_f_j)``; ``log_f_j`` gets
    ``-dg c_other e`` of every span covering ``j``, i.e. ``log_f_{t-k}`` the sum over ``k' >= k``
    (a segmented scan along the rows, which come in descending k). A position split over several tiles
    (``m > R``) adds each tile's total to the ``log_f`` of the shorter spans, which the later tiles hold.
    """
    tile = tl.program_id(0)
    d_block = tl.program_id(1)
    pos, k, t, row_ok, valid, first, last, k0, pos_first = _span_rows(
        pos0, pos_end, tile, T, M, n_chunks, P, R, True, CHUNKED
    )
    d = d_block * BD + tl.arange(0, BD)[None, :]
    ok = valid & (d < D)
    p_k = tl.load(p_ptr + pos * M + k, mask=valid, other=0.0).to(tl.float32)
    grad = p_k * tl.load(gctx_ptr + pos * (2 * D) + offset + d, mask=ok, other=0.0).to(tl.float32)
    dh_rows = (pos - pos0) * M + k
    if HAS_MLP:
        d_cols = d
        for a0 in range(0, A, BA):
            a = a0 + tl.arange(0, BA)[None, :]
            a_rows = (a0 + tl.arange(0, BA))[:, None]
            dh = tl.load(dh_ptr + dh_rows * A + a, mask=row_ok & (a < A), other=0.0)
            w_t = tl.load(w_ptr + (offset + d_cols) * A + a_rows, mask=(a_rows < A) & (d_cols < D), other=0.0)
            grad += tl.dot(dh, w_t.to(tl.float32), input_precision=_DOT_PRECISION)
    grad = tl.where(ok, grad, 0.0)
    # window sums sum_{j=t-k..t} log_f_j, gate by gate (rows are in descending k here)
    window = tl.zeros([R, BD], dtype=tl.float32)
    for back in range(0, M):
        window += tl.load(lf_ptr + (pos - back) * D + d, mask=ok & (back <= k), other=0.0).to(tl.float32)
    decay = tl.exp(window)
    if REVERSE:
        head = tl.load(c_ptr + (pos - k) * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos + 1) * D + d, mask=ok & (t + 1 < T), other=0.0).to(tl.float32)
    else:
        head = tl.load(c_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos - k - 1) * D + d, mask=ok & (t - k - 1 >= 0), other=0.0).to(tl.float32)
    if FUSED_DW:
        rep = tl.where(ok, head - other * decay, 0.0)
        w_rows = (d_block * BD + tl.arange(0, BD))[:, None]
        for a0 in range(0, A, BA):
            a = a0 + tl.arange(0, BA)[None, :]
            dh = tl.load(dh_ptr + dh_rows * A + a, mask=row_ok & (a < A), other=0.0)
            grad_w = tl.dot(tl.trans(rep), dh, input_precision=_DOT_PRECISION)
            tl.atomic_add(gw_ptr + (offset + w_rows) * A + a, grad_w, mask=(w_rows < D) & (a < A), sem="relaxed")
    scaled = grad * decay
    r = -scaled * other
    if REVERSE:
        tl.atomic_add(gc_ptr + (pos - k) * D + d, grad, mask=ok, sem="relaxed")
        shared = scaled  # c_{t+1}: minus the sum over the spans of t
    else:
        tl.atomic_add(gc_ptr + (pos - k - 1) * D + d, -scaled, mask=ok & (t - k - 1 >= 0), sem="relaxed")
        shared = grad  # c_t: the sum over the spans of t
    flags = (first & (d >= 0)).to(tl.int32)
    _, shared_sum, r_sum = tl.associative_scan((flags, shared, r), 0, _seg_add2)
    tl.atomic_add(glf_ptr + (pos - k) * D + d, r_sum, mask=ok, sem="relaxed")
    if CHUNKED:  # one position in this tile: its spans k < M - k0 - R are in later tiles
        total = tl.sum(r, axis=0)[None, :]
        t_first = pos_first % T
        for shorter in range(0, M - k0 - R):
            gate_ok = (t_first - shorter + 0 * d >= 0) & (d < D)
            tl.atomic_add(glf_ptr + (pos_first - shorter) * D + d, total, mask=gate_ok, sem="relaxed")
    last = last & (d < D)  # the last row of each segment holds its total
    if REVERSE:
        tl.atomic_add(gc_ptr + (pos + 1) * D + d, -shared_sum, mask=last & (t + 1 < T), sem="relaxed")
    else:
        tl.atomic_add(gc_ptr + pos * D + d, shared_sum, mask=last, sem="relaxed")


@_length_free_jit('pos0', 'pos_end', 'T', 'n_tiles', 'n_chunks', 'P')
def _span_dw_kernel(
    c_ptr, lf_ptr, dh_ptr, gw_ptr, pos0, pos_end, T, D, A, M, offset, n_tiles, n_chunks,
    REVERSE: tl.constexpr, P, R: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr,
    CHUNKED: tl.constexpr,
):
    """``dW[offset + d block, a block] += g^T dh`` over the row tiles ``split, split + S, ...`` (split-K)."""
    d_block = tl.program_id(0)
    a_block = tl.program_id(1)
    split = tl.program_id(2)
    n_split = tl.num_programs(2)
    d = d_block * BD + tl.arange(0, BD)[None, :]
    a = a_block * BA + tl.arange(0, BA)[None, :]
    acc = tl.zeros([BD, BA], dtype=tl.float32)
    for tile in range(split, n_tiles, n_split):
        pos, k, t, row_ok, valid, first, _, k0, pos_first = _span_rows(
            pos0, pos_end, tile, T, M, n_chunks, P, R, False, CHUNKED
        )
        rep = _span_block(c_ptr, lf_ptr, pos, k, t, valid, first, d, T, D, k0, pos_first, REVERSE, CHUNKED)
        dh = tl.load(dh_ptr + ((pos - pos0) * M + k) * A + a, mask=row_ok & (a < A), other=0.0)
        acc += tl.dot(tl.trans(rep), dh, input_precision=_DOT_PRECISION)
    w_rows = (d_block * BD + tl.arange(0, BD))[:, None]
    tl.atomic_add(gw_ptr + (offset + w_rows) * A + a, acc, mask=(w_rows < D) & (a < A), sem="relaxed")


# tile sizes: MLP kernel (rows x A block, D walked in blocks), gradient kernel (rows x D block,
# A walked in blocks), context kernel (positions x D block). Register use per tile decides them as
# much as speed: compiled for sm_90 (python3 -m induce.devtools.compile_check), the tiles below spill
# nothing but dW's ~60 B per thread in fp32, where the larger backward tiles of the H100 sweep at
# paper size (gradient 128 x 64, dW 64 x 128, the MLP backward's A block of 128; bench/gpu_notes.md,
# v3) spill 0.8-1.1 KB per thread (gradient, dW) and ~100 B (MLP backward) (bench/results/gpu.md, "H100
# compile check"). How the two compare in speed is unmeasured: bench/gpu_notes.md ("v4") times both.
_MLP_R, _MLP_BA, _MLP_BD, _MLP_WARPS = 64, 128, 16, 8
_MLP_BWD_BA = 64  # the backward's dh tile [R, BA] on top of the forward's registers
_GRAD_R, _GRAD_BD, _GRAD_BA, _GRAD_WARPS = 64, 32, 32, 8
_DW_SPLIT = True  # dW in its own split-K kernel (else fused into the gradient kernel, atomics per row tile)
_DW_R, _DW_BD, _DW_BA, _DW_WARPS, _DW_PROGRAMS = 64, 32, 64, 8, 528
_CTX_BT, _CTX_BD, _CTX_WARPS = 32, 64, 8
_DH_CHUNK_BYTES = 16 * 2**20  # the backward's dh scratch [positions * m, A] is at most this large


def _row_tiling(R: int, max_len: int) -> Tuple[int, int]:
    """``(P, n_chunks)`` for tiles of ``R`` span rows: ``P = R // m`` whole positions per tile while the
    ``m`` spans of a position fit (``n_chunks = 1``), else one position split over ``n_chunks = ceil(m / R)``
    tiles. The tile never grows with ``m``: parsing scores every span of a sentence (``m`` up to the
    padded length), and tiles of ``next_power_of_2(m)`` rows would need more shared memory than an
    H100 block has from 129 tokens on (the compile check's shared-memory limit)."""
    if max_len <= R:
        return R // max_len, 1
    return 1, triton.cdiv(max_len, R)


def _row_tiles(n_positions: int, P: int, n_chunks: int) -> int:
    """Row tiles covering ``n_positions`` positions (see :func:`_row_tiling`)."""
    return triton.cdiv(n_positions, P) * n_chunks


def _valid_spans(T: int, max_len: int, device) -> torch.Tensor:
    t = torch.arange(T, device=device)[:, None]
    k = torch.arange(max_len, device=device)[None, :]
    return t >= k  # [T, m]


class _SpanAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, fixed_scores, max_len
    ):
        # scores often feed no loss (PaLM-U, PaLM-RB): their gradient then reaches the backward as None
        ctx.set_materialize_grads(False)
        B, T, D = c_fwd.shape
        M = max_len
        npos = B * T
        has_mlp = fixed_scores is None
        device = c_fwd.device
        valid = _valid_spans(T, M, device)
        if has_mlp:
            A = query.shape[-1]
            P, n_chunks = _row_tiling(_MLP_R, M)
            BA = min(_MLP_BA, _pow2(A))
            NA = triton.cdiv(A, BA)
            partial = torch.empty(npos * M, NA, dtype=torch.float32, device=device)
            if npos * M:
                grid = (_row_tiles(npos, P, n_chunks), NA)
                _span_mlp_kernel[grid](
                    query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, partial, partial, partial,
                    0, npos, T, D, A, M, NA, n_chunks,
                    BACKWARD=False, P=P, R=_MLP_R, BD=_MLP_BD, BA=BA, CHUNKED=n_chunks > 1, num_warps=_MLP_WARPS,
                )
            scores = partial.sum(1).view(B, T, M)
        else:
            A = 1
            scores = fixed_scores.float().expand(B, T, M)
        scores = scores.masked_fill(~valid, float("-inf"))
        weights = torch.softmax(scores, dim=-1).contiguous()  # [B, T, m], 0 on invalid spans
        context = torch.empty(B, T, 2 * D, dtype=c_fwd.dtype, device=device)
        if npos * D:
            grid = (triton.cdiv(npos, _CTX_BT), triton.cdiv(D, _CTX_BD))
            _span_context_kernel[grid](
                c_fwd, logf_fwd, c_bwd, logf_bwd, weights, weights, context, npos, T, D, M,
                BACKWARD=False, BT=_CTX_BT, BD=_CTX_BD, num_warps=_CTX_WARPS,
            )
        ctx.save_for_backward(query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, weights)
        ctx.meta = (has_mlp, A, M)
        return context, scores.to(c_fwd.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_context, grad_scores):  # type: ignore[override]
        query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, weights = ctx.saved_tensors
        has_mlp, A, M = ctx.meta
        B, T, D = c_fwd.shape
        npos = B * T
        device = c_fwd.device
        f32 = dict(dtype=torch.float32, device=device)
        valid = _valid_spans(T, M, device)
        grads = [torch.zeros(B, T, D, **f32) for _ in range(4)]  # c_fwd, logf_fwd, c_bwd, logf_bwd
        grad_q = torch.zeros(B, T, A, **f32) if has_mlp else None
        grad_w = torch.zeros(2 * D, A, **f32) if has_mlp else None
        grad_v = torch.zeros(A, **f32) if has_mlp else None
        if npos * M * D == 0 or (grad_context is None and grad_scores is None):
            return _SpanAttention._cast_grads(ctx, grad_q, grads, grad_w, grad_v)
        if grad_context is None:
            grad_context = torch.zeros(B, T, 2 * D, **f32)
        grad_context = grad_context.contiguous()
        # dL/dp_k = gctx . g_k, then the softmax backward
        ND = triton.cdiv(D, _CTX_BD)
        dot_parts = torch.empty(npos, M, ND, **f32)
        grid = (triton.cdiv(npos, _CTX_BT), ND)
        _span_context_kernel[grid](
            c_fwd, logf_fwd, c_bwd, logf_bwd, weights, grad_context, dot_parts, npos, T, D, M,
            BACKWARD=True, BT=_CTX_BT, BD=_CTX_BD, num_warps=_CTX_WARPS,
        )
        d_weights = dot_parts.sum(-1).view(B, T, M)
        d_scores = weights * (d_weights - (weights * d_weights).sum(-1, keepdim=True))
        if grad_scores is not None:
            d_scores = d_scores + grad_scores.float()
        d_scores = d_scores.masked_fill(~valid, 0.0).contiguous()

        P, n_chunks = _row_tiling(_GRAD_R, M)
        P_mlp, n_chunks_mlp = _row_tiling(_MLP_R, M)
        P_dw, n_chunks_dw = _row_tiling(_DW_R, M)
        if has_mlp:
            BA = min(_MLP_BWD_BA, _pow2(A))
            NA = triton.cdiv(A, BA)
            chunk = max(1, _DH_CHUNK_BYTES // (M * A * 4))  # positions per chunk (tiles never cross pos_end)
            dh = torch.empty(min(chunk, npos) * M, A, **f32)
        else:
            chunk = max(npos, 1)
            dh = grads[0]
        for pos0 in range(0, npos, chunk):
            pos_end = min(npos, pos0 + chunk)
            n = pos_end - pos0
            if has_mlp:
                _span_mlp_kernel[(_row_tiles(n, P_mlp, n_chunks_mlp), NA)](
                    query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, d_scores, dh, grad_v,
                    pos0, pos_end, T, D, A, M, NA, n_chunks_mlp,
                    BACKWARD=True, P=P_mlp, R=_MLP_R, BD=_MLP_BD, BA=BA, CHUNKED=n_chunks_mlp > 1,
                    num_warps=_MLP_WARPS,
                )
                grad_q.view(npos, A)[pos0:pos_end] = dh[: n * M].view(n, M, A).sum(1)
            grid = (_row_tiles(n, P, n_chunks), triton.cdiv(D, _GRAD_BD))
            for c, lf, gc, glf, offset, reverse in (
                (c_fwd, logf_fwd, grads[0], grads[1], 0, False),
                (c_bwd, logf_bwd, grads[2], grads[3], D, True),
            ):
                _span_grad_kernel[grid](
                    c, lf, w_span if has_mlp else c, dh, weights, grad_context, gc, glf,
                    grad_w if has_mlp else gc, pos0, pos_end, T, D, A, M, offset, n_chunks,
                    REVERSE=reverse, HAS_MLP=has_mlp, FUSED_DW=has_mlp and not _DW_SPLIT,
                    P=P, R=_GRAD_R, BD=_GRAD_BD, BA=_GRAD_BA, CHUNKED=n_chunks > 1, num_warps=_GRAD_WARPS,
                )
                if has_mlp and _DW_SPLIT:
                    BA_dw = min(_DW_BA, _pow2(A))
                    n_tiles = _row_tiles(n, P_dw, n_chunks_dw)
                    dw_blocks = (triton.cdiv(D, _DW_BD), triton.cdiv(A, BA_dw))
                    n_split = max(1, min(n_tiles, _DW_PROGRAMS // (dw_blocks[0] * dw_blocks[1])))
                    _span_dw_kernel[dw_blocks + (n_split,)](
                        c, lf, dh, grad_w, pos0, pos_end, T, D, A, M, offset, n_tiles, n_chunks_dw,
                        REVERSE=reverse, P=P_dw, R=_DW_R, BD=_DW_BD, BA=BA_dw, CHUNKED=n_chunks_dw > 1,
                        num_warps=_DW_WARPS,
                    )
        return _SpanAttention._cast_grads(ctx, grad_q, grads, grad_w, grad_v)

    @staticmethod
    def _cast_grads(ctx, grad_q, grads, grad_w, grad_v):
        query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, _ = ctx.saved_tensors
        has_mlp = ctx.meta[0]
        cast = lambda g, like: None if g is None else g.to(like.dtype)  # noqa: E731
        return (
            cast(grad_q, query) if has_mlp else None,
            cast(grads[0], c_fwd), cast(grads[1], logf_fwd), cast(grads[2], c_bwd), cast(grads[3], logf_bwd),
            cast(grad_w, w_span) if has_mlp else None, cast(grad_v, v) if has_mlp else None,
            None, None,
        )


def span_attention(
    query: torch.Tensor,
    c_fwd: torch.Tensor,
    logf_fwd: torch.Tensor,
    c_bwd: torch.Tensor,
    logf_bwd: torch.Tensor,
    w_span: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    max_len: int,
    fixed_scores: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Fused PaLM span attention (convention on :func:`induce.kernels.span_attention`).

    ``fixed_scores`` gets no gradient in this tier (PaLM-RB fixes them).
    """
    contiguous = lambda x: None if x is None else x.contiguous()  # noqa: E731
    c_fwd, logf_fwd = (x.contiguous() for x in torch.broadcast_tensors(c_fwd, logf_fwd))
    c_bwd, logf_bwd = (x.contiguous() for x in torch.broadcast_tensors(c_bwd, logf_bwd))
    if fixed_scores is not None:
        fixed_scores = fixed_scores.detach().to(c_fwd.dtype).contiguous()
        query = w_span = v = None
    return _SpanAttention.apply(
        contiguous(query), c_fwd, logf_fwd, c_bwd, logf_bwd, contiguous(w_span), contiguous(v), fixed_scores, max_len
    )

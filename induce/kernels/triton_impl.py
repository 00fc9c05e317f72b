"""Triton tier: fused kernels with hand-written backward passes (``torch.autograd.Function``).

Imported lazily by :mod:`induce.kernels._dispatch`; Triton reads ``TRITON_INTERPRET`` when the
kernels below are decorated, i.e. when this module is imported. Kernels compute in float32 (inputs
of other dtypes are loaded and converted; outputs take the input dtype). Gradients that several
positions contribute to (span attention, span representations) are accumulated with float32 atomic
adds, so their summation order, and their last bits, may vary from run to run on a GPU.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable


def _pow2(n: int, minimum: int = 16) -> int:
    return max(minimum, triton.next_power_of_2(max(int(n), 1)))


# ========================================================================================= cumax
@triton.jit
def _cumax_fwd_kernel(x_ptr, y_ptr, N, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=-float("inf")).to(tl.float32)
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=0)), 0.0)
    p = e / tl.sum(e, axis=0)
    y = tl.cumsum(p, axis=0, reverse=REVERSE)
    tl.store(y_ptr + row * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _cumax_bwd_kernel(x_ptr, gy_ptr, gx_ptr, N, BLOCK: tl.constexpr, REVERSE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + row * N + offs, mask=mask, other=-float("inf")).to(tl.float32)
    gy = tl.load(gy_ptr + row * N + offs, mask=mask, other=0.0).to(tl.float32)
    e = tl.where(mask, tl.exp(x - tl.max(x, axis=0)), 0.0)
    p = e / tl.sum(e, axis=0)
    # y_i = sum_{j<=i} p_j  =>  dL/dp_j = sum_{i>=j} gy_i (the opposite running sum)
    gp = tl.cumsum(gy, axis=0, reverse=not REVERSE)
    gx = p * (gp - tl.sum(p * gp, axis=0))
    tl.store(gx_ptr + row * N + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)


_CUMAX_MAX_ROW = 65536


class _Cumax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d: torch.Tensor, reverse: bool):  # type: ignore[override]
        R, N = x2d.shape
        y = torch.empty_like(x2d)
        if R:
            _cumax_fwd_kernel[(R,)](x2d, y, N, BLOCK=_pow2(N), REVERSE=reverse)
        ctx.save_for_backward(x2d)
        ctx.reverse = reverse
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy: torch.Tensor):  # type: ignore[override]
        (x2d,) = ctx.saved_tensors
        R, N = x2d.shape
        gx = torch.empty_like(x2d)
        if R:
            _cumax_bwd_kernel[(R,)](x2d, gy.contiguous(), gx, N, BLOCK=_pow2(N), REVERSE=ctx.reverse)
        return gx, None


def cumax(x: torch.Tensor, dim: int = -1, reverse: bool = False) -> torch.Tensor:
    """Fused softmax + running sum, one program per row of ``x`` moved to ``[..., N]``."""
    if x.shape[dim] > _CUMAX_MAX_ROW:
        from induce.kernels import torch_impl  # one block per row; longer rows are not worth a kernel

        return torch_impl.cumax(x, dim=dim, reverse=reverse)
    moved = x.movedim(dim, -1)
    shape = moved.shape
    y = _Cumax.apply(moved.reshape(-1, shape[-1]).contiguous(), reverse)
    return y.reshape(shape).movedim(-1, dim)


# ============================================================================ stick-breaking
@triton.jit
def _alpha_at(d_ptr, q, b, t, k, T, tau, valid):
    """alpha_{t-k} for the query ``q [BT, 1]`` (0 where ``valid`` is false), and its hardtanh input."""
    j = t - k
    ok = valid & (j >= 0) & (j < T)
    dj = tl.load(d_ptr + b * T + j, mask=ok, other=0.0).to(tl.float32)
    x = (q - dj) * tau + 1.0
    alpha = (tl.minimum(tl.maximum(x, -1.0), 1.0) + 1.0) * 0.5
    return tl.where(ok, alpha, 0.0), x, ok


@triton.jit
def _linear_combine(a1, b1, a2, b2):
    """The associative operator of ``c_t = a_t c_{t-1} + b_t``: ``(a1, b1).(a2, b2) = (a1 a2, a2 b1 + b2)``."""
    return a1 * a2, a2 * b1 + b2


@triton.jit
def _stick_fwd_kernel(d_ptr, q_ptr, g_ptr, T, W, tau, BT: tl.constexpr, BW: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    k = tl.arange(0, BW)[None, :]  # factor alpha_{t-k}; slot t-k-1
    row_ok = t < T
    q = tl.load(q_ptr + b * T + t, mask=row_ok, other=0.0).to(tl.float32)
    alpha, _, _ = _alpha_at(d_ptr, q, b, t, k, T, tau, row_ok & (k < W))
    prod = tl.cumprod(alpha, axis=1)  # exact with zero factors
    gate = tl.where(t - k - 1 >= 0, prod, 0.0)
    tl.store(g_ptr + (b * T + t) * W + (W - 1 - k), gate.to(g_ptr.dtype.element_ty), mask=row_ok & (k < W))


@triton.jit
def _stick_bwd_kernel(
    d_ptr, q_ptr, gg_ptr, gq_ptr, gd_ptr, T, W, tau, BT: tl.constexpr, BW: tl.constexpr
):
    """Per position: dL/dq_t into ``gq [B, T]``, dL/dd_{t-k} into ``gd [B, T, W]`` (summed by the caller).

    With ``P_k = prod_{k'<=k} alpha_k'`` and upstream ``gP_k``: ``dL/dalpha_k = (prod_{k'<k} alpha_k') S_k``,
    ``S_k = gP_k + alpha_{k+1} S_{k+1}``, a right-to-left linear scan: no division by a product
    that may be 0. The scan runs over the reversed window index ``r = BW-1-k`` so that it is a forward scan.
    """
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    r = tl.arange(0, BW)[None, :]
    k = BW - 1 - r
    row_ok = t < T
    in_window = row_ok & (k < W)
    q = tl.load(q_ptr + b * T + t, mask=row_ok, other=0.0).to(tl.float32)
    alpha, x, alpha_ok = _alpha_at(d_ptr, q, b, t, k, T, tau, in_window)
    alpha_next, _, _ = _alpha_at(d_ptr, q, b, t, k + 1, T, tau, row_ok & (k + 1 < W))
    alpha_prev, _, _ = _alpha_at(d_ptr, q, b, t, k - 1, T, tau, row_ok & (k >= 1))
    alpha_prev = tl.where(k == 0, 1.0, alpha_prev)
    g_prod = tl.load(gg_ptr + (b * T + t) * W + (W - 1 - k), mask=in_window & (t - k - 1 >= 0), other=0.0)
    _, suffix = tl.associative_scan((alpha_next, g_prod.to(tl.float32)), 1, _linear_combine)
    # exclusive prefix products prod_{k'<k} alpha_k' = reversed-index suffix of alpha_prev
    prefix = tl.cumprod(alpha_prev, axis=1, reverse=True)
    g_alpha = prefix * suffix
    g_x = tl.where(alpha_ok & (x > -1.0) & (x < 1.0), g_alpha * 0.5 * tau, 0.0)
    tl.store(gq_ptr + b * T + t, tl.sum(g_x, axis=1)[:, None], mask=row_ok)
    tl.store(gd_ptr + (b * T + t) * W + k, -g_x, mask=in_window)


class _StickBreaking(torch.autograd.Function):
    @staticmethod
    def forward(ctx, d: torch.Tensor, query: torch.Tensor, window: int, tau: float):  # type: ignore[override]
        B, T = d.shape
        gates = torch.empty(B, T, window, dtype=d.dtype, device=d.device)
        BT = 16
        if B * T and window:
            grid = (B, triton.cdiv(T, BT))
            _stick_fwd_kernel[grid](d, query, gates, T, window, float(tau), BT=BT, BW=_pow2(window, 2))
        ctx.save_for_backward(d, query)
        ctx.window, ctx.tau = window, tau
        return gates

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_gates: torch.Tensor):  # type: ignore[override]
        d, query = ctx.saved_tensors
        B, T = d.shape
        W = ctx.window
        grad_q = torch.zeros(B, T, dtype=torch.float32, device=d.device)
        grad_window = torch.zeros(B, T, W, dtype=torch.float32, device=d.device)
        BT = 16
        if B * T and W:
            _stick_bwd_kernel[(B, triton.cdiv(T, BT))](
                d, query, grad_gates.contiguous(), grad_q, grad_window, T, W, float(ctx.tau), BT=BT, BW=_pow2(W, 2)
            )
        # grad_d[j] = sum_k grad_window[j + k, k]
        grad_d = torch.zeros_like(grad_q)
        for k in range(min(W, T)):
            grad_d[:, : T - k] += grad_window[:, k:, k]
        return grad_d.to(d.dtype), grad_q.to(query.dtype), None, None


def stick_breaking_gates(
    d: torch.Tensor, window: int, tau: float = 20.0, d_next: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """PRPN gates ``[B, T, window]`` (convention on :func:`induce.kernels.stick_breaking_gates`)."""
    d = d.contiguous()
    if d_next is None:
        # The query is d itself; a view keeps autograd summing both gradient paths into d.
        return _StickBreaking.apply(d, d, window, tau)
    return _StickBreaking.apply(d, d_next.contiguous(), window, tau)


# ================================================================================= linear scan
@triton.jit
def _scan_kernel(
    a_ptr, b_ptr, c0_ptr, out_ptr, T, D,
    A_OFFSET: tl.constexpr, HAS_C0: tl.constexpr, REVERSE: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr,
):
    """``out_t = exp(a_{t + A_OFFSET}) out_prev + b_t`` along T (right to left if ``REVERSE``).

    One program per (batch, block of D); T is walked in chunks of ``BT`` steps, each chunk scanned
    in parallel with the associative operator and then combined with the carried state. ``a``
    outside ``[0, T)`` (the shifted gates of the backward pass) means a gate of 0.
    """
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    d_ok = d < D
    if HAS_C0:
        carry = tl.load(c0_ptr + b * D + d, mask=d_ok, other=0.0).to(tl.float32)
    else:
        carry = tl.zeros([BD], dtype=tl.float32)
    rows = tl.arange(0, BT)
    for chunk in range(0, tl.cdiv(T, BT)):
        step = chunk * BT + rows
        if REVERSE:
            t = T - 1 - step
        else:
            t = step
        t_ok = (t >= 0) & (t < T)
        ok = t_ok[:, None] & d_ok[None, :]
        ta = t + A_OFFSET
        a_ok = ((ta >= 0) & (ta < T))[:, None] & ok
        log_a = tl.load(a_ptr + (b * T + ta[:, None]) * D + d[None, :], mask=a_ok, other=0.0).to(tl.float32)
        a = tl.where(a_ok, tl.exp(log_a), tl.where(ok, 0.0, 1.0))  # padding rows are the identity
        x = tl.load(b_ptr + (b * T + t[:, None]) * D + d[None, :], mask=ok, other=0.0).to(tl.float32)
        a_cum, b_cum = tl.associative_scan((a, x), 0, _linear_combine)
        c = a_cum * carry[None, :] + b_cum
        tl.store(out_ptr + (b * T + t[:, None]) * D + d[None, :], c.to(out_ptr.dtype.element_ty), mask=ok)
        carry = tl.sum(tl.where(rows[:, None] == BT - 1, c, 0.0), axis=0)


def _run_scan(
    log_a: torch.Tensor, b: torch.Tensor, c0: Optional[torch.Tensor], a_offset: int, reverse: bool
) -> torch.Tensor:
    B, T, D = b.shape
    out = torch.empty_like(b)
    if B * T * D:
        BD = min(64, _pow2(D))
        grid = (B, triton.cdiv(D, BD))
        _scan_kernel[grid](
            log_a, b, c0 if c0 is not None else b, out, T, D,
            A_OFFSET=a_offset, HAS_C0=c0 is not None, REVERSE=reverse, BT=32, BD=BD,
        )
    return out


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_f, u, c0, reverse):  # type: ignore[override]
        c0c = c0.contiguous() if c0 is not None else None
        c = _run_scan(log_f, u, c0c, 0, reverse)
        ctx.save_for_backward(log_f, c, c0c)
        ctx.reverse, ctx.has_c0 = reverse, c0 is not None
        return c

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_c: torch.Tensor):  # type: ignore[override]
        log_f, c, c0 = ctx.saved_tensors
        reverse = ctx.reverse
        # g_t = grad_t + f_next g_next, next = t+1 (t-1 when reversed): the opposite scan, gates shifted.
        g = _run_scan(log_f, grad_c.contiguous(), None, -1 if reverse else 1, not reverse)
        f = torch.exp(log_f)
        initial = c0[:, None] if ctx.has_c0 else torch.zeros_like(c[:, :1])
        if reverse:
            c_prev = torch.cat([c[:, 1:], initial], dim=1)
        else:
            c_prev = torch.cat([initial, c[:, :-1]], dim=1)
        grad_log_f = g * f * c_prev
        grad_c0 = None
        if ctx.has_c0:
            first = -1 if reverse else 0
            grad_c0 = f[:, first] * g[:, first]
        return grad_log_f, g, grad_c0, None


def linear_scan(
    log_f: torch.Tensor, u: torch.Tensor, c0: Optional[torch.Tensor] = None, reverse: bool = False
) -> torch.Tensor:
    """``c_t = f_t c_{t-1} + u_t`` (or right to left), chunked parallel scan."""
    log_f, u = torch.broadcast_tensors(log_f, u)
    return _LinearScan.apply(log_f.contiguous(), u.contiguous(), c0, reverse)


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


@triton.jit
def _span_repr_fwd_kernel(c_ptr, lf_ptr, out_ptr, T, D, M, REVERSE: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr):
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    d = (tl.program_id(2) * BD + tl.arange(0, BD))[None, :]
    for k in range(0, M):
        rep, _, _, _ = _span_tile(c_ptr, lf_ptr, b, t, k, d, T, D, REVERSE)
        tl.store(out_ptr + ((b * T + t) * M + k) * D + d, rep.to(out_ptr.dtype.element_ty), mask=(t < T) & (d < D))


@triton.jit
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
    def backward(ctx, grad_out: torch.Tensor):  # type: ignore[override]
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
@triton.jit
def _tanh(x):
    # 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1 (exp overflow gives inf -> 1)
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _span_scores_row(
    q_tile, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_tile, b, t, k, T, D, A,
    BD: tl.constexpr, BA: tl.constexpr,
):
    """``tanh(q + g_k @ w_span)`` ``[BT, BA]`` for span length ``k``, the ``g_k`` formed tile by tile on chip."""
    a = tl.arange(0, BA)[None, :]
    proj = tl.zeros([t.shape[0], BA], dtype=tl.float32)
    for d0 in range(0, D, BD):
        d = d0 + tl.arange(0, BD)[None, :]
        w_rows = (d0 + tl.arange(0, BD))[:, None]
        w_ok = (w_rows < D) & (a < A)
        gf, _, _, _ = _span_tile(cf_ptr, lff_ptr, b, t, k, d, T, D, False)
        gb, _, _, _ = _span_tile(cb_ptr, lfb_ptr, b, t, k, d, T, D, True)
        wf = tl.load(w_ptr + w_rows * A + a, mask=w_ok, other=0.0).to(tl.float32)
        wb = tl.load(w_ptr + (D + w_rows) * A + a, mask=w_ok, other=0.0).to(tl.float32)
        proj += tl.dot(gf, wf, input_precision=_DOT_PRECISION)
        proj += tl.dot(gb, wb, input_precision=_DOT_PRECISION)
    return _tanh(q_tile + proj)


@triton.jit
def _column(x, cols, k):
    """Column ``k`` of ``x [BT, BM]`` as ``[BT, 1]``."""
    return tl.sum(tl.where(cols == k, x, 0.0), axis=1)[:, None]


@triton.jit
def _masked_softmax(s, row_ok):
    top = tl.where(row_ok, tl.max(s, axis=1)[:, None], 0.0)
    p = tl.where(s == -float("inf"), 0.0, tl.exp(s - top))
    total = tl.sum(p, axis=1)[:, None]
    return p / tl.where(total > 0, total, 1.0)


@triton.jit
def _span_attn_fwd_kernel(
    q_ptr, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_ptr, fixed_ptr, ctx_ptr, scores_ptr,
    T, D, A, M,
    HAS_MLP: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr, BM: tl.constexpr,
):
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    row_ok = t < T
    cols = tl.arange(0, BM)[None, :]
    a = tl.arange(0, BA)[None, :]
    if HAS_MLP:
        q_tile = tl.load(q_ptr + (b * T + t) * A + a, mask=row_ok & (a < A), other=0.0).to(tl.float32)
        v_tile = tl.load(v_ptr + a, mask=a < A, other=0.0).to(tl.float32)
    scores = tl.full([BT, BM], -float("inf"), dtype=tl.float32)
    for k in range(0, M):
        if HAS_MLP:
            hidden = _span_scores_row(q_tile, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_tile, b, t, k, T, D, A, BD, BA)
            s = tl.sum(hidden * v_tile, axis=1)[:, None]
        else:
            s = tl.load(fixed_ptr + k + 0 * t).to(tl.float32)
        scores = tl.where((cols == k) & row_ok & (t - k >= 0), s, scores)
    tl.store(scores_ptr + (b * T + t) * M + cols, scores.to(scores_ptr.dtype.element_ty), mask=row_ok & (cols < M))
    weights = _masked_softmax(scores, row_ok)
    # context = sum_k w_k g_k, feature block by feature block, the g_k recomputed on chip
    for d0 in range(0, D, BD):
        d = d0 + tl.arange(0, BD)[None, :]
        acc_f = tl.zeros([BT, BD], dtype=tl.float32)
        acc_b = tl.zeros([BT, BD], dtype=tl.float32)
        for k in range(0, M):
            w_k = _column(weights, cols, k)
            gf, _, _, _ = _span_tile(cf_ptr, lff_ptr, b, t, k, d, T, D, False)
            gb, _, _, _ = _span_tile(cb_ptr, lfb_ptr, b, t, k, d, T, D, True)
            acc_f += w_k * gf
            acc_b += w_k * gb
        out_ok = row_ok & (d < D)
        tl.store(ctx_ptr + (b * T + t) * (2 * D) + d, acc_f.to(ctx_ptr.dtype.element_ty), mask=out_ok)
        tl.store(ctx_ptr + (b * T + t) * (2 * D) + D + d, acc_b.to(ctx_ptr.dtype.element_ty), mask=out_ok)


@triton.jit
def _span_attn_bwd_kernel(
    q_ptr, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_ptr, scores_ptr, gctx_ptr, gscores_ptr,
    gq_ptr, gcf_ptr, glff_ptr, gcb_ptr, glfb_ptr, gw_ptr, gv_ptr, dh_ptr,
    T, D, A, M,
    HAS_MLP: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr, BM: tl.constexpr,
):
    """Backward of :func:`_span_attn_fwd_kernel` for one block of positions.

    1. weights from the saved scores; ``dL/dw_k = gctx . g_k`` (g_k recomputed);
    2. ``ds = w (dw - sum w dw) + gscores``; per k the MLP is recomputed and
       ``dh_k = ds_k v (1 - tanh^2)`` is kept in the ``dh`` scratch ``[B, T, M, A]`` (the MLP width,
       not the ``2D`` span width); ``dq += dh_k``, ``dv += ds_k tanh``;
    3. per direction and feature block, spans in decreasing k: ``dg_k = w_k gctx + dh_k @ W^T``,
       ``dW += g_k^T dh_k``, and ``dg_k`` is pushed to ``c`` and ``log_f`` (see
       :func:`_span_repr_scatter_grad`).
    """
    b = tl.program_id(0).to(tl.int64)
    t = (tl.program_id(1) * BT + tl.arange(0, BT))[:, None]
    row_ok = t < T
    cols = tl.arange(0, BM)[None, :]
    a = tl.arange(0, BA)[None, :]
    score_ok = row_ok & (cols < M) & (t - cols >= 0)
    scores = tl.load(scores_ptr + (b * T + t) * M + cols, mask=score_ok, other=-float("inf")).to(tl.float32)
    weights = _masked_softmax(scores, row_ok)
    d_weights = tl.zeros([BT, BM], dtype=tl.float32)
    for k in range(0, M):
        dot_k = tl.zeros([BT, 1], dtype=tl.float32)
        for d0 in range(0, D, BD):
            d = d0 + tl.arange(0, BD)[None, :]
            ok = row_ok & (d < D)
            gf, _, _, _ = _span_tile(cf_ptr, lff_ptr, b, t, k, d, T, D, False)
            gb, _, _, _ = _span_tile(cb_ptr, lfb_ptr, b, t, k, d, T, D, True)
            ctx_f = tl.load(gctx_ptr + (b * T + t) * (2 * D) + d, mask=ok, other=0.0).to(tl.float32)
            ctx_b = tl.load(gctx_ptr + (b * T + t) * (2 * D) + D + d, mask=ok, other=0.0).to(tl.float32)
            dot_k += tl.sum(ctx_f * gf + ctx_b * gb, axis=1)[:, None]
        d_weights = tl.where(cols == k, dot_k, d_weights)
    d_scores = weights * (d_weights - tl.sum(weights * d_weights, axis=1)[:, None])
    d_scores += tl.load(gscores_ptr + (b * T + t) * M + cols, mask=score_ok, other=0.0).to(tl.float32)
    d_scores = tl.where(score_ok, d_scores, 0.0)

    if HAS_MLP:
        q_tile = tl.load(q_ptr + (b * T + t) * A + a, mask=row_ok & (a < A), other=0.0).to(tl.float32)
        v_tile = tl.load(v_ptr + a, mask=a < A, other=0.0).to(tl.float32)
        grad_q = tl.zeros([BT, BA], dtype=tl.float32)
        grad_v = tl.zeros([BA], dtype=tl.float32)
        for k in range(0, M):
            hidden = _span_scores_row(q_tile, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_tile, b, t, k, T, D, A, BD, BA)
            ds_k = _column(d_scores, cols, k)
            dh = ds_k * v_tile * (1.0 - hidden * hidden)
            grad_q += dh
            grad_v += tl.sum(ds_k * hidden, axis=0)
            tl.store(dh_ptr + ((b * T + t) * M + k) * A + a, dh, mask=row_ok & (a < A))
        tl.store(gq_ptr + (b * T + t) * A + a, grad_q, mask=row_ok & (a < A))
        tl.atomic_add(gv_ptr + tl.arange(0, BA), grad_v, mask=tl.arange(0, BA) < A)
        tl.debug_barrier()  # dh is read back below by other threads of this program

    _span_attn_bwd_direction(
        cf_ptr, lff_ptr, gcf_ptr, glff_ptr, w_ptr, gw_ptr, dh_ptr, gctx_ptr, weights, b, t, cols, T, D, A, M,
        0, False, HAS_MLP, BT, BD, BA,
    )
    _span_attn_bwd_direction(
        cb_ptr, lfb_ptr, gcb_ptr, glfb_ptr, w_ptr, gw_ptr, dh_ptr, gctx_ptr, weights, b, t, cols, T, D, A, M,
        D, True, HAS_MLP, BT, BD, BA,
    )


@triton.jit
def _span_attn_bwd_direction(
    c_ptr, lf_ptr, gc_ptr, glf_ptr, w_ptr, gw_ptr, dh_ptr, gctx_ptr, weights, b, t, cols, T, D, A, M,
    offset, REVERSE: tl.constexpr, HAS_MLP: tl.constexpr, BT: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr,
):
    """Step 3 of :func:`_span_attn_bwd_kernel` for one direction (features ``offset .. offset + D``)."""
    row_ok = t < T
    a = tl.arange(0, BA)[None, :]
    for d0 in range(0, D, BD):
        d = d0 + tl.arange(0, BD)[None, :]
        w_cols = (d0 + tl.arange(0, BD))[None, :]
        a_rows = tl.arange(0, BA)[:, None]
        ctx_grad = tl.load(gctx_ptr + (b * T + t) * (2 * D) + offset + d, mask=row_ok & (d < D), other=0.0)
        ctx_grad = ctx_grad.to(tl.float32)
        if HAS_MLP:
            # W^T block [BA, BD] of this direction's rows of w_span
            w_t = tl.load(w_ptr + (offset + w_cols) * A + a_rows, mask=(w_cols < D) & (a_rows < A), other=0.0)
            w_t = w_t.to(tl.float32)
            grad_w = tl.zeros([BD, BA], dtype=tl.float32)
        acc_local = tl.zeros([BT, BD], dtype=tl.float32)
        acc_suffix = tl.zeros([BT, BD], dtype=tl.float32)
        for step in range(0, M):
            k = M - 1 - step
            rep, decay, other, valid = _span_tile(c_ptr, lf_ptr, b, t, k, d, T, D, REVERSE)
            grad_span = _column(weights, cols, k) * ctx_grad
            if HAS_MLP:
                dh = tl.load(dh_ptr + ((b * T + t) * M + k) * A + a, mask=row_ok & (a < A), other=0.0)
                grad_span += tl.dot(dh, w_t, input_precision=_DOT_PRECISION)
                grad_w += tl.dot(tl.trans(rep), dh, input_precision=_DOT_PRECISION)
            acc_local, acc_suffix = _span_repr_scatter_grad(
                grad_span, decay, other, valid, gc_ptr, glf_ptr, b, t, k, d, T, D, acc_local, acc_suffix, REVERSE
            )
        _flush_local(gc_ptr, acc_local, b, t, d, T, D, REVERSE)
        if HAS_MLP:
            w_rows = (d0 + tl.arange(0, BD))[:, None]
            tl.atomic_add(gw_ptr + (offset + w_rows) * A + a, grad_w, mask=(w_rows < D) & (a < A))


class _SpanAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, fixed_scores, max_len
    ):
        B, T, D = c_fwd.shape
        has_mlp = fixed_scores is None
        A = query.shape[-1] if has_mlp else 1
        context = torch.empty(B, T, 2 * D, dtype=c_fwd.dtype, device=c_fwd.device)
        scores = torch.empty(B, T, max_len, dtype=c_fwd.dtype, device=c_fwd.device)
        dummy = c_fwd
        blocks = dict(HAS_MLP=has_mlp, BT=_BT, BD=_BD, BA=_pow2(A), BM=_pow2(max_len, 2))
        if B * T:
            _span_attn_fwd_kernel[(B, triton.cdiv(T, _BT))](
                query if has_mlp else dummy, c_fwd, logf_fwd, c_bwd, logf_bwd,
                w_span if has_mlp else dummy, v if has_mlp else dummy,
                dummy if has_mlp else fixed_scores, context, scores, T, D, A, max_len, **blocks,
            )
        ctx.save_for_backward(query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, scores)
        ctx.meta = (has_mlp, A, max_len, blocks)
        return context, scores

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_context, grad_scores):  # type: ignore[override]
        query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, scores = ctx.saved_tensors
        has_mlp, A, max_len, blocks = ctx.meta
        B, T, D = c_fwd.shape
        f32 = dict(dtype=torch.float32, device=c_fwd.device)
        grad_context = torch.zeros(B, T, 2 * D, **f32) if grad_context is None else grad_context.contiguous()
        grad_scores = torch.zeros(B, T, max_len, **f32) if grad_scores is None else grad_scores.contiguous()
        grads = [torch.zeros(B, T, D, **f32) for _ in range(4)]  # c_fwd, logf_fwd, c_bwd, logf_bwd
        grad_q = torch.zeros(B, T, A, **f32) if has_mlp else None
        grad_w = torch.zeros(2 * D, A, **f32) if has_mlp else None
        grad_v = torch.zeros(A, **f32) if has_mlp else None
        dh = torch.empty(B, T, max_len, A, **f32) if has_mlp else None
        dummy = grads[0]
        if B * T:
            _span_attn_bwd_kernel[(B, triton.cdiv(T, _BT))](
                query if has_mlp else dummy, c_fwd, logf_fwd, c_bwd, logf_bwd,
                w_span if has_mlp else dummy, v if has_mlp else dummy, scores, grad_context, grad_scores,
                grad_q if has_mlp else dummy, *grads,
                grad_w if has_mlp else dummy, grad_v if has_mlp else dummy, dh if has_mlp else dummy,
                T, D, A, max_len, **blocks,
            )
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

"""Triton tier: fused kernels with hand-written backward passes (``torch.autograd.Function``).

Imported lazily by :mod:`induce.kernels._dispatch`; Triton reads ``TRITON_INTERPRET`` when the
kernels below are decorated, i.e. when this module is imported. Kernels compute in float32 (inputs
of other dtypes are loaded and converted; outputs take the input dtype). Gradients that several
positions contribute to (span attention, span representations) are accumulated with float32 atomic
adds, so their summation order, and their last bits, may vary from run to run on a GPU.

Here: cumax, the ON-LSTM cell step, stick-breaking gates and linear scans; PaLM's span kernels are in
:mod:`induce.kernels.recurrent.triton_span` and the helpers both use in :mod:`induce.kernels.triton_base`.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch
import triton
import triton.language as tl
from torch.autograd.function import once_differentiable

from induce.kernels.triton_base import _length_free_jit, _pow2, _tanh


# ========================================================================================= cumax
# Several rows per program (``ROWS`` x ``BLOCK`` tile, one warp per row where the row fits): the
# max/sum reductions and the running sum then stay inside a warp, and each program moves enough
# bytes to keep the memory system busy (one 400-wide row per program reaches ~47% of an H100's copy
# bandwidth, bench/gpu_notes.md).
@_length_free_jit('R')
def _cumax_fwd_kernel(x_ptr, y_ptr, R, N, BLOCK: tl.constexpr, ROWS: tl.constexpr, REVERSE: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    mask = (rows < R) & (offs < N)
    x = tl.load(x_ptr + rows * N + offs, mask=mask, other=-float("inf")).to(tl.float32)
    top = tl.max(x, axis=1)[:, None]
    e = tl.where(mask, tl.exp(x - tl.where(rows < R, top, 0.0)), 0.0)
    total = tl.sum(e, axis=1)[:, None]
    p = e / tl.where(total > 0, total, 1.0)
    y = tl.cumsum(p, axis=1, reverse=REVERSE)
    tl.store(y_ptr + rows * N + offs, y.to(y_ptr.dtype.element_ty), mask=mask)


@_length_free_jit('R')
def _cumax_bwd_kernel(x_ptr, gy_ptr, gx_ptr, R, N, BLOCK: tl.constexpr, ROWS: tl.constexpr, REVERSE: tl.constexpr):
    rows = (tl.program_id(0) * ROWS + tl.arange(0, ROWS)).to(tl.int64)[:, None]
    offs = tl.arange(0, BLOCK)[None, :]
    mask = (rows < R) & (offs < N)
    x = tl.load(x_ptr + rows * N + offs, mask=mask, other=-float("inf")).to(tl.float32)
    gy = tl.load(gy_ptr + rows * N + offs, mask=mask, other=0.0).to(tl.float32)
    top = tl.max(x, axis=1)[:, None]
    e = tl.where(mask, tl.exp(x - tl.where(rows < R, top, 0.0)), 0.0)
    total = tl.sum(e, axis=1)[:, None]
    p = e / tl.where(total > 0, total, 1.0)
    # y_i = sum_{j<=i} p_j  =>  dL/dp_j = sum_{i>=j} gy_i (the opposite running sum)
    gp = tl.cumsum(gy, axis=1, reverse=not REVERSE)
    gx = p * (gp - tl.sum(p * gp, axis=1)[:, None])
    tl.store(gx_ptr + rows * N + offs, gx.to(gx_ptr.dtype.element_ty), mask=mask)


_CUMAX_MAX_ROW = 65536
_CUMAX_TILE = 4096  # elements per program (ROWS x BLOCK) for short rows


def _cumax_launch(N: int):
    """``(BLOCK, ROWS, num_warps)`` for rows of length ``N``: a warp per row while rows are short."""
    block = _pow2(N)
    rows = max(1, _CUMAX_TILE // block)
    warps = min(16, max(4, rows if rows > 1 else block // 512))
    return block, rows, warps


class _Cumax(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x2d: torch.Tensor, reverse: bool):  # type: ignore[override]
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        R, N = x2d.shape
        y = torch.empty_like(x2d)
        block, rows, warps = _cumax_launch(N)
        if R:
            _cumax_fwd_kernel[(triton.cdiv(R, rows),)](
                x2d, y, R, N, BLOCK=block, ROWS=rows, REVERSE=reverse, num_warps=warps
            )
        ctx.save_for_backward(x2d)
        ctx.reverse = reverse
        return y

    @staticmethod
    @once_differentiable
    def backward(ctx, gy: Optional[torch.Tensor]):  # type: ignore[override]
        if gy is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None
        (x2d,) = ctx.saved_tensors
        R, N = x2d.shape
        gx = torch.empty_like(x2d)
        block, rows, warps = _cumax_launch(N)
        if R:
            _cumax_bwd_kernel[(triton.cdiv(R, rows),)](
                x2d, gy.contiguous(), gx, R, N, BLOCK=block, ROWS=rows, REVERSE=ctx.reverse, num_warps=warps
            )
        return gx, None


def cumax(x: torch.Tensor, dim: int = -1, reverse: bool = False) -> torch.Tensor:
    """Fused softmax + running sum over rows of ``x`` moved to ``[..., N]``, several rows per program."""
    if x.shape[dim] > _CUMAX_MAX_ROW:
        from induce.kernels.recurrent import torch_impl  # one block per row; longer rows are not worth a kernel

        return torch_impl.cumax(x, dim=dim, reverse=reverse)
    moved = x.movedim(dim, -1)
    shape = moved.shape
    y = _Cumax.apply(moved.reshape(-1, shape[-1]).contiguous(), reverse)
    return y.reshape(shape).movedim(-1, dim)


# ================================================================================ ON-LSTM cell
# One program per batch row. The H units are a ``[BP, BC]`` tile, row k = chunk k, column j = unit
# j of the chunk (unit index ``k * C + j``): each chunk's master gates (``[BP]`` vectors from the
# two cumax) broadcast along the columns, and the backward's per-chunk sums are row sums.
@triton.jit
def _row_cumax(ptr, k, k_ok):
    """``(cumsum(softmax(x)), softmax(x))`` of the ``[BP]`` logits at ``ptr + k`` (0 where masked)."""
    x = tl.load(ptr + k, mask=k_ok, other=-float("inf")).to(tl.float32)
    e = tl.where(k_ok, tl.exp(x - tl.max(x, axis=0)), 0.0)
    prob = e / tl.sum(e, axis=0)
    return tl.cumsum(prob, axis=0), prob


@triton.jit
def _onlstm_cell_load(g_ptr, c_ptr, b, P, H, G, C, BP: tl.constexpr, BC: tl.constexpr):
    """Master gates ``[BP]`` and the unit tiles ``[BP, BC]`` of row ``b``: everything one step needs."""
    k = tl.arange(0, BP)
    k_ok = k < P
    row = g_ptr + b * G
    cf, pf = _row_cumax(row, k, k_ok)
    cum_i, pi = _row_cumax(row + P, k, k_ok)
    ci = 1.0 - cum_i
    j = tl.arange(0, BC)[None, :]
    unit = k[:, None] * C + j
    ok = k_ok[:, None] & (j < C)
    zf = tl.load(row + 2 * P + unit, mask=ok, other=0.0).to(tl.float32)
    zi = tl.load(row + 2 * P + H + unit, mask=ok, other=0.0).to(tl.float32)
    zo = tl.load(row + 2 * P + 2 * H + unit, mask=ok, other=0.0).to(tl.float32)
    zg = tl.load(row + 2 * P + 3 * H + unit, mask=ok, other=0.0).to(tl.float32)
    c = tl.load(c_ptr + b * H + unit, mask=ok, other=0.0).to(tl.float32)
    f = tl.sigmoid(zf)
    i = tl.sigmoid(zi)
    o = tl.sigmoid(zo)
    cell = _tanh(zg)
    return k, k_ok, unit, ok, cf, pf, ci, pi, f, i, o, cell, c


@triton.jit
def _onlstm_cell_fwd_kernel(
    g_ptr, c_ptr, h_ptr, cn_ptr, cf_ptr, P, H, G, C, BP: tl.constexpr, BC: tl.constexpr
):
    b = tl.program_id(0).to(tl.int64)
    k, k_ok, unit, ok, cf, pf, ci, pi, f, i, o, cell, c = _onlstm_cell_load(g_ptr, c_ptr, b, P, H, G, C, BP, BC)
    cf2 = cf[:, None]
    ci2 = ci[:, None]
    w = cf2 * ci2
    c_new = (f * w + cf2 - w) * c + (i * w + ci2 - w) * cell
    h = o * _tanh(c_new)
    tl.store(h_ptr + b * H + unit, h.to(h_ptr.dtype.element_ty), mask=ok)
    tl.store(cn_ptr + b * H + unit, c_new.to(cn_ptr.dtype.element_ty), mask=ok)
    tl.store(cf_ptr + b * P + k, cf.to(cf_ptr.dtype.element_ty), mask=k_ok)


@triton.jit
def _onlstm_cell_bwd_kernel(
    g_ptr, c_ptr, gh_ptr, gcn_ptr, gcf_ptr, gg_ptr, gc_ptr, P, H, G, C,
    HAS_GH: tl.constexpr, HAS_GCN: tl.constexpr, HAS_GCF: tl.constexpr, BP: tl.constexpr, BC: tl.constexpr,
):
    """Recomputes the step from ``gates`` and ``c`` and writes ``dL/dgates [B, G]``, ``dL/dc [B, H]``.

    ``dc_t = gc_t + gh o (1 - tanh^2 c_t)``; ``f^ = f w + cf - w`` gives ``dcf = df^ (1 + (f - 1) ci)
    + di^ (i - 1) ci`` per unit (likewise ``dci``), summed over each chunk; then the cumax backward
    (``dL/dlogit = p (s - p.s)``, ``s`` the reverse running sum of ``dL/dcumax``; ``-dci`` for ``ci``).
    """
    b = tl.program_id(0).to(tl.int64)
    k, k_ok, unit, ok, cf, pf, ci, pi, f, i, o, cell, c = _onlstm_cell_load(g_ptr, c_ptr, b, P, H, G, C, BP, BC)
    cf2 = cf[:, None]
    ci2 = ci[:, None]
    w = cf2 * ci2
    f_hat = f * w + cf2 - w
    i_hat = i * w + ci2 - w
    c_new = f_hat * c + i_hat * cell
    tanh_c = _tanh(c_new)
    g_c_new = tl.zeros([BP, BC], dtype=tl.float32)
    g_o = tl.zeros([BP, BC], dtype=tl.float32)
    if HAS_GCN:
        g_c_new += tl.load(gcn_ptr + b * H + unit, mask=ok, other=0.0).to(tl.float32)
    if HAS_GH:
        gh = tl.load(gh_ptr + b * H + unit, mask=ok, other=0.0).to(tl.float32)
        g_c_new += gh * o * (1.0 - tanh_c * tanh_c)
        g_o = gh * tanh_c
    g_f_hat = g_c_new * c
    g_i_hat = g_c_new * cell
    g_w = g_f_hat * (f - 1.0) + g_i_hat * (i - 1.0)
    g_cf = tl.sum(tl.where(ok, g_f_hat + g_w * ci2, 0.0), axis=1)  # [BP]
    g_ci = tl.sum(tl.where(ok, g_i_hat + g_w * cf2, 0.0), axis=1)
    if HAS_GCF:
        g_cf += tl.load(gcf_ptr + b * P + k, mask=k_ok, other=0.0).to(tl.float32)
    # cumax backward; ci = 1 - cumax(v2) gets -g_ci
    s_f = tl.cumsum(g_cf, axis=0, reverse=True)
    g_v1 = pf * (s_f - tl.sum(pf * s_f, axis=0))
    s_i = tl.cumsum(-g_ci, axis=0, reverse=True)
    g_v2 = pi * (s_i - tl.sum(pi * s_i, axis=0))
    out = gg_ptr + b * G
    ty = gg_ptr.dtype.element_ty
    tl.store(out + k, g_v1.to(ty), mask=k_ok)
    tl.store(out + P + k, g_v2.to(ty), mask=k_ok)
    tl.store(out + 2 * P + unit, (g_f_hat * w * f * (1.0 - f)).to(ty), mask=ok)
    tl.store(out + 2 * P + H + unit, (g_i_hat * w * i * (1.0 - i)).to(ty), mask=ok)
    tl.store(out + 2 * P + 2 * H + unit, (g_o * o * (1.0 - o)).to(ty), mask=ok)
    tl.store(out + 2 * P + 3 * H + unit, (g_c_new * i_hat * (1.0 - cell * cell)).to(ty), mask=ok)
    tl.store(gc_ptr + b * H + unit, (g_c_new * f_hat).to(gc_ptr.dtype.element_ty), mask=ok)


def _onlstm_cell_launch(P: int, C: int):
    """``(BP, BC, num_warps)``: the ``[BP, BC]`` unit tile (powers of two) and warps for it.

    A warp per 256 units (8 per thread): compiled for sm_90, the backward of the paper's layers
    (``[128, 16]`` tiles) needs ~156 registers per thread at 8 warps, and spills at 255 with a warp per
    512 units.
    """
    bp, bc = _pow2(P, 2), _pow2(C, 2)
    return bp, bc, min(8, max(1, bp * bc // 256))


class _ONLSTMCell(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gates: torch.Tensor, c: torch.Tensor, n_chunks: int):  # type: ignore[override]
        # Unused outputs (cf when the distances are not in the loss; c_t of a segment's last step)
        # reach the backward as None, not as zero tensors autograd would allocate and fill per step.
        ctx.set_materialize_grads(False)
        B, H = c.shape
        P, C, G = n_chunks, H // n_chunks, gates.shape[1]
        h, c_new = torch.empty_like(c), torch.empty_like(c)
        cf = torch.empty(B, P, dtype=c.dtype, device=c.device)
        bp, bc, warps = _onlstm_cell_launch(P, C)
        if B:
            _onlstm_cell_fwd_kernel[(B,)](gates, c, h, c_new, cf, P, H, G, C, BP=bp, BC=bc, num_warps=warps)
        ctx.save_for_backward(gates, c)
        ctx.n_chunks = n_chunks
        return h, c_new, cf

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_h, grad_c_new, grad_cf):  # type: ignore[override]
        if grad_h is None and grad_c_new is None and grad_cf is None:
            return None, None, None
        gates, c = ctx.saved_tensors
        B, H = c.shape
        P = ctx.n_chunks
        C, G = H // P, gates.shape[1]
        grad_gates, grad_c = torch.empty_like(gates), torch.empty_like(c)
        bp, bc, warps = _onlstm_cell_launch(P, C)
        given = lambda g: None if g is None else g.contiguous()  # noqa: E731
        grad_h, grad_c_new, grad_cf = given(grad_h), given(grad_c_new), given(grad_cf)
        if B:
            _onlstm_cell_bwd_kernel[(B,)](
                gates, c, grad_h if grad_h is not None else c, grad_c_new if grad_c_new is not None else c,
                grad_cf if grad_cf is not None else c, grad_gates, grad_c, P, H, G, C,
                HAS_GH=grad_h is not None, HAS_GCN=grad_c_new is not None, HAS_GCF=grad_cf is not None,
                BP=bp, BC=bc, num_warps=warps,
            )
        return grad_gates, grad_c, None


def onlstm_cell(gates: torch.Tensor, c: torch.Tensor, n_chunks: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The fused ON-LSTM step (convention on :func:`induce.kernels.onlstm_cell`): one kernel forward,
    one backward (which recomputes the step from ``gates`` and ``c`` instead of storing it)."""
    return _ONLSTMCell.apply(gates.contiguous(), c.contiguous(), n_chunks)


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


@_length_free_jit('T')
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


@_length_free_jit('T')
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
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
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
    def backward(ctx, grad_gates: Optional[torch.Tensor]):  # type: ignore[override]
        if grad_gates is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None, None, None
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
def _scan_chunk(a_ptr, b_ptr, b, step, T, D, d, d_ok, A_OFFSET: tl.constexpr, REVERSE: tl.constexpr):
    """One chunk of :func:`_scan_kernel`: positions ``t`` of the ``step``-th steps of the walk, their
    masks, and the loads of ``a`` (shifted by ``A_OFFSET``; masked outside ``[0, T)``) and ``b``."""
    if REVERSE:
        t = T - 1 - step
    else:
        t = step
    ok = ((t >= 0) & (t < T))[:, None] & d_ok[None, :]
    ta = t + A_OFFSET
    a_ok = ((ta >= 0) & (ta < T))[:, None] & ok
    log_a = tl.load(a_ptr + (b * T + ta[:, None]) * D + d[None, :], mask=a_ok, other=0.0)
    x = tl.load(b_ptr + (b * T + t[:, None]) * D + d[None, :], mask=ok, other=0.0)
    return t, ok, a_ok, log_a, x


@_length_free_jit('T')
def _scan_kernel(
    a_ptr, b_ptr, c0_ptr, out_ptr, c_ptr, glf_ptr, T, D,
    A_OFFSET: tl.constexpr, HAS_C0: tl.constexpr, REVERSE: tl.constexpr, GRAD_LOGF: tl.constexpr,
    BT: tl.constexpr, BD: tl.constexpr,
):
    """``out_t = exp(a_{t + A_OFFSET}) out_prev + b_t`` along T (right to left if ``REVERSE``).

    One program per (batch, block of D); T is walked in chunks of ``BT`` steps, each chunk scanned
    in parallel with the associative operator and then combined with the carried state; the next
    chunk is loaded before the current one is scanned, so its memory latency overlaps the scan.
    ``a`` outside ``[0, T)`` (the shifted gates of the backward pass) means a gate of 0.

    ``GRAD_LOGF`` (the backward pass of a scan in the opposite direction, ``A_OFFSET = -+1``): also
    writes ``glf_t = out_t * exp(a_t) * c_prev`` with ``c_prev = c_{t - A_OFFSET}`` (``c0`` from
    ``c0_ptr`` or 0 outside ``[0, T)``), the gradient of the forward scan's ``log_f``.
    """
    b = tl.program_id(0).to(tl.int64)
    d = tl.program_id(1) * BD + tl.arange(0, BD)
    d_ok = d < D
    if HAS_C0 and not GRAD_LOGF:
        carry = tl.load(c0_ptr + b * D + d, mask=d_ok, other=0.0).to(tl.float32)
    else:
        carry = tl.zeros([BD], dtype=tl.float32)
    rows = tl.arange(0, BT)
    n_chunks = tl.cdiv(T, BT)

    # chunk 0, loaded ahead
    t, ok, a_ok, log_a, x = _scan_chunk(a_ptr, b_ptr, b, rows, T, D, d, d_ok, A_OFFSET, REVERSE)
    for chunk in range(0, n_chunks):
        cur_t, cur_ok, cur_a_ok, cur_log_a, cur_x = t, ok, a_ok, log_a, x
        # issue the loads of the next chunk (masked off past the end)
        next_step = (chunk + 1) * BT + rows
        t, ok, a_ok, log_a, x = _scan_chunk(a_ptr, b_ptr, b, next_step, T, D, d, d_ok, A_OFFSET, REVERSE)

        a = tl.where(cur_a_ok, tl.exp(cur_log_a.to(tl.float32)), tl.where(cur_ok, 0.0, 1.0))  # padding: identity
        a_cum, b_cum = tl.associative_scan((a, cur_x.to(tl.float32)), 0, _linear_combine)
        c = a_cum * carry[None, :] + b_cum
        offs = (b * T + cur_t[:, None]) * D + d[None, :]
        tl.store(out_ptr + offs, c.to(out_ptr.dtype.element_ty), mask=cur_ok)
        if GRAD_LOGF:
            tp = cur_t - A_OFFSET
            prev_ok = ((tp >= 0) & (tp < T))[:, None] & cur_ok
            c_prev = tl.load(c_ptr + (b * T + tp[:, None]) * D + d[None, :], mask=prev_ok, other=0.0).to(tl.float32)
            if HAS_C0:
                c_init = tl.load(c0_ptr + b * D + d, mask=d_ok, other=0.0).to(tl.float32)
                c_prev = tl.where(prev_ok, c_prev, c_init[None, :])
            log_f = tl.load(a_ptr + offs, mask=cur_ok, other=0.0).to(tl.float32)
            glf = tl.where(cur_ok, c * tl.exp(log_f) * c_prev, 0.0)
            tl.store(glf_ptr + offs, glf.to(glf_ptr.dtype.element_ty), mask=cur_ok)
        carry = tl.sum(tl.where(rows[:, None] == BT - 1, c, 0.0), axis=0)


_SCAN_BT, _SCAN_BD, _SCAN_WARPS = 32, 64, 4


def _run_scan(
    log_a: torch.Tensor, b: torch.Tensor, c0: Optional[torch.Tensor], a_offset: int, reverse: bool,
    c_fwd: Optional[torch.Tensor] = None,
):
    """The scan; with ``c_fwd`` (backward pass) also the gradient of ``log_a``: returns ``(out, glf)``."""
    B, T, D = b.shape
    out = torch.empty_like(b)
    glf = torch.empty_like(b) if c_fwd is not None else None
    if B * T * D:
        BD = min(_SCAN_BD, _pow2(D))
        grid = (B, triton.cdiv(D, BD))
        _scan_kernel[grid](
            log_a, b, c0 if c0 is not None else b, out,
            c_fwd if c_fwd is not None else b, glf if glf is not None else out, T, D,
            A_OFFSET=a_offset, HAS_C0=c0 is not None, REVERSE=reverse, GRAD_LOGF=c_fwd is not None,
            BT=_SCAN_BT, BD=BD, num_warps=_SCAN_WARPS,
        )
    return out, glf


class _LinearScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, log_f, u, c0, reverse):  # type: ignore[override]
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        c0c = c0.contiguous() if c0 is not None else None
        c, _ = _run_scan(log_f, u, c0c, 0, reverse)
        ctx.save_for_backward(log_f, c, c0c)
        ctx.reverse, ctx.has_c0 = reverse, c0 is not None
        return c

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_c: Optional[torch.Tensor]):  # type: ignore[override]
        if grad_c is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None, None, None
        log_f, c, c0 = ctx.saved_tensors
        reverse = ctx.reverse
        # g_t = grad_t + f_next g_next, next = t+1 (t-1 when reversed): the opposite scan, gates
        # shifted; the same kernel writes grad_log_f_t = g_t f_t c_prev.
        g, grad_log_f = _run_scan(
            log_f, grad_c.contiguous(), c0 if ctx.has_c0 else None, -1 if reverse else 1, not reverse, c_fwd=c
        )
        grad_c0 = None
        if ctx.has_c0:
            first = -1 if reverse else 0
            grad_c0 = torch.exp(log_f[:, first]) * g[:, first]
        return grad_log_f, g, grad_c0, None


def linear_scan(
    log_f: torch.Tensor, u: torch.Tensor, c0: Optional[torch.Tensor] = None, reverse: bool = False
) -> torch.Tensor:
    """``c_t = f_t c_{t-1} + u_t`` (or right to left), chunked parallel scan."""
    log_f, u = torch.broadcast_tensors(log_f, u)
    return _LinearScan.apply(log_f.contiguous(), u.contiguous(), c0, reverse)

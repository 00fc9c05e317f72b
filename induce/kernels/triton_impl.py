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


# Arguments that change with the segment length (T, and the row / position counts derived from it)
# are not specialised on: Triton otherwise compiles a kernel again for each new value class of an
# integer argument (divisible by 16 or not, equal to 1), so AWD-LSTM's random BPTT lengths made
# epoch 1 stall on recompilations. Feature sizes (D, A, M, N) stay specialised: they never change.
LENGTH_ARGS: dict = {}  # kernel name -> its length arguments (read by the tests)


def _length_free_jit(*names: str):
    """``triton.jit`` with ``do_not_specialize`` on the named (length-dependent) integer arguments."""

    def decorate(fn):
        LENGTH_ARGS[fn.__name__] = names
        return triton.jit(fn, do_not_specialize=list(names))

    return decorate


# ========================================================================================= cumax
# Several rows per program (``ROWS`` x ``BLOCK`` tile, one warp per row where the row fits): the
# max/sum reductions and the running sum then stay inside a warp, and each program moves enough
# bytes to keep the memory system busy (one 400-wide row per program reached ~47% of copy bandwidth).
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
    def backward(ctx, gy: torch.Tensor):  # type: ignore[override]
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
        from induce.kernels import torch_impl  # one block per row; longer rows are not worth a kernel

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
    """``(BP, BC, num_warps)``: the ``[BP, BC]`` unit tile (powers of two) and warps for it."""
    bp, bc = _pow2(P, 2), _pow2(C, 2)
    return bp, bc, min(8, max(1, bp * bc // 512))


class _ONLSTMCell(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gates: torch.Tensor, c: torch.Tensor, n_chunks: int):  # type: ignore[override]
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
        c0c = c0.contiguous() if c0 is not None else None
        c, _ = _run_scan(log_f, u, c0c, 0, reverse)
        ctx.save_for_backward(log_f, c, c0c)
        ctx.reverse, ctx.has_c0 = reverse, c0 is not None
        return c

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_c: torch.Tensor):  # type: ignore[override]
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
# Rows are spans: a row tile of ``R`` rows holds ``P = R // M`` whole positions (``P * M`` rows, the
# rest padding), row ``i`` being span ``k`` of position ``pos0 + tile * P + i // M`` (positions
# flattened over ``B * T``). Whole positions per tile keep every "over the spans of one position"
# operation (the forget-gate window products, the gradient sums of the backward) inside a program,
# as segmented scans along the rows. The span representations ``g [R, 2D]`` are formed on chip,
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
def _tanh(x):
    # 1 - 2 / (exp(2x) + 1): saturates cleanly to +-1 (exp overflow gives inf -> 1)
    return 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)


@triton.jit
def _seg_add(f1, v1, f2, v2):
    """Segmented sum: ``f`` marks the first row of a segment (in scan order)."""
    return f1 | f2, tl.where(f2 != 0, v2, v1 + v2)


@triton.jit
def _seg_add2(f1, v1, w1, f2, v2, w2):
    """Two segmented sums sharing one segmentation."""
    return f1 | f2, tl.where(f2 != 0, v2, v1 + v2), tl.where(f2 != 0, w2, w1 + w2)


@triton.jit
def _span_rows(pos0, pos_end, tile, T, M, P: tl.constexpr, R: tl.constexpr, K_DESCENDING: tl.constexpr):
    """Rows ``[R, 1]`` of a span tile: ``(pos, k, t, row_ok, valid, first)`` (``first``: segment start)."""
    i = tl.arange(0, R)[:, None]
    within = i % M
    pos = (pos0 + tile * P + i // M).to(tl.int64)
    if K_DESCENDING:
        k = M - 1 - within
    else:
        k = within
    t = pos % T
    row_ok = (i < P * M) & (pos < pos_end)
    valid = row_ok & (t >= k)
    return pos, k, t, row_ok, valid, within == 0


@triton.jit
def _span_block(c_ptr, lf_ptr, pos, k, t, valid, first, d, T, D, REVERSE: tl.constexpr):
    """``g [R, BD]`` of one direction for span rows in ascending k (window products by a segmented scan)."""
    ok = valid & (d < D)
    lf = tl.load(lf_ptr + (pos - k) * D + d, mask=ok, other=0.0).to(tl.float32)
    flags = (first & (d >= 0)).to(tl.int32)
    _, window = tl.associative_scan((flags, lf), 0, _seg_add)
    decay = tl.exp(window)
    if REVERSE:
        head = tl.load(c_ptr + (pos - k) * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos + 1) * D + d, mask=ok & (t + 1 < T), other=0.0).to(tl.float32)
    else:
        head = tl.load(c_ptr + pos * D + d, mask=ok, other=0.0).to(tl.float32)
        other = tl.load(c_ptr + (pos - k - 1) * D + d, mask=ok & (t - k - 1 >= 0), other=0.0).to(tl.float32)
    return tl.where(ok, head - other * decay, 0.0)


@_length_free_jit('pos0', 'pos_end', 'T')
def _span_mlp_kernel(
    q_ptr, cf_ptr, lff_ptr, cb_ptr, lfb_ptr, w_ptr, v_ptr, ds_ptr, out_ptr, gv_ptr,
    pos0, pos_end, T, D, A, M, NA,
    BACKWARD: tl.constexpr, P: tl.constexpr, R: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr,
):
    """``h = tanh(q + g W)`` for a tile of span rows and a block of A.

    forward: ``out [rows, NA]`` gets the partial score ``sum_{a in block} v_a h_a`` (row ``pos * M + k``);
    backward: ``out [chunk rows, A]`` gets ``dh = ds v (1 - h^2)`` (row ``(pos - pos0) * M + k``),
    ``gv`` the block's ``sum_rows ds h`` (atomically).
    """
    tile = tl.program_id(0)
    a_block = tl.program_id(1)
    pos, k, t, row_ok, valid, first = _span_rows(pos0, pos_end, tile, T, M, P, R, False)
    a = a_block * BA + tl.arange(0, BA)[None, :]
    a_ok = a < A
    proj = tl.zeros([R, BA], dtype=tl.float32)
    for d0 in range(0, D, BD):
        d = d0 + tl.arange(0, BD)[None, :]
        w_rows = (d0 + tl.arange(0, BD))[:, None]
        w_ok = (w_rows < D) & a_ok
        gf = _span_block(cf_ptr, lff_ptr, pos, k, t, valid, first, d, T, D, False)
        wf = tl.load(w_ptr + w_rows * A + a, mask=w_ok, other=0.0).to(tl.float32)
        proj += tl.dot(gf, wf, input_precision=_DOT_PRECISION)
        gb = _span_block(cb_ptr, lfb_ptr, pos, k, t, valid, first, d, T, D, True)
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


@_length_free_jit('pos0', 'pos_end', 'T')
def _span_grad_kernel(
    c_ptr, lf_ptr, w_ptr, dh_ptr, p_ptr, gctx_ptr, gc_ptr, glf_ptr, gw_ptr,
    pos0, pos_end, T, D, A, M, offset,
    REVERSE: tl.constexpr, HAS_MLP: tl.constexpr, FUSED_DW: tl.constexpr, P: tl.constexpr, R: tl.constexpr,
    BD: tl.constexpr, BA: tl.constexpr,
):
    """One direction's backward for a tile of span rows (k descending) x a block of features.

    ``dg = p gctx + dh W^T`` (this direction's rows ``offset + d`` of ``w_span``), ``dW += g^T dh``
    (atomically), then Alg. 1 backwards: forward ``g = c_t - c_{t-k-1} e``, backward
    ``g = c_{t-k} - c_{t+1} e`` with ``e = exp(sum_{j=t-k..t} log_f_j)``; ``log_f_j`` gets
    ``-dg c_other e`` of every span covering ``j``, i.e. ``log_f_{t-k}`` the sum over ``k' >= k``
    (a segmented scan along the rows, which come in descending k).
    """
    tile = tl.program_id(0)
    d_block = tl.program_id(1)
    pos, k, t, row_ok, valid, first = _span_rows(pos0, pos_end, tile, T, M, P, R, True)
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
    last = row_ok & (k == 0) & (d < D)  # the last row of each position's segment holds its total
    if REVERSE:
        tl.atomic_add(gc_ptr + (pos + 1) * D + d, -shared_sum, mask=last & (t + 1 < T), sem="relaxed")
    else:
        tl.atomic_add(gc_ptr + pos * D + d, shared_sum, mask=last, sem="relaxed")


@_length_free_jit('pos0', 'pos_end', 'T', 'n_tiles')
def _span_dw_kernel(
    c_ptr, lf_ptr, dh_ptr, gw_ptr, pos0, pos_end, T, D, A, M, offset, n_tiles,
    REVERSE: tl.constexpr, P: tl.constexpr, R: tl.constexpr, BD: tl.constexpr, BA: tl.constexpr,
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
        pos, k, t, row_ok, valid, first = _span_rows(pos0, pos_end, tile, T, M, P, R, False)
        rep = _span_block(c_ptr, lf_ptr, pos, k, t, valid, first, d, T, D, REVERSE)
        dh = tl.load(dh_ptr + ((pos - pos0) * M + k) * A + a, mask=row_ok & (a < A), other=0.0)
        acc += tl.dot(tl.trans(rep), dh, input_precision=_DOT_PRECISION)
    w_rows = (d_block * BD + tl.arange(0, BD))[:, None]
    tl.atomic_add(gw_ptr + (offset + w_rows) * A + a, acc, mask=(w_rows < D) & (a < A), sem="relaxed")


# tile sizes: MLP kernel (rows x A block, D walked in blocks), gradient kernel (rows x D block,
# A walked in blocks), context kernel (positions x D block)
_MLP_R, _MLP_BA, _MLP_BD, _MLP_WARPS = 64, 128, 16, 8
_GRAD_R, _GRAD_BD, _GRAD_BA, _GRAD_WARPS = 128, 64, 32, 8
_DW_SPLIT = True  # dW in its own split-K kernel (else fused into the gradient kernel, atomics per row tile)
_DW_R, _DW_BD, _DW_BA, _DW_WARPS, _DW_PROGRAMS = 64, 64, 128, 8, 528
_CTX_BT, _CTX_BD = 32, 64
_DH_CHUNK_BYTES = 16 * 2**20  # the backward's dh scratch [positions * m, A] is at most this large


def _rows_per_tile(base: int, max_len: int) -> Tuple[int, int]:
    """``(R, P)``: rows per tile (a power of two >= max_len) and whole positions per tile."""
    R = max(base, triton.next_power_of_2(max(max_len, 1)))
    return R, R // max_len


def _valid_spans(T: int, max_len: int, device) -> torch.Tensor:
    t = torch.arange(T, device=device)[:, None]
    k = torch.arange(max_len, device=device)[None, :]
    return t >= k  # [T, m]


class _SpanAttention(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx, query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, fixed_scores, max_len
    ):
        B, T, D = c_fwd.shape
        M = max_len
        npos = B * T
        has_mlp = fixed_scores is None
        device = c_fwd.device
        valid = _valid_spans(T, M, device)
        if has_mlp:
            A = query.shape[-1]
            R, P = _rows_per_tile(_MLP_R, M)
            BA = min(_MLP_BA, _pow2(A))
            NA = triton.cdiv(A, BA)
            partial = torch.empty(npos * M, NA, dtype=torch.float32, device=device)
            if npos * M:
                grid = (triton.cdiv(npos, P), NA)
                _span_mlp_kernel[grid](
                    query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, partial, partial, partial,
                    0, npos, T, D, A, M, NA,
                    BACKWARD=False, P=P, R=R, BD=_MLP_BD, BA=BA, num_warps=_MLP_WARPS,
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
                BACKWARD=False, BT=_CTX_BT, BD=_CTX_BD,
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
            BACKWARD=True, BT=_CTX_BT, BD=_CTX_BD,
        )
        d_weights = dot_parts.sum(-1).view(B, T, M)
        d_scores = weights * (d_weights - (weights * d_weights).sum(-1, keepdim=True))
        if grad_scores is not None:
            d_scores = d_scores + grad_scores.float()
        d_scores = d_scores.masked_fill(~valid, 0.0).contiguous()

        R, P = _rows_per_tile(_GRAD_R, M)
        R_mlp, P_mlp = _rows_per_tile(_MLP_R, M)
        if has_mlp:
            BA = min(_MLP_BA, _pow2(A))
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
                _span_mlp_kernel[(triton.cdiv(n, P_mlp), NA)](
                    query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, d_scores, dh, grad_v,
                    pos0, pos_end, T, D, A, M, NA,
                    BACKWARD=True, P=P_mlp, R=R_mlp, BD=_MLP_BD, BA=BA, num_warps=_MLP_WARPS,
                )
                grad_q.view(npos, A)[pos0:pos_end] = dh[: n * M].view(n, M, A).sum(1)
            grid = (triton.cdiv(n, P), triton.cdiv(D, _GRAD_BD))
            for c, lf, gc, glf, offset, reverse in (
                (c_fwd, logf_fwd, grads[0], grads[1], 0, False),
                (c_bwd, logf_bwd, grads[2], grads[3], D, True),
            ):
                _span_grad_kernel[grid](
                    c, lf, w_span if has_mlp else c, dh, weights, grad_context, gc, glf,
                    grad_w if has_mlp else gc, pos0, pos_end, T, D, A, M, offset,
                    REVERSE=reverse, HAS_MLP=has_mlp, FUSED_DW=has_mlp and not _DW_SPLIT,
                    P=P, R=R, BD=_GRAD_BD, BA=_GRAD_BA, num_warps=_GRAD_WARPS,
                )
                if has_mlp and _DW_SPLIT:
                    R_dw, P_dw = _rows_per_tile(_DW_R, M)
                    BA_dw = min(_DW_BA, _pow2(A))
                    n_tiles = triton.cdiv(n, P_dw)
                    dw_blocks = (triton.cdiv(D, _DW_BD), triton.cdiv(A, BA_dw))
                    n_split = max(1, min(n_tiles, _DW_PROGRAMS // (dw_blocks[0] * dw_blocks[1])))
                    _span_dw_kernel[dw_blocks + (n_split,)](
                        c, lf, dh, grad_w, pos0, pos_end, T, D, A, M, offset, n_tiles,
                        REVERSE=reverse, P=P_dw, R=R_dw, BD=_DW_BD, BA=BA_dw, num_warps=_DW_WARPS,
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

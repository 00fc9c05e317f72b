"""Torch tier: vectorised PyTorch implementations, differentiable by autograd (first order).

``linear_scan`` and ``span_representations`` are ``torch.autograd.Function``s with hand-written
backward passes (a reverse scan; a loop over span lengths) so that they keep only their inputs for
the backward pass; a second derivative through them raises instead of silently being wrong.

Conventions (shapes, index ranges, the treatment of exact zeros) are documented on the public
functions in :mod:`induce.kernels`; this module only implements them.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

#: Public functions here that are not kernel ops of :mod:`induce.kernels` (so no other tier needs them):
#: the attention step over precomputed span representations, which ``bench/kernels.py`` times alone.
TIER_HELPERS = ("attend_over_spans",)


# ----------------------------------------------------------------------------------------- cumax
def cumax(x: torch.Tensor, dim: int = -1, reverse: bool = False) -> torch.Tensor:
    """``cumsum(softmax(x))`` along ``dim`` (from the end if ``reverse``)."""
    p = torch.softmax(x, dim=dim)
    if reverse:
        return p.flip(dim).cumsum(dim).flip(dim)
    return p.cumsum(dim)


# ----------------------------------------------------------------------------- ON-LSTM cell
def onlstm_cell(gates: torch.Tensor, c: torch.Tensor, n_chunks: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ON-LSTM step as separate PyTorch ops (the eager twin of the fused Triton step).

    Chunks are a view ``[B, p, C]``: the master gates broadcast over a chunk's units without copies.
    """
    B, H = c.shape
    p = n_chunks
    forget_logits, input_logits, sig_logits, cell_logits = gates.split([p, p, 3 * H, H], 1)
    master_forget = cumax(forget_logits)  # [B, p]
    master_input = 1.0 - cumax(input_logits)
    # unbind, not indexing: the backward of each index would fill a full-size zero tensor.
    forget_gate, input_gate, output_gate = torch.sigmoid(sig_logits).view(B, 3, p, -1).unbind(1)
    cell = torch.tanh(cell_logits).view(B, p, -1)
    cf, ci = master_forget.unsqueeze(-1), master_input.unsqueeze(-1)
    overlap = cf * ci
    forget = forget_gate * overlap + (cf - overlap)
    inp = input_gate * overlap + (ci - overlap)
    c_new = forget * c.view(B, p, -1) + inp * cell
    h = output_gate * torch.tanh(c_new)
    dtype = c.dtype  # no-op casts unless gates and c differ in dtype
    return h.view(B, H).to(dtype), c_new.view(B, H).to(dtype), master_forget.to(dtype)


# ----------------------------------------------------------------------------- stick-breaking
def _alpha(query: torch.Tensor, distance: torch.Tensor, tau: float) -> torch.Tensor:
    """``(hardtanh((query - distance) * tau + 1) + 1) / 2``, broadcasting."""
    return (F.hardtanh((query - distance) * tau + 1.0) + 1.0) / 2.0


def _windows(x: torch.Tensor, window: int, pad_value: float = 0.0) -> torch.Tensor:
    """``[B, T, ...] -> [B, T, window, ...]`` with ``out[:, t, k] = x[:, t - k]`` (``pad_value`` for t-k < 0)."""
    T = x.shape[1]
    pad = [0, 0] * (x.dim() - 2) + [window, 0]
    padded = F.pad(x, pad, value=pad_value)  # index t + window <-> time t
    return torch.stack([padded[:, window - k: window - k + T] for k in range(window)], dim=2)


def stick_breaking_gates(
    d: torch.Tensor, window: int, tau: float = 20.0, d_next: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """PRPN gates ``[B, T, window]`` (see :func:`induce.kernels.stick_breaking_gates`)."""
    B, T = d.shape
    query = d if d_next is None else d_next
    # alpha[b, t, k] = alpha_{t-k}^t for k = 0..window-1 (factor of position j = t - k).
    alpha = _alpha(query[:, :, None], _windows(d, window), tau)
    t_index = torch.arange(T, device=d.device)[:, None]
    k_index = torch.arange(window, device=d.device)[None, :]
    alpha = torch.where(t_index - k_index >= 0, alpha, torch.zeros_like(alpha))
    # Cumulative product along the reversed window: exact with zero factors (no log, no division);
    # torch.cumprod's backward handles zeros exactly.
    prod = torch.cumprod(alpha, dim=2)  # prod[t, k] = prod_{j=t-k..t} alpha_j^t = gate of slot t-k-1
    gates = prod.flip(2)  # gates[t, w] gates slot i = t - window + w, w = window-1-k
    slot = t_index - window + torch.arange(window, device=d.device)[None, :]
    return torch.where(slot >= 0, gates, torch.zeros_like(gates))


# ------------------------------------------------------------------------------- linear scan
def _flush_denormals_(x: torch.Tensor) -> torch.Tensor:
    """Set entries below the smallest normal float to 0, in place (what flush-to-zero hardware does).

    Products of forget gates decay geometrically; once they pass into the subnormal range CPU
    arithmetic on them is ~100x slower, and they only ever multiply bounded states, so the
    contribution dropped is below ``1.2e-38 * |c|`` (fp32).
    """
    return x.masked_fill_(x.abs() < torch.finfo(x.dtype).tiny, 0.0)


_SEQUENTIAL_UP_TO = 256  # below this length T Python steps beat the blocked scan's extra passes (bench)


def _scan(log_a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Inclusive scan ``c_t = exp(log_a_t) c_{t-1} + b_t`` (c_{-1} = 0) along dim 1 of ``[B, T, D]``; O(T) work.

    Short sequences: one vectorised step per position. Longer ones: blocked parallel scan, T cut into
    ``n`` chunks of ``L ~ sqrt(T)`` steps: (1) all chunks scanned at once from a zero state (``L``
    steps over ``[B, n, D]``) with the chunk-local gate products ``A = exp(cumsum(log_a))`` (a sum of
    at most ``L`` terms: no precision loss, and ``-inf`` stays ``-inf``); (2) the chunk end states
    scanned (``n`` steps over ``[B, D]``); (3) ``c = c_local + A * carry_in`` for all chunks at once.
    Only gate products are formed (never ``exp(-cumsum)``), so long, strongly decaying inputs lose nothing.
    """
    B, T, D = b.shape
    a = _flush_denormals_(torch.exp(log_a))
    if T <= _SEQUENTIAL_UP_TO:
        out = torch.empty_like(b)
        state = torch.zeros_like(b[:, 0])
        for t in range(T):
            state = torch.addcmul(b[:, t], a[:, t], state)
            out[:, t] = state
        return out
    L = max(1, math.isqrt(T))
    n = -(-T // L)
    pad = n * L - T
    if pad:  # identity steps (log_a = 0, b = 0) at the end
        log_a = torch.cat([log_a, log_a.new_zeros(B, pad, D)], dim=1)
        a = torch.cat([a, a.new_ones(B, pad, D)], dim=1)
        b = torch.cat([b, b.new_zeros(B, pad, D)], dim=1)
    # chunk step i first: [L, B, n, D], so that every step works on a contiguous slice
    a = a.reshape(B, n, L, D).permute(2, 0, 1, 3).contiguous()
    b = b.reshape(B, n, L, D).permute(2, 0, 1, 3).contiguous()
    gates = _flush_denormals_(log_a.reshape(B, n, L, D).cumsum(2).exp_()).permute(2, 0, 1, 3)
    local = torch.empty_like(b)
    local[0] = b[0]
    for i in range(1, L):
        torch.addcmul(b[i], a[i], local[i - 1], out=local[i])
    carry = torch.empty_like(b[0])  # [B, n, D]: state entering each chunk
    state = torch.zeros_like(b[0, :, 0])
    for j in range(n):
        carry[:, j] = state
        state = torch.addcmul(local[L - 1, :, j], gates[L - 1, :, j], state)
    out = local.addcmul_(gates, carry[None])
    return out.permute(1, 2, 0, 3).reshape(B, n * L, D)[:, :T]


class _LinearScan(torch.autograd.Function):
    """Left-to-right scan ``c_t = exp(log_f_t) c_{t-1} + u_t`` with a reverse-scan backward."""

    @staticmethod
    def forward(ctx, log_f: torch.Tensor, u: torch.Tensor, c0: Optional[torch.Tensor]):  # type: ignore[override]
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        f = _flush_denormals_(torch.exp(log_f))
        b = u if c0 is None else torch.cat([u[:, :1] + f[:, :1] * c0[:, None], u[:, 1:]], dim=1)
        c = _scan(log_f, b)
        ctx.save_for_backward(log_f, f, c, c0)
        ctx.has_c0 = c0 is not None
        return c

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: fail loudly on double backward
    def backward(ctx, grad_c: Optional[torch.Tensor]):  # type: ignore[override]
        if grad_c is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None, None
        log_f, f, c, c0 = ctx.saved_tensors
        # g_t = dL/dc_t (total) = grad_c_t + f_{t+1} g_{t+1}: the same scan run right to left.
        log_f_next = torch.cat([log_f[:, 1:], torch.full_like(log_f[:, :1], -math.inf)], dim=1)
        g = _scan(log_f_next.flip(1), grad_c.flip(1)).flip(1)
        c_prev = torch.cat([c0[:, None] if ctx.has_c0 else torch.zeros_like(c[:, :1]), c[:, :-1]], dim=1)
        grad_log_f = g * f * c_prev  # dc_t/dlog_f_t = f_t c_{t-1}; f = 0 gives exactly 0
        grad_c0 = f[:, 0] * g[:, 0] if ctx.has_c0 else None
        return grad_log_f, g, grad_c0


def linear_scan(
    log_f: torch.Tensor, u: torch.Tensor, c0: Optional[torch.Tensor] = None, reverse: bool = False
) -> torch.Tensor:
    """``c_t = f_t c_{t-1} + u_t`` (or right to left) over ``[B, T, D]``."""
    log_f, u = torch.broadcast_tensors(log_f, u)
    if reverse:
        return _LinearScan.apply(log_f.flip(1), u.flip(1), c0).flip(1)
    return _LinearScan.apply(log_f, u, c0)


# ------------------------------------------------------------------------ span representations
def _valid_spans(T: int, max_len: int, device: torch.device) -> torch.Tensor:
    """``[T, m]`` bool: span ``[t-k, t]`` starts inside the sequence (``t - k >= 0``)."""
    t_index = torch.arange(T, device=device)[:, None]
    return t_index - torch.arange(max_len, device=device)[None, :] >= 0


class _SpanRepresentations(torch.autograd.Function):
    """Alg. 1 with a hand-written backward that keeps only ``c`` and ``log_f`` (not ``[B, T, m, D]``).

    Both passes loop over the span length ``k`` (m steps of ``[B, T, D]`` work, the window product
    ``e[t, k] = prod_{j=t-k..t} f_j`` carried in log space from one ``k`` to the next), which writes
    the ``[B, T, m, D]`` output once instead of building several window tensors of that size.

    Backward, forward direction (``G[t,k] = c_t - c_{t-k-1} e[t,k]``): ``dc_t += dG[t,k]``,
    ``dc_{t-k-1} -= dG[t,k] e[t,k]`` and, with ``r = -dG c_{t-k-1} e``, ``dlog_f_j += r[t,k]`` for
    every ``j`` in ``[t-k, t]``, i.e. ``dlog_f_{t-k} += R[t,k] = sum_{k'>=k} r[t,k']``. The backward
    direction mirrors it (``c_{t-k}`` and ``c_{t+1}``).
    """

    @staticmethod
    def forward(ctx, c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool):  # type: ignore[override]
        ctx.set_materialize_grads(False)  # an unused or undefined gradient comes as None: see backward
        B, T, D = c.shape
        out = c.new_zeros(B, T, max_len, D)
        after = torch.cat([c[:, 1:], torch.zeros_like(c[:, :1])], dim=1)  # c_{t+1}, c_T = 0
        log_window = log_f.clone()  # log_window[t] = sum_{j=t-k..t} log_f_j (valid for t >= k)
        for k in range(min(max_len, T)):
            if k:
                log_window[:, k:] += log_f[:, : T - k]
            decay = log_window[:, k:].exp()  # [B, T-k, D], rows t = k..T-1
            if reverse:  # c_{t-k} - c_{t+1} e
                torch.sub(c[:, : T - k], after[:, k:] * decay, out=out[:, k:, k])
            else:  # c_t - c_{t-k-1} e, with c_{-1} = 0 at t = k
                out[:, k:, k] = c[:, k:]
                out[:, k + 1:, k] -= c[:, : T - k - 1] * decay[:, 1:]
        ctx.save_for_backward(c, log_f)
        ctx.max_len, ctx.reverse = max_len, reverse
        return out

    @staticmethod
    @once_differentiable  # the backward is not itself differentiable: fail loudly on double backward
    def backward(ctx, grad_out: Optional[torch.Tensor]):  # type: ignore[override]
        if grad_out is None:  # undefined upstream gradient (materialize_grads is off): none for the inputs
            return None, None, None, None
        c, log_f = ctx.saved_tensors
        m, reverse = ctx.max_len, ctx.reverse
        B, T, D = c.shape
        after = torch.cat([c[:, 1:], torch.zeros_like(c[:, :1])], dim=1)
        grad_c = torch.zeros_like(c)
        grad_after = torch.zeros_like(c)  # gradient of c_{t+1} (backward direction)
        r = c.new_zeros(B, T, min(m, T), D)  # r[t, k] = -dG c_other e
        log_window = log_f.clone()
        for k in range(min(m, T)):
            if k:
                log_window[:, k:] += log_f[:, : T - k]
            decay = log_window[:, k:].exp()
            grad = grad_out[:, k:, k]  # rows t = k..T-1 (the valid spans)
            scaled = grad * decay
            if reverse:
                grad_c[:, : T - k] += grad  # c_{t-k}
                grad_after[:, k:] -= scaled  # c_{t+1}
                torch.mul(scaled, after[:, k:], out=r[:, k:, k]).neg_()
            else:
                grad_c[:, k:] += grad  # c_t
                grad_c[:, : T - k - 1] -= scaled[:, 1:]  # c_{t-k-1}
                torch.mul(scaled[:, 1:], c[:, : T - k - 1], out=r[:, k + 1:, k]).neg_()
        if reverse:
            grad_c[:, 1:] += grad_after[:, :-1]
        grad_log_f = torch.zeros_like(log_f)
        suffix = torch.zeros_like(c)
        for k in range(min(m, T) - 1, -1, -1):
            suffix += r[:, :, k]
            grad_log_f[:, : T - k] += suffix[:, k:]  # log_f_{t-k} gets R[t, k]
        return grad_c, grad_log_f, None, None


def span_representations(c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool = False) -> torch.Tensor:
    """PaLM Alg. 1: ``[B, T, D] -> [B, T, m, D]`` (see :func:`induce.kernels.span_representations`).

    forward span ``[t-k, t]`` = ``c_t - c_{t-k-1} * prod_{j=t-k..t} f_j`` (``c_{-1} = 0``);
    backward span ``[t-k, t]`` = ``c_{t-k} - c_{t+1} * prod_{j=t-k..t} f_j`` (``c_T = 0``).
    """
    c, log_f = torch.broadcast_tensors(c, log_f)
    return _SpanRepresentations.apply(c, log_f, max_len, reverse)


# ------------------------------------------------------------------------------ span attention
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
    """PaLM span attention (see :func:`induce.kernels.span_attention`).

    The two directions stay separate tensors (``g @ w_span`` = ``fwd @ w_span[:D] + bwd @ w_span[D:]``)
    so the ``[B, T, m, 2D]`` concatenation is never built.
    """
    fwd = span_representations(c_fwd, logf_fwd, max_len)  # [B, T, m, D]
    bwd = span_representations(c_bwd, logf_bwd, max_len, reverse=True)
    return attend_over_spans(fwd, bwd, query, w_span, v, fixed_scores)


def attend_over_spans(
    fwd: torch.Tensor,
    bwd: torch.Tensor,
    query: Optional[torch.Tensor],
    w_span: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    fixed_scores: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Scores, masked softmax and context from span representations ``fwd, bwd [B, T, m, D]``."""
    B, T, max_len, D = fwd.shape
    valid = _valid_spans(T, max_len, fwd.device)
    if fixed_scores is not None:
        scores = fixed_scores.to(fwd.dtype).expand(B, T, max_len)
    else:
        hidden = torch.matmul(fwd, w_span[:D])  # [B, T, m, A]
        hidden.add_(torch.matmul(bwd, w_span[D:])).add_(query[:, :, None, :]).tanh_()
        scores = torch.matmul(hidden, v)
    scores = scores.masked_fill(~valid, float("-inf"))
    weights = torch.softmax(scores, dim=-1)[:, :, None, :]  # [B, T, 1, m]
    context = torch.cat([torch.matmul(weights, fwd), torch.matmul(weights, bwd)], dim=-1)[:, :, 0]
    return context, scores

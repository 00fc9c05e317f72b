"""Reference tier: plain PyTorch loops that follow the definitions literally, in float32 or better.

Slow (Python loops over positions, spans and window entries) and used as ground truth by the tests
and as the "loop" baseline by ``bench/kernels.py``. Differentiable by autograd.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def cumax(x: torch.Tensor, dim: int = -1, reverse: bool = False) -> torch.Tensor:
    """Running sum of the softmax, accumulated one entry at a time."""
    p = torch.softmax(_at_least_fp32(x).movedim(dim, -1), dim=-1)
    n = p.shape[-1]
    order = range(n - 1, -1, -1) if reverse else range(n)
    running = torch.zeros_like(p[..., 0])
    out = [None] * n
    for j in order:
        running = running + p[..., j]
        out[j] = running
    return torch.stack(out, dim=-1).movedim(-1, dim).to(x.dtype)


def onlstm_cell(gates: torch.Tensor, c: torch.Tensor, n_chunks: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """The ON-LSTM step written out unit by unit: each chunk's master gates copied to its units."""
    g, c32 = _at_least_fp32(gates), _at_least_fp32(c)
    B, H = c.shape
    p = n_chunks
    chunk = H // p
    cf = cumax(g[:, :p])
    ci = 1.0 - cumax(g[:, p: 2 * p])
    u = g[:, 2 * p:]
    f, i, o = (torch.sigmoid(u[:, k * H: (k + 1) * H]) for k in range(3))
    cell = torch.tanh(u[:, 3 * H:])
    unit_chunk = torch.arange(H) // chunk  # the chunk of every unit
    cf_units, ci_units = cf[:, unit_chunk], ci[:, unit_chunk]
    overlap = cf_units * ci_units
    c_new = (f * overlap + cf_units - overlap) * c32 + (i * overlap + ci_units - overlap) * cell
    h = o * torch.tanh(c_new)
    return h.to(c.dtype), c_new.to(c.dtype), cf.to(c.dtype)


def _alpha(query: torch.Tensor, distance: torch.Tensor, tau: float) -> torch.Tensor:
    return (torch.nn.functional.hardtanh((query - distance) * tau + 1.0) + 1.0) / 2.0


def stick_breaking_gates(
    d: torch.Tensor, window: int, tau: float = 20.0, d_next: Optional[torch.Tensor] = None
) -> torch.Tensor:
    """``g[:, t, w] = prod_{j=i+1..t} alpha_j`` for slot ``i = t - window + w``; 0 for ``i < 0``."""
    d32 = _at_least_fp32(d)
    query = d32 if d_next is None else _at_least_fp32(d_next)
    B, T = d.shape
    rows = []
    for t in range(T):
        row = []
        for w in range(window):
            i = t - window + w
            if i < 0:
                row.append(torch.zeros_like(d32[:, 0]))
                continue
            gate = torch.ones_like(d32[:, 0])
            for j in range(i + 1, t + 1):
                gate = gate * _alpha(query[:, t], d32[:, j], tau)
            row.append(gate)
        rows.append(torch.stack(row, dim=1))
    return torch.stack(rows, dim=1).to(d.dtype)


def linear_scan(
    log_f: torch.Tensor, u: torch.Tensor, c0: Optional[torch.Tensor] = None, reverse: bool = False
) -> torch.Tensor:
    """The recurrence, one step at a time."""
    dtype = u.dtype
    log_f, u = torch.broadcast_tensors(_at_least_fp32(log_f), _at_least_fp32(u))
    B, T, D = u.shape
    state = torch.zeros_like(u[:, 0]) if c0 is None else _at_least_fp32(c0)
    out = [None] * T
    for t in range(T - 1, -1, -1) if reverse else range(T):
        state = torch.exp(log_f[:, t]) * state + u[:, t]
        out[t] = state
    return torch.stack(out, dim=1).to(dtype)


def span_representations(c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool = False) -> torch.Tensor:
    """Eq. 2 (and its mirror) span by span, with the forget-gate product multiplied out explicitly."""
    c32, f = _at_least_fp32(c), torch.exp(_at_least_fp32(log_f))
    B, T, D = c.shape
    zero = torch.zeros_like(c32[:, 0])
    rows = []
    for t in range(T):
        row = []
        for k in range(max_len):
            start = t - k
            if start < 0:
                row.append(zero)
                continue
            decay = torch.ones_like(zero)
            for j in range(start, t + 1):
                decay = decay * f[:, j]
            if reverse:
                after = c32[:, t + 1] if t + 1 < T else zero
                row.append(c32[:, start] - after * decay)
            else:
                before = c32[:, start - 1] if start >= 1 else zero
                row.append(c32[:, t] - before * decay)
        rows.append(torch.stack(row, dim=1))
    return torch.stack(rows, dim=1).to(c.dtype)


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
    """Scores, softmax and context position by position over the valid spans only."""
    fwd = span_representations(c_fwd, logf_fwd, max_len)
    bwd = span_representations(c_bwd, logf_bwd, max_len, reverse=True)
    # [t][k] -> [B, 2D]; unbound once so that autograd stacks the span gradients once, instead of
    # one full-size zero tensor per indexing operation
    spans = [row.unbind(1) for row in _at_least_fp32(torch.cat([fwd, bwd], dim=-1)).unbind(1)]
    B, T, D = c_fwd.shape
    contexts, score_rows = [], []
    for t in range(T):
        n_valid = min(max_len, t + 1)
        scores = []
        for k in range(n_valid):
            if fixed_scores is not None:
                scores.append(_at_least_fp32(fixed_scores[k]).expand(B))
            else:
                hidden = torch.tanh(_at_least_fp32(query[:, t]) + spans[t][k] @ _at_least_fp32(w_span))
                scores.append(hidden @ _at_least_fp32(v))
        scores_t = torch.stack(scores, dim=1)  # [B, n_valid]
        weights = torch.softmax(scores_t, dim=1)
        context = torch.zeros_like(spans[t][0])
        for k in range(n_valid):
            context = context + weights[:, k: k + 1] * spans[t][k]
        contexts.append(context)
        pad = torch.full((B, max_len - n_valid), float("-inf"), dtype=scores_t.dtype, device=scores_t.device)
        score_rows.append(torch.cat([scores_t, pad], dim=1))
    return torch.stack(contexts, dim=1).to(c_fwd.dtype), torch.stack(score_rows, dim=1).to(c_fwd.dtype)

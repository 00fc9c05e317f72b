"""PaLM's span attention block (:class:`SpanAttention`) and the relevant-set helpers it uses.

The equations, the time alignment, ``relevant_set`` and the two variants (``paper`` / ``released``)
are described in :mod:`induce.models.palm.model`, which builds the language model around this block.
"""
from __future__ import annotations

from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import linear_scan, span_attention, span_representations
from induce.models.common.awd import locked_dropout
from induce.models.common.relevancy import gather_relevant, relevant_indices


def _accumulation_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half types, else the tensor's own floating type (float64 stays float64)."""
    return torch.promote_types(x.dtype, torch.float32)


def relevant_span_starts(row_scores: torch.Tensor, rho: int, first_row: int = 0):
    """Screening of the span starts from the window attention (see the module docstring).

    ``row_scores [B, R, m]`` (kernel rows: entry ``[b, t, k]`` scores the span ``[t-k, t]``, ``-inf``
    when invalid); rows before ``first_row`` have no real query and do not count. Returns ``beta
    [B, R]`` (at least float32, detached: ``beta[b, i]`` = sum over rows ``t = i .. i+m-1``, ``t >=
    first_row``, of the window softmax weight of ``[i, t]``) and ``index, valid [B, R, rho]`` from
    :func:`induce.models.common.relevancy.relevant_indices` with ``nu = m``: the starts ``i <= t - m`` of row ``t``.
    """
    batch, rows, max_len = row_scores.shape
    with torch.no_grad():
        weights = torch.softmax(row_scores.detach().to(_accumulation_dtype(row_scores)), -1)
        weights[:, :first_row] = 0.0
        beta = weights.new_zeros(batch, rows)
        for k in range(min(max_len, rows)):
            beta[:, : rows - k] += weights[:, k:, k]  # row t = i + k gives span [i, t] weight [t, k]
    index, valid = relevant_indices(beta, max_len, rho)
    return beta, index, valid


def relevant_span_representations(c_fwd, logf_fwd, c_bwd, logf_bwd, index, valid, first_row: int = 0):
    """Alg. 1 for the spans ``[index[b, j, s], first_row + j]`` (PaLM's extra, relevant spans).

    ``c_fwd, logf_fwd, c_bwd, logf_bwd [B, R, D]`` are the rational RNN states and log forget gates
    of both scans over kernel rows ``0 .. R-1``; ``index, valid [B, R - first_row, rho]``. Returns
    ``fwd, bwd [B, R - first_row, rho, D]`` (zero where not valid), with ``F`` / ``B`` the cumulative
    sums of the log forget gates (at least float32) and ``c_{-1} = c^b_R = 0``:

        ``fwd[i, t] = c_t - c_{i-1} * exp(F_t - F_{i-1})``,  ``bwd[i, t] = c^b_i - c^b_{t+1} * exp(B_t - B_{i-1})``,

    i.e. each direction's RNN run over ``[i, t]`` alone (what :func:`induce.kernels.span_representations`
    gives for spans of length ``<= m``), O(1) per span. Differentiable in all four inputs.
    """
    batch, rows, dim = c_fwd.shape
    pad = c_fwd.new_zeros(batch, 1, dim)
    acc = _accumulation_dtype(logf_fwd)
    pad_acc = torch.zeros(batch, 1, dim, dtype=acc, device=c_fwd.device)
    cum_f = torch.cumsum(logf_fwd, 1, dtype=acc)  # F_t
    cum_b = torch.cumsum(logf_bwd, 1, dtype=acc)  # B_t
    ends = slice(first_row, rows)
    # Entry i of the padded tensors is the value at position i - 1 (c_{i-1}, F_{i-1}, B_{i-1}).
    c_before = gather_relevant(torch.cat([pad, c_fwd], 1), index, valid)
    f_before = gather_relevant(torch.cat([pad_acc, cum_f], 1), index, valid)
    b_before = gather_relevant(torch.cat([pad_acc, cum_b], 1), index, valid)
    c_start_bwd = gather_relevant(c_bwd, index, valid)  # c^b_i
    c_after_bwd = torch.cat([c_bwd[:, 1:], pad], 1)[:, ends, None]  # c^b_{t+1}
    decay_f = torch.exp(cum_f[:, ends, None] - f_before)
    decay_b = torch.exp(cum_b[:, ends, None] - b_before)
    fwd = c_fwd[:, ends, None] - c_before * decay_f
    bwd = c_start_bwd - c_after_bwd * decay_b
    mask = valid.unsqueeze(-1)
    fwd = torch.where(mask, fwd, torch.zeros_like(fwd))
    bwd = torch.where(mask, bwd, torch.zeros_like(bwd))
    return fwd, bwd


def released_backward_layout(states: torch.Tensor) -> torch.Tensor:
    """The backward rational RNN's states ``[B, L, D]`` as the released code lays them out at batch > 1.

    ``rrnn.py`` (``RRNN_Compute_CPU``, ``bw=True``) stacks the backward states on dim 1, ``[B, L, D]``,
    and ``RRNNCell.forward`` reads them back time-major with ``cs.view(length, batch, -1)``: the view's
    entry ``[t, b]`` is row ``t * B + b`` of the batch-major buffer. Returned batch-first, entry
    ``[b, t]`` is the true state ``[(t * B + b) // L, (t * B + b) % L]`` (batch row, position): for
    ``B > 1`` states move across batch rows and positions. At ``B = 1`` it is the identity. The forget
    gates are not affected (``RRNNCell.forward`` returns them in the right layout), nor the forward
    direction (stacked on dim 0).
    """
    batch, length, dim = states.shape
    return states.contiguous().view(length, batch, dim).transpose(0, 1)


class SpanAttention(nn.Module):
    """Span attention block of PaLM: ``h [B, T, H]`` -> ``(h_hat [B, T, H], scores [B, T, m])``.

    See :mod:`induce.models.palm.model` for the equations, the time alignment, ``relevant_set``, the two
    variants and the initialisation (:meth:`reset_parameters`). With ``relevant_set > 0`` the last forward's screening
    is kept (detached) in
    ``last_relevant``: ``{"beta": [B, R], "index", "valid": [B, R - first_row, rho], "first_row": int}``
    over the kernel rows (sequence positions of ``[memory; h]``), or ``None`` when no start was beyond
    the window. ``dropout`` is the released variant's locked dropout (``dropouth``); the paper variant
    has none inside the block. ``backward_layout``: ``correct``, or ``released`` for the released
    code's scrambled backward states at batch > 1 (:func:`released_backward_layout`).
    """

    def __init__(self, hidden_size: int, rrnn_size: int, attention_size: int, relevant_set: int = 0,
                 variant: str = "paper", dropout: float = 0.0, backward_layout: str = "correct"):
        super().__init__()
        if backward_layout not in ("correct", "released"):
            raise ValueError(f"backward_layout {backward_layout!r}: use correct or released")
        self.hidden_size, self.attention_size = hidden_size, attention_size
        self.backward_layout = backward_layout
        self.rrnn_size = rrnn_size
        self.relevant_set = relevant_set
        self.variant = variant
        self.dropout = dropout
        self.last_relevant: Optional[dict] = None
        released = variant == "released"
        # forget / update logits of both directions from one matmul: [f_fwd | u_fwd | f_bwd | u_bwd].
        # Released: no bias on u (rrnn.py uses only the forget half of its bias), so the bias is a
        # separate parameter of the forget gates.
        self.rrnn = nn.Linear(hidden_size, 4 * rrnn_size, bias=not released)
        if released:
            self.rrnn_forget_bias = nn.Parameter(torch.zeros(2, rrnn_size))
            # sigma(W_g h_query + b) over [fwd; bwd] (span_parser.py, SpanScorer._compute_gate_)
            self.span_gate = nn.Linear(hidden_size, 2 * rrnn_size)
        self.query = nn.Linear(hidden_size, attention_size)
        self.w_span = nn.Parameter(torch.empty(2 * rrnn_size, attention_size))
        self.v = nn.Parameter(torch.empty(attention_size))
        if released:
            # h_hat = g * h + (1 - g) * tanh(W a), g = sigmoid(W_g [h; a]) (model.py, RNNModel.forward)
            self.mix_gate = nn.Linear(hidden_size + 2 * rrnn_size, hidden_size)
            self.mix_mlp = nn.Linear(2 * rrnn_size, hidden_size)
        else:
            # [MLP | residual gate] of h_bar = [h; a], one matmul.
            self.mix = nn.Linear(hidden_size + 2 * rrnn_size, 2 * hidden_size)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """The released code's initialisation, for both variants (the paper states none). Called once, at
        construction; a loaded checkpoint replaces the values. With ``H`` the input size, ``D`` the
        rational RNN size per direction, ``A`` the scoring MLP's size, ``U(+-xavier(fan_in, fan_out, gain))``
        (:func:`induce.models.common.init.xavier_bound`), every bias zero:

        * ``rrnn.weight [4D, H]`` (both directions, forget and update rows): ``xavier(H, D, gain 5/3)``
          (``rrnn.py`` ``RRNNCell.init_weights``: fan_out = the cell's output size, gain of ``tanh``,
          the cell's ``nl``); its bias (paper) / ``rrnn_forget_bias`` (released) zero;
        * ``span_gate [2D, H]`` (released): ``xavier(H, D)`` (``span_parser.py`` ``_w_gate_``: fan_out
          = the size per direction, gain of ``sigmoid`` = 1); bias zero;
        * ``query [A, H]`` and ``w_span [2D, A]``: ``xavier(2D + H, A)`` (``_w1_token_`` and
          ``_w1_span_``, whose fan_in is the whole MLP input); query bias zero (``_b1_``);
        * ``v [A]``: ``xavier(A, 1)`` (``_w2_``);
        * released mixing (``model.py`` ``init_weights``): ``mix_mlp [H, 2D]`` ``xavier(2D, H)``,
          ``mix_gate [H, H + 2D]`` ``xavier(H + 2D, H)`` (gain of ``sigmoid`` = 1), biases zero;
          paper mixing ``mix [2H, H + 2D]`` (Eq. 6's ``W_m`` and ``W_g`` over ``[h; a]``, one matmul):
          each half ``xavier(H + 2D, H)``, the same rule on the paper's shapes; bias zero.
        """
        from induce.models.common.init import xavier_uniform_

        hidden, two_d, attention = self.hidden_size, 2 * self.rrnn_size, self.attention_size
        tanh_gain = nn.init.calculate_gain("tanh")
        xavier_uniform_(self.rrnn.weight, hidden, self.rrnn_size, tanh_gain)
        xavier_uniform_(self.query.weight, two_d + hidden, attention)
        xavier_uniform_(self.w_span, two_d + hidden, attention)
        xavier_uniform_(self.v, attention, 1)
        if self.variant == "released":
            xavier_uniform_(self.span_gate.weight, hidden, self.rrnn_size)
            xavier_uniform_(self.mix_mlp.weight, two_d, hidden)
            xavier_uniform_(self.mix_gate.weight, hidden + two_d, hidden)
        else:
            xavier_uniform_(self.mix.weight, hidden + two_d, hidden)  # both halves: U(+-a) is entrywise
        for name, param in self.named_parameters():
            if name.endswith("bias"):  # rrnn.bias / rrnn_forget_bias, span_gate, query, mix_* biases
                nn.init.zeros_(param)

    def scorer_parameters(self) -> list[nn.Parameter]:
        """The span scorer (what the released ``main.py`` gives its own Adam): the rational RNN, the
        span gate and the scoring MLP; not the mixing layers, which belong to the LM."""
        mixing = {id(p) for name, p in self.named_parameters() if name.startswith("mix")}
        return [p for p in self.parameters() if id(p) not in mixing]

    def span_inputs(self, seq: torch.Tensor):
        """``seq [B, S, H]`` -> forward/backward rational RNN states and log forget gates ``[B, S, D]``.

        paper (Eq. 1b): ``u = (1 - f) * tanh(W_u h)``; released (rrnn.py, ``RRNNCell.forward``):
        ``u = (1 - f) * W_u h``, no tanh and no bias on ``u``.
        """
        f_fwd, u_fwd, f_bwd, u_bwd = self.rrnn(seq).chunk(4, -1)
        if self.variant == "released":
            f_fwd = f_fwd + self.rrnn_forget_bias[0]
            f_bwd = f_bwd + self.rrnn_forget_bias[1]
        else:
            u_fwd, u_bwd = torch.tanh(u_fwd), torch.tanh(u_bwd)
        logf_fwd, logf_bwd = F.logsigmoid(f_fwd), F.logsigmoid(f_bwd)
        # (1 - sigmoid(a)) = sigmoid(-a)
        u_fwd = torch.sigmoid(-f_fwd) * u_fwd
        u_bwd = torch.sigmoid(-f_bwd) * u_bwd
        c_fwd = linear_scan(logf_fwd, u_fwd)
        c_bwd = linear_scan(logf_bwd, u_bwd, reverse=True)
        if self.backward_layout == "released":
            c_bwd = released_backward_layout(c_bwd)
        return c_fwd, logf_fwd, c_bwd, logf_bwd

    def released_attention(self, row_query: torch.Tensor, row_gate: torch.Tensor, span_states, max_len: int,
                           fixed_scores: Optional[torch.Tensor] = None):
        """The released span attention (span_parser.py, ``SpanScorer.forward``), plain torch.

        ``row_query [B, R, A]`` (``W_q h + b`` of each row's query position), ``row_gate [B, R, 2D]``
        (``sigmoid(W_g h + b)`` of the same position), ``span_states`` from :meth:`span_inputs` over
        the ``R`` rows. Only the ``m - 1`` spans ``[t-k, t]``, ``k = 0..m-2``, are scored (the
        released ``_compute_span_repr_`` builds ``max_span_length - 1`` of them); their
        representation is ``g' = tanh(gate_t * g([t-k, t]))``, the score ``v . tanh(q_t + g' @ w_span)``
        (or ``fixed_scores[k]``) and the context ``sum_k w_k g'_k``. Returns ``(context [B, R, 2D],
        scores [B, R, m])`` with column ``m - 1`` and the spans starting before row 0 at ``-inf``.

        Not the fused :func:`induce.kernels.span_attention`: the gate sits inside the ``tanh`` of
        every span, so it cannot be applied outside the kernel; this path stores ``[B, R, m-1, 2D]``.
        """
        c_fwd, logf_fwd, c_bwd, logf_bwd = span_states
        n_spans = max_len - 1
        fwd = span_representations(c_fwd, logf_fwd, n_spans)  # [B, R, m-1, D]
        bwd = span_representations(c_bwd, logf_bwd, n_spans, reverse=True)
        spans = torch.tanh(row_gate.unsqueeze(2) * torch.cat([fwd, bwd], -1))  # [B, R, m-1, 2D]
        rows = spans.size(1)
        if fixed_scores is None:
            hidden = torch.tanh(torch.matmul(spans, self.w_span) + row_query.unsqueeze(2))
            scores = torch.matmul(hidden, self.v)  # [B, R, m-1]
        else:
            scores = fixed_scores[:n_spans].to(spans.dtype).expand(spans.size(0), rows, n_spans)
        starts = torch.arange(rows, device=spans.device)[:, None] - torch.arange(n_spans, device=spans.device)
        scores = scores.masked_fill(starts < 0, float("-inf"))
        weights = torch.softmax(scores.to(_accumulation_dtype(scores)), -1).to(spans.dtype)
        context = torch.matmul(weights.unsqueeze(2), spans).squeeze(2)
        scores = torch.cat([scores, scores.new_full((*scores.shape[:2], 1), float("-inf"))], -1)
        return context, scores

    def mix_context(self, h: torch.Tensor, context: torch.Tensor,
                    residual: Optional[torch.Tensor] = None) -> torch.Tensor:
        """``h, context -> h_hat [B, T, H]`` (``h [B, T, H]``, ``context [B, T, 2D]``).

        paper (Eq. 6): ``g * tanh(W_m [h; a]) + (1 - g) * h``, ``g = sigmoid(W_g [h; a])``.
        released (model.py, ``RNNModel.forward``): ``a' = drop(a)``, ``g = sigmoid(W_g [h; a'])``,
        ``h_hat = drop(g * residual + (1 - g) * drop(tanh(W a')))`` with three locked dropouts of rate
        ``dropout``; ``residual`` is the layer output before its own dropout (default: ``h``).
        """
        if self.variant == "released":
            p, training = self.dropout, self.training
            context = locked_dropout(context, p, training)
            gate = torch.sigmoid(self.mix_gate(torch.cat([h, context], -1)))
            mlp = locked_dropout(torch.tanh(self.mix_mlp(context)), p, training)
            residual = h if residual is None else residual
            return locked_dropout(gate * residual + (1 - gate) * mlp, p, training)
        mlp, gate = self.mix(torch.cat([h, context], -1)).chunk(2, -1)
        gate = torch.sigmoid(gate)
        return gate * torch.tanh(mlp) + (1 - gate) * h

    def forward(self, h: torch.Tensor, memory: Optional[torch.Tensor], max_len: int,
                fixed_scores: Optional[torch.Tensor] = None, residual: Optional[torch.Tensor] = None):
        """h ``[B, T, H]`` (current positions), memory ``[B, P, H]`` (previous positions) or None;
        ``residual [B, T, H]``: the released variant's residual input (the undropped layer output).

        Returns ``h_hat [B, T, H]`` and ``span_scores [B, T, max_len]`` (row t: spans ending at t, scored
        with the query of t+1; row T-1 is -inf; released: column ``max_len - 1`` is -inf too).
        """
        batch, steps, _ = h.shape
        prev = 0 if memory is None else memory.size(1)
        seq = h if prev == 0 else torch.cat([memory, h], 1)  # [B, S = P + T, H]
        two_d = 2 * self.rrnn_size
        released = self.variant == "released"
        # Kernel rows r = 0 .. S-2 (spans ending at sequence position r) with the query of position r+1.
        rows = prev + steps - 1
        scores = h.new_full((batch, steps, max_len), float("-inf"))
        context = h.new_zeros(batch, steps, two_d)
        if rows > 0:
            span_states = self.span_inputs(seq[:, :rows])
            # Row prev+t-1 takes the query of position t; rows before prev-1 (older memory) are
            # only needed as span starts, their own outputs are dropped (zero query inputs).
            row_h = h[:, 1:] if prev == 0 else torch.cat([h.new_zeros(batch, prev - 1, h.size(-1)), h], 1)
            row_query = self.query(row_h)
            self.last_relevant = None
            if released:
                c_fwd, logf_fwd, c_bwd, logf_bwd = span_states
                # span_parser.py drops the rational RNN states (locked, rate dropouth); the span
                # representations are linear in them, so this is the same mask on every span.
                c_fwd = locked_dropout(c_fwd, self.dropout, self.training)
                c_bwd = locked_dropout(c_bwd, self.dropout, self.training)
                row_gate = torch.sigmoid(self.span_gate(row_h))
                row_context, row_scores = self.released_attention(
                    row_query, row_gate, (c_fwd, logf_fwd, c_bwd, logf_bwd), max_len, fixed_scores
                )
            else:
                row_context, row_scores = span_attention(
                    row_query, *span_states, self.w_span, self.v, max_len, fixed_scores=fixed_scores
                )
                if self.relevant_set and rows > max_len:  # some row has a start beyond its window
                    row_context = self._with_relevant_spans(
                        row_context, row_scores, span_states, row_query, max(prev - 1, 0), fixed_scores
                    )
            # position t reads the row of spans ending at t-1 (row prev + t - 1)
            if prev == 0:
                context = torch.cat([context[:, :1], row_context], 1)
            else:
                context = row_context[:, prev - 1 :]
            # span_scores[t] = spans ending at current position t = row prev + t, for t <= T-2
            if steps > 1:
                scores = torch.cat([row_scores[:, prev:], scores[:, :1]], 1)
        return self.mix_context(h, context, residual), scores

    def _with_relevant_spans(self, row_context, row_scores, span_states, row_query, first_row: int,
                             fixed_scores: Optional[torch.Tensor]) -> torch.Tensor:
        """The kernel's window context ``[B, R, 2D]`` re-weighted by the joint softmax over the window
        and the relevant extra spans of every row ``>= first_row`` (rows before are returned as is)."""
        beta, index, valid = relevant_span_starts(row_scores, self.relevant_set, first_row)
        index, valid = index[:, first_row:], valid[:, first_row:]
        self.last_relevant = {"beta": beta, "index": index, "valid": valid, "first_row": first_row}
        fwd, bwd = relevant_span_representations(*span_states, index, valid, first_row)  # [B, R', rho, D]
        dim = fwd.size(-1)
        if fixed_scores is None:
            hidden = torch.matmul(fwd, self.w_span[:dim]) + torch.matmul(bwd, self.w_span[dim:])
            extra = torch.matmul(torch.tanh(hidden + row_query[:, first_row:, None, :]), self.v)  # [B, R', rho]
        else:  # PaLM-RB: the span length, as the fixed window scores k + 1
            ends = torch.arange(first_row, row_scores.size(1), device=index.device)
            extra = (ends[None, :, None] - index + 1).to(row_scores.dtype)
        acc = _accumulation_dtype(row_scores)
        extra = extra.to(acc).masked_fill(~valid, float("-inf"))
        window = row_scores[:, first_row:].to(acc)
        top = torch.maximum(window.max(-1).values, extra.max(-1).values).detach().unsqueeze(-1)  # finite: k = 0
        window_mass = torch.exp(window - top).sum(-1, keepdim=True)  # [B, R', 1]
        extra_weights = torch.exp(extra - top)  # [B, R', rho], 0 where not valid
        total = window_mass + extra_weights.sum(-1, keepdim=True)
        extra_weights = (extra_weights / total).unsqueeze(-1)
        added = torch.cat([(extra_weights * fwd).sum(2), (extra_weights * bwd).sum(2)], -1)
        rows_context = row_context[:, first_row:] * (window_mass / total) + added
        return torch.cat([row_context[:, :first_row], rows_context.to(row_context.dtype)], 1)

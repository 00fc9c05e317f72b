"""PaLM (Peng, Schwartz and Smith, 2019): an AWD-LSTM with attention over the spans of the left context.

After the first ``attention_after`` LSTM layers (default 2 of 3, Appendix A) the layer output
``h_t [B, T, H]`` feeds

* a bidirectional rational RNN (Eq. 1): ``f = sigmoid(W_f h)``, ``u = (1 - f) * tanh(W_u h)``,
  ``c_t = f_t c_{t-1} + u_t`` (``linear_scan`` in log space), forward and backward;
* span representations ``g([i, j]) = [c_fwd(i, j); c_bwd(i, j)]`` (Eq. 2, by subtraction);
* span scores ``s = v . tanh(W_q h_{t+1} + g(span) @ w_span)`` and attention (Eq. 3) — all inside
  :func:`induce.kernels.span_attention`;
* ``h_bar = [h; a]`` and ``h_hat = g_r * tanh(W_m h_bar) + (1 - g_r) * h`` with
  ``g_r = sigmoid(W_g h_bar)`` (Eq. 6), which goes on to the next LSTM layer.

**Time alignment.** At position ``t`` (hidden ``h_t``) PaLM attends over the spans ending at
``t - 1`` (Sec. 2.1: "at step t, PaLM attends over the spans ending at t-1"). The kernel scores the
spans ending at its own position, so it gets the queries shifted by one: query row ``s`` is
``W_q h_{s+1}`` and its context is used at position ``s + 1``. Hence

* ``structure["span_scores"][b, t, k]`` scores the span ``[t-k, t]``, computed with the query of
  position ``t + 1``; the last row of a segment has no next position and is ``-inf``;
* the spans may reach back into the previous BPTT segment: the state carries the last ``m``
  span-layer outputs, which are prepended before the rational RNN runs; a fresh state carries none,
  so the first position of a sequence gets a zero context.

**Relevant set beyond the window** (``relevant_set: rho``, default 0 = off: exactly the model
above). Kerg et al.'s (2020) relevancy screening (:mod:`induce.relevancy`) applied to the span
starts: at kernel row ``t`` (the spans ending at ``t``) the window is the ``m`` spans ``[t-k, t]``,
``k < m``, i.e. start positions ``t-m+1 .. t``. A start ``i`` is in the window at rows
``t = i .. i+m-1``; its relevance ``beta(i)`` is the total attention the spans starting at ``i``
received there (the kernel's window softmax, detached: the screening is not differentiated, as in
the paper). At every row ``t`` the ``rho`` most relevant starts ``i <= t - m`` (top-``rho`` by
``beta``, earlier positions winning ties: :func:`induce.relevancy.relevant_indices` with ``nu = m``)
add the extra spans ``[i, t]``:

* representation: the same Alg. 1 formula as the window spans, bidirectional,
  ``fwd = c_t - c_{i-1} * exp(F_t - F_{i-1})`` and ``bwd = c^b_i - c^b_{t+1} * exp(B_t - B_{i-1})``
  with ``F``, ``B`` the cumulative log forget gates (O(1) per span, plain torch on top of the
  kernel's ``c`` and ``log f``: :func:`relevant_span_representations`);
* score: the same MLP ``v . tanh(W_q h_{t+1} + g @ w_span)`` (PaLM-RB: the span length, the fixed
  scores ``k + 1`` continued);
* weights: one softmax over the ``m`` window spans and the extra spans together. The kernel's
  window context is rescaled by the window's share of the joint normaliser and the extra spans'
  weighted representations are added, which equals the joint softmax exactly.

``beta`` uses the window-only softmax the kernel returns (not the joint one): that keeps the
screening parallel (no step-by-step dependence of the set on earlier joint weights). Only rows with
a real query count (the carried memory's older rows are only span starts). The relevant set is
built per ``forward`` over the positions the rational RNN runs on (the ``<= m`` carried outputs
and the segment); it does not carry over BPTT segments, and the starts in the carried memory have
the relevance of this segment's rows only. ``structure["span_scores"]`` stays the ``m`` window
scores: the parser (and PaLM-S's supervision) read the window only. Parsing lifts ``m`` to the
sentence length, so no start is ever beyond the window there.

**Paper vs released code** (``variant``; default ``paper`` in the class, ``released`` in
``configs/palm*.yaml``). The authors' code (github.com/Noahs-ARK/PaLM, read at commit fe943bb; the
parsing script ``eval_parsing.py`` only in its first commit 0888e06) differs from the equations above;
``variant: released`` switches all of these:

* span gate (``span_parser.py``, ``SpanScorer.forward`` / ``_compute_gate_``): every span
  representation becomes ``g' = tanh(sigmoid(W_g h_q + b) * g(span))`` with ``h_q`` the querying
  position; ``g'`` feeds both the scoring MLP and the context. The gate sits inside a ``tanh`` per
  span, so it cannot be applied outside the fused :func:`induce.kernels.span_attention`; the
  released path computes the attention in plain torch on top of :func:`induce.kernels.span_representations`
  (``[B, R, m-1, 2D]`` stored: more memory than the fused kernel; no GPU figures for it);
* the rational RNN states are dropped with a locked mask (rate ``dropouth``) before the span
  representations (``SpanScorer.forward``, ``self._lockdrop_(rrnn_h_fw, ...)``);
* residual form (``model.py``, ``RNNModel.forward``): ``h_hat = drop(g * h_raw + (1 - g) *
  drop(tanh(W drop(a))))``, ``g = sigmoid(W_g [h; drop(a)])``: the gate multiplies the layer's
  output *before* its dropout, the MLP reads the context only, and three more locked dropouts
  (rate ``dropouth``);
* no ``tanh`` on the rational RNN's update and no bias on it (``rrnn.py``, ``RRNNCell.forward``:
  ``u = u_ * (1 - f)``, only the forget half of the bias used): ``u = (1 - f) * W_u h``;
* ``m - 1`` spans (``SpanScorer._compute_span_repr_`` builds ``max_span_length - 1``): column
  ``m - 1`` of ``span_scores`` is ``-inf``; parsing lifts the span count so every span is scored;
* sizes of ``train.sh`` as defaults (:data:`RELEASED_DEFAULTS`: 1,120 hidden units, wdrop 0.5,
  dropouth 0.3, m = 10; the paper's Table 5: 1,020, 0.45, 0.2, m = 20); explicit values win;
* parsing carries the LSTM state from one test sentence to the next (``eval_parsing.py``,
  ``parse``: ``hidden`` is carried, ``c_hidden`` reset per sentence): ``parse_state_carry`` is true
  and :func:`induce.parsing.parse_batch` reads the sentences in the given order as one stream
  (:meth:`PaLMBase.parse_stream`; the first sentence from a fresh state after an ``<eos>``, where the
  released script starts from a zero state without it).

Not reproduced: the released code scores, at the start of training, spans that reach into its zero
initial span memory (we mask them, as the paper variant does); its initialisations
(block-orthogonal LSTM weights, xavier gains); ``main.py``'s fine-tuning restart at epoch 400. The
released training schedule (SGD lr 30 for the LM, the scorer in its own Adam, nonmono 15) is
``optim.scorer_optimizer: adam`` (:mod:`induce.training.optim`). Which variant shows the paper's
Table 3/4 behaviour (strongly right-branching attention) needs full-size GPU runs: not measured.

Variants: ``palm-s`` adds ``lambda * CE(gold, attention)`` (Eq. 5) from ``gold_spans [B, T, m]``
(same ``[t-k, t]`` convention, see :func:`induce.parsing.gold_span_targets`); ``palm-rb`` fixes the
scores to ``s[t, k] = k + 1`` (longer spans score higher) so that the greedy parser of
:mod:`induce.parsing` returns right-branching trees.
"""
from __future__ import annotations

from typing import Any, ClassVar, Literal, Optional

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import linear_scan, span_attention, span_representations
from induce.relevancy import gather_relevant, relevant_indices

from .awd import AWDConfig, DropoutRate, PositiveInt, TiedLanguageModel, WeightDropLSTM, locked_dropout
from .base import LMOutput
from .registry import register

#: Attribute set (True) on the span scorer's parameters; ``optim.scorer_optimizer: adam`` reads it.
SCORER_MARK = "induce_span_scorer"


class PaLMConfig(AWDConfig):
    """PaLM hyper-parameters (defaults: Table 5 and Appendix A, PTB)."""

    emb_size: PositiveInt = 400
    hidden_size: PositiveInt = 1020
    n_layers: PositiveInt = 3
    dropout: DropoutRate = 0.4
    dropouth: DropoutRate = 0.2
    dropouti: DropoutRate = 0.4
    dropoute: DropoutRate = 0.1
    wdrop: DropoutRate = 0.45
    attention_after: int = pydantic.Field(2, ge=1, description="span attention after this many LSTM layers")
    rrnn_size: int = pydantic.Field(200, gt=0, description="rational RNN size per direction (context = 2x)")
    # The paper does not give the scoring MLP's size; 100 is ``parser_size`` in the authors' released
    # training script (Noahs-ARK/PaLM, train.sh), next to rational RNN 2 x 200 and context 400.
    attention_size: int = pydantic.Field(100, gt=0, description="hidden size of the span-scoring MLP")
    max_span_length: int = pydantic.Field(20, ge=1, description="m: spans of length 1..m end at each step")
    supervision_weight: float = pydantic.Field(0.01, ge=0, description="lambda of PaLM-S (ignored otherwise)")
    relevant_set: int = pydantic.Field(
        0, ge=0, description="rho: extra spans [i, t] from the rho most relevant starts i <= t-m (0 = off)"
    )
    variant: Literal["paper", "released"] = pydantic.Field(
        "paper",
        description="paper: Eqs. 1-3 and 6 of the paper; released: the authors' code (Noahs-ARK/PaLM), see the module docstring",
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _released_defaults(cls, data: Any) -> Any:
        """``variant: released`` also changes the defaults of the sizes the released ``train.sh`` uses
        (a value given explicitly still wins)."""
        if isinstance(data, dict) and data.get("variant") == "released":
            data = {**RELEASED_DEFAULTS, **data}
        return data

    @pydantic.model_validator(mode="after")
    def _check_layers(self):
        if self.attention_after >= self.n_layers:
            raise ValueError(f"attention_after {self.attention_after} must be < n_layers {self.n_layers}")
        if self.variant == "released" and self.relevant_set:
            raise ValueError("relevant_set applies to variant 'paper' only (the released span gate is not implemented for it)")
        if self.variant == "released" and self.max_span_length < 2:
            raise ValueError("variant 'released' scores m-1 spans: max_span_length must be >= 2")
        return self


#: Hyper-parameters of the authors' ``train.sh`` (Noahs-ARK/PaLM) that differ from the paper's Table 5
#: / Appendix A; the defaults of ``variant: released``.
RELEASED_DEFAULTS = {"hidden_size": 1120, "wdrop": 0.5, "dropouth": 0.3, "max_span_length": 10}


def _accumulation_dtype(x: torch.Tensor) -> torch.dtype:
    """float32 for half types, else the tensor's own floating type (float64 stays float64)."""
    return torch.promote_types(x.dtype, torch.float32)


def relevant_span_starts(row_scores: torch.Tensor, rho: int, first_row: int = 0):
    """Screening of the span starts from the window attention (see the module docstring).

    ``row_scores [B, R, m]`` (kernel rows: entry ``[b, t, k]`` scores the span ``[t-k, t]``, ``-inf``
    when invalid); rows before ``first_row`` have no real query and do not count. Returns ``beta
    [B, R]`` (at least float32, detached: ``beta[b, i]`` = sum over rows ``t = i .. i+m-1``, ``t >=
    first_row``, of the window softmax weight of ``[i, t]``) and ``index, valid [B, R, rho]`` from
    :func:`induce.relevancy.relevant_indices` with ``nu = m``: the starts ``i <= t - m`` of row ``t``.
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


class SpanAttention(nn.Module):
    """Span attention block of PaLM: ``h [B, T, H]`` -> ``(h_hat [B, T, H], scores [B, T, m])``.

    See the module docstring for the equations, the time alignment, ``relevant_set`` and the two
    variants. With ``relevant_set > 0`` the last forward's screening is kept (detached) in
    ``last_relevant``: ``{"beta": [B, R], "index", "valid": [B, R - first_row, rho], "first_row": int}``
    over the kernel rows (sequence positions of ``[memory; h]``), or ``None`` when no start was beyond
    the window. ``dropout`` is the released variant's locked dropout (``dropouth``); the paper variant
    has none inside the block.
    """

    def __init__(self, hidden_size: int, rrnn_size: int, attention_size: int, relevant_set: int = 0,
                 variant: str = "paper", dropout: float = 0.0):
        super().__init__()
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
        nn.init.xavier_uniform_(self.w_span)
        nn.init.uniform_(self.v, -attention_size**-0.5, attention_size**-0.5)
        if released:
            # h_hat = g * h + (1 - g) * tanh(W a), g = sigmoid(W_g [h; a]) (model.py, RNNModel.forward)
            self.mix_gate = nn.Linear(hidden_size + 2 * rrnn_size, hidden_size)
            self.mix_mlp = nn.Linear(2 * rrnn_size, hidden_size)
        else:
            # [MLP | residual gate] of h_bar = [h; a], one matmul.
            self.mix = nn.Linear(hidden_size + 2 * rrnn_size, 2 * hidden_size)

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

    def mix_context(self, h: torch.Tensor, context: torch.Tensor, residual: Optional[torch.Tensor] = None) -> torch.Tensor:
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


class PaLMBase(TiedLanguageModel):
    """AWD-LSTM with PaLM span attention; subclasses differ in supervision / fixed scores."""

    parser_kind = "span"
    Config = PaLMConfig
    #: the span scorer's parameters carry :data:`SCORER_MARK` (``optim.scorer_optimizer: adam``).
    has_span_scorer: ClassVar[bool] = True
    #: whether the span scores are replaced by the constants ``k + 1`` (right-branching).
    fixed_right_branching: ClassVar[bool] = False
    #: whether ``gold_spans`` adds the supervised attention loss.
    supervised: ClassVar[bool] = False

    def __init__(self, vocab_size: int, config: PaLMConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        sizes = [cfg.emb_size] + [cfg.hidden_size] * (cfg.n_layers - 1) + [cfg.emb_size]
        self.layers = nn.ModuleList(WeightDropLSTM(sizes[l], sizes[l + 1], cfg.wdrop) for l in range(cfg.n_layers))
        self.span_attention = SpanAttention(
            sizes[cfg.attention_after], cfg.rrnn_size, cfg.attention_size, relevant_set=cfg.relevant_set,
            variant=cfg.variant, dropout=cfg.dropouth,
        )
        # Marks the span scorer for ``optim.scorer_optimizer: adam`` (induce.training.optim reads the
        # mark: the optimiser only ever sees the parameter objects).
        for param in self.span_attention.scorer_parameters():
            setattr(param, SCORER_MARK, True)

    @property
    def parse_state_carry(self) -> bool:
        """Whether the parser reads a corpus as one stream, carrying the LSTM state from one sentence
        to the next (the released ``eval_parsing.py``): only ``variant: released``."""
        return self.config.variant == "released"

    def init_state(self, batch_size: int, device="cpu"):
        """``(list of (h [B, H_l], c [B, H_l]) per layer, memory)``; ``memory`` holds the last
        ``<= m`` span-layer outputs ``[B, P, H]`` (``None`` when fresh)."""
        weight = self.embedding.weight
        states = [
            (weight.new_zeros(batch_size, layer.hidden_size, device=device),
             weight.new_zeros(batch_size, layer.hidden_size, device=device))
            for layer in self.layers
        ]
        return (states, None)

    def _fixed_scores(self, max_len: int, like: torch.Tensor) -> Optional[torch.Tensor]:
        if not self.fixed_right_branching:
            return None
        return torch.arange(1, max_len + 1, dtype=like.dtype, device=like.device)

    def _run(self, tokens: torch.Tensor, state, max_len: int, scores_only: bool = False):
        """All layers; with ``scores_only`` stop after the span attention (parsing needs no more)."""
        cfg = self.config
        lstm_states, memory = state
        x = locked_dropout(self.embed(tokens), cfg.dropouti, self.training)
        raw_outputs, dropped_outputs, new_states = [], [], []
        scores, new_memory = None, memory
        for l, layer in enumerate(self.layers):
            out, layer_state = layer(x, lstm_states[l])
            new_states.append(layer_state)
            raw_outputs.append(out)
            last = l == len(self.layers) - 1
            x = locked_dropout(out, cfg.dropout if last else cfg.dropouth, self.training)
            dropped_outputs.append(x)
            if l + 1 == cfg.attention_after:
                seq = x if memory is None else torch.cat([memory, x], 1)
                new_memory = seq[:, -cfg.max_span_length :]
                x, scores = self.span_attention(x, memory, max_len, self._fixed_scores(max_len, x), residual=out)
                if scores_only:
                    break
        return x, (new_states, new_memory), raw_outputs, dropped_outputs, scores

    def forward(self, tokens: torch.Tensor, state, gold_spans: Optional[torch.Tensor] = None) -> LMOutput:
        """``tokens [B, T]`` -> hidden ``[B, T, E]``, ``span_scores [B, T, m]``; PaLM-S also reads
        ``gold_spans [B, T, m]`` (rows summing to 1 or 0) and returns the weighted loss in ``extra_loss``."""
        m = self.config.max_span_length
        hidden, new_state, raw, dropped, scores = self._run(tokens, state, m)
        extra = None
        if self.supervised and gold_spans is not None:
            extra = self.config.supervision_weight * attention_cross_entropy(scores, gold_spans.to(scores.dtype))
        return LMOutput(hidden=hidden, state=new_state, raw_outputs=raw, dropped_outputs=dropped,
                        extra_loss=extra, structure={"span_scores": scores})

    def _parse_span_count(self, steps: int) -> int:
        """The ``max_len`` that scores every span of a ``steps``-token input (released: m - 1 spans)."""
        return steps + 1 if self.config.variant == "released" else steps

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Span scores ``[B, T, m']`` of whole sentences, each from a fresh state (max span length lifted
        to the padded length: ``m' = T``, or ``T + 1`` for the released variant, which scores m' - 1)."""
        state = self.init_state(tokens.size(0), tokens.device)
        *_, scores = self._run(tokens, state, self._parse_span_count(tokens.size(1)), scores_only=True)
        return {"span_scores": scores}

    @torch.no_grad()
    def parse_stream(self, sentences, eos_id: int) -> list[torch.Tensor]:
        """Span scores of consecutive sentences read as one stream ``<eos> s_1 <eos> s_2 <eos> ...``.

        ``sentences``: token ids per sentence (no ``<eos>``), in corpus order. Each sentence runs as
        its own segment, ``s_i <eos>`` (the first one ``<eos> s_1 <eos>``), starting from the LSTM
        states the previous segment ended with; the span memory starts empty for every sentence, so
        no span reaches into the previous sentence (as the released ``eval_parsing.py``, which carries
        ``hidden`` and resets ``c_hidden``). Returns per sentence of ``n`` words the table
        ``[n, m']`` whose row ``i`` scores the spans ending at word ``i`` (for
        :func:`induce.parsing.span_tree`). Batch of one sentence at a time, eval mode assumed.
        """
        device = self.embedding.weight.device
        state = self.init_state(1, device)
        tables = []
        for index, sentence in enumerate(sentences):
            ids = ([eos_id] if index == 0 else []) + list(sentence) + [eos_id]
            offset = 1 if index == 0 else 0
            tokens = torch.as_tensor(ids, dtype=torch.long, device=device).unsqueeze(0)
            _, (new_states, _), _, _, scores = self._run(tokens, state, self._parse_span_count(len(ids)), scores_only=True)
            # layers above the span attention do not run when parsing: their state stays as it was
            state = (new_states + state[0][len(new_states):], None)
            tables.append(scores[0, offset : offset + len(sentence)])
        return tables


def attention_cross_entropy(scores: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean over all ``B*T`` positions of ``H(y_t, softmax(s_t))`` for ``scores, targets [B, T, m]``.

    Spans the model cannot attend to (score ``-inf``: before the available context, or the last row
    of a segment) are left out of the sum; rows of zeros (no gold span) contribute 0.
    """
    finite = torch.isfinite(scores)
    row_valid = finite.any(-1, keepdim=True)
    safe = torch.where(row_valid, scores, torch.zeros_like(scores))
    log_probs = torch.where(finite, torch.log_softmax(safe, -1), torch.zeros_like(scores))
    return -(targets * log_probs).sum(-1).mean()


@register
class PaLM(PaLMBase):
    name = "palm"
    description = "PaLM-U (Peng et al., 2019): AWD-LSTM + unsupervised attention over left-context spans"


@register
class PaLMSupervised(PaLMBase):
    name = "palm-s"
    description = "PaLM-S: PaLM with span attention supervised by gold constituents (lambda * cross-entropy)"
    supervised = True


@register
class PaLMRightBranching(PaLMBase):
    name = "palm-rb"
    description = "PaLM-RB: PaLM with span scores fixed to k+1 (longest span first: right-branching parses)"
    fixed_right_branching = True
    control = True  # its trees do not depend on what it learns: a control, never a default parser

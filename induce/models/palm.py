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

Variants: ``palm-s`` adds ``lambda * CE(gold, attention)`` (Eq. 5) from ``gold_spans [B, T, m]``
(same ``[t-k, t]`` convention, see :func:`induce.parsing.gold_span_targets`); ``palm-rb`` fixes the
scores to ``s[t, k] = k + 1`` (longer spans score higher) so that the greedy parser of
:mod:`induce.parsing` returns right-branching trees.
"""
from __future__ import annotations

from typing import ClassVar, Optional

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import linear_scan, span_attention

from .awd import AWDConfig, TiedLanguageModel, WeightDropLSTM, locked_dropout
from .base import LMOutput
from .registry import register


class PaLMConfig(AWDConfig):
    """PaLM hyper-parameters (defaults: Table 5 and Appendix A, PTB)."""

    emb_size: int = 400
    hidden_size: int = 1020
    n_layers: int = 3
    dropout: float = 0.4
    dropouth: float = 0.2
    dropouti: float = 0.4
    dropoute: float = 0.1
    wdrop: float = 0.45
    attention_after: int = pydantic.Field(2, ge=1, description="span attention after this many LSTM layers")
    rrnn_size: int = pydantic.Field(200, gt=0, description="rational RNN size per direction (context = 2x)")
    attention_size: int = pydantic.Field(400, gt=0, description="hidden size of the span-scoring MLP")
    max_span_length: int = pydantic.Field(20, ge=1, description="m: spans of length 1..m end at each step")
    supervision_weight: float = pydantic.Field(0.01, ge=0, description="lambda of PaLM-S (ignored otherwise)")

    @pydantic.model_validator(mode="after")
    def _check_layers(self):
        if self.attention_after >= self.n_layers:
            raise ValueError(f"attention_after {self.attention_after} must be < n_layers {self.n_layers}")
        return self


class SpanAttention(nn.Module):
    """Span attention block of PaLM: ``h [B, T, H]`` -> ``(h_hat [B, T, H], scores [B, T, m])``.

    See the module docstring for the equations and the time alignment.
    """

    def __init__(self, hidden_size: int, rrnn_size: int, attention_size: int):
        super().__init__()
        self.rrnn_size = rrnn_size
        # forget / update logits of both directions from one matmul: [f_fwd | u_fwd | f_bwd | u_bwd].
        self.rrnn = nn.Linear(hidden_size, 4 * rrnn_size)
        self.query = nn.Linear(hidden_size, attention_size)
        self.w_span = nn.Parameter(torch.empty(2 * rrnn_size, attention_size))
        self.v = nn.Parameter(torch.empty(attention_size))
        nn.init.xavier_uniform_(self.w_span)
        nn.init.uniform_(self.v, -attention_size**-0.5, attention_size**-0.5)
        # [MLP | residual gate] of h_bar = [h; a], one matmul.
        self.mix = nn.Linear(hidden_size + 2 * rrnn_size, 2 * hidden_size)

    def span_inputs(self, seq: torch.Tensor):
        """``seq [B, S, H]`` -> forward/backward rational RNN states and log forget gates ``[B, S, D]``."""
        f_fwd, u_fwd, f_bwd, u_bwd = self.rrnn(seq).chunk(4, -1)
        logf_fwd, logf_bwd = F.logsigmoid(f_fwd), F.logsigmoid(f_bwd)
        # (1 - sigmoid(a)) = sigmoid(-a)
        u_fwd = torch.sigmoid(-f_fwd) * torch.tanh(u_fwd)
        u_bwd = torch.sigmoid(-f_bwd) * torch.tanh(u_bwd)
        c_fwd = linear_scan(logf_fwd, u_fwd)
        c_bwd = linear_scan(logf_bwd, u_bwd, reverse=True)
        return c_fwd, logf_fwd, c_bwd, logf_bwd

    def forward(self, h: torch.Tensor, memory: Optional[torch.Tensor], max_len: int,
                fixed_scores: Optional[torch.Tensor] = None):
        """h ``[B, T, H]`` (current positions), memory ``[B, P, H]`` (previous positions) or None.

        Returns ``h_hat [B, T, H]`` and ``span_scores [B, T, max_len]`` (row t: spans ending at t, scored
        with the query of t+1; row T-1 is -inf).
        """
        batch, steps, _ = h.shape
        prev = 0 if memory is None else memory.size(1)
        seq = h if prev == 0 else torch.cat([memory, h], 1)  # [B, S = P + T, H]
        two_d = 2 * self.rrnn_size
        query = self.query(h)  # [B, T, A]: query of position t is used for the spans ending at t-1
        # Kernel rows r = 0 .. S-2 (spans ending at sequence position r) with the query of position r+1.
        rows = prev + steps - 1
        scores = h.new_full((batch, steps, max_len), float("-inf"))
        context = h.new_zeros(batch, steps, two_d)
        if rows > 0:
            span_states = self.span_inputs(seq[:, :rows])
            # Row prev+t-1 takes the query of position t; rows before prev-1 (older memory) are
            # only needed as span starts, their own outputs are dropped (zero queries).
            if prev == 0:
                row_query = query[:, 1:]
            else:
                row_query = torch.cat([query.new_zeros(batch, prev - 1, query.size(-1)), query], 1)
            row_context, row_scores = span_attention(
                row_query, *span_states, self.w_span, self.v, max_len, fixed_scores=fixed_scores
            )
            # position t reads the row of spans ending at t-1 (row prev + t - 1)
            if prev == 0:
                context = torch.cat([context[:, :1], row_context], 1)
            else:
                context = row_context[:, prev - 1 :]
            # span_scores[t] = spans ending at current position t = row prev + t, for t <= T-2
            if steps > 1:
                scores = torch.cat([row_scores[:, prev:], scores[:, :1]], 1)
        h_bar = torch.cat([h, context], -1)
        mlp, gate = self.mix(h_bar).chunk(2, -1)
        gate = torch.sigmoid(gate)
        h_hat = gate * torch.tanh(mlp) + (1 - gate) * h
        return h_hat, scores


class PaLMBase(TiedLanguageModel):
    """AWD-LSTM with PaLM span attention; subclasses differ in supervision / fixed scores."""

    parser_kind = "span"
    Config = PaLMConfig
    #: whether the span scores are replaced by the constants ``k + 1`` (right-branching).
    fixed_right_branching: ClassVar[bool] = False
    #: whether ``gold_spans`` adds the supervised attention loss.
    supervised: ClassVar[bool] = False

    def __init__(self, vocab_size: int, config: PaLMConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        sizes = [cfg.emb_size] + [cfg.hidden_size] * (cfg.n_layers - 1) + [cfg.emb_size]
        self.layers = nn.ModuleList(WeightDropLSTM(sizes[l], sizes[l + 1], cfg.wdrop) for l in range(cfg.n_layers))
        self.span_attention = SpanAttention(sizes[cfg.attention_after], cfg.rrnn_size, cfg.attention_size)

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
                x, scores = self.span_attention(x, memory, max_len, self._fixed_scores(max_len, x))
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

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Span scores ``[B, T, T]`` of whole sentences (max span length lifted to the padded length)."""
        state = self.init_state(tokens.size(0), tokens.device)
        *_, scores = self._run(tokens, state, tokens.size(1), scores_only=True)
        return {"span_scores": scores}


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

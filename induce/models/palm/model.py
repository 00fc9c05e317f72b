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
above). Kerg et al.'s (2020) relevancy screening (:mod:`induce.models.common.relevancy`) applied to the span
starts: at kernel row ``t`` (the spans ending at ``t``) the window is the ``m`` spans ``[t-k, t]``,
``k < m``, i.e. start positions ``t-m+1 .. t``. A start ``i`` is in the window at rows
``t = i .. i+m-1``; its relevance ``beta(i)`` is the total attention the spans starting at ``i``
received there (the kernel's window softmax, detached: the screening is not differentiated, as in
the paper). At every row ``t`` the ``rho`` most relevant starts ``i <= t - m`` (top-``rho`` by
``beta``, earlier positions winning ties: :func:`induce.models.common.relevancy.relevant_indices` with ``nu = m``)
add the extra spans ``[i, t]``:

* representation: the same Alg. 1 formula as the window spans, bidirectional,
  ``fwd = c_t - c_{i-1} * exp(F_t - F_{i-1})`` and ``bwd = c^b_i - c^b_{t+1} * exp(B_t - B_{i-1})``
  with ``F``, ``B`` the cumulative log forget gates (O(1) per span, plain torch on top of the
  kernel's ``c`` and ``log f``: :func:`~induce.models.palm.attention.relevant_span_representations`);
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
``induce/models/palm/palm*.yaml``). The authors' code (github.com/Noahs-ARK/PaLM, read at commit fe943bb; the
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
  and :func:`induce.trees.decoders.parse_batch` reads the sentences in the given order as one stream
  (:meth:`PaLMBase.parse_stream`; the first sentence from a fresh state after an ``<eos>``, where the
  released script starts from a zero state without it).

**Initialisation** (both variants: the paper states none, so the released code's, read in
``model.py`` ``init_weights``, ``span_parser.py`` ``SpanScorer.__init__`` and ``rrnn.py``
``RRNNCell.init_weights``): the (tied) embedding from ``U(+-sqrt(3 / emb_size))`` (``init_range``'s
default; an explicit value wins), an untied decoder drawn likewise on its own, decoder bias 0; each
gate block of every LSTM's ``W_ih`` and ``W_hh`` orthogonal on its own, LSTM biases 0
(:class:`~induce.models.common.awd.WeightDropLSTM` ``init="orthogonal"``); the span block's Glorot-uniform
weights with the released fans and gains and all its biases 0
(:meth:`~induce.models.palm.attention.SpanAttention.reset_parameters`). Drawn at construction only (a
checkpoint replaces them). No other draw is offered: a uniform ``U(+-1/sqrt(H))`` on every LSTM parameter
with random biases in the span gate and query (which no source uses) left the second layer's output
dominated by its mean over tokens, so untrained models split all-left or mostly-right, where the released
draw gives the paper's Table 4 shares (``bench/results/models.md``, "Initialisation and untrained models").
The paper variant keeps Eq. 1b's update bias inside the ``tanh`` ("bias terms are suppressed for clarity"), zero at
initialisation like every released bias; the released code has no update bias (``rrnn.py`` uses only
the forget half of its bias).

**Backward layout** (``backward_layout``, default ``correct``): ``released`` reproduces how the
released ``rrnn.py`` lays out the backward rational RNN's states at batch > 1: stacked ``[B, L, D]``
and read back with ``.view(L, B, -1)``, so that the state used at ``[t, b]`` is the true state of
position ``(tB + b) mod L`` of batch row ``(tB + b) div L``
(:func:`~induce.models.palm.attention.released_backward_layout`); the forget gates and the forward
direction are not moved. The authors trained (batch 20) and validated (batch 10) with it and parsed at
batch 1, where it is the identity. Our ``L`` is the number of positions the rational RNN runs over in
one forward (the carried memory, up to ``m`` positions, plus the segment, less its last position); the
released ``L`` is ``m + 1 + T`` (a memory of ``m + 1`` positions, zeros at the start): the same rule,
moving the same positions only where the lengths agree.

Not reproduced: the released code scores, at the start of training, spans that reach into its zero
initial span memory (we mask them, as the paper variant does); ``main.py``'s fine-tuning restart at epoch 400. The
released training schedule (SGD lr 30 for the LM, the scorer in its own Adam, nonmono 15) is
``optim.scorer_optimizer: adam`` (:mod:`induce.training.optim`). Which variant shows the paper's
Table 3/4 behaviour (strongly right-branching attention) needs full-size GPU runs: not measured.

Variants: ``palm-s`` adds ``lambda * CE(gold, attention)`` (Eq. 5) from ``gold_spans [B, T, m]``
(same ``[t-k, t]`` convention, see :func:`induce.trees.decoders.gold_span_targets`); ``palm-rb`` fixes the
scores to ``s[t, k] = k + 1`` (longer spans score higher) so that the greedy parser of
:mod:`induce.trees.decoders` returns right-branching trees.
"""
from __future__ import annotations

import math
from typing import Any, ClassVar, Literal, Optional

import pydantic
import torch
from torch import nn

from induce.models.base import LMOutput, ParamGroup
from induce.models.common.awd import (
    AWDConfig,
    DropoutRate,
    PositiveInt,
    TiedLanguageModel,
    WeightDropLSTM,
    locked_dropout,
)
from induce.models.registry import register
from induce.trees.kinds import SPAN

from .attention import SpanAttention

#: Attribute set (True) on the span scorer's parameters; ``optim.scorer_optimizer: adam`` reads it.
SCORER_MARK = "induce_span_scorer"


class PaLMConfig(AWDConfig):
    """PaLM hyper-parameters (defaults: Table 5 and Appendix A, PTB)."""

    #: checkpoints written before ``backward_layout`` existed computed the correct layout.
    stored_defaults: ClassVar[dict] = {"backward_layout": "correct"}

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
        description="paper: Eqs. 1-3 and 6 of the paper; released: the authors' code (Noahs-ARK/PaLM), see the module "
                    "docstring",
    )
    init_range: float = pydantic.Field(
        math.sqrt(3 / 400), gt=0,
        description="uniform init range of the embedding; default sqrt(3 / emb_size) (released model.py init_weights)",
    )
    backward_layout: Literal["correct", "released"] = pydantic.Field(
        "correct",
        description="released: the backward rational RNN states scrambled across batch rows and positions at "
        "batch > 1, as the released rrnn.py lays them out (identical at batch 1); see the module docstring",
    )

    @pydantic.model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """``variant: released`` also changes the defaults of the sizes the released ``train.sh`` uses,
        and ``init_range`` defaults to ``sqrt(3 / emb_size)`` (a value given explicitly still wins)."""
        if not isinstance(data, dict):
            return data
        if data.get("variant") == "released":
            data = {**RELEASED_DEFAULTS, **data}
        emb_size = data.get("emb_size", cls.model_fields["emb_size"].default)
        if data.get("init_range") is None and isinstance(emb_size, int) and not isinstance(emb_size,
                                                                                           bool) and emb_size > 0:
            data = {**data, "init_range": math.sqrt(3 / emb_size)}
        return data

    @pydantic.model_validator(mode="after")
    def _check_layers(self):
        if self.attention_after >= self.n_layers:
            raise ValueError(f"attention_after {self.attention_after} must be < n_layers {self.n_layers}")
        if self.variant == "released" and self.relevant_set:
            raise ValueError("relevant_set applies to variant 'paper' only (the released span gate is not implemented "
                             "for it)")
        if self.variant == "released" and self.max_span_length < 2:
            raise ValueError("variant 'released' scores m-1 spans: max_span_length must be >= 2")
        return self


#: Hyper-parameters of the authors' ``train.sh`` (Noahs-ARK/PaLM) that differ from the paper's Table 5
#: / Appendix A; the defaults of ``variant: released``.
RELEASED_DEFAULTS = {"hidden_size": 1120, "wdrop": 0.5, "dropouth": 0.3, "max_span_length": 10}


class PaLMBase(TiedLanguageModel):
    """AWD-LSTM with PaLM span attention; subclasses differ in supervision / fixed scores."""

    parser_kind = SPAN
    Config = PaLMConfig
    #: the span scorer's parameters carry :data:`SCORER_MARK`: :meth:`param_groups` gives them their own Adam
    #: (``optim.scorer_optimizer: adam``).
    has_span_scorer: ClassVar[bool] = True
    #: an untied decoder weight is its own U(+-init_range) draw (released ``model.py`` ``init_weights``).
    untied_output_init: ClassVar[str] = "uniform"

    def __init__(self, vocab_size: int, config: PaLMConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        sizes = [cfg.emb_size] + [cfg.hidden_size] * (cfg.n_layers - 1) + [cfg.emb_size]
        # The released initialisation (module docstring): block-orthogonal gates and zero biases here,
        # the embedding from U(+-init_range) = U(+-sqrt(3 / emb_size)) in TiedLanguageModel.
        self.layers = nn.ModuleList(WeightDropLSTM(sizes[depth], sizes[depth + 1], cfg.wdrop, init="orthogonal")
                                    for depth in range(cfg.n_layers))
        self.span_attention = SpanAttention(
            sizes[cfg.attention_after], cfg.rrnn_size, cfg.attention_size, relevant_set=cfg.relevant_set,
            variant=cfg.variant, dropout=cfg.dropouth, backward_layout=cfg.backward_layout,
        )
        # Marks the span scorer for ``optim.scorer_optimizer: adam`` (:meth:`param_groups` reads the mark).
        for param in self.span_attention.scorer_parameters():
            setattr(param, SCORER_MARK, True)

    def param_groups(self, optim_config) -> list[ParamGroup]:
        """``optim.scorer_optimizer: adam`` (the released ``main.py``): the LM's parameters under the run's optimiser,
        clipped at ``optim.clip``, and the span scorer's (those carrying :data:`SCORER_MARK`) in an Adam of their own
        at ``optim.scorer_lr``, clipped on their own at ``optim.scorer_clip``; after the ASGD switch (``main.py``
        builds ``ASGD(model.parameters())`` and stops stepping the scorer's Adam) one ASGD trains all of them and
        only the LM's are clipped. ``shared``: the default single group."""
        if optim_config.scorer_optimizer != "adam":
            return super().param_groups(optim_config)
        params = list(self.parameters())
        scorer = tuple(p for p in params if getattr(p, SCORER_MARK, False))
        lm = tuple(p for p in params if not getattr(p, SCORER_MARK, False))
        return [ParamGroup(lm, clip=optim_config.clip, asgd_clip=optim_config.clip),
                ParamGroup(scorer, adam_lr=optim_config.scorer_lr, clip=optim_config.scorer_clip)]

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
        for depth, layer in enumerate(self.layers):
            out, layer_state = layer(x, lstm_states[depth])
            new_states.append(layer_state)
            raw_outputs.append(out)
            last = depth == len(self.layers) - 1
            x = locked_dropout(out, cfg.dropout if last else cfg.dropouth, self.training)
            dropped_outputs.append(x)
            if depth + 1 == cfg.attention_after:
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
    def parse_stream(self, sentences, eos_id: int, chunk_tokens: int = 4096) -> list[torch.Tensor]:
        """Span scores of consecutive sentences read as one stream ``<eos> s_1 <eos> s_2 <eos> ...``.

        ``sentences``: token ids per sentence (no ``<eos>``), in corpus order. Each sentence is its
        own segment, ``s_i <eos>`` (the first one ``<eos> s_1 <eos>``), read by the LSTM layers from
        the states the previous segment ended with; the span memory starts empty for every sentence, so
        no span reaches into the previous sentence (as the released ``eval_parsing.py``, which carries
        ``hidden`` and resets ``c_hidden``). Returns per sentence of ``n`` words the table
        ``[n, m']`` whose row ``i`` scores the spans ending at word ``i`` (for
        :func:`induce.trees.decoders.span_tree`). Batch of one stream, eval mode assumed.

        Since the layers below the span attention carry their state from segment to segment, they run
        over consecutive segments of up to ``chunk_tokens`` tokens in one call per layer (the same
        recurrence as segment by segment; one layer's recurrent matrix stays in cache: about 2x faster
        at PaLM's size, where each step reads it whole); the span attention then runs per segment.
        """
        device = self.embedding.weight.device
        below = self.layers[: self.config.attention_after]
        states = self.init_state(1, device)[0][: len(below)]
        segments = [([eos_id] if index == 0 else []) + list(sentence) + [eos_id]
                    for index, sentence in enumerate(sentences)]
        tables: list[torch.Tensor] = []
        start = 0
        while start < len(segments):
            end, size = start, 0
            while end < len(segments) and (end == start or size + len(segments[end]) <= chunk_tokens):
                size += len(segments[end])
                end += 1
            ids = [token for segment in segments[start:end] for token in segment]
            x = self.embed(torch.as_tensor(ids, dtype=torch.long, device=device).unsqueeze(0))  # [1, N, E]
            for depth, layer in enumerate(below):
                x, states[depth] = layer(x, states[depth])
            position = 0
            for index in range(start, end):
                length = len(segments[index])
                h = x[:, position : position + length]  # [1, length, H]
                max_len = self._parse_span_count(length)
                _, scores = self.span_attention(h, None, max_len, self._fixed_scores(max_len, h), residual=h)
                offset = 1 if index == 0 else 0
                tables.append(scores[0, offset : offset + len(sentences[index])])
                position += length
            start = end
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
    display_name = "PaLM-U"
    published = {"table3": {"value": 42.0, "source": "Peng, Schwartz and Smith (2019), PaLM, Table 3"},
                 "table4": {"left": 1.1, "right": 85.6, "source": "Peng, Schwartz and Smith (2019), PaLM, Table 4"},
                 "table4_untrained": {"left": 39.3, "left_std": 10.5, "right": 41.2, "right_std": 8.8, "n_models": 25,
                                      "source": "Peng, Schwartz and Smith (2019), PaLM, Table 4 (25 differently "
                                                "randomly initialized PaLM models)"}}


@register
class PaLMSupervised(PaLMBase):
    name = "palm-s"
    description = "PaLM-S: PaLM with span attention supervised by gold constituents (lambda * cross-entropy)"
    display_name = "PaLM-S"
    supervised = True


@register
class PaLMRightBranching(PaLMBase):
    name = "palm-rb"
    description = "PaLM-RB: PaLM with span scores fixed to k+1 (longest span first: right-branching parses)"
    display_name = "PaLM-RB"
    fixed_right_branching = True
    control = True  # its trees do not depend on what it learns: a control, never a default parser

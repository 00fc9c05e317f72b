"""Self-attentive recurrent models of Kerg et al. (2020): RelLSTM, RelRNN and the MemLSTM baseline.

At every step (Algorithm 1 of the paper, with ``s`` the macro-state)::

    h_t = cell(x_t, s_{t-1})                       # LSTM cell (also carries c_t) or tanh RNN
    memory.push(h_t)                               # short-term buffer (+ relevancy screening)
    summary, z = memory.attend(s_{t-1})            # additive attention v^T tanh(W s_{t-1} + U m)
    s_t = h_t + summary

``rellstm`` / ``relrnn`` attend to :class:`induce.models.common.relevancy.RelevancyMemory` (at most ``nu + rho``
states: linear memory in ``T``); ``memlstm`` attends to every past state
(:class:`induce.models.common.relevancy.FullMemory`: quadratic). The output layer reads ``s_t``.

The memory is rebuilt at every ``forward`` (it does not carry over BPTT segments; only
``(s, c)`` does). These models have no syntactic structure: ``parser_kind = "none"``. They train as
language models (``induce train --model rellstm``, induce/models/relmem/rellstm.yaml): the trainer skips the
per-epoch dev F1 for them and refuses ``train.select_by=dev_f1``; ``parse_structure`` raises
:class:`NoSyntacticStructureError` (an :class:`~induce.errors.InduceError` naming the model), which
``induce parse`` and ``induce eval --checkpoint`` print as a one-line error.
"""
from __future__ import annotations

from typing import Optional

import pydantic
import torch
from torch import nn

from induce.errors import InduceError
from induce.models.base import LanguageModel, LMOutput, ModelConfig
from induce.models.common.relevancy import FullMemory, RelevancyMemory
from induce.models.registry import register
from induce.trees.kinds import NO_PARSER


class NoSyntacticStructureError(InduceError, NotImplementedError):
    """Parsing was asked of a model that has no syntactic structure (``parser_kind = "none"``)."""


class RelMemConfig(ModelConfig):
    """Hyper-parameters (defaults: Kerg et al.'s Copy-task setting nu = rho = 10, hidden 128)."""

    emb_size: int = pydantic.Field(32, gt=0, description="input embedding size")
    hidden_size: int = pydantic.Field(128, gt=0, description="recurrent state size H")
    attention_size: int = pydantic.Field(64, gt=0, description="hidden size of the additive attention")
    nu: int = pydantic.Field(10, ge=1, description="short-term buffer size (relevancy models)")
    rho: int = pydantic.Field(10, ge=0, description="maximal relevant-set size (relevancy models)")


class _AttentiveRecurrentModel(LanguageModel):
    """Shared loop: cell + memory + output layer. Subclasses choose the cell and the memory.

    Set ``keep_step_states = True`` to keep the per-step ``h_t`` tensors (``[B, H]`` each, in the
    graph) in ``self.step_states`` after ``forward``: the gradient diagnostics read their ``.grad``.
    """

    parser_kind = NO_PARSER
    Config = RelMemConfig
    cell_kind: str = "lstm"
    full_attention: bool = False

    def __init__(self, vocab_size: int, config: Optional[RelMemConfig] = None):
        super().__init__()
        self.config = config if config is not None else self.Config()
        cfg = self.config
        self.vocab_size = vocab_size
        self.embedding = nn.Embedding(vocab_size, cfg.emb_size)
        if self.cell_kind == "lstm":
            self.cell = nn.LSTMCell(cfg.emb_size, cfg.hidden_size)
        else:
            self.cell = nn.RNNCell(cfg.emb_size, cfg.hidden_size, nonlinearity="tanh")
        if self.full_attention:
            self.memory = FullMemory(cfg.hidden_size, attn_dim=cfg.attention_size)
        else:
            self.memory = RelevancyMemory(cfg.nu, cfg.rho, cfg.hidden_size, attn_dim=cfg.attention_size)
        self.decoder = nn.Linear(cfg.hidden_size, vocab_size)
        self.keep_step_states = False
        self.step_states: list[torch.Tensor] = []

    def init_state(self, batch_size: int, device="cpu"):
        """``(s [B, H], c [B, H])`` zeros (``c`` unused by the RNN cell)."""
        weight = self.decoder.weight
        zeros = weight.new_zeros(batch_size, self.config.hidden_size, device=device)
        return (zeros, zeros.clone())

    def forward(self, tokens: torch.Tensor, state=None, gold_spans=None) -> LMOutput:
        """``tokens [B, T]`` -> hidden ``s [B, T, H]``; ``raw_outputs = [h [B, T, H]]`` (cell outputs)."""
        batch, steps = tokens.shape
        if state is None:
            state = self.init_state(batch, tokens.device)
        s, c = state
        inputs = self.embedding(tokens)  # [B, T, E]
        self.memory.reset(batch, device=tokens.device, dtype=inputs.dtype)
        cell_outputs, macro_states = [], []
        for t in range(steps):
            if self.cell_kind == "lstm":
                h, c = self.cell(inputs[:, t], (s, c))
            else:
                h = self.cell(inputs[:, t], s)
            self.memory.push(h)
            summary, _ = self.memory.attend(s)
            s = h + summary
            cell_outputs.append(h)
            macro_states.append(s)
        self.step_states = cell_outputs if self.keep_step_states else []
        hidden = torch.stack(macro_states, dim=1)
        raw = torch.stack(cell_outputs, dim=1)
        return LMOutput(hidden=hidden, state=(s, c), raw_outputs=[raw], dropped_outputs=[raw])

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """``[B, T, H]`` -> ``[B, T, V]`` (untied output layer)."""
        return self.decoder(hidden)

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        raise NoSyntacticStructureError(
            f"model {self.name!r} cannot parse: it is a language model without syntactic structure "
            f"(parser_kind 'none'); parse with a model whose parser kind is 'distance' or 'span' "
            f"(see `induce models`), or use `induce eval --checkpoint RUN --lm` for its perplexity"
        )


@register
class RelLSTM(_AttentiveRecurrentModel):
    name = "rellstm"
    description = "RelLSTM (Kerg et al., 2020): LSTM + relevancy-screened attention memory (nu + rho states)"
    cell_kind = "lstm"


@register
class RelRNN(_AttentiveRecurrentModel):
    name = "relrnn"
    description = "RelRNN (Kerg et al., 2020): tanh RNN + relevancy-screened attention memory (nu + rho states)"
    cell_kind = "rnn"


@register
class MemLSTM(_AttentiveRecurrentModel):
    name = "memlstm"
    description = "MemLSTM: LSTM + additive self-attention over all past states (quadratic baseline)"
    cell_kind = "lstm"
    full_attention = True


#: The models of this module by name (usable without loading the other built-in models).
MODELS: dict[str, type[LanguageModel]] = {cls.name: cls for cls in (RelLSTM, RelRNN, MemLSTM)}

"""PRPN (Shen, Lin, Huang and Courville, 2018): Parsing-Reading-Predict Networks.

Equations from Stratos' note, section 3 (defaults: ``E = 800``, ``d = 1200``, ``M = 15`` memory slots,
``Q = 5`` look-back words, ``tau = 20``, 2 layers):

* **Parsing network.** ``d_t, d^_{t+1} = sigmoid(Conv_1x1(Drop(ReLU(BN(Conv_{Q+1}(Drop([E_{x_{t-Q}} ..
  E_{x_t}])))))))``: one convolution over the current and ``Q`` previous embeddings, then a grouped
  1x1 convolution with one output per group: ``d_t`` (distance between ``w_{t-1}`` and ``w_t``) and
  ``d^_{t+1}`` (a guess of the next word's distance, from separate parameters).
* **Gates** over the memory slots from :func:`induce.kernels.stick_breaking_gates` (``tau``):
  ``g_i^t ~ [no distance in (i, t) exceeds d_t]``.
* **Reading network**, per layer: gated scaled-dot-product attention over the memory tape of the
  last ``M`` states ``(h, c)`` with key ``Drop(ADrop([h_{t-1}; h_t^{(l-1)}]) + b)``, then an LSTM
  cell with layer normalisation that starts from the attended ``(h~, c~)`` instead of
  ``(h_{t-1}, c_{t-1})``.
* **Predict network**: the top layer's memory (including ``h_t``) read with the gates of ``d^_{t+1}``
  and key ``h_t``; ``tanh(BN(W Drop([h_t; h~_t]) + b))`` is the hidden state fed to the tied output.

Speed: everything that does not depend on ``h_{t-1}`` (input projections with their layer norm,
the input half of the attention key, all gates, dropout masks) is computed for all steps at once;
the per-step loop holds two matmuls, the attention over ``M`` slots and the cell. Dropout masks
inside the loop are drawn once per forward (variational), not per step as in the original code.
"""
from __future__ import annotations

import math
from typing import Optional

import pydantic
import torch
import torch.nn.functional as F
from torch import nn

from induce.kernels import stick_breaking_gates

from .awd import AWDConfig, RecurrentProjection, TiedLanguageModel, dropconnect, locked_dropout
from .base import LMOutput
from .registry import register


class PRPNConfig(AWDConfig):
    """PRPN hyper-parameters (defaults: Shen et al. 2018, PTB language model)."""

    emb_size: int = 800
    hidden_size: int = 1200
    n_layers: int = 2
    dropout: float = pydantic.Field(0.7, ge=0, lt=1, description="dropout before the tied output layer")
    dropouth: float = pydantic.Field(0.5, ge=0, lt=1, description="dropout on inputs of layers >= 2")
    dropouti: float = pydantic.Field(0.7, ge=0, lt=1, description="dropout on the first layer's input")
    dropoute: float = 0.0
    wdrop: float = pydantic.Field(0.5, ge=0, lt=1, description="DropConnect on the attention key projections")
    rdropout: float = pydantic.Field(0.5, ge=0, lt=1, description="dropout on the attended memory (h~, c~)")
    parser_dropout: float = pydantic.Field(0.5, ge=0, lt=1, description="dropouts of the parsing network")
    n_slots: int = pydantic.Field(15, ge=1, description="M: memory slots")
    n_lookback: int = pydantic.Field(5, ge=0, description="Q: previous words the distance convolution sees")
    tau: float = pydantic.Field(20.0, gt=0, description="gate sharpness (1 / resolution * 2)")


class ParsingNetwork(nn.Module):
    """Distances from a convolution over ``Q + 1`` embeddings.

    forward: ``emb [B, T, E]``, ``history [B, Q, E]`` -> ``(d [B, T], d_next [B, T])`` in ``(0, 1)``.
    """

    def __init__(self, emb_size: int, hidden_size: int, n_lookback: int, dropout: float):
        super().__init__()
        self.n_lookback, self.dropout = n_lookback, dropout
        self.conv = nn.Conv1d(emb_size, hidden_size, n_lookback + 1)
        self.norm = nn.BatchNorm1d(hidden_size)
        # groups=2: d_t and d^_{t+1} each read their own half of the hidden channels.
        self.out = nn.Conv1d(hidden_size, 2, 1, groups=2)

    def forward(self, emb: torch.Tensor, history: torch.Tensor):
        x = torch.cat([history, emb], 1)  # [B, Q + T, E]
        x = F.dropout(x, self.dropout, self.training).transpose(1, 2)
        hidden = F.relu(self.norm(self.conv(x)))
        hidden = F.dropout(hidden, self.dropout, self.training)
        d = torch.sigmoid(self.out(hidden))  # [B, 2, T]
        return d[:, 0], d[:, 1]


def gated_attention_weights(scores: torch.Tensor, gates: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``s_i ~ g_i exp(score_i)`` normalised over the last axis (all-zero gates give zero weights)."""
    weights = gates * torch.exp(scores - scores.max(-1, keepdim=True).values)
    return weights / (weights.sum(-1, keepdim=True) + eps)


class ReadingLayer(nn.Module):
    """One PRPN reading layer: gated attention over the memory tape + layer-normalised LSTM cell.

    forward: ``x [B, T, I]`` (already dropped), ``gates [B, T, M]`` (slot w = position t-M+w),
    memory ``(h [B, M, d], c [B, M, d])`` (oldest first) -> ``(out [B, T, d], memory)``.
    """

    def __init__(self, input_size: int, hidden_size: int, wdrop: float, rdropout: float):
        super().__init__()
        self.hidden_size, self.wdrop, self.rdropout = hidden_size, wdrop, rdropout
        # Attention key A [h_{t-1}; x_t] + b, split into the recurrent and the input halves.
        self.key_h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key_x = nn.Linear(input_size, hidden_size)
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)
        self.norm_ih = nn.LayerNorm(4 * hidden_size)
        self.norm_hh = nn.LayerNorm(4 * hidden_size)
        self.norm_c = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor, gates: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor]):
        batch, steps, _ = x.shape
        d = self.hidden_size
        n_slots = gates.size(-1)
        # --- everything independent of h_{t-1}, for all steps at once (time-major) ---
        x_tm = x.transpose(0, 1)
        # Per-step views through unbind: its backward stacks the step gradients once.
        pre_ih = self.norm_ih(self.ih(x_tm)).float().unbind(0)  # T x [B, 4d]
        key_x = F.linear(x_tm, dropconnect(self.key_x.weight, self.wdrop, self.training), self.key_x.bias)
        key_x = key_x.float().unbind(0)  # T x [B, d]
        key_h = RecurrentProjection(dropconnect(self.key_h.weight, self.wdrop, self.training).t().contiguous())
        hh = RecurrentProjection(self.hh.weight.t().contiguous())
        if self.training and self.rdropout > 0:
            keep = 1 - self.rdropout
            key_mask = x.new_empty(batch, d, dtype=torch.float32).bernoulli_(keep) / keep
            h_mask = x.new_empty(batch, d, dtype=torch.float32).bernoulli_(keep) / keep
            c_mask = x.new_empty(batch, d, dtype=torch.float32).bernoulli_(keep) / keep
        else:
            key_mask = h_mask = c_mask = None
        scale = 1.0 / math.sqrt(d)
        gates_tm = gates.transpose(0, 1).unbind(0)  # T x [B, M]
        # The tape holds [h; c] per position (one stack and one bmm per step read both halves).
        tape = list(torch.cat([memory[0], memory[1]], -1).unbind(1))  # M x [B, 2d], oldest first
        h_prev = memory[0][:, -1]
        key_pad = x.new_zeros(batch, d, dtype=torch.float32)
        outputs = []
        for t in range(steps):
            key = key_h(key_x[t], h_prev)
            if key_mask is not None:
                key = key * key_mask
            window = torch.stack(tape[-n_slots:], 1)  # [B, M, 2d]
            # [key; 0] against [h; c] instead of slicing h out of the window (a slice's backward
            # fills a full-size zero tensor every step).
            scores = torch.bmm(window, torch.cat([key, key_pad], -1).unsqueeze(-1)).squeeze(-1) * scale  # [B, M]
            attn = gated_attention_weights(scores, gates_tm[t]).unsqueeze(1)  # [B, 1, M]
            h_read, c_read = torch.bmm(attn, window).squeeze(1).split(d, -1)
            if h_mask is not None:
                h_read, c_read = h_read * h_mask, c_read * c_mask
            cell_gates = pre_ih[t] + self.norm_hh(hh(self.hh.bias, h_read))
            in_gate, forget_gate, out_gate, candidate = cell_gates.split(d, 1)
            c = torch.sigmoid(forget_gate) * c_read + torch.sigmoid(in_gate) * torch.tanh(candidate)
            h = torch.sigmoid(out_gate) * torch.tanh(self.norm_c(c))
            tape.append(torch.cat([h, c], -1))
            h_prev = h
            outputs.append(h)
            # keep the list short: only the last M states are ever read
            if len(tape) > 4 * n_slots:
                del tape[:-n_slots]
        out = torch.stack(outputs, 1)
        last = torch.stack(tape[-n_slots:], 1)
        new_memory = (last[..., :d], last[..., d:])
        return out, new_memory


@register
class PRPN(TiedLanguageModel):
    """PRPN language model; parses with the parsing network's distances ``d_t``."""

    name = "prpn"
    description = "PRPN (Shen et al., 2018): convolutional distances gate attention over a memory tape"
    parser_kind = "distance"
    Config = PRPNConfig

    def __init__(self, vocab_size: int, config: PRPNConfig | None = None):
        super().__init__(vocab_size, config)
        cfg = self.config
        self.parser = ParsingNetwork(cfg.emb_size, cfg.hidden_size, cfg.n_lookback, cfg.parser_dropout)
        sizes = [cfg.emb_size] + [cfg.hidden_size] * cfg.n_layers
        self.layers = nn.ModuleList(
            ReadingLayer(sizes[l], cfg.hidden_size, cfg.wdrop, cfg.rdropout) for l in range(cfg.n_layers)
        )
        # Predict network: attention key projection for the output read, then W, BN, tanh.
        self.output_key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.output_proj = nn.Linear(2 * cfg.hidden_size, cfg.emb_size)
        self.output_norm = nn.BatchNorm1d(cfg.emb_size)

    def init_state(self, batch_size: int, device="cpu"):
        """Dict: ``emb_history [B, Q, E]`` (zeros), ``distances [B, P]`` of previous positions (P = 0
        fresh), ``memory`` per layer ``(h [B, M, d], c [B, M, d])`` (zeros: gated off when fresh)."""
        cfg = self.config
        weight = self.embedding.weight
        zeros = lambda *shape: weight.new_zeros(*shape, device=device)  # noqa: E731
        return {
            "emb_history": zeros(batch_size, cfg.n_lookback, cfg.emb_size),
            "distances": zeros(batch_size, 0),
            "memory": [(zeros(batch_size, cfg.n_slots, cfg.hidden_size), zeros(batch_size, cfg.n_slots, cfg.hidden_size))
                       for _ in range(cfg.n_layers)],
        }

    def _gates(self, distances: torch.Tensor, history: torch.Tensor, d_next: torch.Tensor):
        """Gates for the current positions, given the ``history [B, P]`` distances before them.

        read ``[B, T, M]``: slot ``w`` is position ``t-M+w`` (the tape before ``w_t``), gate
        ``prod_{j=i+1..t} alpha(d_t - d_j)`` — the kernel's convention.
        predict ``[B, T, M]``: slot ``w`` is position ``t-M+1+w`` (the tape after writing ``h_t``), gate
        ``prod_{j=i..t} alpha(d^_{t+1} - d_j)`` (Stratos' g^, as in the PRPN code). That is the kernel's
        gate of slot ``i - 1`` with ``d_next``; one leading pad position makes the kernel compute the
        gate of the first real position too (it zeroes slots before the sequence start).
        """
        cfg = self.config
        prev = history.size(1)
        full = torch.cat([history, distances], 1)
        read = stick_breaking_gates(full, cfg.n_slots, cfg.tau)[:, prev:]
        pad = full.new_zeros(full.size(0), 1)
        predict = stick_breaking_gates(
            torch.cat([pad, full], 1), cfg.n_slots, cfg.tau, d_next=torch.cat([pad, history, d_next], 1)
        )[:, prev + 1 :]
        return read, predict

    def _distances(self, emb: torch.Tensor, state):
        return self.parser(emb, state["emb_history"])

    def forward(self, tokens: torch.Tensor, state, gold_spans=None) -> LMOutput:
        """``tokens [B, T]`` -> hidden ``[B, T, E]``; ``structure = {"distances": d [B, T]}``."""
        cfg = self.config
        emb = self.embed(tokens)
        distances, d_next = self._distances(emb, state)
        read_gates, predict_gates = self._gates(distances, state["distances"], d_next)
        x = locked_dropout(emb, cfg.dropouti, self.training)
        raw_outputs, dropped_outputs, memories = [], [], []
        for l, layer in enumerate(self.layers):
            if l > 0:
                x = locked_dropout(x, cfg.dropouth, self.training)
                dropped_outputs.append(x)
            out, memory = layer(x, read_gates, state["memory"][l])
            raw_outputs.append(out)
            memories.append(memory)
            x = out
        top = x
        read = self._read_output_memory(top, state["memory"][-1][0], predict_gates)
        joined = locked_dropout(torch.cat([top, read], -1), cfg.dropouth, self.training)
        projected = self.output_proj(joined)
        projected = self.output_norm(projected.transpose(1, 2)).transpose(1, 2)
        hidden = locked_dropout(torch.tanh(projected), cfg.dropout, self.training)
        dropped_outputs.append(hidden)  # the last "dropped output" is the [B, T, E] fed to the softmax
        new_state = {
            "emb_history": torch.cat([state["emb_history"], emb], 1)[:, -cfg.n_lookback :]
            if cfg.n_lookback else state["emb_history"],
            "distances": torch.cat([state["distances"], distances], 1)[:, -cfg.n_slots :],
            "memory": memories,
        }
        return LMOutput(hidden=hidden, state=new_state, raw_outputs=raw_outputs, dropped_outputs=dropped_outputs,
                        structure={"distances": distances})

    def _read_output_memory(self, top: torch.Tensor, old_memory: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
        """Predict-network read, batched over time: position t reads slots t-M+1 .. t of the top layer.

        top ``[B, T, d]``, old_memory ``[B, M, d]`` (positions -M .. -1), gates ``[B, T, M]`` -> ``[B, T, d]``.
        """
        cfg = self.config
        steps, n_slots = top.size(1), cfg.n_slots
        weight = dropconnect(self.output_key.weight, cfg.wdrop, self.training)
        key = locked_dropout(F.linear(top, weight, self.output_key.bias), cfg.rdropout, self.training)
        seq = torch.cat([old_memory, top], 1)  # position p sits at index p + M
        # slot w of position t is position t-M+1+w, index t+1+w: M shifted views instead of a
        # [B, T, M, d] copy.
        scores = torch.stack([(seq[:, w + 1 : w + 1 + steps] * key).sum(-1) for w in range(n_slots)], -1)
        attn = gated_attention_weights(scores / math.sqrt(cfg.hidden_size), gates)
        read = attn[..., 0:1] * seq[:, 1 : 1 + steps]
        for w in range(1, n_slots):
            read = read + attn[..., w : w + 1] * seq[:, w + 1 : w + 1 + steps]
        return read

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Distances ``[B, T]`` from the parsing network alone (they do not depend on the LSTMs).

        Batch norm runs in eval mode (running statistics), so padding cannot change the values.
        """
        state = self.init_state(tokens.size(0), tokens.device)
        distances, _ = self._distances(self.embed(tokens), state)
        return {"distances": distances}

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

**Relevant set beyond the tape** (``relevant_set: rho``, default 0 = off: exactly the model above).
Kerg et al.'s (2020) relevancy screening (:mod:`induce.relevancy`) on each reading layer's tape:
a state's relevance ``beta`` is the total reading attention it received while on the tape (the
``M`` reads after it was written; detached, as in the paper). When it leaves the tape it replaces
the least relevant member of the layer's relevant set (at most ``rho`` states ``(h, c)``) if it is
strictly more relevant (or a slot is free); so the set is the top-``rho`` of all states that left
the tape, earlier states winning ties (:class:`induce.relevancy.RelevancyMemory`'s rule, run inside
the reading loop with the joint attention, as in that class). At every read the relevant states
are extra memory slots, attended together with the tape in one gated softmax, and the predict
network reads the top layer's relevant set (after the push of ``h_t``) the same way.

*Gate of a relevant slot: 1.* The stick-breaking gate over the longer range,
``prod_{j=i+1..t} alpha_j``, is finite (a cumulative product) but not cheap or available: it needs
every distance back to the relevant position (unbounded, and gone after a BPTT segment), and it is
exactly 0 as soon as one larger distance lies between (saturated hardtanh), which for states older
than the tape is nearly always, so it would switch the relevant set off. With gate 1 the learned
attention score alone decides how much a relevant state is read. The relevant sets (states,
relevances, the tape's running relevance and the positions, relative to the next segment) are part
of the recurrent state, so they carry over BPTT segments like the tape; a fresh state's zero slots
are never screened in. Cost: ``rho`` more slots per read and a few ``[B, rho]`` ops per step.

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
from induce.relevancy import EMPTY_RELEVANCE

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
    rdropout: float = pydantic.Field(0.5, ge=0, lt=1, description="dropout on the attended memory h~ (not c~: see ReadingLayer.forward)")
    parser_dropout: float = pydantic.Field(0.5, ge=0, lt=1, description="dropouts of the parsing network")
    n_slots: int = pydantic.Field(15, ge=1, description="M: memory slots")
    n_lookback: int = pydantic.Field(5, ge=0, description="Q: previous words the distance convolution sees")
    tau: float = pydantic.Field(20.0, gt=0, description="gate sharpness (1 / resolution * 2)")
    relevant_set: int = pydantic.Field(
        0, ge=0, description="rho: states screened by relevance when they leave the tape, read with gate 1 (0 = off)"
    )


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


def fresh_relevant_state(batch: int, n_slots: int, rho: int, hidden_size: int, like: torch.Tensor) -> dict:
    """An empty relevant set of one reading layer (see :class:`ReadingLayer`)."""
    return {
        "h": like.new_zeros(batch, rho, hidden_size),
        "c": like.new_zeros(batch, rho, hidden_size),
        "relevance": like.new_full((batch, rho), EMPTY_RELEVANCE),
        # running relevance of the tape entries (oldest first); -inf: a fresh state's zero slot
        "tape_relevance": like.new_full((batch, n_slots), EMPTY_RELEVANCE),
        "times": torch.full((batch, rho), -1, dtype=torch.long, device=like.device),
    }


class ReadingLayer(nn.Module):
    """One PRPN reading layer: gated attention over the memory tape + layer-normalised LSTM cell.

    forward: ``x [B, T, I]`` (already dropped), ``gates [B, T, M]`` (slot w = position t-M+w),
    memory ``(h [B, M, d], c [B, M, d])`` (oldest first) -> ``(out [B, T, d], memory)``.

    With ``relevant_set = rho > 0`` forward also takes ``relevant`` (:func:`fresh_relevant_state`:
    ``h, c [B, rho, d]``, ``relevance [B, rho]`` (``-inf`` = empty slot), ``tape_relevance [B, M]``,
    ``times [B, rho]``: positions relative to the segment start) and returns
    ``(out, memory, relevant, (set_h [B, T, rho, d], set_valid [B, T, rho]))``, the last pair being
    the relevant set after the push of each step (what the predict network reads). It keeps the
    last forward's screening (detached) in ``last_relevant``: ``attention [B, T, M]`` (the tape part
    of each read), ``positions, valid [B, T, rho]`` (the set read at step t).
    """

    def __init__(self, input_size: int, hidden_size: int, wdrop: float, rdropout: float, relevant_set: int = 0):
        super().__init__()
        self.hidden_size, self.wdrop, self.rdropout = hidden_size, wdrop, rdropout
        self.relevant_set = relevant_set
        self.last_relevant: Optional[dict] = None
        # Attention key A [h_{t-1}; x_t] + b, split into the recurrent and the input halves.
        self.key_h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key_x = nn.Linear(input_size, hidden_size)
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)
        self.norm_ih = nn.LayerNorm(4 * hidden_size)
        self.norm_hh = nn.LayerNorm(4 * hidden_size)
        self.norm_c = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor, gates: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor],
                relevant: Optional[dict] = None):
        batch, steps, _ = x.shape
        d = self.hidden_size
        n_slots = gates.size(-1)
        rho = self.relevant_set
        if rho:
            if relevant is None:
                relevant = fresh_relevant_state(batch, n_slots, rho, d, memory[0])
            rel_hc = torch.cat([relevant["h"], relevant["c"]], -1)  # [B, rho, 2d]
            rel_relevance, rel_times = relevant["relevance"], relevant["times"]
            tape_relevance = relevant["tape_relevance"]
            slot_index = torch.arange(rho, device=x.device)
            new_entry = tape_relevance.new_zeros(batch, 1)
            seen_attention, seen_times, seen_valid, set_h, set_valid = [], [], [], [], []
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
        else:
            key_mask = h_mask = None
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
            slots, step_gates = window, gates_tm[t]
            if rho:  # the relevant states are extra slots with gate 1 (0 where the slot is empty)
                rel_valid = rel_relevance > EMPTY_RELEVANCE  # [B, rho]
                slots = torch.cat([window, rel_hc], 1)  # [B, M + rho, 2d]
                step_gates = torch.cat([step_gates, rel_valid.to(step_gates.dtype)], 1)
            # [key; 0] against [h; c] instead of slicing h out of the window (a slice's backward
            # fills a full-size zero tensor every step).
            scores = torch.bmm(slots, torch.cat([key, key_pad], -1).unsqueeze(-1)).squeeze(-1) * scale  # [B, M (+ rho)]
            if rho:
                scores = torch.cat([scores[:, :n_slots], scores[:, n_slots:].masked_fill(~rel_valid, float("-inf"))], 1)
            attn = gated_attention_weights(scores, step_gates).unsqueeze(1)  # [B, 1, M]
            h_read, c_read = torch.bmm(attn, slots).squeeze(1).split(d, -1)
            if rho:  # relevance: attention received on the tape (not differentiated)
                received = attn[:, 0, :n_slots].detach().to(tape_relevance.dtype)
                tape_relevance = tape_relevance + received
                seen_attention.append(received)
                seen_times.append(rel_times)
                seen_valid.append(rel_valid)
            if h_mask is not None:
                # Only h~ is dropped. Stratos' note writes Drop(h~, c~), but a locked mask scaled by
                # 1 / (1 - p) on c~ compounds through the tape (c goes back onto it): with the
                # forget gate near 1 the cell state grows by 2x per step and training diverges
                # within ~10 batches. Dropping h~ alone is what PRPN's released code does.
                h_read = h_read * h_mask
            cell_gates = pre_ih[t] + self.norm_hh(hh(self.hh.bias, h_read))
            in_gate, forget_gate, out_gate, candidate = cell_gates.split(d, 1)
            c = torch.sigmoid(forget_gate) * c_read + torch.sigmoid(in_gate) * torch.tanh(candidate)
            h = torch.sigmoid(out_gate) * torch.tanh(self.norm_c(c))
            tape.append(torch.cat([h, c], -1))
            if rho:  # position t - M leaves the tape: screened into the relevant set
                leaving_relevance = tape_relevance[:, :1]  # [B, 1]
                worst_relevance, worst_slot = rel_relevance.min(1, keepdim=True)  # first minimum on ties
                chosen = (slot_index == worst_slot) & (leaving_relevance > worst_relevance)  # [B, rho]
                rel_hc = torch.where(chosen.unsqueeze(-1), window[:, :1].to(rel_hc.dtype), rel_hc)
                rel_relevance = torch.where(chosen, leaving_relevance, rel_relevance)
                rel_times = torch.where(chosen, torch.full_like(rel_times, t - n_slots), rel_times)
                tape_relevance = torch.cat([tape_relevance[:, 1:], new_entry], 1)
                set_h.append(rel_hc[..., :d])
                set_valid.append(rel_relevance > EMPTY_RELEVANCE)
            h_prev = h
            outputs.append(h)
            # keep the list short: only the last M states are ever read
            if len(tape) > 4 * n_slots:
                del tape[:-n_slots]
        out = torch.stack(outputs, 1)
        last = torch.stack(tape[-n_slots:], 1)
        new_memory = (last[..., :d], last[..., d:])
        if not rho:
            return out, new_memory
        self.last_relevant = {
            "attention": torch.stack(seen_attention, 1),
            "positions": torch.stack(seen_times, 1),
            "valid": torch.stack(seen_valid, 1),
        }
        new_relevant = {
            "h": rel_hc[..., :d], "c": rel_hc[..., d:], "relevance": rel_relevance,
            "tape_relevance": tape_relevance, "times": rel_times - steps,  # relative to the next segment
        }
        return out, new_memory, new_relevant, (torch.stack(set_h, 1), torch.stack(set_valid, 1))


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
            ReadingLayer(sizes[l], cfg.hidden_size, cfg.wdrop, cfg.rdropout, cfg.relevant_set)
            for l in range(cfg.n_layers)
        )
        # Predict network: attention key projection for the output read, then W, BN, tanh.
        self.output_key = nn.Linear(cfg.hidden_size, cfg.hidden_size)
        self.output_proj = nn.Linear(2 * cfg.hidden_size, cfg.emb_size)
        self.output_norm = nn.BatchNorm1d(cfg.emb_size)

    def init_state(self, batch_size: int, device="cpu"):
        """Dict: ``emb_history [B, Q, E]`` (zeros), ``distances [B, P]`` of previous positions (P = 0
        fresh), ``memory`` per layer ``(h [B, M, d], c [B, M, d])`` (zeros: gated off when fresh);
        with ``relevant_set > 0`` also ``relevant``: per layer an empty set (:func:`fresh_relevant_state`)."""
        cfg = self.config
        weight = self.embedding.weight
        zeros = lambda *shape: weight.new_zeros(*shape, device=device)  # noqa: E731
        state = {
            "emb_history": zeros(batch_size, cfg.n_lookback, cfg.emb_size),
            "distances": zeros(batch_size, 0),
            "memory": [(zeros(batch_size, cfg.n_slots, cfg.hidden_size), zeros(batch_size, cfg.n_slots, cfg.hidden_size))
                       for _ in range(cfg.n_layers)],
        }
        if cfg.relevant_set:
            like = zeros(batch_size, 1)
            state["relevant"] = [fresh_relevant_state(batch_size, cfg.n_slots, cfg.relevant_set, cfg.hidden_size, like)
                                 for _ in range(cfg.n_layers)]
        return state

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
        raw_outputs, dropped_outputs, memories, relevants = [], [], [], []
        top_set = None
        for l, layer in enumerate(self.layers):
            if l > 0:
                x = locked_dropout(x, cfg.dropouth, self.training)
                dropped_outputs.append(x)
            if cfg.relevant_set:
                carried = state.get("relevant")
                out, memory, relevant, top_set = layer(
                    x, read_gates, state["memory"][l], None if carried is None else carried[l]
                )
                relevants.append(relevant)
            else:
                out, memory = layer(x, read_gates, state["memory"][l])
            raw_outputs.append(out)
            memories.append(memory)
            x = out
        top = x
        read = self._read_output_memory(top, state["memory"][-1][0], predict_gates, top_set)
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
        if cfg.relevant_set:
            new_state["relevant"] = relevants
        return LMOutput(hidden=hidden, state=new_state, raw_outputs=raw_outputs, dropped_outputs=dropped_outputs,
                        structure={"distances": distances})

    def _read_output_memory(self, top: torch.Tensor, old_memory: torch.Tensor, gates: torch.Tensor,
                            relevant: Optional[tuple[torch.Tensor, torch.Tensor]] = None) -> torch.Tensor:
        """Predict-network read, batched over time: position t reads slots t-M+1 .. t of the top layer.

        top ``[B, T, d]``, old_memory ``[B, M, d]`` (positions -M .. -1), gates ``[B, T, M]`` -> ``[B, T, d]``.
        ``relevant``: the top layer's relevant set after each push, ``(h [B, T, rho, d], valid [B, T, rho])``,
        read as extra slots with gate 1 in the same softmax (``relevant_set > 0``).
        """
        cfg = self.config
        steps, n_slots = top.size(1), cfg.n_slots
        weight = dropconnect(self.output_key.weight, cfg.wdrop, self.training)
        key = locked_dropout(F.linear(top, weight, self.output_key.bias), cfg.rdropout, self.training)
        seq = torch.cat([old_memory, top], 1)  # position p sits at index p + M
        # slot w of position t is position t-M+1+w, index t+1+w: M shifted views instead of a
        # [B, T, M, d] copy.
        scores = torch.stack([(seq[:, w + 1 : w + 1 + steps] * key).sum(-1) for w in range(n_slots)], -1)
        if relevant is not None:
            set_h, set_valid = relevant
            extra = torch.matmul(set_h, key.unsqueeze(-1)).squeeze(-1).masked_fill(~set_valid, float("-inf"))
            scores = torch.cat([scores, extra], -1)  # [B, T, M + rho]
            gates = torch.cat([gates, set_valid.to(gates.dtype)], -1)
        attn = gated_attention_weights(scores / math.sqrt(cfg.hidden_size), gates)
        read = attn[..., 0:1] * seq[:, 1 : 1 + steps]
        for w in range(1, n_slots):
            read = read + attn[..., w : w + 1] * seq[:, w + 1 : w + 1 + steps]
        if relevant is not None:
            read = read + torch.matmul(attn[..., n_slots:].unsqueeze(-2), set_h).squeeze(-2)
        return read

    @torch.no_grad()
    def parse_structure(self, tokens: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Distances ``[B, T]`` from the parsing network alone (they do not depend on the LSTMs).

        Batch norm runs in eval mode (running statistics), so padding cannot change the values.
        """
        state = self.init_state(tokens.size(0), tokens.device)
        distances, _ = self._distances(self.embed(tokens), state)
        return {"distances": distances}

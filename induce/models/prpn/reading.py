"""PRPN's reading network (Shen et al., 2018), one layer per :class:`ReadingLayer`: gated attention
over the memory tape of the last ``M`` states ``(h, c)``, then an LSTM cell with layer
normalisation that starts from the attended ``(h~, c~)``; with ``relevant_set > 0`` also Kerg et
al.'s relevant set. The model, its parsing and predict networks and the fidelity notes are in
:mod:`induce.models.prpn.model`; the helpers :func:`drop`, :func:`step_masks` and
:func:`gated_attention_weights` are shared with it.

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
the per-step loop holds two matmuls, the attention over ``M`` slots and the cell. The dropout
masks used inside the loop are drawn for all steps at once before it.
"""
from __future__ import annotations

import functools
import math
from typing import Optional

import torch
import torch.nn.functional as F
from torch import nn

from induce.models.common.awd import RecurrentProjection, dropconnect, locked_dropout
from induce.models.common.relevancy import EMPTY_RELEVANCE


def gated_attention_weights(scores: torch.Tensor, gates: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """``s_i ~ g_i exp(score_i)`` normalised over the last axis (all-zero gates give zero weights)."""
    weights = gates * torch.exp(scores - scores.max(-1, keepdim=True).values)
    return weights / (weights.sum(-1, keepdim=True) + eps)


def drop(x: torch.Tensor, p: float, training: bool, per_step: bool) -> torch.Tensor:
    """Dropout on ``x [B, T, D]``: a new mask at every position (``per_step``, as ``nn.Dropout`` on
    each step's ``[B, D]`` in PRPN's code) or one ``[B, 1, D]`` mask per sequence (locked)."""
    return F.dropout(x, p, training) if per_step else locked_dropout(x, p, training)


def step_masks(p: float, training: bool, per_step: bool, steps: int, shape: tuple, like: torch.Tensor):
    """Scaled dropout masks for a time loop: ``steps`` masks of ``shape`` (float32), all different
    (``per_step``) or one repeated (locked); ``None`` when nothing is dropped."""
    if not training or p == 0:
        return None
    keep = 1.0 - p
    # uniform draws compared with keep (cheaper on CPU than bernoulli_, same distribution)
    masks = torch.rand((steps if per_step else 1, *shape), device=like.device).lt_(keep).div_(keep)
    return list(masks.unbind(0)) if per_step else [masks[0]] * steps


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

    forward: ``x [B, T, I]`` (the cell's input, already dropped), ``gates [B, T, M]`` (slot w =
    position t-M+w), memory ``(h [B, M, d], c [B, M, d])`` (oldest first) -> ``(out [B, T, d],
    memory)``. ``key_input [B, T, I]`` (default ``x``) is what the attention key reads of the input:
    the layer input *before* the cell's dropout, as in PRPN's ``ReadingNetwork`` (and Stratos' note).

    Regularisation of a read (training only): key ``Drop_r(A Drop_k([x_t; h_{t-1}]) + b)`` with
    ``k = key_dropout`` (PRPN code's ``projector_summ``), DropConnect ``wdrop`` on ``A`` (Stratos'
    ``ADrop``) and ``r = rdropout``; ``h~`` is dropped with ``rdropout``. ``dropout_masks``:
    ``per_step`` draws new key masks at every step and one ``h~`` mask per forward shared by the
    batch (the code's ``rmask``, ``[nlayers, nhid]``); ``locked`` one mask per sequence for each.

    With ``relevant_set = rho > 0`` forward also takes ``relevant`` (:func:`fresh_relevant_state`:
    ``h, c [B, rho, d]``, ``relevance [B, rho]`` (``-inf`` = empty slot), ``tape_relevance [B, M]``,
    ``times [B, rho]``: positions relative to the segment start) and returns
    ``(out, memory, relevant, (set_h [B, T, rho, d], set_valid [B, T, rho]))``, the last pair being
    the relevant set after the push of each step (what the predict network reads). It keeps the
    last forward's screening (detached) in ``last_relevant``: ``attention [B, T, M]`` (the tape part
    of each read), ``positions, valid [B, T, rho]`` (the set read at step t).
    """

    def __init__(self, input_size: int, hidden_size: int, wdrop: float, rdropout: float, relevant_set: int = 0,
                 key_dropout: float = 0.0, dropout_masks: str = "per_step"):
        super().__init__()
        self.hidden_size, self.wdrop, self.rdropout = hidden_size, wdrop, rdropout
        self.key_dropout, self.per_step = key_dropout, dropout_masks == "per_step"
        self.relevant_set = relevant_set
        self.last_relevant: Optional[dict] = None
        # Attention key A [h_{t-1}; x_t] + b, split into the recurrent and the input halves. Both
        # halves and the bias drawn as the code's one nn.Linear over [x_t; h_{t-1}] (projector_summ):
        # U(+-1/sqrt(I + d)), not with the bounds of the halves.
        self.key_h = nn.Linear(hidden_size, hidden_size, bias=False)
        self.key_x = nn.Linear(input_size, hidden_size)
        key_bound = 1.0 / math.sqrt(input_size + hidden_size)
        with torch.no_grad():
            for tensor in (self.key_x.weight, self.key_h.weight, self.key_x.bias):
                tensor.uniform_(-key_bound, key_bound)
        self.ih = nn.Linear(input_size, 4 * hidden_size)
        self.hh = nn.Linear(hidden_size, 4 * hidden_size)
        self.norm_ih = nn.LayerNorm(4 * hidden_size)
        self.norm_hh = nn.LayerNorm(4 * hidden_size)
        self.norm_c = nn.LayerNorm(hidden_size)

    def forward(self, x: torch.Tensor, gates: torch.Tensor, memory: tuple[torch.Tensor, torch.Tensor],
                relevant: Optional[dict] = None, key_input: Optional[torch.Tensor] = None):
        """Read ``x [B, T, I]`` with the tape ``memory`` (``(h, c)``, each ``[B, M, d]``) under the
        per-step ``gates [B, T, M]``; ``relevant``: the carried relevant set (``relevant_set > 0``).

        Long because the step loop carries five coupled things from one step to the next (the tape, the
        previous ``h``, the relevant set with its relevance and times, and the dropout masks drawn once per
        forward), and the work hoisted out of the loop (every input projection, all steps at once) must
        sit beside it to keep the order of the RNG draws that exact resume relies on; split, the pieces
        would pass all of it back and forth each step."""
        batch, steps, _ = x.shape
        key_input = x if key_input is None else key_input
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
        key_in = drop(key_input, self.key_dropout, self.training, self.per_step).transpose(0, 1)
        key_x = F.linear(key_in, dropconnect(self.key_x.weight, self.wdrop, self.training), self.key_x.bias)
        key_x = key_x.float().unbind(0)  # T x [B, d]
        key_h = RecurrentProjection(dropconnect(self.key_h.weight, self.wdrop, self.training).t().contiguous())
        hh = RecurrentProjection(self.hh.weight.t().contiguous())
        masks = functools.partial(step_masks, training=self.training, per_step=self.per_step, steps=steps, like=x)
        key_h_masks = masks(self.key_dropout, shape=(batch, d))  # on h_{t-1}, the key's other input
        key_masks = masks(self.rdropout, shape=(batch, d))
        # h~: per_step as the code's rmask (one [d] mask per forward for the whole batch), else [B, d]
        h_mask = step_masks(self.rdropout, self.training, False, 1, (1 if self.per_step else batch, d), x)
        h_mask = None if h_mask is None else h_mask[0]
        scale = 1.0 / math.sqrt(d)
        gates_tm = gates.transpose(0, 1).unbind(0)  # T x [B, M]
        # The tape holds [h; c] per position (one stack and one bmm per step read both halves).
        tape = list(torch.cat([memory[0], memory[1]], -1).unbind(1))  # M x [B, 2d], oldest first
        h_prev = memory[0][:, -1]
        key_pad = x.new_zeros(batch, d, dtype=torch.float32)
        outputs = []
        for t in range(steps):
            key = key_h(key_x[t], h_prev if key_h_masks is None else h_prev * key_h_masks[t])
            if key_masks is not None:
                key = key * key_masks[t]
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
                # within ~10 batches. Dropping h~ alone is what PRPN's released code does
                # (ReadingNetwork.forward: memory_rnn(input, (selected_memory_h * rmask, selected_memory_c))).
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

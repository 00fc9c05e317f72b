"""Relevancy screening (Kerg et al., 2020, "Untangling tradeoffs between recurrence and self-attention").

A recurrent model attends, at every step ``t``, to a small memory ``M_t = [S_t, R_t]``:

* the short-term buffer ``S_t``: the states of the last ``nu`` steps (``h_{t-nu+1} .. h_t``);
* the relevant set ``R_t``: at most ``rho`` older states, chosen by their relevance
  ``beta(i) = sum_{j=i}^{i+nu-1} alpha_{i,j}``, the total attention state ``i`` received while it
  was in the buffer. When a state leaves the buffer, it replaces the least relevant member of
  ``R`` if it is strictly more relevant (or if ``R`` has a free slot). Ties keep the incumbent, so
  ``R_t`` is the top-``rho`` of all states that have left the buffer, earlier states winning ties.

Attention is additive (Bahdanau): ``z~_i = v^T tanh(W q + U m_i)``, ``z = softmax(z~)`` over the
occupied slots, and the model adds the summary ``sum_i z_i m_i`` to its state (``s_t = h_t + ...``).
The memory never holds more than ``nu + rho`` states, so the autograd graph grows linearly in ``T``
(full self-attention, :class:`FullMemory`, grows quadratically).

Step API (batched over ``B``; each example has its own relevant set, everything stays on tensors)::

    memory.reset(batch_size)
    for t in range(T):
        h = cell(x[:, t], s)                     # [B, D]
        memory.push(h)                           # h enters the buffer; the oldest may be screened into R
        summary, weights = memory.attend(s)      # [B, D], [B, nu + rho]; weights update beta
        s = h + summary

Plug-in for models that compute a windowed attention in parallel (PaLM's span attention, PRPN's
memory): :func:`relevant_indices` turns the attention each position received inside its window
(``beta``, ``[B, T]``) into, for every step, the indices of the at most ``rho`` extra relevant
positions beyond the window, without running this module step by step.

Users: ``rellstm`` / ``relrnn`` / ``memlstm`` (:mod:`induce.models.relmem.model`) run the step API;
PaLM's ``relevant_set`` option (:mod:`induce.models.palm.model`) screens span starts with
:func:`relevant_indices` / :func:`gather_relevant` (``nu`` = the span window ``m``); PRPN's
``relevant_set`` option (:mod:`induce.models.prpn.model`) applies :meth:`RelevancyMemory.push`'s rule
inside its sequential reading loop, to the states leaving its memory tape (``nu`` = the tape ``M``).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch import nn

#: Relevance of an empty relevant-set slot: any real state beats it.
EMPTY_RELEVANCE = float("-inf")


class AdditiveAttention(nn.Module):
    """Bahdanau scores ``v^T tanh(W q + U m)``.

    forward: ``query [B, Q]``, ``keys [B, N, D]``, ``valid [B, N]`` (bool) -> weights ``[B, N]``
    (softmax over the valid slots, exactly 0 on the others; a row with no valid slot is all 0).
    """

    def __init__(self, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.query_proj = nn.Linear(query_dim, attn_dim, bias=True)  # W (with the bias of the sum)
        self.key_proj = nn.Linear(key_dim, attn_dim, bias=False)  # U
        self.score = nn.Linear(attn_dim, 1, bias=False)  # v

    def forward(self, query: torch.Tensor, keys: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        energy = torch.tanh(self.query_proj(query).unsqueeze(1) + self.key_proj(keys))  # [B, N, A]
        scores = self.score(energy).squeeze(-1).masked_fill(~valid, float("-inf"))  # [B, N]
        # A row with no valid slot would give NaN; nan_to_num keeps it at 0 (not reached after a push).
        return torch.softmax(scores, dim=-1).nan_to_num(0.0)


class RelevancyMemory(nn.Module):
    """Short-term buffer of ``nu`` states + relevant set of at most ``rho`` states, with attention.

    Args:
        nu: buffer size (> 0).
        rho: maximal size of the relevant set (>= 0; 0 gives a plain sliding window).
        dim: size ``D`` of the stored states.
        query_dim: size of the query (default ``dim``).
        attn_dim: hidden size of the additive attention (default ``dim``).

    State after :meth:`reset` (all tensors, batch-first):
        ``buffer [B, nu, D]`` (oldest first), ``buffer_times [B, nu]`` (step of each entry, -1 empty),
        ``buffer_relevance [B, nu]`` (attention received so far);
        ``relevant [B, rho, D]``, ``relevant_times [B, rho]``, ``relevant_relevance [B, rho]`` (frozen
        ``beta``, ``-inf`` when empty). Slot layout of ``attend``'s weights: buffer then relevant set.
    """

    def __init__(self, nu: int, rho: int, dim: int, query_dim: Optional[int] = None, attn_dim: Optional[int] = None):
        super().__init__()
        if nu < 1 or rho < 0:
            raise ValueError(f"need nu >= 1 and rho >= 0, got nu={nu}, rho={rho}")
        self.nu, self.rho, self.dim = nu, rho, dim
        self.attention = AdditiveAttention(query_dim or dim, dim, attn_dim or dim)
        self.steps = 0
        self.buffer = self.buffer_times = self.buffer_relevance = None
        self.relevant = self.relevant_times = self.relevant_relevance = None

    def reset(self, batch_size: int, device: torch.device | str | None = None,
              dtype: torch.dtype | None = None) -> None:
        """Empty the memory for ``batch_size`` sequences (device / dtype default to the parameters')."""
        ref = self.attention.key_proj.weight
        device = device if device is not None else ref.device
        dtype = dtype if dtype is not None else ref.dtype
        b, nu, rho, d = batch_size, self.nu, self.rho, self.dim
        self.steps = 0
        self.buffer = torch.zeros(b, nu, d, device=device, dtype=dtype)
        self.buffer_times = torch.full((b, nu), -1, dtype=torch.long, device=device)
        self.buffer_relevance = torch.zeros(b, nu, device=device, dtype=dtype)
        self.relevant = torch.zeros(b, rho, d, device=device, dtype=dtype)
        self.relevant_times = torch.full((b, rho), -1, dtype=torch.long, device=device)
        self.relevant_relevance = torch.full((b, rho), EMPTY_RELEVANCE, device=device, dtype=dtype)

    def _require_reset(self) -> None:
        if self.buffer is None:
            raise RuntimeError("RelevancyMemory: call reset(batch_size) before push/attend")

    @property
    def slot_times(self) -> torch.Tensor:
        """``[B, nu + rho]`` step index stored in each slot (buffer then relevant set), -1 when empty."""
        self._require_reset()
        return torch.cat([self.buffer_times, self.relevant_times], dim=1)

    @property
    def slot_valid(self) -> torch.Tensor:
        """``[B, nu + rho]`` bool: which slots hold a state."""
        return self.slot_times >= 0

    def memory(self) -> torch.Tensor:
        """``[B, nu + rho, D]`` the stored states (buffer then relevant set); empty slots are 0."""
        self._require_reset()
        return torch.cat([self.buffer, self.relevant], dim=1)

    def push(self, state: torch.Tensor) -> None:
        """Add ``state [B, D]`` (the step's ``h_t``) to the buffer.

        If the buffer is full, its oldest state leaves it and is screened: it replaces the least
        relevant member of the relevant set when its relevance is strictly larger (an empty slot
        counts as ``-inf``). Updates are out of place, so gradients reach every state that is still
        stored (and only through the steps at which it was stored).
        """
        self._require_reset()
        leaving = self.buffer[:, 0]  # [B, D]
        leaving_time = self.buffer_times[:, 0]  # [B]
        leaving_relevance = self.buffer_relevance[:, 0]  # [B]
        if self.rho > 0 and self.steps >= self.nu:
            worst_relevance, worst_slot = self.relevant_relevance.min(dim=1)  # first minimum on ties
            replace = leaving_relevance > worst_relevance  # [B]
            chosen = nn.functional.one_hot(worst_slot, self.rho).bool() & replace.unsqueeze(1)  # [B, rho]
            self.relevant = torch.where(chosen.unsqueeze(-1), leaving.unsqueeze(1), self.relevant)
            self.relevant_times = torch.where(chosen, leaving_time.unsqueeze(1), self.relevant_times)
            self.relevant_relevance = torch.where(chosen, leaving_relevance.unsqueeze(1), self.relevant_relevance)
        time = torch.full_like(leaving_time, self.steps)
        # Shift left and append: the layout stays "oldest first"; while the buffer is not full the
        # empty slots (time -1) are on the left and shifting drops one of them.
        self.buffer = torch.cat([self.buffer[:, 1:], state.unsqueeze(1)], dim=1)
        self.buffer_times = torch.cat([self.buffer_times[:, 1:], time.unsqueeze(1)], dim=1)
        self.buffer_relevance = torch.cat(
            [self.buffer_relevance[:, 1:], self.buffer_relevance.new_zeros(state.size(0), 1)], dim=1
        )
        self.steps += 1

    def record_attention(self, weights: torch.Tensor) -> None:
        """Add ``weights [B, nu + rho]`` (slot layout of :attr:`slot_times`) to the relevance of the
        buffer entries. Relevance is a statistic, not part of the graph (detached). Public so that
        screening can be driven by given attention (tests, external attention)."""
        self._require_reset()
        self.buffer_relevance = self.buffer_relevance + weights[:, : self.nu].detach().to(self.buffer_relevance.dtype)

    def attend(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``query [B, Q]`` (the previous macro-state ``s_{t-1}``) -> ``(summary [B, D], weights [B, nu + rho])``.

        The weights are recorded as attention received (relevance) by the buffer entries.
        """
        memory = self.memory()
        weights = self.attention(query, memory, self.slot_valid)
        self.record_attention(weights)
        summary = torch.bmm(weights.unsqueeze(1), memory).squeeze(1)
        return summary, weights


class FullMemory(nn.Module):
    """Full self-attention over ALL past states (MemRNN / MemLSTM baseline), same step API.

    The memory after ``t`` pushes is ``[B, t, D]``; the graph of ``T`` steps is ``O(T^2)``. Keys
    ``U m`` are projected once per state and cached.
    """

    def __init__(self, dim: int, query_dim: Optional[int] = None, attn_dim: Optional[int] = None):
        super().__init__()
        self.dim = dim
        self.attention = AdditiveAttention(query_dim or dim, dim, attn_dim or dim)
        self.states: list[torch.Tensor] = []
        self.keys: list[torch.Tensor] = []

    def reset(self, batch_size: int, device=None, dtype=None) -> None:
        self.states, self.keys = [], []

    @property
    def slot_times(self) -> torch.Tensor:
        """``[B, t]``: slot ``i`` holds step ``i``."""
        if not self.states:
            return torch.zeros(0, 0, dtype=torch.long)
        first = self.states[0]
        return torch.arange(len(self.states), device=first.device).expand(first.size(0), -1)

    def push(self, state: torch.Tensor) -> None:
        """Append ``state [B, D]``."""
        self.states.append(state)
        self.keys.append(self.attention.key_proj(state))

    def attend(self, query: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``query [B, Q]`` -> ``(summary [B, D], weights [B, t])`` over every pushed state."""
        memory = torch.stack(self.states, dim=1)  # [B, t, D]
        keys = torch.stack(self.keys, dim=1)  # [B, t, A]
        energy = torch.tanh(self.attention.query_proj(query).unsqueeze(1) + keys)
        weights = torch.softmax(self.attention.score(energy).squeeze(-1), dim=-1)
        return torch.bmm(weights.unsqueeze(1), memory).squeeze(1), weights


def relevant_indices(beta: torch.Tensor, nu: int, rho: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The relevant sets of every step, from completed relevance scores (the plug-in for windowed models).

    Args:
        beta: ``[B, T]``, ``beta[b, i]`` = total attention position ``i`` received while it was in the
            window of the last ``nu`` positions (steps ``i .. i+nu-1``).
        nu: window (buffer) size; position ``i`` leaves the window at step ``i + nu``.
        rho: maximal relevant-set size.

    Returns:
        ``index [B, T, rho]`` (long) and ``valid [B, T, rho]`` (bool): at step ``t`` the relevant set
        is ``{index[b, t, k] : valid[b, t, k]}``, the top-``rho`` positions ``i <= t - nu`` by ``beta``
        (earlier positions win ties); exactly what :class:`RelevancyMemory` holds after the push of
        step ``t``. Invalid entries hold 0. Slot order follows the replacement rule (a new member
        takes the slot of the one it evicts), so consecutive steps differ in at most one slot.

    A model that computes its windowed attention for the whole segment at once (PaLM's span
    attention, PRPN's memory) sums the attention each position received inside the window into
    ``beta``, calls this, gathers the states at ``index`` and attends to them as extra keys
    (masked by ``valid``). Cost: a scan of ``T`` steps over ``[B, rho]`` tensors.
    """
    batch, steps = beta.shape
    index = torch.zeros(batch, steps, max(rho, 0), dtype=torch.long, device=beta.device)
    valid = torch.zeros(batch, steps, max(rho, 0), dtype=torch.bool, device=beta.device)
    if rho == 0:
        return index, valid
    current = torch.zeros(batch, rho, dtype=torch.long, device=beta.device)
    current_relevance = torch.full((batch, rho), EMPTY_RELEVANCE, dtype=beta.dtype, device=beta.device)
    beta = beta.detach()
    for t in range(steps):
        leaving = t - nu
        if leaving >= 0:
            worst_relevance, worst_slot = current_relevance.min(dim=1)
            replace = beta[:, leaving] > worst_relevance
            chosen = nn.functional.one_hot(worst_slot, rho).bool() & replace.unsqueeze(1)
            current = torch.where(chosen, torch.full_like(current, leaving), current)
            current_relevance = torch.where(chosen, beta[:, leaving].unsqueeze(1), current_relevance)
        index[:, t] = current
        valid[:, t] = current_relevance > EMPTY_RELEVANCE
    return index, valid


def gather_relevant(states: torch.Tensor, index: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """The states of the relevant sets: ``states [B, T, D]``, ``index``/``valid [B, T, rho]`` (from
    :func:`relevant_indices`) -> ``[B, T, rho, D]`` (zeros where not valid). Differentiable in ``states``:
    a position gets gradient from every step whose relevant set holds it."""
    batch, steps, rho = index.shape
    flat = index.reshape(batch, steps * rho, 1).expand(-1, -1, states.size(-1))
    gathered = torch.gather(states, 1, flat).view(batch, steps, rho, states.size(-1))
    return gathered * valid.unsqueeze(-1).to(gathered.dtype)


__all__ = [
    "AdditiveAttention",
    "RelevancyMemory",
    "FullMemory",
    "relevant_indices",
    "gather_relevant",
    "EMPTY_RELEVANCE",
]

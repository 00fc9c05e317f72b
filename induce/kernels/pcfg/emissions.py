"""The emission scores of the neural PCFGs: the last layer of the emission network, normalised over the
vocabulary and read at the batch's words, in one autograd function.

``emission_scores(hidden, weight, bias, tokens)`` equals ``(hidden @ weight.T + bias).log_softmax(-1)`` read
at each word (to float rounding): ``hidden [G, P, D]`` the preterminals' last hidden layer, one grammar per
sentence (``G = B``, the compound PCFG) or one for the whole batch (``G = 1``: N-PCFG, TN-PCFG), ``weight
[V, D]`` and ``bias [V]`` the layer over the vocabulary, ``tokens [B, N]``; returns ``terms [B, N, P]``.

Why not ``log_softmax`` and ``gather``: they write the ``[G, P, V]`` log-probabilities (kept for the
backward pass), and the backward pass fills a zero ``[G, P, V]`` gradient, scatters the words' gradients
into it, reads it with the kept output to make the logits' gradient, then reads that again for the bias.
Here the logits are kept instead, with one log normaliser per row; the backward pass writes the logits'
gradient ``-softmax * (sum of the row's word gradients)`` over the kept logits in one pass, adds the words'
own gradients at their entries, and hands it to the two matrix products of the layer. The objective and
every gradient are the same functions as before (the logits' gradient is the same expression); the sums
run in another order. On float32 CPU tensors the softmax pass, and the normaliser of a pass that records a
graph (training), are compiled loops (:mod:`induce.kernels.pcfg.native`); elsewhere, torch operations compute the
same. The normaliser of a pass without a graph (parsing, evaluation) is always ``torch.logsumexp``: the compiled
one rounds differently (a few ulp), and the Viterbi tree of a grammar whose best trees tie in exact arithmetic
(the same rules in another arrangement, common early in training) flips with the last bit of a word's score,
so a parse gives the same trees whether the compiled loops run or not (``INDUCE_NATIVE_KERNELS=0``, no
compiler). It takes 3-4x the compiled loops' time (on one thread, 60 preterminals over 10,000 words: 1.0 ms
against 0.34; a compound PCFG's batch of 16 grammars: 29 ms against 6.5, some 3% of that batch's parse).
"""
from __future__ import annotations

from typing import Optional

import torch
from torch.autograd.function import once_differentiable

from induce.kernels.pcfg import native


def _row_logsumexp(logits: torch.Tensor, compiled: bool) -> torch.Tensor:
    """``logsumexp`` over each row of ``logits [R, V]``; the compiled loops only where ``compiled`` (a graph is
    recorded: the module docstring says why)."""
    if compiled and native.usable_for_sum(logits):
        return native.row_logsumexp(logits)
    return torch.logsumexp(logits, -1)


def _softmax_backward(logits: torch.Tensor, lse: torch.Tensor, row_sums: torch.Tensor, out: torch.Tensor):
    """``out = -exp(logits - lse) * row_sums`` (rows), ``out`` possibly ``logits`` itself."""
    if native.usable_for_sum(logits):
        return native.softmax_backward(logits, lse, row_sums, out)
    return torch.sub(logits, lse[:, None], out=out).exp_().mul_(-row_sums[:, None].to(out.dtype))


def _picked(logits: torch.Tensor, tokens: torch.Tensor, G: int, P: int) -> torch.Tensor:
    """The logits at the words: ``[G * P, B * N]`` for one grammar (``G = 1``), else ``[B, P, N]``."""
    V = logits.shape[-1]
    if G == 1:
        return logits.index_select(1, tokens.reshape(-1))
    B, N = tokens.shape
    return logits.view(B, P, V).gather(2, tokens[:, None, :].expand(B, P, N))


def _logits(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    """``[G * P, V]``: the layer over the vocabulary."""
    flat = hidden.reshape(-1, hidden.shape[-1])
    return torch.addmm(bias, flat, weight.t()) if bias is not None else flat @ weight.t()


class _EmissionScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, hidden, weight, bias, tokens, graph):  # type: ignore[override]
        G, P, _ = hidden.shape
        B, N = tokens.shape
        logits = _logits(hidden, weight, bias)
        lse = _row_logsumexp(logits, compiled=graph)
        picked = _picked(logits, tokens, G, P)
        if G == 1:
            terms = (picked - lse[:, None]).view(P, B, N).permute(1, 2, 0)
        else:
            terms = (picked - lse.view(B, P, 1)).transpose(1, 2)
        ctx.save_for_backward(hidden, weight, bias, tokens)
        ctx.logits, ctx.lse, ctx.logits_used = logits, lse, False
        return terms

    @staticmethod
    @once_differentiable
    def backward(ctx, d_terms):  # type: ignore[override]
        hidden, weight, bias, tokens = ctx.saved_tensors
        G, P, D = hidden.shape
        B, N = tokens.shape
        # the logits' gradient takes the logits' memory; a second backward pass through this graph (retain_graph)
        # computes them again first
        logits = _logits(hidden, weight, bias) if ctx.logits_used else ctx.logits
        ctx.logits_used = True
        d_terms = d_terms.to(logits.dtype)
        if G == 1:
            d_picked = d_terms.permute(2, 0, 1).reshape(P, B * N)
            d_logits = _softmax_backward(logits, ctx.lse, d_picked.sum(1), logits)
            d_logits.index_add_(1, tokens.reshape(-1), d_picked)
        else:
            d_picked = d_terms.transpose(1, 2)  # [B, P, N]
            d_logits = _softmax_backward(logits, ctx.lse, d_picked.sum(2).reshape(-1), logits)
            d_logits.view(B, P, -1).scatter_add_(2, tokens[:, None, :].expand(B, P, N), d_picked)
        # under autocast the logits (and so d_logits) may be bf16 while the inputs are float32: each gradient is
        # computed and returned in its input's dtype
        d_hidden = (d_logits.to(weight.dtype) @ weight).view(G, P, D).to(hidden.dtype) \
            if ctx.needs_input_grad[0] else None
        d_weight = (d_logits.t().to(hidden.dtype) @ hidden.reshape(G * P, D)).to(weight.dtype) \
            if ctx.needs_input_grad[1] else None
        d_bias = d_logits.sum(0).to(bias.dtype) if bias is not None and ctx.needs_input_grad[2] else None
        return d_hidden, d_weight, d_bias, None, None


def emission_scores(hidden: torch.Tensor, weight: torch.Tensor, bias: Optional[torch.Tensor],
                    tokens: torch.Tensor) -> torch.Tensor:
    """``terms [B, N, P]``: ``log_softmax(hidden @ weight.T + bias)`` over the vocabulary, read at ``tokens [B, N]``
    (module docstring); ``hidden [G, P, D]`` with ``G`` 1 or ``B``, ``weight [V, D]``, ``bias [V]`` or None."""
    if hidden.dim() != 3 or hidden.shape[0] not in (1, tokens.shape[0]):
        raise ValueError(f"emission_scores: hidden must be [1 or B={tokens.shape[0]}, P, D], got {tuple(hidden.shape)}")
    # decided here: within the Function's forward grad mode is off
    graph = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (hidden, weight, bias))
    return _EmissionScores.apply(hidden, weight, bias, tokens, graph)

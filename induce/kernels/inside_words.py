"""The word tables of the dense-PCFG inside algorithm, shared by the torch and Triton tiers.

A child spanning one word is a preterminal, so the rule blocks with a preterminal child are
contracted with the words' preterminal scores once per position, before the chart is filled
(``A`` the parent, ``B``/``C`` the left/right child, ``'`` marks a preterminal):

* ``y [B, T, NT, NT]``: ``y[i, A, C] = logsumexp_B rules[A, B', C] + terms[i, B]``: ``A -> (word i) C``;
* ``z [B, T, NT, NT]``: ``z[j, A, B] = logsumexp_C rules[A, B, C'] + terms[j, C]``: ``A -> B (word j)``;
* ``w2 [B, T - 1, NT]``: the nonterminals over words ``i, i + 1`` (through ``q [B, T, NT, P]``,
  ``q[i, A, C] = logsumexp_B rules[A, B', C'] + terms[i, B]``).

Sum mode (:func:`sum_tables` / :func:`sum_tables_backward`): matrix products in probability space
with the maximum of each word row and of each rule column taken out (the sums are invariant to those
shifts, so they carry no gradient), in chunks of sentences so that the ``exp`` of the rule blocks is
never held for the whole batch; the backward pass is written out and fills one gradient tensor of the
rules, block by block, instead of one per block. Max mode (:func:`max_tables`): ``max`` over the
preterminal, differentiated by autograd (the gradient goes to the argmax).
"""
from __future__ import annotations

from typing import Tuple

import torch

#: Rule-tensor entries processed per chunk of sentences (a chunk's exp of the blocks: ~4 MB in float32).
CHUNK_ENTRIES = 1 << 20


def _safe_log(x: torch.Tensor) -> torch.Tensor:
    return x.clamp_min(torch.finfo(x.dtype).tiny).log()


def _max_out(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(exp(x - m), m)`` with ``m`` the (detached) maximum over the last dimension, kept ``[..., 1]``."""
    m = x.detach().amax(-1, keepdim=True)
    return (x - m).exp(), m


def rule_blocks(rules: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``rules [B, NT, S, S]`` as views of its blocks NN ``[B, NT, NT, NT]``, P'N ``[B, NT, P, NT]``,
    NP' ``[B, NT, NT, P]`` and P'P' ``[B, NT, P, P]`` (left child, right child). Through ``split``,
    whose backward concatenates the blocks' gradients once (four slices would each fill a zero tensor
    of the whole rule tensor and add into it)."""
    NT = rules.shape[1]
    P = rules.shape[2] - NT
    upper, lower = rules.split([NT, P], dim=2)
    r_nn, r_np = upper.split([NT, P], dim=3)
    r_pn, r_pp = lower.split([NT, P], dim=3)
    return r_nn, r_pn, r_np, r_pp


def _chunks(rules: torch.Tensor):
    B = rules.shape[0]
    step = max(1, CHUNK_ENTRIES // max(1, rules[0].numel()))
    return [slice(start, min(start + step, B)) for start in range(0, B, step)]


def _shifts(rules: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The maxima the blocks are scaled by: over the left preterminal, ``[B, A, S]`` (the P'N and
    P'P' blocks' columns), and over the right preterminal, ``[B, A, NT]`` (the NP' block's rows).
    Reduced over whole rows of the rule tensor (a reduction over a block view is several times slower),
    the first as a running maximum over the preterminal rows (half the time of ``amax(2)`` at 30/60)."""
    NT = rules.shape[1]
    rows = rules[:, :, NT:].unbind(2)  # [B, A, S] each
    left = rows[0].clone()
    for row in rows[1:]:
        torch.maximum(left, row, out=left)
    return left, rules[:, :, :NT, NT:].amax(3)


def _right_exp(r: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``r [b, A, B, C']`` (right child a preterminal) as ``exp(r - c)`` laid out ``[b, A*B, P]`` (``c [b, A, B]``)."""
    return (r - c[..., None]).exp_().reshape(r.shape[0], -1, r.shape[3])


@torch.no_grad()
def sum_tables(terms: torch.Tensor, rules: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """``(left, z, w2, left_c, right_c)`` in the sum semiring, the last two the shifts of :func:`_shifts`
    (no graph; see :func:`sum_tables_backward`, which takes them all).

    ``y`` and ``q`` come from the lower rows of the rules (left child a preterminal, ``[b, A, P, S]``)
    in one product: ``left [B, T, A, S]``, ``y = left[..., :NT]``, ``q = left[..., NT:]``."""
    B, T, P = terms.shape
    NT = rules.shape[1]
    S = NT + P
    left = terms.new_empty(B, T, NT, S)
    z = terms.new_empty(B, T, NT, NT)
    e_terms, t_max = _max_out(terms)  # [B, T, P], [B, T, 1]
    _, _, r_np, _ = rule_blocks(rules)
    left_c, right_c = _shifts(rules)
    for cb in _chunks(rules):
        et, tm = e_terms[cb], t_max[cb, :, :, None]
        c = left_c[cb]  # [b, A, S]
        e = (rules[cb, :, NT:] - c[:, :, None]).exp_()  # [b, A, P, S]
        left[cb] = _safe_log(et[:, None] @ e).transpose(1, 2) + tm + c[:, None]  # [b, A, T, S] -> [b, T, A, S]
        c = right_c[cb]
        z[cb] = _safe_log(_right_exp(r_np[cb], c) @ et.transpose(1, 2)).view(-1, NT, NT, T).permute(0, 3, 1, 2)
        z[cb] += tm + c[:, None]
    w2 = torch.logsumexp(left[:, :-1, :, NT:] + terms[:, 1:, None, :], dim=-1)
    return left, z, w2, left_c, right_c


@torch.no_grad()
def sum_tables_backward(terms, rules, left, z, w2, left_c, right_c, d_y, d_z, d_w2, d_rules) -> torch.Tensor:
    """Gradient of :func:`sum_tables` for upstream ``d_y, d_z, d_w2``: returns ``d_terms [B, T, P]`` and
    writes the P'N, NP' and P'P' blocks of ``d_rules [B, NT, S, S]`` (its NN block is left alone).

    With ``H = d_out / S`` (``S`` the sum before the log, ``= exp(out - shifts)``), a left-word table
    gives ``d e = e_terms^T @ H`` (times ``e`` for the log rules) and ``d e_terms = H @ e^T`` (times
    ``e_terms`` for the log terms); the right-word table is the transpose."""
    T = terms.shape[1]
    NT = rules.shape[1]
    e_terms, t_max = _max_out(terms)
    d_terms = torch.zeros_like(terms)
    # w2 = logsumexp_C q[i, A, C] + terms[i + 1, C]
    share = (left[:, :-1, :, NT:] + terms[:, 1:, None, :] - w2[..., None]).exp() * d_w2[..., None]  # [B, T-1, A, P]
    d_terms[:, 1:] += share.sum(2)
    d_left = torch.zeros_like(left)  # [B, T, A, S]: d_y, then the two-word table's gradient
    d_left[..., :NT] = d_y
    d_left[:, :-1, :, NT:] = share
    _, _, r_np, _ = rule_blocks(rules)
    _, _, d_np, _ = rule_blocks(d_rules)
    for cb in _chunks(rules):
        et, tm = e_terms[cb], t_max[cb, :, :, None]
        c = left_c[cb]
        e = (rules[cb, :, NT:] - c[:, :, None]).exp_()  # [b, A, P, S]
        h = (d_left[cb] * (tm + c[:, None] - left[cb]).exp()).transpose(1, 2)  # [b, A, T, S]
        torch.mul(et.transpose(1, 2)[:, None] @ h, e, out=d_rules[cb, :, NT:])
        d_et = (h @ e.transpose(2, 3)).sum(1)  # [b, T, P]
        c = right_c[cb]
        e = _right_exp(r_np[cb], c)  # [b, A*B, P]
        h = (d_z[cb] * (tm + c[:, None] - z[cb]).exp()).reshape(-1, T, NT * NT)  # [b, T, A*B]
        torch.mul((h.transpose(1, 2) @ et).view_as(d_np[cb]), e.view_as(d_np[cb]), out=d_np[cb])
        d_et += h @ e
        d_terms[cb] += d_et * et
    return d_terms


def max_tables(terms: torch.Tensor, rules: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, z, w2)`` in the max semiring, differentiable by autograd when the inputs require it
    (chunks of positions keep the ``[B, chunk, A, P, C]`` broadcast small). Without a graph, a running
    maximum over the preterminals, elementwise over whole ``[B, T, A, C]`` tables: a reduction over the
    preterminal axis of the broadcast sums reads ``C``-float rows and runs several times slower."""
    B, T, P = terms.shape
    NT = rules.shape[1]
    _, r_pn, r_np, r_pp = rule_blocks(rules)
    if torch.is_grad_enabled() and (terms.requires_grad or rules.requires_grad):
        chunk = max(1, CHUNK_ENTRIES // max(1, B * NT * P * max(NT, P)))
        ys, zs, qs = [], [], []
        for start in range(0, T, chunk):
            t = terms[:, start: start + chunk]
            ys.append((t[:, :, None, :, None] + r_pn[:, None]).max(3).values)
            zs.append((t[:, :, None, None, :] + r_np[:, None]).max(4).values)
            qs.append((t[:, :, None, :, None] + r_pp[:, None]).max(3).values)
        y, z, q = torch.cat(ys, 1), torch.cat(zs, 1), torch.cat(qs, 1)
    else:
        with torch.no_grad():  # y and q in one pass over the rules' lower rows (left child a preterminal)
            left = _running_max(terms, rules[:, :, NT:], True)  # [B, T, A, S]
            y, q = left[..., :NT], left[..., NT:]
            z = _running_max(terms, r_np, False)
    w2 = (q[:, :-1] + terms[:, 1:, None, :]).max(-1).values
    return y, z, w2


def _running_max(terms: torch.Tensor, block: torch.Tensor, left: bool) -> torch.Tensor:
    """``max_p terms[b, t, p] + block[b, A, p, C]`` (``left``; ``block[b, A, B, p]`` otherwise): ``[B, T, A, C]``."""
    # per preterminal p: [B, A, C] (the right preterminal's slices copied contiguous first: strided by S
    # they read several times slower)
    blocks = block.unbind(2) if left else block.permute(0, 3, 1, 2).contiguous().unbind(1)
    out = scratch = None
    for p, rows in enumerate(blocks):
        sums = torch.add(terms[:, :, p, None, None], rows[:, None], out=scratch)
        if out is None:
            out, scratch = sums, torch.empty_like(sums)
        else:
            torch.maximum(out, sums, out=out)
    return out

"""The word tables of the dense-PCFG inside algorithm, shared by the torch and Triton tiers.

A child spanning one word is a preterminal, so the rule blocks with a preterminal child are
contracted with the words' preterminal scores once per position, before the chart is filled
(``A`` the parent, ``B``/``C`` the left/right child, ``'`` marks a preterminal):

* ``y [B, T, NT, NT]``: ``y[i, A, C] = logsumexp_B rules[A, B', C] + terms[i, B]``: ``A -> (word i) C``;
* ``z [B, T, NT, NT]``: ``z[j, A, B] = logsumexp_C rules[A, B, C'] + terms[j, C]``: ``A -> B (word j)``;
* ``w2 [B, T - 1, NT]``: the nonterminals over words ``i, i + 1`` (through ``q [B, T, NT, P]``,
  ``q[i, A, C] = logsumexp_B rules[A, B', C'] + terms[i, B]``).

Sum mode (:func:`sum_tables` / :func:`sum_tables_backward`): matrix products in probability space,
``[T, P] @ [P, NT * S]`` per sentence, with the maximum of each word's preterminal scores and of each
parent's rule block taken out; the tables stay in probability space, scaled, with a shift per row
(``y = log(ey) + y_shift``: the chart multiplies them, no log and exp in between), so an entry more
than ~87 nats below its row's reference (the word's best preterminal with the parent's best rule of
the block) is 0 in float32. The results are invariant to the shifts, so they carry no gradient. The
tables live position-major (``[T, B, ...]`` storage behind ``[B, T, ...]`` views, as the torch tier's
chart reads them); the scaled rule blocks are kept for the backward pass, which is written out and fills
one gradient tensor of the rules, block by block, instead of one per block. Max mode
(:func:`max_tables`): ``max`` over the preterminal, differentiated by autograd (the gradient goes to the
argmax).
"""
from __future__ import annotations

from typing import NamedTuple, Tuple

import torch

from induce.kernels.pcfg import native

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


def _block_shifts(rules: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per parent, the largest score of each block with a preterminal child: ``(k_y, k_q, k_z)``, each
    ``[B, NT]``, of P'N, P'P' and NP'. The first two from a running maximum over the preterminal rows
    (whole rows of the rule tensor: a reduction over a block view is several times slower)."""
    NT = rules.shape[1]
    rows = rules[:, :, NT:].unbind(2)  # [B, A, S] each
    left = rows[0].clone()
    for row in rows[1:]:
        torch.maximum(left, row, out=left)
    return left[..., :NT].amax(-1), left[..., NT:].amax(-1), rules[:, :, :NT, NT:].amax(3).amax(2)


class SumTables(NamedTuple):
    """The word tables of the sum mode in probability space, each row with its shift (log space):
    ``y = log(ey) + y_shift[..., None]``, the same for ``z``; ``w2`` in log space.

    ``ey, ez [B, T, NT, NT]`` (``ey`` a view of ``left``), ``y_shift, z_shift [B, T, NT]``, ``w2 [B, T - 1, NT]``;
    for the backward pass: ``left [B, T, NT, S]`` (``ey`` and ``q``, ``exp(q - shift)``, from one product),
    ``w2_sum [B, T - 1, NT]`` (``w2``'s sum before its log), the words' ``e_terms [B, T, P]``, the scaled
    rule blocks the tables were contracted with, ``e_left [B, P, NT, S]`` and ``e_right [B, NT * NT, P]``
    (:func:`_left_exp`, :func:`_right_exp`: kept rather than recomputed, ~1 MB a sentence at 30 / 60), and
    ``grad [B, NT * S * S]``, the memory they live in: each sentence's blocks in the first part of its row,
    which the backward pass overwrites with that sentence's gradient of the rules (one allocation of the
    rules' size for both: at B = 16, 13.8 MB less, and no fresh pages to fault in during the backward).
    ``k_y, k_q, k_z [B, NT]``: the blocks' shifts (:func:`_block_shifts`), to rebuild them."""

    ey: torch.Tensor
    y_shift: torch.Tensor
    ez: torch.Tensor
    z_shift: torch.Tensor
    w2: torch.Tensor
    left: torch.Tensor
    w2_sum: torch.Tensor
    e_terms: torch.Tensor
    e_left: torch.Tensor
    e_right: torch.Tensor
    grad: torch.Tensor
    k_y: torch.Tensor
    k_q: torch.Tensor
    k_z: torch.Tensor


def _left_shifts(k_y: torch.Tensor, k_q: torch.Tensor, P: int) -> torch.Tensor:
    """``[B, A, S]``: each column of the left-preterminal rows' shift, ``k_y`` over the nonterminal children,
    ``k_q`` over the preterminal ones (:func:`_block_shifts`)."""
    NT = k_y.shape[1]
    return torch.cat([k_y[..., None].expand(-1, -1, NT), k_q[..., None].expand(-1, -1, P)], -1)


def _left_exp(rules: torch.Tensor, cb: slice, k_left: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``exp(rules[cb, A, NT + p, X] - k_left[cb, A, X])`` (left child a preterminal) laid out ``[b, P, A, S]``
    in ``out``, so that one matrix product per sentence contracts it with the words' preterminals."""
    NT = rules.shape[1]
    torch.sub(rules[cb, :, NT:].transpose(1, 2), k_left[cb, None], out=out)
    return out.exp_()


def _right_exp(rules: torch.Tensor, cb: slice, k_z: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """``exp(rules[cb, A, B, NT + p] - k_z[cb, A])`` (right child a preterminal), ``[b, A * B, P]`` in ``out``."""
    NT = rules.shape[1]
    b = out.shape[0]
    torch.sub(rules[cb, :, :NT, NT:], k_z[cb, :, None, None], out=out.view(b, NT, NT, -1))
    return out.exp_()


@torch.no_grad()
def sum_tables(terms: torch.Tensor, rules: torch.Tensor) -> SumTables:
    """The sum mode's word tables (no graph; :func:`sum_tables_backward` is their backward pass).

    A block's entries are scaled by the parent's largest entry of the block (``k_y, k_q, k_z``) and a
    word's preterminal scores by their maximum, so a table entry is exact unless it lies more than
    ~87 nats below that reference (float32; it is then 0, as the chart's clamped sums are). ``y`` and
    ``q`` come from one matrix product per sentence, ``[T, P] @ [P, NT * S]``; ``z`` from
    ``[T, P] @ [P, NT * NT]``; ``w2`` sums ``q`` against the next word's preterminals."""
    B, T, P = terms.shape
    NT = rules.shape[1]
    S = NT + P
    e_terms, t_max = _max_out(terms)  # [B, T, P], [B, T, 1]
    k_y, k_q, k_z = _block_shifts(rules)
    k_left = _left_shifts(k_y, k_q, P)
    # position-major storage ([T, B, ...], seen as [B, T, ...]): the torch tier's chart reads a width's
    # spans of every sentence as one batch of matrices
    left = terms.new_empty(T, B, NT, S).transpose(0, 1)
    ez = terms.new_empty(T, B, NT, NT).transpose(0, 1)
    grad, e_left, e_right = _block_storage(terms, rules)
    for cb in _chunks(rules):  # a chunk's scaled blocks are contracted while they are in the cache
        b = cb.stop - cb.start
        e = _left_exp(rules, cb, k_left, e_left[cb])
        torch.matmul(e_terms[cb], e.view(b, P, NT * S), out=left[cb].view(b, T, NT * S))
        e = _right_exp(rules, cb, k_z, e_right[cb])
        torch.matmul(e_terms[cb], e.transpose(1, 2), out=ez[cb].view(b, T, NT * NT))
    w2_sum = (left[:, :-1, :, NT:] * e_terms[:, 1:, None, :]).sum(-1)  # [B, T - 1, NT]
    w2 = _safe_log(w2_sum) + t_max[:, :-1] + t_max[:, 1:] + k_q[:, None]
    return SumTables(left[..., :NT], t_max + k_y[:, None], ez, t_max + k_z[:, None], w2, left, w2_sum, e_terms,
                     e_left, e_right, grad, k_y, k_q, k_z)


def _block_storage(terms: torch.Tensor, rules: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(grad [B, NT * S * S], e_left [B, P, NT, S], e_right [B, NT * NT, P])``: one allocation of the rules'
    size, the scaled blocks as views of the first ``P * NT * (S + NT)`` entries of each sentence's row."""
    B, _, P = terms.shape
    NT = rules.shape[1]
    S = NT + P
    grad = terms.new_empty(B, NT * S * S)
    e_left = grad[:, : P * NT * S].view(B, P, NT, S)
    e_right = grad[:, P * NT * S: P * NT * (S + NT)].view(B, NT * NT, P)
    return grad, e_left, e_right


def rebuilt_tables(rules: torch.Tensor, tables: SumTables) -> SumTables:
    """``tables`` with its scaled blocks in fresh memory, rebuilt from the rules (a second backward pass
    through the same graph: the first wrote the rules' gradient over them)."""
    NT = rules.shape[1]
    P = rules.shape[2] - NT
    grad, e_left, e_right = _block_storage(tables.e_terms, rules)
    k_left = _left_shifts(tables.k_y, tables.k_q, P)
    for cb in _chunks(rules):
        _left_exp(rules, cb, k_left, e_left[cb])
        _right_exp(rules, cb, tables.k_z, e_right[cb])
    return tables._replace(e_left=e_left, e_right=e_right, grad=grad)


@torch.no_grad()
def sum_tables_backward(terms: torch.Tensor, rules: torch.Tensor, tables: SumTables, d_ey: torch.Tensor,
                        d_ez: torch.Tensor, d_w2: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gradient of :func:`sum_tables` for upstream ``d_ey, d_ez`` (with respect to the scaled tables, the
    shifts held: the result does not depend on them) and ``d_w2``: returns ``d_terms [B, T, P]`` and
    ``d_rules [B, NT, S, S]`` with its P'N, NP' and P'P' blocks written, its NN block left to the caller
    (``tables.grad``'s memory: the scaled blocks are overwritten, a chunk once it has been read).

    A table ``G = e_terms @ E`` gives ``d E = e_terms^T @ d G`` (times ``E`` for the log rules) and
    ``d e_terms = d G @ E^T`` (times ``e_terms`` for the log terms), chunk by chunk of sentences."""
    B, T, P = terms.shape
    NT = rules.shape[1]
    S = NT + P
    left, e_terms = tables.left, tables.e_terms
    tiny = torch.finfo(left.dtype).tiny
    # w2 = log(sum_C q[i, A, C] e_terms[i + 1, C]) + shifts: d/d sum = d_w2 / sum (0 where the log clamped it)
    h = torch.where(tables.w2_sum >= tiny, d_w2 / tables.w2_sum, torch.zeros_like(d_w2))  # [B, T - 1, A]
    d_left = torch.empty_like(left)
    d_left[..., :NT] = d_ey
    torch.mul(h[..., None], e_terms[:, 1:, None, :], out=d_left[:, :-1, :, NT:])
    d_left[:, -1, :, NT:] = 0
    d_et = torch.zeros_like(e_terms)
    d_et[:, 1:] = (h[..., None] * left[:, :-1, :, NT:]).sum(2)
    d_rules = tables.grad.view(-1, NT, S, S)
    for cb in _chunks(rules):
        b = cb.stop - cb.start
        et = e_terms[cb]
        e = tables.e_left[cb]
        g = d_left[cb].view(b, T, NT * S)
        d_et[cb] += g @ e.view(b, P, NT * S).transpose(1, 2)
        d_left_rules = (et.transpose(1, 2) @ g).view(b, P, NT, S).mul_(e)
        e = tables.e_right[cb]
        g = d_ez[cb].reshape(b, T, NT * NT)
        d_et[cb] += g @ e
        d_right_rules = (g.transpose(1, 2) @ et).mul_(e).view(b, NT, NT, P)
        # this chunk's blocks are read: its rows of the shared memory take the rules' gradient
        d_rules[cb, :, NT:].copy_(d_left_rules.transpose(1, 2))
        d_rules[cb, :, :NT, NT:].copy_(d_right_rules)
    return d_et.mul_(e_terms), d_rules


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
    elif native.usable(terms, rules):  # the compiled twin of the branch below
        left = native.word_table(terms, rules[:, :, NT:])  # [B, T, A, S]
        y, q = left[..., :NT], left[..., NT:]
        z = native.word_table(terms, r_np.permute(0, 1, 3, 2))
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

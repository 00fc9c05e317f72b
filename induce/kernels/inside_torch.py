"""Torch tier of the dense-PCFG inside algorithm: one batched step per span width, a hand-written outside pass.

Layout. Children of a span of one word are preterminals, of a longer span nonterminals (no unary
rules), so a split draws on one of four blocks of ``rules [B, NT, S, S]`` (``S = NT + P``, children
``< NT`` nonterminals): NN (both children longer than a word), PN (a word on the left), NP (a word
on the right) and PP (a span of two words). The parts that touch a word are contracted with the
word's preterminal scores once per position, before the chart is filled (the word tables ``y, z,
w2`` of :mod:`induce.kernels.inside_words`).

The chart of longer spans is filled by :class:`InsideSum` (``semiring="sum"``, word tables and
chart in one autograd Function) or :class:`_InsideMax` (``"max"``), whose backward passes are
written by hand: the outside pass, width by width from the widest, recomputing each width's split
products from the chart instead of keeping them (memory grows with the chart, ``B T^2 NT``, not with
``B T^2 NT^2``). Scores of the sum mode are contracted in probability space with per-row maxima
taken out (the ``stripe`` products of TN-PCFG's ``Faster_PCFG``, without its ``+ 1e-9``): a sum
that underflows is clamped to the smallest normal float before its log, so contributions more than
~87 nats below a row's largest are dropped (all inputs finite). The max mode keeps backpointers
(Kim et al.'s ``_viterbi`` does; TN-PCFG takes the gradient of the max instead), and its backward
pass follows them, so the gradient of the best score is the best tree either way
(:func:`induce.kernels.viterbi`).

The chart is computed over the padded length ``T`` (as TN-PCFG's ``s[arange(B), 0, lens]``);
``log Z`` of a sentence is read at its own length (a span inside the sentence never reads past it),
and padded words are zeroed first so that whatever they hold never reaches a number.

Conventions, from the released code (read, not copied): the symbol order of the rule tensor is
Kim et al.'s (``PCFG.py``: nonterminals first), which torch-struct's ``SentCFG`` and TN-PCFG's
``pcfg.py`` share; a sentence of one word has no derivation (Kim et al.'s chart leaves the
nonterminals of a one-word span at ``-1e9`` and ``train.py`` skips such sentences): here ``-inf``
and no gradient. Paper and code agree on these; nothing here is an option. Span scores and marginals
follow the package's one span convention (fenceposts, every width: :mod:`induce.kernels`), where TN-PCFG's
``span_indicator`` and Kim et al.'s span lists leave out the one-word spans (always in the tree): here a
one-word span's score is added to the word's preterminal scores before the chart, and the chart's
``[b, first word, last word]`` layout reads the longer spans' scores from ``span_scores[:, :T, 1:]``.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch
from torch.autograd.function import once_differentiable

from induce.kernels.inside_words import (
    _max_out,
    _safe_log,
    max_tables,
    rule_blocks,
    sum_tables,
    sum_tables_backward,
)


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


# ------------------------------------------------------------------------------------ sum: chart
class _Chart:
    """The chart of the sum mode in two layouts, each as ``exp(beta - m)`` and its row maxima ``m``.

    ``*_sw [B, T(start), T(width - 1), NT]``; ``*_ew [B, T(end), T(T - width), NT]``, where the right
    children of one parent's splits are contiguous (widths ``w-2 .. 2`` in increasing slots, aligned
    with the left children ``2 .. w-2`` of the ``sw`` layout). ``log_sw`` keeps ``beta`` itself.
    Entries of width 1 and past ``T`` stay 0 (never read)."""

    def __init__(self, B: int, T: int, NT: int, like: torch.Tensor):
        self.T = T
        self.log_sw = like.new_zeros(B, T, T, NT)
        self.e_sw = like.new_zeros(B, T, T, NT)
        self.e_ew = like.new_zeros(B, T, T, NT)
        self.m_sw = like.new_zeros(B, T, T)
        self.m_ew = like.new_zeros(B, T, T)

    def store(self, w: int, beta: torch.Tensor) -> None:
        n, T = self.T - w + 1, self.T
        e, m = _max_out(beta)
        self.log_sw[:, :n, w - 1] = beta
        self.e_sw[:, :n, w - 1] = e
        self.e_ew[:, w - 1:, T - w] = e
        self.m_sw[:, :n, w - 1] = m.squeeze(-1)
        self.m_ew[:, w - 1:, T - w] = m.squeeze(-1)

    def rights(self, w: int):
        """Right children of the PN splits (spans ``i+1..j``): ``exp [B, n, NT]``, max ``[B, n, 1]``."""
        n = self.T - w + 1
        return self.e_sw[:, 1:n + 1, w - 2], self.m_sw[:, 1:n + 1, w - 2, None]

    def lefts(self, w: int):
        """Left children of the NP splits (spans ``i..j-1``)."""
        n = self.T - w + 1
        return self.e_sw[:, 0:n, w - 2], self.m_sw[:, 0:n, w - 2, None]

    def nn_splits(self, w: int):
        """Children of the splits with both children longer than a word (``w >= 4``): left and right
        ``exp [B, n, w-3, NT]`` (left widths 2..w-2), the split weights ``exp(m_l + m_r - M)``
        ``[B, n, w-3]`` and ``M [B, n, 1]``, the largest ``m_l + m_r``."""
        n, T = self.T - w + 1, self.T
        m = self.m_sw[:, 0:n, 1:w - 2] + self.m_ew[:, w - 1:, T - w + 2: T - 1]
        big = m.amax(-1, keepdim=True)
        return self.e_sw[:, 0:n, 1:w - 2], self.e_ew[:, w - 1:, T - w + 2: T - 1], (m - big).exp(), big


def _sum_forward(y, z, w2, r_nn, spans):
    """Fill the chart width by width: each span's nonterminals from its three kinds of splits."""
    B, T, NT, _ = y.shape
    chart = _Chart(B, T, NT, y)
    ey, y_max = _max_out(y)
    ez, z_max = _max_out(z)
    y_max, z_max = y_max.squeeze(-1), z_max.squeeze(-1)
    flat = r_nn.reshape(B, NT, NT * NT)
    c_nn = flat.amax(-1)  # [B, A]
    e_nn = (flat - c_nn[..., None]).exp()
    e_nn_t = e_nn.transpose(1, 2).contiguous()  # [B, NT*NT, A]
    for w in range(2, T + 1):
        n = T - w + 1
        span = spans.diagonal(offset=w - 1, dim1=1, dim2=2)[..., None]  # [B, n, 1]
        if w == 2:
            chart.store(w, w2 + span)
            continue
        right_e, right_m = chart.rights(w)  # PN: A -> (word i) (span i+1..j)
        parts = [_safe_log((ey[:, :n] * right_e[:, :, None, :]).sum(-1)) + y_max[:, :n] + right_m]
        left_e, left_m = chart.lefts(w)  # NP: A -> (span i..j-1) (word j)
        parts.append(_safe_log((ez[:, w - 1:] * left_e[:, :, None, :]).sum(-1)) + z_max[:, w - 1:] + left_m)
        if w >= 4:  # NN: sum the child pairs over the splits, then contract with the rules
            left_e, right_e, weight, big = chart.nn_splits(w)
            pairs = (left_e * weight[..., None]).transpose(-1, -2) @ right_e  # [B, n, NT, NT]
            parts.append(_safe_log(pairs.view(B, n, NT * NT) @ e_nn_t) + big + c_nn[:, None])
        chart.store(w, torch.logsumexp(torch.stack(parts), 0) + span)
    return chart, (ey, y_max, ez, z_max, e_nn, c_nn)


def _sum_backward(state, grad_chart: torch.Tensor):
    """The outside pass over :func:`_sum_forward`'s chart: gradients of ``(y, z, w2, r_nn, spans)``."""
    chart, spans, (ey, y_max, ez, z_max, e_nn, c_nn) = state
    B, T, _, NT = chart.log_sw.shape
    g_sw = grad_chart.clone()  # d/d beta, accumulated from the parents (start, width layout)
    g_ew = torch.zeros_like(g_sw)  # the same for right children (end, T - width layout)
    d_y = torch.zeros_like(ey)
    d_z = torch.zeros_like(ez)
    d_enn = torch.zeros_like(e_nn)
    d_spans = torch.zeros_like(spans)
    d_w2 = torch.zeros(B, T - 1, NT, dtype=ey.dtype, device=ey.device)
    for w in range(T, 1, -1):
        n = T - w + 1
        g = g_sw[:, :n, w - 1] + g_ew[:, w - 1:, T - w]  # [B, n, A]
        d_spans.diagonal(offset=w - 1, dim1=1, dim2=2).copy_(g.sum(-1))
        if w == 2:
            d_w2.copy_(g)
            break
        # each part's share is exp(part - base); with part = log(sum) + maxima, d/d sum = g exp(maxima - base)
        base = chart.log_sw[:, :n, w - 1] - spans.diagonal(offset=w - 1, dim1=1, dim2=2)[..., None]
        right_e, right_m = chart.rights(w)
        h = g * (y_max[:, :n] + right_m - base).exp()  # [B, n, A]
        d_y[:, :n].addcmul_(h[..., None], right_e[:, :, None, :])  # times ey at the end
        g_sw[:, 1:n + 1, w - 2] += right_e * (h[..., None] * ey[:, :n]).sum(2)
        left_e, left_m = chart.lefts(w)
        h = g * (z_max[:, w - 1:] + left_m - base).exp()
        d_z[:, w - 1:].addcmul_(h[..., None], left_e[:, :, None, :])
        g_sw[:, 0:n, w - 2] += left_e * (h[..., None] * ez[:, w - 1:]).sum(2)
        if w >= 4:
            left_e, right_e, weight, big = chart.nn_splits(w)
            pairs = (left_e * weight[..., None]).transpose(-1, -2) @ right_e  # recomputed, [B, n, NT, NT]
            h = g * (c_nn[:, None] + big - base).exp()
            d_enn += h.transpose(1, 2) @ pairs.view(B, n, NT * NT)
            q = (h @ e_nn).view(B, n, NT, NT)  # d/d pairs
            g_sw[:, 0:n, 1:w - 2].addcmul_(weight[..., None] * left_e, right_e @ q.transpose(-1, -2))
            g_ew[:, w - 1:, T - w + 2: T - 1].addcmul_(weight[..., None] * right_e, left_e @ q)
    return d_y.mul_(ey), d_z.mul_(ez), d_w2, (d_enn * e_nn).view(B, NT, NT, NT), d_spans


def _sum_forward_state(y, z, w2, r_nn, spans):
    chart, tables = _sum_forward(y, z, w2, r_nn, spans)
    return chart.log_sw, (chart, spans, tables)


#: The torch tier's chart: ``(forward, backward)`` as :class:`InsideSum` calls them.
TORCH_CHART = (_sum_forward_state, _sum_backward)


class InsideSum(torch.autograd.Function):
    """``(terms [B, T, P], rules [B, NT, S, S], spans [B, T, T], chart) -> chart [B, T(start), T(width-1), NT]``.

    Word tables (:mod:`induce.kernels.inside_words`), then ``chart = (forward, backward)``: ``forward(y,
    z, w2, r_nn, spans) -> (chart, state)`` fills the chart, ``backward(state, grad_chart)`` returns the
    gradients of ``(y, z, w2, r_nn, spans)``: :data:`TORCH_CHART` here, the Triton kernels in
    :mod:`induce.kernels.inside_triton`. The rules' gradient is one tensor, its four blocks written in place."""

    @staticmethod
    def forward(ctx, terms, rules, spans, chart):  # type: ignore[override]
        NT = rules.shape[1]
        tables = sum_tables(terms, rules)  # left (y and q), z, w2 and the rule blocks' shifts
        left, z, w2 = tables[:3]
        out, state = chart[0](left[..., :NT], z, w2, rule_blocks(rules)[0], spans)
        ctx.state, ctx.backward_chart = state, chart[1]
        ctx.save_for_backward(terms, rules, *tables)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_chart):  # type: ignore[override]
        terms, rules, *tables = ctx.saved_tensors
        d_y, d_z, d_w2, d_r_nn, d_spans = ctx.backward_chart(ctx.state, grad_chart)
        d_rules = torch.empty_like(rules)
        rule_blocks(d_rules)[0].copy_(d_r_nn)
        d_terms = sum_tables_backward(terms, rules, *tables, d_y, d_z, d_w2, d_rules)
        return d_terms, d_rules, d_spans, None


# ------------------------------------------------------------------------------------ max: chart
def _max_forward(y, z, w2, r_nn, spans):
    """Max-product chart and backpointers: per width, the winning kind of split and its children."""
    B, T, NT, _ = y.shape
    chart_sw = y.new_zeros(B, T, T, NT)
    chart_ew = y.new_zeros(B, T, T, NT)
    flat = r_nn.reshape(B, NT, NT * NT)
    buffer = y.new_empty(max(_MAX_PLUS_ENTRIES + B * NT * NT * NT, B * T * T * NT * NT // 4))
    pointers = {}
    for w in range(2, T + 1):
        n = T - w + 1
        span = spans.diagonal(offset=w - 1, dim1=1, dim2=2)[..., None]
        if w == 2:
            beta = w2
        else:
            pn, pn_arg = (y[:, :n] + chart_sw[:, 1:n + 1, w - 2][:, :, None, :]).max(-1)
            np_, np_arg = (z[:, w - 1:] + chart_sw[:, 0:n, w - 2][:, :, None, :]).max(-1)
            candidates = [pn, np_]
            nn_arg = split = pn_arg  # placeholders below width 4 (never read: kind < 2 there)
            if w >= 4:
                left = chart_sw[:, 0:n, 1:w - 2]  # [B, n, k, NT]
                right = chart_ew[:, w - 1:, T - w + 2: T - 1]
                pairs, split_arg = _best_pairs(left, right, buffer)  # [B, n, NT, NT]
                nn, nn_arg = _max_plus(pairs.view(B, n, NT * NT), flat, buffer)
                split = split_arg.view(B, n, NT * NT).gather(-1, nn_arg)
                candidates.append(nn)
            beta, kind = torch.stack(candidates).max(0)
            pointers[w] = (kind, pn_arg, np_arg, nn_arg, split)
        beta = beta + span
        chart_sw[:, :n, w - 1] = beta
        chart_ew[:, w - 1:, T - w] = beta
    return chart_sw, pointers


#: Entries of the ``[B, spans, A, NT * NT]`` sums of :func:`_max_plus` per chunk (16 MB in float32).
_MAX_PLUS_ENTRIES = 1 << 22


def _best_pairs(left: torch.Tensor, right: torch.Tensor, buffer: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``max_k left[b, s, k, B] + right[b, s, k, C]`` and its argmax ``k``, ``[B, n, NT, NT]`` (the sums
    written into ``buffer``: two passes over them, where a running maximum over ``k`` took four)."""
    B, n, k, NT = left.shape
    scratch = buffer[: B * n * k * NT * NT].view(B, n, k, NT, NT)
    torch.add(left[..., :, None], right[..., None, :], out=scratch)
    return scratch.max(2)


def _max_plus(pairs: torch.Tensor, flat_rules: torch.Tensor, buffer: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``max_c pairs[b, s, c] + flat_rules[b, A, c]`` and its argmax, ``[B, n, A]``: chunks of spans,
    the sums written into ``buffer`` (one allocation per call of :func:`_max_forward`)."""
    B, n, C = pairs.shape
    A = flat_rules.shape[1]
    chunk = max(1, _MAX_PLUS_ENTRIES // max(1, B * A * C))
    values = pairs.new_empty(B, n, A)
    args = torch.empty(B, n, A, dtype=torch.long, device=pairs.device)
    for start in range(0, n, chunk):
        stop = min(start + chunk, n)
        scratch = buffer[: B * (stop - start) * A * C].view(B, stop - start, A, C)
        torch.add(pairs[:, start:stop, None, :], flat_rules[:, None], out=scratch)
        torch.max(scratch, dim=-1, out=(values[:, start:stop], args[:, start:stop]))
    return values, args


def route_max_gradient(grad_chart: torch.Tensor, pointers: dict, y_shape, w2_shape, s_shape):
    """The max mode's backward: each chart entry's gradient goes to the children and rule of its argmax.

    ``pointers[w] = (kind, pn_arg, np_arg, nn_arg, split)``, each ``[B, n, NT]`` (int): the winning
    kind of split (0 PN, 1 NP, 2 NN), the right child's nonterminal of the PN split, the left child's
    of the NP split, the NN rule's child pair ``left * NT + right`` and its split (left child width
    minus 2). Shared by the torch and Triton tiers. Returns the gradients of ``(y, z, w2, r_nn, spans)``."""
    B, T, NT, _ = y_shape
    g_sw = grad_chart.clone()
    g_ew = torch.zeros_like(g_sw)
    d_y = grad_chart.new_zeros(y_shape)
    d_z = grad_chart.new_zeros(y_shape)
    d_r = grad_chart.new_zeros(B, NT * NT * NT)
    d_spans = grad_chart.new_zeros(s_shape)
    d_w2 = grad_chart.new_zeros(w2_shape)
    a_offset = torch.arange(NT, device=grad_chart.device).view(1, 1, NT) * (NT * NT)  # rule A's block
    for w in range(T, 1, -1):
        n = T - w + 1
        g = g_sw[:, :n, w - 1] + g_ew[:, w - 1:, T - w]
        d_spans.diagonal(offset=w - 1, dim1=1, dim2=2).copy_(g.sum(-1))
        if w == 2:
            d_w2.copy_(g)
            break
        kind, pn_arg, np_arg, nn_arg, split = (p.long() for p in pointers[w])
        g_pn = torch.where(kind == 0, g, 0.0)  # [B, n, A]
        d_y[:, :n].scatter_add_(-1, pn_arg[..., None], g_pn[..., None])
        g_sw[:, 1:n + 1, w - 2].scatter_add_(-1, pn_arg, g_pn)
        g_np = torch.where(kind == 1, g, 0.0)
        d_z[:, w - 1:].scatter_add_(-1, np_arg[..., None], g_np[..., None])
        g_sw[:, 0:n, w - 2].scatter_add_(-1, np_arg, g_np)
        if w >= 4:
            g_nn = torch.where(kind == 2, g, 0.0)
            d_r.scatter_add_(1, (a_offset + nn_arg).reshape(B, -1), g_nn.reshape(B, -1))
            k = w - 3
            left_g = g_nn.new_zeros(B, n, k * NT)
            left_g.scatter_add_(-1, split * NT + nn_arg // NT, g_nn)
            g_sw[:, 0:n, 1:w - 2] += left_g.view(B, n, k, NT)
            right_g = g_nn.new_zeros(B, n, k * NT)
            right_g.scatter_add_(-1, split * NT + nn_arg % NT, g_nn)
            g_ew[:, w - 1:, T - w + 2: T - 1] += right_g.view(B, n, k, NT)
    return d_y, d_z, d_w2, d_r.view(B, NT, NT, NT), d_spans


class _InsideMax(torch.autograd.Function):
    """Max-product twin of :class:`_InsideSum`: the backward routes each chart entry's gradient to its argmax."""

    @staticmethod
    def forward(ctx, y, z, w2, r_nn, spans):  # type: ignore[override]
        chart_sw, pointers = _max_forward(y, z, w2, r_nn, spans)
        ctx.pointers = pointers
        ctx.shapes = (y.shape, w2.shape, spans.shape)
        return chart_sw

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_chart):  # type: ignore[override]
        return route_max_gradient(grad_chart, ctx.pointers, *ctx.shapes)


# ----------------------------------------------------------------------------------------- public
def finish(chart_sw: torch.Tensor, roots: torch.Tensor, lengths: torch.Tensor, semiring: str,
           want_chart: bool, dtype: torch.dtype):
    """``log Z [B]`` read at each sentence's length (``-inf`` for one word) and, if asked, the chart
    ``[B, T + 1, T + 1, NT]`` over fenceposts (``-inf`` off the sentence and for one word)."""
    B, T = chart_sw.shape[:2]
    batch = torch.arange(B, device=chart_sw.device)
    lengths = lengths.to(chart_sw.device).long()
    top = chart_sw[batch, 0, (lengths - 1).clamp_min(0)]  # [B, NT]
    scores = top + roots
    total = torch.logsumexp(scores, -1) if semiring == "sum" else scores.max(-1).values
    log_z = torch.where(lengths >= 2, total, torch.full_like(total, float("-inf"))).to(dtype)
    if not want_chart:
        return log_z
    post = torch.arange(T + 1, device=chart_sw.device)
    width = (post[None, :] - post[:, None] - 1).clamp(0, T - 1)  # [i, j] -> j - i - 1, the chart_sw slot
    chart = chart_sw[:, post[:, None].clamp_max(T - 1), width]  # [B, T + 1, T + 1, NT]
    valid = (post[None, :] > post[:, None] + 1)[None] & (post[None, None, :] <= lengths[:, None, None])
    chart = torch.where(valid[..., None], chart, torch.full_like(chart, float("-inf")))
    return log_z, chart.to(dtype)


def run_inside(terms, rules, roots, lengths, span_scores, semiring: str, chart: bool, sum_chart, max_function,
               compute_dtype=_at_least_fp32):
    """:func:`inside` of a tier: ``sum_chart`` the ``(forward, backward)`` pair of :class:`InsideSum`,
    ``max_function`` the max mode's chart Function; inputs converted by ``compute_dtype``."""
    dtype = terms.dtype
    terms, rules, roots = compute_dtype(terms), compute_dtype(rules), compute_dtype(roots)
    B, T = terms.shape[:2]
    NT = rules.shape[1]
    lengths = lengths.to(terms.device)
    valid = torch.arange(T, device=terms.device)[None, :] < lengths[:, None]
    zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
    if span_scores is None:
        spans = terms.new_zeros(B, T, T)
    else:  # fenceposts [B, T+1, T+1] -> the chart's [b, first word, last word]; one-word spans join the terms
        span_scores = compute_dtype(span_scores)
        terms = terms + span_scores.diagonal(1, 1, 2)[..., None]
        # spans reaching past the sentence are computed too (never read): keep them finite
        spans = torch.where(valid[:, None, :], span_scores[:, :T, 1:], zero)
    terms = torch.where(valid[..., None], terms, zero)
    if T < 2:
        chart_sw = terms.new_zeros(B, T, T, NT) + 0.0 * (rules.sum() + terms.sum() + spans.sum())
    elif semiring == "sum":
        chart_sw = InsideSum.apply(terms, rules, spans, sum_chart)
    else:
        y, z, w2 = max_tables(terms, rules)
        chart_sw = max_function.apply(y, z, w2, rule_blocks(rules)[0], spans)
    return finish(chart_sw, roots, lengths, semiring, chart, dtype)


def inside(
    terms: torch.Tensor,
    rules: torch.Tensor,
    roots: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
    chart: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """See :func:`induce.kernels.inside`."""
    return run_inside(terms, rules, roots, lengths, span_scores, semiring, chart, TORCH_CHART, _InsideMax)

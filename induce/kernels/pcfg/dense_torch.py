"""Torch tier of the dense-PCFG inside algorithm: one batched step per span width, a hand-written outside pass.

Layout. Children of a span of one word are preterminals, of a longer span nonterminals (no unary
rules), so a split draws on one of four blocks of ``rules [B, NT, S, S]`` (``S = NT + P``, children
``< NT`` nonterminals): NN (both children longer than a word), PN (a word on the left), NP (a word
on the right) and PP (a span of two words). The parts that touch a word are contracted with the
word's preterminal scores once per position, before the chart is filled (the word tables ``y, z,
w2`` of :mod:`induce.kernels.pcfg.words`).

The chart of longer spans is filled by :class:`InsideSum` (``semiring="sum"``, word tables and
chart in one autograd Function) or :class:`_InsideMax` (``"max"``), whose backward passes are
written by hand: the outside pass, width by width from the widest, recomputing each width's split
products from the chart instead of keeping them (memory grows with the chart, ``B T^2 NT``, not with
``B T^2 NT^2``). The sum mode's chart is position-major (``[T, B, ...]``: a width's spans of every
sentence are one batch dimension of the matrix products, without a copy), and the outside pass keeps
the word splits' shares per slot and contracts them with their children once, after the last width.
Scores of the sum mode are contracted in probability space with per-row maxima
taken out (the ``stripe`` products of TN-PCFG's ``Faster_PCFG``, without its ``+ 1e-9``): a sum
that underflows is clamped to the smallest normal float before its log, so contributions more than
~87 nats below a row's largest are dropped (all inputs finite). The max mode (:class:`_InsideMax`)
fills the chart with values only, in cache-sized pieces (a running maximum over the splits, then over
chunks of child pairs, never a ``torch.max`` with indices over the whole chart), and its backward pass
recomputes the argmax of just the cells that receive a gradient: for ``log Z`` the best tree's, one
nonterminal per span (Kim et al.'s ``_viterbi`` keeps backpointers for every cell; TN-PCFG takes the
gradient of the max). The gradient of the best score is the best tree either way
(:func:`induce.kernels.viterbi`). On float32 CPU tensors without a graph (a Viterbi parse) the max
mode's word tables, chart and backward run as compiled loops (:mod:`induce.kernels.pcfg.native`, ~3x
faster; same values bit for bit); so do the sum mode's chart and outside pass on float32 CPU tensors, graph
or not (the training pass; its word tables stay the matrix products here). The compiled sum mode keeps the
numerics above (the same scaled probability space and clamp; its ``exp`` and ``log`` within a few ulp of
the C library's) and sums in another order: values and gradients equal this twin's to float rounding; it
fills each sentence's chart to that sentence's length only. The loops here are their eager twin, and the
only path elsewhere.

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

from induce.kernels.pcfg import native
from induce.kernels.pcfg.words import (
    _max_out,
    _safe_log,
    max_tables,
    rebuilt_tables,
    rule_blocks,
    sum_tables,
    sum_tables_backward,
)

#: Public functions here that are not kernel ops: :func:`run_inside`, the driver the Triton tier runs too (with
#: its own chart functions), and the steps it is made of, :func:`max_backward` and :func:`finish`.
TIER_HELPERS = ("finish", "max_backward", "run_inside")


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


# ------------------------------------------------------------------------------------ sum: chart
class _Chart:
    """The chart of the sum mode in two layouts, each as ``exp(beta - m)`` and its row maxima ``m``,
    position-major (the spans of one width and the batch merge into one batch dimension of matrix
    products without a copy).

    ``*_sw [T(start), B, T(width - 1), NT]``; ``*_ew [T(end), B, T(T - width), NT]``, where the right
    children of one parent's splits are contiguous (widths ``w-2 .. 2`` in increasing slots, aligned
    with the left children ``2 .. w-2`` of the ``sw`` layout). ``log_sw`` keeps ``beta`` itself.
    Entries of width 1 and past ``T`` stay 0 (never read)."""

    def __init__(self, B: int, T: int, NT: int, like: torch.Tensor):
        self.T = T
        self.log_sw = like.new_zeros(T, B, T, NT)
        self.e_sw = like.new_zeros(T, B, T, NT)
        self.e_ew = like.new_zeros(T, B, T, NT)
        self.m_sw = like.new_zeros(T, B, T)
        self.m_ew = like.new_zeros(T, B, T)

    def store(self, w: int, beta: torch.Tensor) -> None:
        """``beta [n, B, NT]``: the spans of width ``w``, by start."""
        n, T = self.T - w + 1, self.T
        e, m = _max_out(beta)
        self.log_sw[:n, :, w - 1] = beta
        self.e_sw[:n, :, w - 1] = e
        self.e_ew[w - 1:, :, T - w] = e
        self.m_sw[:n, :, w - 1] = m.squeeze(-1)
        self.m_ew[w - 1:, :, T - w] = m.squeeze(-1)

    def rights(self, w: int):
        """Right children of the PN splits (spans ``i+1..j``): ``exp [n, B, NT]``, max ``[n, B, 1]``."""
        n = self.T - w + 1
        return self.e_sw[1:n + 1, :, w - 2], self.m_sw[1:n + 1, :, w - 2, None]

    def lefts(self, w: int):
        """Left children of the NP splits (spans ``i..j-1``)."""
        n = self.T - w + 1
        return self.e_sw[0:n, :, w - 2], self.m_sw[0:n, :, w - 2, None]

    def nn_splits(self, w: int):
        """Children of the splits with both children longer than a word (``w >= 4``): left and right
        ``exp [n, B, w-3, NT]`` (left widths 2..w-2), the split weights ``exp(m_l + m_r - M)``
        ``[n, B, w-3]`` and ``M [n, B, 1]``, the largest ``m_l + m_r``."""
        n, T = self.T - w + 1, self.T
        m = self.m_sw[0:n, :, 1:w - 2] + self.m_ew[w - 1:, :, T - w + 2: T - 1]
        big = m.amax(-1, keepdim=True)
        return self.e_sw[0:n, :, 1:w - 2], self.e_ew[w - 1:, :, T - w + 2: T - 1], (m - big).exp(), big


def _width_spans(spans: torch.Tensor, w: int) -> torch.Tensor:
    """The span scores of width ``w``, ``[n, B, 1]`` (``spans [B, T, T]``, the chart's layout)."""
    return spans.diagonal(offset=w - 1, dim1=1, dim2=2).transpose(0, 1)[..., None]


def _sum_forward(ey, y_max, ez, z_max, w2, r_nn, spans):
    """Fill the chart width by width: each span's nonterminals from its three kinds of splits. The word
    tables come scaled, ``ey [B, T, NT, NT]`` with its rows' shifts ``y_max [B, T, NT]`` (``y = log(ey) +
    y_max``), the same for ``z`` (:class:`~induce.kernels.pcfg.words.SumTables`, position-major storage:
    read here through ``[T, B, ...]`` views)."""
    B, T, NT, _ = ey.shape
    chart = _Chart(B, T, NT, ey)
    # [T, B, ...]; ey is a strided view of the tables (rows of NT + P): a contiguous copy reads faster
    ey, ez, y_max, z_max = ey.transpose(0, 1).contiguous(), *(x.transpose(0, 1) for x in (ez, y_max, z_max))
    flat = r_nn.reshape(B, NT, NT * NT)
    c_nn = flat.amax(-1)  # [B, A]
    e_nn = (flat - c_nn[..., None]).exp()
    e_nn_t = e_nn.transpose(1, 2).contiguous()  # [B, NT*NT, A]
    for w in range(2, T + 1):
        n = T - w + 1
        span = _width_spans(spans, w)
        if w == 2:
            chart.store(w, w2.transpose(0, 1) + span)
            continue
        right_e, right_m = chart.rights(w)  # PN: A -> (word i) (span i+1..j)
        parts = [_safe_log((ey[:n] * right_e[:, :, None, :]).sum(-1)) + y_max[:n] + right_m]
        left_e, left_m = chart.lefts(w)  # NP: A -> (span i..j-1) (word j)
        parts.append(_safe_log((ez[w - 1:] * left_e[:, :, None, :]).sum(-1)) + z_max[w - 1:] + left_m)
        if w >= 4:  # NN: sum the child pairs over the splits, then contract with the rules
            left_e, right_e, weight, big = chart.nn_splits(w)
            pairs = (left_e * weight[..., None]).transpose(-1, -2) @ right_e  # [n, B, NT, NT]
            nn = ey.new_empty(n, B, NT)
            torch.bmm(pairs.view(n, B, NT * NT).transpose(0, 1), e_nn_t, out=nn.transpose(0, 1))
            parts.append(_safe_log(nn) + big + c_nn)
        chart.store(w, torch.logsumexp(torch.stack(parts), 0) + span)
    return chart, (ey, y_max, ez, z_max, e_nn, c_nn)


def _sum_backward(state, grad_chart: torch.Tensor):
    """The outside pass over :func:`_sum_forward`'s chart: gradients of ``(ey, ez, w2, r_nn, spans)``."""
    chart, spans, (ey, y_max, ez, z_max, e_nn, c_nn) = state
    T, B, _, NT = chart.log_sw.shape
    # d/d beta, accumulated from the parents (start, width layout), and the same for right children (end,
    # T - width layout)
    g_sw = grad_chart.transpose(0, 1).contiguous()
    g_ew = torch.zeros_like(g_sw)
    d_enn = torch.zeros_like(e_nn)
    d_spans = torch.zeros_like(spans)
    d_w2 = ey.new_empty(B, T - 1, NT)
    # the PN and NP splits' shares, kept per (word, child) slot and contracted with the children once at
    # the end (one matrix product each instead of an outer product per width): h_pn[i, b, w - 2, A] of the
    # span i..j (its right child i+1..j in e_sw[i + 1, b, w - 2]), h_np[j - 1, b, T - w + 1, A] (its left
    # child i..j-1 in e_ew[j - 1, b, T - w + 1])
    h_pn = ey.new_zeros(T - 1, B, T, NT)
    h_np = ey.new_zeros(T - 1, B, T, NT)
    for w in range(T, 1, -1):
        n = T - w + 1
        g = g_sw[:n, :, w - 1] + g_ew[w - 1:, :, T - w]  # [n, B, A]
        d_spans.diagonal(offset=w - 1, dim1=1, dim2=2).copy_(g.sum(-1).transpose(0, 1))
        if w == 2:
            d_w2.copy_(g.transpose(0, 1))
            break
        # each part's share is exp(part - base); with part = log(sum) + maxima, d/d sum = g exp(maxima - base)
        base = chart.log_sw[:n, :, w - 1] - _width_spans(spans, w)
        right_e, right_m = chart.rights(w)
        h = g * (y_max[:n] + right_m - base).exp()  # [n, B, A]
        h_pn[:n, :, w - 2] = h
        g_sw[1:n + 1, :, w - 2] += right_e * (h[:, :, None, :] @ ey[:n]).squeeze(2)
        left_e, left_m = chart.lefts(w)
        h = g * (z_max[w - 1:] + left_m - base).exp()
        h_np[w - 2:, :, T - w + 1] = h
        g_sw[0:n, :, w - 2] += left_e * (h[:, :, None, :] @ ez[w - 1:]).squeeze(2)
        if w >= 4:
            left_e, right_e, weight, big = chart.nn_splits(w)
            left_w = left_e * weight[..., None]
            pairs = (left_w.transpose(-1, -2) @ right_e).view(n, B, NT * NT).transpose(0, 1)  # recomputed
            h = g * (c_nn + big - base).exp()
            d_enn.baddbmm_(h.permute(1, 2, 0), pairs)  # in place: no [B, A, NT^2] temporary
            q = ey.new_empty(n, B, NT * NT)  # d/d pairs
            torch.bmm(h.transpose(0, 1), e_nn, out=q.transpose(0, 1))
            q = q.view(n, B, NT, NT)
            g_sw[0:n, :, 1:w - 2].addcmul_(left_w, right_e @ q.transpose(-1, -2))
            g_ew[w - 1:, :, T - w + 2: T - 1].addcmul_(weight[..., None] * right_e, left_e @ q)
    d_ey = ey.new_zeros(T, B, NT, NT)
    d_ez = ez.new_zeros(T, B, NT, NT)
    d_ey[:-1] = h_pn.transpose(-1, -2) @ chart.e_sw[1:]  # [T - 1, B, A, slots] @ [T - 1, B, slots, C]
    d_ez[1:] = h_np.transpose(-1, -2) @ chart.e_ew[:-1]
    return d_ey.transpose(0, 1), d_ez.transpose(0, 1), d_w2, (d_enn * e_nn).view(B, NT, NT, NT), d_spans


def _sum_forward_state(ey, y_max, ez, z_max, w2, r_nn, spans):
    chart, tables = _sum_forward(ey, y_max, ez, z_max, w2, r_nn, spans)
    return chart.log_sw.transpose(0, 1), (chart, spans, tables)


#: The torch tier's chart: ``(forward, backward)`` as :class:`InsideSum` calls them.
TORCH_CHART = (_sum_forward_state, _sum_backward)


def _native_chart(lengths: torch.Tensor):
    """The compiled twin of :data:`TORCH_CHART` (:func:`induce.kernels.pcfg.native.sum_chart`), over each
    sentence's length ``lengths [B]``."""
    return (lambda *tables: native.sum_chart(*tables, lengths), native.sum_backward)


class InsideSum(torch.autograd.Function):
    """``(terms [B, T, P], rules [B, NT, S, S], spans [B, T, T], chart) -> chart [B, T(start), T(width-1), NT]``
    (``spans[b, i, j]``: the words ``i .. j``, the chart's own layout; :func:`run_inside` converts the fenceposts).

    Word tables (:func:`~induce.kernels.pcfg.words.sum_tables`), then ``chart = (forward, backward)``:
    ``forward(ey, y_max, ez, z_max, w2, r_nn, spans) -> (chart, state)`` fills the chart from the scaled
    tables, ``backward(state, grad_chart)`` returns the gradients of ``(ey, ez, w2, r_nn, spans)``:
    :data:`TORCH_CHART` here, the Triton kernels in :mod:`induce.kernels.pcfg.dense_triton`. The rules'
    gradient is one tensor, its four blocks written in place."""

    @staticmethod
    def forward(ctx, terms, rules, spans, chart):  # type: ignore[override]
        tables = sum_tables(terms, rules)
        out, state = chart[0](tables.ey, tables.y_shift, tables.ez, tables.z_shift, tables.w2,
                              rule_blocks(rules)[0], spans)
        ctx.state, ctx.tables, ctx.backward_chart, ctx.tables_used = state, tables, chart[1], False
        ctx.save_for_backward(terms, rules)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_chart):  # type: ignore[override]
        terms, rules = ctx.saved_tensors
        d_ey, d_ez, d_w2, d_r_nn, d_spans = ctx.backward_chart(ctx.state, grad_chart)
        # the rules' gradient takes the memory of the tables' scaled blocks: a second backward pass through
        # this graph (retain_graph) rebuilds them first
        tables = rebuilt_tables(rules, ctx.tables) if ctx.tables_used else ctx.tables
        ctx.tables_used = True
        d_terms, d_rules = sum_tables_backward(terms, rules, tables, d_ey, d_ez, d_w2)
        rule_blocks(d_rules)[0].copy_(d_r_nn)  # after the tables' backward: it reads what this overwrites
        return d_terms, d_rules, d_spans, None


# ------------------------------------------------------------------------------------ max: chart
#: Entries of a scratch tensor of the max mode (a sum before its ``max``): 4 MiB in float32, so that it
#: stays in the cache between the sum and the reduction.
_MAX_SCRATCH = 1 << 20


def _max_forward(y, z, w2, r_nn, spans):
    """Max-product chart, values only (no backpointers: :func:`max_backward` finds the argmax of the
    cells that get a gradient). Returns ``chart_sw [B, T(start), T(width - 1), NT]``. The sums before
    each ``max`` go to buffers allocated once per pass (a fresh tensor per width costs its page faults
    again)."""
    if native.usable(y, z, w2, r_nn, spans):
        return native.max_chart(y, z, w2, r_nn, spans)
    B, T, NT, _ = y.shape
    chart_sw = y.new_zeros(B, T, T, NT)
    chart_ew = y.new_zeros(B, T, T, NT)
    # the word tables with the child's nonterminal before the parent's: the max over it runs over an outer
    # dimension (:func:`_outer_max`)
    y_t, z_t = y.transpose(-1, -2).contiguous(), z.transpose(-1, -2).contiguous()  # [B, T, child, A]
    flat_rules = r_nn.reshape(B, NT, NT * NT)
    # at least one span's sums: over the rules (NT^3) and over the splits ((T - 3) NT^2)
    scratch = y.new_empty(max(_MAX_SCRATCH, B * NT * NT * max(NT, T - 3))) if T >= 4 else None
    tiles = y.new_empty(2, B * T * NT * NT)  # [B, n, NT, NT]: a word with a span's sums, the best child pairs
    for w in range(2, T + 1):
        n = T - w + 1
        span = spans.diagonal(offset=w - 1, dim1=1, dim2=2)[..., None]
        if w == 2:
            beta = w2
        else:
            sums = tiles[0, : B * n * NT * NT].view(B, n, NT, NT)  # [B, n, child, A]
            beta = _outer_max(torch.add(y_t[:, :n], chart_sw[:, 1:n + 1, w - 2][..., None], out=sums))  # PN
            torch.add(z_t[:, w - 1:], chart_sw[:, 0:n, w - 2][..., None], out=sums)  # NP: (i..j-1) (word j)
            torch.maximum(beta, _outer_max(sums), out=beta)
            if w >= 4:  # NN: the best child pair over the splits, then the rules
                pairs = _best_pairs(chart_sw[:, 0:n, 1:w - 2], chart_ew[:, w - 1:, T - w + 2: T - 1],
                                    tiles[1, : B * n * NT * NT].view(B, n, NT, NT), scratch)
                torch.maximum(beta, _max_plus(pairs.view(B, n, NT * NT), flat_rules, scratch), out=beta)
        beta = beta + span
        chart_sw[:, :n, w - 1] = beta
        chart_ew[:, w - 1:, T - w] = beta
    return chart_sw


def _outer_max(x: torch.Tensor) -> torch.Tensor:
    """``x.amax(-2)`` by halving (elementwise maxima of the two halves, an odd last row joining the first):
    ~4x faster than ``amax`` over a dimension of a few dozen (measured at 30: a reduction over short rows runs
    at ~1.3 ns an element). A new tensor, never a view of ``x`` (the callers reuse ``x``'s memory)."""
    if x.shape[-2] == 1:
        return x[..., 0, :].clone()
    while x.shape[-2] > 1:
        h = x.shape[-2] // 2
        m = torch.maximum(x[..., :h, :], x[..., h:2 * h, :])
        if x.shape[-2] % 2:
            torch.maximum(m[..., :1, :], x[..., 2 * h:, :], out=m[..., :1, :])
        x = m
    return x[..., 0, :]


def _best_pairs(left: torch.Tensor, right: torch.Tensor, pairs: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``max_k left[b, s, k, B] + right[b, s, k, C]`` into ``pairs [B, n, NT, NT]``: the ``[B, spans, k, NT,
    NT]`` sums of chunks of spans in ``scratch`` (the reduction over ``k`` then runs over whole contiguous
    ``NT * NT`` rows; about 20% faster than a running maximum over ``k`` at T = 30)."""
    B, n, k, NT = left.shape
    chunk = max(1, scratch.numel() // (B * k * NT * NT))
    for s0 in range(0, n, chunk):
        m = min(chunk, n - s0)
        sums = scratch[: B * m * k * NT * NT].view(B, m, k, NT, NT)
        torch.add(left[:, s0:s0 + m, :, :, None], right[:, s0:s0 + m, :, None, :], out=sums)
        torch.amax(sums, 2, out=pairs[:, s0:s0 + m])
    return pairs


def _max_plus(pairs: torch.Tensor, flat_rules: torch.Tensor, scratch: torch.Tensor) -> torch.Tensor:
    """``max_c pairs[b, s, c] + flat_rules[b, A, c]``, ``[B, n, A]``, in chunks of spans whose ``[B, spans,
    A, NT * NT]`` sums fit ``scratch`` (:data:`_MAX_SCRATCH` entries at least one span's, allocated once per
    pass: a fresh allocation per chunk costs its page faults again; a chunk of the whole width is several
    times slower per element, out of cache). ``(pairs + rule)`` in that order, as :func:`max_backward`
    recomputes it."""
    B, n, C = pairs.shape
    A = flat_rules.shape[1]
    chunk = max(1, scratch.numel() // (B * A * C))
    best = pairs.new_empty(B, n, A)
    for s0 in range(0, n, chunk):
        m = min(chunk, n - s0)
        sums = scratch[: B * m * A * C].view(B, m, A, C)
        torch.add(pairs[:, s0:s0 + m, None, :], flat_rules[:, None], out=sums)
        torch.amax(sums, -1, out=best[:, s0:s0 + m])
    return best


def _argmax_cells(cells, w: int, chart_sw, chart_ew, y, z, r_nn):
    """The winning split of each cell ``(b, s, A)`` of width ``w`` (rows of ``cells [M, 3]``), recomputed
    with the forward pass's arithmetic: ``(kind, child, split)``, each ``[M]``, with ``kind`` 0 PN, 1 NP,
    2 NN, ``child`` the PN right child's or NP left child's nonterminal or the NN rule's child pair
    ``left * NT + right``, ``split`` the NN left child's width minus 2."""
    b, s, a = cells.unbind(1)
    T, NT = chart_sw.shape[2], chart_sw.shape[3]
    pn = y[b, s, a] + chart_sw[b, s + 1, w - 2]  # [M, NT]
    np_ = z[b, s + w - 1, a] + chart_sw[b, s, w - 2]
    pn_best, pn_arg = pn.max(-1)
    np_best, np_arg = np_.max(-1)
    kind = (np_best > pn_best).long()
    child = torch.where(kind == 1, np_arg, pn_arg)
    split = torch.zeros_like(kind)
    if w >= 4:
        left = chart_sw[b, s, 1:w - 2]  # [M, k, NT]
        right = chart_ew[b, s + w - 1, T - w + 2: T - 1]
        nn = ((left[:, :, :, None] + right[:, :, None, :]) + r_nn[b, a][:, None]).flatten(1)  # [M, k * NT * NT]
        nn_best, nn_arg = nn.max(-1)
        take = nn_best > torch.maximum(pn_best, np_best)
        kind = torch.where(take, 2, kind)
        child = torch.where(take, nn_arg % (NT * NT), child)
        split = torch.where(take, nn_arg // (NT * NT), split)
    return kind, child, split


def max_backward(grad_chart, chart_sw, y, z, r_nn, spans):
    """The max mode's backward: each chart cell's gradient goes to the children and rule of its argmax.

    Only the cells that receive a gradient are looked at (along the best tree for ``log Z``: one
    nonterminal per span of it), their argmax recomputed from the chart (:func:`_argmax_cells`), in
    chunks that keep the ``[cells, splits, NT, NT]`` sums small. Shared by the torch and Triton tiers.
    Returns the gradients of ``(y, z, w2, r_nn, spans)``; ``chart_sw`` as :func:`_max_forward` returns it."""
    if native.usable(grad_chart, chart_sw, y, z, r_nn, spans):
        return native.max_backward(grad_chart, chart_sw, y, z, r_nn, spans)
    B, T, _, NT = chart_sw.shape
    chart_ew = torch.zeros_like(chart_sw)  # the end-indexed layout, for the right children
    for w in range(2, T + 1):
        chart_ew[:, w - 1:, T - w] = chart_sw[:, :T - w + 1, w - 1]
    g_sw = grad_chart.clone()
    g_ew = torch.zeros_like(g_sw)
    d_y, d_z = torch.zeros_like(y), torch.zeros_like(z)
    d_r = torch.zeros(B, NT, NT * NT, dtype=grad_chart.dtype, device=grad_chart.device)
    d_spans = torch.zeros_like(spans)
    d_w2 = grad_chart.new_zeros(B, T - 1, NT)
    for w in range(T, 1, -1):
        n = T - w + 1
        g = g_sw[:, :n, w - 1] + g_ew[:, w - 1:, T - w]  # [B, n, A]
        d_spans.diagonal(offset=w - 1, dim1=1, dim2=2).copy_(g.sum(-1))
        if w == 2:
            d_w2.copy_(g)
            break
        cells = g.nonzero()  # [M, 3]: (b, s, A)
        step = max(1, _MAX_SCRATCH // max(1, (w - 3) * NT * NT))
        for c0 in range(0, cells.shape[0], step):
            part = cells[c0:c0 + step]
            b, s, a = part.unbind(1)
            kind, child, split = _argmax_cells(part, w, chart_sw, chart_ew, y, z, r_nn)
            grad = g[b, s, a]
            for which, mask in ((0, kind == 0), (1, kind == 1)):
                bm, sm, am, cm, gm = b[mask], s[mask], a[mask], child[mask], grad[mask]
                if which == 0:  # PN: the word table y of word s, the right child (s+1 .. j)
                    d_y.index_put_((bm, sm, am, cm), gm, accumulate=True)
                    g_sw.index_put_((bm, sm + 1, torch.full_like(bm, w - 2), cm), gm, accumulate=True)
                else:  # NP: the word table z of word j, the left child (s .. j-1)
                    d_z.index_put_((bm, sm + w - 1, am, cm), gm, accumulate=True)
                    g_sw.index_put_((bm, sm, torch.full_like(bm, w - 2), cm), gm, accumulate=True)
            mask = kind == 2
            if bool(mask.any()):
                bm, sm, am, cm, km, gm = b[mask], s[mask], a[mask], child[mask], split[mask], grad[mask]
                d_r.index_put_((bm, am, cm), gm, accumulate=True)
                # left child: start s, width km + 2 (slot km + 1); right child: end j, width w - km - 2
                g_sw.index_put_((bm, sm, km + 1, cm // NT), gm, accumulate=True)
                g_ew.index_put_((bm, sm + w - 1, T - w + km + 2, cm % NT), gm, accumulate=True)
    return d_y, d_z, d_w2, d_r.view(B, NT, NT, NT), d_spans


class _InsideMax(torch.autograd.Function):
    """Max-product twin of :class:`InsideSum`: values forward, the argmax of the cells with a gradient
    backward (:func:`max_backward`). ``forward_chart`` fills the chart (this tier's :func:`_max_forward`
    or the Triton kernels)."""

    @staticmethod
    def forward(ctx, y, z, w2, r_nn, spans, forward_chart):  # type: ignore[override]
        chart_sw = forward_chart(y, z, w2, r_nn, spans)
        ctx.save_for_backward(chart_sw, y, z, r_nn, spans)
        return chart_sw

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_chart):  # type: ignore[override]
        chart_sw, y, z, r_nn, spans = ctx.saved_tensors
        return (*max_backward(grad_chart.to(chart_sw.dtype), chart_sw, y, z, r_nn, spans), None)


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


def run_inside(terms, rules, roots, lengths, span_scores, semiring: str, chart: bool, sum_chart, max_chart,
               compute_dtype=_at_least_fp32):
    """:func:`inside` of a tier: ``sum_chart`` the ``(forward, backward)`` pair of :class:`InsideSum`,
    ``max_chart`` the max mode's chart forward (values only: see :class:`_InsideMax`); inputs converted by
    ``compute_dtype``."""
    dtype = terms.dtype
    terms, rules, roots = compute_dtype(terms), compute_dtype(rules), compute_dtype(roots)
    B, T = terms.shape[:2]
    NT = rules.shape[1]
    lengths = lengths.to(terms.device)
    valid = torch.arange(T, device=terms.device)[None, :] < lengths[:, None]
    zero = torch.zeros((), dtype=terms.dtype, device=terms.device)
    terms = torch.where(valid[..., None], terms, zero)
    words = terms.new_zeros(B, T)  # the one-word spans' scores: a constant over the word's preterminals
    if span_scores is None:
        spans = terms.new_zeros(B, T, T)
    else:  # fenceposts [B, T+1, T+1] -> the chart's [b, first word, last word] and the words' scores
        span_scores = compute_dtype(span_scores)
        # spans reaching past the sentence are computed too (never read): keep them finite
        words = torch.where(valid, span_scores.diagonal(1, 1, 2), zero)
        spans = torch.where(valid[:, None, :], span_scores[:, :T, 1:], zero)
    if T < 2:
        chart_sw = terms.new_zeros(B, T, T, NT) + 0.0 * (rules.sum() + terms.sum() + spans.sum() + words.sum())
    elif semiring == "sum":
        if sum_chart is TORCH_CHART and native.usable_for_sum(terms, rules, spans):
            sum_chart = _native_chart(lengths)
        chart_sw = InsideSum.apply(terms + words[..., None], rules, spans, sum_chart)
    else:  # a word's score shifts its tables (the max over its preterminals) by itself: added after them,
        # so that the tables need no graph when only the span scores ask for a gradient (viterbi)
        y, z, w2 = max_tables(terms, rules)
        w2 = w2 + words[:, :-1, None] + words[:, 1:, None]
        y, z = y + words[:, :, None, None], z + words[:, :, None, None]
        chart_sw = _InsideMax.apply(y, z, w2, rule_blocks(rules)[0], spans, max_chart)
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
    return run_inside(terms, rules, roots, lengths, span_scores, semiring, chart, TORCH_CHART, _max_forward)

"""Reference tier of the dense-PCFG inside algorithm: CKY written out span by span and split by split.

Follows Kim et al.'s ``PCFG._inside`` / ``_viterbi`` (harvardnlp/compound-pcfg) literally: a chart
over all ``S = NT + P`` symbols, each sentence on its own at its own length, each split's
``logsumexp`` (or ``max``) over every child pair the split allows, then over the splits. Slow
(Python loops over sentences, widths, spans and splits); the ground truth of the tests. In float32
or better; differentiable by autograd (the max mode's gradient goes to the argmax, as ``torch.max``'s).
See :func:`induce.kernels.inside` for the grammar and the conventions.
"""
from __future__ import annotations

from typing import Optional, Tuple, Union

import torch

from induce.errors import InduceError


class InsideInputError(InduceError, ValueError):
    """Inputs of an inside-algorithm kernel (:func:`induce.kernels.inside`, :func:`induce.kernels.inside_lowrank`)
    with inconsistent shapes or lengths, or an unknown semiring."""


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def _reduce(x: torch.Tensor, semiring: str) -> torch.Tensor:
    return torch.logsumexp(x, dim=-1) if semiring == "sum" else x.max(dim=-1).values


def inside(
    terms: torch.Tensor,
    rules: torch.Tensor,
    roots: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
    chart: bool = False,
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """One sentence at a time: ``beta[i][j]`` over all symbols (``-inf`` where a symbol cannot span ``i..j``)."""
    dtype = terms.dtype
    terms, rules, roots = _at_least_fp32(terms), _at_least_fp32(rules), _at_least_fp32(roots)
    spans = None if span_scores is None else _at_least_fp32(span_scores)
    B, T, P = terms.shape
    NT = rules.shape[1]
    S = NT + P
    neg_inf = torch.tensor(float("-inf"), dtype=terms.dtype, device=terms.device)
    log_z, charts = [], []
    for b in range(B):
        n = int(lengths[b])
        beta = [[None] * n for _ in range(n)]  # beta[i][j]: [S] scores of the symbols over words i..j
        for i in range(n):  # a word is spanned by a preterminal only (no unary rules)
            word = terms[b, i] if spans is None else terms[b, i] + spans[b, i, i + 1]
            beta[i][i] = torch.cat([neg_inf.expand(NT), word])
        for w in range(2, n + 1):
            for i in range(n - w + 1):
                j = i + w - 1
                per_split = []
                for k in range(i, j):  # left child i..k, right child k+1..j
                    left = beta[i][k][NT:] if k == i else beta[i][k][:NT]  # a word: preterminals; else nonterminals
                    right = beta[k + 1][j][NT:] if k + 1 == j else beta[k + 1][j][:NT]
                    rows = slice(NT, S) if k == i else slice(0, NT)
                    cols = slice(NT, S) if k + 1 == j else slice(0, NT)
                    scores = rules[b, :, rows, cols] + left[None, :, None] + right[None, None, :]  # [NT, l, r]
                    per_split.append(_reduce(scores.reshape(NT, -1), semiring))
                nonterminals = _reduce(torch.stack(per_split, dim=-1), semiring)
                if spans is not None:
                    nonterminals = nonterminals + spans[b, i, j + 1]  # fenceposts: words i..j
                beta[i][j] = torch.cat([nonterminals, neg_inf.expand(P)])
        if n >= 2:
            log_z.append(_reduce(beta[0][n - 1][:NT] + roots[b], semiring))
        else:  # one word: no binary derivation (Kim et al. skip these sentences)
            log_z.append(neg_inf)
        if chart:
            rows_ = []  # fenceposts: [i, j] the words i..j-1, two words at least
            for i in range(T + 1):
                row = [beta[i][j - 1][:NT] if (i + 1 < j <= n) else neg_inf.expand(NT) for j in range(T + 1)]
                rows_.append(torch.stack(row))
            charts.append(torch.stack(rows_))
    out = torch.stack(log_z).to(dtype)
    if chart:
        return out, torch.stack(charts).to(dtype)
    return out

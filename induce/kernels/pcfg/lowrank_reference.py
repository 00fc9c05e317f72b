"""Reference tier of :func:`induce.kernels.inside_lowrank`: TN-PCFG's inside algorithm, span by span.

The grammar (Yang, Zhao & Tu 2021, "PCFGs Can Do Better"; their released ``parser/pcfgs/tdpcfg.py``)
has ``NT`` nonterminals, ``T`` preterminals and ``S = NT + T`` symbols, nonterminals first. Its binary
rules are a rank-``r`` CP decomposition, never built here::

    rules[a, b, c] = sum_r U[a, r] V[b, r] W[c, r]      (a < NT, b and c < S)

given in log space: ``head = log U [B, NT, r]``, ``left = log V [B, S, r]``, ``right = log W [B, S, r]``.
As in Kim et al.'s compound-pcfg and TN-PCFG, a span of one word holds a preterminal and a longer span a
nonterminal, so a child of width 1 reads rows ``NT:`` of ``left`` / ``right`` and a wider child rows
``:NT``. ``roots [B, NT]`` is ``log p(S -> A)``, ``terms [B, N, T]`` is ``log p(word_i | preterminal)``.

This tier follows the definition literally, in log space, one sentence and one span at a time:
for the span ``(i, j)`` (fenceposts, words ``i .. j-1``) and every split ``k``, the children's inside
scores are moved into rank space (``logsumexp`` over their symbols against ``left`` / ``right``), added,
summed over the splits, and moved back to the nonterminals through ``head``. It is slow and obviously
correct; the faster tiers are checked against it and it against the explicit rule tensor (tests).
"""
from __future__ import annotations

from typing import Optional

import torch

from induce.kernels.pcfg.dense_reference import InsideInputError

#: Public functions here that are not kernel ops: the input check the other tiers run too.
TIER_HELPERS = ("check_inputs",)


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def check_inputs(terms: torch.Tensor, roots: torch.Tensor, head: torch.Tensor, left: torch.Tensor,
                 right: torch.Tensor, lengths: torch.Tensor, span_scores: Optional[torch.Tensor]) -> tuple:
    """``(B, N, NT, T, r)`` after checking the shapes; raises :class:`InsideInputError` naming the argument."""
    if terms.dim() != 3:
        raise InsideInputError(f"inside_lowrank: terms must be [B, N, T], got shape {tuple(terms.shape)}")
    B, N, T = terms.shape
    if head.dim() != 3 or head.shape[0] != B:
        raise InsideInputError(f"inside_lowrank: head must be [B={B}, NT, r], got shape {tuple(head.shape)}")
    NT, r = head.shape[1:]
    for name, factor in (("left", left), ("right", right)):
        if tuple(factor.shape) != (B, NT + T, r):
            raise InsideInputError(f"inside_lowrank: {name} must be [B, S = NT + T, r] = [{B}, {NT + T}, {r}] "
                                   f"(NT={NT} from head, T={T} from terms), got shape {tuple(factor.shape)}")
    if tuple(roots.shape) != (B, NT):
        raise InsideInputError(f"inside_lowrank: roots must be [B, NT] = [{B}, {NT}], got shape {tuple(roots.shape)}")
    if tuple(lengths.shape) != (B,) or lengths.is_floating_point():
        raise InsideInputError(f"inside_lowrank: lengths must be an integer tensor [B={B}], "
                               f"got {lengths.dtype} of shape {tuple(lengths.shape)}")
    if span_scores is not None and tuple(span_scores.shape) != (B, N + 1, N + 1):
        raise InsideInputError(f"inside_lowrank: span_scores must be [B, N + 1, N + 1] = [{B}, {N + 1}, {N + 1}], "
                               f"got shape {tuple(span_scores.shape)}")
    if B and (int(lengths.min()) < 1 or int(lengths.max()) > N):
        bad = int(((lengths < 1) | (lengths > N)).nonzero()[0, 0])
        raise InsideInputError(f"inside_lowrank: lengths[{bad}] = {int(lengths[bad])} is outside 1..{N} (N from terms)")
    return B, N, NT, T, r


def inside_lowrank(
    terms: torch.Tensor,
    roots: torch.Tensor,
    head: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """Log partition ``[B]`` of each sentence; see :func:`induce.kernels.inside_lowrank`."""
    _, _, NT, _, _ = check_inputs(terms, roots, head, left, right, lengths, span_scores)
    terms, roots, head, left, right = map(_at_least_fp32, (terms, roots, head, left, right))
    if span_scores is not None:
        span_scores = span_scores.to(terms.dtype)
    out = []
    for b, n in enumerate(lengths.tolist()):
        chart = {}  # (i, j) -> log inside scores: [T] preterminals for width 1, [NT] nonterminals above

        def span_score(i: int, j: int, b: int = b) -> torch.Tensor:
            return span_scores[b, i, j] if span_scores is not None else terms.new_zeros(())

        for i in range(n):
            chart[i, i + 1] = terms[b, i] + span_score(i, i + 1)
        for width in range(2, n + 1):
            for i in range(n - width + 1):
                j = i + width
                per_split = []
                for k in range(i + 1, j):
                    v = left[b, NT:] if k - i == 1 else left[b, :NT]  # [symbols, r]
                    w = right[b, NT:] if j - k == 1 else right[b, :NT]
                    left_rank = torch.logsumexp(chart[i, k][:, None] + v, dim=0)  # [r]
                    right_rank = torch.logsumexp(chart[k, j][:, None] + w, dim=0)
                    per_split.append(left_rank + right_rank)
                rank = torch.logsumexp(torch.stack(per_split), dim=0)  # [r]
                chart[i, j] = torch.logsumexp(head[b] + rank[None, :], dim=1) + span_score(i, j)  # [NT]
        if n < 2:  # the root rewrites to a nonterminal, which must branch: no derivation of one word
            out.append(terms.new_tensor(float("-inf")))
            continue
        out.append(torch.logsumexp(roots[b] + chart[0, n], dim=0))
    return torch.stack(out) if out else terms.new_zeros((0,))

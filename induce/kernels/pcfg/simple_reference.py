"""Reference tier of :func:`induce.kernels.inside_simple`: the simple PCFG's inside algorithm, span by span.

The grammar (Liu, Yang, Kim & Tu 2023, "Simple Hardware-Efficient PCFGs with Independent Left and Right
Productions"; their released ``parser/pcfgs/simple_pcfg.py``) has ``NT`` nonterminals, ``T`` preterminals
and ``S = NT + T`` symbols, nonterminals first. A binary rule chooses its two children independently::

    p(A -> B C) = p_L(B | A) p_R(C | A)        (A < NT; B, C < S)

given in log space: ``left[b, B, A] = log p_L(B | A)``, ``right[b, C, A] = log p_R(C | A)`` (``[B, S, NT]``,
children first, as the released model's ``left`` / ``right`` are laid out and normalised: over the
children). As in the other neural PCFGs, a span of one word holds a preterminal and a longer span a
nonterminal, so a child of width 1 reads rows ``NT:`` and a wider child rows ``:NT``. ``roots [B, NT]``
is ``log p(S -> A)``, ``terms [B, N, T]`` is ``log p(word_i | preterminal)``.

Because the children are independent, the inside score of ``A`` over the span ``(i, j)`` factors over
each split ``k``::

    beta[i, j, A] = logsumexp_k (l[i, k, A] + r[k, j, A]) + span_scores[i, j]
    l[i, k, A]    = logsumexp_B (beta[i, k, B] + left[B, A])      (r likewise with right)

and the max-product (Viterbi) score is the same with ``max`` for every ``logsumexp``: a best child on
each side does not depend on the other side's choice. (TN-PCFG's low-rank grammar is this form with a
rank between the parent and its children; the simple PCFG is its rank-``NT`` case with the identity as
``head``.)

This tier follows the definition literally, in log space, one sentence, one span and one split at a time.
Slow and obviously correct; the faster tiers are checked against it and it against the dense rule tensor
and brute-force enumeration (tests). The max mode's gradient goes to the argmax, as ``torch.max``'s does.
"""
from __future__ import annotations

from typing import Optional

import torch

from induce.kernels.pcfg.dense_reference import InsideInputError

#: Public functions here that are not kernel ops: the input check the other tiers run too.
TIER_HELPERS = ("check_inputs",)


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


def check_inputs(terms: torch.Tensor, roots: torch.Tensor, left: torch.Tensor, right: torch.Tensor,
                 lengths: torch.Tensor, span_scores: Optional[torch.Tensor], semiring: str) -> tuple:
    """``(B, N, NT, T)`` after checking the shapes; raises :class:`InsideInputError` naming the argument."""
    if semiring not in ("sum", "max"):
        raise InsideInputError(f"inside_simple: semiring must be 'sum' or 'max', got {semiring!r}")
    if terms.dim() != 3:
        raise InsideInputError(f"inside_simple: terms must be [B, N, T], got shape {tuple(terms.shape)}")
    B, N, T = terms.shape
    if roots.dim() != 2 or roots.shape[0] != B:
        raise InsideInputError(f"inside_simple: roots must be [B={B}, NT], got shape {tuple(roots.shape)}")
    NT = roots.shape[1]
    for name, factor in (("left", left), ("right", right)):
        if tuple(factor.shape) != (B, NT + T, NT):
            raise InsideInputError(f"inside_simple: {name} must be [B, S = NT + T, NT] = [{B}, {NT + T}, {NT}] "
                                   f"(NT={NT} from roots, T={T} from terms), got shape {tuple(factor.shape)}")
    if tuple(lengths.shape) != (B,) or lengths.is_floating_point():
        raise InsideInputError(f"inside_simple: lengths must be an integer tensor [B={B}], "
                               f"got {lengths.dtype} of shape {tuple(lengths.shape)}")
    if span_scores is not None and tuple(span_scores.shape) != (B, N + 1, N + 1):
        raise InsideInputError(f"inside_simple: span_scores must be [B, N + 1, N + 1] = [{B}, {N + 1}, {N + 1}], "
                               f"got shape {tuple(span_scores.shape)}")
    if B and (int(lengths.min()) < 1 or int(lengths.max()) > N):
        bad = int(((lengths < 1) | (lengths > N)).nonzero()[0, 0])
        raise InsideInputError(f"inside_simple: lengths[{bad}] = {int(lengths[bad])} is outside 1..{N} (N from terms)")
    return B, N, NT, T


def inside_simple(
    terms: torch.Tensor,
    roots: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
) -> torch.Tensor:
    """Log partition (or best derivation's log score) ``[B]``; see :func:`induce.kernels.inside_simple`."""
    _, _, NT, _ = check_inputs(terms, roots, left, right, lengths, span_scores, semiring)
    terms, roots, left, right = map(_at_least_fp32, (terms, roots, left, right))
    if span_scores is not None:
        span_scores = span_scores.to(terms.dtype)

    def reduce(x: torch.Tensor, dim: int) -> torch.Tensor:
        return torch.logsumexp(x, dim=dim) if semiring == "sum" else x.max(dim=dim).values

    out = []
    for b, n in enumerate(lengths.tolist()):
        chart = {}  # (i, j) -> log inside scores: [T] preterminals for width 1, [NT] nonterminals above

        def span_score(i: int, j: int, b: int = b) -> torch.Tensor:
            return span_scores[b, i, j] if span_scores is not None else terms.new_zeros(())

        def child(i: int, j: int, factor: torch.Tensor, b: int = b, chart: dict = chart) -> torch.Tensor:
            """``[NT]``: the span ``(i, j)`` as a child of each parent, through ``factor`` (left or right)."""
            rows = factor[b, NT:] if j - i == 1 else factor[b, :NT]  # [symbols, NT]
            return reduce(chart[i, j][:, None] + rows, 0)

        for i in range(n):
            chart[i, i + 1] = terms[b, i] + span_score(i, i + 1)
        for width in range(2, n + 1):
            for i in range(n - width + 1):
                j = i + width
                splits = [child(i, k, left) + child(k, j, right) for k in range(i + 1, j)]
                chart[i, j] = reduce(torch.stack(splits), 0) + span_score(i, j)
        if n < 2:  # the root rewrites to a nonterminal, which must branch: no derivation of one word
            out.append(terms.new_tensor(float("-inf")))
            continue
        out.append(reduce(roots[b] + chart[0, n], 0))
    return torch.stack(out) if out else terms.new_zeros((0,))

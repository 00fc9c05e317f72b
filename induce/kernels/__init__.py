"""Kernels shared by the models: cumax, the ON-LSTM cell step, PRPN stick-breaking gates,
linear-recurrence scans, PaLM span attention, the dense-PCFG inside algorithm, TN-PCFG's low-rank one and
the simple PCFG's, each in three tiers (``reference``, ``torch``, ``triton``).

This module is the public API: one function per op, which states the op's conventions, picks a tier
(:func:`induce.kernels._dispatch.kernel`) and calls it. The tiers live by op: the recurrent models' ops in
:mod:`induce.kernels.recurrent`, the PCFGs' inside algorithms in :mod:`induce.kernels.pcfg`, a module per
tier each (:data:`induce.kernels._dispatch.TIER_MODULES`).

Every function takes ``backend: str = "auto"``; see :mod:`induce.kernels._dispatch` for how
``"auto"`` is resolved and :func:`set_backend` / :func:`get_backend` / :func:`use_backend` for the
process-wide switch behind the CLI's ``--kernels``. Asking for ``"triton"`` where it cannot run
raises :class:`KernelBackendError` (an :class:`induce.errors.InduceError`).

**Spans of the inside ops** (:func:`inside`, :func:`inside_lowrank`, :func:`inside_simple`, :func:`span_marginals`,
:func:`viterbi`) follow :mod:`induce.trees`: fenceposts, ``(i, j)`` is the words
``i .. j-1``, ``0 <= i < j <= length``, and a tensor over the spans of sentences padded to ``N`` words is
``[B, N + 1, N + 1]`` with ``[b, i, j]`` the span ``(i, j)`` of sentence ``b``. Every span takes part,
the one-word spans and the whole sentence included (their marginals are 1); entries with ``j <= i`` or
``j > length`` are ignored on input and 0 on output. :func:`viterbi` returns trees as
:data:`induce.trees.nodes.IndexTree`; :mod:`induce.trees.grammar_decoders` builds them from span tables
(MBR over the marginals, the Viterbi tree from its span indicator). (PaLM's span scores are indexed by
last word and length instead: :mod:`induce.trees.decoders` converts those.)
"""
from __future__ import annotations

from typing import List, Optional, Tuple, Union

import torch

from induce.trees.grammar_decoders import tree_of_spans
from induce.trees.nodes import IndexTree

from ._dispatch import (
    BACKENDS,
    KernelBackendError,
    get_backend,
    kernel,
    resolve,
    set_backend,
    triton_unavailable_reason,
    use_backend,
)
from .pcfg.dense_reference import InsideInputError
from .pcfg.marginals import score_and_span_gradient, span_marginals

#: Public functions built on other kernel ops (no tier of their own): the Viterbi tree is the gradient of
#: :func:`inside`'s max-product score with respect to its span scores.
COMPOSITE_OPS = ("viterbi",)

__all__ = [
    "BACKENDS",
    "KernelBackendError",
    "cumax",
    "get_backend",
    "inside",
    "inside_lowrank",
    "inside_simple",
    "linear_scan",
    "onlstm_cell",
    "resolve",
    "set_backend",
    "span_attention",
    "span_marginals",
    "span_representations",
    "stick_breaking_gates",
    "triton_unavailable_reason",
    "use_backend",
    "viterbi",
]


def cumax(x: torch.Tensor, dim: int = -1, reverse: bool = False, backend: str = "auto") -> torch.Tensor:
    """Cumulative softmax (ON-LSTM): ``out_j = sum_{i <= j} softmax(x)_i`` along ``dim``.

    ``reverse=True`` sums from the end: ``out_j = sum_{i >= j} softmax(x)_i``. The ON-LSTM master
    input gate ``1 - cumax(x)`` is the *exclusive* reverse sum ``sum_{i > j}`` (its last entry is 0,
    the quirk noted by Stratos), so models should keep writing ``1 - cumax(x)`` for it.
    Any shape; the output has the shape and dtype of ``x``.
    """
    return kernel("cumax", backend, x)(x, dim=dim, reverse=reverse)


def onlstm_cell(
    gates: torch.Tensor, c: torch.Tensor, n_chunks: int, backend: str = "auto"
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One ON-LSTM cell step from the gate pre-activations (Shen et al. 2019; Stratos' note, sec. 2).

    ``gates [B, 2p + 4H]`` is ``W x_t + U h_{t-1} + b`` laid out as ``[master forget logits (p) |
    master input logits (p) | f | i | o (H each) | cell (H)]``, ``c [B, H]`` the previous cell
    state, ``p = n_chunks`` chunks of ``C = H / p`` units. With ``cf = cumax(v1)``, ``ci = 1 -
    cumax(v2)`` (``[B, p]``, stretched over each chunk's ``C`` units) and ``w = cf * ci``::

        c_t = (sigmoid(f) w + cf - w) * c + (sigmoid(i) w + ci - w) * tanh(cell)
        h_t = sigmoid(o) * tanh(c_t)

    Returns ``(h [B, H], c_t [B, H], cf [B, p])`` in ``c``'s dtype (``cf`` gives the syntactic
    distances). The torch tier is the eager twin (the step as separate PyTorch ops); the Triton tier
    does the step, both cumax included, in one kernel per row and the backward in one more.
    """
    return kernel("onlstm_cell", backend, gates, c)(gates, c, n_chunks)


def stick_breaking_gates(
    d: torch.Tensor,
    window: int,
    tau: float = 20.0,
    d_next: Optional[torch.Tensor] = None,
    backend: str = "auto",
) -> torch.Tensor:
    """PRPN memory gates from syntactic distances (Stratos' note, Eq. 6). ``d: [B, T] -> [B, T, window]``.

    Index convention (0-based positions; ``d[:, j]`` is the distance between tokens ``j-1`` and ``j``):
    at position ``t`` the memory holds the states of the ``window`` previous positions, and

        ``g[b, t, w]`` gates the memory slot holding position ``i = t - window + w``
        (``w = window - 1`` is position ``t - 1``), and equals
        ``prod_{j=i+1..t} alpha_j``,  ``alpha_j = (hardtanh((q_t - d_j) * tau + 1) + 1) / 2``,

    with query ``q_t = d_t`` (``d_next=None``) or ``q_t = d_next[:, t]`` (``d_next`` holds the
    separately predicted ``\\hat d_{t+1}`` at index ``t``). This is Stratos' ``g_{i+1}^t =
    prod_{j=i+1..t} alpha_j^t``: his gate index ``i`` gates the state of position ``i - 1`` (the one
    left of the boundary ``d_i``), as in PRPN's code, where slot ``k`` (``h_{t-1-k}``) gets
    ``cumprod_k alpha_{t-k}``. So ``g[:, t, -1] = alpha_t``: exactly 1 when ``q_t = d_t``, and
    ``\\hat alpha_t^{t+1}`` for ``d_next``, whose slots are Stratos' ``\\hat g_i^{t+1}``,
    ``i = t-window+1..t``, shifted by one likewise. The state ``h_t`` itself is not a slot.

    Slots before the sequence start (``i < 0``, including Stratos' initial state ``h_0``) get
    exactly 0 (Stratos sets ``d_i = inf`` there). Products are cumulative products over the
    reversed window: exact zeros (saturated hardtanh) stay exact and gradients stay finite.
    """
    return kernel("stick_breaking_gates", backend, d, d_next)(d, window, tau=tau, d_next=d_next)


def linear_scan(
    log_f: torch.Tensor,
    u: torch.Tensor,
    c0: Optional[torch.Tensor] = None,
    reverse: bool = False,
    backend: str = "auto",
) -> torch.Tensor:
    """First-order linear recurrence ``c_t = f_t * c_{t-1} + u_t`` over ``[B, T, D]``.

    Forget gates come in log space, ``log_f <= 0`` (``f = exp(log_f)``; ``-inf`` means ``f = 0``).
    ``reverse=True`` runs right to left: ``c_t = f_t * c_{t+1} + u_t``. ``c0: [B, D]`` is the state
    before the first step (``c_{-1}``, or ``c_T`` when reversed), zero by default. Returns ``c
    [B, T, D]``. Computed as a parallel scan over ``(f, u)`` pairs, never through ``exp(-cumsum)``,
    so long sequences neither overflow nor lose precision; the backward pass is the reverse scan.
    """
    return kernel("linear_scan", backend, log_f, u, c0)(log_f, u, c0=c0, reverse=reverse)


def span_representations(
    c: torch.Tensor, log_f: torch.Tensor, max_len: int, reverse: bool = False, backend: str = "auto"
) -> torch.Tensor:
    """PaLM Alg. 1 / Eq. 2 for a rational RNN: all spans of length ``<= max_len`` ending at each position.

    ``c, log_f: [B, T, D]``, ``c`` from :func:`linear_scan` over the same ``log_f``. Returns
    ``out [B, T, m, D]`` where ``out[:, t, k]`` represents the span ``[t-k, t]`` (``k = 0..m-1``):

    * forward (``reverse=False``): ``c_t - c_{t-k-1} * prod_{j=t-k..t} f_j`` (``c_{-1} = 0``),
      i.e. the forward RNN run over the span alone;
    * backward (``reverse=True``, ``c`` from the right-to-left scan): the mirror formula
      ``c_{t-k} - c_{t+1} * prod_{j=t-k..t} f_j`` (``c_T = 0``), the backward RNN run over the span alone.

    Entries with ``t - k < 0`` are 0. The products are summed in log space over the window only.

    **Future information (backward direction).** ``c_{t-k}`` and ``c_{t+1}`` of a right-to-left
    scan both contain the tokens after ``t``; their contributions cancel exactly in real arithmetic
    and up to float rounding here: a change of the tokens after ``t`` moves ``out[:, t]`` by about
    ``eps * |c_{t+1}|`` (``eps`` = 6e-8 in fp32; for PaLM's ``u = (1 - f) tanh(.)`` we have
    ``|c| <= 1``), and autograd likewise sends gradients to the future tokens that cancel only up to
    rounding. We keep the formula (it is the paper's Alg. 1 and needs only ``c``, in O(1) work per
    span); the test suite bounds the leak. The exact alternative, a window recurrence over ``k``
    from ``u``, needs ``u`` itself and is not part of this API.
    """
    return kernel("span_representations", backend, c, log_f)(c, log_f, max_len, reverse=reverse)


def span_attention(
    query: torch.Tensor,
    c_fwd: torch.Tensor,
    logf_fwd: torch.Tensor,
    c_bwd: torch.Tensor,
    logf_bwd: torch.Tensor,
    w_span: Optional[torch.Tensor],
    v: Optional[torch.Tensor],
    max_len: int,
    fixed_scores: Optional[torch.Tensor] = None,
    backend: str = "auto",
) -> Tuple[torch.Tensor, torch.Tensor]:
    """PaLM span attention (Eq. 3) over the spans ``[t-k, t]``, ``k = 0..m-1``, ending at each ``t``.

    ``query [B, T, A]`` (``W_h h_{t+1} + b``, computed by the model), ``c_fwd, logf_fwd`` from the
    left-to-right scan and ``c_bwd, logf_bwd`` from the right-to-left scan (``[B, T, D]``),
    ``w_span [2D, A]``, ``v [A]``. With ``g = [fwd; bwd]`` the span representation ``[2D]``
    (:func:`span_representations`), the score is ``s[b, t, k] = v . tanh(query[b, t] + g @ w_span)``,
    the weights a softmax over the spans with ``t - k >= 0`` and the context ``sum_k w_k g_k``.
    ``fixed_scores [m]`` replaces the MLP scores (PaLM-RB); ``w_span`` and ``v`` may then be None.

    Returns ``(context [B, T, 2D], scores [B, T, m])``; scores of spans starting before the
    sequence are ``-inf``. The triton tier never stores the ``[B, T, m, 2D]`` span tensor.
    """
    impl = kernel("span_attention", backend, query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, fixed_scores)
    return impl(query, c_fwd, logf_fwd, c_bwd, logf_bwd, w_span, v, max_len, fixed_scores=fixed_scores)


def inside_lowrank(
    terms: torch.Tensor,
    roots: torch.Tensor,
    head: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    backend: str = "auto",
) -> torch.Tensor:
    """Log partition ``[B]`` of TN-PCFG's low-rank PCFG (Yang, Zhao & Tu 2021), never forming its rule tensor.

    ``terms [B, N, T]``: ``log p(word_i | preterminal)`` (positions past ``lengths`` are ignored);
    ``roots [B, NT]``: ``log p(S -> A)``; ``head [B, NT, r]``, ``left [B, S, r]``, ``right [B, S, r]``
    (``S = NT + T``, nonterminals first): the logs of the factors of the binary rules
    ``rules[a, b, c] = sum_r exp(head[a, r] + left[b, r] + right[c, r])``. TN-PCFG normalises
    ``head`` over ``r`` and ``left``, ``right`` over the symbols, which makes each ``rules[a]`` sum to 1;
    this op does not check it (it computes the partition of whatever weights it is given). Factors
    expanded over the batch (stride 0, one grammar for all sentences) are used once, not per sentence.
    ``lengths [B]``: integers in ``1 .. N``. A span of one word holds a preterminal, a longer span a
    nonterminal, so a one-word sentence has no binary derivation: it scores ``-inf``, with no gradient and
    marginals 0, as in :func:`inside` (Kim et al. and TN-PCFG skip such sentences in training).

    ``span_scores [B, N + 1, N + 1]`` (optional; spans as in the module docstring) adds
    ``span_scores[b, i, j]`` to every derivation with a constituent over the words ``i .. j-1``. Its
    gradient at zero is the span marginals (:func:`span_marginals`), as for :func:`inside`.

    Max-product (Viterbi) has no low-rank form: ``max_{b,c} sum_r U V W`` does not factor through
    the rank, so an exact Viterbi parse needs the ``[NT, S, S]`` rule tensor. Decode with MBR over
    the marginals instead (:func:`induce.trees.grammar_decoders.mbr_trees`), as TN-PCFG does.

    Tiers: ``reference``, ``torch`` (the rank-space pass with a hand-written outside pass; for float32 CPU
    tensors its split sums run as compiled loops, :func:`induce.kernels.pcfg.lowrank_torch.split_sums`),
    ``triton`` (its split sums fused).
    """
    impl = kernel("inside_lowrank", backend, terms, roots, head, left, right, span_scores)
    with _full_precision(terms):
        return impl(terms, roots, head, left, right, lengths, span_scores=span_scores)


def inside_simple(
    terms: torch.Tensor,
    roots: torch.Tensor,
    left: torch.Tensor,
    right: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
    backend: str = "auto",
) -> torch.Tensor:
    """Log partition ``[B]`` of a simple PCFG (Liu, Yang, Kim & Tu 2023), whose binary rules choose their two
    children independently: ``p(A -> B C) = p_L(B | A) p_R(C | A)``.

    ``terms [B, N, T]``: ``log p(word_i | preterminal)`` (positions past ``lengths`` are ignored);
    ``roots [B, NT]``: ``log p(S -> A)``; ``left [B, S, NT]``, ``right [B, S, NT]`` (``S = NT + T``, nonterminals
    first): ``left[b, B, A] = log p_L(B | A)``, ``right[b, C, A] = log p_R(C | A)``, children first as the
    authors' ``simple_pcfg.py`` takes them (normalised over the children there; this op does not check it and
    computes the partition of whatever weights it is given). Factors expanded over the batch (stride 0, one
    grammar for all sentences) are used once, not per sentence. ``lengths [B]``: integers in ``1 .. N``. A span
    of one word holds a preterminal, a longer span a nonterminal, so a one-word sentence has no binary
    derivation: it scores ``-inf``, with no gradient and marginals 0, as in :func:`inside`.

    ``span_scores [B, N + 1, N + 1]`` (optional; spans as in the module docstring) adds ``span_scores[b, i, j]``
    to every derivation with a constituent over the words ``i .. j-1``: its gradient at zero is the span
    marginals (:func:`span_marginals`), decoded by MBR (:func:`induce.trees.grammar_decoders.mbr_trees`).

    The inside score of a parent factors over each split into a left and a right child's share, so a sentence
    costs ``O(N^3 NT + N^2 NT^2)`` (one ``[spans, NT] @ [NT, 2 NT]`` product per width), where the dense rule
    tensor costs ``O(N^3 NT^3)``: thousands of nonterminals fit. ``semiring="sum"`` returns ``log Z``;
    ``"max"`` the best derivation's log score (max-product factors the same way, through max-plus products
    that no matrix unit does), whose gradient with respect to ``span_scores`` marks one best tree
    (:func:`induce.trees.grammar_decoders.tree_of_spans`). Computed in float32 or better; outputs take
    ``terms``' dtype.

    Tiers: ``reference`` (the definition, span by span), ``torch`` (TN-PCFG's rank-space pass with the parents
    as the rank, hand-written outside pass; :mod:`induce.kernels.pcfg.simple_torch`; for float32 CPU tensors its
    split sums run as compiled loops, :func:`induce.kernels.pcfg.lowrank_torch.split_sums`), ``triton`` (its
    split sums fused).
    """
    impl = kernel("inside_simple", backend, terms, roots, left, right, span_scores)
    with _full_precision(terms):
        return impl(terms, roots, left, right, lengths, span_scores=span_scores, semiring=semiring)


def inside(
    terms: torch.Tensor,
    rules: torch.Tensor,
    roots: torch.Tensor,
    lengths: torch.Tensor,
    span_scores: Optional[torch.Tensor] = None,
    semiring: str = "sum",
    chart: bool = False,
    backend: str = "auto",
) -> Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]]:
    """Inside algorithm of a dense PCFG in Chomsky normal form (N-PCFG, C-PCFG; Kim et al. 2019), log space.

    ``terms [B, T, P]``: log score of preterminal ``p`` emitting word ``t`` (padded sentences);
    ``rules [B, NT, S, S]``: log score of ``A -> L R`` with ``S = NT + P`` children, ``0..NT-1`` the
    nonterminals and ``NT..S-1`` the preterminals, as in Kim et al.'s ``PCFG.py``; ``roots [B, NT]``:
    log score of ``root -> A``; ``lengths [B]`` (int, ``1 <= length <= T``). A span of one word is
    covered by a preterminal only, a longer one by a nonterminal (no unary rules), so a child of one
    word comes from the preterminal columns of ``rules``, a longer child from the nonterminal ones.
    ``span_scores [B, T + 1, T + 1]`` (optional; spans as in the module docstring) adds
    ``span_scores[b, i, j]`` to every derivation with a constituent over the words ``i .. j-1`` (one-word
    spans: to each of the word's preterminals): its gradient is the span marginals (:func:`span_marginals`)
    or the Viterbi tree (:func:`viterbi`). The inputs need not be normalised.

    ``semiring="sum"`` returns ``log Z [B]`` (logsumexp over trees); ``"max"`` the best tree's score,
    whose gradient marks that tree (ties go to one). A sentence of one word has no binary tree: its
    score is ``-inf`` and it sends no gradient (Kim et al. skip such sentences). ``chart=True`` also
    returns the chart ``[B, T + 1, T + 1, NT]``: ``[b, i, j, A]`` the inside score of ``A`` over
    the words ``i .. j-1`` (``span_scores`` included), ``-inf`` where ``j - i < 2`` or ``j > length``
    (differentiable). Computed in float32 or better; outputs take ``terms``' dtype.

    Tiers: ``reference`` (Kim et al.'s loops, sentence by sentence), ``torch`` (one batched step
    per width, hand-written outside pass; :mod:`induce.kernels.pcfg.dense_torch`), ``triton``.
    """
    _check_inside(terms, rules, roots, lengths, span_scores, semiring)
    impl = kernel("inside", backend, terms, rules, roots, span_scores)
    with _full_precision(terms):
        return impl(terms, rules, roots, lengths, span_scores=span_scores, semiring=semiring, chart=chart)




def _full_precision(like: torch.Tensor):
    """Autocast switched off on ``like``'s device for the inside passes: their charts, split sums and normalisers
    run in float32 or better (the tiers cast lower-precision inputs up) whatever autocast the caller runs
    under (``train.amp``: bf16 products are for the networks that compute the rule scores, not the charts)."""
    return torch.autocast(like.device.type, enabled=False)


def _check_inside(terms, rules, roots, lengths, span_scores, semiring) -> None:
    if semiring not in ("sum", "max"):
        raise InsideInputError(f"inside: semiring must be 'sum' or 'max', got {semiring!r}")
    if terms.dim() != 3 or rules.dim() != 4 or roots.dim() != 2:
        raise InsideInputError(
            f"inside: expected terms [B, T, P], rules [B, NT, S, S], roots [B, NT]; got shapes "
            f"{tuple(terms.shape)}, {tuple(rules.shape)}, {tuple(roots.shape)}")
    B, T, P = terms.shape
    NT = rules.shape[1]
    if tuple(rules.shape) != (B, NT, NT + P, NT + P) or tuple(roots.shape) != (B, NT):
        raise InsideInputError(
            f"inside: rules must be [B, NT, NT + P, NT + P] = [{B}, {NT}, {NT + P}, {NT + P}] and roots "
            f"[{B}, {NT}] for terms {tuple(terms.shape)}; got {tuple(rules.shape)} and {tuple(roots.shape)}")
    if span_scores is not None and tuple(span_scores.shape) != (B, T + 1, T + 1):
        raise InsideInputError(
            f"inside: span_scores must be [B, T + 1, T + 1] = [{B}, {T + 1}, {T + 1}] (fenceposts), "
            f"got {tuple(span_scores.shape)}")
    if tuple(lengths.shape) != (B,) or lengths.is_floating_point():
        raise InsideInputError(
            f"inside: lengths must be an integer tensor [B] = [{B}], got {lengths.dtype} {tuple(lengths.shape)}")
    if B and (int(lengths.min()) < 1 or int(lengths.max()) > T):
        raise InsideInputError(f"inside: lengths must lie in 1..{T} (the padded length), got {lengths.tolist()}")


def viterbi(
    terms: torch.Tensor, rules: torch.Tensor, roots: torch.Tensor, lengths: torch.Tensor, backend: str = "auto"
) -> Tuple[torch.Tensor, List[IndexTree]]:
    """The best tree of each sentence under the dense PCFG of :func:`inside`: ``(score [B], trees)``.

    The max-product :func:`inside` and its gradient with respect to ``span_scores`` (the tiers'
    backward passes follow the argmax), the 0/1 indicator of the best tree's spans, read as an
    :data:`~induce.trees.nodes.IndexTree` per sentence (:func:`~induce.trees.grammar_decoders.tree_of_spans`).
    Of trees whose float32 scores tie, one, chosen span by span from the root down: in the torch tier (its
    compiled loops and its eager twin alike, which give the same scores bit for bit and so the same trees) the
    lowest root nonterminal, then at each span a word on the left over a word on the right over two longer
    children, the lowest child nonterminal, the shortest left child and the lowest child pair (every score 0:
    the right-branching tree). A one-word sentence has no binary derivation: it scores ``-inf`` and its tree is the
    word, ``0``. A longer sentence without a derivation (every tree scored ``-inf``) raises
    :class:`InsideInputError`.
    """
    def best(spans: torch.Tensor) -> torch.Tensor:
        return inside(terms.detach(), rules.detach(), roots.detach(), lengths, span_scores=spans, semiring="max",
                      backend=backend)

    score, indicator = score_and_span_gradient(best, terms)
    sizes = lengths.tolist()
    for b, n in enumerate(sizes):
        if n >= 2 and score[b].item() == float("-inf"):
            raise InsideInputError(f"viterbi: sentence {b} ({n} words) has no derivation under this grammar (every "
                                   "tree has a rule, root or word score of -inf), so it has no best tree")
    return score, [tree_of_spans(indicator[b], n) for b, n in enumerate(sizes)]

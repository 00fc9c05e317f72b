"""Tree decoders: from syntactic distances (ON-LSTM, PRPN) or span scores (PaLM) to binary trees.

Index conventions (0-based word positions of one sentence ``w_0 .. w_{n-1}``):

* **distances** ``d[t]`` is the distance the model computes when it reads ``w_t``: how strongly a
  constituent boundary falls *before* ``w_t`` (between ``w_{t-1}`` and ``w_t``). ``d[0]`` has no left
  neighbour inside the sentence.

  - ``decoder="peel"`` (Shen et al.'s ``build_tree``, used by the ON-LSTM and PRPN papers): for a
    span ``[i, j]`` take ``k = argmax_{i <= t <= j} d[t]`` (the first maximum on ties; ``d[i]``
    takes part) and return ``(tree[i, k-1], (w_k, tree[k+1, j]))``, dropping empty parts: the split
    word is peeled off as the left child of the right subtree, hence the right-branching bias.
  - ``decoder="unbiased"``: ``k = argmax_{i < t <= j} d[t]`` (``d[i]`` does not take part) and return
    ``(tree[i, k-1], tree[k, j])`` (the variant of Dyer et al., 2019). Every binary tree is
    reachable: give each internal node's split position a distance larger than all splits below it.

* **span scores** ``s[t, k]`` scores the span ``[t-k, t]`` (length ``k+1``, ending at ``w_t``).
  ``decoder="span"`` (PaLM, Peng et al. 2019, Eq. 4): a span ``[i, j]`` is split into
  ``[i, k-1]`` and ``[k, j]`` with ``k = argmax_{i < k <= j} s[j, j-k]`` (only the score of the right
  part counts; the first maximum in order of increasing ``k``, i.e. the longest right span, wins ties).
  Increasing scores ``s[t, k] = k + 1`` therefore give right-branching trees.

Trees are first built as nested tuples of word positions (``int`` leaves, ``(left, right)`` nodes)
by pure functions, then turned into :class:`nltk.Tree` over the words.
"""
from __future__ import annotations

from typing import Callable, Iterable, Optional, Sequence, Union

import nltk
import numpy as np
import torch

from induce.errors import InvalidValueError

#: A binary tree over word positions: a position, or a pair of subtrees.
IndexTree = Union[int, tuple]

DECODERS = ("peel", "unbiased", "span")
DISTANCE_DECODERS = ("peel", "unbiased")
#: Label of every internal node of a produced tree.
NODE_LABEL = "S"


def tree_from_split_points(i: int, j: int, split_of: Callable[[int, int], int]) -> IndexTree:
    """Top-down binary tree over positions ``i..j`` (inclusive).

    ``split_of(a, b)`` (called only for ``a < b``) returns ``k`` with ``a < k <= b``: the span ``[a, b]``
    becomes ``([a, k-1], [k, b])``.
    """
    if i == j:
        return i
    k = split_of(i, j)
    if not i < k <= j:
        raise ValueError(f"split point {k} outside ({i}, {j}]")
    return (tree_from_split_points(i, k - 1, split_of), tree_from_split_points(k, j, split_of))


def peel_tree(distances: Sequence[float]) -> IndexTree:
    """Greedy top-down "peel" decoding of ``distances [n]`` (see the module docstring)."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("distances must be a non-empty 1-d sequence")

    def build(i: int, j: int) -> Optional[IndexTree]:
        if i > j:
            return None
        if i == j:
            return i
        k = i + int(np.argmax(d[i : j + 1]))
        right_rest = build(k + 1, j)
        right = k if right_rest is None else (k, right_rest)
        left = build(i, k - 1)
        return right if left is None else (left, right)

    return build(0, d.size - 1)


def unbiased_tree(distances: Sequence[float]) -> IndexTree:
    """Unbiased top-down decoding of ``distances [n]``: split ``[i, j]`` before ``argmax_{i<t<=j} d[t]``."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("distances must be a non-empty 1-d sequence")
    return tree_from_split_points(0, d.size - 1, lambda i, j: i + 1 + int(np.argmax(d[i + 1 : j + 1])))


def span_tree(scores, length: int) -> IndexTree:
    """PaLM greedy decoding of ``scores [>= length, >= length-1]`` (``scores[t, k]`` = span ``[t-k, t]``)."""
    s = np.asarray(scores, dtype=np.float64)
    if length < 1:
        raise ValueError("length must be positive")
    if s.ndim != 2 or s.shape[0] < length or (length > 1 and s.shape[1] < length - 1):
        raise ValueError(f"scores of shape {s.shape} do not cover a sentence of length {length}")

    def split_of(i: int, j: int) -> int:
        # candidate right spans [k, j] for k = i+1 .. j have lengths j-k+1 = j-i .. 1, i.e. index j-k.
        right_scores = s[j, j - np.arange(i + 1, j + 1)]
        return i + 1 + int(np.argmax(right_scores))

    return tree_from_split_points(0, length - 1, split_of)


def decode(structure_row, length: int, decoder: str) -> IndexTree:
    """Decode one sentence: ``structure_row`` is ``distances [>= length]`` or ``span scores [T, m]``."""
    if decoder == "peel":
        return peel_tree(np.asarray(structure_row)[:length])
    if decoder == "unbiased":
        return unbiased_tree(np.asarray(structure_row)[:length])
    if decoder == "span":
        return span_tree(structure_row, length)
    raise InvalidValueError(f"unknown decoder {decoder!r}; choose one of {', '.join(DECODERS)}")


def to_nltk(tree: IndexTree, words: Sequence[str], label: str = NODE_LABEL) -> nltk.Tree:
    """Nested-tuple tree over positions -> :class:`nltk.Tree` with ``words`` as leaves.

    A one-word sentence becomes ``(S word)``; otherwise every internal node is binary.
    """
    if isinstance(tree, int):
        return nltk.Tree(label, [words[tree]])

    def rec(node):
        if isinstance(node, int):
            return words[node]
        return nltk.Tree(label, [rec(node[0]), rec(node[1])])

    return rec(tree)


def index_tree_spans(tree: IndexTree) -> set[tuple[int, int]]:
    """All spans ``(i, j)`` (inclusive) of internal nodes and leaves of a nested-tuple tree."""
    spans: set[tuple[int, int]] = set()

    def rec(node) -> tuple[int, int]:
        if isinstance(node, int):
            spans.add((node, node))
            return node, node
        left, right = rec(node[0]), rec(node[1])
        spans.add((left[0], right[1]))
        return left[0], right[1]

    rec(tree)
    return spans


def nltk_tree_spans(tree: nltk.Tree) -> tuple[int, set[tuple[int, int]]]:
    """``(number of leaves, {(i, j)})``: inclusive word spans of every constituent of ``tree``.

    Pre-terminals (a label over one word) count as single-word spans; unary chains collapse.
    """
    spans: set[tuple[int, int]] = set()

    def rec(node, start: int) -> int:
        if not isinstance(node, nltk.Tree):
            return start + 1
        end = start
        for child in node:
            end = rec(child, end)
        if end > start:
            spans.add((start, end - 1))
        return end

    n = rec(tree, 0)
    return n, spans


def index_tree_from_nltk(tree: nltk.Tree) -> IndexTree:
    """Inverse of :func:`to_nltk` for binary trees (leaves numbered left to right)."""
    counter = iter(range(len(tree.leaves())))

    def rec(node):
        if not isinstance(node, nltk.Tree):
            return next(counter)
        if len(node) == 1:
            return rec(node[0])
        if len(node) != 2:
            raise ValueError("tree is not binary")
        return (rec(node[0]), rec(node[1]))

    return rec(tree)


def gold_span_targets(sentences: Iterable, m: int) -> torch.Tensor:
    """PaLM-S attention targets aligned with the LM token stream ``w_0 .. w_{n-1} <eos>`` per sentence.

    ``sentences``: per sentence either an :class:`nltk.Tree` whose leaves are the LM words
    (punctuation already removed) or a pair ``(n_words, spans)`` with inclusive ``(i, j)`` word spans.
    Returns ``[N, m]`` float rows, ``N = sum(n + 1)``: row of ``w_t`` puts mass on ``k`` when
    ``[t-k, t]`` is a gold constituent (same convention as ``span_scores``); trivial spans (single
    words, the whole sentence) are ignored; rows are normalised to sum to 1, or are all zero (no
    target: those tokens add no loss). The ``<eos>`` row is zero.
    """
    rows = []
    for sentence in sentences:
        n, spans = nltk_tree_spans(sentence) if isinstance(sentence, nltk.Tree) else sentence
        target = torch.zeros(n + 1, m)
        for i, j in spans:
            length = j - i + 1
            if length <= 1 or length >= n or length > m or i < 0 or j >= n:
                continue
            target[j, length - 1] = 1.0
        totals = target.sum(-1, keepdim=True)
        rows.append(torch.where(totals > 0, target / totals.clamp_min(1.0e-12), target))
    if not rows:
        return torch.zeros(0, m)
    return torch.cat(rows, 0)


def _pad(sentences: Sequence[Sequence[int]], eos_id: Optional[int]) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Right-pad token id lists into ``[B, T]``; with ``eos_id``, each becomes ``<eos> words <eos>``."""
    offset = 0 if eos_id is None else 1
    lengths = [len(s) + 2 * offset for s in sentences]
    tokens = torch.zeros(len(sentences), max(lengths), dtype=torch.long)
    for b, sentence in enumerate(sentences):
        ids = list(sentence) if eos_id is None else [eos_id, *sentence, eos_id]
        tokens[b, : len(ids)] = torch.as_tensor(ids, dtype=torch.long)
    return tokens, torch.as_tensor(lengths), offset


@torch.no_grad()
def parse_batch(
    model,
    sentences: Sequence[Sequence[int]],
    words: Optional[Sequence[Sequence[str]]] = None,
    decoder: Optional[str] = None,
    eos_id: Optional[int] = None,
    batch_size: int = 64,
) -> list[nltk.Tree]:
    """Parse many sentences with ``model`` (eval mode, each sentence from a fresh state; a model with
    ``parse_state_carry`` true reads them as one stream in the given order instead).

    sentences: token ids per sentence (no ``<eos>``). words: the original words to put at the leaves
    (default: the ids as strings). decoder: ``"peel"`` (default for distance models), ``"unbiased"``,
    or ``"span"`` (the only one for PaLM). eos_id: when given, each sentence is read as
    ``<eos> words <eos>`` — the context it has in the LM stream (the previous sentence's end mark
    before it, its own after it); PaLM needs the final mark, since the scores of the spans ending at
    the last word are computed when the model reads the next token. Sentences are sorted by length
    and run ``batch_size`` at a time; the trees come back in input order.
    """
    kind = model.parser_kind
    if kind not in ("distance", "span"):
        # e.g. RelLSTM: parse_structure raises the clear "cannot parse" error (no decoder applies)
        model.parse_structure(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long))
    decoder = decoder or ("peel" if kind == "distance" else "span")
    allowed = DISTANCE_DECODERS if kind == "distance" else ("span",)
    if decoder not in allowed:
        raise InvalidValueError(f"decoder {decoder!r} does not apply to model {model.name!r}; use one of {allowed}")
    if kind == "span" and eos_id is None:
        raise ValueError("PaLM parsing needs eos_id: spans ending at the last word are scored at the end mark")
    if words is None:
        words = [[str(i) for i in s] for s in sentences]
    if any(len(s) == 0 for s in sentences):
        raise ValueError("cannot parse an empty sentence")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    trees: list[Optional[nltk.Tree]] = [None] * len(sentences)
    order = sorted(range(len(sentences)), key=lambda b: len(sentences[b]))
    try:
        if kind == "span" and getattr(model, "parse_state_carry", False):
            # PaLM variant=released: one stream in input order, LSTM state carried (PaLMBase.parse_stream).
            for b, table in enumerate(model.parse_stream(sentences, eos_id)):
                trees[b] = to_nltk(decode(table.float().cpu().numpy(), len(sentences[b]), decoder), words[b])
            return trees  # type: ignore[return-value]
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            tokens, lengths, offset = _pad([sentences[b] for b in chunk], eos_id)
            structure = model.parse_structure(tokens.to(device), lengths.to(device))
            key = "distances" if kind == "distance" else "span_scores"
            values = structure[key].float().cpu().numpy()
            for row, b in enumerate(chunk):
                n = len(sentences[b])
                # word w_i sits at input position i + offset. Distances: row i + offset. Span scores:
                # the span of words [i, j] is scored at [j + offset, j - i], so dropping the first
                # offset rows (and keeping the columns) gives the word-level table.
                index_tree = decode(values[row, offset : offset + n], n, decoder)
                trees[b] = to_nltk(index_tree, words[b])
    finally:
        model.train(was_training)
    return trees  # type: ignore[return-value]

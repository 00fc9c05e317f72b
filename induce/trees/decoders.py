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

* **span scores** ``s[t, k]`` scores the words ``w_{t-k} .. w_t`` (length ``k+1``, ending at ``w_t``):
  the models' indexing (by last word and length), which only this module reads.
  ``decoder="span"`` (PaLM, Peng et al. 2019, Eq. 4): a span ``[i, j)`` is split into
  ``[i, k)`` and ``[k, j)`` with ``k = argmax_{i < k < j} s[j-1, j-1-k]`` (only the score of the right
  part counts; the first maximum in order of increasing ``k``, i.e. the longest right span, wins ties).
  Increasing scores ``s[t, k] = k + 1`` therefore give right-branching trees.

(In this docstring ``[i, j]`` is inclusive and ``[i, j)`` exclusive; every function takes and returns
spans as ``(start, end)`` with ``end`` exclusive, the convention of :mod:`induce.trees`.)

The decoders are registered by parser kind in :mod:`induce.trees.kinds` (``peel`` and ``unbiased`` for
:data:`~induce.trees.kinds.DISTANCE`, ``span`` for :data:`~induce.trees.kinds.SPAN`): :func:`parse_batch` asks
the model's kind which one applies, what to read from ``parse_structure`` and whether sentences need
their ``<eos>`` marks.

Trees are built as :data:`~induce.trees.nodes.IndexTree` (nested tuples of word positions) by pure
functions with :func:`~induce.trees.nodes.build_binary`, then turned into :class:`nltk.Tree` over the
words by :func:`~induce.trees.nodes.to_nltk`.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable, Optional, Sequence

import nltk
import numpy as np
import torch

from induce.errors import InvalidValueError
from induce.trees.kinds import decoder_names, kinds
from induce.trees.nodes import IndexTree, build_binary, to_nltk, tree_spans


def peel_tree(distances: Sequence[float]) -> IndexTree:
    """Greedy top-down "peel" decoding of ``distances [n]`` (see the module docstring)."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("distances must be a non-empty 1-d sequence")

    def build(start: int, end: int) -> Optional[IndexTree]:
        if end - start < 1:
            return None
        if end - start == 1:
            return start
        k = start + int(np.argmax(d[start:end]))
        right_rest = build(k + 1, end)
        right = k if right_rest is None else (k, right_rest)
        left = build(start, k)
        return right if left is None else (left, right)

    return build(0, d.size)


def unbiased_tree(distances: Sequence[float]) -> IndexTree:
    """Unbiased top-down decoding of ``distances [n]``: split ``[i, j)`` before ``argmax_{i<t<j} d[t]``."""
    d = np.asarray(distances, dtype=np.float64)
    if d.ndim != 1 or d.size == 0:
        raise ValueError("distances must be a non-empty 1-d sequence")
    return build_binary(0, d.size, lambda start, end: start + 1 + int(np.argmax(d[start + 1 : end])))


def span_tree(scores, length: int) -> IndexTree:
    """PaLM greedy decoding of ``scores [>= length, >= length-1]`` (``scores[t, k]`` = span ``[t-k, t]``)."""
    s = np.asarray(scores, dtype=np.float64)
    if length < 1:
        raise ValueError("length must be positive")
    if s.ndim != 2 or s.shape[0] < length or (length > 1 and s.shape[1] < length - 1):
        raise ValueError(f"scores of shape {s.shape} do not cover a sentence of length {length}")

    def split_of(start: int, end: int) -> int:
        # candidate right spans [k, end) for k = start+1 .. end-1 end at word end-1 and have lengths
        # end-k = end-start-1 .. 1, i.e. the score index end-1-k.
        last = end - 1
        right_scores = s[last, last - np.arange(start + 1, end)]
        return start + 1 + int(np.argmax(right_scores))

    return build_binary(0, length, split_of)


def peel_decoder(distances, length: int) -> IndexTree:
    """The ``peel`` decoder of the registry: :func:`peel_tree` of the first ``length`` distances."""
    return peel_tree(np.asarray(distances)[:length])


def unbiased_decoder(distances, length: int) -> IndexTree:
    """The ``unbiased`` decoder of the registry: :func:`unbiased_tree` of the first ``length`` distances."""
    return unbiased_tree(np.asarray(distances)[:length])


def decode(structure_row, length: int, decoder: str) -> IndexTree:
    """Decode one sentence with the registered decoder named ``decoder`` (of whichever kind registers it):
    ``structure_row`` is ``distances [>= length]`` or ``span scores [T, m]``."""
    for kind in kinds():
        if decoder in kind.decoders:
            return kind.decoders[decoder](structure_row, length)
    raise InvalidValueError(f"unknown decoder {decoder!r}; choose one of {', '.join(decoder_names())}")


def gold_span_targets(sentences: Iterable, m: int) -> torch.Tensor:
    """PaLM-S attention targets aligned with the LM token stream ``w_0 .. w_{n-1} <eos>`` per sentence.

    ``sentences``: per sentence either an :class:`nltk.Tree` whose leaves are the LM words
    (punctuation already removed) or a pair ``(n_words, spans)`` of ``(start, end)`` word spans (end exclusive).
    Returns ``[N, m]`` float rows, ``N = sum(n + 1)``: row of ``w_t`` puts mass on ``k`` when
    ``[t-k, t]`` is a gold constituent (same convention as ``span_scores``); trivial spans (single
    words, the whole sentence) are ignored; rows are normalised to sum to 1, or are all zero (no
    target: those tokens add no loss). The ``<eos>`` row is zero.
    """
    rows = []
    for sentence in sentences:
        n, spans = (len(sentence.leaves()), tree_spans(sentence)) if isinstance(sentence, nltk.Tree) else sentence
        target = torch.zeros(n + 1, m)
        for start, end in spans:
            length = end - start
            if length <= 1 or length >= n or length > m or start < 0 or end > n:
                continue
            target[end - 1, length - 1] = 1.0
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


def length_batches(lengths: Sequence[int], batch_size: int, carry: bool = False,
                   cost: Optional[Callable[[int, int], float]] = None, budget: float = math.inf) -> list[list[int]]:
    """Groups of sentence indices to parse together: sorted by length (ties in input order), each grown while it
    holds fewer than ``batch_size`` sentences and ``cost(count, longest length)`` of the grown group stays within
    ``budget`` (a group holds one sentence at least). ``carry``: one group of every sentence in input order (a
    model that carries its state from one sentence to the next reads them as one stream)."""
    if carry:
        return [list(range(len(lengths)))] if len(lengths) else []
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    groups, start = [], 0
    while start < len(order):
        end = start + 1  # grow the group while it fits (lengths only increase along `order`)
        while end < len(order) and end - start < batch_size:
            if cost is not None and cost(end + 1 - start, lengths[order[end]]) > budget:
                break
            end += 1
        groups.append(order[start:end])
        start = end
    return groups


@torch.no_grad()
def parse_batch(
    model,
    sentences: Sequence[Sequence[int]],
    words: Optional[Sequence[Sequence[str]]] = None,
    decoder: Optional[str] = None,
    eos_id: Optional[int] = None,
    batch_size: int = 64,
    cost: Optional[Callable[[int, int], float]] = None,
    budget: float = math.inf,
    progress: Optional[Callable[[int, int], None]] = None,
) -> list[nltk.Tree]:
    """Parse many sentences with ``model`` (eval mode, each sentence from a fresh state; a model with
    ``parse_state_carry`` true reads them as one stream in the given order instead).

    sentences: token ids per sentence (no ``<eos>``). words: the original words to put at the leaves
    (default: the ids as strings). decoder: one registered for the model's parser kind
    (:mod:`induce.trees.kinds`; None: the kind's default). eos_id: when given, each sentence is read as
    ``<eos> words <eos>`` — the context it has in the LM stream (the previous sentence's end mark
    before it, its own after it); a kind that ``needs_eos`` (PaLM) must have it, since the scores of the
    spans ending at the last word are computed when the model reads the next token. Sentences are sorted by length
    and run in groups of :func:`length_batches` (``batch_size`` at most, within ``budget`` of ``cost(sentences,
    longest length)`` when given); the trees come back in input order. ``progress(done, total)`` after each group.
    """
    kind = model.parser_kind
    if not kind.parses:
        # e.g. RelLSTM: parse_structure raises the clear "cannot parse" error (no decoder applies)
        model.parse_structure(torch.zeros(1, 1, dtype=torch.long), torch.ones(1, dtype=torch.long))
    chosen = kind.choose_decoder(decoder, model.name)
    if kind.words_only:
        eos_id = None  # e.g. a grammar: it generates the words alone
    if kind.needs_eos and eos_id is None:
        raise ValueError(f"{model.name} parsing needs eos_id: the model scores a sentence's last spans at its "
                         "end mark")
    if words is None:
        words = [[str(i) for i in s] for s in sentences]
    if any(len(s) == 0 for s in sentences):
        raise ValueError("cannot parse an empty sentence")
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    trees: list[Optional[nltk.Tree]] = [None] * len(sentences)
    carry = model.parse_state_carry
    groups = length_batches([len(s) for s in sentences], batch_size, carry, cost, budget)
    done = 0
    try:
        for group in groups:
            if carry:
                # PaLM variant=released: one stream in input order, LSTM state carried (PaLMBase.parse_stream).
                rows = ((b, table.float().cpu().numpy()) for b, table in zip(group, model.parse_stream(
                    [sentences[b] for b in group], eos_id)))
                offset = None  # each table is the sentence's own
            else:
                tokens, lengths, offset = _pad([sentences[b] for b in group], eos_id)
                structure = model.parse_structure(tokens.to(device), lengths.to(device))
                values = structure[kind.structure_key].float().cpu().numpy()
                rows = ((b, values[row]) for row, b in enumerate(group))
            for b, row in rows:
                n = len(sentences[b])
                # word w_i sits at input position i + offset: dropping the first offset rows gives the
                # word-level rows (distances: the one before w_i; span scores: [j, k] = words [j-k, j]).
                trees[b] = to_nltk(chosen(row if offset is None else row[offset : offset + n], n), words[b])
            done += len(group)
            if progress is not None:
                progress(done, len(sentences))
    finally:
        model.train(was_training)
    return trees  # type: ignore[return-value]

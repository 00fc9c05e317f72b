"""What a trained model makes of one sentence: its tree, and the numbers the tree is decoded from.

* :func:`sentence_structure` — for a run (or a loaded model) and the tokens of one sentence: the
  induced tree over all tokens (as :func:`induce.inference.predict.predict_trees` gives it), and the
  syntactic distances (ON-LSTM, PRPN; ON-LSTM also per layer), PaLM's span scores or a grammar's span
  marginals (the neural PCFGs) over the words the model saw (punctuation left out, as in training);
* :meth:`SentenceStructure.attention` — PaLM's span attention: for every span end ``j`` a softmax
  over the spans ``[i, j]`` inside the sentence;
* :func:`dev_sentence` — sentence ``index`` of a prepared corpus split with its gold tree;
* :func:`tree_f1` — one tree against one gold tree under the default convention;
* :func:`display_gold` — a gold tree as the evaluation sees it (no punctuation, no POS tags);
* :func:`structure_table` — the table ``induce show attention`` prints (per word; per constituent for a grammar).

How a kind is drawn and tabulated is the kind's (``plot`` and ``table`` of :class:`~induce.trees.kinds.ParserKind`);
this module registers the built-in kinds' tables, :mod:`induce.report.figures` their plots
(:func:`induce.report.figures.plot_structure` draws one sentence). A kind without them (a new family's) still
gets its tree here, and ``show attention`` says it has no drawing.

``induce show tree`` and ``induce show attention`` (``induce/cli/show.py``) print and plot these; the
reproduction report (:mod:`induce.report`) draws them for its example sentences.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Sequence, Union

import nltk
import numpy as np
import torch

from induce.errors import InduceError
from induce.trees.kinds import DISTANCE, GRAMMAR, SPAN, ParserKind
from induce.trees.nodes import from_nltk, prune, tree_spans


@dataclass
class SentenceStructure:
    """One sentence as a model parses it.

    tokens:          every token of the sentence (the tree's leaves);
    words:           the tokens the model read (punctuation left out unless ``keep_punct``);
    tree:            the induced binary tree over ``tokens`` (internal label ``S``);
    kind:            the model's parser kind (:mod:`induce.trees.kinds`);
    distances:       ``[n]`` distance before each word (distance models);
    layer_distances: ``[L, n]`` per-layer distances when the model exposes them (ON-LSTM);
    distance_layer:  which row of ``layer_distances`` the parser reads (ON-LSTM);
    span_scores:     ``[n, n]``, ``span_scores[j, k]`` scores the span ``[j-k, j]`` (PaLM); ``-inf`` for ``k > j``;
    span_marginals:  ``[n + 1, n + 1]`` fenceposts (:mod:`induce.kernels`): ``[i, j]`` the posterior probability
                     that the words ``i .. j-1`` form a constituent (a grammar's ``span_posteriors``, channel 0);
    kept:            ``[len(tokens)]``, which tokens are ``words`` (the others: punctuation left out).
    """

    model_name: str
    kind: ParserKind
    tokens: list
    words: list
    tree: nltk.Tree
    distances: Optional[np.ndarray] = None
    layer_distances: Optional[np.ndarray] = None
    distance_layer: Optional[int] = None
    span_scores: Optional[np.ndarray] = None
    span_marginals: Optional[np.ndarray] = None
    kept: Optional[list] = None
    meta: dict = field(default_factory=dict)

    def word_spans(self) -> set[tuple[int, int]]:
        """The spans ``(start, end)`` (fenceposts over ``words``) of ``tree``'s constituents of two words or more,
        punctuation left out: the tree the decoder gave, as the model read the sentence."""
        node = from_nltk(self.tree)
        if self.kept is not None and not all(self.kept):
            node = prune(node, self.kept)
        return tree_spans(node) if node is not None else set()

    def attention(self) -> np.ndarray:
        """``A [n, n]``: row ``j`` is the softmax over the spans ``[i, j]``, ``i <= j``, of their scores
        (column ``i`` = span start); entries with ``i > j`` are 0. PaLM's language model attends over at
        most ``max_span_length`` spans; the parser (and this matrix) uses every span inside the sentence."""
        if self.span_scores is None:
            raise InduceError(f"{self.model_name} computes distances, not span attention")
        n = len(self.words)
        out = np.zeros((n, n))
        for j in range(n):
            row = np.array([self.span_scores[j, j - i] for i in range(j + 1)], dtype=np.float64)
            finite = np.isfinite(row)
            if finite.any():
                weights = np.where(finite, np.exp(np.where(finite, row, 0.0) - row[finite].max()), 0.0)
                out[j, : j + 1] = weights / weights.sum()
        return out


def _loaded(run, device):
    from induce.inference.loading import LoadedRun, load_run

    return run if isinstance(run, LoadedRun) else load_run(run, device)


def sentence_structure(
    run, tokens: Sequence[str], device: Union[str, torch.device] = "auto", keep_punct: bool = False,
) -> SentenceStructure:
    """The tree and the structure scores of one sentence (``tokens``: raw tokens, punctuation allowed).

    ``run``: a run folder, checkpoint or :class:`induce.inference.loading.LoadedRun`. The words are normalised
    and read from a fresh state as ``<eos> words <eos>``, or as the words alone for a kind that is
    ``words_only`` (a grammar), exactly as :func:`induce.inference.predict.predict_trees` does, so the tree
    returned is the one ``induce parse`` gives.
    """
    from induce.inference.predict import is_punctuation, normalize, predict_trees

    tokens = list(tokens)
    kept = [keep_punct or not is_punctuation(w) for w in tokens]
    words = [w for w, keep in zip(tokens, kept) if keep]
    if not words:
        raise InduceError("the sentence has no word (only punctuation)")
    loaded = _loaded(run, device)
    model, vocab = loaded.model, loaded.vocab
    tree = predict_trees(loaded, [tokens], device=device, keep_punct=keep_punct)[0]
    kind = model.parser_kind
    # word w_i sits at input position i + offset (after the leading <eos> when there is one)
    offset = 0 if kind.words_only else 1
    ids = vocab.encode(normalize(words))
    if offset:
        ids = [vocab.eos_id, *ids, vocab.eos_id]
    dev = next(model.parameters()).device
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            structure = model.parse_structure(torch.tensor([ids], device=dev), torch.tensor([len(ids)], device=dev))
    finally:
        model.train(was_training)
    n = len(words)
    name = loaded.config.get("model_name", type(model).__name__)
    out = SentenceStructure(name, kind, tokens, words, tree, kept=kept)
    if "distances" in structure:
        out.distances = structure["distances"][0, offset : offset + n].float().cpu().numpy()
        if "layer_distances" in structure:
            out.layer_distances = structure["layer_distances"][:, 0, offset : offset + n].float().cpu().numpy()
            out.distance_layer = loaded.config.get("model", {}).get("distance_layer")
    if "span_scores" in structure:
        scores = structure["span_scores"][0, offset : offset + n].float().cpu().numpy()
        table = np.full((n, n), -np.inf)
        width = min(n, scores.shape[1])
        table[:, :width] = scores[:, :width]
        for j in range(n):
            table[j, j + 1 :] = -np.inf  # spans reaching before the sentence
        out.span_scores = table
    if "span_posteriors" in structure:
        posteriors = structure["span_posteriors"][0, offset : offset + n + 1, offset : offset + n + 1, 0]
        out.span_marginals = posteriors.double().cpu().numpy()
    return out


def dev_sentence(corpus_dir: Union[str, Path], index: int, split: str = "valid") -> tuple[list, nltk.Tree]:
    """``(tokens, gold tree)`` of sentence ``index`` (0-based) of a prepared corpus split: the gold
    tree with punctuation (traces and function tags removed), its leaves as tokens."""
    from induce.data.corpus import PreparedCorpus

    corpus = PreparedCorpus(corpus_dir)
    if not corpus.has_trees:
        raise InduceError(f"{corpus_dir}: this corpus has no trees")
    trees = corpus.gold_trees(split)
    if not 0 <= index < len(trees):
        raise InduceError(f"--index {index}: the {split} split has sentences 0..{len(trees) - 1}")
    tree = trees[index]
    return tree.leaves(), tree


def display_gold(gold: nltk.Tree) -> nltk.Tree:
    """The gold tree as the evaluation sees it: traces and punctuation removed (word-tag filter),
    function tags stripped, pre-terminals (POS tags) dropped so that it reads like an induced tree."""
    from induce.evaluation import DEFAULT, prepare_gold
    from induce.evaluation.gold import gold_view
    from induce.trees.nodes import to_nltk

    prepared = prepare_gold(gold)
    node, _ = gold_view(prepared, DEFAULT)
    if node is None:
        return gold

    def strip(node):
        if not isinstance(node, nltk.Tree):
            return node
        if len(node) == 1 and not isinstance(node[0], nltk.Tree):
            return node[0]
        return nltk.Tree(node.label(), [strip(child) for child in node])

    tree = strip(to_nltk(node, prepared.kept_words(DEFAULT)))
    return tree if isinstance(tree, nltk.Tree) else nltk.Tree("S", [tree])


def tree_f1(tree: nltk.Tree, gold: nltk.Tree) -> Optional[float]:
    """Sentence F1 (0-100) of ``tree`` against ``gold`` under the default convention (Kim et al.
    2019); None when the sentence is skipped (fewer than 2 words after punctuation removal)."""
    from induce.evaluation import score

    result = score([gold], [tree])
    return result.sentence_f1 if result.n_sentences else None


def distance_table(structure: SentenceStructure) -> tuple[list[str], list[list[str]]]:
    """``(columns, rows)`` of ``induce show attention`` for a distance model: each word and the distance before it."""
    rows = [[word, f"{value:.3f}"] for word, value in zip(structure.words, structure.distances)]
    return ["word", "distance before it"], rows


def span_attention_table(structure: SentenceStructure) -> tuple[list[str], list[list[str]]]:
    """``(columns, rows)`` of ``induce show attention`` for a span model: each word, the span ending there that
    gets the most attention, and its weight."""
    attention = structure.attention()
    rows = []
    for j, word in enumerate(structure.words):
        start = int(attention[j, : j + 1].argmax())
        rows.append([word, " ".join(structure.words[start : j + 1]), f"{attention[j, start]:.2f}"])
    return ["word", "most attended span ending here", "weight"], rows


def span_marginal_table(structure: SentenceStructure) -> tuple[list[str], list[list[str]]]:
    """``(columns, rows)`` of ``induce show attention`` for a grammar: each constituent of two words or more of
    the decoded tree (outermost first, left to right), its fenceposts, its words and its span marginal."""
    rows = []
    for start, end in sorted(structure.word_spans(), key=lambda span: (span[0], -span[1])):
        rows.append([f"{start}-{end}", " ".join(structure.words[start:end]),
                     f"{structure.span_marginals[start, end]:.3f}"])
    return ["span (fenceposts)", "words of the decoded tree's constituent", "marginal"], rows


def structure_table(structure: SentenceStructure) -> tuple[list[str], list[list[str]]]:
    """The table of the structure's kind (an :class:`InduceError` for a kind without one)."""
    return structure.kind.drawing("table", structure.model_name)(structure)


DISTANCE.set_drawing(table=distance_table)
SPAN.set_drawing(table=span_attention_table)
GRAMMAR.set_drawing(table=span_marginal_table)

"""Parsing raw sentences with a trained run, and trees as text.

* :func:`predict_trees` — raw tokens -> binary trees whose leaves are the original tokens (the
  tokens are normalised as in training: lower case, numbers -> ``N``, unknown -> ``<unk>``;
  punctuation is hidden from the model and attached afterwards);
* :func:`parse_texts` / :func:`parse_lines` — the same from raw lines (:func:`tokenize`), as ``induce parse``;
* :func:`format_tree` — one tree in the text formats of ``induce parse``.

Loading a run is :mod:`induce.inference.loading`; perplexity and generation
:mod:`induce.inference.language_model`; which run the commands use by default :mod:`induce.inference.runs`.
"""
from __future__ import annotations

import json
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import nltk
import torch

from induce.errors import InduceError
from induce.inference.loading import LoadedRun, as_loaded
from induce.trees.brackets import copy_tree, flat_tree_text, tree_to_line

#: Sentences longer than this are parsed in pieces (see :func:`predict_trees`).
DEFAULT_MAX_LENGTH = 300
#: Batches are grouped so that ``batch * length`` (distance models) or ``batch * length^2`` (span
#: models, whose parse builds a ``[B, T, T]`` score table) stays under these budgets.
TOKEN_BUDGET = 8192
SPAN_BUDGET = 400_000


def normalize(words: Sequence[str]) -> list[str]:
    """The training normalisation of raw tokens (lower case, numbers -> ``N``)."""
    from induce.data.mikolov import normalize_word

    return [normalize_word(word) for word in words]


def tokenize(line: str, pretokenized: bool = False) -> list[str]:
    """Tokens of one raw line, each exactly as typed.

    ``pretokenized``: the whitespace-separated tokens. Otherwise NLTK's Treebank tokenizer decides
    where tokens start and end (``didn't`` -> ``did`` ``n't``, ``(twice).`` -> ``(`` ``twice``
    ``)`` ``.``), but each token is the substring of ``line`` it covers: quotes stay ``"``, not the
    tokenizer's double backquote and double apostrophe (its span_tokenize).
    """
    if pretokenized:
        return line.split()
    tokenizer = nltk.tokenize.TreebankWordTokenizer()
    try:
        return [line[start:end] for start, end in tokenizer.span_tokenize(line)]
    except ValueError:  # the tokens could not be aligned with the text (rare): its own tokens, then
        return tokenizer.tokenize(line)


@contextmanager
def _recursion_limit(limit: int) -> Iterator[None]:
    # Tree decoding and nltk's printing recurse once per tree level: a right-branching tree of a
    # long sentence is as deep as the sentence is long.
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, limit))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def _join_right(pieces: list[nltk.Tree], label: str = "S") -> nltk.Tree:
    tree = pieces[-1]
    for piece in reversed(pieces[:-1]):
        tree = nltk.Tree(label, [piece, tree])
    return tree


#: Escaped bracket tokens of the treebank (punctuation although they contain letters).
BRACKET_TOKENS = frozenset(["-LRB-", "-RRB-", "-LCB-", "-RCB-", "-LSB-", "-RSB-"])
#: A token without letters, digits, ``%`` or ``&``: what the word-tag filter removes in training
#: (punctuation tags and ``$``, ``#``); ``%`` (NN, -> ``N``) and ``&`` (CC) are words.
_PUNCT = re.compile(r"^[^\w%&]+$")


def is_punctuation(token: str) -> bool:
    """Whether the training normalisation would have dropped ``token`` (its shape stands in for the
    POS tag that raw text lacks)."""
    return token in BRACKET_TOKENS or bool(_PUNCT.match(token))


def _attach_punctuation(words: Sequence[str], content_tree: Optional[nltk.Tree], content: list[int]) -> nltk.Tree:
    """The tree over all ``words`` from ``content_tree`` over ``words[i] for i in content``.

    Each punctuation token joins, as a right sister, the highest constituent that ends just before
    it (so a final period attaches at the root); punctuation before the first word joins the
    whole tree as a left sister. Every node stays binary.

    Linear in the number of words, without recursion: one post-order walk finds, for each content
    word, the slot (parent node, child index) of the highest constituent ending at it; a mark then
    wraps what is in the slot before it, and the wrapped node is the highest ending at the mark
    (its old parent goes on past the mark, whose words come later). Descending from the root for
    each mark instead costs the depth of the tree per mark: quadratic for a long right-branching line.
    """
    if content_tree is None:  # nothing but punctuation: right-branching over the tokens
        return _join_right(list(words)) if len(words) > 1 else nltk.Tree("S", list(words))
    # A one-word tree (S w) is the bare leaf here, so that attaching gives (S w .), not (S (S w) .).
    # The marks are attached to a copy: the caller's tree is left as it was.
    top = content_tree[0] if len(content) == 1 else copy_tree(content_tree)
    holder = [top]  # the root's slot
    slot_of: dict[int, tuple[list, int]] = {}  # position -> slot of the highest node ending there
    leaf_index = 0
    # Post-order walk with an explicit stack of (parent, index): a node is finished after its
    # children, so the last slot recorded for a word is that of the highest node ending at it.
    stack: list[tuple[list, int, bool]] = [(holder, 0, False)]
    while stack:
        parent, index, children_done = stack.pop()
        node = list.__getitem__(parent, index)  # (nltk's __getitem__ is slow; the index is a plain int)
        if isinstance(node, nltk.Tree) and len(node) and not children_done:
            stack.append((parent, index, True))
            for child in range(len(node) - 1, -1, -1):
                stack.append((node, child, False))
            continue
        if not isinstance(node, nltk.Tree):
            leaf_index += 1
        if leaf_index:  # (an empty subtree before the first word ends at no word)
            slot_of[content[leaf_index - 1]] = (parent, index)
    is_content = set(content)
    for position in range(content[0] + 1, len(words)):
        if position in is_content:
            continue
        parent, index = slot_of[position - 1]
        parent[index] = nltk.Tree("S", [parent[index], words[position]])
        slot_of[position] = (parent, index)
    root = holder[0]
    for position in reversed(range(content[0])):
        root = nltk.Tree("S", [words[position], root])
    return root


def with_punctuation(tokens: Sequence[str], kept: Sequence[bool], tree: Optional[nltk.Tree]) -> nltk.Tree:
    """The tree over every token of ``tokens`` from ``tree`` over the kept ones (``kept[i]``; None when none is
    kept), the others attached as :func:`predict_trees` attaches punctuation (:func:`_attach_punctuation`):
    removing them again (and the unary nodes that leaves) gives ``tree`` back."""
    content = [i for i, keep in enumerate(kept) if keep]
    if len(content) == len(tokens) and tree is not None:
        return tree
    return _attach_punctuation(list(tokens), tree if content else None, content)


def predict_trees(
    run: Union[str, Path, LoadedRun],
    sentences: list[list[str]],
    batch_size: int = 64,
    decoder: Optional[str] = None,
    max_length: int = DEFAULT_MAX_LENGTH,
    device: Union[str, torch.device] = "auto",
    keep_punct: bool = False,
    progress: Optional[Callable[[int], None]] = None,
) -> list[nltk.Tree]:
    """Binary trees (internal label ``S``) over the ORIGINAL tokens of each sentence.

    ``sentences`` are raw tokens. As in training, punctuation is not shown to the model (unless
    ``keep_punct``; see :func:`is_punctuation`) and the other tokens are normalised and mapped to
    the model's vocabulary; each sentence is read as ``<eos> words <eos>`` from a fresh state.
    Punctuation is then attached (:func:`_attach_punctuation`). An empty sentence gives the empty
    tree ``(S )``; a one-word sentence ``(S word)``. Sentences longer than ``max_length`` words
    are cut into pieces of at most ``max_length`` words, parsed separately and joined
    right-branching (the parsers' cost grows with the length, quadratically for PaLM).
    ``decoder``: ``peel`` (default) or ``unbiased`` for distance models, ``span`` for PaLM.
    Batches hold at most ``batch_size`` sentences of similar length, within :data:`TOKEN_BUDGET` /
    :data:`SPAN_BUDGET` (:func:`induce.trees.decoders.length_batches`). ``progress(done, total)``, when
    given, is called after each batch (counts of sentence pieces).
    """
    from induce.trees.decoders import parse_batch

    loaded = as_loaded(run, device)
    model, vocab = loaded.model, loaded.vocab
    contents = [[i for i, w in enumerate(words) if keep_punct or not is_punctuation(w)] for words in sentences]
    pieces: list[tuple[int, list[str]]] = []  # (sentence index, words of one piece)
    for index, (words, content) in enumerate(zip(sentences, contents)):
        content_words = [words[i] for i in content]
        for start in range(0, len(content_words), max_length):
            pieces.append((index, content_words[start : start + max_length]))
    quadratic = model.parser_kind.quadratic  # span tables: a sentence's structure grows with its length squared

    def cost(count: int, length: int) -> int:  # of a group of pieces (with their two end marks)
        return count * ((length + 2) ** 2 if quadratic else length + 2)

    longest = max((len(words) for words in sentences), default=0)
    with _recursion_limit(4 * longest + 1000):
        # Sorted by length and grouped within the budget; a model that carries its state (PaLM variant=released)
        # reads the pieces in corpus order, as one stream (parse_batch).
        piece_trees = parse_batch(model, [vocab.encode(normalize(words)) for _, words in pieces],
                                  words=[words for _, words in pieces], decoder=decoder, eos_id=vocab.eos_id,
                                  batch_size=batch_size, cost=cost, budget=SPAN_BUDGET if quadratic else TOKEN_BUDGET,
                                  progress=progress) if pieces else []
        by_sentence: dict[int, list[nltk.Tree]] = {}
        for (index, _), tree in zip(pieces, piece_trees):
            by_sentence.setdefault(index, []).append(tree)
        out: list[nltk.Tree] = []
        for index, words in enumerate(sentences):
            parts = by_sentence.get(index)
            content_tree = _join_right(parts) if parts else None
            if not words:
                out.append(nltk.Tree("S", []))
            elif len(contents[index]) == len(words):
                out.append(content_tree)
            else:
                out.append(_attach_punctuation(words, content_tree, contents[index]))
    return out


def read_text_lines(path: Union[str, Path]) -> list[str]:
    """Lines of a UTF-8 text file (``-`` = stdin); bad bytes are an error naming the line."""
    from induce.errors import InputError

    try:
        data = sys.stdin.buffer.read() if str(path) == "-" else Path(path).read_bytes()
    except (FileNotFoundError, IsADirectoryError, PermissionError) as err:
        raise InputError(f"cannot read: {err.strerror}", path) from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError("not valid UTF-8", path, data.count(b"\n", 0, err.start) + 1) from None
    return text.splitlines()


def parse_texts(
    run: Union[str, Path, LoadedRun],
    lines: Sequence[str],
    pretokenized: bool = False,
    decoder: Optional[str] = None,
    batch_size: int = 64,
    max_length: int = DEFAULT_MAX_LENGTH,
    device: Union[str, torch.device] = "auto",
    keep_punct: bool = False,
    progress: Optional[Callable[[int], None]] = None,
) -> list[nltk.Tree]:
    """One tree per raw line, its leaves the line's tokens as typed (:func:`tokenize`, then
    :func:`predict_trees`): what ``induce parse`` and :meth:`induce.inference.api.Run.parse` do. An item that is a
    list of tokens (the library's) is taken as it is."""
    sentences = [tokenize(line, pretokenized) if isinstance(line, str) else [str(token) for token in line]
                 for line in lines]
    try:
        return predict_trees(run, sentences, batch_size=batch_size, decoder=decoder, max_length=max_length,
                             device=device, keep_punct=keep_punct, progress=progress)
    except ValueError as err:  # e.g. a decoder that does not fit the model
        raise InduceError(str(err)) from None


def parse_lines(
    run: Union[str, Path, LoadedRun],
    lines: Sequence[str],
    pretokenized: bool = False,
    decoder: Optional[str] = None,
    style: str = "ptb",
    batch_size: int = 64,
    max_length: int = DEFAULT_MAX_LENGTH,
    device: Union[str, torch.device] = "auto",
    keep_punct: bool = False,
    progress: Optional[Callable[[int], None]] = None,
) -> list[str]:
    """One formatted tree per input line (see :func:`parse_texts` and :func:`format_tree`)."""
    trees = parse_texts(run, lines, pretokenized=pretokenized, decoder=decoder, batch_size=batch_size,
                        max_length=max_length, device=device, keep_punct=keep_punct, progress=progress)
    return [format_tree(tree, style) for tree in trees]


def format_tree(tree: nltk.Tree, style: str = "ptb") -> str:
    """One tree as text.

    ``ptb``: one bracketed line whose leaves are the tokens as they are, except round brackets,
    which a bracketed line cannot hold: ``(`` and ``)`` (as tokens or inside one) are written as
    the treebank writes them, ``-LRB-`` and ``-RRB-``. ``pretty``: nltk's ASCII drawing, with the
    tokens exactly. ``json``: one JSON array per line, the tree as nested arrays whose strings are
    the tokens exactly (brackets included): ``[["The", "dog"], "barked"]``.
    """
    if style == "json":  # what json.dumps(nested lists) writes, without recursion (see flat_tree_text)
        return flat_tree_text(tree, lambda node: "[", _json_leaf, separator=", ", close_node="]")
    if style == "pretty":
        if not tree.leaves():
            return "(S )"
        from nltk.tree import TreePrettyPrinter

        # Integer leaves + the sentence: with word leaves nltk may draw the words out of order.
        indexed = tree.copy(deep=True)
        for index, position in enumerate(indexed.treepositions("leaves")):
            indexed[position] = index
        return TreePrettyPrinter(indexed, sentence=tree.leaves()).text().rstrip("\n")
    if style != "ptb":
        raise InduceError(f"unknown format {style!r}; use ptb, pretty or json")
    return tree_to_line(tree, _escape_round_brackets)


def _escape_round_brackets(token: str) -> str:
    return token.replace("(", "-LRB-").replace(")", "-RRB-")


def _json_leaf(token: str) -> str:
    return json.dumps(token, ensure_ascii=False)

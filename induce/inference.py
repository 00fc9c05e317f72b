"""Using a trained run: load it, parse raw sentences, score a corpus, generate text.

* :func:`load_run` — model + vocabulary from a run folder or checkpoint (hash-checked, no pickle;
  a folder without ``best`` says what it holds instead, and a checkpoint that is not the model its
  folder's ``config.yaml`` describes is refused);
* :func:`predict_trees` — raw tokens -> binary trees whose leaves are the original tokens (the
  tokens are normalised as in training: lower case, numbers -> ``N``, unknown -> ``<unk>``);
* :func:`lm_perplexity` — perplexity of a prepared corpus split;
* :func:`generate` — sampling with a temperature, or beam search.

Which run the commands use by default (:func:`induce.runs.latest_run`) is :mod:`induce.runs`.
"""
from __future__ import annotations

import json
import math
import re
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

import nltk
import torch

from induce.errors import InduceError
from induce.runs import DEFAULT_RUN_DIRS, latest_run, read_run_sidecar  # noqa: F401 (latest_run re-exported)
from induce.training.checkpoint import CheckpointError, checkpoint_paths, load_checkpoint, prefixed
from induce.training.trainer import CONFIG_FILE, map_state
from induce.treeio import copy_tree, flat_tree_text, tree_to_line

#: Sentences longer than this are parsed in pieces (see :func:`predict_trees`).
DEFAULT_MAX_LENGTH = 300
#: Batches are grouped so that ``batch * length`` (distance models) or ``batch * length^2`` (span
#: models, whose parse builds a ``[B, T, T]`` score table) stays under these budgets.
TOKEN_BUDGET = 8192
SPAN_BUDGET = 400_000


@dataclass
class LoadedRun:
    """A model ready for inference (eval mode) with its vocabulary and checkpoint sidecar."""

    model: torch.nn.Module
    vocab: object
    meta: dict
    path: Path

    @property
    def config(self) -> dict:
        return self.meta["config"]


def resolve_device(device: Union[str, torch.device, None]) -> torch.device:
    """``auto`` (or None) -> ``cuda`` when CUDA is available, else ``cpu``; other names are checked
    (a clear error for ``cuda`` without CUDA or a name that is not a device)."""
    if isinstance(device, torch.device):
        return device
    from induce.training.ddp import resolve_device as resolve

    return resolve("auto" if device is None else str(device))


def load_run(path: Union[str, Path], device: Union[str, torch.device] = "auto") -> LoadedRun:
    """Model and vocabulary of a run folder (its ``best`` checkpoint) or of a checkpoint file/stem,
    on ``device`` (``auto``: CUDA when available, see :func:`resolve_device`)."""
    from induce.config import stored_config, validate_config
    from induce.data.corpus import Vocab
    from induce.models.registry import get_model_class

    path = Path(path)
    weights, sidecar = checkpoint_paths(path)
    if not path.exists() and not any(p.exists() for p in (weights, sidecar)):
        raise InduceError(f"{path}: no such run folder or checkpoint")
    read_run_sidecar(path)  # a run folder without `best` says what it holds instead
    tensors, meta = load_checkpoint(path, device="cpu")
    config = validate_config(stored_config(meta["config"]), source=str(sidecar))
    _check_folder_config(sidecar, config)
    vocab = Vocab.from_json(meta["vocab"])
    model = get_model_class(config.model_name)(len(vocab), config.model_config_object())
    missing, unexpected = model.load_state_dict(prefixed(tensors, "model"), strict=False)
    if missing or unexpected:
        raise InduceError(f"{path}: checkpoint does not fit model {config.model_name} "
                          f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
    model.to(resolve_device(device)).eval()
    return LoadedRun(model, vocab, meta, path)


def _check_folder_config(sidecar: Path, config) -> None:
    """Refuse a checkpoint whose model is not the one its run folder's ``config.yaml`` describes (weights
    and sidecar of another run copied in: each is intact, so their hashes agree). Model name and
    ``model`` section are compared; the ``train`` keys a resume may change are not. An unreadable
    ``config.yaml`` is not this check's business (the checkpoint is self-contained)."""
    from induce.config import read_yaml, stored_config, validate_config

    folder_config = sidecar.parent / CONFIG_FILE
    if not folder_config.is_file():
        return
    try:
        # read with the stored defaults, so that a run written before a model field existed compares equal
        expected = validate_config(stored_config(read_yaml(folder_config)), source=str(folder_config))
    except InduceError:
        return
    if expected.model_name == config.model_name and expected.model == config.model:
        return
    if expected.model_name != config.model_name:
        what = f"a {config.model_name} model but {folder_config} says {expected.model_name}"
    else:
        keys = sorted(k for k in set(expected.model) | set(config.model)
                      if expected.model.get(k) != config.model.get(k))
        shown = ", ".join(f"model.{k} {config.model.get(k)!r} vs {expected.model.get(k)!r}" for k in keys[:3])
        what = f"a {config.model_name} model of another size than {folder_config} says ({shown})"
    raise CheckpointError(f"{sidecar}: this checkpoint is {what}: the checkpoint files come from another run; "
                          "put them back in their own folder, or pass the checkpoint that belongs here")


def _as_loaded(run: Union[str, Path, LoadedRun], device="auto") -> LoadedRun:
    return run if isinstance(run, LoadedRun) else load_run(run, device)


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
    Batches hold at most ``batch_size`` sentences of similar length. ``progress(done, total)``, when
    given, is called after each batch (counts of sentence pieces).
    """
    from induce.parsing import parse_batch

    loaded = _as_loaded(run, device)
    model, vocab = loaded.model, loaded.vocab
    contents = [[i for i, w in enumerate(words) if keep_punct or not is_punctuation(w)] for words in sentences]
    pieces: list[tuple[int, list[str]]] = []  # (sentence index, words of one piece)
    for index, (words, content) in enumerate(zip(sentences, contents)):
        content_words = [words[i] for i in content]
        for start in range(0, len(content_words), max_length):
            pieces.append((index, content_words[start : start + max_length]))
    order = sorted(range(len(pieces)), key=lambda p: len(pieces[p][1]))
    span_model = getattr(model, "parser_kind", "distance") == "span"
    carry = getattr(model, "parse_state_carry", False)
    if carry:  # PaLM variant=released: the pieces in corpus order, one stream (PaLMBase.parse_stream)
        order = list(range(len(pieces)))
    piece_trees: list[Optional[nltk.Tree]] = [None] * len(pieces)
    longest = max((len(words) for words in sentences), default=0)
    with _recursion_limit(4 * longest + 1000):
        start = 0
        while start < len(order):
            # Grow the group while it fits the budget (lengths only increase along `order`).
            end = start + 1
            while end < len(order) and (carry or end - start < batch_size):
                length = len(pieces[order[end]][1]) + 2
                cost = (end + 1 - start) * (length * length if span_model else length)
                if not carry and cost > (SPAN_BUDGET if span_model else TOKEN_BUDGET):
                    break
                end += 1
            group = order[start:end]
            words = [pieces[p][1] for p in group]
            ids = [vocab.encode(normalize(w)) for w in words]
            trees = parse_batch(model, ids, words=words, decoder=decoder, eos_id=vocab.eos_id, batch_size=len(group))
            for p, tree in zip(group, trees):
                piece_trees[p] = tree
            start = end
            if progress is not None:
                progress(end, len(order))
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
    :func:`predict_trees`): what ``induce parse`` and :meth:`induce.api.Run.parse` do. An item that is a
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


def lm_perplexity(run: Union[str, Path, LoadedRun], corpus_dir: Union[str, Path], split: str = "valid",
                  device: Union[str, torch.device] = "auto") -> float:
    """Perplexity of the run's model on ``split`` of a prepared corpus (the run's eval batching:
    ``data.eval_batch_size`` streams, ``data.bptt`` segments, state carried)."""
    from induce.data.corpus import PreparedCorpus
    from induce.training.batching import batchify, stream_ids
    from induce.training.trainer import evaluate_lm

    loaded = _as_loaded(run, device)
    corpus = PreparedCorpus(corpus_dir)
    data_cfg = loaded.config["data"]
    stream = stream_ids(corpus.lm_sentences(split), loaded.vocab)
    batch = max(1, min(data_cfg["eval_batch_size"], stream.numel() // 2))
    loss = evaluate_lm(loaded.model, batchify(stream, batch), data_cfg["bptt"], next(loaded.model.parameters()).device)
    return math.exp(loss)


@torch.no_grad()
def generate(
    run: Union[str, Path, LoadedRun],
    n_words: int = 50,
    temperature: float = 1.0,
    beam: Optional[int] = None,
    prompt: Optional[Sequence[str]] = None,
    seed: Optional[int] = None,
    device: Union[str, torch.device] = "auto",
) -> list[str]:
    """Generated tokens (``<eos>`` marks sentence ends).

    Sampling (``beam=None``): ``n_words`` tokens drawn from ``softmax(logits / temperature)``.
    Beam search (``beam=K``): the most probable continuation up to the first ``<eos>`` or
    ``n_words`` tokens, finished hypotheses ranked by mean log-probability per token (raw sums
    would favour the shortest sentence). The context is ``<eos>`` followed by the normalised prompt.
    """
    if math.isnan(temperature):
        raise InduceError(f"--temperature {temperature}: not a number; give a positive number (1 samples the "
                          "model's own distribution)")
    if not 0 < temperature < math.inf:
        raise InduceError(f"--temperature {temperature}: must be positive and finite")
    if beam is not None and beam < 1:
        raise InduceError("--beam must be at least 1")
    loaded = _as_loaded(run, device)
    model, vocab = loaded.model, loaded.vocab
    dev = next(model.parameters()).device
    context = [vocab.eos_id] + vocab.encode(normalize(prompt or []))
    state = model.init_state(1, dev)
    out = model(torch.tensor([context], device=dev), state)
    log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)  # [1, V]
    generator = torch.Generator(device="cpu")
    generator.manual_seed(seed if seed is not None else torch.seed() % 2**63)
    if beam is None:
        tokens = []
        state = out.state
        for _ in range(n_words):
            probs = torch.softmax(log_probs.cpu() / temperature, -1)
            token = int(torch.multinomial(probs[0], 1, generator=generator))
            tokens.append(token)
            out = model(torch.tensor([[token]], device=dev), state)
            state = out.state
            log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)
        return vocab.decode(tokens)
    return vocab.decode(_beam_search(model, out.state, log_probs, beam, n_words, vocab.eos_id, dev))


def _beam_search(model, state, log_probs, beam: int, max_words: int, eos_id: int, device) -> list[int]:
    """Beam search from one context; ``log_probs [1, V]`` of the first token; ``state`` batch 1."""
    state = map_state(state, lambda t: t.expand(beam, *t.shape[1:]).contiguous())
    scores = torch.full((beam,), float("-inf"), device=device)
    scores[0] = 0.0  # all beams start identical: expand only the first
    log_probs = log_probs.expand(beam, -1)
    sequences: list[list[int]] = [[] for _ in range(beam)]
    finished: list[tuple[float, list[int]]] = []
    for step in range(max_words):
        vocab_size = log_probs.size(-1)
        candidates = (scores[:, None] + log_probs).reshape(-1)
        top_scores, top_index = candidates.topk(min(2 * beam, candidates.numel()))
        next_beams, next_scores, next_tokens = [], [], []
        for score, index in zip(top_scores.tolist(), top_index.tolist()):
            origin, token = divmod(index, vocab_size)
            if math.isinf(score):
                continue
            sequence = sequences[origin] + [token]
            if token == eos_id or step == max_words - 1:
                finished.append((score / len(sequence), sequence))
            else:
                next_beams.append(origin)
                next_scores.append(score)
                next_tokens.append(token)
            if len(next_beams) == beam:
                break
        if not next_beams or len(finished) >= beam:
            break
        index = torch.tensor(next_beams, device=device)
        sequences = [sequences[o] + [t] for o, t in zip(next_beams, next_tokens)]
        state = map_state(state, lambda t: t.index_select(0, index))
        scores = torch.tensor(next_scores, device=device)
        out = model(torch.tensor(next_tokens, device=device)[:, None], state)
        state = out.state
        log_probs = torch.log_softmax(model.logits(out.hidden[:, -1]).float(), -1)
    if not finished:
        return sequences[0]
    return max(finished, key=lambda f: f[0])[1]

"""induce as a library: a trained run in a script, through the same functions as the commands.

::

    import induce

    run = induce.load("runs/palm-20240101-120000")      # a run folder or a checkpoint (.../last)
    trees = run.parse(["The cat sat on the mat."])        # nltk.Tree, leaves = the tokens as typed
    print(induce.format_tree(trees[0]))                   # (S (S The (S cat sat)) ...) as `induce parse`
    figures = run.score("22.mrg", max_length=40)  # = `induce eval --checkpoint RUN --gold 22.mrg --wsj40 --json`
    figures = run.score()                                 # on the dev split of the corpus it was trained on
    run.perplexity()                                      # = `induce eval --checkpoint RUN --lm`

Trees are :class:`nltk.Tree` objects (internal nodes labelled ``S``, binary; a one-word sentence is
``(S word)``, an empty one ``(S )``) whose leaves are the tokens exactly as given: ``tree.leaves()``,
``tree.pretty_print()``, :func:`induce.inference.predict.format_tree` for the text formats of ``induce parse``.
Raw strings are split into tokens as ``induce parse`` splits a line (NLTK's Treebank tokenizer, each
token the text it covers; ``pretokenized=True``: at spaces, as ``induce parse --pretokenized``); a
sentence given as a list of tokens is taken as it is.

Every method calls what the command calls (:func:`induce.inference.predict.predict_trees`,
:mod:`induce.inference.scoring`, :func:`induce.inference.language_model.lm_perplexity`), so the figures are the
commands'.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from induce.errors import InduceError

PathLike = Union[str, Path]


class Run:
    """A trained run loaded for inference (eval mode). Make one with :func:`induce.load`.

    Attributes: ``path`` (as given), ``model_name``, ``model`` (the ``nn.Module``), ``vocab``,
    ``config`` (the run's resolved config as a dict), ``meta`` (the checkpoint sidecar).
    """

    def __init__(self, loaded):
        self._loaded = loaded

    @property
    def path(self) -> Path:
        return self._loaded.path

    @property
    def model(self):
        return self._loaded.model

    @property
    def vocab(self):
        return self._loaded.vocab

    @property
    def config(self) -> dict:
        return self._loaded.config

    @property
    def meta(self) -> dict:
        return self._loaded.meta

    @property
    def model_name(self) -> str:
        return self._loaded.config["model_name"]

    def __repr__(self) -> str:
        from induce.inference.runs import describe_run

        return f"<induce.Run {describe_run(self.path)}>"

    def parse(self, sentences: Union[str, Sequence[Union[str, Sequence[str]]]], pretokenized: bool = False,
              keep_punct: bool = False, decoder: Optional[str] = None, batch_size: int = 64,
              max_length: Optional[int] = None, progress: Optional[Callable[[int, int], None]] = None) -> list:
        """One :class:`nltk.Tree` per sentence, its leaves the sentence's tokens as given.

        ``sentences``: raw strings (split as ``induce parse`` splits a line; ``pretokenized=True``: at
        spaces) or token lists (taken as they are); a single string is one sentence. Anything else (bytes, a
        number, a token that is not a string) is an :class:`~induce.errors.InduceError` naming the item. As in training,
        punctuation is not shown to the model (``keep_punct=True``: it is) and is attached afterwards.
        ``decoder``: ``peel`` (default) or ``unbiased`` for distance models; ``max_length``: longer
        sentences are parsed in pieces (default 300 tokens).
        """
        from induce.inference.predict import DEFAULT_MAX_LENGTH, parse_texts

        return parse_texts(self._loaded, checked_sentences(sentences), pretokenized=pretokenized, decoder=decoder,
                           batch_size=batch_size, max_length=max_length or DEFAULT_MAX_LENGTH,
                           keep_punct=keep_punct, progress=progress)

    def score(self, gold: Optional[PathLike] = None, corpus: Optional[PathLike] = None, split: str = "valid",
              max_length: Optional[int] = None, keep_punct: bool = False, count_root: bool = False,
              multiset: bool = False, decoder: Optional[str] = None, batch_size: int = 64) -> dict:
        """The run's trees of gold sentences scored: the dict ``induce eval --checkpoint RUN --json`` prints
        (``sentence_f1``, ``corpus_f1``, ``precision``, ``recall``, ``label_recall``, branching, counts,
        ``convention``, ``predicted``, ``gold``), with the same figures.

        ``gold``: a treebank file (one tree per line or multi-line ``.mrg``) or a folder of ``.mrg`` files
        (``--gold``); else ``split`` of the prepared corpus ``corpus`` (``--corpus``); else of the corpus
        the run was trained on. ``max_length`` (``--max-length``; 10 and 40 are ``--wsj10``/``--wsj40``),
        ``keep_punct``, ``count_root``, ``multiset``: the convention switches of ``induce eval``.
        """
        from induce.evaluation import EvalConvention
        from induce.inference.scoring import eval_corpus_of_run, load_gold, parse_gold, score

        if max_length is not None and max_length < 1:
            raise InduceError(f"max_length={max_length}: give a number of words >= 1")
        convention = EvalConvention(keep_punct=keep_punct, count_root=count_root, multiset=multiset,
                                    max_length=max_length)
        if gold is None and corpus is None:
            corpus = eval_corpus_of_run(self._loaded).path
        gold_set = load_gold(gold, corpus, split, convention)
        trees = parse_gold(self._loaded, gold_set.sentences, convention, batch_size=batch_size, decoder=decoder)
        summary, _ = score(trees, gold_set, convention, f"run {self.path}", length_option="max_length")
        return summary

    def perplexity(self, corpus: Optional[PathLike] = None, split: str = "valid") -> float:
        """Perplexity of the run's language model on ``split`` of the prepared corpus ``corpus`` (default: the
        corpus it was trained on), read as in training (``induce eval --checkpoint RUN --lm``)."""
        from induce.inference.language_model import lm_perplexity
        from induce.inference.scoring import eval_corpus_of_run

        if corpus is None:
            corpus = eval_corpus_of_run(self._loaded).path
        return lm_perplexity(self._loaded, corpus, split)

    def generate(self, n_words: int = 50, temperature: float = 1.0, beam: Optional[int] = None,
                 prompt: Optional[str] = None, seed: Optional[int] = None) -> list:
        """Generated tokens (``<eos>`` ends a sentence), as ``induce generate``: sampling, or beam search with
        ``beam``; ``prompt`` is split as ``induce generate --prompt`` splits it."""
        from induce.inference.language_model import generate
        from induce.inference.predict import tokenize

        return generate(self._loaded, n_words=n_words, temperature=temperature, beam=beam,
                        prompt=tokenize(prompt) if prompt else None, seed=seed)


def _shown(item) -> str:
    """``item`` for a message: its type and a short repr."""
    text = repr(item)
    return f"{type(item).__name__} {text[:60] + '...' if len(text) > 60 else text}"


def checked_sentences(sentences) -> list:
    """The sentences :meth:`Run.parse` takes, as a list: a ``str`` is one sentence; else each item is a ``str``
    (a raw line) or a list or tuple of ``str`` (its tokens). Anything else (bytes, numbers, ``None``, a token
    that is not a ``str``) is an :class:`InduceError` naming the item and where it is: bytes would be read as
    their numbers (``b"the"`` as ``116 104 101``) and a number is no text."""
    if isinstance(sentences, str):
        return [sentences]
    if isinstance(sentences, (bytes, bytearray, memoryview)) or not isinstance(sentences, Iterable) \
            or isinstance(sentences, Mapping):
        raise InduceError(f"parse: sentences must be a str or a list of str (or of token lists), not "
                          f"{_shown(sentences)}" + (" (decode bytes first, e.g. data.decode('utf-8'))"
                                                    if isinstance(sentences, (bytes, bytearray)) else ""))
    out = list(sentences)
    for number, item in enumerate(out, start=1):
        if isinstance(item, str):
            continue
        if isinstance(item, (list, tuple)):
            for position, token in enumerate(item, start=1):
                if not isinstance(token, str):
                    raise InduceError(f"parse: sentence {number}, token {position} is {_shown(token)}: a token "
                                      "must be a str")
            continue
        hint = " (decode bytes first, e.g. line.decode('utf-8'))" if isinstance(item, (bytes, bytearray)) else ""
        raise InduceError(f"parse: sentence {number} is {_shown(item)}: give a str (a raw line) or a list of str "
                          f"(its tokens){hint}")
    return out


def load(path: PathLike, device: str = "auto") -> Run:
    """The trained run in ``path`` (a run folder, whose ``best`` checkpoint is used, or a checkpoint such
    as ``runs/x/last``), on ``device`` (``auto``: CUDA when available, else CPU). Raises an
    :class:`~induce.errors.InduceError` with a one-line reason when it cannot be used (no checkpoint
    yet, a damaged file, a checkpoint that is not its folder's model)."""
    from induce.inference.loading import load_run

    return Run(load_run(path, device))

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
:func:`induce.evaluation.score`, :func:`induce.inference.language_model.lm_perplexity`), so the figures are the
commands'.

An argument of the wrong type or out of range (``induce.load(123)``, ``run.parse(..., batch_size=0)``) is an
:class:`~induce.errors.InduceError` naming the function and the argument, as every other error of the library:
the annotations are checked by pydantic (:func:`checked_arguments`).
"""
from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Annotated, Callable, Optional, Sequence, Union

import pydantic

from induce.errors import InduceError

#: A file or folder argument: a ``str`` or a path object (``pathlib.Path``, any ``os.PathLike``), not bytes.
PathLike = Union[pydantic.StrictStr, os.PathLike]
#: A count of at least 1 (sentences per batch, words to generate, beam size).
Count = Annotated[int, pydantic.Field(ge=1)]

#: How an argument error says what was expected, per pydantic error type (``ctx`` fills the braces).
_EXPECTED = {
    "string_type": "a str", "path_type": "a path", "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "finite_number": "a finite number", "bool_type": "True or False", "bool_parsing": "True or False",
    "callable_type": "a function", "greater_than_equal": "at least {ge}", "greater_than": "greater than {gt}",
}


def checked_arguments(name: str) -> Callable:
    """Decorate a function of the library so that its arguments are checked against its annotations
    (:func:`pydantic.validate_call`, lax: ``"4"`` is 4 for an ``int``) and a bad one is an
    :class:`~induce.errors.InduceError` of one line, ``NAME: ARGUMENT must be ..., not TYPE VALUE``, instead
    of a ``TypeError`` from deep inside (``Path(123)``). ``name`` names the function (``load``, ``parse``, as
    the library's other messages do). A call that does not fit the signature (a missing or unknown argument)
    stays Python's ``TypeError``."""

    def decorate(func: Callable) -> Callable:
        validated = pydantic.validate_call(config=pydantic.ConfigDict(arbitrary_types_allowed=True))(func)
        signature = inspect.signature(func)
        names = list(signature.parameters)  # an argument given by position is named too

        @functools.wraps(func)
        def call(*args, **kwargs):
            signature.bind(*args, **kwargs)  # a call that does not fit the signature: Python's TypeError
            try:
                return validated(*args, **kwargs)
            except pydantic.ValidationError as err:
                if err.title != func.__qualname__:  # raised inside the function: not about its arguments
                    raise
                raise InduceError(_argument_error(name, err, names)) from None

        return call

    return decorate


def _argument_error(name: str, err: pydantic.ValidationError, names: list[str]) -> str:
    """The one line of :func:`checked_arguments` for the first argument ``err`` is about (``names``: the
    function's parameters, in order)."""
    errors = err.errors()
    where = errors[0]["loc"][0] if errors[0]["loc"] else "arguments"
    argument = names[where] if isinstance(where, int) and 0 <= where < len(names) else where
    errors = [item for item in errors if item["loc"][:1] == (where,)]
    expected = dict.fromkeys(_EXPECTED.get(item["type"], item["msg"]).format(**item.get("ctx", {}))
                             for item in errors)
    value = errors[0]["input"]
    hint = " (decode bytes first, e.g. data.decode('utf-8'))" if isinstance(value, (bytes, bytearray)) else ""
    return f"{name}: {argument} must be {' or '.join(expected)}, not {_shown(value)}{hint}"


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

    @checked_arguments("parse")
    def parse(self, sentences: Annotated[Union[str, Sequence[Union[str, Sequence[str]]]], pydantic.SkipValidation],
              pretokenized: bool = False, keep_punct: bool = False, decoder: Optional[str] = None,
              batch_size: Count = 64, max_length: Optional[Annotated[int, pydantic.Field(ge=2)]] = None,
              progress: Optional[Callable[[int, int], None]] = None) -> list:
        """One :class:`nltk.Tree` per sentence, its leaves the sentence's tokens as given.

        ``sentences``: raw strings (split as ``induce parse`` splits a line; ``pretokenized=True``: at
        spaces) or token lists (taken as they are); a single string is one sentence. Anything else (bytes, a
        number, a token that is not a string) is an :class:`~induce.errors.InduceError` naming the item. As in training,
        punctuation is not shown to the model (``keep_punct=True``: it is) and is attached afterwards.
        ``decoder``: ``peel`` (default) or ``unbiased`` for distance models; ``max_length``: longer
        sentences are parsed in pieces (default 300 tokens; at least 2, as ``induce parse --max-length``).
        """
        from induce.inference.predict import DEFAULT_MAX_LENGTH, parse_texts

        return parse_texts(self._loaded, checked_sentences(sentences), pretokenized=pretokenized, decoder=decoder,
                           batch_size=batch_size, max_length=max_length or DEFAULT_MAX_LENGTH,
                           keep_punct=keep_punct, progress=progress)

    @checked_arguments("score")
    def score(self, gold: Optional[PathLike] = None, corpus: Optional[PathLike] = None, split: str = "valid",
              max_length: Optional[Count] = None, keep_punct: bool = False, count_root: bool = False,
              multiset: bool = False, decoder: Optional[str] = None, batch_size: Count = 64) -> dict:
        """The run's trees of gold sentences scored: the dict ``induce eval --checkpoint RUN --json`` prints
        (``sentence_f1``, ``corpus_f1``, ``precision``, ``recall``, ``label_recall``, branching, counts,
        ``convention``, ``predicted``, ``gold``), with the same figures.

        ``gold``: a treebank file (one tree per line or multi-line ``.mrg``) or a folder of ``.mrg`` files
        (``--gold``); else ``split`` of the prepared corpus ``corpus`` (``--corpus``); else of the corpus
        the run was trained on. ``max_length`` (``--max-length``; 10 and 40 are ``--wsj10``/``--wsj40``),
        ``keep_punct``, ``count_root``, ``multiset``: the convention switches of ``induce eval``.
        """
        from induce.evaluation import induce_convention, load_gold, require_sentences, score
        from induce.evaluation.engine import summary
        from induce.inference.scoring import eval_corpus_of_run, parse_gold

        convention = induce_convention(keep_punct=keep_punct, count_root=count_root, multiset=multiset,
                                       max_length=max_length)
        if gold is None and corpus is None:
            corpus = eval_corpus_of_run(self._loaded).path
        gold_set = load_gold(gold, corpus, split)
        trees = parse_gold(self._loaded, gold_set.sentences, convention, batch_size=batch_size, decoder=decoder)
        result = score(gold_set.sentences, trees, convention)
        require_sentences(result, "max_length")
        return summary(result, f"run {self.path}", gold_set)

    @checked_arguments("perplexity")
    def perplexity(self, corpus: Optional[PathLike] = None, split: str = "valid") -> float:
        """Perplexity of the run's language model on ``split`` of the prepared corpus ``corpus`` (default: the
        corpus it was trained on), read as in training (``induce eval --checkpoint RUN --lm``)."""
        from induce.inference.language_model import lm_perplexity
        from induce.inference.scoring import eval_corpus_of_run

        if corpus is None:
            corpus = eval_corpus_of_run(self._loaded).path
        return lm_perplexity(self._loaded, corpus, split)

    @checked_arguments("generate")
    def generate(self, n_words: Count = 50, temperature: float = 1.0, beam: Optional[Count] = None,
                 prompt: Optional[pydantic.StrictStr] = None, seed: Optional[int] = None) -> list:
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


@checked_arguments("load")
def load(path: PathLike, device: Annotated[str, pydantic.SkipValidation] = "auto") -> Run:
    """The trained run in ``path`` (a run folder, whose ``best`` checkpoint is used, or a checkpoint such
    as ``runs/x/last``), on ``device`` (``auto``: CUDA when available, else CPU). Raises an
    :class:`~induce.errors.InduceError` with a one-line reason when it cannot be used (no checkpoint
    yet, a damaged file, a checkpoint that is not its folder's model, a ``path`` that is no str or path, a
    ``device`` that is no device name)."""
    from induce.inference.loading import load_run

    return Run(load_run(path, device))


def format_tree(tree, style: str = "ptb") -> str:
    """A tree of :meth:`Run.parse` as ``induce parse`` writes it (:func:`induce.inference.predict.format_tree`);
    anything but an :class:`nltk.Tree` whose leaves are ``str`` is an :class:`InduceError` naming it."""
    import nltk

    from induce.inference.predict import format_tree as format_one

    if not isinstance(tree, nltk.Tree):
        raise InduceError(f"format_tree: tree must be an nltk.Tree (as run.parse returns), not {_shown(tree)}")
    for number, leaf in enumerate(tree.leaves(), start=1):
        if not isinstance(leaf, str):
            raise InduceError(f"format_tree: leaf {number} is {_shown(leaf)}: a leaf must be a str (a token)")
    return format_one(tree, style)

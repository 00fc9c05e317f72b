"""Parser kinds: what a model's ``parse_structure`` returns, and the decoders that turn it into trees.

A model class declares its kind (``parser_kind = DISTANCE``); ``parse``, ``eval``, ``show``, the
trainer's dev F1 and ``reproduce`` ask the kind, never compare names:

* :data:`DISTANCE` — ``{"distances": [B, T]}`` (ON-LSTM, PRPN): decoders ``peel`` (default) and ``unbiased``;
* :data:`SPAN` — ``{"span_scores": [B, T, m]}`` (PaLM): decoder ``span``; sentences are read between
  ``<eos>`` marks (the scores of the spans ending at the last word are computed at the end mark);
* :data:`GRAMMAR` — ``{"span_posteriors": [B, N + 1, N + 1, C]}`` (the neural PCFGs): fencepost spans as
  :mod:`induce.kernels`, channel 0 the span marginals, channel 1 (dense grammars) the Viterbi tree's 0/1 span
  indicator; decoders ``mbr`` (default) and ``viterbi`` (:mod:`induce.trees.grammar_decoders`); sentences are
  read as their words alone;
* :data:`NO_PARSER` — a language model without syntactic structure (rellstm, relrnn, memlstm).

**Decoders are registered by kind**: ``@SPAN.decoder("name", help=...)`` on a function
``(scores, length) -> IndexTree`` (``scores``: the sentence's rows of the structure, word ``w_i`` at row
``i``; a :data:`~induce.trees.nodes.IndexTree` over ``0 .. length-1``), or :meth:`ParserKind.add_decoder`
with a ``"module:function"`` reference, which is imported on first use (the built-in decoders live in
:mod:`induce.trees.decoders`, which imports numpy and torch: ``induce --help`` builds the ``--decoder``
help from this module without them). A new family defines its own kind with :class:`ParserKind`
(and :func:`register_kind`), or reuses one of these.

**Drawings are registered by the layers that make them**: the built-in kinds' tables are registered by
:mod:`induce.inference.show` and their plots by :mod:`induce.report.figures` (:meth:`ParserKind.set_drawing`),
so that this module names no module above the trees.

This module imports nothing beyond the standard library and :mod:`induce.errors`.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Union

from induce.errors import InduceError, InvalidValueError

#: A function given directly, or ``"package.module:attribute"`` imported on first use.
Reference = Union[str, Callable[..., Any]]


def resolve(reference: Reference) -> Callable[..., Any]:
    """The callable behind ``reference`` (a callable is returned as it is)."""
    if callable(reference):
        return reference
    module, _, attribute = reference.partition(":")
    return getattr(importlib.import_module(module), attribute)


@dataclass
class Decoder:
    """One registered decoder: its name, its one-line help and the function ``(scores, length) -> IndexTree``."""

    name: str
    help: str
    function: Reference

    def __call__(self, scores, length: int):
        return resolve(self.function)(scores, length)


@dataclass(eq=False)
class ParserKind:
    """What a model's ``parse_structure`` returns and how it becomes a tree and a figure.

    name:           shown by ``induce models`` and in messages;
    structure_key:  the key of ``parse_structure``'s dict the decoders read (``None``: the model does not parse);
    needs_eos:      sentences are parsed as ``<eos> words <eos>`` (the model scores a sentence's last spans
                    when it reads the end mark); else as the words alone, or in their end marks when the
                    caller gives one (the language models' context);
    words_only:     sentences are always parsed as the words alone, end mark given or not (a grammar
                    generates the words, not the marks);
    quadratic:      the structure of an ``n``-word sentence holds ``n * n`` numbers (span tables): parse
                    batches are budgeted by ``n * n``, not ``n``;
    show_title:     what ``induce show attention`` calls the numbers (its table's title);
    figure_name:    the file-name stem of the figures ``reproduce`` draws of them;
    figure_title:   what those figures show (after the model's name);
    plot:           ``(items, path, title) -> Path`` drawing ``(label, SentenceStructure)`` items (``None``: ``show``
                    and ``reproduce`` say the kind has no drawing); given here or by :meth:`set_drawing`;
    table:          ``SentenceStructure -> (columns, rows)`` for ``induce show attention``'s table; likewise;
    decoders:       name -> :class:`Decoder`, in registration order; the first registered is the default.
    """

    name: str
    structure_key: Optional[str]
    needs_eos: bool = False
    words_only: bool = False
    quadratic: bool = False
    show_title: str = ""
    figure_name: str = ""
    figure_title: str = ""
    plot: Optional[Reference] = None
    table: Optional[Reference] = None
    decoders: dict[str, Decoder] = field(default_factory=dict)

    def __str__(self) -> str:
        return self.name

    @property
    def parses(self) -> bool:
        """Whether models of this kind give trees at all."""
        return self.structure_key is not None

    @property
    def default_decoder(self) -> Optional[str]:
        return next(iter(self.decoders), None)

    def add_decoder(self, name: str, function: Reference, help: str) -> Decoder:
        """Register decoder ``name`` for this kind (the first one added is the default)."""
        if not self.parses:
            raise ValueError(f"parser kind {self.name!r} does not parse: it takes no decoder")
        owner = _DECODER_OWNERS.get(name)
        if owner is not None and owner is not self:
            raise ValueError(f"decoder name {name!r} is registered for parser kind {owner.name!r} already")
        self.decoders[name] = entry = Decoder(name, help, function)
        _DECODER_OWNERS[name] = self
        return entry

    def decoder(self, name: str, help: str) -> Callable[[Callable], Callable]:
        """Decorator form of :meth:`add_decoder`."""
        def wrap(function: Callable) -> Callable:
            self.add_decoder(name, function, help)
            return function
        return wrap

    def choose_decoder(self, name: Optional[str], model_name: str) -> Decoder:
        """The decoder ``name`` (None: this kind's default) for a model of this kind: an
        :class:`InvalidValueError` for a name no kind registers, or one registered for another kind."""
        if name is None:
            name = self.default_decoder
        if name not in _DECODER_OWNERS:
            raise InvalidValueError(f"unknown decoder {name!r}; choose one of {', '.join(decoder_names())}")
        if name not in self.decoders:
            allowed = tuple(self.decoders)
            raise InvalidValueError(f"decoder {name!r} does not apply to model {model_name!r}; use one of {allowed}")
        return self.decoders[name]

    def set_drawing(self, plot: Optional[Reference] = None, table: Optional[Reference] = None) -> None:
        """Register this kind's ``plot`` and/or ``table`` (see the class): how the modules that draw and
        tabulate (above the trees) give them to a kind declared here."""
        if plot is not None:
            self.plot = plot
        if table is not None:
            self.table = table

    def drawing(self, part: str, model_name: str) -> Callable[..., Any]:
        """This kind's ``"plot"`` or ``"table"`` function; an :class:`InduceError` naming the model when the
        kind has none."""
        function = getattr(self, part)
        if function is None:
            raise InduceError(f"model {model_name!r} (parser kind {self.name!r}) has no drawing of its "
                              f"structure: `induce show attention` and the reproduce figures cover the kinds "
                              f"{', '.join(k.name for k in _KINDS.values() if getattr(k, part) is not None)}")
        return resolve(function)


_KINDS: dict[str, ParserKind] = {}
_DECODER_OWNERS: dict[str, ParserKind] = {}


def register_kind(kind: ParserKind) -> ParserKind:
    """Make ``kind`` known (its decoders appear in ``--decoder``'s help); a second kind of one name is an error."""
    if kind.name in _KINDS and _KINDS[kind.name] is not kind:
        raise ValueError(f"parser kind {kind.name!r} is registered twice")
    _KINDS[kind.name] = kind
    return kind


def kinds() -> list[ParserKind]:
    """Every registered kind, in registration order."""
    return list(_KINDS.values())


def decoder_names() -> list[str]:
    """Every registered decoder's name, kind by kind."""
    return [name for kind in _KINDS.values() for name in kind.decoders]


def decoder_help() -> str:
    """``--decoder``'s help: each kind's decoders, the default first."""
    parts = []
    for kind in _KINDS.values():
        if kind.decoders:
            names = [f"{d.name} ({d.help}{', default' if d.name == kind.default_decoder else ''})"
                     for d in kind.decoders.values()]
            parts.append(f"{kind.name} models: " + "; ".join(names))
    return "Tree decoder. " + ". ".join(parts) + "."


NO_PARSER = register_kind(ParserKind("none", structure_key=None))
DISTANCE = register_kind(ParserKind(
    "distance", structure_key="distances", show_title="distances", figure_name="distances",
    figure_title="syntactic distance before each word",
))
SPAN = register_kind(ParserKind(
    "span", structure_key="span_scores", needs_eos=True, quadratic=True, show_title="span attention",
    figure_name="attention", figure_title="span attention (row: span end, column: span start)",
))
DISTANCE.add_decoder("peel", "induce.trees.decoders:peel_decoder",
                     "greedy split at the largest distance, the split word peeled off, as in the papers")
DISTANCE.add_decoder("unbiased", "induce.trees.decoders:unbiased_decoder",
                     "split before the largest distance, every binary tree reachable")
SPAN.add_decoder("span", "induce.trees.decoders:span_tree", "PaLM's greedy split by the right span's score")
GRAMMAR = register_kind(ParserKind(
    "grammar", structure_key="span_posteriors", words_only=True, quadratic=True, show_title="span marginals",
    figure_name="span-marginals",
    figure_title="span marginals (row: span start, column: span end; dots: the decoded tree)",
))
GRAMMAR.add_decoder("mbr", "induce.trees.grammar_decoders:mbr_decoder",
                    "the tree of the largest sum of span posteriors (CKY), as Kim et al. and Yang et al. decode")
GRAMMAR.add_decoder("viterbi", "induce.trees.grammar_decoders:viterbi_decoder",
                    "the grammar's most probable derivation (dense grammars; a low-rank one has no exact Viterbi)")

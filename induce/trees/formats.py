"""Predicted trees in the formats other toolkits write, read into the one shape the evaluator takes
(:class:`~induce.trees.brackets.LocatedTree`: an ``nltk.Tree`` and where it was read).

* ``trees`` — one bracketed tree per line, over every token or over the words without punctuation
  (``induce parse``; ON-LSTM's, PRPN's, Li et al.'s files); the evaluator tells which by the length;
* ``spans`` — JSON lines ``{"words": [...], "spans": [[i, j], ...]}``, ``j`` exclusive; the whole
  sentence and single words may be listed or not; spans must not cross;
* ``diora`` — DIORA's ``parse.py`` JSON lines ``{"tree": nested lists of tokens}``;
* ``kim`` — compound-pcfg ``eval.py``'s ``pred_tree`` files: ``(NT-k (T-k word) ...)``, lower-cased,
  **no line for a sentence of one word** (``eval.py`` skips them): :func:`fill_one_word_sentences` puts
  the one tree a word can have in their place, and says so.

``auto`` (the default) picks the format from the first line: ``{`` with ``"spans"`` or ``"tree"``, a tree
whose labels are ``NT-1`` / ``T-1``, else ``trees``.

Long sentences and deep trees are read without recursion: a right-branching tree is as deep as its
sentence is long, and Python's ``json`` refuses lists nested about a thousand deep (:func:`load_json`
reads those with an explicit stack).
"""
from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import nltk

from induce.errors import CountMismatchError, InputError, InvalidValueError
from induce.files import os_error_reason
from induce.trees.brackets import LocatedTree, read_trees
from induce.trees.nodes import Node, fold, tagged_leaves, to_nltk

FORMATS = ("auto", "trees", "spans", "diora", "kim")
_KIM_LABEL = re.compile(r"^N?T-\d+$")


def _first_line(path: Path) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            for line in handle:
                if line.strip():
                    return line.strip()
    except OSError as err:
        raise InputError(f"cannot read: {os_error_reason(err)}", str(path)) from None
    return ""  # empty: read as trees, whose reader says so


def detect_format(path: Path) -> str:
    """The format of a predictions file, from its first non-blank line (module docstring)."""
    first = _first_line(Path(path))
    if first.startswith("{"):
        try:
            keys = load_json(first)
        except ValueError as err:
            raise InputError(f"a JSON line that does not parse: {_json_reason(err)}", str(path), 1) from None
        if isinstance(keys, dict) and "spans" in keys:
            return "spans"
        if isinstance(keys, dict) and "tree" in keys:
            return "diora"
        raise InputError('a JSON line with neither "spans" (a span list) nor "tree" (DIORA)', str(path), 1)
    labels = re.findall(r"\(\s*([^\s()]+)", first)
    return "kim" if labels and all(_KIM_LABEL.match(label) for label in labels) else "trees"


def _shown(value) -> str:
    """A JSON value as it would be written, cut at 60 characters; a list or object of lists or objects by its
    kind alone (writing a deep one would recurse)."""
    if isinstance(value, (list, dict)) and any(isinstance(x, (list, dict)) for x in
                                               (value.values() if isinstance(value, dict) else value)):
        return "an object of objects or lists" if isinstance(value, dict) else "a list of lists or objects"
    return json.dumps(value)[:60]


def _is_index(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)  # JSON true is no word position


def tree_from_spans(words: Sequence[str], spans: Sequence, where=(None, None)) -> nltk.Tree:
    """The tree of a span list over ``words`` (``[i, j)``): every span a node, the whole sentence the root,
    single words leaves. Crossing spans, spans outside the sentence, or a span that is not two integers
    (``true`` included) are an :class:`InputError`."""
    n = len(words)
    if n == 0:
        raise InputError('"words" is empty', *where)
    if not isinstance(spans, (list, tuple)):
        raise InputError(f'"spans": expected a list of [start, end] pairs, found {_shown(spans)}', *where)
    wanted = set()
    for item in spans:
        if not (isinstance(item, (list, tuple)) and len(item) == 2 and all(_is_index(x) for x in item)):
            raise InputError(f"span {_shown(item)}: expected [start, end] (two integers, end exclusive)", *where)
        start, end = item
        if not 0 <= start < end <= n:
            raise InputError(f"span [{start}, {end}] outside the {n} words (end is exclusive)", *where)
        if end - start >= 2:
            wanted.add((start, end))
    wanted.add((0, n))
    ordered = sorted(wanted, key=lambda span: (span[0], -span[1]))
    root = Node(None, 0, n)
    stack = [root]
    for start, end in ordered[1:]:
        while not (stack[-1].start <= start and end <= stack[-1].end):
            stack.pop()
        parent = stack[-1]
        if parent.children and parent.children[-1].end > start:
            other = parent.children[-1]
            raise InputError(f"spans [{other.start}, {other.end}] and [{start}, {end}] cross", *where)
        node = Node(None, start, end)
        parent.children.append(node)
        stack.append(node)

    def fill(node: Node, children: list) -> Node:  # single words between the listed spans
        filled, position = [], node.start
        for child in children + [None]:
            stop = child.start if child is not None else node.end
            filled.extend(Node(None, k, k + 1) for k in range(position, stop))
            if child is not None:
                filled.append(child)
                position = child.end
        return Node(None, node.start, node.end, filled)

    return to_nltk(fold(root, lambda node: node.children, fill), list(words))


def tree_from_nested(nested, where=(None, None)) -> nltk.Tree:
    """DIORA's nested token lists as a tree: a list is an ``S`` node, a token ``(DT token)`` (what DIORA's
    EVALB driver writes)."""

    def children_of(item) -> list:
        if isinstance(item, str):
            return []
        if not isinstance(item, list) or not item:
            raise InputError(f'"tree": expected nested lists of tokens, found {_shown(item)}', *where)
        return item

    return fold(nested, children_of,
                lambda item, children: nltk.Tree("DT", [item]) if isinstance(item, str) else nltk.Tree("S", children))


_JSON_TOKEN = re.compile(r'\s*(?:([\[\]{}:,])|("(?:[^"\\\x00-\x1f]|\\.)*")|'
                         r"(-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?)|(true|false|null))")
_LITERALS = {"true": True, "false": False, "null": None}


def load_json(text: str):
    """``json.loads(text)``; a value nested deeper than ``json``'s C reader allows (about a thousand
    levels, a RecursionError) is read again with an explicit stack (:func:`_load_deep_json`)."""
    try:
        return json.loads(text)
    except RecursionError:
        return _load_deep_json(text)


def _load_deep_json(text: str):
    """One JSON value read with an explicit stack of the open arrays and objects (no recursion); strings and
    numbers are decoded by ``json`` itself. A ``ValueError`` names the offset of the first bad token."""
    stack: list = []  # [list] for an array, [dict, key] for an object
    result, state, position = None, "value", 0  # state: what may come next

    def complete(value) -> str:
        nonlocal result
        if not stack:
            result = value
            return "end"
        frame = stack[-1]
        if len(frame) == 1:
            frame[0].append(value)
        else:
            frame[0][frame[1]] = value
        return "comma"

    while True:
        match = _JSON_TOKEN.match(text, position)
        if match is None:
            if state == "end" and not text[position:].strip():
                return result
            raise ValueError(f"unexpected text at offset {position}")
        punct, string, number, literal = match.groups()
        position = match.end()
        opened_list = state == "value_or_close"
        if state in ("value", "value_or_close"):
            if punct == "[":
                stack.append([[]])
                state = "value_or_close"
            elif punct == "{":
                stack.append([{}, None])
                state = "key_or_close"
            elif punct == "]" and opened_list:
                state = complete(stack.pop()[0])
            elif string is not None or number is not None:
                state = complete(json.loads(string if string is not None else number))
            elif literal is not None:
                state = complete(_LITERALS[literal])
            else:
                raise ValueError(f"expected a value at offset {match.start()}")
        elif state in ("key", "key_or_close"):
            if string is not None:
                stack[-1][1] = json.loads(string)
                state = "colon"
            elif punct == "}" and state == "key_or_close":
                state = complete(stack.pop()[0])
            else:
                raise ValueError(f"expected a key at offset {match.start()}")
        elif state == "colon" and punct == ":":
            state = "value"
        elif state == "comma" and punct == ",":
            state = "value" if len(stack[-1]) == 1 else "key"
        elif state == "comma" and punct in ("]", "}") and (punct == "]") == (len(stack[-1]) == 1):
            state = complete(stack.pop()[0])
        else:
            raise ValueError(f"unexpected {match.group().strip()!r} at offset {match.start()}")


def _json_reason(err: ValueError) -> str:
    return err.msg if isinstance(err, json.JSONDecodeError) else str(err)


def _read_json_lines(path: Path, fmt: str, progress) -> list[LocatedTree]:
    out = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as err:
        reason = os_error_reason(err) if isinstance(err, OSError) else "not valid UTF-8"
        raise InputError(f"cannot read: {reason}", str(path)) from None
    last = max((k for k, line in enumerate(lines) if line.strip()), default=-1)
    for number, line in enumerate(lines[: last + 1], start=1):
        where = (str(path), number)
        if not line.strip():
            raise InputError("blank line: line i is sentence i, so a blank line would shift every later sentence",
                             *where)
        try:
            record = load_json(line)
        except ValueError as err:
            raise InputError(f"not a JSON object: {_json_reason(err)}", *where) from None
        key = "spans" if fmt == "spans" else "tree"
        if not isinstance(record, dict) or key not in record or (fmt == "spans" and "words" not in record):
            need = '"words" and "spans"' if fmt == "spans" else '"tree"'
            raise InputError(f"expected a JSON object with {need} ({fmt} format)", *where)
        if fmt == "spans":
            if not isinstance(record["words"], list):
                raise InputError(f'"words": expected a list of words, found {_shown(record["words"])}', *where)
            tree = tree_from_spans([str(w) for w in record["words"]], record["spans"], where)
        else:
            tree = tree_from_nested(record["tree"], where)
        out.append(LocatedTree(tree, str(path), number))
        if progress is not None and number % 500 == 0:
            progress(number, last + 1)
    if not out:
        raise InputError("no predicted trees in this file", str(path), 1)
    return out


def read_predictions(path, fmt: str = "auto", progress: Callable[[int, int], None] | None = None,
                     ) -> tuple[list[LocatedTree], str]:
    """``(trees, format)`` of a predictions file in ``fmt`` (one of :data:`FORMATS`; ``auto`` detects it)."""
    if fmt not in FORMATS:
        raise InvalidValueError(f"--pred-format {fmt}: choose one of {', '.join(FORMATS)}")
    path = Path(path)
    if fmt == "auto":
        fmt = detect_format(path)
    if fmt in ("spans", "diora"):
        return _read_json_lines(path, fmt, progress), fmt
    return read_trees(path, one_per_line=True, progress=progress), fmt


def fill_one_word_sentences(located: Sequence[LocatedTree], gold_lengths: Sequence[int], fmt: str,
                            path, fits: Callable[[int, LocatedTree], bool] | None = None) -> tuple[list, str | None]:
    """Predictions aligned one to one with the gold sentences. A ``kim`` file with exactly one line fewer
    per gold sentence of one word (``gold_lengths``: words after the word-tag filter) gets the only tree of
    that word in its place, and a note saying so; any other count mismatch is an :class:`InputError`.
    It names the first line whose tree does not ``fits(gold index, tree)`` its gold sentence (a line
    repeated or left out shifts every later one), and says when that line repeats the words of the line
    before; without ``fits``, or when every line fits, the first line past the shorter of the two."""
    located = list(located)
    if len(located) == len(gold_lengths):
        return located, None
    one_word = [k for k, n in enumerate(gold_lengths) if n == 1]
    if fmt == "kim" and len(located) == len(gold_lengths) - len(one_word):
        filled = iter(located)
        out = [None if k in set(one_word) else next(filled) for k in range(len(gold_lengths))]
        note = (f"{path}: {len(located):,} trees for {len(gold_lengths):,} gold sentences; the {len(one_word)} of one "
                "word (compound-pcfg's eval.py writes no line for them) get their only tree")
        return out, note
    hint = ""
    if fmt == "kim" and one_word:
        hint = f" ({len(one_word)} gold sentences have one word, which Kim's eval.py writes no line for)"
    counts = f"{len(located)} predicted trees but {len(gold_lengths)} gold trees"
    if fits is not None:
        skipped = set(one_word) if fmt == "kim" and len(located) < len(gold_lengths) else set()
        golds = [k for k in range(len(gold_lengths)) if k not in skipped]
        for position, (item, gold) in enumerate(zip(located, golds)):
            if not fits(gold, item):
                repeat = ""
                if position and _leaves(located[position - 1].tree) == _leaves(item.tree):
                    repeat = f"; it has the words of line {located[position - 1].line} (a repeated line?)"
                raise CountMismatchError(f"{counts}: the first tree whose words are not those of its gold sentence "
                                         f"(sentence {gold + 1}){repeat}{hint}", item.path, item.line)
    where = located[len(gold_lengths)] if len(located) > len(gold_lengths) else None
    first = min(len(located), len(gold_lengths)) + 1
    raise CountMismatchError(f"{counts} (first unmatched sentence: {first}){hint}",
                             where.path if where else str(path), where.line if where else None)


def _leaves(tree: nltk.Tree) -> list:
    return [leaf for leaf, _, _ in tagged_leaves(tree)]

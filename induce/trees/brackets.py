"""Reading and writing bracketed (Penn Treebank style) trees with NLTK tree I/O.

A tree file is any sequence of top-level bracketed trees separated by whitespace:
one tree per line (``22.auto.clean``, ``<split>.gold.txt``) or the original multi-line
``.mrg`` format of the treebank. The file is scanned first to find where each tree starts
and ends, so that errors can name the file and the line; each top-level bracket is then
read by :func:`tree_from_text`, which builds the same ``nltk.Tree`` as
:meth:`nltk.Tree.fromstring` but has no depth limit (nltk refuses trees nested more than
500 deep: a right-branching tree of a 600-word sentence).

Convention for the outer bracket: it is **kept**. The ``.mrg`` wrapper ``( (S ...) )``
is read as ``Tree('', [Tree('S', ...)])`` (label ``''``); ``(TOP (S ...))`` keeps ``TOP``.
:func:`induce.trees.ptb.clean_tree` turns an empty outer label into ``ROOT``.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterable, NamedTuple, Optional, Union

import nltk
import numpy as np

from induce.errors import InputError
from induce.files import os_error_reason, write_output

PathLike = Union[str, Path]

_OPEN, _CLOSE, _NEWLINE = ord("("), ord(")"), ord("\n")


class LocatedTree(NamedTuple):
    """A tree together with where it was read: ``path`` and 1-based ``line`` of its ``(``."""

    tree: nltk.Tree
    path: str
    line: int


def _decode_utf8(data: bytes, path: str) -> str:
    """Decode ``data`` as UTF-8, or raise InputError naming the line of the first bad byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        raise InputError(
            f"not valid UTF-8 (byte 0x{data[err.start]:02x} at file offset {err.start})", path, line
        ) from None


def bracket_spans(data: bytes, path: str) -> list[tuple[int, int]]:
    """Byte ranges ``[start, end)`` of the top-level bracketed trees in ``data`` (a file's bytes).

    Vectorised with numpy (the 27 MB WSJ training file has ~4M brackets): the bracket
    depth after each byte is a cumulative sum of +1 for ``(`` and -1 for ``)``.
    Raises InputError naming ``path`` and the line for brackets that do not balance (a ``)``
    without its ``(``; a tree not closed by the end of the file, as a truncated file ends: the
    line where that tree starts) and for text outside brackets.
    """
    arr = np.frombuffer(data, dtype=np.uint8)
    is_open = arr == _OPEN
    is_close = arr == _CLOSE
    steps = is_open.astype(np.int32) - is_close.astype(np.int32)
    depth = np.cumsum(steps, dtype=np.int64)  # depth[i] = depth after byte i

    def line_of(offset: int) -> int:
        return data.count(b"\n", 0, offset) + 1

    negative = np.flatnonzero(depth < 0)
    if negative.size:
        offset = int(negative[0])
        raise InputError("unbalanced brackets: ')' without a matching '('", path, line_of(offset))
    starts = np.flatnonzero(is_open & (depth == 1))
    ends = np.flatnonzero(is_close & (depth == 0)) + 1
    if depth.size and depth[-1] != 0:
        # The last tree that starts never closes.
        offset = int(starts[-1]) if starts.size else 0
        raise InputError(
            f"unbalanced brackets: the tree that starts on this line is not closed by the end of the file "
            f"({int(depth[-1])} '(' left open: is the file cut short?)", path, line_of(offset)
        )
    # Anything that is not whitespace at depth 0 is stray text (e.g. a missing '(').
    outside = depth == 0
    outside &= ~is_close  # a closing bracket that returns to depth 0 belongs to its tree
    stray = np.flatnonzero(outside & ~np.isin(arr, np.frombuffer(b" \t\r\n\f\v", dtype=np.uint8)))
    if stray.size:
        offset = int(stray[0])
        snippet = data[offset : offset + 20].split(b"\n")[0].decode("utf-8", "replace")
        raise InputError(f"text outside any bracketed tree: {snippet!r}", path, line_of(offset))
    return list(zip(starts.tolist(), ends.tolist()))


def start_lines_of(data: bytes, spans: list[tuple[int, int]]) -> list[int]:
    """The 1-based line of ``data`` on which each span of :func:`bracket_spans` starts."""
    newline_offsets = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
    return (np.searchsorted(newline_offsets, [start for start, _ in spans]) + 1).tolist()


def _check_one_per_line(data: bytes, spans: list[tuple[int, int]], start_lines: list[int], path: str) -> None:
    """In a one-tree-per-line file, refuse blank lines before the last tree and two trees on one line.

    A file where some tree spans several lines is multi-line ``.mrg`` layout, where blank lines
    merely separate trees: it is not checked.
    """
    newline_offsets = np.flatnonzero(np.frombuffer(data, dtype=np.uint8) == _NEWLINE)
    end_lines = (np.searchsorted(newline_offsets, [end - 1 for _, end in spans]) + 1).tolist()
    if any(start != end for start, end in zip(start_lines, end_lines)):
        return
    for previous, line in zip(start_lines, start_lines[1:]):
        if line == previous:
            raise InputError("two trees on one line (a predicted-trees file has one tree per line)", path, line)
    for number, text in enumerate(data.split(b"\n")[: end_lines[-1]], start=1):
        if not text.strip():
            raise InputError(
                "blank line: a predicted-trees file has one tree per line (line i is sentence i), so a "
                "blank line would shift every later tree onto the wrong gold sentence; remove it or put "
                "that sentence's tree there",
                path,
                number,
            )


#: nltk's default tokens: ``(`` and its label, ``)``, or a leaf; a backslash-escaped bracket is part of a
#: label or leaf.
_TOKEN = re.compile(r"\(\s*((?:\\[()]|[^\s()])*)|\)|((?:\\[()]|[^\s()])+)")


def tree_from_text(text: str, path: Optional[str] = None, line: Optional[int] = None) -> nltk.Tree:
    """The ``nltk.Tree`` of one bracketed tree, as :meth:`nltk.Tree.fromstring` builds it, without a depth
    limit: one pass over the tokens with an explicit stack, however deep the tree. Raises
    :class:`InputError` (naming ``path`` and ``line``) for text that is not exactly one tree."""
    stack: list = [("", [])]
    for match in _TOKEN.finditer(text):
        label, leaf = match.group(1), match.group(2)
        if label is not None:
            if len(stack) == 1 and stack[0][1]:
                raise InputError("cannot parse tree: a second tree after the first", path, line)
            stack.append((label, []))
        elif leaf is not None:
            if len(stack) == 1:
                raise InputError(f"cannot parse tree: {leaf!r} outside the brackets", path, line)
            stack[-1][1].append(leaf)
        else:
            if len(stack) == 1:
                raise InputError("cannot parse tree: ')' without a matching '('", path, line)
            label, children = stack.pop()
            stack[-1][1].append(nltk.Tree(label, children))
    if len(stack) > 1:
        raise InputError(f"cannot parse tree: {len(stack) - 1} '(' not closed", path, line)
    if not stack[0][1]:
        raise InputError("cannot parse tree: no bracketed tree", path, line)
    return stack[0][1][0]


def read_trees(
    path: PathLike, progress: Optional[Callable[[int, int], None]] = None, one_per_line: bool = False
) -> list[LocatedTree]:
    """All top-level bracketed trees of a file, in order, with the line each starts on.

    Accepts one tree per line and multi-line ``.mrg``. Raises :class:`InputError`
    (message ``path:line: ...``) for non-UTF-8 bytes, unbalanced brackets, text outside
    brackets, a bracket NLTK cannot parse, and a file with no trees at all.
    ``one_per_line`` (predicted trees): when every tree is on a line of its own, a blank line
    before the last tree, or two trees on one line, is an error naming that line.
    """
    path_str = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as err:
        raise InputError(f"cannot read: {os_error_reason(err)}", path_str) from None
    _decode_utf8(data, path_str)  # validate once; spans below are byte offsets
    spans = bracket_spans(data, path_str)
    if not spans:
        raise InputError("no trees found (expected bracketed trees such as '(S (NP ...) (VP ...))')", path_str, 1)
    start_lines = start_lines_of(data, spans)
    if one_per_line:
        _check_one_per_line(data, spans, start_lines, path_str)
    located = []
    for index, ((start, end), line) in enumerate(zip(spans, start_lines)):
        if progress is not None and index % 500 == 0:
            progress(index, len(spans))
        tree = tree_from_text(data[start:end].decode("utf-8"), path_str, line)
        located.append(LocatedTree(tree, path_str, line))
    if progress is not None:
        progress(len(spans), len(spans))
    return located


def _nltk_leaf_text(leaf) -> str:
    """A leaf as nltk's one-line ``pformat`` writes it (a string as it is, a tagged pair as ``word/tag``)."""
    if isinstance(leaf, str):
        return leaf
    if isinstance(leaf, tuple):
        return "/".join(leaf)
    return repr(leaf)


_CLOSE_NODE = object()  # stack marker in flat_tree_text (a leaf may be any string, ")" included)
_SEPARATOR = object()


def flat_tree_text(
    tree: nltk.Tree,
    open_node: Callable[[nltk.Tree], str],
    leaf_text: Callable[[object], str],
    separator: str = " ",
    close_node: str = ")",
) -> str:
    """``tree`` written on one line: ``open_node(node)``, the children joined by ``separator``,
    ``close_node``; a leaf as ``leaf_text(leaf)``.

    Written with an explicit stack, so that the time is linear in the size of the tree and
    there is no recursion however deep it is: a right-branching tree of a long sentence is as deep
    as the sentence is long, and nltk's recursive ``pformat`` builds each subtree's string anew at
    every level above it (quadratic in the depth, and a RecursionError past the interpreter's limit).
    """
    parts: list[str] = []
    stack: list[object] = [tree]
    while stack:
        item = stack.pop()
        if item is _CLOSE_NODE:
            parts.append(close_node)
        elif item is _SEPARATOR:
            parts.append(separator)
        elif isinstance(item, nltk.Tree):
            parts.append(open_node(item))
            stack.append(_CLOSE_NODE)
            children = list(item)  # (list iteration: nltk's __getitem__ is slow)
            for child in reversed(children[1:]):
                stack.append(child)
                stack.append(_SEPARATOR)
            if children:
                stack.append(children[0])
        else:
            parts.append(leaf_text(item))
    return "".join(parts)


def copy_tree(tree: nltk.Tree) -> nltk.Tree:
    """A copy of ``tree``'s nodes (the leaves are shared: strings), without recursion (nltk's
    ``copy(deep=True)`` recurses once per level)."""
    root = nltk.Tree(tree.label(), list(tree))
    stack = [root]
    while stack:
        node = stack.pop()
        for index, child in enumerate(list(node)):
            if isinstance(child, nltk.Tree):
                copied = nltk.Tree(child.label(), list(child))
                list.__setitem__(node, index, copied)
                stack.append(copied)
    return root


def _bracket_open(node: nltk.Tree) -> str:
    label = node.label()
    return f"({label if isinstance(label, str) else repr(label)} "


def tree_to_line(tree: nltk.Tree, leaf_text: Optional[Callable[[object], str]] = None) -> str:
    """One-line bracket string of ``tree`` (``(S (NP (DT the) (NN cat)) (VP (VBD sat)))``).

    Inverse of :meth:`nltk.Tree.fromstring` for treebank trees (leaves without spaces or
    brackets). An empty root label gives ``( (S ...))``, which reads back as label ``''``.
    The same text as nltk's ``tree.pformat(margin=infinity)``, in linear time and without
    recursion (see :func:`flat_tree_text`). ``leaf_text`` writes a leaf (default: as nltk does).
    """
    return flat_tree_text(tree, _bracket_open, leaf_text or _nltk_leaf_text)


def write_trees(path: PathLike, trees: Iterable[nltk.Tree]) -> None:
    """Write ``trees`` one per line (see :func:`tree_to_line`) with :func:`induce.files.write_output`."""
    write_output(path, "".join(tree_to_line(tree) + "\n" for tree in trees))


def nltk_corpus_reader(folder: PathLike, fileids: str = r"wsj_.*\.mrg"):
    """An NLTK ``BracketParseCorpusReader`` on ``folder``, wherever it is.

    NLTK 3.10 refuses readers outside its data roots (``PermissionError: Security
    Violation``), so the folder is appended to ``nltk.data.path`` first when it is not
    under one. Note that this reader drops the empty outer bracket of ``.mrg`` trees
    (``( (S ...) )`` -> ``(S ...)``), while :func:`read_trees` keeps it.
    """
    from nltk.corpus.reader import BracketParseCorpusReader

    folder_path = Path(folder).resolve()
    roots = [Path(entry).resolve() for entry in nltk.data.path if isinstance(entry, str)]
    if not any(folder_path == root or root in folder_path.parents for root in roots):
        nltk.data.path.append(str(folder_path))
    return BracketParseCorpusReader(str(folder_path), fileids)

"""Tree I/O: reading single-line and multi-line tree files, NLTK readers, errors naming path:line."""
from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import nltk
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from induce.errors import InputError
from induce.trees.brackets import nltk_corpus_reader, read_trees, tree_to_line, write_trees

MULTILINE = """( (S
    (NP-SBJ (DT The) (NN cat) )
    (VP (VBD sat)
      (PP-LOC (IN on)
        (NP (DT the) (NN mat) )))
    (. .) ))
( (S
    (NP-SBJ-1 (PRP It) )
    (VP (VBD was)
      (VP (VBN seen)
        (NP (-NONE- *-1) )))
    (. .) ))
"""
ONE_PER_LINE = "(TOP (S (NP (DT a) (NN dog)) (VP (VBZ barks))))\n\n(TOP (S (NP (PRP he)) (VP (VBD left))))\n"


def write(path: Path, text: str | bytes) -> Path:
    path.write_bytes(text if isinstance(text, bytes) else text.encode("utf-8"))
    return path


def test_multiline_mrg_keeps_empty_root_and_lines(tmp_path):
    trees = read_trees(write(tmp_path / "a.mrg", MULTILINE))
    assert [t.line for t in trees] == [1, 7]
    assert all(t.path == str(tmp_path / "a.mrg") for t in trees)
    first = trees[0].tree
    assert first.label() == "" and first[0].label() == "S"
    assert first.leaves() == ["The", "cat", "sat", "on", "the", "mat", "."]
    assert trees[1].tree.pos()[3] == ("*-1", "-NONE-")


def test_one_tree_per_line(tmp_path):
    trees = read_trees(write(tmp_path / "b.txt", ONE_PER_LINE))
    assert [t.line for t in trees] == [1, 3]
    assert trees[1].tree.label() == "TOP"
    assert trees[1].tree.leaves() == ["he", "left"]


def test_tree_to_line_round_trips_and_write_trees(tmp_path):
    trees = [t.tree for t in read_trees(write(tmp_path / "a.mrg", MULTILINE))]
    line = tree_to_line(trees[0])
    assert "\n" not in line and line.startswith("( (S (NP-SBJ (DT The)")
    assert nltk.Tree.fromstring(line) == trees[0]
    out = tmp_path / "out" / "trees.txt"
    write_trees(out, trees)
    assert out.read_text().count("\n") == 2
    assert [t.tree for t in read_trees(out)] == trees
    assert sorted(p.name for p in out.parent.iterdir()) == ["trees.txt"]  # no temp file left


def test_nltk_reader_inside_data_path_agrees(tmp_path, monkeypatch):
    folder = tmp_path / "inside"
    folder.mkdir()
    write(folder / "wsj_0001.mrg", MULTILINE)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    reader = nltk_corpus_reader(folder)
    assert nltk.data.path == [str(tmp_path)]  # already under a root: path unchanged
    ours = [t.tree for t in read_trees(folder / "wsj_0001.mrg")]
    # NLTK's reader drops the empty outer bracket; ours keeps it.
    assert list(reader.parsed_sents()) == [tree[0] for tree in ours]


def test_nltk_reader_outside_data_path(tmp_path, monkeypatch):
    folder = tmp_path / "outside"
    folder.mkdir()
    write(folder / "wsj_0002.mrg", MULTILINE)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path / "somewhere-else")])
    reader = nltk_corpus_reader(folder)
    assert str(folder.resolve()) in nltk.data.path
    ours = [t.tree for t in read_trees(folder / "wsj_0002.mrg")]  # not subject to NLTK's path check
    assert list(reader.parsed_sents()) == [tree[0] for tree in ours]


@pytest.mark.parametrize(
    "text, line, reason",
    [
        ("(S (NP (DT a)) (VP (VB b)))\n(S (NP x)))\n", 2, "without a matching"),
        ("(S (NP (DT a)))\n\n( (S (NP (DT a))\n  (VP (VB b))\n", 3, "not closed"),
        ("(S (NP (DT a)))\nstray words\n", 2, "outside"),
        ("\n\n   \n", 1, "no trees"),
    ],
)
def test_bad_input_names_path_and_line(tmp_path, text, line, reason):
    path = write(tmp_path / "bad.mrg", text)
    with pytest.raises(InputError) as info:
        read_trees(path)
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert reason in str(info.value)
    assert info.value.path == str(path) and info.value.line == line


def test_non_utf8_names_line_of_first_bad_byte(tmp_path):
    path = write(tmp_path / "latin1.mrg", b"(S (NP (DT a)))\n(S (NP (NN caf\xe9)))\n(S (NP (NN \xff)))\n")
    with pytest.raises(InputError) as info:
        read_trees(path)
    assert str(info.value).startswith(f"{path}:2: ")
    assert "UTF-8" in str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(InputError, match="cannot read"):
        read_trees(tmp_path / "nope.mrg")


def test_real_nltk_sample_file_if_available():
    root = os.environ.get("INDUCE_DATA")
    if not root or not (Path(root) / "nltk_treebank" / "wsj_0001.mrg").is_file():
        pytest.skip("INDUCE_DATA with nltk_treebank/ not available")
    folder = Path(root) / "nltk_treebank"
    ours = [t.tree for t in read_trees(folder / "wsj_0003.mrg")]
    reader = nltk_corpus_reader(folder, r"wsj_0003\.mrg")
    assert [tree[0] for tree in ours] == list(reader.parsed_sents())


# ------------------------------------------------------------------ one-line writing, however deep

LABELS = st.sampled_from(["S", "NP", "", "TOP", "-NONE-"])
LEAVES = st.sampled_from(["a", "the", ")", "(", "-LRB-", "[/x]", "\u00e9t\u00e9", "'s", '"', "x y"])


@st.composite
def nltk_trees(draw, depth=4):
    """Random trees of any shape: empty nodes, unary chains, wide nodes, odd leaves and labels."""
    if depth == 0 or draw(st.integers(0, 3)) == 0:
        return nltk.Tree(draw(LABELS), draw(st.lists(LEAVES, max_size=3)))
    children = draw(st.lists(st.one_of(LEAVES, nltk_trees(depth - 1)), max_size=4))
    return nltk.Tree(draw(LABELS), children)


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(nltk_trees())
def test_tree_to_line_is_nltks_one_line_format(tree):
    assert tree_to_line(tree) == tree.pformat(margin=1 << 62)
    assert tree_to_line(tree, str.upper) == tree_to_line(tree_upper_leaves(tree))


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(nltk_trees())
def test_copy_tree_copies_every_node(tree):
    from induce.trees.brackets import copy_tree

    copied = copy_tree(tree)
    assert copied == tree
    nodes = lambda t: [t[p] for p in t.treepositions() if isinstance(t[p], nltk.Tree)]  # noqa: E731
    assert not {id(node) for node in nodes(copied)} & {id(node) for node in nodes(tree)}


def tree_upper_leaves(tree):
    copy = tree.copy(deep=True)
    for position in copy.treepositions("leaves"):
        copy[position] = copy[position].upper()
    return copy


@contextmanager
def recursion_limit(limit: int):
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(limit)
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def right_branching(n: int) -> nltk.Tree:
    tree = nltk.Tree("S", [f"w{n - 2}", f"w{n - 1}"])
    for i in range(n - 3, -1, -1):
        tree = nltk.Tree("S", [f"w{i}", tree])
    return tree


def test_tree_to_line_of_a_200k_deep_tree_does_not_recurse():
    """A right-branching tree over a 200k-token line is 200k levels deep: nltk's recursive pformat
    fails past the recursion limit (and is quadratic in the depth); the writer uses no recursion."""
    n = 200_000
    tree = right_branching(n)
    with recursion_limit(200):
        line = tree_to_line(tree)
    expected = "".join(f"(S w{i} " for i in range(n - 1)) + f"w{n - 1}" + ")" * (n - 1)
    assert line == expected

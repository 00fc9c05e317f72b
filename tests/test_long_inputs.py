"""Long sentences and deep trees are read and scored without recursion limits: bracketed trees (nltk's
reader stops at depth 500), JSON span lists and DIORA's nested lists (Python's json stops near depth
1,000), and every tree walk of the evaluator (Python stops at 1,000 frames)."""
from __future__ import annotations

import json
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.errors import InputError
from induce.trees.brackets import bracket_spans, read_trees, tree_from_text
from induce.trees.formats import load_json, tree_from_nested, tree_from_spans
from induce.trees.nodes import (
    build_binary,
    from_index_tree,
    from_nltk,
    index_tree_from_nltk,
    prune,
    tagged_leaves,
    to_nltk,
    tree_spans,
)
from induce.trees.ptb import clean_tree
from induce.trees.transforms import binarise, collapse_unary, relabel_brackets, with_preterminals

runner = CliRunner()
DATA = Path(__file__).parent / "data"
DEEP = 3000  # words: three times past Python's default recursion limit


def invoke(*args):
    return runner.invoke(app, [*map(str, args), "--no-progress"])


def right_branching_text(n: int, leaf=lambda i: f"w{i}", label: str = "S") -> str:
    """``(S w0 (S w1 (... (S wn-2 wn-1))))``, built without recursion."""
    text = leaf(n - 1)
    for i in range(n - 2, -1, -1):
        text = f"({label} {leaf(i)} {text})"
    return text


def gold_line(n: int) -> str:
    """A right-branching gold tree of ``n`` nouns, as a treebank writes it."""
    return f"(ROOT {right_branching_text(n, lambda i: f'(NN w{i})', 'NP')})\n"


def nested_text(n: int) -> str:
    text = json.dumps(f"w{n - 1}")
    for i in range(n - 2, -1, -1):
        text = f'["w{i}", {text}]'
    return text


def test_a_600_word_right_branching_tree_is_read(tmp_path):
    """nltk refuses it ('Raise nltk.tree.tree.MAX_TREE_DEPTH'); read_trees builds the same tree."""
    path = tmp_path / "deep.txt"
    path.write_text(gold_line(600))
    (located,) = read_trees(path)
    assert [leaf for leaf, _, _ in tagged_leaves(located.tree)] == [f"w{i}" for i in range(600)]
    assert tree_spans(located.tree) == {(i, 600) for i in range(599)}


def test_the_reader_builds_what_nltk_builds():
    for path in (DATA / "conventions" / "gold.mrg", DATA / "conventions" / "pred_model.punct.txt"):
        data = path.read_bytes()
        texts = [data[start:end].decode() for start, end in bracket_spans(data, str(path))]
        assert [located.tree for located in read_trees(path)] == [nltk.Tree.fromstring(text) for text in texts]
    for text in ("( (S (NP a) b))", "(S)", "(S ())", "(A (B) (C d))", r"(S a\) b)"):
        assert tree_from_text(text) == nltk.Tree.fromstring(text)
    with pytest.raises(InputError, match="x.txt:3: cannot parse tree"):
        tree_from_text("(S a) (S b)", "x.txt", 3)


def test_a_long_right_branching_prediction_scores_under_every_convention(tmp_path):
    gold, pred = tmp_path / "gold.txt", tmp_path / "pred.txt"
    gold.write_text(gold_line(DEEP))
    pred.write_text(right_branching_text(DEEP) + "\n")
    plain = invoke("eval", pred, "--gold", gold, "--json")
    assert plain.exit_code == 0, plain.output
    assert json.loads(plain.stdout)["corpus_f1"] == 100.0
    every = invoke("eval", pred, "--gold", gold, "--convention", "all", "--gold-variant", "nary", "--json",
                   "--resamples", "5")
    assert every.exit_code == 0, every.output
    results = {row["convention"]: row for row in json.loads(every.stdout)["results"]}
    assert all(row["n_sentences"] + row["n_skipped"] == 1 and row["n_errors"] == 0 for row in results.values())
    assert results["kim2019"]["figures"]["corpus_f1"] == 100.0 and results["li2020"]["n_sentences"] == 1
    assert results["prpn"]["n_skipped"] == 1  # WSJ10's limit


def test_a_3000_word_span_list_and_a_3000_deep_diora_tree(tmp_path):
    words = [f"w{i}" for i in range(DEEP)]
    spans = tmp_path / "spans.jsonl"
    spans.write_text(json.dumps({"words": words, "spans": [[i, DEEP] for i in range(DEEP - 1)]}) + "\n")
    diora = tmp_path / "diora.jsonl"
    diora.write_text('{"tree": ' + nested_text(DEEP) + "}\n")
    gold = tmp_path / "gold.txt"
    gold.write_text(gold_line(DEEP))
    for pred in (spans, diora):
        result = invoke("eval", pred, "--gold", gold, "--json")
        assert result.exit_code == 0, result.output
        assert json.loads(result.stdout)["corpus_f1"] == 100.0
    agreement = invoke("eval", "--agreement", spans, diora, "--gold", gold, "--json")
    assert agreement.exit_code == 0, agreement.output
    assert json.loads(agreement.stdout)["matrix"] == [[100.0, 100.0], [100.0, 100.0]]
    compare = invoke("eval", "--compare", spans, diora, "--gold", gold, "--json", "--resamples", "5")
    assert compare.exit_code == 0, compare.output
    assert json.loads(compare.stdout)["p_value"] == 1.0


@pytest.mark.slow
def test_an_ensemble_of_long_trees_is_written(tmp_path):
    n = 1050  # deeper than the recursion limit; the CKY takes a quadratic number of numpy steps
    gold, out = tmp_path / "gold.txt", tmp_path / "ens.txt"
    gold.write_text(gold_line(n))
    members = []
    for name in ("a", "b", "c"):
        members.append(tmp_path / f"{name}.txt")
        members[-1].write_text(right_branching_text(n) + "\n")
    result = invoke("ensemble", *members, "--gold", gold, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["ensemble"] == 100.0
    assert out.read_text() == right_branching_text(n) + "\n"


def test_span_lists_take_integers_only(tmp_path):
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NN a) (NN b) (NN c))\n")
    for spans, message in (([[True, 3]], "span [true, 3]: expected [start, end]"),
                           ([[0, 2.0]], "span [0, 2.0]: expected [start, end]"),
                           ("[0, 2]", '"spans": expected a list')):
        pred = tmp_path / "pred.jsonl"
        pred.write_text(json.dumps({"words": ["a", "b", "c"], "spans": spans}) + "\n")
        result = invoke("eval", pred, "--gold", gold)
        assert result.exit_code == 2, result.output
        assert f"pred.jsonl:1: {message}" in result.output
    pred.write_text(json.dumps({"words": "abc", "spans": [[0, 2]]}) + "\n")
    result = invoke("eval", pred, "--gold", gold)
    assert result.exit_code == 2 and '"words": expected a list of words' in result.output
    with pytest.raises(InputError, match="expected"):
        tree_from_spans(["a", "b"], [[0, True]])


def test_deep_json_is_read_as_json_reads_shallow_json():
    deep = nested_text(DEEP)
    with pytest.raises(RecursionError):
        json.loads(deep)
    value = load_json('{"tree": ' + deep + ', "x": [1, -2.5e3, true, false, null, "a\\"\\u00e9"], "y": {}}')
    assert value["x"] == [1, -2500.0, True, False, None, 'a"é'] and value["y"] == {}
    depth, item = 0, value["tree"]
    while isinstance(item, list):
        depth, item = depth + 1, item[1]
    assert depth == DEEP - 1 and item == f"w{DEEP - 1}"
    for bad in ("[" * 2000 + "1,]" + "]" * 1999, "[" * 2000 + "]" * 2001, "[" * 2000 + "1" + "]" * 1999,
                "[" * 2000 + '{"a" 1}' + "]" * 2000, "[" * 2000 + "]" * 2000 + " x"):
        with pytest.raises(ValueError):
            load_json(bad)
    nested = tree_from_nested(load_json(deep))
    assert [leaf for leaf, _, _ in tagged_leaves(nested)] == [f"w{i}" for i in range(DEEP)]


def test_the_tree_walks_do_not_recurse():
    n = DEEP
    text = right_branching_text(n, lambda i: f"(NN w{i})", "NP")
    tree = tree_from_text(f"(ROOT {text})")
    words = [f"w{i}" for i in range(n)]
    assert [(leaf, pos) for leaf, pos, _ in tagged_leaves(tree)] == [(w, "NN") for w in words]
    cleaned = clean_tree(tree, keep_punct=False)
    node = from_nltk(cleaned)
    assert (node.start, node.end) == (0, n)
    kept = prune(node, [i % 2 == 0 for i in range(n)])
    assert kept.end == (n + 1) // 2
    assert tree_spans(collapse_unary(kept)) == tree_spans(kept)
    assert tree_spans(binarise(node, "left")) == tree_spans(node)
    assert tree_spans(relabel_brackets(with_preterminals(node, "DT"), "S")) == tree_spans(node)
    binary = build_binary(0, n, lambda a, b: a + 1)
    assert tree_spans(binary) == {(i, n) for i in range(n - 1)}
    assert tree_spans(index_tree_from_nltk(to_nltk(binary, words))) == tree_spans(binary)
    assert tree_spans(from_index_tree(binary)) == tree_spans(to_nltk(binary, words))

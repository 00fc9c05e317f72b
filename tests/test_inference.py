"""Inference on a trained run: latest run, loading, parsing raw tokens, formats, perplexity, generation."""
from __future__ import annotations

import json
import math
import os
import sys
import time
from pathlib import Path

import nltk
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from induce.config import load_config
from induce.errors import InduceError
from induce.inference.language_model import generate, lm_perplexity
from induce.inference.loading import load_run
from induce.inference.predict import format_tree, parse_lines, predict_trees, tokenize
from induce.inference.runs import latest_run
from induce.training import train
from induce.training.checkpoint import CheckpointError
from induce.trees.decoders import peel_tree
from induce.trees.nodes import to_nltk

from helpers import STANDIN, make_corpus

pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("inference")
    corpus = make_corpus(root / "corpora")
    torch.set_num_threads(1)
    cfg = load_config(STANDIN, overrides=[
        f"data.corpus={corpus}", "data.batch_size=4", "data.bptt=8", "optim.lr=3", "optim.asgd=never",
        "train.epochs=2", "train.device=cpu", "train.dev_f1=false",
    ])
    train(cfg, root / "runs" / "tiny", console=Console(quiet=True), progress=False)
    return root / "runs" / "tiny", corpus


def test_latest_run_takes_the_newest_finished_one(tmp_path, trained):
    run, _ = trained
    with pytest.raises(InduceError, match="no finished run"):
        latest_run(tmp_path / "runs")
    runs = tmp_path / "runs"
    for name, state in (("a", "finished"), ("b", "finished"), ("c", "running")):
        (runs / name).mkdir(parents=True)
        (runs / name / "best.json").write_text("{}")
        (runs / name / "status.json").write_text(json.dumps({"state": state}))
        time.sleep(0.01)
    os.utime(runs / "a" / "status.json", ns=(time.time_ns(), time.time_ns() + 10**9))  # finished last
    assert latest_run(runs) == runs / "a"
    assert latest_run(run.parent) == run


def test_load_run_refuses_missing_and_damaged(tmp_path, trained):
    run, _ = trained
    with pytest.raises(InduceError, match="no such run"):
        load_run(tmp_path / "nothing")
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for name in ("best.json", "best.safetensors"):
        (damaged / name).write_bytes((run / name).read_bytes())
    data = (damaged / "best.safetensors").read_bytes()
    (damaged / "best.safetensors").write_bytes(data[:-10])
    with pytest.raises(CheckpointError, match="damaged"):
        load_run(damaged)


def test_predict_trees_matches_the_decoder_on_normalised_tokens(trained):
    run, _ = trained
    loaded = load_run(run)
    words = ["The", "dog", "SAW", "3.5", "cats", "."]
    tree = predict_trees(loaded, [words])[0]
    assert tree.leaves() == words  # the original tokens
    # brute force: what the model's distances give for <eos> + normalised ids + <eos>, punctuation
    # left out (as in training) and attached at the top afterwards
    vocab = loaded.vocab
    ids = [vocab.eos_id] + vocab.encode(["the", "dog", "saw", "N", "cats"]) + [vocab.eos_id]
    distances = loaded.model.parse_structure(torch.tensor([ids]), torch.tensor([len(ids)]))["distances"][0]
    expected = to_nltk(peel_tree(distances[1:-1].tolist()), words[:5])
    assert tree == nltk.Tree("S", [expected, "."])
    # keep_punct shows the period to the model
    ids = [vocab.eos_id] + vocab.encode(["the", "dog", "saw", "N", "cats", "."]) + [vocab.eos_id]
    distances = loaded.model.parse_structure(torch.tensor([ids]), torch.tensor([len(ids)]))["distances"][0]
    assert predict_trees(loaded, [words], keep_punct=True)[0] == to_nltk(peel_tree(distances[1:-1].tolist()), words)


def test_punctuation_is_recognised_and_attached():
    from induce.inference.predict import _attach_punctuation, is_punctuation

    assert [w for w in ["$", "5", "%", "&", "--", "...", "-LRB-", "'s", "n't", "U.S.", ",", "``"]
            if is_punctuation(w)] == ["$", "--", "...", "-LRB-", ",", "``"]
    words = ["``", "The", "dog", ",", "barked", "''", "."]
    tree = _attach_punctuation(words, nltk.Tree.fromstring("(S (S The dog) barked)"), [1, 2, 4])
    # each mark joins the highest constituent ending just before it; leading marks join at the top
    assert tree == nltk.Tree.fromstring("(S `` (S (S (S (S (S The dog) ,) barked) '') .))")
    assert _attach_punctuation(["a", "."], nltk.Tree("S", ["a"]), [0]) == nltk.Tree("S", ["a", "."])
    assert _attach_punctuation([",", ".", "!"], None, []) == nltk.Tree.fromstring("(S , (S . !))")


def test_predict_trees_edge_cases(trained):
    run, _ = trained
    loaded = load_run(run)
    long = [f"w{i}" for i in range(23)]
    trees = predict_trees(loaded, [[], ["hello"], long, ["a", "b"]], max_length=10, batch_size=2)
    assert str(trees[0]) == "(S )"
    assert trees[1] == nltk.Tree("S", ["hello"])
    assert trees[2].leaves() == long
    # 23 words in pieces of 10, 10, 3 joined right-branching
    assert trees[2][0].leaves() == long[:10] and trees[2][1][0].leaves() == long[10:20]
    assert trees[2][1][1].leaves() == long[20:]
    assert trees[3].leaves() == ["a", "b"]
    # order of the input is kept although batches are sorted by length
    single = [predict_trees(loaded, [s])[0] for s in (["hello"], ["a", "b"])]
    assert single == [trees[1], trees[3]]


def test_format_tree_ptb_escapes_only_round_brackets():
    tree = nltk.Tree("S", [nltk.Tree("S", ["(", "x"]), nltk.Tree("S", [")", "y", "{", "[", "a(b"])])
    text = format_tree(tree, "ptb")
    assert text == "(S (S -LRB- x) (S -RRB- y { [ a-LRB-b))"
    assert nltk.Tree.fromstring(text).leaves() == ["-LRB-", "x", "-RRB-", "y", "{", "[", "a-LRB-b"]
    pretty = format_tree(nltk.Tree("S", [nltk.Tree("S", ["a", nltk.Tree("S", ["b", "c"])]), "d"]), "pretty")
    last = pretty.splitlines()[-1].split()
    assert last == ["a", "b", "c", "d"]
    assert format_tree(tree, "pretty").splitlines()[-1].split() == ["(", "x", ")", "y", "{", "[", "a(b"]


def test_tokenize_keeps_the_text_as_typed():
    line = 'He said "hi" (twice), didn\'t he? [x] {y}'
    tokens = tokenize(line)
    # the Treebank tokenizer's segmentation, but each token as typed (no ``/'' or -LRB-)
    assert tokens == ["He", "said", '"', "hi", '"', "(", "twice", ")", ",", "did", "n't", "he", "?",
                      "[", "x", "]", "{", "y", "}"]
    assert len(tokens) == len(nltk.tokenize.TreebankWordTokenizer().tokenize(line))
    assert tokenize("a  b\tc", pretokenized=True) == ["a", "b", "c"]


def test_parse_lines_leaves_are_the_tokens(trained):
    run, _ = trained
    lines = ['He said "hi" (twice).', "", "   ", "one"]
    out = parse_lines(run, lines)
    assert len(out) == 4
    leaves = nltk.Tree.fromstring(out[0]).leaves()
    assert leaves == ["He", "said", '"', "hi", '"', "-LRB-", "twice", "-RRB-", "."]
    assert out[1] == out[2] == "(S )" and out[3] == "(S one)"
    pretty = parse_lines(run, lines[:1], style="pretty")[0]
    assert pretty.splitlines()[-1].split() == tokenize(lines[0])
    # --pretokenized: the leaves are exactly the input tokens (no escapes, no re-tokenisation)
    line = "`` I did n\'t , \" { [ -LRB- x"
    tree = nltk.Tree.fromstring(parse_lines(run, [line], pretokenized=True)[0])
    assert tree.leaves() == line.split()
    brackets = "a ( b ) c"
    pretty = parse_lines(run, [brackets], pretokenized=True, style="pretty")[0]
    assert pretty.splitlines()[-1].split() == brackets.split()
    assert predict_trees(run, [brackets.split()])[0].leaves() == brackets.split()
    # json: lossless in one line per sentence, brackets included, for both tokenisations
    def flat(node):
        return [leaf for child in node for leaf in flat(child)] if isinstance(node, list) else [node]

    for text, pretokenized in ((brackets, True), (lines[0], False)):
        nested = json.loads(parse_lines(run, [text], pretokenized=pretokenized, style="json")[0])
        assert flat(nested) == (text.split() if pretokenized else tokenize(text))
    with pytest.raises(InduceError, match="decoder"):
        parse_lines(run, ["a b"], decoder="span")


def test_latest_run_looks_in_runs_and_results_runs(tmp_path, monkeypatch, trained):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InduceError, match=r"runs/ or results/runs/"):
        latest_run()
    for folder, stamp in ((tmp_path / "runs" / "old", 1), (tmp_path / "results" / "runs" / "new", 2)):
        folder.mkdir(parents=True)
        (folder / "best.json").write_text("{}")
        (folder / "status.json").write_text(json.dumps({"state": "finished"}))
        os.utime(folder / "status.json", ns=(stamp * 10**18, stamp * 10**18))
    assert latest_run() == Path("results") / "runs" / "new"
    assert latest_run("runs") == Path("runs") / "old"


def test_device_auto_is_cpu_without_cuda():
    from induce.inference.loading import resolve_device

    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected and resolve_device(None).type == expected
    assert resolve_device("cpu") == torch.device("cpu")
    with pytest.raises(InduceError, match="not a device"):
        resolve_device("gpu0")


def test_lm_perplexity_matches_training_metrics(trained):
    run, corpus = trained
    history = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    best = min(history, key=lambda line: line["valid_ppl"])
    assert math.isclose(lm_perplexity(run, corpus, "valid"), best["valid_ppl"], rel_tol=1e-9)
    assert lm_perplexity(run, corpus, "test") > 1.0


def test_sampling_is_seeded_and_temperature_sharpens(trained):
    run, _ = trained
    loaded = load_run(run)
    a = generate(loaded, n_words=30, seed=5)
    assert a == generate(loaded, n_words=30, seed=5) and len(a) == 30
    assert set(a) <= set(loaded.vocab.itos)
    cold = generate(loaded, n_words=30, temperature=1e-4, seed=1)
    assert cold == generate(loaded, n_words=30, temperature=1e-4, seed=2)  # ~argmax: seed no longer matters
    with pytest.raises(InduceError):
        generate(loaded, temperature=0)


def test_beam_one_is_greedy_decoding(trained):
    run, _ = trained
    loaded = load_run(run)
    model, vocab = loaded.model, loaded.vocab
    out = generate(loaded, n_words=12, beam=1)
    # brute force greedy: feed the argmax back until <eos> or 12 tokens
    tokens, context = [], [vocab.eos_id]
    with torch.no_grad():
        for _ in range(12):
            o = model(torch.tensor([context]), model.init_state(1))
            nxt = int(model.logits(o.hidden[:, -1]).argmax(-1))
            tokens.append(nxt)
            context.append(nxt)
            if nxt == vocab.eos_id:
                break
    assert out == vocab.decode(tokens)
    beam = generate(loaded, n_words=12, beam=4)
    assert 1 <= len(beam) <= 12 and (beam[-1] == "<eos>" or len(beam) == 12)


# ------------------------------------------------------------------ long lines: linear, no recursion


def attach_by_search(words, content_tree, content):
    """Brute force of the attachment rule: for each mark in order, search every node of the tree so far
    for the highest one whose last word is the token just before the mark, and wrap it."""
    if content_tree is None:
        return None
    tree = nltk.Tree("ROOT", [content_tree[0] if len(content) == 1 else content_tree])
    placed = list(content)
    for position in [p for p in range(content[0] + 1, len(words)) if p not in set(content)]:
        order = sorted(placed)
        spans = {}
        for tp in tree.treepositions():
            node = tree[tp]
            count = len(node.leaves()) if isinstance(node, nltk.Tree) else 1
            first = sum(len(tree[tp[:d] + (k,)].leaves()) if isinstance(tree[tp[:d] + (k,)], nltk.Tree) else 1
                        for d in range(len(tp)) for k in range(tp[d]))
            spans[tp] = (first, first + count - 1)
        ends_before = [tp for tp in spans if tp and order[spans[tp][1]] == position - 1]
        highest = min(ends_before, key=len)
        tree[highest] = nltk.Tree("S", [tree[highest], words[position]])
        placed.append(position)
    root = tree[0]
    for position in reversed(range(content[0])):
        root = nltk.Tree("S", [words[position], root])
    return root


@st.composite
def punctuated(draw):
    """``(words, content tree, content positions)``: a random binary tree over the content words."""
    n = draw(st.integers(1, 9))
    is_mark = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if all(is_mark):
        is_mark[draw(st.integers(0, n - 1))] = False
    words = [("," if mark else f"w{i}") for i, mark in enumerate(is_mark)]
    content = [i for i, mark in enumerate(is_mark) if not mark]

    def build(items):
        if len(items) == 1:
            return items[0]
        k = draw(st.integers(1, len(items) - 1))
        return nltk.Tree("S", [build(items[:k]), build(items[k:])])

    tree = build([words[i] for i in content])
    return words, tree if isinstance(tree, nltk.Tree) else nltk.Tree("S", [tree]), content


@settings(max_examples=200, deadline=None, derandomize=True, database=None)
@given(punctuated())
def test_attach_punctuation_matches_a_brute_force_search(case):
    from induce.inference.predict import _attach_punctuation

    words, tree, content = case
    before = tree.copy(deep=True)
    expected = attach_by_search(words, tree.copy(deep=True), content)
    assert _attach_punctuation(words, tree, content) == expected
    assert tree == before  # the caller's tree is not changed


@pytest.mark.slow
def test_a_200k_token_line_is_attached_and_formatted_without_recursion():
    """200k tokens, every third a comma, over a right-branching content tree (a long line parsed in
    pieces is joined right-branching): attaching the marks and writing the tree (ptb, json) use no
    recursion; nltk's pformat and a descent from the root per mark were quadratic in the depth."""
    from induce.inference.predict import _attach_punctuation, _join_right

    n = 200_000
    words = [("," if i % 3 == 0 else f"w{i}") for i in range(n)]
    content = [i for i in range(n) if i % 3]
    content_tree = _join_right([words[i] for i in content])
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(300)
    try:
        tree = _attach_punctuation(words, content_tree, content)
        line = format_tree(tree, "ptb")
        as_json = format_tree(tree, "json")
    finally:
        sys.setrecursionlimit(old)
    leaves = [token.rstrip(")") for token in line.split() if not token.startswith("(")]
    assert leaves == words
    assert line.count("(S") == n - 1 and as_json.count("[") == n - 1
    # each comma joins the word before it (that word's parent goes on past the comma)
    assert line.startswith("(S , (S w1 (S (S w2 ,) (S w4 (S (S w5 ,) (S w7 ")
    assert as_json.startswith('[",", ["w1", [["w2", ","], ["w4", [["w5", ","], ["w7", ')


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(punctuated())
def test_format_tree_json_is_json_of_the_nested_lists(case):
    words, tree, content = case

    def nested(node):
        return [nested(child) for child in node] if isinstance(node, nltk.Tree) else node

    tree = nltk.Tree("S", [tree, nltk.Tree("S", ['"q"', "\u00e9"]), nltk.Tree("S", [])])
    assert format_tree(tree, "json") == json.dumps(nested(tree), ensure_ascii=False)

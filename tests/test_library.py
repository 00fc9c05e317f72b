"""induce as a library: ``induce.load(RUN)``, ``run.parse`` (trees whose leaves are the tokens as given,
split as ``induce parse`` splits a line), ``run.score`` and ``run.perplexity`` (the figures of
``induce eval``, compared exactly), and a cheap ``import induce``."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

import induce
from induce.cli.main import app
from induce.errors import InduceError

from helpers import train_tiny_run

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("one_thread")
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return train_tiny_run(tmp_path_factory.mktemp("library"))


@pytest.fixture(scope="module")
def run(run_dir):
    return induce.load(run_dir, device="cpu")


def test_import_induce_is_cheap():
    code = ("import sys, induce; "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'nltk', 'numpy'));"
            "print(heavy); assert callable(induce.load) and induce.__version__")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_parse_returns_trees_over_the_tokens_as_given(run, run_dir, tmp_path):
    line = 'The cat didn\'t sit (twice) on "the" mat.'
    [tree] = run.parse([line])
    assert isinstance(tree, nltk.Tree)
    assert tree.leaves() == ["The", "cat", "did", "n't", "sit", "(", "twice", ")", "on", '"', "the", '"', "mat", "."]
    assert run.parse(line)[0] == tree  # one string is one sentence
    assert run.parse(["a  b-c d"], pretokenized=True)[0].leaves() == ["a", "b-c", "d"]
    assert run.parse([["New York", "is", "big"]])[0].leaves() == ["New York", "is", "big"]  # tokens as they are
    assert run.parse([""])[0] == nltk.Tree("S", [])
    # the same trees as `induce parse` writes, the same tokenisation rules
    lines = [line, "Stocks fell 5 % yesterday .", "one"]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
    for flags, pretok in (([], False), (["--pretokenized"], True)):
        result = runner.invoke(app, ["parse", str(tmp_path / "in.txt"), "--checkpoint", str(run_dir), "--device",
                                     "cpu", *flags])
        assert result.exit_code == 0, result.output
        ours = [induce.format_tree(t) for t in run.parse(lines, pretokenized=pretok)]
        assert result.stdout.splitlines() == ours
    assert run.model_name == "tiny-lstm" and run.path == Path(run_dir) and "tiny-lstm" in repr(run)


def test_score_equals_induce_eval_exactly(run, run_dir, tmp_path):
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (DT The) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))\n"
                    "( (S (NP-SBJ (NNS dogs)) (VP (VBP bark) (ADVP (RB very) (RB loudly)))) )\n"
                    "(S (NP (PRP It)) (VP (VBD rained)) (. .))\n")
    for flags, kwargs in (([], {}), (["--wsj10", "--keep-punct"], {"max_length": 10, "keep_punct": True}),
                          (["--count-root", "--multiset"], {"count_root": True, "multiset": True})):
        result = runner.invoke(app, ["eval", "--checkpoint", str(run_dir), "--gold", str(gold), "--json", "--device",
                                     "cpu", "--no-progress", *flags])
        assert result.exit_code == 0, result.output
        assert run.score(str(gold), **kwargs) == json.loads(result.stdout)
    # default: the dev split of the corpus the run was trained on, as `induce eval --checkpoint RUN`
    result = runner.invoke(app, ["eval", "--checkpoint", str(run_dir), "--json", "--device", "cpu", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert run.score() == json.loads(result.stdout)
    result = runner.invoke(app, ["eval", "--checkpoint", str(run_dir), "--lm", "--json", "--device", "cpu"])
    assert run.perplexity() == json.loads(result.stdout)["perplexity"]


def test_library_errors_are_induce_errors(run, tmp_path):
    with pytest.raises(InduceError, match="no such run folder"):
        induce.load(tmp_path / "nothing")
    with pytest.raises(InduceError, match="max_length"):
        run.score(max_length=0)
    with pytest.raises(InduceError, match="decoder"):
        run.parse(["a b"], decoder="span")


@pytest.mark.parametrize("sentences, named", [
    ([b"the cat sat"], r"sentence 1 is bytes b'the cat sat'.*decode"),  # was parsed as its numbers 116 104 ...
    ([123], "sentence 1 is int 123"),  # was a TypeError
    (["a b", None], "sentence 2 is NoneType None"),
    ([["a", 5]], "sentence 1, token 2 is int 5"),
    (b"the cat", "not bytes"),
    (7, "not int 7"),
])
def test_parse_refuses_what_is_not_text_naming_the_item(run, sentences, named):
    with pytest.raises(InduceError, match=named):
        run.parse(sentences)


def test_load_on_a_file_that_is_no_checkpoint_names_that_file_only(tmp_path):
    text = tmp_path / "sentences.txt"
    text.write_text("The cat sat .\n")
    with pytest.raises(InduceError) as info:
        induce.load(text)
    message = str(info.value)
    assert message.startswith(f"{text}: not a run folder or checkpoint") and "sentences.txt.json" not in message


@pytest.mark.parametrize("path", [123, None, b"runs/x", ["a"], 1.5])
def test_load_refuses_what_is_not_a_path_naming_the_argument(path):
    """``induce.load(123)`` was a bare TypeError from ``Path(123)``; now the library's one-line error."""
    with pytest.raises(InduceError) as info:
        induce.load(path)
    assert str(info.value).startswith(f"load: path must be a str or a path, not {type(path).__name__} ")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("call, named", [
    (lambda run: run.parse(["a b"], batch_size=0), "parse: batch_size must be at least 1, not int 0"),
    (lambda run: run.parse(["a b"], max_length="x"), "parse: max_length must be a whole number, not str 'x'"),
    (lambda run: run.parse(["a b"], max_length=-3), "parse: max_length must be at least 2"),  # was [None]
    (lambda run: run.parse(["a b"], progress=5), "parse: progress must be a function, not int 5"),
    (lambda run: run.parse(["a b"], decoder=5), "parse: decoder must be a str, not int 5"),
    (lambda run: run.score(123), "score: gold must be a str or a path, not int 123"),
    (lambda run: run.score(corpus=b"c"), "score: corpus must be a str or a path, not bytes b'c' (decode"),
    (lambda run: run.score(max_length="10x"), "score: max_length must be a whole number"),
    (lambda run: run.score(batch_size="x"), "score: batch_size must be a whole number, not str 'x'"),
    (lambda run: run.score(keep_punct="x"), "score: keep_punct must be True or False, not str 'x'"),
    (lambda run: run.perplexity(corpus=["a"]), "perplexity: corpus must be a str or a path, not list ['a']"),
    (lambda run: run.perplexity(split=5), "perplexity: split must be a str, not int 5"),
    (lambda run: run.generate("5x"), "generate: n_words must be a whole number, not str '5x'"),
    (lambda run: run.generate(n_words=2.5), "generate: n_words must be a whole number, not float 2.5"),
    (lambda run: run.generate(temperature="hot"), "generate: temperature must be a number, not str 'hot'"),
    (lambda run: run.generate(beam="2x"), "generate: beam must be a whole number"),
    (lambda run: run.generate(prompt=123), "generate: prompt must be a str, not int 123"),
    (lambda run: run.generate(seed="a"), "generate: seed must be a whole number, not str 'a'"),
    (lambda run: induce.format_tree(123), "format_tree: tree must be an nltk.Tree (as run.parse returns), not int"),
    (lambda run: induce.format_tree(["a", "b"]), "format_tree: tree must be an nltk.Tree"),
    (lambda run: induce.format_tree(nltk.Tree("S", [1, 2])), "format_tree: leaf 1 is int 1: a leaf must be a str"),
])
def test_every_library_function_refuses_an_argument_of_the_wrong_type_naming_it(run, call, named):
    """An argument of the wrong type or out of range is an InduceError naming the function and the argument,
    not a TypeError, RuntimeError or AttributeError from deep inside (or, for a negative max_length, a None
    tree)."""
    with pytest.raises(InduceError) as info:
        call(run)
    assert str(info.value).startswith(named) and "\n" not in str(info.value)


def test_library_arguments_keep_what_they_accepted(run, run_dir):
    """The checks refuse only what could not work: a Path, numbers given as text, a generator of sentences,
    a torch device; a call that does not fit the signature stays Python's TypeError."""
    import torch

    assert induce.load(Path(run_dir), device=torch.device("cpu")).model_name == "tiny-lstm"
    assert run.parse((s for s in ["a b c"]), batch_size="2", max_length="9")[0].leaves() == ["a", "b", "c"]
    assert len(run.generate(n_words="3", seed=1)) == 3
    with pytest.raises(TypeError):
        run.parse(["a"], nope=1)

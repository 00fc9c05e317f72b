"""Fuzzing `induce preprocess`, `induce eval` and `induce parse` with malformed inputs (hypothesis).

Inputs are built from pieces: well-formed trees and sentences, broken brackets, empty files,
random and non-UTF-8 bytes, NUL bytes, blank lines, odd whitespace (tabs, CR, form feed,
vertical tab, NBSP, U+2028, NEL), huge tokens, rich markup look-alikes (``[/x]``), and mismatched
sentence counts. Each run must end either in a clean error (exit 2, a message, no traceback) or
in a correct result, checked against what the input holds. Bounded examples, no deadline.
"""
from __future__ import annotations

import json

import nltk
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from induce.cli.main import app
from induce.evaluation import induce_convention, prepare_gold

from helpers import train_tiny_run

runner = CliRunner()
FUZZ = settings(max_examples=40, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

GOLD = [
    "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))",
    "( (S (NP-SBJ (NNS dogs)) (VP (VBP bark) (ADVP (RB loudly) (RB today)))) )",
    "(S (NP (PRP it)) (VP (VBD rained)) (. .))",
]
#: Right-branching predictions over the gold words (with punctuation): valid, F1 computable.
PRED = ["(S the (S cat (S sat (S on (S the (S mat .))))))", "(S dogs (S bark (S loudly today)))", "(S it (S rained .))"]

ODD_SPACE = ["\t", "\r", "\f", "\v", "\u00a0", "\u2028", "\x85", "  ", "\r\n"]
PIECES = st.one_of(
    st.sampled_from(GOLD + PRED),
    st.sampled_from(["(", ")", "((", "))", "()", "( )", "(S", "S)", "(S ())", "(()())", "(S (NP a) b", "a b c",
                     "(S [/x] [bold]y)", "(S (-NONE- *T*))", "(S (, ,) (. .))", "(S (X (Y)))", "(S a)(S b)",
                     "(S (NN \u00e9t\u00e9) (VB \u4e2d\u6587))", "(S\x00a)", "(S (NN " + "w" * 5000 + "))"]),
    st.sampled_from(ODD_SPACE),
    st.text(alphabet=st.sampled_from("()ab SNP\t\n.-"), max_size=30),
)
LINE = st.lists(PIECES, max_size=4).map("".join)


@st.composite
def text_bytes(draw, lines=LINE) -> bytes:
    """A file: lines of pieces joined by newlines (or blank lines), sometimes with raw/non-UTF-8 bytes."""
    chosen = draw(st.lists(lines, max_size=6))
    separator = draw(st.sampled_from(["\n", "\n\n", "\r\n", "\n \n"]))
    data = separator.join(chosen).encode("utf-8")
    tail = draw(st.sampled_from([b"", b"\n", b"\n\n"]))
    if draw(st.integers(0, 5)) == 0:
        at = draw(st.integers(0, len(data)))
        data = data[:at] + draw(st.sampled_from([b"\xff", b"\xc3(", b"\x80\x80", b"\x00", b"\xfe\xff"])) + data[at:]
    if draw(st.integers(0, 9)) == 0:
        data = draw(st.binary(max_size=64))
    return data + tail


def assert_clean(result) -> str:
    """Exit 0 or a clean error (exit 2, `error:` message, SystemExit): never a traceback."""
    output = result.output
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert result.exit_code in (0, 2), (result.exit_code, output)
    if result.exit_code == 2:
        assert "error:" in output, output
    return output


def trees_in(data: bytes):
    """The trees a well-formed file holds, found independently of :mod:`induce.trees.brackets` (a plain
    character loop): None unless it is UTF-8 with balanced brackets, only ASCII whitespace between
    trees, and each tree readable by ``nltk.Tree.fromstring``."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    chunks, depth, start = [], 0, None
    for index, char in enumerate(text):
        if char == "(":
            if depth == 0:
                start = index
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                return None
            if depth == 0:
                chunks.append(text[start : index + 1])
        elif depth == 0 and char not in " \t\r\n\f\v":
            return None
    if depth:
        return None
    try:
        return [nltk.Tree.fromstring(chunk) for chunk in chunks]
    except ValueError:
        return None


# ------------------------------------------------------------------------------------------ eval


@pytest.fixture(scope="module")
def fuzz_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    (root / "gold.mrg").write_text("\n".join(GOLD) + "\n", encoding="utf-8")
    return root


@FUZZ
@given(data=text_bytes())
def test_eval_fuzzed_predictions(fuzz_dir, data):
    pred = fuzz_dir / "pred.txt"
    pred.write_bytes(data)
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(fuzz_dir / "gold.mrg"), "--json"])
    assert_clean(result)
    if result.exit_code == 0:
        # Accepted: one tree per gold sentence, each covering its words; the scores are percentages.
        trees = trees_in(data)
        assert trees is not None and len(trees) == len(GOLD)
        summary = json.loads(result.stdout)
        assert summary["n_sentences"] + summary["n_skipped"] == len(GOLD)
        assert 0 <= summary["sentence_f1"] <= 100 and 0 <= summary["corpus_f1"] <= 100


@pytest.mark.slow
@FUZZ
@given(data=text_bytes(), max_length=st.sampled_from([None, 1, 3, 10]))
def test_eval_fuzzed_gold_with_a_baseline(fuzz_dir, data, max_length):
    gold = fuzz_dir / "fuzzed_gold.mrg"
    gold.write_bytes(data)
    args = ["eval", "--baseline", "right", "--gold", str(gold), "--json"]
    if max_length is not None:
        args += ["--max-length", str(max_length)]
    result = runner.invoke(app, args)
    output = assert_clean(result)
    trees = trees_in(data)
    if result.exit_code == 0:
        summary = json.loads(result.stdout)
        assert trees is not None and summary["n_sentences"] + summary["n_skipped"] == len(trees)
        assert summary["n_sentences"] >= 1
    elif trees:
        # A readable gold file may still have nothing to evaluate: then the message says so, or says that its tags
        # are not the Penn Treebank's (what the word-tag filter drops).
        convention = induce_convention(max_length=max_length)
        try:
            lengths = [len(prepare_gold(tree).kept_words(convention)) for tree in trees]
        except Exception:  # a tree the evaluator refuses: the error is the message checked above
            lengths = None
        if lengths is not None and not any(2 <= n <= (max_length or n) for n in lengths):
            said = " ".join(output.split())
            assert "no sentence left to evaluate" in said or "its POS tags are not the Penn Treebank's" in said, output


@pytest.mark.slow
@FUZZ
@given(n_pred=st.integers(0, 6), blank_at=st.one_of(st.none(), st.integers(0, 5)))
def test_eval_sentence_count_mismatch_and_blank_lines(fuzz_dir, n_pred, blank_at):
    lines = [PRED[i % len(PRED)] for i in range(n_pred)]
    if blank_at is not None and blank_at < len(lines):
        lines.insert(blank_at, "")
    pred = fuzz_dir / "counted.txt"
    pred.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(fuzz_dir / "gold.mrg"), "--json"])
    output = " ".join(assert_clean(result).split())
    if n_pred == 0:
        assert "no trees found" in output
    elif blank_at is not None and blank_at < n_pred:
        assert f"{pred}:{blank_at + 1}: blank line" in output
    elif n_pred != len(GOLD):
        assert f"{n_pred} predicted trees but {len(GOLD)} gold trees" in output
    else:
        assert result.exit_code == 0 and json.loads(result.stdout)["n_sentences"] == len(GOLD)


@st.composite
def reformatted(draw, trees: list) -> bytes:
    """``trees`` one per line with odd ASCII whitespace inside and around them, CRLF or LF line ends,
    trailing blank lines: the same trees as the plain file."""
    spaces = st.sampled_from([" ", "  ", "\t", " \t ", "\f", "\v"])
    lines = []
    for tree in trees:
        parts = tree.split(" ")
        line = "".join(part + draw(spaces) for part in parts[:-1]) + parts[-1]
        lines.append(draw(st.sampled_from(["", " ", "\t"])) + line + draw(st.sampled_from(["", " ", "\t", "\r"])))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return (end.join(lines) + end + draw(st.sampled_from(["", "\n", "\n\n", " \n"]))).encode("utf-8")


@pytest.mark.slow
@FUZZ
@given(data=reformatted(PRED))
def test_eval_whitespace_does_not_change_the_scores(fuzz_dir, data):
    """Valid predictions laid out with odd whitespace give the scores of the plain file."""
    plain = fuzz_dir / "plain.txt"
    plain.write_text("\n".join(PRED) + "\n", encoding="utf-8")
    odd = fuzz_dir / "odd.txt"
    odd.write_bytes(data)
    gold = str(fuzz_dir / "gold.mrg")
    results = [runner.invoke(app, ["eval", str(path), "--gold", gold, "--json"]) for path in (plain, odd)]
    for result in results:
        assert_clean(result)
        assert result.exit_code == 0, result.output
    expected, got = (json.loads(result.stdout) for result in results)
    expected.pop("predicted"), got.pop("predicted")
    assert got == expected and got["n_sentences"] == len(GOLD)


# ------------------------------------------------------------------------------------- preprocess


@pytest.mark.slow
@FUZZ
@given(data=st.one_of(text_bytes(), reformatted(GOLD),
                      st.lists(st.sampled_from(GOLD + PRED), min_size=1).flatmap(reformatted)))
def test_preprocess_fuzzed_tree_file(fuzz_dir, data):
    train = fuzz_dir / "train.mrg"
    train.write_bytes(data)
    out_dir = fuzz_dir / "corpora"
    result = runner.invoke(app, ["preprocess", "--out-dir", str(out_dir), "--name", "fuzz", "--train", str(train),
                                 "--force"])
    assert_clean(result)
    if result.exit_code == 0:
        trees = trees_in(data)
        assert trees is not None
        meta = json.loads((out_dir / "fuzz" / "meta.json").read_text(encoding="utf-8"))
        split = meta["splits"]["train"]
        assert split["trees_read"] == len(trees) and split["trees"] + split["dropped_no_words"] == len(trees)
        lines = (out_dir / "fuzz" / "train.gold.txt").read_text(encoding="utf-8").splitlines()
        assert len(lines) == split["trees"] >= 1
    assert not [p for p in out_dir.glob(".*") if p.is_dir()] if out_dir.exists() else True


# ------------------------------------------------------------------------------------------ parse


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny trained run (test-only stand-in model, one epoch): ~2 s."""
    return train_tiny_run(tmp_path_factory.mktemp("fuzz_run"))


SENTENCE_PIECES = st.one_of(
    st.sampled_from(["the cat sat on the mat .", "Dogs bark loudly, today!", "( ) [ ] { }", "-LRB- x -RRB-",
                     "(S (NP a))", "[/x] [bold]", "\u00e9t\u00e9 \u4e2d\u6587", "1,000 $ 3.5 %", "w" * 3000, "a\x00b",
                     "'' `` '' --", "a " * 400]),
    st.sampled_from(ODD_SPACE),
    st.text(max_size=20),
)


@pytest.mark.slow
@FUZZ
@given(data=text_bytes(st.lists(SENTENCE_PIECES, max_size=4).map(" ".join)), pretokenized=st.booleans())
def test_parse_fuzzed_text(fuzz_dir, run_dir, data, pretokenized):
    torch.set_num_threads(1)
    text = fuzz_dir / "sentences.txt"
    text.write_bytes(data)
    out = fuzz_dir / "trees.txt"
    out.unlink(missing_ok=True)
    args = ["parse", str(text), "-c", str(run_dir), "-o", str(out)] + (["--pretokenized"] if pretokenized else [])
    result = runner.invoke(app, args)
    output = assert_clean(result)
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        assert result.exit_code == 2 and "not valid UTF-8" in output
        return
    assert result.exit_code == 0, output
    trees = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(trees) == len(lines)  # one tree per input line, blank lines included
    for tree_text in trees:
        tree = nltk.Tree.fromstring(tree_text)  # each output line is one well-formed bracketed tree
        assert isinstance(tree, nltk.Tree)


# ------------------------------------------------------------------------- every command, bad values


def sweep_cases(root, run_dir, gold, text) -> list[list[str]]:
    """Bad values for every command: each must end in exit 2 with one `error:` line."""
    a_file = root / "a_file"
    a_file.write_text("x")
    nowhere = str(root / "nowhere")
    corpus = str(run_dir.parents[1] / "corpora" / "tiny")
    return [
        ["preprocess", "--out-dir", str(a_file / "c"), "--train", gold],
        ["preprocess", "--out-dir", str(root / "c"), "--train", gold, "--name", "a/b"],
        ["preprocess", "--out-dir", str(root / "c"), "--train", nowhere],
        ["preprocess", "--out-dir", str(root / "c"), "--train", gold, "--max-vocab", "2"],
        ["eval", "--baseline", "right", "--gold", gold, "--wsj10", "--wsj40"],
        ["eval", "--baseline", "right", "--gold", gold, "--max-length", "0"],
        ["eval", "--baseline", "nosuch", "--gold", gold],
        ["eval", "--baseline", "right", "--gold", nowhere],
        ["eval", nowhere, "--gold", gold],
        ["eval", "--checkpoint", str(run_dir), "--gold", gold, "--decoder", "span"],
        ["parse", nowhere, "-c", str(run_dir)],
        ["parse", text, "-c", str(run_dir), "--format", "xml"],
        ["parse", text, "-c", str(run_dir), "-o", str(root)],
        ["parse", text, "-c", nowhere],
        ["generate", "-c", str(run_dir), "-t", "nan"],
        ["generate", "-c", str(run_dir), "-t", "inf"],
        ["generate", "-c", nowhere],
        ["train", "--model", "tiny-lstm", "--corpus", corpus, "--out", str(root / "r"), "optim.lr=nan"],
        ["train", "--model", "tiny-lstm", "--corpus", corpus, "--out", str(root / "r"), "model.dropout=.inf"],
        ["train", "--model", "tiny-lstm", "--corpus", corpus, "--out", str(root / "r"), "data.batch_size=100000"],
        ["train", "--model", "tiny-lstm", "--corpus", nowhere, "--out", str(root / "r")],
        ["train", "--model", "nosuch"],
        ["train", "--model", "tiny-lstm", "--time-budget", "nan"],
        ["train", "--resume", nowhere],
        ["show", "tree", "-c", str(run_dir)],
        ["show", "tree", "a b", "--index", "1", "-c", str(run_dir)],
        ["show", "attention", "a b", "-c", str(run_dir), "-o", str(root / "figure.txt")],
        ["show", "attention", "a b", "-c", str(run_dir), "-o", str(a_file / "figure.png")],
        ["reproduce", "--profile", "toy", "--models", "nosuch", "--out", str(root / "results")],
        ["reproduce", "--profile", "toy", "--out", str(a_file / "results")],
        ["reproduce", "--profile", "toy", "--seeds", "one", "--out", str(root / "results")],
        ["reproduce", "--profile", "nosuch", "--out", str(root / "results")],
        ["task", "train", "--lr", "nan", "--out", str(root / "task.safetensors")],
        ["task", "eval", "--checkpoint", nowhere],
    ]


def test_every_command_refuses_bad_values_in_one_line(fuzz_dir, run_dir, tmp_path, monkeypatch):
    """Each case: exit 2 (SystemExit), no traceback, exactly one `error:` line and nothing after it."""
    monkeypatch.chdir(tmp_path)  # (reproduce must not find or write anything of the repository's)
    text = tmp_path / "in.txt"
    text.write_text("the cat sat\n")
    for args in sweep_cases(tmp_path, run_dir, str(fuzz_dir / "gold.mrg"), str(text)):
        result = runner.invoke(app, args, terminal_width=80)
        lines = [line for line in result.output.splitlines() if line.strip()]
        assert result.exit_code == 2 and isinstance(result.exception, SystemExit), (args, result.output)
        assert "Traceback" not in result.output, (args, result.output)
        assert [line for line in lines if line.startswith("error:")] == lines[-1:], (args, result.output)
    assert not (tmp_path / "results").exists() and not (tmp_path / "r").exists()

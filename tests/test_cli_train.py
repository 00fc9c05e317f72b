"""End to end through the CLI (CliRunner): `induce train` a tiny real model, resume it, then `parse`,
`generate` and `models`; errors exit with code 2 and a one-line message."""
from __future__ import annotations

import json
import os

import nltk
import pytest
import torch
from typer.testing import CliRunner

from induce.cli.main import app
from induce.models.registry import list_models

from helpers import make_corpus

runner = CliRunner()
TINY_ONLSTM = ["model.emb_size=8", "model.hidden_size=12", "model.chunk_size=4", "data.batch_size=4",
               "data.bptt=8", "train.log_interval=5", "train.dev_f1=false"]


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A folder with a tiny corpus and one run trained through `induce train` (1 epoch)."""
    root = tmp_path_factory.mktemp("cli")
    corpus = make_corpus(root / "corpora", train=80, valid=10, test=5)
    cwd = os.getcwd()
    os.chdir(root)
    torch.set_num_threads(1)
    try:
        result = runner.invoke(app, ["train", "--model", "onlstm", "--corpus", str(corpus), "--out", "runs/first",
                                     "--max-epochs", "1", "--device", "cpu", "--seed", "5", "--no-progress",
                                     *TINY_ONLSTM])
    finally:
        os.chdir(cwd)
    assert result.exit_code == 0, result.output
    return root, corpus, result


def test_train_writes_the_run(workdir):
    root, corpus, result = workdir
    run = root / "runs" / "first"
    assert result.stdout.strip().splitlines()[-1] == "runs/first"
    config = (run / "config.yaml").read_text()
    assert "seed: 5" in config and "hidden_size: 12" in config and str(corpus) in config
    assert len((run / "metrics.jsonl").read_text().splitlines()) == 1
    assert json.loads((run / "status.json").read_text())["state"] == "finished"


def test_train_says_what_each_token_count_counts(workdir):
    """The toy report counted the same 300 sentences as 6,335, 6,632 and 6,624 tokens in different places:
    the header now gives the words (meta.json's lm_tokens), the tokens with the sentence ends, and what an
    epoch predicts (metrics.jsonl's train_tokens, the report's "tokens trained")."""
    import re

    root, corpus, result = workdir
    counts = json.loads((corpus / "meta.json").read_text())["splits"]["train"]
    words, sentences = counts["lm_tokens"], counts["lm_sentences"]
    header = " ".join(result.output.split())
    found = re.search(r"train text: ([\d,]+) words \+ ([\d,]+) sentence ends = ([\d,]+) tokens, an epoch predicts "
                      r"up to ([\d,]+) of them in 4 streams", header)
    assert found, header
    numbers = [int(group.replace(",", "")) for group in found.groups()]
    assert numbers[:3] == [words, sentences, words + sentences]
    trained = json.loads((root / "runs" / "first" / "metrics.jsonl").read_text().splitlines()[0])["train_tokens"]
    assert numbers[3] == ((words + sentences) // 4 - 1) * 4 and numbers[3] - 4 <= trained <= numbers[3]


def test_resume_continues_to_more_epochs(workdir, monkeypatch, tmp_path):
    root, _, _ = workdir
    copy = tmp_path / "runs" / "copy"
    copy.mkdir(parents=True)
    for path in (root / "runs" / "first").iterdir():
        (copy / path.name).write_bytes(path.read_bytes())
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--resume", "runs/copy", "--max-epochs", "2", "--no-progress"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in (copy / "metrics.jsonl").read_text().splitlines()]
    assert [line["epoch"] for line in lines] == [1, 2] and lines[1]["steps"] == 2 * lines[0]["steps"]
    result = runner.invoke(app, ["train", "--resume", "runs/copy", "--model", "prpn"])
    assert result.exit_code == 2 and "--resume keeps the run's config" in result.output


def test_parse_uses_the_latest_run_and_keeps_original_tokens(workdir, monkeypatch):
    root, _, _ = workdir
    monkeypatch.chdir(root)
    text = root / "input.txt"
    long_line = " ".join(f"Word{i}" for i in range(400))
    text.write_text('The "cat" sat (quietly) on 3 mats.\n\nHello\n' + long_line + "\n", encoding="utf-8")
    result = runner.invoke(app, ["parse", str(text)])
    assert result.exit_code == 0, result.output
    assert "using the latest finished run: runs/first" in result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    # the tokenizer's tokens as typed ("), round brackets escaped in a bracketed line
    assert nltk.Tree.fromstring(lines[0]).leaves() == ["The", '"', "cat", '"', "sat", "-LRB-", "quietly", "-RRB-",
                                                       "on", "3", "mats", "."]
    assert lines[1] == "(S )" and lines[2] == "(S Hello)"
    assert nltk.Tree.fromstring(lines[3]).leaves() == long_line.split()
    # --pretokenized, --out, --format pretty, --decoder
    out = root / "trees.txt"
    result = runner.invoke(app, ["parse", str(text), "--checkpoint", "runs/first", "--pretokenized",
                                 "--out", str(out), "--decoder", "unbiased"])
    assert result.exit_code == 0, result.output
    first = nltk.Tree.fromstring(out.read_text().splitlines()[0])
    assert first.leaves() == ["The", '"cat"', "sat", "-LRB-quietly-RRB-", "on", "3", "mats."]
    result = runner.invoke(app, ["parse", str(text), "--format", "pretty"])
    assert result.exit_code == 0 and "Hello" in result.stdout


def test_parse_errors_exit_2(workdir, monkeypatch, tmp_path):
    root, _, _ = workdir
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("a b\n")
    result = runner.invoke(app, ["parse", "in.txt"])
    assert result.exit_code == 2 and "no finished run" in result.output
    result = runner.invoke(app, ["parse", "missing.txt", "--checkpoint", str(root / "runs" / "first")])
    assert result.exit_code == 2 and "missing.txt" in result.output
    (tmp_path / "bad.txt").write_bytes(b"fine\n\xff\xfe broken\n")
    result = runner.invoke(app, ["parse", "bad.txt", "--checkpoint", str(root / "runs" / "first")])
    assert result.exit_code == 2 and "bad.txt:2:" in result.output
    result = runner.invoke(app, ["parse", "in.txt", "--checkpoint", str(root / "runs" / "first"), "--decoder", "span"])
    assert result.exit_code == 2 and "decoder" in result.output
    assert "Traceback" not in result.output


def test_generate_sampling_and_beam(workdir, monkeypatch):
    root, _, _ = workdir
    monkeypatch.chdir(root)
    result = runner.invoke(app, ["generate", "--words", "15", "--seed", "3", "--temperature", "0.8"])
    assert result.exit_code == 0, result.output
    again = runner.invoke(app, ["generate", "--words", "15", "--seed", "3", "--temperature", "0.8"])
    assert result.stdout == again.stdout and result.stdout.strip()
    assert len(result.stdout.split()) <= 15
    result = runner.invoke(app, ["generate", "--checkpoint", "runs/first", "--beam", "3", "--words", "10",
                                 "--prompt", "The dog"])
    assert result.exit_code == 0, result.output
    assert "<eos>" not in result.stdout


def test_models_lists_one_line_each():
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    lines = result.stdout.strip().splitlines()
    names = [line.split()[0] for line in lines]
    assert names == sorted(list_models()) and {"onlstm", "prpn", "palm", "palm-s", "palm-rb"} <= set(names)


def test_train_errors_name_the_key(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--model", "onlstm", "model.nhid=200"])
    assert result.exit_code == 2 and "model.nhid" in result.output and "Traceback" not in result.output
    result = runner.invoke(app, ["train", "--model", "nope"])
    assert result.exit_code == 2 and "unknown model" in result.output
    result = runner.invoke(app, ["train", "--model", "onlstm", "--time-budget", "soon"])
    assert result.exit_code == 2 and "time budget" in result.output


@pytest.mark.parametrize("args,message", [
    (["--max-steps", "3", "train.max_steps=7"], "--max-steps 3 and train.max_steps=7 disagree"),
    (["--seed", "5", "train.seed=6"], "--seed 5 and train.seed=6 disagree"),
    (["--max-epochs", "2", "train.epochs=3"], "--max-epochs 2 and train.epochs=3 disagree"),
    (["--device", "cpu", "train.device=cuda"], "--device cpu and train.device=cuda disagree"),
    (["--threads", "1", "train.threads=2"], "--threads 1 and train.threads=2 disagree"),
    (["--corpus", "a", "data.corpus=b"], "--corpus a and data.corpus=b disagree"),
    (["--tensorboard", "train.tensorboard=false"], "--tensorboard and train.tensorboard=false disagree"),
    (["model_name=prpn"], "--model onlstm and model_name=prpn disagree"),
])
def test_a_flag_and_its_key_given_different_values_are_refused(args, message, tmp_path, monkeypatch):
    """``--max-steps 3 train.max_steps=7`` ran 3 steps without a word: one line naming both, nothing trained."""
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["train", "--model", "onlstm", "--out", "run", *args])
    assert result.exit_code == 2 and message in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1 and not (tmp_path / "run").exists()


@pytest.mark.parametrize("command", ["train", "parse", "generate", "models"])
def test_help(command):
    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_palm_s_trains_with_gold_spans_and_parses(tmp_path, monkeypatch):
    """The supervised variant reads gold span targets aligned with the token stream."""
    corpus = make_corpus(tmp_path / "corpora", train=40, valid=6, test=4)
    monkeypatch.chdir(tmp_path)
    tiny = ["model.emb_size=8", "model.hidden_size=8", "model.rrnn_size=4", "model.attention_size=4",
            "model.max_span_length=4", "data.batch_size=2", "data.bptt=10", "train.dev_f1=false"]
    result = runner.invoke(app, ["train", "--model", "palm-s", "--corpus", str(corpus), "--out", "runs/ps",
                                 "--max-epochs", "1", "--no-progress", "--device", "cpu", *tiny])
    assert result.exit_code == 0, result.output
    (tmp_path / "s.txt").write_text("the dog saw a cat\n")
    result = runner.invoke(app, ["parse", "s.txt"])
    assert result.exit_code == 0, result.output
    assert nltk.Tree.fromstring(result.stdout.strip()).leaves() == "the dog saw a cat".split()

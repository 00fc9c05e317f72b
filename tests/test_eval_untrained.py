"""`induce eval --untrained MODEL` and its library function (:mod:`induce.assess.untrained`): N fresh
models of a kind parse the gold sentences; mean ± std over the inits. Tiny models on a tiny synthetic
treebank; PaLM-RB, whose trees do not depend on its weights, is checked against the right-branching
baseline under every convention flag."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from induce.assess.untrained import build_untrained, evaluate_untrained, untrained_config, untrained_vocabulary
from induce.cli.main import app
from induce.data.mikolov import normalize_word
from induce.evaluation import DEFAULT, Convention, prepare_gold
from induce.models.registry import get_model_class
from induce.trees.brackets import read_trees

from helpers import make_corpus

pytestmark = pytest.mark.usefixtures("one_thread")
runner = CliRunner()

TINY_PALM = ["model.emb_size=8", "model.hidden_size=8", "model.rrnn_size=3", "model.attention_size=4"]
TINY_ONLSTM = ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return make_corpus(tmp_path_factory.mktemp("untrained") / "corpora", train=10, valid=14, test=2)


def gold_of(corpus: Path, convention: Convention | None = None):
    return [prepare_gold(item.tree) for item in read_trees(corpus / "valid.gold.txt")]


def invoke(*args: str) -> dict:
    result = runner.invoke(app, ["eval", *args, "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def flags(*overrides: str) -> list[str]:
    return [item for override in overrides for item in ("--set", override)]


def test_library_inits_seeds_and_summary(corpus):
    config = untrained_config("palm", TINY_PALM).model
    gold = gold_of(corpus)
    vocab, label = untrained_vocabulary(gold)
    assert "gold sentences' words" in label and vocab.itos[:2] == ["<eos>", "<unk>"]
    # every gold word type, normalised as the training text is (lower case, numbers -> N)
    assert set(vocab.itos[2:]) == {normalize_word(w) for s in gold for w in s.kept_words(DEFAULT)} and "N" in vocab.itos
    before = torch.random.get_rng_state()
    calls = []
    out = evaluate_untrained("palm", config, gold, vocab, inits=3, seed=10, device="cpu",
                             progress=lambda done, total: calls.append((done, total)))
    assert torch.equal(torch.random.get_rng_state(), before)  # the caller's random stream is left alone
    assert calls == [(1, 3), (2, 3), (3, 3)]
    assert out["seeds"] == [11, 12, 13] and [row["seed"] for row in out["per_init"]] == [11, 12, 13]
    assert out["n_sentences"] == len(gold) and out["vocab_size"] == len(vocab)
    for name in ("sentence_f1", "corpus_f1", "left_split_pct", "right_split_pct"):
        values = [row[name] for row in out["per_init"]]
        assert out["summary"][name]["mean"] == pytest.approx(statistics.fmean(values))
        assert out["summary"][name]["std"] == pytest.approx(statistics.stdev(values))
    assert out["max_one_direction_pct"] == max(max(r["left_split_pct"], r["right_split_pct"]) for r in out["per_init"])
    # init k is the model drawn with seed + k, whatever was drawn before it
    cls = get_model_class("palm")
    torch.manual_seed(12)
    direct = cls(len(vocab), cls.Config(**config))
    assert torch.equal(build_untrained("palm", config, len(vocab), 12).span_attention.v, direct.span_attention.v)
    again = evaluate_untrained("palm", config, gold, vocab, inits=3, seed=10, device="cpu")
    assert again["per_init"] == out["per_init"]  # deterministic
    other = evaluate_untrained("palm", config, gold, vocab, inits=1, seed=20, device="cpu")
    assert other["per_init"][0]["seed"] == 21


def test_cli_untrained_table_json_and_corpus_vocabulary(corpus, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no run folder anywhere: the result does not depend on one
    out = invoke("--untrained", "palm", "--inits", "2", "--corpus", str(corpus), *flags(*TINY_PALM))
    assert out["model"] == "palm" and out["inits"] == 2 and len(out["per_init"]) == 2
    assert out["model_config"]["hidden_size"] == 8 and out["model_config"]["variant"] == "released"
    vocab_size = len(json.loads((corpus / "vocab.json").read_text())["itos"])
    assert "vocabulary of" in out["vocabulary"] and out["vocab_size"] == vocab_size
    assert out["gold"].endswith("valid.gold.txt")
    table = runner.invoke(app, ["eval", "--untrained", "palm", "--inits", "2", "--corpus", str(corpus), "--no-progress",
                                *flags(*TINY_PALM)])
    assert table.exit_code == 0, table.output
    for text in ("2 untrained palm", "% left splits", "% right splits", "sentence F1", "corpus F1", "per init", " ± "):
        assert text in table.stdout
    # a distance model too, with its decoder
    onlstm = invoke("--untrained", "onlstm", "--inits", "1", "--gold", str(corpus / "valid.gold.txt"),
                    "--decoder", "unbiased", *flags(*TINY_ONLSTM))
    assert onlstm["model"] == "onlstm" and "gold sentences' words" in onlstm["vocabulary"]


@pytest.mark.parametrize("options", [[], ["--wsj10"], ["--wsj40"], ["--max-length", "7"], ["--count-root"],
                                     ["--multiset"], ["--count-root", "--multiset", "--max-length", "9"]])
def test_untrained_palm_rb_is_the_right_branching_baseline_under_every_convention(corpus, options):
    gold = ["--gold", str(corpus / "valid.gold.txt")]
    untrained = invoke("--untrained", "palm-rb", "--inits", "2", *gold, *options, *flags(*TINY_PALM))
    right = invoke("--baseline", "right", *gold, *options)
    assert untrained["n_sentences"] == right["n_sentences"] and untrained["n_skipped"] == right["n_skipped"]
    assert untrained["convention"] == right["convention"]
    for name in ("sentence_f1", "corpus_f1", "left_split_pct", "right_split_pct"):
        assert untrained["summary"][name]["mean"] == pytest.approx(right[name]), name
        assert untrained["summary"][name]["std"] == pytest.approx(0.0, abs=1e-9), name


def test_untrained_keep_punct_hides_punctuation_from_the_model_and_scores_every_token(corpus):
    gold = ["--gold", str(corpus / "valid.gold.txt")]
    kept = invoke("--untrained", "palm-rb", "--inits", "1", "--keep-punct", *gold, *flags(*TINY_PALM))
    right = invoke("--baseline", "right", "--keep-punct", *gold)
    assert kept["convention"]["keep_punct"] and kept["n_sentences"] == right["n_sentences"]
    # punctuation is attached to the right-branching tree of the words (as for raw text), so the trees
    # are not right-branching over the punctuated sentence
    assert kept["summary"]["right_split_pct"]["mean"] < right["right_split_pct"]
    plain = invoke("--untrained", "palm-rb", "--inits", "1", *gold, *flags(*TINY_PALM))
    assert plain["summary"]["right_split_pct"]["mean"] == 100.0


@pytest.mark.parametrize("args,message", [
    (["--untrained", "palmx"], "unknown model 'palmx'"),
    (["--untrained", "rellstm"], "no syntactic structure"),
    (["--untrained", "palm", "--set", "data.batch_size=3"], "only model.* keys"),
    (["--untrained", "palm", "--set", "model.hidden_size=-1"], "model.hidden_size"),
    (["--untrained", "palm", "--lm"], "--lm needs a trained run"),
    (["--untrained", "palm", "--baseline", "right"], "give only one of"),
    (["--set", "model.hidden_size=8"], "applies to --untrained only"),
    (["--inits", "3", "--baseline", "right"], "--inits: applies to --untrained only"),
    (["--untrained", "palm", "--max-length", "1"], "no sentence left"),
])
def test_untrained_errors(corpus, args, message):
    result = runner.invoke(app, ["eval", *args, "--gold", str(corpus / "valid.gold.txt"), "--no-progress",
                                 *(flags(*TINY_PALM) if "--untrained" in args and "--set" not in args else [])])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output

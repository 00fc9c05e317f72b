"""`induce show tree` / `induce show attention` and :mod:`induce.inference.show` on tiny trained ON-LSTM
and PaLM runs."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from rich.console import Console
from typer.testing import CliRunner

from induce.cli.main import app
from induce.config import load_config
from induce.inference.loading import load_run
from induce.inference.predict import predict_trees
from induce.inference.show import dev_sentence, sentence_structure, tree_f1
from induce.training import train
from induce.trees.kinds import DISTANCE, SPAN

from helpers import make_corpus

runner = CliRunner()
PNG = b"\x89PNG\r\n\x1a\n"
TINY = {
    "onlstm": ["model.emb_size=8", "model.hidden_size=8", "model.chunk_size=4"],
    "palm": ["model.emb_size=8", "model.hidden_size=8", "model.rrnn_size=4", "model.attention_size=8",
             "model.max_span_length=6"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("show")
    corpus = make_corpus(root / "corpora", train=40, valid=8, test=4)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = {"corpus": corpus}
        for model, sizes in TINY.items():
            config = load_config(model, overrides=[
                *sizes, f"data.corpus={corpus}", "data.batch_size=4", "data.eval_batch_size=2", "data.bptt=10",
                "train.epochs=1", "train.device=cpu", "train.dev_f1=false",
            ])
            out[model] = train(config, root / model, console=Console(quiet=True), progress=False).run_dir
    finally:
        torch.set_num_threads(threads)
    return out


def test_structure_of_a_distance_model(runs):
    tokens = ["the", "dog", "saw", "a", "cat", ",", "she", "said", "."]
    structure = sentence_structure(runs["onlstm"], tokens)
    assert structure.kind is DISTANCE
    assert structure.words == ["the", "dog", "saw", "a", "cat", "she", "said"]
    assert structure.tree.leaves() == tokens
    assert structure.tree == predict_trees(load_run(runs["onlstm"]), [tokens])[0]  # what `induce parse` gives
    assert structure.distances.shape == (7,)
    assert structure.layer_distances.shape == (structure.distance_layer + 1, 7)  # the layers up to the parsed one
    assert np.allclose(structure.layer_distances[structure.distance_layer], structure.distances)
    with pytest.raises(Exception, match="distances, not span attention"):
        structure.attention()


def test_structure_of_palm_and_its_attention(runs):
    tokens = ["the", "dog", "saw", "a", "cat", "near", "the", "old", "house"]
    structure = sentence_structure(runs["palm"], tokens)
    assert structure.kind is SPAN and structure.span_scores.shape == (9, 9)
    attention = structure.attention()
    assert np.allclose(attention.sum(1), 1.0)
    assert np.all(np.triu(attention, 1) == 0.0)  # no span starts after its end
    # the tree is the greedy PaLM decoding of these scores
    from induce.trees.decoders import span_tree
    from induce.trees.nodes import to_nltk

    assert to_nltk(span_tree(structure.span_scores, 9), tokens) == structure.tree


def test_show_tree_prints_the_tree_and_the_gold_tree(runs):
    result = runner.invoke(app, ["show", "tree", "the dog saw a cat .", "--checkpoint", str(runs["onlstm"])])
    assert result.exit_code == 0, result.output
    assert "onlstm" in result.stdout and "(S " in result.stdout and "dog" in result.stdout
    result = runner.invoke(app, ["show", "tree", "--index", "2", "--corpus", str(runs["corpus"]),
                                 "--checkpoint", str(runs["palm"])])
    assert result.exit_code == 0, result.output
    assert "gold" in result.stdout and "sentence F1" in result.stdout
    tokens, gold = dev_sentence(runs["corpus"], 2)
    f1 = tree_f1(predict_trees(load_run(runs["palm"]), [tokens])[0], gold)
    assert f"sentence F1: {f1:.1f}" in result.stdout


def test_show_attention_writes_a_png(runs, tmp_path):
    for model, word in (("palm", "most attended span"), ("onlstm", "distance before it")):
        out = tmp_path / f"{model}.png"
        result = runner.invoke(app, ["show", "attention", "the dog saw a cat near the house", "--checkpoint",
                                     str(runs[model]), "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert out.read_bytes()[:8] == PNG
        assert word in result.stdout


def test_show_errors_are_clear(runs):
    result = runner.invoke(app, ["show", "tree", "a b", "--index", "1", "--checkpoint", str(runs["onlstm"])])
    assert result.exit_code == 2 and "not both" in result.output
    for command in ("tree", "attention"):  # neither a sentence nor --index: not "not both"
        result = runner.invoke(app, ["show", command, "--checkpoint", str(runs["onlstm"])])
        assert result.exit_code == 2 and "no sentence" in result.output and "not both" not in result.output
    result = runner.invoke(app, ["show", "tree", "--index", "999", "--corpus", str(runs["corpus"]),
                                 "--checkpoint", str(runs["onlstm"])])
    assert result.exit_code == 2 and "sentences 0..7" in result.output
    result = runner.invoke(app, ["show", "attention", ". , ;", "--checkpoint", str(runs["palm"])])
    assert result.exit_code == 2 and "no word" in result.output

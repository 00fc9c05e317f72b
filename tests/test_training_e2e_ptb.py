"""End to end on real treebank data (the NLTK sample under $INDUCE_DATA): prepare a few files, train a
tiny ON-LSTM through `induce train` with dev F1, parse raw dev sentences, evaluate against gold."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from induce.cli.main import app

runner = CliRunner()


def nltk_sample_dir() -> Path:
    root = os.environ.get("INDUCE_DATA", "").strip()
    if not root:
        pytest.skip("INDUCE_DATA is not set (real treebank data not available)")
    folder = Path(root) / "nltk_treebank"
    if not (folder / "wsj_0001.mrg").is_file():
        pytest.skip(f"no NLTK treebank sample in {folder}")
    return folder


def test_train_parse_evaluate_on_the_nltk_sample(tmp_path, monkeypatch):
    from induce.data.corpus import PreparedCorpus
    from induce.data.preprocess import nltk_sample_split_files, preprocess_tree_files
    from induce.evaluation import induce_convention, score
    from induce.inference.predict import predict_trees

    files = nltk_sample_split_files(nltk_sample_dir())
    corpus = preprocess_tree_files({"train": files["train"][:12], "valid": files["valid"][:2]}, tmp_path / "corpora",
                                   "sample-mini")
    monkeypatch.chdir(tmp_path)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        result = runner.invoke(app, [
            "train", "--model", "onlstm", "--corpus", str(corpus), "--out", "runs/mini", "--max-epochs", "1",
            "--device", "cpu", "--no-progress", "model.emb_size=16", "model.hidden_size=16", "model.chunk_size=4",
            "data.batch_size=8", "data.bptt=20", "train.dev_f1=true", "train.dev_f1_max_sentences=40",
        ])
        assert result.exit_code == 0, result.output
        line = json.loads((tmp_path / "runs" / "mini" / "metrics.jsonl").read_text().splitlines()[0])
        assert 0.0 <= line["dev_f1"] <= 100.0 and line["valid_ppl"] > 1.0

        prepared = PreparedCorpus(corpus)
        gold = prepared.gold_trees("valid")[:20]
        # raw tokens with punctuation (the gold leaves); predictions cover every non-trace token and
        # the evaluator projects the punctuation away
        sentences = [tree.leaves() for tree in gold]
        trees = predict_trees(tmp_path / "runs" / "mini", sentences)
        assert [t.leaves() for t in trees] == sentences
        scores = score(gold, trees, induce_convention())
        assert scores.n_sentences > 0 and 0.0 <= scores.sentence_f1 <= 100.0

        (tmp_path / "raw.txt").write_text("\n".join(" ".join(s) for s in sentences) + "\n", encoding="utf-8")
        result = runner.invoke(app, ["parse", "raw.txt", "--pretokenized"])
        assert result.exit_code == 0, result.output
        assert len(result.stdout.splitlines()) == len(sentences)
    finally:
        torch.set_num_threads(threads)

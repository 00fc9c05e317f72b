"""`induce preprocess`: layout, alignment of the files, determinism, caching, atomicity, errors, CLI, and the
refusal of a treebank whose tag set is not the Penn Treebank's."""
from __future__ import annotations

import json
import os
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.data import mikolov
from induce.data.corpus import PreparedCorpus
from induce.data.preprocess import check_ptb_tags, preprocess_lm_text, preprocess_tree_files
from induce.errors import InduceError, InputError
from induce.trees.brackets import read_trees, tree_to_line
from induce.trees.ptb import TagCensus

TRAIN = """( (S (NP-SBJ (DT The) (NN cat) ) (VP (VBD sat) (PP-LOC (IN on) (NP (DT the) (NN mat) ))) (. .) ))
( (S (NP-SBJ-1 (NNP Mary) ) (VP (VBD paid) (NP ($ $) (CD 3.5) (CD million) ) (NP (-NONE- *-1) )) (. .) ))
( (S (NP-SBJ (DT The) (NN dog) ) (, ,) (VP (VBD sat) ) (. .) ))
"""
# Multi-line .mrg with a tree made only of punctuation (dropped) between two sentences.
VALID = """( (S
    (NP-SBJ (DT A) (NN cat) )
    (VP (VBD slept) )
    (. .) ))
( (X (: --) (. .) ))
( (S (NP-SBJ (PRP It) ) (VP (VBD rained) ) (. .) ))
"""


def make_files(tmp_path: Path) -> dict[str, list[Path]]:
    (tmp_path / "in").mkdir(exist_ok=True)
    train = tmp_path / "in" / "train.mrg"
    valid = tmp_path / "in" / "valid.mrg"
    train.write_text(TRAIN)
    valid.write_text(VALID)
    return {"train": [train], "valid": [valid]}


def all_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_layout_and_alignment(tmp_path):
    folder = preprocess_tree_files(make_files(tmp_path), tmp_path / "corpora", "toy", max_vocab=6)
    corpus = PreparedCorpus(folder)
    assert corpus.name == "toy" and corpus.has_trees and corpus.splits == ["train", "valid"]
    names = {p.name for p in folder.iterdir()}
    assert names == {"meta.json", "vocab.json"} | {
        f"{s}.{k}" for s in ("train", "valid") for k in ("orig.txt", "gold.txt", "nopunct.txt", "txt")
    }
    # gold: traces and function tags gone, punctuation kept, ROOT label
    assert tree_to_line(corpus.gold_trees("train")[1]) == (
        "(ROOT (S (NP (NNP Mary)) (VP (VBD paid) (NP ($ $) (CD 3.5) (CD million))) (. .)))")
    assert corpus.nopunct_trees("train")[1].leaves() == ["Mary", "paid", "3.5", "million"]
    assert corpus.orig_trees("train")[1].pos()[-2] == ("*-1", "-NONE-")
    # counts: the/sat/cat/dog... vocab of 6 = <eos>, <unk> + 4 most frequent training tokens
    # train tokens: the cat sat on the mat | mary paid N million | the dog sat
    # counts: the=3, sat=2, then cat/dog/mary/mat/million/N/on/paid once each -> alphabetical: N, cat
    assert corpus.vocab.itos == ["<eos>", "<unk>", "the", "sat", "N", "cat"]
    assert corpus.lm_sentences("train") == [
        ["the", "cat", "sat", "<unk>", "the", "<unk>"], ["<unk>", "<unk>", "N", "<unk>"], ["the", "<unk>", "sat"]
    ]
    # the punctuation-only tree is dropped from every file of the split
    assert corpus.meta["splits"]["valid"]["trees_read"] == 3
    assert corpus.meta["splits"]["valid"]["dropped_no_words"] == 1
    for split in corpus.splits:
        sentences = corpus.lm_sentences(split)
        assert len(sentences) == len(corpus.gold_trees(split)) == len(corpus.nopunct_trees(split))
        for tokens, tree in zip(sentences, corpus.nopunct_trees(split)):
            normalised = [mikolov.normalize_word(w) for w in tree.leaves()]
            assert tokens == mikolov.apply_vocab(normalised, corpus.vocab)
    meta = corpus.meta
    assert meta["vocab_size"] == 6 and meta["splits"]["train"]["lm_tokens"] == 13
    assert meta["source"]["files"]["train"][0]["sha256"] and "timestamp" not in json.dumps(meta)


def test_deterministic_output(tmp_path):
    files = make_files(tmp_path)
    first = preprocess_tree_files(files, tmp_path / "a", "toy")
    second = preprocess_tree_files(files, tmp_path / "b", "toy")
    assert all_bytes(first) == all_bytes(second)


def test_cache_reuse_stale_and_force(tmp_path):
    files = make_files(tmp_path)
    folder = preprocess_tree_files(files, tmp_path / "corpora", "toy")
    (folder / "train.txt").write_text("marker\n")  # would be overwritten by a rebuild
    preprocess_tree_files(files, tmp_path / "corpora", "toy")
    assert (folder / "train.txt").read_text() == "marker\n"
    files["train"][0].write_text(TRAIN + "( (S (NP (NN rain)) (VP (VBD fell))))\n")
    with pytest.raises(InduceError, match="--force"):
        preprocess_tree_files(files, tmp_path / "corpora", "toy")
    preprocess_tree_files(files, tmp_path / "corpora", "toy", force=True)
    assert len(PreparedCorpus(folder).lm_sentences("train")) == 4
    assert sorted(p.name for p in (tmp_path / "corpora").iterdir()) == ["toy"]  # no temp folders left


def test_failure_leaves_nothing_behind(tmp_path):
    files = make_files(tmp_path)
    bad = tmp_path / "in" / "test.mrg"
    bad.write_text("( (S (NP (DT a) (NN b)) (VP (VBD c))) )\n( (S (NP (DT a)\n")
    files["test"] = [bad]
    out = tmp_path / "corpora"
    with pytest.raises(InputError) as info:
        preprocess_tree_files(files, out, "toy")
    assert str(info.value).startswith(f"{bad}:2: ")
    assert list(out.iterdir()) == []
    # an existing good corpus survives a failed --force rebuild
    del files["test"]
    folder = preprocess_tree_files(files, out, "toy")
    before = all_bytes(folder)
    files["test"] = [bad]
    with pytest.raises(InputError):
        preprocess_tree_files(files, out, "toy", force=True)
    assert all_bytes(folder) == before and [p.name for p in out.iterdir()] == ["toy"]


def test_empty_split_and_predicted_tags_are_refused(tmp_path):
    files = make_files(tmp_path)
    punct = tmp_path / "in" / "punct.mrg"
    punct.write_text("( (X (: --) (. .) ))\n")
    with pytest.raises(InduceError, match=f"split .valid. is empty \\({punct}\\)"):
        preprocess_tree_files({**files, "valid": [punct]}, tmp_path / "c", "toy")
    auto = tmp_path / "in" / "22.auto.clean"
    auto.write_text("(TOP (S (NP (DT a) (NN b)) (VP (VBD c))))\n")
    with pytest.raises(InputError, match="PREDICTED"):
        preprocess_tree_files({**files, "valid": [auto]}, tmp_path / "c", "toy")
    folder = preprocess_tree_files({**files, "valid": [auto]}, tmp_path / "c", "toy", allow_predicted_tags=True)
    assert PreparedCorpus(folder).lm_sentences("valid") == [["<unk>", "<unk>", "<unk>"]]
    assert not (tmp_path / "c" / "other").exists()


def test_lm_text_corpus(tmp_path):
    lm = tmp_path / "lm"
    lm.mkdir()
    (lm / "ptb.train.txt").write_text(" a b <unk> \n b c \n")
    (lm / "ptb.valid.txt").write_text(" a z \n")
    corpus = PreparedCorpus(preprocess_lm_text(lm, tmp_path / "corpora", "lm"))
    assert not corpus.has_trees and corpus.splits == ["train", "valid"]
    assert corpus.lm_sentences("train") == [["a", "b", "<unk>"], ["b", "c"]]
    assert corpus.lm_sentences("valid") == [["a", "<unk>"]]
    assert corpus.vocab.itos == ["<eos>", "<unk>", "b", "a", "c"]
    with pytest.raises(InduceError, match="test"):
        corpus.lm_sentences("test")


def test_cli_preprocess_and_error_exit_code(tmp_path):
    files = make_files(tmp_path)
    runner = CliRunner()
    out = tmp_path / "corpora"
    args = ["preprocess", "--out-dir", str(out), "--name", "toy", "--max-vocab", "50"]
    result = runner.invoke(app, args + ["--train", str(files["train"][0]), "--valid", str(files["valid"][0])])
    assert result.exit_code == 0, result.output
    assert PreparedCorpus(out / "toy").meta["max_vocab"] == 50
    bad = tmp_path / "in" / "bad.mrg"
    bad.write_bytes(b"(S (NP (NN a)))\n(S (NP (NN \xe9)))\n")
    result = runner.invoke(app, ["preprocess", "--out-dir", str(out), "--name", "bad", "--train", str(bad)])
    assert result.exit_code == 2
    assert f"{bad}:2:" in result.output and "Traceback" not in result.output
    assert not (out / "bad").exists()


@pytest.mark.slow
def test_full_nltk_sample_if_available(tmp_path):
    root = os.environ.get("INDUCE_DATA")
    if not root or not (Path(root) / "nltk_treebank" / "wsj_0199.mrg").is_file():
        pytest.skip("INDUCE_DATA with nltk_treebank/ not available")
    from induce.data.locate import default_corpus

    folder = default_corpus(Path(root) / "nltk_treebank", tmp_path / "corpora")
    corpus = PreparedCorpus(folder)
    assert corpus.name == "ptb-sample" and corpus.splits == ["train", "valid", "test"]
    total = sum(corpus.meta["splits"][s]["trees_read"] for s in corpus.splits)
    assert total == 3914  # SOURCES.md
    sources = [r["path"] for s in corpus.splits for r in corpus.meta["source"]["files"][s]]
    assert len(sources) == len(set(sources)) == 199


KEYAKI = Path(__file__).parent / "data" / "keyaki" / "ted_talk_1.excerpt.psd"


def test_a_treebank_with_another_tag_set_is_refused_naming_the_file_and_the_loss(tmp_path):
    """The Keyaki Treebank (Japanese; tests/data/keyaki) was prepared without a word: only its VB and MD
    words passed the word-tag filter, 78-80% of the text came out <unk>."""
    files = make_files(tmp_path)
    out = tmp_path / "corpora"
    result = CliRunner().invoke(app, ["preprocess", "--out-dir", str(out), "--train", str(files["train"][0]),
                                      "--valid", str(KEYAKI)])
    assert result.exit_code == 2 and "Traceback" not in result.output
    message = " ".join(result.output.split())
    assert f"error: {KEYAKI}: its POS tags are not the Penn Treebank's: 84% of its 83 tokens carry other tags (P, " \
           in message
    assert "would drop 87% of the tokens and keep 11 (tagged VB, MD)" in message
    assert not out.exists() or not any(out.iterdir())


def test_the_tag_check_lets_the_penn_treebank_through(tmp_path):
    """Punctuation (dropped by the filter, every tag a PTB tag) and a stray tag among PTB tags pass."""
    trees = [located.tree for located in read_trees(make_files(tmp_path)["train"][0])]
    trees.append(nltk.Tree.fromstring("(S (NP (DT The) (XX thing)) (VP (VBD went)) (. .))"))
    punctuation = [nltk.Tree.fromstring("(S (: --) (. .) (, ,) (NP (NN end)))")]
    for checked in (trees, punctuation):
        check_ptb_tags(tmp_path / "x.mrg", checked)
    census = TagCensus()
    for tree in trees:
        census.add(tree)
    assert census.foreign == {"XX": 1} and not census.not_ptb()


def test_the_real_keyaki_treebank_is_refused_if_available(tmp_path):
    root = os.environ.get("INDUCE_DATA")
    folder = Path(root or "") / "ktb" / "treebank"
    if not root or not folder.is_dir():
        pytest.skip("INDUCE_DATA with ktb/ not available")
    first, second = sorted(folder.glob("*.psd"))[:2]
    with pytest.raises(InputError, match=rf"^{first}: its POS tags are not the Penn Treebank's"):
        preprocess_tree_files({"train": [first, second]}, tmp_path / "corpora", "ktb")


def test_a_file_given_twice_for_a_split_gives_its_trees_once(tmp_path):
    """``--train a.mrg --train ./x/../a.mrg`` (or a link to it): the split holds each tree once, and a line says
    which path was left out; the corpus is the one the file gives alone."""
    from rich.console import Console

    files = make_files(tmp_path)
    train = files["train"][0]
    (tmp_path / "in" / "x").mkdir()
    (tmp_path / "link.mrg").symlink_to(train)
    once = preprocess_tree_files(files, tmp_path / "once", "toy")
    console = Console(record=True, width=200)
    twice = preprocess_tree_files({**files, "train": [train, tmp_path / "in" / "x" / ".." / "train.mrg",
                                                      tmp_path / "link.mrg"]}, tmp_path / "twice", "toy",
                                  console=console)
    assert (twice / "train.gold.txt").read_bytes() == (once / "train.gold.txt").read_bytes()
    assert (twice / "vocab.json").read_bytes() == (once / "vocab.json").read_bytes()
    text = console.export_text()
    assert f"train split: {tmp_path / 'link.mrg'} is the same file as {train}: counted once" in text

"""Treebank profiles (``--treebank ptb|ktb|ktb-2020``) and the Keyaki Treebank prepared and split as Li et al.
(2020) do.

The Keyaki trees are tests/data/keyaki (six trees of ``ted_talk_1.psd``, CC BY 4.0, attributed there); the
expected trees below were written by hand from Li et al.'s ``preprocess.py`` rules (i-lijun/UnsupConstParseEval
``afa5176``: ``Sentence``, ``remove_nodes``, ``clean_tree``, ``collapse_unary``, ``train_test_split``).
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import nltk
import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.data import keyaki
from induce.data.corpus import PreparedCorpus
from induce.data.preprocess import preprocess_keyaki, preprocess_tree_files
from induce.errors import InduceError, InputError
from induce.evaluation import DEFAULT, prepare_gold
from induce.trees.brackets import read_trees, tree_to_line
from induce.trees.treebanks import KTB, KTB_2020, PTB, get_profile, is_null_word, keyaki_tree, li_normalize_word

KEYAKI = Path(__file__).parent / "data" / "keyaki" / "ted_talk_1.excerpt.psd"


def _trees():
    return [located.tree for located in read_trees(KEYAKI)]


def test_a_keyaki_tree_loses_its_id_empty_elements_function_tags_and_unary_chains_as_li_et_al_prepare_it():
    tree = _trees()[1]
    assert "*hearer*" in tree.leaves() and "*T*" in tree.leaves()
    nopunct = keyaki_tree(tree, keep_punct=False)
    assert tree_to_line(nopunct) == (
        "(IP (PP (IP (NP (WPRO どちら) (P も)) (IP (NP (IP (NP (IP (NP 関係) (ADJI ない)) (N もの)) (AX の)) "
        "(N よう)) (AX に)) (VB 思わ) (VB2 れる) (MD かもしれません)) (P が)) (IP (PP (NP (D この) (NUMCLP (NUM 18) "
        "(CL 分))) (P が)) (VB すぎ) (P たら)) (PP (NP (D その) (N 関係)) (P が)) (ADVP すこし) (VB 見える) "
        "(MD かもしれません))")
    # The evaluator's gold keeps the POS tags that a collapse would hide ((NP-SBJ2 (N 関係)) -> (NP (N 関係))).
    gold = KTB.gold_tree(tree)
    assert "(NP (N 関係))" in tree_to_line(gold) and "(ADVP (ADV すこし))" in tree_to_line(gold)
    assert KTB.gold_tree(gold) == gold  # idempotent: a prepared gold file reads the same
    assert gold.leaves() == nopunct.leaves()  # this sentence has no punctuation


def test_punctuation_goes_by_tag_before_the_collapse():
    tree = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ (PRO 私)) (NP (PU 「)) (VB 行く) (PU 。)) (ID 1_x;JP))")
    assert tree_to_line(keyaki_tree(tree, keep_punct=False)) == "(IP (NP 私) (VB 行く))"
    assert keyaki_tree(tree, keep_punct=True).leaves() == ["私", "「", "行く", "。"]
    sentence = prepare_gold(tree, "ktb")
    assert sentence.kept_words(DEFAULT) == ["私", "行く"] and sentence.words == ["私", "「", "行く", "。"]
    assert sentence.treebank == "ktb"
    # Under the PTB's word tags a Keyaki tree would keep only its VB: the profile is what makes it work.
    assert prepare_gold(tree).kept_words(DEFAULT) == ["行く"]


def test_ktb_drops_a_sentence_whose_removals_reach_the_root_as_li_et_al_s_script_does():
    """Their remove_nodes reads a position inside an already removed part (here CONJ, taken out with its NP-SBJ)
    in the tree itself, where it names the root; deleting the root raises the IndexError that drops the sentence
    (24 sentences of Keyaki 1.1). Removing the NP-SBJ alone would have left a sentence."""
    tree = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ (CONJ (NP *pro*)) (NP *pro*)) (NP-OB1 (N 本)) (VB 読む)) "
                                "(ID 9_x;JP))")
    assert keyaki_tree(tree, keep_punct=False) is None and keyaki_tree(tree, keep_punct=True) is None
    assert keyaki_tree(tree, keep_punct=False, profile=KTB_2020).leaves() == ["*pro*", "*pro*", "本", "読む"]
    # without the CONJ chain, the empty elements go and the sentence stays
    plain = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ *pro*) (NP-OB1 (N 本)) (VB 読む)) (ID 10_x;JP))")
    assert tree_to_line(keyaki_tree(plain, keep_punct=False)) == "(IP (NP 本) (VB 読む))"


def test_ktb_2020_keeps_empty_elements_as_words_and_quot_as_a_word_as_the_paper_time_script_did():
    """Li et al.'s preprocess.py at 6377b10 (2020-05): no empty-element removal, no QUOT in the KTB table."""
    tree = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ *pro*) (NP-OB1 (QUOT 「) (N 本) (QUOT 」)) (VB 読む) (PU 。)) "
                                "(ID 2_x;JP))")
    assert keyaki_tree(tree, keep_punct=False).leaves() == ["本", "読む"]
    paper = keyaki_tree(tree, keep_punct=False, profile=KTB_2020)
    assert tree_to_line(paper) == "(IP (NP *pro*) (NP (QUOT 「) (N 本) (QUOT 」)) (VB 読む))"
    assert KTB_2020.gold_tree(tree).leaves() == ["*pro*", "「", "本", "」", "読む", "。"]
    assert prepare_gold(tree, "ktb-2020").kept_words(DEFAULT) == ["*pro*", "「", "本", "」", "読む"]
    assert prepare_gold(tree, "ktb").kept_words(DEFAULT) == ["本", "読む"]
    # a tree whose only word is an empty element keeps it under ktb-2020 and is dropped under ktb
    empty = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ *speaker*) (PU 。)) (ID 3_x;JP))")
    assert keyaki_tree(empty, keep_punct=False) is None
    assert keyaki_tree(empty, keep_punct=False, profile=KTB_2020).leaves() == ["*speaker*"]
    assert get_profile("ktb-2020") is KTB_2020 and KTB_2020.describe()["name"] == "ktb-2020"


def test_ktb_2020_keeps_a_tree_whose_removal_stopped_at_the_root_as_the_paper_time_script_did():
    """Removing the root's only child stopped that script's removals (an IndexError it let pass): the tree stays
    as it was at that moment and the punctuation pass is not made; the later script drops the tree."""
    tree = nltk.Tree.fromstring("( (LST (-LRB- （) (-RRB- ）)) (ID 4_x;JP))")
    assert keyaki_tree(tree, keep_punct=False) is None
    assert tree_to_line(keyaki_tree(tree, keep_punct=False, profile=KTB_2020)) == "(LST (-LRB- （) (-RRB- ）))"
    # ID went first (reverse pre-order), then LST, the root's only child: nothing more is removed
    stopped = nltk.Tree.fromstring("( (LST (PU 、) (ID 5)) (ID 6_x;JP))")
    assert tree_to_line(keyaki_tree(stopped, keep_punct=False, profile=KTB_2020)) == "(LST 、)"  # then collapsed
    # a deeper node whose parents of one child reach a child of the root deletes that child, without stopping
    deep = nltk.Tree.fromstring("( (IP-MAT (PU 。)) (ID 7_x;JP))")
    assert keyaki_tree(deep, keep_punct=False, profile=KTB_2020) is None and keyaki_tree(deep, keep_punct=False) is None
    # removals that do not reach the root are the later script's, but for the empty elements
    plain = nltk.Tree.fromstring("( (IP-MAT (NP-SBJ (PRO 私)) (PU 、) (VB 行く)) (ID 8_x;JP))")
    assert keyaki_tree(plain, keep_punct=False, profile=KTB_2020) == keyaki_tree(plain, keep_punct=False)


def test_null_words_and_li_normalisation():
    assert all(is_null_word(w) for w in ("*pro*", "*T*", "*", "*が*", "*T*-3"))
    assert not any(is_null_word(w) for w in ("私", "*a", "a*"))
    assert [li_normalize_word(w) for w in ("ABC", "20,000", "3.5", "１２", "二")] == ["abc", "[num]", "[num]",
                                                                                     "[num]", "二"]


def test_li_split_calls_the_first_shuffled_tenth_test_and_the_second_dev():
    kept = list(range(0, 60, 2))  # 30 positions: 3 held out each
    split = keyaki.li_split(kept)
    order = list(kept)
    random.seed(0)
    random.shuffle(order)
    assert split["test"] == sorted(order[:3]) and split["valid"] == sorted(order[3:6])
    assert sorted(split["train"] + split["valid"] + split["test"]) == kept


def test_the_reader_leaves_out_a_last_tree_that_no_blank_line_follows(tmp_path):
    text = KEYAKI.read_text(encoding="utf-8").rstrip("\n") + "\n"  # as the released files end
    (tmp_path / "a.psd").write_text(text, encoding="utf-8")
    blocks = keyaki.read_blocks([tmp_path / "a.psd"])
    assert len(blocks.trees) == 5 and blocks.left_out == 1
    first = next(n for n, line in enumerate(text.split("\n"), start=1) if line.strip())
    assert blocks.where[0] == (str(tmp_path / "a.psd"), first)


def _folder(tmp_path: Path, copies: int = 4) -> Path:
    folder = tmp_path / "KeyakiTreebank" / "treebank"
    folder.mkdir(parents=True)
    for k in range(copies):
        shutil.copy(KEYAKI, folder / f"part_{k}.psd")
    return tmp_path / "KeyakiTreebank"


def test_preprocess_ktb_splits_as_li_et_al_and_records_the_profile_and_counts(tmp_path):
    out = tmp_path / "corpora"
    result = CliRunner().invoke(app, ["preprocess", "--treebank", "ktb", "--data", str(_folder(tmp_path)),
                                      "--out-dir", str(out), "--name", "ktb"])
    assert result.exit_code == 0, result.output
    corpus = PreparedCorpus(out / "ktb")
    meta = corpus.meta
    assert meta["treebank"]["name"] == "ktb" and corpus.treebank == "ktb"
    record = meta["source"]["split"]
    assert record["files"] == 4 and record["trees_read"] == 24 and record["shuffled"] == 24
    assert record["held_out_each"] == 2 and record["last_trees_left_out"] == 0
    lengths = [len(keyaki_tree(t, keep_punct=False).leaves()) for t in _trees()]
    assert record["li_len10"]["train"] + record["li_len10"]["valid"] + record["li_len10"]["test"] == \
        4 * sum(n <= 10 for n in lengths) < 24
    assert {s: meta["splits"][s]["trees"] for s in ("train", "valid", "test")} == {"train": 20, "valid": 2, "test": 2}
    split = keyaki.li_split(list(range(24)))
    originals = _trees() * 4
    assert [tree_to_line(t) for t in corpus.orig_trees("test")] == [tree_to_line(originals[i]) for i in split["test"]]
    # the trees without punctuation that the split made are the ones the files hold (made once, not twice)
    for name in ("train", "test"):
        written = (out / "ktb" / f"{name}.nopunct.txt").read_text(encoding="utf-8").splitlines()
        assert written == [tree_to_line(keyaki_tree(originals[i], keep_punct=False)) for i in split[name]]
    assert "[num]" in (out / "ktb" / "train.txt").read_text(encoding="utf-8")  # Li et al.'s number placeholder
    assert all(getattr(t, "treebank", None) == "ktb" for t in corpus.gold_trees("test"))


def test_preprocess_ktb_2020_records_its_profile_and_keeps_the_empty_elements(tmp_path):
    out = tmp_path / "corpora"
    result = CliRunner().invoke(app, ["preprocess", "--treebank", "ktb-2020", "--data", str(_folder(tmp_path)),
                                      "--out-dir", str(out)])
    assert result.exit_code == 0, result.output
    corpus = PreparedCorpus(out / "ktb-2020")
    assert corpus.treebank == "ktb-2020" and corpus.meta["source"]["split"]["profile"] == "ktb-2020"
    assert "6377b10" in corpus.meta["source"]["split"]["recipe"]
    text = "".join((out / "ktb-2020" / f"{split}.txt").read_text(encoding="utf-8") for split in ("train", "valid",
                                                                                                  "test"))
    assert "*hearer*" in text and "*t*" in text  # lower-cased by Li et al.'s normalisation, as every word
    assert all(getattr(t, "treebank", None) == "ktb-2020" for t in corpus.gold_trees("test"))


def test_eval_on_a_ktb_corpus_uses_its_profile_and_says_so(tmp_path):
    out = tmp_path / "corpora"
    preprocess_keyaki(_folder(tmp_path), out, "ktb")
    runner = CliRunner()
    result = runner.invoke(app, ["eval", "--baseline", "left", "--corpus", str(out / "ktb"), "--split", "train",
                                 "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["treebank"]["name"] == "ktb" and summary["convention"]["treebank"] == "ktb"
    # Li et al.'s own no-punctuation trees as predictions score 100 under their convention.
    pred = tmp_path / "nopunct.txt"
    pred.write_text((out / "ktb" / "train.nopunct.txt").read_text(encoding="utf-8"), encoding="utf-8")
    result = runner.invoke(app, ["eval", str(pred), "--corpus", str(out / "ktb"), "--split", "train",
                                 "--convention", "li2020", "--convention", "induce", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    results = json.loads(result.stdout)["results"]
    assert all(abs(r["figures"]["corpus_f1"] - 100.0) < 1e-9 for r in results), results
    li = next(r for r in results if r["convention"] == "li2020")
    assert "(ktb, no punctuation)" in li["description"] and "ptb" not in li["description"]
    result = runner.invoke(app, ["eval", "--baseline", "left", "--corpus", str(out / "ktb"), "--split", "test",
                                 "--convention", "li2020", "--no-progress"])
    assert result.exit_code == 0 and "gold treebank: Keyaki Treebank (Japanese)" in result.stdout
    result = runner.invoke(app, ["eval", "--baseline", "left", "--corpus", str(out / "ktb"), "--treebank", "ptb"])
    assert result.exit_code != 0 and "prepared as ktb" in result.output


def test_ptb_stays_the_default_and_refuses_keyaki_and_ktb_refuses_a_ptb_file(tmp_path):
    assert get_profile(None) is PTB
    with pytest.raises(InduceError, match="--treebank negra: unknown treebank"):
        get_profile("negra")
    with pytest.raises(InputError, match="its POS tags are not the Penn Treebank's"):
        preprocess_tree_files({"train": [KEYAKI]}, tmp_path / "c", "x")
    ptb = tmp_path / "p.mrg"
    ptb.write_text("(S (NP (DT The) (NN dog)) (VP (VBD ran)) (. .))\n", encoding="utf-8")
    with pytest.raises(InputError, match=r"no \(ID \.\.\.\) node"):
        preprocess_tree_files({"train": [ptb]}, tmp_path / "c", "x", treebank="ktb")
    folder = preprocess_tree_files({"train": [KEYAKI]}, tmp_path / "c", "k", treebank="ktb")
    assert PreparedCorpus(folder).treebank == "ktb"


def test_the_real_keyaki_treebank_gives_li_et_al_split_if_available():
    root = os.environ.get("INDUCE_DATA")
    if not root or not (Path(root) / "ktb" / "treebank").is_dir():
        pytest.skip("INDUCE_DATA with ktb/ not available")
    files = keyaki.treebank_files(Path(root) / "ktb")
    assert len(files) == 248


def test_a_keyaki_gold_file_is_read_with_treebank_ktb(tmp_path):
    pred = tmp_path / "pred.txt"
    pred.write_text("".join(tree_to_line(keyaki_tree(t, keep_punct=False)) + "\n" for t in _trees()), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(KEYAKI), "--treebank", "ktb", "--json",
                                 "--no-progress"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["treebank"]["name"] == "ktb" and summary["n_sentences"] == 6 and summary["corpus_f1"] == 100.0
    # Read as the PTB (the default), its words are only those tagged VB or MD: Li et al.'s trees do not fit.
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(KEYAKI), "--json", "--no-progress"])
    assert result.exit_code != 0 or json.loads(result.stdout)["corpus_f1"] < 100.0


def test_ensemble_and_leaderboard_read_a_keyaki_gold_file_with_treebank_ktb(tmp_path):
    lines = "".join(tree_to_line(keyaki_tree(t, keep_punct=False)) + "\n" for t in _trees())
    runs = tmp_path / "runs" / "gold-copy"
    runs.mkdir(parents=True)
    for name in ("a", "b"):
        (runs / f"{name}.txt").write_text(lines, encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(app, ["ensemble", str(runs / "a.txt"), str(runs / "b.txt"), "-o", str(tmp_path / "ens.txt"),
                                 "--gold", str(KEYAKI), "--treebank", "ktb", "--json", "--no-progress"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["member_f1"] == [100.0, 100.0]  # the gold's own trees
    # Without it the gold is read as the PTB, whose word tags keep none of these words: refused, not scored.
    result = runner.invoke(app, ["ensemble", str(runs / "a.txt"), str(runs / "b.txt"), "-o",
                                 str(tmp_path / "ens2.txt"), "--gold", str(KEYAKI), "--json", "--no-progress"])
    assert result.exit_code != 0 or json.loads(result.stdout)["member_f1"][0] < 100.0
    result = runner.invoke(app, ["leaderboard", str(tmp_path / "runs"), "--gold", str(KEYAKI), "--treebank", "ktb",
                                 "--convention", "li2020", "-o", str(tmp_path / "board"), "--json", "--no-progress",
                                 "--resamples", "20"])
    assert result.exit_code == 0, result.output
    board = json.loads(result.stdout)
    assert board["models"], board
    assert all(abs(r["figure"] - 100.0) < 1e-9 for run in board["runs"] for r in run["by_convention"].values()), board


def test_a_reproduction_on_keyaki_describes_its_conventions_with_keyaki_s_punctuation():
    from induce.reproduce.results import _convention_text

    ktb, ptb = _convention_text("ktb"), _convention_text()
    assert set(ktb) == set(ptb)
    assert all("Keyaki" in text and "PU" in text and "word-tag filter" not in text for text in ktb.values())
    assert all("word-tag filter (Kim et al. 2019)" in text for text in ptb.values())

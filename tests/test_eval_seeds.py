"""Several seeds of a model: self-F1 and the seeds' ensemble (what `induce reproduce` reports), hand-worked."""
from __future__ import annotations

import nltk
import pytest

from induce.evaluation.seeds import seed_summary
from induce.report.seeds import seeds_section

GOLD = [nltk.Tree.fromstring("(S (NP (DT a) (NN b)) (VP (VBD c) (RB d)))"), nltk.Tree.fromstring("(S (UH yes))")]


def test_seed_summary_hand_worked(tmp_path):
    """Seeds A, B, C of the agreement example (gold = A): self-F1 100/3, members 100 / 50 / 50 (corpus F1),
    ensemble ((a b) (c d)) = 100; the one-word sentence is skipped by the default convention."""
    files = []
    for k, tree in enumerate(("(S (S a b) (S c d))", "(S (S (S a b) c) d)", "(S a (S b (S c d)))")):
        path = tmp_path / f"seed{k}.trees.txt"
        path.write_text(tree + "\n(S yes)\n")
        files.append(path)
    summary = seed_summary(files, GOLD)
    assert summary["self_f1"] == pytest.approx(100 / 3)
    assert [s["corpus_f1"] for s in summary["seeds"]] == [100.0, 50.0, 50.0]
    assert summary["mean"]["corpus_f1"] == pytest.approx(200 / 3) and summary["best"]["corpus_f1"] == 100.0
    assert summary["ensemble"]["corpus_f1"] == 100.0
    lines = seeds_section(where="dev", models=["prpn", "onlstm"], per_model={"prpn": {"seed_ensemble": summary},
                                                                           "onlstm": {}})
    assert any(line.startswith("| prpn | 3 | 33.3 |") and line.endswith("| 100.0 / 100.0 |") for line in lines)
    assert seeds_section(where="dev", models=["onlstm"], per_model={"onlstm": {}}) == []


def test_seed_files_over_every_token_give_the_same_summary(tmp_path):
    """`induce reproduce` writes the trees over every token (punctuation attached): the seeds are compared over
    the words the default convention keeps, as with files of those words alone."""
    from induce.inference.predict import format_tree, with_punctuation

    gold = [nltk.Tree.fromstring("(S (NP (DT a) (NN b)) (VP (VBD c) (RB d)) (. .))"),
            nltk.Tree.fromstring("(S (`` ``) (UH yes) (. !))")]
    words_only, every_token = [], []
    for k, text in enumerate(("(S (S a b) (S c d))", "(S (S (S a b) c) d)", "(S a (S b (S c d)))")):
        tree = nltk.Tree.fromstring(text)
        words_only.append(tmp_path / f"words{k}.txt")
        words_only[-1].write_text(text + "\n(S yes)\n")
        every_token.append(tmp_path / f"tokens{k}.txt")
        every_token[-1].write_text(format_tree(with_punctuation(["a", "b", "c", "d", "."], [1, 1, 1, 1, 0], tree))
                                   + "\n" + format_tree(with_punctuation(["``", "yes", "!"], [0, 1, 0],
                                                                         nltk.Tree("S", ["yes"]))) + "\n")
    assert every_token[0].read_text().splitlines() == ["(S (S (S a b) (S c d)) .)", "(S `` (S yes !))"]
    assert seed_summary(every_token, gold) == seed_summary(words_only, gold)
    assert seed_summary(words_only, gold)["self_f1"] == pytest.approx(100 / 3)

"""Predicted words matched with the gold's as published prediction files write them (``--word-match``): the
rewritings of ON-LSTM's, DIORA's and Li et al.'s files are accepted and counted, in ``induce eval`` (default and
``--convention``), ``--agreement``, ``--compare`` and ``induce ensemble``; ``exact`` refuses them, ``position``
accepts any word, and a word of another sentence is still refused by default.

The fixtures in ``tests/data/words`` are hand-made sentences written as those toolkits write their files
(ED4UCP publishes such files: lower case, ``N`` / ``N.N`` / ``NN`` for numbers, ``20000`` for ``20,000``)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app
from induce.errors import InputError, InvalidValueError
from induce.evaluation.words import WordCheck, describe, rewriting, words_match

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "words"
GOLD = DATA / "gold.txt"


def invoke(*args):
    return runner.invoke(app, [*map(str, args), "--no-progress"])


@pytest.mark.parametrize("predicted, gold, kind", [
    ("cat", "cat", ""),
    ("when", "When", "case"),
    ("Cafe\u0301", "Café", "unicode"),
    ("cafe\u0301", "Café", "case"),
    ("(", "-LRB-", "escape"),
    ("1/2", "1\\/2", "escape"),
    ("<unk>", "widgets", "unknown"),
    ("[UNK]", "widgets", "unknown"),
    ("N", "1987", "number"),
    ("[num]", "20,000", "number"),
    ("<num>", "3.5", "number"),
    ("20000", "20,000", "thousands"),
    ("2,850,000", "2850000", "thousands"),
    ("N.N", "99.8", "digits"),
    ("NN", "20,000", "digits"),
    ("N,N", "20,000", "digits"),
    ("N\\/N", "1\\/2", "digits"),
    ("Ns", "1980s", "digits"),
    ("N-year-old", "20-year-old", "digits"),
])
def test_each_rewriting_is_named(predicted, gold, kind):
    assert rewriting(predicted, gold) == kind


@pytest.mark.parametrize("predicted, gold", [
    ("Cafe", "Café"),  # an accent is a letter
    ("N", "cat"),  # a number placeholder stands for a number only
    ("N.N", "1987"),  # digits as N keep the rest of the word
    ("dog", "cat"),
    ("2000", "20,000"),
])
def test_other_words_differ(predicted, gold):
    assert rewriting(predicted, gold) is None
    assert not words_match(predicted, gold)
    assert words_match(predicted, gold, "position")


def test_a_check_counts_each_rewriting_with_an_example():
    check = WordCheck("normalized")
    check.check(["the", "N.N", "points"], ["The", "99.8", "points"])
    check.check(["a", "b"], ["a", "b"])
    summary = check.summary()
    assert (summary["words_compared"], summary["words_rewritten"]) == (5, 2)
    assert (summary["sentences"], summary["sentences_rewritten"]) == (2, 1)
    assert summary["rewritings"]["digits"] == {"count": 1, "what": summary["rewritings"]["digits"]["what"],
                                               "example": {"predicted": "N.N", "gold": "99.8"}}
    assert "2 of 5 rewritten, in 1 of 2 sentences" in describe(summary)
    with pytest.raises(InputError, match=r"word 2 differs: predicted 'dog', gold 'cat' \(not a rewriting"):
        check.check(["a", "dog"], ["a", "cat"])
    with pytest.raises(InputError, match=r"word 1 differs: predicted 'the', gold 'The' \(--word-match exact"):
        WordCheck("exact").check(["the"], ["The"])
    with pytest.raises(InvalidValueError, match="--word-match fuzzy: choose one of exact, normalized, position"):
        WordCheck("fuzzy")


def test_position_counts_what_it_could_not_match():
    check = WordCheck("position")
    check.check(["w0", "when"], ["dog", "When"])
    assert dict(check.counts) == {"other": 1, "case": 1}


# What each fixture rewrites (of the 24 words the word-tag filter keeps in the four gold sentences).
ONLSTM = {"case": 7, "digits": 4, "number": 1}
DIORA = {"case": 7, "thousands": 1}
LI = {"case": 7, "number": 3, "unknown": 2}


def _counts(words: dict) -> dict:
    return {kind: entry["count"] for kind, entry in words["rewritings"].items()}


@pytest.mark.parametrize("name, expected", [("onlstm", ONLSTM), ("diora", DIORA), ("li", LI)])
def test_published_rewritings_score_and_are_counted(name, expected):
    result = invoke("eval", DATA / f"{name}.txt", "--gold", GOLD, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["n_sentences"] == 4
    assert summary["words"]["words_compared"] == 24 and _counts(summary["words"]) == expected
    table = invoke("eval", DATA / f"{name}.txt", "--gold", GOLD)
    assert "words (--word-match normalized): " in table.stdout and "rewritten" in table.stdout


@pytest.mark.parametrize("name, expected", [("onlstm", ONLSTM), ("diora", DIORA), ("li", LI)])
def test_published_rewritings_under_a_convention(name, expected):
    result = invoke("eval", DATA / f"{name}.txt", "--gold", GOLD, "--convention", "kim2019", "--convention",
                    "li2020", "--json")
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["results"]
    assert [_counts(row["words"]) for row in rows] == [expected, expected]


def test_exact_refuses_a_rewriting_and_says_what_normalized_accepts():
    result = invoke("eval", DATA / "diora.txt", "--gold", GOLD, "--word-match", "exact")
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "diora.txt:1: word 1 differs: predicted 'acme', gold 'Acme' (--word-match exact" in message
    result = invoke("eval", DATA / "diora.txt", "--gold", GOLD, "--word-match", "exact", "--convention", "kim2019")
    assert result.exit_code == 2 and "word 1 differs" in result.output


def test_words_of_another_sentence_are_refused_unless_aligned_by_position():
    result = invoke("eval", DATA / "ids.txt", "--gold", GOLD)
    assert result.exit_code == 2
    message = " ".join(result.output.split())
    assert "ids.txt:1: word 1 differs: predicted 'w0', gold 'Acme'" in message
    assert "--word-match position aligns words by position" in message
    result = invoke("eval", DATA / "ids.txt", "--gold", GOLD, "--word-match", "position", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert _counts(summary["words"]) == {"other": 24} and summary["words"]["mode"] == "position"
    right = json.loads(invoke("eval", "--baseline", "right", "--gold", GOLD, "--json").stdout)
    assert summary["corpus_f1"] == right["corpus_f1"]  # ids.txt holds right-branching trees
    result = invoke("eval", DATA / "ids.txt", "--gold", GOLD, "--word-match", "fuzzy")
    assert result.exit_code == 2 and "--word-match fuzzy: choose one of" in result.output


def test_agreement_and_compare_count_each_sources_words():
    result = invoke("eval", "--agreement", DATA / "onlstm.txt", DATA / "diora.txt", DATA / "li.txt", "--gold", GOLD,
                    "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [_counts(words) for words in summary["words"]] == [ONLSTM, DIORA, LI]
    assert summary["matrix"][0][2] == 100.0  # onlstm.txt and li.txt hold the same right-branching trees
    result = invoke("eval", "--compare", DATA / "onlstm.txt", DATA / "diora.txt", "--gold", GOLD, "--json")
    assert result.exit_code == 0, result.output
    assert [_counts(words) for words in json.loads(result.stdout)["words"]] == [ONLSTM, DIORA]
    table = invoke("eval", "--compare", DATA / "onlstm.txt", DATA / "diora.txt", "--gold", GOLD)
    assert "A: words (--word-match normalized): 12 of 24 rewritten" in " ".join(table.stdout.split())
    result = invoke("eval", "--agreement", DATA / "onlstm.txt", DATA / "ids.txt", "--gold", GOLD)
    assert result.exit_code == 2 and "word 1 differs: predicted 'w0'" in result.output


def test_ensemble_reads_the_published_rewritings(tmp_path):
    out = tmp_path / "ensemble.txt"
    result = invoke("ensemble", DATA / "onlstm.txt", DATA / "diora.txt", DATA / "li.txt", "--gold", GOLD, "-o", out,
                    "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [_counts(words) for words in report["words"]] == [ONLSTM, DIORA, LI]
    assert report["ensemble"] == report["member_f1"][0]  # two of the three members are right-branching
    result = invoke("ensemble", DATA / "diora.txt", DATA / "li.txt", "--gold", GOLD, "-o", tmp_path / "e2.txt",
                    "--word-match", "exact")
    assert result.exit_code == 2 and "word 1 differs: predicted 'acme', gold 'Acme'" in result.output

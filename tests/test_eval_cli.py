"""`induce eval` end to end through the Typer app."""
import csv
import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.main import app

runner = CliRunner()
GOLD = [
    "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))",
    "( (S (NP-SBJ (NNS dogs)) (VP (VBP bark) (ADVP (RB loudly) (RB today)))) )",
]
JSON_KEYS = {"n_sentences", "sentence_f1", "corpus_f1", "precision", "recall", "label_recall", "left_split_pct",
             "right_split_pct", "gold_left_split_pct", "gold_right_split_pct"}


@pytest.fixture
def gold_file(tmp_path):
    path = tmp_path / "gold.mrg"
    path.write_text("\n".join(GOLD) + "\n")
    return path


def test_json_output_and_per_sentence_csv(tmp_path, gold_file):
    pred = tmp_path / "pred.txt"
    pred.write_text("(S the (S cat (S sat (S on (S the mat)))))\n(S dogs (S bark (S loudly today)))\n")
    rows = tmp_path / "rows.csv"
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file), "--json", "--per-sentence", str(rows)])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert JSON_KEYS <= set(summary)
    assert summary["n_sentences"] == 2
    # Sentence 1: 3 of 4 spans (F1 75); sentence 2: gold (1,4) (2,4), prediction (1,4) (2,4): 100.
    assert summary["sentence_f1"] == pytest.approx((75 + 100) / 2)
    assert summary["corpus_f1"] == pytest.approx(100 * 5 / 6)
    with rows.open() as handle:
        table = list(csv.DictReader(handle))
    assert [row["index"] for row in table] == ["0", "1"] and float(table[1]["f1"]) == 100.0


def test_baseline_table_states_the_convention(gold_file):
    result = runner.invoke(app, ["eval", "--baseline", "left", "--gold", str(gold_file)])
    assert result.exit_code == 0, result.output
    assert "sentence F1" in result.stdout and "word-tag filter" in result.stdout


def test_mismatch_is_an_error_naming_the_line(tmp_path, gold_file):
    pred = tmp_path / "pred.txt"
    pred.write_text("(S the (S cat (S sat (S on (S the mat)))))\n(S cats (S bark (S loudly today)))\n")
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(gold_file)])
    assert result.exit_code == 2
    assert f"{pred}:2:" in result.output.replace("\n", "")
    short = tmp_path / "short.txt"
    short.write_text("(S the (S cat (S sat (S on (S the mat)))))\n")
    result = runner.invoke(app, ["eval", str(short), "--gold", str(gold_file)])
    assert result.exit_code == 2 and "1 predicted trees but 2 gold trees" in result.output.replace("\n", " ")


def test_unknown_baseline_and_conflicting_sources(gold_file, tmp_path):
    assert runner.invoke(app, ["eval", "--baseline", "diagonal", "--gold", str(gold_file)]).exit_code == 2
    pred = tmp_path / "p.txt"
    pred.write_text("(S a b)\n")
    assert runner.invoke(app, ["eval", str(pred), "--baseline", "right", "--gold", str(gold_file)]).exit_code == 2


def test_gold_against_itself_is_100_on_the_nltk_sample():
    data = os.environ.get("INDUCE_DATA")
    if not data or not (Path(data) / "nltk_treebank").is_dir():
        pytest.skip("INDUCE_DATA with nltk_treebank/ not set")
    gold = Path(data) / "nltk_treebank" / "wsj_0003.mrg"  # traces, function tags, punctuation
    for extra in ([], ["--keep-punct"], ["--multiset", "--count-root"]):
        result = runner.invoke(app, ["eval", str(gold), "--gold", str(gold), "--json", *extra])
        assert result.exit_code == 0, result.output
        summary = json.loads(result.stdout)
        assert summary["n_sentences"] > 10
        assert summary["sentence_f1"] == pytest.approx(100.0) and summary["corpus_f1"] == pytest.approx(100.0)
        assert all(v in (None, 100.0) for v in summary["label_recall"].values())


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("keep_punct", [False, True])
def test_eval_checkpoint_parses_the_filtered_gold_words_as_words(tmp_path, monkeypatch, keep_punct):
    """The gold words of `eval --checkpoint` have been through the convention's filter already: by
    default the word-tag filter that made the training text, so none may be taken for punctuation
    again (a possessive ' was attached instead of parsed, unlike the trainer's dev F1 and
    `induce reproduce`); with --keep-punct the punctuation is hidden from the model as for raw text.
    The scores equal those of the same trees written to a file and scored."""
    import induce.inference.predict as inference
    from induce.evaluation import induce_convention, prepare_gold
    from induce.trees.brackets import read_trees

    from helpers import train_tiny_run

    run = train_tiny_run(tmp_path)
    gold = tmp_path / "gold.mrg"
    gold.write_text("(S (NP (NP (NNS dogs) (POS ')) (NN food)) (VP (VBZ is) (ADJP (RB very) (JJ good))) (. .))\n"
                    "(S (NP (DT the) (NN cat) (POS 's) (NN toy)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))))\n")
    seen = []
    original = inference.predict_trees

    def spy(*args, **kwargs):
        seen.append(kwargs["keep_punct"])
        return original(*args, **kwargs)

    monkeypatch.setattr(inference, "predict_trees", spy)
    flags = ["--keep-punct"] if keep_punct else []
    result = runner.invoke(app, ["eval", "--checkpoint", str(run), "--gold", str(gold), "--json", "--device", "cpu",
                                 "--no-progress", *flags])
    assert result.exit_code == 0, result.output
    assert seen == [not keep_punct]
    via_checkpoint = json.loads(result.stdout)

    convention = induce_convention(keep_punct=keep_punct)
    words = [prepare_gold(item.tree).kept_words(convention) for item in read_trees(gold)]
    assert "'" in words[0]  # the possessive is a word here (tag POS)
    trees = original(run, words, device="cpu", keep_punct=not keep_punct)
    pred = tmp_path / "pred.txt"
    pred.write_text("".join(inference.format_tree(tree) + "\n" for tree in trees))
    result = runner.invoke(app, ["eval", str(pred), "--gold", str(gold), "--json", *flags])
    assert result.exit_code == 0, result.output
    via_file = json.loads(result.stdout)
    assert via_checkpoint["sentence_f1"] == via_file["sentence_f1"]
    assert via_checkpoint["corpus_f1"] == via_file["corpus_f1"]

"""`induce eval --convention / --gold-variant / --agreement / --compare` and `induce ensemble` end to end."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from induce.cli.evaluate import CONVENTION_NAMES
from induce.cli.main import app
from induce.evaluation.conventions import CONVENTIONS

runner = CliRunner()
DATA = Path(__file__).parent / "data" / "conventions"
GOLD = str(DATA / "gold.mrg")


def invoke(*args):
    return runner.invoke(app, [*map(str, args), "--no-progress"])


def test_the_help_lists_every_convention():
    assert CONVENTION_NAMES == tuple(CONVENTIONS)


def test_several_conventions_in_one_json_with_intervals():
    result = invoke("eval", DATA / "pred_model.punct.txt", "--gold", GOLD, "--convention", "kim2019",
                    "--convention", "li2020-punct", "--gold-variant", "nary", "--gold-variant", "right", "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    rows = {(r["convention"], r["gold_variant"]): r for r in summary["results"]}
    assert set(rows) == {("kim2019", "nary"), ("kim2019", "right"), ("li2020-punct", "nary"), ("li2020-punct", "right")}
    kim = rows[("kim2019", "nary")]
    assert round(kim["figures"]["corpus_f1"], 2) == 81.08 and round(kim["figures"]["sentence_f1"], 2) == 73.77
    assert round(rows[("li2020-punct", "nary")]["figures"]["corpus_f1"], 2) == 65.31
    low, high = kim["ci"]["corpus_f1"]
    assert low <= kim["figures"]["corpus_f1"] <= high
    assert summary["bootstrap"]["resamples"] == 1000


def test_the_table_names_each_convention_and_its_figures():
    result = invoke("eval", DATA / "pred_rb.punct.diora.jsonl", "--gold", GOLD, "--convention", "evalb-diora")
    assert result.exit_code == 0, result.output
    assert "evalb-diora" in result.stdout and "45.95" in result.stdout


def test_kim_pred_tree_file_is_aligned_and_says_so():
    result = invoke("eval", DATA / "pred_model.kim_pred_tree.txt", "--gold", GOLD, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert round(summary["corpus_f1"], 2) == 83.33 and "ci" in summary
    assert "writes no line for them" in result.stderr


def test_user_errors_name_the_option():
    result = invoke("eval", DATA / "pred_model.punct.txt", "--gold", GOLD, "--convention", "kim2020")
    assert result.exit_code == 2 and "--convention kim2020: unknown convention" in result.output
    result = invoke("eval", DATA / "pred_model.punct.txt", "--gold", GOLD, "--convention", "evalb-collins",
                    "--gold-variant", "left")
    assert result.exit_code == 2 and "labelled" in result.output
    result = invoke("eval", "--compare", DATA / "pred_model.punct.txt", "--gold", GOLD)
    assert result.exit_code == 2 and "--compare takes two sources" in result.output
    result = invoke("eval", DATA / "pred_model.punct.txt", "--gold", GOLD, "--convention", "palm", "--keep-punct")
    assert result.exit_code == 2


def test_a_prediction_file_with_a_sentence_too_many_names_its_line(tmp_path):
    extra = tmp_path / "extra.txt"
    extra.write_text((DATA / "pred_model.nopunct.txt").read_text() + "(S a b)\n")
    result = invoke("eval", extra, "--gold", GOLD, "--convention", "onlstm")
    assert result.exit_code == 2
    assert "extra.txt:8: 8 predicted trees but 7 gold trees (first unmatched sentence: 8)" in result.output


@pytest.fixture
def abcd(tmp_path):
    """Gold over `a b c d`, and the trees A, B, C of the hand-worked agreement / ensemble examples."""
    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (DT a) (NN b)) (VP (VBD c) (RB d)))\n")
    files = {}
    for name, tree in (("A", "(S (S a b) (S c d))"), ("B", "(S (S (S a b) c) d)"), ("C", "(S a (S b (S c d)))")):
        files[name] = tmp_path / f"{name}.txt"
        files[name].write_text(tree + "\n")
    return gold, files


def test_agreement_matrix_of_files(abcd):
    gold, files = abcd
    result = invoke("eval", "--agreement", files["A"], files["B"], files["C"], "--gold", gold, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["matrix"] == [[100.0, 50.0, 50.0], [50.0, 100.0, 0.0], [50.0, 0.0, 100.0]]
    assert summary["mean_pairwise_f1"] == pytest.approx(100 / 3)


def test_compare_reports_the_difference_interval_and_p_value(abcd):
    gold, files = abcd
    result = invoke("eval", "--compare", files["A"], files["B"], "--gold", gold, "--json", "--resamples", "50")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["delta"] == pytest.approx(100 - 50) and summary["resamples"] == 50
    assert {"low", "high", "p_value"} <= set(summary)


def test_ensemble_writes_the_vote_winner_and_reports_mean_and_best(abcd, tmp_path):
    gold, files = abcd
    out = tmp_path / "ens.txt"
    result = invoke("ensemble", files["A"], files["B"], files["C"], "--gold", gold, "-o", out, "--json")
    assert result.exit_code == 0, result.output
    assert out.read_text() == "(S (S a b) (S c d))\n"
    report = json.loads(result.stdout)
    # gold = A: C = (a (b (c d))) shares (2,4) with it (the agreement matrix's F1(A, C) = 50)
    assert report["member_f1"] == [100.0, 50.0, 50.0]
    assert (report["mean"], report["best"], report["ensemble"]) == (pytest.approx(200 / 3), 100.0, 100.0)
    weighted = invoke("ensemble", files["A"], files["B"], files["C"], "--gold", gold, "-o", out, "--weights", "0,1,1")
    assert weighted.exit_code == 0, weighted.output
    assert out.read_text() == "(S a (S b (S c d)))\n"
    bad = invoke("ensemble", files["A"], files["B"], "--gold", gold, "-o", out, "--weights", "1")
    assert bad.exit_code == 2 and "2 sources" in bad.output

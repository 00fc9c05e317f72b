"""`induce eval --convention / --gold-variant`, `induce agreement`, `induce compare` and `induce ensemble` end to
end."""
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
    result = invoke("compare", DATA / "pred_model.punct.txt", "--gold", GOLD)
    assert result.exit_code == 2 and "induce compare takes two sources" in result.output
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
    result = invoke("agreement", files["A"], files["B"], files["C"], "--gold", gold, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["matrix"] == [[100.0, 50.0, 50.0], [50.0, 100.0, 0.0], [50.0, 0.0, 100.0]]
    assert summary["mean_pairwise_f1"] == pytest.approx(100 / 3)


def test_compare_reports_the_difference_interval_and_p_value(abcd):
    gold, files = abcd
    result = invoke("compare", files["A"], files["B"], "--gold", gold, "--json", "--resamples", "50")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["delta"] == pytest.approx(100 - 50) and summary["resamples"] == 50
    assert {"low", "high", "p_value"} <= set(summary)


def test_two_files_of_the_same_trees_compare_with_p_1(tmp_path):
    pred = DATA / "pred_model.punct.txt"
    copy = tmp_path / "copy.txt"
    copy.write_bytes(pred.read_bytes())
    result = invoke("compare", pred, copy, "--gold", GOLD, "--json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert (summary["delta"], summary["low"], summary["high"], summary["p_value"]) == (0.0, 0.0, 0.0, 1.0)
    assert summary["alternative"] is None
    text = invoke("compare", pred, copy, "--gold", GOLD)
    assert text.exit_code == 0, text.output
    assert "p = 1 (A and B score the same" in text.stdout and "p = 0.0000" not in text.stdout


def test_compare_says_which_direction_its_p_tests_and_swaps_exactly():
    model, rb = DATA / "pred_model.punct.txt", DATA / "pred_rb.punct.txt"
    forward = json.loads(invoke("compare", model, rb, "--gold", GOLD, "--json", "--seed", "3").stdout)
    backward = json.loads(invoke("compare", rb, model, "--gold", GOLD, "--json", "--seed", "3").stdout)
    assert forward["delta"] > 0 and forward["alternative"] == "A > B" and backward["alternative"] == "A < B"
    assert backward["delta"] == -forward["delta"]
    assert (backward["low"], backward["high"]) == (-forward["high"], -forward["low"])
    assert backward["p_value"] == forward["p_value"]
    text = invoke("compare", model, rb, "--gold", GOLD, "--seed", "3")
    assert "one-sided, tests A > B" in text.stdout


def test_compare_takes_one_gold_variant_and_names_it():
    model, rb = DATA / "pred_model.punct.txt", DATA / "pred_rb.punct.txt"
    two = invoke("compare", model, rb, "--gold", GOLD, "--gold-variant", "left", "--gold-variant", "right")
    assert two.exit_code == 2 and "induce compare: one --gold-variant at most (left, right given)" in two.output
    right = invoke("compare", model, rb, "--gold", GOLD, "--gold-variant", "right", "--json")
    assert right.exit_code == 0, right.output
    summary = json.loads(right.stdout)
    nary = json.loads(invoke("compare", model, rb, "--gold", GOLD, "--json").stdout)
    assert summary["gold_variant"] == "right" and nary["gold_variant"] == "nary"
    assert summary["b"] != nary["b"]  # right-branching predictions score differently on a right-binarised gold
    text = invoke("compare", model, rb, "--gold", GOLD, "--gold-variant", "right")
    assert "gold variant right" in text.stdout


def _lines_of(path: Path, keep: list) -> str:
    from induce.trees.brackets import read_trees, tree_to_line

    return "".join(tree_to_line(located.tree) + "\n" for k, located in enumerate(read_trees(path)) if k in keep)


@pytest.mark.parametrize("limit", [["--max-length", "5"], ["--wsj10"]])
def test_agreement_applies_the_length_limit(tmp_path, limit):
    """The gold's sentences have 10, 5, 1, 2, 3, 6, 7 words (word-tag filter); an 11-word sentence is added
    so that --wsj10 leaves one out too. With the limit, the matrix is the one of the sentences within it."""
    long_gold = "(S (NP (DT a) (NN b) (NN c) (NN d)) (VP (VBD e) (NP (NN f) (NN g) (NN h) (NN i) (NN j) (NN k))))\n"
    long_a, long_b = "(S (S a b) (S c d e f g h i j k))\n", "(S a (S b c d e f g h i j k))\n"
    gold = tmp_path / "gold.txt"
    gold.write_text(_lines_of(Path(GOLD), list(range(7))) + long_gold)
    first, second = tmp_path / "a.txt", tmp_path / "b.txt"
    first.write_text((DATA / "pred_model.punct.txt").read_text() + long_a)
    second.write_text((DATA / "pred_rb.punct.txt").read_text() + long_b)
    keep = [1, 3, 4] if limit[0] == "--max-length" else [0, 1, 3, 4, 5, 6]
    within = {name: tmp_path / f"within.{name}" for name in ("gold", "a", "b")}
    for name, path in (("gold", gold), ("a", first), ("b", second)):
        within[name].write_text(_lines_of(path, keep))
    limited = invoke("agreement", first, second, "--gold", gold, *limit, "--json")
    assert limited.exit_code == 0, limited.output
    expected = invoke("agreement", within["a"], within["b"], "--gold", within["gold"], "--json")
    everything = json.loads(invoke("agreement", first, second, "--gold", gold, "--json").stdout)
    summary, expected = json.loads(limited.stdout), json.loads(expected.stdout)
    assert summary["n_sentences"] == expected["n_sentences"] == len(keep) < everything["n_sentences"]
    assert summary["matrix"] == expected["matrix"] != everything["matrix"]
    text = invoke("agreement", first, second, "--gold", gold, *limit)
    assert f"sentences of at most {5 if limit[0] == '--max-length' else 10} words" in text.stdout


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


@pytest.mark.parametrize("weights, message", [
    ("0,0,0", "--weights 0,0,0: every weight is 0"),
    ("inf,1,1", "--weights inf,1,1: weight 1 is inf"),
    ("1e400,1,1", "--weights 1e400,1,1: weight 1 is inf"),
    ("1,-1,1", "--weights 1,-1,1: weight 2 is -1; weights must be >= 0"),
    ("1,1,nan", "--weights 1,1,nan: weight 3 is nan"),
    ("1,,1", "--weights 1,,1: weight 2 is empty"),
    ("1,one,1", "--weights 1,one,1: weight 2 ('one') is not a number"),
    ("1,1", "--weights 1,1: 2 weights for 3 sources"),
])
def test_ensemble_weights_are_finite_non_negative_and_not_all_zero(abcd, tmp_path, weights, message):
    gold, files = abcd
    out = tmp_path / "ens.txt"
    result = invoke("ensemble", files["A"], files["B"], files["C"], "--gold", gold, "-o", out, f"--weights={weights}")
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {message}"), result.output
    assert not out.exists()


def test_the_library_ensemble_refuses_weights_that_are_not_votes():
    from induce.errors import InvalidValueError
    from induce.evaluation.ensemble import check_weights

    assert check_weights([0, 1, 2.5], 3) == [0.0, 1.0, 2.5]
    for weights in ([0, 0], [float("inf"), 1], [-1, 2], [float("nan"), 1], [True, 1], ["1", 1]):
        with pytest.raises(InvalidValueError):
            check_weights(weights, 2)


@pytest.mark.parametrize("hub", [False, True])
def test_words_spelled_nfd_match_their_nfc_gold(tmp_path, hub):
    """'Café' with a combining accent (NFD) is the gold's 'Café' (NFC), in any case; another word is not."""
    import unicodedata

    gold = tmp_path / "gold.txt"
    gold.write_text("(S (NP (NNP Café) (NNP Olé)) (VP (VBD opened) (NP (NN today))))\n")
    nfd = unicodedata.normalize("NFD", "café olé")
    assert nfd != "café olé"
    pred = tmp_path / "pred.txt"
    pred.write_text(f"(S (S {nfd}) (S opened today))\n")
    hub_options = ["--convention", "kim2019"] if hub else []
    result = invoke("eval", pred, "--gold", gold, *hub_options, "--json")
    assert result.exit_code == 0, result.output
    pred.write_text("(S (S Cafe Olé) (S opened today))\n")
    result = invoke("eval", pred, "--gold", gold, *hub_options)
    assert result.exit_code == 2 and "word 1 differs: predicted 'Cafe', gold 'Café'" in result.output


@pytest.mark.parametrize("options", [[], ["--convention", "onlstm"], ["--agreement", DATA / "pred_rb.punct.txt"]])
def test_a_repeated_or_missing_line_is_reported_where_it_is(tmp_path, options):
    lines = (DATA / "pred_model.punct.txt").read_text().splitlines(keepends=True)
    repeated = tmp_path / "repeated.txt"
    repeated.write_text("".join(lines[:3] + [lines[2]] + lines[3:]))
    missing = tmp_path / "missing.txt"
    missing.write_text("".join(lines[:3] + lines[4:]))
    result = invoke("eval", repeated, "--gold", GOLD, *options)
    message = " ".join(result.output.split())
    assert result.exit_code == 2
    assert ("repeated.txt:4: 8 predicted trees but 7 gold trees: the first tree whose words are not those of its "
            "gold sentence (sentence 4); it has the words of line 3 (a repeated line?)") in message
    result = invoke("eval", missing, "--gold", GOLD, *options)
    message = " ".join(result.output.split())
    assert result.exit_code == 2
    assert ("missing.txt:4: 6 predicted trees but 7 gold trees: the first tree whose words are not those of its "
            "gold sentence (sentence 4)") in message


def _spellings(path: Path) -> list:
    """Other names of the file ``path``: through ``..``, a symbolic link and a hard link."""
    import os

    (path.parent / "sub").mkdir(exist_ok=True)
    link, hard = path.parent / f"link-{path.name}", path.parent / f"hard-{path.name}"
    link.symlink_to(path)
    os.link(path, hard)
    return [path.parent / "sub" / ".." / path.name, link, hard]


@pytest.mark.parametrize("command", ["ensemble", "agreement", "compare"])
def test_one_source_given_twice_is_refused(abcd, tmp_path, command):
    """Each source of an ensemble (a vote, a weight), of agreement (a row of the matrix) and of compare counts
    in its own right: one file given twice, under any of its names, is refused before anything is read, naming
    both paths (counted once it would leave a source, a weight or a side out without saying)."""
    gold, files = abcd
    out = tmp_path / "ens.txt"
    for other in _spellings(files["A"]):
        sources = [files["A"], other] if command == "compare" else [files["A"], files["B"], other]
        args = {"ensemble": ["ensemble", *sources, "-o", out], "agreement": ["agreement", *sources],
                "compare": ["compare", *sources]}[command]
        result = invoke(*args, "--gold", gold)
        assert result.exit_code == 2, result.output
        assert f"{other}: " in result.output and f"the same file as {files['A']}" in result.output, result.output
        assert len(result.output.strip().splitlines()) == 1 and not out.exists()


def test_the_old_eval_flags_point_to_the_new_commands(abcd):
    """`induce eval --agreement / --compare` still work, saying once on stderr which command they are now."""
    gold, files = abcd
    old = invoke("eval", "--agreement", files["A"], files["B"], files["C"], "--gold", gold, "--json")
    new = invoke("agreement", files["A"], files["B"], files["C"], "--gold", gold, "--json")
    assert old.exit_code == 0, old.output
    assert old.stdout == new.stdout and "`induce eval --agreement` is now `induce agreement`" in old.stderr
    old = invoke("eval", "--compare", files["A"], files["B"], "--gold", gold, "--json", "--resamples", "50")
    new = invoke("compare", files["A"], files["B"], "--gold", gold, "--json", "--resamples", "50")
    assert old.exit_code == 0, old.output
    assert old.stdout == new.stdout and "`induce eval --compare` is now `induce compare`" in old.stderr

"""Named evaluation conventions: each equals its original script's printed figures on the fixtures
(tests/data/conventions/README.md: the commands, commits and figures), and each rule on a hand-worked example."""
from __future__ import annotations

from pathlib import Path

import nltk
import pytest

from induce.errors import InduceError, InputError
from induce.evaluation.conventions import CONVENTIONS
from induce.evaluation.engine import score, sentence_scores
from induce.evaluation.evalb import COLLINS, DIORA, evalb_sentence
from induce.evaluation.gold import Gold, load_gold, prediction_node, prepare_gold
from induce.trees.formats import fill_one_word_sentences, read_predictions
from induce.trees.nodes import constituents, from_nltk
from induce.trees.transforms import binarise, collapse_unary

DATA = Path(__file__).parent / "data" / "conventions"


@pytest.fixture(scope="module")
def golds():
    return load_gold(DATA / "gold.mrg").sentences


def predictions(name: str, golds=None):
    located, fmt = read_predictions(DATA / name)
    if golds is not None:
        lengths = [sum(tag in __import__("induce.trees.ptb", fromlist=["WORD_TAGS"]).WORD_TAGS for tag in g.tags)
                   for g in golds]
        located, _ = fill_one_word_sentences(located, lengths, fmt, name)
    return [None if item is None else prediction_node(item.tree) for item in located]


def figure(golds, convention: str, pred_file: str, key: str, max_length=None) -> float:
    preds = predictions(pred_file, golds)
    return score(golds, preds, CONVENTIONS[convention].limited(max_length)).figures[key]


# (convention, prediction file, figure, printed value, digits printed (of the percentage))
PARITY = [
    *[("kim2019", f"pred_{p}.kim_pred_tree.txt", key, value, 2) for p, figures in
      {"model": (81.08, 73.77), "rb": (32.43, 37.22), "lb": (27.03, 37.33)}.items()
      for key, value in zip(("corpus_f1", "sentence_f1"), figures)],
    *[("onlstm", f"pred_{p}.nopunct.diora.jsonl", key, value, 2) for p, figures in
      {"model": (72.02, 100.0, 77.52), "rb": (43.93, 63.81, 46.19), "lb": (44.40, 63.33, 46.28)}.items()
      for key, value in zip(("sentence_precision", "sentence_recall", "sentence_f1"), figures)],
    *[("onlstm-evalb", f"pred_{p}.nopunct.diora.jsonl", key, value, 2) for p, figures in
      {"model": (77.78, 100.0, 87.5), "rb": (44.44, 57.14, 50.0), "lb": (40.74, 52.38, 45.83)}.items()
      for key, value in zip(("corpus_precision", "corpus_recall", "corpus_f1"), figures)],
    *[("prpn", f"pred_{p}.nopunct.diora.jsonl", key, value, 4) for p, figures in
      {"model": (72.0238, 100.0, 77.5196), "rb": (43.9286, 63.8095, 46.1852), "lb": (44.4048, 63.3333, 46.2794)}.items()
      for key, value in zip(("sentence_precision", "sentence_recall", "sentence_f1"), figures)],
    *[("palm", f"pred_{p}.nopunct.diora.jsonl", key, value, 6) for p, figures in
      {"model": (81.666667, 100.0, 88.752834), "rb": (58.968254, 72.619048, 64.081633),
       "lb": (58.888889, 71.428571, 63.560091)}.items()
      for key, value in zip(("sentence_precision", "sentence_recall", "sentence_f1"), figures)],
    *[("palm", f"pred_{p}.nopunct.diora.jsonl", key, 100 * value, 12) for p, figures in
      {"model": (0.7777777777777778, 1.0, 0.8750000000000001), "rb": (0.4444444444444444, 0.5714285714285714, 0.5),
       "lb": (0.4074074074074074, 0.5238095238095238, 0.4583333333333333)}.items()
      for key, value in zip(("corpus_precision", "corpus_recall", "corpus_f1"), figures)],
    *[(name, f"pred_{p}.{space}.txt", key, value, 2)
      for conv, evalb_conv, space, table in (
          ("li2020", "li2020-evalb", "linp", {"model": (84.21, 78.34, 84.62), "rb": (31.58, 46.19, 46.15),
                                              "lb": (26.32, 44.65, 42.31)}),
          ("li2020-punct", "li2020-evalb-punct", "punct", {"model": (65.31, 54.93, 73.02), "rb": (0.00, 14.29, 22.22),
                                                            "lb": (24.49, 36.68, 41.27)}))
      for p, figures in table.items()
      for name, key, value in zip((conv, conv, evalb_conv), ("corpus_f1", "sentence_f1", "corpus_f1"), figures)],
    *[(conv, f"pred_{p}.punct.diora.jsonl", key, value, 2)
      for conv, table in (("evalb-diora", {"model": (65.71, 58.97, 62.16), "rb": (48.57, 43.59, 45.95),
                                           "lb": (37.14, 33.33, 35.14)}),
                          ("evalb-collins", {"model": (22.86, 20.51, 21.62), "rb": (17.14, 15.38, 16.22),
                                             "lb": (20.00, 17.95, 18.92)}))
      for p, figures in table.items()
      for key, value in zip(("corpus_recall", "corpus_precision", "corpus_f1"), figures)],
]


@pytest.mark.parametrize("convention, pred_file, key, printed, digits", PARITY)
def test_each_convention_equals_its_script_to_the_printed_digit(golds, convention, pred_file, key, printed, digits):
    assert round(figure(golds, convention, pred_file, key), digits) == round(printed, digits)


@pytest.mark.parametrize("convention, pred, figures", [
    ("li2020-punct", "model", (57.14, 48.33)), ("li2020-punct", "rb", (0.00, 20.00)),
    ("li2020-punct", "lb", (28.57, 42.78)),
])
def test_li_len_limit_10_counts_punctuation(golds, convention, pred, figures):
    """Li et al.'s --len_limit 10 on the punct data: s1 and s7 have 11 tokens with punctuation."""
    preds = predictions(f"pred_{pred}.punct.txt")
    result = score(golds, preds, CONVENTIONS[convention].limited(10))
    assert (round(result.figures["corpus_f1"], 2), round(result.figures["sentence_f1"], 2)) == figures
    evalb = score(golds, preds, CONVENTIONS["li2020-evalb-punct"].limited(10)).figures["corpus_f1"]
    assert round(evalb, 2) == {"model": 70.97, "rb": 32.26, "lb": 51.61}[pred]


def test_every_format_of_a_prediction_gives_the_same_figures(golds):
    """The same trees in four formats (the Kim file lacks the one-word sentence: filled in)."""
    for convention in ("kim2019", "onlstm", "palm"):
        values = {name: figure(golds, convention, name, "sentence_f1") for name in (
            "pred_model.nopunct.txt", "pred_model.punct.txt", "pred_model.nopunct.spans.jsonl",
            "pred_model.nopunct.diora.jsonl", "pred_model.kim_pred_tree.txt")}
        assert len({round(v, 9) for v in values.values()}) == 1, (convention, values)


# ---- each rule, hand-worked --------------------------------------------------------------------------


def _gold(text: str) -> Gold:
    return prepare_gold(nltk.Tree.fromstring(text))


def _score(convention: str, gold: str, pred: str):
    tree = nltk.Tree.fromstring(pred)
    return score([_gold(gold)], [prediction_node(tree)], CONVENTIONS[convention])


UNARY_ROOT = "(FRAG (NP (NNP John) (NNP Q.) (NNP Public)) (. .))"


def test_kim_drops_only_the_outermost_bracket():
    """Gold FRAG(0,3) > NP(0,3) > (1,3)? no: NP is flat. Kim drops FRAG's copy only, NP's (0,3) stays and no
    binary prediction has it after its own root is dropped: gold {(0,3)}, pred {(1,3)} -> 0 matches."""
    result = _score("kim2019", UNARY_ROOT, "(S John (S Q. Public))")
    counts = result.sentences[0]
    assert (counts.match, counts.n_pred, counts.n_gold) == (0, 1, 1)
    # without the unary chain there is no gold span at all (Kim: recall 1, precision 0 -> F1 0)
    plain = _score("kim2019", "(NP (NNP John) (NNP Q.) (NNP Public))", "(S John (S Q. Public))").sentences[0]
    assert (plain.match, plain.n_pred, plain.n_gold) == (0, 1, 0)
    assert _score("onlstm", UNARY_ROOT, "(S John (S Q. Public))").sentences[0].n_gold == 0


def test_kim_skips_one_word_sentences_onlstm_scores_them_almost_one():
    assert _score("kim2019", "(FRAG (UH Yes) (. .))", "(S Yes)").sentences == []
    [one] = _score("onlstm", "(FRAG (UH Yes) (. .))", "(S Yes)").sentences
    assert one.f1 == pytest.approx(2 / (2 + 1e-8), abs=0) and one.f1 != 1.0  # the 1e-8 of the original
    assert _score("palm", "(FRAG (UH Yes) (. .))", "(S Yes)").sentences[0].f1 == 1.0  # PaLM: exact


def test_palm_counts_the_whole_sentence():
    gold, pred = "(S (NP (DT a) (NN b)) (VBD c))", "(S a (S b c))"
    assert _score("palm", gold, pred).sentences[0].n_gold == 2  # (0,3) and (0,2)
    counts = _score("palm", gold, pred).sentences[0]
    assert (counts.match, counts.n_pred) == (1, 2)
    assert _score("onlstm", gold, pred).sentences[0].n_gold == 1


def test_li_counts_a_predictions_duplicate_spans():
    """A unary chain in the prediction counts twice (multiset), in the gold once (their preprocessing
    collapses it)."""
    gold = "(S (NP (DT a) (NN b)) (VP (VBD c) (NN d)))"
    pred = "(S (X (X a b)) (X c d))"
    counts = _score("li2020", gold, pred).sentences[0]
    assert (counts.match, counts.n_pred, counts.n_gold) == (2, 3, 2)
    assert _score("kim2019", gold, pred).sentences[0].n_pred == 2  # a set


def test_li_keeps_dollar_and_drops_sym():
    gold = _gold("(S (NP ($ $) (CD 5)) (SYM x) (VP (VBD fell)) (. .))")
    from induce.evaluation.conventions import TOKEN_FILTERS
    assert [TOKEN_FILTERS["li_nopunct"](t) for t in gold.tags] == [True, True, False, True, False]
    assert [TOKEN_FILTERS["word_tags"](t) for t in gold.tags] == [False, True, True, True, False]


def test_evalb_counts_single_word_brackets_and_the_root():
    """diora.prm: gold (S (NP (PRP He)) (VP (VBD left))) has brackets S(0,2), NP(0,1), VP(1,2); a binary
    prediction (S (DT he) (DT left)) has only S(0,2)."""
    gold = from_nltk(nltk.Tree.fromstring("(S (NP (PRP He)) (VP (VBD left)))"))
    pred = from_nltk(nltk.Tree.fromstring("(S (DT He) (DT left))"))
    counts = evalb_sentence(gold, pred, DIORA)
    assert (counts.match, counts.n_gold, counts.n_pred) == (1, 3, 1)
    labelled = evalb_sentence(gold, from_nltk(nltk.Tree.fromstring("(X (DT He) (DT left))")), COLLINS)
    assert labelled.match == 0  # labelled: X is not S


def test_evalb_deletes_punctuation_by_each_trees_own_tags():
    gold = from_nltk(nltk.Tree.fromstring("(S (NP (PRP He)) (VP (VBD left)) (. .))"))
    same_tags = from_nltk(nltk.Tree.fromstring("(S (PRP He) (S (VBD left) (. .)))"))
    other_tags = from_nltk(nltk.Tree.fromstring("(S (DT He) (S (DT left) (DT .)))"))
    assert evalb_sentence(gold, same_tags, DIORA).status == 0
    assert evalb_sentence(gold, same_tags, DIORA).match == 2  # S(0,2) twice in pred, once in gold; NP, VP
    assert evalb_sentence(gold, other_tags, DIORA).status == 1  # 3 words against 2: an error sentence


def test_the_diora_driver_keeps_the_unary_nodes_projection_leaves():
    """(S (S Yes) .) over all tokens -> after removing '.' the driver writes (S (S (DT Yes))): two brackets."""
    result = _score("evalb-diora", "(FRAG (INTJ (UH Yes)) (. .))", "(S (S Yes) .)")
    counts = result.sentences[0]
    assert (counts.n_pred, counts.n_gold, counts.match) == (1, 2, 1)


def test_sentence_formulas_on_empty_sets():
    assert sentence_scores(0, 0, 0, "epsilon")[2] == pytest.approx(1.0, abs=1e-8)
    assert sentence_scores(0, 1, 0, "epsilon")[2] == 0.0
    assert sentence_scores(0, 0, 0, "exact") == (1.0, 1.0, 1.0)
    assert sentence_scores(0, 2, 0, "li") == (0.0, 0.0, 0.0)
    assert sentence_scores(1, 2, 1, "li")[2] == pytest.approx(2 / 3)


@pytest.mark.parametrize("side", ["left", "right"])
def test_binarised_gold_equals_the_hand_binarised_fixture(golds, side):
    expected = [from_nltk(t.tree) for t in read_predictions(DATA / f"gold.nopunct.bin{side}.txt")[0]]
    from induce.evaluation.conventions import TOKEN_FILTERS
    from induce.trees.nodes import prune
    for gold, want in zip(golds, expected):
        kept = prune(gold.tree, [TOKEN_FILTERS["word_tags"](t) for t in gold.tags])
        got = binarise(kept, side)
        def shape(node):  # spans, and which are new nodes (function tags differ: the fixture has them cut)
            return sorted((i, j, label.endswith("@")) for label, i, j in constituents(node))
        assert shape(got) == shape(want)


def test_binarised_gold_raises_a_flat_gold_score_to_what_binary_trees_can_reach(golds):
    """Right-branching predictions against right-binarised gold: every gold span a binary tree can have."""
    preds = predictions("pred_rb.nopunct.txt")
    nary = score(golds, preds, CONVENTIONS["kim2019"]).figures["corpus_f1"]
    right = score(golds, preds, CONVENTIONS["kim2019"], variant="right").figures["corpus_f1"]
    assert right > nary
    with pytest.raises(InduceError, match="labelled"):
        score(golds, preds, CONVENTIONS["evalb-collins"], variant="left")


def test_collapse_unary_keeps_the_root_child_for_li():
    tree = from_nltk(nltk.Tree.fromstring("(FRAG (NP (NNP John) (NNP Q.)))"))
    assert [c[0] for c in constituents(collapse_unary(tree, keep_root_child=True))] == ["FRAG", "NP", "NNP", "NNP"]
    assert [c[0] for c in constituents(collapse_unary(tree))] == ["FRAG", "NNP", "NNP"]


def test_a_misaligned_prediction_names_the_line_and_both_lengths(golds, tmp_path):
    bad = tmp_path / "bad.txt"
    lines = (DATA / "pred_model.nopunct.txt").read_text().splitlines()
    lines[1] = "(S They (S paid he))"
    bad.write_text("\n".join(lines) + "\n")
    located, _ = read_predictions(bad)
    preds = [prediction_node(item.tree) for item in located]
    with pytest.raises(InputError,
                       match=r"bad.txt:2: the predicted tree has 3 leaves but the gold sentence has 5 words"):
        score(golds, preds, CONVENTIONS["kim2019"], locations=[(i.path, i.line) for i in located])


def test_the_induce_convention_on_the_model_fixture(golds):
    """`--convention induce` is `induce eval` without --convention (83.33 on the model fixture); kim2019 differs
    only by the unary-root sentence s5 (81.08)."""
    assert round(figure(golds, "induce", "pred_model.nopunct.txt", "corpus_f1"), 2) == 83.33

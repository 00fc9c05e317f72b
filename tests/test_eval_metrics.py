"""The evaluator against hand-worked examples and brute force."""
import random

import nltk
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from induce.errors import InputError
from induce.evaluation import (
    DEFAULT,
    baseline_predictions,
    baseline_tree,
    induce_convention,
    prepare_gold,
    score,
    sentence_prf,
)
from induce.evaluation.gold import gold_view
from induce.trees.nodes import constituents
from induce.trees.ptb import strip_function_tags

T = nltk.Tree.fromstring
GOLD = "(S (NP (DT the) (NN cat)) (VP (VBD sat) (PP (IN on) (NP (DT the) (NN mat)))) (. .))"
RIGHT = "(S the (S cat (S sat (S on (S the mat)))))"
LEFT = "(S (S (S (S (S the cat) sat) on) the) mat)"


def test_right_and_left_branching_by_hand():
    # Gold spans without length-1 and root: (0,2) NP, (2,6) VP, (3,6) PP, (4,6) NP.
    right = score([T(GOLD)], [T(RIGHT)])  # (1,6) (2,6) (3,6) (4,6): 3 of 4 match
    assert right.sentence_f1 == pytest.approx(75.0)
    assert right.corpus_f1 == pytest.approx(75.0)
    left = score([T(GOLD)], [T(LEFT)])  # (0,2) (0,3) (0,4) (0,5): 1 of 4
    assert left.precision == pytest.approx(25.0) and left.recall == pytest.approx(25.0)
    assert right.label_recall["VP"] == 100.0 and right.label_recall["NP"] == 50.0
    assert left.label_recall["NP"] == 50.0 and left.label_recall["VP"] == 0.0


def test_prediction_covering_punctuation_is_projected():
    # 7 leaves: the final "." is dropped by the word-tag filter, so (0,7)->(0,6) is the root.
    with_punct = T("(S (S the (S cat (S sat (S on (S the mat))))) .)")
    assert score([T(GOLD)], [with_punct]).sentence_f1 == pytest.approx(75.0)
    # Keeping punctuation (root (0,7) not counted): gold (0,2) (2,6) (3,6) (4,6); the prediction
    # (0,6) (1,6) (2,6) (3,6) (4,6): 3 matches, precision 3/5, recall 3/4.
    kept = score([T(GOLD)], [with_punct], induce_convention(keep_punct=True))
    assert kept.precision == pytest.approx(60.0) and kept.recall == pytest.approx(75.0)


def test_right_branching_on_right_branching_gold_is_100():
    gold = T("(S (DT a) (S (NN b) (S (VB c) (S (RB d) (NN e)))))")
    result = score([gold], baseline_predictions([gold], "right"))
    assert result.sentence_f1 == 100.0 and result.corpus_f1 == 100.0


def test_count_root_and_short_sentences():
    gold2 = T("(S (NN a) (VB b))")  # two words: no counted span
    gold1 = T("(S (NN a) (. .))")  # one word after removal: skipped
    result = score([gold2, gold1], [T("(S a b)"), T("(S a .)")])
    assert result.n_sentences == 1 and result.n_skipped == 1
    assert result.sentence_f1 == 100.0  # gold and prediction without spans: F1 = 1
    rooted = score([T(GOLD)], [T(RIGHT)], induce_convention(count_root=True))
    assert rooted.precision == pytest.approx(80.0)  # root added on both sides: 4 of 5


def test_empty_gold_conventions():
    assert sentence_prf(0, 0, 0) == (1.0, 1.0, 1.0)
    precision, recall, f1 = sentence_prf(0, 2, 0)
    assert (precision, recall, f1) == (0.0, 1.0, 0.0)
    assert sentence_prf(0, 0, 3)[2] == 0.0


def test_multiset_counts_unary_chains():
    gold = T("(S (NP (NP (DT the) (NN cat))) (VP (VBD sat) (ADVP (RB down) (RB here))))")
    pred = T("(S (S the cat) (S sat (S down here)))")
    as_set = score([gold], [pred])
    multi = score([gold], [pred], induce_convention(multiset=True))
    assert as_set.recall == pytest.approx(100.0)
    assert multi.recall == pytest.approx(75.0)  # gold (0,2) twice, prediction once
    assert multi.label_counts["NP"] == 2 and as_set.label_counts["NP"] == 1


def test_length_filter_applies_after_punctuation_removal():
    long_gold = T("(S " + " ".join(f"(NN w{i})" for i in range(10)) + " (. .) (, ,))")
    pred = T("(S " + " ".join(f"w{i}" for i in range(10)) + " . ,)")
    assert score([long_gold], [pred], induce_convention(max_length=10)).n_sentences == 1
    assert score([long_gold], [pred], induce_convention(max_length=9)).n_sentences == 0


def test_traces_and_function_tags_are_removed():
    raw = T("( (S (NP-SBJ (-NONE- *-1)) (NP-SBJ-1 (DT the) (NN cat)) (VP (VBD sat) (ADVP-LOC (RB here))) (. .)) )")
    gold = prepare_gold(raw)
    assert gold.kept_words(DEFAULT) == ["the", "cat", "sat", "here"]
    labelled = [(strip_function_tags(label or ""), i, j) for label, i, j in constituents(gold_view(gold, DEFAULT)[0])]
    assert ("NP", 0, 2) in labelled and ("VP", 2, 4) in labelled


def test_mismatches_name_the_line():
    with pytest.raises(InputError, match=r"pred\.txt:2: word 2 differs"):
        score([T("(S (NN a) (NN b))"), T("(S (DT the) (NN cat) (VBD sat))")], [T("(S a b)"), T("(S the dog sat)")],
              locations=[("pred.txt", 1), ("pred.txt", 2)])
    with pytest.raises(InputError, match=r"2 predicted trees but 3 gold trees"):
        score([T("(S (NN a) (NN b))")] * 3, [T("(S a b)")] * 2)
    with pytest.raises(InputError, match=r"3 leaves"):
        score([T("(S (NN a) (NN b))")], [T("(S a b c)")])


def test_branching_statistics_by_hand():
    # Gold: S -> NP VP . ; after removal S(0,6) has 2 children NP(0,2) VP(2,6): other binary split;
    # VP(2,6) -> sat PP(3,6): right; PP(3,6) -> on NP(4,6): right. NP(4,6) has length 2: not counted.
    result = score([T(GOLD)], [T(LEFT)])
    gold = result.gold_branching
    assert (gold.n_splits, gold.left, gold.right, gold.other_binary, gold.nary) == (3, 0, 2, 1, 0)
    pred = result.pred_branching  # left-branching over 6 words: splits of (0,6) (0,5) (0,4) (0,3)
    assert (pred.n_splits, pred.left, pred.right) == (4, 4, 0)
    nary = score([T("(S (NN a) (NN b) (NN c))")], [T("(S a b c)")])
    assert nary.gold_branching.nary == 1 and nary.to_dict()["gold_nary_split_pct"] == 100.0


# ------------------------------------------------------------------ brute force with hypothesis


def random_binary(rng: random.Random, start: int, end: int, spans: set, splits: list):
    """A random binary bracket string over words w{start}..w{end-1}; records spans and splits."""
    if end - start == 1:
        return f"w{start}"
    k = rng.randint(start + 1, end - 1)
    spans.add((start, end))
    splits.append((k - start, end - k))
    return f"(X {random_binary(rng, start, k, spans, splits)} {random_binary(rng, k, end, spans, splits)})"


def as_gold(bracket: str) -> nltk.Tree:
    tree = T(bracket if bracket.startswith("(") else f"(X {bracket})")
    for position in tree.treepositions("leaves"):
        tree[position] = f"(NN {tree[position]})"
    return T(str(tree))


@settings(max_examples=150, deadline=None)
@given(n=st.integers(min_value=1, max_value=9), seed_pred=st.integers(0, 10**6), seed_gold=st.integers(0, 10**6))
def test_f1_and_branching_against_brute_force(n, seed_pred, seed_gold):
    pred_spans, gold_spans, pred_splits, gold_splits = set(), set(), [], []
    pred = random_binary(random.Random(seed_pred), 0, n, pred_spans, pred_splits)
    gold = random_binary(random.Random(seed_gold), 0, n, gold_spans, gold_splits)
    pred_tree = T(pred if pred.startswith("(") else f"(X {pred})")
    result = score([as_gold(gold)], [pred_tree])
    if n < 2:
        assert result.n_sentences == 0
        return
    def counted(spans):
        return {(i, j) for i, j in spans if j - i >= 2 and (i, j) != (0, n)}

    p, g = counted(pred_spans), counted(gold_spans)
    match = len(p & g)
    precision = match / len(p) if p else (1.0 if not g else 0.0)
    recall = match / len(g) if g else 1.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    assert result.sentence_f1 == pytest.approx(100 * f1)
    long_splits = [s for s in pred_splits if sum(s) > 2]
    assert result.pred_branching.n_splits == len(long_splits)
    assert result.pred_branching.left == sum(1 for a, b in long_splits if b == 1)
    assert result.pred_branching.right == sum(1 for a, b in long_splits if a == 1)


@settings(max_examples=60, deadline=None)
@given(lengths=st.lists(st.integers(2, 12), min_size=1, max_size=6), seed=st.integers(0, 1000))
def test_corpus_f1_sums_counts(lengths, seed):
    rng = random.Random(seed)
    preds, golds, tp, n_pred, n_gold = [], [], 0, 0, 0
    for n in lengths:
        ps, gs = set(), set()
        preds.append(T(random_binary(rng, 0, n, ps, [])))
        golds.append(as_gold(random_binary(rng, 0, n, gs, [])))
        ps, gs = ({s for s in spans if s[1] - s[0] >= 2 and s != (0, n)} for spans in (ps, gs))
        tp, n_pred, n_gold = tp + len(ps & gs), n_pred + len(ps), n_gold + len(gs)
    result = score(golds, preds)
    if n_pred and n_gold:
        assert result.precision == pytest.approx(100 * tp / n_pred)
        assert result.recall == pytest.approx(100 * tp / n_gold)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 12])
def test_baselines_are_the_expected_binary_trees(n):
    def spans(node):
        return {(i, j) for _, i, j in constituents(node) if j - i >= 2}

    assert spans(baseline_tree(n, "right")) == {(i, n) for i in range(n - 1)}
    assert spans(baseline_tree(n, "left")) == {(0, j) for j in range(2, n + 1)}
    for kind in ("balanced", "random"):
        tree = baseline_tree(n, kind, random.Random(3))
        assert len(spans(tree)) == n - 1  # binary: n - 1 internal nodes, all distinct
    assert spans(baseline_tree(n, "random", random.Random(5))) == spans(baseline_tree(n, "random", random.Random(5)))
    with pytest.raises(ValueError):
        baseline_tree(n, "diagonal")


def test_random_baseline_is_uniform_over_split_points():
    counts = [0] * 4
    rng = random.Random(0)
    for _ in range(4000):
        top = baseline_tree(5, "random", rng)
        counts[top.children[0].length - 1] += 1
    assert all(abs(c - 1000) < 150 for c in counts)


def test_empty_constituents_cover_no_span():
    """``(NP )`` in a tree covers no word: it adds no span and no split; ``()`` alone has no word."""
    from induce.trees.nodes import from_nltk

    with_empty = nltk.Tree.fromstring("(S (NP ) (NP (DT the) (NN cat)) (VP (VBD sat)) (ADVP ))")
    plain = nltk.Tree.fromstring("(S (NP (DT the) (NN cat)) (VP (VBD sat)))")
    assert constituents(from_nltk(with_empty)) == constituents(from_nltk(plain))
    assert score([with_empty], [plain]).corpus_f1 == 100.0
    empty = prepare_gold(nltk.Tree.fromstring("()"))
    assert empty.words == [] and empty.tree is None

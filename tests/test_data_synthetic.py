"""The synthetic PCFG treebank: determinism, validity of its trees, and its prepared corpus."""
from __future__ import annotations

from induce.data import synthetic
from induce.data.corpus import PreparedCorpus
from induce.data.preprocess import preprocess_synthetic
from induce.trees.ptb import WORD_TAGS, clean_tree
from induce.trees.brackets import tree_to_line


def lines(treebank):
    return {split: [tree_to_line(t) for t in trees] for split, trees in treebank.items()}


def test_deterministic_by_seed_and_independent_splits():
    first = lines(synthetic.sample_treebank({"train": 60, "valid": 10}, seed=3))
    assert first == lines(synthetic.sample_treebank({"train": 60, "valid": 10}, seed=3))
    assert first["train"] != lines(synthetic.sample_treebank({"train": 60}, seed=4))["train"]
    # resizing one split leaves the others unchanged
    assert lines(synthetic.sample_treebank({"train": 5, "valid": 10}, seed=3))["valid"] == first["valid"]
    assert lines(synthetic.sample_treebank({"train": 80}, seed=3))["train"][:60] == first["train"]


def test_trees_are_valid_grammar_derivations_with_ptb_tags():
    pcfg = synthetic.grammar()
    trees = synthetic.sample_treebank({"train": 300}, seed=0)["train"]
    tags = set()
    for tree in trees:
        assert synthetic.tree_in_grammar(tree, pcfg)
        assert 2 <= len(tree.leaves()) <= synthetic.MAX_LENGTH
        tags.update(tag for _, tag in tree.pos())
    assert {",", "."} <= tags  # punctuation is present so the word-tag filter is exercised
    assert tags - {",", "."} <= WORD_TAGS
    # the validator is not vacuous: a tree outside the grammar is rejected
    broken = trees[0].copy(deep=True)
    broken[0].insert(0, type(broken)("NN", ["dog"]))
    assert not synthetic.tree_in_grammar(broken, pcfg)


def test_synthetic_corpus(tmp_path):
    sizes = {"train": 50, "valid": 10, "test": 10}
    folder = preprocess_synthetic(tmp_path / "corpora", sizes=sizes, seed=1)
    corpus = PreparedCorpus(folder)
    assert corpus.splits == ["train", "valid", "test"] and corpus.has_trees
    assert [corpus.meta["splits"][s]["trees"] for s in corpus.splits] == [50, 10, 10]
    trees = synthetic.sample_treebank(sizes, seed=1)["valid"]
    assert [tree_to_line(t) for t in corpus.gold_trees("valid")] == [tree_to_line(clean_tree(t)) for t in trees]
    for tokens, tree in zip(corpus.lm_sentences("valid"), trees):
        assert len(tokens) == sum(tag in WORD_TAGS for _, tag in tree.pos()) < len(tree.leaves())

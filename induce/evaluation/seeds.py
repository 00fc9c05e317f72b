"""Several seeds of one model (``induce reproduce`` with ``--seeds``): how much their trees agree (self-F1)
and what the ensemble of their trees scores against the seeds' mean and best.

The trees are those ``induce reproduce`` writes per run (``eval/<model>-seed<S>.<split>.trees.txt``: one
tree per gold sentence, over every token; files written before that hold the words the default convention
keeps). Both are compared over the words the default convention keeps.
"""
from __future__ import annotations

import statistics
from pathlib import Path
from typing import Sequence


def seed_summary(tree_files: Sequence[Path], gold_trees: Sequence) -> dict:
    """``{"self_f1", "matrix", "seeds": [{"sentence_f1", "corpus_f1"}], "mean", "best", "ensemble"}`` of the
    seeds' tree files (in seed order) on the gold trees, under the default convention (all lengths); the
    ensemble is :func:`induce.evaluation.ensemble.ensemble_tree` of the seeds' trees, equal weights."""
    import nltk

    from induce.evaluation import DEFAULT, prepare_gold, score
    from induce.trees.brackets import read_trees
    from induce.trees.nodes import from_nltk, prune, tagged_leaves, to_nltk
    from induce.trees.transforms import collapse_unary

    from .agreement import agreement_matrix, mean_off_diagonal
    from .ensemble import ensemble_tree

    golds = [prepare_gold(tree) for tree in gold_trees]

    def on_kept_words(tree, gold) -> tuple:
        """``(node, words)`` of a tree over the words the default convention keeps (projected from every token)."""
        node, words = from_nltk(tree), [leaf for leaf, _, _ in tagged_leaves(tree)]
        keep = gold.keep(DEFAULT)
        if len(words) != sum(keep) and len(words) == len(gold.words):
            node, words = collapse_unary(prune(node, keep)), gold.kept_words(DEFAULT)
        return node, words

    trees = [[item.tree for item in read_trees(path)] for path in tree_files]
    projected = [[on_kept_words(tree, gold) for tree, gold in zip(seed, golds)] for seed in trees]
    nodes = [[node for node, _ in seed] for seed in projected]
    several = [i for i, node in enumerate(nodes[0]) if node.end - node.start >= 2]
    matrix = agreement_matrix([[seed[i] for i in several] for seed in nodes])
    ensemble = []
    for i, (_, words) in enumerate(projected[0]):
        members = [seed[i] for seed in nodes]
        ensemble.append(to_nltk(ensemble_tree(members), words) if len(words) >= 2 else nltk.Tree("S", words))
    figures = [score(golds, seed) for seed in trees]
    seeds = [{"sentence_f1": r.sentence_f1, "corpus_f1": r.corpus_f1} for r in figures]
    combined = score(golds, ensemble)
    return {
        "self_f1": mean_off_diagonal(matrix), "matrix": matrix, "seeds": seeds,
        "mean": {key: statistics.fmean(s[key] for s in seeds) for key in ("sentence_f1", "corpus_f1")},
        "best": {key: max(s[key] for s in seeds) for key in ("sentence_f1", "corpus_f1")},
        "ensemble": {"sentence_f1": combined.sentence_f1, "corpus_f1": combined.corpus_f1},
    }

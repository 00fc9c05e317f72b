"""Several seeds of one model (``induce reproduce`` with ``--seeds``): how much their trees agree (self-F1)
and what the ensemble of their trees scores against the seeds' mean and best.

The trees are those ``induce reproduce`` writes per run (``eval/<model>-seed<S>.<split>.trees.txt``: one
tree per gold sentence, over the words the default convention keeps).
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

    from induce.evaluation import evaluate
    from induce.trees.brackets import read_trees
    from induce.trees.nodes import from_nltk, tagged_leaves, to_nltk

    from .agreement import agreement_matrix, mean_off_diagonal
    from .ensemble import ensemble_tree

    trees = [[item.tree for item in read_trees(path)] for path in tree_files]
    nodes = [[from_nltk(tree) for tree in seed] for seed in trees]
    several = [i for i, node in enumerate(nodes[0]) if node.end - node.start >= 2]
    matrix = agreement_matrix([[seed[i] for i in several] for seed in nodes])
    ensemble = []
    for i, tree in enumerate(trees[0]):
        words = [leaf for leaf, _, _ in tagged_leaves(tree)]
        members = [seed[i] for seed in nodes]
        ensemble.append(to_nltk(ensemble_tree(members), words) if len(words) >= 2 else nltk.Tree("S", words))
    figures = [evaluate(seed, gold_trees) for seed in trees]
    seeds = [{"sentence_f1": r.sentence_f1, "corpus_f1": r.corpus_f1} for r in figures]
    combined = evaluate(ensemble, gold_trees)
    return {
        "self_f1": mean_off_diagonal(matrix), "matrix": matrix, "seeds": seeds,
        "mean": {key: statistics.fmean(s[key] for s in seeds) for key in ("sentence_f1", "corpus_f1")},
        "best": {key: max(s[key] for s in seeds) for key in ("sentence_f1", "corpus_f1")},
        "ensemble": {"sentence_f1": combined.sentence_f1, "corpus_f1": combined.corpus_f1},
    }

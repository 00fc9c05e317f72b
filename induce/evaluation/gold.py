"""Gold trees and predictions brought onto the same words: what every convention scores.

* :class:`Gold` — a treebank tree over every non-trace token (raw labels, POS preterminals), read once;
  each convention keeps its own tokens of it (:func:`gold_view`);
* :func:`load_gold` — the gold sentences of a treebank file / folder of ``.mrg`` files, or of a split of a
  prepared corpus (:class:`GoldSet`);
* :func:`prediction_node` — a predicted tree as an index tree and its words (traces dropped);
* :func:`align_prediction` — a prediction over a convention's kept words, or over every token (the others
  are then projected away), checked word by word (:mod:`induce.evaluation.words`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

import nltk

from induce.errors import InduceError, InputError
from induce.trees.nodes import Node, from_nltk, prune, tagged_leaves
from induce.trees.ptb import TRACE_TAG

from .words import DEFAULT_WORD_MATCH, WordCheck, words_match

Progress = Optional[Callable[[int, int], None]]

#: Labels of the outermost wrapper bracket that treebank files put around a sentence.
WRAPPER_LABELS = ("", "ROOT", "TOP")


@dataclass(slots=True)  # slots: a 40,000-tree evaluation holds one per sentence
class Gold:
    """A gold tree over every non-trace token: ``tree`` (None for a tree of traces only), its ``words`` and
    their POS ``tags``, and whose tags they are (``treebank``: :mod:`induce.trees.treebanks`)."""

    tree: Optional[Node]
    words: list
    tags: list
    treebank: str = "ptb"

    def keep(self, convention) -> list:
        """Per word: kept by ``convention`` (its ``tokens``, in this gold's treebank)?"""
        from .conventions import token_filter

        keep_tag = token_filter(convention.tokens, self.treebank)
        return [keep_tag(tag) for tag in self.tags]

    def kept_words(self, convention) -> list:
        """The words ``convention`` keeps (what a run parses under it)."""
        return [word for word, kept in zip(self.words, self.keep(convention)) if kept]


def unwrap(tree: nltk.Tree) -> nltk.Tree:
    """Drop unary wrapper brackets (``( (S ...) )``, ``(ROOT (S ...))``, ``(TOP ...)``)."""
    while (isinstance(tree, nltk.Tree) and tree.label() in WRAPPER_LABELS and len(tree) == 1
           and isinstance(tree[0], nltk.Tree)):
        tree = tree[0]
    return tree


def prepare_gold(tree: nltk.Tree, treebank: Optional[str] = None) -> Gold:
    """The :class:`Gold` of a treebank tree: traces removed. ``treebank`` (default: what the tree was read as,
    :func:`induce.trees.treebanks.mark`, else ``ptb``) says whose tags it carries; a tree of another treebank
    is first reduced as its profile says (a raw Keyaki tree: its ``ID`` node, empty elements and unary chains
    go, as Li et al. do; a tree prepared so already is unchanged)."""
    treebank = treebank or getattr(tree, "treebank", None) or "ptb"
    if treebank != "ptb":
        from induce.trees.treebanks import get_profile

        tree = get_profile(treebank).gold_tree(tree) or nltk.Tree("", [])
    tree = unwrap(tree)
    tagged = tagged_leaves(tree)
    is_word = [tag != TRACE_TAG for _, tag, _ in tagged]
    pos = [(word, tag) for (word, tag, _), keep in zip(tagged, is_word) if keep]
    node = from_nltk(tree)
    if not (is_word and all(is_word)):  # from_nltk drops empty constituents: a tree of words only is as it is
        node = prune(node, is_word)
    return Gold(node, [word for word, _ in pos], [tag for _, tag in pos], treebank)


def gold_view(gold: Gold, convention, variant: str = "nary") -> tuple[Optional[Node], list]:
    """The gold tree in the convention's tokens, reshaped as its script does, and the keep mask."""
    from induce.trees.transforms import binarise, collapse_unary

    keep = gold.keep(convention)
    if gold.tree is None:
        return None, keep
    node = gold.tree if all(keep) else prune(gold.tree, keep)
    if node is None:
        return None, keep
    if convention.evalb_prep == "li":
        node = collapse_unary(node, keep_root_child=True)
    if variant != "nary":
        node = binarise(node, variant)
    return node, keep


def prediction_node(tree: nltk.Tree) -> tuple[Node, list]:
    """Index tree and words of a predicted tree; trace leaves (under ``-NONE-``) are dropped."""
    tree = unwrap(tree)
    tagged = tagged_leaves(tree)
    is_word = [depth < 2 or tag != TRACE_TAG for _, tag, depth in tagged]
    node, words = from_nltk(tree), [leaf for leaf, _, _ in tagged]
    if not all(is_word):
        node = prune(node, is_word)
        words = [w for w, keep in zip(words, is_word) if keep]
    return node, words


def prediction_fits(pred_words: Sequence[str], gold_tokens: Sequence[str]) -> bool:
    """Whether a prediction's words are the gold sentence's tokens or some of them, in order
    (:func:`induce.evaluation.words.words_match`, ``normalized``): whichever tokens a convention keeps, a
    prediction of this sentence passes, and a prediction of another sentence (a line repeated or left out)
    does not, but for sentences whose words are among each other's."""
    tokens = iter(gold_tokens)
    return all(any(words_match(word, token) for token in tokens) for word in pred_words)


def gold_fits(gold: Gold, item) -> bool:
    """Whether a prediction (a :class:`~induce.trees.brackets.LocatedTree`) is over the words of ``gold`` (all
    its tokens or some of them); a gold of traces only fits anything."""
    return not gold.words or prediction_fits([leaf for leaf, _, _ in tagged_leaves(item.tree)], gold.words)


def align_prediction(pred: Node, pred_words: Optional[Sequence[str]], kept_words: Sequence[str],
                     all_words: Sequence[str], keep: Sequence[bool], where=(None, None),
                     words: Optional[WordCheck] = None) -> tuple[Node, bool]:
    """``(tree over the kept words, projected?)``: a prediction over the kept words is taken as it is; one
    over every token has the others removed. Any other length is an :class:`InputError` naming the line;
    the words are checked by ``words`` (a normalized :class:`~induce.evaluation.words.WordCheck` when None),
    which refuses a word its mode does not accept, naming the line and both words."""
    n_pred = pred.end - pred.start
    if n_pred == len(kept_words):
        aligned, compare_to, projected = pred, kept_words, False
    elif n_pred == len(all_words):
        aligned, compare_to, projected = prune(pred, keep), all_words, True
    else:
        raise InputError(
            f"the predicted tree has {n_pred} leaves but the gold sentence has {len(kept_words)} words under this "
            f"convention ({len(all_words)} tokens in all): {' '.join(all_words)[:200]}", *where)
    if pred_words is not None:
        (words if words is not None else WordCheck(DEFAULT_WORD_MATCH)).check(pred_words, compare_to, where)
    return aligned, projected


@dataclass
class GoldSet:
    """Gold sentences (:class:`Gold`), where they came from (``label``, as printed), the prepared corpus folder
    they belong to (None for a treebank file) and the treebank profile they were read with."""

    sentences: list
    label: str
    corpus_dir: Optional[Path] = None
    treebank: str = "ptb"


def gold_files(gold: Path) -> list[Path]:
    """The files of ``--gold``: the file, or a folder's ``*.mrg`` files in name order."""
    gold = Path(gold)
    files = sorted(gold.glob("*.mrg")) if gold.is_dir() else [gold]
    if not files:
        raise InduceError(f"{gold}: no .mrg files in this folder")
    return files


def _gold_source(gold, corpus, split: str, treebank: Optional[str]) -> tuple[list, str, Optional[Path], Optional[str]]:
    """``(files, label, corpus folder, treebank)`` of ``--gold`` or of ``split`` of the prepared ``corpus``."""
    if gold is not None:
        return gold_files(Path(gold)), str(gold), None, treebank
    from induce.data.corpus import PreparedCorpus

    if corpus is None:
        raise InduceError("no gold trees: give a treebank file or a prepared corpus")
    prepared = PreparedCorpus(corpus)
    if not prepared.has_trees:
        raise InduceError(f"{corpus}: this corpus has no trees (LM text only); give --gold FILE")
    recorded = (prepared.meta.get("treebank") or {}).get("name", "ptb")
    if treebank is not None and treebank != recorded:
        raise InduceError(f"--treebank {treebank}: the corpus {corpus} was prepared as {recorded} "
                          f"(its meta.json); drop --treebank or give --treebank {recorded}")
    # the split's gold file (its errors name the split)
    return [prepared._file(split, ".gold.txt")], f"{corpus}/{split}.gold.txt", Path(corpus), recorded


def load_gold(gold: Optional[Union[str, Path]] = None, corpus: Optional[Union[str, Path]] = None,
              split: str = "valid", reading: Progress = None, preparing: Progress = None,
              treebank: Optional[str] = None) -> GoldSet:
    """Gold sentences of ``gold`` (a treebank file, one tree per line or multi-line ``.mrg``, or a folder whose
    ``*.mrg`` files are read in name order) or else of ``split`` of the prepared corpus ``corpus``, each
    prepared (:func:`prepare_gold`) as soon as it is read: the nltk trees of a 40,000-tree file are not all
    kept. ``reading(done, total)`` and ``preparing(done, total)`` report progress. ``treebank``: the profile
    of the gold's tags (:mod:`induce.trees.treebanks`); default: the one the prepared corpus records
    (``meta.json``), else ``ptb``; one that contradicts the corpus's is an error."""
    from induce.trees.brackets import read_trees
    from induce.trees.treebanks import get_profile, tag_census, tag_refusal

    files, label, corpus_dir, treebank = _gold_source(gold, corpus, split, treebank)
    profile = get_profile(treebank or "ptb")
    one_file = len(files) == 1
    sentences = []
    for number, path in enumerate(files):
        located = read_trees(path, progress=reading if one_file else None)
        census = tag_census(profile)  # a file of the other treebank's tags is refused, not scored
        for k in range(len(located)):
            if preparing is not None and one_file and k % 1000 == 0:
                preparing(k, len(located))
            census.add(located[k].tree)
            sentences.append(prepare_gold(located[k].tree, profile.name))
            located[k] = None  # each nltk tree is freed once prepared: memory peaks at one copy
        refusal = tag_refusal(census, reader="the evaluation")
        if refusal is not None:
            raise InputError(f"{refusal}; not gold trees for --treebank {profile.name}", path)
        if preparing is not None and one_file:
            preparing(len(located), len(located))
        if reading is not None and not one_file:
            reading(number + 1, len(files))
    return GoldSet(sentences, label, corpus_dir, profile.name)


def as_golds(trees: Sequence, treebank: Optional[str] = None) -> list:
    """Each item a :class:`Gold`: those given as treebank trees prepared (:func:`prepare_gold`)."""
    return [tree if isinstance(tree, Gold) else prepare_gold(tree, treebank) for tree in trees]

"""Scoring trees against gold trees: what ``induce eval`` and :meth:`induce.inference.api.Run.score` share.

* :func:`load_gold` — the gold sentences of a treebank file / folder of ``.mrg`` files, or of a split of
  a prepared corpus, each reduced at once to what the evaluator needs under a convention;
* :func:`parse_gold` — a trained run's trees of those sentences (the words the convention kept);
* :func:`score` — the figures (the dict ``induce eval --json`` prints);
* :func:`eval_corpus_of_run` — the corpus a run is evaluated on when none is named: its own
  (:func:`induce.inference.runs.run_corpus`).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Union

from induce.errors import InduceError

Progress = Optional[Callable[[int, int], None]]


@dataclass
class GoldSet:
    """Gold sentences prepared under one convention, where they came from (``label``, as printed), and the
    prepared corpus folder they belong to (None for a treebank file)."""

    sentences: list
    label: str
    corpus_dir: Optional[Path] = None
    treebank: str = "ptb"  # the profile its trees were read with (induce.trees.treebanks)


def gold_files(gold: Path) -> list[Path]:
    """The files of ``--gold``: the file, or a folder's ``*.mrg`` files in name order."""
    gold = Path(gold)
    files = sorted(gold.glob("*.mrg")) if gold.is_dir() else [gold]
    if not files:
        raise InduceError(f"{gold}: no .mrg files in this folder")
    return files


def load_gold(gold: Optional[Union[str, Path]] = None, corpus: Optional[Union[str, Path]] = None,
              split: str = "valid", convention=None, reading: Progress = None,
              preparing: Progress = None, treebank: Optional[str] = None) -> GoldSet:
    """Gold sentences of ``gold`` (a treebank file, one tree per line or multi-line ``.mrg``, or a
    folder whose ``*.mrg`` files are read in name order) or else of ``split`` of the prepared corpus
    ``corpus``, prepared under ``convention`` (default: Kim et al.'s) as soon as each tree is read:
    the nltk trees of a 40,000-tree file are not all kept. ``reading(done, total)`` and
    ``preparing(done, total)`` report progress. ``treebank``: the profile of the gold's tags
    (:mod:`induce.trees.treebanks`); default: the convention's, else the one the prepared corpus records
    (``meta.json``), else ``ptb``; one that contradicts the corpus's is an error."""
    from dataclasses import replace

    from induce.errors import InputError
    from induce.evaluation import EvalConvention, prepare_gold
    from induce.trees.brackets import read_trees
    from induce.trees.treebanks import get_profile, tag_census, tag_refusal

    convention = convention or EvalConvention()
    treebank = treebank or convention.treebank
    if gold is not None:
        files = gold_files(Path(gold))
        label, corpus_dir = str(gold), None
    else:
        from induce.data.corpus import PreparedCorpus

        if corpus is None:
            raise InduceError("no gold trees: give a treebank file or a prepared corpus")
        prepared = PreparedCorpus(corpus)
        if not prepared.has_trees:
            raise InduceError(f"{corpus}: this corpus has no trees (LM text only); give --gold FILE")
        files = [prepared._file(split, ".gold.txt")]  # the split's gold file (its errors name the split)
        label, corpus_dir = f"{corpus}/{split}.gold.txt", Path(corpus)
        recorded = (prepared.meta.get("treebank") or {}).get("name", "ptb")
        if treebank is not None and treebank != recorded:
            raise InduceError(f"--treebank {treebank}: the corpus {corpus} was prepared as {recorded} "
                              f"(its meta.json); drop --treebank or give --treebank {recorded}")
        treebank = recorded
    profile = get_profile(treebank)
    treebank = profile.name
    convention = replace(convention, treebank=treebank)
    one_file = len(files) == 1
    sentences = []
    for number, path in enumerate(files):
        located = read_trees(path, progress=reading if one_file else None)
        census = tag_census(profile)  # a file of the other treebank's tags is refused, not scored
        for k in range(len(located)):
            if preparing is not None and one_file and k % 1000 == 0:
                preparing(k, len(located))
            census.add(located[k].tree)
            sentences.append(prepare_gold(located[k].tree, convention))
            located[k] = None  # each nltk tree is freed once prepared: memory peaks at one copy
        refusal = tag_refusal(census, reader="the evaluation")
        if refusal is not None:
            raise InputError(f"{refusal}; not gold trees for --treebank {treebank}", path)
        if preparing is not None and one_file:
            preparing(len(located), len(located))
        if reading is not None and not one_file:
            reading(number + 1, len(files))
    return GoldSet(sentences, label, corpus_dir, treebank)


def parse_gold(run, gold_sentences: list, convention, batch_size: int = 64, decoder: Optional[str] = None,
               device="auto", progress: Progress = None, one_word_trees: bool = False) -> list:
    """A run's trees of the gold sentences (None for those outside the convention's length filter, which
    are not parsed). ``run``: a run folder, checkpoint or :class:`~induce.inference.loading.LoadedRun`.

    The gold words have already been through the convention's filter: by default the word-tag filter
    that also made the training text, so every word is one the model was trained on and none may be
    taken for punctuation again (a possessive ``'`` would be attached instead of parsed, unlike the
    trainer's dev F1 and ``induce reproduce``). With ``keep_punct`` the punctuation is hidden from the
    model and attached afterwards, as for raw text.

    ``one_word_trees``: one-word sentences that the convention's length filter leaves out get their only
    tree, ``(S word)``, without the model (``induce reproduce`` parses once under the default convention
    and scores the trees under every convention, ON-LSTM's counting one-word sentences among them).
    What the model reads is the same either way.
    """
    from induce.inference import predict

    kept = [sentence.words for sentence in gold_sentences]
    wanted = [i for i, words in enumerate(kept)
              if len(words) >= convention.min_length
              and not (convention.max_length and len(words) > convention.max_length)]
    parsed = predict.predict_trees(run, [kept[i] for i in wanted], batch_size=batch_size, decoder=decoder,
                                     device=device, keep_punct=not convention.keep_punct, progress=progress)
    trees = [None] * len(gold_sentences)
    for i, tree in zip(wanted, parsed):
        trees[i] = tree
    if one_word_trees:
        import nltk

        for i, words in enumerate(kept):
            if len(words) == 1 and trees[i] is None:
                trees[i] = nltk.Tree("S", list(words))
    return trees


def score(pred_trees: list, gold: GoldSet, convention, source: str, locations=None,
          length_option: str = "max_length", progress: Progress = None, resamples: int = 1000, seed: int = 0,
          word_match: str = "normalized"):
    """``(summary, result)``: the figures of ``pred_trees`` against ``gold`` (the dict ``induce eval
    --json`` prints: :meth:`EvalResult.to_dict` with ``predicted`` = ``source`` and ``gold`` = the gold
    set's label) and the :class:`~induce.evaluation.EvalResult` (per sentence). No sentence left after
    the length filters is an :class:`InduceError` naming ``length_option``. ``ci``: 95% bootstrap intervals
    of the F1 figures (``resamples``, ``seed``: :func:`induce.evaluation.bootstrap.result_intervals`).
    ``word_match``: how predicted words are compared with the gold's (:mod:`induce.evaluation.words`)."""
    from dataclasses import replace

    from induce.evaluation import evaluate, require_sentences
    from induce.trees.treebanks import get_profile

    convention = replace(convention, treebank=gold.treebank)
    result = evaluate(pred_trees, gold.sentences, convention, pred_locations=locations, progress=progress,
                      word_match=word_match)
    require_sentences(result, length_option)
    summary = result.to_dict()
    summary.update({"predicted": source, "gold": gold.label, "treebank": get_profile(gold.treebank).describe()})
    from induce.evaluation.bootstrap import result_intervals

    summary["ci"] = result_intervals(result, resamples, seed)
    return summary, result


def eval_corpus_of_run(run) -> RunCorpus:  # noqa: F821 (induce.inference.runs.RunCorpus)
    """The corpus a run (folder, checkpoint or :class:`~induce.inference.loading.LoadedRun`) is evaluated on when
    none is named: the one it was trained on (:func:`induce.inference.runs.run_corpus`); its sidecar is read, its
    weights are not."""
    from induce.inference.runs import read_run_sidecar, run_corpus

    if hasattr(run, "meta"):
        meta, where = run.meta, run.path
    else:
        meta, where = read_run_sidecar(run), run
    vocab = (meta.get("vocab") or {}).get("itos")
    return run_corpus(meta.get("config") or {}, where, vocab)

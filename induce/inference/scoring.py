"""A trained run's trees of gold sentences: the inference half of ``induce eval`` and
:meth:`induce.inference.api.Run.score` (the gold is read and the trees scored by :mod:`induce.evaluation`).

* :func:`parse_gold` — a run's trees of the gold sentences (the words a convention keeps);
* :func:`eval_corpus_of_run` — the corpus a run is evaluated on when none is named: its own
  (:func:`induce.inference.runs.run_corpus`).
"""
from __future__ import annotations

from typing import Callable, Optional

Progress = Optional[Callable[[int, int], None]]


def parse_gold(run, golds: list, convention, batch_size: int = 64, decoder: Optional[str] = None,
               device="auto", progress: Progress = None, one_word_trees: bool = False) -> list:
    """A run's trees of the gold sentences (:class:`~induce.evaluation.gold.Gold`) over the words ``convention``
    keeps (None for those outside its length filter, which are not parsed). ``run``: a run folder, checkpoint or
    :class:`~induce.inference.loading.LoadedRun`.

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

    kept = [gold.kept_words(convention) for gold in golds]
    wanted = [i for i, words in enumerate(kept)
              if len(words) >= convention.min_length
              and not (convention.max_length and len(words) > convention.max_length)]
    parsed = predict.predict_trees(run, [kept[i] for i in wanted], batch_size=batch_size, decoder=decoder,
                                     device=device, keep_punct=not convention.keep_punct, progress=progress)
    trees = [None] * len(golds)
    for i, tree in zip(wanted, parsed):
        trees[i] = tree
    if one_word_trees:
        import nltk

        for i, words in enumerate(kept):
            if len(words) == 1 and trees[i] is None:
                trees[i] = nltk.Tree("S", list(words))
    return trees


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

"""Untrained models parsing gold sentences: the first row of PaLM's Table 4 (Peng et al., 2019).

:func:`evaluate_untrained` builds ``inits`` fresh models of one kind (init ``k = 1 .. N`` with torch
seed ``seed + k``; construction only, no training), lets each parse the gold sentences that the
evaluation convention keeps, scores each parse with :func:`induce.evaluation.score` and
summarises over the inits: mean and sample standard deviation of sentence F1, corpus F1, % left and
% right splits. The splits are PaLM's (Table 4 and its footnote 16; :class:`induce.evaluation.
BranchingStats`): among the splits of spans longer than 2 words, ``[i, j] -> [i, j-1] + (j)`` is a
left split, ``[i, j] -> (i) + [i+1, j]`` a right one. ``induce eval --untrained`` and the untrained
rows of ``induce reproduce`` both call it.

* Model config (:func:`untrained_config`): ``induce/models/<family>/<model>.yaml`` over the typed defaults,
  i.e. the papers' sizes, with ``model.*`` overrides, as ``induce train`` builds it.
* Vocabulary (:func:`untrained_vocabulary`): an untrained model's embedding rows are random, so the
  vocabulary only decides which words share a row (``<unk>``). Given a prepared corpus, its
  vocabulary (as for a model trained on that corpus); given bare gold trees, every word type of the
  gold sentences (normalised as in training: lower case, numbers -> ``N``) gets its own row.
  Never a run folder's: the result depends only on the gold trees, the model config and the seeds.
* Parsing: as ``induce eval --checkpoint`` (:func:`induce.inference.predict.predict_trees`): the words the
  convention keeps, each sentence from a fresh state, except for a model that reads its parses as
  one stream (PaLM ``variant: released``); with ``keep_punct`` the punctuation is hidden from the
  model and attached afterwards, as for raw text.
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence, Union

import torch

from induce.errors import InduceError
from induce.evaluation.conventions import DEFAULT, Convention
from induce.evaluation.engine import mean_std, require_sentences, score
from induce.evaluation.gold import Gold

#: Figures kept per init; the first four are summarised (PaLM Table 4 reports the last two).
INIT_FIGURES = ("sentence_f1", "corpus_f1", "left_split_pct", "right_split_pct", "other_binary_split_pct",
                "precision", "recall")
SUMMARY_FIGURES = INIT_FIGURES[:4]


def untrained_config(model_name: str, overrides: Sequence[str] = ()):
    """The :class:`induce.config.RunConfig` of ``model_name`` (``induce/configs/<model>.yaml``) with ``model.*``
    ``key=value`` overrides; an :class:`InduceError` for a model that does not parse or an override of
    another section (an untrained model has no data, optimiser or training)."""
    from induce.config import load_config
    from induce.models.configs import resolve_config
    from induce.models.registry import get_model_class

    try:
        cls = get_model_class(model_name)
    except KeyError as err:
        raise InduceError(err.args[0]) from None
    if not cls.parser_kind.parses:
        raise InduceError(f"model {model_name!r} has no syntactic structure: an untrained one has no trees to score")
    for item in overrides:
        if not item.partition("=")[0].strip().startswith("model."):
            raise InduceError(f"override {item!r}: only model.* keys change an untrained model "
                              "(it has no data, optim or train section)")
    return resolve_config(load_config(model_name, overrides=list(overrides)))


def untrained_vocabulary(gold: Sequence[Gold], corpus_dir: Optional[Union[str, Path]] = None,
                         convention: Convention = DEFAULT):
    """``(vocab, description)``: the prepared corpus's vocabulary when ``corpus_dir`` is given, else every
    normalised word type of the words ``convention`` keeps of the gold sentences (``<eos>``, ``<unk>``, then
    by frequency)."""
    if corpus_dir is not None:
        from induce.data.corpus import PreparedCorpus

        vocab = PreparedCorpus(corpus_dir).vocab
        return vocab, f"the vocabulary of {corpus_dir} ({len(vocab):,} types)"
    from induce.data.mikolov import build_vocab, normalize_word

    vocab = build_vocab(([normalize_word(word) for word in sentence.kept_words(convention)] for sentence in gold),
                        max_vocab=0)
    return vocab, f"the gold sentences' words ({len(vocab):,} types)"


def build_untrained(model_name: str, model_config: dict, vocab_size: int, seed: int,
                    device: Union[str, torch.device] = "cpu") -> torch.nn.Module:
    """A freshly initialised ``model_name`` in eval mode, drawn with torch seed ``seed`` (the global RNG
    state is restored afterwards, so the caller's random stream does not depend on how many were built)."""
    from induce.models.registry import get_model_class

    cls = get_model_class(model_name)
    devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = cls(vocab_size, cls.Config(**model_config))
    return model.to(device).eval()


def evaluate_untrained(
    model_name: str,
    model_config: dict,
    gold: Sequence[Gold],
    vocab,
    convention: Convention = DEFAULT,
    inits: int = 5,
    seed: int = 0,
    batch_size: int = 64,
    decoder: Optional[str] = None,
    device: Union[str, torch.device] = "auto",
    progress: Optional[Callable[[int, int], None]] = None,
) -> dict:
    """Score ``inits`` untrained ``model_name`` models (config ``model_config``, the model section) on ``gold``.

    ``gold``: :func:`induce.evaluation.prepare_gold` of each tree (``convention``'s length filters choose the
    sentences). Init ``k`` (1-based) is drawn with torch seed ``seed + k``.
    ``progress(done, inits)`` after each init. Returns a JSON-ready dict: ``per_init`` (``init``,
    ``seed`` and :data:`INIT_FIGURES` of each), ``summary`` (``{figure: {"mean", "std", "n"}}`` over the
    inits for :data:`SUMMARY_FIGURES`), ``max_one_direction_pct`` (the largest share of left or of right
    splits of any init), ``n_sentences``, ``n_skipped``, ``model``, ``model_config``, ``seeds``,
    ``vocab_size`` and ``convention``. An :class:`InduceError` when the filters leave no sentence.
    """
    from induce.inference.loading import LoadedRun, resolve_device
    from induce.inference.scoring import parse_gold

    if inits < 1:
        raise InduceError(f"inits {inits}: give at least one untrained model")
    lengths = [sum(sentence.keep(convention)) for sentence in gold]
    if not any(n >= convention.min_length and not (convention.max_length and n > convention.max_length)
               for n in lengths):
        require_sentences(score(gold, [None] * len(gold), convention))  # raises, saying which filter
    target = resolve_device(device)
    per_init, result = [], None
    for k in range(1, inits + 1):
        model = build_untrained(model_name, model_config, len(vocab), seed + k, target)
        loaded = LoadedRun(model, vocab, {"config": {"model_name": model_name, "model": model_config}},
                           Path(f"untrained-{model_name}"))
        # as `induce eval --checkpoint`: the kept words, None for the sentences the length filter skips
        predictions = parse_gold(loaded, gold, convention, batch_size=batch_size, decoder=decoder, device=target)
        result = score(gold, predictions, convention)
        figures = result.to_dict()
        per_init.append({"init": k, "seed": seed + k, **{name: figures[name] for name in INIT_FIGURES}})
        del model, loaded
        if progress is not None:
            progress(k, inits)
    return {
        "model": model_name,
        "model_config": dict(model_config),
        "inits": inits,
        "seeds": [seed + k for k in range(1, inits + 1)],
        "vocab_size": len(vocab),
        "n_sentences": result.n_sentences,
        "n_skipped": result.n_skipped,
        "convention": convention.switches(),
        "per_init": per_init,
        "summary": summarise_inits(per_init),
        "max_one_direction_pct": max(max(row["left_split_pct"], row["right_split_pct"]) for row in per_init),
    }


def summarise_inits(per_init: Sequence[dict]) -> dict:
    """``{figure: {"mean", "std", "n"}}`` over the inits for :data:`SUMMARY_FIGURES` (sample std)."""
    return {name: mean_std([row[name] for row in per_init]) for name in SUMMARY_FIGURES}

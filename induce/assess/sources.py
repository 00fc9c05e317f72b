"""Sources of trees to score: a predictions file (any :mod:`induce.trees.formats` format), a trained run (parsed
here), a baseline; what ``induce eval``, ``induce compare``, ``induce agreement``, ``induce ensemble`` and
``induce leaderboard`` read. Each is a :class:`Source`: one item per gold sentence, which
:func:`induce.evaluation.score` aligns onto each convention's tokens.

The gold trees come from :func:`induce.evaluation.load_gold`: ``--gold``, else the ``--split`` of ``--corpus``,
else of a run's own corpus (unless ``--data`` names a data root), else of the default corpus
(:func:`default_eval_corpus`).
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from induce.evaluation.conventions import DEFAULT, Convention, induce_convention

Progress = Optional[Callable[[int, int], None]]
#: What a run parses for the conventions, agreement and comparisons: every token (its punctuation hidden from
#: the model and attached afterwards, as for raw text), one-word sentences included.
EVERY_TOKEN = induce_convention(keep_punct=True, min_length=1)


@dataclass
class Source:
    """Trees of one source: ``items[i]`` = the prediction of gold sentence ``i`` (an ``nltk.Tree``, a
    ``(Node, words or None)`` pair, None: none given), or ``baseline(n_words)``; ``label`` as printed;
    ``notes`` said to the user."""

    label: str
    items: list | None = None
    locations: list | None = None
    baseline: Callable | None = None
    notes: list = field(default_factory=list)


def is_run(path: Path) -> bool:
    """A run folder or a checkpoint (``runs/x/last``), not a file of trees."""
    path = Path(path)
    return path.is_dir() or (not path.exists() and Path(f"{path}.safetensors").exists())


def file_source(path: Path, golds: Sequence | None, pred_format: str = "auto", progress: Progress = None,
                convention: Convention = DEFAULT) -> Source:
    """A predictions file read in ``pred_format``; with ``golds``, a Kim ``pred_tree`` file's missing one-word
    sentences (one word under ``convention``) are filled in (:func:`induce.trees.formats.fill_one_word_sentences`)."""
    from induce.evaluation.gold import gold_fits, prediction_node
    from induce.trees.formats import fill_one_word_sentences, read_predictions

    located, fmt = read_predictions(path, pred_format, progress=progress)
    notes = []
    if golds is not None:
        lengths = [sum(gold.keep(convention)) for gold in golds]
        located, note = fill_one_word_sentences(located, lengths, fmt, path,
                                                fits=lambda k, item: gold_fits(golds[k], item))
        notes = [note] if note else []
    items = [None if item is None else prediction_node(item.tree) for item in located]
    locations = [(str(path), None) if item is None else (item.path, item.line) for item in located]
    return Source(str(path), items, locations, notes=notes)


def run_source(run, golds: Sequence, convention: Convention = EVERY_TOKEN, batch_size: int = 64,
               decoder: str | None = None, device: str = "auto", progress: Progress = None) -> Source:
    """A trained run's trees of every gold sentence over the words ``convention`` keeps (by default every
    non-trace token), None for those outside its length limits (:func:`induce.inference.scoring.parse_gold`)."""
    from induce.inference.scoring import parse_gold

    trees = parse_gold(run, golds, convention, batch_size=batch_size, decoder=decoder, device=device,
                       progress=progress)
    return Source(f"run {run}", trees)


def baseline_label(kind: str, seed: int) -> str:
    return f"baseline {kind}" + (f" (seed {seed})" if kind == "random" else "")


def baseline_source(kind: str, seed: int = 0, golds: Sequence | None = None,
                    convention: Convention = DEFAULT) -> Source:
    """A baseline built over each convention's own tokens (``random`` seeded once per convention); with
    ``golds``, one tree per sentence over the words ``convention`` keeps, drawn in order
    (:func:`induce.evaluation.baseline_predictions`: what ``induce eval --baseline`` scores)."""
    import random

    from induce.evaluation.baselines import baseline_predictions, baseline_tree

    if golds is not None:
        return Source(baseline_label(kind, seed), baseline_predictions(golds, kind, convention, seed=seed))
    rng = random.Random(seed)
    return Source(baseline_label(kind, seed), baseline=lambda n: baseline_tree(n, kind, rng))


def source_key(path: Path):
    """The identity of a source (:func:`induce.files.file_key`): of the file or run folder, or of a checkpoint
    named without its suffix (``runs/x/last``: ``last.safetensors``)."""
    from induce.files import file_key

    return file_key(path) or file_key(f"{path}.safetensors")


def check_distinct_sources(paths: Sequence[Path], what: str, why: str) -> None:
    """Refuse two of ``paths`` that name one file, run folder or checkpoint (under any path or link), where
    each source counts in its own right (``what`` and ``why`` frame the message:
    :func:`induce.files.refuse_repeated`)."""
    from induce.files import refuse_repeated

    refuse_repeated(paths, what, why, key=source_key)


def sources_of(paths: Sequence[Path], golds, pred_format: str, batch_size: int, decoder, device, steps) -> list:
    """A :class:`Source` per path: a run folder or checkpoint is parsed (every token), a file read."""
    out = []
    for path in paths:
        if is_run(path):
            out.append(run_source(path, golds, EVERY_TOKEN, batch_size, decoder, device,
                                  steps.bar(f"parsing with {path}")))
        else:
            out.append(file_source(path, golds, pred_format, steps.bar(f"reading {path}")))
    return out


def default_eval_corpus(run_dir: Optional[Path], data: Optional[Path], console) -> Path:
    """The prepared corpus to evaluate on when neither --gold nor --corpus is given: a run's own (unless
    --data names a data root), else the default corpus; said on ``console``."""
    if run_dir is not None and data is None:
        from induce.inference.scoring import eval_corpus_of_run

        chosen = eval_corpus_of_run(run_dir)
        console.print(f"evaluating on {chosen.description}", highlight=False, soft_wrap=True)
        return chosen.path
    from induce.data.locate import default_corpus

    return default_corpus(data, console=console)


def read_gold(gold, corpus, data, split: str, run_dir, console, steps, treebank: str | None = None):
    """The :class:`~induce.evaluation.gold.GoldSet` of ``--gold``, else ``split`` of ``--corpus``, else of the
    run's own corpus or the default one (:func:`default_eval_corpus`)."""
    from induce.evaluation.gold import load_gold

    if gold is None and corpus is None:
        corpus = default_eval_corpus(run_dir, data, console)
    preparing = steps.bar("preparing gold trees") if gold is None or not Path(gold).is_dir() else None
    return load_gold(gold, corpus, split, reading=steps.bar("reading gold trees"), preparing=preparing,
                     treebank=treebank)

"""What ``induce eval`` does with its options (:func:`run_eval`): score predicted trees (a file, a
baseline, a trained run, or freshly initialised untrained models) against gold trees, or report a
run's language-model perplexity. The command parses the options and prints the outcome.

Which gold trees: ``gold`` (a treebank file or folder), else the ``split`` of ``corpus`` (a prepared
corpus), else of a run's own corpus (unless ``data`` names a data root), else of the default corpus.
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from rich.console import Console

from induce.errors import InduceError


class ProgressBars(Protocol):
    """Hands out one ``(done, total)`` callback per progress bar (``induce.cli.ProgressSteps``)."""

    def bar(self, description: str) -> Callable[[int, int], None]: ...


class NoProgress:
    """:class:`ProgressBars` that draws nothing."""

    def bar(self, description: str) -> Callable[[int, int], None]:
        return lambda done, total: None


@dataclass(frozen=True)
class EvalOutcome:
    """What :func:`run_eval` found. ``kind``: ``scores`` (:func:`induce.inference.scoring.score`'s summary),
    ``untrained`` (mean and spread over the inits, one row per init) or ``perplexity`` (``perplexity``,
    ``split``, ``corpus``, ``run``)."""

    kind: str
    summary: dict


def run_eval(
    predicted: Optional[Path] = None,
    gold: Optional[Path] = None,
    baseline: Optional[str] = None,
    seed: int = 0,
    checkpoint: Optional[Path] = None,
    untrained: Optional[str] = None,
    inits: Optional[int] = None,
    sets: Sequence[str] = (),
    lm: bool = False,
    decoder: Optional[str] = None,
    batch_size: int = 64,
    device: str = "auto",
    data: Optional[Path] = None,
    corpus: Optional[Path] = None,
    split: str = "valid",
    wsj10: bool = False,
    wsj40: bool = False,
    max_length: Optional[int] = None,
    keep_punct: bool = False,
    count_root: bool = False,
    multiset: bool = False,
    per_sentence: Optional[Path] = None,
    console: Optional[Console] = None,
    steps: Optional[ProgressBars] = None,
    pred_format: str = "auto",
    resamples: int = 1000,
    word_match: str = "normalized",
    treebank: Optional[str] = None,
) -> EvalOutcome:
    """Evaluate one source of trees, named by at most one of ``predicted`` (a file of bracketed trees, one
    per line), ``baseline`` (right, left, balanced, random: seeded by ``seed``), ``checkpoint`` (a run
    folder or checkpoint) and ``untrained`` (a model name: ``inits`` models with ``sets`` overrides); with
    none, the latest finished run (:func:`induce.inference.runs.pick_run`). ``lm``: the run's perplexity on ``split``
    instead. ``wsj10`` / ``wsj40`` / ``max_length``, ``keep_punct``, ``count_root``, ``multiset``: the
    convention (:class:`induce.evaluation.EvalConvention`). ``per_sentence``: a CSV with one row per
    sentence. ``pred_format``: the predicted file's format (:data:`induce.trees.formats.FORMATS`);
    ``resamples``: of the bootstrap intervals in the summary (``ci``, seeded by ``seed``); ``word_match``: how the
    predicted words are compared with the gold's (:mod:`induce.evaluation.words`); ``treebank``: the profile of
    the gold's tags (:mod:`induce.trees.treebanks`; default: the corpus's, else ``ptb``). What was chosen
    is said on ``console`` (stderr); ``steps`` draws the progress bars.
    Argument errors name the command's flags.

    Long because it takes each option of ``induce eval`` as a typed argument (24 lines of signature);
    the body is about 50 lines."""
    from induce.evaluation import baseline_predictions
    from induce.evaluation.words import check_mode
    from induce.files import check_not_input, check_output_file
    from induce.inference.runs import pick_run
    from induce.inference.scoring import gold_files, load_gold, parse_gold, score

    console = console or Console(stderr=True)
    steps = steps or NoProgress()
    check_mode(word_match)
    check_output_file(per_sentence, "--per-sentence")
    convention, length_option = eval_convention(wsj10, wsj40, max_length, keep_punct, count_root, multiset,
                                                treebank)
    if sum(x is not None for x in (predicted, baseline, checkpoint, untrained)) > 1:
        raise InduceError("give only one of: a predicted file, --baseline, --checkpoint, --untrained")
    if untrained is None and (sets or inits is not None):
        raise InduceError(f"{f'--set {sets[0]}' if sets else '--inits'}: applies to --untrained only")
    if untrained is not None:
        summary = _untrained_summary(untrained, sets, inits or 5, seed, lm, per_sentence, gold, corpus, data,
                                     split, convention, batch_size, decoder, device, console, steps)
        return EvalOutcome("untrained", summary)
    run_dir = None
    if predicted is None and baseline is None:
        run_dir = pick_run(checkpoint, console, need_parser=not lm)
    if gold is None and corpus is None:
        corpus = _default_eval_corpus(run_dir, data, console)
    check_not_input(per_sentence, {"the predicted trees": predicted,
                                   "--gold": gold_files(gold) if gold is not None and gold.exists() else gold,
                                   "the run's checkpoint": _run_files(run_dir)}, "--per-sentence")
    if lm:
        return _perplexity(run_dir, gold, corpus, split, device)
    preparing = steps.bar("preparing gold trees") if gold is None or not gold.is_dir() else None
    gold_set = load_gold(gold, corpus, split, convention, reading=steps.bar("reading gold trees"),
                         preparing=preparing)

    locations = None
    if predicted is not None:
        from induce.trees.formats import fill_one_word_sentences, read_predictions

        located, fmt = read_predictions(predicted, pred_format, progress=steps.bar("reading predicted trees"))
        lengths = [len(sentence.words) for sentence in gold_set.sentences]
        located, note = fill_one_word_sentences(
            located, lengths, fmt, predicted, fits=lambda k, item: _fits(gold_set.sentences[k], item))
        if note:
            console.print(note, highlight=False, soft_wrap=True)
        pred_trees = [None if item is None else item.tree for item in located]
        locations = [(str(predicted), None) if item is None else (item.path, item.line) for item in located]
        source = str(predicted)
    elif baseline is not None:
        pred_trees = baseline_predictions(gold_set.sentences, baseline, convention, seed=seed)
        source = f"baseline {baseline}" + (f" (seed {seed})" if baseline == "random" else "")
    else:
        pred_trees = parse_gold(run_dir, gold_set.sentences, convention, batch_size=batch_size, decoder=decoder,
                                device=device, progress=steps.bar("parsing"))
        source = f"run {run_dir}"
    summary, result = score(pred_trees, gold_set, convention, source, locations=locations,
                            length_option=length_option, progress=steps.bar("scoring"), resamples=resamples, seed=seed,
                            word_match=word_match)
    if per_sentence is not None:
        _write_per_sentence(per_sentence, result)
    return EvalOutcome("scores", summary)


def eval_convention(wsj10: bool = False, wsj40: bool = False, max_length: Optional[int] = None,
                    keep_punct: bool = False, count_root: bool = False, multiset: bool = False,
                    treebank: Optional[str] = None):
    """``(EvalConvention, length option)`` of the flags: the smallest of the length limits given, and
    the flag that set it (named when no sentence is left)."""
    from induce.evaluation import EvalConvention

    if wsj10 and wsj40:
        raise InduceError("--wsj10 and --wsj40 together: choose one (run the command twice for both figures)")
    named_limits = [(n, flag) for n, flag in ((10 if wsj10 else None, "--wsj10"), (40 if wsj40 else None, "--wsj40"),
                                              (max_length, f"--max-length {max_length}")) if n is not None]
    limits = [n for n, _ in named_limits]
    if max_length is not None and max_length < 1:
        raise InduceError(f"--max-length {max_length}: give a number of words >= 1")
    if treebank is not None:
        from induce.trees.treebanks import get_profile

        treebank = get_profile(treebank).name
    convention = EvalConvention(
        keep_punct=keep_punct, count_root=count_root, multiset=multiset, max_length=min(limits) if limits else None,
        treebank=treebank,
    )
    return convention, (min(named_limits)[1] if named_limits else "--max-length")


def _perplexity(run_dir: Optional[Path], gold: Optional[Path], corpus: Path, split: str, device: str) -> EvalOutcome:
    """``--lm``: the run's perplexity on the LM text of ``split`` of the prepared ``corpus``."""
    if run_dir is None:
        raise InduceError("--lm needs a trained run (--checkpoint)")
    if gold is not None:
        raise InduceError("--lm reads the LM text of a prepared corpus: use --corpus or the run's corpus, not --gold")
    from induce.inference.language_model import lm_perplexity
    from induce.inference.loading import load_run
    from induce.models.base import STREAM_LM

    loaded = load_run(run_dir, device)
    ppl = lm_perplexity(loaded, corpus, split, device=device)
    # ``bound``: an upper bound (a latent variable's negative ELBO), not the model's perplexity; ``whole_sentences``:
    # each sentence read alone (no context from the ones before it), one-word sentences left out.
    return EvalOutcome("perplexity", {
        "perplexity": ppl, "split": split, "corpus": str(corpus), "run": str(run_dir),
        "bound": bool(getattr(loaded.model, "perplexity_is_bound", False)),
        "whole_sentences": loaded.model.objective is not STREAM_LM})


def _untrained_summary(model, sets, inits, seed, lm, per_sentence, gold, corpus, data, split, convention,
                       batch_size, decoder, device, console, steps) -> dict:
    """``--untrained MODEL``: :func:`induce.assess.untrained.evaluate_untrained` on the gold sentences
    (--gold, --corpus, else the default corpus: never a run's), with the gold vocabulary or the corpus's."""
    if lm or per_sentence is not None:
        raise InduceError(f"--untrained: {'--lm' if lm else '--per-sentence'} needs a trained run (--checkpoint)")
    from induce.assess.untrained import evaluate_untrained, untrained_config, untrained_vocabulary
    from induce.inference.scoring import load_gold

    run_config = untrained_config(model, sets)  # config errors before the gold is read
    if gold is None and corpus is None:
        corpus = _default_eval_corpus(None, data, console)
    preparing = steps.bar("preparing gold trees") if gold is None or not gold.is_dir() else None
    gold_set = load_gold(gold, corpus, split, convention, reading=steps.bar("reading gold trees"), preparing=preparing)
    convention = replace(convention, treebank=gold_set.treebank)  # what the gold was read as, as score() says
    vocab, vocab_label = untrained_vocabulary(gold_set.sentences, gold_set.corpus_dir)
    summary = evaluate_untrained(model, run_config.model, gold_set.sentences, vocab, convention, inits=inits, seed=seed,
                                 batch_size=batch_size, decoder=decoder, device=device,
                                 progress=steps.bar(f"untrained {model} models"))
    summary.update({"gold": gold_set.label, "vocabulary": vocab_label})
    return summary


def _default_eval_corpus(run_dir: Optional[Path], data: Optional[Path], console: Console) -> Path:
    """The prepared corpus to evaluate on when neither --gold nor --corpus is given: a run's own (unless
    --data names a data root), else the default corpus; said on ``console``."""
    if run_dir is not None and data is None:
        from induce.inference.scoring import eval_corpus_of_run

        chosen = eval_corpus_of_run(run_dir)
        console.print(f"evaluating on {chosen.description}", highlight=False, soft_wrap=True)
        return chosen.path
    from induce.data.locate import default_corpus

    return default_corpus(data, console=console)


def _run_files(run_dir: Optional[Path]) -> list:
    from induce.inference.runs import run_files

    return run_files(run_dir) if run_dir is not None else []


def _write_per_sentence(path: Path, result) -> None:
    from induce.files import write_output

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["index", "length", "f1", "precision", "recall", "n_pred_spans", "n_gold_spans", "n_matched"])
    for s in result.sentences:
        writer.writerow([s.index, s.length, f"{100 * s.f1:.4f}", f"{100 * s.precision:.4f}", f"{100 * s.recall:.4f}",
                         s.n_pred, s.n_gold, s.n_match])
    write_output(path, buffer.getvalue())


def _fits(sentence, item) -> bool:
    """Whether a predicted tree is over the words of a gold sentence
    (:func:`induce.evaluation.conventions.prediction_fits`; a sentence of traces only fits anything)."""
    from induce.evaluation.conventions import prediction_fits
    from induce.trees.nodes import tagged_leaves

    words = [leaf for leaf, _, _ in tagged_leaves(item.tree)]
    return not sentence.all_words or prediction_fits(words, sentence.all_words)

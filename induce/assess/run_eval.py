"""What ``induce eval``, ``induce compare`` and ``induce agreement`` do (:func:`run_eval`, :func:`run_compare`,
:func:`run_agreement`): score trees of a source (a predictions file, a baseline, a trained run, or freshly
initialised untrained models: :class:`SourceChoice`) against gold trees (:class:`GoldChoice`), under induce's
convention and its switches or under published conventions; compare two sources; measure how several agree;
or report a run's language-model perplexity. The commands parse the options and print the outcome.

Which gold trees: ``gold`` (a treebank file or folder), else the ``split`` of ``corpus`` (a prepared
corpus), else of a run's own corpus (unless ``data`` names a data root), else of the default corpus
(:func:`induce.assess.sources.read_gold`).
"""
from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Protocol, Sequence

from rich.console import Console

from induce.errors import InduceError
from induce.evaluation.bootstrap import DEFAULT_RESAMPLES, INTERVAL
from induce.evaluation.conventions import CONVENTIONS, DEFAULT, Convention, get_convention, induce_convention
from induce.evaluation.words import DEFAULT_WORD_MATCH, check_mode

from .hub import DEFAULT_CONVENTION, agreement_report, compare_report, convention_results
from .sources import (
    baseline_source,
    check_distinct_sources,
    file_source,
    read_gold,
    run_source,
    sources_of,
)


class ProgressBars(Protocol):
    """Hands out one ``(done, total)`` callback per progress bar (``induce.cli.ProgressSteps``)."""

    def bar(self, description: str) -> Callable[[int, int], None]: ...


class NoProgress:
    """:class:`ProgressBars` that draws nothing."""

    def bar(self, description: str) -> Callable[[int, int], None]:
        return lambda done, total: None


@dataclass(frozen=True)
class EvalOutcome:
    """What a command found. ``kind``: ``scores`` (:func:`induce.evaluation.engine.summary`), ``conventions``
    (one row per convention and gold variant), ``untrained`` (mean and spread over the inits, one row per
    init), ``perplexity`` (``perplexity``, ``split``, ``corpus``, ``run``), ``agreement`` or ``compare``."""

    kind: str
    summary: dict


@dataclass(frozen=True)
class GoldChoice:
    """Which gold trees: ``gold`` (``--gold``), else ``split`` of ``corpus``, else of a run's own corpus or of
    the default corpus under ``data``; ``treebank``: the profile of their tags (``--treebank``)."""

    gold: Optional[Path] = None
    corpus: Optional[Path] = None
    data: Optional[Path] = None
    split: str = "valid"
    treebank: Optional[str] = None

    @property
    def default(self) -> bool:
        return self.gold is None and self.corpus is None


@dataclass(frozen=True)
class ParseChoice:
    """How a run parses: sentences per forward pass, decoder, device."""

    batch_size: int = 64
    decoder: Optional[str] = None
    device: str = "auto"


@dataclass(frozen=True)
class SourceChoice:
    """One source of trees: at most one of ``predicted`` (a predictions file, read in ``pred_format``),
    ``baseline`` (right, left, balanced, random: seeded by ``seed``), ``checkpoint`` (a run folder or
    checkpoint) and ``untrained`` (a model name: ``inits`` models with ``sets`` overrides, init ``k`` seeded
    ``seed + k``); with none, the latest finished run (:func:`induce.inference.runs.pick_run`)."""

    predicted: Optional[Path] = None
    baseline: Optional[str] = None
    checkpoint: Optional[Path] = None
    untrained: Optional[str] = None
    inits: Optional[int] = None
    sets: tuple = ()
    seed: int = 0
    pred_format: str = "auto"

    def check(self) -> None:
        if sum(x is not None for x in (self.predicted, self.baseline, self.checkpoint, self.untrained)) > 1:
            raise InduceError("give only one of: a predicted file, --baseline, --checkpoint, --untrained")
        if self.untrained is None and (self.sets or self.inits is not None):
            raise InduceError(f"{f'--set {self.sets[0]}' if self.sets else '--inits'}: applies to --untrained only")

    def run_dir(self, console, lm: bool = False) -> Optional[Path]:
        """The run to parse with (None for a file or a baseline)."""
        if self.predicted is not None or self.baseline is not None:
            return None
        from induce.inference.runs import pick_run

        return pick_run(self.checkpoint, console, need_parser=not lm)


def eval_convention(wsj10: bool = False, wsj40: bool = False, max_length: Optional[int] = None,
                    keep_punct: bool = False, count_root: bool = False, multiset: bool = False,
                    treebank: Optional[str] = None) -> tuple[Convention, str]:
    """``(Convention, length option)`` of ``induce eval``'s switches (:func:`induce_convention`): the smallest of
    the length limits given, and the flag that set it (named when no sentence is left)."""
    if wsj10 and wsj40:
        raise InduceError("--wsj10 and --wsj40 together: choose one (run the command twice for both figures)")
    named_limits = [(n, flag) for n, flag in ((10 if wsj10 else None, "--wsj10"), (40 if wsj40 else None, "--wsj40"),
                                              (max_length, f"--max-length {max_length}")) if n is not None]
    if max_length is not None and max_length < 1:
        raise InduceError(f"--max-length {max_length}: give a number of words >= 1")
    if treebank is not None:
        from induce.trees.treebanks import get_profile

        treebank = get_profile(treebank).name
    convention = induce_convention(keep_punct=keep_punct, count_root=count_root, multiset=multiset,
                                   max_length=min(named_limits)[0] if named_limits else None, treebank=treebank)
    return convention, (min(named_limits)[1] if named_limits else "--max-length")


def _named(conventions: Sequence[str]) -> list:
    """The convention names of ``--convention`` (``all``: every one), each checked."""
    names = list(CONVENTIONS) if "all" in conventions else list(dict.fromkeys(conventions))
    for name in names:
        get_convention(name)
    return names


def run_eval(source: SourceChoice = SourceChoice(), gold: GoldChoice = GoldChoice(), convention: Convention = DEFAULT,
             length_option: str = "--max-length", parse: ParseChoice = ParseChoice(), conventions: Sequence[str] = (),
             variants: Sequence[str] = (), lm: bool = False, per_sentence: Optional[Path] = None,
             resamples: int = DEFAULT_RESAMPLES, word_match: str = DEFAULT_WORD_MATCH,
             console: Optional[Console] = None, steps: Optional[ProgressBars] = None) -> EvalOutcome:
    """Evaluate one source (:class:`SourceChoice`) against the gold (:class:`GoldChoice`): under ``convention``
    (induce's, with the switches of :func:`eval_convention`; ``length_option`` names the flag of its length
    limit), or, with ``conventions`` or ``variants`` (gold variants), under each published convention named
    (:func:`induce.assess.hub.convention_results`; their length limit: ``convention.max_length``). ``lm``: the
    run's perplexity on the split instead. ``per_sentence``: a CSV with one row per sentence. ``resamples``:
    of the bootstrap intervals (``ci``, seeded by ``source.seed``); ``word_match``: how the predicted words are
    compared with the gold's (:mod:`induce.evaluation.words`). What was chosen is said on ``console``
    (stderr); ``steps`` draws the progress bars. Argument errors name the command's flags."""
    from induce.files import check_not_input, check_output_file

    console, steps = console or Console(stderr=True), steps or NoProgress()
    check_mode(word_match)
    check_output_file(per_sentence, "--per-sentence")
    source.check()
    names = _named(conventions)
    if (names or variants) and (convention != induce_convention(max_length=convention.max_length,
                                                                treebank=convention.treebank)
                                or per_sentence is not None or lm or source.untrained is not None):
        raise InduceError("--convention and --gold-variant name the whole convention: drop --keep-punct, "
                          "--count-root, --multiset, --per-sentence, --lm and --untrained")
    if source.untrained is not None:
        return EvalOutcome("untrained", _untrained_summary(source, gold, convention, parse, lm, per_sentence,
                                                           console, steps))
    run_dir = source.run_dir(console, lm)
    if lm:
        return _perplexity(run_dir, gold, parse.device, console)
    if per_sentence is not None:
        from induce.evaluation.gold import gold_files
        from induce.inference.runs import run_files

        check_not_input(per_sentence, {"the predicted trees": source.predicted,
                                       "--gold": gold_files(gold.gold) if gold.gold is not None and gold.gold.exists()
                                       else gold.gold,
                                       "the run's checkpoint": run_files(run_dir) if run_dir else []}, "--per-sentence")
    gold_set = read_gold(gold.gold, gold.corpus, gold.data, gold.split, run_dir, console, steps, gold.treebank)
    if names or variants:
        return _conventions(source, run_dir, gold_set, names, variants, convention.max_length, parse, resamples,
                            word_match, console, steps)
    return _scores(source, run_dir, gold_set, convention, length_option, parse, per_sentence, resamples, word_match,
                   console, steps)


def _source(source: SourceChoice, run_dir, golds, convention: Convention, parse: ParseChoice, steps, every_token: bool):
    """The :class:`~induce.assess.sources.Source` of ``source``: under ``convention`` (a run parses its words, a
    baseline is built over them), or, with ``every_token``, as the conventions read it (a run parses every
    token, a baseline is built over each convention's own)."""
    from .sources import EVERY_TOKEN

    if source.predicted is not None:
        return file_source(source.predicted, golds, source.pred_format, steps.bar("reading predicted trees"),
                           DEFAULT if every_token else convention)
    if source.baseline is not None:
        return baseline_source(source.baseline, source.seed, None if every_token else golds, convention)
    return run_source(run_dir, golds, EVERY_TOKEN if every_token else convention, parse.batch_size, parse.decoder,
                      parse.device, steps.bar(f"parsing with {run_dir}" if every_token else "parsing"))


def _scores(source, run_dir, gold_set, convention, length_option, parse, per_sentence, resamples, word_match,
            console, steps) -> EvalOutcome:
    """One source under induce's convention: :func:`induce.evaluation.engine.summary`."""
    from induce.evaluation.engine import require_sentences, score, summary

    scored = _source(source, run_dir, gold_set.sentences, convention, parse, steps, every_token=False)
    for note in scored.notes:
        console.print(note, highlight=False, soft_wrap=True)
    result = score(gold_set.sentences, scored.items, replace(convention, treebank=gold_set.treebank),
                   locations=scored.locations, word_match=word_match, progress=steps.bar("scoring"))
    require_sentences(result, length_option)
    if per_sentence is not None:
        _write_per_sentence(per_sentence, result)
    return EvalOutcome("scores", summary(result, scored.label, gold_set, resamples, source.seed))


def _conventions(source, run_dir, gold_set, names, variants, max_length, parse, resamples, word_match, console,
                 steps) -> EvalOutcome:
    """One source under each published convention named, on each gold variant."""
    scored = _source(source, run_dir, gold_set.sentences, DEFAULT, parse, steps, every_token=True)
    results = convention_results(scored, gold_set.sentences, names or [DEFAULT_CONVENTION], list(variants) or ["nary"],
                                 max_length, resamples, source.seed, word_match)
    return EvalOutcome("conventions", {"predicted": scored.label, "gold": gold_set.label, "results": results,
                                       "treebank": gold_set.treebank, "notes": scored.notes,
                                       "bootstrap": {"resamples": resamples, "seed": source.seed,
                                                     "interval": INTERVAL}})


def _several(paths: Sequence[Path], gold: GoldChoice, parse: ParseChoice, pred_format: str, console, steps):
    """``(GoldSet, sources)``: the gold and a source per path (a run folder is parsed, a file read)."""
    gold_set = read_gold(gold.gold, gold.corpus, gold.data, gold.split, None, console, steps, gold.treebank)
    sources = sources_of(paths, gold_set.sentences, pred_format, parse.batch_size, parse.decoder, parse.device, steps)
    return gold_set, sources


def run_compare(paths: Sequence[Path], gold: GoldChoice = GoldChoice(), convention: str = DEFAULT_CONVENTION,
                variants: Sequence[str] = (), max_length: Optional[int] = None, resamples: int = DEFAULT_RESAMPLES,
                seed: int = 0, pred_format: str = "auto", parse: ParseChoice = ParseChoice(),
                word_match: str = DEFAULT_WORD_MATCH, console=None, steps=None, what: str = "induce compare"):
    """The paired bootstrap of two sources A - B (prediction files or run folders) on the convention's first
    figure (:func:`induce.assess.hub.compare_report`); ``what`` names the command in errors."""
    console, steps = console or Console(stderr=True), steps or NoProgress()
    check_mode(word_match)
    get_convention(convention)
    if len(paths) != 2:
        raise InduceError(f"{what} takes two sources (prediction files or run folders), {len(paths)} given")
    check_distinct_sources(paths, what, "give two different sources (a source compared with itself differs by "
                           "nothing)")
    if len(set(variants)) > 1:
        raise InduceError(f"{what}: one --gold-variant at most ({', '.join(dict.fromkeys(variants))} given): "
                          "compare the two sources against each gold variant in turn")
    gold_set, sources = _several(paths, gold, parse, pred_format, console, steps)
    report = compare_report(sources[0], sources[1], gold_set.sentences, convention, (list(variants) or ["nary"])[0],
                            max_length, resamples, seed, word_match)
    return EvalOutcome("compare", {**report, "gold": gold_set.label, "notes": [n for s in sources for n in s.notes]})


def run_agreement(paths: Sequence[Path], gold: GoldChoice = GoldChoice(), convention: str = DEFAULT_CONVENTION,
                  max_length: Optional[int] = None, pred_format: str = "auto", parse: ParseChoice = ParseChoice(),
                  word_match: str = DEFAULT_WORD_MATCH, console=None, steps=None, what: str = "induce agreement"):
    """The pairwise F1 matrix of two sources or more (:func:`induce.assess.hub.agreement_report`); ``what``
    names the command in errors."""
    console, steps = console or Console(stderr=True), steps or NoProgress()
    check_mode(word_match)
    get_convention(convention)
    if len(paths) < 2:
        raise InduceError(f"{what} takes two sources or more (prediction files or run folders), {len(paths)} given")
    check_distinct_sources(paths, what, "give each source once (a source agrees with itself completely, which "
                           "would raise the mean pairwise F1)")
    gold_set, sources = _several(paths, gold, parse, pred_format, console, steps)
    report = agreement_report(sources, gold_set.sentences, convention, max_length, word_match)
    return EvalOutcome("agreement", {**report, "gold": gold_set.label, "notes": [n for s in sources for n in s.notes]})


def _perplexity(run_dir: Optional[Path], gold: GoldChoice, device: str, console) -> EvalOutcome:
    """``--lm``: the run's perplexity on the LM text of the split of the prepared corpus."""
    if run_dir is None:
        raise InduceError("--lm needs a trained run (--checkpoint)")
    if gold.gold is not None:
        raise InduceError("--lm reads the LM text of a prepared corpus: use --corpus or the run's corpus, not --gold")
    from induce.inference.language_model import lm_perplexity
    from induce.inference.loading import load_run
    from induce.models.base import STREAM_LM

    from .sources import default_eval_corpus

    corpus = gold.corpus if gold.corpus is not None else default_eval_corpus(run_dir, gold.data, console)
    loaded = load_run(run_dir, device)
    ppl = lm_perplexity(loaded, corpus, gold.split, device=device)
    # ``bound``: an upper bound (a latent variable's negative ELBO), not the model's perplexity; ``whole_sentences``:
    # each sentence read alone (no context from the ones before it), one-word sentences left out.
    return EvalOutcome("perplexity", {
        "perplexity": ppl, "split": gold.split, "corpus": str(corpus), "run": str(run_dir),
        "bound": bool(loaded.model.perplexity_is_bound),
        "whole_sentences": loaded.model.objective is not STREAM_LM})


def _untrained_summary(source: SourceChoice, gold: GoldChoice, convention: Convention, parse: ParseChoice, lm: bool,
                       per_sentence, console, steps) -> dict:
    """``--untrained MODEL``: :func:`induce.assess.untrained.evaluate_untrained` on the gold sentences
    (--gold, --corpus, else the default corpus: never a run's), with the gold vocabulary or the corpus's."""
    if lm or per_sentence is not None:
        raise InduceError(f"--untrained: {'--lm' if lm else '--per-sentence'} needs a trained run (--checkpoint)")
    from induce.assess.untrained import evaluate_untrained, untrained_config, untrained_vocabulary

    model = source.untrained
    run_config = untrained_config(model, source.sets)  # config errors before the gold is read
    gold_set = read_gold(gold.gold, gold.corpus, gold.data, gold.split, None, console, steps, gold.treebank)
    convention = replace(convention, treebank=gold_set.treebank)  # what the gold was read as, as score() says
    vocab, vocab_label = untrained_vocabulary(gold_set.sentences, gold_set.corpus_dir, convention)
    summary = evaluate_untrained(model, run_config.model, gold_set.sentences, vocab, convention,
                                 inits=source.inits or 5, seed=source.seed, batch_size=parse.batch_size,
                                 decoder=parse.decoder, device=parse.device,
                                 progress=steps.bar(f"untrained {model} models"))
    summary.update({"gold": gold_set.label, "vocabulary": vocab_label})
    return summary


def _write_per_sentence(path: Path, result) -> None:
    from induce.files import write_output

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["index", "length", "f1", "precision", "recall", "n_pred_spans", "n_gold_spans", "n_matched"])
    for s in result.sentences:
        writer.writerow([s.index, s.length, f"{100 * s.f1:.4f}", f"{100 * s.precision:.4f}", f"{100 * s.recall:.4f}",
                         s.n_pred, s.n_gold, s.match])
    write_output(path, buffer.getvalue())

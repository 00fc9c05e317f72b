"""`induce eval`: score the trees of one source (a predictions file, a baseline, a trained run, untrained models)
against gold trees (logic: :mod:`induce.assess.run_eval`). The options shared with `induce compare` and `induce
agreement` (:mod:`induce.cli.compare`) are declared once here, as annotated types."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Callable, Optional

import typer
from rich.console import Console
from rich.table import Table

from induce.cli import (
    DEVICE_HELP,
    LATEST_RUN_HELP,
    PROGRESS_HELP,
    THREADS_HELP,
    TREEBANK_HELP,
    WORD_MATCH_HELP,
    default_gold_hint,
    progress_steps,
)
from induce.errors import InduceError
from induce.trees.kinds import decoder_help

#: The names of ``--convention`` (kept here: the command's help must not import the evaluation modules).
CONVENTION_NAMES = ("induce", "kim2019", "onlstm", "onlstm-evalb", "prpn", "palm", "li2020", "li2020-punct",
                    "li2020-evalb", "li2020-evalb-punct", "evalb-diora", "evalb-collins")
CONVENTION_LIST = ", ".join(CONVENTION_NAMES)

CONVENTION_HELP = (
    "Default convention (Kim et al. 2019): punctuation and traces removed by the word-tag filter "
    "(only leaves whose gold POS is a word tag are kept; $ and # go too), length filters applied after "
    "removal, sentences of length 1 skipped, length-1 spans and the whole-sentence span not counted, spans "
    "counted as sets; per-sentence F1 when the gold has no span: recall 1 (precision 1 if the prediction "
    "has none either). Branching statistics (PaLM Table 4): among splits of spans longer than 2, % left "
    "splits [i,j] -> [i,j-1]+(j), % right splits [i,j] -> (i)+[i+1,j]; gold nodes with more than two "
    "children count as neither (reported as n-ary)."
)


#: The options of the eval commands, each declared once (``name: Type = default`` in a command's signature).
Gold = Annotated[Optional[Path], typer.Option(
    "--gold", help="Gold treebank file (one tree per line or multi-line .mrg), or a folder whose *.mrg files are "
    "read in name order (e.g. the NLTK sample). Default: the --split of a run's own corpus, else of the default "
    "prepared corpus (see --data).")]
Data = Annotated[Optional[Path], typer.Option("--data", help="Data root for the default corpus (else $INDUCE_DATA, "
                                              "corpora/, NLTK); with a run: this data, not the run's own corpus.")]
Corpus = Annotated[Optional[Path], typer.Option("--corpus", help="A prepared corpus folder (induce preprocess "
                                                "output); default: a run's own corpus, else the default corpus.")]
Split = Annotated[str, typer.Option("--split", help="Split of the prepared corpus: valid (dev) or test.")]
Treebank = Annotated[Optional[str], typer.Option("--treebank", metavar="ptb|ktb|ktb-2020", help=TREEBANK_HELP)]
Seed = Annotated[int, typer.Option("--seed", help="Seed of --baseline random and of the bootstrap; with "
                                   "--untrained, init k (1..N) is drawn with torch seed SEED + k.")]
Decoder = Annotated[Optional[str], typer.Option("--decoder", help=decoder_help())]
BatchSize = Annotated[int, typer.Option("--batch-size", help="Sentences per forward pass (parsing with a run).")]
Device = Annotated[str, typer.Option("--device", help="With a run: " + DEVICE_HELP)]
Threads = Annotated[Optional[int], typer.Option("--threads", min=1, help=THREADS_HELP)]
Wsj10 = Annotated[bool, typer.Option("--wsj10", help="Only sentences of <= 10 words after punctuation removal.")]
Wsj40 = Annotated[bool, typer.Option("--wsj40", help="Only sentences of <= 40 words after punctuation removal.")]
MaxLength = Annotated[Optional[int], typer.Option("--max-length", help="Only sentences of <= N words after removal "
                                                  "(with --wsj10 or --wsj40: the smaller limit).")]
Conventions = Annotated[list[str], typer.Option(
    "--convention", metavar="NAME", help="Score under a published convention, equal to its authors' script "
    "(repeatable; `all` for every one): " + CONVENTION_LIST + ". One table, one row per convention; --json adds a "
    "95% bootstrap interval to every figure. See README, 'Evaluation convention'. compare / agreement: one, whose "
    "tokens, sentences and figure they use.")]
GoldVariants = Annotated[list[str], typer.Option(
    "--gold-variant", metavar="nary|left|right", help="With --convention: gold trees as they are (nary, the default) "
    "or binarised after the convention's token removal, grouping from the left or the right (repeatable: side by "
    "side; compare: one).")]
PredFormat = Annotated[str, typer.Option(
    "--pred-format", help="Format of the predicted file: trees (one bracketed tree per line), spans (JSON lines "
    "{\"words\", \"spans\"}, end exclusive), diora (JSON lines {\"tree\": nested lists}), kim (compound-pcfg "
    "pred_tree files, no line for one-word sentences), or auto (from the first line).")]
Resamples = Annotated[int, typer.Option("--resamples", min=1, help="Bootstrap resamples (compare, and the "
                                        "intervals of --json; seeded by --seed).")]
WordMatch = Annotated[str, typer.Option("--word-match", metavar="normalized|exact|position", help=WORD_MATCH_HELP)]
AsJson = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
Progress = Annotated[bool, typer.Option("--progress/--no-progress", help=PROGRESS_HELP)]


def eval_command(
    predicted: Annotated[Optional[list[Path]], typer.Argument(
        help="Predicted trees, one bracketed tree per line (as `induce parse` writes), or another toolkit's format "
        "(--pred-format). Leaves may cover all gold tokens (punctuation is then projected away) or only the words "
        "kept by the convention.")] = None,
    gold: Gold = None,
    baseline: Annotated[Optional[str], typer.Option("--baseline", help="Evaluate a baseline instead: right, left, "
                                                    "balanced, or random (uniformly random split point at each span, "
                                                    "seeded by --seed).")] = None,
    seed: Seed = 0,
    checkpoint: Annotated[Optional[Path], typer.Option("--checkpoint", help="Parse the gold sentences with this "
                                                       "trained run and evaluate its trees. Without a predicted "
                                                       f"file, --baseline or --checkpoint: {LATEST_RUN_HELP}.")] = None,
    untrained: Annotated[Optional[str], typer.Option(
        "--untrained", metavar="MODEL", help="Parse the gold sentences with --inits freshly initialised, untrained "
        "MODELs (the shipped MODEL.yaml: the papers' sizes; change them with --set) and report mean ± std over the "
        "inits (PaLM Table 4's first row). Vocabulary: that of the prepared corpus when the gold trees come from one "
        "(--corpus or the default corpus), else every word of the gold sentences; never a run folder's.")] = None,
    inits: Annotated[Optional[int], typer.Option("--inits", min=1, help="With --untrained: how many untrained models "
                                                 "(default 5; PaLM Table 4: 25).")] = None,
    sets: Annotated[list[str], typer.Option("--set", metavar="KEY=VALUE", help="With --untrained: a model config "
                                            "override as `induce train` takes it, e.g. --set model.hidden_size=1020 "
                                            "(repeatable; model.* keys only).")] = [],  # noqa: B006 (typer's default)
    lm: Annotated[bool, typer.Option("--lm", help="With a checkpoint: report the language-model perplexity of "
                                     "--split.")] = False,
    decoder: Decoder = None, batch_size: BatchSize = 64, device: Device = "auto", threads: Threads = None,
    data: Data = None, corpus: Corpus = None, split: Split = "valid",
    wsj10: Wsj10 = False, wsj40: Wsj40 = False, max_length: MaxLength = None,
    keep_punct: Annotated[bool, typer.Option("--keep-punct", help="Keep punctuation (traces are still "
                                             "removed).")] = False,
    count_root: Annotated[bool, typer.Option("--count-root", help="Count the whole-sentence span.")] = False,
    multiset: Annotated[bool, typer.Option("--multiset", help="Spans as a multiset (unary chains count "
                                           "repeatedly).")] = False,
    conventions: Conventions = [], gold_variants: GoldVariants = [],  # noqa: B006 (typer's default)
    pred_format: PredFormat = "auto",
    agreement: Annotated[bool, typer.Option("--agreement", hidden=True)] = False,
    compare: Annotated[bool, typer.Option("--compare", hidden=True)] = False,
    resamples: Resamples = 1000, word_match: WordMatch = "normalized", treebank: Treebank = None,
    as_json: AsJson = False,
    per_sentence: Annotated[Optional[Path], typer.Option("--per-sentence", help="Write a CSV with one row per "
                                                         "sentence.")] = None,
    progress: Progress = True,
) -> None:
    """Unlabeled bracketing F1 (sentence and corpus level), per-label recall and branching statistics.

    A trained run (--checkpoint, or the latest one) is evaluated on the corpus it was trained on unless
    --gold, --corpus or --data names other data (a reproduction's subset corpus stands for the corpus it
    was cut from); the output says which. Baselines, predicted files and --untrained use the default corpus.
    Two sources: `induce compare`; several: `induce agreement`.

    Examples: `induce eval pred.txt --gold 22.mrg`, `induce eval --baseline right --wsj40`,
    `induce eval --checkpoint runs/RUN --wsj10`, `induce eval --untrained palm --inits 25 --wsj40`,
    `induce eval pred.txt --gold 22.mrg --convention kim2019 --convention li2020 --gold-variant right`.
    """
    from induce.assess.run_eval import GoldChoice, ParseChoice, SourceChoice, eval_convention, run_eval
    from induce.config import use_threads

    use_threads(threads)
    console = Console(stderr=True)
    predicted = list(predicted or [])
    if agreement or compare:
        _forward(console, "agreement" if agreement else "compare", agreement and compare, predicted, conventions,
                 gold_variants, baseline, checkpoint, dict(
                     gold=GoldChoice(gold, corpus, data, split, treebank), max_length=eval_convention(
                         wsj10, wsj40, max_length)[0].max_length, pred_format=pred_format,
                     parse=ParseChoice(batch_size, decoder, device), word_match=word_match), seed, resamples,
                 as_json, progress)
        return
    if len(predicted) > 1:
        raise InduceError(f"{len(predicted)} prediction files: evaluate one at a time, or use `induce compare` / "
                          "`induce agreement`")
    convention, length_option = eval_convention(wsj10, wsj40, max_length, keep_punct, count_root, multiset, treebank)
    source = SourceChoice(predicted[0] if predicted else None, baseline, checkpoint, untrained, inits, tuple(sets),
                          seed, pred_format)
    with progress_steps(console, progress) as steps, default_gold_hint(gold is None and corpus is None,
                                                                     _default_gold(split)):
        outcome = run_eval(source, GoldChoice(gold, corpus, data, split, convention.treebank), convention,
                           length_option, ParseChoice(batch_size, decoder, device), conventions, gold_variants, lm,
                           per_sentence, resamples, word_match, console, steps)
    print_outcome(outcome, as_json, console)


def _forward(console, command: str, both: bool, predicted, conventions, variants, baseline, checkpoint, options,
             seed, resamples, as_json, progress) -> None:
    """The old ``induce eval --agreement / --compare``: said to be ``induce agreement / compare`` now, then run
    as they run."""
    from induce.cli.compare import run_command

    if both:
        raise InduceError("--agreement and --compare together: choose one")
    if baseline is not None or checkpoint is not None:
        raise InduceError(f"--{command}: give the runs or prediction files as arguments (a run folder is parsed), "
                          "not --baseline / --checkpoint")
    if len(conventions) > 1:
        raise InduceError(f"--{command}: one --convention at most")
    if command == "agreement" and variants:
        raise InduceError("--agreement compares sources with each other, not with gold: --gold-variant does not apply")
    console.print(f"`induce eval --{command}` is now `induce {command}`", highlight=False, soft_wrap=True)
    extra = {"variants": variants, "resamples": resamples, "seed": seed} if command == "compare" else {}
    run_command(command, predicted, (conventions or ["induce"])[0], as_json, progress, console,
                what=f"--{command}", **options, **extra)


def print_outcome(outcome, as_json: bool, console: Console) -> None:
    """An :class:`~induce.assess.run_eval.EvalOutcome` on stdout: one JSON object, or its table (notes on
    ``console``)."""
    for note in outcome.summary.get("notes", []) if outcome.kind != "scores" else []:
        console.print(note, highlight=False, soft_wrap=True)
    if as_json:
        typer.echo(json.dumps(outcome.summary, sort_keys=True))
    elif outcome.kind == "perplexity":
        _print_perplexity(outcome.summary)
    elif outcome.kind == "untrained":
        _print_untrained(outcome.summary, Console())
    elif outcome.kind == "scores":
        _print_table(outcome.summary, Console())
    else:
        from induce.cli.hub_tables import print_hub

        print_hub(outcome, Console())


def _print_perplexity(summary: dict) -> None:
    bound = summary.get("bound")
    notes = (["an upper bound: the negative ELBO"] if bound else []) + (
        ["each sentence read alone, one-word sentences left out"] if summary.get("whole_sentences") else [])
    typer.echo(f"perplexity on {summary['split']} of {summary['corpus']}: {'≤ ' if bound else ''}"
               f"{summary['perplexity']:.2f}" + (f" ({'; '.join(notes)})" if notes else ""))


def _default_gold(split: str) -> Callable[[], str]:
    return lambda: f"the {split} split of the corpus named above"


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.1f}"


def _print_table(summary: dict, console: Console) -> None:
    table = Table(title=f"{summary['predicted']}  vs  {summary['gold']}", show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("sentences evaluated", str(summary["n_sentences"]))
    table.add_row("sentences skipped (length filter)", str(summary["n_skipped"]))
    table.add_row("sentence F1", _fmt(summary["sentence_f1"]))
    table.add_row("corpus F1", _fmt(summary["corpus_f1"]))
    table.add_row("corpus precision", _fmt(summary["precision"]))
    table.add_row("corpus recall", _fmt(summary["recall"]))
    for label, value in summary["label_recall"].items():
        table.add_row(f"recall {label} ({summary['label_counts'][label]})", _fmt(value))
    for who, prefix in (("predicted", ""), ("gold", "gold_")):
        table.add_row(
            f"{who} splits % left / right / other / n-ary",
            " / ".join(_fmt(summary[f"{prefix}{kind}_split_pct"])
                       for kind in ("left", "right", "other_binary", "nary")),
        )
    console.print(table)
    console.print(f"convention: {summary['convention']['description']}")
    if summary.get("words"):
        from induce.evaluation.words import describe

        console.print(describe(summary["words"]), highlight=False, soft_wrap=True)


def _print_untrained(summary: dict, console: Console) -> None:
    """Mean ± std over the inits, then one row per init (seed, F1, % left / right splits)."""
    table = Table(title=f"{summary['inits']} untrained {summary['model']}  vs  {summary['gold']}")
    table.add_column("metric")
    table.add_column("mean ± std over the inits", justify="right")
    for name, label in (("sentence_f1", "sentence F1"), ("corpus_f1", "corpus F1"),
                        ("left_split_pct", "% left splits"), ("right_split_pct", "% right splits")):
        stats = summary["summary"][name]
        table.add_row(label, _fmt(stats["mean"]) + ("" if stats["std"] is None else f" ± {stats['std']:.1f}"))
    table.add_row("sentences evaluated / skipped", f"{summary['n_sentences']} / {summary['n_skipped']}")
    table.add_row("largest share of one direction (one init)", _fmt(summary["max_one_direction_pct"]))
    console.print(table)
    inits = Table("init", "seed", "sentence F1", "corpus F1", "% left", "% right", title="per init")
    for row in summary["per_init"]:
        inits.add_row(str(row["init"]), str(row["seed"]), *(_fmt(row[k]) for k in
                      ("sentence_f1", "corpus_f1", "left_split_pct", "right_split_pct")))
    console.print(inits)
    console.print(f"vocabulary: {summary['vocabulary']}; convention: {summary['convention']['description']}")


def register(app: typer.Typer) -> None:
    app.command("eval", epilog=CONVENTION_HELP)(eval_command)

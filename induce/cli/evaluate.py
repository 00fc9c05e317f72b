"""`induce eval`: score the trees of one source (a predictions file, a baseline, a trained run, untrained models)
against gold trees (logic: :mod:`induce.assess.run_eval`). The options shared with `induce compare` and `induce
agreement` (:mod:`induce.cli.compare`) are declared once here, as annotated types."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Optional

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


#: The options the eval commands share, each declared once: ``gold: Optional[Path] = gold_option()`` in a
#: command's signature (a fresh :class:`typer.models.OptionInfo` per command, as :mod:`induce.cli.main` escapes
#: each one's help and sets its flags' metavar in place).


def gold_option():
    return typer.Option(None, "--gold", help="Gold treebank file (one tree per line or multi-line .mrg), or a folder "
                        "whose *.mrg files are read in name order (e.g. the NLTK sample). Default: the --split of a "
                        "run's own corpus, else of the default prepared corpus (see --data).")


def data_option():
    return typer.Option(None, "--data", help="Data root for the default corpus (else $INDUCE_DATA, corpora/, NLTK); "
                        "with a run: this data, not the run's own corpus.")


def corpus_option():
    return typer.Option(None, "--corpus", help="A prepared corpus folder (induce preprocess output); default: a "
                        "run's own corpus, else the default corpus.")


def split_option():
    return typer.Option("valid", "--split", help="Split of the prepared corpus: valid (dev) or test.")


def treebank_option():
    return typer.Option(None, "--treebank", metavar="ptb|ktb|ktb-2020", help=TREEBANK_HELP)


def seed_option():
    return typer.Option(0, "--seed", help="Seed of --baseline random and of the bootstrap; with --untrained, init k "
                        "(1..N) is drawn with torch seed SEED + k.")


def decoder_option():
    return typer.Option(None, "--decoder", help=decoder_help())


def batch_size_option():
    return typer.Option(64, "--batch-size", help="Sentences per forward pass (parsing with a run).")


def device_option():
    return typer.Option("auto", "--device", help="With a run: " + DEVICE_HELP)


def threads_option():
    return typer.Option(None, "--threads", min=1, help=THREADS_HELP)


def wsj10_option():
    return typer.Option(False, "--wsj10", help="Only sentences of <= 10 words after punctuation removal.")


def wsj40_option():
    return typer.Option(False, "--wsj40", help="Only sentences of <= 40 words after punctuation removal.")


def max_length_option():
    return typer.Option(None, "--max-length", help="Only sentences of <= N words after removal (with --wsj10 or "
                        "--wsj40: the smaller limit).")


def conventions_option():
    return typer.Option([], "--convention", metavar="NAME", help="Score under a published convention, equal to its "
                        "authors' script (repeatable; `all` for every one): " + CONVENTION_LIST + ". One table, one "
                        "row per convention; --json adds a 95% bootstrap interval to each figure (docs/evaluation.md).")


def gold_variants_option():
    return typer.Option([], "--gold-variant", metavar="nary|left|right", help="With --convention: gold trees as they "
                        "are (nary, the default) or binarised after the convention's token removal, grouping from the "
                        "left or the right (repeatable: side by side; compare: one).")


def pred_format_option():
    return typer.Option("auto", "--pred-format", help="Format of the predicted file: trees (one bracketed tree per "
                        "line), spans (JSON lines {\"words\", \"spans\"}, end exclusive), diora (JSON lines "
                        "{\"tree\": nested lists}), kim (compound-pcfg pred_tree files, no line for one-word "
                        "sentences), or auto (from the first line).")


def resamples_option():
    return typer.Option(1000, "--resamples", min=1, help="Bootstrap resamples (compare, and the intervals of --json; "
                        "seeded by --seed).")


def word_match_option():
    return typer.Option("normalized", "--word-match", metavar="normalized|exact|position", help=WORD_MATCH_HELP)


def json_option():
    return typer.Option(False, "--json", help="Print one JSON object instead of a table.")


def progress_option():
    return typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP)


def predicted_argument():
    return typer.Argument(None, help="Predicted trees, one bracketed tree per line (as `induce parse` writes), or "
                          "another toolkit's format (--pred-format). Leaves may cover all gold tokens (punctuation is "
                          "then projected away) or only the words kept by the convention.")


def baseline_option():
    return typer.Option(None, "--baseline", help="Evaluate a baseline instead: right, left, balanced, or random "
                        "(uniformly random split point at each span, seeded by --seed).")


def checkpoint_option():
    return typer.Option(None, "--checkpoint", help="Parse the gold sentences with this trained run and evaluate its "
                        f"trees. Without a predicted file, --baseline or --checkpoint: {LATEST_RUN_HELP}.")


def untrained_option():
    return typer.Option(None, "--untrained", metavar="MODEL", help="Parse the gold sentences with --inits freshly "
                        "initialised, untrained MODELs (the shipped MODEL.yaml: the papers' sizes; change them with "
                        "--set) and report mean ± std over the inits (PaLM Table 4's first row). Vocabulary: that of "
                        "the prepared corpus when the gold trees come from one (--corpus or the default corpus), else "
                        "every word of the gold sentences; never a run folder's.")


def inits_option():
    return typer.Option(None, "--inits", min=1, help="With --untrained: how many untrained models (default 5; PaLM "
                        "Table 4: 25).")


def sets_option():
    return typer.Option([], "--set", metavar="KEY=VALUE", help="With --untrained: a model config override as `induce "
                        "train` takes it, e.g. --set model.hidden_size=1020 (repeatable; model.* keys only).")


def per_sentence_option():
    return typer.Option(None, "--per-sentence", help="Write a CSV with one row per sentence.")


def eval_command(
    predicted: Optional[list[Path]] = predicted_argument(), gold: Optional[Path] = gold_option(),
    baseline: Optional[str] = baseline_option(), seed: int = seed_option(),
    checkpoint: Optional[Path] = checkpoint_option(), untrained: Optional[str] = untrained_option(),
    inits: Optional[int] = inits_option(), sets: list[str] = sets_option(),
    lm: bool = typer.Option(False, "--lm", help="With a checkpoint: report the language-model perplexity of --split."),
    decoder: Optional[str] = decoder_option(), batch_size: int = batch_size_option(), device: str = device_option(),
    threads: Optional[int] = threads_option(), data: Optional[Path] = data_option(),
    corpus: Optional[Path] = corpus_option(), split: str = split_option(),
    wsj10: bool = wsj10_option(), wsj40: bool = wsj40_option(), max_length: Optional[int] = max_length_option(),
    keep_punct: bool = typer.Option(False, "--keep-punct", help="Keep punctuation (traces are still removed)."),
    count_root: bool = typer.Option(False, "--count-root", help="Count the whole-sentence span."),
    multiset: bool = typer.Option(False, "--multiset", help="Spans as a multiset (unary chains count repeatedly)."),
    conventions: list[str] = conventions_option(), gold_variants: list[str] = gold_variants_option(),
    pred_format: str = pred_format_option(),
    agreement: bool = typer.Option(False, "--agreement", hidden=True, help="Now `induce agreement`."),
    compare: bool = typer.Option(False, "--compare", hidden=True, help="Now `induce compare`."),
    resamples: int = resamples_option(), word_match: str = word_match_option(),
    treebank: Optional[str] = treebank_option(), as_json: bool = json_option(),
    per_sentence: Optional[Path] = per_sentence_option(), progress: bool = progress_option(),
) -> None:
    """Unlabeled bracketing F1 (sentence and corpus level), per-label recall and branching statistics.

    A trained run (--checkpoint, or the latest one) is evaluated on the corpus it was trained on unless
    --gold, --corpus or --data names other data (a reproduction's subset corpus stands for the corpus it
    was cut from); the output says which. Baselines, predicted files and --untrained use the default corpus.
    Two sources: `induce compare`; several: `induce agreement`.

    Examples: `induce eval pred.txt --gold 22.mrg`, `induce eval --baseline right --wsj40`,
    `induce eval --checkpoint runs/RUN --wsj10`, `induce eval --untrained palm --inits 25 --wsj40`,
    `induce eval pred.txt --gold 22.mrg --convention kim2019 --convention li2020 --gold-variant right`.
    \f
    The options it shares with `induce compare` and `induce agreement` come from the ``*_option`` functions
    above; what it does is :func:`induce.assess.run_eval.run_eval`.
    """
    from induce.assess.run_eval import GoldChoice, ParseChoice, SourceChoice, eval_convention, run_eval
    from induce.config import use_threads

    use_threads(threads)
    console, predicted = Console(stderr=True), list(predicted or [])
    convention, length_option = eval_convention(wsj10, wsj40, max_length, keep_punct, count_root, multiset, treebank)
    gold_choice, parse = GoldChoice(gold, corpus, data, split, convention.treebank), ParseChoice(batch_size, decoder,
                                                                                                 device)
    if agreement or compare:
        switched = keep_punct or count_root or multiset or per_sentence is not None or lm or untrained is not None
        _forward(console, agreement, compare, switched, predicted, conventions, gold_variants, baseline, checkpoint,
                 dict(gold=gold_choice, max_length=convention.max_length, pred_format=pred_format, parse=parse,
                      word_match=word_match), seed, resamples, as_json, progress)
        return
    if len(predicted) > 1:
        raise InduceError(f"{len(predicted)} prediction files: evaluate one at a time, or use `induce compare` / "
                          "`induce agreement`")
    source = SourceChoice(predicted[0] if predicted else None, baseline, checkpoint, untrained, inits, tuple(sets),
                          seed, pred_format)
    with progress_steps(console, progress) as steps, default_gold_hint(gold_choice.default, _default_gold(split)):
        outcome = run_eval(source, gold_choice, convention, length_option, parse, conventions, gold_variants, lm,
                           per_sentence, resamples, word_match, console, steps)
    print_outcome(outcome, as_json, console)


def _forward(console, agreement: bool, compare: bool, switched: bool, predicted, conventions, variants, baseline,
             checkpoint, options, seed, resamples, as_json, progress) -> None:
    """The old ``induce eval --agreement / --compare``: said to be ``induce agreement / compare`` now, then run
    as they run (``switched``: a switch of induce's own convention was given, which they do not take)."""
    if agreement and compare:
        raise InduceError("--agreement and --compare together: choose one")
    command = "agreement" if agreement else "compare"
    if switched:
        raise InduceError(f"--{command} names the whole convention: drop --keep-punct, --count-root, --multiset, "
                          "--per-sentence, --lm and --untrained")
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


def run_command(command: str, sources: list, convention: str, as_json: bool, progress: bool, console: Console,
                **options) -> None:
    """Run ``compare`` or ``agreement`` (:mod:`induce.assess.run_eval`) and print its outcome."""
    from induce.assess.run_eval import run_agreement, run_compare

    run = run_compare if command == "compare" else run_agreement
    with progress_steps(console, progress) as steps, default_gold_hint(
            options["gold"].default, lambda: f"the {options['gold'].split} split of the corpus named above"):
        outcome = run(sources, convention=convention, console=console, steps=steps, **options)
    print_outcome(outcome, as_json, console)


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

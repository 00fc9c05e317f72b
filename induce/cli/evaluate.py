"""`induce eval`: score predicted trees (a file, a baseline, or a trained model) against gold trees."""
from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from induce.cli import DEVICE_HELP, LATEST_RUN_HELP, PROGRESS_HELP, ProgressSteps, pick_run
from induce.errors import InduceError

CONVENTION_HELP = (
    "Default convention (Kim et al. 2019): punctuation and traces removed by the word-tag filter "
    "(only leaves whose gold POS is a word tag are kept; $ and # go too), length filters applied after "
    "removal, sentences of length 1 skipped, length-1 spans and the whole-sentence span not counted, spans "
    "counted as sets; per-sentence F1 when the gold has no span: recall 1 (precision 1 if the prediction "
    "has none either). Branching statistics (PaLM Table 4): among splits of spans longer than 2, % left "
    "splits [i,j] -> [i,j-1]+(j), % right splits [i,j] -> (i)+[i+1,j]; gold nodes with more than two "
    "children count as neither (reported as n-ary)."
)


def eval_command(
    predicted: Optional[Path] = typer.Argument(
        None, help="Predicted trees, one bracketed tree per line (as `induce parse` writes). Leaves may cover "
        "all gold tokens (punctuation is then projected away) or only the words kept by the convention."
    ),
    gold: Optional[Path] = typer.Option(
        None, "--gold", help="Gold treebank file (one tree per line or multi-line .mrg), or a folder whose *.mrg "
        "files are read in name order (e.g. the NLTK sample). "
        "Default: the --split of a run's own corpus, else of the default prepared corpus (see --data)."
    ),
    baseline: Optional[str] = typer.Option(
        None, "--baseline", help="Evaluate a baseline instead: right, left, balanced, or random "
        "(uniformly random split point at each span, seeded by --seed)."
    ),
    seed: int = typer.Option(0, "--seed", help="Seed of --baseline random; with --untrained, init k (1..N) is drawn "
                             "with torch seed SEED + k."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", help="Parse the gold sentences with this trained run and evaluate its trees. "
        f"Without a predicted file, --baseline or --checkpoint: {LATEST_RUN_HELP}."
    ),
    untrained: Optional[str] = typer.Option(
        None, "--untrained", metavar="MODEL", help="Parse the gold sentences with --inits freshly initialised, untrained "
        "MODELs (configs/MODEL.yaml: the papers' sizes; change them with --set) and report mean ± std over the inits "
        "(PaLM Table 4's first row). Vocabulary: that of the prepared corpus when the gold trees come from one "
        "(--corpus or the default corpus), else every word of the gold sentences; never a run folder's."
    ),
    inits: Optional[int] = typer.Option(
        None, "--inits", min=1, help="With --untrained: how many untrained models (default 5; PaLM Table 4: 25)."
    ),
    sets: list[str] = typer.Option(
        [], "--set", metavar="KEY=VALUE", help="With --untrained: a model config override as `induce train` takes it, "
        "e.g. --set model.hidden_size=1020 (repeatable; model.* keys only)."
    ),
    lm: bool = typer.Option(False, "--lm", help="With a checkpoint: report the language-model perplexity of --split."),
    decoder: Optional[str] = typer.Option(None, "--decoder", help="Tree decoder for distance models: peel or unbiased."),
    batch_size: int = typer.Option(64, "--batch-size", help="Sentences per forward pass when parsing with a checkpoint."),
    device: str = typer.Option("auto", "--device", help="With a checkpoint: " + DEVICE_HELP),
    data: Optional[Path] = typer.Option(None, "--data", help="Data root for the default corpus (else $INDUCE_DATA, corpora/, NLTK); "
                                        "with a run: evaluate on this data instead of the run's own corpus."),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help="A prepared corpus folder (induce preprocess output); "
                                          "default: a run's own corpus, else the default corpus."),
    split: str = typer.Option("valid", "--split", help="Split of the prepared corpus: valid (dev) or test."),
    wsj10: bool = typer.Option(False, "--wsj10", help="Only sentences of <= 10 words after punctuation removal."),
    wsj40: bool = typer.Option(False, "--wsj40", help="Only sentences of <= 40 words after punctuation removal."),
    max_length: Optional[int] = typer.Option(None, "--max-length", help="Only sentences of <= N words after removal "
                                             "(with --wsj10 or --wsj40: the smaller limit)."),
    keep_punct: bool = typer.Option(False, "--keep-punct", help="Do not remove punctuation (traces are still removed)."),
    count_root: bool = typer.Option(False, "--count-root", help="Count the whole-sentence span."),
    multiset: bool = typer.Option(False, "--multiset", help="Count spans as a multiset (unary chains count repeatedly)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object instead of a table."),
    per_sentence: Optional[Path] = typer.Option(None, "--per-sentence", help="Write a CSV with one row per sentence."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP),
) -> None:
    """Unlabeled bracketing F1 (sentence and corpus level), per-label recall and branching statistics.

    A trained run (--checkpoint, or the latest one) is evaluated on the corpus it was trained on unless
    --gold, --corpus or --data names other data (a reproduction's subset corpus stands for the corpus it
    was cut from); the output says which. Baselines, predicted files and --untrained use the default corpus.

    Examples: `induce eval pred.txt --gold 22.mrg`, `induce eval --baseline right --wsj40`,
    `induce eval --checkpoint runs/RUN --wsj10`, `induce eval --untrained palm --inits 25 --wsj40`.
    """
    from induce.cli.messages import error_text
    from induce.evaluation import EvalConvention, baseline_predictions
    from induce.files import check_not_input, check_output_file
    from induce.scoring import gold_files, load_gold, parse_gold, score

    console = Console(stderr=True)
    steps = ProgressSteps(console, progress)
    try:
        check_output_file(per_sentence, "--per-sentence")
        if wsj10 and wsj40:
            raise InduceError("--wsj10 and --wsj40 together: choose one (run the command twice for both figures)")
        named_limits = [(n, flag) for n, flag in ((10 if wsj10 else None, "--wsj10"), (40 if wsj40 else None, "--wsj40"),
                                                  (max_length, f"--max-length {max_length}")) if n is not None]
        limits = [n for n, _ in named_limits]
        if max_length is not None and max_length < 1:
            raise InduceError(f"--max-length {max_length}: give a number of words >= 1")
        convention = EvalConvention(
            keep_punct=keep_punct, count_root=count_root, multiset=multiset, max_length=min(limits) if limits else None
        )
        length_option = min(named_limits)[1] if named_limits else "--max-length"
        if sum(x is not None for x in (predicted, baseline, checkpoint, untrained)) > 1:
            raise InduceError("give only one of: a predicted file, --baseline, --checkpoint, --untrained")
        if untrained is None and (sets or inits is not None):
            raise InduceError(f"{f'--set {sets[0]}' if sets else '--inits'}: applies to --untrained only")
        if untrained is not None:
            summary = _untrained_summary(untrained, sets, inits or 5, seed, lm, per_sentence, gold, corpus, data,
                                         split, convention, batch_size, decoder, device, console, steps)
            steps.stop()
            if as_json:
                typer.echo(json.dumps(summary, sort_keys=True))
            else:
                _print_untrained(summary, Console())
            return
        run_dir = None
        if predicted is None and baseline is None:
            run_dir = pick_run(checkpoint, console, need_parser=not lm)
        if gold is None and corpus is None:
            corpus = _default_eval_corpus(run_dir, data, console)
        check_not_input(per_sentence, {"the predicted trees": predicted,
                                       "--gold": gold_files(gold) if gold is not None and gold.exists() else gold,
                                       "the run's checkpoint": _run_files(run_dir)}, "--per-sentence")
        if lm:
            if run_dir is None:
                raise InduceError("--lm needs a trained run (--checkpoint)")
            if gold is not None:
                raise InduceError("--lm reads the LM text of a prepared corpus: use --corpus or the run's corpus, "
                                  "not --gold")
            from induce.inference import lm_perplexity

            ppl = lm_perplexity(run_dir, corpus, split, device=device)
            if as_json:
                typer.echo(json.dumps({"perplexity": ppl, "split": split, "corpus": str(corpus), "run": str(run_dir)}))
            else:
                typer.echo(f"perplexity on {split} of {corpus}: {ppl:.2f}")
            return
        preparing = steps.bar("preparing gold trees") if gold is None or not gold.is_dir() else None
        gold_set = load_gold(gold, corpus, split, convention, reading=steps.bar("reading gold trees"),
                             preparing=preparing)

        locations = None
        if predicted is not None:
            from induce.treeio import read_trees

            located = read_trees(predicted, one_per_line=True, progress=steps.bar("reading predicted trees"))
            pred_trees = [item.tree for item in located]
            locations = [(item.path, item.line) for item in located]
            source = str(predicted)
        elif baseline is not None:
            pred_trees = baseline_predictions(gold_set.sentences, baseline, convention, seed=seed)
            source = f"baseline {baseline}" + (f" (seed {seed})" if baseline == "random" else "")
        else:
            pred_trees = parse_gold(run_dir, gold_set.sentences, convention, batch_size=batch_size, decoder=decoder,
                                    device=device, progress=steps.bar("parsing"))
            source = f"run {run_dir}"
        summary, result = score(pred_trees, gold_set, convention, source, locations=locations,
                                length_option=length_option, progress=steps.bar("scoring"))
        if per_sentence is not None:
            _write_per_sentence(per_sentence, result)
    except (InduceError, ValueError, OSError) as err:  # ValueError: e.g. an unknown baseline name
        console.print(f"[red]error:[/] {error_text(err)}", highlight=False, soft_wrap=True)
        raise typer.Exit(2)
    finally:
        steps.stop()

    if as_json:
        typer.echo(json.dumps(summary, sort_keys=True))
    else:
        _print_table(summary, Console())


def _untrained_summary(model, sets, inits, seed, lm, per_sentence, gold, corpus, data, split, convention,
                       batch_size, decoder, device, console, steps) -> dict:
    """``--untrained MODEL``: :func:`induce.evaluation.untrained.evaluate_untrained` on the gold sentences
    (--gold, --corpus, else the default corpus: never a run's), with the gold vocabulary or the corpus's."""
    if lm or per_sentence is not None:
        raise InduceError(f"--untrained: {'--lm' if lm else '--per-sentence'} needs a trained run (--checkpoint)")
    from induce.evaluation.untrained import evaluate_untrained, untrained_config, untrained_vocabulary
    from induce.scoring import load_gold

    run_config = untrained_config(model, sets)  # config errors before the gold is read
    if gold is None and corpus is None:
        corpus = _default_eval_corpus(None, data, console)
    preparing = steps.bar("preparing gold trees") if gold is None or not gold.is_dir() else None
    gold_set = load_gold(gold, corpus, split, convention, reading=steps.bar("reading gold trees"), preparing=preparing)
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
        from induce.scoring import eval_corpus_of_run

        chosen = eval_corpus_of_run(run_dir)
        console.print(f"evaluating on {chosen.description}", highlight=False, soft_wrap=True)
        return chosen.path
    from induce.data.locate import default_corpus

    return default_corpus(data, console=console)


def _run_files(run_dir: Optional[Path]) -> list:
    from induce.runs import run_files

    return run_files(run_dir) if run_dir is not None else []


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
            " / ".join(_fmt(summary[f"{prefix}{kind}_split_pct"]) for kind in ("left", "right", "other_binary", "nary")),
        )
    console.print(table)
    console.print(f"convention: {summary['convention']['description']}")


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


def _write_per_sentence(path: Path, result) -> None:
    from induce.treeio import atomic_write_text
    import io

    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(["index", "length", "f1", "precision", "recall", "n_pred_spans", "n_gold_spans", "n_matched"])
    for s in result.sentences:
        writer.writerow([s.index, s.length, f"{100 * s.f1:.4f}", f"{100 * s.precision:.4f}", f"{100 * s.recall:.4f}",
                         s.n_pred, s.n_gold, s.n_match])
    atomic_write_text(path, buffer.getvalue())


def register(app: typer.Typer) -> None:
    app.command("eval", help=None, epilog=CONVENTION_HELP)(eval_command)

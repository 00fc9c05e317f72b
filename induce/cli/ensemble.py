"""`induce ensemble`: one tree per sentence from several sources of trees (runs or prediction files), the
binary tree with the most summed span votes (:mod:`induce.evaluation.ensemble`), scored on the gold
against its members' mean and best (:func:`induce.assess.hub.ensemble_report`)."""
from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from induce.cli import DEVICE_HELP, PROGRESS_HELP, TREEBANK_HELP, WORD_MATCH_HELP, default_gold_hint, progress_steps
from induce.errors import InduceError


def ensemble_command(
    sources: list[Path] = typer.Argument(..., help="Two or more run folders (parsed) or prediction files (any "
                                         "format induce eval reads, see its --pred-format)."),
    output: Path = typer.Option(..., "-o", "--output", help="Where to write the ensemble's trees, one per gold "
                                "sentence, over the words the convention keeps."),
    weights: str | None = typer.Option(None, "--weights", help="One weight per source, comma-separated "
                                          "(e.g. 1,1,2): finite numbers >= 0, not all 0; default: all 1."),
    gold: Path | None = typer.Option(None, "--gold", help="Gold treebank file; default: the --split of the "
                                        "default prepared corpus (see --data)."),
    data: Path | None = typer.Option(None, "--data", help="Data root for the default corpus."),
    corpus: Path | None = typer.Option(None, "--corpus", help="A prepared corpus folder."),
    split: str = typer.Option("valid", "--split", help="Split of the prepared corpus: valid (dev) or test."),
    convention: str = typer.Option("induce", "--convention", help="Whose tokens and sentences (and the figure "
                                   "reported): a convention name of induce eval."),
    pred_format: str = typer.Option("auto", "--pred-format", help="Format of the prediction files."),
    word_match: str = typer.Option("normalized", "--word-match", metavar="normalized|exact|position",
                                   help=WORD_MATCH_HELP),
    treebank: str | None = typer.Option(None, "--treebank", metavar="ptb|ktb|ktb-2020", help=TREEBANK_HELP),
    batch_size: int = typer.Option(64, "--batch-size", help="Sentences per forward pass when parsing with a run."),
    device: str = typer.Option("auto", "--device", help="With a run: " + DEVICE_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the report as one JSON object."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP),
) -> None:
    """Ensemble trees: per sentence, the binary tree maximising the summed (weighted) votes of its spans
    over the sources (CKY; ties to the leftmost split), after the description of Shayegh et al. (2024).

    Sentences the convention leaves out (one word) get their only tree. Example:
    `induce ensemble results/runs/palm-seed1 results/runs/palm-seed2 results/runs/palm-seed3 -o palm.ens.txt`.
    """
    from induce.assess.hub import ensemble_report
    from induce.assess.sources import check_distinct_sources, default_eval_corpus, sources_of
    from induce.evaluation.ensemble import parse_weights
    from induce.evaluation.gold import load_gold
    from induce.evaluation.words import check_mode
    from induce.files import check_not_input, check_output_file
    from induce.trees.brackets import write_trees
    from induce.trees.nodes import to_nltk

    if len(sources) < 2:
        raise InduceError(f"induce ensemble takes two sources or more, {len(sources)} given")
    check_distinct_sources(sources, "induce ensemble", "give each source once (to count a source more, give it a "
                           "larger weight with --weights)")
    parsed = None if weights is None else parse_weights(weights, len(sources))
    check_mode(word_match)
    check_output_file(output, "--output")
    check_not_input(output, {"a source": [s for s in sources if s.is_file()]}, "--output")
    console = Console(stderr=True)
    default_gold = gold is None and corpus is None
    if default_gold:
        corpus = default_eval_corpus(None, data, console)
    with progress_steps(console, progress) as steps:
        gold_set = load_gold(gold, corpus, split, reading=steps.bar("reading gold trees"), treebank=treebank)
        golds = gold_set.sentences
        with default_gold_hint(default_gold, lambda: gold_set.label):
            members = sources_of(sources, golds, pred_format, batch_size, None, device, steps)
        trees, report = ensemble_report(members, golds, parsed, convention, word_match)
    for note in (note for member in members for note in member.notes):
        console.print(note, highlight=False, soft_wrap=True)
    from induce.evaluation.conventions import get_convention

    chosen = get_convention(convention)
    lines = []
    for tree, full in zip(trees, golds):
        words = full.kept_words(chosen) or full.words or ["-NONE-"]
        lines.append(to_nltk(tree, words) if tree is not None else _flat(words))
    write_trees(output, lines)
    report.update({"output": str(output), "gold": gold_set.label})
    if as_json:
        typer.echo(json.dumps(report, sort_keys=True))
    else:
        from induce.cli.hub_tables import print_ensemble

        print_ensemble(report, Console())
        console.print(f"wrote {len(lines):,} trees to {output}", highlight=False)


def _flat(words):
    import nltk

    return nltk.Tree("S", list(words))


def register(app: typer.Typer) -> None:
    app.command("ensemble")(ensemble_command)

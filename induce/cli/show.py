"""`induce show tree` / `induce show attention`: one sentence through a trained model (logic:
:mod:`induce.inference.show`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from induce.cli import CHECKPOINT_HELP, DEVICE_HELP
from induce.errors import InduceError

show_app = typer.Typer(help="Show one sentence's induced tree, span attention, syntactic distances or span "
                            "marginals.",
                       no_args_is_help=True)

SENTENCE_HELP = "The sentence (tokenised with NLTK's Treebank tokenizer unless --pretokenized). Or use --index."
PRETOKENIZED_HELP = "Tokens are separated by spaces."
CORPUS_HELP = "Prepared corpus for --index (default: the run's own corpus)."
DATA_HELP = "Data root for --index: its default corpus instead of the run's."
SPLIT_HELP = "Split for --index: valid or test."


def _sentence(sentence, index, pretokenized, corpus, data, split, console, run):
    """``(tokens, gold tree or None)`` from the argument or from sentence ``index`` of a corpus split: of
    ``corpus``, else of the default corpus of ``data``, else of the corpus ``run`` was trained on."""
    from induce.inference.predict import tokenize

    if sentence is None and index is None:
        raise InduceError("no sentence: give one (e.g. \"The dog barked .\") or --index N (sentence N of the "
                          "prepared corpus)")
    if sentence is not None and index is not None:
        raise InduceError("give a sentence or --index N (a sentence of the prepared corpus), not both")
    if sentence is not None:
        tokens = tokenize(sentence, pretokenized)
        if not tokens:
            raise InduceError("the sentence is empty")
        return tokens, None
    from induce.inference.show import dev_sentence

    if corpus is None and data is None:
        from induce.inference.scoring import eval_corpus_of_run

        chosen = eval_corpus_of_run(run)
        console.print(f"sentence {index} of {split} of {chosen.description}", highlight=False, soft_wrap=True)
        corpus = chosen.path
    elif corpus is None:
        from induce.data.locate import default_corpus

        corpus = default_corpus(data, console=console)
    return dev_sentence(corpus, index, split)


@show_app.command("tree")
def tree_command(
    sentence: Optional[str] = typer.Argument(None, help=SENTENCE_HELP),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", "-c", help=CHECKPOINT_HELP),
    index: Optional[int] = typer.Option(None, "--index", "-i", help="Sentence N (0-based) of --split of the prepared "
                                        "corpus, shown with its gold tree and F1."),
    pretokenized: bool = typer.Option(False, "--pretokenized", help=PRETOKENIZED_HELP),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help=CORPUS_HELP),
    data: Optional[Path] = typer.Option(None, "--data", help=DATA_HELP),
    split: str = typer.Option("valid", "--split", help=SPLIT_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Draw the tree a trained model induces for one sentence (and the gold tree with --index)."""
    from induce.inference.predict import format_tree
    from induce.inference.runs import pick_run
    from induce.inference.show import sentence_structure, tree_f1

    console = Console(stderr=True)
    out = Console()
    run = pick_run(checkpoint, console, need_parser=True)
    tokens, gold = _sentence(sentence, index, pretokenized, corpus, data, split, console, run)
    structure = sentence_structure(run, tokens, device=device)
    # soft_wrap: a wide tree runs past the terminal's edge instead of being wrapped into garbage
    out.rule(f"[bold]{structure.model_name}[/]", align="left")
    out.print(Text(format_tree(structure.tree, "pretty")), soft_wrap=True)
    if gold is not None:
        from induce.inference.show import display_gold

        out.rule("[bold]gold[/] (punctuation and POS tags removed)", align="left")
        out.print(Text(format_tree(display_gold(gold), "pretty")), soft_wrap=True)
        f1 = tree_f1(structure.tree, gold)
        out.print("sentence F1: " + (f"{f1:.1f}" if f1 is not None else "- (fewer than 2 words)"), highlight=False)
    out.print(format_tree(structure.tree), highlight=False, soft_wrap=True)


@show_app.command("attention")
def attention_command(
    sentence: Optional[str] = typer.Argument(None, help=SENTENCE_HELP),
    checkpoint: Optional[Path] = typer.Option(None, "--checkpoint", "-c", help=CHECKPOINT_HELP),
    out: Path = typer.Option(Path("attention.png"), "--out", "-o", help="Image to write: a PNG (or .svg, .pdf, ...: "
                             "the suffix decides)."),
    index: Optional[int] = typer.Option(None, "--index", "-i", help="Sentence N (0-based) of --split of the prepared "
                                                                    "corpus."),
    pretokenized: bool = typer.Option(False, "--pretokenized", help=PRETOKENIZED_HELP),
    corpus: Optional[Path] = typer.Option(None, "--corpus", help=CORPUS_HELP),
    data: Optional[Path] = typer.Option(None, "--data", help=DATA_HELP),
    split: str = typer.Option("valid", "--split", help=SPLIT_HELP),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
) -> None:
    """Plot what the parser reads for one sentence: PaLM's span attention (heat map), the ON-LSTM / PRPN syntactic distances (bars) or a neural PCFG's span marginals (heat map, the decoded tree's spans marked), as a PNG; the numbers are printed too."""  # noqa: E501
    from induce.files import check_not_input
    from induce.inference.runs import pick_run, run_files
    from induce.inference.show import sentence_structure, structure_table
    from induce.report.figures import check_image_path, plot_structure

    console = Console(stderr=True)
    run = pick_run(checkpoint, console, need_parser=True)
    check_not_input(out, {"a file of the run": run_files(run)}, "--out")
    check_image_path(out, "--out")
    tokens, _ = _sentence(sentence, index, pretokenized, corpus, data, split, console, run)
    structure = sentence_structure(run, tokens, device=device)
    path = plot_structure(structure, out)
    columns, rows = structure_table(structure)
    table = Table(title=f"{structure.model_name}: {structure.kind.show_title}")
    for number, column in enumerate(columns):
        table.add_column(column, justify="left" if number == 0 or number < len(columns) - 1 else "right")
    for row in rows:
        table.add_row(*row)
    Console().print(table)
    console.print(f"figure: {path}", highlight=False)


def register(app: typer.Typer) -> None:
    """Add ``induce show tree|attention``."""
    app.add_typer(show_app, name="show")

"""`induce parse`: parse raw sentences (one per line) with a trained model (logic: :mod:`induce.inference`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from induce.cli import CHECKPOINT_HELP, DEVICE_HELP, PROGRESS_HELP, RUNS_DIR_HELP, THREADS_HELP, progress_steps
from induce.errors import InduceError
from induce.trees.kinds import decoder_help


def parse_command(
    text: Path = typer.Argument(..., help="Text file, one sentence per line ('-' reads stdin)."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", "-c", help=CHECKPOINT_HELP
    ),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the trees here instead of stdout."),
    pretokenized: bool = typer.Option(
        False, "--pretokenized", help="Tokens are separated by spaces: the leaves are exactly these tokens "
        "(default: NLTK's Treebank tokenizer splits the text; each leaf is the text it covers, as typed)."
    ),
    style: str = typer.Option(
        "ptb", "--format", help="ptb: one bracketed tree per line, in which ( and ) are written -LRB- and -RRB- "
        "(a bracketed line cannot hold them); pretty: ASCII drawings with the tokens as they are; json: one "
        "JSON array per line, the tree as nested arrays of the tokens exactly as they are."
    ),
    decoder: Optional[str] = typer.Option(
        None, "--decoder", help=decoder_help()
    ),
    keep_punct: bool = typer.Option(
        False, "--keep-punct", help="Show punctuation to the model (default: left out as in training, attached "
                                    "afterwards)."
    ),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentences per batch."),
    max_length: int = typer.Option(300, "--max-length", min=2, help="Longer sentences are parsed in pieces of this "
                                                                    "many tokens."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help=THREADS_HELP),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
    progress: bool = typer.Option(True, "--progress/--no-progress", help=PROGRESS_HELP),
) -> None:
    """Parse sentences into unlabelled binary trees whose leaves are the tokens as typed.

    Each line is split into tokens (by spaces with --pretokenized, else by NLTK's Treebank
    tokenizer: "didn't" gives did n't, brackets and quotes stay as typed). The model sees them
    normalised as in training (punctuation left out, lower case, numbers -> N, unknown -> <unk>);
    punctuation is then attached to the highest constituent ending before it. An empty line
    gives the empty tree `(S )`.

    Examples: `induce parse corpus.txt`, `induce parse corpus.txt --checkpoint runs/RUN --format pretty`,
    `echo "The dog barked ." | induce parse - --pretokenized`.
    """
    from induce.config import use_threads
    from induce.files import check_not_input, check_output_file, write_output
    from induce.inference.loading import load_run
    from induce.inference.predict import parse_lines, read_text_lines
    from induce.inference.runs import pick_run, run_files

    use_threads(threads)
    console = Console(stderr=True)
    check_output_file(out, "--out")
    check_not_input(out, {"the input text": text}, "--out")
    if style not in ("ptb", "pretty", "json"):
        raise InduceError(f"--format {style!r}: use ptb, pretty or json")
    checkpoint = pick_run(checkpoint, console, runs_dir, need_parser=True)
    check_not_input(out, {"a file of the run": run_files(checkpoint)}, "--out")
    lines = read_text_lines(text)
    run = load_run(checkpoint, device)
    with progress_steps(console, progress) as steps:
        trees = parse_lines(run, lines, pretokenized=pretokenized, decoder=decoder, style=style,
                            batch_size=batch_size, max_length=max_length, keep_punct=keep_punct,
                            progress=steps.bar("parsing"))
    text_out = "".join(tree + "\n" for tree in trees)
    if out is not None:
        write_output(out, text_out)
    if out is not None:
        console.print(f"{len(trees)} trees -> {out}", highlight=False)
    else:
        typer.echo(text_out, nl=False)


def register(app: typer.Typer) -> None:
    """Add ``induce parse`` to the app."""
    app.command("parse")(parse_command)

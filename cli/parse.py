"""`induce parse`: parse raw sentences (one per line) with a trained model (logic: :mod:`induce.inference`)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from induce.errors import InduceError


def parse_command(
    text: Path = typer.Argument(..., help="Text file, one sentence per line ('-' reads stdin)."),
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", "-c", help="Run folder or checkpoint (default: the most recent finished run under runs/)."
    ),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the trees here instead of stdout."),
    pretokenized: bool = typer.Option(
        False, "--pretokenized", help="Tokens are separated by spaces (default: NLTK's Treebank tokenizer)."
    ),
    style: str = typer.Option("ptb", "--format", help="ptb: one bracketed tree per line; pretty: ASCII drawings."),
    decoder: Optional[str] = typer.Option(
        None, "--decoder", help="Distance models: peel (default, as in the papers) or unbiased. PaLM: span."
    ),
    keep_punct: bool = typer.Option(
        False, "--keep-punct", help="Show punctuation to the model (default: left out as in training, attached afterwards)."
    ),
    batch_size: int = typer.Option(64, "--batch-size", min=1, help="Sentences per batch."),
    max_length: int = typer.Option(300, "--max-length", min=2, help="Longer sentences are parsed in pieces of this many tokens."),
    device: str = typer.Option("cpu", "--device", help="cpu or cuda."),
    runs_dir: Path = typer.Option(Path("runs"), "--runs-dir", help="Where to look for the latest run."),
) -> None:
    """Parse sentences into unlabelled binary trees whose leaves are the original tokens.

    Each line is tokenised, normalised as in training (punctuation left out, lower case,
    numbers -> N, unknown -> <unk>) and parsed; punctuation is then attached to the highest
    constituent ending before it. An empty line gives the empty tree `(S )`.
    """
    from cli.messages import error_text
    from induce.files import check_output_file
    from induce.inference import latest_run, load_run, parse_lines, read_text_lines
    from induce.treeio import atomic_write_text

    console = Console(stderr=True)
    try:
        check_output_file(out, "--out")
        if style not in ("ptb", "pretty"):
            raise InduceError(f"--format {style!r}: use ptb or pretty")
        if checkpoint is None:
            checkpoint = latest_run(runs_dir)
            console.print(f"using the latest finished run: {checkpoint}", highlight=False)
        lines = read_text_lines(text)
        run = load_run(checkpoint, device)
        trees = parse_lines(run, lines, pretokenized=pretokenized, decoder=decoder, style=style,
                            batch_size=batch_size, max_length=max_length, device=device, keep_punct=keep_punct)
        text_out = "".join(tree + "\n" for tree in trees)
        if out is not None:
            atomic_write_text(out, text_out)
    except (InduceError, OSError) as err:  # OSError: unreadable checkpoint or input, unwritable output
        console.print(f"[bold red]error:[/] {error_text(err)}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2)
    if out is not None:
        console.print(f"{len(trees)} trees -> {out}", highlight=False)
    else:
        typer.echo(text_out, nl=False)


def register(app: typer.Typer) -> None:
    """Add ``induce parse`` to the app."""
    app.command("parse")(parse_command)

"""`induce generate`: sample text or beam-search a sentence from a trained model (a grammar samples sentences)."""
from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer
from rich.console import Console

from induce.cli import CHECKPOINT_HELP, DEVICE_HELP, RUNS_DIR_HELP


def generate_command(
    checkpoint: Optional[Path] = typer.Option(
        None, "--checkpoint", "-c", help=CHECKPOINT_HELP
    ),
    words: int = typer.Option(50, "--words", "-n", min=1, help="Tokens to generate (beam search: at most)."),
    temperature: float = typer.Option(1.0, "--temperature", "-t", help="Sampling temperature (> 0; lower = safer)."),
    beam: Optional[int] = typer.Option(None, "--beam", min=1, help="Beam search with this many hypotheses instead of "
                                                                   "sampling."),
    prompt: Optional[str] = typer.Option(None, "--prompt", help="Text to continue (normalised as in training)."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Sampling seed."),
    device: str = typer.Option("auto", "--device", help=DEVICE_HELP),
    runs_dir: Optional[Path] = typer.Option(None, "--runs-dir", help=RUNS_DIR_HELP),
) -> None:
    """Generate text: sampling with a temperature, or the most probable sentence with --beam K.

    <eos> tokens are printed as line breaks. A grammar (a neural PCFG) draws whole sentences top-down from
    its rules instead (the compound PCFG draws its z from the prior for each): --words then counts up to
    the last whole sentence; --beam and --prompt do not apply.
    """
    from induce.inference.language_model import generate
    from induce.inference.predict import tokenize
    from induce.inference.runs import pick_run

    checkpoint = pick_run(checkpoint, Console(stderr=True), runs_dir)
    tokens = generate(checkpoint, n_words=words, temperature=temperature, beam=beam,
                      prompt=tokenize(prompt) if prompt else None, seed=seed, device=device)
    lines, current = [], []
    for token in tokens:
        if token == "<eos>":
            lines.append(" ".join(current))
            current = []
        else:
            current.append(token)
    if current:
        lines.append(" ".join(current))
    typer.echo("\n".join(lines))


def register(app: typer.Typer) -> None:
    """Add ``induce generate`` to the app."""
    app.command("generate")(generate_command)
